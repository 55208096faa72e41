"""Which K-FAC channel form an objective carries, and its factors: the Poisson form of
:mod:`fedsciml.core.kfac_pinn` (a :class:`~fedsciml.core.kfac_pinn.Jet` on every part) or the Taylor-mode form of
:mod:`fedsciml.core.kfac_taylor` (any operator).  This dispatch lives apart from both so that neither imports the
other's dispatcher (kfac_taylor builds on kfac_pinn's factors; the layer contracts allow no import circle)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fedsciml.core.kfac_pinn import Jet, KroneckerFactors, part_factors
from fedsciml.core.kfac_taylor import Taylor, TaylorFactors, resolved, taylor_factors
from fedsciml.core.nn import MLP
from fedsciml.core.stats import row_blocks


def _net_of(part) -> MLP | None:
    jet = resolved(getattr(part, "jet", None))
    return jet.net if isinstance(jet, (Jet, Taylor)) else None


def jet_network(objective) -> MLP | None:
    """The network of an objective whose every part carries a channel form — a :class:`Jet` (the Poisson form) or
    a :class:`fedsciml.core.kfac_taylor.Taylor` (any operator) — of one network (``None`` otherwise)."""
    parts = getattr(objective, "parts", None)
    if not parts:
        return None
    nets = [_net_of(p) for p in parts]
    if any(n is None for n in nets) or any(n.sizes != nets[0].sizes for n in nets):  # type: ignore[union-attr]
        return None
    return nets[0]


def _poisson_form(objective) -> bool:
    return all(isinstance(getattr(p, "jet", None), Jet) for p in objective.parts)


@dataclass(frozen=True)
class TaylorLayout:
    """What a server needs to read Taylor-form factors (:class:`fedsciml.core.kfac_taylor.TaylorFactors`): the
    network and the number of θ entries after its parameters."""

    net: MLP
    n_extra: int


def factor_layout(objective, n_params: int):
    """How an objective's K-FAC factors are packed: its network (the Poisson form, :class:`KroneckerFactors`) or a
    :class:`TaylorLayout` (any other channel form); ``None`` when its parts carry no channel form."""
    net = jet_network(objective)
    if net is None:
        return None
    return net if _poisson_form(objective) else TaylorLayout(net, int(n_params) - net.n_params)


def layout_size(layout) -> int:
    """Floats of a packed factor message of this :func:`factor_layout`."""
    if isinstance(layout, TaylorLayout):
        return TaylorFactors.size_of(layout.net, layout.n_extra)
    return KroneckerFactors.size_of(layout)


def unpack_factors(layout, flat: torch.Tensor) -> KroneckerFactors:
    """The factors of a packed message of this :func:`factor_layout`."""
    if isinstance(layout, TaylorLayout):
        return TaylorFactors.unpack(layout.net, flat, layout.n_extra)
    return KroneckerFactors.unpack(layout, flat)


def factors_of(objective, theta: torch.Tensor, rows: int | None = None) -> KroneckerFactors:
    """The raw K-FAC sums of a :class:`fedsciml.core.objective.PointwiseLeastSquares` whose parts carry channel
    forms: the Poisson form's :func:`part_factors` when every part carries a :class:`Jet`, else the Taylor-mode
    factors of :func:`fedsciml.core.kfac_taylor.taylor_factors`.  ``rows``: the sums are formed over blocks of at
    most that many residual rows (:func:`fedsciml.core.stats.row_blocks`) and added (the factors are sums over
    points), so that the factor pass holds one block's channels at a time; the form is decided once, for the
    whole objective."""
    net = jet_network(objective)
    if net is None:
        raise ValueError("precond='kfac' needs residual parts in a channel form (a Jet or Taylor on every part); "
                         "this objective has none")
    poisson = _poisson_form(objective) and theta.numel() == net.n_params
    if rows is None:
        return part_factors(net, theta, objective.parts) if poisson else taylor_factors(net, theta, objective.parts)
    total: KroneckerFactors | None = None
    for block in row_blocks(objective, theta, int(rows)):
        parts = getattr(block, "parts")  # row_blocks of a pointwise objective: one part each
        f = part_factors(net, theta, parts) if poisson else taylor_factors(net, theta, parts)
        total = f if total is None else total + f
    if total is None:
        raise ValueError("K-FAC factors of an objective without residual rows")
    return total


def has_jets(objectives) -> bool:
    """Whether every objective's residual parts carry a channel form K-FAC for PINNs can use (a :class:`Jet` or a
    :class:`fedsciml.core.kfac_taylor.Taylor`): what lets an automatic choice precondition with K-FAC
    (:func:`fedsciml.core.forms.choose_lm_solve`)."""
    objectives = list(objectives)
    return bool(objectives) and all(jet_network(o) is not None for o in objectives)


def require_jets(objectives, problem: str) -> None:
    """Refuse ``precond='kfac'`` (one line naming the problem and a part) unless every objective's residual parts
    carry a channel form (a :class:`Jet` or a :class:`fedsciml.core.kfac_taylor.Taylor`)."""
    for o in objectives:
        if jet_network(o) is None:
            bad = [p.name for p in getattr(o, "parts", []) if _net_of(p) is None]
            which = f"residual part {bad[0]!r} is not" if bad else "its residual parts are not all"
            raise ValueError(f"precond='kfac' needs residuals in a channel form K-FAC for PINNs can use (a function of "
                             f"the value and derivatives up to second order of one tanh/sin network at each row's "
                             f"own point); problem {problem!r}: {which} in that form (use precond nystrom or none)")
