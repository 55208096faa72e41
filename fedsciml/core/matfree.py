"""Matrix-free damped Gauss–Newton: preconditioned CG on ``(JᵀJ + μI) x = −Jᵀr``.

Nothing of size n×p, p×p or n×n is formed: the Gauss–Newton operator is applied
through Jacobian-vector and vector-Jacobian products (``torch.func.vjp``
pullbacks, built once per point θ and reused — :class:`GNOperator`), the same
products as :func:`fedsciml.core.curvature.ggn_matmat`.  Memory is O(n + p·ℓ)
(ℓ the preconditioner's rank) plus the saved graph of one residual
evaluation; one CG iteration costs two reverse sweeps over it.

Preconditioner: randomized Nyström (Frangella, Tropp & Udell, *Randomized
Nyström preconditioning*, SIMAX 2023, Algorithms 2.1 and 5.1; used for PINN
natural-gradient steps by Bioli, Marcati & Sangalli, 2025).  A rank-ℓ sketch
``A Ω`` (ℓ Gauss–Newton products) gives ``Â = U Λ̂ Uᵀ ≈ JᵀJ``, and

    P⁻¹ = (λ̂_ℓ + μ) U (Λ̂ + μI)⁻¹ Uᵀ + (I − UUᵀ),

which maps the ℓ largest eigenvalues of ``JᵀJ + μI`` to about ``λ̂_ℓ + μ``.
The sketch does not depend on μ, so one sketch per accepted Levenberg–Marquardt
point serves every damping tried there.  Decisions the papers leave open:

* the shift ``ν = √p · eps · ‖Y‖_F`` (FTU's Algorithm 2.1, eps of the dtype);
  eigenvalues of the shifted sketch below ν are clipped to 0;
* CG stops on the relative residual ``‖b − A x‖ ≤ rtol · ‖b‖`` (default
  1e-10) or after ``max_iters`` iterations; stopping early is not an error —
  the LM gain ratio judges the inexact step through its own model decrease
  (:func:`damped_gn_step` returns it), so an inexact step is never mistaken
  for an exact one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import torch
from torch.func import vjp

from fedsciml.core.forms import CG_GROWTH, NYSTROM_RANK
from fedsciml.core.stats import row_blocks

Vec = Callable[[torch.Tensor], torch.Tensor]  # a linear map v ↦ A v on vectors (or on [p, k] blocks)


class GNProducts(Protocol):
    """What the matrix-free solve needs of a Gauss–Newton operator: ``JᵀJ v`` and ``JᵀJ V`` (columns)."""

    def matvec(self, v: torch.Tensor) -> torch.Tensor: ...

    def matmat(self, V: torch.Tensor) -> torch.Tensor: ...


class GNOperator:
    """``v ↦ J(θ)ᵀJ(θ) v`` of a residual map ``r: θ ↦ ℝⁿ`` at a fixed θ, matrix-free.

    The residual and its pullback ``u ↦ Jᵀu`` are computed once (``vjp``), and
    so is the pullback of that linear map, ``v ↦ Jv`` (the "double-vjp"
    trick: ``u ↦ Jᵀu`` is linear, so its vjp with cotangent ``v`` is ``Jv``).
    Each product is then two reverse-mode sweeps over saved graphs and no new
    forward pass.  Measured on Poisson d = 5 ([5,32,32,32,1], 5 700 rows, one
    loaded CPU core): 1.5 s per product against 2.2 s with forward-mode
    ``jvp`` (which re-runs the forward pass with dual numbers every time),
    the same numbers to 1e-16.  :meth:`matmat` applies the columns one after
    another: ``vmap`` over the columns was measured 2–3× slower on CPU (its
    batched intermediates are ℓ·n·width·(d+2) floats).  ``g = Jᵀr`` and
    ``loss = ½‖r‖²`` come from the same pass.
    """

    def __init__(self, residual: Vec, theta: torch.Tensor):
        self.residual = residual
        self.theta = theta.detach()
        out = vjp(residual, self.theta)  # (r, pullback): no auxiliary output
        self._pullback: Callable[..., tuple[torch.Tensor, ...]] = out[1]
        self.r: torch.Tensor = out[0].detach()
        self.n = int(self.r.numel())
        self.p = int(self.theta.numel())
        self.g: torch.Tensor = self._pullback(self.r)[0].detach()
        self.loss: torch.Tensor = 0.5 * (self.r @ self.r)
        self._jv: Optional[Callable[..., tuple[torch.Tensor, ...]]] = None  # v ↦ Jv, built on the first product
        self.products = 0  # Gauss–Newton products applied (columns of matmat included)

    def jv(self, v: torch.Tensor) -> torch.Tensor:
        """``J v`` (the pullback's own pullback; built on the first call)."""
        if self._jv is None:
            self._jv = vjp(lambda u: self._pullback(u)[0], torch.zeros_like(self.r))[1]
        return self._jv(v)[0]

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        self.products += 1
        return self._pullback(self.jv(v))[0].detach()

    def matmat(self, V: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.matvec(V[:, j]) for j in range(V.shape[1])], 1)


