"""A run stopped from outside (Ctrl-C, SIGTERM) keeps what it finished.

The round loop (:meth:`fedsciml.runtime.loop.Simulation.run`) and the centralized solvers turn a
``KeyboardInterrupt`` into an :class:`Interrupted` carrying ``partial = (θ, history rows, info)`` of the last
finished round or step (``info["stop_reason"] = info["stopped_by"] = "interrupted"``); the driver makes it a
:class:`~fedsciml.runtime.results.Result` (``Interrupted.result``), and the CLI writes it — ``result.json``, the
history, the model — before it exits 130 (SIGINT) or 143 (SIGTERM).  The checkpoint (``--checkpoint DIR``) is the
one written after that same round: the loop keeps the round whose checkpoint was written.  A run that a dead
site stopped (:class:`~fedsciml.runtime.loop.RoundFailed`) carries its partial result the same way
(``stop_reason = "failed"``).

:func:`terminate_as_interrupt` makes SIGTERM raise :class:`Interrupted` (as SIGINT raises ``KeyboardInterrupt``)
for the duration of a command; :func:`exit_status` is the shell's ``128 + signal``.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Any, Iterator

#: the ``stop_reason`` of a run stopped by a signal, and of one that a failure stopped after some rounds
INTERRUPTED = "interrupted"
FAILED = "failed"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a run.  ``signum``: the signal; ``partial``: ``(θ, rows, info)`` of the last
    finished round (``None`` before the first); ``result``: the :class:`Result` made of it (by the driver);
    ``kept``: what the CLI wrote of it (one line, for the message)."""

    def __init__(self, signum: int = signal.SIGINT, partial: Any = None):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)
        self.partial = partial
        self.result: Any = None
        self.kept = ""

    @classmethod
    def of(cls, e: BaseException) -> "Interrupted":
        """``e`` itself when it is one, else an :class:`Interrupted` for SIGINT (a plain ``KeyboardInterrupt``)."""
        return e if isinstance(e, Interrupted) else cls(signal.SIGINT)


def exit_status(e: BaseException) -> int:
    """``128 + signal``: 130 for Ctrl-C (and a plain ``KeyboardInterrupt``), 143 for SIGTERM."""
    return 128 + (e.signum if isinstance(e, Interrupted) else int(signal.SIGINT))


def _raise(signum: int, frame: Any) -> None:
    raise Interrupted(signum)


@contextmanager
def deferred() -> Iterator[None]:
    """A block that a signal does not cut in two (the round loop's checkpoint write and the round it keeps): a
    SIGINT/SIGTERM that arrives inside is raised as :class:`Interrupted` when the block ends.  Only in the main
    thread (where Python runs signal handlers); elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {}
    for s in (signal.SIGINT, signal.SIGTERM):
        h = signal.getsignal(s)
        if h is _raise or h is signal.default_int_handler:  # ours, or Python's Ctrl-C: held until the block ends
            old[s] = h
            signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if pending:
        raise Interrupted(pending[0])


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block (in the main thread; elsewhere a no-op), SIGTERM and SIGINT raise :class:`Interrupted`,
    so that a run stopped either way keeps its finished rounds; the handlers before are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        if old[s] in (signal.SIG_IGN,):  # a signal ignored by the caller (nohup, a job control shell) stays so
            continue
        signal.signal(s, _raise)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)
