"""What Flower costs fedsciml: in process vs Flower's simulation runtime vs a deployment of stock Flower processes.

For each engine, the same work — ``gn`` (bratu, ``--clients`` clients, ``--rounds`` LM iterations,
per-client evaluation) and ``fipa`` (``--rounds`` rounds) — with one thread per client:

* start-up: the engine's wall time outside the solver (processes, ``flwr run``, Ray, the nodes' set-up);
* the median wall time of one exchange (push to every client, their work, all replies back) by query:
  ``gn_loss`` (a small exchange: θ down, one float up), ``gn_stats`` (θ down, the packed JᵀJ up), ``update``
  (fipa's local solve and sketch);
* idle CPU: CPU seconds the engine's processes burn over ``--idle`` seconds with no run (stock SuperLink and
  SuperNodes with their SuperExecs; the simulation SuperLink);

then the main job as a user runs it, ``python -m fedsciml <--main>`` with ``--engine local`` and ``--engine
flower`` (the whole command's wall time, imports and start-up included), and the same-run ratio.  The machine
may be shared: the load average is printed at the start and the end; compare only ratios taken in one run.

    OMP_NUM_THREADS=1 nice python scripts/bench/flower_overhead.py --markdown /tmp/overhead.md
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from fedsciml.runtime.transport import Transport  # noqa: E402

QUERIES = ("gn_loss", "gn_stats", "update")


class TimedTransport(Transport):
    """Wraps a transport; records the wall time of each ask."""

    def __init__(self, inner):
        self.inner, self.times, self.queries = inner, [], []
        self.client_ids, self.sample_counts = inner.client_ids, inner.sample_counts

    def ask(self, client_ids, request):
        t0 = time.perf_counter()
        out = self.inner.ask(client_ids, request)
        self.times.append(time.perf_counter() - t0)
        self.queries.append(request.query)
        return out


def _by_query(times, queries) -> dict:
    return {q: statistics.median([t for t, qq in zip(times, queries) if qq == q]) for q in set(queries)}


def _merge(results) -> dict:
    out: dict = {}
    for r in results:
        for q, v in r.extra["engine"]["by_query"].items():
            out[q] = v["median_s"]
    return out


def group_cpu_s(pgids) -> float:
    """CPU seconds (user + system, children that were waited for included) of every process in these groups."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in pgids:  # fields[2]: the process group (stat field 5)
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / tick


