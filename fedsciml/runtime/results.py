"""Run results: history, final metrics, JSON / CSV output.

``result.json`` schema (stable; later features add keys, never rename):

``problem, method, options, seed, device, dtype, n_params, clients, wall_time_s,
final {loss, rel_l2 | mse, ...}, history [{step, time_s, loss, rel_l2 | mse,
floats_sent, exchanges_total}], extra {..., exchanges}``

``loss`` is the mean of the squared weighted residuals, ``½‖r(θ)‖² / N``
(N residual rows over all clients), so runs with different client counts are
comparable.  ``time_s`` is the solver's own wall time: evaluating the test
metrics for the history is excluded.  ``floats_sent`` is cumulative: all
floats sent up (clients → server) and down (server → clients) so far;
``exchanges_total`` (federated runs) the exchanges so far — each a request to
the clients and their replies, start included, retries too — and a round's row
its own ``exchanges``; ``extra["exchanges"]`` is the run's total.
"""
from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        return _clean(v.item())
    return v


class OutputPathError(ValueError):
    """An output path that cannot be written (checked before a run, so that no result is lost)."""


def check_output_file(path: str | os.PathLike, flag: str = "--json", stdout: bool = False) -> str:
    """Check, before a run, that ``path`` can be written as a file; returns it.

    Policy (:func:`fedsciml.runtime.files.write_output`): an existing regular file is replaced atomically (as
    ``-o`` does for compilers), a link's target is written (the link stays a link), a character device such as
    ``/dev/null`` is written through, ``-`` is standard output where ``stdout``; a directory, a FIFO, a socket,
    an input of the same command or a place that cannot be written is refused with :class:`OutputPathError`.
    Missing parent directories are created; nothing at ``path`` is created or changed.
    """
    from fedsciml.runtime.files import OutputRefused, check_output

    path = _path(path, flag)
    if os.path.isdir(path):
        raise OutputPathError(f"{flag} {path!r} is a directory; give a file path (e.g. {os.path.join(path, 'result.json')!r})")
    try:
        return check_output(path, flag, stdout=stdout)
    except OutputRefused as e:
        raise OutputPathError(str(e)) from None


#: the files a run writes in ``--out DIR`` whatever its plots: checked before the run by :func:`check_output_dir`
OUT_NAMES = ("result.json", "history.csv", "model.safetensors", "model.json")


def check_output_dir(path: str | os.PathLike, flag: str = "--out", names: Sequence[str] = OUT_NAMES) -> str:
    """Check, before a run, that ``path`` is (or can be made) a writable directory; creates it; returns it.

    Files in it with the names a run writes (``result.json``, ``history*.csv``,
    plots) are overwritten; one of ``names`` there that would not be written (a FIFO, a directory, an input of the
    command: :func:`fedsciml.runtime.files.resolve_output`) is refused now, before the run.
    """
    path = _path(path, flag)
    if os.path.exists(path) and not os.path.isdir(path):
        raise OutputPathError(f"{flag} {path!r} is an existing file; give a directory")
    _make_dir(path, flag, path)
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".fedsciml-write-check-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise OutputPathError(f"{flag} {path!r} cannot be written: {e.strerror or e}") from None
    from fedsciml.runtime.files import OutputRefused, resolve_output

    for name in names:
        if os.path.lexists(os.path.join(path, name)):
            try:
                resolve_output(os.path.join(path, name), flag)
            except OutputRefused as e:
                raise OutputPathError(str(e)) from None
    return path


def _path(path: object, flag: str) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{flag} must be a path, got {path!r} ({type(path).__name__})")
    path = os.fspath(path)
    if not path.strip():
        raise OutputPathError(f"{flag} must be a non-empty path")
    return path


def _make_dir(d: str, flag: str, path: str) -> None:
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise OutputPathError(f"{flag} {path!r} cannot be written: cannot create directory {d!r}: "
                              f"{e.strerror or e}") from None


