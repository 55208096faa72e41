"""FedFish vs FedAvg at growing local training, with the same server optimizer (issue 12, item 3).

    python scripts/papers/fedfish/fedfish_local_epochs.py [--epochs 1,4,16] [--seeds 3] [--rounds 15] [--clients 10]

The FedFish paper (Dhawan et al., Sec. 5.1, Table 3) finds FedFish ahead of FedAvg as local epochs grow,
with Adam as the server optimizer of both.  Here both methods run with the same server rule, plain
averaging (``θ + Δ``) and a server Adam (Δ as its pseudo-gradient, lr 0.01), on digits (scikit-learn,
Dirichlet label split), same seeds, cohorts and local SGD for both; the table gives the mean ± std over
seeds of the final-round test accuracy (and of the best round's).  Writes ``reproductions/fedfish_local_epochs.{md,csv}``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0])
sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0] + "/scripts/papers")  # repro_common

from fedsciml.images import data as imdata  # noqa: E402
from fedsciml.images import methods as M  # noqa: E402
import repro_common  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", default="1,4,16", help="local epochs, comma-separated")
    ap.add_argument("--server-opts", default="avg,adam", help="server optimizers, comma-separated (avg, adam)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=0.5, help="Dirichlet label-split concentration")
    ap.add_argument("--model", default="cnn8k")
    ap.add_argument("--lr", type=float, default=0.05, help="local SGD learning rate")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=repro_common.OUT)
    ap.add_argument("--repro", default="fedfish_local_epochs", metavar="NAME", help="write reproductions/NAME.{md,csv}")
    a = ap.parse_args(argv)
    epochs = [int(e) for e in a.epochs.split(",")]
    opts = [o.strip() for o in a.server_opts.split(",")]
    bad = [o for o in opts if o not in ("avg", "adam")]
    if bad or any(e < 1 for e in epochs) or min(a.seeds, a.rounds, a.clients) < 1:
        ap.error(f"need --server-opts from avg, adam (got {bad}), epochs/seeds/rounds/clients ≥ 1")
    torch.set_num_threads(a.threads)
    d = imdata.load("digits")
    acc = {}  # (opt, epochs, method) -> [accuracy per seed]
    t0 = time.perf_counter()
    for s in range(a.seeds):
        fed = imdata.federate(d, a.clients, a.alpha, s)
        for opt in opts:
            for e in epochs:
                cfg = M.TrainConfig(epochs=e, lr=a.lr, server_opt=opt)
                res = M.run_rounds(fed, a.model, ["fedavg", "fedfish"], s, cfg, a.rounds)
                for meth, r in res.items():
                    acc.setdefault((opt, e, meth), []).append(r.accuracy)
                    acc.setdefault((opt, e, meth + " best"), []).append(r.best)
                print(f"seed {s} server {opt:4s} epochs {e:2d}  fedavg {res['fedavg'].accuracy:.4f}  "
                      f"fedfish {res['fedfish'].accuracy:.4f}  ({time.perf_counter() - t0:.0f} s)", flush=True)

    def ms(v):
        return statistics.mean(v), (statistics.stdev(v) if len(v) > 1 else 0.0)

    rows = []
    for opt in opts:
        for e in epochs:
            (fa, fa_s), (ff, ff_s) = ms(acc[opt, e, "fedavg"]), ms(acc[opt, e, "fedfish"])
            diff = [b - c for b, c in zip(acc[opt, e, "fedfish"], acc[opt, e, "fedavg"])]
            dm, ds = ms(diff)
            (ba, ba_s), (bf, bf_s) = ms(acc[opt, e, "fedavg best"]), ms(acc[opt, e, "fedfish best"])
            rows.append({"server_opt": opt, "local_epochs": e, "fedavg": f"{fa:.4f} ± {fa_s:.4f}",
                         "fedfish": f"{ff:.4f} ± {ff_s:.4f}", "fedfish - fedavg": f"{dm:+.4f} ± {ds:.4f}",
                         "fedavg best round": f"{ba:.4f} ± {ba_s:.4f}", "fedfish best round": f"{bf:.4f} ± {bf_s:.4f}"})
    note = (f"digits, {a.clients} clients, Dirichlet α={a.alpha}, model {a.model}, {a.rounds} rounds, full "
            f"participation, local SGD lr {a.lr} momentum 0.9 batch 64; final-round test accuracy (and the best over the "
            f"rounds), mean ± std over {a.seeds} seeds (seed s: split, init, cohorts and local batches shared by both methods); server "
            f"avg: θ + Δ, adam: Adam(lr 0.01, β (0.9, 0.99), ε 1e-3) on −Δ; Δ = sample-weighted mean delta "
            f"(FedAvg) or Fisher-weighted delta (FedFish). torch threads {a.threads}; wall time "
            f"{time.perf_counter() - t0:.0f} s on a shared {os.cpu_count()}-core CPU (1-min load average "
            f"{os.getloadavg()[0]:.1f} at the end).")
    cols = ["server_opt", "local_epochs", "fedavg", "fedfish", "fedfish - fedavg", "fedavg best round",
            "fedfish best round"]
    for p in repro_common.write(a.repro, cols, rows, note, out=a.out):
        print("wrote", p)


if __name__ == "__main__":
    main()
