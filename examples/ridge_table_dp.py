"""Your own regression table, split by a column into clients, fitted by DP ridge fusion with CV.

The table here is scikit-learn's bundled diabetes data (442 patients, 10
features, no download), written to a CSV file as a user's export would be and
read back; the column ``site`` (age band) says which client holds each row.
Each site sends only its sufficient statistics ``(AᵀA, Aᵀb)`` — with
Gaussian noise for (ε, δ)-differential privacy — once; σ is chosen by
leave-one-client-out cross-validation.

With 355 training rows the DP noise needed for small ε dominates the
statistics (the noise does not shrink with n, the signal grows with it): the
printed curve shows how fast utility falls, and that ε = ∞ reproduces the
pooled, centralized scikit-learn model exactly.

    python examples/ridge_table_dp.py [--csv my_table.csv --target y --client-column site]

A table that cannot be used (missing file or column, a value that is not a
finite number, too few rows or clients, ...) gets one line naming the file,
row and column (exit 2), never a traceback.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import tempfile

import numpy as np

from fedsciml.ridge import DPConfig, one_shot


def write_demo_table(path: str) -> None:
    from sklearn.datasets import load_diabetes

    d = load_diabetes()
    age = d.data[:, 0]
    site = np.digitize(age, np.quantile(age, [0.2, 0.4, 0.6, 0.8]))  # 5 sites by age band
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["site", *d.feature_names, "y"])
        for s, row, y in zip(site, d.data, d.target):
            w.writerow([f"site{s}", *row, y])


class TableError(ValueError):
    """The table (or an option) cannot be used as given; the message names the file, row and column."""


def read_table(path: str, target: str, client_column: str):
    """``(X, y, groups, features)`` from a CSV file with a header row; every value checked."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            rows = list(reader)
    except FileNotFoundError:
        raise TableError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise TableError(f"{path} is not a UTF-8 text table (byte {e.start}: {e.reason})") from None
    except (OSError, csv.Error) as e:
        raise TableError(f"{path}: cannot read it as CSV: {e}") from None
    if not header or not any(h.strip() for h in header):
        raise TableError(f"{path} is empty (a header row with the column names is expected)")
    header = [h.strip() for h in header]
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise TableError(f"{path}: column name(s) {dup} appear more than once in the header")
    for col in (target, client_column):
        if col not in header:
            raise TableError(f"column {col!r} not in {path}; columns: {header}")
    if target == client_column:
        raise TableError(f"--target and --client-column are the same column {target!r}")
    features = [c for c in header if c not in (target, client_column)]
    if not features:
        raise TableError(f"{path} has no feature columns besides {target!r} and {client_column!r}")
    rows = [r for r in rows if any(v.strip() for v in r)]  # blank lines carry no data
    if not rows:
        raise TableError(f"{path} has a header but no data rows")
    at = {c: header.index(c) for c in header}
    X = np.empty((len(rows), len(features)))
    y = np.empty(len(rows))
    groups = []
    for i, r in enumerate(rows):
        line = i + 2  # the header is line 1
        if len(r) != len(header):
            raise TableError(f"{path} line {line}: {len(r)} fields, the header has {len(header)}")
        for j, c in enumerate([*features, target]):
            v = r[at[c]].strip()
            try:
                x = float(v)
            except ValueError:
                x = None
            if x is None or not math.isfinite(x):
                raise TableError(f"{path} line {line}, column {c!r}: {v!r} is not a finite number")
            if j < len(features):
                X[i, j] = x
            else:
                y[i] = x
        g = r[at[client_column]].strip()
        if not g:
            raise TableError(f"{path} line {line}: the client column {client_column!r} is empty")
        groups.append(g)
    return X, y, np.array(groups), features


