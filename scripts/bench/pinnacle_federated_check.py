#!/usr/bin/env python
"""PINNacle's cases on K sites: exact federated Gauss–Newton against centralized LM on the same points, and FIPA
at the same number of exchanges (issue 36: "gn with 4 clients equals centralized to round-off; FIPA within 3× of
centralized at equal exchanges").

Every run of a case trains on the same points: the problem's totals, drawn once over the whole domain and split
among the K sites by ownership (strips along x: each site owns a region, its points and its readings).

* ``--steps N`` (the invariant): centralized LM (``max_iters N``), gn on the K sites (``rounds N``: one LM trial
  per round, the same damping rule), and FIPA with as many rounds as gn made exchanges.
* ``--budget B`` (the comparison at a CPU budget): gn and FIPA each with B solver CPU-seconds; from their histories
  (L2RE after each round and the exchanges made so far) the L2RE of each at E, the most exchanges both reached
  (the last row at or below E); centralized LM with as many LM steps as gn made by E (gn's step k is centralized's
  step k to round-off, so this is centralized's L2RE at equal exchanges; a run of its own, not a copy of gn's).

Printed per case: ``max|θ_gn − θ_c| / max|θ_c|`` (``--steps``: round-off, the same sums in another grouping,
amplified by the damped system's conditioning), the L2REs, the exchanges, gn's accepted steps and the solver CPU
seconds (the histories' ``time_s`` on the cpu clock).  One thread; the problem's default network and points
(``--hidden`` to change the network; ``--fipa`` sets FIPA options, e.g. ``rank=40``).  Examples::

    OMP_NUM_THREADS=1 python scripts/bench/pinnacle_federated_check.py --pinnacle-dir ../PINNacle \\
        --cases poissonnd,pinv,hinv --clients 4 --steps 5
    OMP_NUM_THREADS=1 nice python scripts/bench/pinnacle_federated_check.py --pinnacle-dir ../PINNacle \\
        --cases burgers1d-c --budget 60
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def cpu(r) -> float:
    """The run's solver CPU seconds: the history's ``time_s`` counts the cpu clock (``solver_seconds`` is wall)."""
    return float(r.history[-1].get("time_s") or 0.0) if r.history else 0.0


def at_exchanges(r, E: int) -> tuple[float, int, int]:
    """``(l2re, exchanges, row)`` of a federated run's last history row with at most E exchanges in all."""
    rows = [(i, h) for i, h in enumerate(r.history) if int(h.get("exchanges_total") or 0) <= E and "l2re" in h]
    i, h = rows[-1]
    return float(h["l2re"]), int(h.get("exchanges_total") or 0), i


def accepted(r) -> int:
    """A federated run's accepted steps: gn's own count; FIPA's rounds that kept the previous round's merged step
    (history rows from round 2 on with ``accepted`` true — round 1 checks θ₀, no step; a rejected step is undone and
    re-merged at once, without an exchange)."""
    if "accepted_steps" in r.extra:
        return int(r.extra["accepted_steps"])
    return sum(1 for h in r.history if h.get("accepted") is True and int(h.get("round") or 0) >= 2)


