"""Curvature representations and the FIPA merge rules built on them.

One small interface — ``matvec``, ``+``, ``scaled``, damped ``solve``, ``top(r)``
eigenpairs and ``n_floats`` (what it costs to send) — with dense, low-rank
``U diag(λ) Uᵀ`` and diagonal forms.  Aggregators work on these, never on
client data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from fedsciml import linalg


class Curvature:
    p: int

    def matvec(self, v: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def to_dense(self) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def n_floats(self) -> int:  # pragma: no cover - interface
        raise NotImplementedError

    def scaled(self, c: float) -> "Curvature":  # pragma: no cover - interface
        raise NotImplementedError

    def solve(self, b: torch.Tensor, damping: float = 0.0) -> torch.Tensor:
        """``(C + damping·I)⁻¹ b``; pseudo-inverse when damping is 0."""
        H = self.to_dense()
        return linalg.damped_solve(H, b, damping) if damping > 0 else linalg.pinv_solve(H, b)

    def top(self, r: int) -> "LowRank":
        U, lam = linalg.top_eigh(self.to_dense(), r)
        return LowRank(U, lam)

    def __add__(self, other: "Curvature") -> "Curvature":
        return Dense(self.to_dense() + other.to_dense())


@dataclass
class Dense(Curvature):
    H: torch.Tensor

    @property
    def p(self) -> int:
        return self.H.shape[-1]

    def matvec(self, v):
        return self.H @ v

    def to_dense(self):
        return self.H

    def scaled(self, c):
        return Dense(c * self.H)

    @property
    def n_floats(self) -> int:  # sent as the upper triangle
        return linalg.n_upper(self.p)


@dataclass
class Diagonal(Curvature):
    d: torch.Tensor

    @property
    def p(self) -> int:
        return self.d.shape[-1]

    def matvec(self, v):
        return self.d * v if v.ndim == 1 else self.d[:, None] * v

    def to_dense(self):
        return torch.diag(self.d)

    def scaled(self, c):
        return Diagonal(c * self.d)

    def solve(self, b, damping=0.0):
        dd = self.d + damping
        inv = torch.where(dd > 0, 1.0 / dd, torch.zeros_like(dd))
        return inv * b if b.ndim == 1 else inv[:, None] * b

    def __add__(self, other):
        if isinstance(other, Diagonal):
            return Diagonal(self.d + other.d)
        return super().__add__(other)

    @property
    def n_floats(self) -> int:
        return self.p


@dataclass
class LowRank(Curvature):
    """``U diag(λ) Uᵀ`` with orthonormal columns in each client block."""

    U: torch.Tensor
    lam: torch.Tensor

    @property
    def p(self) -> int:
        return self.U.shape[0]

    @property
    def rank(self) -> int:
        return self.U.shape[1]

    def matvec(self, v):
        if v.ndim == 1:
            return self.U @ (self.lam * (self.U.T @ v))
        return self.U @ (self.lam[:, None] * (self.U.T @ v))

    def to_dense(self):
        return (self.U * self.lam) @ self.U.T

    def scaled(self, c):
        return LowRank(self.U, c * self.lam)

    def __add__(self, other):
        if isinstance(other, LowRank):  # exact: stack the bases
            return LowRank(torch.cat([self.U, other.U], 1), torch.cat([self.lam, other.lam]))
        return super().__add__(other)

    @property
    def n_floats(self) -> int:
        return self.U.numel() + self.lam.numel()


def fipa_merge_dense(Hs: Sequence[torch.Tensor], deltas: Sequence[torch.Tensor],
                     weights: Sequence[float] | None = None, rtol: float | None = None,
                     b: torch.Tensor | None = None) -> torch.Tensor:
    """FIPA Eq. (6) with dense curvatures: ``Σ_m B_m Δ_m``, ``B_m = (Σ_j w_j H_j)^† w_m H_m``.

    With sum-form curvatures (``H_m = J_mᵀJ_m``) pass ``weights=None`` (all 1):
    the paper's ``N_m/N`` factors cancel.  With mean-form curvatures pass
    ``N_m/N``.  ``b`` replaces the right-hand side ``Σ w_m H_m Δ_m`` (a robust
    combination of it, :mod:`fedsciml.federated.robust`).
    """
    w = [1.0] * len(Hs) if weights is None else list(weights)
    H = sum(wi * Hi for wi, Hi in zip(w, Hs))
    if b is None:
        b = sum(wi * (Hi @ di) for wi, Hi, di in zip(w, Hs, deltas))
    return linalg.pinv_solve(H, b, rtol)


def fipa_merge_lowrank(Us: Sequence[torch.Tensor], lams: Sequence[torch.Tensor], deltas: Sequence[torch.Tensor],
                       weights: Sequence[float] | None = None, beta: float = 0.0, gamma: float = 1.0,
                       rtol: float | None = None, b: torch.Tensor | None = None) -> torch.Tensor:
    """FIPA's thin-QR merge (paper Eq. 13) — no p×p matrix is formed.

    ``V = [U_1 … U_M] = QR``, ``Σ = blkdiag(w_m Λ_m)``, ``K = R Σ Rᵀ``,
    ``b = Σ w_m U_m Λ_m U_mᵀ Δ_m``; returns ``γ Q z`` with
    ``(K + βI) z = Qᵀ b``.  Since ``b ∈ Range(Q)`` the orthogonal-complement
    term ``(I − QQᵀ) b / β`` vanishes identically.  With β = 0, K is
    pseudo-inverted (eigenvalues below ``rtol·λ_max`` dropped) and the result
    equals the dense pseudo-inverse merge of the low-rank curvatures.  ``b``
    replaces the right-hand side (a robust combination of it; only its component
    in the span of the ``U_m`` is used).
    """
    w = [1.0] * len(Us) if weights is None else list(weights)
    V = torch.cat(list(Us), dim=1)
    sig = torch.cat([wi * li for wi, li in zip(w, lams)])
    if b is None:
        b = sum(wi * (U @ (l * (U.T @ d))) for wi, U, l, d in zip(w, Us, lams, deltas))
    Q, R = torch.linalg.qr(V, mode="reduced")
    K = (R * sig) @ R.T
    K = 0.5 * (K + K.T)
    rhs = Q.T @ b
    if beta > 0:
        z = linalg.damped_solve(K, rhs, beta)
    else:
        z = linalg.pinv_solve(K, rhs, rtol)
    return gamma * (Q @ z)
