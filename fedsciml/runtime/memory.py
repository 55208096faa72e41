"""How much memory there is to use now (one reader for the driver's memory check, checkpoint and table loading), and
what a network's residual holds per row when a first-order step takes its gradient.

The reader lives in :mod:`fedsciml.core.forms`, whose device-aware form choice reads the same figure (the core
layer cannot import the runtime); this module is the runtime's name for it."""
from __future__ import annotations

import copy
from typing import Any, Sequence

from fedsciml.core.forms import available_memory
from fedsciml.core.matfree import graph_floats_per_row

__all__ = ["available_memory", "gradient_graph", "grown", "nested_graph", "operator_graph_floats", "residual_graph",
           "value_graph"]

#: floats per PDE row per ``(d_in + 2)·Σ hidden`` that the matrix-free operator of a nested-autodiff residual
#: (a :class:`~fedsciml.problems.domain.DomainPDE` equation: the Field's jacrev/jacfwd per point) keeps, and that the
#: Taylor-mode K-FAC factor pass adds while the operator lives (:func:`nested_graph`)
NESTED_OPERATOR = 16.0
NESTED_KFAC = 12.0
#: floats per PDE row per ``2^k·Σ hidden`` that a derivative of order ``k ≥ 3`` (``Field.diff`` with three or more
#: axes: ``k`` nested forward passes, ``2^k`` primal evaluations a point) adds to the operator's graph
NESTED_HIGHER = 22.0


def value_graph(sizes: Sequence[int], p: int | None = None) -> float:
    """Floats per row the residual graph keeps for a row whose residual reads the network's value only (a
    Dirichlet condition, a data point): the per-row fit of :func:`~fedsciml.core.matfree.graph_floats_per_row`
    with one channel where a PDE row has ``d_in + 2`` (value, d_in derivatives, Laplacian), ``3000 + 5·Σ hidden``.
    Charging such rows the PDE row's ``d_in + 2`` channels refused runs that fit: the anchors' exp14
    (``poisson --preset exp14``: d = 100, 175 PDE rows and 2,086 boundary rows, hidden [768, 768, 512, 512]) was
    estimated at 23.7 GB for one Adam step whose peak RSS was 1.25 GB (measured, one thread); with the split it is
    about 2.2 GB.  A network without hidden layers counts its ``p`` parameters as one layer (as
    :func:`residual_graph` does)."""
    hidden = [int(h) for h in list(sizes)[1:-1]] or ([int(p)] if p is not None else [])
    return 3000.0 + 5.0 * float(sum(hidden)) if hidden else 0.0


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


def nested_graph(d_in: int, hidden: Sequence[int], kfac: bool = True, higher: int = 0) -> float:
    """Floats a PDE row of a :class:`~fedsciml.problems.domain.DomainPDE` keeps in the matrix-free Gauss–Newton
    operator (the residual's vjp graph and the ``Jv`` graph): ``3000 + 16·(d_in + 2)·Σ hidden``, plus
    ``12·(d_in + 2)·Σ hidden`` where the K-FAC preconditioner may run (``kfac``: its Taylor-channel pass holds
    every row's activations while the operator lives).  The forward-Laplacian fit
    (:func:`~fedsciml.core.matfree.graph_floats_per_row`, ``5·…``) was made for the zoo's Poisson residuals; a
    DomainPDE's nested autodiff keeps more.  Measured (peak-RSS increase of building the operator and two products
    over the built problem, one thread, ``scripts/bench/domain_graph_memory.py``): heat 3×50 9,712, heat 5×100
    26,312, burgers 3×100 14,403, kovasznay 4×50 13,784 floats per row (the operator term gives 12,600, 35,000,
    22,200, 15,800: 1.15–1.54× above); the K-FAC factors added 4,279 (heat 3×50), 5,447 (heat 3×64) and 13,500
    (heat 5×100 at 8,120 rows, ``reproductions/kfac_taylor.md``) floats per row (the term gives 7,200, 9,216,
    24,000).  Heat 5×100 with 8,120 rows is now estimated at 3.8 GB (K-FAC possible; 2.3 GB with Nyström) against
    2.7–3.6 GB of peak RSS above the interpreter's 0.39 GB measured for whole K-FAC runs, where the
    forward-Laplacian fit said 0.84 GB.

    ``higher``: ``Σ 2^k`` over the residual's derivatives of order ``k ≥ 3`` (``Field.nested_channels``), each
    charged ``22·2^k·Σ hidden`` more (:data:`NESTED_HIGHER`).  Fitted on PINNacle's KS (``u_xxxx``: 16 primal
    evaluations a point; ``scripts/bench/domain_graph_memory.py pinnacle/ks:…``, no K-FAC): 32,100, 130,000 and
    195,000 floats per PDE row measured for 3×32, 3×100 and 5×100 (1,024–2,048 rows) against Burgers 1d-C's
    4,800 and 22,200 (3×32, 5×100) — the fourth derivative multiplies the graph by 7–9; the term gives 39,900,
    127,800 and 211,000.  Without it KS with the 5×100 network at their 10,240 rows was charged 4 GB in blocks of
    8,474 rows and passed 11 GB."""
    hsum = float(sum(int(h) for h in hidden))
    per = (int(d_in) + 2) * hsum
    return 3000.0 + (NESTED_OPERATOR + (NESTED_KFAC if kfac else 0.0)) * per + NESTED_HIGHER * int(higher) * hsum


