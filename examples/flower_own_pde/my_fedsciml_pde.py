"""A user's PDE, packaged so that every Flower node finds it by name (see pyproject.toml beside this file).

    −u″ − k²u = f  on [0, 1],   u = sin(πx) exact,   f = (π² − k²) sin(πx)
"""
from __future__ import annotations

import math

import torch

import fedsciml as fs


@fs.register
class MyHelmholtz(fs.PDE):
    """1D Helmholtz −u″ − k²u = f, u = sin πx (a user's own problem)"""

    name = "my-helmholtz"
    dim = 1
    hidden = (16, 16)
    params = {"k": fs.option(2.0, "wave number k (k² must not be an eigenvalue (nπ)²)", float)}

    def exact(self, x):
        return torch.sin(math.pi * x[..., 0])

    def equation(self, u, x):
        f = (math.pi ** 2 - self.k ** 2) * torch.sin(math.pi * x[..., 0])
        return -u.laplacian(x) - self.k ** 2 * u(x) - f
