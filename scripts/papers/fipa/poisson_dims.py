"""Poisson d = 3 and d = 5 on 2 clients (FIPA paper Fig. 3D–E): FIPA, FedAvg and federated GN at equal budgets.

    python scripts/papers/fipa/poisson_dims.py table    [--dims 3,5] [--rounds 20] [--repro poisson_dims]
    python scripts/papers/fipa/poisson_dims.py ablation [--dim 5] [--rounds 12] [--repro poisson_d5_ablation]

Budgets that do not depend on the machine's load: the same number of communication rounds for every method,
and the same *CPU* seconds (the solver clock is switched to ``time.process_time`` with one torch thread, so a
run's clock counts its own work only, not the time it waits for the shared cores; evaluation is excluded as
usual).  What one round costs a client differs: FIPA (default) one Jacobian of its residuals, one eigen-
decomposition of its Gram matrix and one exact local Gauss–Newton solve; gn one Jacobian per accepted
iteration plus one loss per trial; FedAvg and the paper preset 100 local Adam steps (full-batch gradients).
The table gives the relative L2 error (10 000 fixed test points) at rounds 5 / 10 / 20 and at the CPU budget
``--cpu`` (default: what default FIPA used for its rounds), with each method's round count there; for FIPA with
the safeguard, a merged step that the next round undid counts with the parameters kept.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repro_common

import fedsciml as fs  # noqa: E402
from fedsciml.runtime import history as _history  # noqa: E402

import repro_common  # noqa: E402


class _CPUClock:
    """``time`` for the solver's history clock: process CPU seconds instead of wall seconds."""
    perf_counter = staticmethod(time.process_time)


_history.time = _CPUClock  # the recorder's elapsed/paused time becomes this process's CPU time

METHODS = {  # label: (method, options)
    "fipa (default)": ("fipa", {}),
    "fedavg": ("fedavg", {}),
    "gn": ("gn", {}),
    "fipa --preset paper": ("fipa", {"preset": "paper"}),
}
ABLATION = {
    "default (rank 20, safeguard)": {},
    "rank 100": {"rank": 100},
    "rank 300": {"rank": 300},
    "complement": {"complement": True},
    "no safeguard": {"safeguard": False},
    "no safeguard, γ 0.3": {"safeguard": False, "gamma": 0.3},
    "local damping 1e-3": {"local_damping": 1e-3},
}


def run(dim, method, rounds, seed=0, **opts):
    t = time.perf_counter()
    r = fs.solve("poisson", method, clients=2, seed=seed, problem_options={"dim": dim}, rounds=rounds, **opts)
    wall = time.perf_counter() - t
    h = [e for e in r.history if "rel_l2" in e]
    rej = sum(1 for e in h if e.get("accepted") is False)
    return (kept(h) if method == "fipa" else h), wall, rej


def kept(h):
    """FIPA's rows with a trial that the safeguard later undid replaced by the parameters kept then.

    A FIPA row describes the merged (trial) parameters after its round; the next round's ``accepted: False``
    says the safeguard undid them.  gn's rows already describe the accepted parameters."""
    out, cur = [], h[0]
    for i, e in enumerate(h):
        if i + 1 < len(h) and h[i + 1].get("accepted") is False:
            out.append({**cur, "round": e["round"], "time_s": e["time_s"]})
        else:
            cur = e
            out.append(e)
    return out


def at_round(h, k):
    e = [x for x in h if x["round"] <= k]
    return e[-1]["rel_l2"] if e else float("nan")


def at_cpu(h, budget):
    e = [x for x in h if x.get("time_s", 0.0) <= budget + 1e-9]
    return (e[-1]["rel_l2"], e[-1]["round"]) if e else (float("nan"), 0)


