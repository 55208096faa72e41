"""Federated leave-one-client-out cross-validation (paper Proposition 5).

From the statistics it already holds the server forms, for every σ in a grid
and every client k, ``w_{−k}(σ) = (G − G_k + σI)⁻¹ (h − h_k)``; client k's
validation loss is ``ℓ_k(σ) = ‖A_k w_{−k}(σ) − b_k‖²``; the server picks
``σ* = argmin_σ Σ_k ℓ_k(σ)``.

The server scores client k itself, from client k's own statistics
(:func:`stats_scores`): ``ℓ_k(σ) = wᵀG_k w − 2wᵀh_k + ‖b_k‖²`` with
``w = w_{−k}(σ)`` (square-root form: ``wᵀG_k w = ‖R_k w‖²``).  The last term
does not depend on σ, so the choice of σ is post-processing of the one message
already sent: nothing goes down, nothing more comes up, no second round, and
under local DP no privacy is spent beyond the noised statistics.  With random
projection the statistics are those of the projected rows ``A_kS`` and the
models ``v`` live in the projected space, so ``‖A_kSv − b_k‖²`` is the same
quadratic form: no client-scored variant is needed anywhere.  (Under DP the
scores are computed from the *noisy* ``G_k, h_k``: an unbiased estimate of the
clipped rows' loss given w, since ``w_{−k}`` is built from the other clients' independent
noise — at no privacy cost.)  ``‖b_k‖²`` is known exactly when the
message carries the client's loss (``2·loss``, exact statistics); a DP
message carries none, and the reported losses then omit ``Σ_k ‖b_k‖²``.

The K·|Σ| systems are solved together (:func:`loco_solutions`): a batched
preconditioned conjugate gradient over all (k, σ) pairs at once, with
preconditioner ``(G + σI)⁻¹`` (one Cholesky and inverse per σ, shared by all
clients, applied as one matrix product per σ).  The preconditioned operator is
``I − (G+σI)⁻¹G_k``: the identity plus a rank-``n_k`` term whose eigenvalues
lie in ``[σ/(λ+σ), 1]`` and cluster at 1 when no client dominates — typically
5 iterations to 1e-13.  Each iteration costs one product per σ with the d×d
preconditioner (``2d²·K·|Σ|`` flops, the floor of the method) and one product
with each client's ``G_k``: with the clients' square-root factors
(``sqrt=True``, ``G_k = R_kᵀR_k``, ``R_k`` ``[n_k, d]``) that is
``4·n_k·d`` flops per vector instead of ``2d²``, and ``n_k·d`` floats to read
instead of a d×d matrix.  The residual ``rhs − (G + σ − G_k)x`` is kept by
recurrence (``(G+σ)p`` is updated from the preconditioned residual), so no
product with G is needed.  Clients are processed in chunks so that the
working arrays stay in cache.  Pairs whose relative residual has not reached
``tol`` after ``max_iter`` iterations (one client carrying most of a
direction, so ``G − G_k + σI`` is ill-conditioned there) are finished by
direct Cholesky solves, so the result always equals the naive loop
(:func:`loco_solutions_naive`, K·|Σ| separate Cholesky solves) to round-off.
"""
from __future__ import annotations

import math

import torch

from fedsciml.core import linalg
from fedsciml.core.stats import SingularGram, ridge_solve


def _as_sigmas(sigmas, like: torch.Tensor) -> torch.Tensor:
    s = torch.as_tensor(sigmas, dtype=like.dtype, device=like.device).reshape(-1)
    if s.numel() == 0:
        raise ValueError("the σ grid is empty")
    if bool((s <= 0).any()) or not bool(torch.isfinite(s).all()):
        raise ValueError(f"every σ in the CV grid must be finite and > 0, got {s.tolist()}")
    return s


def loco_solutions_naive(Gs: torch.Tensor, hs: torch.Tensor, sigmas) -> torch.Tensor:
    """Reference: ``W [K, S, d]`` by K·S separate Cholesky solves (``Gs`` full Grams ``[K, d, d]``)."""
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


def _check_stats(Gs, hs, sqrt):
    ok = hs.ndim == 2 and Gs.shape[0] == hs.shape[0]
    if sqrt:
        ok = ok and Gs.ndim == 3 and Gs.shape[2] == hs.shape[1]
    else:
        ok = ok and ((Gs.ndim == 3 and Gs.shape[1:] == (hs.shape[1], hs.shape[1]))
                     or (Gs.ndim == 2 and Gs.shape[1] == linalg.n_upper(hs.shape[1])))
    if not ok:
        want = "factors [K, m, d]" if sqrt else "Grams [K, d, d] (or packed [K, d(d+1)/2])"
        raise ValueError(f"need per-client {want} and moments [K, d], got {tuple(Gs.shape)} and {tuple(hs.shape)}")


