"""σ under central/local DP on a real data set: the noise-aware default against σ as given, beside scikit-learn's
non-private ``Ridge`` (issue 40 item 4).

Standardized diabetes (scikit-learn's bundled set; standardized with its own constants, standing in for public
ones), a fixed 75/25 split, 4 sites of contiguous rows, clip bounds C_a = 4, C_b = 3, δ = 1e-5; the test MSE averaged
over ``--seeds`` noise draws (Var(y) = 1 on the standardized target: predicting the mean scores ≈ 1).  Rows: central
DP (one noise on the sum) and local DP (each site its own) through ``fedsciml.ridge.one_shot``, and the scikit-learn
estimator ``FederatedRidge(epsilon=, bounds_X=(-3, 3), bounds_y=(-3, 3))`` (local DP, its own clip bounds).

    python scripts/bench/ridge_dp_sigma.py --seeds 20 --out reproductions/ridge_dp_sigma.md
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

EPS = (0.5, 1.0, 2.0, 8.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--sigma", type=float, default=0.1, help="σ as given (the issue's case)")
    ap.add_argument("--out", default=None, help="write the Markdown table here (else stdout only)")
    a = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # the per-run DP warnings; the table says what they would
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import train_test_split

    from fedsciml.core.dp import DPConfig
    from fedsciml.ridge import FederatedRidge, one_shot

    X, y = load_diabetes(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    y = (y - y.mean()) / y.std()
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0)
    parts = np.array_split(np.arange(len(ytr)), 4)
    data = [(torch.tensor(Xtr[p]), torch.tensor(ytr[p])) for p in parts]
    sites = np.zeros(len(ytr), dtype=int)
    for k, p in enumerate(parts):
        sites[p] = k

    def mse(w, b=0.0):
        return float(np.mean((Xte @ np.asarray(w) + b - yte) ** 2))

    ref = mse(Ridge(1.0).fit(Xtr, ytr).coef_, Ridge(1.0).fit(Xtr, ytr).intercept_)
    rows = []
    for label, central in (("central DP, 4 sites", True), ("local DP, 4 sites", False)):
        for rule, aware in ((f"σ = {a.sigma:g} as given", False), ("default: σ + √(2m)·s_total", None)):
            rows.append((label, rule, [np.mean([mse(one_shot(data, a.sigma, dp=DPConfig(
                epsilon=e, c_a=4.0, c_b=3.0, central=central, noise_aware_sigma=aware), seed=s)[0].numpy())
                for s in range(a.seeds)]) for e in EPS]))
    est = [np.mean([mse(*(lambda m: (m.coef_, m.intercept_))(FederatedRidge(
        1.0, epsilon=e, bounds_X=(-3, 3), bounds_y=(-3, 3), random_state=s).fit(Xtr, ytr, sites=sites)))
        for s in range(a.seeds)]) for e in EPS]
    rows.append(("FederatedRidge(epsilon=…), 4 sites", "default (alpha 1 + noise norm)", est))
    head = "| setting | σ | " + " | ".join(f"ε = {e:g}" for e in EPS) + " |"
    lines = [f"Test MSE, mean of {a.seeds} noise draws; scikit-learn's non-private `Ridge(1.0)`: {ref:.3f}; "
             f"predicting the mean ≈ {float(np.mean((yte - ytr.mean()) ** 2)):.3f}.", "", head,
             "|" + "---|" * (2 + len(EPS))]
    lines += [f"| {lab} | {rule} | " + " | ".join(f"{v:.3f}" for v in vals) + " |" for lab, rule, vals in rows]
    text = "\n".join(lines)
    print(text)
    if a.out:
        from fedsciml.runtime.files import write_atomic

        doc = __doc__.split("\n\n")[1]
        page = (f"# σ under DP on diabetes (issue 40 item 4)\n\n`python scripts/bench/ridge_dp_sigma.py --seeds {a.seeds} "
                f"--out {a.out}`\n\n{doc}\n\n{text}\n")
        write_atomic(a.out, lambda f: f.write(page))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
