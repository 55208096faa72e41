#!/usr/bin/env python
"""One PINNacle case through ``fs.solve`` with the options the command line does not carry (time windows, causal
weighting), at one thread with a CPU-seconds budget, and one JSON line of what the record needs.

The CLI path (``python -m fedsciml solve pinnacle --case … --time-windows K --time-window-growth R --causal EPS``)
runs the same loop; this script adds the record's fields (per-window L2RE, load, peak RSS).  ``--budget`` is per window (``fs.solve``'s rule: the method's options apply to each window),
so a run of K windows spends at most K × budget solver CPU seconds.  Example (Heat 2d-LT)::

    OMP_NUM_THREADS=1 python scripts/bench/pinnacle_heat.py --case heat2d-lt --pinnacle-dir ../PINNacle \\
        --budget 60 --time-windows 10 --option n_interior=3000 --json runs/lt.json

Printed and written (``--json``): the command, the commit, the load average at the start and end, the case's
pooled L2RE (``l2re``), the stop reason of each window, the solver CPU seconds (each window's last history ``time_s``,
summed: the budget's clock, CPU seconds, evaluation excluded), this process's CPU seconds and peak RSS.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from anchors import ROOT, git_commit  # noqa: E402


def _value(text: str):
    """``key=value``'s value: JSON where it parses (numbers, lists, strings in quotes), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", required=True)
    ap.add_argument("--pinnacle-dir", default=os.environ.get("FEDSCIML_PINNACLE"))
    ap.add_argument("--budget", type=float, required=True, help="solver CPU seconds (per window with --time-windows; 0: none, "
                    "for --causal with max_iters)")
    ap.add_argument("--time-windows", type=int, default=None)
    ap.add_argument("--time-window-growth", type=float, default=None, help="each window this many times the last")
    ap.add_argument("--causal", type=float, default=None, help="causal ε (needs --method-option max_iters=N, "
                    "and --budget 0: no budget)")
    ap.add_argument("--causal-slices", type=int, default=None)
    ap.add_argument("--causal-every", type=int, default=None)
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a problem option")
    ap.add_argument("--method-option", action="append", default=[], metavar="KEY=VALUE", help="a method option")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    import fedsciml as fs

    def kv(items):
        out = {}
        for it in items:
            if "=" not in it:
                ap.error(f"give KEY=VALUE, got {it!r}")
            k, v = it.split("=", 1)
            out[k] = _value(v)
        return out

    opts, mopts = kv(a.option), kv(a.method_option)
    load0 = os.getloadavg()[0]
    pb = fs.get_problem("pinnacle", case=a.case, pinnacle_dir=a.pinnacle_dir, **opts)
    cpu0, wall0 = time.process_time(), time.time()
    extra = {}
    if a.time_windows is not None:
        extra["time_windows"] = a.time_windows
    if a.time_window_growth is not None:
        extra["time_window_growth"] = a.time_window_growth
    for k in ("causal", "causal_slices", "causal_every"):
        if getattr(a, k) is not None:
            extra[k] = getattr(a, k)
    budget = {"budget": a.budget} if a.budget > 0 else {}
    r = fs.solve(pb, "centralized", clients=1, seed=a.seed, device="cpu", clock="cpu", **budget, **extra, **mopts)
    last: dict = {}  # each window's last history time_s: the budget's clock (cpu), evaluation excluded
    for row in r.history:
        last[row.get("window")] = float(row.get("time_s", 0.0))
    solver = sum(last.values())
    out = {"command": "python " + " ".join(shlex.quote(x) for x in [os.path.relpath(__file__, ROOT), *(argv or
                                                                                                       sys.argv[1:])]),
           "commit": git_commit(ROOT), "case": a.case, "options": opts, "method_options": mopts,
           "time_windows": a.time_windows, "causal": a.causal, "budget": a.budget, "n_params": pb.n_params,
           "l2re": r.final.get("l2re"), "rel_l2": r.final.get("rel_l2"), "loss": r.final.get("loss"),
           "val_loss": r.final.get("val_loss"), "stop_reason": r.stop_reason,
           "window_stop_reasons": [w.get("stopped_by") for w in r.extra.get("windows", [])] or None,
           "window_l2re": [w.get("final", {}).get("l2re") for w in r.extra.get("windows", [])] or None,
           "steps": len(r.history), "solver_cpu_s": round(solver, 1),
           "process_cpu_s": round(time.process_time() - cpu0, 1), "wall_s": round(time.time() - wall0, 1),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
           "load_start": load0, "load_end": os.getloadavg()[0], "threads": torch.get_num_threads()}
    line = json.dumps(out)
    print(line)
    if a.json:
        from fedsciml.runtime.files import write_output

        write_output(a.json, lambda f: f.write(line + "\n"), what="--json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
