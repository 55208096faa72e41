"""One command: a stock SuperLink and K stock SuperNodes on 127.0.0.1, one fedsciml run over them, everything stopped.

    python scripts/tools/flower_deploy.py bratu --clients 2 --method gn --rounds 5
    python scripts/tools/flower_deploy.py ridge-linear --clients 3 --method one-shot

Needs ``pip install ".[flower]"``.  Every process it starts (SuperLink, the
SuperLink's ServerApp process, the K nodes, ``flwr run``) runs in its own
process group on 127.0.0.1 and is stopped at the end, also after an error or
Ctrl-C.  ``--keep DIR`` keeps the logs, the run config and the result JSON
there.  (Each message costs a fresh ``flwr-clientapp`` process on the stock
SuperNode: seconds per exchange, see ``docs/flower.md``.)
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problem")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--method", default="gn", help="gn | fipa | fedavg | fedprox | one-shot")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--options", default="{}", help='further method options as JSON, e.g. \'{"rank": 0}\'')
    ap.add_argument("--problem-options", default="{}", help="problem options as JSON")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a node may take for one answer")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per node and for the ServerApp")
    ap.add_argument("--keep", default=None, help="directory for logs, the app and the result (default: temporary)")
    ap.add_argument("--json", default=None, help="write the result JSON here")
    args = ap.parse_args(argv)
    try:
        options = json.loads(args.options)
        problem_options = json.loads(args.problem_options)
    except json.JSONDecodeError as e:
        print(f"error: --options/--problem-options must be JSON objects: {e}", file=sys.stderr)
        return 2
    if args.rounds is not None:
        options["rounds"] = args.rounds
    if args.clients < 1:
        print(f"error: --clients must be ≥ 1, got {args.clients}", file=sys.stderr)
        return 2
    from fedsciml.engines.flower.deploy import LocalDeployment

    with LocalDeployment(args.clients, args.keep, threads=args.threads) as d:
        res, _ = d.run(args.problem, args.method, seed=args.seed, problem_options=problem_options,
                       timeout_s=args.timeout, **options)
    eng = res.extra.get("engine", {})
    print(f"{res.problem} · {res.method} · {res.clients} SuperNodes on 127.0.0.1: {res.metric_name} = {res.error:.3e}, "
          f"loss = {res.final.get('loss'):.3e}, {res.extra.get('rounds')} round(s), {res.wall_time_s:.2f} s; "
          f"{eng.get('exchanges')} exchanges, median {eng.get('exchange_median_s', float('nan')):.3f} s each")
    if args.json:
        res.to_json(args.json)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