#: on a CPU, the most residual rows of one block of a matrix-free operator that keeps every block's graph
#: (:func:`local_operator`, :class:`SplitGNOperator`).  Why: a product's intermediates are n × channels × width
#: floats, and glibc serves an allocation above its mmap threshold (at most 32 MiB) with fresh pages that the
#: kernel zero-fills on first touch, every time; blocks of ~10³ rows keep them below it.  Measured on exp21
#: (p = 118,145, 4,000 rows, 12 channels × 256 widths; one thread; ``scripts/bench/split_rows.py``), one block →
#: 4 blocks: the K-FAC factors 5.86 → 2.93 and 5.00 → 2.86 CPU-s in two runs, a product 4.21 → 2.53 in the first
#: and 3.00 → 2.96 in the second (the one block's cost varies; with ``MALLOC_MMAP_THRESHOLD_`` raised it ran in
#: 2.70 and 3.23: the allocator, not the arithmetic); 8 and 16 blocks were slower again (2.80, 2.91).  exp16
#: (3,500 rows, 7 × 64): factors 0.52 → 0.32 and 0.57 → 0.30, a product 0.31 → 0.26 and 0.34 → 0.23.  A GPU keeps
#: one block.
CPU_BLOCK_ROWS = 1024


class SplitGNOperator:
    """``v ↦ Σ_b J_bᵀ(J_b v)`` over row blocks ``r = [r_1; …; r_B]``, every block's :class:`GNOperator` kept: the
    same graphs :class:`GNOperator` keeps for all rows, held as B smaller ones (no forward pass per product, unlike
    :class:`BlockGNOperator`), so that no intermediate of a product is larger than a block's (:data:`CPU_BLOCK_ROWS`).
    The products equal :class:`GNOperator`'s to round-off (the rows' contributions summed block by block).

    ``blocks``: the blocks' residual maps ``θ ↦ r_b`` in ``r``'s row order (:func:`local_operator`)."""

    def __init__(self, blocks: Sequence[Vec], theta: torch.Tensor):
        if not blocks:
            raise ValueError("a split Gauss–Newton operator needs at least one block of residual rows")
        self.theta = theta.detach()
        self.ops = [GNOperator(res, self.theta) for res in blocks]
        self.r: torch.Tensor = torch.cat([o.r for o in self.ops])
        self.n = int(self.r.numel())
        self.p = int(self.theta.numel())
        g = self.ops[0].g.clone()
        for o in self.ops[1:]:
            g += o.g
        self.g: torch.Tensor = g
        self.loss: torch.Tensor = 0.5 * (self.r @ self.r)
        self.products = 0

    def jv(self, v: torch.Tensor) -> torch.Tensor:
        """``J v``, block by block."""
        return torch.cat([o.jv(v) for o in self.ops])

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        self.products += 1
        out = self.ops[0].matvec(v)
        for o in self.ops[1:]:  # a loop over blocks of ~10³ rows, not over points
            out += o.matvec(v)
        return out

    def matmat(self, V: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.matvec(V[:, j]) for j in range(V.shape[1])], 1)


def local_operator(objective, theta: torch.Tensor) -> "GNOperator | SplitGNOperator":
    """The matrix-free Gauss–Newton operator of an objective held in this process: on a CPU, with more than
    :data:`CPU_BLOCK_ROWS` rows, a :class:`SplitGNOperator` over blocks of at most that many rows
    (:func:`fedsciml.core.stats.row_blocks`); else one :class:`GNOperator`."""
    rows = split_rows(objective, theta)
    if rows is None:
        return GNOperator(objective.residual, theta)
    return SplitGNOperator([b.residual for b in row_blocks(objective, theta, rows)], theta)


def split_rows(objective, theta: torch.Tensor) -> int | None:
    """Rows per block of :func:`local_operator` (and of the K-FAC factors' pass beside it), ``None`` for one
    block: a GPU, or at most :data:`CPU_BLOCK_ROWS` rows."""
    if theta.device.type != "cpu" or int(objective.n_residuals) <= CPU_BLOCK_ROWS:
        return None
    return CPU_BLOCK_ROWS


