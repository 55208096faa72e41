"""The transport seam: the round loop asks clients through a transport, with plain-data requests.

A :class:`Request` is a *query name* (``"gn_loss"``, ``"gn_stats"``,
``"update"``, …), a few tensors (``{"theta": θ}``) and plain config values
(numbers, strings, booleans, ``None``, lists and dicts of them — JSON-able).
Nothing executable crosses the seam: each client dispatches on the query name
to code that runs on its own data (:meth:`fedsciml.runtime.client.Client.answer`).

A :class:`Transport` has one method,
``ask(client_ids, request) -> {client_id: Reply | Failure}``:

* :class:`Reply` — ``message``: the ``dict`` of tensors that the strategy's
  :class:`~fedsciml.core.schema.Schema` validates (it is what is
  aggregated and what is counted as sent), and ``metrics``: plain numbers for
  the history (e.g. the local step count adaptive FIPA chose), never aggregated;
* :class:`Failure` — the client could not answer: its local computation
  raised, or its answer was an error (the loop logs it as a rejection and the
  round goes on), or — ``dropped=True`` — no answer came at all (a node that
  is gone or did not answer within the transport's timeout: the loop treats it
  like a dropout, see :mod:`fedsciml.runtime.loop`).

Transports here:

* :class:`LocalTransport` — the clients live in this process (the default).
  Queries whose answers need each client's residual and Jacobian are evaluated
  for several clients at once (:class:`~fedsciml.runtime.client.ClientBatch`:
  one vectorized call over the pooled points, each client receiving exactly its
  own rows), unless the request's config says ``"vectorize": False``.
* :class:`BytesTransport` — wraps another transport and round-trips every
  request and reply through bytes (each tensor with ``numpy.save`` /
  ``numpy.load(allow_pickle=False)``, the config and metrics through JSON).  The
  results are bitwise identical to the wrapped transport's: the proof that the
  seam can be a process boundary.

Dropout, participation, validation, rejection logging, checkpoints and float
accounting are not the transport's business: they stay in the round loop
(:mod:`fedsciml.runtime.loop`).
"""
from __future__ import annotations

import io
import json
import struct
import time

from typing import Any, Hashable, Iterable, Sequence, Union

import numpy as np
import torch

from fedsciml.runtime.client import ClientBatch, handlers_of
from fedsciml.runtime.protocol import Failure, Reply, Request

Device = Union[torch.device, str]
Answer = Union[Reply, Failure]  # what a client's ask returns: its reply, or why there is none

__all__ = ["Request", "Reply", "Failure", "Transport", "LocalTransport", "BytesTransport", "request_to_bytes",
           "request_from_bytes", "reply_to_bytes", "reply_from_bytes"]


class Transport:
    """Carries requests to clients and their replies back (see the module docstring).

    The whole contract an engine implements (``connect(job, clients) -> Transport``, one file: subclass this and
    mypy checks the signatures): :meth:`ask`, and ``client_ids``/``sample_counts``; a transport whose clients
    build their own data elsewhere also fills ``described`` (``{cid: {"n", "p", "linear"}}``, what the server may
    know of each, :mod:`fedsciml.runtime.remote`).  :meth:`cpu_seconds`, :meth:`engine_info`,
    :meth:`final_metrics` and :meth:`close` have defaults (in-process clients, nothing of the engine's own) that
    an engine overrides where it has more to say; the driver calls each of them, declared here, never found
    by name."""

    client_ids: list
    sample_counts: dict  # client id -> number of residuals (declared at enrollment)
    described: dict  # client id -> what the server may know of a client elsewhere (remote transports)

    def ask(self, client_ids: Sequence[Hashable], request: Request) -> dict[Any, Answer]:  # pragma: no cover
        raise NotImplementedError

    def engine_info(self) -> dict:
        """What the engine records of the run (``Result.extra["engine"]`` beside its name, e.g. Flower's exchanges
        and their times); nothing by default."""
        return {}

    def final_metrics(self, problem, theta) -> dict:
        """The problem's final metrics from the clients' shares (a test set that lives on the sites); none by
        default: the server's own evaluation stands."""
        return {}

    def close(self) -> None:
        """Release what the transport holds (processes, connections), once, when the run ends; nothing by
        default."""

    def cpu_seconds(self) -> float | None:
        """CPU seconds the clients have spent outside this process so far, summed (``clock='cpu'`` adds what it
        grows by to this process's CPU): ``0.0`` for clients in this process (their CPU is this process's);
        ``None`` where it cannot be measured, and ``clock='cpu'`` is then refused.  A transport whose clients run
        elsewhere says so by overriding it."""
        return 0.0


