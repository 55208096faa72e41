"""The plain-data protocol between the round loop and the clients: a :class:`Request` down, a :class:`Reply`
or a :class:`Failure` back (see :mod:`fedsciml.runtime.transport` for who carries them)."""
from __future__ import annotations

from dataclasses import dataclass, field

#: A request config flag, and the name of the reply metric that answers it: "also report your loss
#: ½‖r_m‖² at this request's θ" (the round loop's monitoring loss riding on another exchange; see
#: :mod:`fedsciml.runtime.loop`).  The client computes it with its own ``loss`` handler, as a separate
#: ``loss`` query would (:func:`fedsciml.runtime.client.dispatch`).
MONITOR = "monitor_loss"


@dataclass(frozen=True)
class Request:
    """What the server asks: a query name, tensors and plain config values."""

    query: str
    tensors: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    @property
    def floats(self) -> int:
        """Scalars the request carries down to one client."""
        return int(sum(t.numel() for t in self.tensors.values()))


@dataclass(frozen=True)
class Reply:
    """A client's answer: the message (validated, aggregated, counted) and history-only metrics."""

    message: dict
    metrics: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Failure:
    """The client could not answer; ``reason`` says why.

    ``dropped=False``: the client answered with an error (logged as a rejection).
    ``dropped=True``: nothing came back (the node is gone or timed out): the loop
    treats the client as dropped out for that exchange (logged in ``info["unanswered"]``).
    """

    reason: str
    dropped: bool = False
