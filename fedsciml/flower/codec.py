"""Requests and replies as Flower ``RecordDict`` s (and back), bitwise.

A :class:`~fedsciml.federated.transport.Request` becomes::

    RecordDict({"tensors": ArrayRecord({name: Array(numpy)}),
                "meta": ConfigRecord({"json": '{"query": …, "config": …, "job": …}'})})

and is sent with ``message_type = "query.<query>"``.  A reply carries its
message tensors the same way and ``{"metrics": …}`` (or ``{"failure":
reason}``) as JSON.  Each tensor travels as ``numpy.save`` bytes
(``allow_pickle=False`` both ways, Flower's own ``Array`` format): dtype and
every bit are kept.  Config values are JSON (nested dicts and lists are not
``ConfigRecord`` values, hence one JSON string).
"""
from __future__ import annotations

import json

import numpy as np
import torch

from fedsciml.federated.transport import Failure, Reply, Request

TENSORS, META = "tensors", "meta"


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
    return RecordDict({TENSORS: _arrays(req.tensors), META: ConfigRecord({"json": json.dumps(meta)})})


def request_from_content(content, device="cpu") -> tuple[Request, dict]:
    meta = _meta(content)
    tensors = _tensors(content.array_records[TENSORS], device) if TENSORS in content.array_records else {}
    return Request(meta["query"], tensors, meta.get("config", {})), meta.get("job", {})


def reply_content(rep):
    from flwr.app import ConfigRecord, RecordDict

    if isinstance(rep, Failure):
        return RecordDict({META: ConfigRecord({"json": json.dumps({"failure": rep.reason})})})
    msg = rep.message if isinstance(rep.message, dict) else {}
    return RecordDict({TENSORS: _arrays(msg), META: ConfigRecord({"json": json.dumps({"metrics": rep.metrics})})})


def reply_from_content(content, device="cpu"):
    meta = _meta(content)
    if "failure" in meta:
        return Failure(str(meta["failure"]))
    tensors = _tensors(content.array_records[TENSORS], device) if TENSORS in content.array_records else {}
    return Reply(tensors, meta.get("metrics", {}))
