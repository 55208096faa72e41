"""Collocation resampling (``resample=K``, every method): fresh collocation points every K steps or rounds.

Problems that sample their collocation points (``samples_collocation``: the PINN problems, among them
:class:`~fedsciml.problems.domain.DomainPDE`) draw them with their own sampler (``sampling``: Latin
hypercube by default) from a seed.  Resample ``j`` (j = 1, 2, … after K, 2K, … steps or rounds) builds
every client's objective again from :func:`resample_seed` ``(seed, j)`` — a reproducible function of the
run seed and j (same seed: same points; every resample: different points; j = 0 are the run's own points).

* centralized (``lm``, ``adam``, ``lbfgs``): the pooled objective is replaced; LM takes the Gauss–Newton
  statistics at the current θ on the new points (its damping μ and SPRING direction carry over), L-BFGS
  forgets its curvature pairs (they belong to the old function), Adam keeps its moments.
* federated: :class:`ResamplingStrategy` replaces each client's objective in the in-process transport
  before round ``jK + 1`` and asks the strategy to :meth:`~fedsciml.runtime.strategy.Strategy.resampled`
  (gn gathers its statistics at θ again, FIPA's safeguard its reference loss — each an exchange, counted).
  Statistics that only the step after a resample would use are not formed: centralized LM and gn accept
  the last trial before a resample on its loss alone (:func:`fedsciml.core.lm.deferred_stats`), so with
  ``resample=1`` each step forms one Jacobian (gn: one statistics exchange), not two.
  In a real deployment each site draws its own points from the same seed; the Flower engine does not
  offer it (one clear error).

Growing batches (``grow=F``, ``grow_every=E``, ``grow_cap=C``; :class:`Growth`): the points drawn at resample j
(after step or round jK) are ``n_k = min(C, round(n_0·F^⌊jK/E⌋))`` interior points in total (the problem's
``n_interior`` option; a ``n_boundary`` option grows by the same factor), so the error is not floored by one
point set and early steps stay cheap — collocation that converges.  Without ``grow`` the code path
is the one before (the same bits).

The history rows carry ``resample`` (the index j of the points in use) from the first resample on, and
``points`` (interior points in total) once the points have grown.  Where
the round loop measures a row's monitoring loss on the next round's exchange at the same θ (FIPA, FedAvg:
:mod:`fedsciml.runtime.loop`), the row just before a resample reports the loss at its θ on the new points.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from fedsciml.runtime.strategy import Strategy
from fedsciml.runtime.transport import BytesTransport, LocalTransport
from fedsciml.runtime.client import Client
from fedsciml.runtime.memory import grown  # noqa: F401  (re-exported: its home before)

RESAMPLE_TAG = 0x5E5A  # keeps resample seeds apart from the run seeds themselves


def resample_seed(seed: int, j: int) -> int:
    """The seed of resample ``j`` of a run with ``seed`` (j ≥ 1): ``SeedSequence([seed, 0x5E5A, j])``'s first
    32-bit word — the same for the same (seed, j), different for different j."""
    if j < 1:
        raise ValueError(f"resample index must be ≥ 1 (0 is the run's own points), got {j}")
    return int(np.random.SeedSequence([int(seed), RESAMPLE_TAG, int(j)]).generate_state(1)[0])


def check_resample(problem: Any, every: int | None) -> None:
    """One line when ``resample`` is asked of a problem that has no collocation points to draw."""
    if every is not None and not getattr(problem, "samples_collocation", False):
        raise ValueError(f"resample={every}: problem {getattr(problem, 'name', problem)!r} has fixed data, not "
                         "sampled collocation points; resampling applies to the PINN problems")


@dataclass(frozen=True)
class Growth:
    """Growing batches: ``factor`` > 1 every ``every`` steps or rounds, up to ``cap`` interior points in total."""

    factor: float
    every: int
    cap: int | None = None

    def __post_init__(self):
        if not self.factor > 1 or not math.isfinite(self.factor):
            raise ValueError(f"the growth factor must be a finite number > 1, got {self.factor}")
        if int(self.every) != self.every or self.every < 1:
            raise ValueError(f"grow_every must be an integer ≥ 1 (steps or rounds), got {self.every}")
        if self.cap is not None and self.cap < 1:
            raise ValueError(f"grow_cap must be ≥ 1 interior point, got {self.cap}")

    def points(self, n0: int, step: int) -> int:
        """Interior points (in total) of points drawn after ``step`` steps or rounds: ``min(cap, n0·F^⌊step/E⌋)``."""
        k = max(0, int(step)) // int(self.every)
        cap = self.cap if self.cap is not None else math.inf
        if n0 >= cap or k == 0:
            return int(n0)
        log_n = math.log(max(int(n0), 1)) + k * math.log(self.factor)  # in logs: 1e308² overflows a float
        if log_n >= math.log(cap):
            return int(cap)
        if log_n > math.log(2.0**62):
            raise ValueError(f"the growth factor {self.factor:g} reaches more than 2**62 interior points in total "
                             f"after {step} steps or rounds; give grow_cap")
        return int(round(math.exp(log_n)))

    @classmethod
    def of(cls, config: Any) -> "Growth | None":
        """The growth a method configuration asks for (``grow``, ``grow_every``, ``grow_cap``), or ``None``."""
        factor = getattr(config, "grow", None)
        return None if factor is None else cls(float(factor), int(config.grow_every), config.grow_cap)


def resampled_objectives(problem: Any, n_clients: int, seed: int, j: int, device: Any,
                         growth: Growth | None = None, every: int = 1) -> list:
    """Every client's objective on the points of resample ``j`` (drawn after ``j·every`` steps or rounds; with
    ``growth``, ``growth.points(n_interior, j·every)`` interior points in total)."""
    if growth is not None:
        problem = grown(problem, growth.points(int(problem.options["n_interior"]), j * every))
    return problem.client_objectives(n_clients, seed=resample_seed(seed, j), device=device)


class ResamplingStrategy(Strategy):
    """``inner`` with the clients' collocation points drawn afresh before rounds K+1, 2K+1, … (module docstring).

    Delegates every call to ``inner``; ``make_objectives(j)`` gives the clients' objectives of resample j.
    """

    def __init__(self, inner: Strategy, every: int, make_objectives: Callable[[int], list]):
        if every < 1:
            raise ValueError(f"resample must be ≥ 1 (steps or rounds between draws), got {every}")
        self.inner = inner
        self.every = int(every)
        self.make_objectives = make_objectives
        self.index = 0  # the resample whose points the strategy's state refers to (checkpointed)
        self._held = 0  # the resample whose points the clients in this process hold (0 after a resume too)
        self.name = inner.name

    @property
    def theta(self):  # type: ignore[override]  # the inner strategy's (Strategy declares a plain attribute)
        return self.inner.theta

    @property
    def loss_sum(self):  # type: ignore[override]
        return self.inner.loss_sum

    def start(self, run, theta0):
        return self.inner.start(run, theta0)

    def _swap(self, run, j: int) -> None:
        transport = run.transport
        local = transport.inner if isinstance(transport, BytesTransport) else transport
        if not isinstance(local, LocalTransport):
            raise ValueError(f"resample needs the clients in this process (transport local or bytes); "
                             f"{type(transport).__name__}'s clients draw their own points")
        objectives = self.make_objectives(j)
        local.replace_clients([Client(cid, objectives[i]) for i, cid in enumerate(local.client_ids)])
        self._held = j

    def round(self, run, k):
        j = (k - 1) // self.every
        extra: dict = {}
        if j != self._held:
            self._swap(run, j)
        if j > self.index:  # new points: the strategy's state at θ is measured on them again
            self.index = j
            extra = self.inner.resampled(run) or {}
        self.inner.points_expire = k % self.every == 0  # gn: no statistics at a point the next round re-measures
        out = self.inner.round(run, k) or {}
        return {**extra, **out, **({"resample": self.index} if self.index else {})}

    def finished(self, run):
        return self.inner.finished(run)

    def finalize(self, run):
        return self.inner.finalize(run)

    def state_dict(self):
        return {"inner": self.inner.state_dict(), "resample": self.index}

    def load_state_dict(self, d):
        from fedsciml.runtime import checkpoint as ckpt

        self.inner.load_state_dict(d["inner"])
        self.index = ckpt.restored_number(d, "resample", lo=0, integer=True, optional=True, default=0)

    def check_restored(self, round_index):
        self.inner.check_restored(round_index)
        from fedsciml.runtime import checkpoint as ckpt

        most = round_index // max(1, int(self.every)) + 1  # one resample every `every` rounds at most
        if self.index > most:
            raise ckpt.CheckpointError(f"state field 'resample' = {self.index} is more than the {most} resamples "
                                       f"{round_index} rounds can have made")

    def summary(self):
        return {**self.inner.summary(), "resample": self.every}

    def info(self):
        return {**self.inner.info(), "resamples": self.index}

