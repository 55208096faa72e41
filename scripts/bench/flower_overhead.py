"""Per-exchange overhead of Flower as fedsciml's transport: in-process vs Flower simulation vs a real deployment.

The same gn run (bratu, 2 clients, ``--rounds`` LM iterations, one thread per
client, per-client evaluation) three ways; for each, the median wall time of
one exchange (``transport.ask``: push to every client, their work, all
replies back).  The Flower overhead of an exchange is its median minus the
in-process median (the clients' own work).  Then the main job as a user
runs it, ``python -m fedsciml solve bratu --clients 2 --method gn --rounds 3``
(``--main``), with ``--engine local`` and ``--engine flower``: the wall time
of the whole command (imports, Ray, the nodes' set-up included) and its
solver time.  Prints the tables (JSON with ``--json``, a markdown table for
the README with ``--markdown``) and the load average before and after: on a
shared machine, compare only ratios taken in the same run.

    OMP_NUM_THREADS=1 nice python scripts/bench/flower_overhead.py --rounds 10 --markdown /tmp/overhead.md
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from fedsciml.runtime.transport import Transport


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

    def by_query(self) -> dict:
        from fedsciml.engines.flower.transport import medians_by_query

        return medians_by_query(self.times, self.queries)


def _q(row: dict, query: str) -> float:
    """Median seconds of one query's exchanges (``gn_loss``: a few floats each way; ``gn_stats``: θ down,
    the packed JᵀJ up)."""
    return float(row.get("by_query", {}).get(query, {}).get("median_s", float("nan")))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="bratu")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--skip", default="", help="comma-separated: simulation,deployment")
    ap.add_argument("--main", default="solve bratu --clients 2 --method gn --rounds 3",
                    help="the main job timed with --engine local and --engine flower ('' to skip)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None, help="write the tables as markdown here")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()
    torch.set_num_threads(1)
    import fedsciml as fs
    from fedsciml.runtime.client import Client
    from fedsciml.runtime.transport import LocalTransport
    from fedsciml.problems import get_problem

    p = get_problem(args.problem)
    K, opts = args.clients, dict(rounds=args.rounds, batched=False)
    torch.manual_seed(0)
    tt = TimedTransport(LocalTransport([Client(i, o) for i, o in enumerate(p.client_objectives(K, seed=0))],
                                       vectorize=False))
    t0 = time.perf_counter()
    loc = fs.solve(p, "gn", clients=K, transport=tt, **opts)
    rows = [{"engine": "in-process", "exchanges": len(tt.times), "median_s": statistics.median(tt.times),
             "wall_s": loc.wall_time_s, "setup_s": time.perf_counter() - t0 - loc.wall_time_s,
             "by_query": tt.by_query()}]
    same = {}
    skip = set(args.skip.split(","))
    if "simulation" not in skip:
        from fedsciml.engines.flower.simulation import solve_many

        t0 = time.perf_counter()
        r = solve_many([dict(problem=p, method="gn", clients=K, seed=0, **opts)], K)[0]
        e = r.extra["engine"]
        rows.append({"engine": "flower simulation", "exchanges": e["exchanges"], "median_s": e["exchange_median_s"],
                     "by_query": e.get("by_query", {}),
                     "wall_s": r.wall_time_s, "setup_s": time.perf_counter() - t0 - r.wall_time_s})
        same["simulation"] = bool(torch.equal(r.theta, loc.theta))
    if "deployment" not in skip:
        from fedsciml.engines.flower.deploy import LocalDeployment

        t0 = time.perf_counter()
        with LocalDeployment(K, threads=1) as d:
            t1 = time.perf_counter()
            r, theta = d.run(args.problem, "gn", **opts)
        e = r.extra["engine"]
        rows.append({"engine": "flower deployment (127.0.0.1)", "exchanges": e["exchanges"],
                     "median_s": e["exchange_median_s"], "wall_s": r.wall_time_s, "by_query": e.get("by_query", {}),
                     "setup_s": time.perf_counter() - t0 - r.wall_time_s, "processes_start_s": t1 - t0})
        same["deployment"] = bool(torch.equal(theta, loc.theta))
    main_rows = main_job(args.main) if args.main else []
    base = rows[0]["median_s"]
    load = os.getloadavg()
    lines = [f"{args.problem}, gn, {K} clients, {args.rounds} rounds, 1 thread per client; load average "
             f"{load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} at the start, {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
             f"at the end, on {os.cpu_count()} cores", "",
             "| engine | exchanges | median exchange (s) | overhead per exchange (s) | small exchange: gn_loss "
             "median (s) | gn_stats median (s) | run (s) | start-up (s) | θ bitwise = in-process |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        bit = same.get(r["engine"].split()[1], "—") if r["engine"] != "in-process" else "—"
        lines.append(f"| {r['engine']} | {r['exchanges']} | {r['median_s']:.3f} | "
                     f"{r['median_s'] - base:.3f} | {_q(r, 'gn_loss'):.3f} | {_q(r, 'gn_stats'):.3f} | "
                     f"{r['wall_s']:.2f} | {r['setup_s']:.1f} | {bit} |")
    if main_rows:
        lines += ["", f"main job `python -m fedsciml {args.main}`:", "",
                  "| engine | wall time of the command (s) | solver time (s) | exchanges | final loss |",
                  "|---|---|---|---|---|"]
        for r in main_rows:
            lines.append(f"| --engine {r['engine']} | {r['wall_s']:.1f} | {r['solver_s']:.2f} | "
                         f"{r.get('exchanges', '—')} | {r['loss']:.6e} |")
        w = {r["engine"]: r["wall_s"] for r in main_rows}
        if w.get("local"):
            lines += ["", f"same-run ratio flower/local wall time: {w['flower'] / w['local']:.1f}×"]
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
            cmd = [sys.executable, "-m", "fedsciml", *shlex.split(command), "--engine", engine, "--threads", "1",
                   "--quiet", "--json", js]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, env=env)
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
