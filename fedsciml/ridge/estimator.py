"""scikit-learn estimators for one-shot federated ridge: :class:`FederatedRidge` and :class:`FederatedRidgeCV`.

>>> from fedsciml.ridge import FederatedRidge, FederatedRidgeCV
>>> model = FederatedRidge(alpha=1.0).fit(X, y, sites=site_of_each_row)      # NumPy in, NumPy out
>>> model = FederatedRidge(alpha=1.0).fit_clients([(X1, y1), (X2, y2, w2)])  # each site's own table
>>> FederatedRidgeCV(alphas=np.logspace(-3, 3, 13)).fit(X, y, sites=sites).alpha_

The federated protocol (one round, nothing but the message leaves a site)
-------------------------------------------------------------------------
Site k holds rows ``z_i = (x_i, y_i)`` with weights ``w_i ≥ 0`` (``sample_weight``, default 1) and sends
once (:func:`site_statistics`)::

    n_k  = Σ w_i                              (1 float: the weighted count)
    μ_k  = Σ w_i z_i / n_k                    (d + 1 floats: the means of x and y)
    S_k  = Σ w_i (z_i − μ_k)(z_i − μ_k)ᵀ      ((d+1)(d+2)/2 floats: packed upper triangle)

— the same information as the count, the sums ``Σw x``, ``Σw y``, the Gram ``Σw xxᵀ``, ``Σw xy`` and ``Σw y²``
(``Σ w zzᵀ = S_k + n_k μ_kμ_kᵀ``), but centered at the site: subtracting ``N μμᵀ`` from an uncentered total
loses the digits of a feature whose mean is large against its spread, and the centered form does not.  The
server merges the messages exactly (:func:`combine`, the parallel-axis rule of Chan, Golub and LeVeque)::

    N = Σ n_k,   μ = Σ n_k μ_k / N,   S = Σ S_k + Σ n_k (μ_k − μ)(μ_k − μ)ᵀ

and solves the weighted ridge problem ``min Σ w_i (y_i − x_iᵀβ − β₀)² + α‖β‖²`` (scikit-learn's
``Ridge`` objective) from ``(N, μ, S)``: with ``fit_intercept`` the centered blocks give
``β = (S_xx + αI)⁻¹ S_xy`` and ``β₀ = μ_y − μ_xᵀβ``; without it the uncentered ``S + Nμμᵀ`` is used.  So the
intercept and the centering cost no second round.  ``standardize=True`` scales each feature by its pooled
(weighted, population) standard deviation ``√(S_jj/N)`` before the penalty — the fit of
``Pipeline([StandardScaler(), Ridge(alpha)])`` on the pooled rows, with the scaler's statistics computed
federatedly from the same message (constant features keep scale 1, as ``StandardScaler``);
``coef_`` is reported in the original units.  Without an intercept the features are scaled, not centered:
``Pipeline([StandardScaler(with_mean=False), Ridge(alpha, fit_intercept=False)])``.

Which rows belong to which site
-------------------------------
``fit(X, y, sites=labels)`` takes one label per row and computes one message per distinct label, exactly
what the sites would send; ``sites=None`` (the default, and what scikit-learn's generic tools pass) makes
the whole table one site — the same protocol with K = 1.  ``sites`` is an ordinary fit parameter, so
``cross_val_score(est, X, y, params={"sites": s})`` and ``GridSearchCV(...).fit(X, y, sites=s)`` slice it
with the rows.  ``fit_clients([(X_k, y_k[, w_k]), ...])`` takes each site's table; :meth:`fit_messages`
is the server alone, given the sites' messages (what a deployment runs: each site calls
:func:`site_statistics` on its own machine).  The fitted model equals scikit-learn's ``Ridge`` on the
pooled rows to round-off however the rows are split.

Leave-one-site-out CV scored by the server
------------------------------------------
:class:`FederatedRidgeCV` chooses ``alpha_`` from ``alphas`` by leave-one-site-out CV: the fold without
site k is ``(N, μ, S)`` minus site k's message (the parallel-axis rule run backwards,
:func:`leave_one_out`), and site k's held-out loss is computed by the server from site k's own message —
``Σ_i w_i (y_i − x_iᵀβ − β₀)² = uᵀS_k u + n_k (μ_kᵀu − β₀)²`` with ``u = (−β, 1)`` — so CV is
post-processing of the one message: no model is sent down, no loss comes back up, no second round.
The score is the total held-out weighted squared error over the sites (an alpha that ties keeps the first
in ``alphas``); ``cv_loss_`` holds it per alpha and ``cv_site_loss_`` per site and alpha.

What is validated, and what is not offered
------------------------------------------
Inputs go through scikit-learn's own ``validate_data`` (NaN/inf rows raise ``ValueError: Input X contains
NaN`` as in every scikit-learn estimator; no site is ever dropped), and every message through
:func:`check_message` (shapes, finiteness, ``n ≥ 0``, ``diag S ≥ 0``: O(d²) per message).  Differential
privacy and random projection are options of the one-shot runtime (:func:`fedsciml.ridge.one_shot`, the
``ridge`` CLI), not of these estimators, which fit the exact model.
"""
from __future__ import annotations

