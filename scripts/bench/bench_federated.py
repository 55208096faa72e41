"""Federated solver benchmarks (issue 3 targets): prints a table and writes JSON.

Groups (``--only``, comma-separated):

* ``pde1d``    — bratu, allen-cahn, fisher, reaction-diffusion with 2 and 4 clients,
                 30 s each (60 s reaction–diffusion): gn ≤ 1e-6, fipa (rank ≤ 20) ≤ 1e-4,
                 fedavg at least 10× worse than fipa.
* ``poisson``  — d ∈ {1, 2, 3, 5}, 2 clients split along x₁, 60 s: fipa ≥ 10× better than
                 fedavg; gn ≤ 1e-5 for d ≤ 2.
* ``sin1d``    — n = 2, 4, 8 on 2, 4, 8 clients (8: the paper's uneven split): fipa MSE ≤ 1e-5,
                 gn ≤ 1e-8.
* ``gauss2d``  — 9 clients: fipa below fedavg.
* ``overhead`` — gn with K clients vs centralized LM for the same number of LM steps:
                 wall time ratio ≤ 1.5.

Every run reports rounds, seconds, final error, floats sent in total and per round.
``--quick`` scales every budget by 0.2 and keeps one case per group (a smoke run).  ``--cpu-clock`` measures the
budgets (and the history's ``time_s``) in process CPU seconds instead of wall seconds — with one torch thread a
figure that does not depend on what else loads the machine (as ``scripts/bench/pde_zoo.py`` does); the published
table used wall seconds.  ``--repro NAME`` also writes ``reproductions/NAME.{csv,md}`` (command, commit, threads,
niceness, clock and load average on top).

    python scripts/bench/bench_federated.py --only pde1d --clients 2 --json bench_pde1d.json
    python scripts/bench/bench_federated.py --quick
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from fedsciml.problems import get_problem  # noqa: E402
from fedsciml.api import solve  # noqa: E402

PDE1D = ("bratu", "allen-cahn", "fisher", "reaction-diffusion")
GROUPS = ("pde1d", "poisson", "sin1d", "gauss2d", "overhead")


def cases(args):
    """(group, problem name, problem options, clients, budget, {method: (target kind, value)})."""
    out = []
    if "pde1d" in args.only:
        for name in PDE1D[:1] if args.quick else PDE1D:
            for K in args.clients:
                budget = 60.0 if name == "reaction-diffusion" else 30.0
                out.append(("pde1d", name, {}, K, budget, {"gn": ("<=", 1e-6), "fipa": ("<=", 1e-4),
                                                            "fedavg": ("x_worse_than_fipa", 10.0)}))
    if "poisson" in args.only:
        for d in (1,) if args.quick else (1, 2, 3, 5):
            tg = {"fipa": None, "fedavg": ("x_worse_than_fipa", 10.0)}
            tg["gn"] = ("<=", 1e-5) if d <= 2 else None
            out.append(("poisson", "poisson", {"dim": d}, 2, 60.0, tg))
    if "sin1d" in args.only:
        for n, K in ((2, 2),) if args.quick else ((2, 2), (4, 4), (8, 8)):
            opts = {"n": n, "split": "uneven" if K == 8 else "equal"}
            out.append(("sin1d", "sin1d", opts, K, 30.0, {"gn": ("<=", 1e-8), "fipa": ("<=", 1e-5), "fedavg": None}))
    if "gauss2d" in args.only:
        out.append(("gauss2d", "gauss2d", {}, 9, 60.0, {"fipa": ("below_fedavg", None), "fedavg": None}))
    return out


def run_one(problem, method, K, budget, args, **extra):
    opts = dict(budget=budget, every=10**9, **extra)
    if method == "fipa":
        opts.update(rank=args.rank)
    res = solve(problem, method=method, clients=K, seed=args.seed, device=args.device, progress=False, **opts)
    last = res.history[-1] if res.history else {}
    rounds = int(res.extra.get("rounds", last.get("step", 0)))
    sent = int(last.get("floats_sent", 0))
    return {"rounds": rounds, "seconds": round(res.wall_time_s, 2), "solver_seconds": round(last.get("time_s", 0.0), 2),
            "metric": res.metric_name, "error": res.error, "floats_sent": sent,
            "floats_per_round": sent / rounds if rounds else 0.0, "options": res.options, "strategy": res.extra.get("strategy", {})}


def check(target, err, fipa_err, fedavg_err):
    if target is None:
        return None
    kind, v = target
    if kind == "<=":
        return err <= v
    if kind == "x_worse_than_fipa":
        return fipa_err is not None and err >= v * fipa_err
    if kind == "below_fedavg":
        return fedavg_err is not None and err < fedavg_err
    return None


def target_text(target):
    if target is None:
        return "report"
    kind, v = target
    if kind == "below_fedavg":
        return "< fedavg"
    return f"≤ {v:g}" if kind == "<=" else f"≥ {v:g}× fipa"


def bench_overhead(args):
    """gn with K clients vs centralized LM (same LM object, same number of steps).

    Centralized LM is timed in both of its solve forms: ``normal`` (p×p Cholesky of JᵀJ + μI, the
    same linear algebra federated gn must do, since clients can only send JᵀJ) and ``auto`` (the
    kernel form Jᵀ(JJᵀ + μI)⁻¹ when n < p, which needs the pooled J and so has no federated analogue).
    """
    from fedsciml.core.objective import stack_objectives
    from fedsciml.methods.centralized import SolveConfig, solve_least_squares
    from fedsciml.core.lm import LMConfig

    rows = []
    for name, K in (("bratu", 4), ("sin1d", 8)) if not args.quick else (("bratu", 2),):
        popts = {"split": "uneven"} if name == "sin1d" and K == 8 else {}
        problem = get_problem(name, **popts)
        steps = 5 if args.quick else 10
        objs = problem.client_objectives(K, seed=args.seed, device=args.device)
        theta0 = problem.init_params(args.seed, device=args.device)
        times = {}
        for form in ("normal", "auto"):
            cfg = SolveConfig("lm", max_iters=steps, lm=LMConfig(solve=form))
            th_c, rows_c, _ = solve_least_squares(stack_objectives(objs), theta0, problem.evaluate, cfg)
            times[form] = rows_c[-1]["time_s"]
        fed = solve(problem, method="gn", clients=K, seed=args.seed, device=args.device, rounds=steps)
        t_f = fed.history[-1]["time_s"]
        err_c = problem.evaluate(th_c)[fed.metric_name]
        same = abs(err_c - fed.error) <= 1e-6 * max(1e-12, abs(err_c))
        ratio = t_f / times["normal"]
        rows.append({"group": "overhead", "problem": name, "clients": K, "steps": steps,
                     "centralized_normal_s": round(times["normal"], 3), "centralized_kernel_s": round(times["auto"], 3),
                     "gn_s": round(t_f, 3), "ratio_vs_normal": ratio, "ratio_vs_kernel": t_f / times["auto"],
                     "pass": ratio <= 1.5, "same_error": same, "centralized_error": err_c, "gn_error": fed.error})
        print(f"overhead {name:10s} K={K}: {steps} LM steps: centralized normal form {times['normal']:6.2f}s, "
              f"kernel form {times['auto']:6.2f}s, federated gn {t_f:6.2f}s → ratio {ratio:.2f} vs normal "
              f"(target ≤ 1.5: {'PASS' if ratio <= 1.5 else 'FAIL'}), {t_f / times['auto']:.2f} vs kernel; "
              f"same final error: {same}", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated groups from {', '.join(GROUPS)}")
    ap.add_argument("--clients", default="2,4", help="pde1d: client counts")
    ap.add_argument("--problems", default=None, help="pde1d: restrict to these problems (comma-separated)")
    ap.add_argument("--methods", default="gn,fipa,fedavg", help="methods to run")
    ap.add_argument("--rank", type=int, default=20, help="FIPA rank")
    ap.add_argument("--budget-scale", type=float, default=1.0, help="multiply every time budget")
    ap.add_argument("--quick", action="store_true", help="one case per group, budgets × 0.2")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (shared machines: 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default="bench_federated.json")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="budgets and time_s in process CPU seconds instead of wall seconds")
    ap.add_argument("--repro", default=None, help="also write reproductions/REPRO.{csv,md}")
    args = ap.parse_args(argv)
    args.only = [g.strip() for g in args.only.split(",") if g.strip()]
    bad = set(args.only) - set(GROUPS)
    if bad:
        ap.error(f"unknown group(s) {sorted(bad)}; allowed: {', '.join(GROUPS)}")
    args.clients = [int(k) for k in args.clients.split(",")]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_clock:
        from fedsciml.runtime import history

        class _CPUClock:  # the history's clock (and so the budget): process CPU seconds
            perf_counter = staticmethod(time.process_time)

        history.time = _CPUClock  # type: ignore[assignment]
    load0, cpu0, wall0 = os.getloadavg(), time.process_time(), time.perf_counter()
    scale = args.budget_scale * (0.2 if args.quick else 1.0)
    rows = []
    header = (f"{'group':8s} {'problem':20s} {'K':>2s} {'method':7s} {'budget':>6s} {'rounds':>6s} {'seconds':>8s} "
              f"{'error':>10s} {'target':>12s} {'ok':>4s} {'floats sent':>12s} {'floats/round':>12s}")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s), {platform.processor() or platform.machine()}",
          flush=True)
    print(header, flush=True)
    for group, name, popts, K, budget, targets in cases(args):
        if args.problems and group == "pde1d" and name not in args.problems.split(","):
            continue
        problem = get_problem(name, **popts)
        label = name + "".join(f" {k}={v}" for k, v in popts.items() if k != "split")
        results = {}
        for m in methods:
            if m not in targets:
                continue
            r = run_one(problem, m, K, budget * scale, args)
            results[m] = r
        fipa_err = results.get("fipa", {}).get("error")
        fedavg_err = results.get("fedavg", {}).get("error")
        for m, r in results.items():
            ok = check(targets.get(m), r["error"], fipa_err, fedavg_err)
            row = {"group": group, "problem": name, "problem_options": popts, "clients": K, "method": m,
                   "budget_s": budget * scale, "target": target_text(targets.get(m)), "pass": ok, **r}
            rows.append(row)
            print(f"{group:8s} {label:20s} {K:2d} {m:7s} {budget * scale:6.0f} {r['rounds']:6d} {r['seconds']:8.1f} "
                  f"{r['error']:10.2e} {row['target']:>12s} {('-' if ok is None else ('PASS' if ok else 'FAIL')):>4s} "
                  f"{r['floats_sent']:12d} {r['floats_per_round']:12.4g}", flush=True)
    if "overhead" in args.only:
        rows += bench_overhead(args)
    meta = {"torch": torch.__version__, "threads": torch.get_num_threads(), "quick": args.quick,
            "budget_scale": scale, "seed": args.seed, "device": args.device, "argv": sys.argv[1:],
            "note": "timings on a shared machine; budgets are solver time (evaluation excluded)"}
    with open(args.json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=2, default=str)
    print(f"wrote {args.json}")
    if args.repro:
        write_repro(args, rows, scale, load0, os.getloadavg(), time.process_time() - cpu0, time.perf_counter() - wall0)
    return 0


def write_repro(args, rows, scale, load0, load1, cpu, wall):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "papers"))
    import repro_common

    cols = ["group", "problem", "problem_options", "clients", "method", "budget_s", "rounds", "solver_seconds",
            "error", "target", "pass", "floats_sent", "floats_per_round"]
    out = [{**r, "problem_options": ",".join(f"{k}={v}" for k, v in r.get("problem_options", {}).items()),
            "pass": "-" if r.get("pass") is None else ("yes" if r["pass"] else "no")} for r in rows if "method" in r]
    note = (f"Budgets in {'process CPU' if args.cpu_clock else 'wall'} seconds (scale {scale:g}); seed {args.seed}, "
            f"device {args.device}, torch {torch.__version__}, {torch.get_num_threads()} thread(s) (OMP_NUM_THREADS = "
            f"{os.environ.get('OMP_NUM_THREADS', 'unset')}), niceness {os.nice(0)}, {os.cpu_count()} cores; load "
            f"average {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} at the start, {load1[0]:.2f} / {load1[1]:.2f} / "
            f"{load1[2]:.2f} at the end; {cpu:.0f} CPU s and {wall:.0f} s wall in all (evaluation included).")
    print(repro_common.write(args.repro, cols, out, note))


if __name__ == "__main__":
    raise SystemExit(main())
