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

The iterative baselines (``--baselines``) run on the same round loop
(:mod:`fedsciml.ridge.baselines`).  Every method gives one
:class:`~fedsciml.runtime.results.Result`; the table prints, per method, the
test MSE, the centralized (pooled-data) MSE, the relative model error
``‖w − w_central‖/‖w_central‖``, the rounds, the floats sent and the seconds;
``--json FILE`` writes the Results with the JSON writer of ``solve``
(``{"runs": [...]}``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
import time

import torch

import fedsciml.engines  # noqa: F401  (registers the methods and the engines with the driver)
from fedsciml.options import option
from fedsciml.ridge.model_io import model_meta, write_model  # noqa: F401  (model_meta: public here before)

#: the preset's method, looked up in the registry (``ridge`` is ``solve … --method one-shot`` with a summary table)
METHOD = "one-shot"
#: ``--features`` → the zoo problem whose options the subcommand takes
PROBLEMS = {"linear": "ridge-linear", "rff": "ridge-rff"}
#: the subcommand's own options, declared in the one dialect (checked by :func:`fedsciml.options.check_options`)
PRESET = {
    "features": option("linear", "linear features (ridge-linear) or random Fourier features (ridge-rff)", str,
                       choices=tuple(PROBLEMS)),
    "baselines": option("", "comma-separated iterative baselines to add: fedavg, fedprox, dp-fedavg (on the round "
                            "loop, in this process)", str),
    "rounds": option(100, "rounds of the iterative baselines", int, lo=0),
}
BASELINES = ("fedavg", "fedprox", "dp-fedavg")
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


def estimate_memory(clients, dim, samples, features="linear", rff_dim=300, cv=None, project=None, epsilon=None,
                    baselines=()) -> tuple[float, str]:
    """``(bytes, how)``: the memory a ``ridge`` run needs besides the clients' data rows, estimated before
    anything is built (8-byte floats) — the preset's terms of the driver's one memory check
    (:func:`fedsciml.runtime.driver.plan` ``memory=``; the driver counts every client's rows itself).

    The projected rows (``--project``), the clients' messages (square-root factors ``min(n_k, m)×m`` with CV and
    no DP where ``2n_k ≤ m``, else packed Grams), the server's working set (a few m×m matrices; with CV one more
    per σ and the candidate models ``K·|Σ|·m``), the pooled oracle (the rows once more, and d×d) and the
    baselines (``2·K·n·d``)."""
    d = int(rff_dim if features == "rff" else dim)
    m = int(project or d)
    K, n = int(clients), int(samples)
    n_train = n - n // 5
    S = len(cv) if cv else 0
    sqrt = bool(S) and epsilon is None and 2 * n_train <= m
    data = K * n * m if project else 0
    msgs = K * (min(n_train, m) * (m + 1) if sqrt else m * (m + 1) // 2 + m)
    server = 4 * m * m + S * (m * m + K * m) + (min(K * 32 << 20, 6 * S * K * m) if S else 0)
    oracle = K * n_train * d + 2 * d * d
    base = 2 * K * n * d if baselines else 0
    total = 8.0 * (data + msgs + server + oracle + base)
    how = (f"{'square-root' if sqrt else 'Gram'} messages" + (f", CV over {S} σ" if S else "")
           + (f", projection to {m}" if project else "") + ", the pooled oracle" + (", the baselines" if base else ""))
    return total, how


def add_parser(subparsers):
    """The ``ridge`` subparser: its option flags generated from the ridge problems', the one-shot method's and
    :data:`PRESET`'s declarations; the run's own arguments (clients, seed, device, engine, outputs) as ``solve``'s."""
    from fedsciml.cli.common import THREADS_HELP, add_option_flags, option_flag
    from fedsciml.options import declared
    from fedsciml.problems import REGISTRY
    from fedsciml.runtime.driver import METHODS, engines_for

    p = subparsers.add_parser(
        "ridge",
        description="One-shot federated ridge on the paper's synthetic heterogeneous data: each client sends "
                    "(A_kᵀA_k, A_kᵀb_k) once, the server solves (ΣG_k + σI) w = Σh_k. A preset over `solve "
                    "ridge-linear --method one-shot` (same driver, same checks); the flags are generated from the "
                    "problems' and the one-shot method's option declarations.")
    p.add_argument("--clients", type=int, default=None, help="number of clients K (default: the problem's, 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, sketch, noise and dropout (default 0)")
    p.add_argument("--engine", default="local", choices=engines_for("ridge"),  # the driver's engine registry
                   help="who carries the one-shot messages: this process, or Flower's simulation engine "
                        "(as `solve --engine`; the baselines run in this process)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (default auto)")
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    problems = {name: REGISTRY[name].specs() for name in PROBLEMS.values()}
    method = METHODS[METHOD].config.specs()
    problem_names = {n for specs in problems.values() for n in specs}
    flags = add_option_flags(p.add_argument_group("subcommand options"), {"ridge": declared(PRESET)}, dest="ropt_")
    pflags = add_option_flags(p.add_argument_group("problem options (generated from the ridge problems)"),
                              problems, dest="popt_", typed=False, skip=SKIP_PROBLEM,
                              aliases={k: [v] for k, v in SPELLINGS.items() if k in problem_names})
    mflags = add_option_flags(p.add_argument_group("one-shot options (generated from fedsciml.options)"),
                              {METHOD: method}, dest="mopt_", skip=SKIP_METHOD,
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


def _summary(res, w_c, mse_c, label, rounds):
    """Add the subcommand's summary columns to a Result (``final``: central MSE, relative model error)."""
    w = res.theta
    res.final["mse_central"] = mse_c
    res.final["rel_error"] = float((w - w_c).norm() / w_c.norm().clamp_min(1e-300))
    res.extra["label"] = label
    res.extra.setdefault("rounds", rounds)
    return res


def run_experiment(*, clients=20, dim=100, samples=500, heterogeneity=0.5, sigma=0.01, cv=None, epsilon=None,
                   delta=1e-5, central_dp=False, clip_a=1.0, clip_b=1.0, noise_aware_sigma=False, project=None,
                   sketch="gaussian", dropout=0.0, features="linear", rff_dim=300, baselines=(), rounds=100, seed=0,
                   device="cpu", engine="local", problem_options=None, progress=False) -> list:
    """One CLI/script run, in the subcommand's words: the options mapped to their declarations and run by
    :func:`run_preset` (one-shot through the driver, the pooled oracle, optional baselines).  ``cv``: a list of σ,
    or the command line's text (``'a,b,c'``, ``'lo:hi:count'``); ``epsilon=inf``: no DP.  Returns one
    :class:`~fedsciml.runtime.results.Result` per method (one-shot, ``centralized``, the baselines), each with
    ``final["mse"]``, ``final["mse_central"]``, ``final["rel_error"]`` and ``extra["label"]``."""
    from fedsciml.options import parse_grid

    popts = {"n_samples": samples, "heterogeneity": heterogeneity, "sigma": sigma or 0.0,
             **({"rff_dim": rff_dim} if features == "rff" else {"dim": dim}), **(problem_options or {})}
    mopts: dict = {"dropout": dropout, "project": project, "project_sketch": sketch}
    if cv is not None:
        mopts["cv_sigmas"] = parse_grid(cv) if isinstance(cv, str) else list(cv)
    if epsilon is not None and epsilon != math.inf:
        mopts.update(dp_epsilon=epsilon, dp_delta=delta, dp_central=central_dp, dp_clip_a=clip_a, dp_clip_b=clip_b,
                     dp_noise_aware=noise_aware_sigma)
    return run_preset(features, popts, mopts, clients=clients, seed=seed, device=device, engine=engine,
                      baselines=baselines, rounds=rounds, progress=progress)


def run_preset(features: str, problem_options: dict, method_options: dict, *, clients=None, seed=0, device="cpu",
               engine="local", baselines=(), rounds=100, progress=False, flags: tuple[dict, dict] = ({}, {})) -> list:
    """``ridge``: ``solve(PROBLEMS[features](**problem_options), "one-shot", **method_options)`` planned and run by
    the driver (every option checked once, by its declaration), then the pooled oracle with the σ the one-shot
    used, then the ``baselines`` on the round loop.  Returns the Results (one-shot, ``centralized``, baselines).
    ``flags``: ``({problem option: flag}, {method option: flag})``, how messages name them (the CLI's)."""
    from fedsciml.core.stats import pooled_ridge
    from fedsciml.options import cli_names, display
    from fedsciml.problems import get_problem
    from fedsciml.runtime.driver import make_result, plan, run

    if features not in PROBLEMS:
        raise ValueError(f"features must be one of {', '.join(PROBLEMS)}, got {features!r}")
    names = [x.strip() for x in (baselines.split(",") if isinstance(baselines, str) else baselines) if x.strip()]
    for name in names:
        if name not in BASELINES:
            raise ValueError(f"unknown baseline {name!r}; allowed: {', '.join(BASELINES)}")
    eps = method_options.get("dp_epsilon")
    use_dp = eps is not None and eps != math.inf
    if names and engine != "local":
        raise ValueError(f"--baselines run in this process (engine local); with --engine {engine} leave them out")
    with cli_names(flags[0]) if flags[0] else _same():
        problem = get_problem(PROBLEMS[features], **{"penalty": "server", **problem_options})
    # the preset's work besides the one-shot run (the oracle's pooled rows, the CV candidates, the baselines):
    # its terms of the driver's memory check, from the validated one-shot configuration, checked once by plan()
    def terms(prob, K, cfg):
        return estimate_memory(K, prob.options.get("dim", 0), prob.n_samples, features, prob.options.get("rff_dim", 0),
                               cfg.cv_sigmas, cfg.project, eps if use_dp else None, names)

    with cli_names(flags[1]) if flags[1] else _same():
        if "dp-fedavg" in names and not use_dp:
            raise ValueError(f"dp-fedavg needs {display('dp_epsilon')}")
        p = plan(problem, METHOD, clients=clients, seed=seed, device=device, engine=engine, progress=progress,
                 memory=terms, **method_options)  # every option of the run checked here, once
    cfg, problem, K = p.config, p.problem, problem.default_clients if p.clients is None else p.clients
    one = run(p)
    dev = p.device
    s_used = float(one.extra.get("sigma_used", cfg.sigma or 0.0))  # type: ignore[attr-defined]
    # the pooled oracle on every client's data (those that dropped out included), σ as the one-shot used
    t0 = time.perf_counter()
    data = problem.client_data(int(K), seed, dev)
    A = torch.cat([a for a, _ in data])
    b = torch.cat([y for _, y in data])
    w_c = pooled_ridge(A, b, s_used)
    t_c = time.perf_counter() - t0
    ev = lambda u: problem.evaluate(u)["mse"]  # noqa: E731
    mse_c = ev(w_c)
    d = int(w_c.numel())
    project = cfg.project  # type: ignore[attr-defined]
    label = METHOD + ("" if not use_dp else f" DP ε={eps}{' central' if cfg.dp_central else ''}") \
        + ("" if not project or project == d else f" m={project}")  # type: ignore[attr-defined]
    # the test rows of this split (a Flower ServerApp evaluates on its own problem copy, which has not split)
    one.final["mse"] = ev(one.theta)
    out = [_summary(one, w_c, mse_c, label, 1)]
    central = make_result(problem, "centralized",
                          {**problem.options, "solver": "pooled ridge (Cholesky)", "sigma_used": s_used},
                          seed=seed, device=dev, clients=int(K), theta=w_c, seconds=t_c, final={"mse": mse_c},
                          history=[{"step": 0, "time_s": t_c, "mse": mse_c, "floats_sent": 0}],
                          extra={"rounds": 0, "stop_reason": "closed form"})
    out.append(_summary(central, w_c, mse_c, "centralized", 0))
    dropout = cfg.dropout  # type: ignore[attr-defined]
    for name in names:
        # the registry's fedavg-sgd (FedProx: μ = 0.01, the paper's; DP-FedAvg: the one-shot's ε and δ) on the
        # same problem and clients through the driver, with the σ the one-shot used.  DP-FedAvg's per-row
        # gradient clip 3: the best of 1, 3, 10, 30 on a public draw of the ridge-linear generator, none of the
        # evaluated data (scripts/papers/oneshot-ridge/ridge_table5_privacy.py --fedavg-clip public)
        opts: dict = {"rounds": rounds, "mu": 0.01 if name == "fedprox" else 0.0, "sigma": s_used,
                      "dropout": dropout}
        if name == "dp-fedavg":
            opts.update(dp_epsilon=eps, dp_delta=cfg.dp_delta, dp_grad_clip=3.0)  # type: ignore[attr-defined]
        # the driver's Result of the run, under the baseline's name (its options record: the problem's and
        # fedavg-sgd's configuration, lr, local_epochs, mu, rounds and dropout among them)
        rb = run(plan(problem, "fedavg-sgd", clients=int(K), seed=seed, device=dev, progress=progress, **opts))
        res = dataclasses.replace(rb, method=name, options={**rb.options, "sigma_used": s_used})
        out.append(_summary(res, w_c, mse_c, f"{name}-{rounds}", rounds))
    return out


def _same():
    import contextlib

    return contextlib.nullcontext()


COLUMNS = [("method", "label", "<28s"), ("test MSE", "mse", "10.5f"), ("central MSE", "mse_central", "12.5f"),
           ("rel. error", "rel_error", "11.3e"), ("rounds", "rounds", "6d"), ("floats sent", "floats_sent", "12d"),
           ("seconds", "seconds", "8.3f")]


def table_rows(results) -> list[dict]:
    """The summary columns of each Result (what the table prints)."""
    rows = []
    for r in results:
        last = r.history[-1] if r.history else {}
        rows.append({"label": r.extra.get("label", r.method), "mse": r.final["mse"],
                     "mse_central": r.final["mse_central"], "rel_error": r.final["rel_error"],
                     "rounds": int(r.extra.get("rounds", 0)), "floats_sent": int(last.get("floats_sent", 0)),
                     "seconds": r.solver_seconds})
    return rows


def run(args) -> int:
    """``ridge``: the generated flags' values (text parsed once, here), each checked by its owner — the preset's,
    the problem's, the one-shot method's (in :func:`run_preset`, by the driver) — then the run and the table."""
    from fedsciml.cli.common import CLIError, given_options, set_threads, status
    from fedsciml.options import check_options, cli_names, declared
    from fedsciml.problems import REGISTRY
    from fedsciml.problems.base import PROBLEM_ERRORS
    from fedsciml.runtime.driver import METHODS
    from fedsciml.runtime.results import check_output_dir, check_output_file, write_json

    with cli_names(args._ridge_flags):
        preset = check_options("ridge", declared(PRESET), given_options(args, "ropt_", declared(PRESET)))
    name = PROBLEMS[preset["features"]]
    # a flag of the other ridge problem (--dim with --features rff): refused here, naming the flags this problem
    # has in this subcommand (not its options without a flag, e.g. penalty: the preset puts σ at the server)
    own = {k: f for k, f in args._problem_flags.items() if k in REGISTRY[name].specs()}
    other = [args._problem_flags[k] for k in given_options(args, "popt_") if k not in own]
    if other:
        import difflib

        hints = [f"{f} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(f, own.values(), 1)) else f
                 for f in other]
        raise CLIError(f"--features {preset['features']} ({name}) has no option {', '.join(hints)}; "
                       f"allowed: {', '.join(sorted(own.values()))}")
    with cli_names(args._problem_flags):
        popts = given_options(args, "popt_", REGISTRY[name].specs(), f"problem {name!r}", errors=PROBLEM_ERRORS)
    with cli_names(args._method_flags):
        mopts = given_options(args, "mopt_", METHODS[METHOD].config.specs(), METHOD)
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
        results = run_preset(preset["features"], popts, mopts, clients=args.clients, seed=args.seed,
                             device=args.device, engine=args.engine, baselines=preset["baselines"],
                             rounds=preset["rounds"], flags=(args._problem_flags, args._method_flags))
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
