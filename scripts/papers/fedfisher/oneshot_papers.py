"""One-shot comparisons of the FedFisher and FedBEns papers on digits, in the paper's setting and in fedsciml's default.

    python scripts/papers/fedfisher/oneshot_papers.py fedfisher [--seeds 3] [--alpha 0.1] [--repro fedfisher_oneshot]
    python scripts/papers/fedfisher/oneshot_papers.py fedbens   [--seeds 3] [--alpha 0.1] [--repro fedbens_oneshot]

Both papers run 5 clients, a Dirichlet(α) label split after Hsu et al. (per class, the client shares ~ Dir(α):
``--split hsu`` here), LeNet on FashionMNIST, local SGD (lr 0.01, momentum 0.9, batch 64) for 30 (FedFisher) or
20 (FedBEns, LeNet) epochs, a 500-image server validation set, 5 seeds.  FashionMNIST cannot be downloaded here:
both settings below run on scikit-learn's bundled digits (8×8, 1797 images; validation 143) with LeNet-5, 3 seeds.

* paper setting: ``split='hsu'``, the paper's epochs, the paper's methods (FedBEns-Diag+Full is left out: 3.8M
  floats per client and ~4 min of server time per seed on this CPU);
* default setting: ``python -m fedsciml bench images`` (balanced split — equal client sizes, client label priors
  ~ Dir(α) —, 30 epochs), the same methods.

The paper's figure beside each is its FashionMNIST α = 0.1 entry (FedFisher Table 2; FedBEns Table 1).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repro_common

from fedsciml.images import bench  # noqa: E402
from fedsciml.images import methods as M  # noqa: E402

import repro_common  # noqa: E402

# FashionMNIST, LeNet, 5 clients, α = 0.1, 5 seeds: mean ± std test accuracy (%)
PAPERS = {
    "fedfisher": {"epochs": 30, "table": "FedFisher Table 2",
                  "paper": {"fedavg": "41.72 ± 4.54", "regmean": "56.98 ± 4.08", "fishermerge": "54.71 ± 4.96",
                            "fedfisher-diag": "55.04 ± 4.15", "fedfisher-kfac": "68.36 ± 3.44"}},
    "fedbens": {"epochs": 20, "table": "FedBEns Table 1",
                "paper": {"fishermerge": "57.38 ± 5.66", "regmean": "56.40 ± 5.54",
                          "fedfisher-kfac": "68.06 ± 2.64", "fedbens": "75.91 ± 3.21"}},
}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paper", choices=sorted(PAPERS))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--settings", default="paper,default")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repro", default="")
    ap.add_argument("--from-log", default="", metavar="FILE",
                    help="write --repro from the progress log of a run that was stopped (per-seed accuracies)")
    a = ap.parse_args(argv)
    if a.from_log:
        return from_log(a)
    torch.set_num_threads(a.threads)
    spec = PAPERS[a.paper]
    methods = list(spec["paper"])
    runs, t0, load0 = {}, time.perf_counter(), os.getloadavg()[0]
    for setting in a.settings.split(","):
        split, epochs = ("hsu", spec["epochs"]) if setting == "paper" else ("balanced", M.TrainConfig().epochs)
        t = time.perf_counter()
        res = bench.run_setting(model="lenet5", clients=5, alpha=a.alpha, split_kind=split, protocol="one-shot",
                                methods=methods, seeds=tuple(range(a.seeds)), cfg=M.TrainConfig(epochs=epochs),
                                progress=lambda s: print(s, flush=True))
        print(bench.table(res), f"\n({setting}: {time.perf_counter() - t:.0f} s wall)", flush=True)
        runs[setting] = res
    rows = []
    for m in methods:
        row = {"method": m, f"paper ({spec['table']}, FashionMNIST)": spec["paper"][m]}
        for setting, res in runs.items():
            r = res["results"][m]
            row[f"ours, {setting} setting"] = f"{100 * r['acc_mean']:.2f} ± {100 * r['acc_std']:.2f}"
            row[f"ours, {setting} setting: per seed"] = " / ".join(f"{100 * v:.2f}" for v in r["per_seed"])
        row["floats/client"] = f"{next(iter(runs.values()))['results'][m]['floats_per_client']:.0f}"
        rows.append(row)
        print(row, flush=True)
    cols = list(rows[0])
    note = (f"One-shot, 5 clients, Dirichlet α = {a.alpha}, LeNet-5 on scikit-learn digits (the paper: LeNet on "
            f"FashionMNIST, 5 seeds); seeds 0..{a.seeds - 1}, test accuracy % mean ± std (sample std). Paper setting: "
            f"Hsu et al. split (per class, client shares ~ Dir(α)), {spec['epochs']} local epochs; default setting: "
            f"`bench images` defaults (balanced split: equal client sizes, label priors ~ Dir(α); 30 epochs). Both: "
            f"local SGD lr 0.01, momentum 0.9, batch 64; server validation set 143 digits (the paper: 500 images). "
            f"torch threads {a.threads}; wall {time.perf_counter() - t0:.0f} s on a shared {os.cpu_count()}-core CPU "
            f"(1-min load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end).")
    if a.repro:
        for p in repro_common.write(a.repro, cols, rows, note):
            print("wrote", p)


def from_log(a):
    """The table from a stopped run's log: the per-seed accuracy lines of each setting (mean ± std of what ran)."""
    import math
    import re

    spec = PAPERS[a.paper]
    acc: dict = {}
    setting = None
    for line in open(a.from_log):
        m = re.match(r"seed (\d+): .*\((\w+)\), model", line)
        if m:
            setting = "paper" if m.group(2) == "hsu" else "default"
            continue
        m = re.match(r"\s+([\w-]+)\s+acc ([0-9.]+)\s+floats/client (\d+)", line)
        if m and setting:
            acc.setdefault(setting, {}).setdefault(m.group(1), []).append((100 * float(m.group(2)), m.group(3)))
    rows = []
    for meth in spec["paper"]:
        row = {"method": meth, f"paper ({spec['table']}, FashionMNIST)": spec["paper"][meth]}
        for st, by in acc.items():
            v = [x for x, _ in by.get(meth, [])]
            if v:
                mu = sum(v) / len(v)
                sd = math.sqrt(sum((x - mu) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else float("nan")
                row[f"ours, {st} setting"] = f"{mu:.2f} ± {sd:.2f} ({len(v)} seeds)"
                row[f"ours, {st} setting: per seed"] = " / ".join(f"{x:.2f}" for x in v)
                row["floats/client"] = by[meth][0][1]
        rows.append(row)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    note = (f"Written from the log of a stopped run (`{a.from_log}`); the seeds that finished per method are in "
            f"parentheses. One-shot, 5 clients, Dirichlet α = {a.alpha}, LeNet-5 on scikit-learn digits (the paper: "
            f"LeNet on FashionMNIST, 5 seeds). Paper setting: Hsu et al. split, {spec['epochs']} local epochs; default "
            f"setting: `bench images` defaults (balanced split, 30 epochs). Both: local SGD lr 0.01, momentum 0.9, batch "
            f"64; server validation set 143 digits (the paper: 500); torch threads 1.")
    for p in repro_common.write(a.repro, cols, rows, note):
        print("wrote", p)


if __name__ == "__main__":
    main()
