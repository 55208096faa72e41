"""Differentially private ridge across sites on Flower: one CSV per site, one node per site, one-shot fusion.

A real table — scikit-learn's bundled diabetes data (442 patients, 10
features, no download) — is split by age band into ``--sites`` sites, and
each site's rows are written to their own CSV file (a fifth of the rows, drawn
at random, is the server's held-out test table).  Each site is one Flower
node whose node config is the path of its table (``data=site0.csv``); the
rows never leave it.  The server runs fedsciml's ``one-shot`` method on
problem ``table``: every site sends its statistics ``(AᵀA, Aᵀb)`` once, with
Gaussian noise for (ε, δ) local differential privacy, and σ is chosen by
leave-one-client-out cross-validation, scored by the server from each site's
own noised statistics (post-processing: the printed ε is the whole release of
each site, CV included).  At ε = ∞ (no noise) the fused model is the
pooled scikit-learn ``Ridge`` at the chosen σ; the script prints the
relative difference.

    python examples/flower_ridge_sites.py                       # Flower's simulation engine
    python examples/flower_ridge_sites.py --engine deployment   # a SuperLink + one SuperNode per site, 127.0.0.1
    python examples/flower_ridge_sites.py --engine local        # the same runs in this process

DP needs bounded rows, so the script scales by public constants, not by
statistics of the data: the diabetes features are documented as scaled to unit
column norm (so |x| ≤ 1), and the target (a disease-progression score) is
below 400; rows ``a = [x, 1]/√(d+1)`` and ``b = y/400`` then satisfy
‖a‖ ≤ 1 and |b| ≤ 1, which the clipping (``dp_clip_a = dp_clip_b = 1``) keeps.
Needs ``pip install ".[flower]"`` for the Flower engines.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import tempfile
import time

import numpy as np

from fedsciml.options import parse_grid

Y_BOUND = 400.0  # public bound of the diabetes target (disease progression one year after baseline)
SIGMAS = parse_grid("1e-4:10:11")  # the CV grid: 11 log-spaced σ values (a list, as solve --cv-sigmas parses it)


def write_site_tables(workdir: str, sites: int, seed: int = 0) -> tuple[list[str], str, list[str]]:
    """One CSV per site (age band) and the server's test CSV; returns ``(site paths, test path, columns)``."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    X, y = d.data, d.target
    dim = X.shape[1]
    A = np.hstack([X, np.ones((len(y), 1))]) / math.sqrt(dim + 1)  # ‖a‖ ≤ 1 (public scaling, see above)
    b = y / Y_BOUND
    cols = [*d.feature_names, "intercept", "y"]
    test = np.random.default_rng(seed).random(len(y)) < 0.2
    age = X[:, 0]
    band = np.digitize(age, np.quantile(age, np.linspace(0, 1, sites + 1)[1:-1]))

    def write(path, rows):
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(cols)
            w.writerows([[repr(float(v)) for v in (*A[i], b[i])] for i in rows])  # repr: exact float64 round trip

    paths = []
    for s in range(sites):
        paths.append(os.path.join(workdir, f"site{s}.csv"))
        write(paths[-1], np.flatnonzero((band == s) & ~test))
    test_path = os.path.join(workdir, "test.csv")
    write(test_path, np.flatnonzero(test))
    return paths, test_path, cols


def pooled_ridge(paths, sigma: float):
    """scikit-learn's Ridge on the pooled rows of every site (the centralized reference)."""
    from sklearn.linear_model import Ridge

    from fedsciml.problems.table import read_table

    parts = [read_table(p) for p in paths]
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    return Ridge(alpha=sigma, fit_intercept=False, solver="cholesky").fit(X, y).coef_


