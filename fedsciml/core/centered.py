"""Exact centered sufficient statistics of weighted ridge with an unpenalized intercept (NumPy, float64).

One message per site (:func:`site_statistics`): the weighted count ``n_k``, the means ``μ_k`` of ``z = (x, y)``
and the centered scatter ``S_k = Σ w (z − μ_k)(z − μ_k)ᵀ`` (packed).  The server merges them exactly
(:func:`combine`, the parallel-axis rule of Chan, Golub and LeVeque), removes one site exactly
(:func:`leave_one_out`), solves ridge with an unpenalized intercept from the pooled centered blocks
(:func:`solve_ridge`: ``β = (S_xx + αI)⁻¹S_xy``, ``β₀ = μ_y − μ_xᵀβ``) and scores a site's held-out loss from
its own message (:func:`site_losses`, :func:`loco_path`).  Used by the scikit-learn estimators
(:mod:`fedsciml.ridge.estimator`, whose docstring derives each step) and by the one-shot runtime's
``fit_intercept`` (:mod:`fedsciml.methods.oneshot`).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg


def n_packed(p: int) -> int:
    return p * (p + 1) // 2


def pack(M: np.ndarray) -> np.ndarray:
    return M[np.triu_indices(M.shape[-1])]


def unpack(v: np.ndarray, p: int) -> np.ndarray:
    M = np.zeros((p, p), dtype=v.dtype)
    M[np.triu_indices(p)] = v
    return M + np.triu(M, 1).T


def site_statistics(X, y, sample_weight=None) -> dict:
    """Site k's one message ``{"n": [1], "mean": [d+1], "S": [(d+1)(d+2)/2]}`` (see the module docstring).

    ``X`` ``[n, d]``, ``y`` ``[n]``, finite float64 (:class:`FederatedRidge` validates them first);
    ``sample_weight`` ``[n]`` ≥ 0 or None (all ones).  A site whose weights are all 0 sends ``n = 0`` and
    zeros: it contributes nothing, exactly as its rows contribute nothing to the weighted objective.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    Z = np.column_stack([X, y])
    w = np.ones(Z.shape[0]) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    n = float(w.sum())
    if n > 0:
        mean = (w @ Z) / n
        Zc = (Z - mean) * np.sqrt(w)[:, None]
        S = Zc.T @ Zc
    else:
        mean, S = np.zeros(Z.shape[1]), np.zeros((Z.shape[1], Z.shape[1]))
    return {"n": np.array([n]), "mean": mean, "S": pack(S)}


def check_message(msg, site, d: int) -> None:
    """Reject a malformed site message by name: keys, shapes, finite values, ``n ≥ 0``, ``diag S ≥ 0`` (O(d²))."""
    p = d + 1
    want = {"n": (1,), "mean": (p,), "S": (n_packed(p),)}
    if not isinstance(msg, dict) or set(msg) != set(want):
        got = sorted(msg) if isinstance(msg, dict) else type(msg).__name__
        raise ValueError(f"site {site!r}: a message has exactly the fields n, mean, S; got {got}")
    for k, shape in want.items():
        v = np.asarray(msg[k])
        if v.shape != shape or not np.issubdtype(v.dtype, np.floating):
            raise ValueError(f"site {site!r}: field {k!r} must be a float array of shape {shape} (d={d} features), "
                             f"got {v.dtype} {v.shape}")
        if not np.isfinite(v).all():
            raise ValueError(f"site {site!r}: field {k!r} contains non-finite values")
    if not msg["n"][0] >= 0:
        raise ValueError(f"site {site!r}: the weighted count n must be ≥ 0, got {msg['n'][0]}")
    diag = np.asarray(msg["S"])[_diag_index(p)]
    if (diag < 0).any():
        raise ValueError(f"site {site!r}: field 'S' has a negative diagonal entry ({diag.min():.3g}); a scatter "
                         "matrix is positive semidefinite")


