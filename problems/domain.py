"""A PDE on a geometry: named boundary parts with their own conditions, time, systems, inverse problems.

::

    import math, torch
    import fedsciml as fs
    from fedsciml.problems.geometry import Interval
    from fedsciml.problems.conditions import Dirichlet, Neumann, Initial

    class Heat(fs.DomainPDE):
        name = "my-heat"
        geometry = Interval(0.0, 1.0)
        T = 1.0                                   # space-time: inputs (x, t); no condition at t = T
        params = {"k": fs.option(0.1, "diffusivity", float)}
        conditions = [Dirichlet("x-", 0.0), Neumann("x+", 0.0), Initial(value=lambda x: torch.sin(math.pi / 2 * x[:, 0]))]

        def equation(self, u, x):                 # at one interior point x = (x, t)
            return u.diff(x, "t") - self.k * u.diff(x, "x", "x")

Class attributes (each may also be a property, to depend on the options):

* ``geometry`` — a :class:`~fedsciml.problems.geometry.Geometry`; ``T`` (and ``t0``) make it space-time;
* ``outputs`` — the names of the output components (``("u", "v", "p")`` for a system);
* ``conditions`` — a list of :mod:`~fedsciml.problems.conditions` objects;
* ``unknowns`` — ``{name: initial value}``: scalar coefficients trained with θ (an inverse problem).
  θ is the network's parameters followed by these scalars, so every method (gn, FIPA, FedAvg, …)
  trains them unchanged; the equation reads them as ``u.coef["name"]``;
* ``unknown_fields`` — ``{name: dict(hidden=(20, 20), activation="tanh", inputs=("x", "y"))}``: unknown
  coefficient *fields* a(x), each its own small network (inputs: a subset of the axes, all by default)
  whose parameters follow the scalars in θ — so every method trains them unchanged and gn's statistics
  stay exact; the equation reads ``u.coef["a"]`` (a field: ``u.coef["a"](x)``, ``.grad``, ``.diff``),
  conditions and ``Data`` name ``component="a"``, and ``exact_coefficients["a"]`` (a function of the
  batch ``x [n, d]``) gives the report ``rel_l2_a`` (see :meth:`DomainPDE.field_networks`);
* ``hidden``, ``activation`` — the default network ``[d_in, *hidden, len(outputs)]`` (the options ``hidden`` and
  ``activation`` of every problem change it: ``solve NAME --hidden 64,64 --activation sin``);
* ``up_to_constant`` — components compared up to an additive constant (a pressure);
* ``exact_coefficients`` — the true values of ``unknowns`` (for the report).

Hooks: ``equation(u, x)`` (one residual, or a tuple of one per equation), ``exact(x)`` (batch ``[n, d]`` →
``[n]`` or ``[n, C]``; optional), ``ansatz(x, out)`` (a hard constraint; identity by default),
``test_inputs()`` and ``reference()`` (a test set with reference values where no closed form exists).

Clients: the option ``split`` (``strips``, ``strips:AXIS``, ``grid``, ``grid:AxB``) or an overridden
:meth:`client_partition`.  Point counts are totals: one sample of ``n_interior`` points of the domain and one
of ``n`` points of each condition's part are drawn whatever the number of clients (the seeds of a one-client
run), and each point goes to the client whose cell holds it — one problem, one set of points, so a centralized
run and a federated one see the same pooled points; a client's share is its cell's (about ``n/K`` with equal
cells).
"""
from __future__ import annotations

import copy
import logging
import math

from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np
import torch
from torch.func import jacrev, vmap

from fedsciml.options import FLOATS, option

from .base import DTYPE, TOTAL_POINTS, ProblemError, ResidualPart, arch_of
from .conditions import Condition, Data, Field, FieldCoefficients, Initial, Periodic, component_index
from .geometry import SAMPLINGS, Geometry, Partition, SpaceTime, axis_name, make_partition
from .pinn import PINNProblem

log = logging.getLogger(__name__)

#: points and parameter vectors at which a part's channel form is detected and checked (:meth:`DomainPDE.taylor_form`)
TAYLOR_SAMPLE = 16


#: the option ``input_scaling``'s values (:meth:`DomainPDE.input_map`)
INPUT_SCALINGS = ("none", "box")


def box_map(lo, hi) -> tuple[list[float], list[float]]:
    """``(shift, scale)`` mapping the box ``[lo, hi]`` (per axis) to ``[−1, 1]``: shift the centre, scale
    ``2 / (hi − lo)``."""
    lo, hi = [float(v) for v in lo], [float(v) for v in hi]
    return [(a + b) / 2 for a, b in zip(lo, hi)], [2.0 / (b - a) for a, b in zip(lo, hi)]


def domain_params():
    return {
        "n_interior": option(400, f"interior collocation points {TOTAL_POINTS}", int, lo=1),
        "n_boundary": option(50, f"points of each boundary/initial condition without its own n, {TOTAL_POINTS}",
                             int, lo=1),
        "boundary_weight": option(10.0, "weight of each condition without its own weight", float, lo=0, lo_open=True),
        "sampling": option("lhs", "collocation sampling: " + ", ".join(SAMPLINGS), str, choices=SAMPLINGS),
        "input_scaling": option("none", "fixed affine map of the network's inputs: box (each axis of the domain's "
                                        "bounding box, time included, to [-1, 1]) or none (raw coordinates)", str,
                                choices=INPUT_SCALINGS),
        "first_layer_scale": option(None, "multiply the first layer's initial weights of each input axis by this "
                                          "(one number, or one per axis; on the command line a,b,c) and draw its "
                                          "biases uniform in [-π, π]: with activation sin, random Fourier features "
                                          "of scale σ (SIREN's ω₀); a frequency scale the user sets", FLOATS,
                                    lo=0, lo_open=True, none="N(0, 1/fan_in) weights, zero biases"),
        "split": option("strips", "client partition: strips, strips:AXIS, grid, grid:AxB", str),
    }


class _Residual:
    """One residual part's pointwise function ``(θ, point) → scalar`` (one object per problem and part, so
    that the clients' parts are recognised as the same part when pooled)."""

    def __init__(self, problem: DomainPDE, cond: Condition | None, i: int):
        self.problem, self.cond, self.i = problem, cond, i
        self.comp = problem.comp(cond) if cond is not None else None

    def __call__(self, theta, pt):
        u = self.problem.field(theta)
        if self.cond is None:
            return _as_vector(self.problem.equation(u, pt))[self.i]
        return self.cond.residual(u[self.comp], pt, self.i)


class _TaylorHead:
    """One residual part as a function of the network's output channels at its point (K-FAC's Taylor form,
    :mod:`fedsciml.core.kfac_taylor`): the network is replaced by its Taylor polynomial of the part's order at the
    point, so the problem's own ``equation`` / condition — whatever derivatives up to second order it takes, through
    the ansatz — sees the same values and the channels' gradients."""

    def __init__(self, problem: DomainPDE, cond: Condition | None, i: int, order: int, recon: torch.Tensor | None):
        self.problem, self.cond, self.i, self.order, self.recon = problem, cond, i, order, recon
        self.comp = problem.comp(cond) if cond is not None else None

    def __call__(self, value, grad, second, pt, extra):
        pb = self.problem
        x = pt[0] if isinstance(pt, tuple) else pt
        H = None
        if self.order == 2:
            assert self.recon is not None
            H = torch.einsum("ck,kab->cab", second, self.recon.to(dtype=second.dtype, device=second.device))

        def poly(y):
            out = value
            if self.order >= 1:
                dy = y - x
                out = out + grad @ dy
                if H is not None:
                    out = out + 0.5 * torch.einsum("cab,a,b->c", H, dy, dy)
            return pb.ansatz(y, out)

        u = Field(poly, pb.outputs, pb.axes, pb.geometry.dim, {k: extra[j] for j, k in enumerate(pb.unknowns)})
        if self.cond is None:
            return _as_vector(pb.equation(u, x))[self.i]
        return self.cond.residual(u[self.comp], pt, self.i)


