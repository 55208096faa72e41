"""Time outside the solver on the path users run: ``python -m fedsciml solve bratu --clients 4`` (issue 32).

Each repetition starts a fresh interpreter that runs the CLI's own ``main`` (what ``python -m fedsciml`` runs) with
one probe: :meth:`fedsciml.runtime.loop.Simulation.run` is wrapped to note the moment the round loop starts (after
the imports, the parser, the plan, the clients' objectives, θ₀, the pre-run checks and the transport) — "before the
first round".  The parent measures the whole command's wall time; ``result.json`` gives ``solver_seconds`` (the
method's run) and ``wall_seconds`` (the driver's whole call).  Also timed: ``python -m fedsciml --help`` and a bare
``import torch`` (the floor every command pays).

Usage: ``python scripts/bench/startup.py [--reps 3] [--threads N] [--md reproductions/startup.md]`` (a quiet
machine: ``uptime`` load < 1.5; ``--md`` writes the lines with the command, commit, thread count and load).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import sys, time
t0 = time.perf_counter()
import torch
t_torch = time.perf_counter()
import fedsciml.runtime.loop as loop
_run = loop.Simulation.run
first = []
def run(self, *a, **k):
    first.append(time.perf_counter())
    return _run(self, *a, **k)
loop.Simulation.run = run
from fedsciml.cli import main
rc = main(sys.argv[1:])
t_end = time.perf_counter()
print("PROBE", t_torch - t0, (first[0] - t0) if first else -1.0, t_end - t0, rc, file=sys.stderr)
"""


def timed(cmd, env):
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    return time.perf_counter() - t, p


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the children (default: unset)")
    ap.add_argument("--md", default=None, help="also write the lines to this file, with the command, commit and load")
    a = ap.parse_args(argv)
    load0 = f"{os.getloadavg()[0]:.2f}"
    env = dict(os.environ)
    if a.threads:
        env["OMP_NUM_THREADS"] = str(a.threads)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.reps):
            out = os.path.join(d, f"r{i}.json")
            wall, p = timed([sys.executable, "-c", CHILD, "solve", "bratu", "--clients", "4", "--json", out], env)
            probe = [ln for ln in p.stderr.splitlines() if ln.startswith("PROBE")]
            if p.returncode != 0 or not probe:
                sys.exit(f"the main job failed (rc {p.returncode}):\n{p.stderr[-2000:]}")
            _, torch_s, first_s, end_s, _ = probe[-1].split()
            res = json.load(open(out))
            boot = wall - float(end_s)  # interpreter start and exit, outside the child's clock
            rows.append({"wall": wall, "torch": float(torch_s), "before_first_round": boot + float(first_s),
                         "solver": res["solver_seconds"], "driver_wall": res["wall_seconds"],
                         "outside_solver": wall - res["solver_seconds"]})
        helps = [timed([sys.executable, "-m", "fedsciml", "--help"], env)[0] for _ in range(a.reps)]
        torches = [timed([sys.executable, "-c", "import torch"], env)[0] for _ in range(a.reps)]
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    lines = [f"main job (python -m fedsciml solve bratu --clients 4), median of {a.reps}, wall seconds:"]
    lines += [f"  {k:20s} {v:7.2f}" for k, v in med.items()]
    lines.append(f"  before first round, after torch's import: "
                 f"{med['before_first_round'] - statistics.median(torches):.2f}")
    lines.append(f"python -m fedsciml --help: {statistics.median(helps):.2f} s (it imports no torch); "
                 f"python -c 'import torch': {statistics.median(torches):.2f} s")
    print("\n".join(lines))
    if a.md:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True).stdout.strip()
        head = [f"# Start-up of the main job ({time.strftime('%Y-%m-%d')})", "",
                f"Command: `python scripts/bench/startup.py {' '.join(argv if argv is not None else sys.argv[1:])}`; "
                f"commit {commit}{'+dirty' if dirty else ''}; threads {a.threads or 'default'}; "
                f"load average before/after {load0} / {os.getloadavg()[0]:.2f} (1 min).", "", "```"]
        with open(a.md, "w") as f:
            f.write("\n".join(head + lines + ["```", ""]))


if __name__ == "__main__":
    main()
