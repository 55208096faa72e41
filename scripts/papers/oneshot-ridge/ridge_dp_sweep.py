"""DP ridge privacy–utility curve: test MSE against ε on a log grid, for every private variant.

Same methods and settings as ``ridge_table5_privacy.py`` (one-shot local / central DP, with and without the
noise-aware σ, DP-FedAvg-100 at equal (ε, δ)), on ``--points`` values of ε from ``--eps-min`` to ``--eps-max``.
Usage: ``python scripts/papers/oneshot-ridge/ridge_dp_sweep.py [--points 13] [--seeds 5]``.
"""
import math

import torch

from ridge_table5_privacy import make_parser, run


def main():
    p = make_parser(__doc__)
    p.add_argument("--eps-min", type=float, default=0.1)
    p.add_argument("--eps-max", type=float, default=1000.0)
    p.add_argument("--points", type=int, default=13)
    args = p.parse_args()
    grid = torch.logspace(math.log10(args.eps_min), math.log10(args.eps_max), args.points, dtype=torch.float64).tolist()
    run(args, [round(e, 6) for e in grid] + [math.inf], "dp_sweep", "privacy–utility curve")


if __name__ == "__main__":
    main()