class ResultsNotWritten(Exception):
    """A finished run's results could not be written where asked (a full disk, a vanished
    directory).  ``saved`` is where they were written instead (``None`` when nowhere could be
    written: then ``text`` holds them, for the caller to show)."""

    def __init__(self, message: str, saved: str | None = None, text: str = ""):
        super().__init__(message)
        self.saved, self.text = saved, text


def _fallback_dirs() -> list[str]:
    """Where a result goes when its own path cannot take it: the temporary directory, the working
    directory, the home directory (in that order, each once)."""
    dirs = [tempfile.gettempdir(), os.getcwd(), os.path.expanduser("~")]
    return list(dict.fromkeys(os.path.abspath(d) for d in dirs))


def _write_text_atomic(path: str, text: str) -> None:
    from fedsciml.runtime.files import write_text

    write_text(path, text, what="the results", stdout=True)


def save_text_or_fallback(text: str, path: str, what: str = "the results") -> str:
    """Write ``text`` to ``path`` (``path.tmp`` then renamed, so an interrupted write leaves no half
    file); returns ``path``.  When that fails (``ENOSPC``, ``EACCES``, …) the finished work must not be
    lost: ``text`` is written to a new file in the first of :func:`_fallback_dirs` that takes it and
    :class:`ResultsNotWritten` says, in one line, why ``path`` failed and where the text is."""
    try:
        if path != "-":
            parent = os.path.dirname(os.path.realpath(path))
            os.makedirs(parent, exist_ok=True)
        _write_text_atomic(path, text)
        return path
    except OSError as e:
        why = e.strerror or str(e)
    base = os.path.basename(path) or "result.json"
    stem, ext = os.path.splitext(base)
    for d in _fallback_dirs():
        alt = None
        try:
            fd, alt = tempfile.mkstemp(prefix=f"fedsciml-{stem}-", suffix=ext or ".txt", dir=d)
            os.close(fd)
            with open(alt, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            if alt is not None:
                try:
                    os.remove(alt)
                except OSError:
                    pass
            continue
        raise ResultsNotWritten(f"{path!r} could not be written ({why}); {what} were saved to {alt!r} instead",
                                saved=alt, text=text)
    raise ResultsNotWritten(f"{path!r} could not be written ({why}), nor a fallback file in any of "
                            f"{_fallback_dirs()}; {what} follow on standard output", saved=None, text=text)


def raise_collected(failed: Sequence[ResultsNotWritten]) -> None:
    """One :class:`ResultsNotWritten` for every output that could not be written (none: returns): the
    messages joined, the first fallback file, and the text when some output was saved nowhere."""
    if not failed:
        return
    text = next((e.text for e in failed if e.saved is None and e.text), "")
    raise ResultsNotWritten("; ".join(str(e) for e in failed), saved=next((e.saved for e in failed if e.saved), None),
                            text=text)


def write_json(payload: Any, path: str) -> str:
    """The one JSON writer: non-finite floats as null / "inf", tensors and other objects as text;
    written to ``path.tmp`` then renamed, so that an interrupted write leaves no half file.  A write
    that fails (a disk that filled during the run) raises :class:`ResultsNotWritten` after saving the
    JSON elsewhere (:func:`save_text_or_fallback`): a finished run's results are never lost."""
    s = json.dumps(_clean(payload), indent=2, default=str)
    save_text_or_fallback(s + "\n", path)
    return s


def format_table(columns: Sequence[tuple[str, str, str]], rows: Sequence[Mapping[str, Any]]) -> str:
    """The one table printer.  ``columns``: ``(header, key, format)`` triples, ``format`` like ``"10.3e"``
    (the header is right-aligned to the width; a format starting with ``<`` is left-aligned)."""
    lines = []
    head = []
    for h, _, fmt in columns:
        w = int("".join(ch for ch in fmt.split(".")[0] if ch.isdigit()) or 0)
        head.append(f"{h:<{w}s}" if fmt.startswith("<") else f"{h:>{w}s}")
    lines.append(" ".join(head).rstrip())
    for r in rows:
        cells = []
        for h, k, fmt in columns:
            v = r.get(k)
            if v is None or (isinstance(v, float) and math.isnan(v) and not fmt.endswith(("e", "f", "g"))):
                w = int("".join(ch for ch in fmt.split(".")[0] if ch.isdigit()) or 0)
                cells.append(f"{'—':>{w}s}" if not fmt.startswith("<") else f"{'—':<{w}s}")
            else:
                cells.append(format(v, fmt))
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines)


