"""Engine ``processes``: every client in a process of its own; the server never holds a client's data.

The whole engine is :func:`connect` (``register_engine("processes", connect=connect)``): it starts one process
per client, each builds the job's problem and keeps its own client's objective only (the split is the
problem's, seeded as in process, so a client's rows are bit for bit the ones it holds in process), checks it at
θ₀ and says its sizes; the returned :class:`ProcessTransport` carries every request to the asked clients as
bytes (:func:`fedsciml.runtime.transport.request_to_bytes`) — all of them before it waits for the first
answer — and their replies back.  The driver runs the method with it (:func:`fedsciml.runtime.driver.run`):
same strategy, same round loop, and the numbers of the in-process run whose clients are evaluated one by one
(``LocalTransport(vectorize=False)``, the same operations: bitwise, ``tests/test_engine_processes.py``; the
default in-process run batches the clients' Jacobians and may differ in the last bits, as Flower's nodes do)::

    fs.solve("bratu", method="fipa", clients=4, engine="processes")
    python -m fedsciml solve bratu --clients 4 --engine processes

The problem is built by its registered name: a user's problem registered by a module of theirs (a ``--plugin``
file, ``FEDSCIML_PLUGINS``, an installed package) is imported by each client process too; one registered by the
running script itself (``__main__``) cannot be, and is refused in one line.

A client process that fails to build or check its data ends the connection with its one line (a
:class:`~fedsciml.runtime.checks.SetupError`, naming the client and, for a bad table, the file: a problem with
``client_objective(k, clients)``, e.g. ``table``, is read for the process's own client only); one that dies during
the run answers nothing, and the round loop treats it as a client that did not answer (a dropout, by the method's
own rules: gn asks again and stops the run naming the clients that never answered).

**Limits.**  Every client runs on this machine, so :func:`check_plan` refuses a run, before any process starts,

* with more than :data:`PROCESSES_PER_CORE` client processes per core this process may run on
  (``os.sched_getaffinity``): ``--clients 500`` on 2 cores is one line, not 500 interpreters;
* whose memory does not fit: the run's in-process estimate (every client's data and statistics, the server's) plus
  :data:`PROCESS_BYTES` per client process (an interpreter with torch and fedsciml imported).

**Dead clients.**  Every wait for a client is bounded: :data:`REPLY_TIMEOUT_S` seconds (600; the environment
variable ``FEDSCIML_PROCESSES_TIMEOUT`` sets another) for each reply, :data:`START_TIMEOUT_S` (600, or the reply
timeout where longer) for its sizes at the start (an interpreter, torch and the client's data).  A client that
has not answered by then (stopped, ``kill -STOP``; stuck) is ended (``SIGKILL``: a late reply must not be read as
the answer to the next request) and counts as a client that did not answer, its reason naming it and the wait.

**CPU clock.**  Each reply carries its client process's CPU seconds (``time.process_time``, before the reply's
bytes); :meth:`ProcessTransport.cpu_seconds` sums the latest of every client, so that ``clock='cpu'``
(``--clock cpu``) counts the clients' CPU beside the server's (:class:`~fedsciml.runtime.loop.Simulation`).
"""
from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import sys
import time
from typing import Any, BinaryIO, Hashable, Sequence

from fedsciml.runtime.driver import ENGINES, OutOfMemory, check_memory, register_engine
from fedsciml.runtime.transport import (Failure, Request, Transport, reply_from_bytes, reply_to_bytes,
                                        request_from_bytes, request_to_bytes)

_LEN = struct.Struct("<Q")  # a message on a pipe: its length (8 bytes), then its bytes
_CPU = struct.Struct("<d")  # a reply starts with its client process's CPU seconds