def parse_epsilons(text: str) -> list[float]:
    out = []
    for part in text.split(","):
        try:
            eps = float(part)
        except ValueError:
            eps = math.nan
        if not eps > 0:  # also NaN
            raise TableError(f"--epsilons: {part.strip()!r} is not a privacy level; give numbers > 0 or inf, "
                             f"comma-separated (e.g. inf,10,2,1)")
        out.append(eps)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", default=None, help="your table (default: the diabetes demo table)")
    ap.add_argument("--target", default="y")
    ap.add_argument("--client-column", default="site")
    ap.add_argument("--epsilons", default="inf,10,2,1", help="privacy levels ε to compare")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--seeds", type=int, default=5, help="noise draws averaged per ε")
    ap.add_argument("--quick", action="store_true", help="fewer seeds (CI)")
    args = ap.parse_args(argv)
    epsilons = parse_epsilons(args.epsilons)
    if not 0 < args.delta < 1:
        raise TableError(f"--delta must be in (0, 1), got {args.delta}")
    if args.seeds < 1:
        raise TableError(f"--seeds must be ≥ 1, got {args.seeds}")

    path = args.csv
    if path is None:
        path = os.path.join(tempfile.mkdtemp(), "diabetes_by_site.csv")
        write_demo_table(path)
    X, y, groups, features = read_table(path, args.target, args.client_column)

    # DP needs bounded rows: scale by *public* constants (not data-dependent statistics,
    # which would themselves leak), so that ‖a‖₂ ≤ 1 and |b| ≤ 1 (clipping enforces it).
    x_scale = float(np.abs(X).max()) * math.sqrt(X.shape[1])
    if not (0 < x_scale < math.inf):
        raise TableError(f"{path}: the features are all 0 or too large to scale (max |x| = {np.abs(X).max():g})")
    y_scale = float(np.abs(y).max())
    if not 0 < y_scale < 1e150:  # squared errors in original units must stay finite
        raise TableError(f"{path}: the target {args.target!r} is all 0 or too large (max |y| = {y_scale:g})")
    X = X / x_scale
    X = np.hstack([X, np.full((X.shape[0], 1), 1.0 / math.sqrt(X.shape[1] + 1))])  # intercept column
    y = y / y_scale
    rng = np.random.default_rng(0)
    test = rng.random(len(y)) < 0.2
    sites = sorted(set(groups[~test]))
    if not test.any() or len(sites) < 2:
        raise TableError(f"{path}: {len(y)} rows in {len(set(groups))} client(s) by {args.client_column!r} leave "
                         f"{int(test.sum())} test rows and {len(sites)} training client(s); need at least 1 test row "
                         f"and 2 clients (leave-one-client-out CV), i.e. a larger table")
    print(f"{path}: {len(y)} rows, {len(features)} features, clients by {args.client_column!r}: "
          + ", ".join(f"{s} ({int(((groups == s) & ~test).sum())})" for s in sites))

    sigmas = tuple(float(s) for s in np.logspace(-4, 1, 11))
    print(f"{'epsilon':>8s} {'chosen sigma':>13s} {'test MSE':>12s}  (targets in original units², mean ± std)")
    results = {}
    seeds = 2 if args.quick else args.seeds
    for eps in epsilons:
        mses, chosen = [], []
        for seed in range(1 if math.isinf(eps) else seeds):
            w, sigma = _fit(X[~test], y[~test], groups[~test], sigmas, None if math.isinf(eps) else eps,
                            args.delta, seed)
            mses.append(float(np.mean((X[test] @ w - y[test]) ** 2)) * y_scale ** 2)
            chosen.append(sigma)
        results[eps] = (float(np.mean(mses)), float(np.std(mses)), float(np.median(chosen)))
        print(f"{eps:8g} {results[eps][2]:13.2e} {results[eps][0]:12.1f} ± {results[eps][1]:.1f}")

    from sklearn.linear_model import Ridge

    if math.inf in results:
        sigma_ref = results[math.inf][2]
    else:  # ε = ∞ was not asked for: σ from the same cross-validation without noise
        sigma_ref = _fit(X[~test], y[~test], groups[~test], sigmas, None, args.delta, 0)[1]
    ref = Ridge(alpha=sigma_ref, fit_intercept=False).fit(X[~test], y[~test])
    mse_ref = float(np.mean((ref.predict(X[test]) - y[test]) ** 2)) * y_scale ** 2
    print(f"pooled scikit-learn Ridge at the non-private CV σ = {sigma_ref:.2e} (no privacy, data centralized): "
          f"test MSE {mse_ref:.1f}")
    return results, mse_ref


def _fit(X, y, groups, sigmas, epsilon, delta, seed):
    """One-shot DP ridge (σ by leave-one-client-out CV) on the rows of each client: ``(w, σ chosen)``.

    Through :func:`fedsciml.ridge.one_shot` (the DP runtime; the scikit-learn estimator
    ``FederatedRidge`` fits the exact, non-private model)."""
    import torch

    data = [(torch.as_tensor(X[groups == g]), torch.as_tensor(y[groups == g])) for g in np.unique(groups)]
    dp = None if epsilon is None else DPConfig(epsilon, delta)
    w, info = one_shot(data, 0.0, dp=dp, cv_sigmas=sigmas, seed=seed)
    return w.numpy(), info["sigma"]


def cli(argv=None) -> int:
    try:
        main(argv)
    except ValueError as e:  # TableError, and the library's own one-line errors (e.g. a singular Gram matrix)
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli())
