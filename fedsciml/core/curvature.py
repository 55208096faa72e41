"""Curvature representations, the matrix-free GGN product, and the FIPA merge rules built on them.

One small interface — ``matvec``, ``+``, ``scaled``, damped ``solve``, ``top(r)``
eigenpairs, and the message: ``to_message`` / ``from_message`` / ``fields`` (its
schema) / ``n_floats`` (what it costs to send) — with dense, low-rank
``U diag(λ) Uᵀ`` and diagonal forms; the images' K-FAC
(:class:`fedsciml.images.fisher.KFAC`) is a fourth.  Aggregators work on these,
never on client data.

:func:`ggn_matmat` is the one matrix-free generalized Gauss–Newton product
``V ↦ J(θ)ᵀ Λ J(θ) V`` of a map ``f: θ ↦ outputs``, with the loss Hessian
``Λ`` (in output space) as an argument: the identity for least squares
(``f`` the residual: ``JᵀJ``, the federated clients' sketches) and
:func:`softmax_ce_hessian` (``diag p − ppᵀ``) for cross-entropy on logits
(the image clients' sketches).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.func import jvp, vjp, vmap

from fedsciml.core import linalg
from fedsciml.core.schema import Field, psd_tolerance


def softmax_ce_hessian(logits: torch.Tensor) -> Callable:
    """The Hessian of cross-entropy in the logits, ``u ↦ (diag p − ppᵀ) u`` per row (``p = softmax``)."""
    prob = torch.softmax(logits.detach(), -1)
    return lambda u: prob * u - prob * (prob * u).sum(-1, keepdim=True)


def ggn_matmat(f: Callable, theta: torch.Tensor, loss_hessian: Callable | None = None) -> Callable:
    """``V [p, L] ↦ J(θ)ᵀ Λ J(θ) V`` from ``jvp``/``vjp`` only (no J, no p×p matrix).

    ``loss_hessian(outputs) -> (u ↦ Λu)`` builds the loss Hessian's action at
    ``f(θ)``; ``None`` is the identity (least squares, ``JᵀJ``).  Columns are
    vmapped: one ``jvp``, the Hessian, one ``vjp`` each.
    """
    theta = theta.detach()
    out, pullback = vjp(f, theta)  # type: ignore[misc]  # torch's stub also lists the has_aux triple
    lam = loss_hessian(out) if loss_hessian is not None else None

    def col(v):
        jv = jvp(f, (theta,), (v,))[1]
        return pullback(lam(jv) if lam is not None else jv)[0]

    return lambda V: vmap(col, in_dims=1, out_dims=1)(V)


class Curvature:
    """The currency of second-order aggregation: a p×p curvature a client can send and a server can merge.

    Every form declares its message — :meth:`to_message` (plain tensors, the
    fields of :meth:`fields`, a :mod:`fedsciml.core.schema` schema
    fragment), :meth:`from_message` (the inverse, bitwise: the message's
    tensors are used as they are) and :attr:`n_floats` (the floats that
    message carries, which is what the round loop counts as sent).  Forms:
    :class:`Dense` (packed upper triangle ``H``), :class:`LowRank` (``U``,
    ``lam``), :class:`Diagonal` (``fisher``) and the images' K-FAC
    (:class:`fedsciml.images.fisher.KFAC`: ``A{l}``, ``G{l}``, ``rest``; its
    layer layout is not in the message and is given as ``layout=``).
    """

    p: int  # the number of parameters it acts on (a field, or a property of the form's tensors)

    def matvec(self, v: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def to_dense(self) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def scaled(self, c: float) -> "Curvature":  # pragma: no cover - interface
        raise NotImplementedError

    def to_message(self) -> dict:  # pragma: no cover - interface
        """The message fields (plain tensors) that carry this curvature."""
        raise NotImplementedError

    @classmethod
    def from_message(cls, msg: dict, layout=None) -> "Curvature":  # pragma: no cover - interface
        """The curvature carried by ``msg`` (its fields of :meth:`fields`; other fields are ignored)."""
        raise NotImplementedError

    @classmethod
    def fields(cls, layout=None) -> dict:  # pragma: no cover - interface
        """``{name: Field}``: what the message fields must satisfy (shapes bound by the schema's context)."""
        raise NotImplementedError

    @classmethod
    def message_problem(cls, msg: dict, p: int) -> str | None:
        """What is wrong with ``msg`` as this form's message for ``p`` parameters beyond its :meth:`fields`
        (a reason, for :class:`~fedsciml.core.schema.MessageRejected`), or None."""
        return None

    @property
    def n_floats(self) -> int:
        """Floats in :meth:`to_message` (its communication cost)."""
        return int(sum(t.numel() for t in self.to_message().values()))

    def diagonal(self) -> torch.Tensor:
        """The diagonal ``[p]`` (Levenberg–Marquardt's first damping is a multiple of its largest entry)."""
        return torch.diagonal(self.to_dense())

    def quad(self, v: torch.Tensor) -> float:
        """``vᵀ C v``."""
        return float(v @ self.matvec(v))

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
    """A dense symmetric ``H``; sent as its packed upper triangle ``H`` [p(p+1)/2] (FIPA full rank)."""

    H: torch.Tensor

    @property
    def p(self) -> int:  # type: ignore[override]  # the base declares p a plain attribute (KFAC: a field)
        return self.H.shape[-1]

    def matvec(self, v):
        return self.H @ v

    def to_dense(self):
        return self.H

    def scaled(self, c):
        return Dense(c * self.H)

    def to_message(self):
        return {"H": linalg.pack_upper(self.H)}

    @classmethod
    def from_message(cls, msg, layout=None):
        return cls(linalg.unpack_upper(msg["H"], linalg.dim_from_packed(msg["H"].shape[-1])))

    @classmethod
    def fields(cls, layout=None):
        return {"H": Field(shape=(None,), psd="packed")}

    @classmethod
    def message_problem(cls, msg, p):
        if msg["H"].numel() != linalg.n_upper(p):
            return (f"field 'H' has {msg['H'].numel()} entries, the packed upper triangle of a {p}×{p} matrix has "
                    f"{linalg.n_upper(p)}")
        return None

    def diagonal(self):
        return torch.diagonal(self.H)

    @property
    def n_floats(self) -> int:  # sent as the upper triangle
        return linalg.n_upper(self.p)


@dataclass
class Diagonal(Curvature):
    """``diag(d)``; sent as ``fisher`` [p] (FedFish, FisherMerge, FedFisher-diag), entries ≥ 0."""

    d: torch.Tensor

    @property
    def p(self) -> int:  # type: ignore[override]  # the base declares p a plain attribute (KFAC: a field)
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

    def to_message(self):
        return {"fisher": self.d}

    @classmethod
    def from_message(cls, msg, layout=None):
        return cls(msg["fisher"])

    @classmethod
    def fields(cls, layout=None):
        return {"fisher": Field(shape=("p",), nonneg=True)}

    @property
    def n_floats(self) -> int:
        return self.p


@dataclass
class LowRank(Curvature):
    """``U diag(λ) Uᵀ`` with orthonormal columns in each client block; sent as ``U`` [p, r], ``lam`` [r] ≥ 0."""

    U: torch.Tensor
    lam: torch.Tensor

    @property
    def p(self) -> int:  # type: ignore[override]  # the base declares p a plain attribute (KFAC: a field)
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

    def to_message(self):
        return {"U": self.U, "lam": self.lam}

    @classmethod
    def from_message(cls, msg, layout=None):
        return cls(msg["U"], msg["lam"])

    @classmethod
    def fields(cls, layout=None):
        return {"U": Field(shape=("p", "r")), "lam": Field(shape=("r",), nonneg=True)}

    @classmethod
    def message_problem(cls, msg, p):
        # eigenvectors have unit norm (U diag(λ) Uᵀ: a longer U would inflate the curvature); √eps: the round-off
        # of a normalized vector
        U = msg["U"]
        sq = (U * U).sum(0)
        if bool(((sq - 1).abs() > psd_tolerance(U.dtype)).any()):
            return (f"field 'U' has columns of norm {float(sq.sqrt().max()):.6g} (min {float(sq.sqrt().min()):.6g}); "
                    "eigenvectors must have unit norm")
        return None

    def diagonal(self):
        return (self.U ** 2) @ self.lam

    def quad(self, v):
        c = self.U.T @ v
        return float((self.lam * c * c).sum())

    @property
    def n_floats(self) -> int:
        return self.U.numel() + self.lam.numel()


def fipa_merge_dense(Hs: Sequence[torch.Tensor], deltas: Sequence[torch.Tensor],
                     weights: Sequence[float] | None = None, rtol: float | None = None,
                     rhs=None, beta: float = 0.0, out: dict | None = None) -> torch.Tensor:
    """FIPA Eq. (6) with dense curvatures: ``Σ_m B_m Δ_m``, ``B_m = (Σ_j w_j H_j)^† w_m H_m``.

    With sum-form curvatures (``H_m = J_mᵀJ_m``) pass ``weights=None`` (all 1):
    the paper's ``N_m/N`` factors cancel.  With mean-form curvatures pass
    ``N_m/N``.  ``rhs(C, w)`` (a robust combination rule,
    :mod:`fedsciml.runtime.robust`) replaces the right-hand side
    ``Σ w_m H_m Δ_m`` by ``rhs(C, w)``, ``C [M, p]`` the clients' ``H_m Δ_m``.
    ``beta > 0``: the regularized merge ``(Σ w_j H_j + βI)⁻¹ b`` by Cholesky
    instead of the pseudo-inverse (one solve: no ``eigh`` is formed and discarded).
    ``out``: where the right-hand side ``b`` is left (``out["b"]``) for a caller that needs it too.
    """
    w = [1.0] * len(Hs) if weights is None else list(weights)
    H = sum(wi * Hi for wi, Hi in zip(w, Hs))
    if rhs is not None:
        b = rhs(torch.stack([Hi @ di for Hi, di in zip(Hs, deltas)]), w)
    else:
        b = sum(wi * (Hi @ di) for wi, Hi, di in zip(w, Hs, deltas))
    assert isinstance(H, torch.Tensor)  # at least one client
    if out is not None:
        out["b"] = b
    return linalg.damped_solve(H, b, beta) if beta > 0 else linalg.pinv_solve(H, b, rtol)


COMPLEMENTS = ("none", "fedavg", "tail")


def fipa_merge_lowrank(Us: Sequence[torch.Tensor], lams: Sequence[torch.Tensor], deltas: Sequence[torch.Tensor],
                       weights: Sequence[float] | None = None, beta: float = 0.0, gamma: float = 1.0,
                       rtol: float | None = None, complement: str = "none",
                       sample_weights: Sequence[float] | None = None, rhs=None,
                       out: dict | None = None) -> torch.Tensor:
    """FIPA's thin-QR merge (paper Eq. 13) — no p×p matrix is formed; the one implementation.

    ``V = [U_1 … U_M] = QR``, ``Σ = blkdiag(w_m Λ_m)``, ``K = R Σ Rᵀ``,
    ``b = Σ w_m U_m Λ_m U_mᵀ Δ_m``; returns ``γ Q z`` with
    ``(K + βI) z = Qᵀ b``.  Since ``b ∈ Range(Q)`` the orthogonal-complement
    term ``(I − QQᵀ) b / β`` vanishes identically.  With β = 0, K is
    pseudo-inverted (eigenvalues below ``rtol·λ_max`` dropped) and the result
    equals the dense pseudo-inverse merge of the low-rank curvatures.

    ``complement`` — what the step does in the directions ``(I − QQᵀ)`` that no
    client's sketch spans (the paper's "orthogonal-complement correction");
    both corrections add ``(I − QQᵀ)`` times a weighted mean of the updates:

    * ``"none"`` — nothing (the step lies in the ≤ Σ r_m-dimensional span);
    * ``"fedavg"`` — add ``(I − QQᵀ) Σ s_m Δ_m`` with the sample weights
      ``s_m = N_m/N`` (``sample_weights``): FedAvg where curvature is unknown;
      the in-span solve is unchanged (the federated ``fipa --complement``);
    * ``"tail"`` — model each client's truncated spectrum as an isotropic floor
      ``τ_m = min λ_m``: ``Ĥ_m = U_m(Λ_m − τ_m)U_mᵀ + τ_m I``.  Then
      ``Ĥ = Q K Qᵀ + β₀ I`` with ``β₀ = Σ w_m τ_m + β`` and the step is
      ``γ [Q (K + β₀I)⁻¹ Qᵀ b + (I − QQᵀ) b / β₀]``, ``b = Σ w_m Ĥ_m Δ_m``: the
      complement term is the τ-weighted mean of the updates (the image
      benchmarks' FIPA).  Needs ``β₀ > 0``.

    ``rhs(C, w)`` — a robust combination rule (:mod:`fedsciml.runtime.robust`):
    ``b = rhs(C, w)`` with ``C [M, p]`` the clients' ``Ĥ_m Δ_m`` replaces
    ``b = Σ w_m Ĥ_m Δ_m`` (only its component in the sketch span enters the
    in-span solve).  ``out``: where the right-hand side ``b`` is left (``out["b"]``) for a caller that needs it too.
    """
    if complement not in COMPLEMENTS:
        raise ValueError(f"FIPA complement must be one of {', '.join(COMPLEMENTS)}, got {complement!r}")
    w = [1.0] * len(Us) if weights is None else list(weights)
    tails = None
    if complement == "tail":
        tails = [float(l.min()) for l in lams]
        lams = [l - t for l, t in zip(lams, tails)]
        beta = sum(wi * t for wi, t in zip(w, tails)) + beta
        if not beta > 0:
            raise ValueError("the isotropic tail needs β₀ = Σ w_m τ_m + β > 0 (every sketch ends in a zero eigenvalue)")
    V = torch.cat(list(Us), dim=1)
    sig = torch.cat([wi * li for wi, li in zip(w, lams)])
    if rhs is not None:
        if tails is None:
            C = torch.stack([U @ (l * (U.T @ d)) for U, l, d in zip(Us, lams, deltas)])
        else:
            C = torch.stack([U @ (l * (U.T @ d)) + t * d for U, l, d, t in zip(Us, lams, deltas, tails)])
        b = rhs(C, w)
    elif tails is None:
        b = sum(wi * (U @ (l * (U.T @ d))) for wi, U, l, d in zip(w, Us, lams, deltas))
    else:
        b = sum(wi * (U @ (l * (U.T @ d)) + t * d) for wi, U, l, d, t in zip(w, Us, lams, deltas, tails))
    if out is not None:
        out["b"] = b
    Q, R = torch.linalg.qr(V, mode="reduced")
    K = (R * sig) @ R.T
    K = 0.5 * (K + K.T)
    rhs = Q.T @ b
    if beta > 0:
        z = linalg.damped_solve(K, rhs, beta)
    else:
        z = linalg.pinv_solve(K, rhs, rtol)
    if complement == "tail":
        return gamma * (Q @ z + (b - Q @ rhs) / beta)
    step = gamma * (Q @ z)
    if complement == "fedavg":
        if sample_weights is None:
            raise ValueError("complement='fedavg' needs the clients' sample weights N_m/N")
        d = sum(si * di for si, di in zip(sample_weights, deltas))
        step = step + (d - Q @ (Q.T @ d))
    return step
