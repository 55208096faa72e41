"""Per-step callbacks of a run: ``fs.solve(..., callbacks=[...])``.

After each history row (a centralized step, a federated round) every callback gets a read-only
:class:`StepView` — the step, a copy of θ, the loss, the test metrics and the row's other fields — and may
stop the run by returning a true value: ``True``, a numpy ``True`` or a one-element tensor that is true (the
result then says ``stopped_by="callback <name>"``); ``None``/``False`` go on, and any other return value is a
one-line ``TypeError``.  A callback is a :class:`Callback` (its :meth:`Callback.on_step`) or any callable
``view -> bool | None``.

At the start of each run every :class:`Callback` gets :meth:`Callback.on_run_start`: the shipped ones reset
what they track (a reused :class:`EarlyStopping` starts its patience afresh), and on the run's first row
check that their ``monitor`` is a field of it (a misspelt one is a ``ValueError`` naming the fields).

Two ship with fedsciml: :class:`EarlyStopping` (stop when a monitored value has not improved for
``patience`` rows) and :class:`BestModelCheckpoint` (keep, and optionally write, the θ with the best
monitored value).  Callbacks run in the process that runs the round loop: the in-process engine.
"""
from __future__ import annotations

import contextvars
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

_ACTIVE: contextvars.ContextVar[tuple] = contextvars.ContextVar("fedsciml_callbacks", default=())


@dataclass(frozen=True)
class StepView:
    """What a callback sees after one step or round (read-only).

    Attributes
    ----------
    step : int
        The step (centralized) or round (federated) the row describes; 0 is θ₀.
    theta : torch.Tensor
        A copy of the parameters at that step (changing it changes nothing in the run).
    loss : float
        The mean training loss ½‖r‖²/N (NaN where the run cannot measure it, e.g. under DP).
    metrics : Mapping[str, float]
        The test metrics of the row (``rel_l2``, ``mse``, …).
    row : Mapping[str, Any]
        The whole history row (``time_s``, ``floats_sent``, ``mu``, …), read-only.
    label : str
        The method's label (``gn``, ``centralized``, …).
    """

    step: int
    theta: torch.Tensor
    loss: float
    metrics: Mapping[str, float]
    row: Mapping[str, Any]
    label: str

    def value(self, name: str) -> float:
        """The row's value of ``name`` (``loss``, a metric or another numeric field); NaN when absent."""
        v = self.row.get(name)
        return float(v) if isinstance(v, (int, float)) else math.nan


