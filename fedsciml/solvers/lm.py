"""Levenberg–Marquardt as a state machine fed with Gauss–Newton statistics.

The same object drives the centralized solver (statistics of the pooled data)
and federated exact Gauss–Newton (statistics summed over clients), so their
iterates agree to round-off by construction: the server never needs the data,
only ``loss`` at each trial point and ``(JᵀJ, Jᵀr)`` at accepted points.

Damping follows Madsen, Nielsen & Tingleff (2004), *Methods for non-linear
least squares problems*, §3.2: ``μ₀ = τ·max diag(JᵀJ)``, gain ratio
``ρ = (F(θ) − F(θ+δ)) / (½δᵀ(μδ − g))``, on success
``μ ← μ·max(⅓, 1 − (2ρ−1)³)``, on failure ``μ ← μν, ν ← 2ν``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fedsciml import linalg
from fedsciml.objective import GNStats


@dataclass
class LMConfig:
    tau: float = 1e-3          # initial damping relative to max diag(JᵀJ)
    mu_min: float = 1e-20      # absolute floor (float64 round-off territory)
    mu_max: float = 1e20
    accept_ratio: float = 0.0  # accept a step when ρ > accept_ratio

    def validate(self):
        if not self.tau > 0:
            raise ValueError(f"LM tau must be > 0, got {self.tau}")


class LevenbergMarquardt:
    """Drive with :meth:`start` once, then alternate :meth:`propose` / :meth:`observe`."""

    def __init__(self, config: LMConfig | None = None):
        self.cfg = config or LMConfig()
        self.cfg.validate()
        self.theta = None
        self.stats: GNStats | None = None
        self.mu = None
        self.nu = 2.0
        self.accepted_steps = 0
        self.rejected_steps = 0
        self._trial = None
        self._pred = None

    @property
    def loss(self) -> float:
        return float(self.stats.loss)

    def start(self, theta: torch.Tensor, stats: GNStats):
        self.theta = theta.detach().clone()
        self.stats = stats
        self.mu = self.cfg.tau * float(stats.H.diagonal().max().clamp_min(1e-300))

    def propose(self) -> torch.Tensor:
        """Next trial point ``θ + δ``, ``(H + μI) δ = −g``; raises the damping until H + μI factorizes."""
        H, g = self.stats.H, self.stats.g
        while True:
            try:
                delta = -linalg.damped_solve(H, g, self.mu)
                break
            except linalg.NotPositiveDefinite:
                self.mu = min(self.cfg.mu_max, max(self.mu * 10.0, 1e-12))
                if self.mu >= self.cfg.mu_max:
                    raise
        if not bool(torch.isfinite(delta).all()):
            raise FloatingPointError("non-finite LM step; the problem is badly scaled")
        self._pred = float(0.5 * (delta @ (self.mu * delta - g)))
        self._trial = self.theta + delta
        self.last_step_norm = float(delta.norm())
        return self._trial

    def observe(self, trial_loss: float, stats_fn: Callable[[], GNStats]) -> bool:
        """Accept or reject the last trial from its loss; ``stats_fn()`` gives its statistics if accepted."""
        if self._trial is None:
            raise RuntimeError("observe() called before propose()")
        trial_loss = float(trial_loss)
        gain = self.loss - trial_loss
        rho = gain / self._pred if self._pred > 0 else -1.0
        accepted = bool(rho > self.cfg.accept_ratio and trial_loss == trial_loss)
        if accepted:
            self.theta = self._trial
            self.stats = stats_fn()
            self.mu = max(self.cfg.mu_min, self.mu * max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3))
            self.nu = 2.0
            self.accepted_steps += 1
        else:
            self.mu = min(self.cfg.mu_max, self.mu * self.nu)
            self.nu *= 2.0
            self.rejected_steps += 1
        self._trial = None
        return accepted
