"""Wall-clock accounting, per-step history and progress reporting shared by every solver.

Progress (``progress=True``) goes through :mod:`logging` — the library never prints.  Every ``every`` steps
a line goes to the logger ``fedsciml.progress`` at INFO; where the process's stderr is a terminal and the
application asked for bars (:func:`use_progress_bars`, as the CLI does) a ``tqdm`` bar over the steps
replaces those lines, so a log file gets plain lines and a person at a terminal gets a bar.
"""
from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

log = logging.getLogger("fedsciml.progress")
_BARS = {"on": False, "loops": True}


def use_progress_bars(on: bool = True) -> None:
    """Show a ``tqdm`` bar instead of progress lines when stderr is a terminal (the CLI turns this on)."""
    _BARS["on"] = bool(on)


@contextmanager
def loop_progress(on: bool = True):
    """Within the block, :class:`Progress` shows (``on``) or keeps silent (a command's ``--quiet``: no progress
    lines, no bars, whatever the loop's length)."""
    before, _BARS["loops"] = _BARS["loops"], bool(on)
    try:
        yield
    finally:
        _BARS["loops"] = before


@contextmanager
def show_progress(on: bool = True):
    """What ``fs.solve(..., progress=True)`` does around a run: a ``tqdm`` bar where stderr is a terminal,
    else the progress lines of the logger ``fedsciml.progress`` — at INFO for the run (if the logger's
    effective level is higher), and to stderr through a handler added for the run when the application has
    configured no logging at all (``logging.getLogger("fedsciml.progress").hasHandlers()`` is false), so a
    plain script sees them.  An application that configured logging gets the lines through its own
    handlers.  ``on=False``: nothing changes."""
    if not on:
        yield
        return
    before, _BARS["on"] = _BARS["on"], True
    level = log.level
    handler = None
    if log.getEffectiveLevel() > logging.INFO:
        log.setLevel(logging.INFO)
    if not log.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[fedsciml] %(message)s"))
        log.addHandler(handler)
    try:
        yield
    finally:
        _BARS["on"] = before
        log.setLevel(level)
        if handler is not None:
            log.removeHandler(handler)


def _bar(total, label, budget=None):
    """A bar over ``total`` steps; with only a ``budget`` (seconds), a bar over the budget's seconds (its ETA
    is the budget's end) with the step count beside it."""
    if not (_BARS["on"] and sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    if total is None and budget is not None:
        return tqdm(total=float(budget), desc=label or "steps", unit="s", leave=False, file=sys.stderr,
                    dynamic_ncols=True,
                    bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s of budget [{elapsed}<{remaining}{postfix}]")
    return tqdm(total=total, desc=label or "steps", unit="step", leave=False, file=sys.stderr, dynamic_ncols=True)


class Progress:
    """Progress over ``total`` steps of one long loop (a client's local steps, an image client's training epochs).

    Where bars are on (:func:`use_progress_bars`) and stderr is a terminal: a ``tqdm`` bar that appears only once
    the loop has run ``delay`` seconds (short loops stay silent) and goes away when it ends.  Otherwise a line to
    the logger ``fedsciml.progress`` at INFO each ``log_every`` seconds while the loop runs (none for a loop
    shorter than that), so a log file shows that a long loop is alive.  Costs a clock read per step.  Silent
    within :func:`loop_progress` ``(False)`` (the commands' ``--quiet``)."""

    def __init__(self, total: int, label: str, *, unit: str = "step", delay: float = 1.0, log_every: float = 30.0):
        self.total, self.label, self.unit, self.n = int(total), label, unit, 0
        self.log_every = float(log_every)
        self._t0 = self._last = time.perf_counter()
        self._bar = None
        self._silent = not _BARS["loops"]  # within loop_progress(False): count only
        if _BARS["on"] and not self._silent and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, desc=label, unit=unit, leave=False, file=sys.stderr,
                             dynamic_ncols=True, delay=delay)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)
            return
        if self._silent:
            return
        now = time.perf_counter()
        if now - self._last >= self.log_every:
            self._last = now
            log.info("  %s: %d/%d %ss (%.0f s)", self.label, self.n, self.total, self.unit, now - self._t0)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


CLOCKS = {"wall": "perf_counter", "cpu": "process_time"}  # the ``time`` function each clock reads


