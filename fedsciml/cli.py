"""Command line: ``python -m fedsciml {list,solve,ridge,bench} ...``.

Bad input (unknown problem or method, an option out of range) exits with
status 2 and one line on stderr, no traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

EXIT_USAGE = 2


class CLIError(Exception):
    pass


def _problem_param_flags():
    from fedsciml.problems import REGISTRY

    flags = {}
    for cls in REGISTRY.values():
        for name, spec in cls.params.items():
            flags.setdefault(name, spec)
    return flags


def _add_solve_parser(sub):
    p = sub.add_parser(
        "solve",
        help="solve a registered problem (centralized or federated)",
        description="Solve PROBLEM. Without --clients (or with --method centralized) the pooled centralized "
                    "Levenberg–Marquardt reference runs; with --clients K the data are split among K clients and "
                    "a federated method runs (default: fipa).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("problem", help="problem name (see `python -m fedsciml list`)")
    p.add_argument("--method", default=None, help="centralized | gn | fipa | fedavg | fedprox")
    p.add_argument("--clients", type=int, default=None, help="number of clients K (default: the problem's, usually 1)")
    p.add_argument("--optimizer", default="lm", choices=["lm", "adam", "lbfgs"], help="centralized optimizer")
    p.add_argument("--seed", type=int, default=0, help="seed for sampling, initialization and client selection")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--engine", default="local", choices=["local", "flower"],
                   help="who carries the clients' messages: this process, or Flower's simulation engine "
                        "(pip install \"fedsciml[flower]\"; same strategy, same numbers)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch/BLAS (default: all cores, or 1 when the load average already "
                        "exceeds the core count — oversubscribed BLAS threads spin and run several times slower)")
    p.add_argument("--budget", type=float, default=None, help="time budget in seconds (solver time)")
    p.add_argument("--max-iters", type=int, default=None, help="iteration cap (centralized)")
    p.add_argument("--tol", type=float, default=0.0, help="stop when the mean loss ½‖r‖²/N falls below this")
    p.add_argument("--lr", type=float, default=None, help="learning rate (Adam/L-BFGS, local Adam)")
    fed = p.add_argument_group("federated options")
    fed.add_argument("--rounds", type=int, default=None, help="communication rounds")
    fed.add_argument("--rank", type=int, default=None, help="FIPA: rank r of each client's curvature sketch")
    fed.add_argument("--adaptive", action="store_true", help="FIPA: adaptive per-client rank and local steps")
    fed.add_argument("--merge", default=None, choices=["pinv", "qr"], help="FIPA server merge")
    fed.add_argument("--beta", type=float, default=None, help="FIPA QR merge regularization β")
    fed.add_argument("--gamma", type=float, default=None, help="FIPA QR merge step γ")
    fed.add_argument("--local", default=None, choices=["adam", "gn"], help="local solver (FIPA/FedAvg/FedProx)")
    fed.add_argument("--local-steps", type=int, default=None, help="local steps τ per round")
    fed.add_argument("--mu", type=float, default=None, help="FedProx proximal weight μ")
    fed.add_argument("--participation", type=float, default=None, help="fraction of clients sampled per round")
    fed.add_argument("--dropout", type=float, default=None, help="probability a sampled client fails to answer")
    fed.add_argument("--compare", default=None, help="comma-separated methods to run side by side, e.g. fedavg,gn,fipa")
    fed.add_argument("--checkpoint", default=None, help="directory for per-round checkpoints")
    fed.add_argument("--resume", action="store_true", help="resume from --checkpoint")
    prob = p.add_argument_group("problem options (see `list`; each applies to the problems that declare it)")
    for name, spec in sorted(_problem_param_flags().items()):
        prob.add_argument("--" + name.replace("_", "-"), dest="popt_" + name, default=None, help=spec.help)
    out = p.add_argument_group("output")
    out.add_argument("--json", default=None, help="write result JSON to this file")
    out.add_argument("--out", default=None, help="directory for result.json, history.csv and PNG plots")
    out.add_argument("--quiet", action="store_true", help="no progress lines")
    out.add_argument("--every", type=int, default=10, help="progress line every N steps/rounds")
    return p


FED_KEYS = ("rounds", "rank", "adaptive", "merge", "beta", "gamma", "local", "local_steps", "mu", "participation",
            "dropout", "checkpoint", "resume")


def cmd_list(args):
    from fedsciml.problems import list_problems
    from fedsciml.runner import available_methods

    print("problems:")
    for name, desc in list_problems():
        print(f"  {name:20s} {desc}")
    print("methods:")
    descr = {
        "centralized": "pooled data, Levenberg–Marquardt / Adam / L-BFGS (the reference, not federated)",
        "gn": "exact federated Gauss–Newton / Levenberg–Marquardt (clients send JᵀJ, Jᵀr)",
        "fipa": "Fisher-informed parameterwise aggregation (full, --rank r, --adaptive, --merge qr)",
        "fedavg": "FedAvg, data-size weighted average of local updates",
        "fedprox": "FedProx, FedAvg with a proximal term μ",
    }
    for m in available_methods():
        print(f"  {m:20s} {descr.get(m, '')}")
    extra = []
    if _has_module("fedsciml.ridge.cli"):
        extra.append("  ridge                one-shot federated ridge (python -m fedsciml ridge --help)")
    if _has_module("fedsciml.images.cli"):
        extra.append("  bench images         image-classification aggregator benchmarks (python -m fedsciml bench images --help)")
    if extra:
        print("other commands:")
        print("\n".join(extra))
    return 0


def _has_module(name):
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def cmd_solve(args):
    from fedsciml.federated.simulation import RoundFailed
    from fedsciml.problems import get_problem
    from fedsciml.runner import available_methods, solve

    popts = {k[5:]: v for k, v in vars(args).items() if k.startswith("popt_") and v is not None}
    problem = get_problem(args.problem, **popts)
    method = args.method or ("fipa" if args.clients and args.clients > 1 else "centralized")
    if args.budget is not None and args.budget <= 0:
        raise CLIError(f"--budget must be > 0 seconds, got {args.budget}")
    if args.clients is not None and args.clients < 1:
        raise CLIError(f"--clients must be ≥ 1, got {args.clients}")
    _set_threads(args.threads, quiet=args.quiet)
    common = dict(budget=args.budget, tol=args.tol, lr=args.lr, every=args.every)
    fed = {k: getattr(args, k) for k in FED_KEYS if getattr(args, k) not in (None, False)}
    methods = [method] + ([m.strip() for m in args.compare.split(",") if m.strip() and m.strip() != method] if args.compare else [])
    known = available_methods()
    for m in methods:
        if m not in known:
            raise CLIError(f"unknown method {m!r}; available: {', '.join(known)}")
    results = []
    for m in methods:
        opts = dict(common)
        if m == "centralized":
            opts.update(optimizer=args.optimizer, max_iters=args.max_iters)
        else:
            opts.update(fed)
            if args.engine != "local":  # the pooled centralized reference always runs in this process
                opts["engine"] = args.engine
            if len(methods) > 1 and "checkpoint" in opts:  # one checkpoint directory per compared method
                opts["checkpoint"] = os.path.join(opts["checkpoint"], m)
        if not args.quiet:
            print(f"[fedsciml] {problem.name} · method={m} · clients={args.clients or problem.default_clients} · "
                  f"params={problem.network().n_params if hasattr(problem, 'network') else '?'}", file=sys.stderr)
        try:
            res = solve(problem, method=m, clients=args.clients, seed=args.seed, device=args.device,
                        progress=not args.quiet, **opts)
        except RoundFailed as e:
            raise CLIError(f"{m}: {e}")
        results.append(res)
    _print_summary(results)
    _write_outputs(problem, results, args)
    return 0


def _set_threads(threads, quiet=False):
    import torch

    if threads is not None:
        if threads < 1:
            raise CLIError(f"--threads must be ≥ 1, got {threads}")
        torch.set_num_threads(threads)
        return
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except OSError:  # pragma: no cover - no load average on this platform
        return
    if cores > 1 and load >= cores and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
        if not quiet:
            print(f"[fedsciml] load average {load:.1f} ≥ {cores} cores: using 1 thread (--threads N to override)",
                  file=sys.stderr)


def _describe(r) -> str:
    """Short settings of a run for the table (local solver, rank, ...)."""
    o = r.extra.get("options", {}) if isinstance(r.extra, dict) else {}
    if r.method == "centralized":
        return f"pooled data, {r.options.get('optimizer', 'lm')}"
    if r.method == "gn":
        return "LM on ΣH_m, Σg_m"
    parts = []
    if r.method == "fipa":
        parts.append("full H_m" if o.get("rank") == 0 else f"rank {o.get('rank')}" + (" adaptive" if o.get("adaptive") else ""))
        parts.append(f"merge {o.get('merge')}")
    if o.get("local") == "gn":
        parts.append("local GN")
    elif o.get("local"):
        parts.append(f"local adam τ={o.get('local_steps')} lr={o.get('lr')}")
    if r.method == "fedprox":
        parts.append(f"μ={o.get('mu')}")
    return ", ".join(parts)


def _print_summary(results):
    r0 = results[0]
    metric = r0.metric_name
    print(f"\n{r0.problem}: {r0.clients} client(s), {r0.n_params} parameters, device {r0.device}, {r0.dtype}")
    print(f"{'method':12s} {'rounds':>6s} {'seconds':>8s} {'loss':>10s} {metric:>10s} {'floats sent':>12s} "
          f"{'floats/round':>12s}  settings")
    for r in results:
        last = r.history[-1] if r.history else {}
        rounds = r.extra.get("rounds", last.get("step", 0)) if isinstance(r.extra, dict) else last.get("step", 0)
        sent = last.get("floats_sent", 0)
        per = sent / rounds if rounds else 0
        loss = r.final.get("loss")
        print(f"{r.method:12s} {rounds:6d} {r.wall_time_s:8.2f} {loss if loss is not None else float('nan'):10.3e} "
              f"{r.error:10.3e} {sent:12d} {per:12.3g}  {_describe(r)}")
        rej = r.extra.get("rejections") if isinstance(r.extra, dict) else None
        if rej:
            print(f"{'':12s} {len(rej)} message(s) rejected, e.g. round {rej[0]['round']} client {rej[0]['client']}: "
                  f"{rej[0]['reason']}")
    print(f"final {metric} ({r0.method}): {r0.error:.3e}")


def _write_outputs(problem, results, args):
    payload = results[0].to_dict() if len(results) == 1 else {"runs": [r.to_dict() for r in results]}
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(payload, f, indent=2)
        print(f"wrote {args.json}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "result.json"), "w") as f:
            json.dump(payload, f, indent=2)
        for r in results:
            suffix = "" if len(results) == 1 else f"_{r.method}"
            r.write_history_csv(os.path.join(args.out, f"history{suffix}.csv"))
        try:
            from fedsciml.plotting import plot_runs
        except ImportError:
            plot_runs = None
        if plot_runs is not None:
            for path in plot_runs(problem, results, args.out):
                print(f"wrote {path}")
        print(f"wrote {args.out}/result.json")


def load_plugins(specs) -> list[str]:
    """Import user problem modules so their ``@register``-ed problems join the registry.

    Sources, in order: installed packages' entry points in the group
    ``fedsciml.problems``, the ``FEDSCIML_PLUGINS`` environment variable
    (``os.pathsep``-separated), and ``--plugin`` options.  Each is a module
    name or a path to a ``.py`` file.
    """
    import importlib
    import importlib.metadata
    import importlib.util

    loaded = []
    for ep in importlib.metadata.entry_points(group="fedsciml.problems"):
        ep.load()
        loaded.append(ep.name)
    env = [s for s in os.environ.get("FEDSCIML_PLUGINS", "").split(os.pathsep) if s]
    for spec in env + list(specs or []):
        if spec.endswith(".py") or os.path.sep in spec:
            if not os.path.isfile(spec):
                raise CLIError(f"plugin file {spec!r} does not exist")
            name = "fedsciml_plugin_" + os.path.splitext(os.path.basename(spec))[0]
            mod_spec = importlib.util.spec_from_file_location(name, spec)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            mod_spec.loader.exec_module(module)
        else:
            try:
                importlib.import_module(spec)
            except ImportError as e:
                raise CLIError(f"cannot import plugin module {spec!r}: {e}")
        loaded.append(spec)
    return loaded


def _pre_scan_plugins(argv):
    """``--plugin X`` must be known before the parser (whose flags come from the registry) is built."""
    out, it = [], iter(argv)
    for a in it:
        if a == "--plugin":
            out.append(next(it, ""))
        elif a.startswith("--plugin="):
            out.append(a.split("=", 1)[1])
    return out


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m fedsciml",
        description="fedsciml: federated scientific machine learning — PINNs, function fitting and ridge "
                    "regression on data split across clients, with exact Gauss–Newton, FIPA, FedAvg and "
                    "one-shot sufficient-statistic fusion.",
    )
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE",
                        help="import a module or .py file that registers extra problems (repeatable; also "
                             "FEDSCIML_PLUGINS and the 'fedsciml.problems' entry-point group)")
    sub = parser.add_subparsers(dest="command", metavar="{list,solve,ridge,bench}")
    sub.add_parser("list", help="list problems and methods")
    _add_solve_parser(sub)
    if _has_module("fedsciml.ridge.cli"):
        from fedsciml.ridge import cli as ridge_cli

        ridge_cli.add_parser(sub)
    bench = sub.add_parser("bench", help="benchmarks (bench images ...)")
    bsub = bench.add_subparsers(dest="bench_command", metavar="{images}")
    if _has_module("fedsciml.images.cli"):
        from fedsciml.images import cli as images_cli

        images_cli.add_parser(bsub)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        load_plugins(_pre_scan_plugins(argv))
    except CLIError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    from fedsciml.federated.messages import MessageRejected
    from fedsciml.federated.simulation import RoundFailed
    from fedsciml.problems import ProblemError

    try:
        if args.command == "list":
            return cmd_list(args)
        if args.command == "solve":
            return cmd_solve(args)
        if args.command == "ridge":
            from fedsciml.ridge import cli as ridge_cli

            return ridge_cli.run(args)
        if args.command == "bench":
            if getattr(args, "bench_command", None) == "images":
                from fedsciml.images import cli as images_cli

                return images_cli.run(args)
            parser.parse_args(["bench", "--help"])
    except (CLIError, ProblemError, MessageRejected, RoundFailed, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0
