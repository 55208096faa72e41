#!/usr/bin/env python
"""Centralized reference solvers on the PDE problems, and the cost of one LM step.

Two parts:

1. **accuracy on a budget** — Levenberg–Marquardt, Adam and L-BFGS, each with
   the same wall-clock budget (solver time; test evaluation excluded), on
   every 1D PDE (bratu, allen-cahn, fisher, reaction-diffusion) and Poisson
   d = 2, all at their default options, one client (pooled data), seed 0.
   Targets (issue 2): LM ≤ 1e-6 relative L2 on every 1D PDE and ≤ 1e-5 on
   Poisson d = 2 within 60 s.
2. **speed** — for bratu and Poisson d = 2 at their defaults: the time of one
   LM step (statistics at θ, damped solve, trial loss) against its dense
   linear algebra alone (forming JᵀJ plus a Cholesky solve of H + μI), for
   the kernel-form solve the centralized solver uses when n < p and for the
   p×p normal form federated Gauss–Newton uses; and the Jacobian against a
   per-point autograd loop and against nested-``jacfwd`` Laplacians.

Prints tables and writes JSON (``--json``, default
``results/bench_centralized.json``).  Timings depend on the machine and on
what else runs on it: the JSON records the CPU count, torch threads and the
load average at the start.

    python scripts/bench/bench_centralized.py                      # everything, 60 s per run
    python scripts/bench/bench_centralized.py --budget 20 --problems bratu,poisson --optimizers lm
    python scripts/bench/bench_centralized.py --speed-only
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from fedsciml.core import linalg  # noqa: E402
from fedsciml.core.objective import gn_stats_from  # noqa: E402
from fedsciml.problems import get_problem  # noqa: E402
from fedsciml.problems.pinn import laplacian  # noqa: E402
from fedsciml.api import solve  # noqa: E402
from fedsciml.methods.centralized import lm_stats_fn  # noqa: E402
from fedsciml.core.lm import LevenbergMarquardt, LMConfig  # noqa: E402

PROBLEMS = {
    "bratu": ("bratu", {}),
    "allen-cahn": ("allen-cahn", {}),
    "fisher": ("fisher", {}),
    "reaction-diffusion": ("reaction-diffusion", {}),
    "poisson": ("poisson", {"dim": 2}),
}
TARGETS = {"poisson": 1e-5}  # LM; 1e-6 for the 1D PDEs
OPTIMIZERS = ("lm", "adam", "lbfgs")


def label(key):
    return "poisson d=2" if key == "poisson" else key


def timed(fn, reps):
    """Median wall time of ``reps`` calls (after one warm-up call) and the last value."""
    out = fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), out


def accuracy(keys, optimizers, budget, seed):
    rows = []
    for key in keys:
        name, opts = PROBLEMS[key]
        for opt in optimizers:
            pb = get_problem(name, **opts)
            cpu0 = time.process_time()
            res = solve(pb, method="centralized", clients=1, seed=seed, optimizer=opt, budget=budget)
            cpu = time.process_time() - cpu0
            last = res.history[-1]
            best = min(r["rel_l2"] for r in res.history)
            row = {"problem": label(key), "optimizer": opt, "seconds": last["time_s"], "steps": last["step"],
                   "final_rel_l2": res.final["rel_l2"], "best_rel_l2": best, "final_loss": res.final["loss"],
                   "n_params": res.n_params, "n_residuals": int(pb.centralized_objective(1, seed).n_residuals),
                   "process_cpu_s": cpu, "wall_s": res.wall_time_s}
            if opt == "lm":
                row["target"] = TARGETS.get(key, 1e-6)
                row["met"] = bool(res.final["rel_l2"] <= row["target"])
                row.update({k: res.extra.get(k) for k in ("accepted_steps", "rejected_steps", "lm_solve")})
            rows.append(row)
            print(f"  {row['problem']:20s} {opt:6s} {row['seconds']:7.1f}s {row['steps']:7d} steps  "
                  f"rel_l2 {row['final_rel_l2']:.3e}", file=sys.stderr, flush=True)
    return rows


def speed(key, seed, reps, loop):
    name, opts = PROBLEMS[key]
    pb = get_problem(name, **opts)
    obj = pb.centralized_objective(1, seed)
    theta = pb.init_params(seed)
    n, p = obj.n_residuals, obj.n_params
    t_rj, (r, J) = timed(lambda: obj.residual_and_jacobian(theta), reps)
    t_gram, st = timed(lambda: gn_stats_from(J, r), reps)
    mu = 1e-3 * float(st.H.diagonal().max())
    t_chol, _ = timed(lambda: linalg.damped_solve(st.H, st.g, mu), reps)
    t_la = t_gram + t_chol
    out = {"problem": label(key), "n_residuals": n, "n_params": p, "jacobian_s": t_rj, "gram_s": t_gram,
           "cholesky_solve_s": t_chol, "dense_linear_algebra_s": t_la}
    for mode in ("kernel", "normal"):
        cfg = LMConfig(solve=mode)
        stats_at = lm_stats_fn(obj, LevenbergMarquardt(cfg))
        stats0 = stats_at(theta)

        def step():  # one accepted LM iteration as the centralized solver runs it:
            lm = LevenbergMarquardt(cfg)  # fresh, so nothing is cached from the previous repetition
            lm.start(theta, stats0)
            trial = lm.propose()  # damped solve (kernel form: forms JJᵀ first)
            float(obj.loss(trial))  # the trial loss
            stats_at(trial)  # statistics at the new point (an accepted step)

        t_step, _ = timed(step, reps)
        out[f"lm_step_{mode}_s"] = t_step
        out[f"lm_step_{mode}_over_linear_algebra"] = t_step / t_la
    # the nested-jacfwd Laplacian the forward Laplacian replaced (same numbers, slower)
    part = obj.parts[0]

    def nested(th, x):
        u = pb.u(th, x)
        return -laplacian(pb.u, th, x) + pb.reaction(u, x) - pb.source(x)

    from torch.func import jacrev, vmap

    t_nested, Jn = timed(lambda: vmap(jacrev(nested), in_dims=(None, 0))(theta, part.points), reps)
    out["jacobian_interior_nested_jacfwd_s"] = t_nested
    out["jacobian_interior_forward_laplacian_s"], Jf = timed(lambda: obj._part_jacobian(part, theta), reps)
    out["nested_vs_forward_max_abs_diff"] = float((Jn - Jf).abs().max())
    if loop:
        t = time.perf_counter()
        Jl = obj.jacobian_loop(theta)
        out["jacobian_autograd_loop_s"] = time.perf_counter() - t
        out["speedup_over_autograd_loop"] = out["jacobian_autograd_loop_s"] / t_rj
        out["loop_vs_vmap_max_abs_diff"] = float((Jl - J).abs().max())
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per (problem, optimizer) run (default 60)")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help=f"comma-separated subset of {','.join(PROBLEMS)}")
    ap.add_argument("--optimizers", default=",".join(OPTIMIZERS), help="comma-separated subset of lm,adam,lbfgs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3, help="repetitions per timing (median; default 3)")
    ap.add_argument("--no-loop", action="store_true", help="skip the (slow) per-point autograd loop timing")
    ap.add_argument("--speed-only", action="store_true", help="only the speed report")
    ap.add_argument("--json", default="results/bench_centralized.json", help="output JSON path")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = ap.parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            ap.error(f"--threads must be ≥ 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    keys = [k.strip() for k in args.problems.split(",") if k.strip()]
    bad = [k for k in keys if k not in PROBLEMS]
    if bad:
        ap.error(f"unknown problem(s) {bad}; allowed: {', '.join(PROBLEMS)}")
    opts = [o.strip() for o in args.optimizers.split(",") if o.strip()]
    if any(o not in OPTIMIZERS for o in opts):
        ap.error(f"optimizers must be among {', '.join(OPTIMIZERS)}, got {opts}")
    if not args.budget > 0:
        ap.error(f"--budget must be > 0 seconds, got {args.budget}")

    meta = {"command": " ".join([os.path.basename(sys.argv[0])] + (argv if argv is not None else sys.argv[1:])),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "platform": platform.platform(), "load_average_at_start": list(os.getloadavg()),
            "budget_s": args.budget, "seed": args.seed,
            "note": "timings on a CPU possibly shared with other jobs; see load_average_at_start"}
    print(f"bench_centralized: {meta['cpu_count']} CPUs, torch {meta['torch']} ({meta['torch_threads']} threads), "
          f"load average {meta['load_average_at_start']}", file=sys.stderr)

    speed_rows = []
    for key in [k for k in ("bratu", "poisson") if k in keys]:
        print(f"speed: {label(key)}", file=sys.stderr, flush=True)
        speed_rows.append(speed(key, args.seed, args.reps, loop=not args.no_loop))
    acc_rows = [] if args.speed_only else accuracy(keys, opts, args.budget, args.seed)

    if acc_rows:
        print(f"\nAccuracy within a {args.budget:g} s budget (default options, pooled data, seed {args.seed})")
        print(f"{'problem':20s} {'optimizer':9s} {'seconds':>8s} {'CPU s':>7s} {'steps':>7s} {'final rel L2':>13s} "
              f"{'LM target':>14s}")
        for r in acc_rows:
            tgt = f"{r['target']:.0e} {'met' if r['met'] else 'MISSED'}" if "target" in r else ""
            print(f"{r['problem']:20s} {r['optimizer']:9s} {r['seconds']:8.1f} {r['process_cpu_s']:7.1f} {r['steps']:7d} "
                  f"{r['final_rel_l2']:13.3e} {tgt:>14s}")
        print("(seconds: solver wall time, test evaluation excluded; CPU s: this process's CPU time for the whole "
              "run — much less than threads × seconds means the CPU was shared)")
    if speed_rows:
        print("\nOne LM step against its dense linear algebra (median of "
              f"{args.reps}; seconds)")
        print(f"{'problem':14s} {'n×p':>10s} {'J,r':>7s} {'JᵀJ':>7s} {'chol':>7s} {'LA':>7s} "
              f"{'step(kernel)':>13s} {'/LA':>6s} {'step(normal)':>13s} {'/LA':>6s} {'loop J':>8s} {'speed-up':>9s}")
        for s in speed_rows:
            loop = s.get("jacobian_autograd_loop_s")
            print(f"{s['problem']:14s} {s['n_residuals']:4d}×{s['n_params']:<5d} {s['jacobian_s']:7.3f} "
                  f"{s['gram_s']:7.3f} {s['cholesky_solve_s']:7.3f} {s['dense_linear_algebra_s']:7.3f} "
                  f"{s['lm_step_kernel_s']:13.3f} {s['lm_step_kernel_over_linear_algebra']:6.2f} "
                  f"{s['lm_step_normal_s']:13.3f} {s['lm_step_normal_over_linear_algebra']:6.2f} "
                  + (f"{loop:8.2f} {s['speedup_over_autograd_loop']:8.1f}×" if loop else ""))
            print(f"{'':14s} interior Jacobian: forward Laplacian {s['jacobian_interior_forward_laplacian_s']:.3f} s, "
                  f"nested jacfwd {s['jacobian_interior_nested_jacfwd_s']:.3f} s")
    out = {"meta": meta, "accuracy": acc_rows, "speed": speed_rows}
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
