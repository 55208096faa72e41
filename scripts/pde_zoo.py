"""The geometry/time/system/inverse zoo (issue 19's targets): gn on 4 clients, FIPA and FedAvg beside at equal CPU time.

    python scripts/pde_zoo.py [--problems heat,heat-inverse,poisson-lshape,kovasznay,burgers] [--rounds 60]
                              [--clients 4] [--flower] [--repro pde_zoo]

For each problem, federated Gauss–Newton (``gn``) runs ``--rounds`` rounds (``--round-overrides NAME=R,...``
per problem); its solver CPU time (process time with one torch thread, evaluation excluded, so the
figure does not depend on what else loads the machine) is the budget FIPA (default options) and FedAvg
then get.  ``heat-inverse`` runs twice: exact readings, and readings with noise σ = 0.01.
``--flower`` repeats gn on Flower's simulation engine (same strategy, same round loop) and reports the
largest difference of its metrics from the in-process run.  Targets (issue 19): heat ≤ 1e-4, kovasznay ≤ 1e-4
for u, v and p (p up to a constant), poisson-lshape ≤ 1e-2, burgers ≤ 5e-3; heat-inverse: k within 1e-3
relative without noise, within its reported 2σ with noise.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # repro_common

import fedsciml as fs  # noqa: E402

from fedsciml.runtime import history as _history  # noqa: E402

import repro_common  # noqa: E402


class _CPUClock:
    """``time`` for the solver's history clock: process CPU seconds instead of wall seconds."""
    perf_counter = staticmethod(time.process_time)


_history.time = _CPUClock

CASES = {  # label: (problem, problem options, target text, check(final) -> bool)
    "heat": ("heat", {}, "rel L2 ≤ 1e-4", lambda f: f["rel_l2"] <= 1e-4),
    "heat-inverse": ("heat-inverse", {}, "k rel. err ≤ 1e-3", lambda f: f["coef_k_rel_err"] <= 1e-3),
    "heat-inverse σ=0.01": ("heat-inverse", {"noise": 0.01}, "|k − 0.1| ≤ 2 std",
                            lambda f: abs(f["coef_k"] - 0.1) <= 2 * f["coef_k_std"]),
    "poisson-lshape": ("poisson-lshape", {}, "rel L2 ≤ 1e-2", lambda f: f["rel_l2"] <= 1e-2),
    "kovasznay": ("kovasznay", {}, "u, v, p rel L2 ≤ 1e-4", lambda f: f["rel_l2"] <= 1e-4),
    "burgers": ("burgers", {}, "rel L2 ≤ 5e-3", lambda f: f["rel_l2"] <= 5e-3),
}
COLUMNS = ["problem", "method", "engine", "rounds", "CPU s", "rel_l2", "rel_l2_u", "rel_l2_v", "rel_l2_p", "coef_k",
           "coef_k_std", "target", "met"]


def _row(label, r, target, check, engine="local"):
    f = r.final
    rounds = r.extra.get("rounds", r.history[-1]["step"] if r.history else 0) if isinstance(r.extra, dict) else 0
    row = {"problem": label, "method": r.method, "engine": engine, "rounds": rounds,
           "CPU s": r.history[-1]["time_s"] if r.history else 0.0, "target": target}
    for k in ("rel_l2", "rel_l2_u", "rel_l2_v", "rel_l2_p", "coef_k", "coef_k_std"):
        row[k] = f.get(k, "")
    try:
        row["met"] = "yes" if check(f) else "no"
    except (KeyError, TypeError):
        row["met"] = "—"
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--round-overrides", default="", help="NAME=ROUNDS,... per problem label")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--flower", action="store_true", help="also run gn on Flower's simulation engine")
    ap.add_argument("--repro", default=None, help="write reproductions/NAME.{csv,md}")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    over = dict(kv.split("=") for kv in a.round_overrides.split(",") if kv)
    labels = [s.strip() for s in a.problems.split(",") if s.strip()]
    for lab in labels:
        if lab not in CASES:
            ap.error(f"unknown problem {lab!r}; allowed: {', '.join(CASES)}")
    rows = []
    for lab in labels:
        name, opts, target, check = CASES[lab]
        rounds = int(over.get(lab, a.rounds))
        t0 = time.perf_counter()
        g = fs.solve(name, "gn", clients=a.clients, seed=a.seed, problem_options=opts, rounds=rounds)
        rows.append(_row(lab, g, target, check))
        budget = max(rows[-1]["CPU s"], 1e-3)
        print(f"{lab}: gn {rounds} rounds, {budget:.1f} CPU s, wall {time.perf_counter() - t0:.0f} s: {g.final}",
              flush=True)
        for m in ("fipa", "fedavg"):
            r = fs.solve(name, m, clients=a.clients, seed=a.seed, problem_options=opts, rounds=100000, budget=budget)
            rows.append(_row(lab, r, target, check))
            print(f"  {m} at {budget:.1f} CPU s: {r.final}", flush=True)
        if a.flower:
            fl = fs.solve(name, "gn", clients=a.clients, seed=a.seed, problem_options=opts, rounds=rounds,
                          engine="flower")
            row = _row(lab, fl, target, check, engine="flower")
            diff = max(abs(fl.final[k] - g.final[k]) for k in g.final if isinstance(g.final.get(k), float)
                       and isinstance(fl.final.get(k), float))
            row["engine"] = f"flower (max |Δ| vs local {diff:.1e})"
            rows.append(row)
            print(f"  flower gn: {fl.final} (max |Δ| {diff:.1e})", flush=True)
        if a.repro:  # after each problem, so that a run cut short keeps what it measured
            _write(a, rows, done=labels.index(lab) + 1, total=len(labels))


def _write(a, rows, done, total):
    load = os.getloadavg()[0]
    note = (f"gn on {a.clients} clients (strips along x), problem defaults, seed {a.seed}; FIPA (default options) and "
            f"FedAvg (default options) with gn's solver CPU time as their budget (process time, 1 torch thread, "
            f"evaluation excluded). 'rounds' is the rounds each ran. Load average when written: {load:.1f} "
            f"(shared machine; CPU seconds are this process's own). Problems done: {done} of {total}.")
    for p in repro_common.write(a.repro, COLUMNS, rows, note):
        print(f"wrote {p}", flush=True)


if __name__ == "__main__":
    main()
