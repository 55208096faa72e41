"""What the server knows of clients that live elsewhere: their sizes, never their data.

An engine that only carries messages (:func:`fedsciml.runtime.driver.register_engine` with ``connect=``) gives
the driver a :class:`~fedsciml.runtime.transport.Transport` whose ``described`` maps each client id to what the
client said of itself when it joined — ``{"n": rows, "p": parameters, "linear": bool}``.  The methods read
their clients' sizes from objectives (row counts for the message forms, linearity for the first LM damping);
:func:`remote_objectives` gives them objectives that hold those sizes and nothing else.
"""
from __future__ import annotations

from fedsciml.core.objective import LeastSquares, LinearLeastSquares


class RemoteObjective(LeastSquares):
    """A client's objective as the server knows it: its sizes (the data stay with the client)."""

    def __init__(self, n: int, p: int):
        self._n, self.n_params = int(n), int(p)

    @property
    def n_residuals(self) -> int:
        return self._n

    def residual(self, theta):
        raise RuntimeError("a remote client's data never leave it: ask the client through the transport")


class RemoteLinearObjective(RemoteObjective, LinearLeastSquares):
    """A remote objective whose residual is linear (so ``default_tau`` picks the undamped first step)."""


def remote_objectives(transport) -> list:
    """One :class:`RemoteObjective` per client of ``transport``, in its client order, from ``transport.described``."""
    out = []
    for c in transport.client_ids:
        d = transport.described[c]
        out.append((RemoteLinearObjective if d.get("linear") else RemoteObjective)(d["n"], d["p"]))
    return out
