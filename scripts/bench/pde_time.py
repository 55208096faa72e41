"""Time-marching and causal weighting on a long time window (issue 36): PINNacle's Heat 2d-LT (T = 100).

    OMP_NUM_THREADS=1 python scripts/bench/pde_time.py --pinnacle-dir /work/pinnacle \\
        [--windows 1] [--iters 100] [--n-interior 1000] [--causal EPS] [--causal-every 5] [--hidden 32,32,32]

One centralized LM run of ``fs.get_problem("pinnacle", case="heat2d-lt")`` (one client) with ``time_windows``
(``--iters`` LM steps per window) and/or ``causal`` weighting; prints one markdown row: the whole-interval L2RE
against their reference file, the final loss, the process CPU seconds at one torch thread (so the figure does not
depend on what else loads the machine) and each window's own error.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import fedsciml as fs  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pinnacle-dir", required=True)
    ap.add_argument("--windows", type=int, default=1)
    ap.add_argument("--iters", type=int, default=100, help="LM steps per window")
    ap.add_argument("--n-interior", type=int, default=1000, help="interior points (per window)")
    ap.add_argument("--causal", type=float, default=None, help="causality parameter ε (none: no weighting)")
    ap.add_argument("--causal-every", type=int, default=5)
    ap.add_argument("--causal-slices", type=int, default=16)
    ap.add_argument("--hidden", default="32,32,32")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    pb = fs.get_problem("pinnacle", case="heat2d-lt", pinnacle_dir=a.pinnacle_dir, n_interior=a.n_interior,
                        n_boundary=max(1, a.n_interior // 10), hidden=tuple(int(h) for h in a.hidden.split(",")))
    kw: dict = {}
    if a.windows > 1:
        kw["time_windows"] = a.windows
    if a.causal is not None:
        kw.update(causal=a.causal, causal_every=a.causal_every, causal_slices=a.causal_slices)
    t = time.process_time()
    r = fs.solve(pb, "centralized", clients=1, max_iters=a.iters, **kw)
    cpu = time.process_time() - t
    per = [w["final"].get("rel_l2") for w in r.extra.get("windows", [])]
    print("| windows | LM steps/window | n_interior | causal ε | L2RE [0, T] | loss | CPU s | per-window rel L2 |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {a.windows} | {a.iters} | {a.n_interior} | {a.causal if a.causal is not None else '—'} | "
          f"{r.final['l2re']:.3g} | {r.final['loss']:.3g} | {cpu:.0f} | "
          f"{', '.join(f'{v:.2g}' for v in per) or '—'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