class BlockGNOperator:
    """``v ↦ J(θ)ᵀJ(θ) v`` of a residual cut into row blocks ``r = [r_1; …; r_B]``, holding one block's graph at a
    time: ``JᵀJv = Σ_b J_bᵀ(J_b v)``, each block's graph built, used and dropped within the product.

    What :class:`GNOperator` keeps for every row at once (the saved residual graph and the ``Jv`` graph: for a
    nested-autodiff PDE residual of a 5 × 100 network, 0.6–0.8 MB a row) is here kept for one block, so the
    operator's memory is set by the block size, not by n.  The price is a forward pass of each block per product
    (:class:`GNOperator` reuses its one pass): the same sums of the same per-row products, added block by block —
    equal to :class:`GNOperator`'s products to round-off (another order of summation over the rows), not bitwise.
    ``g = Jᵀr`` and ``loss = ½‖r‖²`` come from one pass over the blocks at construction.

    ``blocks``: the blocks' residual maps ``θ ↦ r_b`` (:func:`fedsciml.core.stats.row_blocks`' objectives'
    ``residual``), in ``r``'s row order."""

    def __init__(self, blocks: Sequence[Vec], theta: torch.Tensor):
        if not blocks:
            raise ValueError("a block Gauss–Newton operator needs at least one block of residual rows")
        self.blocks = list(blocks)
        self.theta = theta.detach()
        g = torch.zeros_like(self.theta)
        rs = []
        for res in self.blocks:
            out = vjp(res, self.theta)  # (r_b, pullback): no auxiliary output
            r_b, pull = out[0].detach(), out[1]
            g += pull(r_b)[0].detach()
            rs.append(r_b)
            del out, pull  # this block's graph goes before the next block's is built (one graph held, not two)
        self.r: torch.Tensor = torch.cat(rs)
        self.n = int(self.r.numel())
        self.p = int(self.theta.numel())
        self.g: torch.Tensor = g
        self.loss: torch.Tensor = 0.5 * (self.r @ self.r)
        self.products = 0

    def _block(self, res: Vec, v: torch.Tensor) -> tuple[torch.Tensor, Callable[..., tuple[torch.Tensor, ...]]]:
        """One block's ``(J_b v, pullback u ↦ J_bᵀu)``: its residual's vjp and that pullback's own pullback (the
        double-vjp trick of :class:`GNOperator`)."""
        out = vjp(res, self.theta)  # (r_b, pullback): no auxiliary output
        pull: Callable[..., tuple[torch.Tensor, ...]] = out[1]
        jv = vjp(lambda u: pull(u)[0], torch.zeros_like(out[0]))[1](v)[0]
        return jv.detach(), pull

    def jv(self, v: torch.Tensor) -> torch.Tensor:
        """``J v``, block by block."""
        return torch.cat([self._block(res, v)[0] for res in self.blocks])

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        self.products += 1
        out = torch.zeros_like(self.theta)
        for res in self.blocks:  # one block's graph at a time (a loop over blocks of rows, not over points)
            jv, pull = self._block(res, v)
            out += pull(jv)[0].detach()
            del jv, pull  # dropped before the next block's graph is built: one graph held, not two
        return out

    def matmat(self, V: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.matvec(V[:, j]) for j in range(V.shape[1])], 1)


def graph_floats_per_row(d_in: int, hidden: Sequence[int]) -> float:
    """Floats a :class:`GNOperator` keeps per residual row (its saved residual graph and the ``Jv`` graph) for
    a tanh MLP with forward-Laplacian residuals: ``3000 + 5·(d_in + 2)·Σ hidden``.  A fit to the peak RSS
    increase of building the operator and applying two products on Poisson (3 010 rows; measured on this
    CPU: d = 5 [32,32,32] 5 900, d = 10 [32,32,32] 8 600, d = 5 [128,128,128] 15 100 floats per row; the fit
    gives 6 360, 8 760, 16 440 — it errs high).  What the memory estimate counts for the matrix-free forms
    (:func:`fedsciml.runtime.driver.estimate_memory`) in place of J's p columns."""
    return 3000.0 + 5.0 * (int(d_in) + 2) * float(sum(int(h) for h in hidden))


#: the pieces a budgeted :meth:`Nystrom.sketch` takes its ℓ products in (``stop`` asked before each)
SKETCH_PIECES = 16


