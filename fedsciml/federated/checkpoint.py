"""Per-round checkpoints of a federated run, and resuming from them.

After every round the simulation writes ``DIR/state.pt`` (atomically: a
temporary file, then ``os.replace``, so a run killed mid-write leaves the
previous round's checkpoint intact).  It holds everything the next round
depends on: the global parameters, the round counter, the client-sampling
RNG state, the method's own state (the Levenberg–Marquardt damping and
statistics for ``gn``, the last global gradient norm for adaptive FIPA), the
history rows, the communication counters and the solver clock.  A
*fingerprint* (problem, its options, method, method options, clients, seed,
parameter count) is stored with it; resuming with a different setup is an
error naming the first difference.
"""
from __future__ import annotations

import json
import os

import torch

FILENAME = "state.pt"


class CheckpointMismatch(ValueError):
    pass


def path_in(directory: str) -> str:
    return os.path.join(directory, FILENAME)


def save(directory: str, state: dict) -> str:
    os.makedirs(directory, exist_ok=True)
    final = path_in(directory)
    tmp = final + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, final)
    return final


def load(directory: str, fingerprint: dict, map_location=None) -> dict | None:
    """The saved state, or ``None`` when the directory holds no checkpoint yet."""
    path = path_in(directory)
    if not os.path.exists(path):
        return None
    state = torch.load(path, map_location=map_location, weights_only=False)
    saved = state.get("fingerprint", {})
    want = json.loads(json.dumps(fingerprint, default=str))
    have = json.loads(json.dumps(saved, default=str))
    for key in sorted(set(want) | set(have)):
        if want.get(key) != have.get(key):
            raise CheckpointMismatch(
                f"checkpoint {path} was written by a different run: {key} is {have.get(key)!r} there, "
                f"{want.get(key)!r} now; use another --checkpoint directory or the same settings")
    return state
