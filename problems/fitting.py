"""Function fitting (FIPA paper, "Function Fitting"): residual ``u_θ(x) − y``.

* ``sin1d``: ``u = sin(nπx)`` on [0, 1]; clients own intervals, equal or the
  paper's uneven 8-client edges [0, .1, .3, .5, .6, .7, .85, .9, 1].
* ``gauss2d``: a six-component Gaussian mixture on [0, 1]²; clients own the
  cells of a √K × √K grid (3 × 3 by default).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from fedsciml.options import option

from .base import SAMPLING, FieldProblem, ProblemError, ResidualPart, grid, interval_edges, sample_box
from .registry import register

UNEVEN_8 = (0.0, 0.1, 0.3, 0.5, 0.6, 0.7, 0.85, 0.9, 1.0)


class FitProblem(FieldProblem):
    kind = "fit"
    metric = "mse"

    def data_residual(self, theta, point):
        x, y = point
        return self.u(theta, x) - y

    def client_boxes(self, n_clients):
        raise NotImplementedError

    def rows_per_client(self, n_clients: int) -> int:
        return self.n_samples

    def pde_rows_per_client(self, n_clients: int) -> int:
        return 0  # a fit's residual is the network's value minus the data

    def client_objectives(self, n_clients: int, seed: int = 0, device="cpu"):
        self.check_clients(n_clients)
        objs = []
        for k, (lo, hi) in enumerate(self.client_boxes(n_clients)):
            x = sample_box(self.n_samples, lo, hi, self.sampling, [seed, k, 2]).to(device)
            objs.append(self.objective([ResidualPart("data", self.data_residual, (x, self.exact(x)), 1.0)]))
        return objs


@register
class Sin1D(FitProblem):
    name = "sin1d"
    description = "fit u = sin(nπx) on [0,1]; clients own intervals (split: equal | uneven for 8 clients)"
    space_dim = 1
    hidden = (20, 20, 20)
    params = {
        "n": option(2, "frequency n in sin(nπx)", int, lo=1),
        "split": option("equal", "equal intervals, or uneven (the paper's 8-client edges)", str, choices=("equal", "uneven")),
        "n_samples": option(400, "samples per client", int, lo=1),
        "sampling": SAMPLING,
    }

    def exact(self, x):
        return torch.sin(self.n * math.pi * x[..., 0])

    def client_boxes(self, n_clients):
        if self.split == "uneven":
            if n_clients != 8:
                raise ProblemError(f"split='uneven' is the paper's 8-client partition; got {n_clients} clients")
            e = interval_edges(8, UNEVEN_8)
        else:
            e = interval_edges(n_clients)
        return [([e[k]], [e[k + 1]]) for k in range(n_clients)]

    def test_inputs(self):
        return torch.linspace(0.0, 1.0, 1001, dtype=torch.float64).reshape(-1, 1)


# (A, m_x, m_y, s_x, s_y) of the six components (the FIPA paper's mixture)
GAUSS2D_COMPONENTS = (
    (1.40, 0.18, 0.28, 0.06, 0.05),
    (0.90, 0.50, 0.28, 0.10, 0.06),
    (0.95, 0.82, 0.28, 0.11, 0.07),
    (0.75, 0.18, 0.72, 0.07, 0.06),
    (0.70, 0.50, 0.82, 0.07, 0.07),
    (0.80, 0.82, 0.74, 0.10, 0.07),
)


@register
class Gauss2D(FitProblem):
    name = "gauss2d"
    description = "fit a 6-component Gaussian mixture on [0,1]²; clients own cells of a √K×√K grid (default 9)"
    space_dim = 2
    hidden = (20, 20, 20, 20)
    default_clients = 9
    params = {
        "n_samples": option(1000, "samples per client", int, lo=1),
        "sampling": SAMPLING,
    }

    def exact(self, x):
        c = torch.tensor(GAUSS2D_COMPONENTS, dtype=x.dtype, device=x.device)
        A, mx, my, sx, sy = c.unbind(-1)
        X, Y = x[..., 0:1], x[..., 1:2]
        return (A * torch.exp(-((X - mx) ** 2) / (2 * sx ** 2) - (Y - my) ** 2 / (2 * sy ** 2))).sum(-1)

    def client_boxes(self, n_clients):
        g = int(round(math.sqrt(n_clients)))
        if g * g != n_clients:
            raise ProblemError(f"gauss2d splits [0,1]² into a √K×√K grid; K must be a perfect square (1, 4, 9, …), got {n_clients}")
        e = np.linspace(0.0, 1.0, g + 1)
        return [([e[i], e[j]], [e[i + 1], e[j + 1]]) for j in range(g) for i in range(g)]

    def test_inputs(self):
        return grid(256, 2)
