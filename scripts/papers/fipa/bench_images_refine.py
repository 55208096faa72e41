"""Warm-up then refinement (FIPA Tables 1–2 protocol) on digits.

    python scripts/papers/fipa/bench_images_refine.py [--alphas 0.05,0.1] [--seeds 2] [--clients 20] [--json FILE]

A FedAvg warm-up checkpoint is shared; from it every method runs the same refinement
rounds (same client cohorts).  Reports the best and the average test accuracy over the
refinement rounds, beside FIPA's CIFAR-10 rows (Table 1: CNN-23k, full parameters,
1000 warm-up + 15 rounds; Table 2: ResNet-18, FC only, 1000 FedRCL warm-up + 100 rounds).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0])
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repro_common

from fedsciml.images import bench  # noqa: E402
from fedsciml.images import methods as M  # noqa: E402

# FIPA paper, CIFAR-10: max / avg accuracy over refinement rounds.
PAPER = {
    0.05: {"fedavg": "57.46 / 52.32 (T1 CNN-23k); 79.27 / 76.88 (T2 RN18)", "fipa": "62.89 / 59.93 (T1 CNN-23k)",
           "fedprox": "79.39 / 77.12 (T2 RN18)", "fipa-fc": "81.87 / 81.53 (T2 RN18 FC)"},
    0.1: {"fedavg": "61.94 / 56.11 (T1 CNN-23k); 84.42 / 82.97 (T2 RN18)", "fipa": "65.33 / 63.58 (T1 CNN-23k)",
          "fedprox": "84.51 / 83.06 (T2 RN18)", "fipa-fc": "86.17 / 85.69 (T2 RN18 FC)"},
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alphas", default="0.05,0.1")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--model", default="cnn23k")
    ap.add_argument("--methods", default="fedavg,fedprox,fipa,fipa-fc,fedfish")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--participation", type=float, default=0.5)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--rank", type=int, default=10)
    ap.add_argument("--beta", type=float, default=0.0, help="relative to the largest sketch eigenvalue")
    ap.add_argument("--no-tail", action="store_true", help="plain Eq. 13 (needs --beta > 0)")
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="results/bench_images_refine.json")
    ap.add_argument("--repro", default="", metavar="NAME",
                    help="also write reproductions/NAME.csv and .md (mean ± std over the seeds, command and commit)")
    ap.add_argument("--from-json", default="", metavar="FILE",
                    help="write --repro from the JSON of an earlier run (with the same options) instead of running")
    ap.add_argument("--ran", default="", help="with --from-json: the command that produced the JSON (for the note)")
    a = ap.parse_args(argv)
    if a.from_json:
        import json

        with open(a.from_json) as f:
            runs = {float(k): v for k, v in json.load(f).items()}
        write_repro(a, runs, sum(r.get("wall_s", 0.0) for r in runs.values()))
        return
    torch.set_num_threads(a.threads)
    cfg = M.TrainConfig(epochs=a.epochs, lr=a.lr, rank=a.rank, beta=a.beta, gamma=a.gamma,
                        tail=not a.no_tail)
    runs, t0 = {}, time.perf_counter()
    for al in [float(s) for s in a.alphas.split(",")]:
        res = bench.run_setting(model=a.model, clients=a.clients, alpha=al, protocol="warmup-refine",
                                methods=a.methods.split(","), seeds=tuple(range(a.seeds)), cfg=cfg, rounds=a.rounds,
                                warmup=a.warmup, participation=a.participation,
                                progress=lambda s: print(s, flush=True))
        print(bench.table(res), flush=True)
        runs[al] = res
        bench.write_json({str(k): v for k, v in runs.items()}, a.json)
    print(f"\nWarm-up ({a.warmup} FedAvg rounds) then {a.rounds} refinement rounds, digits, {a.model}, "
          f"{a.clients} clients, {a.participation:.0%} participation, {a.seeds} seeds; wall "
          f"{time.perf_counter() - t0:.0f} s (shared 2-core CPU)")
    print(f"{'alpha':>5s} {'method':9s} {'warm-up %':>9s} {'best %':>14s} {'avg %':>14s} {'floats/cl/rd':>12s} "
          f"{'client s/rd':>11s} {'server s/rd':>11s}   FIPA paper CIFAR-10 max / avg")
    for al, res in runs.items():
        w = res["results"].get("warmup")
        for m, r in res["results"].items():
            if m == "warmup":
                continue
            print(f"{al:5.2f} {m:9s} {100 * w['acc_mean']:9.2f} {100 * r['best_mean']:6.2f} ± {100 * r['best_std']:5.2f}"
                  f" {100 * r['avg_mean']:6.2f} ± {100 * r['avg_std']:5.2f} {r['floats_per_client']:12.0f} "
                  f"{r['client_s']:11.3f} {r['server_s']:11.3f}   {PAPER.get(al, {}).get(m, '—')}")
    print(f"wrote {a.json}")
    if a.repro:
        write_repro(a, runs, time.perf_counter() - t0)


def _pm(r, key, scale=100.0):
    return f"{scale * r[key + '_mean']:.2f} ± {scale * r[key + '_std']:.2f}"


def write_repro(a, runs, wall):
    """The committed table: per α and method, warm-up, final, best and average accuracy (%), mean ± std."""
    import repro_common

    cols = ["alpha", "method", "warm-up %", "final %", "best %", "avg %", "per-seed best %", "floats/client/round",
            "FIPA paper CIFAR-10 max / avg"]
    rows = []
    for al, res in runs.items():
        rs = res["results"]
        w = rs.get("warmup")
        for m, r in rs.items():
            if m == "warmup":
                continue
            best = [100 * max(h) if h else float("nan") for h in _best_per_seed(r)]
            rows.append({"alpha": al, "method": m, "warm-up %": _pm(w, "acc") if w else "—", "final %": _pm(r, "acc"),
                         "best %": _pm(r, "best"), "avg %": _pm(r, "avg"),
                         "per-seed best %": " / ".join(f"{b:.2f}" for b in best),
                         "floats/client/round": f"{r['floats_per_client']:.0f}",
                         "FIPA paper CIFAR-10 max / avg": PAPER.get(al, {}).get(m, "—")})
    st = next(iter(runs.values()))["setting"]  # what ran (also when the table is written from a JSON)
    c = st["config"]
    note = (f"{st['dataset']}, {st['model']}, {st['clients']} clients ({st['split']} Dirichlet split), "
            f"{st['participation']:.0%} participation, {st['warmup']} FedAvg warm-up rounds shared by every method, "
            f"then {st['rounds']} refinement rounds; local SGD {c['epochs']} epochs, lr {c['lr']}; FIPA rank "
            f"{c['rank']}, γ {c['gamma']}; seeds {', '.join(map(str, st['seeds']))}, torch threads "
            f"{st['torch_threads']}. Best / avg: best and mean test accuracy over the refinement rounds; mean ± std "
            f"(sample std) over the seeds. Wall time {wall:.0f} s on a shared 2-core CPU."
            + (f" Written from the JSON of `{a.ran}`." if a.from_json and a.ran else ""))
    for p in repro_common.write(a.repro, cols, rows, note):
        print("wrote", p)


def _best_per_seed(r):
    """Per seed, the accuracies over the refinement rounds (history: [(round, accuracy)])."""
    return [[acc for _, acc in h] for h in r["history"]]


if __name__ == "__main__":
    main()