def jsonable(d: dict) -> dict:
    """``d`` with every value JSON can hold kept and anything else (a tensor, a function) as its ``repr``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, (int, float, str, bool)) or v is None:
            out[k] = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, str, bool)) for x in v):
            out[k] = list(v)
        elif isinstance(v, dict):
            out[k] = jsonable(v)
        elif isinstance(v, (list, tuple)) and all(isinstance(x, dict) for x in v):  # e.g. rejected messages
            out[k] = [jsonable(x) for x in v]
        else:
            out[k] = repr(v)
    return out


#: the version of the result-file layout (``result.json``); 2: ``solver_seconds``/``wall_seconds`` (was one
#: ``wall_time_s`` that held the solver's time) and this field itself
SCHEMA_VERSION = 2


@dataclass
class Result:
    """One run: what ``fs.solve`` returns and ``result.json`` holds (with ``schema_version``).

    ``solver_seconds`` is the solver's own time (the round loop or optimizer; test-metric evaluation and
    monitoring excluded) on the run's clock (``options["clock"]``: wall or CPU seconds), ``wall_seconds`` the whole call — ``fs.solve`` from start to return, or for the
    command line the whole command up to writing its results (``None`` where unknown, e.g. an old file)."""

    problem: str
    method: str
    options: dict
    seed: int
    device: str
    dtype: str
    n_params: int
    clients: int
    solver_seconds: float = 0.0
    final: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    theta: Any = field(default=None, repr=False, compare=False)  # final parameters (not serialized)
    wall_seconds: float | None = None
    #: why the run stopped (:func:`stop_reason_of`): ``iterations``, ``rounds``, ``budget``, ``tolerance``,
    #: ``damping ceiling (μ = 1e+20)``, ``callback NAME``, ``one-shot``, ``interrupted``, …; ``None`` in an old file
    stop_reason: str | None = None

    @property
    def wall_time_s(self) -> float:
        """Deprecated name of :attr:`solver_seconds` (it always held the solver's time, not the wall time)."""
        return self.solver_seconds

    @property
    def metric_name(self) -> str:
        """``rel_l2`` (PDEs), ``mse`` (fitting, ridge), or ``loss`` when the problem has no reference."""
        for k in ("rel_l2", "mse"):
            if k in self.final:
                return k
        return "loss"

    @property
    def error(self) -> float:
        return float(self.final.get(self.metric_name, float("nan")))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("theta", None)
        return _clean({"schema_version": SCHEMA_VERSION, **d})

    def to_json(self, path: str | None = None) -> str:
        if path:
            return write_json(self.to_dict(), path)
        return json.dumps(self.to_dict(), indent=2)

    def write_history_csv(self, path: str) -> None:
        if not self.history:
            return
        from fedsciml.runtime.files import write_output

        keys = list(dict.fromkeys(k for h in self.history for k in h))

        def write(f):
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            for h in self.history:
                w.writerow(_clean(h))
        write_output(path, write, newline="", what="the history CSV")

    def plot(self, out_dir: str, problem: Any = None) -> list[str]:
        """Write the PNG plots of this run (error against time and rounds; the solution when
        ``problem`` is given and the final parameters are known).  Returns the paths."""
        from fedsciml.runtime.plotting import plot_runs

        os.makedirs(out_dir, exist_ok=True)
        return plot_runs(problem, [self], out_dir)

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        if "wall_time_s" in d and "solver_seconds" not in d:  # schema 1 (no schema_version): the solver's time
            d = {**d, "solver_seconds": d["wall_time_s"]}
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "theta"}
        return cls(**fields)

    @classmethod
    def from_json(cls, path: str) -> "Result":
        with open(path) as f:
            return cls.from_dict(json.load(f))


