"""Time-marching over windows for a time-dependent :class:`~fedsciml.problems.domain.DomainPDE` (``T`` set).

``fs.solve(problem, method, time_windows=K)`` splits ``[t0, T]`` into K equal windows ``[t_{k-1}, t_k]`` (with
``time_window_growth=r``, windows whose lengths grow by the ratio r: short ones where a solution starts, for a
transient near t0, long ones after) and
trains one network per window, in order: window 1 is the problem on ``[t0, t_1]``; window k > 1 is the same
problem on ``[t_{k-1}, t_k]`` whose :class:`~fedsciml.problems.conditions.Initial` conditions take their values
(and velocities) from window k − 1's trained network at ``t_{k-1}``.  Every other condition, the interior
points (``n_interior`` in total *per window*), the client split and the method are the problem's own; the
method's options apply to each window (``rounds=R``: R rounds per window), and window k starts from window
k − 1's trained θ (a warm start: the next window's solution continues the last one's).

The final model is piecewise: a point with ``t_{k-1} < t ≤ t_k`` is evaluated by window k's network (t ≤ t_1 by
the first).  It is :func:`windowed`'s problem: θ is the K windows' parameter vectors one after the other, so
``fs.save_model``/``fs.load_model`` carry it (``model.json`` ``time_windows``: the edges) and ``evaluate`` gives
the metrics on the whole of ``[t0, T]``.

This module builds the window problems and the piecewise model; the loop over windows is
:func:`fedsciml.api.solve`'s (it runs the driver once per window).
"""
from __future__ import annotations

import copy
import dataclasses
import math

import torch
from torch.func import vmap

from .base import DTYPE, ProblemError
from .conditions import Initial
from .geometry import SpaceTime

#: the problem's caches that depend on its time interval or conditions (rebuilt for a window)
_CACHES = ("_domain", "_conds", "_part_fns", "_test_cache", "_taylor_forms")


def window_edges(problem, windows: int, growth: float = 1.0) -> list[float]:
    """``[t0, t_1, …, T]``: K windows of ``problem``'s time interval whose lengths grow geometrically,
    ``L_k = L_1·r^{k−1}`` with ``r = growth`` (``L_1 = (T − t0)(r − 1)/(r^K − 1)``; r = 1: K equal windows),
    the last edge exactly T.  One line when the problem has no time axis or a value is out of range."""
    if isinstance(windows, bool) or not isinstance(windows, int) or windows < 1:
        raise ProblemError(f"time_windows must be a whole number ≥ 1, got {windows!r}")
    if isinstance(growth, bool) or not isinstance(growth, (int, float)) or not (growth > 0 and math.isfinite(growth)):
        raise ProblemError(f"time_window_growth (the ratio of each window's length to the last's) must be a "
                           f"finite number > 0, got {growth!r}")
    T = getattr(problem, "T", None)
    if T is None or not hasattr(problem, "condition_list"):
        raise ProblemError(f"time_windows applies to a time-dependent DomainPDE (T set); problem "
                           f"{getattr(problem, 'name', problem)!r} has no time axis")
    if not any(isinstance(c, Initial) for c in problem.condition_list()):
        raise ProblemError(f"time_windows: problem {problem.name!r} has no Initial condition to carry from one "
                           f"window to the next")
    t0, T = float(problem.t0), float(T)
    r = float(growth)
    if r == 1.0:
        return [t0 + (T - t0) * k / windows for k in range(windows)] + [T]
    # cumulative lengths (r^k − 1)/(r^K − 1) of the whole: computed with expm1 so that r near 1 keeps its digits
    lr = math.log(r)
    return [t0 + (T - t0) * math.expm1(k * lr) / math.expm1(windows * lr) for k in range(windows)] + [T]


