"""Files the library reads from users and writes for them: one check that a path is a bounded regular file, and
one writer that never changes what a path is.

* :func:`regular_file_size` — ``os.stat`` first, so a FIFO (``open`` would block forever), a device or a link to
  ``/dev/zero`` (a read that never ends) and a file larger than the caller's bound are refused before anything is
  opened; :class:`FileRefused` carries one line naming the path, which each caller wraps in its own error
  (``predict``'s ``--points``, the model files of :mod:`fedsciml.runtime.modelio`).
* :func:`read_regular_file` — that check, then the bytes, read from a descriptor opened without blocking and
  checked again (``--config``).
* :func:`write_output` (and :func:`write_outputs` for files that go together, a model's two) — every file the
  library or the CLI writes (``--json``, ``--out`` and everything in it, ``predict --out``, the model files, the
  checkpoints, ``BestModelCheckpoint(path=…)``, the plots) goes through it.  What happens depends on what the
  path *is*, and the path stays what it is:

  - a regular file, or nothing: written whole to a temporary file beside it (flushed, ``fsync``-ed), then
    ``os.replace``-d onto it — a failed write (a full disk) or a process killed mid-write leaves the old file or
    nothing, never half a file; the old file's permission bits are kept (a hard link to the old file keeps the
    old content: the name gets a new file);
  - a symbolic link: followed (to the end of the chain); its target is what is written, atomically as above when
    it is a regular file or does not exist yet (a dangling link's target is created, as ``open`` would) — the
    link itself stays a link;
  - a character device (``/dev/null``, a terminal): written through, in place — nothing is created or renamed;
  - ``-``: standard output, where the caller allows it (``stdout=True``: ``predict --out -``, ``--json -``);
  - a directory, a FIFO (a write would block until a reader comes), a socket, a block device: refused;
  - an *input* of the same command (:func:`protect_inputs`: ``predict --out`` onto the model's own files or onto
    its ``--points`` file, ``--json`` onto the ``--config`` file): refused.

  A refusal is an :class:`OutputRefused` — an ``OSError`` whose ``strerror`` is one line naming the path, so the
  callers' existing handling of a write that fails (one line; a finished run's results saved elsewhere) applies.
  :func:`check_output` applies the same rules before a run, so that a refusal costs no work.
"""
from __future__ import annotations

import contextvars
import errno
import io
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

STDOUT = "-"


class FileRefused(ValueError):
    """A path that is not a readable regular file within the caller's bound (one line naming it)."""


class OutputRefused(OSError):
    """An output path that is not written, by the rules of :func:`write_output` (one line naming it:
    ``strerror``)."""

    def __init__(self, message: str):
        super().__init__(errno.EINVAL, message)

    def __str__(self) -> str:
        return str(self.strerror)


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


# --- inputs of the running command ------------------------------------------------------------------------------

_INPUTS: contextvars.ContextVar[tuple] = contextvars.ContextVar("fedsciml_inputs", default=())


