"""A PDE that is not in the zoo, solved federated: the 1D Helmholtz equation.

    −u″ − k²u = f  on [0, 1],   u = sin(πx) exact,   f = (π² − k²) sin(πx)

The collocation points are split among 3 clients that never share them; exact
federated Gauss–Newton (``gn``) and FIPA solve it, and the centralized LM
solve on the pooled points is the reference.

    python examples/helmholtz_federated.py            # full size
    python examples/helmholtz_federated.py --quick    # a few seconds (what CI runs)
"""
from __future__ import annotations

import argparse
import json
import math

import torch

import fedsciml as fs


@fs.register
class Helmholtz(fs.PDE):
    """1D Helmholtz −u″ − k²u = f, u = sin πx"""

    name = "helmholtz"
    dim = 1
    hidden = (32, 32)
    params = {"k": fs.option(2.0, "wave number k (k² must not be an eigenvalue (nπ)²)", float)}

    def exact(self, x):
        return torch.sin(math.pi * x[..., 0])

    def equation(self, u, x):
        f = (math.pi ** 2 - self.k ** 2) * torch.sin(math.pi * x[..., 0])
        return -u.laplacian(x) - self.k ** 2 * u(x) - f


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (CI)")
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)

    if args.quick:
        problem, rounds = Helmholtz(n_interior=60), 20
    else:
        problem, rounds = Helmholtz(), 60
    runs = {
        "centralized": fs.solve(problem, "centralized", clients=args.clients, max_iters=rounds),
        "gn": fs.solve(problem, "gn", clients=args.clients, rounds=rounds),
        "fipa": fs.solve(problem, "fipa", clients=args.clients, rounds=rounds),
    }
    print(f"Helmholtz k={problem.k}, {args.clients} clients, {problem.network().n_params} parameters")
    print(f"{'method':12s} {'rounds':>6s} {'seconds':>8s} {'rel_l2':>10s} {'floats sent':>12s}")
    for name, r in runs.items():
        last = r.history[-1]
        print(f"{name:12s} {last['step']:6d} {r.wall_time_s:8.2f} {r.final['rel_l2']:10.2e} {last['floats_sent']:12d}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({k: r.to_dict() for k, r in runs.items()}, f, indent=2)
    return runs


if __name__ == "__main__":
    main()