#: client processes per core at most (``os.sched_getaffinity``): the clients of a round compute at once, one
#: thread each; more than a few per core only queue, each holding an interpreter
PROCESSES_PER_CORE = 4
#: memory charged per client process beyond its data: an interpreter with torch and fedsciml imported (peak RSS
#: 0.23 GB measured for a whole ``solve sin1d`` CLI run at one thread; rounded up)
PROCESS_BYTES = 0.3e9
#: seconds a client may take for a reply before it counts as gone (``FEDSCIML_PROCESSES_TIMEOUT``)
REPLY_TIMEOUT_S = 600.0
#: seconds a client process may take to start, build its data and say its sizes (at least the reply timeout)
START_TIMEOUT_S = 600.0


def reply_timeout() -> float:
    """The wait for a client's answer: ``FEDSCIML_PROCESSES_TIMEOUT`` seconds where set (a finite number > 0), else
    :data:`REPLY_TIMEOUT_S`."""
    text = os.environ.get("FEDSCIML_PROCESSES_TIMEOUT")
    if text is None or text.strip() == "":
        return float(REPLY_TIMEOUT_S)
    try:
        t = float(text)
    except ValueError:
        t = float("nan")
    if not (t > 0 and t < float("inf")):
        raise ValueError(f"FEDSCIML_PROCESSES_TIMEOUT must be a number of seconds > 0, got {text!r}")
    return t


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def check_plan(estimate: tuple[float, str] | None, clients: int, device=None) -> None:
    """The engine's check of a planned run (module docstring, *Limits*): the cap on processes, then memory."""
    n, cap = int(clients), PROCESSES_PER_CORE * cores()
    if n > cap:
        raise ValueError(f"engine 'processes' starts one process per client: {n:,} clients on {cores()} core(s) "
                         f"is more than {cap} ({PROCESSES_PER_CORE} per core); use at most {cap} clients here, or "
                         f"engine 'local' (the same run in this process)")
    need = n * PROCESS_BYTES + (0.0 if estimate is None else float(estimate[0]))
    how = f"{n:,} client process(es) × {PROCESS_BYTES / 1e9:.2g} GB" + ("" if estimate is None else
                                                                      f" + {estimate[1]}")
    check_memory(need, f"engine 'processes' ({how})", device, "use fewer clients, fewer points per client or a "
                 "smaller network")


__all__ = ["ProcessTransport", "check_plan", "connect", "reply_timeout", "OutOfMemory"]


def _send(stream: BinaryIO, data: bytes) -> None:
    stream.write(_LEN.pack(len(data)) + data)
    stream.flush()


def _recv(stream: BinaryIO) -> bytes:
    head = stream.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError("the other end closed the pipe")
    n = _LEN.unpack(head)[0]
    data = stream.read(n)
    if len(data) < n:
        raise EOFError("the other end closed the pipe")
    return data


def _serve(job: dict, cid: int, inp: BinaryIO, out: BinaryIO) -> None:
    """A client process: build the job's split, keep client ``cid``'s objective, check it, then answer requests
    (bytes in, bytes out) until the server sends an empty message."""
    import torch

    import fedsciml.engines  # noqa: F401  (the methods' client handlers)
    from fedsciml.core.objective import LinearLeastSquares
    from fedsciml.problems import get_problem
    from fedsciml.runtime.checks import check_objectives
    from fedsciml.runtime.client import job_client
    from fedsciml.runtime.plugins import import_modules
    from fedsciml.runtime.transport import LocalTransport

    try:
        torch.set_num_threads(int(job.get("threads", 1)))
        import_modules(job.get("modules", ()))
        problem = get_problem(job["problem"], **job["options"])
        seed = int(job["seed"])
        # the driver's order: seed, the split (or a 'table' client's own file only, blamed on its client), θ₀
        client = job_client(problem, cid, int(job["clients"]), seed, job["device"])
        objective = client.objective
        check_objectives([objective], problem.init_params(seed, device=job["device"]))
    except Exception as e:  # the client's one line, for the server to raise
        _send(out, json.dumps({"error": f"client {cid}: {type(e).__name__}: {e}"}).encode())
        return
    transport = LocalTransport([client], vectorize=False)  # one client: nothing to batch
    _send(out, json.dumps({"n": int(objective.n_residuals), "p": int(objective.n_params),
                           "linear": isinstance(objective, LinearLeastSquares),
                           "cpu_s": time.process_time()}).encode())
    while True:
        data = _recv(inp)
        if not data:
            return
        answer = transport.ask([cid], request_from_bytes(data))[cid]
        body = reply_to_bytes(answer)
        _send(out, _CPU.pack(time.process_time()) + body)


