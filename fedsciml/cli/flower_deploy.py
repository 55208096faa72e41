"""``python -m fedsciml flower deploy PROBLEM …``: a stock Flower deployment on this machine — one
``flower-superlink`` and K ``flower-supernode`` s on 127.0.0.1 (:class:`fedsciml.engines.flower.deploy.LocalDeployment`)
— one fedsciml run over it, everything stopped at the end (also after an error or Ctrl-C).

Progress goes to standard error as it happens (the processes starting, the run submitted, then the ServerApp's
own lines: each round as ``flwr run --stream`` shows it), so the minutes a deployment takes (a fresh
``flwr-clientapp`` process per message: seconds per exchange, ``docs/guide/flower.md``) are not silent; ``-q``
silences them.  The one summary line goes to standard output."""
from __future__ import annotations

import argparse
import json
import math
import os

from fedsciml.cli.common import status
from fedsciml.runtime.registry import FEDERATED_METHOD


def _json_object(text: str, flag: str) -> dict:
    from fedsciml.cli.common import CLIError

    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise CLIError(f"flower deploy: {flag} must be a JSON object, e.g. '{{\"rounds\": 5}}': {e.msg}") from None
    if not isinstance(value, dict):
        raise CLIError(f"flower deploy: {flag} must be a JSON object, e.g. '{{\"rounds\": 5}}', got {text!r}")
    return value


