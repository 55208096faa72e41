#!/usr/bin/env python
"""Held-out residuals of saved PINNacle Heat 2d-MS / NS 2d-C runs (``solve … --out DIR``) on points drawn afresh
for the comparison — the same points for every run of a case, so runs with weighted conditions and runs with the
conditions held by an ansatz are compared on equal terms (what their defaults were chosen by; the reference is
only printed beside them).

* PDE: RMS of every PDE residual row at ``--n-interior`` fresh interior points (``centralized_objective(seed)``'s
  ``pde`` parts with the run's own θ and options).
* conditions, unweighted: Heat 2d-MS — u − g at ``--n-boundary`` points at t = 0 and u on as many edge points;
  NS 2d-C — the velocity's misfit at as many lid and wall points.

A run saved before its case recorded ``u_conditions`` (Heat 2d-MS's weighted conditions before commit 204dbe5) is
named ``DIR=condition``.  Example::

    OMP_NUM_THREADS=1 python scripts/bench/pinnacle_heldout.py runs/heat_a runs/heat_b --pinnacle-dir ../PINNacle
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
from torch.func import vmap  # noqa: E402

from fedsciml.problems import get_problem  # noqa: E402
from fedsciml.runtime.modelio import read_model  # noqa: E402


def rms(v: torch.Tensor) -> float:
    return float(v.pow(2).mean().sqrt())


def heldout(run: str, n_interior: int, n_boundary: int, seed: int, pinnacle_dir: str | None) -> dict:
    directory, _, how = run.partition("=")
    tensors, meta = read_model(directory)
    opts = {k: v for k, v in meta["options"].items() if v is not None}
    if how:
        opts["u_conditions"] = how
    if opts.get("case") not in ("heat2d-ms", "ns2d-c"):
        raise SystemExit(f"{directory}: case {opts.get('case')!r}; this script reads heat2d-ms and ns2d-c runs")
    if pinnacle_dir:
        opts["pinnacle_dir"] = pinnacle_dir
    opts.update(n_interior=n_interior, n_boundary=n_boundary)
    p = get_problem("pinnacle", **opts)
    th = tensors["theta"]
    dom = p.domain()
    parts = [q for q in p.centralized_objective(seed=seed).parts if q.name.startswith("pde")]
    out = {"run": directory, "case": opts["case"], "u_conditions": opts.get("u_conditions") or p.spec.u_conditions,
           "pde_rms": rms(torch.cat([vmap(q.fn, in_dims=(None, 0))(th, q.points) for q in parts]))}
    if opts["case"] == "heat2d-ms":
        X0 = dom.sample_initial(n_boundary, "uniform", seed)
        Xb = dom.sample_boundary(n_boundary, "uniform", seed, part="edges")
        out.update(initial_rms=rms(p.u(th, X0) - p.exact(X0)), edges_rms=rms(p.u(th, Xb)))
    else:
        L = dom.sample_boundary(n_boundary, "uniform", seed, part="lid")
        W = dom.sample_boundary(n_boundary, "uniform", seed, part="walls")
        UL, UW = p.u(th, L), p.u(th, W)
        out.update(lid_rms=rms(torch.cat([UL[:, 0] - p.spec.lid(L), UL[:, 1]])), walls_rms=rms(UW[:, :2]))
    if p.has_reference:
        out["l2re"] = p.evaluate(th)["l2re"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="the runs' --out folders; DIR=condition (or =ansatz) for a run saved before "
                                            "its case recorded u_conditions (Heat 2d-MS before commit 204dbe5 held "
                                            "its conditions by weighted rows)")
    ap.add_argument("--n-interior", type=int, default=20000)
    ap.add_argument("--n-boundary", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--pinnacle-dir", default=None, help="a PINNacle checkout (else the runs' own option)")
    a = ap.parse_args(argv)
    for d in a.runs:
        print(json.dumps(heldout(d, a.n_interior, a.n_boundary, a.seed, a.pinnacle_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
