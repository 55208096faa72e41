"""The FIPA paper's 1D nonlinear elliptic problems on [0, 1]: ``−u″ + G(u) = f``.

Dirichlet values at 0 and 1 are taken from the exact solution.
"""
from __future__ import annotations

import functools
import math

import torch

from fedsciml.options import option

from .base import ProblemError
from .pinn import PDE1D, pinn_params
from .registry import register

_PI = math.pi


@functools.cache
def _bratu_critical() -> tuple[float, float]:
    """(θ_c, λ_c): the fold of θ = √(2λ)·cosh(θ/4), where (θ/4)·tanh(θ/4) = 1."""
    from scipy.optimize import brentq  # imported when a Bratu problem is built, not with the registry (~0.3 s)

    s = brentq(lambda s: s * math.tanh(s) - 1.0, 0.5, 3.0, xtol=1e-15)
    theta_c = 4.0 * s
    return theta_c, theta_c ** 2 / (2.0 * math.cosh(s) ** 2)


def __getattr__(name: str) -> float:
    """``BRATU_THETA_C`` (4.798714560…) and ``BRATU_LAMBDA_C`` (3.513830719…), computed on first use."""
    if name == "BRATU_THETA_C":
        return _bratu_critical()[0]
    if name == "BRATU_LAMBDA_C":
        return _bratu_critical()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def bratu_theta(lam: float) -> float:
    """Lower-branch root of ``θ = √(2λ) cosh(θ/4)`` for 0 < λ < λ_c."""
    from scipy.optimize import brentq

    theta_c, lambda_c = _bratu_critical()
    if not 0.0 < lam < lambda_c:
        raise ProblemError(
            f"Bratu parameter lam={lam} has no (lower-branch) solution: it must satisfy 0 < lam < λ_c = {lambda_c:.9f}"
        )
    return brentq(lambda t: t - math.sqrt(2.0 * lam) * math.cosh(t / 4.0), 0.0, theta_c, xtol=1e-15, rtol=1e-15)


@register
class Bratu(PDE1D):
    """``−u″ = λ eᵘ``, u(0) = u(1) = 0 (classical), or the FIPA paper's
    manufactured variant ``−u″ − λeᵘ = f`` with ``u = x(1−x)``."""

    name = "bratu"
    description = "1D Bratu −u″ = λeᵘ, closed-form lower branch (variant: manufactured u = x(1−x))"
    params = {
        "lam": option(1.0, "λ; the classical problem needs 0 < λ < λ_c ≈ 3.513830719", float),
        "variant": option("classical", "classical | manufactured", str, choices=("classical", "manufactured")),
        **pinn_params(400, 10.0),
    }

    def _check(self):
        if self.variant == "classical":
            self.__dict__["theta_bratu"] = bratu_theta(self.lam)
        elif not math.isfinite(self.lam):
            raise ProblemError(f"lam must be finite, got {self.lam}")

    def reaction(self, u, x):
        return -self.lam * torch.exp(u)

    def exact(self, x):
        x = x[..., 0]
        if self.variant == "manufactured":
            return x * (1.0 - x)
        t = self.theta_bratu
        return -2.0 * torch.log(torch.cosh((x - 0.5) * t / 2.0) / math.cosh(t / 4.0))

    def source(self, x):
        x = x[..., 0]
        if self.variant == "manufactured":
            return 2.0 - self.lam * torch.exp(x * (1.0 - x))
        return torch.zeros_like(x)


@register
class AllenCahn(PDE1D):
    name = "allen-cahn"
    description = "1D Allen–Cahn −u″ + u³ − u = f, u = sin πx"
    params = pinn_params(400, 10.0)

    def reaction(self, u, x):
        return u ** 3 - u

    def exact(self, x):
        return torch.sin(_PI * x[..., 0])

    def source(self, x):
        s = torch.sin(_PI * x[..., 0])
        return _PI ** 2 * s + s ** 3 - s


@register
class Fisher(PDE1D):
    """Fisher–KPP ``−u″ − ρu(1−u) = f``; variant ``paper-code`` uses ``+ρu(1−u)``
    as the FIPA reference implementation does."""

    name = "fisher"
    description = "1D Fisher–KPP −u″ − ρu(1−u) = f, u = x²(1−x) (variant paper-code: +ρu(1−u))"
    params = {
        "rho": option(1.0, "reaction rate ρ", float, lo=0, lo_open=True),
        "variant": option("standard", "standard (−ρu(1−u)) | paper-code (+ρu(1−u))", str, choices=("standard", "paper-code")),
        **pinn_params(400, 10.0),
    }

    @property
    def _sign(self):
        return -1.0 if self.variant == "standard" else 1.0

    def reaction(self, u, x):
        return self._sign * self.rho * u * (1.0 - u)

    def exact(self, x):
        x = x[..., 0]
        return x ** 2 * (1.0 - x)

    def source(self, x):
        x = x[..., 0]
        u = x ** 2 * (1.0 - x)
        return -(2.0 - 6.0 * x) + self._sign * self.rho * u * (1.0 - u)


@register
class ReactionDiffusion(PDE1D):
    name = "reaction-diffusion"
    description = "1D reaction–diffusion −u″ + u² = f, u = sin 2πx"
    params = pinn_params(800, 100.0)

    def reaction(self, u, x):
        return u ** 2

    def exact(self, x):
        return torch.sin(2 * _PI * x[..., 0])

    def source(self, x):
        s = torch.sin(2 * _PI * x[..., 0])
        return 4 * _PI ** 2 * s + s ** 2
