"""Reference solutions from text files: FEM/spectral exports (COMSOL ``.dat``, PINNacle's ``ref/``) as a
:class:`~fedsciml.problems.domain.DomainPDE`'s test set.

A :class:`ReferenceData` is points ``X [n, d]`` and the solution there ``U [n, C]``; a problem's ``reference()``
returns one (or the pair), and its ``rel_l2`` / ``l2re`` are measured on those points::

    class Burgers(fs.DomainPDE):
        ...
        def reference(self):
            return fs.ReferenceData.from_file("ref/burgers1d.dat", inputs=1, layout="unrolled")

Two layouts, both whitespace-separated numbers, lines starting with ``%`` being comments:

* ``rows`` — one point per line: its ``inputs`` coordinates (t included, last, for a space-time problem), then
  its ``outputs`` values;
* ``unrolled`` — COMSOL's export of a time-dependent solution: one line per mesh node, its ``inputs`` *spatial*
  coordinates, then one column per (time, component), time-major (``u@t0, v@t0, u@t1, v@t1, …``); the times are
  read from the last ``%`` header line that has one ``@ t=…`` per value column (COMSOL writes
  ``u (K) @ t=0.2``), or given as ``times``.  Each (node, time) becomes one point ``(x, t)``, node-major — what
  PINNacle's ``BasePDE.trans_time_data_to_dataset`` does (``src/pde/baseclass.py:62-89``).

Rows with a NaN value are dropped (COMSOL writes NaN at nodes where a quantity is undefined; PINNacle drops them
too: ``src/utils/callbacks.py:147-149``); how many is :attr:`ReferenceData.dropped`.  Reading is bounded: a
regular file of at most ``max_bytes`` (:data:`MAX_REFERENCE_BYTES` by default), parsed as numbers only (no code
runs); any bad content is refused in one line that names the file.
"""
from __future__ import annotations

import logging
import math
import os
import re

from collections.abc import Sequence
from typing import NoReturn

import numpy as np
import torch

from .base import DTYPE, ProblemError

log = logging.getLogger(__name__)

#: The largest reference file read by default (bytes): PINNacle's largest export is ~40 MB.
MAX_REFERENCE_BYTES = 1 << 30

LAYOUTS = ("rows", "unrolled")
_TIME = re.compile(r"\bt\s*=\s*([-+0-9.eE]+)")


class ReferenceData:
    """Points ``X [n, d]`` and reference values ``U [n, C]`` (float64 tensors), optionally read from ``source``.

    ``ReferenceData(X, U)`` checks the shapes and that every value is finite; ``from_file`` reads an export.  A
    problem's ``reference()`` may return it as it is; ``X, U = ref`` unpacks it.  A transformed copy (PINNacle
    rescales some inputs) is ``ReferenceData(ref.X * 2, ref.U)``."""

    def __init__(self, X, U, source: str = "", dropped: int = 0):
        X = torch.as_tensor(np.asarray(X, dtype=np.float64) if not torch.is_tensor(X) else X, dtype=DTYPE)
        U = torch.as_tensor(np.asarray(U, dtype=np.float64) if not torch.is_tensor(U) else U, dtype=DTYPE)
        what = f"reference data{' from ' + repr(source) if source else ''}"
        if X.ndim == 1:
            X = X[:, None]
        if U.ndim == 1:
            U = U[:, None]
        if X.ndim != 2 or U.ndim != 2 or X.shape[0] != U.shape[0] or X.shape[0] == 0:
            raise ProblemError(f"{what}: need points X [n, d] and values U [n, C] with the same n ≥ 1, got X "
                               f"{tuple(X.shape)} and U {tuple(U.shape)}")
        bad = int((~torch.isfinite(X).all(1) | ~torch.isfinite(U).all(1)).sum())
        if bad:
            raise ProblemError(f"{what}: {bad} of {X.shape[0]} rows hold a non-finite number")
        self.X, self.U, self.source, self.dropped = X, U, source, int(dropped)

    def __iter__(self):
        return iter((self.X, self.U))

    def __len__(self) -> int:
        return int(self.X.shape[0])

    def __repr__(self) -> str:
        src = f", source={self.source!r}" if self.source else ""
        return f"ReferenceData({self.X.shape[0]} points, {self.X.shape[1]} inputs, {self.U.shape[1]} outputs{src})"

    @classmethod
    def from_file(cls, path, *, inputs: int, outputs: int = 1, layout: str = "rows",
                  times: Sequence[float] | None = None, max_bytes: int = MAX_REFERENCE_BYTES) -> ReferenceData:
        """Read a whitespace-separated text export (``%`` comment lines), see the module docstring.

        ``inputs``: the coordinate columns at the start of each line (spatial only for ``unrolled``; a
        space-time point gains ``t`` as its last input); ``outputs``: the solution's components; ``layout``:
        ``rows`` or ``unrolled``; ``times`` (``unrolled`` only): the export's times, else read from its header."""
        from fedsciml.runtime.files import FileRefused, regular_file_size

        path = os.fspath(path)
        if isinstance(inputs, bool) or not isinstance(inputs, int) or inputs < 1:
            raise ProblemError(f"ReferenceData.from_file({path!r}): inputs must be a whole number ≥ 1, got {inputs!r}")
        if isinstance(outputs, bool) or not isinstance(outputs, int) or outputs < 1:
            raise ProblemError(f"ReferenceData.from_file({path!r}): outputs must be a whole number ≥ 1, got "
                               f"{outputs!r}")
        if layout not in LAYOUTS:
            raise ProblemError(f"ReferenceData.from_file({path!r}): layout must be one of {', '.join(LAYOUTS)}, got "
                               f"{layout!r}")
        if times is not None and layout != "unrolled":
            raise ProblemError(f"ReferenceData.from_file({path!r}): times apply to layout='unrolled' only (a 'rows' "
                               f"file holds t as a column)")
        try:
            regular_file_size(path, max_bytes, "a reference file", too_large="raise max_bytes if it is meant")
            with open(path, encoding="utf-8", errors="strict") as f:
                text = f.read()
        except FileRefused as e:
            raise ProblemError(f"reference file: {e}") from None
        except UnicodeDecodeError as e:
            raise ProblemError(f"reference file {path!r} is not UTF-8 text (byte {e.start}): a reference file is a "
                               f"text export of numbers") from None
        except OSError as e:
            raise ProblemError(f"reference file {path!r} cannot be read ({e.strerror or e})") from None
        header, data = _split(text)
        if not data:
            raise ProblemError(f"reference file {path!r} holds no data line (only comments starting with % or blank "
                               f"lines)")
        A = _parse(path, data)
        cols = A.shape[1]
        if layout == "rows":
            if cols != inputs + outputs:
                raise ProblemError(f"reference file {path!r} has {cols} columns; inputs={inputs} + outputs={outputs} "
                                   f"= {inputs + outputs} were expected")
            X, U = A[:, :inputs], A[:, inputs:]
        else:
            nv = cols - inputs
            if nv < outputs or nv % outputs:
                raise ProblemError(f"reference file {path!r} has {nv} value columns after its {inputs} coordinate "
                                   f"column(s), not a multiple of outputs={outputs} (layout 'unrolled': one column "
                                   f"per time and component)")
            nt = nv // outputs
            t = _times(path, header, nv, outputs) if times is None else np.asarray(times, dtype=np.float64).reshape(-1)
            if t.shape[0] != nt or not np.isfinite(t).all():
                raise ProblemError(f"reference file {path!r}: {nt} time(s) in its columns, but {t.shape[0]} finite "
                                   f"times were given")
            n = A.shape[0]
            X = np.concatenate([np.repeat(A[:, :inputs], nt, axis=0), np.tile(t, n)[:, None]], axis=1)
            U = A[:, inputs:].reshape(n * nt, outputs)  # column (j, c) = inputs + j·C + c → row (node, j), column c
        keep = ~np.isnan(U).any(1) & ~np.isnan(X).any(1)
        dropped = int((~keep).sum())
        if dropped == X.shape[0]:
            raise ProblemError(f"reference file {path!r}: every one of its {dropped} points holds a NaN value")
        if dropped:
            log.info("reference file %s: %d of %d points hold a NaN value and are left out", path, dropped, X.shape[0])
        return cls(X[keep], U[keep], source=path, dropped=dropped)


