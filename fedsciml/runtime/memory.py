"""How much memory there is to use now (one reader for the driver's memory check, checkpoint and table loading), and
what a network's residual holds per row when a first-order step takes its gradient.

The reader lives in :mod:`fedsciml.core.forms`, whose device-aware form choice reads the same figure (the core
layer cannot import the runtime); this module is the runtime's name for it."""
from __future__ import annotations

from typing import Sequence

from fedsciml.core.forms import available_memory
from fedsciml.core.matfree import graph_floats_per_row

__all__ = ["available_memory", "gradient_graph"]


def gradient_graph(d_in: int, sizes: Sequence[int]) -> tuple[float, str]:
    """``(floats per row, how)`` that a first-order step's gradient ``Jᵀr`` keeps for a network's residual: the
    vector–Jacobian product holds the residual's autograd graph of every row at once (for a PDE residual, the
    forward Laplacian's channels of every hidden unit), so a wide network is refused by the memory check before it
    runs — ``hidden=(10**6,)`` on ``bratu`` needs about 48 GB, which a check counting only the points (3 floats a
    row) let through to thrash for minutes.  Counted with the matrix-free operator's per-row fit
    (:func:`~fedsciml.core.matfree.graph_floats_per_row`, ``3000 + 5·(d_in + 2)·Σ hidden``): a vjp through
    ``bratu``'s residual (402 rows, one thread) peaked at 3.2–10 × ``(d_in + 2)·Σ hidden`` floats a row for widths
    32,000–2,000 (peak RSS; the constant dominates at small widths).  ``sizes``: the network's layer sizes
    ``[d_in, hidden…, d_out]``; a network without hidden layers (a linear model) keeps no more than its data:
    ``(0, "")``."""
    hidden = [int(h) for h in list(sizes)[1:-1]]
    if not hidden:
        return 0.0, ""
    floats = graph_floats_per_row(int(d_in), hidden)
    return floats, f" + {floats:,.0f} floats of the gradient's residual graph (hidden layers {tuple(hidden)})"
