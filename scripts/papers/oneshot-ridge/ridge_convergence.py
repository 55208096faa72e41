"""Experiment 4 (Fig. 3) of the one-shot ridge paper: test MSE against communication rounds.

FedAvg and FedProx over ``--rounds`` (300) rounds against the one-shot model (round 1) and the oracle;
d = 100, K = 20, γ = 0.5, σ = 0.01, 5 seeds.  The table lists the MSE at selected rounds.
Usage: ``python scripts/papers/oneshot-ridge/ridge_convergence.py [--rounds 300] [--seeds 5]``.
"""
import torch

import ridge_common as rc
from fedsciml.problems import get_problem
from fedsciml.ridge import one_shot, pooled_ridge
from fedsciml.ridge.baselines import fedavg


def main():
    p = rc.parser(__doc__)
    p.add_argument("--rounds", type=int, default=300)
    args = p.parse_args()
    dev = rc.setup(args)
    curves = {"fedavg": [], "fedprox": []}
    per_seed = []
    for seed in range(args.seeds):
        prob = get_problem("ridge-linear")
        data = prob.client_data(20, seed, dev)
        ev = lambda w: prob.evaluate(w)["mse"]  # noqa: E731
        w1, _ = one_shot(data, 0.01)
        oracle = ev(pooled_ridge(torch.cat([a for a, _ in data]), torch.cat([b for _, b in data]), 0.01))
        _, ha, _ = fedavg(data, rounds=args.rounds, sigma=0.01, seed=seed, evaluate=ev, every=1)
        _, hp, _ = fedavg(data, rounds=args.rounds, mu=0.01, sigma=0.01, seed=seed, evaluate=ev, every=1)
        curves["fedavg"].append([h["mse"] for h in ha])
        curves["fedprox"].append([h["mse"] for h in hp])
        rows = []
        for r in sorted({1, 10, 50, 100, 200, args.rounds}):
            if r <= args.rounds:
                rows.append({"round": r, "one_shot": ev(w1), "fedavg": ha[r - 1]["mse"], "fedprox": hp[r - 1]["mse"],
                             "oracle": oracle})
        per_seed.append(rows)
        print(f"seed {seed}: {rows[-1]}", flush=True)
    table = rc.aggregate(per_seed, ["round"], ["one_shot", "fedavg", "fedprox", "oracle"])
    rc.write_table(args, "convergence", [("round", "round"), ("One-Shot", "one_shot"), ("FedAvg", "fedavg"),
                                         ("FedProx", "fedprox"), ("Oracle", "oracle")], table, vars(args), digits=6)
    plt = rc.plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    rounds = list(range(1, args.rounds + 1))
    for key, c in (("fedavg", "C0"), ("fedprox", "C3")):
        m = torch.tensor(curves[key]).mean(0)
        ax.semilogy(rounds, m, color=c, label=key)
    ax.axhline(table[0]["one_shot_mean"], color="C2", label="One-Shot (round 1)")
    ax.axhline(table[0]["oracle_mean"], color="gray", ls="--", label="oracle")
    ax.set_xlabel("round")
    ax.set_ylabel("test MSE")
    ax.legend()
    rc.save_fig(fig, args, "convergence")


if __name__ == "__main__":
    main()