def _split(text: str) -> tuple[list[str], list[str]]:
    header, data = [], []
    for line in text.splitlines():
        s = line.strip()
        if not s:
            continue
        (header if s.startswith("%") else data).append(s)
    return header, data


def _parse(path: str, lines: list[str]) -> np.ndarray:
    """The data lines as a float64 array ``[rows, cols]`` (numpy's C parser); on bad content, one line naming the
    file and the first bad data line (:func:`_diagnose`)."""
    try:
        A = np.loadtxt(lines, dtype=np.float64, ndmin=2, comments=None)
    except ValueError:
        _diagnose(path, lines)
    if np.isinf(A).any():
        i = int(np.isinf(A).any(1).nonzero()[0][0])
        raise ProblemError(f"reference file {path!r}: data line {i + 1} holds an infinite value")
    return A


def _diagnose(path: str, lines: list[str]) -> NoReturn:
    """Find the first data line numpy could not read and say why, in one line naming the file."""
    width = None
    for i, s in enumerate(lines):
        parts = s.split()
        if width is None:
            width = len(parts)
        if len(parts) != width:
            raise ProblemError(f"reference file {path!r}: data line {i + 1} has {len(parts)} numbers, the first "
                               f"has {width}: {s[:60]!r}")
        for p in parts:
            try:
                float(p)
            except ValueError:
                raise ProblemError(f"reference file {path!r}: data line {i + 1} holds {p[:30]!r}, not a number "
                                   f"(comment lines start with %)") from None
    raise ProblemError(f"reference file {path!r}: its data lines could not be read as numbers")


def _times(path: str, header: list[str], nv: int, outputs: int) -> np.ndarray:
    """The times of an unrolled export from its last header line with one ``@ … t=…`` per value column (one time
    per group of ``outputs`` columns; the group's columns must agree)."""
    for line in reversed(header):
        cells = line.split("@")[1:]
        if len(cells) != nv:
            continue
        ts = []
        for c in cells:
            m = _TIME.search(c)
            if m is None:
                break
            try:
                ts.append(float(m.group(1)))
            except ValueError:
                break
        else:
            t = np.asarray(ts).reshape(nv // outputs, outputs)
            if not (t == t[:, :1]).all():
                raise ProblemError(f"reference file {path!r}: its header's times differ within a group of "
                                   f"{outputs} columns (layout 'unrolled' is time-major: u@t0, v@t0, u@t1, …)")
            if not all(math.isfinite(v) for v in t[:, 0]):
                break
            return t[:, 0].copy()
    raise ProblemError(f"reference file {path!r}: no header line (starting with %) names a time '@ t=…' for each "
                       f"of its {nv} value columns; give times=[…]")
