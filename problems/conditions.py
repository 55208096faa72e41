"""Fields and conditions of a :class:`~fedsciml.problems.domain.DomainPDE`.

:class:`Field` is the network ``u_θ`` (θ fixed) at one point ``x [d]`` — the shape ``torch.func``
transforms see under ``vmap`` — with its derivatives in x: ``u(x)``, ``u.grad(x)``, ``u.hessian(x)``,
``u.diff(x, "x")``, ``u.diff(x, "x", "t")``, any order ``u.diff(x, "x", "x", "x", "x")`` (nested forward mode),
``u.laplacian(x)`` (spatial axes only), ``u.dn(x, n)``
(normal derivative), a component by name (``u["p"]``) and the unknown coefficients of an inverse
problem (``u.coef["k"]``).  Derivatives come from nested ``torch.func.jacrev``/``jacfwd`` — exact, so
the residual's Jacobian in θ is exact too.  Within one residual call the value, gradient and Hessian
at x are computed once and shared by every derivative asked for (a cache keyed by the point).

Conditions name a boundary part of the problem's geometry (``"x-"``, ``"e3"``, ``"sphere"``, a user
part, ``"boundary"`` for all of it) and, for systems, an output component; each has its own weight
(``√w`` multiplies its residual rows) and number of points (a total, split among the clients by ownership):

* :class:`Dirichlet` — ``u_c(x) − g(x)``; ``g`` a number, a function of x, or the exact solution;
* :class:`Neumann` — ``∂u_c/∂n(x) − g(x)`` with the part's outward unit normal;
* :class:`Robin` — ``α u_c + β ∂u_c/∂n − g``;
* :class:`Periodic` — ``u_c(x) − u_c(x + L e_axis)`` on the face ``axis−`` (and the same for
  ``∂u_c/∂x_axis`` when ``derivative``), with ``L`` the bounding box's length along the axis;
* :class:`Initial` — ``u_c(x, t0) − g(x)`` on the slice t = t0 of a space-time domain, and with
  ``velocity`` also ``∂u_c/∂t(x, t0) − h(x)`` (second order in time);
* :class:`Data` — measurements ``u_c(x_i) − y_i`` at given points (sensors); each point belongs to the
  client that owns it under the partition, as a boundary point does.

A hard Dirichlet condition is an ansatz: override ``DomainPDE.ansatz(x, out)`` (e.g.
``g(x) + φ(x)·out`` with φ = 0 on the part); every derivative goes through it.
"""
from __future__ import annotations

import math

from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field

import numpy as np
import torch
from torch.func import jacfwd, jacrev, jvp

from .base import DTYPE, ProblemError

#: keeps the seed of a Data condition's held-out readings apart from every other seed
HOLDOUT_TAG = 0x4D0D


