"""The strategy protocol: what a federated method declares to the round loop.

Shaped like Flower's ``Strategy``: the loop owns the transport, client
sampling, dropout, validation, rejection logging, checkpoints and the
counters; a strategy only *configures* each exchange — which clients, which
:class:`~fedsciml.runtime.transport.Request` — and *aggregates* the
validated replies into the next global state.

A round is, by default (:meth:`Strategy.round`), one exchange::

    ex = strategy.configure_round(run, k)      # Exchange(clients, request, validate) or None
    replies = run.exchange(ex)                 # the loop: dropout, transport, hook, validation, accounting
    extra = strategy.aggregate_round(run, k, replies)   # new θ; returns history fields

A method whose round needs several exchanges (an LM iteration asks for the
losses at a trial point, then — if accepted — for the statistics there, and
repeats a request until every client answered) overrides :meth:`round` and
calls ``run.exchange`` once per exchange; it still never touches the loop's
internals.  What a strategy may use of the loop (``run``) is :class:`RoundContext`, a typed protocol that
:class:`~fedsciml.runtime.loop.Simulation` implements (mypy checks it where the loop hands itself to a strategy).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, NoReturn, Protocol

import torch

from fedsciml.runtime.protocol import Request

if TYPE_CHECKING:
    from fedsciml.runtime.transport import Transport


@dataclass
class Exchange:
    """One request to some clients.

    ``validate(messages) -> (accepted, rejected)`` is the server-side schema
    check (e.g. :meth:`~fedsciml.methods.aggregators.Aggregator.validate`);
    ``down_floats`` overrides the floats counted as sent to each client
    (default: the request's tensors); ``dropout`` says whether the loop's
    dropout applies to these clients (``False`` when they were already drawn
    by :meth:`~fedsciml.runtime.loop.Simulation.sample`).
    """

    clients: list
    request: Request
    validate: Callable
    down_floats: int | None = None
    dropout: bool = False


@dataclass
class Replies:
    """The validated outcome of one exchange (client id → …)."""

    ok: dict = field(default_factory=dict)         # accepted messages
    rejected: dict = field(default_factory=dict)   # reasons (schema, or the client failed)
    dropped: list = field(default_factory=list)    # clients that did not answer (dropout)
    metrics: dict = field(default_factory=dict)    # history-only numbers from accepted clients
    asked: list = field(default_factory=list)      # clients that were asked (after dropout)


class RoundContext(Protocol):
    """What a strategy may ask of the round loop (its ``run`` argument): the whole surface, typed.

    ``client_ids`` every client of the run, ``n_total`` their residuals in all, ``round_index`` the round under
    way, ``transport`` what carries the requests (read its ``sample_counts``; never ask it directly: exchanges go
    through :meth:`exchange`, which drops out, validates, counts and logs).  The loop's counters and history are
    not part of it."""

    client_ids: list
    n_total: int
    round_index: int

    @property
    def transport(self) -> Transport: ...

    @property
    def round_floats(self) -> int:
        """Floats sent so far in the current round (up and down)."""
        ...

    def sample(self) -> tuple[list, list]:
        """``(answering, dropped)`` client ids for one round: participation, then dropout (seeded)."""
        ...

    def drop_out(self, client_ids) -> tuple[list, list]:
        """Split ``client_ids`` into ``(answering, dropped)`` with the dropout probability (seeded)."""
        ...

    def exchange(self, ex: Exchange) -> Replies:
        """Ask ``ex.clients``, validate, count and log; the validated replies."""
        ...

    def count_sent(self, down: int = 0, up: int = 0) -> None:
        """Count floats sent outside an exchange (e.g. the broadcast of θ₀)."""
        ...

    def reject(self, client, reason: str) -> None:
        """Record a client the strategy leaves out (e.g. screened out), with its reason, as the loop records a
        rejected message."""
        ...

    def skip_round(self) -> None:
        """The round had nobody to ask (every sampled client dropped out)."""
        ...

    def time_left(self) -> float | None:
        """Seconds of the budget left (``None`` without a budget)."""
        ...

    def out_of_time(self) -> bool:
        """The budget is spent (or a callback asked the run to stop)."""
        ...

    def fail(self, what: str) -> NoReturn:
        """End the run: no valid client message remained for ``what`` (raises, naming what happened)."""
        ...


class Strategy(ABC):
    """A federated method's server logic (see the module docstring).

    State the loop reads: ``theta`` (current global parameters) and
    ``loss_sum`` (global ½‖r‖² at ``theta`` when the strategy knows it, else
    ``None`` and the loop measures it for the history, clock paused).
    """

    name = "strategy"
    theta: torch.Tensor | None = None
    loss_sum: float | None = None
    #: set by :class:`~fedsciml.runtime.resample.ResamplingStrategy` before each round: the clients' points change
    #: after this round, so state only the next round would use need not be measured (gn skips the statistics of
    #: an accepted trial); strategies that measure nothing ahead ignore it
    points_expire: bool = False

    def start(self, run: RoundContext, theta0: torch.Tensor) -> dict:
        """Round 0: set the initial state (may exchange with clients); returns history fields."""
        self.theta = theta0.detach().clone()
        return {}

    def configure_round(self, run: RoundContext, k: int) -> Exchange | None:
        """Which clients are asked what in round ``k`` (``None``: skip the round)."""
        raise NotImplementedError(f"{type(self).__name__} overrides round() instead")

    def aggregate_round(self, run: RoundContext, k: int, replies: Replies) -> dict:
        """Fold the validated replies into the next state; returns history fields."""
        raise NotImplementedError(f"{type(self).__name__} overrides round() instead")

    def round(self, run: RoundContext, k: int) -> dict:
        """One communication round: configure, exchange, aggregate."""
        ex = self.configure_round(run, k)
        if ex is None:
            run.skip_round()
            return {"skipped": True}
        return self.aggregate_round(run, k, run.exchange(ex))

    def finished(self, run: RoundContext) -> str | None:
        """A reason to stop before the loop's own limits (or ``None``)."""
        return None

    def resampled(self, run: RoundContext) -> dict:
        """The clients hold fresh collocation points (``resample``): re-measure whatever state refers to the
        old ones (may exchange); returns history fields.  Default: nothing (the next round asks afresh)."""
        return {}

    def finalize(self, run: RoundContext) -> None:
        """After the last round (e.g. verify a last, unchecked step); may exchange and change ``theta``."""

    @abstractmethod
    def state_dict(self) -> dict:
        """Everything the next round depends on (tensors, numbers, strings, lists, dicts)."""

    @abstractmethod
    def load_state_dict(self, d: dict) -> None:
        ...

    def check_restored(self, round_index: int) -> None:
        """After :meth:`load_state_dict` from a checkpoint at ``round_index``: refuse (a
        :class:`~fedsciml.runtime.checkpoint.CheckpointError` naming the field) state that this run could not
        have written; the round loop names the checkpoint (and has checked θ).  Default: nothing more."""

    @abstractmethod
    def summary(self) -> dict:
        """The strategy's settings (plain values), recorded with the results."""

    def info(self) -> dict:
        """Counters for the result's ``extra`` (e.g. accepted/rejected steps)."""
        return {}