def add_parser(flower_subparsers) -> argparse.ArgumentParser:
    """``flower deploy``'s arguments."""
    from fedsciml.cli.common import positive_seconds

    p = flower_subparsers.add_parser(
        "deploy", help="a stock Flower deployment on 127.0.0.1 (one flower-superlink, K flower-supernodes), one "
                       "fedsciml run over it, everything stopped at the end; progress on stderr",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("problem", metavar="PROBLEM", help="a registered problem (python -m fedsciml list)")
    p.add_argument("--clients", type=int, default=2, help="K: SuperNodes, one per client (default 2)")
    p.add_argument("--method", default=FEDERATED_METHOD,
                   help=f"gn | fipa | fedavg | fedprox | one-shot … (default {FEDERATED_METHOD}, as solve's with "
                        f"--clients K > 1 and a Flower App's run config)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=None, help="the method's rounds (else its default)")
    p.add_argument("--options", default="{}", metavar="JSON", help='further method options, e.g. \'{"rank": 0}\'')
    p.add_argument("--problem-options", default="{}", metavar="JSON", help="problem options as a JSON object")
    p.add_argument("--timeout", type=positive_seconds, default=300.0, metavar="SECONDS",
                   help="seconds a node may take for one answer (default 300)")
    p.add_argument("--dead-after", type=positive_seconds, default=None, metavar="SECONDS",
                   help="stop the run, naming the client, when a node has answered nothing for this long "
                        "(default 600; the rounds before are kept)")
    p.add_argument("--wait", type=positive_seconds, default=3600.0, metavar="SECONDS",
                   help="stop the run when it has no result after this many seconds (default 3600)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each node and of the ServerApp (default 1)")
    p.add_argument("--keep", default=None, metavar="DIR",
                   help="keep the logs, the run config and the result in DIR (default: a temporary directory)")
    p.add_argument("--json", default=None, metavar="FILE", help="write the Result's JSON to FILE")
    return p


def run(args) -> int:
    """Start the deployment, run the job with its progress on stderr, print the summary; 0 on success.  A
    deployment that cannot start or a run that ends without its result: one line (:class:`EngineFailed`, exit 1);
    the logs stay in ``--keep DIR``."""
    from fedsciml.cli.common import CLIError
    from fedsciml.engines.flower.simulation import EngineFailed

    if args.clients < 1:
        raise CLIError(f"flower deploy: --clients must be ≥ 1, got {args.clients}")
    if args.threads < 1:
        raise CLIError(f"flower deploy: --threads must be ≥ 1, got {args.threads}")
    if args.rounds is not None and args.rounds < 1:
        raise CLIError(f"flower deploy: --rounds must be ≥ 1, got {args.rounds}")
    from fedsciml.engines.processes import PROCESSES_PER_CORE, cores

    cap = PROCESSES_PER_CORE * cores()
    if args.clients > cap:  # each client is a flower-supernode process here: 10⁸ of them started until memory ran out
        raise CLIError(f"flower deploy: --clients {args.clients:,} starts one flower-supernode process per client on "
                       f"this machine's {cores()} core(s); at most {cap} ({PROCESSES_PER_CORE} per core)")
    if args.keep is not None and not args.keep.strip():  # '' was taken for "no --keep": the logs were not kept
        raise CLIError(f"flower deploy: --keep {args.keep!r} names no folder; give a folder for the logs and the "
                       f"result (or leave --keep out)")
    if args.keep is not None and os.path.exists(args.keep) and not os.path.isdir(args.keep):
        raise CLIError(f"flower deploy: --keep {args.keep!r} is not a folder; give a folder for the logs and the result")
    options = _json_object(args.options, "--options")
    problem_options = _json_object(args.problem_options, "--problem-options")
    if args.rounds is not None:
        options["rounds"] = args.rounds
    from fedsciml.problems import get_problem

    try:  # a bad problem or option: one line now, not after the processes started
        get_problem(args.problem, **problem_options)
    except (KeyError, ValueError, TypeError) as e:
        raise CLIError(f"flower deploy: {str(e.args[0]) if e.args else e}") from None
    from fedsciml.engines.flower.runconfig import RunConfigError, check_job

    try:  # the ServerApp's own checks of the job (method, seed, method options), before any process starts
        check_job({"kind": "solve", "problem": args.problem, "problem_options": problem_options, "method": args.method,
                   "clients": args.clients, "seed": args.seed, "options": options}, "flower deploy")
    except RunConfigError as e:
        raise CLIError(str(e)) from None
    if args.json:
        from fedsciml.runtime.results import check_output_file

        try:
            check_output_file(args.json, "--json")
        except ValueError as e:
            raise CLIError(f"flower deploy: {e}") from None
    from fedsciml.engines.flower.deploy import LocalDeployment, ServerAppFailed
    from fedsciml.runtime.interrupt import FAILED

    status(f"flower deploy: starting flower-superlink and {args.clients} flower-supernode(s) on 127.0.0.1 …")
    from fedsciml.engines.flower.resultio import read_result

    logs = f" (logs in {args.keep})" if args.keep else " (--keep DIR keeps the logs)"
    out = None
    try:
        with LocalDeployment(args.clients, args.keep, threads=args.threads, log=status) as d:
            proc, out = d.submit(args.problem, args.method, seed=args.seed, problem_options=problem_options,
                                 timeout_s=args.timeout, dead_after_s=args.dead_after, **options)
            status(f"flower deploy: run submitted ({args.problem}, {args.method}, {args.clients} clients); the "
                   f"ServerApp's log follows")
            d.wait_files(proc, [out], args.wait, echo=lambda line: status(f"  {line}") if line.strip() else None)
            res = read_result(str(out))
            if FAILED in (res.stop_reason, res.extra.get("stop_reason")):  # a job stopped after some rounds: the ServerApp wrote those, and why
                raise ServerAppFailed(str(res.extra.get("error") or "a round failed"))
    except (RuntimeError, TimeoutError) as e:  # the run's log was echoed above: its first line here
        from fedsciml.engines.flower.resultio import ready

        kept = ""
        if out is not None and ready(str(out)) and args.json:  # a dead site stopped it after some rounds: the ServerApp wrote those
            read_result(str(out)).to_json(args.json)
            kept = f"; the rounds before are written: {args.json}"
        what = "the run failed: " if isinstance(e, ServerAppFailed) else ""
        raise EngineFailed(f"flower deploy: {what}{str(e).splitlines()[0]}{kept}{logs}") from None
    eng = res.extra.get("engine", {})
    median = eng.get("exchange_median_s")
    loss = res.final.get("loss")
    print(f"{res.problem} · {res.method} · {res.clients} SuperNodes on 127.0.0.1: {res.metric_name} = {res.error:.3e}, "
          f"loss = {loss if loss is None else format(loss, '.3e')}, {res.extra.get('rounds')} round(s), "
          f"{res.wall_time_s:.2f} s; {eng.get('exchanges')} exchanges, median "
          f"{median if median is None or not math.isfinite(median) else format(median, '.3f')} s each")
    if args.json:
        res.to_json(args.json)
        status(f"wrote {args.json}")
    return 0
