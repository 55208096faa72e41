"""Per-round checkpoints of a federated run, and resuming from them.

After every round the simulation writes ``DIR/state.pt`` (atomically: a
temporary file, then ``os.replace``, so a run killed mid-write leaves the
previous round's checkpoint intact; a leftover ``state.pt.tmp`` is removed).
It holds everything the next round depends on: the global parameters, the
round counter, the client-sampling RNG state, the method's own state (the
Levenberg–Marquardt damping and statistics for ``gn``, the last global
gradient norm for adaptive FIPA, the safeguard's β, last accepted point and
the messages received there for FIPA), the history rows, the communication
counters and the solver clock.  A *fingerprint* (problem, its options,
method, method options, clients, seed, parameter count) is stored with it;
resuming with a different setup is an error naming the first difference.

Safety and integrity:

* only plain data is stored — tensors, numbers, strings, ``None``, lists and
  dicts (numpy scalars and arrays are converted on save; anything else is a
  programming error raised at save time) — and the file is read back with
  ``torch.load(..., weights_only=True)``, which refuses every other object, so
  a crafted file cannot run code;
* the file starts with one header line holding the SHA-256 of the serialized
  payload; a truncated, garbage or modified file fails the check and gives
  one :class:`CheckpointError` naming the file (CLI: exit 2);
* only a regular file no larger than half the available memory is read (a
  FIFO or a link to ``/dev/zero`` is refused without blocking);
* on resume the round loop checks what a consistent state must satisfy: the
  round in ``[0, rounds]``, history steps within it, non-negative counters and
  clock, parameters of the run's shape, dtype and finite.

The checksum is not a signature: it has no key, so someone who can write the
directory can change values *and* recompute it.  A forged state that passes
every consistency check above (say, other finite parameters of the right
shape) cannot be told from a real one; keep checkpoint directories private.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import numbers
import os
import stat

from typing import Any, Union

import numpy as np
import torch

from fedsciml.runtime.files import write_atomic
from fedsciml.runtime.memory import available_memory

MapLocation = Union[str, torch.device, None]  # where torch.load puts the tensors (``None``: where they were saved)

FILENAME = "state.pt"
MAGIC = b"fedsciml-checkpoint v1 sha256="
_HEADER_LEN = len(MAGIC) + 64 + 1  # magic, hex digest, newline

# top-level entries the round loop writes, and their types
REQUIRED: dict[str, type | tuple[type, ...]] = {"fingerprint": dict, "round": int, "rng": dict, "strategy": dict, "rows": list, "floats_up": int,
            "floats_down": int, "elapsed": (int, float), "rejections": list}


class CheckpointError(ValueError):
    """A checkpoint cannot be written or read back (corrupt, foreign, or unsafe)."""


class CheckpointMismatch(CheckpointError):
    """The checkpoint was written by a run with different settings."""


_MISSING = object()


def restored_tensor(d: dict, key: str, *, like: torch.Tensor | None = None, shape: tuple | None = None,
                    nonneg: bool = False, optional: bool = False) -> torch.Tensor | None:
    """Field ``key`` of a restored strategy state: a finite floating tensor of ``shape`` (or ``like``'s shape
    and dtype), ``≥ 0`` where asked; ``None`` only where ``optional`` (the key present with ``None``, or
    absent).  A :class:`CheckpointError` naming the field otherwise (the loop adds the checkpoint's path)."""
    v = d.get(key, _MISSING)
    if v is _MISSING or v is None:
        if optional:
            return None
        raise CheckpointError(f"state field {key!r} is missing")
    if not isinstance(v, torch.Tensor) or not v.is_floating_point():
        raise CheckpointError(f"state field {key!r} must be a floating-point tensor, got {type(v).__name__}"
                              f"{'' if not isinstance(v, torch.Tensor) else ' of ' + str(v.dtype)}")
    want = tuple(like.shape) if like is not None else shape
    if want is not None and tuple(v.shape) != tuple(want):
        raise CheckpointError(f"state field {key!r} has shape {tuple(v.shape)}, this run needs {tuple(want)}")
    if like is not None and v.dtype != like.dtype:
        raise CheckpointError(f"state field {key!r} is {v.dtype}, this run's parameters {like.dtype}")
    if not bool(torch.isfinite(v).all()):
        raise CheckpointError(f"state field {key!r} holds non-finite values")
    if nonneg and bool((v < 0).any()):
        raise CheckpointError(f"state field {key!r} holds negative values (it is a sum of squares)")
    return v


def restored_number(d: dict, key: str, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
                    integer: bool = False, optional: bool = False, default: Any = None) -> Any:
    """Field ``key`` of a restored strategy state: a finite number (an integer where asked) in the range;
    ``default`` where ``optional`` and absent or ``None``.  A :class:`CheckpointError` naming the field otherwise."""
    v = d.get(key, _MISSING)
    if v is _MISSING or v is None:
        if optional:
            return default
        raise CheckpointError(f"state field {key!r} is missing")
    if isinstance(v, torch.Tensor) and v.numel() == 1:
        v = v.item()
    ok_type = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok_type or not math.isfinite(float(v)):
        raise CheckpointError(f"state field {key!r} must be a finite {'integer' if integer else 'number'}, got {v!r}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise CheckpointError(f"state field {key!r} = {v!r} must be {'>' if lo_open else '≥'} {lo:g}")
    if hi is not None and v > hi:
        raise CheckpointError(f"state field {key!r} = {v!r} must be ≤ {hi:g}")
    return v


def path_in(directory: str) -> str:
    return os.path.join(directory, FILENAME)


def plain(obj: Any, where: str = "state") -> Any:
    """``obj`` with numpy scalars/arrays converted to Python numbers/tensors and tuples to lists.

    Raises ``TypeError`` for anything that is not a tensor, number, string,
    ``None``, list or dict with string/int keys: such objects could not be
    read back with ``weights_only=True``.
    """
    if obj is None or isinstance(obj, (bool, str, torch.Tensor)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return float(obj)
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError(f"checkpoint entry {where} is a numpy object array; store plain data")
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, (list, tuple)):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        out: dict[str | int, Any] = {}
        for k, v in obj.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"checkpoint entry {where} has a key of type {type(k).__name__}; use str or int")
            out[k] = plain(v, f"{where}[{k!r}]")
        return out
    raise TypeError(f"checkpoint entry {where} is a {type(obj).__module__}.{type(obj).__name__}; a checkpoint "
                    f"holds only tensors, numbers, strings, None, lists and dicts")


def _normalized(fingerprint: Any) -> dict:
    return json.loads(json.dumps(fingerprint, default=str))


def _remove_leftover(directory: str) -> None:
    tmp = path_in(directory) + ".tmp"
    if os.path.isfile(tmp):  # a write interrupted before os.replace: never a valid checkpoint
        try:
            os.remove(tmp)
        except OSError:
            pass


def save(directory: str, state: dict) -> str:
    final = path_in(directory)
    state = dict(state)
    if "fingerprint" in state:  # stored in the normalized form it is compared in
        state["fingerprint"] = _normalized(state["fingerprint"])
    buf = io.BytesIO()
    torch.save(plain(state), buf)
    payload = buf.getvalue()
    header = MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n"
    try:
        os.makedirs(directory, exist_ok=True)
        write_atomic(final, lambda f: (f.write(header), f.write(payload)), binary=True, own_input=True)
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {final}: {e.strerror or e}") from None
    return final


def _read_regular(path: str) -> bytes:
    """The bytes of ``path`` if it is a regular file no larger than half the memory available.

    Opened non-blocking and checked with ``fstat`` on the open descriptor (no window between the
    check and the read): a FIFO would block ``open``/``read`` forever and a link to ``/dev/zero``
    would read until memory runs out, so neither is ever read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"checkpoint {path} is not a regular file (a FIFO, device or directory); "
                                  "delete it or use another --checkpoint directory")
        limit = (available_memory() or 1 << 62) // 2  # unknown: no cap beyond the file's own size
        if st.st_size > limit:
            raise CheckpointError(f"checkpoint {path} is {st.st_size / 2**30:.1f} GiB, more than half the "
                                  f"{2 * limit / 2**30:.1f} GiB of memory available; not read")
        chunks, left = [], st.st_size + 1  # one byte more: a file that grows while read is caught below
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        raw = b"".join(chunks)
        if len(raw) > st.st_size:
            raise CheckpointError(f"checkpoint {path} grew while it was read; not a finished checkpoint")
        return raw
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def read(path: str, map_location: MapLocation = None) -> dict:
    """The state stored in ``path``, checksum verified, loaded without running code."""
    raw = _read_regular(path)
    if not raw.startswith(MAGIC) or len(raw) < _HEADER_LEN or raw[_HEADER_LEN - 1:_HEADER_LEN] != b"\n":
        raise CheckpointError(f"{path} is not a fedsciml checkpoint (no checksum header; garbage, or written by an "
                              f"older version); delete it or use another --checkpoint directory")
    digest, payload = raw[len(MAGIC):_HEADER_LEN - 1].decode("ascii", "replace"), raw[_HEADER_LEN:]
    if hashlib.sha256(payload).hexdigest() != digest:
        raise CheckpointError(f"checkpoint {path} is corrupt (SHA-256 mismatch: truncated or modified); "
                              f"delete it or use another --checkpoint directory")
    try:
        state = torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001 - weights_only refusal or a broken archive: one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"checkpoint {path} was refused: it holds something other than tensors, numbers, "
                              f"strings, lists and dicts, or is malformed ({first[:160]})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path} does not hold a state dictionary")
    for key, typ in REQUIRED.items():
        if key not in state:
            raise CheckpointError(f"checkpoint {path} lacks the entry {key!r}")
        if not isinstance(state[key], typ) or isinstance(state[key], bool):
            raise CheckpointError(f"checkpoint {path}: entry {key!r} has type {type(state[key]).__name__}")
    return state


def load(directory: str, fingerprint: dict, map_location: MapLocation = None) -> dict | None:
    """The saved state, or ``None`` when the directory holds no checkpoint yet."""
    _remove_leftover(directory)
    path = path_in(directory)
    if not os.path.lexists(path):
        return None
    state = read(path, map_location)
    saved = state["fingerprint"]
    want, have = _normalized(fingerprint), _normalized(saved)
    for key in sorted(set(want) | set(have)):
        if want.get(key) != have.get(key):
            raise CheckpointMismatch(
                f"checkpoint {path} was written by a different run: {key} is {have.get(key)!r} there, "
                f"{want.get(key)!r} now; use another --checkpoint directory or the same settings")
    return state