@dataclass
class Nystrom:
    """A rank-ℓ randomized Nyström approximation ``U diag(lam) Uᵀ`` of a PSD operator (FTU Alg. 2.1)."""

    U: torch.Tensor    # [p, ℓ], orthonormal columns
    lam: torch.Tensor  # [ℓ], descending, ≥ 0

    @classmethod
    def sketch(cls, matmat: Vec, p: int, rank: int, *, dtype: torch.dtype = torch.float64,
               device: torch.device | str = "cpu", generator: torch.Generator | None = None,
               stop: Callable[[], bool] | None = None) -> "Nystrom":
        """``matmat(Ω [p, ℓ]) -> A Ω``; Ω Gaussian with orthonormalized columns.  ``stop`` (a time budget's test,
        as :func:`cg`'s): the ℓ products are taken in :data:`SKETCH_PIECES` pieces of columns and ``stop`` is asked
        before each, :class:`OutOfTime` when it says so — a sketch of a large network (one product can take
        seconds) overruns its budget by one piece, not by all ℓ products."""
        if not 1 <= rank <= p:
            raise ValueError(f"Nyström rank must be in 1..p={p}, got {rank}")
        omega = torch.randn(p, rank, dtype=dtype, device=device, generator=generator)
        omega, _ = torch.linalg.qr(omega, mode="reduced")
        if stop is None:
            Y = matmat(omega)
        else:
            pieces = []
            for cols in torch.tensor_split(torch.arange(rank), min(SKETCH_PIECES, rank)):
                if stop():
                    raise OutOfTime(f"the Nyström sketch stopped by the time budget after {int(cols[0])} of "
                                    f"{rank} products")
                pieces.append(matmat(omega[:, cols]))
            Y = torch.cat(pieces, 1)
        return cls.from_sketch(omega, Y)

    @classmethod
    def from_sketch(cls, omega: torch.Tensor, Y: torch.Tensor) -> "Nystrom":
        """The approximation from a test matrix ``Ω`` and its image ``Y = A Ω`` (FTU Alg. 2.1, stable form)."""
        p = omega.shape[0]
        nu = math.sqrt(p) * torch.finfo(Y.dtype).eps * float(torch.linalg.norm(Y))
        Yn = Y + nu * omega
        C = omega.T @ Yn
        C = 0.5 * (C + C.T)
        L, info = torch.linalg.cholesky_ex(C)
        if int(info) != 0:  # a sketch of a PSD operator is PSD up to round-off; add what it takes
            ev = torch.linalg.eigvalsh(C)
            shift = float(-ev.min()) + nu + 1e-300
            L = torch.linalg.cholesky(C + shift * torch.eye(C.shape[0], dtype=C.dtype, device=C.device))
            nu += shift
        B = torch.linalg.solve_triangular(L, Yn.T, upper=False).T  # Yn L⁻ᵀ
        U, S, _ = torch.linalg.svd(B, full_matrices=False)
        lam = (S * S - nu).clamp_min(0.0)
        return cls(U, lam)

    @property
    def rank(self) -> int:
        return int(self.lam.numel())

    def inverse(self, mu: float) -> Vec:
        """``v ↦ P⁻¹ v`` for the damped operator ``A + μI`` (see the module docstring); μ > 0."""
        if not mu > 0:
            raise ValueError(f"the Nyström preconditioner needs damping μ > 0, got {mu}")
        U = self.U
        scale = (float(self.lam[-1]) + mu) / (self.lam + mu) - 1.0

        def apply(v: torch.Tensor) -> torch.Tensor:
            return v + U @ (scale * (U.T @ v))

        return apply


class OutOfTime(Exception):
    """A solve stopped by its time budget (the ``stop`` callable of :func:`cg` said so) before it finished: no
    step came of it, so the caller keeps its last accepted point (``stop_reason`` ``budget``)."""


@dataclass
class CGResult:
    x: torch.Tensor
    iters: int
    rel_residual: float
    Ax: torch.Tensor  # A x, recovered from the CG residual (b − r)


def cg(matvec: Vec, b: torch.Tensor, *, precond: Vec | None = None, rtol: float = 1e-10,
       max_iters: int = 1000, x0: torch.Tensor | None = None, stop: Callable[[], bool] | None = None,
       keep: list | None = None, keep_max: int = 0) -> CGResult:
    """Preconditioned conjugate gradients for an SPD ``A`` given as ``matvec``.

    Stops when ``‖b − A x‖ ≤ rtol·‖b‖`` or after ``max_iters`` iterations.  The
    residual is updated by the recurrence (no extra product); ``Ax`` is returned
    as ``b − residual`` so a caller can evaluate its quadratic model for free.
    ``stop`` (a time budget's test) is asked before every product: when it says so, :class:`OutOfTime` is
    raised — a budget overruns by at most one iteration, and no truncated solve is mistaken for a step.
    ``keep`` (a list): the first ``keep_max`` search directions and their products are appended to it as
    ``(d, A d)`` pairs — no product more; the solve's Krylov space, for a later solve in it
    (:func:`subspace_step`).
    """
    if not rtol > 0:
        raise ValueError(f"CG rtol must be > 0, got {rtol}")
    if max_iters < 1:
        raise ValueError(f"CG max_iters must be ≥ 1, got {max_iters}")
    bnorm = float(torch.linalg.norm(b))
    if bnorm == 0.0:
        z = torch.zeros_like(b)
        return CGResult(z, 0, 0.0, z)
    if x0 is None:
        x = torch.zeros_like(b)
        res = b.clone()
    else:
        x = x0.clone()
        res = b - matvec(x)
    z = precond(res) if precond is not None else res
    d = z.clone()
    rz = float(res @ z)
    it = 0
    rel = float(torch.linalg.norm(res)) / bnorm
    while rel > rtol and it < max_iters:
        if stop is not None and stop():
            raise OutOfTime(f"CG stopped by the time budget after {it} of at most {max_iters} iterations")
        Ad = matvec(d)
        if keep is not None and len(keep) < keep_max:
            keep.append((d, Ad))
        dAd = float(d @ Ad)
        if not dAd > 0:
            raise ArithmeticError(f"CG: the operator is not positive definite along a search direction (dᵀAd = {dAd:g})")
        alpha = rz / dAd
        x = x + alpha * d
        res = res - alpha * Ad
        it += 1
        rel = float(torch.linalg.norm(res)) / bnorm
        if rel <= rtol:
            break
        z = precond(res) if precond is not None else res
        rz_new = float(res @ z)
        d = z + (rz_new / rz) * d
        rz = rz_new
    return CGResult(x, it, rel, b - res)


