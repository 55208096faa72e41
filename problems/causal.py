"""Causal weighting of a time-dependent :class:`~fedsciml.problems.domain.DomainPDE`'s residual rows (Wang,
Sankaran & Perdikaris 2022, "Respecting causality is all you need for training physics-informed neural
networks", arXiv:2203.07404, Eq. 2.11–2.12).

``[t0, T]`` is cut into M equal slices; ``L_i`` is the mean over the PDE rows' points in slice i of the squared
residual (summed over a system's equations; condition rows are not weighted), pooled over all clients; slice i's
weight is ``w_i = exp(−ε Σ_{k<i} L_k)`` (``w_1 = 1``).  The problem solved is the weighted least-squares problem
whose PDE row at a point of slice i is ``√w_i · r`` — for a least-squares solver, causal weighting is a row
weighting.

How the weights move: they are computed from the current residuals (at θ) and held fixed for ``every`` LM steps
or rounds (a *stage*); then recomputed at the new θ.  Within a stage the problem is an ordinary weighted
least-squares problem, so Gauss–Newton is exact for it and gn's statistics equal the pooled ones (gn == centralized
LM, stage by stage).  The loop over stages is :func:`fedsciml.api.solve`'s (``causal=ε``); each stage is one run of
the driver warm-started from the last θ, so LM's damping starts afresh at each stage.  The pooled slice sums are
computed in this process from every client's objective; over a real deployment they would be one exchange of 2M
floats per client (not offered: the Flower engine is refused).
"""
from __future__ import annotations

import copy

import torch
from torch.func import vmap

from fedsciml.core.objective import ResidualPart

from .base import DTYPE, ProblemError


def check_causal(problem, eps, slices, every) -> None:
    """One line for a causal setting that cannot apply."""
    if getattr(problem, "T", None) is None or not hasattr(problem, "condition_list"):
        raise ProblemError(f"causal weighting applies to a time-dependent DomainPDE (T set); problem "
                           f"{getattr(problem, 'name', problem)!r} has no time axis")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise ProblemError(f"causal (the causality parameter ε) must be a number ≥ 0, got {eps!r}")
    for name, v in (("causal_slices", slices), ("causal_every", every)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ProblemError(f"{name} must be a whole number ≥ 1, got {v!r}")


def slice_index(t: torch.Tensor, t0: float, T: float, slices: int) -> torch.Tensor:
    """The slice ``⌊(t − t0)/(T − t0)·M⌋`` of each time (clamped to 0 … M − 1: t = T is in the last)."""
    return torch.clamp(torch.floor((t - t0) / (T - t0) * slices), 0, slices - 1).long()


def _pde_parts(objective) -> list:
    from .domain import _Residual

    return [p for p in objective.parts if isinstance(p.fn, _Residual) and p.fn.cond is None]


def slice_sums(problem, objective, theta: torch.Tensor, slices: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One client's ``(Σ r² per slice [M], points per slice [M])`` over its PDE rows at θ (unweighted residuals,
    a system's equations summed at each point)."""
    dom = problem.domain()
    sums = torch.zeros(slices, dtype=DTYPE, device=theta.device)
    counts = torch.zeros(slices, dtype=DTYPE, device=theta.device)
    parts = _pde_parts(objective)
    with torch.no_grad():
        for j, p in enumerate(parts):  # a system's equations: one part each, on the same points
            x = p.points
            r = vmap(p.fn, in_dims=(None, 0))(theta, x).reshape(-1)
            s = slice_index(x[:, -1], dom.t0, dom.T, slices)
            sums.index_add_(0, s, r * r)
            if j == 0:
                counts.index_add_(0, s, torch.ones_like(r))
    return sums, counts


def causal_weights(sums: torch.Tensor, counts: torch.Tensor, eps: float) -> torch.Tensor:
    """``w_i = exp(−ε Σ_{k<i} L_k)`` with ``L_k = sums_k / counts_k`` (0 for an empty slice)."""
    L = torch.where(counts > 0, sums / counts.clamp_min(1), torch.zeros_like(sums))
    before = torch.cumsum(L, 0) - L
    return torch.exp(-float(eps) * before)


class _Scaled:
    """A PDE part's residual times its point's ``√w`` (points ``(x, √w)``); one object per part, shared by the
    clients so that their parts stay the same part."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, theta, pt):
        x, s = pt
        return s * self.fn(theta, x)


def weighted_objectives(problem, objectives: list, weights: torch.Tensor) -> list:
    """The clients' objectives with each PDE row scaled by its slice's ``√w`` (other rows unchanged)."""
    dom, M = problem.domain(), weights.numel()
    scaled: dict[int, _Scaled] = {}
    out = []
    pde = {id(p) for o in objectives for p in _pde_parts(o)}
    for o in objectives:
        parts = []
        for p in o.parts:
            if id(p) not in pde:
                parts.append(p)
                continue
            f = scaled.setdefault(id(p.fn), _Scaled(p.fn))
            s = weights.to(p.points.device)[slice_index(p.points[:, -1], dom.t0, dom.T, M)].sqrt()
            parts.append(ResidualPart(p.name, f, (p.points, s), p.weight))
        out.append(problem._objective(parts))
    return out


def causal_problem(problem, theta: torch.Tensor, eps: float, slices: int):
    """``problem`` with its PDE rows causally weighted at θ (weights from the pooled slice sums of the same
    clients' points, fixed), starting from θ.  A shallow copy; the weights of its last build are
    ``causal_weights``."""
    w = copy.copy(problem)
    theta = theta.detach()

    def client_objectives(n_clients, seed=0, device="cpu"):
        base = problem.client_objectives(n_clients, seed, device)
        th = theta.to(device)
        sums = torch.zeros(slices, dtype=DTYPE, device=th.device)
        counts = torch.zeros_like(sums)
        for o in base:  # pooled over the clients (in client order)
            s, c = slice_sums(problem, o, th, slices)
            sums, counts = sums + s, counts + c
        weights = causal_weights(sums, counts, eps)
        w.__dict__["causal_weights"] = weights
        return weighted_objectives(problem, base, weights)

    w.__dict__.update(client_objectives=client_objectives,
                      init_params=lambda seed=0, device="cpu": theta.to(device).clone())
    return w
