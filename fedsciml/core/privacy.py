"""Differential privacy: Gaussian-mechanism calibration, accounting, clipping.

Calibration (the noise standard deviation for a target (ε, δ)):

* ``analytic`` (default) — the analytic Gaussian mechanism of Balle & Wang
  (ICML 2018, Theorem 8): ``f(x) + N(0, s²I)`` with L2 sensitivity Δ is
  (ε, δ)-DP **iff** ``Φ(Δ/2s − εs/Δ) − e^ε Φ(−Δ/2s − εs/Δ) ≤ δ``.  The
  left side decreases in s, so the smallest valid s is found by bisection.  It
  is exact for one release and valid for every ε > 0 (the classical formula
  is not).
* ``classical`` — ``s = Δ √(2 ln(1.25/δ)) / ε`` (Dwork & Roth 2014, Thm A.1),
  proved only for ε < 1; asking for it at ε ≥ 1 raises ValueError.  (The
  one-shot ridge paper's Algorithm 2 uses ``τ = √(2 ln(1.25/δ))`` and leaves
  ε and Δ out altogether; fedsciml does not reproduce that.)
* ``rdp`` / ``prv`` / ``gdp`` — Opacus's accountants (Rényi DP, privacy-loss
  random variables, Gaussian DP), for R compositions (``steps``) at a sampling
  rate; used by DP-FedAvg, whose noise is composed over rounds.  The noise is
  the smallest z (bisection, relative 1e-5) whose accounted ε is within budget;
  the RDP orders extend Opacus's defaults up to 16384 so that small ε at small
  δ is reachable.

:func:`epsilon_of` inverts any of them (the ε a given noise spends), which is
how the tests check the calibration: the analytic ε of the calibrated noise is
the target, Opacus's PRV accountant agrees to its discretization error, and
its RDP bound is never below it (RDP→(ε, δ) conversion is conservative).
"""
from __future__ import annotations

import contextlib
import math
import warnings

import torch

ACCOUNTANTS = ("rdp", "prv", "gdp")
METHODS = ("analytic", "classical") + ACCOUNTANTS


