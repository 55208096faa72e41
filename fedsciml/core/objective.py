"""Least-squares objectives ``F(θ) = ½‖r(θ)‖²`` and their residual Jacobians.

One residual vector serves the loss, the gradient and the curvature: weights
(boundary penalties, ...) live *inside* ``r`` as ``√w · r_part``, so
``∇F = Jᵀr`` and the Gauss–Newton curvature ``JᵀJ`` use exactly the same
weighting.  (The FIPA reference code weighs boundary terms differently in its
local loss and in its curvature; fedsciml does not.)

The global objective of a federated problem is the *sum* of the client
objectives, ``r = [r_1; …; r_M]``.  FIPA's ``N_m/N`` weights (paper Eq. 6)
cancel in this sum form: ``(N_m/N)(Σ_j N_j/N · H_j/N_j)^† H_m/N_m
= (Σ_j J_jᵀJ_j)^† J_mᵀJ_m``.

Two implementations share one interface:

* :class:`PointwiseLeastSquares` — residual parts given as a *pointwise*
  function ``fn(θ, point) -> scalar`` and a batch of points; ``J`` is
  ``vmap`` over points of ``jacrev`` (or ``jacfwd``, whichever is cheaper for
  the per-point output size) — the cost of a per-sample gradient per row.
* :class:`LinearLeastSquares` — ``r = A w − b`` with ``J = A`` in closed form
  (ridge regression).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, Union

import torch
from torch.func import jacfwd, jacrev, jvp, vjp, vmap

Points = Union[torch.Tensor, tuple]


@dataclass
class GNStats:
    """Sufficient statistics of one Gauss–Newton step at θ.

    ``H = JᵀJ`` (p×p), ``g = Jᵀr`` (p), ``loss = ½‖r‖²``, ``n`` residual rows.

    A centralized solver that holds the data may also keep ``J`` and ``r``
    (then ``H`` may be ``None``: Levenberg–Marquardt can solve its damped
    system in the n×n kernel form ``Jᵀ(JJᵀ + μI)⁻¹r`` when n < p).  Messages
    and federated sums never carry them.

    ``op`` — a matrix-free Gauss–Newton operator in place of ``H`` and ``J``
    (``matvec(v) -> JᵀJv``, ``matmat(V) -> JᵀJV``, ``p``:
    :class:`fedsciml.core.matfree.GNOperator`, or federated gn's summed client
    products) for the matrix-free LM solve.
    """

    H: torch.Tensor | None
    g: torch.Tensor
    loss: torch.Tensor
    n: int
    J: torch.Tensor | None = None
    r: torch.Tensor | None = None
    op: object | None = None
    factors: object | None = None  # K-FAC-for-PINNs factors (fedsciml.core.kfac_pinn) for precond='kfac'


@dataclass
class ResidualPart:
    """One block of residuals: ``√weight · fn(θ, points[i])`` for every point.

    ``fn(theta, point)`` returns a 0-d tensor (or a 1-d tensor of C outputs);
    ``points`` is a tensor ``[n, ...]`` or a tuple of such tensors (for example
    inputs and targets), batched along dimension 0.
    """

    name: str
    fn: Callable
    points: Points
    weight: float = 1.0
    #: how ``fn`` is computed from the network's channels (:class:`fedsciml.core.kfac_pinn.Jet`), for the
    #: K-FAC-for-PINNs preconditioner; ``None``: not in that form
    jet: object | None = None

    @property
    def n_points(self) -> int:
        p = self.points[0] if isinstance(self.points, tuple) else self.points
        return int(p.shape[0])


class LeastSquares:
    """Interface: residual, Jacobian, matrix-free products and GN statistics."""

    n_params: int

    def residual(self, theta: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def jacobian(self, theta: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def n_residuals(self) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def loss(self, theta: torch.Tensor) -> torch.Tensor:
        r = self.residual(theta)
        return 0.5 * (r @ r)

    def jvp(self, theta: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """``J(θ) v`` without forming J."""
        return jvp(self.residual, (theta,), (v,))[1]

    def vjp(self, theta: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``J(θ)ᵀ u`` without forming J."""
        _, pullback = vjp(self.residual, theta)  # type: ignore[misc]  # torch's stub also lists the has_aux triple
        return pullback(u)[0]

    def gradient(self, theta: torch.Tensor) -> torch.Tensor:
        r = self.residual(theta)
        return self.vjp(theta, r)

    def residual_and_jacobian(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r(θ), J(θ))``; implementations compute both in one pass where they can."""
        return self.residual(theta), self.jacobian(theta)

    def gn_stats(self, theta: torch.Tensor) -> GNStats:
        r, J = self.residual_and_jacobian(theta)
        return gn_stats_from(J, r)


def gn_stats_from(J: torch.Tensor, r: torch.Tensor, *, form_gram: bool = True,
                  keep_jacobian: bool = False) -> GNStats:
    """``(JᵀJ, Jᵀr, ½‖r‖²)`` — the one place the Gram matrix is formed.

    ``form_gram=False`` skips ``JᵀJ`` (``H=None``) and ``keep_jacobian=True``
    keeps ``J`` and ``r`` in the statistics (for the kernel-form LM solve).
    """
    H = None
    if form_gram:
        H = J.T @ J
        H = 0.5 * (H + H.T)  # exact symmetry (BLAS may differ in the last bit)
    kept = (J, r) if keep_jacobian else (None, None)
    return GNStats(H=H, g=J.T @ r, loss=0.5 * (r @ r), n=int(r.shape[0]), J=kept[0], r=kept[1])


class PointwiseLeastSquares(LeastSquares):
    """Residuals from pointwise functions, Jacobians by ``vmap`` + ``jacrev``/``jacfwd``."""

    def __init__(self, parts: Sequence[ResidualPart], n_params: int):
        self.parts = [p for p in parts if p.n_points > 0]
        if not self.parts:
            raise ValueError("a least-squares objective needs at least one residual point")
        for p in self.parts:
            if not (p.weight > 0):
                raise ValueError(f"residual part {p.name!r} has weight {p.weight}; weights must be > 0")
        self.n_params = int(n_params)

    @property
    def n_residuals(self) -> int:
        return sum(p.n_points for p in self.parts)

    def _part_residual(self, part: ResidualPart, theta: torch.Tensor) -> torch.Tensor:
        r = vmap(part.fn, in_dims=(None, 0))(theta, part.points)
        return (part.weight ** 0.5) * r.reshape(-1)

    def part_residuals(self, theta: torch.Tensor) -> list:
        """Each part's weighted residuals ``√w · r_part`` (in :attr:`parts` order; their concatenation is ``r``)."""
        return [self._part_residual(p, theta) for p in self.parts]

    def residual(self, theta: torch.Tensor) -> torch.Tensor:
        return torch.cat(self.part_residuals(theta))

    def _part_residual_and_jacobian(self, part: ResidualPart, theta: torch.Tensor):
        # Per-point output size C (1 for scalar residuals) against p parameters:
        # reverse mode costs ~C backward passes, forward mode ~p tangents.  The
        # residual value comes out of the same pass (has_aux), not a second one.
        first = tuple(t[:1] for t in part.points) if isinstance(part.points, tuple) else part.points[:1]
        c = vmap(part.fn, in_dims=(None, 0))(theta, first).numel()
        transform = jacrev if c <= self.n_params else jacfwd

        def fn_aux(th, pt):
            out = part.fn(th, pt)
            return out, out

        J, r = vmap(transform(fn_aux, argnums=0, has_aux=True), in_dims=(None, 0))(theta, part.points)
        w = part.weight ** 0.5
        return w * r.reshape(-1), w * J.reshape(-1, self.n_params)

    def _part_jacobian(self, part: ResidualPart, theta: torch.Tensor) -> torch.Tensor:
        return self._part_residual_and_jacobian(part, theta)[1]

    def jacobian(self, theta: torch.Tensor) -> torch.Tensor:
        return self.residual_and_jacobian(theta)[1]

    def residual_and_jacobian(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rs, Js = zip(*(self._part_residual_and_jacobian(p, theta) for p in self.parts))
        return torch.cat(rs), torch.cat(Js)

    def jacobian_loop(self, theta: torch.Tensor) -> torch.Tensor:
        """Reference Jacobian: a plain autograd loop over points (slow; tests/benchmarks)."""
        rows = []
        for part in self.parts:
            for i in range(part.n_points):
                pt = tuple(t[i] for t in part.points) if isinstance(part.points, tuple) else part.points[i]
                th = theta.detach().clone().requires_grad_(True)
                out = part.fn(th, pt).reshape(-1)
                for c in range(out.numel()):
                    (gr,) = torch.autograd.grad(out[c], th, retain_graph=True, allow_unused=True)
                    rows.append((part.weight ** 0.5) * (gr if gr is not None else torch.zeros_like(th)))
        return torch.stack(rows)


class LinearLeastSquares(LeastSquares):
    """``r(w) = A w − b``; the Jacobian is ``A`` (ridge regression)."""

    def __init__(self, A: torch.Tensor, b: torch.Tensor):
        if A.ndim != 2 or b.ndim != 1 or A.shape[0] != b.shape[0]:
            raise ValueError(f"need A [n, d] and b [n] with matching n, got A {tuple(A.shape)} and b {tuple(b.shape)}")
        self.A, self.b = A, b
        self.n_params = int(A.shape[1])

    @property
    def n_residuals(self) -> int:
        return int(self.A.shape[0])

    def residual(self, theta: torch.Tensor) -> torch.Tensor:
        return self.A @ theta - self.b

    def jacobian(self, theta: torch.Tensor) -> torch.Tensor:
        return self.A

    def jvp(self, theta: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.A @ v

    def vjp(self, theta: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return self.A.T @ u


def stack_objectives(objs: Sequence[LeastSquares]) -> LeastSquares:
    """The pooled (centralized) objective of several clients: ``r = [r_1; …; r_M]``."""
    objs = list(objs)
    if all(isinstance(o, PointwiseLeastSquares) for o in objs):
        merged: dict[tuple, list] = {}
        order: list[tuple] = []
        for o in objs:
            for p in o.parts:  # type: ignore[attr-defined]  # every o is a PointwiseLeastSquares here
                key = (p.name, p.weight)
                if key in merged and merged[key][0].fn != p.fn:
                    raise ValueError(f"residual part {p.name!r} has different functions on different clients")
                if key not in merged:
                    merged[key] = []
                    order.append(key)
                merged[key].append(p)
        parts = []
        for key in order:
            ps = merged[key]
            pts: torch.Tensor | tuple[torch.Tensor, ...]
            if isinstance(ps[0].points, tuple):
                pts = tuple(torch.cat([q.points[j] for q in ps]) for j in range(len(ps[0].points)))
            else:
                pts = torch.cat([q.points for q in ps])
            parts.append(ResidualPart(ps[0].name, ps[0].fn, pts, ps[0].weight, ps[0].jet))
        return PointwiseLeastSquares(parts, objs[0].n_params)
    if all(isinstance(o, LinearLeastSquares) for o in objs):
        return LinearLeastSquares(torch.cat([o.A for o in objs]),  # type: ignore[attr-defined]
                                  torch.cat([o.b for o in objs]))  # type: ignore[attr-defined]
    raise TypeError("cannot pool objectives of different kinds")
