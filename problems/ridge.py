"""Ridge regression problems: the linear residual ``r(w) = A w − b`` with Jacobian ``A``.

* ``ridge-linear`` — the one-shot ridge paper's synthetic heterogeneous
  generator (Section V-A): a unit-norm ``w* ~ N(0, I)``; client k draws
  features ``a ~ N(γ·u_k, diag(λ ⊙ v_k))`` with ``u_k`` a random unit vector
  (γ ∈ [0, 1] the heterogeneity), ``v_k ~ U[0.8, 1.2]^d`` the "mild variance
  heterogeneity" and ``λ`` the feature spectrum (all ones — the paper's
  setting — or a power law ``λ_j ∝ j^{−α}`` normalized to mean 1, used for the
  random-projection experiment, where a flat spectrum leaves nothing for a
  sketch to exploit); targets ``b = aᵀw* + ε`` with ε of standard deviation
  ``noise`` (0.1).  Each client holds ``n_samples`` rows, of which the last
  ``test_fraction`` (20 %) are held out; the test set is the union of the held
  out rows.
* ``ridge-rff`` — random Fourier features (Rahimi & Recht 2007) of a nonlinear
  target ``f(x) = Σ_i sin(2x_i)/√p + cos(‖x‖)`` on inputs ``x ~ N(2γ·u_k, I_p)``;
  the feature map ``φ(x) = √(2/D) cos(Ωx + β)``, ``Ω ~ N(0, 1/ℓ²)``,
  ``β ~ U[0, 2π]`` is fixed by ``feature_seed``, which all clients share.

Objective.  ``client_objectives`` returns, per client, ``LinearLeastSquares``
of ``[A_k; √(σ/K)·I]`` and ``[b_k; 0]`` (option ``penalty="rows"``, the
default): the ridge penalty is split evenly over the K clients as residual
rows, so the *sum* of the client objectives is exactly the ridge objective
``½(‖Aw − b‖² + σ‖w‖²)`` and any federated least-squares method
(``solve ridge-linear --method gn``) converges to the same model as one-shot
fusion.  With ``penalty="server"`` the clients hold their data rows only and
the one-shot server adds ``σI`` to the fused statistics (the protocol of
:func:`fedsciml.ridge.one_shot` and ``python -m fedsciml ridge``, where
projection, clipping, DP noise and LOCO-CV act on the data rows alone);
``solve(..., method="one-shot")`` on a ridge problem always runs this way, so σ
counts once.  The raw client data ``(A_k, b_k)`` — what the
one-shot protocol of :mod:`fedsciml.ridge` turns into sufficient statistics
— come from :meth:`RidgeProblem.client_data`.

The test set belongs to a client split: :meth:`evaluate` uses the held-out
rows of the last split generated (``client_data``/``client_objectives``), or
of the default split (``default_clients`` clients, seed 0) if none was.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from fedsciml.core.objective import LinearLeastSquares

from fedsciml.options import display, option

from .base import DTYPE, Problem, ProblemError
from .registry import register


class LinearModel:
    """``u(w, a) = aᵀw`` — what ``network()`` means for a ridge problem (``n_params = d``)."""

    def __init__(self, d: int):
        self.n_params = int(d)
        self.sizes = [int(d), 1]

    def __call__(self, theta, x):
        return x @ theta

    def init(self, seed: int = 0, dtype=DTYPE, device="cpu"):
        return torch.zeros(self.n_params, dtype=dtype, device=device)


class RidgeProblem(Problem):
    """Common part of the ridge problems: data split, penalty rows, test MSE."""

    kind = "ridge"
    metric = "mse"
    default_clients = 20

    # --- to implement --------------------------------------------------------
    def n_features(self) -> int:
        raise NotImplementedError

    def _client_rows(self, k: int, n_clients: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """All ``n_samples`` rows ``(A, b)`` of client k (train rows first)."""
        raise NotImplementedError

    # --- shared --------------------------------------------------------------
    def network(self) -> LinearModel:
        return LinearModel(self.n_features())

    def init_params(self, seed: int = 0, device="cpu") -> torch.Tensor:
        return torch.zeros(self.n_features(), dtype=DTYPE, device=device)

    def n_train(self) -> int:
        n_test = int(round(self.test_fraction * self.n_samples))
        n_tr = self.n_samples - n_test
        if n_tr < 1 or n_test < 1:
            raise ProblemError(f"n_samples={self.n_samples} with test_fraction={self.test_fraction} leaves "
                               f"{n_tr} training and {n_test} test rows per client; both must be ≥ 1")
        return n_tr

    def client_data(self, n_clients: int, seed: int = 0, device="cpu", dtype=DTYPE):
        """Per-client training data ``[(A_k [n_k, d], b_k [n_k])]``; also sets the test set."""
        self.check_clients(n_clients)
        n_tr = self.n_train()
        train, test_A, test_b = [], [], []
        for k in range(int(n_clients)):
            A, b = self._client_rows(k, int(n_clients), int(seed))
            train.append((torch.as_tensor(A[:n_tr], dtype=dtype, device=device),
                          torch.as_tensor(b[:n_tr], dtype=dtype, device=device)))
            test_A.append(A[n_tr:])
            test_b.append(b[n_tr:])
        self.__dict__["_test"] = (torch.as_tensor(np.concatenate(test_A), dtype=dtype),
                                  torch.as_tensor(np.concatenate(test_b), dtype=dtype))
        return train

    def test_data(self, device="cpu", dtype=DTYPE):
        if "_test" not in self.__dict__:
            self.client_data(self.default_clients, 0)
        A, b = self.__dict__["_test"]
        return A.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)

    def rows_per_client(self, n_clients: int) -> int:
        rows = self.sigma > 0 and self.penalty == "rows"
        return self.n_samples + (self.n_features() if rows else 0)  # the penalty rows √(σ/K)·I

    def client_objectives(self, n_clients: int, seed: int = 0, device="cpu"):
        data = self.client_data(n_clients, seed, device)
        d = self.n_features()
        root = math.sqrt(self.sigma / len(data)) if self.penalty == "rows" else 0.0
        objs = []
        for A, b in data:
            if root > 0:
                A = torch.cat([A, root * torch.eye(d, dtype=A.dtype, device=A.device)])
                b = torch.cat([b, b.new_zeros(d)])
            objs.append(LinearLeastSquares(A, b))
        return objs

    def evaluate(self, theta: torch.Tensor, intercept: float = 0.0) -> dict:
        A, b = self.test_data(theta.device, theta.dtype)
        err = A @ theta - b
        if intercept:  # a one-shot fit with fit_intercept (0.0 leaves the old numbers bit for bit)
            err = err + intercept
        return {"mse": float((err @ err) / err.numel())}


COMMON = {
    "n_samples": option(500, "samples per client (a test_fraction of them held out)", int, lo=2),
    "heterogeneity": option(0.5, "heterogeneity γ ∈ [0, 1] (client feature means γ·u_k; 0 = IID)", float, lo=0, hi=1),
    "sigma": option(0.01, "ridge regularization σ in ‖Aw − b‖² + σ‖w‖²", float, lo=0),
    "noise": option(0.1, "standard deviation of the target noise ε", float, lo=0),
    "test_fraction": option(0.2, "fraction of each client's samples held out for the test set", float, lo=0, hi=1, lo_open=True, hi_open=True),
    "penalty": option("rows", "where σ enters: rows (√(σ/K)·I residual rows on every client) or server "
                     "(data rows only; the one-shot server adds σI)", str, choices=("rows", "server")),
}


@register
class RidgeLinear(RidgeProblem):
    name = "ridge-linear"
    description = "linear ridge, the one-shot paper's heterogeneous synthetic data (d=100, γ=0.5, K=20)"
    params = {
        "dim": option(100, "feature dimension d", int, lo=1),
        **COMMON,
        "spectrum": option("flat", "feature variances: flat (the paper's) or powerlaw λ_j ∝ j^−decay", str, choices=("flat", "powerlaw")),
        "decay": option(2.0, "power-law exponent α of the feature spectrum (spectrum=powerlaw)", float, lo=0, lo_open=True),
    }

    def n_features(self):
        return self.dim

    def inapplicable(self) -> dict[str, str]:
        if self.spectrum == "flat":
            return {"decay": f"it is the exponent of {display('spectrum')} powerlaw, and the spectrum is flat"}
        return {}

    def spectrum_values(self) -> np.ndarray:
        d = self.dim
        if self.spectrum == "flat":
            return np.ones(d)
        lam = np.arange(1, d + 1, dtype=np.float64) ** (-self.decay)
        return lam * (d / lam.sum())

    def w_star(self, seed: int) -> np.ndarray:
        w = np.random.default_rng([seed, 0]).standard_normal(self.dim)
        return w / np.linalg.norm(w)

    def _client_rows(self, k, n_clients, seed):
        d, n = self.dim, self.n_samples
        rng = np.random.default_rng([seed, 1, k])
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        scale = np.sqrt(self.spectrum_values() * rng.uniform(0.8, 1.2, d))
        A = self.heterogeneity * u + scale * rng.standard_normal((n, d))
        b = A @ self.w_star(seed) + self.noise * rng.standard_normal(n)
        return A, b


@register
class RidgeRFF(RidgeProblem):
    name = "ridge-rff"
    description = "ridge on random Fourier features of a nonlinear target (shared feature seed)"
    params = {
        "rff_dim": option(300, "number of random Fourier features D", int, lo=1),
        "input_dim": option(3, "input dimension p", int, lo=1),
        "lengthscale": option(1.0, "RBF kernel length scale ℓ (Ω ~ N(0, 1/ℓ²))", float, lo=0, lo_open=True),
        "feature_seed": option(0, "seed of the shared feature map (Ω, β)", int, lo=0),
        **COMMON,
    }

    def n_features(self):
        return self.rff_dim

    def feature_map(self):
        rng = np.random.default_rng([self.feature_seed, 7])
        omega = rng.standard_normal((self.input_dim, self.rff_dim)) / self.lengthscale
        beta = rng.uniform(0.0, 2.0 * math.pi, self.rff_dim)
        return omega, beta

    def features(self, x: np.ndarray) -> np.ndarray:
        omega, beta = self.feature_map()
        return math.sqrt(2.0 / self.rff_dim) * np.cos(x @ omega + beta)

    def target(self, x: np.ndarray) -> np.ndarray:
        p = x.shape[1]
        return np.sin(2.0 * x).sum(1) / math.sqrt(p) + np.cos(np.linalg.norm(x, axis=1))

    def _client_rows(self, k, n_clients, seed):
        p, n = self.input_dim, self.n_samples
        rng = np.random.default_rng([seed, 2, k])
        u = rng.standard_normal(p)
        u /= np.linalg.norm(u)
        x = 2.0 * self.heterogeneity * u + rng.standard_normal((n, p))
        b = self.target(x) + self.noise * rng.standard_normal(n)
        return self.features(x), b
