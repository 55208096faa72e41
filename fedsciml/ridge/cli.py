"""``python -m fedsciml ridge ...``: one-shot federated ridge with a summary table.

Prints, per method, the test MSE, the centralized (pooled-data) MSE, the
relative model error ``‖w − w_central‖/‖w_central‖``, the floats sent and the
seconds; ``--json FILE`` writes the same as JSON.
"""
from __future__ import annotations

import argparse
import math
import time

import torch


def parse_grid(text: str) -> list[float]:
    """``"1e-3,0.01,0.1"`` or a log grid ``"1e-4:1e3:15"`` (lo:hi:count)."""
    try:
        if ":" in text:
            lo, hi, n = text.split(":")
            lo, hi, n = float(lo), float(hi), int(n)
            if not (lo > 0 and hi > lo and n >= 2):
                raise ValueError
            return torch.logspace(math.log10(lo), math.log10(hi), n, dtype=torch.float64).tolist()
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--cv grid {text!r} must be comma-separated σ values or lo:hi:count with 0 < lo < hi, count ≥ 2")
    if not vals or any(not (v > 0) for v in vals):
        raise ValueError(f"--cv grid {text!r} must hold σ values > 0")
    return vals


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
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    from fedsciml.cli import THREADS_HELP

    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.add_argument("--json", default=None, metavar="FILE",
                   help="write the results as JSON to FILE (an existing file is overwritten; checked before the run)")
    return p


def make_problem(features="linear", dim=100, samples=500, heterogeneity=0.5, sigma=0.01, rff_dim=300, **extra):
    from fedsciml.problems import get_problem

    common = dict(n_samples=samples, heterogeneity=heterogeneity, sigma=sigma, **extra)
    if features == "rff":
        return get_problem("ridge-rff", rff_dim=rff_dim, **common)
    return get_problem("ridge-linear", dim=dim, **common)