import numbers

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data


def n_packed(p: int) -> int:
    return p * (p + 1) // 2


def _pack(M: np.ndarray) -> np.ndarray:
    return M[np.triu_indices(M.shape[-1])]


def _unpack(v: np.ndarray, p: int) -> np.ndarray:
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
    return {"n": np.array([n]), "mean": mean, "S": _pack(S)}


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
    S = _unpack(np.sum([np.asarray(m["S"], dtype=np.float64) for m in messages], axis=0), p) + D.T @ D
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


def loco_path(messages, d: int, alphas, fit_intercept: bool, standardize: bool):
    """Leave-one-site-out held-out losses ``[K, A]`` for every site and alpha, from the messages alone.

    Per fold: the rest's statistics (:func:`leave_one_out`), one symmetric eigendecomposition of its
    (standardized) Gram, every alpha from it (``β(α) = V (Λ + α)⁻¹ Vᵀ h``), scored by :func:`site_losses`."""
    alphas = np.asarray(alphas, dtype=np.float64)
    N, mu, S = combine(messages)
    n_k = np.array([m["n"][0] for m in messages])
    mu_k = np.stack([m["mean"] for m in messages])
    S_k = np.stack([_unpack(np.asarray(m["S"], dtype=np.float64), d + 1) for m in messages])
    nB, muB, SB = leave_one_out(N, mu, S, n_k, mu_k, S_k)
    G, h = _normal_blocks(nB, muB, SB, d, fit_intercept)
    if standardize:
        sc = _scales(nB, muB, SB, d)                                     # [K, d]: each fold's own scaler
        G = G / (sc[:, :, None] * sc[:, None, :])
        h = h / sc
    lam, V = np.linalg.eigh(G)
    lam = np.maximum(lam, 0.0)
    c = np.einsum("kji,kj->ki", V, h)                                   # Vᵀh  [K, d]
    coef = np.einsum("kji,kai->kaj", V, c[:, None, :] / (lam[:, None, :] + alphas[None, :, None]))  # [K, A, d]
    if standardize:
        coef = coef / sc[:, None, :]
    intercept = (muB[:, None, d] - np.einsum("kaj,kj->ka", coef, muB[:, :d])) if fit_intercept \
        else np.zeros(coef.shape[:2])
    return site_losses(n_k, mu_k, S_k, coef, intercept)