class Field:
    """``u_θ`` at one point, its derivatives in x, its components and the problem's coefficients."""

    def __init__(self, fn: Callable, names: Sequence[str], axes: Sequence[str], n_space: int, coef: dict,
                 index: int | None = None, cache: dict | None = None, n_main: int | None = None):
        self._fn = fn                  # x [d] → [C] (→ [C + F] with F unknown fields after the outputs)
        self.names, self.axes, self.n_space = tuple(names), tuple(axes), n_space
        self.coef = coef
        # the first n_main names are the network's outputs; the rest are unknown coefficient fields, which the
        # whole system (u(x), u.jet(x) without a component) leaves out
        self._n_main = len(self.names) if n_main is None else int(n_main)
        self._index = index if index is not None else (0 if self._n_main == 1 else None)
        self._cache = {} if cache is None else cache

    # --- components -------------------------------------------------------------
    def __getitem__(self, c) -> Field:
        return Field(self._fn, self.names, self.axes, self.n_space, self.coef, component_index(c, self.names),
                     self._cache, self._n_main)

    def _pick(self, v):
        if self._index is None:
            return v if self._n_main == len(self.names) else v[: self._n_main]
        return v[self._index]

    # --- values and derivatives ----------------------------------------------------
    def _jet(self, x, order: int):
        key = (id(x), order)
        if key not in self._cache:
            f = self._fn
            if order == 0:
                self._cache[key] = (f(x),)
            else:
                def value_and_grad(y):
                    G, v = jacrev(lambda z: (f(z), f(z)), has_aux=True)(y)
                    return G, (G, v)

                if order == 1:
                    G, v = jacrev(lambda z: (f(z), f(z)), has_aux=True)(x)
                    self._cache[key] = (v, G)
                else:
                    H, (G, v) = jacfwd(value_and_grad, has_aux=True)(x)
                    self._cache[key] = (v, G, H)
                    self._cache[(id(x), 1)] = (v, G)
        return self._cache[key]

    def _best(self, x, order):
        for o in (order, 2, 1, 0):
            if o >= order and (id(x), o) in self._cache:
                return self._cache[(id(x), o)]
        return self._jet(x, order)

    def __call__(self, x):
        return self._pick(self._best(x, 0)[0])

    def grad(self, x):
        """∇ₓu: ``[d]`` for a component, ``[C, d]`` for the whole system (t is the last axis in space-time)."""
        return self._pick(self._best(x, 1)[1])

    def hessian(self, x):
        """∇ₓ²u: ``[d, d]`` for a component, ``[C, d, d]`` for the whole system."""
        return self._pick(self._jet(x, 2)[2])

    def jet(self, x):
        """``(value, gradient, Hessian)`` at x from one nested pass (what a system's equations usually need)."""
        v, G, H = self._jet(x, 2)
        return self._pick(v), self._pick(G), self._pick(H)

    def _axis(self, a) -> int:
        if isinstance(a, int) and 0 <= a < len(self.axes):
            return a
        if a in self.axes:
            return self.axes.index(a)
        raise ProblemError(f"unknown axis {a!r}; this problem's axes are {list(self.axes)} (or 0..{len(self.axes) - 1})")

    def diff(self, x, *axes):
        """``∂u/∂a``, ``∂²u/∂a∂b``, … — any order — for axes given by name (``"x"``, ``"t"``) or index:
        ``u.diff(x, "x", "x", "x", "x")`` is ∂⁴u/∂x⁴, ``u.diff(x, "x", "x", "t")`` is ∂³u/∂x²∂t.

        One or two axes read the shared value/gradient/Hessian pass (:meth:`jet`); three or more are nested
        forward-mode derivatives (:meth:`_nested`, exact, ``2^k`` primal evaluations for order k), computed once
        per point and set of axes (the order of the axes does not matter: the field is smooth)."""
        if len(axes) == 1:
            return self.grad(x)[..., self._axis(axes[0])]
        if len(axes) == 2:
            return self.hessian(x)[..., self._axis(axes[0]), self._axis(axes[1])]
        if not axes:
            raise ProblemError("diff needs at least one axis (u(x) is the value itself)")
        return self._pick(self._nested(x, tuple(sorted(self._axis(a) for a in axes))))

    def _nested(self, x, axes: tuple):
        """``∂^k u/∂x_{a_1}…∂x_{a_k}`` of every component ``[C]`` at one point: ``k`` nested
        ``torch.func.jvp`` along the unit vectors of the axes.  Forward mode in x only, so it runs under
        ``vmap`` over points and under ``jacrev``/``jacfwd``/``jvp`` in θ (the Gauss–Newton Jacobian), and the
        result is exact (no finite differences)."""
        key = (id(x), "nested", axes)
        if key not in self._cache:
            eye = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)

            def along(g, e):
                return lambda y: jvp(g, (y,), (e,))[1]

            g = self._fn
            for a in axes:
                g = along(g, eye[a])
            self._cache[key] = g(x)
        return self._cache[key]

    def nested_channels(self) -> int:
        """``Σ 2^k`` over the derivatives of order ``k ≥ 3`` this field (and every component sharing its cache) has
        taken (:meth:`_nested`): the primal evaluations each point's nested pass holds — what a residual of
        order above two adds to the graph the Gauss–Newton operator keeps per row
        (:func:`fedsciml.runtime.memory.nested_graph`); 0 where none was taken."""
        return sum(2 ** len(k[2]) for k in self._cache if len(k) == 3 and k[1] == "nested")

    def laplacian(self, x):
        """Δu over the spatial axes (t excluded in space-time)."""
        H = self.hessian(x)
        return torch.diagonal(H, dim1=-2, dim2=-1)[..., : self.n_space].sum(-1)

    def dn(self, x, n):
        """The normal derivative ``∇u · n``."""
        return (self.grad(x) * n).sum(-1)