#: preconditioners of the matrix-free solve: the Nyström sketch (:class:`Nystrom`), the K-FAC-for-PINNs factors
#: (:class:`fedsciml.core.kfac_pinn.KroneckerFactors`, carried by the statistics) or none
PRECONDITIONERS = ("nystrom", "kfac", "none")


#: the subspace step's preconditioner damping (``MatfreeConfig.subspace_damping``) and the factor between the
#: three dampings of ``adapt``
SUBSPACE_DAMPINGS = ("lm", "adapt")
SUBSPACE_GAMMA_STEP = 10.0


#: the most CG iterations whose Krylov space a matrix-free LM solve keeps for a rejected trial's next solve
#: (``MatfreeConfig.krylov_reuse``; the truncated K-FAC-CG takes ≤ 10): 2·m vectors of p floats while the
#: statistics last
KRYLOV_REUSE = 20


class Preconditioning(Protocol):
    """A curvature approximation that gives the inverse of its damped form, ``μ ↦ (v ↦ P_μ⁻¹ v)``."""

    def inverse(self, mu: float) -> Vec: ...


@dataclass
class MatfreeConfig:
    """Settings of the matrix-free damped Gauss–Newton step."""

    precond: str = "nystrom"  # "nystrom", "kfac", "none" or "auto" (LM's choice: fedsciml.core.forms.choose_lm_solve)
    rank: int = NYSTROM_RANK  # Nyström sketch rank ℓ (capped at p)
    rtol: float = 1e-10       # CG relative residual
    max_iters: int | None = 500  # CG iterations per solve (None: LM's choice, fedsciml.core.forms.matfree_settings;
    #                              0: no CG, the damped K-FAC step −P⁻¹g itself)
    seed: int = 0
    subspace: int = 0         # k > 0: no CG — the damped model minimized exactly over k directions (subspace_step:
    #                           the preconditioned gradient P⁻¹g and the last k − 1 accepted steps), one batched
    #                           product JᵀJ V per point; 0: CG (or max_iters=0's damped K-FAC step)
    krylov_reuse: int = KRYLOV_REUSE  # m > 0: a rejected trial's next solve (a larger μ, the same statistics) is the
    #                           damped model minimized over the first CG solve's Krylov space where that solve was
    #                           truncated after ≤ m iterations (subspace_step; no product, so no exchange when
    #                           federated); else, and with 0, a fresh CG solve
    subspace_damping: str = "lm"  # the preconditioner's damping γ in the subspace step: "lm" (γ = LM's μ) or "adapt"
    #                           (three columns P_γ⁻¹g for γ/ω, γ, ωγ, ω = SUBSPACE_GAMMA_STEP; γ then moves to the
    #                           one whose column alone decreases the model most: Martens & Grosse 2015 §6.6)
    cg_start: int | None = None  # a CG cap that grows with the accepted steps (cg_cap): this many iterations at the
    #                           first step, CG_GROWTH more per accepted step, up to max_iters; None: max_iters at every
    #                           step (LM's K-FAC regime sets it where no cap is named: fedsciml.core.forms.KFAC_CG_START)

    def validate(self) -> None:
        if self.precond not in PRECONDITIONERS + ("auto",):
            raise ValueError(f"matrix-free preconditioner must be one of {', '.join(PRECONDITIONERS)} or auto, "
                             f"got {self.precond!r}")
        if self.rank < 1:
            raise ValueError(f"Nyström rank must be ≥ 1, got {self.rank}")
        if not self.rtol > 0:
            raise ValueError(f"CG rtol must be > 0, got {self.rtol}")
        if self.max_iters is not None and self.max_iters < 0:
            raise ValueError(f"CG max_iters must be ≥ 0 (0: the preconditioner's own damped step, no CG), got "
                             f"{self.max_iters}")
        if self.max_iters == 0 and self.precond not in ("kfac", "auto"):
            raise ValueError(f"CG max_iters=0 (the damped K-FAC step, no CG) needs precond kfac, got {self.precond!r}")
        if self.subspace < 0:
            raise ValueError(f"the subspace step's directions must be ≥ 0 (0: off), got {self.subspace}")
        if self.krylov_reuse < 0:
            raise ValueError(f"the CG directions kept for a rejected trial's next solve must be ≥ 0 (0: a fresh CG "
                             f"solve), got {self.krylov_reuse}")
        if self.cg_start is not None and self.cg_start < 1:
            raise ValueError(f"the first solve's CG cap (cg_start) must be ≥ 1, or None for a fixed cap; got "
                             f"{self.cg_start}")
        if self.subspace_damping not in SUBSPACE_DAMPINGS:
            raise ValueError(f"the subspace step's preconditioner damping must be one of {', '.join(SUBSPACE_DAMPINGS)}, "
                             f"got {self.subspace_damping!r}")


