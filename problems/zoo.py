"""Problems on geometries, in time, systems and an inverse problem (:class:`~fedsciml.problems.domain.DomainPDE`).

* ``heat`` — ``u_t = k u_xx`` on [0, 1] × [0, 1]; u(0, t) = 0, u_x(1, t) = 0, u(x, 0) = sin(πx/2);
  exact ``u = sin(πx/2) exp(−kπ²t/4)``.
* ``poisson-lshape`` — ``−Δu = 0`` on the L-shape [−1, 1]² \\ (0, 1] × [−1, 0) with Dirichlet data from the
  corner singularity ``u = r^{2/3} sin(2φ/3)`` (φ ∈ [0, 3π/2] from the positive x-axis); exact.
* ``kovasznay`` — steady Navier–Stokes ``(u·∇)u + ∇p − Δu/Re = 0``, ``∇·u = 0`` on [−0.5, 1] × [−0.5, 1.5],
  Re = 20; Kovasznay's exact flow (u, v, p); u and v given on the whole boundary, p on x = 1
  (as DeepXDE's example); p is compared up to a constant.
* ``burgers`` — ``u_t + u u_x = ν u_xx``, ν = 0.01/π, on [−1, 1] × [0, 1], u(±1, t) = 0,
  u(x, 0) = −sin πx; reference from the Cole–Hopf integral by Gauss–Hermite quadrature (:func:`burgers_reference`).
* ``heat-inverse`` — ``heat`` with k unknown (trained with θ from the initial guess ``k0``), recovered from
  sensor readings ``u(x_s, t_j) + noise``: ``sensors`` positions x_s = (s + ½)/sensors, ``readings`` times
  each; each sensor is held by the client whose strip holds it.  The report gives k and its
  Gauss–Newton (Laplace) standard deviation (:meth:`DomainPDE.final_metrics`).

Every one splits among 4 clients by default (strips along x).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from fedsciml.options import display, option

from .base import DTYPE, TOTAL_POINTS
from .conditions import Data, Dirichlet, Initial, Neumann
from .domain import DomainPDE
from .geometry import Box, Interval, LShape
from .registry import register

_PI = math.pi


#: the point counts (totals) of the problems whose default run has 4 clients: the general defaults' 400 and 50 per
#: client of the time when counts were per client, pooled — their default runs keep their numbers of points
FOUR_CLIENTS_POINTS = {
    "n_interior": option(1600, f"interior collocation points {TOTAL_POINTS}", int, lo=1),
    "n_boundary": option(200, f"points of each boundary condition without its own n, {TOTAL_POINTS}", int, lo=1)}


@register
class Heat(DomainPDE):
    """1-D heat equation in space-time: Dirichlet at x = 0, Neumann at x = 1, an initial condition; exact."""

    name = "heat"
    description = "1-D heat u_t = k u_xx, Dirichlet x=0, Neumann x=1, initial sin(πx/2); exact"
    geometry = Interval(0.0, 1.0)
    T = 1.0
    hidden = (20, 20, 20)
    default_clients = 4
    params = {"k": option(0.1, "diffusivity k", float, lo=0, lo_open=True),
              "n_interior": option(1200, f"interior collocation points {TOTAL_POINTS}", int, lo=1),
              "n_boundary": option(160, f"points of each boundary/initial condition, {TOTAL_POINTS}", int, lo=1)}

    @property
    def conditions(self):
        return [Dirichlet("x-", 0.0), Neumann("x+", 0.0), Initial(lambda x: torch.sin(_PI / 2 * x[:, 0]))]

    def diffusivity(self, u):
        return self.k

    def equation(self, u, x):
        return u.diff(x, "t") - self.diffusivity(u) * u.diff(x, "x", "x")

    def exact(self, x):
        return torch.sin(_PI / 2 * x[:, 0]) * torch.exp(-self.k * _PI ** 2 / 4 * x[:, 1])


@register
class HeatInverse(Heat):
    """``heat`` with the diffusivity k unknown, recovered from noisy sensor readings held by the clients."""

    name = "heat-inverse"
    description = "heat's diffusivity k recovered from noisy sensor readings held by 4 sites (k ± Laplace std)"
    params = {**Heat.params,
              "k0": option(0.05, "initial guess of k", float, lo=0, lo_open=True),
              "noise": option(0.0, "standard deviation of the readings' noise (0: exact readings)", float, lo=0),
              "sensors": option(8, "sensor positions x_s = (s + ½)/sensors", int, lo=1),
              "readings": option(11, "readings per sensor at t = 0 .. T", int, lo=1),
              "data_seed": option(0, "seed of the readings' noise (fixed: part of the problem, not of the run)", int,
                                  lo=0)}

    def inapplicable(self) -> dict[str, str]:
        if self.noise == 0:
            return {"data_seed": f"it seeds the readings' noise, and {display('noise')} is 0 (exact readings)"}
        return {}

    @property
    def unknowns(self):
        return {"k": self.k0}

    @property
    def exact_coefficients(self):
        return {"k": self.k}

    def diffusivity(self, u):
        return u.coef["k"]

    def sensor_data(self):
        xs = (torch.arange(self.sensors, dtype=DTYPE) + 0.5) / self.sensors
        ts = torch.linspace(0.0, self.T, self.readings, dtype=DTYPE)
        X = torch.cartesian_prod(xs, ts)
        y = self.exact(X)
        if self.noise > 0:
            y = y + self.noise * torch.as_tensor(np.random.default_rng(self.data_seed).standard_normal(len(y)), dtype=DTYPE)
        return X, y

    @property
    def conditions(self):
        X, y = self.sensor_data()
        return super().conditions + [Data(x=X, y=y, noise=self.noise if self.noise > 0 else None)]


def _lshape_exact(x):
    """r^{2/3} sin(2φ/3), φ ∈ (−π/4, 7π/4]: continuous across the edge y = 0 < x, so that a point a
    round-off below it (inside the domain's tolerance) gets ≈ 0, not the value at φ ≈ 2π."""
    r2 = (x ** 2).sum(-1)
    phi = torch.atan2(x[..., 1], x[..., 0])
    phi = torch.where(phi < -_PI / 4, phi + 2 * _PI, phi)
    return r2 ** (1.0 / 3.0) * torch.sin(2.0 / 3.0 * phi)


@register
class PoissonLShape(DomainPDE):
    """−Δu = 0 on the L-shape with the corner singularity u = r^{2/3} sin(2φ/3); exact."""

    name = "poisson-lshape"
    description = "−Δu = 0 on the L-shaped domain, u = r^{2/3} sin(2φ/3) (corner singularity); exact"
    geometry = LShape()
    hidden = (32, 32, 32)
    default_clients = 4
    params = {"boundary_weight": option(100.0, "weight of the Dirichlet rows", float, lo=0, lo_open=True),
              **FOUR_CLIENTS_POINTS}
    conditions = [Dirichlet("boundary")]

    def equation(self, u, x):
        return u.laplacian(x)

    def exact(self, x):
        return _lshape_exact(x)


@register
class Kovasznay(DomainPDE):
    """2-D steady Navier–Stokes (u, v, p), Re = 20: Kovasznay's exact flow."""

    name = "kovasznay"
    description = "2-D steady Navier–Stokes (u, v, p), Re = 20, Kovasznay flow; exact (p up to a constant)"
    geometry = Box([-0.5, -0.5], [1.0, 1.5])
    outputs = ("u", "v", "p")
    up_to_constant = ("p",)
    hidden = (32, 32, 32)
    default_clients = 4
    params = {"Re": option(20.0, "Reynolds number", float, lo=0, lo_open=True), **FOUR_CLIENTS_POINTS}
    conditions = [Dirichlet("boundary", component="u"), Dirichlet("boundary", component="v"),
                  Dirichlet("x+", component="p")]

    @property
    def lam(self):
        return self.Re / 2 - math.sqrt(self.Re ** 2 / 4 + 4 * _PI ** 2)

    def equation(self, u, x):
        U, G, H = u.jet(x)           # values [3], gradients [3, 2], Hessians [3, 2, 2]: one pass
        (uu, vv), nu = U[:2], 1.0 / self.Re
        lap = H[:, 0, 0] + H[:, 1, 1]
        mx = uu * G[0, 0] + vv * G[0, 1] + G[2, 0] - nu * lap[0]
        my = uu * G[1, 0] + vv * G[1, 1] + G[2, 1] - nu * lap[1]
        return mx, my, G[0, 0] + G[1, 1]

    def exact(self, x):
        lam, X, Y = self.lam, x[:, 0], x[:, 1]
        e = torch.exp(lam * X)
        return torch.stack([1 - e * torch.cos(2 * _PI * Y), lam / (2 * _PI) * e * torch.sin(2 * _PI * Y),
                            0.5 * (1 - torch.exp(2 * lam * X))], 1)


def burgers_reference(x, t, nu: float = 0.01 / _PI, n_nodes: int = 250) -> np.ndarray:
    """Viscous Burgers ``u_t + u u_x = ν u_xx``, u(x, 0) = −sin πx, u(±1, t) = 0, by Cole–Hopf:

    ``u(x, t) = −∫ sin(π(x − η)) f(x − η) e^{−η²/4νt} dη / ∫ f(x − η) e^{−η²/4νt} dη``,
    ``f(y) = exp(−cos(πy)/(2πν))``; with ``η = √(4νt)·z`` both integrals are Gauss–Hermite sums
    (``n_nodes`` nodes).  The exponents are shifted by their maximum before ``exp`` (f spans e^{±50}).
    At t = 0 the initial condition.  ``x``, ``t``: arrays of the same shape."""
    x, t = np.broadcast_arrays(np.asarray(x, float), np.asarray(t, float))
    z, w = np.polynomial.hermite.hermgauss(n_nodes)
    out = -np.sin(_PI * x)
    pos = t > 0
    xp, tp = x[pos][:, None], t[pos][:, None]
    y = xp - np.sqrt(4 * nu * tp) * z[None, :]
    a = -np.cos(_PI * y) / (2 * _PI * nu)
    a = a - a.max(1, keepdims=True)
    ew = w[None, :] * np.exp(a)
    out[pos] = -(np.sin(_PI * y) * ew).sum(1) / ew.sum(1)
    return out


@register
class Burgers(DomainPDE):
    """1-D viscous Burgers, ν = 0.01/π, u₀ = −sin πx; reference from Cole–Hopf by Gauss–Hermite quadrature."""

    name = "burgers"
    description = "1-D viscous Burgers ν=0.01/π, u(x,0) = −sin πx; Cole–Hopf reference by quadrature"
    geometry = Interval(-1.0, 1.0)
    T = 1.0
    hidden = (20, 20, 20, 20)
    default_clients = 4
    params = {"nu": option(0.01 / _PI, "viscosity ν", float, lo=0, lo_open=True),
              "n_interior": option(6000, f"interior collocation points {TOTAL_POINTS}", int, lo=1),
              "n_boundary": option(200, f"points of each boundary/initial condition, {TOTAL_POINTS}", int, lo=1)}
    conditions = [Dirichlet("x-", 0.0), Dirichlet("x+", 0.0), Initial(lambda x: -torch.sin(_PI * x[:, 0]))]

    def equation(self, u, x):
        v, G, H = u.jet(x)                # a scalar output: v, G [2] (x, t), H [2, 2]
        return G[1] + v * G[0] - self.nu * H[0, 0]

    def test_inputs(self):
        """256 × 100 points (x, t) on [−1, 1] × [0, 1] (the grid of Raissi et al.'s data set)."""
        xs = torch.linspace(-1.0, 1.0, 256, dtype=DTYPE)
        ts = torch.linspace(0.0, 1.0, 100, dtype=DTYPE)
        return torch.cartesian_prod(xs, ts)

    def reference(self):
        X = self.test_inputs()
        U = burgers_reference(X[:, 0].numpy(), X[:, 1].numpy(), self.nu)
        return X, torch.as_tensor(U, dtype=DTYPE)[:, None]