def _diag_index(p: int) -> np.ndarray:
    i, j = np.triu_indices(p)
    return np.flatnonzero(i == j)


def combine(messages) -> tuple[float, np.ndarray, np.ndarray]:
    """The pooled ``(N, μ [d+1], S [d+1, d+1])`` of a list of messages (parallel-axis rule, exact)."""
    n = np.array([m["n"][0] for m in messages], dtype=np.float64)
    means = np.stack([np.asarray(m["mean"], dtype=np.float64) for m in messages])
    p = means.shape[1]
    N = float(n.sum())
    if not N > 0:
        raise ValueError("the sites' sample weights sum to 0: there is nothing to fit")
    mu = (n @ means) / N
    D = (means - mu) * np.sqrt(n)[:, None]
    S = unpack(np.sum([np.asarray(m["S"], dtype=np.float64) for m in messages], axis=0), p) + D.T @ D
    return N, mu, S


def leave_one_out(N, mu, S, n_k, mu_k, S_k):
    """``(N, μ, S)`` of the pool without one site (the parallel-axis rule backwards, exact up to round-off).

    With ``A`` the site and ``B`` the rest: ``S = S_A + S_B + n_A·N/n_B·(μ_A − μ)(μ_A − μ)ᵀ`` and
    ``μ_B = (Nμ − n_Aμ_A)/n_B``.  Vectorized over sites: ``n_k [K]``, ``mu_k [K, p]``, ``S_k [K, p, p]``.
    """
    nB = N - n_k
    if (nB <= 0).any():
        k = int(np.flatnonzero(nB <= 0)[0])
        raise ValueError(f"leave-one-site-out CV: without site {k} the other sites hold no weight; every fold "
                         "needs data")
    dev = mu_k - mu
    muB = (N * mu - n_k[:, None] * mu_k) / nB[:, None]
    SB = S[None] - S_k - (n_k * N / nB)[:, None, None] * dev[:, :, None] * dev[:, None, :]
    return nB, muB, SB


def _scales(N, mu, S, d):
    """The pooled population standard deviation of each feature; 1 where the feature is constant
    (scikit-learn's ``StandardScaler`` rule: ``var ≤ N·eps·var + (N·eps·mean)²``)."""
    var = np.maximum(np.diagonal(S, axis1=-2, axis2=-1)[..., :d] / np.asarray(N)[..., None], 0.0)
    eps = np.finfo(np.float64).eps
    Nn = np.asarray(N)[..., None]
    constant = var <= Nn * eps * var + (Nn * mu[..., :d] * eps) ** 2
    return np.where(constant, 1.0, np.sqrt(var))


def _normal_blocks(N, mu, S, d, fit_intercept):
    """``(G [.., d, d], h [.., d])`` the (centered, or uncentered) normal equations from pooled statistics."""
    M = S if fit_intercept else S + np.asarray(N)[..., None, None] * mu[..., :, None] * mu[..., None, :]
    return M[..., :d, :d], M[..., :d, d]


def solve_ridge(N, mu, S, d: int, alpha: float, fit_intercept: bool, standardize: bool):
    """``(coef [d], intercept, scale [d] or None)`` of the weighted ridge problem from pooled statistics."""
    G, h = _normal_blocks(N, mu, S, d, fit_intercept)
    scale = _scales(N, mu, S, d) if standardize else None
    if scale is not None:
        G = G / np.outer(scale, scale)
        h = h / scale
    A = G + alpha * np.eye(d)
    try:
        c = scipy.linalg.cho_solve(scipy.linalg.cho_factor(A, lower=False), h)
    except np.linalg.LinAlgError:
        raise ValueError(f"the pooled Gram matrix plus alpha·I is not positive definite with alpha={alpha} "
                         f"(collinear features or fewer rows than d={d} features): use alpha > 0") from None
    coef = c / scale if scale is not None else c
    intercept = float(mu[d] - mu[:d] @ coef) if fit_intercept else 0.0
    return coef, intercept, scale