class Callback:
    """Base class of a per-step callback: override :meth:`on_step`."""

    def on_step(self, view: StepView) -> bool | None:
        """Called after each history row; return ``True`` to stop the run after this step."""
        return None

    def on_run_start(self) -> None:
        """Called when a run starts (before its first row): reset per-run state here."""
        return None

    @property
    def name(self) -> str:
        return type(self).__name__


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved for ``patience`` rows.

    Parameters
    ----------
    monitor : str
        The row's value to watch: ``"loss"`` (default) or a test metric such as ``"rel_l2"``.
    patience : int
        How many rows without improvement are tolerated (≥ 1).
    min_delta : float
        Absolute improvement that counts (≥ 0).
    rel_delta : float
        Relative improvement that counts, in [0, 1): a row improves when its value is below
        ``best·(1 − rel_delta) − min_delta``.  Useful for losses that span decades.

    Notes
    -----
    Rows whose value is NaN (not measured) neither improve nor count against the patience.
    After the run, ``best``, ``best_step`` and ``stopped_step`` say what happened.
    """

    def __init__(self, monitor: str = "loss", patience: int = 10, min_delta: float = 0.0, rel_delta: float = 0.0):
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"EarlyStopping: monitor must be a row field name such as 'loss', got {monitor!r}")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ValueError(f"EarlyStopping: patience must be an integer ≥ 1, got {patience!r}")
        if not (isinstance(min_delta, (int, float)) and math.isfinite(min_delta) and min_delta >= 0):
            raise ValueError(f"EarlyStopping: min_delta must be a finite number ≥ 0, got {min_delta!r}")
        if not (isinstance(rel_delta, (int, float)) and 0 <= rel_delta < 1):
            raise ValueError(f"EarlyStopping: rel_delta must be in [0, 1), got {rel_delta!r}")
        self.monitor, self.patience = monitor, patience
        self.min_delta, self.rel_delta = float(min_delta), float(rel_delta)
        self.on_run_start()

    def on_run_start(self) -> None:
        """A new run: nothing seen yet (``best``, ``best_step``, ``stopped_step`` and the patience reset)."""
        self.best = math.inf
        self.best_step: int | None = None
        self.stopped_step: int | None = None
        self._wait = 0
        self._checked = False

    def on_step(self, view: StepView) -> bool:
        self._checked = self._checked or check_monitor(self, self.monitor, view)
        v = view.value(self.monitor)
        if math.isnan(v):
            return False
        if v < self.best * (1 - self.rel_delta) - self.min_delta or self.best_step is None:
            self.best, self.best_step, self._wait = v, view.step, 0
            return False
        self._wait += 1
        if self._wait >= self.patience:
            self.stopped_step = view.step
            return True
        return False


class BestModelCheckpoint(Callback):
    """Keep the θ with the lowest ``monitor`` value; with ``path``, also write it there each time it improves.

    Parameters
    ----------
    monitor : str
        The row's value to minimize: ``"loss"`` (default) or a test metric such as ``"rel_l2"``.
    path : str, optional
        A file to write ``{"theta", "step", "value", "monitor"}`` to with :func:`torch.save` (tensors and
        plain numbers only: ``torch.load(path, weights_only=True)`` reads it).

    Notes
    -----
    After the run: ``best_theta`` (a tensor copy), ``best_step`` and ``best``.
    """

    def __init__(self, monitor: str = "loss", path: str | os.PathLike | None = None):
        if not isinstance(monitor, str) or not monitor:
            raise ValueError(f"BestModelCheckpoint: monitor must be a row field name such as 'loss', got {monitor!r}")
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"BestModelCheckpoint: path must be a file path, got {type(path).__name__}")
        self.monitor = monitor
        self.path = None if path is None else os.fspath(path)
        self.on_run_start()

    def on_run_start(self) -> None:
        """A new run: no best yet (a checkpoint reused across runs keeps each run's own best)."""
        self.best = math.inf
        self.best_step: int | None = None
        self.best_theta: torch.Tensor | None = None
        self._checked = False

    def on_step(self, view: StepView) -> None:
        self._checked = self._checked or check_monitor(self, self.monitor, view)
        v = view.value(self.monitor)
        if math.isnan(v) or not v < self.best:
            return None
        self.best, self.best_step, self.best_theta = v, view.step, view.theta
        if self.path is not None:  # by fedsciml.runtime.files' rules: atomic over a file, a device written through
            from fedsciml.runtime.files import write_output

            state = {"theta": view.theta.detach().cpu(), "step": int(view.step), "value": float(v),
                     "monitor": self.monitor}
            write_output(self.path, lambda f: torch.save(state, f), binary=True, what="BestModelCheckpoint path")
        return None


def check_monitor(cb: Callback, monitor: str, view: StepView) -> bool:
    """``True`` when ``monitor`` is a numeric field of the run's row; else a one-line ``ValueError`` naming the
    fields there are (a misspelt monitor would otherwise never fire)."""
    v = view.row.get(monitor)
    if monitor in view.row and (v is None or isinstance(v, (int, float)) and not isinstance(v, bool)):
        return True
    fields = [k for k, x in view.row.items() if k != "step" and (x is None or isinstance(x, (int, float))
                                                                  and not isinstance(x, bool))]
    raise ValueError(f"{cb.name}: monitor {monitor!r} is not a numeric field of this run's rows; "
                     f"available: {', '.join(fields)}")


def _stops(name: str, v: Any) -> bool:
    """A callback's return value as a decision: ``None``/``False`` go on; ``True``, a numpy bool or number, or a
    one-element tensor decide by their truth; anything else is a one-line ``TypeError``."""
    if v is None or v is False or v is True:
        return bool(v)
    import numpy as np

    if isinstance(v, (np.bool_, np.number)) or isinstance(v, np.ndarray) and v.size == 1:
        return bool(v)
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        return bool(v.item())
    if isinstance(v, (int, float)):
        return bool(v)
    raise TypeError(f"callback {name} returned {type(v).__name__} {str(v)[:40]!r}; return True (a bool, numpy or "
                    f"one-element tensor) to stop the run, or None/False to go on")


def start_run(callbacks: Sequence) -> None:
    """A run starts: every :class:`Callback`'s :meth:`Callback.on_run_start` (the history recorder calls it)."""
    for cb in callbacks:
        if isinstance(cb, Callback):
            cb.on_run_start()


def check_callbacks(callbacks: Any) -> tuple:
    """The callbacks as a tuple, each a :class:`Callback` or a callable; anything else is a one-line TypeError."""
    if callbacks is None:
        return ()
    if isinstance(callbacks, (Callback,)) or callable(callbacks) and not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(f"callbacks must be a list of Callback objects or callables, got {type(callbacks).__name__}")
    for i, cb in enumerate(callbacks):
        if not (isinstance(cb, Callback) or callable(cb)):
            raise TypeError(f"callbacks[{i}] is a {type(cb).__name__}: a callback is a fedsciml Callback (on_step) "
                            f"or a callable taking a StepView")
    return tuple(callbacks)


@contextmanager
def use_callbacks(callbacks: Sequence) -> Iterator[None]:
    """Within the block, every run's history recorder calls ``callbacks`` after each row."""
    token = _ACTIVE.set(tuple(callbacks))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active() -> tuple:
    return _ACTIVE.get()


def _name(cb: Any) -> str:
    if isinstance(cb, Callback):
        return cb.name
    return getattr(cb, "__name__", type(cb).__name__)


def call_all(callbacks: Sequence, row: dict, theta: torch.Tensor | None, label: str,
             metric_names: Callable[[dict], list]) -> str | None:
    """Call every callback with the row's view; the stop reason (``"callback <name>"``) of the first that
    returns ``True``, else ``None``."""
    th = torch.empty(0) if theta is None else theta  # the recorder's own copy, taken when the row was recorded
    loss = row.get("loss")
    view = StepView(step=int(row.get("step", 0)), theta=th,
                    loss=float(loss) if isinstance(loss, (int, float)) else math.nan,
                    metrics=MappingProxyType({k: row[k] for k in metric_names(row)}),
                    row=MappingProxyType(dict(row)), label=label)
    stop = None
    for cb in callbacks:
        fn = cb.on_step if isinstance(cb, Callback) else cb
        if _stops(_name(cb), fn(view)) and stop is None:
            stop = f"callback {_name(cb)}"
    return stop