def _identity(path: str) -> tuple | None:
    """``(st_dev, st_ino)`` of what ``path`` names (links followed), for a regular file; else ``None``."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


@contextmanager
def protect_inputs(paths: Iterable[str | os.PathLike | None]) -> Iterator[None]:
    """Within the block, :func:`write_output` refuses to write onto any of ``paths`` (the regular files among
    them, whatever name or link reaches them: compared by device and inode) — the inputs of the running command
    (``predict``'s model files and ``--points``, ``--config``, tables, a resumed checkpoint)."""
    ids = {}
    for p in paths:
        if p is None or p == STDOUT:
            continue
        ident = _identity(os.fspath(p))
        if ident is not None:
            ids[ident] = os.fspath(p)
    token = _INPUTS.set(_INPUTS.get() + tuple(ids.items()))
    try:
        yield
    finally:
        _INPUTS.reset(token)


def _input_named(ident: tuple | None) -> str | None:
    if ident is None:
        return None
    return next((name for i, name in _INPUTS.get() if i == ident), None)


# --- what an output path is --------------------------------------------------------------------------------------

def _kind_word(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def resolve_output(path: str | os.PathLike, what: str = "the output", *, stdout: bool = False,
                   own_input: bool = False) -> tuple[str, str]:
    """``(kind, target)`` for an output path by the rules of :func:`write_output`: ``("stdout", "-")``,
    ``("device", path)`` or ``("file", the regular file or new file to replace atomically — links followed)``;
    an :class:`OutputRefused` otherwise.  ``own_input``: the writer rewrites its own input by design (a
    checkpoint), so :func:`protect_inputs` does not apply."""
    path = os.fspath(path)
    if path == STDOUT:
        if stdout:
            return "stdout", STDOUT
        raise OutputRefused(f"{what} {path!r}: standard output is not a place for it; give a file path")
    try:
        st = os.stat(path)  # links followed
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputRefused(f"{what} {path!r} cannot be written ({e.strerror or e})") from None
    if st is not None and stat.S_ISCHR(st.st_mode):
        return "device", path
    if st is not None and not stat.S_ISREG(st.st_mode):
        where = "" if os.path.realpath(path) == os.path.abspath(path) else f" (a link to {os.path.realpath(path)!r})"
        raise OutputRefused(f"{what} {path!r}{where} is {_kind_word(st.st_mode)}; it is written to a regular file, "
                            f"a new file, a character device such as /dev/null{', or - (standard output)' if stdout else ''}")
    target = os.path.realpath(path)  # a link: its target is written, the link stays
    if not own_input and st is not None:
        name = _input_named((st.st_dev, st.st_ino))
        if name is not None:
            same = "" if os.path.realpath(name) == target and name == path else f" (the same file as {name!r})"
            raise OutputRefused(f"{what} {path!r} is an input of this command{same}; writing it would replace what "
                                f"is being read: give another path")
    return "file", target


def check_output(path: str | os.PathLike, what: str = "the output", *, stdout: bool = False) -> str:
    """Before a run: ``path`` would be written (:func:`resolve_output`) and the directory of its target takes a
    new file (created where missing); returns the path.  Nothing at ``path`` is created, removed or changed."""
    kind, target = resolve_output(path, what, stdout=stdout)
    if kind != "file":
        if kind == "device" and not os.access(target, os.W_OK):
            raise OutputRefused(f"{what} {os.fspath(path)!r} cannot be written (permission denied)")
        return os.fspath(path)
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".fedsciml-write-check-")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise OutputRefused(f"{what} {os.fspath(path)!r} cannot be written: {e.strerror or e}") from None
    if os.path.exists(target) and not os.access(target, os.W_OK) and os.geteuid() != 0:
        raise OutputRefused(f"{what} {os.fspath(path)!r} cannot be written (permission denied)")
    return os.fspath(path)


# --- the writer -------------------------------------------------------------------------------------------------

Writer = Callable[[IO[Any]], object]


class _Pending:
    """One output being written: a temporary file beside a regular target (committed with ``os.replace``), or
    the content for a device / standard output (written at commit)."""

    def __init__(self, path: str, write: Writer, binary: bool, newline: str | None, what: str, stdout: bool,
                 own_input: bool):
        self.path, self.binary, self.newline = os.fspath(path), binary, newline
        self.kind, self.target = resolve_output(path, what, stdout=stdout, own_input=own_input)
        self.tmp: str | None = None
        self.data: bytes | str | None = None
        if self.kind == "file":
            self._to_tmp(write)
        else:  # written at commit, in one go
            buf: io.BytesIO | io.StringIO = io.BytesIO() if binary else io.StringIO(newline=newline)
            write(buf)
            self.data = buf.getvalue()

    def _to_tmp(self, write: Writer) -> None:
        tmp = self.target + ".tmp"
        try:
            st = os.lstat(tmp)
        except FileNotFoundError:
            st = None
        if st is not None:  # a leftover of an interrupted write (or a link planted there): never followed
            if stat.S_ISDIR(st.st_mode):
                raise OutputRefused(f"{tmp!r} is a directory; it is in the way of writing {self.path!r}")
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        self.tmp = tmp
        try:
            try:
                os.fchmod(fd, stat.S_IMODE(os.stat(self.target).st_mode))  # the replaced file's permission bits
            except FileNotFoundError:
                pass
            with os.fdopen(fd, "wb" if self.binary else "w", newline=None if self.binary else self.newline) as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            self.discard()
            raise

    def commit(self) -> None:
        if self.kind == "file":
            assert self.tmp is not None
            os.replace(self.tmp, self.target)
            self.tmp = None
        elif self.kind == "stdout":
            if self.binary:
                sys.stdout.flush()
                sys.stdout.buffer.write(self.data)  # type: ignore[arg-type]
            else:
                sys.stdout.write(self.data)  # type: ignore[arg-type]
            sys.stdout.flush()
        else:  # a character device: opened for writing as it is (no create, no truncate, no rename)
            fd = os.open(self.target, os.O_WRONLY | getattr(os, "O_NOCTTY", 0))
            with os.fdopen(fd, "wb" if self.binary else "w", newline=None if self.binary else self.newline) as f:
                f.write(self.data)

    def discard(self) -> None:
        if self.tmp is not None:
            try:
                os.remove(self.tmp)
            except OSError:
                pass
            self.tmp = None


def write_outputs(items: Sequence[tuple[str, Writer]], *, binary: bool = False, newline: str | None = None,
                  what: str = "the output", stdout: bool = False, own_input: bool = False) -> None:
    """``write(f)`` for each ``(path, write)`` by the rules of :func:`write_output`; every file is written to its
    temporary name first and only then are they put in place, so a failure while writing any leaves all the
    targets as they were (a model's ``model.safetensors`` and ``model.json``).  Any exception on the way removes
    the temporary files and propagates (the caller names the path in its own one-line error)."""
    pending: list[_Pending] = []
    try:
        for path, write in items:
            pending.append(_Pending(path, write, binary, newline, what, stdout, own_input))
        for p in pending:
            p.commit()
    finally:
        for p in pending:
            p.discard()


def write_output(path: str | os.PathLike, write: Writer, *, binary: bool = False, newline: str | None = None,
                 what: str = "the output", stdout: bool = False, own_input: bool = False) -> None:
    """``write(f)`` to ``path`` (text, or bytes with ``binary``), never changing what ``path`` is: atomically over
    a regular file or a new one (links followed to their target), through to a character device, to standard
    output for ``-`` where ``stdout``; a directory, FIFO, socket or an input of the command
    (:func:`protect_inputs`, unless ``own_input``) is refused with an :class:`OutputRefused` naming it as
    ``what``.  An exception on the way removes the temporary file; ``path`` is then untouched."""
    write_outputs([(os.fspath(path), write)], binary=binary, newline=newline, what=what, stdout=stdout,
                  own_input=own_input)


def write_atomic(path: str, write: Writer, *, binary: bool = False, newline: str | None = None,
                 own_input: bool = False) -> None:
    """:func:`write_output` (the name callers used before it wrote through devices and links)."""
    write_output(path, write, binary=binary, newline=newline, own_input=own_input)


def write_bytes(path: str | os.PathLike, data: bytes, **kw: Any) -> None:
    """``data`` to ``path`` by :func:`write_output`'s rules."""
    write_output(path, lambda f: f.write(data), binary=True, **kw)


def write_text(path: str | os.PathLike, text: str, **kw: Any) -> None:
    """``text`` to ``path`` by :func:`write_output`'s rules."""
    write_output(path, lambda f: f.write(text), **kw)


def save_figure(fig: Any, path: str | os.PathLike, **savefig_kw: Any) -> str:
    """A matplotlib figure as PNG to ``path`` by :func:`write_output`'s rules (drawn into memory first, so a
    figure that fails to draw writes nothing); returns the path."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig_kw)
    write_bytes(path, buf.getvalue(), what="a plot")
    return os.fspath(path)
