"""A scikit-learn-shaped estimator for one-shot federated ridge.

>>> from fedsciml.ridge import FederatedRidge
>>> model = FederatedRidge(sigma=0.01).fit_clients([(A1, b1), (A2, b2)])
>>> model.predict(X_test)

``fit(X, y, groups=...)`` splits pooled rows into clients by a group label
(a convenience for experiments); ``fit_clients`` takes each client's data;
``partial_fit(A, b, client=k)`` streams new rows of client k as statistic
increments ``(ΔG, Δh)`` and refits.  ``sigma='cv'`` chooses σ from
``sigmas`` by leave-one-client-out CV.  Options ``epsilon``/``delta``/
``central_dp`` (differential privacy), ``project``/``sketch`` (random
projection) are those of :func:`fedsciml.ridge.protocol.one_shot`.
"""
from __future__ import annotations

import math

import torch

from fedsciml.core.dp import DPConfig
from fedsciml.ridge.protocol import one_shot
from fedsciml.core.stats import FusionServer, client_message

DEFAULT_GRID = tuple(float(x) for x in torch.logspace(-4, 3, 15, dtype=torch.float64))


class FederatedRidge:
    def __init__(self, sigma=0.01, *, sigmas=DEFAULT_GRID, epsilon: float | None = None, delta: float = 1e-5,
                 clip_a: float = 1.0, clip_b: float = 1.0, central_dp: bool = False, project: int | None = None,
                 sketch: str = "gaussian", seed: int = 0, device=None, dtype=torch.float64):
        if sigma != "cv":
            sigma = float(sigma)
            if not sigma >= 0:
                raise ValueError(f"sigma must be ≥ 0 or 'cv', got {sigma}")
        self.sigma, self.sigmas = sigma, sigmas
        self.epsilon, self.delta, self.clip_a, self.clip_b, self.central_dp = epsilon, delta, clip_a, clip_b, central_dp
        self.project, self.sketch, self.seed, self.device, self.dtype = project, sketch, seed, device, dtype

    def get_params(self, deep=True):
        return {k: getattr(self, k) for k in ("sigma", "sigmas", "epsilon", "delta", "clip_a", "clip_b", "central_dp",
                                              "project", "sketch", "seed", "device", "dtype")}

    def _t(self, x):
        return torch.as_tensor(x, dtype=self.dtype, device=self.device)

    def _dp(self):
        if self.epsilon is None or self.epsilon == math.inf:
            return None
        return DPConfig(self.epsilon, self.delta, self.clip_a, self.clip_b, central=self.central_dp)

    def fit_clients(self, data):
        data = [(self._t(A), self._t(b)) for A, b in data]
        cv = self.sigmas if self.sigma == "cv" else None
        sigma = 0.0 if self.sigma == "cv" else self.sigma
        self.coef_, self.info_ = one_shot(data, sigma, dp=self._dp(), project=self.project, sketch=self.sketch,
                                          cv_sigmas=cv, seed=self.seed)
        self.sigma_ = self.info_["sigma"]
        self.n_features_in_ = int(self.coef_.shape[0])
        return self

    def fit(self, X, y, groups=None):
        X, y = self._t(X), self._t(y)
        if groups is None:
            return self.fit_clients([(X, y)])
        g = torch.as_tensor(groups)
        if g.shape[0] != X.shape[0]:
            raise ValueError(f"groups has {g.shape[0]} labels for {X.shape[0]} rows")
        return self.fit_clients([(X[g == v], y[g == v]) for v in torch.unique(g)])

    def partial_fit(self, A, b, client=0):
        """Streaming: client ``client`` adds rows; the server adds their ``(ΔG, Δh)`` and refits (no DP/projection)."""
        if self.epsilon is not None or self.project is not None or self.sigma == "cv":
            raise ValueError("partial_fit streams exact statistics; it does not combine with epsilon, project or sigma='cv'")
        A, b = self._t(A), self._t(b)
        if not hasattr(self, "server_"):
            self.server_ = FusionServer(A.shape[1], dtype=self.dtype, device=A.device)
        self.server_.update(client, client_message(A, b))
        self.coef_ = self.server_.solve(self.sigma)
        self.sigma_ = self.sigma
        self.n_features_in_ = int(self.coef_.shape[0])
        return self

    def predict(self, X):
        if not hasattr(self, "coef_"):
            raise ValueError("this FederatedRidge is not fitted yet; call fit, fit_clients or partial_fit")
        X = self._t(X)
        if X.shape[-1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[-1]} features, the model was fitted with {self.n_features_in_}")
        return X @ self.coef_.to(X.device)

    def score(self, X, y):
        """Negative test MSE (higher is better, as scikit-learn scorers)."""
        r = self.predict(X) - self._t(y)
        return -float((r @ r) / r.numel())