def component_index(c, names: Sequence[str]) -> int:
    if isinstance(c, int) and not isinstance(c, bool) and 0 <= c < len(names):
        return c
    if isinstance(c, str) and c in names:
        return list(names).index(c)
    raise ProblemError(f"unknown component {c!r}; this problem's outputs are {list(names)}")


class FieldCoefficients(Mapping):
    """The coefficients a :class:`Field` of a problem with unknown fields reads (``u.coef``): the scalar unknowns
    by name, and each unknown field as a component :class:`Field` of the system, made on each lookup.

    Decision: no field is stored here.  Stored (``coef[name] = u[name]``, as before), the field's :class:`Field`
    referred to this mapping and the mapping to it — a reference cycle that kept each residual evaluation's cached
    jets, and with them the whole autograd graph of the evaluation, alive until Python's cyclic collector ran.
    The matrix-free operator builds and drops one such graph per row block and product, so a run held several at
    once: HInv with a 5 × 100 network (4,096 interior points, 7,120 rows) grew by about 0.5 GB a product to 4.5
    GB over 15 products, and the full step at their point counts passed 11 GB; made on lookup, the graph goes
    with the evaluation (``reproductions/pinnacle.md``)."""

    def __init__(self, scalars: dict, fn: Callable, names: Sequence[str], axes: Sequence[str], n_space: int,
                 cache: dict, n_main: int):
        self._scalars = dict(scalars)
        self._fields = tuple(names[n_main:])
        self._spec = (fn, tuple(names), tuple(axes), int(n_space), cache, int(n_main))

    def __getitem__(self, k):
        if k in self._fields:
            fn, names, axes, n_space, cache, n_main = self._spec
            return Field(fn, names, axes, n_space, self, component_index(k, names), cache, n_main)
        return self._scalars[k]

    def __iter__(self):
        return iter((*self._scalars, *self._fields))

    def __len__(self) -> int:
        return len(self._scalars) + len(self._fields)


# ----------------------------------------------------------------------------- conditions
Value = float | Callable | None


def _values(g: Value, x: torch.Tensor, exact: Callable | None, comp: int, what: str) -> torch.Tensor:
    """``g`` at the points ``x [n, d]``: a number, a function of the batch, or (``None``) the exact solution."""
    if g is None:
        if exact is None:
            raise ProblemError(f"{what} has no value and the problem has no exact solution to take it from")
        v = exact(x)
        v = v if v.ndim == 1 else v[:, comp]
        if v.numel() and bool(torch.isnan(v).all()):  # a column the problem cannot give (DomainPDE.exact_or_none)
            raise ProblemError(f"{what} has no value and the problem has no exact solution to take it from")
    elif callable(g):
        try:
            raw = g(x)
        except Exception as e:  # the user's value function: name the condition (it was the raw error alone)
            raise ProblemError(f"{what}: its value function failed on {x.shape[0]} points: {type(e).__name__}: "
                               f"{str(e).splitlines()[0] if str(e) else ''}") from e
        if (torch.is_tensor(raw) and raw.is_complex()) or (not torch.is_tensor(raw) and np.iscomplexobj(raw)):
            raise ProblemError(f"{what}: its value function returned complex numbers; a value is real")
        try:
            v = torch.as_tensor(raw, dtype=DTYPE)
        except (TypeError, ValueError, RuntimeError):
            raise ProblemError(f"{what}: its value function must return numbers, got {type(raw).__name__}") from None
        if v.ndim == 0:
            v = v.expand(x.shape[0])
    else:
        v = torch.full((x.shape[0],), _real(g, f"{what} value"), dtype=DTYPE)
    if v.shape != (x.shape[0],):
        raise ProblemError(f"{what}: its value must give one number per point (shape [{x.shape[0]}]), got {tuple(v.shape)}")
    if not bool(torch.isfinite(v).all()):
        raise ProblemError(f"{what}: its value is not finite at {int((~torch.isfinite(v)).sum())} of "
                           f"{x.shape[0]} points")
    return v.to(DTYPE)


