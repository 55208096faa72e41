"""Flower 1.41's fixed waits, shortened for fedsciml's many small exchanges.

Flower pulls a message's objects with an exponential backoff that starts at
1 s (``PULL_INITIAL_BACKOFF``): a message whose objects are a few
milliseconds late costs a full second, on the node and on the server.  A
SuperNode sleeps 3 s when it pulled nothing and 0.5 s while it waits for its
ClientApp's reply.  These are defaults of Flower's own functions and loop,
not settings; :func:`shorten_waits` lowers them in *this* process (the
backoff then starts at ``initial_s`` and doubles up to ``cap_s``).  Nothing
else changes: the same messages, the same retries.
"""
from __future__ import annotations

import time

_DONE: dict = {}


def shorten_waits(initial_s: float = 0.005, cap_s: float = 0.5):
    """Start Flower's object-pull backoff at ``initial_s`` (cap ``cap_s``) in this process."""
    from flwr.supercore.inflatable import inflatable_utils as iu

    for fn in (iu.pull_objects, iu.pull_and_inflate_object_from_tree):
        kw = fn.__kwdefaults__
        if kw and "initial_backoff" in kw:
            kw["initial_backoff"] = min(float(kw["initial_backoff"]), float(initial_s))
            kw["backoff_cap"] = min(float(kw["backoff_cap"]), float(cap_s))
    _DONE["pull"] = (initial_s, cap_s)


class _ShortSleep:
    """Stands in for the ``time`` module inside Flower's SuperNode loop: every sleep capped at ``cap`` s."""

    def __init__(self, cap: float):
        self.cap = float(cap)

    def sleep(self, s):
        time.sleep(min(float(s), self.cap))

    def __getattr__(self, name):
        return getattr(time, name)


def shorten_supernode_sleeps(cap_s: float = 0.01):
    """Cap the SuperNode loop's fixed sleeps (3 s idle, 0.5 s waiting for a reply) at ``cap_s``."""
    import flwr.supernode.start_client_internal as sci

    sci.time = _ShortSleep(cap_s)
    _DONE["supernode"] = cap_s
