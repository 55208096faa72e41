"""Collocation schedules on Poisson Π sin πxᵢ, d = 5 (issue 28, item 5b): which one keeps converging.

Each schedule runs centralized Levenberg–Marquardt (``python -m fedsciml solve poisson --dim 5`` plus the
schedule's options) in its own child process at one thread (``--jobs`` at once), with the budget in **CPU
seconds of that process** (the Recorder's clock replaced by ``time.process_time``, so runs on a loaded machine
get the same computation).  Reports rel L2 at the checkpoints, the final and the median over the last 20 % of the
budget, steps and the rows of the last step; writes JSON and a Markdown table.

    nice -n 10 python scripts/bench/collocation.py --budget 120 --md reproductions/collocation_d5.md \\
        --json reproductions/collocation_d5.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shlex
import statistics
import subprocess
import sys
import time
import types

#: name → options of `solve poisson --dim 5` (the problem's defaults otherwise: [5,32,32,32,1], 4 000 + 500 points)
SCHEDULES = {
    "fixed-points": "",
    "minibatch-momentum": "--n-interior 400 --n-boundary 10 --resample 1 --momentum 0.9",
    "minibatch-average": "--n-interior 400 --n-boundary 10 --resample 1 --momentum 0.9 --average 0.9",
    "minibatch-fixed-damping": "--n-interior 400 --n-boundary 10 --resample 1 --momentum 0.9 --lm-damping fixed "
                               "--lm-mu 3 --step-decay 100",
    "grow": "--n-interior 400 --n-boundary 10 --resample 1 --grow 1.5 --grow-every 20 --grow-cap 20000",
    "grow-fast": "--n-interior 400 --n-boundary 10 --resample 1 --grow 1.5 --grow-every 10 --grow-cap 20000",
    "grow-average": "--n-interior 400 --n-boundary 10 --resample 1 --grow 1.5 --grow-every 20 --grow-cap 20000 "
                    "--average 0.9",
}


def child(args_line: str, budget: float, out: str) -> None:
    """Run one schedule in this process with a CPU-second clock; write its rows to ``out``."""
    import torch

    torch.set_num_threads(1)
    import fedsciml.runtime.history as history

    history.time = types.SimpleNamespace(perf_counter=time.process_time)  # type: ignore[assignment]
    from fedsciml.cli import main

    c0 = time.process_time()
    main(["solve", "poisson", "--dim", "5", *shlex.split(args_line), "--budget", str(budget), "--json", out,
          "--quiet", "--threads", "1"])
    with open(out) as f:
        res = json.load(f)
    res["process_cpu_s"] = time.process_time() - c0
    with open(out, "w") as f:
        json.dump(res, f)


def summarize(name: str, args_line: str, res: dict, budget: float, checkpoints: list[float]) -> dict:
    rows = res["history"]
    at = {}
    for c in checkpoints:
        before = [r for r in rows if r["time_s"] <= c]
        at[str(c)] = before[-1]["rel_l2"] if before else None
    tail = [r["rel_l2"] for r in rows if r["time_s"] >= 0.8 * budget] or [rows[-1]["rel_l2"]]
    return {"name": name, "options": args_line, "budget_cpu_s": budget, "steps": rows[-1]["step"],
            "final_rel_l2": res["final"]["rel_l2"], "median_last_20pct": statistics.median(tail),
            "min_rel_l2": min(r["rel_l2"] for r in rows), "at": at,
            "last_rows": rows[-1].get("rows"), "solver_s": res.get("extra", {}).get("solver_time_s"),
            "process_cpu_s": res.get("process_cpu_s")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", type=float, default=120.0, help="CPU seconds per schedule (default 120)")
    ap.add_argument("--runs", default=",".join(SCHEDULES), help="schedules, comma-separated: " + ", ".join(SCHEDULES))
    ap.add_argument("--checkpoints", default="30,60,120")
    ap.add_argument("--jobs", type=int, default=1, help="schedules run at once (each one thread; default 1)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--child", nargs=3, metavar=("ARGS", "BUDGET", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child[0], float(args.child[1]), args.child[2])
    cps = [float(c) for c in args.checkpoints.split(",") if c]
    results = []
    names = args.runs.split(",")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for i in range(0, len(names), args.jobs):  # `--jobs` children at once, each at one thread, CPU-second budgets
        batch = names[i:i + args.jobs]
        t0, load0 = time.time(), os.getloadavg()[0]
        procs = {name: subprocess.Popen([sys.executable, __file__, "--child", SCHEDULES[name], str(args.budget),
                                         f"/tmp/collocation_{os.getpid()}_{name}.json"], env=env) for name in batch}
        for name, proc in procs.items():
            if proc.wait() != 0:
                print(f"{name}: exit status {proc.returncode}", flush=True)
                continue
            with open(f"/tmp/collocation_{os.getpid()}_{name}.json") as f:
                r = summarize(name, SCHEDULES[name], json.load(f), args.budget, cps)
            r.update(wall_s=time.time() - t0, load=[load0, os.getloadavg()[0]], jobs=len(batch))
            results.append(r)
            print(json.dumps(r), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f, indent=1)
    if args.md:
        head = ("| schedule | options | steps | " + " | ".join(f"rel L2 @ {c:g} CPU s" for c in cps)
                + " | final | median, last 20 % | lowest seen | rows of the last step |\n|"
                + "---|" * (7 + len(cps)) + "\n")
        body = "".join(
            f"| {r['name']} | `{r['options'] or '(defaults)'}` | {r['steps']} | "
            + " | ".join(f"{r['at'][str(c)]:.3g}" if r["at"][str(c)] is not None else "—" for c in cps)
            + f" | {r['final_rel_l2']:.3g} | {r['median_last_20pct']:.3g} | {r['min_rel_l2']:.3g} | "
            f"{r['last_rows'] or '—'} |\n" for r in results)
        with open(args.md, "w") as f:
            f.write(head + body)


if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    main()
