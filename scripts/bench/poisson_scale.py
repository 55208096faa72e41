#!/usr/bin/env python
"""Second order at research scale: Poisson d = 5 and d = 10, every solver at equal time, and a p ≈ 34k network.

Two parts (issue 20):

1. **accuracy at a budget** — Poisson ``−Δu = f`` on [0,1]^d, ``u = Π sin πxᵢ``, at the problem's defaults
   ([d,32,32,32,1], 800·max(d,5) interior points per client; ``--hidden``, ``--n-interior``,
   ``--n-boundary`` change them), the domain split among 4 clients.  Each run gets the same solver-time
   budget (``--budget`` seconds; test evaluation excluded) and runs in its own process at one thread, which
   reports its peak resident memory (``resource.getrusage(RUSAGE_SELF).ru_maxrss``).  ``--clock cpu``
   (default) measures that budget in **CPU seconds of the process** (``time.process_time``: the child
   replaces the clock of :class:`fedsciml.runtime.history.Recorder`, which every solver's budget and history
   times use), so that runs on a shared, loaded machine get the same amount of computation; ``--clock wall``
   keeps the library's wall clock.  ``--jobs`` runs that many children at once (CPU budgets stay equal):

   * ``centralized/lm`` — Levenberg–Marquardt on the pooled data, dense normal form (forms J and JᵀJ);
   * ``centralized/lm-matfree`` — the same LM with the matrix-free Nyström-preconditioned CG solve;
   * ``centralized/adam``, ``centralized/lbfgs`` — first-order and quasi-Newton references;
   * ``gn`` — federated Gauss–Newton, automatic form (4 clients); ``gn-matfree`` — its matrix-free form;
   * ``fipa`` — FIPA at its defaults (local GN, rank 20, safeguard), ``fedavg`` at its defaults.

   Reported: relative L2 error after ``--checkpoints`` seconds of solver time (the last history row at or
   before each), steps/rounds done, floats sent per round (federated), peak RSS.

2. **p ≈ 34k** — a [5,128,128,128,1] network (``--big``), 4 clients, ``--big-rounds`` rounds of federated gn in
   its automatic form (matrix-free at this size), or with ``--big-method fipa`` FIPA with local GN steps (its
   automatic client form is matrix-free at this size: CG step and Nyström rank-r message, ``--big-rank``,
   ``--big-cg-iters``): peak RSS of the process, rel L2 and floats per round, and the largest single message one
   client sent (every reply's floats counted by a ``message_hook``).

``--problem heat`` runs part 1 on ``heat-nd`` instead (∂ₜu = κΔₓu on [0,1]^d × [0,1], K-FAC for PINNs' heat 4d;
``--dims 4``; its own default points: 4000 interior and 400 per condition per client).

The machine is shared: the JSON records the CPU count and the load average at the start and end.

    nice -n 10 python scripts/bench/poisson_scale.py --dims 5,10 --budget 60 --checkpoints 15,30,60 \
        --jobs 4 --csv reproductions/poisson_scale.csv --md reproductions/poisson_scale_table.md
    nice -n 10 python scripts/bench/poisson_scale.py --big-only --big-rounds 5 --big-rank 10
    nice -n 10 python scripts/bench/poisson_scale.py --big-only --big-method fipa --big-rounds 3 --big-rank 10 \
        --big-cg-iters 20
    python scripts/bench/poisson_scale.py --floor 5          # CPU time of each piece of one step
    python scripts/bench/poisson_scale.py --floor 5 --big    # one client of the p ≈ 34k network
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

RUNS = {  # name: (method, options)
    "centralized/lm": ("centralized", {"optimizer": "lm", "lm_solve": "normal"}),
    "centralized/lm-matfree": ("centralized", {"optimizer": "lm", "lm_solve": "matfree"}),
    "centralized/adam": ("centralized", {"optimizer": "adam"}),
    "centralized/lbfgs": ("centralized", {"optimizer": "lbfgs"}),
    "gn": ("gn", {}),
    "gn-matfree": ("gn", {"form": "matfree"}),
    "fipa": ("fipa", {}),
    "fedavg": ("fedavg", {}),
}
# --problem: the registered problem each name runs (heat: heat-nd, K-FAC for PINNs' heat, ∂ₜu = κΔₓu; --dims 4)
PROBLEMS = {"poisson": "poisson", "heat": "heat-nd"}


def one(spec: dict) -> dict:
    """Run one configuration in this process and return its figures (called in a child process)."""
    import torch

    from fedsciml.api import solve
    from fedsciml.core.nn import MLP
    from fedsciml.problems import get_problem

    torch.set_num_threads(1)
    if spec.get("clock", "cpu") == "cpu":  # budgets and history times in CPU seconds of this process
        import fedsciml.runtime.history as history

        history.time = types.SimpleNamespace(perf_counter=time.process_time)  # type: ignore[assignment]
    if spec.get("trace"):  # every history row as it is recorded (a run stopped early still leaves its rows)
        import fedsciml.runtime.history as history

        record = history.Recorder.record
        trace = open(spec["trace"], "a", buffering=1)

        def traced(self, step, theta, loss_sum, **extra):
            row = record(self, step, theta, loss_sum, **extra)
            trace.write(json.dumps({k: v for k, v in row.items() if isinstance(v, (int, float, str, bool))}) + "\n")
            return row

        history.Recorder.record = traced  # type: ignore[method-assign]
    pb = get_problem(spec.get("problem_name", "poisson"), dim=spec["dim"], **spec.get("problem", {}))
    if spec.get("hidden"):
        pb.__dict__["_net"] = MLP([pb.input_dim(), *spec["hidden"], 1], "tanh")
    opts = dict(spec["options"])
    t0, c0 = time.perf_counter(), time.process_time()
    res = solve(pb, method=spec["method"], clients=spec["clients"], seed=0, **opts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rows = res.history
    out = {"name": spec["name"], "dim": spec["dim"], "p": pb.network().n_params,
           "rows": int(rows[-1].get("n_residuals", 0)) or None, "wall_s": wall, "cpu_s": cpu,
           "best_rel_l2": min(r["rel_l2"] for r in rows), "clock": spec.get("clock", "cpu"),
           "steps": rows[-1].get("step"), "final_rel_l2": rows[-1].get("rel_l2"),
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
           "floats_sent": rows[-1].get("floats_sent"), "info": {k: v for k, v in res.extra.items()
                                                               if isinstance(v, (int, float, str))}}
    at = {}
    for c in spec.get("checkpoints", []):
        done = [r for r in rows if r["time_s"] <= c]
        at[str(c)] = done[-1]["rel_l2"] if done else None
    out["rel_l2_at"] = at
    if spec["method"] != "centralized" and len(rows) > 1:
        out["floats_per_round"] = (rows[-1]["floats_sent"] - rows[0]["floats_sent"]) / max(1, len(rows) - 1)
        ups = [r.get("floats_up", 0) / max(1, r.get("exchanges", 1)) / spec["clients"] for r in rows[1:]]
        out["max_floats_up_per_client_exchange"] = max(ups) if ups else None
        out["cg_iters_per_round"] = [r.get("cg_iters") for r in rows[1:]] if "cg_iters" in rows[-1] else None
    return out


def one_big(spec: dict) -> dict:
    """The p ≈ 34k run (``--big``): :func:`one`'s figures plus, per round, rel L2, loss, floats up, CG iterations,
    the peak RSS so far, and the largest single client message (floats of every tensor in it, counted by a
    ``message_hook`` on each reply as it arrives — the sketch exchange and each CG exchange separately)."""
    import torch

    from fedsciml.api import solve
    from fedsciml.core.nn import MLP
    from fedsciml.core.schema import floats_in
    from fedsciml.problems import get_problem

    torch.set_num_threads(1)
    if spec.get("clock", "cpu") == "cpu":
        import fedsciml.runtime.history as history

        history.time = types.SimpleNamespace(perf_counter=time.process_time)  # type: ignore[assignment]
    pb = get_problem("poisson", dim=spec["dim"], **spec.get("problem", {}))
    pb.__dict__["_net"] = MLP([spec["dim"], *spec["hidden"], 1], "tanh")
    largest: dict = {}  # round -> largest message (floats) of any client in any exchange of that round

    def hook(rnd, cid, msg):
        if isinstance(msg, dict):
            largest[rnd] = max(largest.get(rnd, 0), floats_in(msg))
        return msg

    t0, c0 = time.perf_counter(), time.process_time()
    res = solve(pb, method=spec["method"], clients=spec["clients"], seed=0, message_hook=hook, **spec["options"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rows = res.history
    keys = ("step", "time_s", "rel_l2", "loss", "floats_up", "floats_down", "exchanges", "cg_iters", "accepted",
            "mu", "beta", "answered", "cg_rel_residual", "gn_products", "matfree_clients", "final_check")
    per_round = [{k: r[k] for k in keys if k in r} for r in rows]
    for r in per_round:
        r["largest_message_floats"] = largest.get(r.get("step"))
    return {"name": spec["name"], "method": spec["method"], "dim": spec["dim"], "p": pb.network().n_params,
            "options": spec["options"], "problem": spec.get("problem", {}),
            "rows_per_client": [o.n_residuals for o in pb.client_objectives(spec["clients"], seed=0)],
            "wall_s": wall, "cpu_s": cpu, "clock": spec.get("clock", "cpu"),
            "rounds": rows[-1].get("step"), "final_rel_l2": rows[-1].get("rel_l2"),
            "best_rel_l2": min(r["rel_l2"] for r in rows),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "largest_message_floats": max(largest.values()) if largest else None,
            "largest_message_mb": 8e-6 * max(largest.values()) if largest else None,
            "floats_sent": rows[-1].get("floats_sent"),
            "info": {k: v for k, v in res.extra.items() if isinstance(v, (int, float, str))},
            "per_round": per_round}


def floor(dim: int, hidden=None, one_client: bool = False, problem: str = "poisson",
          options: dict | None = None) -> None:
    """Print the CPU time (``time.process_time``, one thread) of each piece of one Gauss–Newton step."""
    import torch

    from fedsciml.core import linalg
    from fedsciml.core.matfree import GNOperator
    from fedsciml.core.nn import MLP
    from fedsciml.problems import get_problem

    torch.set_num_threads(1)
    pb = get_problem(problem, dim=dim, **(options or {}))
    if hidden:
        pb.__dict__["_net"] = MLP([pb.input_dim(), *hidden, 1], "tanh")
    obj = pb.client_objectives(4, seed=0)[1] if one_client else pb.centralized_objective(4, seed=0)
    th = pb.init_params(0)
    print(f"d {dim} n {obj.n_residuals} p {th.numel()}", flush=True)

    def cpu(label, fn):
        t = time.process_time()
        out = fn()
        print(f"{label}: {time.process_time() - t:.2f} CPU s", flush=True)
        return out

    cpu("residual r(θ)", lambda: obj.residual(th))
    op = cpu("GNOperator (r, pullback, g)", lambda: GNOperator(obj.residual, th))
    v = torch.randn(th.numel(), dtype=torch.float64)
    cpu("first product (builds the Jv graph)", lambda: op.matvec(v))
    cpu("one product JᵀJv", lambda: op.matvec(v))
    if obj.n_residuals * th.numel() <= 5e7:
        r, J = cpu("J (vmap jacrev)", lambda: obj.residual_and_jacobian(th))
        if obj.n_residuals < th.numel():  # the kernel form (n < p): JJᵀ and an n×n Cholesky
            K = cpu("JJᵀ (n²p)", lambda: J @ J.T)
            cpu("Cholesky solve (JJᵀ + μI)", lambda: linalg.damped_solve(0.5 * (K + K.T), r,
                                                                         1e-3 * float(K.diagonal().max())))
        H = cpu("JᵀJ", lambda: J.T @ J)
        cpu("Cholesky solve (H + μI)", lambda: linalg.damped_solve(0.5 * (H + H.T), J.T @ r,
                                                                   1e-3 * float(H.diagonal().max())))
    print("peak RSS MB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, flush=True)


def table(results: list, checkpoints: list) -> str:
    """A markdown table of the runs (what ``--md`` writes)."""
    cols = ["run", "d", "p", *[f"rel L2 @ {c:g} s" for c in checkpoints], "steps/rounds", "final rel L2",
            "solver s", "process CPU s", "wall s", "peak RSS MB", "floats/round", "max floats up per client-exchange"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]

    def f(v):
        return "—" if v is None else (f"{v:.3g}" if isinstance(v, float) else str(v))

    for r in results:
        if "error" in r:
            out.append(f"| {r['name']} | {r['dim']} | error: {' '.join(r['error'])} |")
            continue
        at = r.get("rel_l2_at", {})
        out.append("| " + " | ".join([r["name"], str(r["dim"]), str(r["p"]),
                                      *[f(at.get(str(float(c)))) for c in checkpoints], f(r["steps"]),
                                      f(r["final_rel_l2"]), f(r["info"].get("solver_time_s")), f(r.get("cpu_s")),
                                      f(r["wall_s"]),
                                      f(r["peak_rss_mb"]), f(r.get("floats_per_round")),
                                      f(r.get("max_floats_up_per_client_exchange"))]) + " |")
    return "\n".join(out)


CSV_COLS = ["name", "dim", "p", "clock", "budget_s", "steps", "final_rel_l2", "best_rel_l2", "solver_s", "cpu_s",
            "wall_s", "peak_rss_mb", "floats_per_round", "max_floats_up_per_client_exchange"]


def write_csv(path: str, results: list, budget: float) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLS)
        for r in results:
            if "error" in r:
                w.writerow([r["name"], r["dim"]] + ["error: " + " ".join(r["error"])] + [""] * (len(CSV_COLS) - 3))
                continue
            w.writerow([r["name"], r["dim"], r["p"], r.get("clock"), budget, r["steps"], r["final_rel_l2"],
                        r.get("best_rel_l2"), r["info"].get("solver_time_s"), r.get("cpu_s"), r["wall_s"],
                        r["peak_rss_mb"], r.get("floats_per_round"), r.get("max_floats_up_per_client_exchange")])


def trace_table(paths: list, checkpoints: list, csv_path: str | None = None) -> str:
    """Rel L2 at each checkpoint from ``--trace`` files (the last row at or before it; "—" where the run had not
    reached it), with how far each run got; ``csv_path``: one CSV row per run and checkpoint."""
    cols = ["run", *[f"rel L2 @ {c:g} CPU s" for c in checkpoints], "CPU s reached", "rel L2 there",
            "median rel L2, last 60 CPU s", "steps/rounds (accepted)", "lowest rel L2 seen (test-set pick)", "final μ"]
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    rows_csv = []
    for path in paths:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        name = os.path.basename(path)[:-len(".jsonl")]
        at = []
        for c in checkpoints:
            done = [r for r in rows if r["time_s"] <= c]
            reached = rows[-1]["time_s"] >= c or (done and done[-1] is not rows[-1])
            at.append(done[-1] if done and reached else None)
            rows_csv.append([name, c, at[-1]["rel_l2"] if at[-1] else "", at[-1]["step"] if at[-1] else "",
                             rows[-1]["time_s"]])
        acc = sum(1 for r in rows[1:] if r.get("accepted", True))
        last = [r["rel_l2"] for r in rows if r["time_s"] > rows[-1]["time_s"] - 60]
        out.append("| " + " | ".join([name, *[f"{r['rel_l2']:.3g}" if r else "—" for r in at],
                                      f"{rows[-1]['time_s']:.0f}", f"{rows[-1]['rel_l2']:.3g}",
                                      f"{statistics.median(last):.3g}", f"{rows[-1]['step']} ({acc})",
                                      f"{min(r['rel_l2'] for r in rows):.3g}",
                                      f"{rows[-1].get('mu', float('nan')):.3g}"]) + " |")
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["run", "checkpoint_cpu_s", "rel_l2", "step", "cpu_s_reached"])
            w.writerows(rows_csv)
    return "\n".join(out)


def child(spec: dict) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", json.dumps(spec)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if p.returncode != 0:
        return {"name": spec["name"], "dim": spec["dim"], "error": p.stderr.strip().splitlines()[-1:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problem", choices=sorted(PROBLEMS), default="poisson",
                    help="poisson (default) or heat: heat-nd, ∂ₜu = κΔₓu on [0,1]^d × [0,1] (use --dims 4)")
    ap.add_argument("--dims", default="5,10")
    ap.add_argument("--budget", type=float, default=60.0, help="solver seconds per run (default 60)")
    ap.add_argument("--checkpoints", default="15,30,60", help="report rel L2 at these solver seconds")
    ap.add_argument("--runs", default=",".join(RUNS), help=f"subset of {', '.join(RUNS)}")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="budget and history times in CPU seconds of each run's process (default) or wall seconds")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (each one thread; default 1)")
    ap.add_argument("--hidden", help="hidden widths, e.g. 32,32 (default: the problem's 32,32,32)")
    ap.add_argument("--n-interior", type=int, help="interior points per client (default: the problem's)")
    ap.add_argument("--n-boundary", type=int, help="boundary points per face per client strip (poisson, default 50); "
                                                   "per condition per client (heat, default 400 at d = 4)")
    ap.add_argument("--csv", help="also write the runs as CSV to this file")
    ap.add_argument("--resample", type=int, help="every run: fresh collocation points every K steps/rounds")
    ap.add_argument("--momentum", type=float, help="the LM runs (centralized/lm*, gn*): SPRING momentum β")
    ap.add_argument("--lm-solve", choices=("auto", "normal", "kernel", "matfree"),
                    help="centralized/lm: the form of the damped solve (default normal; auto: kernel when n < p)")
    ap.add_argument("--big", action="store_true", help="also the [5,128,128,128,1] gn run")
    ap.add_argument("--big-only", action="store_true")
    ap.add_argument("--big-rounds", type=int, default=5)
    ap.add_argument("--big-method", choices=("gn", "fipa"), default="gn", help="method of the big run (default gn)")
    ap.add_argument("--big-rank", type=int, default=50, help="Nyström rank of the big gn run, curvature rank of the "
                                                           "big FIPA run (default 50)")
    ap.add_argument("--big-tau", type=float, help="lm_tau of the big run (default: the method's)")
    ap.add_argument("--big-precond", choices=("nystrom", "kfac", "none"), default="nystrom",
                    help="big gn run: preconditioner of the matrix-free CG (kfac: K-FAC for PINNs, the clients' "
                         "Kronecker factors; default nystrom)")
    ap.add_argument("--big-cg-iters", type=int, default=100, help="big FIPA run: CG iterations of the matrix-free "
                                                                  "local step (default 100, FIPA's)")
    ap.add_argument("--big-points", type=int, default=None, help="interior points per client of the big run "
                                                                 "(default: the problem's, 4000 at d = 5)")
    ap.add_argument("--json", default=os.path.join(ROOT, "results", "poisson_scale.json"))
    ap.add_argument("--md", help="also write the table as markdown to this file")
    ap.add_argument("--from-json", help="only write the --md/--csv table from these earlier --json files "
                                        "(comma-separated)")
    ap.add_argument("--drop-errors", action="store_true", help="with --from-json: leave out runs that failed")
    ap.add_argument("--floor", type=int, metavar="D", help="only print the CPU time of the pieces of one GN step at "
                                                          "dimension D (pooled data; with --big: one client of the "
                                                          "[5,128,128,128,1] network)")
    ap.add_argument("--trace", help="directory: each run appends its history rows, as they are recorded, to "
                                    "<dir>/<run>-d<d>.jsonl (what a run stopped early has done)")
    ap.add_argument("--from-trace", help="only write the checkpoint table (--md, --csv) from these --trace files "
                                         "(comma-separated): runs that were stopped early too")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.one:
        spec = json.loads(a.one)
        print(json.dumps(one_big(spec) if spec.get("big") else one(spec)))
        return 0
    checkpoints = [float(c) for c in a.checkpoints.split(",") if c]
    if a.floor:
        floor(a.floor, [128, 128, 128] if a.big else None, one_client=a.big, problem=PROBLEMS[a.problem],
              options={k: v for k, v in (("n_interior", a.n_interior), ("n_boundary", a.n_boundary)) if v})
        return 0
    if a.from_trace:
        text = trace_table(a.from_trace.split(","), checkpoints, a.csv)
        if a.md:
            with open(a.md, "w") as f:
                f.write(text + "\n")
        print(text)
        return 0
    if a.from_json:  # one or more earlier --json files (comma-separated), their runs in that order
        results, budgets = [], set()
        for path in a.from_json.split(","):
            with open(path) as f:
                d = json.load(f)
            results += [r for r in d["results"] if "error" not in r or not a.drop_errors]
            budgets.add(d["meta"].get("budget_s"))
        text = table(results, checkpoints)
        if a.md:
            with open(a.md, "w") as f:
                f.write(text + "\n")
        if a.csv:
            write_csv(a.csv, results, budgets.pop() if len(budgets) == 1 else float("nan"))
        print(text)
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    meta = {"cpus": os.cpu_count(), "load_start": os.getloadavg(), "budget_s": a.budget, "clients": a.clients,
            "clock": a.clock, "threads": 1, "jobs": a.jobs, "problem": PROBLEMS[a.problem], "commit": commit.strip(), "argv": sys.argv[1:],
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    problem = {k: v for k, v in (("n_interior", a.n_interior), ("n_boundary", a.n_boundary)) if v is not None}
    hidden = [int(h) for h in a.hidden.split(",")] if a.hidden else None
    specs = []
    if not a.big_only:
        for d in [int(x) for x in a.dims.split(",")]:
            for name in [r for r in a.runs.split(",") if r]:
                if name not in RUNS:
                    ap.error(f"unknown run {name!r}; allowed: {', '.join(RUNS)}")
                method, opts = RUNS[name]
                opts = dict(opts)
                if a.resample:
                    opts["resample"] = a.resample
                if a.momentum and (name.startswith("centralized/lm") or method == "gn"):
                    opts["momentum"] = a.momentum
                if a.lm_solve and name == "centralized/lm":
                    opts["lm_solve"] = a.lm_solve
                specs.append({"name": name, "dim": d, "method": method, "clients": a.clients, "clock": a.clock,
                              "problem_name": PROBLEMS[a.problem],
                              "options": {**opts, "budget": a.budget}, "checkpoints": checkpoints,
                              "problem": problem, "hidden": hidden})
                if a.trace:
                    os.makedirs(a.trace, exist_ok=True)
                    specs[-1]["trace"] = os.path.join(os.path.abspath(a.trace), f"{name.replace('/', '-')}-d{d}.jsonl")
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        results = list(pool.map(child, specs))
    for r in results:
        print(json.dumps(r), flush=True)
    if a.big or a.big_only:
        if a.big_method == "gn":
            bopts = {"rounds": a.big_rounds, "nystrom_rank": a.big_rank}
            if a.big_precond != "nystrom":
                bopts["precond"] = a.big_precond
        else:  # FIPA: local GN step and rank-r curvature, matrix-free when J_m would not fit (or --big-form)
            bopts = {"rounds": a.big_rounds, "rank": a.big_rank, "cg_iters": a.big_cg_iters}
        if a.big_tau is not None and a.big_method == "fipa":
            ap.error("--big-tau is an option of the big gn run (FIPA's safeguard takes its damping from lm_tau 1e-3)")
        if a.big_tau is not None:
            bopts["lm_tau"] = a.big_tau
        spec = {"name": f"{a.big_method}-big", "big": True, "dim": 5, "method": a.big_method, "clients": a.clients,
                "hidden": [128, 128, 128], "clock": a.clock, "options": bopts,
                "problem": {"n_interior": a.big_points} if a.big_points else {}}
        r = child(spec)
        results.append(r)
        print(json.dumps(r), flush=True)
    meta["load_end"] = os.getloadavg()
    os.makedirs(os.path.dirname(a.json), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    print(f"wrote {a.json}", file=sys.stderr)
    if a.md:
        with open(a.md, "w") as f:
            f.write(table(results, checkpoints) + "\n")
    if a.csv:
        write_csv(a.csv, results, a.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
