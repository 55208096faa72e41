"""Dense linear algebra shared by every second-order and one-shot method.

Everything here works on any device and in the dtype it is given; callers
keep the server side in float64.
"""
from __future__ import annotations

import numpy as np
import torch


class NotPositiveDefinite(RuntimeError):
    """A (damped) Gram matrix could not be Cholesky-factorized."""


def n_upper(d: int) -> int:
    """Number of floats in the upper triangle of a d×d symmetric matrix."""
    return d * (d + 1) // 2


_TRIU_CACHE: dict = {}


def _triu_flat(d: int, device):
    """Cached flat indices (row-major) of the upper triangle of a d×d matrix and of its mirror.

    Packing happens every round of federated GN and for every ridge client, so
    the index computation (``triu_indices``, O(d²) allocations) is done once per
    (d, device).
    """
    key = (int(d), str(device))
    if key not in _TRIU_CACHE:
        if len(_TRIU_CACHE) > 16:
            _TRIU_CACHE.clear()
        i, j = torch.triu_indices(d, d, device=device)
        _TRIU_CACHE[key] = (i * d + j, j * d + i)
    return _TRIU_CACHE[key]


def pack_upper(H: torch.Tensor) -> torch.Tensor:
    """Upper triangle (diagonal included) of a symmetric matrix, row-major; ``d(d+1)/2`` floats.

    Leading batch dimensions are kept: ``[..., d, d] → [..., d(d+1)/2]``.
    """
    d = H.shape[-1]
    flat = H.reshape(H.shape[:-2] + (d * d,))
    return flat.index_select(-1, _triu_flat(d, H.device)[0])


_GRAM_BLOCKS: dict = {}


def _gram_blocks(d: int, block: int, device):
    """Cached block rows of the packed upper triangle: ``(i0, i1, o0, o1, idx)`` per block of rows.

    Rows ``i0 ≤ i < i1`` of the packed triangle occupy ``[o0, o1)``; ``idx`` are the flat indices of their
    upper entries inside the ``(i1 − i0) × (d − i0)`` block product ``G[i0:i1, i0:]``.
    """
    key = (int(d), int(block), str(device))
    if key not in _GRAM_BLOCKS:
        if len(_GRAM_BLOCKS) > 16:
            _GRAM_BLOCKS.clear()
        rows, off = [], 0
        for i0 in range(0, d, block):
            i1, w = min(d, i0 + block), d - i0
            i, j = torch.triu_indices(i1 - i0, w, device=device)
            idx = i * w + j
            rows.append((i0, i1, off, off + idx.numel(), idx))
            off += idx.numel()
        _GRAM_BLOCKS[key] = rows
    return _GRAM_BLOCKS[key]


def gram_packed(A: torch.Tensor, block: int = 256) -> torch.Tensor:
    """``pack_upper(AᵀA)`` without forming the lower triangle (a blocked ``syrk``).

    Block row ``i0:i1`` is the product ``A[:, i0:i1]ᵀ A[:, i0:]`` (only the columns from the diagonal on),
    about ``½ + block/(2d)`` of the flops of ``AᵀA``; each block is written straight into its slice of the
    packed vector by one gather with cached indices.  Exactly symmetric by construction (one triangle is
    stored), so no symmetrization pass is needed.  Each entry is the same dot product as in ``AᵀA``, so the
    result equals ``pack_upper(A.T @ A)`` to round-off (BLAS may block the sum differently).
    """
    if A.ndim != 2:
        raise ValueError(f"need a matrix [n, d], got shape {tuple(A.shape)}")
    d = A.shape[1]
    out = A.new_empty(n_upper(d))
    for i0, i1, o0, o1, idx in _gram_blocks(d, max(1, int(block)), A.device):
        B = A[:, i0:i1].T @ A[:, i0:]
        torch.index_select(B.reshape(-1), 0, idx, out=out[o0:o1])
    return out


def unpack_upper(v: torch.Tensor, d: int) -> torch.Tensor:
    """Inverse of :func:`pack_upper`: the full symmetric matrix (batch dimensions kept)."""
    if v.shape[-1] != n_upper(d):
        raise ValueError(f"packed triangle has {v.shape[-1]} entries, a {d}×{d} matrix needs {n_upper(d)}")
    fij, fji = _triu_flat(d, v.device)
    H = v.new_empty(v.shape[:-1] + (d * d,))
    H.index_copy_(-1, fij, v)
    H.index_copy_(-1, fji, v)
    return H.view(v.shape[:-1] + (d, d))


def dim_from_packed(n: int) -> int:
    """d such that d(d+1)/2 == n, or a ValueError."""
    d = int(round(((8 * n + 1) ** 0.5 - 1) / 2))
    if n_upper(d) != n:
        raise ValueError(f"{n} is not a triangular number d(d+1)/2")
    return d


def add_diagonal(H: torch.Tensor, mu) -> torch.Tensor:
    """``H + μI`` (μ a scalar or a batch of scalars) without modifying H.

    One copy of H and an in-place add on its diagonal (no d×d identity is formed); the same numbers as
    ``H + μ·I`` bitwise (the off-diagonal entries are copied, the diagonal gets the same single addition).
    """
    mu = torch.as_tensor(mu, dtype=H.dtype, device=H.device)
    # numpy's shape rule (torch.broadcast_shapes imports sympy on first use: ~0.7 s of a one-shot CLI run)
    out = H.expand(np.broadcast_shapes(tuple(H.shape), tuple(mu.shape) + (1, 1))).clone()
    out.diagonal(dim1=-2, dim2=-1).add_(mu[..., None])
    return out