def _as_vector(out) -> torch.Tensor:
    if isinstance(out, (tuple, list)) and out and all(torch.is_tensor(o) for o in out):
        return torch.stack([torch.as_tensor(o).reshape(()) for o in out])
    if not torch.is_tensor(out):
        raise ProblemError(f"equation(u, x) must return a tensor computed from u (or a tuple of them, one per "
                           f"equation), got {type(out).__name__} {out!r:.60}")
    return out.reshape(-1)


def _box(lo, hi, who: str) -> tuple[torch.Tensor, torch.Tensor]:
    lo_t, hi_t = (torch.as_tensor([float(v) for v in b], dtype=DTYPE) for b in (lo, hi))
    d = int(lo_t.numel())
    if d == 0 or hi_t.numel() != d or not bool((hi_t > lo_t).all()):
        raise ProblemError(f"{who} needs a box lo < hi in every axis, got lo={list(lo)}, hi={list(hi)}")
    return lo_t, hi_t


def _coons(lo_t: torch.Tensor, hi_t: torch.Tensor) -> tuple[Callable, Callable]:
    """The transfinite (Coons) interpolation from the faces of the box ``[lo, hi]`` and the bubble vanishing on
    them: ``interp(y, value)`` (``y [d]`` one point, ``value`` a function of face points ``[3^d − 1, d]``) and
    ``bubble(y)`` (see :func:`box_ansatz`)."""
    d = int(lo_t.numel())
    # every (S, ε): S a nonempty set of axes fixed to a face, ε ∈ {0, 1}^S which face (lo, hi) of each
    fixed, upper, sign = [], [], []
    for code in range(1, 3 ** d):
        digits = [(code // 3 ** i) % 3 for i in range(d)]  # 0: free, 1: lo face, 2: hi face
        fixed.append([g > 0 for g in digits])
        upper.append([g == 2 for g in digits])
        sign.append((-1.0) ** (sum(g > 0 for g in digits) + 1))
    M = torch.tensor(fixed, dtype=torch.bool)
    U = torch.tensor(upper, dtype=torch.bool)
    C = torch.where(U, hi_t, lo_t)                     # the face coordinates of the fixed axes
    sgn = torch.tensor(sign, dtype=DTYPE)
    width = hi_t - lo_t

    def interp(y: torch.Tensor, value: Callable) -> torch.Tensor:
        Y = torch.where(M, C.to(y), y.reshape(1, d))   # [3^d − 1, d]: y with the axes of S on their faces
        w_hi = (y - lo_t.to(y)) / width.to(y)          # linear interpolation weights along each axis
        W = torch.where(M, torch.where(U, w_hi, 1 - w_hi), torch.ones_like(Y)).prod(1)
        return (sgn.to(y) * W * torch.as_tensor(value(Y)).reshape(-1)).sum()

    def bubble(y: torch.Tensor) -> torch.Tensor:
        return (4 * (y - lo_t.to(y)) * (hi_t.to(y) - y) / width.to(y) ** 2).prod()

    return interp, bubble


def box_ansatz(lo, hi, value: Callable) -> Callable:
    """A hard constraint holding a quantity at ``value`` on the whole boundary of the box ``[lo, hi]``: the function
    ``(y, out) ↦ A(y) + B(y)·out`` for an unknown field's ``ansatz`` (``unknown_fields = {"a": dict(ansatz=…)}``;
    ``y`` the field's inputs at one point, ``out`` its network's output there), so the field equals ``value`` on
    every face whatever θ, and no weighted condition on it is needed.

    * ``A`` is the transfinite (Coons) interpolation of ``value`` from the faces, the Boolean sum of the linear
      interpolations ``P_i`` along each axis: ``A = Σ_{∅≠S⊆axes} (−1)^{|S|+1} Π_{i∈S} P_i value`` — it reads
      ``value`` on the faces only (3^d − 1 face points per point: 8 in 2-D), equals it there, and reproduces
      inside any sum of functions of one axis each.
    * ``B(y) = Π_i 4 (y_i − lo_i)(hi_i − y_i) / (hi_i − lo_i)²``: zero on every face, 1 at the centre.

    ``value`` is a function of a batch ``x [n, d]`` (d the box's dimension) → ``[n]``, as ``exact_coefficients``."""
    lo_t, hi_t = _box(lo, hi, "box_ansatz")
    d = int(lo_t.numel())
    if not callable(value):
        raise ProblemError(f"box_ansatz: value must be a function of the points x [n, {d}], got {value!r:.60}")
    interp, bubble = _coons(lo_t, hi_t)

    def ansatz(y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return interp(y, value) + bubble(y) * out.reshape(())

    return ansatz


def initial_box_ansatz(lo, hi, t0: float, T: float, initial: Callable, boundary: Callable | float = 0.0) -> Callable:
    """A hard constraint for an initial condition and a Dirichlet condition on every face of a box in space: the
    function ``(y, out) ↦ A(y) + B(y)·out`` of a space-time point ``y = (x, t)`` (x in the box ``[lo, hi]``, t in
    ``[t0, T]``) for a problem's ``ansatz`` (one output), so that ``u(x, t0) = initial`` and ``u = boundary`` on
    the box's faces whatever θ; ``Initial`` and that ``Dirichlet`` condition are then not needed.

    * ``A = S[h](x, t) + g(x) − S[h](x, t0)``: ``g`` the initial value, ``h`` the boundary value and ``S`` the
      transfinite interpolation from the spatial faces at a fixed t (:func:`box_ansatz`'s ``A``), i.e. the Boolean
      sum of ``S`` and the projector onto t = t0.  On a face ``A = h(x, t) + g(x) − h(x, t0) = h`` where the data
      agree there (``g = h(·, t0)`` on the faces, the compatibility any solution needs); at t = t0, ``A = g``.  With
      ``boundary`` 0 it is ``g`` alone (no face values are read).
    * ``B = (t − t0)/(T − t0) · Π_i 4 (x_i − lo_i)(hi_i − x_i)/(hi_i − lo_i)²``: zero at t0 and on every face.

    ``initial`` and ``boundary`` (a number or a function) take batches of space-time points ``[n, d + 1]``, as the
    conditions' values do (``initial`` is given points with t = t0)."""
    lo_t, hi_t = _box(lo, hi, "initial_box_ansatz")
    d = int(lo_t.numel())
    t0, T = float(t0), float(T)
    if not T > t0:
        raise ProblemError(f"initial_box_ansatz needs T > t0, got t0={t0}, T={T}")
    if not callable(initial):
        raise ProblemError(f"initial_box_ansatz: initial must be a function of the points (x, t) [n, {d + 1}], got "
                           f"{initial!r:.60}")
    if not callable(boundary) and (isinstance(boundary, bool) or not isinstance(boundary, (int, float))
                                   or not math.isfinite(float(boundary))):
        raise ProblemError(f"initial_box_ansatz: boundary must be a finite number or a function of the points "
                           f"(x, t) [n, {d + 1}], got {boundary!r:.60}")
    interp, bubble = _coons(lo_t, hi_t)
    h0 = None if callable(boundary) else float(boundary)

    def at(t):
        return lambda X: boundary(torch.cat([X, t.expand(X.shape[0], 1)], 1))  # type: ignore[operator]

    def ansatz(y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        x, t = y[:d], y[d:]
        g = torch.as_tensor(initial(torch.cat([x, torch.full_like(t, t0)]).reshape(1, d + 1))).reshape(())
        if h0 is None:
            A = interp(x, at(t)) + g - interp(x, at(torch.full_like(t, t0)))
        else:  # a constant h: S[h] is h at every t, so A = g
            A = g
        return A + (t.reshape(()) - t0) / (T - t0) * bubble(x) * out.reshape(())

    return ansatz


#: residual rows per parameter that :meth:`DomainPDE.point_counts` scales default point counts to when they give
#: fewer rows than parameters
OVERSAMPLE = 2.0


def pooled_l2re(P: torch.Tensor, U: torch.Tensor, up_to_constant: Sequence[int] = ()) -> float:
    """PINNacle's L2RE: the error pooled over every test point and output component,
    ``√(Σᵢ Σ_c (P_ic − U_ic)²) / √(Σᵢ Σ_c U_ic²)`` for predictions ``P`` and references ``U`` ``[n, C]``.

    PINNacle computes it as ``√mean((y − y*)²) / √mean(y*²)`` over the array ``[n, C]``
    (``src/utils/callbacks.py:156``, ``:170`` and ``:175`` of i207M/PINNacle, after dropping reference rows holding a
    NaN at ``:147-149``) — the same number, since both means count the same ``n·C`` entries.  Unlike ``rel_l2``
    (the largest per-component error) a small component weighs little here.  A component listed in
    ``up_to_constant`` (indices) has its error's mean removed first (the best constant shift of the prediction;
    PINNacle has no such components); the denominator is the reference as it stands."""
    E = P - U
    if up_to_constant:
        idx = list(up_to_constant)
        E = E.clone()
        E[:, idx] = E[:, idx] - E[:, idx].mean(0, keepdim=True)
    return float(E.norm() / U.norm())


class DomainPDE(PINNProblem):
    """A PDE on a :class:`Geometry` with conditions on named boundary parts (see the module docstring)."""

    def __init__(self, **options):
        # which point counts the caller named (a preset's too): those win over the rule of point_counts
        self.__dict__["_given_points"] = frozenset(k for k in ("n_interior", "n_boundary")
                                                   if options.get(k) is not None)
        super().__init__(**options)

    kind: ClassVar[str] = "pinn"
    geometry: ClassVar[Geometry | None] = None
    T: ClassVar[float | None] = None
    t0: ClassVar[float] = 0.0
    outputs: ClassVar[tuple] = ("u",)
    conditions: ClassVar[list] = []
    unknowns: ClassVar[dict] = {}
    unknown_fields: ClassVar[dict] = {}
    exact_coefficients: ClassVar[dict] = {}
    up_to_constant: ClassVar[tuple] = ()
    hidden: ClassVar[tuple] = (32, 32, 32)
    activation: ClassVar[str] = "tanh"

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.params = {**domain_params(), **cls.__dict__.get("params", {})}
        if not cls.__dict__.get("description"):
            cls.description = (cls.__doc__ or f"user-defined PDE {cls.name}").strip().splitlines()[0]

    # --- validation -------------------------------------------------------------------
    def _check(self):
        g = self.geometry
        if not isinstance(g, Geometry):
            raise ProblemError(f"problem {self.name!r} needs a geometry (a fedsciml.problems.geometry.Geometry), got {g!r}")
        names = tuple(self.outputs)
        if not names or len(set(names)) != len(names):
            raise ProblemError(f"outputs must be distinct names, got {list(names)}")
        dom = self.domain()
        conds = self.condition_list()
        if not conds and type(self).ansatz is DomainPDE.ansatz:
            raise ProblemError(f"problem {self.name!r} has no conditions; give at least one (Dirichlet, Neumann, ...) "
                               f"or a hard constraint (ansatz)")
        for c in conds:
            if not isinstance(c, Condition):
                raise ProblemError(f"conditions must be Dirichlet/Neumann/Robin/Periodic/Initial/Data objects, got {c!r}")
            if not isinstance(c, (Data, Periodic, Initial)):
                dom.check_part(c.on)
            self.comp(c)
            if c.weight is not None and not c.weight > 0:
                raise ProblemError(f"{c.label()}: weight must be > 0, got {c.weight}")
            if c.n is not None and not c.n >= 1:
                raise ProblemError(f"{c.label()}: n must be ≥ 1, got {c.n}")
        for k in self.up_to_constant:
            component_index(k, names)
        if not isinstance(self.unknowns, dict):
            raise ProblemError(f"problem {self.name!r}: unknowns must be a dict of name: initial value, got "
                               f"{self.unknowns!r:.80}")
        for k, v in self.unknowns.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)) \
                    or not math.isfinite(float(v)):
                raise ProblemError(f"problem {self.name!r}: unknown {k!r} needs a finite initial value, got {v!r}")
        self._check_fields()
        for k in self.exact_coefficients:
            if k not in self.unknowns and k not in self.unknown_fields:
                raise ProblemError(f"exact_coefficients names {k!r}, which is not among the unknowns "
                                   f"{list(self.unknowns) + list(self.unknown_fields)}")
            if k in self.unknown_fields and not callable(self.exact_coefficients[k]):
                raise ProblemError(f"exact_coefficients[{k!r}] of an unknown field must be a function of the points "
                                   f"x [n, d] (returning [n]), got {self.exact_coefficients[k]!r:.60}")

    def condition_list(self) -> list:
        """The conditions, read once (``conditions`` may be a property that builds new objects each time)."""
        if "_conds" not in self.__dict__:
            conds = self.conditions
            if isinstance(conds, (str, bytes, Condition)) or not hasattr(conds, "__iter__"):
                raise ProblemError(f"problem {self.name!r}: conditions must be a list of Dirichlet/Neumann/Robin/"
                                   f"Periodic/Initial/Data objects, got {conds!r:.80}")
            self.__dict__["_conds"] = list(conds)
        return self.__dict__["_conds"]

    def comp(self, cond: Condition) -> int:
        """The output index a condition applies to."""
        if cond.component is None:
            if len(self.outputs) > 1:
                raise ProblemError(f"{cond.label()}: this system has outputs {list(self.outputs)}; name the component")
            return 0
        return component_index(cond.component, self.components)

    # --- the domain and the network -------------------------------------------------------
    def domain(self) -> Geometry:
        """The geometry, or geometry × [t0, T] for a time-dependent problem."""
        if "_domain" not in self.__dict__:
            g = self.geometry
            if self.T is None:
                self.__dict__["_domain"] = g
            else:
                T, t0 = self.T, self.t0
                for nm, v in (("T", T), ("t0", t0)):
                    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                        raise ProblemError(f"problem {self.name!r}: {nm} must be a finite number (the time interval "
                                           f"[t0, T]), got {v!r}")
                self.__dict__["_domain"] = SpaceTime(g, float(T), float(t0))
        return self.__dict__["_domain"]

    @property
    def space_dim(self) -> int:
        return self.geometry.dim

    def input_dim(self) -> int:
        return self.domain().dim

    @property
    def axes(self) -> tuple:
        ax = tuple(axis_name(i) for i in range(self.geometry.dim))
        return ax + ("t",) if self.T is not None else ax

    def axis_index(self, a) -> int:
        if isinstance(a, int) and 0 <= a < len(self.axes):
            return a
        if a in self.axes:
            return self.axes.index(a)
        raise ProblemError(f"unknown axis {a!r}; this problem's axes are {list(self.axes)}")

    def network_sizes(self) -> list[int]:
        """``[d_in, *hidden, len(outputs)]`` (``hidden``, ``activation``: the options, defaults the class's)."""
        return [self.input_dim(), *self.options["hidden"], len(self.outputs)]

    def input_map(self) -> tuple | None:
        """The option ``input_scaling``: ``box`` maps each axis of :meth:`domain`'s bounding box (time: ``[t0, T]``;
        a time window: its own) to [−1, 1] before the first layer (:func:`box_map`); ``none``: raw coordinates."""
        if self.options.get("input_scaling", "none") == "none":
            return None
        lo, hi = self.domain().bbox
        return box_map(lo, hi)

    @property
    def n_params(self) -> int:
        return self.network().n_params + len(self.unknowns) + sum(n.n_params for _, n, _ in self.field_networks())

    def init_params(self, seed: int = 0, device="cpu") -> torch.Tensor:
        th = self.network().init(seed, dtype=DTYPE, device=device)
        if self.options.get("first_layer_scale") is not None:
            th = self._scaled_first_layer(th, seed)
        c = torch.tensor([float(v) for v in self.unknowns.values()], dtype=DTYPE, device=device)
        fields = [net.init(int(seed) + 7919 * (i + 1), dtype=DTYPE, device=device)
                  for i, (_, net, _) in enumerate(self.field_networks())]
        return torch.cat([th, c, *fields])

    def _scaled_first_layer(self, th: torch.Tensor, seed: int) -> torch.Tensor:
        """θ₀ with the first layer's weight column of input axis i times ``first_layer_scale[i]`` and its biases
        drawn uniform in [−π, π] (their own generator, from the seed): random Fourier features ``sin(σ w·x + b)``
        with activation sin (Tancik et al. 2020; SIREN's ω₀, Sitzmann et al. 2020; per-axis scales as in Wang,
        Wang & Perdikaris 2021's spatio-temporal Fourier features) — an initialization only: θ's layout, every
        derivative path and a saved model are those of the plain network."""
        net, sc = self.network(), [float(v) for v in self.options["first_layer_scale"]]
        d = net.sizes[0]
        if len(sc) not in (1, d):
            raise ProblemError(f"first_layer_scale must give one number or one per input axis {list(self.axes)} "
                               f"({d}), got {len(sc)}")
        w, b, fan_in, fan_out = net._layout[0]
        th = th.clone()
        s = torch.tensor(sc * d if len(sc) == 1 else sc, dtype=th.dtype, device=th.device)
        th[w: w + fan_in * fan_out] = (th[w: w + fan_in * fan_out].reshape(fan_out, fan_in) * s).reshape(-1)
        if b is not None:
            gen = torch.Generator().manual_seed(int(seed) + 104729)
            th[b: b + fan_out] = ((2 * torch.rand(fan_out, generator=gen, dtype=torch.float64) - 1) * math.pi).to(th)
        return th

    def coefficients(self, theta: torch.Tensor) -> dict:
        p = self.network().n_params
        return {k: theta[p + i] for i, k in enumerate(self.unknowns)}

    def ansatz(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """The output at one point from the network's ``out [C]``; override for a hard constraint."""
        return out

    def _point_fn(self, theta) -> Callable:
        net, p, C = self.network(), self.network().n_params, len(self.outputs)
        th = theta[:p]
        return lambda x: self.ansatz(x, net(th, x).reshape(C))

    def field(self, theta) -> Field:
        if not self.unknown_fields:
            return Field(self._point_fn(theta), self.outputs, self.axes, self.geometry.dim, self.coefficients(theta))
        main, fields = self._point_fn(theta), self._field_point_fns(theta)

        def fn(x):
            return torch.cat([main(x), *(f(x) for f in fields)])

        cache: dict = {}
        coef = FieldCoefficients(self.coefficients(theta), fn, self.components, self.axes, self.geometry.dim, cache,
                                 len(self.outputs))  # each field a component of u, made on lookup (no cycle)
        return Field(fn, self.components, self.axes, self.geometry.dim, coef, cache=cache, n_main=len(self.outputs))

    def u(self, theta, x):
        """All outputs at a batch ``x [n, d]``: ``[n]`` for one output, ``[n, C]`` for a system."""
        f = self._point_fn(theta)
        out = vmap(f)(x) if x.ndim == 2 else f(x)
        return out.squeeze(-1) if len(self.outputs) == 1 else out

    def model_description(self, theta):
        d = super().model_description(theta)
        d.update(evaluation="pointwise", outputs=list(self.outputs), inputs=list(self.axes),
                 coefficients={k: float(v) for k, v in self.coefficients(theta).items()},
                 ansatz=type(self).ansatz is not DomainPDE.ansatz or type(self).u is not DomainPDE.u)
        if self.unknown_fields:
            d["fields"] = {name: {"architecture": arch_of(net), "inputs": [self.axes[i] for i in idx]}
                           for name, net, idx in self.field_networks()}
            hard = [k for k, spec in self.unknown_fields.items() if spec.get("ansatz") is not None]
            for k in hard:  # a field's ansatz is the problem's code: the model is evaluated by its problem
                d["fields"][k]["ansatz"] = True
            d["ansatz"] = d["ansatz"] or bool(hard)
        return d

    def equation(self, u: Field, x: torch.Tensor):
        raise NotImplementedError(f"{type(self).__name__} must define equation(self, u, x)")

    # --- exact solution -------------------------------------------------------------------
    @property
    def has_exact(self) -> bool:
        return type(self).exact is not DomainPDE.exact

    def exact(self, x):
        raise NotImplementedError

    def exact_or_none(self):
        """The exact solution for the conditions' values: ``exact`` (``[n]`` or ``[n, C]``), or with unknown fields
        a function giving ``[n, C + F]`` (outputs, then each field's ``exact_coefficients`` — a value taken from a
        field without one is refused, one line); ``None`` when there is nothing to take values from."""
        if not self.unknown_fields:
            return self.exact if self.has_exact else None
        return self._exact_components

    def exact_normal_derivative(self, x, n, comp: int) -> torch.Tensor:
        """``∇u*·n`` of the exact solution at boundary points (for a Neumann/Robin value taken from it)."""
        if not self.has_exact and not (self.unknown_fields and comp >= len(self.outputs)):
            raise ProblemError("a Neumann/Robin condition without a value needs the problem's exact solution")

        ex = self.exact if not self.unknown_fields else self._exact_components

        def one(y):
            v = ex(y[None])
            return v.reshape(-1)[comp] if v.ndim == 1 else v[0, comp]

        return (vmap(jacrev(one))(x) * n).sum(-1)

    # --- unknown coefficient fields (inverse problems: a(x) recovered with u) ---------------------
    @property
    def components(self) -> tuple:
        """The names a condition may name: the outputs, then the unknown fields."""
        return tuple(self.outputs) + tuple(self.unknown_fields)

    def _check_fields(self):
        from fedsciml.core.nn import ACTIVATIONS

        f = self.unknown_fields
        if not isinstance(f, dict):
            raise ProblemError(f"problem {self.name!r}: unknown_fields must be a dict of name: dict(hidden=..., "
                               f"activation=..., inputs=...), got {f!r:.80}")
        taken = set(self.outputs) | set(self.unknowns)
        for name, spec in f.items():
            where = f"problem {self.name!r}: unknown field {name!r}"
            if not isinstance(name, str) or not name or name in taken:
                raise ProblemError(f"{where}: a field needs a name of its own (not an output or a scalar unknown: "
                                   f"{sorted(taken)})")
            if not isinstance(spec, dict) or set(spec) - {"hidden", "activation", "inputs", "ansatz"}:
                raise ProblemError(f"{where}: give a dict with keys hidden, activation, inputs, ansatz; got "
                                   f"{spec!r:.80}")
            if spec.get("ansatz") is not None and not callable(spec["ansatz"]):
                raise ProblemError(f"{where}: ansatz must be a function (x, out) → the field's value at one point "
                                   f"(e.g. box_ansatz(lo, hi, value)), got {spec['ansatz']!r:.60}")
            hidden = spec.get("hidden", (20, 20))
            if (isinstance(hidden, (str, bytes)) or not hasattr(hidden, "__iter__")
                    or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hidden)):
                raise ProblemError(f"{where}: hidden must be widths ≥ 1 (e.g. (20, 20)), got {hidden!r}")
            if spec.get("activation", "tanh") not in ACTIVATIONS:
                raise ProblemError(f"{where}: activation {spec.get('activation')!r} is not one of {list(ACTIVATIONS)}")
            inputs = spec.get("inputs", self.axes)
            if isinstance(inputs, str) or not hasattr(inputs, "__iter__") or not list(inputs) \
                    or len(set(inputs)) != len(list(inputs)):
                raise ProblemError(f"{where}: inputs must be distinct axes among {list(self.axes)}, got {inputs!r}")
            for a in inputs:
                self.axis_index(a)

    def field_networks(self) -> list:
        """``[(name, MLP, input axis indices)]`` of the unknown fields, in θ's order: θ is the network's
        parameters, the scalar ``unknowns``, then each field's network (``[len(inputs), *hidden, 1]``).

        Decision: a field is a network of its own (PINNacle's PFNN), not a second output of ``u``'s network —
        it may take fewer inputs (HInv's a(x, y) of a space-time problem), it has its own size, and ``u``'s
        network, saved model and every problem without fields keep their exact bits."""
        if "_field_nets" not in self.__dict__:
            from fedsciml.core.nn import MLP

            out = []
            m = self.input_map()
            for name, spec in self.unknown_fields.items():
                idx = [self.axis_index(a) for a in spec.get("inputs", self.axes)]
                sub = None if m is None else ([m[0][i] for i in idx], [m[1][i] for i in idx])  # its axes' maps
                out.append((name, MLP([len(idx), *spec.get("hidden", (20, 20)), 1], spec.get("activation", "tanh"),
                                      input_map=sub), idx))
            self.__dict__["_field_nets"] = out
        return self.__dict__["_field_nets"]

    def _field_thetas(self, theta) -> list:
        p = self.network().n_params + len(self.unknowns)
        out = []
        for name, net, idx in self.field_networks():
            out.append((name, net, idx, theta[p: p + net.n_params]))
            p += net.n_params
        return out

    def _field_point_fns(self, theta) -> list:
        """Each unknown field at one point ``x [d]`` → ``[1]``: its network at its inputs ``y``, or with an
        ``ansatz`` (a hard constraint, e.g. :func:`box_ansatz`) ``ansatz(y, network(y))``."""
        fns = []
        for name, net, idx, th in self._field_thetas(theta):
            sel = torch.tensor(idx) if idx != list(range(len(self.axes))) else None
            hard = self.unknown_fields[name].get("ansatz")

            def one(x, net=net, th=th, sel=sel, hard=hard):
                y = x if sel is None else x[sel]
                out = net(th, y).reshape(1)
                return out if hard is None else torch.as_tensor(hard(y, out)).reshape(1)

            fns.append(one)
        return fns

    def coefficient_fields(self, theta) -> dict:
        """``{name: a}`` with ``a(x [n, d]) → [n]``: the unknown fields at θ on a batch of points."""
        out = {}
        for (name, *_), f in zip(self.field_networks(), self._field_point_fns(theta)):
            out[name] = (lambda f: (lambda x: vmap(f)(x).reshape(-1)))(f)
        return out

    def _exact_components(self, x):
        cols = []
        if self.has_exact:
            v = self.exact(x)
            cols.append(v.reshape(x.shape[0], -1))
        else:
            cols.append(torch.full((x.shape[0], len(self.outputs)), float("nan"), dtype=DTYPE))
        for name in self.unknown_fields:
            fn = self.exact_coefficients.get(name)
            if fn is None:
                raise ProblemError(f"a condition on the unknown field {name!r} has no value and the problem gives no "
                                   f"exact_coefficients[{name!r}] to take it from")
            cols.append(torch.as_tensor(fn(x), dtype=DTYPE).reshape(x.shape[0], 1))
        return torch.cat(cols, 1)  # NaN outputs without exact(): _values names the missing solution

    def _field_errors(self, theta) -> dict:
        """``rel_l2_NAME`` of each unknown field with an ``exact_coefficients`` function, on the test points; and
        when every field has one and the problem a reference, ``l2re_fields``: the error pooled over the outputs
        and the fields together (:func:`pooled_l2re` of ``[u…, a…]`` — PINNacle's L2RE of its inverse cases,
        whose reference holds u and a)."""
        known = [n for n in self.unknown_fields if n in self.exact_coefficients]
        if not known:
            return {}
        X = (self._test()[0] if self.has_reference else self.test_inputs()).to(theta.device)
        fields = self.coefficient_fields(theta)
        out, P, U = {}, [], []
        with torch.no_grad():
            for name in known:
                ref = torch.as_tensor(self.exact_coefficients[name](X), dtype=DTYPE).reshape(-1).to(theta.device)
                pred = fields[name](X)
                out[f"rel_l2_{name}"] = float((pred - ref).norm() / ref.norm())
                P.append(pred[:, None])
                U.append(ref[:, None])
            if self.has_reference and len(known) == len(self.unknown_fields):
                U0 = self._test()[1].to(theta.device)
                P0 = self.u(theta, X).reshape(U0.shape)
                out["l2re_fields"] = pooled_l2re(torch.cat([P0, *P], 1), torch.cat([U0, *U], 1),
                                                 [c for c, k in enumerate(self.outputs) if k in self.up_to_constant])
        return out

    # --- clients --------------------------------------------------------------------------
    def client_partition(self, n_clients: int) -> Partition:
        return make_partition(self.split, n_clients, self.domain())

    def _parts(self, theta0) -> list:
        """``[(name, fn, condition or None, output index)]`` — built once, so that every client's parts share
        their functions."""
        if "_part_fns" not in self.__dict__:
            dom = self.domain()
            x = dom.sample_interior(1, "uniform", 0)
            probe = self.field(theta0)
            try:
                m = _as_vector(vmap(lambda y: _as_vector(self.equation(probe, y)))(x)[0]).numel()
            except ProblemError:
                raise
            except Exception as e:  # the user's equation: name it (it was the raw error alone)
                raise ProblemError(f"problem {self.name!r}: equation(u, x) failed at the point {x[0].tolist()}: "
                                   f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
            out = [("pde" if m == 1 else f"pde{i}", _Residual(self, None, i), None, i) for i in range(m)]
            for c in self.condition_list():
                for i, o in enumerate(c.outputs):
                    nm = c.label() + (f":{o}" if len(c.outputs) > 1 else "")
                    out.append((nm, _Residual(self, c, i), c, i))
            names = [o[0] for o in out]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ProblemError(f"two conditions share the part name(s) {dup}; give them different parts or components")
            self.__dict__["_part_fns"] = out
            # the equation's derivatives above second order, read off the probe (what the memory estimate charges)
            self.__dict__["_nested_channels"] = probe.nested_channels()
        return self.__dict__["_part_fns"]

    def taylor_form(self, fn, cond: Condition | None, i: int, points):
        """The part's K-FAC channel form (:class:`fedsciml.core.kfac_taylor.Taylor`), or ``None`` where it has none
        (the reason is logged at debug level): found once per part function, at :data:`TAYLOR_SAMPLE` of its points
        and two parameter vectors (θ₀ and a random one, so that a coefficient that starts at 0 still shows): the
        jet's order and the second-order functionals the residual reads (:func:`~fedsciml.core.kfac_taylor.
        functional_basis`), then checked — the form's residual must equal the part's own there to round-off (a
        periodic condition, which reads u at two points, or a derivative of third order fails it)."""
        from fedsciml.core.kfac_taylor import Deferred

        cache = self.__dict__.setdefault("_taylor_forms", {})
        if id(fn) not in cache:
            pts = (tuple(t[:TAYLOR_SAMPLE].clone() for t in points) if isinstance(points, tuple)
                   else points[:TAYLOR_SAMPLE].clone())

            def find():
                try:
                    spec, why = self._find_taylor_form(fn, cond, i, pts)
                except (ProblemError, ValueError, RuntimeError, TypeError, IndexError) as e:  # any failure: no form
                    spec, why = None, f"{type(e).__name__}: {e}"
                if spec is None:
                    log.debug("%s: part function %r has no K-FAC channel form: %s", self.name, fn, why)
                return spec

            cache[id(fn)] = (fn, Deferred(find))  # fn kept alive with its id
        return cache[id(fn)][1]

    def _find_taylor_form(self, fn, cond, i, points):
        from fedsciml.core import kfac_taylor as kt
        from fedsciml.core.nn import _SECOND_DERIVATIVES

        net = self.network()
        cls = type(self)
        if cls._point_fn is not DomainPDE._point_fn or cls.field is not DomainPDE.field or "_point_fn" in self.__dict__:
            return None, "the problem overrides its field"
        pts = points
        n = int((pts[0] if isinstance(pts, tuple) else pts).shape[0])
        if n == 0:
            return None, "no points to detect it at"
        d, k = self.input_dim(), len(self.unknowns)
        dev = (pts[0] if isinstance(pts, tuple) else pts).device  # the points' device (a GPU run's: θ there too)
        th0 = self.init_params(0, device=dev)
        gen = torch.Generator().manual_seed(20261128)
        thetas = [th0, th0 + 0.3 * torch.randn(th0.shape, dtype=th0.dtype, generator=gen).to(dev)]
        order, G2 = 0, None  # without known activation derivatives only a value-only part has a form
        if net.activation in _SECOND_DERIVATIVES:
            full = kt.pair_functionals(d)
            spec = kt.Taylor(net, _TaylorHead(self, cond, i, 2, kt.reconstruction(full)), 2, full, k)
            dG, dS = zip(*[kt.head_sensitivity(spec, th, pts) for th in thetas])
            G2 = torch.cat([s.reshape(-1, full.shape[0]) for s in dS])
            order = 2 if bool((G2 != 0).any()) else (1 if any(bool((g != 0).any()) for g in dG) else 0)
        F = kt.functional_basis(G2, d) if order == 2 and G2 is not None else None
        spec = kt.Taylor(net, _TaylorHead(self, cond, i, order, None if F is None else kt.reconstruction(F)),
                         order, F, k)
        for th in thetas:
            mine = kt.taylor_residual(spec, th, pts).reshape(n, -1)
            ref = vmap(fn, in_dims=(None, 0))(th, pts).reshape(n, -1)
            scale = float(ref.abs().max()) + 1.0
            if not bool(torch.isfinite(mine).all()) or float((mine - ref).abs().max()) > 1e-8 * scale:
                return None, (f"its residual is not a function of u's {order}-jet at its point (differs by "
                              f"{float((mine - ref).abs().max()):.2g})")
        return spec, ""

    def nested_graph_floats(self, precond: str = "auto") -> float | None:
        """Floats a PDE row keeps in the matrix-free operator (for the driver's memory estimate): the nested-autodiff
        figure of :func:`fedsciml.runtime.memory.nested_graph`, with the K-FAC pass where ``precond`` may take it;
        ``None`` where the residual is the one-pass forward Laplacian (e.g. heat-nd's), which the default fit
        covers."""
        from fedsciml.runtime.memory import nested_graph

        sizes = list(getattr(self.network(), "sizes", []))
        if len(sizes) < 3:
            return None
        self._parts(self.init_params(0))
        higher = int(self.__dict__.get("_nested_channels", 0))
        # an unknown field's network has no K-FAC form, nor has a derivative above second order: ``auto`` takes
        # Nyström there and holds no K-FAC pass
        kfac = precond == "kfac" or (precond == "auto" and not self.unknown_fields and not higher)
        return nested_graph(int(sizes[0]), sizes[1:-1], kfac=kfac, higher=higher)

    def pde_rows_per_client(self, n_clients: int) -> int:
        K = int(n_clients)
        return -(-int(self.point_counts(K)["n_interior"]) // K) * max(1, len(self.outputs))

    def rows_per_client(self, n_clients: int) -> int:
        """About a client's rows: its ``1/K`` share of every count (equal cells; a total divided by ``K``)."""
        K = int(n_clients)
        pc = self.point_counts(K)
        rows = self.pde_rows_per_client(K)
        for c in self.condition_list():
            rows += -(-(c.n or pc["n_boundary"]) // K) * len(c.outputs) if not isinstance(c, Data) else c.n_trained()
        return rows

    # --- point counts that follow the network --------------------------------------------------
    def _row_terms(self, n_clients: int) -> tuple[int, int, int]:
        """``(A, B, F)``: the residual rows of all clients together are ``A·n_interior + B·n_boundary + F`` —
        A PDE parts, B parts of conditions without their own ``n``, F the rest (``n`` per part of a
        condition with its own ``n``, the readings of a :class:`Data` condition); one row per point and part
        (:meth:`_parts`)."""
        a = b = fixed = 0
        for _name, _fn, c, _i in self._parts(self.init_params(0)):
            if c is None:
                a += 1
            elif isinstance(c, Data):
                fixed += c.n_trained()
            elif c.n is not None:
                fixed += int(c.n)
            else:
                b += 1
        return a, b, fixed

    def point_counts(self, n_clients: int) -> dict:
        """The collocation points a run with ``n_clients`` clients draws, and why (recorded in ``result.json``,
        ``extra["points"]``).

        The rule: **never fewer residual rows than parameters unless asked.**  All clients' rows are
        ``R(n_I, n_B) = A·n_I + B·n_B + F`` (counts are totals: the same whatever ``K``) (:meth:`_row_terms`) against ``p`` parameters (network and
        unknowns).  When the options ``n_interior`` and ``n_boundary`` are the defaults and ``R < p``, both are
        scaled by one factor ``s`` — so the boundary keeps its share of the rows — to the smallest counts with
        ``R ≥`` :data:`OVERSAMPLE` ``· p``: ``n_I = ⌈s·n_I⁰⌉``, ``n_B = ⌈s·n_B⁰⌉``, ``s = (⌈2p⌉ − F)/(R⁰ − F)``.
        Twice, not once: a square system (R = p) is still interpolated by Levenberg–Marquardt, leaving the PDE
        unsolved between the points; at 2p half the rows constrain the fit.  The counts thus follow the network
        (p) and the dimension (through p's input layer and the problem's own dimension-aware defaults, e.g.
        ``heat-nd``).  Defaults that already give ``R ≥ p`` are kept as they are (the registered ``heat``,
        ``heat-inverse``, ``kovasznay``, ``burgers``, ``heat-nd`` at their default clients: the same points,
        the same numbers).  Counts given explicitly (``n_interior`` or ``n_boundary``, a preset's included) win;
        with ``R < p`` one warning line says that LM can interpolate the points.

        Returns ``{"n_interior", "n_boundary", "rows", "n_params", "rule"}``, ``rule`` one of ``defaults``
        (kept), ``scaled ×s (rows ≥ 2p)`` or ``given``."""
        K = int(n_clients)
        n_i, n_b = int(self.options["n_interior"]), int(self.options["n_boundary"])
        key = (K, n_i, n_b)
        cache = self.__dict__.setdefault("_point_counts", {})
        if key in cache:
            return dict(cache[key])
        a, b, fixed = self._row_terms(K)
        p = int(self.n_params)
        rows = a * n_i + b * n_b + fixed
        given = self.__dict__.get("_given_points", frozenset())
        out = {"n_interior": n_i, "n_boundary": n_b, "rows": rows, "n_params": p,
               "rule": "given" if given else "defaults"}
        if rows < p and given:
            log.warning("problem %r: %s residual rows (%s client(s)) are fewer than its %s parameters: Levenberg–Marquardt "
                        "can interpolate the points rather than solve the PDE between them — the validation residual "
                        "will tell (leave %s out for counts that follow the network: %g× the parameters)", self.name, f"{rows:,}", K, f"{p:,}",
                        " and ".join(sorted(given)), OVERSAMPLE)
        elif rows < p and a * n_i + b * n_b > 0:
            need, now = math.ceil(OVERSAMPLE * p) - fixed, a * n_i + b * n_b
            s = need / now
            n_i, n_b = -(-need * n_i // now), -(-need * n_b // now)  # ⌈s·n⌉ in integers: no round-off above
            out.update(n_interior=n_i, n_boundary=n_b, rows=a * n_i + b * n_b + fixed,
                       rule=f"scaled ×{s:.3g} (rows ≥ {OVERSAMPLE:g}p)")
        cache[key] = out
        return dict(out)

    def _with_points(self, n_clients: int) -> "DomainPDE":
        """This problem with :meth:`point_counts`'s counts as its options (a shallow copy; itself when unchanged)."""
        pc = self.point_counts(n_clients)
        if (pc["n_interior"], pc["n_boundary"]) == (self.options["n_interior"], self.options["n_boundary"]):
            return self
        out = copy.copy(self)
        out.__dict__["options"] = dict(self.options, n_interior=pc["n_interior"], n_boundary=pc["n_boundary"])
        out.__dict__["_point_counts"] = {}
        return out

    def client_objectives(self, n_clients: int, seed: int = 0, device="cpu"):
        """Each client's objective: the points of :meth:`point_counts` (the module docstring says how they are
        drawn and split)."""
        self.check_clients(n_clients)
        own = self._with_points(n_clients)
        if own is not self:
            return own._client_objectives(n_clients, seed, device)
        return self._client_objectives(n_clients, seed, device)

    def validation_objectives(self, n_clients: int, seed: int, device="cpu"):
        """The clients' objectives of a run's held-out validation residual (:mod:`fedsciml.runtime.validation`,
        which passes its own seed): :meth:`client_objectives`'s points drawn from ``seed``, and for a :class:`Data`
        condition with a ``holdout`` its held-out readings in place of the trained ones.  Never the reference
        solution or the exact one: a validation residual that read them would choose θ by the test error."""
        self.check_clients(n_clients)
        return self._with_points(n_clients)._client_objectives(n_clients, seed, device, held_out=True)

    @property
    def noisy_data(self) -> bool:
        """Whether the problem trains on readings that carry noise (a :class:`Data` condition with ``noise``):
        such a problem returns by default the θ of its best validation residual (the run option ``keep_best``)."""
        return any(isinstance(c, Data) and c.noise is not None for c in self.condition_list())

    def _client_objectives(self, n_clients: int, seed: int = 0, device="cpu", held_out: bool = False):
        dom, K = self.domain(), n_clients
        part = self.client_partition(K)
        theta0 = self.init_params(0)
        parts = self._parts(theta0)
        per_client: list[list] = [[] for _ in range(K)]
        # interior: one sample of the whole domain (a one-client run's draw, whatever K), split by ownership
        try:
            whole = self.client_partition(1)
        except ProblemError:  # a split of fixed cells (grid:AxB) has no one-client run: the domain's own draw
            x_all = dom.sample_interior(self.n_interior, self.sampling, [seed, 0, 0])
        else:
            x_all = dom.sample_interior(self.n_interior, self.sampling, [seed, 0, 0],
                                        where=lambda y: whole.owner(y) == 0, box=whole.cell_box(0, dom))
        owner_i = part.owner(x_all)
        for k in range(K):
            xi = x_all[(owner_i == k).nonzero().squeeze(1)]
            if xi.shape[0] == 0:
                raise self._empty_cell(k, K, part, dom, int(self.n_interior))
            for name, fn, c, i in parts:
                if c is None:
                    per_client[k].append(ResidualPart(name, fn, xi.to(device), 1.0, self.taylor_form(fn, None, i, xi)))
        # conditions: one sample of each part, split by ownership
        for j, c in enumerate(self.condition_list()):
            n = c.n or self.n_boundary
            x_own, pts = c.points(self, dom, n, self.sampling, [seed, 1000 + j, 1])
            if isinstance(c, Data) and c.holdout > 0:  # the trained readings, or (validation) the held-out ones
                sel = c.split(int(x_own.shape[0]))[1 if held_out else 0]
                x_own, pts = x_own[sel], tuple(t[sel] for t in pts)
            owner = part.owner(x_own)
            w = float(c.weight if c.weight is not None else self.boundary_weight)
            forms = {id(fn): self.taylor_form(fn, c, i, pts) for _n, fn, cc, i in parts if cc is c}
            for k in range(K):
                sel = (owner == k).nonzero().squeeze(1)
                pk = tuple(t[sel].to(device) for t in pts)
                for name, fn, cc, _i in parts:
                    if cc is c:
                        per_client[k].append(ResidualPart(name, fn, pk, w, forms[id(fn)]))
        return [self._objective(ps) for ps in per_client]

    def _empty_cell(self, k: int, K: int, part: Partition, dom: Geometry, tried: int) -> ProblemError:
        """The error for a client whose cell of the split holds none of the ``tried`` interior points drawn from the
        whole domain (an empty cell, or a sliver that more points may reach)."""
        box = part.cell_box(k, dom)
        where = "" if box is None else " (" + ", ".join(
            f"{axis_name(i)} in [{float(lo):g}, {float(hi):g}]" for i, (lo, hi) in enumerate(zip(*box))
            if (lo, hi) != (dom.bbox[0][i], dom.bbox[1][i])) + ")"
        split = self.split if isinstance(self.split, str) else type(part).__name__
        holds = f"holds no interior point of {dom!r} (none of the {tried:,} drawn from the whole domain fell in it)"
        return ProblemError(f"client {k} of {K}: its cell{where} of the split {split!r} {holds}; give a split whose "
                            f"every cell meets the domain, fewer clients, or more points (n_interior)")

    def _objective(self, parts):
        from fedsciml.core.objective import PointwiseLeastSquares

        return PointwiseLeastSquares(parts, self.n_params)

    # --- test set and metrics --------------------------------------------------------------
    def test_inputs(self) -> torch.Tensor:
        """A grid over the bounding box kept inside the domain: 1001 points in 1-D, 101² in 2-D, 31³ in 3-D,
        a fixed random set beyond."""
        dom = self.domain()
        lo, hi = dom.bbox
        d = dom.dim
        if d <= 3:
            n = {1: 1001, 2: 101, 3: 31}[d]
            axes = [torch.linspace(float(lo[i]), float(hi[i]), n, dtype=DTYPE) for i in range(d)]
            X = torch.stack([m.reshape(-1) for m in torch.meshgrid(*axes, indexing="ij")], 1)
        else:
            X = torch.as_tensor(lo + (hi - lo) * np.random.default_rng(12345).random((20000, d)), dtype=DTYPE)
        return X[dom.contains(X)]

    def reference(self):
        """``(X, U [n, C])``: the test points and the solution there (the exact solution by default).  Override it
        to measure against a reference from a file: return a :class:`~fedsciml.problems.reference.ReferenceData`
        (``fs.ReferenceData.from_file(path, inputs=…, layout=…)``) or the pair ``(X, U)``."""
        X = self.test_inputs()
        U = self.exact(X)
        return X, U.reshape(X.shape[0], -1)

    def _test(self):
        """The test set, checked once: ``X [n, input_dim]`` and ``U [n, len(outputs)]`` of real numbers (a hook that
        returned other shapes, or an ``exact`` of the wrong width, failed in the first evaluation with torch's
        message, or was evaluated silently on the wrong inputs)."""
        if "_test_cache" not in self.__dict__:
            try:
                ref = self.reference()
            except ProblemError:
                raise
            except Exception as e:  # the user's hook: name it (it was the raw error alone)
                raise ProblemError(f"problem {self.name!r}: its test set (reference(), test_inputs() or exact()) "
                                   f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
            self.__dict__["_test_cache"] = self._checked_reference(ref)
        return self.__dict__["_test_cache"]

    def _checked_reference(self, ref) -> tuple:
        """``reference()``'s answer as ``(X [n, d], U [n, C])`` float64 tensors, its shapes checked against the
        problem's inputs and outputs (one line naming the mismatch)."""
        from .reference import ReferenceData

        if not isinstance(ref, ReferenceData):
            try:
                X, U = ref
            except (TypeError, ValueError):
                raise ProblemError(f"problem {self.name!r}: reference() must return a ReferenceData or a pair (X, U), "
                                   f"got {type(ref).__name__}") from None
            if torch.is_tensor(X) and torch.is_tensor(U) and X.ndim >= 1 and U.numel() % max(1, X.shape[0]):
                raise ProblemError(f"problem {self.name!r}: reference() gave {X.shape[0]} points and "
                                   f"{U.numel()} values, not a whole number of values per point")
            ref = ReferenceData(X, U.reshape(X.shape[0], -1) if torch.is_tensor(U) else U)
        src = f" (from {ref.source!r})" if ref.source else ""
        if ref.X.shape[1] != self.input_dim():
            raise ProblemError(f"problem {self.name!r}: its reference{src} has points with {ref.X.shape[1]} "
                               f"coordinates; its inputs are {list(self.axes)}")
        if ref.U.shape[1] != len(self.outputs):
            raise ProblemError(f"problem {self.name!r}: its reference{src} has {ref.U.shape[1]} value column(s); "
                               f"its outputs are {list(self.outputs)}")
        return ref.X, ref.U

    @property
    def has_reference(self) -> bool:
        return self.has_exact or type(self).reference is not DomainPDE.reference

    def evaluate(self, theta: torch.Tensor) -> dict:
        """``rel_l2``: the largest of the components' relative L2 errors on the test set (each component
        ``rel_l2_NAME`` too for a system; those in ``up_to_constant`` with the means removed); ``l2re``: the
        error pooled over all components (:func:`pooled_l2re`, PINNacle's L2RE); the unknown coefficients'
        values (``coef_NAME``) and, where known, their relative errors."""
        out = {}
        if self.has_reference:
            X, U = self._test()
            X, U = X.to(theta.device), U.to(theta.device)
            P = self.u_batched(theta, X).reshape(U.shape)
            rels = {}
            for c, name in enumerate(self.outputs):
                e, ref = P[:, c] - U[:, c], U[:, c]
                if name in self.up_to_constant:
                    e, ref = e - e.mean(), ref - ref.mean()
                rels[name] = float(e.norm() / ref.norm())
            out["rel_l2"] = max(rels.values())
            out["l2re"] = pooled_l2re(P, U, [c for c, k in enumerate(self.outputs) if k in self.up_to_constant])
            if len(self.outputs) > 1:
                out.update({f"rel_l2_{k}": v for k, v in rels.items()})
        out.update(self._field_errors(theta))
        for k, v in self.coefficients(theta).items():
            out[f"coef_{k}"] = float(v)
            if k in self.exact_coefficients:
                out[f"coef_{k}_rel_err"] = abs(float(v) - self.exact_coefficients[k]) / abs(self.exact_coefficients[k])
        return out

    def final_metrics(self, theta: torch.Tensor, objectives) -> dict:
        """Each unknown coefficient's Gauss–Newton (Laplace) standard deviation ``coef_NAME_std``.

        The loss ``½‖r‖²`` is read as a negative log posterior at temperature ``τ = w_d σ²``: the data
        rows ``√w_d (u(x_i) − y_i)`` then have the likelihood of readings with noise σ (given by the
        :class:`Data` condition's ``noise``, else estimated as the RMS of the final data residuals), and
        the physics rows count with the confidence their weights give them relative to the data.  The
        covariance is ``τ (JᵀJ)⁺`` with ``JᵀJ = Σ_k J_kᵀJ_k`` — the sum gn's clients send — at the final θ;
        a coefficient's variance is its diagonal entry (the pseudo-inverse drops directions of relative
        eigenvalue below 1e-12).  Only scalar unknowns, and only with one Data condition.

        Computed from each client's :meth:`final_stats` by :meth:`final_metrics_from` — what a Flower
        server asks its nodes for, so both give the same numbers."""
        return self.final_metrics_from(theta, [self.final_stats(theta, obj) for obj in objectives])

    @property
    def final_stats_needed(self) -> bool:
        """Whether :meth:`final_metrics` reports anything (unknown coefficients and one Data condition): a
        Flower server asks its nodes for :meth:`final_stats` only then."""
        return self._laplace_data() is not None

    def _laplace_data(self):
        if not self.unknowns:
            return None
        data = [c for c in self.condition_list() if isinstance(c, Data)]
        return data[0] if len(data) == 1 else None

    def final_stats(self, theta: torch.Tensor, objective) -> dict:
        """One client's share of :meth:`final_metrics`, computed where its data are: ``{"H": J_kᵀJ_k``
        (packed upper triangle), ``"data_ss": Σ r_i²/w_d`` over its data rows, ``"data_n"``: their count} —
        no residual leaves the client; ``{}`` when there is nothing to report."""
        from fedsciml.core.linalg import pack_upper

        d = self._laplace_data()
        if d is None:
            return {}
        w = float(d.weight if d.weight is not None else self.boundary_weight)
        st = objective.gn_stats(theta)
        rd = [r / w ** 0.5 for p, r in zip(objective.parts, objective.part_residuals(theta))
              if isinstance(p.fn, _Residual) and p.fn.cond is d]
        r = torch.cat(rd) if rd else theta.new_zeros(0)
        return {"H": pack_upper(st.H), "data_ss": (r @ r).reshape(1), "data_n": theta.new_tensor([r.numel()])}

    def final_metrics_from(self, theta: torch.Tensor, stats: list) -> dict:
        """:meth:`final_metrics` from the clients' :meth:`final_stats` (in client order)."""
        from fedsciml.core.linalg import unpack_upper

        d = self._laplace_data()
        stats = [s for s in stats if s]
        if d is None or not stats:
            return {}
        w = float(d.weight if d.weight is not None else self.boundary_weight)
        P = theta.numel()
        H = unpack_upper(stats[0]["H"], P)
        for s in stats[1:]:
            H = H + unpack_upper(s["H"], P)
        ss = sum(float(s["data_ss"][0]) for s in stats)
        n = sum(int(s["data_n"][0]) for s in stats)
        sigma = float(d.noise) if d.noise is not None else ((ss / n) ** 0.5 if n else float("nan"))
        tau = w * sigma ** 2
        cov = tau * torch.linalg.pinv(H, hermitian=True, rtol=1e-12)
        p = self.network().n_params
        out = {"noise_sigma": sigma}
        for i, k in enumerate(self.unknowns):
            out[f"coef_{k}_std"] = float(cov[p + i, p + i].clamp_min(0.0) ** 0.5)
        return out
