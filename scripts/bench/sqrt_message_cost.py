#!/usr/bin/env python
"""Screen (issue 37): what one exact Gauss–Newton step costs in CPU when the clients send a square-root message —
one exchange per round — against centralized LM's matrix-free K-FAC-CG step, on the K-FAC-for-PINNs authors' exp16.

Why: a federated step in ≤ 2 exchanges that takes centralized LM's own iterates needs the pooled operator
A = Σ_m J_mᵀJ_m at the server.  The square-root message gives it in one exchange: a client sends R_m (n_m × p,
n_m < p) with R_mᵀR_m = J_mᵀJ_m and s_m with R_mᵀs_m = J_mᵀr_m; the server stacks them and runs the same
K-FAC-preconditioned CG on explicit products Rᵀ(Rv), which cost 2·n·p flops instead of a pass through the residual
graph.  What keeps the message from telling more than the normal form (J_mᵀJ_m, J_mᵀr_m) is the orthogonal mixing
R_m = Q_mᵀJ_m: Householder QR (fedsciml's ``sqrt`` form today), or a fresh Haar-random orthogonal Q_m (its law then
depends on J_m only through J_mᵀJ_m).  Either costs O(n_m²·p) flops a client; this script measures it.

Rows (CPU seconds of one step at one thread, the median of ``--reps`` after one warm-up, ``time.process_time``):
  matfree      centralized LM's step today: the residual graph and gradient, the K-FAC factors, ``--cg`` products
               JᵀJv through the graph (kept row blocks on a CPU: ``matfree.local_operator``), the trial's loss
  explicit     the same step on an explicit J: J by ``vmap(jacrev)``, the factors, ``--cg`` products Jᵀ(Jv), the
               trial's loss (what the server's CG would cost on stacked R, plus forming J)
  sqrt-qr      the clients' messages in the ``sqrt`` form: each client's J_m and the R factor of QR([J_m | r_m])
  sqrt-haar    each client's J_m and Q_m[J_m | r_m] with Q_m Haar-random (QR of a Gaussian n_m × n_m)

A gn step on square-root messages costs ``sqrt-*`` + the factors + ``--cg`` explicit products of the stacked rows +
the trial's loss, and takes centralized LM's iterates (the same operator, gradient and K-FAC factors), so its
figures at t CPU-s are centralized's at t / (that cost ÷ ``matfree``).

    OMP_NUM_THREADS=1 python scripts/bench/sqrt_message_cost.py --preset exp16 --clients 4
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedsciml.core.kfac_forms import factors_of  # noqa: E402
from fedsciml.core.kfac_pinn import part_factors  # noqa: E402
from fedsciml.core.matfree import local_operator, split_rows  # noqa: E402
from fedsciml.problems import get_problem  # noqa: E402
from fedsciml.problems.registry import REGISTRY  # noqa: E402


def cpu(f) -> float:
    t = time.process_time()
    f()
    return time.process_time() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--preset", default="exp16", help="a poisson preset (its network and point counts)")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--cg", type=int, default=10, help="CG products per step (the K-FAC regime's cap)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    if a.clients < 1 or a.cg < 1 or a.reps < 1:
        ap.error(f"--clients, --cg and --reps must be ≥ 1, got {a.clients}, {a.cg}, {a.reps}")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    pb = get_problem("poisson", **dict(REGISTRY["poisson"].presets[a.preset].problem))
    net = pb.network()
    theta = pb.init_params(0)
    pooled = pb.client_objectives(1, seed=1)[0]
    parts = pb.client_objectives(a.clients, seed=1)
    v = torch.randn_like(theta)
    trial = theta + 1e-3 * v

    def matfree():  # the operator and factors as centralized LM holds them (kept row blocks on a CPU)
        op = local_operator(pooled, theta)
        factors_of(pooled, theta, split_rows(pooled, theta))
        for _ in range(a.cg):
            op.matvec(v)
        with torch.no_grad():
            pooled.loss(trial)

    def explicit():
        _, J = pooled.residual_and_jacobian(theta)
        part_factors(net, theta, pooled.parts)
        for _ in range(a.cg):
            J.T @ (J @ v)
        with torch.no_grad():
            pooled.loss(trial)

    def sqrt(mix):
        def go():
            for o in parts:
                r, J = o.residual_and_jacobian(theta)
                A = torch.cat([J, r[:, None]], 1)
                if mix == "qr":
                    torch.linalg.qr(A, mode="r")
                else:
                    Q, _ = torch.linalg.qr(torch.randn(A.shape[0], A.shape[0], dtype=A.dtype))
                    Q @ A
        return go

    rows = {"matfree": matfree, "explicit": explicit, "sqrt-qr": sqrt("qr"), "sqrt-haar": sqrt("haar")}
    print(f"{a.preset}: p = {theta.numel():,}, {pooled.n_residuals:,} rows, {a.clients} clients "
          f"({', '.join(str(o.n_residuals) for o in parts)} rows), CG products per step {a.cg}, one thread")
    for name, f in rows.items():
        f()  # warm-up (first calls trace and allocate)
        ts = [cpu(f) for _ in range(a.reps)]
        print(f"{name:10s} median {statistics.median(ts):6.2f} CPU-s  ({', '.join(f'{t:.2f}' for t in ts)})",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
