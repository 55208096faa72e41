"""Requests and replies as Flower ``RecordDict`` s (and back), bitwise.

A :class:`~fedsciml.runtime.transport.Request` becomes::

    RecordDict({"tensors": ArrayRecord({name: Array(numpy)}),
                "meta": ConfigRecord({"json": '{"query": …, "config": …, "job": …}'})})

and is sent with ``message_type = "query.<query>"``.  A reply carries its
message tensors the same way and ``{"metrics": …}`` (or ``{"failure":
reason}``) as JSON.  Each tensor travels as ``numpy.save`` bytes
(``allow_pickle=False`` both ways, Flower's own ``Array`` format): dtype and
every bit are kept.  Config values are JSON (nested dicts and lists are not
``ConfigRecord`` values, hence one JSON string).

A small message (tensors up to :data:`COMPACT_MAX_BYTES`, the usual case)
is packed instead into *one* ``bytes`` value of one ``ConfigRecord``
(``RecordDict({"packed": ConfigRecord({"bytes": …})})``: the JSON header and
each tensor's ``numpy.save`` bytes, :func:`fedsciml.runtime.transport._pack`).
Flower moves every record, array and array chunk of a message as its own
object, one HTTP round trip each in a deployment: a gn reply in the form
above is 12 objects (with the message), 10–50 ms apiece on a loaded machine; packed it is 3.
The bits are the same either way.
"""
from __future__ import annotations

import json
import os

import numpy as np
import torch

from fedsciml.runtime.transport import Failure, Reply, Request

TENSORS, META, PACKED = "tensors", "meta", "packed"
# below Flower's 5 MB array chunk: one object instead of one per record/array/chunk (0: never pack; the
# environment variable is read by every process of a deployment — to measure the difference)
COMPACT_MAX_BYTES = int(os.environ.get("FEDSCIML_FLOWER_PACK_MAX_BYTES", 4 << 20))


def _small(tensors: dict) -> bool:
    return sum(t.numel() * t.element_size() for t in tensors.values()) <= COMPACT_MAX_BYTES


def _packed(tensors: dict, meta: dict):
    from flwr.app import ConfigRecord, RecordDict

    from fedsciml.runtime.transport import _pack

    return RecordDict({PACKED: ConfigRecord({"bytes": _pack(tensors, meta)})})


def _unpacked(content, device) -> tuple[dict, dict]:
    """``(tensors, meta)`` of a packed message; a malformed one raises ``ValueError`` (rejected, never used)."""
    import struct

    from fedsciml.runtime.transport import _unpack

    try:
        tensors, meta = _unpack(bytes(content.config_records[PACKED]["bytes"]), device)
    except (struct.error, KeyError, IndexError, TypeError, ValueError, EOFError) as e:
        raise ValueError(f"malformed packed message: {type(e).__name__}: {e}") from None
    if not isinstance(meta, dict):
        raise ValueError("malformed packed message: its header is not a JSON object")
    return tensors, meta


def _arrays(tensors: dict):
    from flwr.app import Array, ArrayRecord

    return ArrayRecord({k: Array(np.ascontiguousarray(t.detach().cpu().numpy())) for k, t in tensors.items()})


def _tensors(record, device) -> dict:
    out = {}
    for k in record:
        out[k] = torch.from_numpy(record[k].numpy()).to(device)  # np.load gives a fresh, writable array
    return out


def _meta(content) -> dict:
    if META not in content.config_records:
        raise ValueError("message carries no fedsciml metadata record")
    return json.loads(content.config_records[META]["json"])


def request_content(req: Request, job: dict | None = None):
    from flwr.app import ConfigRecord, RecordDict

    meta = {"query": req.query, "config": req.config, "job": job or {}}
    if _small(req.tensors):
        return _packed(req.tensors, meta)
    return RecordDict({TENSORS: _arrays(req.tensors), META: ConfigRecord({"json": json.dumps(meta)})})


def request_from_content(content, device="cpu") -> tuple[Request, dict]:
    if PACKED in content.config_records:
        tensors, meta = _unpacked(content, device)
    else:
        meta = _meta(content)
        tensors = _tensors(content.array_records[TENSORS], device) if TENSORS in content.array_records else {}
    return Request(meta["query"], tensors, meta.get("config", {})), meta.get("job", {})


def reply_content(rep):
    from flwr.app import ConfigRecord, RecordDict

    if isinstance(rep, Failure):
        return RecordDict({META: ConfigRecord({"json": json.dumps({"failure": rep.reason})})})
    msg = rep.message if isinstance(rep.message, dict) else {}
    if _small(msg):
        return _packed(msg, {"metrics": rep.metrics})
    return RecordDict({TENSORS: _arrays(msg), META: ConfigRecord({"json": json.dumps({"metrics": rep.metrics})})})


def reply_from_content(content, device="cpu"):
    if PACKED in content.config_records:
        tensors, meta = _unpacked(content, device)
    else:
        meta = _meta(content)
        tensors = None
    if "failure" in meta:
        return Failure(str(meta["failure"]))
    if tensors is None:
        tensors = _tensors(content.array_records[TENSORS], device) if TENSORS in content.array_records else {}
    return Reply(tensors, meta.get("metrics", {}))