def parse_options(text: str | None) -> dict:
    out: dict = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        k, _, v = item.partition("=")
        try:
            out[k.strip()] = int(v)
        except ValueError:
            try:
                out[k.strip()] = float(v)
            except ValueError:
                out[k.strip()] = {"true": True, "false": False}.get(v.strip().lower(), v.strip())
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pinnacle-dir", default=os.environ.get("FEDSCIML_PINNACLE"))
    ap.add_argument("--cases", default="poissonnd,pinv,hinv")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5, help="LM steps (centralized) = gn rounds")
    ap.add_argument("--budget", type=float, default=None, help="solver CPU-s of gn and of FIPA (replaces --steps)")
    ap.add_argument("--hidden", default=None, help="hidden widths, e.g. 16,16 (default: the problem's)")
    ap.add_argument("--fipa", default=None, help="FIPA options, e.g. rank=40,sketch=full (default: its defaults)")
    a = ap.parse_args(argv)

    import torch

    import fedsciml as fs

    torch.set_num_threads(1)
    net = {} if a.hidden is None else {"hidden": [int(w) for w in a.hidden.split(",")]}
    fipa = parse_options(a.fipa)
    if a.budget is None:
        print(f"{'case':10s} {'K':>2s} {'steps':>5s} {'|θgn−θc|/|θc|':>14s} {'l2re c':>10s} {'l2re gn':>10s} "
              f"{'fipa rounds':>11s} {'l2re fipa':>10s} {'ex gn':>6s} {'ex fipa':>7s} {'cpu s c/gn/fipa':>18s}")
    else:
        print(f"{'case':12s} {'E':>4s} {'l2re c@E':>9s} {'steps':>5s} {'l2re gn@E':>9s} {'l2re fipa@E':>11s} "
              f"{'fipa/c':>7s} | {'gn end':>9s} {'ex':>4s} {'acc':>4s} {'cpu':>5s} | {'fipa end':>9s} {'ex':>4s} "
              f"{'acc':>4s} {'cpu':>5s} | {'c cpu':>5s} {'|θgn−θc|/|θc|':>13s}")

    for case in a.cases.split(","):
        po = dict(case=case, pinnacle_dir=a.pinnacle_dir)
        common = dict(clients=a.clients, problem_options=po, clock="cpu", **net)
        if a.budget is None:
            c = fs.solve("pinnacle", "centralized", max_iters=a.steps, **common)
            g = fs.solve("pinnacle", "gn", rounds=a.steps, **common)
            ex = int(g.extra.get("exchanges") or 0)
            f = fs.solve("pinnacle", "fipa", rounds=max(1, ex), **common, **fipa)
            exf = int(f.extra.get("exchanges") or 0)
            rel = float((c.theta - g.theta).abs().max() / c.theta.abs().max())
            print(f"{case:10s} {a.clients:2d} {a.steps:5d} {rel:14.2e} {c.final['l2re']:10.3e} "
                  f"{g.final['l2re']:10.3e} {max(1, ex):11d} {f.final['l2re']:10.3e} {ex:6d} {exf:7d} "
                  f"{cpu(c):6.1f}/{cpu(g):5.1f}/{cpu(f):5.1f}", flush=True)
            continue
        g = fs.solve("pinnacle", "gn", budget=a.budget, keep_best="none", **common)
        f = fs.solve("pinnacle", "fipa", budget=a.budget, keep_best="none", **common, **fipa)
        E = min(int(g.history[-1].get("exchanges_total") or 0), int(f.history[-1].get("exchanges_total") or 0))
        lg, _eg, ig = at_exchanges(g, E)
        lf, _ef, _if = at_exchanges(f, E)
        steps = int(g.history[ig].get("step") or ig)      # gn's LM trials by E: centralized's steps
        c = fs.solve("pinnacle", "centralized", max_iters=max(1, steps), keep_best="none", **common)
        lc = float(c.final["l2re"])
        rel = float("nan")
        if steps == int(g.history[-1].get("step") or 0):
            rel = float((c.theta - g.theta).abs().max() / c.theta.abs().max())
        print(f"{case:12s} {E:4d} {lc:9.3e} {steps:5d} {lg:9.3e} {lf:11.3e} {lf / lc:7.2f} | "
              f"{g.final['l2re']:9.3e} {int(g.history[-1].get('exchanges_total') or 0):4d} "
              f"{accepted(g):4d} {cpu(g):5.0f} | {f.final['l2re']:9.3e} "
              f"{int(f.history[-1].get('exchanges_total') or 0):4d} {accepted(f):4d} {cpu(f):5.0f} | {cpu(c):5.0f} "
              f"{rel:13.2e}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