def cg_cap(cfg: MatfreeConfig, accepted: int) -> int:
    """The CG cap of a solve after ``accepted`` accepted steps: ``cfg.max_iters``, or — with ``cfg.cg_start`` —
    ``min(max_iters, cg_start + CG_GROWTH·accepted)``, a cap that grows with the run.

    Why (decided by measurement, ``reproductions/anchors_side_by_side_300.md``): on the K-FAC-for-PINNs authors'
    exp21 (p = 118,145, 4,000 points, one thread) a CG product costs about 3 CPU-s, so the first step at the full
    cap of 10 ends after 30 CPU-s and leaves θ₀ at the 30-s checkpoint; a cap of 3 throughout reaches the first
    checkpoint but trails the full cap later (0.214 against 0.134 at 120 CPU-s).  Far from the solution the damped
    Gauss–Newton model is trusted least (LM's μ is largest), so a loose solve there loses little — the inexact-Newton
    forcing-sequence idea, with the step count (deterministic, the same in centralized LM and federated gn, which
    count accepted steps alike) in place of a residual test."""
    assert cfg.max_iters is not None  # resolved by the caller (LevenbergMarquardt.resolved_matfree)
    if cfg.cg_start is None:
        return int(cfg.max_iters)
    return min(int(cfg.max_iters), int(cfg.cg_start) + CG_GROWTH * int(accepted))


@dataclass
class StepResult:
    delta: torch.Tensor
    model_decrease: float  # −gᵀδ − ½‖Jδ‖² (the Gauss–Newton model's predicted decrease of ½‖r‖²)
    cg_iters: int
    rel_residual: float
    basis: tuple[torch.Tensor, torch.Tensor] | None = None  # (V, JᵀJ V): the CG solve's Krylov space (krylov > 0)


def damped_gn_step(matvec: Vec, g: torch.Tensor, mu: float, *, precond: Vec | None = None,
                   rtol: float = 1e-10, max_iters: int = 500, rhs: torch.Tensor | None = None,
                   stop: Callable[[], bool] | None = None, krylov: int = 0) -> StepResult:
    """``δ ≈ −(JᵀJ + μI)⁻¹ g`` by (preconditioned) CG on ``matvec = v ↦ JᵀJv``, and the model decrease.

    ``rhs`` replaces the right-hand side ``−g`` (SPRING momentum solves
    ``(JᵀJ + μI) δ = −(g + μβφ)``, :mod:`fedsciml.core.lm`); the model
    decrease is always the Gauss–Newton model's at ``g``.
    The decrease ``−gᵀδ − ½δᵀJᵀJδ`` uses ``δᵀJᵀJδ = δᵀ(Aδ) − μ‖δ‖²`` with
    ``Aδ`` from CG's residual; for an exact solve with ``rhs = −g`` it equals
    LM's ``½δᵀ(μδ − g)``.  ``stop``: :func:`cg`'s (a time budget; :class:`OutOfTime` when it says so).
    ``krylov`` = m > 0: where CG was truncated (stopped by ``max_iters`` before ``rtol``) after at most m
    iterations (K-FAC-CG's ≤ 10), the result also carries its whole Krylov space, ``basis = (V, JᵀJ V)`` with
    ``V`` the search directions (``JᵀJ`` of each from CG's own products, ``A v − μv``: no product more; the step
    lies in their span), so that the damped model at another μ can be minimized there (:func:`subspace_step`); a
    converged solve carries none (its accuracy is what was asked, and a fresh solve gives it at the new μ), nor
    does a longer one (its first m directions would be a poorer space than a fresh solve's).
    """
    if not mu > 0:
        raise ValueError(f"the damped step needs μ > 0, got {mu}")

    def A(v: torch.Tensor) -> torch.Tensor:
        return matvec(v) + mu * v

    keep: list | None = [] if krylov > 0 else None
    res = cg(A, -g if rhs is None else rhs, precond=precond, rtol=rtol, max_iters=max_iters, stop=stop,
             keep=keep, keep_max=krylov)
    d = res.x
    quad = float(d @ res.Ax) - mu * float(d @ d)
    dec = -float(g @ d) - 0.5 * quad
    basis = None
    if keep and res.iters <= krylov and res.rel_residual > rtol:  # truncated, every direction kept
        basis = (torch.stack([v for v, _ in keep], 1), torch.stack([Av - mu * v for v, Av in keep], 1))
    return StepResult(d, dec, res.iters, res.rel_residual, basis)


