#!/usr/bin/env python
"""Screen: the matrix-free operator's costs with its rows held in kept blocks, against one block, on a poisson
preset (fedsciml.core.matfree.CPU_BLOCK_ROWS: why a CPU holds ~10³ rows a block).

For K = each of ``--blocks``, the preset's points are cut into K consecutive blocks (``client_objectives(K)``, the
way gn's clients hold them) and the script times, at θ₀ and one thread (``time.process_time``, the second of two
repetitions): building every block's :class:`~fedsciml.core.matfree.GNOperator` (the residual graph and Jᵀr), one
product Σ_b J_bᵀJ_b v (the mean of 3), and the K-FAC factors summed over the blocks.  Run it once as is and once
with glibc's mmap threshold raised (``MALLOC_MMAP_THRESHOLD_=4000000000``): where the one-block figures then fall to
the blocks', the difference is the allocator's fresh pages, not the arithmetic.

    OMP_NUM_THREADS=1 python scripts/bench/split_rows.py --preset exp21 --blocks 1,2,4,8,16
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedsciml.core.kfac_pinn import part_factors  # noqa: E402
from fedsciml.core.matfree import GNOperator  # noqa: E402
from fedsciml.problems import get_problem  # noqa: E402
from fedsciml.problems.registry import REGISTRY  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--preset", default="exp21", help="a poisson preset (its network and point counts)")
    ap.add_argument("--blocks", default="1,2,4,8,16", help="block counts to time")
    a = ap.parse_args(argv)
    try:
        counts = [int(k) for k in a.blocks.split(",")]
    except ValueError:
        ap.error(f"--blocks {a.blocks!r}: a comma-separated list of integers ≥ 1")
    if not counts or min(counts) < 1:
        ap.error(f"--blocks {a.blocks!r}: a comma-separated list of integers ≥ 1")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    pb = get_problem("poisson", **dict(REGISTRY["poisson"].presets[a.preset].problem))
    net = pb.network()
    theta = pb.init_params(0)
    v = torch.randn_like(theta)

    def cpu(f):
        t = time.process_time()
        out = f()
        return time.process_time() - t, out

    print(f"{a.preset}: p = {theta.numel():,}, one thread")
    for k in counts:
        objs = pb.client_objectives(k, seed=1)
        for _ in range(2):  # the second repetition is reported (the first traces and allocates)
            tb, ops = cpu(lambda: [GNOperator(o.residual, theta) for o in objs])
            tp, _ = cpu(lambda ops=ops: [sum(op.matvec(v) for op in ops) for _ in range(3)])
            tf, _ = cpu(lambda: [part_factors(net, theta, o.parts) for o in objs])
            del ops
        print(f"{k:3d} blocks of ≤ {max(o.n_residuals for o in objs):,} rows: build {tb:.2f}  product {tp / 3:.2f}  "
              f"factors {tf:.2f} CPU-s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