def window_problem(problem, lo: float, hi: float, previous: tuple | None = None):
    """``problem`` on ``[lo, hi]``; with ``previous = (window problem, θ)`` its Initial conditions take their
    values (and velocities) from that trained network at t = lo, and its initial θ is that θ.

    A shallow copy: the network, the geometry and the options are shared; the time interval, the conditions
    and what was built from them are the window's own."""
    w = copy.copy(problem)
    for k in _CACHES:
        w.__dict__.pop(k, None)
    w.__dict__["_domain"] = SpaceTime(problem.geometry, float(hi), float(lo))
    if problem.input_map() is not None:  # the window's own box: its networks map [lo, hi] to [-1, 1]
        w.__dict__.pop("_net", None)
        w.__dict__.pop("_field_nets", None)
    conds = list(problem.condition_list())
    if previous is not None:
        prev, theta = previous
        theta = theta.detach()
        conds = [_carried(c, prev, theta) if isinstance(c, Initial) else c for c in conds]
        w.__dict__["init_params"] = lambda seed=0, device="cpu": theta.to(device).clone()
    w.__dict__["_conds"] = conds
    from .domain import DomainPDE

    if type(problem).reference is not DomainPDE.reference:  # a reference of its own (a file): the window's rows
        def reference():
            X, U = problem._test()
            keep = (X[:, -1] >= lo) & (X[:, -1] <= hi)
            if not bool(keep.any()):
                raise ProblemError(f"the reference of problem {problem.name!r} has no point in the window "
                                   f"[{lo:g}, {hi:g}]")
            return X[keep], U[keep]

        w.__dict__["reference"] = reference
    return w


def _carried(c: Initial, prev, theta) -> Initial:
    """``c`` with its value (and velocity) read from ``prev``'s network at θ."""
    comp = prev.comp(c)

    def value(x):
        with torch.no_grad():
            u = prev.u(theta, x)
            return (u if u.ndim == 1 else u[:, comp]).detach()

    def velocity(x):
        f = prev.field(theta)[comp]
        with torch.no_grad():
            return vmap(lambda y: f.diff(y, len(prev.axes) - 1))(x).detach()

    return dataclasses.replace(c, value=value, velocity=velocity if c.velocity is not None else None)


def windowed(problem, edges, n_window_params: int | None = None):
    """The piecewise model of K trained windows as a problem: θ is the windows' parameter vectors one after
    the other (each ``n_window_params`` long, the problem's :attr:`n_params` by default); ``u``, ``predict``
    and ``evaluate`` act on the whole of ``[t0, T]`` (t in ``(t_{k-1}, t_k]``: window k; t ≤ t_1: the first)."""
    edges = [float(e) for e in edges]
    K, P = len(edges) - 1, int(n_window_params or problem.n_params)
    inner = torch.tensor(edges[1:-1], dtype=DTYPE)
    w = copy.copy(problem)
    w.__dict__.pop("_test_cache", None)

    def split(theta):
        if theta.numel() != K * P:
            raise ProblemError(f"a model of {K} time windows holds {K} × {P} parameters, got {theta.numel()}")
        return theta.reshape(K, P)

    # each window's network: the problem's own, or (with an input map) one mapping that window's box
    mapped = problem.input_map() is not None
    wins = [window_problem(problem, lo, hi) if mapped else problem for lo, hi in zip(edges[:-1], edges[1:])]

    def u(theta, x):
        thetas = split(theta)
        if x.ndim == 1:
            k = int(torch.bucketize(x[-1:].to(inner.device), inner.to(x.device))[0])
            return wins[k].u(thetas[k], x)
        k = torch.bucketize(x[:, -1].contiguous(), inner.to(x.device))
        outs = [None] * K
        for j in range(K):  # a loop over windows, not points
            outs[j] = wins[j].u(thetas[j], x[k == j])
        out = torch.zeros((x.shape[0],) + outs[0].shape[1:], dtype=theta.dtype, device=x.device)
        for j in range(K):
            out[k == j] = outs[j]
        return out

    def model_description(theta):
        d = problem.model_description(split(theta)[-1])
        d["time_windows"] = edges
        if mapped:
            d["window_input_maps"] = [w.architecture()["input_map"] for w in wins]
        return d

    w.__dict__.update(u=u, model_description=model_description,
                      coefficients=lambda theta: problem.coefficients(split(theta)[-1]),
                      _field_errors=lambda theta: {}, time_windows=edges)
    return w