class _FederatedRidgeBase(RegressorMixin, BaseEstimator):
    """Shared fitting machinery: validation, one message per site, the server's solve, predict."""

    _parameter_constraints: dict = {
        "fit_intercept": ["boolean"],
        "standardize": ["boolean"],
    }

    def fit(self, X, y, sample_weight=None, sites=None):
        """Fit on a table whose rows belong to sites ``sites`` (one label per row; None: one site —
        :class:`FederatedRidgeCV` needs at least 2 distinct labels): one message per site, then the server."""
        self._validate_params()
        self._reset()
        msgs, labels = self._messages_from_table(X, y, sample_weight, sites)
        return self._fit_from(msgs, labels)

    def _messages_from_table(self, X, y, sample_weight, sites):
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, reset=True)
        sw = None if sample_weight is None else _check_sample_weight(sample_weight, X, dtype=np.float64,
                                                                     ensure_non_negative=True)
        if sites is None:
            return [site_statistics(X, y, sw)], [0]
        sites = np.asarray(sites)
        if sites.shape != (X.shape[0],):
            raise ValueError(f"sites must hold one label per row: {X.shape[0]} rows, got sites of shape "
                             f"{sites.shape}")
        labels, inv = np.unique(sites, return_inverse=True)
        msgs = [site_statistics(X[inv == k], y[inv == k], None if sw is None else sw[inv == k])
                for k in range(len(labels))]
        return msgs, labels.tolist()

    def _messages_from_clients(self, data):
        if not isinstance(data, (list, tuple)) or not data:
            raise ValueError("fit_clients takes a non-empty list of (X_k, y_k) or (X_k, y_k, sample_weight_k)")
        msgs, d = [], None
        for k, item in enumerate(data):
            if not isinstance(item, (list, tuple)) or len(item) not in (2, 3):
                raise ValueError(f"site {k}: expected (X_k, y_k) or (X_k, y_k, sample_weight_k), got "
                                 f"{type(item).__name__}")
            Xk, yk = item[0], item[1]
            Xk, yk = validate_data(self, Xk, yk, dtype=np.float64, y_numeric=True, reset=(k == 0))
            if d is not None and Xk.shape[1] != d:  # validate_data already refuses; kept as the contract
                raise ValueError(f"site {k} has {Xk.shape[1]} features, site 0 has {d}")
            d = Xk.shape[1]
            sw = None if len(item) == 2 or item[2] is None else _check_sample_weight(
                item[2], Xk, dtype=np.float64, ensure_non_negative=True)
            msgs.append(site_statistics(Xk, yk, sw))
        return msgs, list(range(len(data)))

    def _set_messages(self, messages, labels):
        d = len(messages[0]["mean"]) - 1 if isinstance(messages[0], dict) and "mean" in messages[0] else None
        if d is None or d < 1:
            raise ValueError("a site message needs a 'mean' field of length d + 1 ≥ 2")
        for lab, m in zip(labels, messages):
            check_message(m, lab, d)
        if not hasattr(self, "n_features_in_"):
            self.n_features_in_ = d
        elif self.n_features_in_ != d:
            raise ValueError(f"the messages have d={d} features, the estimator was set up with "
                             f"{self.n_features_in_}")
        self.sites_ = list(labels)
        self.n_sites_ = len(messages)
        self.site_messages_ = [{k: np.asarray(v, dtype=np.float64).copy() for k, v in m.items()} for m in messages]
        return d

    def _refit(self, alpha):
        d = self.n_features_in_
        N, mu, S = combine(self.site_messages_)
        coef, intercept, scale = solve_ridge(N, mu, S, d, float(alpha), self.fit_intercept, self.standardize)
        self.coef_, self.intercept_ = coef, intercept
        if scale is not None:
            self.scale_ = scale
        self.n_samples_seen_ = N
        return self

    def fit_clients(self, data):
        """Fit from each site's own table: ``data = [(X_k, y_k) or (X_k, y_k, sample_weight_k), ...]``."""
        self._reset()
        msgs, labels = self._messages_from_clients(data)
        return self._fit_from(msgs, labels)

    def fit_messages(self, messages, sites=None):
        """The server alone: fit from the sites' messages (:func:`site_statistics`), validated first."""
        self._reset()
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ValueError("fit_messages takes a non-empty list of site messages")
        labels = list(range(len(messages))) if sites is None else list(sites)
        if len(labels) != len(messages):
            raise ValueError(f"{len(labels)} site labels for {len(messages)} messages")
        return self._fit_from(list(messages), labels)

    def _reset(self):
        for a in ("n_features_in_", "feature_names_in_", "coef_", "intercept_", "scale_", "alpha_"):
            if hasattr(self, a):
                delattr(self, a)

    def predict(self, X):
        check_is_fitted(self, ("coef_", "intercept_"))
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_ + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = False
        tags.target_tags.single_output = True
        return tags


