"""Matrix-free Gauss–Newton preconditioners on Poisson d = 5: none, Nyström, K-FAC for PINNs.

Part ``cg``: at θ₀ of the network (default [5,64,64,48,48,1], p = 10 065, the K-FAC-for-PINNs authors'
exp16 network; 3000 interior + 500 boundary points), CG iterations and CPU seconds (one thread) to reach a
fixed relative residual of ``(JᵀJ + μI) δ = −Jᵀr`` with each preconditioner, for damping μ = ratio · λ̂_max
(λ̂_max: a 20-step power iteration), and the step's agreement between preconditioners.

Part ``lm``: centralized matrix-free LM (:func:`fedsciml.methods.centralized.solve_least_squares`) with each
preconditioner for a CPU-second budget: loss, rel L2, steps, CG iterations.  ``--cg-iters`` caps CG per solve
(``1``: one preconditioned CG step — with K-FAC the direct K-FAC step with the quadratic model's exact step
length, LM's gain ratio as the safeguard).

    OMP_NUM_THREADS=1 nice -n 10 python scripts/bench/kfac_pinn.py cg --ratios 1e-3,1e-6 --rtol 1e-3
    OMP_NUM_THREADS=1 nice -n 10 python scripts/bench/kfac_pinn.py lm --budget 150
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def setup(hidden, n_interior, n_per_face, seed=0):
    import torch

    from fedsciml.core.nn import MLP
    from fedsciml.problems import get_problem

    torch.set_num_threads(1)
    pb = get_problem("poisson", dim=5, n_interior=n_interior, n_boundary=n_per_face)
    pb.__dict__["_net"] = MLP([5, *hidden, 1], "tanh")
    obj = pb.centralized_objective(1, seed=seed)
    return pb, obj, pb.init_params(seed)


def part_cg(a) -> list:
    import torch

    from fedsciml.core import kfac_forms
    from fedsciml.core.matfree import GNOperator, Nystrom, damped_gn_step, power_lambda_max

    pb, obj, theta = setup(a.hidden, a.n_interior, a.n_per_face)
    p = theta.numel()
    c = time.process_time()
    op = GNOperator(obj.residual, theta)
    t_op = time.process_time() - c
    gen = torch.Generator().manual_seed(0)
    lam = power_lambda_max(op.matvec, p, generator=gen)
    c = time.process_time()
    fac = kfac_forms.factors_of(obj, theta)
    t_fac = time.process_time() - c
    c = time.process_time()
    ny = Nystrom.sketch(op.matmat, p, a.rank, generator=gen)
    t_ny = time.process_time() - c
    out = []
    for ratio in a.ratios:
        mu = ratio * lam
        steps = {}
        for name in ("none", "nystrom", "kfac"):
            c = time.process_time()
            P = None if name == "none" else (ny.inverse(mu) if name == "nystrom" else fac.inverse(mu))
            t_setup = time.process_time() - c
            c = time.process_time()
            st = damped_gn_step(op.matvec, op.g, mu, precond=P, rtol=a.rtol, max_iters=a.max_iters)
            t = time.process_time() - c
            steps[name] = st.delta
            row = {"p": p, "n": op.n, "mu_ratio": ratio, "mu": mu, "precond": name, "cg_iters": st.cg_iters,
                   "rel_residual": st.rel_residual, "cg_cpu_s": t, "inverse_setup_cpu_s": t_setup,
                   "build_cpu_s": {"none": 0.0, "nystrom": t_ny, "kfac": t_fac}[name],
                   "operator_cpu_s": t_op, "model_decrease": st.model_decrease,
                   "kfac_floats": fac.size_floats}
            out.append(row)
            print(json.dumps(row), flush=True)
        ref = steps["none"]
        for name in ("nystrom", "kfac"):
            print(json.dumps({"mu_ratio": ratio, "precond": name,
                              "step_rel_diff_vs_none": float((steps[name] - ref).norm() / ref.norm())}), flush=True)
    return out


def part_lm(a) -> list:
    from fedsciml.core.lm import LMConfig
    from fedsciml.core.matfree import MatfreeConfig
    from fedsciml.methods.centralized import SolveConfig, solve_least_squares
    import fedsciml.runtime.history as history
    import types

    history.time = types.SimpleNamespace(perf_counter=time.process_time)  # type: ignore[assignment]  # CPU-s budget
    out = []
    for name in a.preconds:
        pb, obj, theta = setup(a.hidden, a.n_interior, a.n_per_face)
        lm = LMConfig(tau=1e-3, solve="matfree",
                      matfree=MatfreeConfig(precond=name, rank=a.rank, max_iters=a.cg_iters, rtol=a.rtol))
        cfg = SolveConfig(optimizer="lm", budget=a.budget, lm=lm)
        c = time.process_time()
        th, rows, info = solve_least_squares(obj, theta, pb.evaluate, cfg)
        row = {"p": theta.numel(), "precond": name, "budget_cpu_s": a.budget, "cg_max_iters": a.cg_iters,
               "cg_rtol": a.rtol, "cpu_s": time.process_time() - c, "steps": rows[-1]["step"],
               "accepted": info["accepted_steps"], "cg_iters": info.get("cg_iters"),
               "loss0": rows[0]["loss"], "rel_l2_0": rows[0]["rel_l2"],
               "loss": rows[-1]["loss"], "rel_l2": rows[-1]["rel_l2"],
               "trace": [(r["step"], round(r["time_s"], 1), r["loss"], r["rel_l2"], r.get("cg_iters"))
                         for r in rows]}
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=("cg", "lm"))
    ap.add_argument("--hidden", default="64,64,48,48")
    ap.add_argument("--n-interior", type=int, default=3000)
    ap.add_argument("--n-per-face", type=int, default=50, help="boundary points per face (10 faces at d = 5)")
    ap.add_argument("--rank", type=int, default=50, help="Nyström rank")
    ap.add_argument("--ratios", default="1e-3,1e-6", help="cg: μ / λ̂_max")
    ap.add_argument("--rtol", type=float, default=1e-3, help="CG relative residual")
    ap.add_argument("--max-iters", type=int, default=300, help="cg: CG iteration cap")
    ap.add_argument("--cg-iters", type=int, default=500, help="lm: CG iteration cap per solve")
    ap.add_argument("--preconds", default="none,nystrom,kfac")
    ap.add_argument("--budget", type=float, default=150.0, help="lm: CPU seconds per preconditioner")
    ap.add_argument("--json", help="write the rows and the run's metadata here")
    a = ap.parse_args(argv)
    a.hidden = [int(h) for h in a.hidden.split(",")]
    a.ratios = [float(r) for r in a.ratios.split(",")]
    a.preconds = a.preconds.split(",")
    meta = {"argv": sys.argv, "load_start": os.getloadavg(), "cpus": os.cpu_count(),
            "omp_threads": os.environ.get("OMP_NUM_THREADS")}
    rows = part_cg(a) if a.part == "cg" else part_lm(a)
    meta["load_end"] = os.getloadavg()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
