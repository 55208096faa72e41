"""Table VI of the one-shot ridge paper: scalability with the number of clients K (n_k = 200, d = 100).

One-shot fusion against FedAvg (``--rounds`` rounds, η = 0.01, E = 5) at K ∈ {10, 20, 50, 100, 200, 500}: test MSE
and time.  One-shot time = the slowest client's statistics (clients work in parallel) + the server's fusion;
the sequential simulation time is in the CSV.  5 seeds.
Usage: ``python scripts/papers/oneshot-ridge/ridge_table6_scalability.py [--rounds 100] [--seeds 5]``.
"""
import ridge_common as rc
from fedsciml.problems import get_problem
from fedsciml.ridge import one_shot
from fedsciml.ridge.baselines import fedavg

PAPER = {10: (0.0090, 0.0090, 0.001, 0.065), 20: (0.0094, 0.0094, 0.001, 0.070), 50: (0.0097, 0.0098, 0.002, 0.080),
         100: (0.0102, 0.0132, 0.010, 0.085), 200: (0.0100, 0.0130, 0.020, 0.075), 500: (0.0099, 0.0123, 0.040, 0.045)}


def main():
    p = rc.parser(__doc__)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--clients", default="10,20,50,100,200,500")
    args = p.parse_args()
    dev = rc.setup(args)
    per_seed = []
    for seed in range(args.seeds):
        rows = []
        for K in [int(k) for k in args.clients.split(",")]:
            prob = get_problem("ridge-linear", n_samples=200)
            data = prob.client_data(K, seed, dev)
            w1, info = one_shot(data, 0.01)
            wa, _, ainfo = fedavg(data, rounds=args.rounds, sigma=0.01, seed=seed)
            rows.append({"K": K, "one_shot_mse": prob.evaluate(w1)["mse"], "fedavg_mse": prob.evaluate(wa)["mse"],
                         "one_shot_s": info["time_s"], "one_shot_sim_s": info["time_total_s"],
                         "fedavg_s": ainfo["time_s"]})
            print(f"seed {seed}: {rows[-1]}", flush=True)
        per_seed.append(rows)
    table = rc.aggregate(per_seed, ["K"], ["one_shot_mse", "fedavg_mse", "one_shot_s", "one_shot_sim_s", "fedavg_s"])
    for r in table:
        r["paper"] = " / ".join(str(v) for v in PAPER.get(r["K"], ()))
    rc.write_table(args, "table6_scalability",
                   [("K", "K"), ("One-Shot MSE", "one_shot_mse"), (f"FedAvg-{args.rounds} MSE", "fedavg_mse"),
                    ("One-Shot s (clients in sequence + server, the loop's solver time)", "one_shot_s"), (f"FedAvg-{args.rounds} s", "fedavg_s"),
                    ("paper (MSE one-shot / FedAvg, s one-shot / FedAvg)", "paper")], table, vars(args), digits=5)
    plt = rc.plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    Ks = [r["K"] for r in table]
    a1.errorbar(Ks, [r["one_shot_mse_mean"] for r in table], [r["one_shot_mse_std"] for r in table], color="C2",
                marker="o", label="One-Shot")
    a1.errorbar(Ks, [r["fedavg_mse_mean"] for r in table], [r["fedavg_mse_std"] for r in table], color="C0",
                marker="s", label="FedAvg")
    a1.set_xscale("log")
    a1.set_xlabel("K")
    a1.set_ylabel("test MSE")
    a1.legend()
    a2.loglog(Ks, [r["one_shot_s_mean"] for r in table], "o-", color="C2", label="One-Shot")
    a2.loglog(Ks, [r["fedavg_s_mean"] for r in table], "s-", color="C0", label="FedAvg")
    a2.set_xlabel("K")
    a2.set_ylabel("seconds")
    a2.legend()
    rc.save_fig(fig, args, "table6_scalability")


if __name__ == "__main__":
    main()
