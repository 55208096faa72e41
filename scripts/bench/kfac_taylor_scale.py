"""What one K-FAC-preconditioned matrix-free LM step costs at PINNacle's scale, part by part, at one thread.

PINNacle's standard network (5 hidden layers of 100, tanh) on a zoo DomainPDE with ``--n-interior`` points (one
client): CPU seconds of building the Gauss–Newton operator (the residual's vjp graph), one product ``JᵀJv``, the
Taylor-mode K-FAC factors (:mod:`fedsciml.core.kfac_taylor`) and their damped inverse (build and one application),
and the peak RSS of the process (``ru_maxrss``).  Usage::

    OMP_NUM_THREADS=1 python scripts/bench/kfac_taylor_scale.py heat --n-interior 8000
"""
from __future__ import annotations

import argparse
import resource
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("problem", help="a DomainPDE of the zoo (heat, burgers, kovasznay, …)")
    ap.add_argument("--n-interior", type=int, default=8000)
    ap.add_argument("--hidden", default="100,100,100,100,100")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from fedsciml.core import kfac_forms, kfac_taylor
    from fedsciml.core.matfree import GNOperator
    from fedsciml.problems import get_problem

    pb = get_problem(args.problem, n_interior=args.n_interior, hidden=[int(w) for w in args.hidden.split(",")])
    (obj,) = pb.client_objectives(1, seed=0)
    theta = pb.init_params(0)
    print(f"{args.problem}: n = {obj.n_residuals:,} rows, p = {theta.numel():,}, parts "
          + ", ".join(f"{p.name}({p.n_points})" for p in obj.parts))

    def timed(label, fn):
        t = time.process_time()
        out = fn()
        print(f"  {label:<34} {time.process_time() - t:8.2f} CPU-s   peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
        return out

    forms = timed("find the parts' channel forms", lambda: [kfac_taylor.resolved(p.jet) for p in obj.parts])
    print("  channels per part: " + ", ".join(f"{p.name} {f.channels}" for p, f in zip(obj.parts, forms)))
    op = timed("GN operator (r, Jᵀr, vjp graph)", lambda: GNOperator(obj.residual, theta))
    v = torch.randn(theta.numel(), dtype=theta.dtype, generator=torch.Generator().manual_seed(0))
    timed("one product JᵀJv (first: builds Jv)", lambda: op.matvec(v))
    timed("one product JᵀJv", lambda: op.matvec(v))
    fac = timed("K-FAC factors (Taylor channels)", lambda: kfac_forms.factors_of(obj, theta))
    mu = 1e-3 * fac.lambda_max()
    inv = timed("damped inverse (eigh per factor)", lambda: fac.inverse(mu))
    timed("apply the inverse once", lambda: inv(v))
    print(f"  factor message: {fac.size_floats:,} floats (p = {theta.numel():,})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