class Recorder:
    """Collects history rows; the clock excludes time spent evaluating test metrics.

    ``budget`` (seconds) is checked against the same clock, so a time budget
    buys the same amount of optimization whatever the evaluation costs.
    ``clock``: ``"wall"`` (elapsed seconds, ``time.perf_counter``) or ``"cpu"``
    (this process's CPU seconds, ``time.process_time``, every thread's): at one
    thread, a budget and ``time_s`` that other processes on a loaded machine
    do not shorten.  ``cpu_elsewhere``: with ``clock="cpu"``, a function giving the CPU seconds spent so far
    by clients in other processes (:meth:`fedsciml.runtime.transport.Transport.cpu_seconds`), added to this
    process's.
    """

    def __init__(self, evaluate, n_residuals: int, budget: float | None = None,
                 progress: bool = False, every: int = 1, label: str = "", total: int | None = None,
                 clock: str = "wall", cpu_elsewhere=None):
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
        self.clock = clock
        own = getattr(time, CLOCKS[clock])
        # clock cpu with clients in other processes: their CPU seconds so far (cpu_elsewhere()) count too
        self._now = own if clock != "cpu" or cpu_elsewhere is None else (lambda: own() + float(cpu_elsewhere()))
        self.evaluate = evaluate
        self.n_residuals = max(1, int(n_residuals))
        self.budget = budget
        self.progress = progress
        self.every = max(1, int(every))
        self.label = label
        self.rows: list[dict] = []
        self.floats_sent = 0
        self.exchanges: int | None = None  # exchanges so far (a federated run's loop sets it; None: no column)
        self._t0 = self._now()
        self._paused = 0.0
        from fedsciml.runtime import callbacks as _cb

        self.callbacks = _cb.active()   # fs.solve(..., callbacks=[...]): called after each row
        _cb.start_run(self.callbacks)   # a callback reused across runs starts each one afresh
        self.stop_reason: str | None = None  # set when a callback asks the run to stop
        self._thetas: dict[int, torch.Tensor] = {}
        self.last_theta: torch.Tensor | None = None  # θ of the last row recorded  # row id → θ copy, for the callbacks (only when there are any)
        self._bar = _bar(total, label, budget) if progress else None
        self._bar_seconds = self._bar is not None and total is None and budget is not None

    def elapsed(self) -> float:
        return self._now() - self._t0 - self._paused

    @contextmanager
    def paused(self):
        """A block whose time is not solver time (monitoring, checkpoint writing)."""
        t = self._now()
        try:
            yield
        finally:
            self._paused += self._now() - t

    def credit(self, seconds: float):
        """Count ``seconds`` already spent (a resumed run: the clock and the budget continue)."""
        self._t0 -= float(seconds)

    def time_left(self) -> float | None:
        """Seconds of the budget left (``None`` without a budget)."""
        return None if self.budget is None else max(0.0, self.budget - self.elapsed())

    def out_of_time(self) -> bool:
        """The budget is spent — or a callback asked the run to stop (:attr:`stop_reason` says which)."""
        return self.stop_reason is not None or (self.budget is not None and self.elapsed() >= self.budget)

    def record(self, step: int, theta, loss_sum: float | None, **extra) -> dict:
        """Evaluate the test metrics at ``theta`` and append a row.

        ``loss_sum`` is ½‖r‖² over all clients; it is stored as the mean ½‖r‖²/N.  ``None``: not known yet
        (the clients report it with their next answer): the row's ``loss`` is ``None`` until :meth:`fill`,
        which also reports the row's progress.
        """
        t = self.elapsed()
        with self.paused():
            metrics = self.evaluate(theta)
        loss = None if loss_sum is None else float(loss_sum) / self.n_residuals
        row = {"step": int(step), "time_s": t, "loss": loss, **metrics, "floats_sent": int(self.floats_sent),
               **({} if self.exchanges is None else {"exchanges_total": int(self.exchanges)}), **extra}
        self.rows.append(row)
        if theta is not None:  # what an interrupted run keeps (fedsciml.runtime.interrupt): p floats, not a copy per row
            self.last_theta = theta.detach().clone()
        if self.callbacks and theta is not None:
            self._thetas[id(row)] = theta.detach().clone()
        if loss is not None:
            self._report(row, metrics)
        return row

    def fill(self, row: dict, loss_sum: float, **fields) -> dict:
        """Set the ``loss`` of a row recorded without it (and the monitoring ``fields``), then report it."""
        row["loss"] = float(loss_sum) / self.n_residuals
        row.update(fields)
        self._report(row, {k: row[k] for k in self._metric_names(row)})
        return row

    def exclude(self, seconds: float) -> None:
        """Take ``seconds`` already spent off the solver clock (work that turned out to be monitoring only)."""
        self._paused += float(seconds)

    @staticmethod
    def _metric_names(row: dict) -> list:
        keys = list(row)
        return keys[keys.index("loss") + 1:keys.index("floats_sent")]

    def _report(self, row: dict, metrics: dict) -> None:
        step = row["step"]
        if self.callbacks:
            from fedsciml.runtime.callbacks import call_all

            stop = call_all(self.callbacks, row, self._thetas.pop(id(row), None), self.label, self._metric_names)
            if stop is not None and self.stop_reason is None:
                self.stop_reason = stop
        if self._bar is not None:
            post: dict = {"loss": f"{row['loss']:.2e}", **{k: f"{v:.2e}" for k, v in metrics.items()
                                                          if not k.startswith("loss[")}}
            if self._bar_seconds:  # a budget run: the bar counts the budget's seconds, the step rides along
                self._bar.update(max(0.0, min(float(self.budget or 0.0), float(row["time_s"])) - self._bar.n))
                post = {"step": int(step), **post}
            else:
                self._bar.update(max(0, int(step) - self._bar.n))
            self._bar.set_postfix(post, refresh=False)
        elif self.progress and (step % self.every == 0):
            m = " ".join(f"{k}={v:.3e}" for k, v in metrics.items() if not k.startswith("loss["))
            log.info("  %s[%5d] t=%7.2fs loss=%.3e %s", self.label, step, row["time_s"], row["loss"], m)

    def close(self) -> None:
        """End the progress bar, if one is shown (the history stays)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