def idle_cpu(link, seconds: float) -> float:
    pgids = {p.pid for p in link.procs.values()}
    c0 = group_cpu_s(pgids)
    time.sleep(seconds)
    return group_cpu_s(pgids) - c0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="bratu")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--idle", type=float, default=30.0, help="seconds of idle time measured per engine")
    ap.add_argument("--skip", default="", help="comma-separated: simulation,deployment,main")
    ap.add_argument("--main", default="solve bratu --clients 4",
                    help="the main job timed with --engine local and --engine flower")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None, help="write the tables as markdown here")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    torch.set_num_threads(1)
    import fedsciml as fs
    from fedsciml.problems import get_problem
    from fedsciml.runtime.client import Client
    from fedsciml.runtime.transport import LocalTransport

    p = get_problem(args.problem)
    K, R = args.clients, args.rounds
    runs = [("gn", dict(rounds=R, batched=False)), ("fipa", dict(rounds=R))]
    skip = set(args.skip.split(","))
    rows, same = [], {}
    # in process, each client on its own (what one Flower node computes)
    t0 = time.perf_counter()
    loc, times, queries = {}, [], []
    for m, o in runs:
        torch.manual_seed(0)
        tt = TimedTransport(LocalTransport([Client(i, ob) for i, ob in enumerate(p.client_objectives(K, seed=0))],
                                           vectorize=False))
        loc[m] = fs.solve(p, m, clients=K, transport=tt, **o)
        times += tt.times
        queries += tt.queries
    solver = sum(r.wall_time_s for r in loc.values())
    rows.append({"engine": "in process", "startup_s": time.perf_counter() - t0 - solver, "solver_s": solver,
                 "by_query": _by_query(times, queries), "idle_cpu_s": 0.0})
    if "simulation" not in skip:
        from fedsciml.engines.flower.deploy import LocalSuperLink
        from fedsciml.engines.flower.simulation import solve_many

        t0 = time.perf_counter()
        res = solve_many([dict(problem=p, method=m, clients=K, seed=0, **o) for m, o in runs], K)
        solver = sum(r.wall_time_s for r in res)
        with LocalSuperLink(simulation=True) as link:
            idle = idle_cpu(link, args.idle)
        rows.append({"engine": "Flower simulation (flwr run)", "startup_s": time.perf_counter() - t0 - solver - args.idle,
                     "solver_s": solver, "by_query": _merge(res), "idle_cpu_s": idle})
        same["Flower simulation (flwr run)"] = all(torch.equal(r.theta, loc[m].theta) for r, (m, _) in zip(res, runs))
    if "deployment" not in skip:
        from fedsciml.engines.flower.deploy import LocalDeployment

        t0 = time.perf_counter()
        with LocalDeployment(K, threads=1) as d:
            time.sleep(5.0)  # let the SuperNodes register and settle before measuring idle
            idle = idle_cpu(d, args.idle)
            res = [d.run(args.problem, m, wait_s=3600, name=m, **o)[0] for m, o in runs]
        solver = sum(r.wall_time_s for r in res)
        name = f"stock deployment, {K} SuperNodes on 127.0.0.1"
        rows.append({"engine": name, "startup_s": time.perf_counter() - t0 - solver - args.idle - 5.0,
                     "solver_s": solver, "by_query": _merge(res), "idle_cpu_s": idle})
        same[name] = all(torch.equal(r.theta, loc[m].theta) for r, (m, _) in zip(res, runs))
    main_rows = main_job(args.main) if "main" not in skip and args.main else []
    load = os.getloadavg()
    lines = [f"{args.problem}, {K} clients, gn and fipa {R} rounds each, 1 thread per client; load average "
             f"{load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} at the start, {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
             f"at the end, on {os.cpu_count()} cores", "",
             "| engine | start-up (s) | small exchange: gn_loss (s) | gn_stats (s) | update (s) | solver (s) | "
             f"idle CPU (CPU-s per {args.idle:.0f} s) | θ bitwise = in process |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        q = r["by_query"]
        lines.append(f"| {r['engine']} | {r['startup_s']:.1f} | " + " | ".join(
            f"{q[k]:.3f}" if k in q else "—" for k in QUERIES) + f" | {r['solver_s']:.2f} | {r['idle_cpu_s']:.2f} | "
            f"{same.get(r['engine'], '—')} |")
    if main_rows:
        lines += ["", f"main job `python -m fedsciml {args.main} --engine E` (whole command):", "",
                  "| engine | wall time (s) | solver (s) | exchanges | final loss |", "|---|---|---|---|---|"]
        for r in main_rows:
            lines.append(f"| --engine {r['engine']} | {r['wall_s']:.1f} | {r['solver_s']:.2f} | "
                         f"{r.get('exchanges', '—')} | {r['loss']:.6e} |")
        w = {r["engine"]: r["wall_s"] for r in main_rows}
        lines += ["", f"same-run ratio flower / local, whole command: {w['flower'] / w['local']:.2f}×"]
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "bitwise": same, "main": main_rows, "load_start": load0, "load_end": load},
                      f, indent=2)
    return 0


def main_job(command: str) -> list:
    """Wall time of ``python -m fedsciml COMMAND --engine E --quiet --json …`` for E = local, flower."""
    import shlex
    import subprocess
    import tempfile

    out = []
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for engine in ("local", "flower"):
        with tempfile.TemporaryDirectory() as tmp:
            js = os.path.join(tmp, "r.json")
            cmd = [sys.executable, "-m", "fedsciml", *shlex.split(command), "--engine", engine, "--quiet", "--json", js]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root)
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
            with open(js) as f:
                d = json.load(f)
        r = d["runs"][0] if "runs" in d else d
        row = {"engine": engine, "wall_s": wall, "solver_s": r["wall_time_s"], "loss": r["final"]["loss"]}
        if engine == "flower":
            row["exchanges"] = r["extra"]["engine"]["exchanges"]
        out.append(row)
    return out


if __name__ == "__main__":
    sys.exit(main())