# --- why a run stopped ----------------------------------------------------------------------------

#: the round loop's and the solvers' short names (``extra["stopped_by"]``) → the stop reason a result states
_STOP_NAMES = {"tol": "tolerance"}


def stop_reason_of(info: Mapping[str, Any]) -> str | None:
    """Why a run stopped, from its runner's ``info``: ``info["stop_reason"]`` where the runner states it (the
    centralized solvers), else the round loop's ``info["stopped_by"]`` in the same words.  The reasons:

    * ``iterations`` — a centralized solver's ``max_iters``; ``rounds`` — a federated run's ``rounds``;
    * ``budget`` — the time budget (``budget`` seconds of the ``clock``) is spent;
    * ``tolerance`` — the mean training loss reached ``tol``;
    * ``damping ceiling (μ = 1e+20)`` — Levenberg–Marquardt's damping reached its ceiling: no step lowers the
      training loss at these points (a minimum of it to round-off), so a larger budget changes nothing
      (:mod:`fedsciml.core.lm`; centralized ``lm`` and federated ``gn``);
    * ``callback NAME`` — a callback asked the run to stop (:mod:`fedsciml.runtime.callbacks`);
    * ``one-shot`` — a one-exchange method finished its exchange;
    * ``interrupted`` — the run was interrupted and kept what it had;
    * a strategy's own reason (:meth:`fedsciml.runtime.strategy.Strategy.finished`).

    ``None`` where the info says nothing (a closed-form answer, an old file)."""
    own = info.get("stop_reason")
    if isinstance(own, str) and own:
        return own
    raw = info.get("stopped_by")
    return _STOP_NAMES.get(raw, raw) if isinstance(raw, str) and raw else None


# --- the summary table ----------------------------------------------------------------------------


def method_settings(r: Result) -> str:
    """Short settings of a run for the table (local solver, rank, ...): its method's text
    (:attr:`fedsciml.runtime.registry.Method.settings`; by default its local solver's); empty without one."""
    from fedsciml.runtime.registry import METHODS

    method = METHODS.get(r.method)
    text = None if method is None else method.settings_text(r)
    return text if text is not None else ""


