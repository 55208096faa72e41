#!/usr/bin/env python
"""Where NS 2d-C's test error lives, and what the reference's lid corners alone cost.

For each saved run (``solve pinnacle --case ns2d-c … --out DIR``): the pooled L2RE against ``ref/lid_driven_a4.dat``,
each component's relative error and share of the squared error, the share at the reference nodes within r of the
lid's corners (0, 1) and (1, 1) and the pooled L2RE without them, and the pressure's mean offset.

``--floor`` (no run needed): the pooled L2RE of a model exact at every node but those within ρ of a lid corner, where
its pressure is held at the reference's mean on the ring ρ ≤ r < 1.25ρ — what a model that does not follow the
pressure's singularity below ρ costs; and the fit ``p ≈ c + b ln r`` along the lid near each corner.  Example::

    OMP_NUM_THREADS=1 python scripts/bench/pinnacle_ns_corners.py runs/ns_a runs/ns_b --pinnacle-dir ../PINNacle
    python scripts/bench/pinnacle_ns_corners.py --floor --pinnacle-dir ../PINNacle
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fedsciml.problems import get_problem  # noqa: E402
from fedsciml.runtime.modelio import read_model  # noqa: E402

CORNERS = ((0.0, 1.0), (1.0, 1.0))
RADII = (0.02, 0.05, 0.1)


def corner_distance(X: np.ndarray) -> np.ndarray:
    return np.min([np.hypot(X[:, 0] - cx, X[:, 1] - cy) for cx, cy in CORNERS], axis=0)


def reference(pinnacle_dir: str | None) -> tuple[np.ndarray, np.ndarray]:
    opts = {"case": "ns2d-c"} | ({"pinnacle_dir": pinnacle_dir} if pinnacle_dir else {})
    ref = get_problem("pinnacle", **opts).reference()
    return np.asarray(ref.X, dtype=float), np.asarray(ref.U, dtype=float).reshape(len(ref.X), -1)


def where(run: str, pinnacle_dir: str | None) -> dict:
    tensors, meta = read_model(run)
    opts = {k: v for k, v in meta["options"].items() if v is not None}
    if opts.get("case") != "ns2d-c":
        raise SystemExit(f"{run}: case {opts.get('case')!r}; this script reads ns2d-c runs")
    if pinnacle_dir:
        opts["pinnacle_dir"] = pinnacle_dir
    p = get_problem("pinnacle", **opts)
    ref = p.reference()
    X, Y = np.asarray(ref.X, dtype=float), np.asarray(ref.U, dtype=float).reshape(len(ref.X), -1)
    U = p.u(tensors["theta"], torch.as_tensor(X, dtype=torch.float64)).detach().numpy().reshape(Y.shape)
    E = U - Y
    den = float(np.sqrt((Y ** 2).mean()))
    sq = (E ** 2).sum(1)
    out: dict = {"run": run, "l2re": float(np.sqrt((E ** 2).mean()) / den),
                 "rel": {c: float(np.sqrt((E[:, i] ** 2).mean() / (Y[:, i] ** 2).mean())) for i, c in enumerate("uvp")},
                 "share": {c: float((E[:, i] ** 2).sum() / sq.sum()) for i, c in enumerate("uvp")},
                 "p_offset": float(E[:, 2].mean())}
    r = corner_distance(X)
    for rad in RADII:
        m = r < rad
        out[f"lid_corners_r<{rad}"] = {"nodes": int(m.sum()), "share": float(sq[m].sum() / sq.sum()),
                                       "l2re_without": float(np.sqrt((E[~m] ** 2).mean()) / den)}
    return out


def floor(pinnacle_dir: str | None) -> dict:
    X, Y = reference(pinnacle_dir)
    den = float(np.sqrt((Y ** 2).mean()))
    out: dict = {"floor": {}, "log_fit": {}}
    for rho in (0.005, 0.01, 0.02, 0.05):
        E = np.zeros_like(Y)
        for cx, cy in CORNERS:
            r = np.hypot(X[:, 0] - cx, X[:, 1] - cy)
            m = r < rho
            E[m, 2] = Y[m, 2] - Y[(r >= rho) & (r < 1.25 * rho), 2].mean()
        out["floor"][str(rho)] = {"nodes": int((corner_distance(X) < rho).sum()),
                                  "l2re": float(np.sqrt((E ** 2).mean()) / den)}
    lid = np.abs(X[:, 1] - 1) < 1e-9
    for cx, cy in CORNERS:
        r = np.hypot(X[:, 0] - cx, X[:, 1] - cy)
        s = lid & (r > 0.0035) & (r < 0.06)
        A = np.c_[np.ones(int(s.sum())), np.log(r[s])]
        (c, b), *_ = np.linalg.lstsq(A, Y[s, 2], rcond=None)
        at_corner = float(Y[np.argmin(r), 2])
        out["log_fit"][f"({cx:g}, {cy:g})"] = {
            "nodes": int(s.sum()), "c": float(c), "b": float(b),
            "max_dev": float(np.abs(A @ np.array([c, b]) - Y[s, 2]).max()),
            "p_at_corner": at_corner, "r_where_fit_equals_it": float(np.exp((at_corner - c) / b))}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="the runs' --out folders")
    ap.add_argument("--floor", action="store_true", help="the corner floor and the log fit (reference only)")
    ap.add_argument("--pinnacle-dir", default=None, help="a PINNacle checkout (else the runs' own option)")
    a = ap.parse_args(argv)
    if not a.runs and not a.floor:
        ap.error("give runs' --out folders, --floor, or both")
    if a.floor:
        print(json.dumps(floor(a.pinnacle_dir)))
    for d in a.runs:
        print(json.dumps(where(d, a.pinnacle_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