def run_experiment(*, clients=20, dim=100, samples=500, heterogeneity=0.5, sigma=0.01, cv=None, epsilon=None,
                   delta=1e-5, central_dp=False, clip_a=1.0, clip_b=1.0, noise_aware_sigma=False, project=None,
                   sketch="gaussian", dropout=0.0, features="linear", rff_dim=300, baselines=(), rounds=100, seed=0,
                   device="cpu", problem_options=None) -> dict:
    """One CLI/script run: one-shot (with the requested options), the oracle, optional baselines."""
    from fedsciml.ridge.baselines import fedavg
    from fedsciml.ridge.dp import DPConfig
    from fedsciml.ridge.protocol import dropout_mask, one_shot
    from fedsciml.ridge.stats import pooled_ridge
    from fedsciml.runner import resolve_device

    from fedsciml.runner import check_memory

    if int(clients) != clients or clients < 1:
        raise ValueError(f"--clients must be a positive integer, got {clients}")
    if sigma is not None and not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"--sigma must be a finite number ≥ 0, got {sigma}")
    for name, v, ok, allowed in (("delta", delta, lambda x: 0 < x < 1, "in (0, 1)"),
                                 ("clip-a", clip_a, lambda x: x > 0, "> 0"), ("clip-b", clip_b, lambda x: x > 0, "> 0"),
                                 ("dropout", dropout, lambda x: 0 <= x < 1, "in [0, 1)")):
        if not (math.isfinite(v) and ok(v)):
            raise ValueError(f"--{name} must be a finite number {allowed}, got {v}")
    dev = resolve_device(device)
    problem = make_problem(features, dim, samples, heterogeneity, sigma or 0.0, rff_dim, **(problem_options or {}))
    d = problem.n_features()
    d_in = problem.options.get("input_dim", d)
    # every client's rows (A_k, b_k) and inputs, and one d×d Gram per client
    check_memory(8.0 * clients * (samples * (d + d_in + 1) + d * d),
                 f"ridge with {clients:,} clients × {samples:,} samples × {d:,} features", dev,
                 "use fewer clients, samples or features")
    data = problem.client_data(clients, seed, dev)
    present = dropout_mask(clients, dropout, seed)
    if not present:
        raise ValueError(f"all {clients} clients dropped out (dropout={dropout}); no statistics to fuse")
    sub = [data[k] for k in present]
    dp = None
    if epsilon is not None and epsilon != math.inf:
        dp = DPConfig(epsilon, delta, clip_a, clip_b, central=central_dp, noise_aware_sigma=noise_aware_sigma)
    grid = parse_grid(cv) if isinstance(cv, str) else cv
    t0 = time.perf_counter()
    w, info = one_shot(sub, sigma if grid is None else 0.0, dp=dp, project=project, sketch=sketch, cv_sigmas=grid,
                       seed=seed)
    t_one = time.perf_counter() - t0
    s_used = info["sigma"]
    t0 = time.perf_counter()
    A = torch.cat([a for a, _ in data])
    b = torch.cat([y for _, y in data])
    w_c = pooled_ridge(A, b, s_used)
    t_c = time.perf_counter() - t0
    rel = lambda u: float((u - w_c).norm() / w_c.norm().clamp_min(1e-300))  # noqa: E731
    mse_c = problem.evaluate(w_c)["mse"]
    label = "one-shot" + ("" if dp is None else f" DP ε={epsilon}{' central' if central_dp else ''}") \
        + ("" if not project or project == w.shape[0] else f" m={project}")
    rows = [{"method": label, "mse": problem.evaluate(w)["mse"], "mse_central": mse_c, "rel_error": rel(w),
             "rounds": 1, "floats_sent": info["floats_sent"], "seconds": t_one},
            {"method": "centralized", "mse": mse_c, "mse_central": mse_c, "rel_error": 0.0, "rounds": 0,
             "floats_sent": 0, "seconds": t_c}]
    if len(present) < clients:
        A_s = torch.cat([a for a, _ in sub])
        b_s = torch.cat([y for _, y in sub])
        w_s = pooled_ridge(A_s, b_s, s_used)
        info["rel_error_vs_participants_oracle"] = float((w - w_s).norm() / w_s.norm()) if dp is None and not project else None
    ev = lambda u: problem.evaluate(u)["mse"]  # noqa: E731
    for name in [x.strip() for x in (baselines.split(",") if isinstance(baselines, str) else baselines) if x.strip()]:
        if name not in ("fedavg", "fedprox", "dp-fedavg"):
            raise ValueError(f"unknown baseline {name!r}; allowed: fedavg, fedprox, dp-fedavg")
        if name == "dp-fedavg" and dp is None:
            raise ValueError("dp-fedavg needs --epsilon")
        t0 = time.perf_counter()
        # DP-FedAvg's per-row gradient clip 3: the best of 1, 3, 10, 30 on a public draw of the ridge-linear
        # generator, none of the evaluated data (scripts/ridge_table5_privacy.py --fedavg-clip public)
        wb, hist, binfo = fedavg(sub, rounds=rounds, mu=0.01 if name == "fedprox" else 0.0, sigma=s_used, seed=seed,
                                 dp={"epsilon": epsilon, "delta": delta, "clip": 3.0} if name == "dp-fedavg" else None)
        rows.append({"method": f"{name}-{rounds}", "mse": ev(wb), "mse_central": mse_c, "rel_error": rel(wb),
                     "rounds": rounds, "floats_sent": binfo["floats_sent"], "seconds": time.perf_counter() - t0})
    return {"problem": problem.name, "options": problem.options, "clients": clients, "present": len(present),
            "seed": seed, "device": str(dev), "sigma": s_used, "rows": rows,
            "info": {k: v for k, v in info.items() if not torch.is_tensor(v)}}


def run(args) -> int:
    from fedsciml.cli import set_threads
    from fedsciml.results import check_output_file, format_table, write_json

    if args.json:
        check_output_file(args.json, "--json")
    set_threads(args.threads, quiet=True)
    res = run_experiment(clients=args.clients, dim=args.dim, samples=args.samples, heterogeneity=args.heterogeneity,
                         sigma=args.sigma, cv=args.cv, epsilon=args.epsilon, delta=args.delta, central_dp=args.central_dp,
                         clip_a=args.clip_a, clip_b=args.clip_b, noise_aware_sigma=args.noise_aware_sigma,
                         project=args.project, sketch=args.sketch, dropout=args.dropout, features=args.features,
                         rff_dim=args.rff_dim, baselines=args.baselines, rounds=args.rounds, seed=args.seed,
                         device=args.device)
    print(f"{res['problem']}: K={res['clients']} ({res['present']} answered), σ={res['sigma']:.4g}, "
          f"device {res['device']}, seed {res['seed']}")
    print(format_table([("method", "method", "<28s"), ("test MSE", "mse", "10.5f"),
                        ("central MSE", "mse_central", "12.5f"), ("rel. error", "rel_error", "11.3e"),
                        ("rounds", "rounds", "6d"), ("floats sent", "floats_sent", "12d"),
                        ("seconds", "seconds", "8.3f")], res["rows"]))
    if args.json:
        write_json(res, args.json)
        print(f"wrote {args.json}")
    return 0
