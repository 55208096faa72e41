"""Federated leave-one-client-out cross-validation (paper Proposition 5).

From the statistics it already holds the server forms, for every σ in a grid
and every client k, ``w_{−k}(σ) = (G − G_k + σI)⁻¹ (h − h_k)``; client k
returns one validation loss per σ, ``ℓ_k(σ) = ‖A_k w_{−k}(σ) − b_k‖²``; the
server picks ``σ* = argmin_σ Σ_k ℓ_k(σ)``.  Communication: ``|Σ|·d`` floats
down and ``|Σ|`` up per client.

The K·|Σ| systems are solved together (:func:`loco_solutions`): a batched
preconditioned conjugate gradient over all (k, σ) pairs at once, with
preconditioner ``(G + σI)⁻¹`` (one Cholesky and inverse per σ, shared by all
clients, applied as a batched matrix product).
The preconditioned operator is ``I − (G+σI)⁻¹G_k``, whose spectrum lies in
``[σ/(λ+σ), 1]`` and clusters at 1 when no client dominates — typically a
handful of iterations, each one batched matrix product over clients
(``[K, |Σ|, d] × [K, d, d]``) and one batched triangular solve, on CPU or GPU.
Pairs whose relative residual has not reached ``tol`` after ``max_iter``
iterations (one client carrying most of a direction) are finished by direct
Cholesky solves, so the result always equals the naive loop
(:func:`loco_solutions_naive`, K·|Σ| separate Cholesky solves) to round-off.
"""
from __future__ import annotations

import torch

from fedsciml import linalg
from fedsciml.ridge.stats import ridge_solve


def _as_sigmas(sigmas, like: torch.Tensor) -> torch.Tensor:
    s = torch.as_tensor(sigmas, dtype=like.dtype, device=like.device).reshape(-1)
    if s.numel() == 0:
        raise ValueError("the σ grid is empty")
    if bool((s <= 0).any()) or not bool(torch.isfinite(s).all()):
        raise ValueError(f"every σ in the CV grid must be finite and > 0, got {s.tolist()}")
    return s


def loco_solutions_naive(Gs: torch.Tensor, hs: torch.Tensor, sigmas) -> torch.Tensor:
    """Reference: ``W [K, S, d]`` by K·S separate Cholesky solves."""
    s = _as_sigmas(sigmas, Gs)
    G, h = Gs.sum(0), hs.sum(0)
    out = torch.empty(Gs.shape[0], s.numel(), Gs.shape[-1], dtype=Gs.dtype, device=Gs.device)
    for k in range(Gs.shape[0]):
        Mk, rk = G - Gs[k], h - hs[k]
        for j in range(s.numel()):
            out[k, j] = ridge_solve(Mk, rk, float(s[j]))
    return out


def _unpacked(Gs: torch.Tensor, d: int) -> torch.Tensor:
    return linalg.unpack_upper(Gs, d) if Gs.ndim == 2 else Gs


def loco_solutions(Gs: torch.Tensor, hs: torch.Tensor, sigmas, tol: float = 1e-13, max_iter: int = 60,
                   chunk: int | None = None, return_info: bool = False):
    """``W [K, S, d]`` with ``W[k, j] = (G − G_k + σ_j I)⁻¹ (h − h_k)``, batched (see module docstring).

    ``Gs`` is ``[K, d, d]`` or packed upper triangles ``[K, d(d+1)/2]``; ``chunk`` bounds how many clients'
    full Gram matrices are unpacked at once (memory: ``chunk·d²`` floats).
    """
    if hs.ndim != 2 or Gs.shape[0] != hs.shape[0] or Gs.ndim not in (2, 3) or (
            Gs.ndim == 3 and Gs.shape[1:] != (hs.shape[1], hs.shape[1])) or (
            Gs.ndim == 2 and Gs.shape[1] != linalg.n_upper(hs.shape[1])):
        raise ValueError(f"need per-client Grams [K, d, d] (or packed [K, d(d+1)/2]) and moments [K, d], "
                         f"got {tuple(Gs.shape)} and {tuple(hs.shape)}")
    s = _as_sigmas(sigmas, Gs)
    K, d = hs.shape
    S = s.numel()
    G = linalg.unpack_upper(Gs.sum(0), d) if Gs.ndim == 2 else Gs.sum(0)
    h = hs.sum(0)
    L = linalg.cholesky(linalg.add_diagonal(G.expand(S, d, d), s))
    Pinv = torch.cholesky_inverse(L)                                         # [S, d, d], shared by all clients
    Pinv = 0.5 * (Pinv + Pinv.transpose(-1, -2))
    chunk = K if not chunk else max(1, int(chunk))
    X = torch.empty(K, S, d, dtype=hs.dtype, device=hs.device)
    info = {"iterations": 0, "direct_solves": 0, "pairs": K * S}
    for c0 in range(0, K, chunk):
        Gc = _unpacked(Gs[c0:c0 + chunk], d)
        Xc, it, nd = _pcg(G, h, Gc, hs[c0:c0 + chunk], s, Pinv, tol, max_iter)
        X[c0:c0 + chunk] = Xc
        info["iterations"] = max(info["iterations"], it)
        info["direct_solves"] += nd
    return (X, info) if return_info else X