def _uptime():
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def table(a):
    rows = []
    for d in [int(s) for s in a.dims.split(",")]:
        res = {}
        for label, (m, o) in METHODS.items():
            if a.skip and label in a.skip.split(","):
                continue
            h, wall, rej = run(d, m, a.rounds, **o)
            res[label] = (h, wall, rej)
            print(f"d={d} {label}: rel L2 {h[-1]['rel_l2']:.4g} after {h[-1]['round']} rounds, CPU {h[-1]['time_s']:.1f} s,"
                  f" wall {wall:.0f} s (load {_uptime()}), rejected steps {rej}", flush=True)
        budget = a.cpu if a.cpu else res["fipa (default)"][0][-1]["time_s"]
        for label, (h, wall, rej) in res.items():
            e_cpu, k_cpu = at_cpu(h, budget)
            rows.append({"d": d, "method": label, "round 0": h[0]["rel_l2"], "round 5": at_round(h, 5),
                         "round 10": at_round(h, 10), f"round {a.rounds}": at_round(h, a.rounds),
                         f"loss, round {a.rounds}": h[-1]["loss"],
                         "CPU s / round": h[-1]["time_s"] / max(1, h[-1]["round"]),
                         "at CPU budget": e_cpu, "rounds in CPU budget": k_cpu, "CPU budget s": round(budget, 1),
                         "rejected steps": rej})
    cols = ["d", "method", "round 0", "round 5", "round 10", f"round {a.rounds}", f"loss, round {a.rounds}",
            "CPU s / round", "CPU budget s", "at CPU budget", "rounds in CPU budget", "rejected steps"]
    note = ("Poisson −Δu = f on [0,1]^d, u = Π sin πxᵢ, 2 clients (strips along x₁), problem defaults (400 interior "
            "points and 50 boundary points per face per client, boundary weight 100, tanh MLP 32×32×32), seed 0; "
            "relative L2 error on 10 000 fixed test points. Budgets: equal rounds, and equal CPU seconds of the "
            "solver (process time, 1 torch thread, evaluation excluded; the budget is default FIPA's CPU time for "
            f"its {a.rounds} rounds). Per round a client does: fipa (default) one Jacobian + Gram eigendecomposition + "
            "exact local GN step; gn one Jacobian per accepted LM iteration + one loss per trial; fedavg and the "
            "paper preset 100 full-batch Adam steps (lr 1e-3; preset: 1e-4, per-part loss, rank-20 sketch, γ 0.3, "
            "no safeguard). Rejected steps: FIPA/gn safeguard trials undone.")
    if a.repro:
        for p in repro_common.write(a.repro, cols, rows, note):
            print("wrote", p)
    else:
        for r in rows:
            print(r)


def ablation(a):
    rows = []
    for label, o in ABLATION.items():
        if a.skip and label in a.skip.split(","):
            continue
        h, wall, rej = run(a.dim, "fipa", a.rounds, **o)
        print(f"d={a.dim} {label}: rel L2 {h[-1]['rel_l2']:.4g}, loss {h[-1]['loss']:.4g}, CPU {h[-1]['time_s']:.1f} s, "
              f"wall {wall:.0f} s (load {_uptime()}), rejected {rej}", flush=True)
        rows.append({"variant": label, "round 5": at_round(h, 5), f"round {a.rounds}": at_round(h, a.rounds),
                     f"loss, round {a.rounds}": h[-1]["loss"], "CPU s / round": h[-1]["time_s"] / max(1, h[-1]["round"]),
                     "rejected steps": rej})
    cols = ["variant", "round 5", f"round {a.rounds}", f"loss, round {a.rounds}", "CPU s / round", "rejected steps"]
    note = (f"Poisson d = {a.dim}, 2 clients, problem defaults, seed 0: default FIPA (local exact GN step, rank-20 "
            "sketches, thin-QR merge with the LM safeguard) with one setting changed at a time; relative L2 on "
            "10 000 fixed test points; CPU s: solver process time, 1 torch thread.")
    if a.repro:
        for p in repro_common.write(a.repro, cols, rows, note):
            print("wrote", p)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("table", "ablation"))
    ap.add_argument("--dims", default="3,5")
    ap.add_argument("--dim", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--cpu", type=float, default=0.0, help="CPU budget in seconds (default: default FIPA's)")
    ap.add_argument("--skip", default="", help="comma-separated labels to leave out")
    ap.add_argument("--repro", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    (table if a.what == "table" else ablation)(a)


if __name__ == "__main__":
    main()
