"""Files the library reads from users and writes for them: one check that a path is a bounded regular file, and
one atomic write.

* :func:`regular_file_size` — ``os.stat`` first, so a FIFO (``open`` would block forever), a device or a link to
  ``/dev/zero`` (a read that never ends) and a file larger than the caller's bound are refused before anything is
  opened; :class:`FileRefused` carries one line naming the path, which each caller wraps in its own error
  (``predict``'s ``--points``, the model files of :mod:`fedsciml.runtime.modelio`).
* :func:`read_regular_file` — that check, then the bytes, read from a descriptor opened without blocking and
  checked again (``--config``).
* :func:`write_atomic` — ``path + ".tmp"`` written, flushed and ``fsync``-ed, then ``os.replace``-d onto ``path``:
  a write that fails (a full disk) or a process killed mid-write leaves no half file that looks valid, and the
  temporary file is removed on failure (``predict --out``, the checkpoints of :mod:`fedsciml.runtime.checkpoint`).
"""
from __future__ import annotations

import os
import stat
from typing import IO, Any, Callable


class FileRefused(ValueError):
    """A path that is not a readable regular file within the caller's bound (one line naming it)."""


def regular_file_size(path: str, limit: int, what: str, too_large: str = "") -> int:
    """The size of ``path``, a regular file of at most ``limit`` bytes; else :class:`FileRefused`.  ``what``
    names what the file should be (``"a model.json"``), for the message; ``too_large``: what to do about a file
    over the bound (``"split it"``), appended to that message."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise FileRefused(f"{path!r} cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{path!r} is not a regular file (a directory, FIFO or device); {what} is a file")
    if st.st_size > limit:
        raise FileRefused(f"{path!r} holds {st.st_size:,} bytes, more than the {limit:,} {what} may hold"
                          f"{'; ' + too_large if too_large else ''}")
    return int(st.st_size)


def write_atomic(path: str, write: Callable[[IO[Any]], object], *, binary: bool = False,
                 newline: str | None = None) -> None:
    """``write(f)`` into ``path + ".tmp"`` (text, or bytes with ``binary``), then ``fsync`` and
    ``os.replace(tmp, path)``.  An ``OSError`` on the way removes the temporary file and propagates (the caller
    names the path in its own one-line error); ``path`` is then untouched."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb" if binary else "w", newline=None if binary else newline) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def read_regular_file(path: str, limit: int, what: str, too_large: str = "") -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (:func:`regular_file_size`'s check, then
    the same check on the opened descriptor: the file is opened without blocking, so a FIFO put there after the
    check cannot hang the read, and at most ``limit + 1`` bytes are read whatever the file has become); else
    :class:`FileRefused`, one line naming the path (``--config``'s TOML file)."""
    regular_file_size(path, limit, what, too_large)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise FileRefused(f"{path!r} cannot be read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise FileRefused(f"{path!r} is not a regular file (a directory, FIFO or device); {what} is a file")
        try:
            data = f.read(limit + 1)
        except OSError as e:
            raise FileRefused(f"{path!r} cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise FileRefused(f"{path!r} holds more than the {limit:,} bytes {what} may hold"
                          f"{'; ' + too_large if too_large else ''}")
    return data