def cholesky(A: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Lower Cholesky factor, or :class:`NotPositiveDefinite` naming the failing pivot.

    With ``rtol``, a factorization that succeeds on a numerically singular matrix is also refused: when the
    smallest eigenvalue is ≤ ``rtol · max_j A_jj``.  Every pivot ``L_ii²`` bounds λ_min from above (checked
    for free), but unpivoted Cholesky is not rank-revealing, so λ_min is also estimated by two steps of
    inverse iteration on the factor (``O(d²)``, a lower bound on ``‖A⁻¹‖``).  ``rtol = d·eps`` is LAPACK's
    default rank tolerance for pivoted Cholesky (``?pstrf``): below it, the solve amplifies round-off by at
    least ``1/(d·eps)``.
    """
    L, info = torch.linalg.cholesky_ex(A)
    bad = info.reshape(-1)
    if bool((bad != 0).any()):
        raise NotPositiveDefinite(
            f"matrix is not positive definite (Cholesky failed at pivot {int(bad[bad != 0][0])} of {A.shape[-1]})"
        )
    if rtol is not None:
        scale = A.diagonal(dim1=-2, dim2=-1).amax(-1)
        lam = L.diagonal(dim1=-2, dim2=-1).square().amin(-1)   # λ_min ≤ every pivot
        gen = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(A.shape[:-1] + (1,), generator=gen, dtype=torch.float64).to(dtype=A.dtype, device=A.device)
        for _ in range(2):                                        # ‖A⁻¹x‖/‖x‖ ≤ 1/λ_min
            x = x / torch.linalg.vector_norm(x, dim=-2, keepdim=True)
            x = torch.cholesky_solve(x, L)
        lam = torch.minimum(lam, 1.0 / torch.linalg.vector_norm(x, dim=-2).squeeze(-1))
        rel = (lam / scale).reshape(-1)
        small = ~(rel > rtol)
        if bool(small.any()):
            raise NotPositiveDefinite(
                f"matrix is numerically singular (smallest eigenvalue ≈ {float(rel[small][0]):.1e} of the largest "
                f"diagonal entry, at most {rtol:.1e} allowed)")
    return L


def damped_solve(H: torch.Tensor, b: torch.Tensor, mu=0.0, rtol: float | None = None) -> torch.Tensor:
    """Solve ``(H + μI) x = b`` by Cholesky (batched over leading dims of H and μ); ``rtol`` as in :func:`cholesky`."""
    L = cholesky(add_diagonal(H, mu) if (torch.is_tensor(mu) or mu != 0) else H, rtol)
    if b.ndim == H.ndim - 1:
        return torch.cholesky_solve(b.unsqueeze(-1), L).squeeze(-1)
    return torch.cholesky_solve(b, L)


def pinv_solve(H: torch.Tensor, b: torch.Tensor, rtol: float | None = None) -> torch.Tensor:
    """Moore–Penrose solve ``H^† b`` for symmetric PSD H through ``eigh``.

    Eigenvalues below ``rtol · λ_max`` are treated as zero (default
    ``p · eps``, as numpy's ``pinv``/``matrix_rank``).
    """
    lam, U = torch.linalg.eigh(H)
    if rtol is None:
        rtol = H.shape[-1] * torch.finfo(H.dtype).eps
    cut = rtol * lam.abs().max()
    inv = torch.where(lam > cut, 1.0 / lam, torch.zeros_like(lam))
    return U @ (inv * (U.T @ b))


def top_eigh(H: torch.Tensor, r: int):
    """Top-r eigenpairs of a symmetric matrix by dense ``eigh``: ``(U [p, r], λ [r])``, λ descending."""
    p = H.shape[-1]
    if not 1 <= r <= p:
        raise ValueError(f"rank r={r} must be in [1, {p}]")
    lam, U = torch.linalg.eigh(H)
    return U[:, -r:].flip(-1), lam[-r:].flip(-1)


def subspace_iteration(matmat, p: int, r: int, *, oversample: int = 10, iters: int = 3,
                       seed: int = 0, dtype=torch.float64, device="cpu"):
    """Top-r eigenpairs of a symmetric PSD operator from products alone.

    Randomized subspace iteration (FIPA paper Eq. 10) followed by a
    Rayleigh–Ritz projection (Eqs. 11–12): ``matmat(V)`` must return ``H V`` for
    a block ``V`` of shape ``[p, L]`` (for example through ``jvp``/``vjp``, never
    forming H).  ``L = min(p, r + oversample)``.  Returns ``(U [p, r], λ [r])``,
    λ descending and clipped at 0.
    """
    if not 1 <= r <= p:
        raise ValueError(f"rank r={r} must be in [1, {p}]")
    L = min(p, r + max(0, int(oversample)))
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    V = torch.randn(p, L, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)
    V, _ = torch.linalg.qr(V)
    for _ in range(max(1, int(iters))):
        V, _ = torch.linalg.qr(matmat(V))
    HV = matmat(V)
    S = V.T @ HV
    S = 0.5 * (S + S.T)
    lam, W = torch.linalg.eigh(S)
    lam, W = lam.flip(-1)[:r], W.flip(-1)[:, :r]
    return V @ W, lam.clamp_min(0)
