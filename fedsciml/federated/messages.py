"""Client messages: plain tensors with a declared schema, validated before use.

A message is a ``dict[str, Tensor]``.  A :class:`Schema` declares for each field
its shape (ints, or names bound by the schema's context such as ``"p"`` or
``"r"``; ``None`` for any size) and whether it must be finite.  Every message
is checked against its schema before an aggregator sees it; a bad one raises
:class:`MessageRejected` naming the client and the reason, and is never
averaged in.  Plain tensors keep messages transport-neutral (a Flower strategy
or any RPC layer can carry them unchanged).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


class MessageRejected(ValueError):
    def __init__(self, client_id, reason: str):
        self.client_id = client_id
        self.reason = reason
        super().__init__(f"message from client {client_id} rejected: {reason}")


@dataclass(frozen=True)
class Field:
    shape: tuple          # entries: int, a context name (str), or None (any size)
    finite: bool = True
    positive: bool = False  # every entry > 0 (sample counts)
    optional: bool = False


@dataclass
class Schema:
    fields: dict = field(default_factory=dict)

    def validate(self, msg, client_id, dtype=None, **context) -> dict:
        """Check ``msg`` against the schema; returns it, or raises :class:`MessageRejected`."""
        if not isinstance(msg, dict):
            raise MessageRejected(client_id, f"expected a dict of tensors, got {type(msg).__name__}")
        extra = set(msg) - set(self.fields)
        if extra:
            raise MessageRejected(client_id, f"unexpected field(s) {sorted(extra)}; schema has {sorted(self.fields)}")
        bound = dict(context)
        for name, spec in self.fields.items():
            if name not in msg:
                if spec.optional:
                    continue
                raise MessageRejected(client_id, f"missing field {name!r}")
            t = msg[name]
            if not torch.is_tensor(t):
                raise MessageRejected(client_id, f"field {name!r} is a {type(t).__name__}, not a tensor")
            if len(spec.shape) != t.ndim:
                raise MessageRejected(client_id, f"field {name!r} has {t.ndim} dimensions {tuple(t.shape)}, expected {len(spec.shape)}")
            for axis, (want, got) in enumerate(zip(spec.shape, t.shape)):
                if want is None:
                    continue
                if isinstance(want, str):
                    if want in bound and bound[want] != got:
                        raise MessageRejected(
                            client_id, f"field {name!r} has size {got} along axis {axis}, expected {want}={bound[want]}")
                    bound.setdefault(want, got)
                elif want != got:
                    raise MessageRejected(client_id, f"field {name!r} has size {got} along axis {axis}, expected {want}")
            if t.is_floating_point():
                if dtype is not None and t.dtype != dtype:
                    raise MessageRejected(client_id, f"field {name!r} has dtype {t.dtype}, expected {dtype}")
                if spec.finite and not bool(torch.isfinite(t).all()):
                    raise MessageRejected(client_id, f"field {name!r} contains non-finite values")
            if spec.positive and not bool((t > 0).all()):
                raise MessageRejected(client_id, f"field {name!r} must be > 0, got {t.tolist() if t.numel() < 5 else '...'}")
        return msg


def floats_in(msg: dict) -> int:
    """Number of scalars a message carries (its communication cost)."""
    return int(sum(t.numel() for t in msg.values() if torch.is_tensor(t)))