class LocalTransport(Transport):
    """In-process clients (:class:`~fedsciml.runtime.client.Client`), vectorized across them where possible."""

    def __init__(self, clients: Iterable[Any], vectorize: bool = True):
        self.clients = {c.cid: c for c in clients}
        self.client_ids = [c.cid for c in clients]
        self.sample_counts = {c.cid: c.n for c in clients}
        self.vectorize = bool(vectorize)
        self._batches: dict[tuple, ClientBatch] = {}

    def replace_clients(self, clients: Iterable[Any]) -> None:
        """New in-process clients with the same ids (collocation resampling, :mod:`fedsciml.runtime.resample`);
        the cached client batches go with the old ones."""
        clients = list(clients)
        if [c.cid for c in clients] != self.client_ids:
            raise ValueError(f"replace_clients needs the same client ids {self.client_ids}, got {[c.cid for c in clients]}")
        self.clients = {c.cid: c for c in clients}
        self.sample_counts.clear()
        self.sample_counts.update({c.cid: c.n for c in clients})
        self._batches = {}

    def _batch(self, cids: Iterable[Hashable]) -> ClientBatch:
        key = tuple(cids)
        if key not in self._batches:
            self._batches[key] = ClientBatch([self.clients[c] for c in cids])
        return self._batches[key]

    def ask(self, client_ids: Sequence[Hashable], request: Request) -> dict[Any, Answer]:
        cids = list(client_ids)
        for kind in {type(self.clients[c]) for c in cids}:  # a strategy's mistake, not a client's failure
            table = handlers_of(kind)
            if request.query not in table:
                raise ValueError(f"unknown query {request.query!r}; {kind.__name__} answers {', '.join(sorted(table))}")
        cfg = request.config
        deadline = None
        if cfg.get("deadline_s") is not None:  # the clients of this process share one wall clock
            deadline = time.perf_counter() + float(cfg["deadline_s"])
        pre = {}
        if cids and self.vectorize and cfg.get("vectorize", True):  # the query's handler says what it shares
            pre = self._batch(cids).precompute(request)
        out = {}
        for cid in cids:
            try:
                out[cid] = self.clients[cid].answer(request, pre=pre.get(cid), deadline=deadline)
            except (FloatingPointError, RuntimeError) as e:  # a client that fails locally sends nothing
                out[cid] = Failure(f"client failed: {type(e).__name__}: {e}")
        return out


# --- bytes ---------------------------------------------------------------------------------


def _pack(tensors: dict, meta: dict) -> bytes:
    """``[len(json)][json][tensor blobs]``; tensors in sorted-name order, each a ``.npy`` blob."""
    names = sorted(tensors)
    blobs = []
    for k in names:
        buf = io.BytesIO()
        np.save(buf, tensors[k].detach().cpu().numpy(), allow_pickle=False)
        blobs.append(buf.getvalue())
    head = json.dumps({"meta": meta, "tensors": names, "sizes": [len(b) for b in blobs]}).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def _unpack(data: bytes, device: Device) -> tuple[dict, dict]:
    (n,) = struct.unpack("<Q", data[:8])
    head = json.loads(data[8:8 + n].decode())
    pos = 8 + n
    tensors = {}
    for name, size in zip(head["tensors"], head["sizes"]):
        arr = np.load(io.BytesIO(data[pos:pos + size]), allow_pickle=False)
        tensors[name] = torch.from_numpy(arr).to(device)
        pos += size
    return tensors, head["meta"]


def request_to_bytes(req: Request) -> bytes:
    return _pack(req.tensors, {"query": req.query, "config": req.config})


def request_from_bytes(data: bytes, device: Device = "cpu") -> Request:
    tensors, meta = _unpack(data, device)
    return Request(meta["query"], tensors, meta["config"])


def reply_to_bytes(rep: Answer) -> bytes:
    if isinstance(rep, Failure):
        return _pack({}, {"failure": rep.reason, **({"dropped": True} if rep.dropped else {})})
    msg = rep.message if isinstance(rep.message, dict) else {}
    return _pack(msg, {"metrics": rep.metrics})


def reply_from_bytes(data: bytes, device: Device = "cpu") -> Answer:
    tensors, meta = _unpack(data, device)
    if "failure" in meta:
        return Failure(meta["failure"], bool(meta.get("dropped", False)))
    return Reply(tensors, meta["metrics"])


class BytesTransport(Transport):
    """Round-trips every request and reply of ``inner`` through bytes (see the module docstring)."""

    def __init__(self, inner: Transport, device: Device = "cpu"):
        self.inner = inner
        self.client_ids = inner.client_ids
        self.sample_counts = inner.sample_counts
        self.device = device
        self.bytes_down = 0
        self.bytes_up = 0

    def ask(self, client_ids: Sequence[Hashable], request: Request) -> dict[Any, Answer]:
        data = request_to_bytes(request)
        self.bytes_down += len(data) * len(list(client_ids))
        got = self.inner.ask(client_ids, request_from_bytes(data, self.device))
        out = {}
        for cid, rep in got.items():
            b = reply_to_bytes(rep)
            self.bytes_up += len(b)
            out[cid] = reply_from_bytes(b, self.device)
        return out

    def cpu_seconds(self) -> float | None:
        return self.inner.cpu_seconds()
