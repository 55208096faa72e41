"""d-dimensional Poisson ``−Δu = f`` on [0, 1]^d with Dirichlet data.

Exact solution ``Π sin(πx_i)`` (the FIPA paper's text; ``f = dπ² Π sin(πx_i)``,
zero boundary values) or the variant ``Σ sin(πx_i)`` (its code;
``f = π² Σ sin(πx_i)``).  Clients own equal strips along x₁.  Boundary points
are sampled on every face: the faces x₁ = 0 and x₁ = 1 belong to the first and
last client, every other face is cut into the clients' strips.

Collocation grows with the dimension (``n_interior`` not given): 400 interior
points per client for d ≤ 2 (unchanged), ``800·max(d, 5)`` for d ≥ 3 — 4000
for d = 3…5, the FIPA authors' own script setting for Poisson d = 3 and 5,
and 8000 at d = 10.  Why: with 400 points at d = 5 there are fewer residual
rows than parameters ([5,32,32,32,1], p = 2337), Levenberg–Marquardt
interpolates them (training loss 3e-29) and the relative L2 error stalls at
7e-2; the rows must outnumber p for the collocation to generalize.

``solve --preset paper`` at d = 3 and 5 also takes the authors' script
settings for FIPA (:attr:`Poisson.paper_method_options`: rank 200, 300
local steps, server step γ = 0.5), on top of the published preset
(:data:`fedsciml.options.PAPER_PRESET`); options given explicitly win.

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

from fedsciml.options import option

from .base import SAMPLING, ProblemError, box_boundary_points, grid, sample_box
from .pinn import PINNProblem
from .registry import register

_PI = math.pi


def default_interior_points(dim: int) -> int:
    """Interior points per client when ``n_interior`` is not given: 400 for d ≤ 2, ``800·max(d, 5)`` beyond."""
    return 400 if dim <= 2 else 800 * max(dim, 5)


@register
class Poisson(PINNProblem):
    name = "poisson"
    description = "d-dim Poisson −Δu = f on [0,1]^d, u = Π sin πxᵢ (variant sum: Σ sin πxᵢ)"
    params = {
        "dim": option(2, "space dimension d ≥ 1", int, lo=1),
        "variant": option("product", "product (Π sin πxᵢ) | sum (Σ sin πxᵢ)", str, choices=("product", "sum")),
        "n_interior": option(None, "interior collocation points per client (default 400 for d ≤ 2, "
                                       "800·max(d, 5) for d ≥ 3)", int, lo=1,
                             none="400 for d ≤ 2, 800·max(d, 5) for d ≥ 3"),
        "n_boundary": option(50, "boundary points per face per client strip (d ≥ 2)", int, lo=1),
        "boundary_weight": option(None, "boundary penalty β (default 10 for d = 1, 100 for d ≥ 2)", float, lo=0,
                                  lo_open=True, none="10 for d = 1, 100 for d ≥ 2"),
        "sampling": SAMPLING,
    }

    def _check(self):
        if self.options["n_interior"] is None:
            self.options["n_interior"] = default_interior_points(self.dim)
        if self.options["boundary_weight"] is None:
            self.options["boundary_weight"] = 10.0 if self.dim == 1 else 100.0
        if self.dim > 10:
            raise ProblemError(f"dim={self.dim} is larger than this implementation supports (1 ≤ dim ≤ 10)")

    def inapplicable(self) -> dict[str, str]:
        if self.dim == 1:  # the boundary of [0, 1] is its two end points: there is no face to sample
            return {"n_boundary": "with dim 1 the boundary is the two end points x = 0 and x = 1"}
        return {}

    def input_dim(self):
        return self.dim

    @property
    def paper_method_options(self) -> dict:
        """The FIPA authors' script settings for Poisson d = 3 and 5 (applied by ``solve --preset paper``)."""
        return {"rank": 200, "local_steps": 300, "gamma": 0.5} if self.dim in (3, 5) else {}

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