def _real(v, what: str, *, lo: float | None = None, positive: bool = False) -> float:
    """``v`` as a finite real number (not a bool, not complex), ``≥ lo`` / ``> 0`` where asked; one line
    naming ``what`` otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) and not (
            torch.is_tensor(v) and v.numel() == 1 and not v.is_complex()):
        raise ProblemError(f"{what} must be a real number, got {v!r} ({type(v).__name__})")
    f = float(v)
    if not math.isfinite(f):
        raise ProblemError(f"{what} must be finite, got {v!r}")
    if positive and not f > 0:
        raise ProblemError(f"{what} must be > 0, got {v!r}")
    if lo is not None and f < lo:
        raise ProblemError(f"{what} must be ≥ {lo:g}, got {v!r}")
    return f


@dataclass
class Condition:
    """Base: a condition on the boundary part ``on`` for output ``component`` (a name or index; the
    only output of a scalar problem by default), with its own ``weight`` (``None``: the problem's
    ``boundary_weight``) and ``n`` points in total, each going to the client whose cell holds it (``None``: the
    problem's ``n_boundary``)."""

    on: str = "boundary"
    _: KW_ONLY
    component: str | int | None = None
    weight: float | None = None
    n: int | None = None

    kind = "condition"
    outputs = ("",)  # names of the residual rows it gives per point (one part each)

    def label(self) -> str:
        c = "" if self.component is None else f"[{self.component}]"
        return (self.kind if self.on == self.kind else f"{self.kind}:{self.on}") + c

    def __post_init__(self):
        """Every argument checked when the condition is made: one line naming it and what is allowed."""
        name = type(self).__name__
        if not isinstance(self.on, str) or not self.on:
            raise ProblemError(f"{name}: on must name a boundary part (a non-empty string), got {self.on!r}")
        if self.component is not None and (isinstance(self.component, bool)
                                           or not isinstance(self.component, (str, int))):
            raise ProblemError(f"{name}({self.on!r}): component must be an output name or index, got "
                               f"{self.component!r}")
        if self.weight is not None:
            self.weight = _real(self.weight, f"{name}({self.on!r}) weight", positive=True)
        if self.n is not None and (isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer))
                                   or self.n < 1):
            raise ProblemError(f"{name}({self.on!r}): n (points in total) must be a whole number ≥ 1, got "
                               f"{self.n!r}")
        value = getattr(self, "value", None)
        if value is not None and not callable(value):
            _real(value, f"{name}({self.on!r}) value")
        self._check()

    def _check(self):
        """A condition's own checks (after the common ones)."""

    def points(self, problem, geometry, n: int, method: str, seed) -> tuple[torch.Tensor, tuple]:
        """``(x used for ownership [n, d], point tuple)`` for the whole part."""
        raise NotImplementedError

    def residual(self, u: Field, pt, i: int):
        raise NotImplementedError


@dataclass
class Dirichlet(Condition):
    """``u_c = g`` on the part (``value`` a number, a function of x [n, d], or ``None``: the exact solution)."""

    value: Value = None
    kind = "dirichlet"

    def points(self, problem, geometry, n, method, seed):
        x = geometry.sample_boundary(n, method, seed, part=self.on)
        return x, (x, _values(self.value, x, problem.exact_or_none(), problem.comp(self), self.label()))

    def residual(self, u, pt, i):
        x, g = pt
        return u(x) - g


@dataclass
class Neumann(Condition):
    """``∂u_c/∂n = g`` on the part (``value``: a number, a function of x, or ``None``: from the exact solution)."""

    value: Value = 0.0
    kind = "neumann"

    def points(self, problem, geometry, n, method, seed):
        x, nrm = geometry.sample_boundary(n, method, seed, part=self.on, with_normals=True)
        if self.value is None:
            g = problem.exact_normal_derivative(x, nrm, problem.comp(self))
        else:
            g = _values(self.value, x, None, 0, self.label())
        return x, (x, nrm, g)

    def residual(self, u, pt, i):
        x, nrm, g = pt
        return u.dn(x, nrm) - g