def residual_graph(d_in: int, sizes: Sequence[int], p: int) -> tuple[float, str]:
    """``(floats per row, how)`` that the matrix-free Gauss–Newton operator keeps for a network's residual
    (:func:`~fedsciml.core.matfree.graph_floats_per_row`; a network without hidden layers counts its ``p``
    parameters as one layer), the network's hidden layers named in ``how``."""
    hidden = [int(h) for h in list(sizes)[1:-1]]
    floats = graph_floats_per_row(int(d_in), hidden or [int(p)])
    named = f" (hidden layers {tuple(hidden)})" if hidden else ""
    return floats, f" + {floats:,.0f} floats of matrix-free residual graph{named}"


def operator_graph_floats(problem: Any, precond: str = "auto") -> float | None:
    """Floats a PDE row of ``problem`` keeps in LM's matrix-free operator — what the memory estimate charges it
    (:func:`fedsciml.runtime.driver.estimate_memory`) and what decides whether the operator holds its graph in row
    blocks (:func:`fedsciml.core.forms.graph_block_rows`): a DomainPDE's nested-autodiff figure
    (``problem.nested_graph_floats``, :func:`nested_graph`), else :func:`residual_graph`'s; ``None`` for a problem
    without a network of hidden layers."""
    nested = getattr(problem, "nested_graph_floats", None)
    if callable(nested):
        v = nested(precond)
        if v is not None:
            return float(v)
    net_fn = getattr(problem, "network", None)
    if not callable(net_fn):
        return None
    net = net_fn()
    sizes = list(getattr(net, "sizes", []))
    if len(sizes) < 3:
        return None
    return residual_graph(int(sizes[0]), sizes, int(net.n_params))[0]


def grown(problem: Any, n_interior: int) -> Any:
    """``problem`` with ``n_interior`` interior points (a total) (a ``n_boundary`` option scaled by the same
    factor, at least 1); the problem itself when that is its own size.  A shallow copy: the network, the exact
    solution and the test set are shared."""
    opts = getattr(problem, "options", {})
    if "n_interior" not in opts:
        raise ValueError(f"grow: problem {getattr(problem, 'name', problem)!r} has no n_interior option to grow")
    n0 = int(opts["n_interior"])
    if int(n_interior) == n0:
        return problem
    new = dict(opts, n_interior=int(n_interior))
    if "n_boundary" in opts and opts["n_boundary"] is not None:
        new["n_boundary"] = max(1, round(int(opts["n_boundary"]) * int(n_interior) / n0))
    out = copy.copy(problem)
    out.__dict__["options"] = new
    return out
