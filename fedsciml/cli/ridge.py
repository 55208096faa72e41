"""``python -m fedsciml ridge ...``: one-shot federated ridge with a summary table — a preset over ``solve``.

The data are the zoo problem ``ridge-linear`` (or ``ridge-rff`` with
``--features rff``) with the subcommand's options, split among ``--clients``
clients; the one-shot fit is ``solve(problem, method="one-shot", ...)`` — the
runtime's round loop, one-shot strategy and transport (``--engine local`` or
``flower``), so dropout, rejections logged by client and reason, float
accounting and the Result are those of ``solve``.  The iterative baselines
(``--baselines``) run on the same round loop (:mod:`fedsciml.ridge.baselines`).
Every method gives one :class:`~fedsciml.runtime.results.Result`; the table prints, per
method, the test MSE, the centralized (pooled-data) MSE, the relative model
error ``‖w − w_central‖/‖w_central‖``, the rounds, the floats sent and the
seconds; ``--json FILE`` writes the Results with the JSON writer of ``solve``
(``{"runs": [...]}``).
"""
from __future__ import annotations

import argparse

import fedsciml.engines  # noqa: F401  (registers the methods and the engines with the driver)
from fedsciml.options import parse_grid
import math
import time

import torch

from fedsciml.ridge.model_io import write_model


