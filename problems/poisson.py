"""d-dimensional Poisson ``−Δu = f`` on [0, 1]^d with Dirichlet data.

Exact solution ``Π sin(πx_i)`` (the FIPA paper's text; ``f = dπ² Π sin(πx_i)``,
zero boundary values) or the variant ``Σ sin(πx_i)`` (its code;
``f = π² Σ sin(πx_i)``).  Clients own equal strips along x₁.  Boundary points
are sampled on every face: the faces x₁ = 0 and x₁ = 1 belong to the first and
last client, every other face is cut into the clients' strips.

FIPA here needs a larger rank than its default 20: at d = 3 / 5 each client
has ~650 / ~850 residual rows for p ≈ 2300 parameters, so rank-20 sketches
keep a small part of its curvature and the merged step lies in a
40-dimensional span;
``rank=300`` (40–50 % more CPU per round, 14× the floats) took
d = 5 from 0.765 to 0.186 relative L2 after 20 rounds, ahead of FedAvg
(0.575) and gn (0.210) — ``scripts/papers/fipa/poisson_dims.py``,
``reproductions/poisson_d5_ablation.md``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .base import SAMPLING, Param, ProblemError, at_least, box_boundary_points, grid, positive, sample_box
from .pinn import PINNProblem
from .registry import register

_PI = math.pi


@register
class Poisson(PINNProblem):
    name = "poisson"
    description = "d-dim Poisson −Δu = f on [0,1]^d, u = Π sin πxᵢ (variant sum: Σ sin πxᵢ)"
    params = {
        "dim": Param(2, int, "space dimension d ≥ 1", at_least("dim", 1)),
        "variant": Param("product", str, "product (Π sin πxᵢ) | sum (Σ sin πxᵢ)", choices=("product", "sum")),
        "n_interior": Param(400, int, "interior collocation points per client", at_least("n_interior", 1)),
        "n_boundary": Param(50, int, "boundary points per face per client strip (d ≥ 2)", at_least("n_boundary", 1)),
        "boundary_weight": Param(None, float, "boundary penalty β (default 10 for d = 1, 100 for d ≥ 2)", positive("boundary_weight")),
        "sampling": SAMPLING,
    }

    def _check(self):
        if self.options["boundary_weight"] is None:
            self.options["boundary_weight"] = 10.0 if self.dim == 1 else 100.0
        if self.dim > 10:
            raise ProblemError(f"dim={self.dim} is larger than this implementation supports (1 ≤ dim ≤ 10)")

    def input_dim(self):
        return self.dim

    def exact(self, x):
        s = torch.sin(_PI * x)
        return s.prod(-1) if self.variant == "product" else s.sum(-1)

    def source(self, x):
        s = torch.sin(_PI * x)
        if self.variant == "product":
            return self.dim * _PI ** 2 * s.prod(-1)
        return _PI ** 2 * s.sum(-1)

    def _strip(self, client, n_clients):
        e = np.linspace(0.0, 1.0, n_clients + 1)
        return e[client], e[client + 1]

    def interior_points(self, client, n_clients, seed):
        a, b = self._strip(client, n_clients)
        d = self.dim
        return sample_box(self.n_interior, [a] + [0.0] * (d - 1), [b] + [1.0] * (d - 1), self.sampling, seed)

    def boundary_points(self, client, n_clients, seed):
        return box_boundary_points(self.dim, 0.0, 1.0, client, n_clients, self.n_boundary, self.sampling, seed)

    def test_inputs(self):
        d = self.dim
        if d == 1:
            return grid(1001, 1)
        if d == 2:
            return grid(101, 2)
        gen = np.random.default_rng(20260101 + d)  # fixed test set, independent of the run seed
        return torch.as_tensor(gen.random((10000, d)), dtype=torch.float64)