@dataclass
class Robin(Condition):
    """``α u_c + β ∂u_c/∂n = g`` on the part (``value`` ``None``: from the exact solution)."""

    alpha: float = 1.0
    beta: float = 1.0
    value: Value = None
    kind = "robin"

    def _check(self):
        self.alpha = _real(self.alpha, f"Robin({self.on!r}) alpha")
        self.beta = _real(self.beta, f"Robin({self.on!r}) beta")
        if self.alpha == 0 and self.beta == 0:
            raise ProblemError(f"Robin({self.on!r}): alpha and beta are both 0, which states no condition "
                               f"(0 = value); give alpha or beta ≠ 0")

    def points(self, problem, geometry, n, method, seed):
        x, nrm = geometry.sample_boundary(n, method, seed, part=self.on, with_normals=True)
        c = problem.comp(self)
        if self.value is None:
            ex = problem.exact_or_none()
            if ex is None:
                raise ProblemError(f"{self.label()} has no value and the problem has no exact solution to take it from")
            g = self.alpha * _values(None, x, ex, c, self.label()) + self.beta * problem.exact_normal_derivative(x, nrm, c)
        else:
            g = _values(self.value, x, None, 0, self.label())
        return x, (x, nrm, g)

    def residual(self, u, pt, i):
        x, nrm, g = pt
        return self.alpha * u(x) + self.beta * u.dn(x, nrm) - g


@dataclass
class Periodic(Condition):
    """``u_c(x) = u_c(x + L e_axis)`` for x on the face ``axis−`` (``axis`` a name like ``"x"`` or an index),
    and the same for ``∂u_c/∂x_axis`` when ``derivative``."""

    on: str = field(default="periodic", kw_only=True)
    axis: str | int = "x"
    derivative: bool = True
    kind = "periodic"

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.derivative, bool):
            raise ProblemError(f"Periodic derivative must be True or False, got {self.derivative!r}")
        self.outputs = ("value", "derivative") if self.derivative else ("value",)

    def label(self):
        c = "" if self.component is None else f"[{self.component}]"
        return f"periodic:{self.axis}{c}"

    def _face(self, problem):
        a = problem.axis_index(self.axis)
        from .geometry import axis_name

        return a, axis_name(a) + "-"

    def points(self, problem, geometry, n, method, seed):
        a, face = self._face(problem)
        if face not in geometry.part_names() or face[:-1] + "+" not in geometry.part_names():
            raise ProblemError(f"{self.label()} needs the faces {face!r} and {face[:-1] + '+'!r}; this geometry's parts: "
                               f"{geometry.part_names()}")
        x = geometry.sample_boundary(n, method, seed, part=face)
        shift = torch.zeros(geometry.dim, dtype=DTYPE)
        shift[a] = float(geometry.bbox[1][a] - geometry.bbox[0][a])
        y = x + shift
        geometry.check_inside(y, f"{self.label()}: the image of the face point")
        return x, (x, y)

    def residual(self, u, pt, i):
        x, y = pt
        if i == 0:
            return u(x) - u(y)
        a = u._axis(self.axis) if not isinstance(self.axis, int) else self.axis
        return u.diff(x, a) - u.diff(y, a)


@dataclass
class Initial(Condition):
    """On t = t0 of a space-time domain: ``u_c(x, t0) = value(x)`` and, with ``velocity``,
    ``∂u_c/∂t(x, t0) = velocity(x)`` (``value`` ``None``: the exact solution; functions take ``(x, t)`` points)."""

    on: str = field(default="initial", kw_only=True)
    value: Value = None
    velocity: Value = None
    kind = "initial"

    def __post_init__(self):
        super().__post_init__()
        if self.velocity is not None and not callable(self.velocity):
            _real(self.velocity, "Initial velocity")
        self.outputs = ("value", "velocity") if self.velocity is not None else ("value",)

    def points(self, problem, geometry, n, method, seed):
        if not hasattr(geometry, "sample_initial"):
            raise ProblemError(f"{self.label()} needs a space-time problem (set T); this one has no time axis")
        x = geometry.sample_initial(n, method, seed)
        c = problem.comp(self)
        g = _values(self.value, x, problem.exact_or_none(), c, self.label())
        h = _values(self.velocity, x, None, 0, self.label() + " velocity") if self.velocity is not None else g
        return x, (x, g, h)

    def residual(self, u, pt, i):
        x, g, h = pt
        if i == 0:
            return u(x) - g
        return u.diff(x, len(u.axes) - 1) - h