def summary_lines(results: Sequence[Result]) -> list[str]:
    """The summary table of a set of runs, as lines: what ``python -m fedsciml solve`` and the Flower App print."""
    r0 = results[0]
    metric = r0.metric_name
    net = ""
    if isinstance(r0.options, dict) and r0.options.get("hidden"):  # a field problem's network
        net = f" (network: hidden {','.join(map(str, r0.options['hidden']))}, {r0.options.get('activation')})"
    lines = ["", f"{r0.problem}: {r0.clients} client(s), {r0.n_params} parameters{net}, device {r0.device}, "
                 f"{r0.dtype}"]
    rows = []
    clocks = {str((r.options or {}).get("clock", "wall")) if isinstance(r.options, dict) else "wall" for r in results}
    clock = clocks.pop() if len(clocks) == 1 else "mixed"
    for r in results:
        last = r.history[-1] if r.history else {}
        rounds = r.extra.get("rounds", last.get("step", 0)) if isinstance(r.extra, dict) else last.get("step", 0)
        sent = last.get("floats_sent", 0)
        loss = r.final.get("loss")
        ex = last.get("exchanges_total")
        held = r.extra.get("validation") if isinstance(r.extra, dict) else None
        cpu = isinstance(r.options, dict) and r.options.get("clock") == "cpu" and last.get("time_s") is not None
        rows.append({"method": r.method, "rounds": rounds, "seconds": float(last["time_s"]) if cpu else r.solver_seconds,
                     "loss": float("nan") if loss is None else loss,
                     "val": held.get("val_loss", float("nan")) if isinstance(held, dict) else float("nan"),
                     "metric": r.error, "l2re": float(r.final.get("l2re", float("nan"))),
                     "exchanges": ex, "sent": sent,
                     "per": sent / rounds if rounds else 0, "stopped": r.stop_reason,
                     "settings": " " + method_settings(r)})
    wide = max([len("stopped")] + [len(x["stopped"]) for x in rows if x["stopped"]])
    # the seconds column follows the runs' clock (--clock): the solver's wall seconds, or its CPU seconds (the
    # history's time_s: this process's and, on an engine with client processes, theirs)
    head = {"wall": "wall s", "cpu": "cpu s"}.get(clock, "s (clock)")
    cols = [("method", "method", "<12s"), ("rounds", "rounds", "6d"), (head, "seconds", "8.2f"),
            ("loss", "loss", "10.3e"), (metric, "metric", "10.3e"),
            ("exchanges", "exchanges", "9d"), ("floats sent", "sent", "12d"),
            ("floats/round", "per", "12.3g"), ("stopped", "stopped", f"<{wide}s"), (" settings", "settings", "<s")]
    if any(isinstance(r.extra, dict) and isinstance(r.extra.get("validation"), dict) for r in results):
        cols.insert(4, ("val_loss", "val", "10.3e"))  # the held-out validation residual (runtime.validation)
    if metric == "loss":  # no test metric: the loss is the only figure, shown once
        cols = [c for c in cols if c[1] != "metric"]
    if metric == "rel_l2" and _pooled_differs(results):  # a system: the pooled error (PINNacle's L2RE) beside
        cols.insert(cols.index((metric, "metric", "10.3e")) + 1, ("l2re", "l2re", "10.3e"))
    lines += format_table(cols, rows).split("\n")
    for r in results:
        why = r.extra.get("loss_not_measured") if isinstance(r.extra, dict) else None
        loss = r.final.get("loss")
        if why and (loss is None or (isinstance(loss, float) and math.isnan(loss))):
            lines.append(f"{r.method}: loss not measured: {why}")
        kept = r.extra.get("keep_best") if isinstance(r.extra, dict) else None
        if isinstance(kept, dict) and kept.get("step") is not None:
            lines.append(f"{r.method}: returned θ of step {kept['step']}, the lowest held-out validation residual "
                         f"{kept['val_loss']:.3e} (keep_best validation; the last step {kept.get('last_step')} had "
                         f"{float(kept.get('last_val_loss') or float('nan')):.3e})")
        rej = r.extra.get("rejections") if isinstance(r.extra, dict) else None
        if rej:
            lines.append(f"{r.method}: {len(rej)} message(s) rejected, e.g. round {rej[0]['round']} client "
                         f"{rej[0]['client']}: {rej[0]['reason']}")
    lines.append(f"final {metric} ({r0.method}): {r0.error:.3e}")
    return lines


def _pooled_differs(results: Sequence[Result]) -> bool:
    """Whether the runs report a pooled ``l2re`` that is not ``rel_l2`` itself: a system (per-component
    ``rel_l2_NAME`` keys); for one output the two are the same number, shown once."""
    return any("l2re" in r.final and any(k.startswith("rel_l2_") for k in r.final) for r in results)


if not TYPE_CHECKING:  # invisible to mypy, so that a misspelt import from this module stays a type error
    def __getattr__(name: str):
        if name == "local_settings":
            from fedsciml.options import moved

            raise moved(__name__, name, "fedsciml.methods.local", "the local solver's settings text, beside the "
                        "local solver")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
