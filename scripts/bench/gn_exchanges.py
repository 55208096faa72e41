#!/usr/bin/env python
"""Exchanges to an accuracy: federated Gauss–Newton with one exchange per LM iteration against two (issue 29).

On a stock Flower deployment every exchange costs seconds whatever its size, so a method's price there is its
number of exchanges.  This runs ``solve bratu --clients 4 --method gn`` (or ``--problem``/``--clients``) with
``--exchange two`` (the trial's loss, then its statistics after an acceptance) and ``--exchange one`` (loss and
statistics at the trial together), the same seed and rounds, and records for each: the round and the exchanges
(the loop's ``exchanges_total``, start included) at which the test rel L2 first reaches each threshold, the
floats sent by then, the accepted/rejected steps, and whether both variants took the same acceptance decisions
(then their iterates agree to round-off: the largest relative difference of the final θ is printed).

    nice python scripts/bench/gn_exchanges.py --rounds 60 --csv reproductions/gn_exchanges.csv \\
        --md reproductions/gn_exchanges.md

``--variants`` picks the runs (default ``two,one``); ``one:K`` is ``--exchange one --trials K`` (K trial points
per exchange, the statistics at each: a rejected trial costs no exchange).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import fedsciml as fs  # noqa: E402


def first_reaching(rows: list, threshold: float):
    """The first history row with ``rel_l2 ≤ threshold`` (``None`` if none)."""
    return next((r for r in rows if r.get("rel_l2") is not None and r["rel_l2"] <= threshold), None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="bratu")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--thresholds", default="1e-4,1e-5")
    ap.add_argument("--variants", default="two,one", help="comma-separated: two, one, one:K (trials K)")
    ap.add_argument("--csv")
    ap.add_argument("--md")
    a = ap.parse_args(argv)
    thresholds = [float(t) for t in a.thresholds.split(",")]
    load0 = os.getloadavg()[0]
    runs = {}
    for variant in a.variants.split(","):
        exchange, _, trials = variant.partition(":")
        t0 = time.process_time()
        res = fs.solve(a.problem, "gn", clients=a.clients, seed=a.seed, rounds=a.rounds, exchange=exchange,
                       trials=int(trials or 1))
        runs[variant] = (res, time.process_time() - t0)
    out = []
    for variant, (res, cpu) in runs.items():
        rows = res.history
        row = {"variant": variant, "problem": a.problem, "clients": a.clients, "rounds": len(rows) - 1,
               "accepted": res.extra["accepted_steps"], "rejected": res.extra["rejected_steps"],
               "exchanges": rows[-1]["exchanges_total"], "floats_sent": rows[-1]["floats_sent"],
               "final_rel_l2": rows[-1]["rel_l2"], "process_cpu_s": round(cpu, 1)}
        for t in thresholds:
            hit = first_reaching(rows, t)
            row[f"round_to_{t:g}"] = None if hit is None else hit["step"]
            row[f"exchanges_to_{t:g}"] = None if hit is None else hit["exchanges_total"]
            row[f"floats_to_{t:g}"] = None if hit is None else hit["floats_sent"]
        out.append(row)
    same, diff = None, float("nan")
    if "one" in runs and "two" in runs:
        same = [r.get("accepted") for r in runs["one"][0].history] == [r.get("accepted") for r in runs["two"][0].history]
        th1, th2 = runs["one"][0].theta, runs["two"][0].theta
        diff = float((th1 - th2).norm() / th2.norm())
    load1 = os.getloadavg()[0]
    for r in out:
        print(r)
    print(f"same acceptance decisions: {same}; ‖θ_one − θ_two‖/‖θ_two‖ after {a.rounds} rounds: {diff:.3e}; "
          f"load {load0:.1f} → {load1:.1f}")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(out[0]))
            w.writeheader()
            w.writerows(out)
    if a.md:
        cols = ["variant", "rounds", "accepted", "rejected"] + [f"{k}_to_{t:g}" for t in thresholds
                                                                 for k in ("round", "exchanges", "floats")]
        cols += ["exchanges", "final_rel_l2"]
        lines = [f"# gn exchanges to accuracy: `{a.problem}`, {a.clients} clients, seed {a.seed}, {a.rounds} rounds",
                 "", f"Command: `nice python scripts/bench/gn_exchanges.py --problem {a.problem} --clients "
                 f"{a.clients} --rounds {a.rounds} --seed {a.seed} --variants {a.variants}`; load average {load0:.1f} at the start, "
                 f"{load1:.1f} at the end (2 cores).", "",
                 "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in out:
            lines.append("| " + " | ".join("—" if r[c] is None else (f"{r[c]:.3e}" if isinstance(r[c], float)
                                                                      else str(r[c])) for c in cols) + " |")
        if same is not None:
            lines += ["", f"Same acceptance decisions in one and two: {same}; relative difference of the final θ: "
                          f"{diff:.3e}.", ""]
        lines += ["", "accepted/rejected: LM steps (a round of `one:K` may hold several); exchanges include the "
                      "start's (statistics at θ₀); floats: up and down, all clients.", ""]
        with open(a.md, "w") as f:
            f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
