"""One-shot image benchmark (FedFisher / FedBEns setting) on digits, beside the papers' CIFAR-10 rows.

    python scripts/bench/bench_images.py [--alphas 0.05,0.1,0.2] [--seeds 3] [--model lenet5] [--json FILE]
                                         [--repro NAME]

5 clients, balanced Dirichlet split, 30 local epochs of SGD (lr 0.01, momentum 0.9, batch 64),
server validation set of 143 digits (10% of the training images).  Prints test accuracy
mean ± std over seeds for every method next to the CIFAR-10 numbers reported in
FedFisher (Table 2, 5 clients, 5 seeds) and FedBEns (Table 1, 5 clients, 5 seeds).  ``--repro NAME`` also
writes ``reproductions/NAME.{csv,md}`` (command, commit, threads, niceness, load average, wall and CPU seconds,
each seed's accuracy).  ``--from-json FILE --repro NAME`` writes that record from the JSON a run wrote (the JSON
is rewritten after every α, so a run stopped part-way still yields the α values it finished; the record then
says so, and its load and seconds are those of the rebuilding process, not of the run).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0])

from fedsciml.images import bench  # noqa: E402
from fedsciml.images import methods as M  # noqa: E402

# CIFAR-10, 5 clients: (FedFisher paper Table 2, FedBEns paper Table 1); None = not reported there.
PAPER = {
    0.05: {"fedavg": ("29.75±1.32", None), "fishermerge": ("30.89±1.11", "28.44±3.37"),
           "regmean": ("32.84±1.39", "33.77±0.52"), "fedfisher-diag": ("31.08±1.52", None),
           "fedfisher-kfac": ("40.02±3.64", "36.97±2.01"), "fedbens": (None, "51.43±0.79"),
           "fedbens-diagfull": (None, "33.69±3.38")},
    0.1: {"fedavg": ("36.43±2.51", None), "fishermerge": ("36.53±2.74", "36.56±1.51"),
          "regmean": ("36.65±1.29", "40.86±0.77"), "fedfisher-diag": ("40.04±1.35", None),
          "fedfisher-kfac": ("47.01±1.87", "46.92±1.79"), "fedbens": (None, "57.62±1.24"),
          "fedbens-diagfull": (None, "46.68±2.64")},
    0.2: {"fedavg": ("41.77±0.79", None), "fishermerge": ("39.90±3.21", "40.54±3.11"),
          "regmean": ("43.41±1.56", "43.42±1.54"), "fedfisher-diag": ("44.04±2.10", None),
          "fedfisher-kfac": ("51.67±1.03", "49.95±2.51"), "fedbens": (None, "59.78±0.92"),
          "fedbens-diagfull": (None, "49.12±1.15")},
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alphas", default="0.05,0.1,0.2")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--methods", default=",".join(M.ONE_SHOT))
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--modes", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default="results/bench_images_oneshot.json")
    ap.add_argument("--repro", default=None, help="also write reproductions/REPRO.{csv,md}")
    ap.add_argument("--from-json", default=None, help="write --repro from this JSON (a finished or stopped run's)")
    a = ap.parse_args(argv)
    if a.from_json:
        if not a.repro:
            ap.error("--from-json needs --repro NAME")
        import json

        with open(a.from_json) as f:
            saved = json.load(f)
        runs = {float(k): v for k, v in saved.items()}
        cfg0 = next(iter(runs.values()))["setting"]
        a.model, a.seeds, a.threads = cfg0["model"], len(cfg0["seeds"]), cfg0.get("torch_threads", a.threads)
        a.epochs, a.lr, a.modes = cfg0["config"]["epochs"], cfg0["config"]["lr"], cfg0["config"]["modes"]
        walls = ", ".join(f"α = {k:g}: {v['wall_s']:.0f} s" for k, v in runs.items())
        write_repro(a, runs, None, None, None, os.getloadavg(),
                    extra=f"Rebuilt from `{a.from_json}` (α values in it: {', '.join(f'{k:g}' for k in runs)}; wall "
                          f"seconds of the run per α: {walls}).  The settings above are read from that JSON.")
        return
    torch.set_num_threads(a.threads)
    methods = a.methods.split(",")
    alphas = [float(s) for s in a.alphas.split(",")]
    cfg = M.TrainConfig(epochs=a.epochs, lr=a.lr, modes=a.modes)
    runs, t0, c0, load0 = {}, time.perf_counter(), time.process_time(), os.getloadavg()
    for al in alphas:
        res = bench.run_setting(model=a.model, clients=5, alpha=al, protocol="one-shot", methods=methods,
                                seeds=tuple(range(a.seeds)), cfg=cfg, progress=lambda s: print(s, flush=True))
        print(bench.table(res), flush=True)
        runs[al] = res
        bench.write_json({str(k): v for k, v in runs.items()}, a.json)
    print(f"\nOne-shot, 5 clients, digits ({a.model}, {a.seeds} seeds) vs CIFAR-10 in the papers "
          f"[FedFisher Tab. 2 | FedBEns Tab. 1]; total wall {time.perf_counter() - t0:.0f} s (shared 2-core CPU)")
    print(f"{'alpha':>5s} {'method':17s} {'digits acc %':>15s} {'floats/client':>13s} {'client s':>8s} "
          f"{'server s':>8s}   {'FedFisher C10':>13s} {'FedBEns C10':>12s}")
    for al, res in runs.items():
        for m, r in res["results"].items():
            pf, pb = PAPER.get(al, {}).get(m, (None, None))
            print(f"{al:5.2f} {m:17s} {100 * r['acc_mean']:6.2f} ± {100 * r['acc_std']:5.2f} "
                  f"{r['floats_per_client']:13.0f} {r['client_s']:8.1f} {r['server_s']:8.1f}   "
                  f"{pf or '—':>13s} {pb or '—':>12s}")
    print(f"wrote {a.json}")
    if a.repro:
        write_repro(a, runs, time.perf_counter() - t0, time.process_time() - c0, load0, os.getloadavg())


def write_repro(a, runs, wall, cpu, load0, load1, extra=""):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "papers"))
    import repro_common

    rows = []
    for al, res in runs.items():
        for m, r in res["results"].items():
            pf, pb = PAPER.get(al, {}).get(m, (None, None))
            rows.append({"alpha": al, "method": m,
                         "digits acc % (mean ± std)": f"{100 * r['acc_mean']:.2f} ± {100 * r['acc_std']:.2f}",
                         "per seed": " / ".join(f"{100 * x:.2f}" for x in r["per_seed"]),
                         "floats/client": int(r["floats_per_client"]), "client s": round(r["client_s"], 1),
                         "server s": round(r["server_s"], 1), "FedFisher C10": pf or "—", "FedBEns C10": pb or "—"})
    if load0 is None:
        timing = (f"load average {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} when rebuilt (not the run's)")
    else:
        timing = (f"load average {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} at the start, {load1[0]:.2f} / "
                  f"{load1[1]:.2f} / {load1[2]:.2f} at the end; {wall:.0f} s wall, {cpu:.0f} s CPU of this process in all")
    note = (f"One-shot, 5 clients, digits, {a.model}, {a.epochs} local epochs, lr {a.lr}, {a.modes} modes (FedBEns), "
            f"seeds {', '.join(map(str, range(a.seeds)))}.  {a.threads} torch thread(s) (OMP_NUM_THREADS = "
            f"{os.environ.get('OMP_NUM_THREADS', 'unset')}), niceness {os.nice(0)}, {os.cpu_count()} cores; {timing}.  "
            f"client s and server s are wall seconds (under that load).  {extra}").rstrip()
    print(repro_common.write(a.repro, list(rows[0]), rows, note))


if __name__ == "__main__":
    main()
