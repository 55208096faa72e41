"""Ridge across sites on Flower, with an intercept: one table per site, one node per site, one-shot fusion, and
central differential privacy through Flower's SecAgg+.

A real table — scikit-learn's bundled diabetes data (442 patients, 10
features, no download) — is split by age band into ``--sites`` sites, and
each site's rows are written to their own CSV file (a fifth of the rows, drawn
at random, is the server's held-out test table).  Each site is one Flower
node whose node config is the path of its table (``data=site0.csv``); the
rows never leave it.  The server runs fedsciml's ``one-shot`` method on
problem ``table`` with ``fit_intercept``: the intercept is not penalized.

* ε = ∞: each site sends its count, means and centered scatter once; σ is chosen by leave-one-client-out
  cross-validation scored by the server from the sites' own messages; the fused model (coefficients and
  intercept) is scikit-learn's ``Ridge(fit_intercept=True)`` on the pooled rows at that σ — the script prints
  the relative difference.
* finite ε: central DP through SecAgg+ (``dp_central``).  Each site clips its rows, computes its statistics
  and adds its *share* of the Gaussian noise (``N(0, s²/K)``); Flower's SecAgg+ masks every site's vector, so
  the server sees only the sum, which carries the calibrated noise ``s`` — √K times less than local DP, and
  no party sees an un-noised statistic.  σ is a public choice (``--dp-sigma``, plus the noise-aware term):
  cross-validation would need each site's statistics, which the secure sum hides.  Every site's noise share
  must arrive (``dp_min_survivors`` = K); a run with a site missing fails and releases nothing.

    python examples/flower_ridge_sites.py                       # Flower's simulation engine
    python examples/flower_ridge_sites.py --engine deployment   # a SuperLink + one SuperNode per site, 127.0.0.1
    python examples/flower_ridge_sites.py --engine local        # the same runs in this process (no secure sum:
                                                                #   central DP then says it trusts the server)

DP needs bounded rows, so the script scales by public constants, not by
statistics of the data: the diabetes features are documented as scaled to unit
column norm (so |x| ≤ 1), and the target (a disease-progression score) is
below 400; features ``x/√(d+1)`` and target ``y/400`` then keep ``‖(x/√(d+1), κ)‖ ≤ 1`` with the intercept's
constant column ``κ = 1/√(d+1)`` that DP appends, and ``|b| ≤ 1`` (``dp_clip_a = dp_clip_b = 1``).  The public
bound on a site's rows that fixes SecAgg+'s fixed-point range is the whole table's 442.
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
MAX_ROWS = 442   # public bound on a site's rows (the whole published table): SecAgg+'s fixed-point range
SIGMAS = parse_grid("1e-4:10:11")  # the CV grid: 11 log-spaced σ values (a list, as solve --cv-sigmas parses it)


def write_site_tables(workdir: str, sites: int, seed: int = 0) -> tuple[list[str], str, list[str]]:
    """One CSV per site (age band) and the server's test CSV; returns ``(site paths, test path, columns)``."""
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    X, y = d.data, d.target
    dim = X.shape[1]
    A = X / math.sqrt(dim + 1)  # with DP's constant column κ = 1/√(d+1): ‖(a, κ)‖ ≤ 1 (public scaling, see above)
    b = y / Y_BOUND
    cols = [*d.feature_names, "y"]
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
    """scikit-learn's ``Ridge(fit_intercept=True)`` on the pooled rows of every site (the centralized reference):
    ``(coef, intercept)``."""
    from sklearn.linear_model import Ridge

    from fedsciml.problems.table import read_table

    parts = [read_table(p) for p in paths]
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    ref = Ridge(alpha=sigma, fit_intercept=True, solver="cholesky").fit(X, y)
    return ref.coef_, float(ref.intercept_)


def options(epsilons, delta: float, dp_sigma: float) -> list[dict]:
    """The one-shot options of each run: ε = ∞ exact with CV, finite ε central DP through SecAgg+."""
    out = []
    for eps in epsilons:
        if math.isinf(eps):
            out.append(dict(fit_intercept=True, cv_sigmas=SIGMAS))
        else:
            out.append(dict(fit_intercept=True, sigma=dp_sigma, dp_epsilon=eps, dp_delta=delta, dp_clip_a=1.0,
                            dp_clip_b=1.0, dp_central=True, dp_noise_aware=True, dp_max_rows=MAX_ROWS))
    return out


def run(engine: str, paths, test_path, epsilons, delta: float, seed: int = 0, progress: bool = False,
        dp_sigma: float = 1.0):
    """One one-shot fusion per ε on ``engine``; returns the Results (and θ) in order."""
    import fedsciml as fs

    opts = options(epsilons, delta, dp_sigma)
    K = len(paths)
    if engine == "deployment":  # the nodes read their own tables; the server knows only the test table
        from fedsciml.engines.flower import secagg
        from fedsciml.engines.flower.deploy import APP_DIR, LocalDeployment

        out = []
        with LocalDeployment(K, node_configs=[{"data": p} for p in paths], threads=1) as d:
            for i, o in enumerate(opts):
                app = secagg.APP_DIR if o.get("dp_central") else APP_DIR  # central DP: the SecAgg+ App
                proc, path = d.submit("table", "one-shot", seed=seed, problem_options={"test_table": test_path},
                                      name=f"eps{i}", app=app, **o)
                out.append(d.wait(proc, [path])[0])
        return out
    problem = fs.get_problem("table", tables=paths, test_table=test_path)
    if engine == "flower":  # the exact run on fedsciml's App, the central-DP runs on the SecAgg+ App
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
    ap.add_argument("--dp-sigma", type=float, default=1.0,
                    help="σ of the DP runs, a public choice (CV needs each site's statistics; default 1)")
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
              f"{len(cols) - 1} features, intercept fitted unpenalized) + {read_table(test_path)[0].shape[0]} "
              f"test rows; "
              f"engine {args.engine}")
        t0 = time.perf_counter()
        results = run(args.engine, paths, test_path, epsilons, args.delta, args.seed, dp_sigma=args.dp_sigma)
        wall = time.perf_counter() - t0
        print(f"{'epsilon':>8s} {'sigma':>10s} {'intercept':>10s} {'test MSE':>10s} {'floats sent':>12s}  "
              f"secure sum / vs pooled sklearn Ridge")
        out = []
        for eps, res in zip(epsilons, results):
            sigma = float(res.extra["sigma_used"])
            b0 = float(res.extra["intercept"]) * Y_BOUND  # in the target's units
            mse = res.final["mse"] * Y_BOUND ** 2  # in the target's units²
            line = f"{eps:8g} {sigma:10.2e} {b0:10.1f} {mse:10.1f} {res.history[-1]['floats_sent']:12d}"
            rel = None
            if math.isinf(eps):
                coef, intercept = pooled_ridge(paths, sigma)
                theta = np.append(res.theta.detach().cpu().numpy(), res.extra["intercept"])
                ref = np.append(coef, intercept)
                rel = float(np.abs(theta - ref).max() / np.abs(ref).max())
                line += f"  exact; max|Δ(w, b)|/max|(w, b)| = {rel:.1e}"
            else:
                line += (f"  {res.extra.get('secure_sum', 'none (in process: trusts the server)')}"
                         + (f", model within {res.extra['secagg_model_bound']:.1e} of the float sum's"
                            if "secagg_model_bound" in res.extra else ""))
            print(line)
            out.append({"epsilon": eps, "sigma": sigma, "intercept": b0, "test_mse": mse, "rel_to_sklearn": rel,
                        "theta": res.theta, "secure_sum": res.extra.get("secure_sum")})
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
