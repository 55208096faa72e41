"""Up-front checks of a problem's client objectives, with errors that name the fault.

Run before any solver starts: an empty client, a residual that is not one
scalar per point, a residual that is not finite at the initial parameters
(checked at *every* point: one vectorized residual evaluation per residual
part, naming the client, the part and the first bad point), a client whose
parameter count does not match the parameter vector.

No Jacobian is formed here: a part's residual is a function of the one parameter
vector, so its Jacobian has that vector's columns by construction, and a residual
that cannot be differentiated fails in the vectorized evaluation already.  (A
Jacobian per part at θ₀ cost about as much as one round of the main job: the
first ``torch.func`` derivative imports ``torch._dynamo``, ~0.9 CPU-s, which the
first round pays instead; the check itself is now a residual evaluation.)
"""
from __future__ import annotations

from typing import Sequence, Union

import torch
from torch.func import vmap

from fedsciml.core.objective import LeastSquares, PointwiseLeastSquares


class SetupError(ValueError):
    """A user-defined problem or its data cannot be solved as given."""


Points = Union[torch.Tensor, tuple[torch.Tensor, ...]]  # a part's points: one tensor, or a tuple of them


def _point(points: Points, i: int) -> str:
    """Point ``i`` of a part, for an error message (its first component when points are a tuple)."""
    x = points[0][i] if isinstance(points, tuple) else points[i]
    vals = x.reshape(-1).tolist()
    text = ", ".join(f"{v:.6g}" for v in vals[:6]) + (", …" if len(vals) > 6 else "")
    return f"[{text}]"


def _first_bad(out: torch.Tensor) -> tuple[int, float, int]:
    bad = ~torch.isfinite(out)
    i = int(torch.nonzero(bad)[0, 0])
    return i, float(out[i]), int(bad.sum())


def check_objectives(objectives: Sequence[LeastSquares], theta0: torch.Tensor) -> None:
    p = theta0.numel()
    if len(objectives) == 0:
        raise SetupError("the problem produced no clients")
    for cid, obj in enumerate(objectives):
        try:
            n = obj.n_residuals
        except ValueError as e:
            raise SetupError(f"client {cid}: {e}") from None
        if n == 0:
            raise SetupError(f"client {cid} has no data (empty client)")
        if obj.n_params != p:
            raise SetupError(f"client {cid}: the Jacobian has {obj.n_params} columns but the parameter vector has {p} "
                             f"entries; the network and the parameters do not match")
        if isinstance(obj, PointwiseLeastSquares):
            for part in obj.parts:
                try:  # every point, one vectorized call: a residual bad only on part of the domain is caught
                    out = vmap(part.fn, in_dims=(None, 0))(theta0, part.points)
                except Exception as e:  # the user's residual failed: name the part
                    raise SetupError(f"client {cid}: residual part {part.name!r} failed at the initial parameters: "
                                     f"{type(e).__name__}: {e}") from e
                if out.ndim != 1:
                    raise SetupError(f"client {cid}: residual part {part.name!r} returns shape {tuple(out.shape[1:])} per "
                                     f"point; a residual must be one scalar per point")
                if not bool(torch.isfinite(out).all()):
                    i, v, k = _first_bad(out)
                    raise SetupError(f"client {cid}: residual part {part.name!r} is not finite at the initial parameters "
                                     f"at point {i} (x = {_point(part.points, i)}: residual {v}; {k} of {out.numel()} "
                                     f"points bad)")
        else:
            r = obj.residual(theta0)
            if r.ndim != 1 or r.shape[0] != n:
                raise SetupError(f"client {cid}: residual has shape {tuple(r.shape)}, expected ({n},)")
            if not bool(torch.isfinite(r).all()):
                i, v, k = _first_bad(r)
                raise SetupError(f"client {cid}: residual is not finite at the initial parameters at row {i} "
                                 f"(residual {v}; {k} of {r.numel()} rows bad)")