def subspace_step(V: torch.Tensor, HV: torch.Tensor, g: torch.Tensor, mu: float) -> StepResult:
    """The damped Gauss–Newton step restricted to ``span(V)``: ``δ = V a`` minimizing the model
    ``gᵀδ + ½δᵀ(JᵀJ + μI)δ`` over that span, ``(VᵀJᵀJV + μVᵀV) a = −Vᵀg`` — a k×k system from ``HV = JᵀJ V``
    (one batched product; K-FAC's own step-size-and-momentum rule, Martens & Grosse 2015 §7, is k = 2 with
    ``V = [P⁻¹g, δ_{t−1}]``).  The model decrease ``−gᵀδ − ½δᵀJᵀJδ = −(Vᵀg)ᵀa − ½aᵀ(VᵀJᵀJV)a`` is exact
    (no product more).

    Numerics: the columns are scaled to unit norm (a zero column is dropped) and the symmetric k×k matrix is
    solved through its eigendecomposition, eigenvalues below ``k·eps·λ_max`` left out — the least-norm
    coefficients when columns are (nearly) dependent, which gives the same ``δ`` in ``span(V)``."""
    if not mu >= 0:
        raise ValueError(f"the subspace step needs damping μ ≥ 0, got {mu}")
    if V.ndim != 2 or V.shape != HV.shape or V.shape[0] != g.numel():
        raise ValueError(f"subspace step: V {tuple(V.shape)} and JᵀJ V {tuple(HV.shape)} must both be "
                         f"[p = {g.numel()}, k]")
    norms = V.norm(dim=0)
    keep = norms > 0
    if not bool(keep.any()):
        z = torch.zeros_like(g)
        return StepResult(z, 0.0, 0, 0.0)
    Vs, HVs = V[:, keep] / norms[keep], HV[:, keep] / norms[keep]
    G = Vs.T @ HVs
    G = 0.5 * (G + G.T)
    C = G + mu * (Vs.T @ Vs)
    b = -(Vs.T @ g)
    w, U = torch.linalg.eigh(0.5 * (C + C.T))
    cut = w.shape[0] * torch.finfo(w.dtype).eps * float(w.abs().max())
    on = w > cut
    a = U[:, on] @ ((U[:, on].T @ b) / w[on])
    delta = Vs @ a
    dec = float(b @ a) - 0.5 * float(a @ (G @ a))
    return StepResult(delta, dec, 0, 0.0)


def power_lambda_max(matvec: Vec, p: int, *, iters: int = 20, dtype: torch.dtype = torch.float64,
                     device: torch.device | str = "cpu",
                     generator: torch.Generator | None = None, stop: Callable[[], bool] | None = None) -> float:
    """An estimate (from below) of ``λ_max`` of a PSD operator by power iteration (``stop``: as :func:`cg`'s)."""
    v = torch.randn(p, dtype=dtype, device=device, generator=generator)
    v = v / torch.linalg.norm(v)
    lam = 0.0
    for i in range(iters):
        if stop is not None and stop():
            raise OutOfTime(f"the power iteration stopped by the time budget after {i} of {iters} products")
        w = matvec(v)
        lam = float(v @ w)
        nw = float(torch.linalg.norm(w))
        if nw == 0.0:
            return 0.0
        v = w / nw
    return lam


def fipa_local_matfree(solver: str, curvature: str | None, sketch: str, adaptive: bool, n: int, p: int,
                       device: torch.device | str | None = None, dtype: torch.dtype = torch.float64) -> bool:
    """Whether a FIPA client of ``n`` residual rows takes its local Gauss–Newton step and low-rank curvature
    matrix-free (:func:`local_gn_sketch`): local ``gn`` and :func:`fedsciml.core.forms.local_client_form` (the one
    rule: low rank, not adaptive, ``sketch='matfree'`` or ``'auto'`` where ``J_m`` does not fit) says
    ``matfree``."""
    from fedsciml.core.forms import local_client_form

    return solver == "gn" and local_client_form(solver, curvature, sketch, adaptive, n, p, device=device,
                                                dtype=dtype) == "matfree"


