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
:func:`check_message` (shapes, finiteness, ``n ≥ 0``, ``diag S ≥ 0``: O(d²) per message).  Random projection
is an option of the one-shot runtime (:func:`fedsciml.ridge.one_shot`, the ``ridge`` CLI).

Differential privacy (:class:`FederatedRidge` only)
---------------------------------------------------
``FederatedRidge(epsilon=ε, delta=δ, bounds_X=(lo, hi), bounds_y=(lo, hi))`` fits the model from each site's
statistics released by the one-shot runtime's Gaussian mechanism (:mod:`fedsciml.core.dp`: add/remove one row of
a site, each site its own (ε, δ) and its own noise — local DP, the server trusted with nothing): the same call as
:func:`fedsciml.ridge.one_shot` with ``dp=DPConfig(ε, δ, C_a, C_b)``, so the calibration is the runtime's.  As in
diffprivlib's ``LinearRegression(epsilon=, bounds_X=, bounds_y=)`` the bounds are public and required: bounds
computed from the data would leak it, so DP without them is refused.  Each feature is clipped to its bounds
(scalars or one pair per feature) and ``y`` to ``bounds_y``; then ``C_a = ‖max(|lo|, |hi|)‖₂`` (times
``√((d+1)/d)`` with an intercept, whose constant column ``κ = C_a/√(d+1)`` then fits inside the clip) and
``C_b = max(|lo_y|, |hi_y|)``, so no row inside the bounds is scaled again.  ``alpha`` is the ridge penalty, and
the runtime adds the noise's spectral norm to it by default (``dp_noise_aware``); ``alpha_`` holds what was used.
``random_state`` seeds the noise.  Not offered under DP: ``standardize`` (federated standardization releases each
site's means and variances outside ε: scale with public constants instead), ``sample_weight``, ``partial_fit``,
:class:`FederatedRidgeCV` and :meth:`FederatedRidge.fit_messages` (the sites' exact statistics).
"""
from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data


from fedsciml.core.centered import (  # noqa: F401  (the estimators' maths, re-exported under their names)
    _diag_index, _normal_blocks, _scales, check_message, combine, leave_one_out, loco_path, n_packed, site_losses,
    site_statistics, solve_ridge, split_path)
from fedsciml.core.centered import pack as _pack, unpack as _unpack  # noqa: F401


class _FederatedRidgeBase(RegressorMixin, BaseEstimator):
    """Shared fitting machinery: validation, one message per site, the server's solve, predict."""

    _parameter_constraints: dict = {
        "fit_intercept": ["boolean"],
        "standardize": ["boolean"],
    }

    def fit(self, X, y, sample_weight=None, sites=None, groups=None):
        """Fit on a table whose rows belong to sites ``sites`` (one label per row; None: one site): one message
        per site, then the server.  ``groups`` is an alias of ``sites`` (scikit-learn's name for group labels,
        and this keyword's name before ``sites``).  ``y`` may have several columns (one model per column,
        ``coef_`` then ``[n_targets, d]`` as scikit-learn's ``Ridge``)."""
        self._validate_params()
        self._reset()
        if groups is not None:
            if sites is not None:
                raise ValueError("give the site labels once: sites= or its alias groups=, not both")
            sites = groups
        y_arr = np.asarray(y) if not hasattr(y, "iloc") else y.to_numpy()
        if getattr(y_arr, "ndim", 1) == 2:
            return self._fit_multi(X, y_arr, sample_weight, sites)
        msgs, labels = self._messages_from_table(X, y, sample_weight, sites)
        return self._fit_from(msgs, labels)

    def _fit_multi(self, X, Y, sample_weight, sites):
        """Several targets: the same sites' messages for each column (each carries the X blocks again; the
        Gram part is the same in all), one model per column, stacked as scikit-learn's ``Ridge`` does."""
        from sklearn.base import clone

        X, Y = validate_data(self, X, Y, dtype=np.float64, y_numeric=True, multi_output=True, reset=True)
        if Y.ndim != 2:  # pragma: no cover - validate_data keeps the 2-D shape
            Y = Y.reshape(-1, 1)
        subs = [clone(self) for _ in range(Y.shape[1])]
        parts = [sub._messages_from_table(X, Y[:, j], sample_weight, sites) for j, sub in enumerate(subs)]
        self._fit_targets(subs, parts)
        first = subs[0]
        for a in ("sites_", "n_sites_", "n_samples_seen_", "cv_mode_", "cv_folds_"):
            if hasattr(first, a):
                setattr(self, a, getattr(first, a))
        self.coef_ = np.stack([sub.coef_ for sub in subs])
        self.intercept_ = np.array([sub.intercept_ for sub in subs], dtype=np.float64)
        if hasattr(first, "scale_"):
            self.scale_ = first.scale_
        self.site_messages_ = [sub.site_messages_ for sub in subs]   # per target: each site's message
        return self

    def _fit_targets(self, subs, parts):
        for sub, (msgs, labels) in zip(subs, parts):
            sub._fit_from(msgs, labels)
        self.alpha_ = subs[0].alpha_

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
        for a in ("n_features_in_", "feature_names_in_", "coef_", "intercept_", "scale_", "alpha_", "cv_mode_",
                  "cv_folds_", "dp_info_", "site_messages_"):
            if hasattr(self, a):
                delattr(self, a)

    def predict(self, X):
        check_is_fitted(self, ("coef_", "intercept_"))
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_.T + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags


class FederatedRidge(_FederatedRidgeBase):
    """Ridge regression fitted from one message per site (see the module docstring).

    Parameters
    ----------
    alpha : float ≥ 0, default 1.0
        The penalty ``α‖β‖²`` (scikit-learn's ``Ridge.alpha``; on the standardized coefficients with
        ``standardize=True``).
    fit_intercept : bool, default True
        An unpenalized intercept, from the same message.
    standardize : bool, default False
        Scale features by their pooled standard deviation (federated ``StandardScaler``) before the penalty.
    epsilon : float > 0 or None, default None
        Differential privacy: each site's (ε, δ) for its release (module docstring); None fits the exact model.
    delta : float in (0, 1), default 1e-5
        The δ of (ε, δ)-DP.
    bounds_X, bounds_y : (lo, hi) or None
        Public bounds of the features (scalars or one value per feature) and of the target; required with
        ``epsilon``.
    random_state : int, RandomState or None
        Seeds the DP noise.

    Notes
    -----
    Attributes: ``coef_ [d]`` (``[n_targets, d]`` for a multi-column ``y``), ``intercept_``, ``alpha_``
    (= alpha), ``n_features_in_``, ``feature_names_in_`` (pandas input), ``scale_`` (standardize),
    ``n_sites_``, ``sites_``, ``site_messages_`` (what each site sent), ``n_samples_seen_`` (the total weight);
    under DP ``dp_info_`` (ε, δ, the clip bounds, the noise std, the seed, σ used) and no ``site_messages_``.
    """

    _parameter_constraints: dict = {
        **_FederatedRidgeBase._parameter_constraints,
        "alpha": [Interval(numbers.Real, 0, None, closed="left")],
        "epsilon": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
        "bounds_X": [tuple, list, None],
        "bounds_y": [tuple, list, None],
        "random_state": ["random_state"],
    }

    def __init__(self, alpha=1.0, *, fit_intercept=True, standardize=False, epsilon=None, delta=1e-5,
                 bounds_X=None, bounds_y=None, random_state=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.standardize = standardize
        self.epsilon = epsilon
        self.delta = delta
        self.bounds_X = bounds_X
        self.bounds_y = bounds_y
        self.random_state = random_state

    def fit(self, X, y, sample_weight=None, sites=None, groups=None):
        """As :meth:`_FederatedRidgeBase.fit`; with ``epsilon``, the DP fit (module docstring)."""
        if self.epsilon is None:
            return super().fit(X, y, sample_weight, sites, groups)
        self._validate_params()
        self._reset()
        if sample_weight is not None:
            raise ValueError("sample_weight is not offered under DP (a weight changes one row's sensitivity); "
                             "leave it None or fit without epsilon")
        if groups is not None:
            if sites is not None:
                raise ValueError("give the site labels once: sites= or its alias groups=, not both")
            sites = groups
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True, reset=True)
        if sites is None:
            return self._fit_dp([(X, y)], [0])
        sites = np.asarray(sites)
        if sites.shape != (X.shape[0],):
            raise ValueError(f"sites must hold one label per row: {X.shape[0]} rows, got sites of shape "
                             f"{sites.shape}")
        labels, inv = np.unique(sites, return_inverse=True)
        return self._fit_dp([(X[inv == k], y[inv == k]) for k in range(len(labels))], labels.tolist())

    def fit_clients(self, data):
        """As :meth:`_FederatedRidgeBase.fit_clients`; with ``epsilon``, ``(X_k, y_k)`` pairs only."""
        if self.epsilon is None:
            return super().fit_clients(data)
        self._validate_params()
        self._reset()
        if not isinstance(data, (list, tuple)) or not data:
            raise ValueError("fit_clients takes a non-empty list of (X_k, y_k)")
        tables = []
        for k, item in enumerate(data):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise ValueError(f"site {k}: expected (X_k, y_k) under DP (no sample weights), got a "
                                 f"{type(item).__name__}")
            tables.append(validate_data(self, item[0], item[1], dtype=np.float64, y_numeric=True, reset=(k == 0)))
        return self._fit_dp(tables, list(range(len(tables))))

    def fit_messages(self, messages, sites=None):
        """As :meth:`_FederatedRidgeBase.fit_messages` (the sites' exact statistics); refused under DP."""
        if self.epsilon is not None:
            raise ValueError("fit_messages takes the sites' exact statistics; under DP the sites release noisy "
                             "statistics through the one-shot runtime: use fit or fit_clients")
        return super().fit_messages(messages, sites)

    def _dp_bounds(self, d):
        """``(lo [d], hi [d], lo_y, hi_y)`` from the public bounds, checked."""
        if self.bounds_X is None or self.bounds_y is None:
            raise ValueError(f"DP (epsilon={self.epsilon}) needs public data bounds: bounds_X=(lo, hi) and "
                             "bounds_y=(lo, hi), known without looking at the data (bounds computed from the data "
                             "would leak it)")
        if self.standardize:
            raise ValueError("standardize=True is not offered under DP: federated standardization releases each "
                             "site's feature means and variances outside ε; scale with public constants instead")
        try:
            lo, hi = (np.broadcast_to(np.asarray(b, dtype=np.float64), (d,)) for b in self.bounds_X)
            lo_y, hi_y = (float(b) for b in self.bounds_y)
        except (TypeError, ValueError):
            raise ValueError(f"bounds_X must be (lo, hi) with scalars or {d} values each, bounds_y (lo, hi) "
                             f"scalars; got bounds_X={self.bounds_X!r}, bounds_y={self.bounds_y!r}") from None
        finite = np.isfinite(lo).all() and np.isfinite(hi).all() and np.isfinite([lo_y, hi_y]).all()
        if not (finite and (lo <= hi).all() and lo_y <= hi_y):
            raise ValueError(f"bounds must be finite with lo ≤ hi: bounds_X={self.bounds_X!r}, "
                             f"bounds_y={self.bounds_y!r}")
        return lo, hi, lo_y, hi_y

    def _fit_dp(self, tables, labels):
        """One round of the one-shot runtime on the clipped tables (see the module docstring)."""
        import torch
        from sklearn.utils import check_random_state

        from fedsciml.core.dp import DPConfig
        from fedsciml.ridge.protocol import one_shot

        d = tables[0][0].shape[1]
        lo, hi, lo_y, hi_y = self._dp_bounds(d)
        c_a = float(np.linalg.norm(np.maximum(np.abs(lo), np.abs(hi))))
        if self.fit_intercept:
            c_a *= ((d + 1) / d) ** 0.5
        c_b = max(abs(lo_y), abs(hi_y))
        if c_a <= 0 or c_b <= 0:
            raise ValueError(f"the bounds admit only zeros (C_a={c_a:g}, C_b={c_b:g}): widen bounds_X or bounds_y")
        data = [(torch.from_numpy(np.clip(Xk, lo, hi)), torch.from_numpy(np.clip(yk, lo_y, hi_y)))
                for Xk, yk in tables]
        seed = int(check_random_state(self.random_state).randint(2 ** 31 - 1))
        cfg = DPConfig(epsilon=float(self.epsilon), delta=float(self.delta), c_a=c_a, c_b=c_b, max_shrink=None)
        w, info = one_shot(data, float(self.alpha), dp=cfg, seed=seed, fit_intercept=self.fit_intercept)
        self.coef_ = w.numpy().copy()
        self.intercept_ = float(info.get("intercept", 0.0))
        self.alpha_ = float(info["sigma"])
        self.sites_, self.n_sites_ = list(labels), len(tables)
        self.n_samples_seen_ = float(sum(len(yk) for _, yk in tables))
        self.dp_info_ = {"epsilon": float(self.epsilon), "delta": float(self.delta), "clip_a": c_a, "clip_b": c_b,
                         "noise_std": float(info["noise_std"]), "seed": seed, "sigma_used": float(info["sigma"])}
        return self

    def partial_fit(self, X, y, sample_weight=None, site=0):
        """Streaming: site ``site`` adds rows; its message is merged with theirs (exact) and the model refitted."""
        if self.epsilon is not None:
            raise ValueError("partial_fit is not offered under DP (each refit would release the statistics again); "
                             "fit once with epsilon")
        return self._partial_fit(X, y, sample_weight, site)

    def _fit_from(self, msgs, labels):

        self._validate_params()
        self._set_messages(msgs, labels)
        self.alpha_ = float(self.alpha)
        return self._refit(self.alpha_)

    def _partial_fit(self, X, y, sample_weight, site):
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
    """:class:`FederatedRidge` with ``alpha_`` chosen from ``alphas`` by cross-validation scored by the server from
    the sites' own messages (see the module docstring); then refitted on every site.

    ``cv`` (scikit-learn's parameter, as in ``RidgeCV(cv=...)``):

    - ``None`` (default) with ``sites=`` (or ``groups=``) of two labels or more, or ``fit_clients`` with two tables
      or more: **leave-one-site-out** CV, scored by the total held-out squared error over the sites
      (``cv_mode_ = "sites"``, ``cv_folds_`` the site count);
    - ``None`` without site labels (``fit(X, y)``, as scikit-learn's generic tools call it): ``KFold(5)``;
    - an int k (``KFold(k)``), a splitter (its ``split(X, y, groups=sites)``) or an iterable of
      ``(train, test)`` index arrays: those splits of the rows (``cv_mode_ = "folds"``).  Each split's model is
      fitted from the statistics of its training rows and scored on the statistics of its test rows (a site would
      send one message per fold; here they are computed from the table), by the mean over the folds of
      ``1 − R²`` — the choice of scikit-learn's ``RidgeCV(alphas, cv=...)``, which maximizes the mean R² of
      ``GridSearchCV``; ``cv_loss_`` holds that mean per alpha and ``cv_site_loss_`` the held-out squared error
      per fold and alpha.

    Decision: the folds' score follows scikit-learn (mean R²), so a one-table ``cv=`` picks the alpha its
    ``RidgeCV`` picks; the sites' score stays the total held-out error (sites differ in size, and a site's
    R² weighs a small site like a large one).
    """

    _parameter_constraints: dict = {
        **_FederatedRidgeBase._parameter_constraints,
        "alphas": ["array-like"],
        "cv": ["cv_object", None],
    }

    def __init__(self, alphas=(0.1, 1.0, 10.0), *, cv=None, fit_intercept=True, standardize=False):
        self.alphas = alphas
        self.cv = cv
        self.fit_intercept = fit_intercept
        self.standardize = standardize

    def _alphas(self):
        alphas = np.asarray(self.alphas, dtype=np.float64).reshape(-1)
        if alphas.size == 0 or not np.isfinite(alphas).all() or (alphas <= 0).any():
            raise ValueError(f"alphas must be a non-empty list of finite values > 0, got {alphas.tolist()}")
        return alphas

    def _messages_from_table(self, X, y, sample_weight, sites):
        """With site labels and ``cv=None``: one message per site (leave-one-site-out CV).  Otherwise the rows'
        splits (``cv``; ``KFold(5)`` by default): each fold's training and test statistics are kept for the
        score, and the refit uses one message per site (or one for the whole table)."""
        if sites is not None and self.cv is None:
            return super()._messages_from_table(X, y, sample_weight, sites)
        from sklearn.model_selection import check_cv

        Xv, yv = validate_data(self, X, y, dtype=np.float64, y_numeric=True, reset=True)
        sw = None if sample_weight is None else _check_sample_weight(sample_weight, Xv, dtype=np.float64,
                                                                     ensure_non_negative=True)
        cv = check_cv(self.ONE_TABLE_FOLDS if self.cv is None else self.cv, yv, classifier=False)
        groups = None if sites is None else np.asarray(sites)
        splits = list(cv.split(Xv, yv, groups))
        if len(splits) < 2:
            raise ValueError(f"cv={self.cv!r} gives {len(splits)} split(s): cross-validation needs at least 2")

        def stats(rows):
            rows = np.asarray(rows)
            if rows.size == 0:
                raise ValueError(f"cv={self.cv!r} gives a split with an empty training or test part")
            return site_statistics(Xv[rows], yv[rows], None if sw is None else sw[rows])

        self._splits = ([stats(tr) for tr, _ in splits], [stats(te) for _, te in splits])
        return super()._messages_from_table(X, y, sample_weight, sites)

    ONE_TABLE_FOLDS = 5

    def fit_clients(self, data):
        """Fit from each site's own table (leave-one-site-out CV); ``cv=`` needs the rows: use ``fit``."""
        self._refuse_cv("fit_clients")
        return super().fit_clients(data)

    def fit_messages(self, messages, sites=None):
        """The server alone, from the sites' messages (leave-one-site-out CV); ``cv=`` needs the rows."""
        self._refuse_cv("fit_messages")
        return super().fit_messages(messages, sites)

    def _refuse_cv(self, how):
        if self.cv is not None:
            raise ValueError(f"cv={self.cv!r} splits rows, which {how} does not see (it scores leave-one-site-out "
                             "from the sites' messages): leave cv=None, or use fit(X, y, sites=...)")

    def _fit_from(self, msgs, labels):
        self._validate_params()
        alphas = self._alphas()
        d = self._set_messages(msgs, labels)
        splits, self._splits = getattr(self, "_splits", None), None
        if splits is not None:
            losses, sst = split_path(*splits, d, alphas, self.fit_intercept, self.standardize)
            with np.errstate(divide="ignore", invalid="ignore"):
                score = np.where(sst[:, None] > 0, losses / sst[:, None], np.where(losses > 0, np.inf, 0.0))
            self.cv_mode_, self.cv_folds_ = "folds", len(sst)
            self.cv_site_loss_, self.cv_loss_ = losses, score.mean(0)
        else:
            if len(msgs) < 2:
                raise ValueError(f"leave-one-site-out CV needs at least 2 sites (each is scored on a model fitted "
                                 f"without it), got {len(msgs)}; pass sites= with two labels or more, or use "
                                 f"FederatedRidge(alpha=...)")
            losses = loco_path(self.site_messages_, d, alphas, self.fit_intercept, self.standardize)
            self.cv_mode_, self.cv_folds_ = "sites", len(msgs)
            self.cv_site_loss_, self.cv_loss_ = losses, losses.sum(0)
        self.alpha_ = float(alphas[int(np.argmin(self.cv_loss_))])
        return self._refit(self.alpha_)

    def _fit_targets(self, subs, parts):
        """Several targets: one alpha for all (the CV losses summed over the targets, as scikit-learn's
        ``RidgeCV`` does by default), then each target refitted with it."""
        for sub, (msgs, labels) in zip(subs, parts):
            sub._fit_from(msgs, labels)
        total = np.sum([sub.cv_loss_ for sub in subs], axis=0)
        alpha = float(self._alphas()[int(np.argmin(total))])
        for sub in subs:
            sub.alpha_ = alpha
            sub._refit(alpha)
        self.alpha_, self.cv_loss_ = alpha, total
