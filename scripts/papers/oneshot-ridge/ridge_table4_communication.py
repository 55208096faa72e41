"""Table IV of the one-shot ridge paper: communication per client, one-shot vs FedAvg-200, against d.

Floats are counted from the messages actually sent (one-shot: d(d+1)/2 + d + 1 up, d down; FedAvg: d + 1 up
and d down per round).  Also measures the wall time of one-shot and of FedAvg-200 and the test MSE.
d ∈ {50, 100, 200, 400}, K = 20, γ = 0.5, σ = 0.01, 5 seeds.
Usage: ``python scripts/papers/oneshot-ridge/ridge_table4_communication.py [--rounds 200] [--seeds 5]``.
"""
import ridge_common as rc
from fedsciml.problems import get_problem
from fedsciml.ridge import one_shot
from fedsciml.ridge.baselines import fedavg

PAPER = {50: (0.02, 1.60), 100: (0.08, 3.20), 200: (0.32, 6.40), 400: (1.28, 12.80)}


def main():
    p = rc.parser(__doc__)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--dims", default="50,100,200,400")
    args = p.parse_args()
    dev = rc.setup(args)
    K = 20
    per_seed = []
    for seed in range(args.seeds):
        rows = []
        for d in [int(x) for x in args.dims.split(",")]:
            prob = get_problem("ridge-linear", dim=d)
            data = prob.client_data(K, seed, dev)
            with rc.Timer() as t1:
                w1, info = one_shot(data, 0.01)
            wa, _, ainfo = fedavg(data, rounds=args.rounds, sigma=0.01, seed=seed)
            one_mb, avg_mb = rc.mb(info["floats_sent"] / K), rc.mb(ainfo["floats_sent"] / K)
            rows.append({"d": d, "one_shot_mb": one_mb, "fedavg_mb": avg_mb, "ratio": avg_mb / one_mb,
                         "savings_pct": 100 * (1 - one_mb / avg_mb), "one_shot_s": t1.s, "fedavg_s": ainfo["time_s"],
                         "one_shot_mse": prob.evaluate(w1)["mse"], "fedavg_mse": prob.evaluate(wa)["mse"]})
            print(f"seed {seed}: {rows[-1]}", flush=True)
        per_seed.append(rows)
    table = rc.aggregate(per_seed, ["d"], ["one_shot_mb", "fedavg_mb", "ratio", "savings_pct", "one_shot_s",
                                           "fedavg_s", "one_shot_mse", "fedavg_mse"])
    for r in table:
        r["paper_mb"] = " / ".join(str(v) for v in PAPER.get(r["d"], ()))
    rc.write_table(args, "table4_communication",
                   [("d", "d"), ("One-Shot MB/client", "one_shot_mb"), (f"FedAvg-{args.rounds} MB/client", "fedavg_mb"),
                    ("ratio", "ratio"), ("savings %", "savings_pct"), ("paper MB (one-shot / FedAvg)", "paper_mb"),
                    ("One-Shot s", "one_shot_s"), (f"FedAvg-{args.rounds} s", "fedavg_s"),
                    ("One-Shot MSE", "one_shot_mse"), ("FedAvg MSE", "fedavg_mse")], table, vars(args), digits=4)
    plt = rc.plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    ds = [r["d"] for r in table]
    a1.semilogy(ds, [r["one_shot_mb_mean"] for r in table], "o-", color="C2", label="One-Shot")
    a1.semilogy(ds, [r["fedavg_mb_mean"] for r in table], "s-", color="C0", label=f"FedAvg-{args.rounds}")
    a1.set_xlabel("d")
    a1.set_ylabel("MB per client (up + down)")
    a1.legend()
    a2.semilogy(ds, [r["one_shot_s_mean"] for r in table], "o-", color="C2", label="One-Shot")
    a2.semilogy(ds, [r["fedavg_s_mean"] for r in table], "s-", color="C0", label=f"FedAvg-{args.rounds}")
    a2.set_xlabel("d")
    a2.set_ylabel("seconds")
    a2.legend()
    rc.save_fig(fig, args, "table4_communication")


if __name__ == "__main__":
    main()
