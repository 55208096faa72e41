#!/usr/bin/env python
"""PINNacle's cases on K sites: exact federated Gauss–Newton against centralized LM on the same points, and FIPA
at the same number of exchanges (issue 36: "gn with 4 clients equals centralized to round-off; FIPA within 3× of
centralized at equal exchanges").

For each case: centralized LM on the pooled points of the K-site split (``--max-iters N``), gn on the K sites
(``--rounds N``: one LM step per round, the same damping rule), and FIPA with as many rounds as gn made exchanges.
Printed per case: ``max|θ_gn − θ_c| / max|θ_c|`` (round-off: the same sums in another grouping, amplified by the
damped system's conditioning), the three L2REs, the exchanges (FIPA's rounds = gn's exchanges; both counts printed), and the solver CPU seconds.  One thread; the problem's
default network and points (``--hidden`` to change the network).  Example::

    OMP_NUM_THREADS=1 python scripts/bench/pinnacle_federated_check.py --pinnacle-dir ../PINNacle \\
        --cases poissonnd,pinv,hinv --clients 4 --steps 5
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pinnacle-dir", default=os.environ.get("FEDSCIML_PINNACLE"))
    ap.add_argument("--cases", default="poissonnd,pinv,hinv")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5, help="LM steps (centralized) = gn rounds")
    ap.add_argument("--hidden", default=None, help="hidden widths, e.g. 16,16 (default: the problem's)")
    a = ap.parse_args(argv)

    import torch

    import fedsciml as fs

    torch.set_num_threads(1)
    net = {} if a.hidden is None else {"hidden": [int(w) for w in a.hidden.split(",")]}
    print(f"{'case':10s} {'K':>2s} {'steps':>5s} {'|θgn−θc|/|θc|':>14s} {'l2re c':>10s} {'l2re gn':>10s} "
          f"{'fipa rounds':>11s} {'l2re fipa':>10s} {'ex gn':>6s} {'ex fipa':>7s} {'cpu s c/gn/fipa':>18s}")

    def cpu(r):  # the history's time_s counts the cpu clock; result.solver_seconds is wall time
        return float(r.history[-1].get("time_s") or 0.0) if r.history else 0.0

    for case in a.cases.split(","):
        po = dict(case=case, pinnacle_dir=a.pinnacle_dir)
        common = dict(clients=a.clients, problem_options=po, clock="cpu", **net)
        c = fs.solve("pinnacle", "centralized", max_iters=a.steps, **common)
        g = fs.solve("pinnacle", "gn", rounds=a.steps, **common)
        ex = int(g.extra.get("exchanges") or 0)
        f = fs.solve("pinnacle", "fipa", rounds=max(1, ex), **common)
        exf = int(f.extra.get("exchanges") or 0)
        rel = float((c.theta - g.theta).abs().max() / c.theta.abs().max())
        print(f"{case:10s} {a.clients:2d} {a.steps:5d} {rel:14.2e} {c.final['l2re']:10.3e} {g.final['l2re']:10.3e} "
              f"{max(1, ex):11d} {f.final['l2re']:10.3e} {ex:6d} {exf:7d} "
              f"{cpu(c):6.1f}/{cpu(g):5.1f}/{cpu(f):5.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
