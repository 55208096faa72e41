"""Wall-clock accounting and per-step history shared by every solver."""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager


class Recorder:
    """Collects history rows; the clock excludes time spent evaluating test metrics.

    ``budget`` (seconds) is checked against the same clock, so a time budget
    buys the same amount of optimization whatever the evaluation costs.
    """

    def __init__(self, evaluate, n_residuals: int, budget: float | None = None,
                 progress: bool = False, every: int = 1, label: str = ""):
        self.evaluate = evaluate
        self.n_residuals = max(1, int(n_residuals))
        self.budget = budget
        self.progress = progress
        self.every = max(1, int(every))
        self.label = label
        self.rows = []
        self.floats_sent = 0
        self._t0 = time.perf_counter()
        self._paused = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0 - self._paused

    @contextmanager
    def paused(self):
        """A block whose time is not solver time (monitoring, checkpoint writing)."""
        t = time.perf_counter()
        try:
            yield
        finally:
            self._paused += time.perf_counter() - t

    def credit(self, seconds: float):
        """Count ``seconds`` already spent (a resumed run: the clock and the budget continue)."""
        self._t0 -= float(seconds)

    def time_left(self) -> float | None:
        """Seconds of the budget left (``None`` without a budget)."""
        return None if self.budget is None else max(0.0, self.budget - self.elapsed())

    def out_of_time(self) -> bool:
        return self.budget is not None and self.elapsed() >= self.budget

    def record(self, step: int, theta, loss_sum: float, **extra) -> dict:
        """Evaluate the test metrics at ``theta`` and append a row.

        ``loss_sum`` is ½‖r‖² over all clients; it is stored as the mean ½‖r‖²/N.
        """
        t = self.elapsed()
        with self.paused():
            metrics = self.evaluate(theta)
        row = {"step": int(step), "time_s": t, "loss": float(loss_sum) / self.n_residuals, **metrics,
               "floats_sent": int(self.floats_sent), **extra}
        self.rows.append(row)
        if self.progress and (step % self.every == 0):
            m = " ".join(f"{k}={v:.3e}" for k, v in metrics.items())
            print(f"  {self.label}[{step:5d}] t={t:7.2f}s loss={row['loss']:.3e} {m}", file=sys.stderr, flush=True)
        return row