def _exit_code(proc) -> int | None:
    """The exit code of a client process whose pipe just closed: it may not be reaped yet (``poll()`` then says
    ``None``, and the line read "exit code None"), so wait a moment for it."""
    try:
        return proc.wait(2.0)
    except subprocess.TimeoutExpired:
        return proc.poll()


def _exchange(procs: dict, cids: Sequence, data: bytes | None, timeout: float) -> tuple[dict, dict]:
    """Send ``data`` (a message; ``None``: nothing) to each of ``cids``' processes and read one message from each,
    all at once and without blocking on any one of them (a client that stopped reading or whose reply fills its
    pipe holds no other back), until ``timeout`` seconds have passed: ``({cid: bytes}, {cid: why})`` — ``why``
    for a client whose pipe closed or that did not answer in time."""
    deadline = time.monotonic() + timeout
    frame = b"" if data is None else _LEN.pack(len(data)) + data
    todo = {procs[c].stdin.fileno(): [c, 0] for c in cids} if frame else {}
    bufs = {c: bytearray() for c in cids}
    reads = {procs[c].stdout.fileno(): c for c in cids}
    got: dict = {}
    failed: dict = {}
    for fd in list(todo) + list(reads):
        os.set_blocking(fd, False)
    while reads:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        readable, writable, _ = select.select(list(reads), list(todo), [], left)
        for fd in writable:
            c, at = todo[fd]
            try:
                at += os.write(fd, frame[at:at + (1 << 20)])
            except BlockingIOError:
                continue
            except OSError:  # the process is gone: its read below sees the end of its pipe
                at = len(frame)
            todo[fd][1] = at
            if at >= len(frame):
                del todo[fd]
        for fd in readable:
            c = reads[fd]
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                failed[c] = f"its process ended (exit code {_exit_code(procs[c])})"
                del reads[fd]
                continue
            buf = bufs[c]
            buf += chunk
            if len(buf) >= _LEN.size:
                n = _LEN.unpack(bytes(buf[:_LEN.size]))[0]
                if len(buf) >= _LEN.size + n:
                    got[c] = bytes(buf[_LEN.size:_LEN.size + n])
                    del reads[fd]
    for c in reads.values():
        failed[c] = f"no answer within {timeout:g} s (its process is stopped or stuck; ended)"
    return got, failed


