"""``python -m fedsciml ridge ...``: one-shot federated ridge with a summary table — a preset over ``solve``.

The data are the zoo problem ``ridge-linear`` (or ``ridge-rff`` with
``--features rff``) split among ``--clients`` clients; the one-shot fit is
``solve``'s: the same driver (:func:`fedsciml.runtime.driver.plan` checks every
option once, :func:`~fedsciml.runtime.driver.run` runs it), round loop,
one-shot strategy and transport (``--engine local`` or ``flower``), so dropout,
rejections logged by client and reason, float accounting and the Result are
those of ``solve``.

Flags are generated from the option declarations
(:func:`fedsciml.cli.common.add_option_flags`): the ridge problems' options
(``ridge-linear`` and ``ridge-rff``: ``--dim``, ``--heterogeneity``, ``--sigma``,
…) and the ``one-shot`` method's (``--dp-epsilon``, ``--project``, ``--cv-sigmas``, …), so
an option declared there appears here, with its default, range and help, and
is checked by its owner; each is spelled as ``solve`` spells it.  The older spellings
(:data:`SPELLINGS`: ``--samples`` for ``n_samples``, ``--epsilon`` for
``dp_epsilon``, …) still work, with a deprecation line on stderr.  Its own options (:data:`PRESET`: ``--features``,
``--baselines``, ``--rounds`` of the baselines) are declared the same way.

The preset itself — the method it runs, the pooled reference fit, the iterative
baselines (``--baselines``, on the same round loop) and their options, the
table's columns — is the ridge layer's (:mod:`fedsciml.ridge.preset`); this
module builds the parser and prints what that returns.  Every method gives one
:class:`~fedsciml.runtime.results.Result`; the table prints, per method, the
test MSE, the centralized (pooled-data) MSE, the relative model error
``‖w − w_central‖/‖w_central‖``, the rounds, the floats sent and the seconds;
``--json FILE`` writes the Results with the JSON writer of ``solve``
(``{"runs": [...]}``).
"""
from __future__ import annotations

import contextlib
import math
import sys
import time

import fedsciml.engines  # noqa: F401  (registers the methods and the engines with the driver)
from fedsciml.ridge import preset
from fedsciml.ridge.model_io import model_meta, write_model  # noqa: F401  (model_meta: public here before)
from fedsciml.ridge.preset import COLUMNS, PRESET, PROBLEMS, table_rows

#: the subcommand's older spellings of declared options: still accepted, with a deprecation line on stderr; the
#: flags are ``solve``'s (``--dp-epsilon``, ``--cv-sigmas``, ``--n-samples``, …), one spelling per option
SPELLINGS = {"n_samples": "--samples", "cv_sigmas": "--cv", "dp_epsilon": "--epsilon", "dp_delta": "--delta",
             "dp_central": "--central-dp", "dp_clip_a": "--clip-a", "dp_clip_b": "--clip-b",
             "dp_noise_aware": "--noise-aware-sigma", "project_sketch": "--sketch"}
#: declared options without a flag here: the one-shot protocol puts σ at the server (penalty=server), and
#: ``--rounds`` is the baselines' (one-shot runs one round)
SKIP_PROBLEM, SKIP_METHOD = ("penalty",), ("rounds",)


def deprecated_spellings() -> dict[str, str]:
    """``{old flag: flag}`` of the older spellings ``ridge`` still accepts."""
    from fedsciml.cli.common import option_flag

    return {old: option_flag(k) for k, old in SPELLINGS.items()}