class FederatedRidge(_FederatedRidgeBase):
    """Ridge regression fitted from one message per site (see the module docstring).

    Parameters
    ----------
    alpha : float ≥ 0, default 1.0 — the penalty ``α‖β‖²`` (scikit-learn's ``Ridge.alpha``; on the standardized
        coefficients with ``standardize=True``).
    fit_intercept : bool, default True — an unpenalized intercept, from the same message.
    standardize : bool, default False — scale features by their pooled standard deviation (federated
        ``StandardScaler``) before the penalty.

    Attributes: ``coef_ [d]``, ``intercept_`` (float), ``alpha_`` (= alpha), ``n_features_in_``,
    ``feature_names_in_`` (pandas input), ``scale_`` (standardize), ``n_sites_``, ``sites_``,
    ``site_messages_`` (what each site sent), ``n_samples_seen_`` (the total weight).
    """

    _parameter_constraints: dict = {
        **_FederatedRidgeBase._parameter_constraints,
        "alpha": [Interval(numbers.Real, 0, None, closed="left")],
    }

    def __init__(self, alpha=1.0, *, fit_intercept=True, standardize=False):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.standardize = standardize

    def _fit_from(self, msgs, labels):
        self._validate_params()
        self._set_messages(msgs, labels)
        self.alpha_ = float(self.alpha)
        return self._refit(self.alpha_)

    def partial_fit(self, X, y, sample_weight=None, site=0):
        """Streaming: site ``site`` adds rows; its message is merged with theirs (exact) and the model refitted."""
        self._validate_params()
        first = not hasattr(self, "coef_")
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, reset=first)
        sw = None if sample_weight is None else _check_sample_weight(sample_weight, X, dtype=np.float64,
                                                                     ensure_non_negative=True)
        new = site_statistics(X, y, sw)
        if first:
            return self._fit_from([new], [site])
        msgs, labels = list(self.site_messages_), list(self.sites_)
        if site in labels:
            i = labels.index(site)
            if msgs[i]["n"][0] > 0 and new["n"][0] > 0:
                N, mu, S = combine([msgs[i], new])
                msgs[i] = {"n": np.array([N]), "mean": mu, "S": _pack(S)}
            elif new["n"][0] > 0:
                msgs[i] = new
        else:
            msgs.append(new)
            labels.append(site)
        return self._fit_from(msgs, labels)


class FederatedRidgeCV(_FederatedRidgeBase):
    """:class:`FederatedRidge` with ``alpha_`` chosen from ``alphas`` by leave-one-site-out CV scored by the
    server from the sites' own messages (see the module docstring); then refitted on every site.

    Needs at least 2 sites (``sites=`` with two labels or more, or ``fit_clients`` with two tables or more): a
    single table has no site to leave out, and splitting its rows would not be what the sites hold.
    """

    _parameter_constraints: dict = {
        **_FederatedRidgeBase._parameter_constraints,
        "alphas": ["array-like"],
    }

    def __init__(self, alphas=(0.1, 1.0, 10.0), *, fit_intercept=True, standardize=False):
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.standardize = standardize

    def _fit_from(self, msgs, labels):
        self._validate_params()
        alphas = np.asarray(self.alphas, dtype=np.float64).reshape(-1)
        if alphas.size == 0 or not np.isfinite(alphas).all() or (alphas <= 0).any():
            raise ValueError(f"alphas must be a non-empty list of finite values > 0, got {alphas.tolist()}")
        d = self._set_messages(msgs, labels)
        if len(msgs) < 2:
            raise ValueError(f"leave-one-site-out CV needs at least 2 sites (each is scored on a model fitted "
                             f"without it), got {len(msgs)}; pass sites= with two labels or more, or use "
                             f"FederatedRidge(alpha=...)")
        losses = loco_path(self.site_messages_, d, alphas, self.fit_intercept, self.standardize)
        self.cv_site_loss_ = losses
        self.cv_loss_ = losses.sum(0)
        self.alpha_ = float(alphas[int(np.argmin(self.cv_loss_))])
        return self._refit(self.alpha_)