def _check(epsilon, delta):
    if not (epsilon > 0):
        raise ValueError(f"privacy budget epsilon must be > 0 (or inf for no privacy), got {epsilon}")
    if not (0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def analytic_delta(epsilon: float, noise_multiplier: float) -> float:
    """δ(ε) of the Gaussian mechanism with noise ``s = noise_multiplier·Δ`` (Balle & Wang 2018, Thm 8)."""
    from scipy.special import log_ndtr, ndtr

    z = float(noise_multiplier)
    if z <= 0:
        return 1.0
    a = 0.5 / z - epsilon * z
    b = -0.5 / z - epsilon * z
    return float(ndtr(a) - math.exp(min(epsilon + log_ndtr(b), 700.0)))


def _bisect(fn, lo, hi, iters=200, rel=1e-12):
    """Smallest x in [lo, hi] with fn(x) true, fn monotone false→true (geometric bisection)."""
    while not fn(hi):
        hi *= 2.0
        if hi > 1e12:
            raise ValueError("privacy calibration did not converge (noise above 1e12·Δ)")
    for _ in range(iters):
        mid = math.sqrt(lo * hi)
        if fn(mid):
            hi = mid
        else:
            lo = mid
        if hi / lo < 1 + rel:
            break
    return hi


def noise_multiplier(epsilon: float, delta: float, method: str = "analytic", steps: int = 1,
                     sample_rate: float = 1.0) -> float:
    """Noise standard deviation per unit of L2 sensitivity for (ε, δ)-DP after ``steps`` releases.

    ``epsilon = inf`` returns 0 (no noise).  See the module docstring for the methods.
    """
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; allowed: {', '.join(METHODS)}")
    if epsilon == math.inf:
        return 0.0
    _check(epsilon, delta)
    if int(steps) != steps or steps < 1:
        raise ValueError(f"steps (number of compositions) must be a positive integer, got {steps}")
    if not (0 < sample_rate <= 1):
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if method == "analytic":
        if steps != 1 or sample_rate != 1.0:
            raise ValueError("the analytic Gaussian mechanism calibrates one release; use method='rdp' or 'prv' "
                             "for compositions or subsampling")
        return _bisect(lambda z: analytic_delta(epsilon, z) <= delta, 1e-6, 1.0)
    if method == "classical":
        if epsilon >= 1:
            raise ValueError(f"the classical Gaussian-mechanism formula √(2 ln(1.25/δ))/ε holds only for ε < 1, "
                             f"got ε={epsilon}; use method='analytic'")
        if steps != 1:
            raise ValueError("the classical formula calibrates one release")
        return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    # smallest z whose accounted ε is within budget (ε decreases in z); a bisection of our own rather than
    # opacus.accountants.utils.get_noise_multiplier, whose RDP orders stop at 256 and cannot reach ε ≈ 0.1
    return _bisect(lambda z: epsilon_of(z, delta, method, steps, sample_rate) <= epsilon, 1e-3, 1.0, rel=1e-5)


# Opacus's default RDP orders extended upwards: small ε at small δ needs large orders α
RDP_ALPHAS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [2 ** k for k in range(6, 15)]


@contextlib.contextmanager
def _quiet():
    """Silence Opacus's advisory warnings (optimal RDP order at the grid edge, experimental GDP)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def epsilon_of(noise_mult: float, delta: float, method: str = "analytic", steps: int = 1,
               sample_rate: float = 1.0) -> float:
    """The ε spent by ``steps`` Gaussian releases of noise ``noise_mult·Δ`` at the given δ."""
    if noise_mult <= 0:
        return math.inf
    if not (0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if method == "analytic":
        if steps != 1 or sample_rate != 1.0:
            raise ValueError("the analytic Gaussian mechanism accounts for one release")
        if analytic_delta(0.0, noise_mult) <= delta:
            return 0.0
        return _bisect(lambda e: analytic_delta(e, noise_mult) <= delta, 1e-9, 1.0)
    if method == "classical":
        return math.sqrt(2.0 * math.log(1.25 / delta)) / noise_mult
    acc = make_accountant(method, noise_mult, steps, sample_rate)
    with _quiet():
        if method == "rdp":
            return float(acc.get_epsilon(delta=float(delta), alphas=RDP_ALPHAS))
        return float(acc.get_epsilon(delta=float(delta)))


def make_accountant(method: str, noise_mult: float, steps: int, sample_rate: float = 1.0):
    """An Opacus accountant (``rdp``, ``prv``, ``gdp``) that has seen ``steps`` Gaussian releases."""
    from opacus.accountants import GaussianAccountant, PRVAccountant, RDPAccountant

    cls = {"rdp": RDPAccountant, "prv": PRVAccountant, "gdp": GaussianAccountant}.get(method)
    if cls is None:
        raise ValueError(f"unknown accountant {method!r}; allowed: {', '.join(ACCOUNTANTS)}")
    acc = cls()
    acc.history = [(float(noise_mult), float(sample_rate), int(steps))]
    return acc


def clip_rows(A: torch.Tensor, b: torch.Tensor, c_a: float = 1.0, c_b: float = 1.0, mode: str = "scale"):
    """Bound every row: ``‖a_i‖₂ ≤ C_a`` and ``|b_i| ≤ C_b``.

    ``mode='scale'`` (default) multiplies the whole row ``(a_i, b_i)`` by
    ``min(1, C_a/‖a_i‖, C_b/|b_i|)``: a per-row reweighting that keeps the
    linear relation ``b ≈ aᵀw*`` (the ridge model stays consistent, only the
    effective sample weights change).  ``mode='separate'`` clips ``a_i`` and
    ``b_i`` independently (the paper's assumption read literally; biased when
    the bounds bind).
    """
    if not (c_a > 0 and c_b > 0):
        raise ValueError(f"clipping bounds must be > 0, got C_a={c_a}, C_b={c_b}")
    na = A.norm(dim=1).clamp_min(1e-300)
    if mode == "scale":
        f = torch.minimum(torch.clamp(c_a / na, max=1.0), torch.clamp(c_b / b.abs().clamp_min(1e-300), max=1.0))
        return A * f[:, None], b * f
    if mode == "separate":
        return A * torch.clamp(c_a / na, max=1.0)[:, None], b.clamp(-c_b, c_b)
    raise ValueError(f"clipping mode must be 'scale' or 'separate', got {mode!r}")


def shrink_factors(A: torch.Tensor, b: torch.Tensor, c_a: float, c_b: float) -> torch.Tensor:
    """How much clipping at ``(C_a, C_b)`` shrinks each row: ``max(1, ‖a_i‖/C_a, |b_i|/C_b)``."""
    one = torch.ones((), dtype=A.dtype, device=A.device)
    return torch.maximum(torch.maximum(A.norm(dim=1) / c_a, b.abs() / c_b), one)


def check_clip_scale(A: torch.Tensor, b: torch.Tensor, c_a: float, c_b: float, max_shrink: float | None,
                     who: str = "this site") -> None:
    """A site's own check of the clip bounds against its rows, before it clips them: when clipping would
    shrink the median row by more than ``max_shrink``, the DP statistics would describe the bounds rather
    than the data (raw diabetes rows at C_a = 1 shrink ~300×), so the site refuses in one line naming the fix.
    The check reads only the site's own rows; the refusal itself tells the server one bit (the data's scale
    is far above the bounds), outside ε, before anything is released."""
    if max_shrink is None or A.shape[0] == 0:
        return
    import numpy as np

    f = float(np.median(shrink_factors(A, b, c_a, c_b).detach().cpu().numpy()))
    if f > max_shrink:
        raise ValueError(
            f"{who}: clipping at dp_clip_a={c_a:g}, dp_clip_b={c_b:g} would shrink its median row {f:.3g}× (more "
            f"than dp_max_shrink={max_shrink:g}×), so its DP statistics would describe the clip, not the data; "
            f"scale features and target with public constants first (known ranges or units: this releases "
            f"nothing), or set the clip bounds to the data's scale; federated standardization "
            f"(docs/flower-sites.md) also works but releases every site's feature means and variances outside ε")


def clip_by_norm(x: torch.Tensor, c: float) -> torch.Tensor:
    """Rows of ``x`` (``[..., p]``) scaled to L2 norm ≤ c."""
    if not c > 0:
        raise ValueError(f"clip norm must be > 0, got {c}")
    n = x.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    return x * torch.clamp(c / n, max=1.0)