def estimate_memory(clients, dim, samples, features="linear", rff_dim=300, cv=None, project=None, epsilon=None,
                    baselines=()) -> tuple[float, str]:
    """``(bytes, how)``: the peak memory of a ``ridge`` run, estimated before anything is built (8-byte floats).

    The data (every client's rows, the 20 % test rows included), the clients' messages (square-root factors
    ``min(n_k, m)×m`` with CV and no DP where ``2n_k ≤ m``, else packed Grams), the server's working set (a few
    m×m matrices; with CV one more per σ and the candidate models ``K·|Σ|·m``), and the pooled oracle (the rows
    once more, and d×d)."""
    d = int(rff_dim if features == "rff" else dim)
    m = int(project or d)
    K, n = int(clients), int(samples)
    n_train = n - n // 5
    S = len(cv) if cv else 0
    sqrt = bool(S) and epsilon is None and 2 * n_train <= m
    data = K * n * (d + 1) + (K * n * m if project else 0)
    msgs = K * (min(n_train, m) * (m + 1) if sqrt else m * (m + 1) // 2 + m)
    server = 4 * m * m + S * (m * m + K * m) + (min(K * 32 << 20, 6 * S * K * m) if S else 0)
    oracle = K * n_train * d + 2 * d * d
    base = 2 * K * n * d if baselines else 0
    total = 8.0 * (data + msgs + server + oracle + base)
    how = (f"{K:,} clients × {n:,} rows × {d:,} features, {'square-root' if sqrt else 'Gram'} messages"
           + (f", CV over {S} σ" if S else ""))
    return total, how


def add_parser(subparsers):
    p = subparsers.add_parser(
        "ridge", help="one-shot federated ridge regression (sufficient statistics, DP, projection, CV)",
        description="One-shot federated ridge on the paper's synthetic heterogeneous data: each client sends "
                    "(A_kᵀA_k, A_kᵀb_k) once, the server solves (ΣG_k + σI) w = Σh_k.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--clients", type=int, default=20, help="number of clients K")
    p.add_argument("--dim", type=int, default=100, help="feature dimension d (linear features)")
    p.add_argument("--samples", type=int, default=500, help="samples per client (20%% held out for the test set)")
    p.add_argument("--heterogeneity", type=float, default=0.5, help="heterogeneity γ ∈ [0, 1]")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--sigma", type=float, default=0.01, help="ridge regularization σ")
    g.add_argument("--cv", default=None, metavar="GRID",
                   help="choose σ by leave-one-client-out CV over GRID: 'a,b,c' or 'lo:hi:count' (log-spaced)")
    p.add_argument("--epsilon", type=float, default=None, help="(ε, δ)-DP per client dataset (omit: no privacy)")
    p.add_argument("--delta", type=float, default=1e-5, help="δ of the DP guarantee")
    p.add_argument("--central-dp", action="store_true", help="noise once on the secure sum instead of per client")
    p.add_argument("--clip-a", type=float, default=1.0, help="DP row clipping ‖a‖ ≤ C_a")
    p.add_argument("--clip-b", type=float, default=1.0, help="DP row clipping |b| ≤ C_b")
    p.add_argument("--noise-aware-sigma", action="store_true", help="DP: add the noise's spectral norm to σ")
    p.add_argument("--project", type=int, default=None, metavar="M", help="random projection to m dimensions")
    p.add_argument("--sketch", default="gaussian", choices=["gaussian", "sparse", "srht"], help="projection kind")
    p.add_argument("--dropout", type=float, default=0.0, help="probability that a client fails to answer")
    p.add_argument("--features", default="linear", choices=["linear", "rff"], help="linear features or random Fourier features")
    p.add_argument("--rff-dim", type=int, default=300, help="number of random Fourier features D (--features rff)")
    p.add_argument("--baselines", default="", help="comma-separated iterative baselines to add: fedavg,fedprox,dp-fedavg")
    p.add_argument("--rounds", type=int, default=100, help="rounds of the iterative baselines")
    p.add_argument("--seed", type=int, default=0, help="seed of the data, sketch, noise and dropout")
    p.add_argument("--engine", default="local", choices=["local", "flower"],
                   help="who carries the one-shot messages: this process, or Flower's simulation engine "
                        "(as `solve --engine`; the baselines run in this process)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    from fedsciml.cli.common import THREADS_HELP

    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write the results as JSON to FILE (an existing file is overwritten; checked before the run)")
    p.add_argument("--out", default=None, metavar="DIR",
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
    """One CLI/script run: one-shot through ``solve`` (with the requested options), the pooled oracle, optional
    baselines on the round loop.  Returns one :class:`~fedsciml.runtime.results.Result` per method (one-shot first,
    then ``centralized``, then the baselines), each with ``final["mse"]``, ``final["mse_central"]``,
    ``final["rel_error"]`` and ``extra["label"]``."""
    from fedsciml.runtime.results import Result
    from fedsciml.ridge.baselines import fedavg
    from fedsciml.core.stats import pooled_ridge
    from fedsciml.runtime.driver import ENGINES, resolve_device, solve

    if int(clients) != clients or clients < 1:
        raise ValueError(f"--clients must be a positive integer, got {clients}")
    if sigma is not None and not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"--sigma must be a finite number ≥ 0, got {sigma}")
    for name, v, ok, allowed in (("delta", delta, lambda x: 0 < x < 1, "in (0, 1)"),
                                 ("clip-a", clip_a, lambda x: x > 0, "> 0"), ("clip-b", clip_b, lambda x: x > 0, "> 0"),
                                 ("dropout", dropout, lambda x: 0 <= x < 1, "in [0, 1)")):
        if not (math.isfinite(v) and ok(v)):
            raise ValueError(f"--{name} must be a finite number {allowed}, got {v}")
    if engine not in ENGINES:
        raise ValueError(f"--engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    names = [x.strip() for x in (baselines.split(",") if isinstance(baselines, str) else baselines) if x.strip()]
    use_dp = epsilon is not None and epsilon != math.inf
    for name in names:
        if name not in ("fedavg", "fedprox", "dp-fedavg"):
            raise ValueError(f"unknown baseline {name!r}; allowed: fedavg, fedprox, dp-fedavg")
        if name == "dp-fedavg" and not use_dp:
            raise ValueError("dp-fedavg needs --epsilon")
    if names and engine != "local":
        raise ValueError(f"--baselines run in this process (engine local); with --engine {engine} leave them out")
    grid = parse_grid(cv) if isinstance(cv, str) else cv
    dev = resolve_device(device)
    from fedsciml.runtime.driver import check_memory

    need, how = estimate_memory(clients, dim, samples, features, rff_dim, grid, project, epsilon if use_dp else None,
                                names)
    check_memory(need, f"ridge ({how})", dev, "use fewer clients, features or samples per client")
    problem = make_problem(features, dim, samples, heterogeneity, sigma or 0.0, rff_dim,
                           **{"penalty": "server", **(problem_options or {})})
    opts = {"dropout": float(dropout), "project": project, "project_sketch": sketch}
    if grid is None:
        opts["sigma"] = float(sigma or 0.0)
    else:
        opts["cv_sigmas"] = [float(x) for x in grid]
    if use_dp:
        opts.update(dp_epsilon=float(epsilon), dp_delta=float(delta), dp_clip_a=float(clip_a),
                    dp_clip_b=float(clip_b), dp_central=bool(central_dp), dp_noise_aware=bool(noise_aware_sigma))
    one = solve(problem, "one-shot", clients=int(clients), seed=seed, device=dev, engine=engine, progress=progress,
                **opts)
    s_used = float(one.extra.get("sigma_used", opts.get("sigma", 0.0)))
    # the pooled oracle on every client's data (those that dropped out included), σ as the one-shot used
    t0 = time.perf_counter()
    data = problem.client_data(int(clients), seed, dev)
    A = torch.cat([a for a, _ in data])
    b = torch.cat([y for _, y in data])
    w_c = pooled_ridge(A, b, s_used)
    t_c = time.perf_counter() - t0
    ev = lambda u: problem.evaluate(u)["mse"]  # noqa: E731
    mse_c = ev(w_c)
    d = int(w_c.numel())
    label = "one-shot" + ("" if not use_dp else f" DP ε={epsilon}{' central' if central_dp else ''}") \
        + ("" if not project or project == d else f" m={project}")
    # the test rows of this split (a Flower ServerApp evaluates on its own problem copy, which has not split)
    one.final["mse"] = ev(one.theta)
    out = [_summary(one, w_c, mse_c, label, 1)]
    central = Result(problem=problem.name, method="centralized",
                     options={**problem.options, "solver": "pooled ridge (Cholesky)", "sigma_used": s_used},
                     seed=seed, device=str(dev), dtype=str(w_c.dtype).replace("torch.", ""), n_params=d,
                     clients=int(clients), wall_time_s=t_c, final={"mse": mse_c},
                     history=[{"step": 0, "time_s": t_c, "mse": mse_c, "floats_sent": 0}],
                     extra={"rounds": 0}, theta=w_c)
    out.append(_summary(central, w_c, mse_c, "centralized", 0))
    for name in names:
        # DP-FedAvg's per-row gradient clip 3: the best of 1, 3, 10, 30 on a public draw of the ridge-linear
        # generator, none of the evaluated data (scripts/papers/oneshot-ridge/ridge_table5_privacy.py --fedavg-clip public)
        t0 = time.perf_counter()
        wb, _, binfo = fedavg(data, rounds=rounds, mu=0.01 if name == "fedprox" else 0.0, sigma=s_used, seed=seed,
                              dropout=dropout, evaluate=ev,
                              dp={"epsilon": epsilon, "delta": delta, "clip": 3.0} if name == "dp-fedavg" else None)
        rows = binfo.pop("rows")
        res = Result(problem=problem.name, method=name,
                     options={**problem.options, "rounds": rounds, "lr": binfo["lr"], "local_epochs":
                              binfo["local_epochs"], "mu": binfo["mu"], "sigma_used": s_used, "dropout": dropout},
                     seed=seed, device=str(dev), dtype=str(wb.dtype).replace("torch.", ""), n_params=d,
                     clients=int(clients), wall_time_s=time.perf_counter() - t0,
                     final={"loss": rows[-1]["loss"], "mse": ev(wb)}, history=rows,
                     extra=binfo, theta=wb)  # its "rows" popped above: the history
        out.append(_summary(res, w_c, mse_c, f"{name}-{rounds}", rounds))
    return out


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
                     "seconds": r.wall_time_s})
    return rows


def run(args) -> int:
    from fedsciml.cli.common import set_threads
    from fedsciml.runtime.results import check_output_dir, check_output_file, format_table, write_json

    if args.json:
        check_output_file(args.json, "--json")
    if args.out:
        check_output_dir(args.out, "--out")
    set_threads(args.threads, quiet=True)
    results = run_experiment(clients=args.clients, dim=args.dim, samples=args.samples,
                             heterogeneity=args.heterogeneity, sigma=args.sigma, cv=args.cv, epsilon=args.epsilon,
                             delta=args.delta, central_dp=args.central_dp, clip_a=args.clip_a, clip_b=args.clip_b,
                             noise_aware_sigma=args.noise_aware_sigma, project=args.project, sketch=args.sketch,
                             dropout=args.dropout, features=args.features, rff_dim=args.rff_dim,
                             baselines=args.baselines, rounds=args.rounds, seed=args.seed, device=args.device,
                             engine=args.engine)
    one = results[0]
    fused = one.extra.get("fused_clients", one.clients)
    print(f"{one.problem}: K={one.clients} ({fused} answered), σ={results[1].options['sigma_used']:.4g}, "
          f"device {one.device}, engine {args.engine}, seed {one.seed}")
    print(format_table(COLUMNS, table_rows(results)))
    for r in results:
        rej = r.extra.get("rejections")
        if rej:
            print(f"{r.method}: {len(rej)} message(s) rejected, e.g. round {rej[0]['round']} client "
                  f"{rej[0]['client']}: {rej[0]['reason']}")
    if args.json:
        write_json({"runs": [r.to_dict() for r in results]}, args.json)
        print(f"wrote {args.json}")
    if args.out:
        import os

        for path in write_model(args.out, one.theta, 0.0, model_meta(one, engine=args.engine)):
            print(f"wrote {path}")
        write_json({"runs": [r.to_dict() for r in results]}, os.path.join(args.out, "result.json"))
        print(f"wrote {os.path.join(args.out, 'result.json')}")
    return 0


def model_meta(res, **extra) -> dict:
    """What ``model.json`` says about a one-shot Result: σ used, clients fused, DP, projection, seed, problem."""
    o = res.options
    meta = {"method": res.method, "problem": res.problem, "fit_intercept": False,
            "sigma": float(res.extra.get("sigma_used", o.get("sigma", 0.0))), "clients": res.clients,
            "clients_fused": res.extra.get("fused_clients", res.clients), "seed": res.seed}
    dp = o.get("dp")
    if o.get("dp_epsilon") is not None or dp:
        eps = o.get("dp_epsilon", (dp or {}).get("epsilon"))
        meta["dp"] = {"epsilon": eps, "delta": o.get("dp_delta", (dp or {}).get("delta")),
                      "central": bool(o.get("dp_central", (dp or {}).get("central", False)))}
    if o.get("project"):
        meta["project"] = {"m": o["project"], "sketch": o.get("project_sketch", o.get("sketch"))}
    return {**meta, **extra}