#: extra columns of the Nyström test matrix beyond the rank a FIPA client sends (its top-r eigenpairs are taken from a
#: rank-(r + NYSTROM_OVERSAMPLE) sketch: Halko, Martinsson & Tropp 2011 §4.2, Tropp et al. 2017 for Nyström)
NYSTROM_OVERSAMPLE = 10


@dataclass
class LocalGNSketch:
    """A matrix-free FIPA client's answer at θ (:func:`local_gn_sketch`)."""

    delta: torch.Tensor   # ≈ −(JᵀJ + μI)⁻¹ Jᵀr (μ = 0: the minimum-norm solution's CG approximation)
    U: torch.Tensor       # [p, k] top-k eigenvectors of the Nyström approximation of JᵀJ (k ≤ rank)
    lam: torch.Tensor     # [k] descending
    r: torch.Tensor       # the residual at θ
    mu: float             # the damping used: damping · λ̂_max
    cg_iters: int
    rel_residual: float   # CG's final ‖b − A x‖ / ‖b‖
    products: int         # Gauss–Newton products applied (sketch + CG)


def local_gn_sketch(residual: Vec, theta: torch.Tensor, rank: int, *, rtol: float, max_iters: int,
                    damping: float = 0.0, oversample: int = NYSTROM_OVERSAMPLE,
                    generator: torch.Generator | None = None) -> LocalGNSketch:
    """A FIPA client's local Gauss–Newton step and rank-r curvature message without forming ``J`` (n×p) or ``JᵀJ``.

    1. ``ℓ = min(rank + oversample, p)`` products ``JᵀJ Ω`` give a Nyström approximation ``U diag(λ̂) Uᵀ``
       (:class:`Nystrom`); the message is its top ``k = min(rank, #{λ̂_i > max(n, p)·eps·λ̂_1})`` pairs — the
       same numerical-rank cutoff the dense client applies to the exact eigenvalues.  When ``rank(JᵀJ) ≤ ℓ``
       (``n ≤ ℓ``), the approximation is ``JᵀJ`` itself and the pairs are the exact ones up to round-off;
       beyond, they are the sketch's (the error bound of Tropp et al. 2017, Thm 4.1: close to the best rank-r
       error when the spectrum beyond r decays).
    2. The step: preconditioned CG (:func:`cg`, the same sketch as preconditioner, ``P⁻¹`` of :class:`Nystrom`)
       on ``(JᵀJ + μI) δ = −Jᵀr``, ``μ = damping · λ̂_1`` (λ̂_1 ≤ λ_max, equal when the sketch is exact).
       With ``damping = 0`` it is plain CG on the singular normal equations ``JᵀJ δ = −Jᵀr`` (CGLS's
       iterates in exact arithmetic), whose iterates stay in ``range(Jᵀ)`` and approach the minimum-norm
       ``−(JᵀJ)^† Jᵀr`` of the dense client; no preconditioner there — the Nyström ``P⁻¹`` needs a shift
       μ > 0, and with one near the round-off floor of the sketch it amplified the sketch's error on the
       smallest eigenvalues into steps 10⁸ times too large (measured on Bratu, 21 rows per client).
       Each iterate satisfies the Galerkin condition
       ``δᵀ(Jᵀr + (JᵀJ + μI)δ) = 0``, hence ``‖Jδ‖ ≤ ‖r‖``: the server's consistency check holds for an
       early-stopped step too.
    """
    if rank < 1:
        raise ValueError(f"the FIPA curvature rank must be ≥ 1, got {rank}")
    if oversample < 0:
        raise ValueError(f"Nyström oversampling must be ≥ 0, got {oversample}")
    if not damping >= 0:
        raise ValueError(f"local damping must be ≥ 0, got {damping}")
    op = GNOperator(residual, theta)
    p, n = op.p, op.n
    ell = min(int(rank) + int(oversample), p)
    ny = Nystrom.sketch(op.matmat, p, ell, dtype=op.g.dtype, device=op.g.device, generator=generator)
    lam_max = float(ny.lam[0])
    cut = max(n, p) * torch.finfo(op.g.dtype).eps * lam_max
    k = max(1, min(int(rank), int((ny.lam > cut).sum())))
    mu = damping * lam_max
    if mu > 0:
        res = cg(lambda v: op.matvec(v) + mu * v, -op.g, precond=ny.inverse(mu), rtol=rtol, max_iters=max_iters)
    else:  # plain CG on the singular normal equations (CGLS's iterates): they stay in range(Jᵀ)
        res = cg(op.matvec, -op.g, rtol=rtol, max_iters=max_iters)
    return LocalGNSketch(res.x.detach(), ny.U[:, :k].contiguous(), ny.lam[:k].clone(), op.r, mu, res.iters,
                         res.rel_residual, op.products)
