"""``python -m fedsciml solve PROBLEM [--method M | --compare M,M,…] [--clients K] …``: its parser — the run's flags,
one flag per option of the problems and methods (generated from their declarations), the output flags and the help's
scope (:func:`add_parser`, :func:`set_help_focus`) — and its run (:func:`cmd_solve`): the problem built, every run
planned and checked before the first starts, the runs (time-marching and causal stages included), the summary
table and the outputs (``--json``, ``--out``: result.json, history CSVs, the model, plots)."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

from fedsciml.cli.common import (_COMMAND_START, THREADS_HELP, CLIError, RunFailed, add_option_flags, did_you_mean,
                                 given_options, option_flag, set_threads, status, union_specs)


SOLVE_FLAGS = ("method", "clients", "compare", "seed", "device", "engine", "threads", "json", "out", "quiet",
               "no_progress", "every", "plugin", "config", "verbose", "help_all", "time_windows", "time_window_growth",
               "causal", "causal_slices", "causal_every")
#: ``solve``'s usage line (the flags are too many to list there: `solve --help` points to where they are)
SOLVE_USAGE = "%(prog)s PROBLEM [--method M | --compare M,M,…] [--clients K] [options]"
SOLVE_DESCRIPTION = ("Solve PROBLEM. Without --clients (or with --method centralized) the pooled centralized "
                     "Levenberg–Marquardt reference runs; with --clients K the data are split among K clients and a "
                     "federated method runs (default: fipa). An option that applies to none of the methods run is "
                     "refused. 0 is a value: --rank 0 is full-rank FIPA, --rounds 0 evaluates θ₀ and stops.")


#: ``solve --help`` (``mode``: short), ``solve --help-all`` (``mode``: all) and ``solve PROBLEM --help``: the
#: problem (and ``--method``) whose options the help shows (set by :func:`fedsciml.cli.main._parse`, through
#: :func:`set_help_focus`)
HELP_FOCUS: dict = {}


def problem_owners() -> dict:
    """``{problem: {option: (default, Spec)}}`` of every registered problem (the problem flags' declarations)."""
    from fedsciml.problems import REGISTRY

    return {name: cls.specs() for name, cls in REGISTRY.items()}


def method_owners() -> dict:
    """``{method: {option: (default, Spec)}}`` of every registered method that applies to problems (what
    ``solve`` runs; the image methods are ``bench images``')."""
    from fedsciml.runtime.driver import METHODS, PROBLEM_KINDS

    return {m.name: m.config.specs() for m in METHODS.values() if any(k in PROBLEM_KINDS for k in m.kinds)}


def _help_scope(problems: dict, methods: dict) -> tuple[dict, dict, str | None]:
    """What ``solve``'s help shows: every problem and method (``solve --help-all``), or for ``solve PROBLEM
    --help`` that problem and the methods that apply to it by the registry (:meth:`Method.applies_to`), or
    one of them (``--method M``).  Returns ``(problems, methods, focus)``; an unknown problem or method, or one
    that does not apply, is one line (:class:`CLIError`)."""
    from fedsciml.problems import REGISTRY
    from fedsciml.runtime.driver import METHODS, get_method

    focus = HELP_FOCUS.get("problem")
    if focus is None:
        return problems, methods, None
    if focus not in problems:
        raise CLIError(f"unknown problem {focus!r}{did_you_mean(focus, problems)}; `python -m fedsciml list` "
                       f"lists them")
    kind = getattr(REGISTRY[focus], "kind", None)
    shown = {m: sp for m, sp in methods.items() if METHODS[m].applies_to(kind)}
    only = HELP_FOCUS.get("method")
    if only is not None:
        if only not in methods:
            raise CLIError(f"unknown method {only!r}{did_you_mean(only, shown)}; methods for problem {focus!r}: "
                           f"{', '.join(sorted(shown))}")
        try:
            get_method(only, kind)
        except ValueError as e:  # one line: what it applies to, and the methods that do
            raise CLIError(str(e)) from None
        shown = {only: shown[only]}
    return {focus: problems[focus]}, shown, focus


def _method_groups(methods: dict) -> list[tuple[str, dict]]:
    """The method options in help groups: each option under the configuration class that declares it — the
    shared parts (:attr:`~fedsciml.options.MethodConfig.help_group`: stopping, rounds, local training, robust
    combination) first, then each method's own — as ``[(heading, {method: {option: (default, Spec)}})]``.  The
    heading says whose options they are (every method, every federated method, or which), once."""
    from fedsciml.runtime.driver import METHODS

    def declaring(m, name):  # the class of method m's configuration that declares the option
        return next((c for c in METHODS[m].config.__mro__ if name in c.__dict__.get("__annotations__", {})),
                    METHODS[m].config)

    def holders(cls):
        return [m for m in methods if issubclass(METHODS[m].config, cls)]

    where: dict = {}  # declaring class -> option names, in the order met
    for specs in methods.values():
        for name in specs:
            if not any(name in names for names in where.values()):  # under the class most methods share
                classes = dict.fromkeys(declaring(m, name) for m, sp in methods.items() if name in sp)
                where.setdefault(max(classes, key=lambda c: len(holders(c))), []).append(name)
    federated = {m for m in methods if METHODS[m].federated}
    out = []
    shared_first = sorted(where.items(), key=lambda kv: (bool(kv[0].__dict__.get("method")),
                                                         0 if kv[0].__dict__.get("method") else -len(holders(kv[0]))))
    for cls, names in shared_first:  # the shared parts, most shared first; then each method's own, in order
        have = holders(cls)
        who = ", ".join(have)
        for everyone, word in ((federated, "every federated method"), (set(methods), "every method")):
            missing = [m for m in methods if m in everyone and m not in have]
            if set(have) <= everyone and len(have) > 1 and len(missing) <= 2:  # "every method but fedavg-sgd"
                who = word + (f" but {', '.join(missing)}" if missing else "")
                break
        own = cls.__dict__.get("method")
        heading = (f"{own} options" + (f" (also {', '.join(h for h in have if h != own)})"
                                       if len(have) > 1 else "")) if own else \
            f"{cls.__dict__.get('help_group') or cls.__name__} ({who})"
        out.append((heading, {m: {n: specs[n] for n in names if n in specs} for m, specs in methods.items()}))
    return out


def _short_epilog(problems: dict, methods: dict) -> str:
    """``solve --help``'s pointer to the rest: the problems and methods by name, and where their options are."""
    import textwrap

    from fedsciml.cli.common import option_flag

    n = len({option_flag(k) for specs in (*problems.values(), *methods.values()) for k in specs})
    lines = textwrap.wrap("problems: " + ", ".join(sorted(problems)), 79, subsequent_indent="  ",
                          break_on_hyphens=False)
    lines += textwrap.wrap("methods: " + ", ".join(sorted(methods)), 79, subsequent_indent="  ",
                           break_on_hyphens=False)
    lines += ["", "Their options (a problem's, and those of the methods that apply to it):",
              "  python -m fedsciml solve PROBLEM --help              e.g. solve bratu --help",
              "  python -m fedsciml solve PROBLEM --method M --help   one method's",
              f"  python -m fedsciml solve --help-all                  all {n} of them, grouped",
              "  python -m fedsciml list                              what each problem and method is"]
    return "\n".join(lines)


def add_parser(sub):
    """``solve``: the run's flags, one flag per option of the problems and methods (generated from their
    declarations, in groups), and the output flags.  ``solve --help`` is short (the run's and the outputs'
    flags, and where the rest are); ``solve PROBLEM --help`` shows that problem's options and those of the
    methods that apply to it; ``solve --help-all`` every option."""
    import textwrap

    import fedsciml.engines  # noqa: F401  (registers the problem methods and the engines with the driver)

    all_problems, all_methods = problem_owners(), method_owners()
    problems, methods, focus = _help_scope(all_problems, all_methods)
    short = HELP_FOCUS.get("mode") == "short" and focus is None
    description = SOLVE_DESCRIPTION
    if focus is not None:
        description += (f" Shown: the options of problem {focus!r} and of the methods for it "
                        f"({', '.join(sorted(methods))}); `solve --help-all` lists every problem's and method's.")
    p = sub.add_parser("solve", usage=SOLVE_USAGE, description=textwrap.fill(description, 79),
                       epilog=_short_epilog(all_problems, all_methods) if short else None,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_run_flags(p, methods, short)
    problem_names = {n for specs in all_problems.values() for n in specs}
    # a method option named like a problem option (one-shot's sigma beside ridge's) is --method-NAME, so that
    # --NAME keeps meaning the problem's; a problem option named like a solve flag is --problem-NAME
    rename = {n: option_flag(n, "method-") for s in all_methods.values() for n in s if n in problem_names}
    mflags: dict = {}
    generated = []
    for heading, owners in _method_groups(methods):
        group = p.add_argument_group(heading)
        mflags.update(add_option_flags(group, owners, dest="mopt_", skip=("preset",), rename=rename,
                                       name_owners="differ"))  # the heading says whose
        generated.append(group)
    mflags["preset"] = "--preset"
    title = (f"options of problem {focus!r}" if focus is not None else
             "problem options (each applies to the problems that declare it; `list` shows the problems)")
    pgroup = p.add_argument_group(title)
    pflags = add_option_flags(pgroup, dict(sorted(problems.items())), dest="popt_", typed=False,
                              rename={n: option_flag(n, "problem-") for n in problem_names if n in SOLVE_FLAGS},
                              name_owners="differ" if focus is not None else True)  # which problems declare it
    generated.append(pgroup)
    if short:  # `solve --help`: the generated flags are parsed as ever, listed by --help-all
        for group in generated:
            for action in group._group_actions:
                action.help = argparse.SUPPRESS
    p.set_defaults(_method_flags=mflags, _problem_flags=pflags, _method_specs=union_specs(all_methods))
    _add_output_flags(p)
    return p


def _add_run_flags(p, methods: dict, short: bool = False) -> None:
    """``solve``'s own flags: what runs (method, clients, compare, preset), where and how (seed, device, engine,
    threads), and ``--help-all``."""
    from fedsciml.runtime.driver import engines_for

    p.add_argument("problem", nargs="?", default=None, help="problem name (see `python -m fedsciml list`)")
    p.add_argument("--help-all", action="help", help="show every option of every problem and method, and exit")
    p.add_argument("--method", default=None, metavar="M",
                   help=(" | ".join(sorted(methods)) if not short else "a method named below")
                   + " (default: fipa with --clients K > 1, else centralized)")
    p.add_argument("--clients", type=int, default=None, metavar="K",
                   help="number of clients K (default: the problem's, usually 1)")
    p.add_argument("--compare", default=None, metavar="M,M,…",
                   help="comma-separated methods to run side by side, e.g. fedavg,gn,fipa (with --method M: M "
                        "first, then these)")
    # --preset names a problem's preset (its options and its run's: `list` shows them) or a method's (fipa's paper);
    # resolved once, by problems.registry.apply_preset, before the problem is built
    p.add_argument("--preset", default=None, metavar="NAME",
                   help="a named setting: a problem's preset (`list` shows them, e.g. poisson exp10: the "
                        "K-FAC-for-PINNs authors' experiment) or fipa's 'paper'")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed for sampling, initialization and client "
                   "selection (an integer ≥ 0; default 0)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto: cuda when available)")
    p.add_argument("--engine", default="local", choices=engines_for(),  # the driver's engine registry
                   help="who carries the clients' messages: this process, Flower's simulation engine (the flower "
                        "extra; Python ≥ 3.11) or a process per client (default local)")
    p.add_argument("--threads", type=int, default=None, metavar="N", help=THREADS_HELP)
    t = p.add_argument_group("time-marching and causal weighting (a time-dependent problem: one with a time axis "
                             "and an initial condition)")
    t.add_argument("--time-windows", type=int, default=None, metavar="K",
                   help="train [t0, T] as K windows in order, each window's initial condition the last one's "
                        "network at its start; the method's options (--budget, --max-iters, --rounds) apply to "
                        "each window (fs.solve's time_windows)")
    t.add_argument("--time-window-growth", type=float, default=None, metavar="R",
                   help="with --time-windows: each window R times as long as the one before (default 1: equal "
                        "windows; R > 1: short windows near t0 for a transient there)")
    t.add_argument("--causal", type=float, default=None, metavar="EPS",
                   help="causal weighting: the PDE rows of time slice i weighted exp(-EPS × the mean squared "
                        "residuals of the slices before); needs --max-iters (centralized) or --rounds, no --budget")
    t.add_argument("--causal-slices", type=int, default=None, metavar="M",
                   help="with --causal: the number of equal time slices (default 16)")
    t.add_argument("--causal-every", type=int, default=None, metavar="N",
                   help="with --causal: recompute the weights every N steps or rounds (default 5)")
    if short:  # `solve --help`: parsed as ever, listed by `solve PROBLEM --help` and --help-all
        for action in t._group_actions:
            action.help = argparse.SUPPRESS


def _add_output_flags(p) -> None:
    out = p.add_argument_group("output")
    out.add_argument("--json", default=None, metavar="FILE",
                     help="write the result JSON to FILE (an existing file is overwritten; checked before the run)")
    out.add_argument("--out", default=None, metavar="DIR",
                     help="directory for result.json, history.csv and PNG plots (created; files of those names "
                          "are overwritten; checked before the run)")
    out.add_argument("--no-progress", action="store_true",
                     help="no progress lines (the run header, warnings and `wrote` lines stay; -q/--quiet: errors "
                          "only)")
    out.add_argument("--config", default=None, metavar="FILE.toml",
                     help="options from a TOML file (problem = \"bratu\", clients = 4); the command line wins; "
                          "recorded in result.json")
    out.add_argument("--every", type=int, default=10, metavar="N",
                     help="progress line every N steps/rounds (default 10)")


def method_options_for(methods, given: dict, flags: dict | None = None) -> dict:
    """``{method: {option: value}}``: each given option goes to the methods whose configuration has it; an
    option that none of ``methods`` accepts is refused (one line naming it — by ``flags``, ``{option: flag}``,
    where given — and the methods it applies to)."""
    from fedsciml.runtime.driver import METHODS

    out: dict = {m: {} for m in methods}
    for name, value in given.items():
        takers = [m for m in methods if name in METHODS[m].config.specs()]
        if not takers:
            applies = [m for m in sorted(METHODS) if name in METHODS[m].config.specs()]
            flag = (flags or {}).get(name) or option_flag(name)
            raise CLIError(f"option {flag} does not apply to method "
                           f"{', '.join(methods)} (it applies to: {', '.join(applies)})")
        for m in takers:
            out[m][name] = value
    return out


def drop_where_idle(methods, per_method: dict) -> dict:
    """With ``--compare``, a given option goes to every compared method that has it; it is dropped from
    those where it has no effect with their other settings (``--local-steps`` reaches fipa's local gn
    and fedavg's local Adam), and refused, by name, only when it has an effect in none of them."""
    from fedsciml.options import OptionError, display
    from fedsciml.runtime.driver import METHODS

    idle = {m: METHODS[m].config._build(per_method[m], given={}).inapplicable() for m in methods}
    out = {m: dict(o) for m, o in per_method.items()}
    for name in dict.fromkeys(k for o in per_method.values() for k in o):
        takers = [m for m in methods if name in per_method[m]]
        if all(name in idle[m] for m in takers):
            m = takers[0]
            raise OptionError(f"{m} option {display(name)} has no effect here: {idle[m][name]}")
        for m in takers:
            if name in idle[m]:
                del out[m][name]
    return out


def _method_presets(method_specs: dict) -> tuple:
    """The preset names the methods declare (fipa's ``paper``): the values of their option ``preset``."""
    spec = method_specs.get("preset")
    return tuple(spec[1].choices or ()) if spec is not None else ()


def _methods_to_run(args) -> list:
    """The methods ``solve`` runs, in order: ``--method`` (default fipa with ``--clients K > 1``, else
    centralized) then ``--compare``'s, or ``--compare``'s alone."""
    from fedsciml.runtime.driver import default_method

    method = args.method or default_method(args.clients)
    compare = [m.strip() for m in args.compare.split(",") if m.strip()] if args.compare else []
    if compare and args.method is None:  # --compare alone: exactly the methods named, in that order
        return list(dict.fromkeys(compare))
    return list(dict.fromkeys([method] + compare))  # --method first, then the others named


def _check_methods_apply(args, cls) -> None:
    """Each method to run exists and applies to the problem's kind (the registry's :meth:`Method.applies_to`):
    refused before the problem is built, one line naming the methods that apply."""
    from fedsciml.runtime.driver import get_method

    for m in _methods_to_run(args):
        get_method(m, getattr(cls, "kind", None) if cls is not None else None)


def cmd_solve(args):
    from fedsciml.options import cli_names
    from fedsciml.problems import REGISTRY, get_problem
    from fedsciml.problems.registry import apply_preset
    from fedsciml.problems.base import PROBLEM_ERRORS

    if args.problem is None:
        raise CLIError("solve needs a PROBLEM: python -m fedsciml solve bratu (`python -m fedsciml list` lists them)")
    cls = REGISTRY.get(args.problem)
    if cls is None:
        get_problem(args.problem)  # one line: unknown problem, the closest name, the problems there are
    _check_methods_apply(args, cls)
    names = args._config.names if args._config is not None else {}  # options set by --config: named by key and file
    if cls is not None:  # a problem flag the problem does not have, whose method option exists: name that flag
        mine = cls.specs()
        for name, value in vars(args).items():
            opt = name.removeprefix("popt_")
            if name.startswith("popt_") and value is not None and opt not in mine \
                    and args._method_flags.get(opt, "").startswith("--method-"):
                raise CLIError(f"problem {args.problem!r} has no option --{opt.replace('_', '-')}; the method "
                               f"option is {args._method_flags[opt]} (e.g. one-shot's σ: {args._method_flags[opt]} 1)")
    with cli_names({**args._problem_flags, **names}):  # the problem's flags' text, parsed here, checked by the problem
        popts = given_options(args, "popt_", cls.specs() if cls is not None else {},
                              f"problem {args.problem!r}", errors=PROBLEM_ERRORS)
        if args.preset is not None and cls is not None:  # the preset's problem and method options, where not given
            popts, args._preset_method_options = apply_preset(cls, args.preset, popts, {},
                                                              _method_presets(args._method_specs))
        problem = get_problem(args.problem, **popts)
    from fedsciml.runtime.history import loop_progress

    with cli_names({**args._method_flags, **names}), loop_progress(_progress(args)):
        return _solve(args, problem)


def _progress(args) -> bool:
    """Progress lines: not with ``--no-progress``, nor with ``-q`` (errors only)."""
    return not (args.quiet or args.no_progress)


def _solve(args, problem):
    """``solve`` once the problem is built: the methods' options, every run planned (checked) before the first
    one starts, the runs, the summary and the outputs."""
    from fedsciml.runtime.loop import RoundFailed
    from fedsciml.runtime.results import ResultsNotWritten, check_output_dir, check_output_file
    from fedsciml.methods.centralized import Diverged
    from fedsciml.runtime.driver import check_clients, get_method, plan, run
    from fedsciml.engines.marching import check_marching, solve_marched

    check_clients(args.clients)
    if args.every < 1:
        raise CLIError(f"--every must be an integer ≥ 1, got {args.every}")
    methods = _methods_to_run(args)
    for m in methods:
        get_method(m, getattr(problem, "kind", None))
    given = {**getattr(args, "_preset_method_options", {}), **given_options(args, "mopt_", args._method_specs)}
    if given.get("preset") == "paper":  # a problem's own script settings for the published method, where declared
        for k, v in (getattr(problem, "paper_method_options", None) or {}).items():
            given.setdefault(k, v)
    per_method = method_options_for(methods, given, args._method_flags)
    if len(methods) > 1:
        per_method = drop_where_idle(methods, per_method)
    marching = _marching(args)
    if marching and getattr(problem, "T", None) is None:
        flags = " and ".join(f for f, on in (("--time-windows", "time_windows" in marching),
                                              ("--causal", "causal" in marching)) if on)
        verb = "apply" if " and " in flags else "applies"
        raise CLIError(f"{flags} {verb} to a time-dependent problem (a time axis T and an initial condition); "
                       f"problem {problem.name!r} has no time axis")
    plans = []
    engine_of = {m: args.engine if get_method(m).federated else "local" for m in methods}  # pooled: this process
    for m in methods:  # every run checked (options, memory) before the first one starts, and only here
        if len(methods) > 1 and "checkpoint" in per_method[m]:  # one checkpoint directory per compared method
            per_method[m]["checkpoint"] = os.path.join(per_method[m]["checkpoint"], m)
        engine = engine_of[m]
        plans.append(plan(problem, m, clients=args.clients, seed=args.seed, device=args.device,
                          progress=_progress(args), every=args.every, engine=engine, **per_method[m]))
        if marching:  # windows and causal stages run through fs.solve's loop (fedsciml.engines.marching)
            check_marching(problem, m, {**per_method[m], "engine": engine}, **marching)
    if args.json:
        check_output_file(args.json, "--json", stdout=True)  # --json -: the JSON on standard output
    if args.out:
        check_output_dir(args.out, "--out")
    set_threads(args.threads)
    results = []
    for m, p in zip(methods, plans):  # the run header: a status line (-q: none)
        status(f"[fedsciml] {problem.name} · method={m} · clients={args.clients or problem.default_clients} · "
               f"params={problem.network().n_params if hasattr(problem, 'network') else '?'}")
        try:
            res = run(p) if not marching else solve_marched(
                problem, m, clients=args.clients, seed=args.seed, device=args.device, progress=_progress(args),
                every=args.every, engine=engine_of[m], **marching,
                **per_method[m])
        except BaseException as e:  # the runs that finished, and the rounds this one finished, are kept
            partial = getattr(e, "result", None)  # Ctrl-C/SIGTERM or a failed round (fedsciml.runtime.interrupt)
            kept = results + ([partial] if partial is not None else [])
            if results and partial is None:
                print(f"{m} failed: the run(s) that finished ({', '.join(r.method for r in results)}) are kept",
                      file=sys.stderr)
            written = False
            if kept:
                try:
                    _keep_results(problem, kept, args)
                    written = bool(args.json or args.out)
                except ResultsNotWritten as w:  # said here; the failed run's error stays the command's
                    print(f"error: {w}", file=sys.stderr)
            where = " and ".join(x for x in (args.json, args.out) if x) if partial is not None and written else ""
            if isinstance(e, KeyboardInterrupt) and where:
                step = partial.history[-1].get("step") if partial.history else 0
                e.kept = f"{m} stopped after step/round {step}; its result and model are written to {where}"  # type: ignore[attr-defined]
            if isinstance(e, (RoundFailed, Diverged)):  # the run cannot go on
                raise RunFailed(f"{m}: {e}" + (f"; the rounds before are written: {where}" if where else "")) \
                    from None
            raise
        results.append(res)
    _keep_results(problem, results, args)
    return 0


def _marching(args) -> dict:
    """``solve``'s time-marching and causal flags as :func:`fedsciml.engines.marching.solve_marched`'s keywords
    (``{}``: none given); one line naming the flag for a value out of range or a flag that needs another."""
    from fedsciml.engines.marching import CAUSAL_EVERY, CAUSAL_SLICES

    k, r, eps = args.time_windows, args.time_window_growth, args.causal
    slices, every = args.causal_slices, args.causal_every
    if k is not None and k < 1:
        raise CLIError(f"--time-windows must be a whole number ≥ 1 (the number of windows), got {k}")
    if r is not None and not (r > 0 and math.isfinite(r)):
        raise CLIError(f"--time-window-growth must be a finite number > 0 (each window's length over the last's), "
                       f"got {r}")
    if r is not None and k is None:
        raise CLIError("--time-window-growth applies with --time-windows K only; give --time-windows")
    if eps is not None and not (eps >= 0 and math.isfinite(eps)):
        raise CLIError(f"--causal must be a finite number ≥ 0 (the causality parameter ε), got {eps}")
    for flag, v in (("--causal-slices", slices), ("--causal-every", every)):
        if v is not None and eps is None:
            raise CLIError(f"{flag} applies with --causal EPS only; give --causal")
        if v is not None and v < 1:
            raise CLIError(f"{flag} must be a whole number ≥ 1, got {v}")
    out: dict = {}
    if k is not None:
        out.update(time_windows=k, time_window_growth=1.0 if r is None else r)
    if eps is not None:
        out.update(causal=eps, causal_slices=CAUSAL_SLICES if slices is None else slices,
                   causal_every=CAUSAL_EVERY if every is None else every)
    return out


def _keep_results(problem, results, args) -> None:
    """The summary table and the outputs of the runs that finished (all of them, or those before a compared run
    that failed)."""
    wall = time.perf_counter() - _COMMAND_START[0]
    command = command_record(args)
    for r in results:  # the whole command (parsing, set-up, every compared run) up to writing the results
        r.wall_seconds = wall
        r.extra["command"] = command
    _print_summary(results, sys.stderr if args.json == "-" else sys.stdout)  # --json -: stdout is the JSON's
    _write_outputs(problem, results, args)


def command_record(args) -> dict:
    """What ``result.json`` records of the command: its arguments, the ``--config`` file and its values, and the
    resolved options (every argument as parsed, the file's and the defaults included) — enough to run it again."""
    resolved = {}
    for k, v in sorted(vars(args).items()):
        if k.startswith("_") or v is None:
            continue
        key = k.removeprefix("mopt_").removeprefix("popt_").removeprefix("ropt_")
        resolved[key] = v if isinstance(v, (int, float, str, bool)) or (
            isinstance(v, list) and all(isinstance(x, (int, float, str, bool)) for x in v)) else str(v)
    cfg = getattr(args, "_config", None)
    return {"argv": list(getattr(args, "_argv", [])), "config_file": cfg.path if cfg is not None else None,
            "config": cfg.table if cfg is not None else {}, "resolved": resolved}


def _print_summary(results, file=None):
    from fedsciml.runtime.results import summary_lines

    print("\n".join(summary_lines(results)), file=file or sys.stdout)


def _write_outputs(problem, results, args):
    from fedsciml.runtime.plotting import plot_runs
    from fedsciml.cli.common import write_json_collecting
    from fedsciml.runtime.results import ResultsNotWritten, raise_collected

    payload = results[0].to_dict() if len(results) == 1 else {"runs": [r.to_dict() for r in results]}
    failed = []  # every output is tried; what could not be written is reported together at the end
    if args.json:
        write_json_collecting(payload, args.json, failed)
    if args.out:
        write_json_collecting(payload, os.path.join(args.out, "result.json"), failed, f"{args.out}/result.json")
        for r in results:  # a history CSV that cannot be written loses nothing else (the model is written below)
            suffix = "" if len(results) == 1 else f"_{r.method}"
            try:
                r.write_history_csv(os.path.join(args.out, f"history{suffix}.csv"))
            except OSError as e:
                failed.append(ResultsNotWritten(f"--out {args.out!r}: history{suffix}.csv not written "
                                                f"({e.strerror or e}); the history is in result.json"))
        try:
            if getattr(problem, "kind", None) == "ridge":  # a linear model: its coefficients out
                from fedsciml.ridge.model_io import model_meta, write_model, writes_model

                names = problem.feature_names() if hasattr(problem, "feature_names") else None
                io_names = {} if names is None else {"inputs": names, "outputs": [str(problem.target)]}
                for r in results:
                    if writes_model(r):
                        d = args.out if len(results) == 1 else os.path.join(args.out, f"model_{r.method}")
                        for path in write_model(d, r.theta, float(r.extra.get("intercept", 0.0)),
                                                model_meta(r, engine=args.engine, **io_names)):
                            status(f"wrote {path}")
            if hasattr(problem, "model_description"):  # the trained network: model.safetensors + model.json
                from fedsciml.problems.saved import save_model

                for r in results:
                    d = args.out if len(results) == 1 else os.path.join(args.out, f"model_{r.method}")
                    save_model(r, problem, d)
                    status(f"wrote {os.path.join(d, 'model.safetensors')} (+ model.json)")
            # plots last: the results and the model are on disk whatever a figure does (a figure that cannot be
            # drawn is a warning from plot_runs, not a lost result)
            for path in plot_runs(problem, results, args.out):
                status(f"wrote {path}")
        except OSError as e:
            failed.append(ResultsNotWritten(f"--out {args.out!r}: plots / model not written "
                                            f"({e.strerror or e}); the history is in result.json"))
    raise_collected(failed)


def set_help_focus(argv: list, cmd: str | None, at: int) -> None:
    """What ``solve``'s help shows (:data:`HELP_FOCUS`): ``solve --help`` the short help, ``solve --help-all``
    every option, ``solve PROBLEM [--method M] --help`` that problem's and the methods' for it."""
    HELP_FOCUS.clear()
    if cmd != "solve":
        return
    rest = argv[at + 1:]
    if "--help-all" in rest:
        HELP_FOCUS["mode"] = "all"
        return
    if "-h" not in rest and "--help" not in rest:
        return
    HELP_FOCUS["mode"] = "short"
    if rest and not rest[0].startswith("-"):
        HELP_FOCUS["problem"] = rest[0]
    if "--method" in rest and rest.index("--method") + 1 < len(rest):
        HELP_FOCUS["method"] = rest[rest.index("--method") + 1]

