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
:class:`~fedsciml.runtime.checks.SetupError`); one that dies during the run answers nothing, and the round
loop treats it as a client that did not answer.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from typing import Any, BinaryIO, Hashable, Sequence

from fedsciml.runtime.driver import ENGINES, register_engine
from fedsciml.runtime.transport import (Failure, Request, Transport, reply_from_bytes, reply_to_bytes,
                                        request_from_bytes, request_to_bytes)

_LEN = struct.Struct("<Q")  # a message on a pipe: its length (8 bytes), then its bytes


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
    from fedsciml.runtime.client import Client
    from fedsciml.runtime.transport import LocalTransport

    try:
        torch.set_num_threads(int(job.get("threads", 1)))
        _import_problem_module(job)
        problem = get_problem(job["problem"], **job["options"])
        seed = int(job["seed"])
        torch.manual_seed(seed)  # the driver's order: seed, the split, θ₀
        objective = problem.client_objectives(int(job["clients"]), seed=seed, device=job["device"])[cid]
        check_objectives([objective], problem.init_params(seed, device=job["device"]))
    except Exception as e:  # the client's one line, for the server to raise
        _send(out, json.dumps({"error": f"client {cid}: {type(e).__name__}: {e}"}).encode())
        return
    transport = LocalTransport([Client(cid, objective)], vectorize=False)  # one client: nothing to batch
    _send(out, json.dumps({"n": int(objective.n_residuals), "p": int(objective.n_params),
                           "linear": isinstance(objective, LinearLeastSquares)}).encode())
    while True:
        data = _recv(inp)
        if not data:
            return
        answer = transport.ask([cid], request_from_bytes(data))[cid]
        _send(out, reply_to_bytes(answer))


class ProcessTransport(Transport):
    """The clients of one job, each in its own process (see the module docstring)."""

    def __init__(self, job: dict, clients: int):
        self.client_ids = list(range(int(clients)))
        self._procs: dict = {}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # this process's fedsciml
        for cid in self.client_ids:  # a fresh interpreter each: nothing of the server's memory is inherited
            self._procs[cid] = subprocess.Popen(
                [sys.executable, "-c", "from fedsciml.engines.processes import main; main()", json.dumps(job), str(cid)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.described: dict[Any, dict] = {}
        try:
            for cid in self.client_ids:
                try:
                    said = json.loads(_recv(self._procs[cid].stdout))
                except EOFError:
                    said = {"error": f"client {cid}: its process ended before it said its sizes"}
                if "error" in said:
                    from fedsciml.runtime.checks import SetupError

                    raise SetupError(said["error"])
                self.described[cid] = said
        except BaseException:
            self.close()
            raise
        self.sample_counts = {c: d["n"] for c, d in self.described.items()}

    def ask(self, client_ids: Sequence[Hashable], request: Request) -> dict:
        data = request_to_bytes(request)
        sent = []
        for cid in client_ids:  # every asked client works at once
            try:
                _send(self._procs[cid].stdin, data)
                sent.append(cid)
            except OSError:
                pass
        out: dict = {}
        for cid in client_ids:
            try:
                out[cid] = reply_from_bytes(_recv(self._procs[cid].stdout)) if cid in sent else None
            except (EOFError, OSError):
                out[cid] = None
            if out[cid] is None:
                out[cid] = Failure(f"client {cid}'s process ended (exit code {self._procs[cid].poll()})")
        return out

    def close(self) -> None:
        """End every client process (an empty message; terminated if it does not end within 10 s)."""
        for proc in self._procs.values():
            try:
                _send(proc.stdin, b"")
                proc.stdin.close()
            except OSError:
                pass
        for proc in self._procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait()
            proc.stdout.close()


def connect(job: dict, clients: int) -> ProcessTransport:
    """The engine: ``clients`` client processes for ``job``, behind one transport."""
    return ProcessTransport({**job, "module": _problem_module(job["problem"])}, clients)


def _problem_module(name: str) -> list | None:
    """``[module, file]`` of the user module that registered problem ``name`` in this process (a ``--plugin`` file,
    ``FEDSCIML_PLUGINS``, or any module of the user's), for the client processes to import too; ``None`` for
    fedsciml's own problems (and installed plugins', which load themselves by their entry points).  A problem
    registered by the script being run (``__main__``) cannot be imported by another process: refused in one line."""
    from fedsciml.problems.registry import REGISTRY

    module = sys.modules.get(getattr(REGISTRY.get(name), "__module__", ""))
    if module is None or module.__name__.startswith("fedsciml."):
        return None
    if module.__name__ == "__main__":
        raise ValueError(f"engine 'processes': problem {name!r} is registered by the script being run (__main__), "
                         f"which a client process cannot import; register it in a module (--plugin FILE, "
                         f"FEDSCIML_PLUGINS or an installed package)")
    path = getattr(module, "__file__", None)
    return [module.__name__, path] if path else None


def _import_problem_module(job: dict) -> None:
    """In a client process: the module that registered the job's problem (:func:`_problem_module`) — by its
    name where this process can import it, else from its file under that name (a ``--plugin`` file)."""
    import importlib
    import importlib.util

    if not job.get("module"):
        return
    name, path = job["module"]
    if name in sys.modules:
        return
    try:
        importlib.import_module(name)
        return
    except ImportError:
        pass
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"the module {name!r} that registers problem {job['problem']!r} cannot be imported from "
                          f"{path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


if "processes" not in ENGINES:
    register_engine("processes", connect=connect)


def main() -> None:
    """A client process (``python -c "from fedsciml.engines.processes import main; main()" JOB_JSON CID``)."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # the pipe carries messages only: anything printed goes to stderr
    _serve(json.loads(sys.argv[1]), int(sys.argv[2]), inp, out)