def add_parser(subparsers):
    """The ``ridge`` subparser: its option flags generated from the ridge problems', the one-shot method's and
    :data:`PRESET`'s declarations; the run's own arguments (clients, seed, device, engine, outputs) as ``solve``'s."""
    from fedsciml.cli.common import THREADS_HELP, add_option_flags, option_flag
    from fedsciml.options import declared
    from fedsciml.problems import REGISTRY
    from fedsciml.runtime.driver import engines_for

    p = subparsers.add_parser(
        "ridge",
        description="One-shot federated ridge on the paper's synthetic heterogeneous data: each client sends "
                    "(A_kᵀA_k, A_kᵀb_k) once, the server solves (ΣG_k + σI) w = Σh_k. A preset over `solve "
                    f"{PROBLEMS['linear']} --method {preset.METHOD}` (same driver, same checks); the flags are "
                    f"generated from the problems' and the {preset.METHOD} method's option declarations.")
    p.add_argument("--clients", type=int, default=None, help="number of clients K (default: the problem's, 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, sketch, noise and dropout (default 0)")
    p.add_argument("--engine", default="local", choices=engines_for("ridge"),  # the driver's engine registry
                   help="who carries the one-shot messages: this process, or Flower's simulation engine "
                        "(as `solve --engine`; the baselines run in this process)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    problems = {name: REGISTRY[name].specs() for name in PROBLEMS.values()}
    method = preset.method_specs()
    problem_names = {n for specs in problems.values() for n in specs}
    flags = add_option_flags(p.add_argument_group("subcommand options"), {"ridge": declared(PRESET)}, dest="ropt_")
    pflags = add_option_flags(p.add_argument_group("problem options (generated from the ridge problems)"),
                              problems, dest="popt_", typed=False, skip=SKIP_PROBLEM,
                              aliases={k: [v] for k, v in SPELLINGS.items() if k in problem_names})
    mflags = add_option_flags(p.add_argument_group(f"{preset.METHOD} options (generated from fedsciml.options)"),
                              {preset.METHOD: method}, dest="mopt_", skip=SKIP_METHOD,
                              rename={k: option_flag(k, "method-" if k in problem_names else "") for k in method},
                              aliases={k: [SPELLINGS[k]] for k in SPELLINGS if k in method})
    p.set_defaults(_ridge_flags=flags, _problem_flags=pflags, _method_flags=mflags)
    out = p.add_argument_group("output")
    out.add_argument("--json", default=None, metavar="FILE",
                     help="write the results as JSON to FILE (an existing file is overwritten; checked before the "
                          "run)")
    out.add_argument("--out", default=None, metavar="DIR",
                     help="write the one-shot model to DIR: model.safetensors (coef, intercept) and model.json (what "
                          "it is: σ, clients, DP), plus result.json (checked before the run)")
    return p


def make_problem(features="linear", dim=100, samples=500, heterogeneity=0.5, sigma=0.01, rff_dim=300, **extra):
    """The zoo problem of the subcommand's synthetic data (``ridge-linear`` or ``ridge-rff`` with its options)."""
    from fedsciml.problems import get_problem

    common = dict(n_samples=samples, heterogeneity=heterogeneity, sigma=sigma, **extra)
    if features == "rff":
        return get_problem("ridge-rff", rff_dim=rff_dim, **common)
    return get_problem("ridge-linear", dim=dim, **common)


def run_experiment(*, clients=20, dim=100, samples=500, heterogeneity=0.5, sigma=0.01, cv=None, epsilon=None,
                   delta=1e-5, central_dp=False, clip_a=1.0, clip_b=1.0, noise_aware_sigma=False, project=None,
                   sketch="gaussian", dropout=0.0, features="linear", rff_dim=300, baselines=(), rounds=100, seed=0,
                   device="cpu", engine="local", problem_options=None, progress=False) -> list:
    """One CLI/script run, in the subcommand's words: the options mapped to their declarations and run by
    :func:`fedsciml.ridge.preset.run_preset` (one-shot through the driver, the pooled oracle, optional baselines).  ``cv``: a list of σ,
    or the command line's text (``'a,b,c'``, ``'lo:hi:count'``); ``epsilon=inf``: no DP.  Returns one
    :class:`~fedsciml.runtime.results.Result` per method (one-shot, ``centralized``, the baselines), each with
    ``final["mse"]``, ``final["mse_central"]``, ``final["rel_error"]`` and ``extra["label"]``."""
    from fedsciml.options import parse_grid
    from fedsciml.problems import get_problem

    popts = {"n_samples": samples, "heterogeneity": heterogeneity, "sigma": sigma or 0.0,
             **({"rff_dim": rff_dim} if features == "rff" else {"dim": dim}), **(problem_options or {})}
    mopts: dict = {"dropout": dropout, "project": project, "project_sketch": sketch}
    if cv is not None:
        mopts["cv_sigmas"] = parse_grid(cv) if isinstance(cv, str) else list(cv)
    if epsilon is not None and epsilon != math.inf:
        mopts.update(dp_epsilon=epsilon, dp_delta=delta, dp_central=central_dp, dp_clip_a=clip_a, dp_clip_b=clip_b,
                     dp_noise_aware=noise_aware_sigma)
    return preset.run_preset(features, popts, mopts, get_problem=get_problem, clients=clients, seed=seed,
                             device=device, engine=engine, baselines=baselines, rounds=rounds, progress=progress)


def run(args) -> int:
    """``ridge``: the generated flags' values (text parsed once, here), each checked by its owner — the preset's,
    the problem's, the one-shot method's (in :func:`fedsciml.ridge.preset.run_preset`, by the driver) — then the
    run and the table (:func:`fedsciml.ridge.preset.table_rows`)."""
    from fedsciml.cli.common import CLIError, given_options, set_threads, status
    from fedsciml.options import check_options, cli_names, declared
    from fedsciml.problems import REGISTRY, get_problem
    from fedsciml.problems.base import PROBLEM_ERRORS
    from fedsciml.runtime.results import check_output_dir, check_output_file, write_json

    with cli_names(args._ridge_flags):
        chosen = check_options("ridge", declared(PRESET), given_options(args, "ropt_", declared(PRESET)))
    name = PROBLEMS[chosen["features"]]
    # a flag of the other ridge problem (--dim with --features rff): refused here, naming the flags this problem
    # has in this subcommand (not its options without a flag, e.g. penalty: the preset puts σ at the server)
    own = {k: f for k, f in args._problem_flags.items() if k in REGISTRY[name].specs()}
    other = [args._problem_flags[k] for k in given_options(args, "popt_") if k not in own]
    if other:
        import difflib

        hints = [f"{f} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(f, own.values(), 1)) else f
                 for f in other]
        raise CLIError(f"--features {chosen['features']} ({name}) has no option {', '.join(hints)}; "
                       f"allowed: {', '.join(sorted(own.values()))}")
    with cli_names(args._problem_flags):
        popts = given_options(args, "popt_", REGISTRY[name].specs(), f"problem {name!r}", errors=PROBLEM_ERRORS)
    with cli_names(args._method_flags):
        mopts = given_options(args, "mopt_", preset.method_specs(), preset.METHOD)
    if "sigma" in popts and "cv_sigmas" in mopts:
        raise CLIError(f"{args._method_flags['cv_sigmas']} chooses σ by cross-validation; give "
                       f"{args._problem_flags['sigma']} or {args._method_flags['cv_sigmas']}, not both")
    if mopts.get("dp_epsilon") == math.inf:  # ε = ∞: no privacy (no clipping, no noise), as before
        del mopts["dp_epsilon"]
    if args.json:
        check_output_file(args.json, "--json", stdout=True)  # --json -: the JSON on standard output, the table on stderr
    if args.out:
        check_output_dir(args.out, "--out")
    set_threads(args.threads, quiet=True)
    with cli_names(args._ridge_flags):
        results = preset.run_preset(chosen["features"], popts, mopts, get_problem=get_problem, clients=args.clients,
                                    seed=args.seed, device=args.device, engine=args.engine,
                                    baselines=chosen["baselines"], rounds=chosen["rounds"],
                                    flags=(args._problem_flags, args._method_flags))
    from fedsciml.cli.common import _COMMAND_START

    wall = time.perf_counter() - _COMMAND_START[0]
    for r in results:  # the whole command up to writing the results
        r.wall_seconds = wall
    one = results[0]
    fused = one.extra.get("fused_clients", one.clients)
    with contextlib.redirect_stdout(sys.stderr if args.json == "-" else sys.stdout):
        _print_table(one, fused, results, args)
    if args.json:
        write_json({"runs": [r.to_dict() for r in results]}, args.json)
        if args.json != "-":
            status(f"wrote {args.json}")
    if args.out:
        import os

        for path in write_model(args.out, one.theta, 0.0, model_meta(one, engine=args.engine)):
            status(f"wrote {path}")
        write_json({"runs": [r.to_dict() for r in results]}, os.path.join(args.out, "result.json"))
        status(f"wrote {os.path.join(args.out, 'result.json')}")
    return 0


def _print_table(one, fused, results, args) -> None:
    from fedsciml.runtime.results import format_table

    print(f"{one.problem}: K={one.clients} ({fused} answered), σ={results[1].options['sigma_used']:.4g}, "
          f"device {one.device}, engine {args.engine}, seed {one.seed}")
    print(format_table(COLUMNS, table_rows(results)))
    for r in results:
        rej = r.extra.get("rejections")
        if rej:
            print(f"{r.method}: {len(rej)} message(s) rejected, e.g. round {rej[0]['round']} client "
                  f"{rej[0]['client']}: {rej[0]['reason']}")