def site_losses(n_k, mu_k, S_k, coef, intercept):
    """Server-side held-out loss of site k from its own message: ``Σ_i w_i (y_i − x_iᵀβ − β₀)²``.

    ``uᵀS_k u + n_k (μ_kᵀu − β₀)²`` with ``u = (−β, 1)``; vectorized: ``coef [K, A, d]``, ``intercept [K, A]``
    → ``[K, A]`` (K sites, A candidate models each)."""
    U = np.concatenate([-coef, np.ones(coef.shape[:-1] + (1,))], axis=-1)          # [K, A, p]
    quad = np.einsum("kap,kpq,kaq->ka", U, S_k, U)
    r = np.einsum("kap,kp->ka", U, mu_k) - intercept
    return np.maximum(quad, 0.0) + n_k[:, None] * r * r


def _stack(messages, d: int):
    """``(n [K], μ [K, p], S [K, p, p])`` of a list of messages."""
    n = np.array([m["n"][0] for m in messages], dtype=np.float64)
    mu = np.stack([np.asarray(m["mean"], dtype=np.float64) for m in messages])
    S = np.stack([unpack(np.asarray(m["S"], dtype=np.float64), d + 1) for m in messages])
    return n, mu, S


def heldout_path(train, test, d: int, alphas, fit_intercept: bool, standardize: bool):
    """Held-out losses ``[F, A]``: fold f's model, fitted on ``train = (n [F], μ [F, p], S [F, p, p])`` for every
    alpha, scored on ``test`` (the same layout) by :func:`site_losses`.

    Per fold one symmetric eigendecomposition of its (standardized) Gram, every alpha from it
    (``β(α) = V (Λ + α)⁻¹ Vᵀ h``)."""
    alphas = np.asarray(alphas, dtype=np.float64)
    nB, muB, SB = train
    G, h = _normal_blocks(nB, muB, SB, d, fit_intercept)
    if standardize:
        sc = _scales(nB, muB, SB, d)                                     # [F, d]: each fold's own scaler
        G = G / (sc[:, :, None] * sc[:, None, :])
        h = h / sc
    lam, V = np.linalg.eigh(G)
    lam = np.maximum(lam, 0.0)
    c = np.einsum("kji,kj->ki", V, h)                                   # Vᵀh  [F, d]
    coef = np.einsum("kji,kai->kaj", V, c[:, None, :] / (lam[:, None, :] + alphas[None, :, None]))  # [F, A, d]
    if standardize:
        coef = coef / sc[:, None, :]
    intercept = (muB[:, None, d] - np.einsum("kaj,kj->ka", coef, muB[:, :d])) if fit_intercept \
        else np.zeros(coef.shape[:2])
    n_t, mu_t, S_t = test
    return site_losses(n_t, mu_t, S_t, coef, intercept)


def loco_path(messages, d: int, alphas, fit_intercept: bool, standardize: bool):
    """Leave-one-site-out held-out losses ``[K, A]`` for every site and alpha, from the messages alone: fold k
    is the rest's statistics (:func:`leave_one_out`), scored on site k's own message (:func:`heldout_path`)."""
    N, mu, S = combine(messages)
    n_k, mu_k, S_k = _stack(messages, d)
    return heldout_path(leave_one_out(N, mu, S, n_k, mu_k, S_k), (n_k, mu_k, S_k), d, alphas, fit_intercept,
                        standardize)


def split_path(train_messages, test_messages, d: int, alphas, fit_intercept: bool, standardize: bool):
    """Held-out losses ``[F, A]`` of F arbitrary train/test splits (scikit-learn's ``cv=``), each given as the
    statistics of its training rows and of its test rows; plus each test fold's total sum of squares about its
    own mean ``[F]`` (the R² denominator, ``S_yy`` of the test message)."""
    test = _stack(test_messages, d)
    return (heldout_path(_stack(train_messages, d), test, d, alphas, fit_intercept, standardize),
            test[2][:, d, d])
