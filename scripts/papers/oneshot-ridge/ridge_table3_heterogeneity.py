"""Table III of the one-shot ridge paper: test MSE against the heterogeneity γ.

One-shot fusion, FedAvg and FedProx (η = 0.01, E = 5, μ = 0.01, ``--rounds`` rounds) and the centralized
oracle at γ ∈ {0, 0.2, 0.4, 0.6, 0.8, 1}; d = 100, K = 20, σ = 0.01, 5 seeds.
Usage: ``python scripts/papers/oneshot-ridge/ridge_table3_heterogeneity.py [--rounds 200] [--seeds 5]``.
"""
import torch

import ridge_common as rc
from fedsciml.problems import get_problem
from fedsciml.ridge import one_shot, pooled_ridge
from fedsciml.ridge.baselines import fedavg

PAPER = {0.0: (0.01003, 0.01013, 0.01014, 0.01003), 0.2: (0.01003, 0.01014, 0.01015, 0.01003),
         0.4: (0.01004, 0.01014, 0.01013, 0.01004), 0.6: (0.01006, 0.01013, 0.01014, 0.01006),
         0.8: (0.01008, 0.01014, 0.01014, 0.01008), 1.0: (0.01012, 0.01016, 0.01037, 0.01012)}


def main():
    p = rc.parser(__doc__)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--gammas", default="0,0.2,0.4,0.6,0.8,1")
    args = p.parse_args()
    dev = rc.setup(args)
    gammas = [float(g) for g in args.gammas.split(",")]
    per_seed = []
    for seed in range(args.seeds):
        rows = []
        for g in gammas:
            prob = get_problem("ridge-linear", heterogeneity=g)
            data = prob.client_data(20, seed, dev)
            ev = lambda w: prob.evaluate(w)["mse"]  # noqa: E731
            w1, _ = one_shot(data, 0.01)
            wc = pooled_ridge(torch.cat([a for a, _ in data]), torch.cat([b for _, b in data]), 0.01)
            wa, _, _ = fedavg(data, rounds=args.rounds, sigma=0.01, seed=seed)
            wp, _, _ = fedavg(data, rounds=args.rounds, mu=0.01, sigma=0.01, seed=seed)
            rows.append({"gamma": g, "one_shot": ev(w1), "fedavg": ev(wa), "fedprox": ev(wp), "oracle": ev(wc),
                         "one_shot_rel_err": float((w1 - wc).norm() / wc.norm())})
            print(f"seed {seed} γ={g}: " + ", ".join(f"{k}={v:.6g}" for k, v in rows[-1].items()), flush=True)
        per_seed.append(rows)
    table = rc.aggregate(per_seed, ["gamma"], ["one_shot", "fedavg", "fedprox", "oracle", "one_shot_rel_err"])
    for r in table:
        r["paper"] = " / ".join(f"{v:.5f}" for v in PAPER.get(r["gamma"], ()))
    rc.write_table(args, "table3_heterogeneity",
                   [("γ", "gamma"), ("One-Shot", "one_shot"), (f"FedAvg-{args.rounds}", "fedavg"),
                    (f"FedProx-{args.rounds}", "fedprox"), ("Oracle", "oracle"), ("‖w−w_c‖/‖w_c‖", "one_shot_rel_err"),
                    ("paper (one-shot / FedAvg / FedProx / oracle)", "paper")], table, vars(args), digits=6)
    plt = rc.plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for key, lab, c in (("one_shot", "One-Shot", "C2"), ("fedavg", "FedAvg", "C0"), ("fedprox", "FedProx", "C3")):
        ax.errorbar([r["gamma"] for r in table], [r[key + "_mean"] for r in table], [r[key + "_std"] for r in table],
                    label=lab, color=c, marker="o", capsize=3)
    ax.plot([r["gamma"] for r in table], [r["oracle_mean"] for r in table], "k--", label="oracle")
    ax.set_xlabel("heterogeneity γ")
    ax.set_ylabel("test MSE")
    ax.legend()
    ax.set_title(f"Table III ({args.seeds} seeds)")
    rc.save_fig(fig, args, "table3_heterogeneity")


if __name__ == "__main__":
    main()