def _pcg(G, h, Gs, hs, s, Pinv, tol, max_iter):
    """PCG on ``(G + σ_j − G_k) x = h − h_k`` for a chunk of clients, all σ at once.

    Starts from the full-data solution ``x₀ = (G + σ_j)⁻¹(h − h_k)``, whose residual is ``G_k x₀``; keeps
    ``Q = (G + σ_j) p`` by recurrence (``(G + σ_j) z = r`` for the preconditioned residual z), so an
    iteration costs one batched product with the clients' ``G_k`` and one batched triangular solve.
    """
    K, d = hs.shape

    def prec(R):  # (G + σ_j)⁻¹ R[k, j]: a batched GEMM (faster than two triangular solves)
        return torch.bmm(Pinv, R.permute(1, 2, 0)).permute(2, 0, 1)

    rhs = (h[None] - hs)[:, None, :].expand(K, s.numel(), d)
    bnorm = rhs.norm(dim=-1)
    X = prec(rhs.contiguous())
    R = torch.bmm(X, Gs)                 # rhs − (G + σ − G_k) x₀ = G_k x₀
    Z = prec(R)
    P, Q = Z, R                          # Q = (G + σ) P
    rz = (R * Z).sum(-1)
    done = R.norm(dim=-1) <= tol * bnorm
    it = 0
    while not bool(done.all()) and it < max_iter:
        it += 1
        AP = Q - torch.bmm(P, Gs)
        pAp = (P * AP).sum(-1)
        alpha = torch.where(done | (pAp <= 0), torch.zeros_like(rz), rz / torch.where(pAp > 0, pAp, torch.ones_like(pAp)))
        X = X + alpha[..., None] * P
        R = R - alpha[..., None] * AP
        done = done | (R.norm(dim=-1) <= tol * bnorm)
        Z = prec(R)
        rz_new = (R * Z).sum(-1)
        beta = torch.where(done, torch.zeros_like(rz), rz_new / torch.where(rz != 0, rz, torch.ones_like(rz)))
        P = Z + beta[..., None] * P
        Q = R + beta[..., None] * Q
        rz = rz_new
    n_direct = int((~done).sum())
    if n_direct:
        kk, jj = torch.nonzero(~done, as_tuple=True)
        M = linalg.add_diagonal((G[None] - Gs[kk]), s[jj])
        X[kk, jj] = linalg.damped_solve(M, (h[None] - hs[kk]))
    return X, it, n_direct


def loco_solutions_repaired(Gs: torch.Tensor, hs: torch.Tensor, sigmas) -> torch.Tensor:
    """LOCO models on *noisy* (DP) statistics: each ``G − G_k`` is projected on the PSD cone first.

    The same eigenvalue-clipping repair as the DP fusion (:func:`fedsciml.ridge.dp.psd_repair`), so
    ``w_{−k}(σ) = V_k (Λ_k⁺ + σ)⁻¹ V_kᵀ (h − h_k)`` for every σ from one batched ``eigh`` per client.
    """
    s = _as_sigmas(sigmas, hs)
    d = hs.shape[-1]
    Gs = _unpacked(Gs, d)
    M = Gs.sum(0)[None] - Gs
    lam, V = torch.linalg.eigh(0.5 * (M + M.transpose(-1, -2)))
    coef = torch.einsum("kdi,kd->ki", V, hs.sum(0)[None] - hs)                 # V_kᵀ r_k
    scaled = coef[:, None, :] / (lam.clamp_min(0)[:, None, :] + s[None, :, None])   # [K, S, d]
    return torch.einsum("kdi,ksi->ksd", V, scaled)


def validation_losses(A: torch.Tensor, b: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Client side: ``ℓ(σ_j) = ‖A W[j] − b‖²`` for its candidate models ``W [S, d]``."""
    R = A @ W.T - b[:, None]
    return (R * R).sum(0)


def loco_cv(Gs, hs, sigmas, client_data, naive: bool = False, chunk: int | None = None,
            repair: bool = False) -> dict:
    """Leave-one-client-out CV over a σ grid.

    ``Gs`` may be packed (``[K, d(d+1)/2]``).  ``repair=True`` (noisy DP statistics) uses
    :func:`loco_solutions_repaired`.  The validation losses are computed by the clients on their raw data:
    under DP they are extra releases that the (ε, δ) of the statistics does not cover.  ``client_data`` is the list of each client's ``(A_k, b_k)`` (used only by
    the client itself to score the models the server sends it).  Returns
    ``{sigma, sigmas, loss [S], per_client [K, S], floats_down, floats_up}``.
    """
    d = hs.shape[-1]
    if repair:
        W = loco_solutions_repaired(Gs, hs, sigmas)
    elif naive:
        W = loco_solutions_naive(_unpacked(Gs, d), hs, sigmas)
    else:
        W = loco_solutions(Gs, hs, sigmas, chunk=chunk)
    losses = torch.stack([validation_losses(A, b, W[k]) for k, (A, b) in enumerate(client_data)])
    total = losses.sum(0)
    s = _as_sigmas(sigmas, hs)
    j = int(torch.argmin(total))
    K, S, d = W.shape
    return {"sigma": float(s[j]), "sigmas": s.tolist(), "loss": total.tolist(), "per_client": losses,
            "floats_down": K * S * d, "floats_up": K * S}
