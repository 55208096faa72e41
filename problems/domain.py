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
* ``hidden``, ``activation`` — the default network ``[d_in, *hidden, len(outputs)]`` (the options ``hidden`` and
  ``activation`` of every problem change it: ``solve NAME --hidden 64,64 --activation sin``);
* ``up_to_constant`` — components compared up to an additive constant (a pressure);
* ``exact_coefficients`` — the true values of ``unknowns`` (for the report).

Hooks: ``equation(u, x)`` (one residual, or a tuple of one per equation), ``exact(x)`` (batch ``[n, d]`` →
``[n]`` or ``[n, C]``; optional), ``ansatz(x, out)`` (a hard constraint; identity by default),
``test_inputs()`` and ``reference()`` (a test set with reference values where no closed form exists).

Clients: the option ``split`` (``strips``, ``strips:AXIS``, ``grid``, ``grid:AxB``) or an overridden
:meth:`client_partition`.  Each client samples ``n_interior`` points of its own subdomain; each
condition samples ``n × clients`` points of its part and each point goes to the client that owns it
(decision: one sample of each part split by ownership keeps its density uniform whatever the cells'
shares of the boundary; the interior sample is per client, as the FIPA strips).
"""
from __future__ import annotations

import math

from collections.abc import Callable
from typing import ClassVar

import numpy as np
import torch
from torch.func import jacrev, vmap

from fedsciml.options import option

from .base import DTYPE, ProblemError, ResidualPart
from .conditions import Condition, Data, Field, Initial, Periodic, component_index
from .geometry import SAMPLINGS, Geometry, Partition, SpaceTime, axis_name, make_partition
from .pinn import PINNProblem


def _domain_params():
    return {
        "n_interior": option(400, "interior collocation points per client", int, lo=1),
        "n_boundary": option(50, "points per client of each boundary/initial condition without its own n", int, lo=1),
        "boundary_weight": option(10.0, "weight of each condition without its own weight", float, lo=0, lo_open=True),
        "sampling": option("lhs", "collocation sampling: " + ", ".join(SAMPLINGS), str, choices=SAMPLINGS),
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


def _as_vector(out) -> torch.Tensor:
    if isinstance(out, (tuple, list)) and out and all(torch.is_tensor(o) for o in out):
        return torch.stack([torch.as_tensor(o).reshape(()) for o in out])
    if not torch.is_tensor(out):
        raise ProblemError(f"equation(u, x) must return a tensor computed from u (or a tuple of them, one per "
                           f"equation), got {type(out).__name__} {out!r:.60}")
    return out.reshape(-1)


class DomainPDE(PINNProblem):
    """A PDE on a :class:`Geometry` with conditions on named boundary parts (see the module docstring)."""

    kind: ClassVar[str] = "pinn"
    geometry: ClassVar[Geometry | None] = None
    T: ClassVar[float | None] = None
    t0: ClassVar[float] = 0.0
    outputs: ClassVar[tuple] = ("u",)
    conditions: ClassVar[list] = []
    unknowns: ClassVar[dict] = {}
    exact_coefficients: ClassVar[dict] = {}
    up_to_constant: ClassVar[tuple] = ()
    hidden: ClassVar[tuple] = (32, 32, 32)
    activation: ClassVar[str] = "tanh"

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.params = {**_domain_params(), **cls.__dict__.get("params", {})}
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
        for k in self.exact_coefficients:
            if k not in self.unknowns:
                raise ProblemError(f"exact_coefficients names {k!r}, which is not among the unknowns {list(self.unknowns)}")

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
        return component_index(cond.component, self.outputs)

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

    @property
    def n_params(self) -> int:
        return self.network().n_params + len(self.unknowns)

    def init_params(self, seed: int = 0, device="cpu") -> torch.Tensor:
        th = self.network().init(seed, dtype=DTYPE, device=device)
        c = torch.tensor([float(v) for v in self.unknowns.values()], dtype=DTYPE, device=device)
        return torch.cat([th, c])

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
        return Field(self._point_fn(theta), self.outputs, self.axes, self.geometry.dim, self.coefficients(theta))

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
        return self.exact if self.has_exact else None

    def exact_normal_derivative(self, x, n, comp: int) -> torch.Tensor:
        """``∇u*·n`` of the exact solution at boundary points (for a Neumann/Robin value taken from it)."""
        if not self.has_exact:
            raise ProblemError("a Neumann/Robin condition without a value needs the problem's exact solution")

        def one(y):
            v = self.exact(y[None])
            return v.reshape(-1)[comp] if v.ndim == 1 else v[0, comp]

        return (vmap(jacrev(one))(x) * n).sum(-1)

    # --- clients --------------------------------------------------------------------------
    def client_partition(self, n_clients: int) -> Partition:
        return make_partition(self.split, n_clients, self.domain())

    def _parts(self, theta0) -> list:
        """``[(name, fn, condition or None, output index)]`` — built once, so that every client's parts share
        their functions."""
        if "_part_fns" not in self.__dict__:
            dom = self.domain()
            x = dom.sample_interior(1, "uniform", 0)
            try:
                m = _as_vector(vmap(lambda y: _as_vector(self.equation(self.field(theta0), y)))(x)[0]).numel()
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
        return self.__dict__["_part_fns"]

    def pde_rows_per_client(self, n_clients: int) -> int:
        return int(self.n_interior) * max(1, len(self.outputs))

    def rows_per_client(self, n_clients: int) -> int:
        per_eq = self.n_interior
        rows = per_eq * max(1, len(self.outputs))
        for c in self.condition_list():
            rows += (c.n or self.n_boundary) * len(c.outputs) if not isinstance(c, Data) else len(c.y) * 1
        return rows

    def client_objectives(self, n_clients: int, seed: int = 0, device="cpu"):
        self.check_clients(n_clients)
        dom, K = self.domain(), n_clients
        part = self.client_partition(K)
        theta0 = self.init_params(0)
        parts = self._parts(theta0)
        per_client: list[list] = [[] for _ in range(K)]
        # interior: each client samples its own cell of the domain
        for k in range(K):
            try:
                xi = dom.sample_interior(self.n_interior, self.sampling, [seed, k, 0],
                                         where=lambda y, k=k: part.owner(y) == k, box=part.cell_box(k, dom))
            except ProblemError as e:
                dom.sample_interior(1, self.sampling, [seed, k, 0])  # an empty domain: its own error, named
                raise self._empty_cell(k, K, part, dom, getattr(e, "found", 0), getattr(e, "tried", 0)) from None
            for name, fn, c, _i in parts:
                if c is None:
                    per_client[k].append(ResidualPart(name, fn, xi.to(device), 1.0))
        # conditions: one sample of each part, split by ownership
        for j, c in enumerate(self.condition_list()):
            n = (c.n or self.n_boundary) * K
            x_own, pts = c.points(self, dom, n, self.sampling, [seed, 1000 + j, 1])
            owner = part.owner(x_own)
            w = float(c.weight if c.weight is not None else self.boundary_weight)
            for k in range(K):
                sel = (owner == k).nonzero().squeeze(1)
                pk = tuple(t[sel].to(device) for t in pts)
                for name, fn, cc, _i in parts:
                    if cc is c:
                        per_client[k].append(ResidualPart(name, fn, pk, w))
        return [self._objective(ps) for ps in per_client]

    def _empty_cell(self, k: int, K: int, part: Partition, dom: Geometry, found: int = 0,
                    tried: int = 0) -> ProblemError:
        """The error for a client whose cell of the split holds no interior point (the domain has some), or too
        little of the domain for the sampler to find ``n_interior`` points in it (``found`` of ``tried``
        candidates fell in it: a sliver, not an empty cell)."""
        box = part.cell_box(k, dom)
        where = "" if box is None else " (" + ", ".join(
            f"{axis_name(i)} in [{float(lo):g}, {float(hi):g}]" for i, (lo, hi) in enumerate(zip(*box))
            if (lo, hi) != (dom.bbox[0][i], dom.bbox[1][i])) + ")"
        split = self.split if isinstance(self.split, str) else type(part).__name__
        if found:
            holds = (f"holds too little of {dom!r} to sample {self.n_interior} interior points (only {found} of "
                     f"{tried:,} candidates fell in it)")
        else:
            holds = f"holds no interior point of {dom!r}" + (f" (none of {tried:,} candidates fell in it)" if tried
                                                              else "")
        return ProblemError(f"client {k} of {K}: its cell{where} of the split {split!r} {holds}; give a split whose "
                            f"every cell meets the domain, or fewer clients")

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
        """``(X, U [n, C])``: the test points and the solution there (the exact solution by default)."""
        X = self.test_inputs()
        U = self.exact(X)
        return X, U.reshape(X.shape[0], -1)

    def _test(self):
        """The test set, checked once: ``X [n, input_dim]`` and ``U [n, len(outputs)]`` of real numbers (a hook that
        returned other shapes, or an ``exact`` of the wrong width, failed in the first evaluation with torch's
        message, or was evaluated silently on the wrong inputs)."""
        if "_test_cache" not in self.__dict__:
            try:
                X, U = self.reference()
            except ProblemError:
                raise
            except Exception as e:
                raise ProblemError(f"problem {self.name!r}: its test set (reference(), test_inputs() or exact()) "
                                   f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
            X, U = torch.as_tensor(X), torch.as_tensor(U)
            d, C = self.input_dim(), len(self.outputs)
            if X.ndim != 2 or X.shape[1] != d:
                raise ProblemError(f"problem {self.name!r}: its test inputs must be [n, {d}] (the inputs "
                                   f"{list(self.axes)}), got {tuple(X.shape)}")
            if U.numel() != X.shape[0] * C:
                raise ProblemError(f"problem {self.name!r}: its reference values must be [{X.shape[0]}, {C}] (one per "
                                   f"test point and output {list(self.outputs)}), got {tuple(U.shape)}")
            if X.is_complex() or U.is_complex():
                raise ProblemError(f"problem {self.name!r}: its test set must be real numbers")
            self.__dict__["_test_cache"] = (X.to(DTYPE), U.reshape(X.shape[0], C).to(DTYPE))
        return self.__dict__["_test_cache"]

    @property
    def has_reference(self) -> bool:
        return self.has_exact or type(self).reference is not DomainPDE.reference

    def evaluate(self, theta: torch.Tensor) -> dict:
        """``rel_l2``: the largest of the components' relative L2 errors on the test set (each component
        ``rel_l2_NAME`` too for a system; those in ``up_to_constant`` with the means removed); the
        unknown coefficients' values (``coef_NAME``) and, where known, their relative errors."""
        out = {}
        if self.has_reference:
            X, U = self._test()
            X, U = X.to(theta.device), U.to(theta.device)
            with torch.no_grad():
                P = self.u(theta, X).reshape(U.shape)
            rels = {}
            for c, name in enumerate(self.outputs):
                e, ref = P[:, c] - U[:, c], U[:, c]
                if name in self.up_to_constant:
                    e, ref = e - e.mean(), ref - ref.mean()
                rels[name] = float(e.norm() / ref.norm())
            out["rel_l2"] = max(rels.values())
            if len(self.outputs) > 1:
                out.update({f"rel_l2_{k}": v for k, v in rels.items()})
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
