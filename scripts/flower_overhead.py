"""Per-exchange overhead of Flower as fedsciml's transport: in-process vs Flower simulation vs a real deployment.

The same gn run (bratu, 2 clients, ``--rounds`` LM iterations, one thread per
client, per-client evaluation) three ways; for each, the median wall time of
one exchange (``transport.ask``: push to every client, their work, all
replies back).  The Flower overhead of an exchange is its median minus the
in-process median (the clients' own work).  Prints one table (and JSON with
``--json``); records the load average.

    OMP_NUM_THREADS=1 nice python scripts/flower_overhead.py --rounds 10
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

from fedsciml.federated.transport import Transport


class TimedTransport(Transport):
    """Wraps a transport; records the wall time of each ask."""

    def __init__(self, inner):
        self.inner, self.times = inner, []
        self.client_ids, self.sample_counts = inner.client_ids, inner.sample_counts

    def ask(self, client_ids, request):
        t0 = time.perf_counter()
        out = self.inner.ask(client_ids, request)
        self.times.append(time.perf_counter() - t0)
        return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="bratu")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--skip", default="", help="comma-separated: simulation,deployment")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import fedsciml as fs
    from fedsciml.federated.client import Client
    from fedsciml.federated.transport import LocalTransport
    from fedsciml.problems import get_problem

    p = get_problem(args.problem)
    K, opts = args.clients, dict(rounds=args.rounds, batched=False)
    torch.manual_seed(0)
    tt = TimedTransport(LocalTransport([Client(i, o) for i, o in enumerate(p.client_objectives(K, seed=0))],
                                       vectorize=False))
    t0 = time.perf_counter()
    loc = fs.solve(p, "gn", clients=K, transport=tt, **opts)
    rows = [{"engine": "in-process", "exchanges": len(tt.times), "median_s": statistics.median(tt.times),
             "wall_s": loc.wall_time_s, "setup_s": time.perf_counter() - t0 - loc.wall_time_s}]
    same = {}
    skip = set(args.skip.split(","))
    if "simulation" not in skip:
        from fedsciml.flower.simulation import solve_many

        t0 = time.perf_counter()
        r = solve_many([dict(problem=p, method="gn", clients=K, seed=0, **opts)], K)[0]
        e = r.extra["engine"]
        rows.append({"engine": "flower simulation", "exchanges": e["exchanges"], "median_s": e["exchange_median_s"],
                     "wall_s": r.wall_time_s, "setup_s": time.perf_counter() - t0 - r.wall_time_s})
        same["simulation"] = bool(torch.equal(r.theta, loc.theta))
    if "deployment" not in skip:
        from fedsciml.flower.deploy import LocalDeployment

        t0 = time.perf_counter()
        with LocalDeployment(K, threads=1) as d:
            t1 = time.perf_counter()
            r, theta = d.run(args.problem, "gn", **opts)
        e = r.extra["engine"]
        rows.append({"engine": "flower deployment (127.0.0.1)", "exchanges": e["exchanges"],
                     "median_s": e["exchange_median_s"], "wall_s": r.wall_time_s,
                     "setup_s": time.perf_counter() - t0 - r.wall_time_s, "processes_start_s": t1 - t0})
        same["deployment"] = bool(torch.equal(theta, loc.theta))
    base = rows[0]["median_s"]
    load = os.getloadavg()
    print(f"{args.problem}, gn, {K} clients, {args.rounds} rounds, 1 thread per client; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    print(f"{'engine':32s} {'exchanges':>9s} {'median s':>9s} {'overhead s':>10s} {'run s':>8s} {'setup s':>8s}")
    for r in rows:
        print(f"{r['engine']:32s} {r['exchanges']:9d} {r['median_s']:9.3f} {r['median_s'] - base:10.3f} "
              f"{r['wall_s']:8.2f} {r['setup_s']:8.1f}")
    print("bitwise equal to in-process:", same)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "bitwise": same, "load": load}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