def run(engine: str, paths, test_path, epsilons, delta: float, seed: int = 0, progress: bool = False):
    """One one-shot DP fusion per ε on ``engine``; returns the Results (and θ) in order."""
    import fedsciml as fs

    opts = [dict(dp_epsilon=eps, dp_delta=delta, dp_clip_a=1.0, dp_clip_b=1.0, cv_sigmas=SIGMAS) for eps in epsilons]
    K = len(paths)
    if engine == "deployment":  # the nodes read their own tables; the server knows only the test table
        from fedsciml.engines.flower.deploy import LocalDeployment

        out = []
        with LocalDeployment(K, node_configs=[{"data": p} for p in paths], threads=1) as d:
            for i, o in enumerate(opts):
                res, theta = d.run("table", "one-shot", seed=seed, problem_options={"test_table": test_path},
                                   name=f"eps{i}", **o)
                res.theta = theta
                out.append(res)
        return out
    problem = fs.get_problem("table", tables=",".join(paths), test_table=test_path)
    if engine == "flower":  # every ε in one Flower simulation (Ray starts once)
        from fedsciml.engines.flower.simulation import solve_many

        return solve_many([dict(problem=problem, method="one-shot", clients=K, seed=seed, progress=progress, **o)
                           for o in opts], clients=K)
    return [fs.solve(problem, "one-shot", clients=K, seed=seed, progress=progress, **o) for o in opts]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="flower", choices=["flower", "deployment", "local"],
                    help="flower: Flower's simulation engine (default); deployment: a SuperLink and one SuperNode "
                         "per site as processes on 127.0.0.1; local: this process")
    ap.add_argument("--sites", type=int, default=3, help="number of sites (age bands), ≥ 2 (default 3)")
    ap.add_argument("--epsilons", default="inf,10,2", help="privacy levels ε, comma-separated (default inf,10,2)")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0, help="DP noise seed")
    ap.add_argument("--dir", default=None, help="where to write the site tables (default: a temporary directory)")
    args = ap.parse_args(argv)
    if not 2 <= args.sites <= 20:
        raise ValueError(f"--sites must be in 2..20 (leave-one-client-out CV needs 2), got {args.sites}")
    try:
        epsilons = [float(e) for e in args.epsilons.split(",")]
    except ValueError:
        epsilons = [math.nan]
    if not all(e > 0 for e in epsilons):
        raise ValueError(f"--epsilons: give numbers > 0 or inf, comma-separated, got {args.epsilons!r}")
    if not 0 < args.delta < 1:
        raise ValueError(f"--delta must be in (0, 1), got {args.delta}")
    tmp = None
    workdir = args.dir
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="fedsciml-sites-")
        workdir = tmp.name
    os.makedirs(workdir, exist_ok=True)
    try:
        paths, test_path, cols = write_site_tables(workdir, args.sites, args.seed)
        from fedsciml.problems.table import read_table

        sizes = [read_table(p)[0].shape[0] for p in paths]
        print(f"diabetes: {sum(sizes)} training rows in {args.sites} site tables ({', '.join(map(str, sizes))} rows; "
              f"{len(cols) - 1} columns incl. intercept) + {read_table(test_path)[0].shape[0]} test rows; "
              f"engine {args.engine}")
        t0 = time.perf_counter()
        results = run(args.engine, paths, test_path, epsilons, args.delta, args.seed)
        wall = time.perf_counter() - t0
        print(f"{'epsilon':>8s} {'CV sigma':>10s} {'test MSE':>10s} {'floats sent':>12s}  vs pooled sklearn Ridge")
        out = []
        for eps, res in zip(epsilons, results):
            sigma = float(res.extra["sigma_used"])
            mse = res.final["mse"] * Y_BOUND ** 2  # in the target's units²
            line = f"{eps:8g} {sigma:10.2e} {mse:10.1f} {res.history[-1]['floats_sent']:12d}"
            rel = None
            if math.isinf(eps):
                ref = pooled_ridge(paths, sigma)
                theta = res.theta.detach().cpu().numpy()
                rel = float(np.abs(theta - ref).max() / np.abs(ref).max())
                line += f"  max|Δw|/max|w| = {rel:.1e}"
            print(line)
            out.append({"epsilon": eps, "sigma": sigma, "test_mse": mse, "rel_to_sklearn": rel, "theta": res.theta})
        print(f"({len(epsilons)} fusions, {wall:.1f} s on engine {args.engine}, start-up included)")
        return out
    finally:
        if tmp is not None:
            tmp.cleanup()


def cli(argv=None) -> int:
    try:
        main(argv)
    except ValueError as e:  # bad options, unusable tables: one line
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