@dataclass
class Data(Condition):
    """Measurements: ``u_c(x_i) = y_i`` at the given points (sensors), each owned by the client whose cell
    holds it.  ``noise`` (optional) is the readings' standard deviation, used for the coefficient
    uncertainty of an inverse problem (otherwise estimated from the final residuals); a problem with one
    (:attr:`~fedsciml.problems.domain.DomainPDE.noisy_data`) returns by default the θ of its best held-out
    validation residual (the run option ``keep_best``).

    ``holdout`` (a fraction in [0, 1), default 0): that share of the readings is **never trained on** and is
    part of the run's held-out validation residual instead (:mod:`fedsciml.runtime.validation`), so the
    validation residual measures how well u predicts readings it has not seen — what tells, without the
    reference solution, when a network starts fitting the readings' noise.  Which readings are held out is
    fixed by ``holdout_seed`` alone (:meth:`split`: the same readings whatever the run seed, so the training and
    the validation objectives of a run never share one)."""

    on: str = field(default="data", kw_only=True)
    x: object = None
    y: object = None
    noise: float | None = None
    holdout: float = 0.0
    holdout_seed: int = 0
    kind = "data"

    def _check(self):
        if self.noise is not None:
            self.noise = _real(self.noise, "Data noise (the readings' standard deviation)", positive=True)
        h = self.holdout
        if isinstance(h, bool) or not isinstance(h, (int, float, np.floating, np.integer)) \
                or not 0 <= float(h) < 1:
            raise ProblemError(f"Data holdout (the share of the readings held out for validation) must be a number "
                               f"in [0, 1), got {h!r}")
        self.holdout = float(h)
        if isinstance(self.holdout_seed, bool) or not isinstance(self.holdout_seed, (int, np.integer)) \
                or self.holdout_seed < 0:
            raise ProblemError(f"Data holdout_seed must be a whole number ≥ 0, got {self.holdout_seed!r}")

    def split(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(trained, held)``: the indices (ascending) of the ``n`` readings trained on and of those held out —
        ``round(holdout · n)`` of them, a permutation of ``SeedSequence([holdout_seed, 0x4D0D])``'s generator;
        ``held`` is empty without a holdout.  A holdout that leaves no reading on either side is refused."""
        m = int(round(self.holdout * n))
        if m == 0:
            return torch.arange(n), torch.zeros(0, dtype=torch.long)
        if m >= n:
            raise ProblemError(f"Data holdout {self.holdout:g} of {n} readings leaves none to train on")
        perm = np.random.default_rng(np.random.SeedSequence([int(self.holdout_seed), HOLDOUT_TAG])).permutation(n)
        held = np.sort(perm[:m])
        trained = np.sort(perm[m:])
        return torch.as_tensor(trained, dtype=torch.long), torch.as_tensor(held, dtype=torch.long)

    def n_trained(self) -> int:
        """How many readings are trained on (all but the held-out ones)."""
        return int(self.split(int(torch.as_tensor(self.y).numel()))[0].numel())

    def label(self):
        c = "" if self.component is None else f"[{self.component}]"
        return f"data{c}"

    def points(self, problem, geometry, n, method, seed):
        x = torch.as_tensor(self.x, dtype=DTYPE)
        y = torch.as_tensor(self.y, dtype=DTYPE).reshape(-1)
        if x.ndim == 1:
            x = x[:, None]
        if x.shape[0] != y.shape[0]:
            raise ProblemError(f"{self.label()}: {x.shape[0]} points but {y.shape[0]} values")
        x = geometry.check_inside(x, f"{self.label()}: measurement point")
        return x, (x, y)

    def residual(self, u, pt, i):
        x, y = pt
        return u(x) - y
