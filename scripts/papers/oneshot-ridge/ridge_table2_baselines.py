"""Table II of the one-shot ridge paper: one-shot fusion vs FedAvg-100/200/500, FedProx-200, centralized.

Defaults are the paper's: d = 100, K = 20, n_k = 500 (20 % test), γ = 0.5, σ = 0.01, η = 0.01, E = 5,
μ = 0.01, 5 seeds.  Usage: ``python scripts/papers/oneshot-ridge/ridge_table2_baselines.py [--seeds 5] [--out results/ridge]``.
"""
import torch

import ridge_common as rc
from fedsciml.problems import get_problem
from fedsciml.ridge import one_shot, pooled_ridge
from fedsciml.ridge.baselines import fedavg

PAPER = {"one-shot": 0.0100, "fedavg-100": 0.0103, "fedavg-200": 0.0102, "fedavg-500": 0.0102,
         "fedprox-200": 0.0102, "centralized": 0.0100}


def main():
    p = rc.parser(__doc__)
    p.add_argument("--dim", type=int, default=100)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--heterogeneity", type=float, default=0.5)
    p.add_argument("--sigma", type=float, default=0.01)
    p.add_argument("--max-rounds", type=int, default=500)
    p.add_argument("--repro", default=None, help="also write reproductions/REPRO.{csv,md} (command and commit on top)")
    args = p.parse_args()
    dev = rc.setup(args)
    per_seed = []
    for seed in range(args.seeds):
        prob = get_problem("ridge-linear", dim=args.dim, heterogeneity=args.heterogeneity, sigma=args.sigma)
        data = prob.client_data(args.clients, seed, dev)
        ev = lambda w: prob.evaluate(w)["mse"]  # noqa: E731
        rows = []
        with rc.Timer() as t:
            w, info = one_shot(data, args.sigma)
        rows.append({"method": "one-shot", "mse": ev(w), "rounds": 1, "mb": rc.mb(info["floats_sent"]), "time_s": t.s})
        with rc.Timer() as t:
            wc = pooled_ridge(torch.cat([a for a, _ in data]), torch.cat([b for _, b in data]), args.sigma)
        R = args.max_rounds
        marks = [r for r in (100, 200, 500) if r <= R]
        _, hist, _ = fedavg(data, rounds=max(marks), sigma=args.sigma, seed=seed, evaluate=ev, every=100)
        for h in hist:
            if h["round"] in marks:
                rows.append({"method": f"fedavg-{h['round']}", "mse": h["mse"], "rounds": h["round"],
                             "mb": rc.mb(h["floats_sent"]), "time_s": h["time_s"]})
        rp = min(200, R)
        _, hist, _ = fedavg(data, rounds=rp, mu=0.01, sigma=args.sigma, seed=seed, evaluate=ev, every=rp)
        rows.append({"method": f"fedprox-{rp}", "mse": hist[-1]["mse"], "rounds": rp, "mb": rc.mb(hist[-1]["floats_sent"]),
                     "time_s": hist[-1]["time_s"]})
        rows.append({"method": "centralized", "mse": ev(wc), "rounds": 0, "mb": 0.0, "time_s": t.s})
        oracle = ev(wc)
        for r in rows:
            r["gap_pct"] = 100.0 * (r["mse"] / oracle - 1.0)
        per_seed.append(rows)
        print(f"seed {seed}: " + ", ".join(f"{r['method']}={r['mse']:.5f}" for r in rows), flush=True)
    table = rc.aggregate(per_seed, ["method", "rounds"], ["mse", "gap_pct", "mb", "time_s"])
    for r in table:
        r["paper_mse"] = PAPER.get(r["method"], "")
    rc.write_table(args, "table2_baselines",
                   [("method", "method"), ("MSE", "mse"), ("paper MSE", "paper_mse"),
                    ("gap vs oracle (%)", "gap_pct"), ("rounds", "rounds"),
                    ("comm. (MB, all clients, up+down)", "mb"), ("time (s)", "time_s")], table, vars(args), digits=6)
    if args.repro:
        import os
        import sys

        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repro_common
        import repro_common

        rows = [{"method": r["method"], "paper MSE": r["paper_mse"], "ours MSE": f"{r['mse_mean']:.5f} ± {r['mse_std']:.5f}",
                 "paper gap vs one-shot (%)": (f"{100 * (r['paper_mse'] / PAPER['one-shot'] - 1):.1f}"
                                               if r["paper_mse"] != "" else ""),
                 "ours gap vs centralized (%)": f"{r['gap_pct_mean']:.3f} ± {r['gap_pct_std']:.3f}"} for r in table]
        print(repro_common.write(args.repro, list(rows[0]), rows,
                                 f"Test MSE, mean ± std over {args.seeds} seeds; d = {args.dim}, K = {args.clients}, "
                                 f"γ = {args.heterogeneity}, σ = {args.sigma}; FedAvg/FedProx: η = 0.01, E = 5, "
                                 "minibatch 32."))
    plt = rc.plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([r["method"] for r in table], [r["mse_mean"] for r in table], yerr=[r["mse_std"] for r in table], color="C2")
    lo = min(r["mse_mean"] for r in table)
    ax.set_ylim(lo * 0.97, max(r["mse_mean"] for r in table) * 1.02)
    ax.set_ylabel("test MSE")
    ax.set_title(f"Table II: d={args.dim}, K={args.clients}, γ={args.heterogeneity} ({args.seeds} seeds)")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    rc.save_fig(fig, args, "table2_baselines")


if __name__ == "__main__":
    main()