class ProcessTransport(Transport):
    """The clients of one job, each in its own process (see the module docstring)."""

    def __init__(self, job: dict, clients: int, timeout: float | None = None, start_timeout: float | None = None):
        self.client_ids = list(range(int(clients)))
        self.timeout = reply_timeout() if timeout is None else float(timeout)
        start = max(self.timeout, START_TIMEOUT_S if start_timeout is None else float(start_timeout))
        self._procs: dict = {}
        self._cpu: dict = {}  # cid -> the CPU seconds its process reported last
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # this process's fedsciml
        try:
            for cid in self.client_ids:  # a fresh interpreter each: nothing of the server's memory is inherited
                self._procs[cid] = subprocess.Popen(
                    [sys.executable, "-c", "from fedsciml.engines.processes import main; main()", json.dumps(job),
                     str(cid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
            self.described: dict[Any, dict] = {}
            got, failed = _exchange(self._procs, self.client_ids, None, start)
            for cid in self.client_ids:
                said = json.loads(got[cid]) if cid in got else {
                    "error": f"client {cid}: {failed[cid].replace('its process ended', 'its process ended before it said its sizes')}"}
                if "error" in said:
                    from fedsciml.runtime.checks import SetupError

                    raise SetupError(said["error"])
                self._cpu[cid] = float(said.pop("cpu_s", 0.0))
                self.described[cid] = said
        except BaseException:
            self.close()
            raise
        self.sample_counts = {c: d["n"] for c, d in self.described.items()}

    def cpu_seconds(self) -> float:
        """The CPU seconds the client processes have reported so far (each its latest), summed."""
        return float(sum(self._cpu.values()))

    def ask(self, client_ids: Sequence[Hashable], request: Request) -> dict:
        out: dict = {}
        sent = [c for c in client_ids if self._procs[c].poll() is None]
        for cid in client_ids:
            if cid not in sent:
                out[cid] = Failure(f"its process ended (exit code {self._procs[cid].poll()})", dropped=True)
        got, failed = _exchange(self._procs, sent, request_to_bytes(request), self.timeout)  # all at once
        for cid in sent:
            if cid in got and len(got[cid]) >= _CPU.size:
                self._cpu[cid] = max(self._cpu.get(cid, 0.0), _CPU.unpack(got[cid][:_CPU.size])[0])
                out[cid] = reply_from_bytes(got[cid][_CPU.size:])
            else:
                why = failed.get(cid, "its reply was cut short")
                if "no answer" in why:
                    self._end(cid)
                out[cid] = Failure(why, dropped=True)  # the round loop names the client
        return {cid: out[cid] for cid in client_ids}

    def _end(self, cid) -> None:
        proc = self._procs[cid]
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGKILL)  # a stopped process ends too (SIGKILL needs no SIGCONT)
            except ProcessLookupError:
                pass
            proc.wait()

    def close(self) -> None:
        """End every client process (an empty message; killed if it does not end within 10 s)."""
        for proc in self._procs.values():
            try:
                os.set_blocking(proc.stdin.fileno(), False)  # a stopped client's full pipe must not block the end
                proc.stdin.write(_LEN.pack(0))
            except (OSError, ValueError):
                pass
            try:
                proc.stdin.close()
            except OSError:
                pass
        for cid, proc in self._procs.items():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                self._end(cid)
            proc.stdout.close()


def connect(job: dict, clients: int) -> ProcessTransport:
    """The engine: ``clients`` client processes for ``job``, behind one transport.  The job carries the user
    modules the clients import (:mod:`fedsciml.runtime.plugins`): the one that registered its problem and those
    that registered client handlers (a plugin method's), so that a plugin runs here as in process."""
    from fedsciml.runtime.plugins import handler_modules

    problem = _problem_module(job["problem"])
    modules = ([problem] if problem else []) + [m for m in handler_modules() if m != problem]
    return ProcessTransport({**job, "modules": modules}, clients)


def _problem_module(name: str) -> list | None:
    """``[module, file]`` of the user module that registered problem ``name`` in this process (a ``--plugin`` file,
    ``FEDSCIML_PLUGINS``, or any module of the user's), for the client processes to import too; ``None`` for
    fedsciml's own problems (and installed plugins', which load themselves by their entry points).  A problem
    registered by the script being run (``__main__``) cannot be imported by another process: refused in one line."""
    from fedsciml.problems.registry import REGISTRY
    from fedsciml.runtime.plugins import user_module

    return user_module(REGISTRY.get(name), f"engine 'processes': problem {name!r}")


if "processes" not in ENGINES:
    register_engine("processes", connect=connect, check=check_plan)


def main() -> None:
    """A client process (``python -c "from fedsciml.engines.processes import main; main()" JOB_JSON CID``)."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # the pipe carries messages only: anything printed goes to stderr
    _serve(json.loads(sys.argv[1]), int(sys.argv[2]), inp, out)