def default_chunk(K: int, S: int, d: int, unpack: bool = False) -> int:
    """Clients per chunk: the PCG's working arrays (6 of ``S·chunk·d`` floats, plus ``chunk·d²`` when packed
    Grams are unpacked) within about 256 MB.

    Larger chunks give the per-σ preconditioner product a taller GEMM; the clients' own products are done
    one client at a time anyway (its factor or Gram stays in cache between its two uses)."""
    return int(max(1, min(K, (256 << 20) // (8 * (6 * S * d + (d * d if unpack else 0))))))


def loco_solutions(Gs: torch.Tensor, hs: torch.Tensor, sigmas, tol: float = 1e-13, max_iter: int = 60,
                   chunk: int | None = None, return_info: bool = False, *, sqrt: bool = False, total=None):
    """``W [K, S, d]`` with ``W[k, j] = (G − G_k + σ_j I)⁻¹ (h − h_k)``, batched (see module docstring).

    ``Gs`` is ``[K, d, d]``, packed upper triangles ``[K, d(d+1)/2]``, or with ``sqrt=True`` the clients'
    square-root factors ``R_k`` ``[K, m, d]`` (``R_kᵀR_k = G_k``, zero rows allowed — the form
    :meth:`~fedsciml.core.stats.FusionServer.stacked_factors` returns); ``hs`` is ``[K, d]``.  ``total``:
    the fused ``(G [d, d], h [d])`` when the caller already has it (the server does), else it is summed
    here (from factors that costs ``2·K·m·d²`` flops).  ``chunk`` bounds how many clients are processed at
    once (default :func:`default_chunk`, as fast as any setting measured).
    """
    _check_stats(Gs, hs, sqrt)
    s = _as_sigmas(sigmas, hs)
    K, d = hs.shape
    S = s.numel()
    if total is not None:
        G, h = total
    elif sqrt:
        G, h = linalg.unpack_upper(linalg.gram_packed(Gs.reshape(-1, d)), d), hs.sum(0)
    else:
        G, h = (linalg.unpack_upper(Gs.sum(0), d) if Gs.ndim == 2 else Gs.sum(0)), hs.sum(0)
    Pinv = G.new_empty(S, d, d)                           # (G + σ_j)⁻¹, exactly symmetric, shared by all clients
    x_full = G.new_empty(S, d)                            # (G + σ_j)⁻¹ h
    M = G.clone()
    for j in range(S):                                    # one σ at a time: no [S, d, d] temporaries
        M.diagonal().copy_(G.diagonal() + s[j])
        try:
            L = linalg.cholesky(M)
        except linalg.NotPositiveDefinite as e:
            raise SingularGram(f"G + σI is not positive definite for σ={float(s[j])} ({e}); "
                               f"use larger σ values in the CV grid") from None
        torch.cholesky_inverse(L, out=Pinv[j])
        x_full[j] = torch.cholesky_solve(h[:, None], L)[:, 0]
    del M, L
    chunk = default_chunk(K, S, d, unpack=not sqrt and Gs.ndim == 2) if not chunk else max(1, int(chunk))
    X = torch.empty(K, S, d, dtype=hs.dtype, device=hs.device)
    info = {"iterations": 0, "direct_solves": 0, "pairs": K * S, "chunk": chunk}
    for c0 in range(0, K, chunk):
        Xc, it, nd = _pcg(G, h, x_full, Gs[c0:c0 + chunk], hs[c0:c0 + chunk], s, Pinv, tol, max_iter, sqrt)
        X[c0:c0 + chunk] = Xc.transpose(0, 1)
        info["iterations"] = max(info["iterations"], it)
        info["direct_solves"] += nd
    return (X, info) if return_info else X


def _vdot(x, y):
    """Row-wise dot products of ``[..., d]`` arrays without a temporary of their size."""
    return torch.matmul(x.unsqueeze(-2), y.unsqueeze(-1)).squeeze(-1).squeeze(-1)


def _client_products(Gs, d, sqrt):
    """``(V, out, base) ↦ base − V[j, k] G_k`` (``base=None``: ``+V[j, k] G_k``) for ``V [S, c, d]``, one client at
    a time (its factor or Gram stays in cache between its uses), the subtraction fused into the GEMM."""
    Gc = Gs if sqrt else _unpacked(Gs, d)

    def apply(V, out, base=None):
        for k in range(V.shape[1]):
            Y = torch.mm(V[:, k], Gc[k].T) if sqrt else V[:, k]
            B = Gc[k]
            if base is None:
                torch.mm(Y, B, out=out[:, k])
            else:
                torch.addmm(base[:, k], Y, B, alpha=-1.0, out=out[:, k])
        return out

    return apply


def _pcg(G, h, x_full, Gs, hs, s, Pinv, tol, max_iter, sqrt):
    """PCG on ``(G + σ_j − G_k) x = h − h_k`` for a chunk of clients, all σ at once; arrays are ``[S, c, d]``.

    Starts from the full-data solution ``x₀ = (G + σ_j)⁻¹h`` (shared by all clients, no product per client),
    whose residual is ``G_k x₀ − h_k``; keeps ``Q = (G + σ_j) p`` by recurrence (``(G + σ_j) z = r`` for the
    preconditioned residual z), so an iteration costs one product with each client's ``G_k`` (or
    ``R_kᵀR_k``) and one with the preconditioner, with no product with G.
    """
    c, d = hs.shape
    S = s.numel()
    Gk = _client_products(Gs, d, sqrt)
    bnorm = torch.linalg.vector_norm(h[None] - hs, dim=-1).expand(S, c)
    X = x_full[:, None, :].expand(S, c, d).contiguous()
    R = Gk(X, torch.empty_like(X)).sub_(hs)   # rhs − (G + σ − G_k) x₀ = G_k x₀ − h_k
    zero = bnorm == 0                         # rhs h − h_k = 0 (e.g. K = 1): the solution is exactly 0
    if bool(zero.any()):
        X[zero] = 0.0
        R[zero] = 0.0
    Z = torch.bmm(R, Pinv)                  # (G + σ_j)⁻¹ R[j, k]: one GEMM per σ
    P, Q = Z.clone(), R.clone()             # Q = (G + σ) P
    AP = torch.empty_like(R)
    rz = _vdot(R, Z)
    done = torch.linalg.vector_norm(R, dim=-1) <= tol * bnorm
    it = 0
    while not bool(done.all()) and it < max_iter:
        it += 1
        Gk(P, AP, base=Q)                   # AP = (G + σ − G_k) P = Q − G_k P
        pAp = _vdot(P, AP)
        alpha = torch.where(done | (pAp <= 0), 0.0, rz / torch.where(pAp > 0, pAp, 1.0))[..., None]
        X.addcmul_(alpha, P)
        R.addcmul_(alpha, AP, value=-1.0)
        done = done | (torch.linalg.vector_norm(R, dim=-1) <= tol * bnorm)
        torch.bmm(R, Pinv, out=Z)
        rz_new = _vdot(R, Z)
        beta = torch.where(done, 0.0, rz_new / torch.where(rz != 0, rz, 1.0))[..., None]
        torch.addcmul(Z, beta, P, out=P)
        torch.addcmul(R, beta, Q, out=Q)
        rz = rz_new
    n_direct = int((~done).sum())
    if n_direct:
        jj, kk = torch.nonzero(~done, as_tuple=True)
        Gk_full = (Gs[kk].transpose(1, 2) @ Gs[kk]) if sqrt else _unpacked(Gs[kk], d)
        M = linalg.add_diagonal(G[None] - Gk_full, s[jj])
        X[jj, kk] = linalg.damped_solve(M, h[None] - hs[kk])
    return X, it, n_direct


def loco_solutions_repaired(Gs: torch.Tensor, hs: torch.Tensor, sigmas) -> torch.Tensor:
    """LOCO models on *noisy* (DP) statistics: each ``G − G_k`` is projected on the PSD cone first.

    The same eigenvalue-clipping repair as the DP fusion (:func:`fedsciml.core.dp.psd_repair`), so
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
    """``ℓ(σ_j) = ‖A W[j] − b‖²`` on a client's rows: the reference that :func:`stats_scores` equals (tests)."""
    R = A @ W.T - b[:, None]
    return (R * R).sum(0)


def stats_scores(Gs: torch.Tensor, hs: torch.Tensor, W: torch.Tensor, *, sqrt: bool = False, b_sq=None,
                 chunk: int | None = None) -> torch.Tensor:
    """Held-out losses ``[K, S]`` scored by the server from each client's own statistics.

    ``ℓ_k(σ_j) = W[k, j]ᵀG_k W[k, j] − 2 W[k, j]ᵀh_k (+ b_sq[k])``.  ``Gs``: packed ``[K, d(d+1)/2]``, full
    ``[K, d, d]``, or with ``sqrt=True`` the factors ``R_k [K, m, d]`` (``wᵀG_kw = ‖R_kw‖²``); ``hs [K, d]``;
    ``W [K, S, d]``; ``b_sq [K]``: ``‖b_k‖²`` when known (omitted: the σ-independent constant is left out).
    Clients are processed in chunks (packed Grams unpacked a chunk at a time), one batched product each.
    """
    _check_stats(Gs, hs, sqrt)
    K, d = hs.shape
    if W.shape[0] != K or W.shape[-1] != d:
        raise ValueError(f"need models W [K={K}, S, d={d}], got {tuple(W.shape)}")
    chunk = chunk or max(1, min(K, (256 << 20) // (8 * d * max(d, W.shape[1]))))
    out = W.new_empty(K, W.shape[1])
    for c0 in range(0, K, chunk):
        G = Gs[c0:c0 + chunk]
        Wc = W[c0:c0 + chunk]
        if sqrt:
            RW = torch.bmm(Wc, G.transpose(1, 2))                       # [c, S, m]: R_k w
            quad = (RW * RW).sum(-1)
        else:
            GW = torch.bmm(Wc, _unpacked(G, d))                         # [c, S, d]: G_k w (G_k symmetric)
            quad = (GW * Wc).sum(-1)
        out[c0:c0 + chunk] = quad - 2.0 * torch.bmm(Wc, hs[c0:c0 + chunk, :, None])[..., 0]
    if b_sq is not None:
        out += torch.as_tensor(b_sq, dtype=out.dtype, device=out.device).reshape(K, 1)
    return out


def loco_cv(Gs, hs, sigmas, b_sq=None, naive: bool = False, chunk: int | None = None,
            repair: bool = False, *, sqrt: bool = False, total=None) -> dict:
    """Leave-one-client-out CV over a σ grid (at least 2 clients), scored by the server (:func:`stats_scores`).

    ``Gs`` may be packed (``[K, d(d+1)/2]``) or, with ``sqrt=True``, the clients' factors ``[K, m, d]``;
    ``total`` as in :func:`loco_solutions`.  ``repair=True`` (noisy DP statistics) uses
    :func:`loco_solutions_repaired`.  ``b_sq [K]``: each client's ``‖b_k‖²`` when known (then the losses are
    the held-out squared errors themselves; without it they omit that σ-independent constant).  Returns
    ``{sigma, sigmas, loss [S], per_client [K, S], floats_down: 0, floats_up: 0}`` — no model goes down and
    no score comes up.
    """
    K, d = hs.shape[0], hs.shape[-1]
    if K < 2:
        raise ValueError(f"leave-one-client-out CV needs at least 2 clients (each is scored on a model fitted "
                         f"without it), got {K}; give σ directly")
    if b_sq is not None and torch.as_tensor(b_sq).numel() != K:
        raise ValueError(f"b_sq has {torch.as_tensor(b_sq).numel()} entries for {K} clients' statistics")
    Gq = torch.stack([R.T @ R for R in Gs]) if sqrt and (repair or naive) else Gs
    if repair:
        W = loco_solutions_repaired(Gq, hs, sigmas)
    elif naive:
        W = loco_solutions_naive(_unpacked(Gq, d), hs, sigmas)
    else:
        W = loco_solutions(Gs, hs, sigmas, chunk=chunk, sqrt=sqrt, total=total)
    losses = stats_scores(Gs, hs, W, sqrt=sqrt, b_sq=b_sq)
    total_loss = losses.sum(0)
    s = _as_sigmas(sigmas, hs)
    finite = torch.isfinite(total_loss)
    if not bool(finite.any()):  # never pick a σ by argmin over NaN/inf
        raise ValueError(f"leave-one-client-out CV: no σ of the grid {s.tolist()} gave a finite validation loss")
    j = int(torch.argmin(torch.where(finite, total_loss, torch.full_like(total_loss, math.inf))))
    return {"sigma": float(s[j]), "sigmas": s.tolist(), "loss": total_loss.tolist(), "per_client": losses,
            "floats_down": 0, "floats_up": 0}
