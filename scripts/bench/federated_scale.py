#!/usr/bin/env python
"""Federated against centralized at research scale (issue 37): ``solve poisson --preset exp16`` as a user types it,
one thread, CPU seconds, one run at a time.

Runs (each a ``python -m fedsciml solve`` subprocess with ``--json``):

* ``centralized``: ``--method centralized`` (1 client, the preset's 3 000 + 500 points);
* ``gn``: ``--method gn --clients 4`` (the same pooled points since point counts are totals), gn's defaults;
* ``gn-kfac0``: ``--method gn --clients 4 --cg-iters 0 --precond kfac`` (the damped K-FAC step, no CG);
* ``gn-sub2``, ``gn-sub3``: ``--method gn --clients 4 --precond kfac --subspace 2`` (3): the damped model minimized
  over ``[P⁻¹g, δ_{t−1}]`` (and ``δ_{t−2}``) from one exchange of products ``J_mᵀJ_m V`` per point (K-FAC's own step
  size and momentum, Martens & Grosse 2015 §7);
* ``centralized-sub2``: ``--method centralized --precond kfac --subspace 2`` (the same step on one machine).
* ``fipa``: ``--method fipa --clients 4`` (FIPA's defaults: each client's local Gauss–Newton step and its rank-r
  curvature sketch, one exchange a round).
* ``gn-sub2-adapt``, ``centralized-sub2-adapt``: the same with ``--subspace-damping adapt`` (the preconditioner's
  damping γ decoupled from LM's μ: P_γ⁻¹g at γ/10, γ, 10γ in the span, γ moved to the best; 4 product columns).

For each: rel L2 (on the preset's 30 000 uniform points) of the last row at or before each CPU-second mark, the
steps accepted and rejected, the exchanges in all and per accepted step, and the stop reason and solver seconds
(a budget overrun shows there).  Writes a markdown table (``--md``) and the raw rows (``--json-dir``).

    OMP_NUM_THREADS=1 nice python scripts/bench/federated_scale.py --budget 120 --marks 60,120 \\
        --md /tmp/federated_scale.md
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

RUNS = {
    "centralized": ["--method", "centralized"],
    "gn": ["--method", "gn", "--clients", "4"],
    "gn-kfac0": ["--method", "gn", "--clients", "4", "--cg-iters", "0", "--precond", "kfac"],
    "gn-sub2": ["--method", "gn", "--clients", "4", "--precond", "kfac", "--subspace", "2"],
    "gn-sub3": ["--method", "gn", "--clients", "4", "--precond", "kfac", "--subspace", "3"],
    "centralized-sub2": ["--method", "centralized", "--precond", "kfac", "--subspace", "2"],
    "fipa": ["--method", "fipa", "--clients", "4"],
    "gn-sub2-adapt": ["--method", "gn", "--clients", "4", "--precond", "kfac", "--subspace", "2",
                      "--subspace-damping", "adapt"],
    "centralized-sub2-adapt": ["--method", "centralized", "--precond", "kfac", "--subspace", "2",
                               "--subspace-damping", "adapt"],
}


def at_mark(rows: list, t: float):
    """The last history row whose solver time is at most ``t`` CPU seconds (``None`` before the first)."""
    best = None
    for r in rows:
        if r.get("time_s") is not None and r["time_s"] <= t:
            best = r
    return best


def summarize(name: str, res: dict, marks: list) -> dict:
    rows = res["history"]
    extra = res.get("extra", {})
    accepted = sum(1 for r in rows[1:] if r.get("accepted", True))
    rejected = sum(1 for r in rows[1:] if r.get("accepted") is False)
    exchanges = extra.get("exchanges")
    out = {"run": name, "accepted": accepted, "rejected": rejected, "exchanges": exchanges,
           "exchanges_per_accepted": (exchanges / accepted) if exchanges and accepted else None,
           "stop_reason": res.get("stop_reason"), "solver_s": extra.get("solver_time_s")}
    for t in marks:
        r = at_mark(rows, t)
        out[f"rel_l2@{t:g}"] = None if r is None else r.get("rel_l2")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="exp16")
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--marks", default="60,120")
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--json-dir", default=None)
    ap.add_argument("--md", default=None)
    a = ap.parse_args(argv)
    marks = [float(t) for t in a.marks.split(",")]
    jdir = a.json_dir or os.path.join(ROOT, "build", "federated_scale")
    os.makedirs(jdir, exist_ok=True)
    table = []
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in a.runs.split(","):
        out = os.path.join(jdir, f"{a.preset}_{name}.json")
        cmd = [sys.executable, "-m", "fedsciml", "solve", "poisson", "--preset", a.preset, *RUNS[name],
               "--threads", "1", "--clock", "cpu", "--budget", f"{a.budget:g}", "--no-progress", "--json", out]
        t0, load0 = time.perf_counter(), os.getloadavg()[0]
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0 or not os.path.exists(out):
            print(f"{name}: FAILED rc {p.returncode}: {p.stderr.strip().splitlines()[-1:]}", flush=True)
            continue
        with open(out) as f:
            res = json.load(f)
        row = summarize(name, res, marks)
        row.update(wall_s=round(wall, 1), load=round(load0, 1), command=" ".join(cmd[2:]))
        table.append(row)
        print(json.dumps(row), flush=True)
    if a.md:
        head = ["run"] + [f"rel L2 @ {t:g} CPU-s" for t in marks] + [
            "accepted / rejected", "exchanges (per accepted step)", "stop", "solver CPU-s", "wall s (load)"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in table:
            ex = "—" if r["exchanges"] is None else (
                f"{r['exchanges']} ({r['exchanges_per_accepted']:.2f})" if r["exchanges_per_accepted"] else
                str(r["exchanges"]))
            cells = [r["run"]] + ["—" if r[f"rel_l2@{t:g}"] is None else f"{r[f'rel_l2@{t:g}']:.3g}" for t in marks]
            cells += [f"{r['accepted']} / {r['rejected']}", ex, str(r["stop_reason"]),
                      f"{r['solver_s']:.1f}" if r["solver_s"] is not None else "—", f"{r['wall_s']} ({r['load']})"]
            lines.append("| " + " | ".join(cells) + " |")
        with open(a.md, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
