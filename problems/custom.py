"""Bring your own problem: a PDE on a box, or already-split client data.

A user-defined PDE states its equation pointwise in terms of the network
``u`` and its derivatives in x; Jacobians, curvature, every federated method
and the plots come from the toolkit::

    import math, torch
    import fedsciml as fs

    class Helmholtz(fs.PDE):
        name = "helmholtz"
        dim = 1
        params = {"k": fs.option(3.0, "wave number", float)}

        def exact(self, x):                      # optional; gives rel_l2 and boundary values
            return torch.sin(math.pi * x[..., 0])

        def equation(self, u, x):                # residual at one interior point x [d]
            f = (math.pi ** 2 - self.k ** 2) * torch.sin(math.pi * x[..., 0])
            return -u.laplacian(x) - self.k ** 2 * u(x) - f

    result = fs.solve(Helmholtz(), method="gn", clients=3, rounds=30)

``u`` is a :class:`FieldAt`: ``u(x)``, ``u.grad(x)``, ``u.hessian(x)``,
``u.laplacian(x)``, ``u.derivative(x, i)`` — all pointwise, built from nested
``torch.func`` transforms so that the residual's Jacobian in θ is exact.
"""
from __future__ import annotations

from typing import ClassVar, Sequence

import numpy as np
import torch
from torch.func import jacfwd, jacrev

from fedsciml.options import option

from .base import (SAMPLING, TOTAL_POINTS, FieldProblem, ProblemError, ResidualPart, box_boundary_points, grid,
                   sample_box)
from .pinn import PINNProblem


class FieldAt:
    """The network ``u_θ`` with θ fixed, evaluated and differentiated at one point ``x [d]``.

    Why two field objects: this is what :class:`PDE`'s ``residual`` receives — one scalar network on a
    box, derivatives by axis index, nothing else to know.  :class:`~fedsciml.problems.domain.DomainPDE`'s
    ``equation`` receives :class:`~fedsciml.problems.conditions.Field`, which also carries named axes
    (``u.diff(x, "t")``), several named outputs (``u["v"]``), the unknown coefficients of an inverse problem
    and normal derivatives on a geometry's boundary (``u.dn``) — all meaningless for ``fs.PDE``.  A
    ``fs.PDE`` can be restated as a ``DomainPDE`` on a ``Box`` when it needs any of those."""

    def __init__(self, net, theta):
        self._net, self._theta = net, theta

    def __call__(self, x):
        return self._net(self._theta, x)

    def _scalar(self, x):
        return self._net(self._theta, x)

    def grad(self, x):
        """∇ₓu, shape [d]."""
        return jacrev(self._scalar)(x)

    def hessian(self, x):
        """∇ₓ²u, shape [d, d]."""
        return jacfwd(jacrev(self._scalar))(x)

    def laplacian(self, x):
        """Δu: the network's forward Laplacian (:meth:`fedsciml.core.nn.MLP.value_and_laplacian`,
        nested forward mode for activations without a closed form)."""
        return self._net.value_and_laplacian(self._theta, x)[1]

    def derivative(self, x, i: int, order: int = 1):
        """∂ᵒʳᵈᵉʳu/∂xᵢᵒʳᵈᵉʳ at x."""
        if order < 1:
            raise ValueError(f"derivative order must be ≥ 1, got {order}")
        f = self._scalar
        for _ in range(order):
            f = (lambda g: (lambda y: jacfwd(g)(y)[i]))(f)
        return f(x)


def _pde_params():
    return {
        "n_interior": option(400, f"interior collocation points {TOTAL_POINTS}", int, lo=1),
        "n_boundary": option(50, "boundary points per face of the box in total, each going to the client whose "
                                 "strip holds it (d ≥ 2)", int, lo=1),
        "boundary_weight": option(10.0, "boundary penalty β", float, lo=0, lo_open=True),
        "sampling": SAMPLING,
    }


class PDE(PINNProblem):
    """A user PDE on the box ``[lower, upper]^dim``; clients own equal strips along x₁.

    Override :meth:`equation` (interior residual at one point) and either
    :meth:`exact` or :meth:`boundary_value` (Dirichlet data); optionally
    :meth:`boundary` for another boundary condition (it receives the field and
    the point).  Class attributes: ``name``, ``dim``, ``lower``, ``upper``,
    ``hidden`` (network widths), ``params`` (extra options, merged with the
    standard ``n_interior``, ``n_boundary``, ``boundary_weight``, ``sampling``).
    """

    kind: ClassVar[str] = "pinn"
    dim: ClassVar[int] = 1
    lower: ClassVar[float] = 0.0
    upper: ClassVar[float] = 1.0

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls.params = {**_pde_params(), **cls.__dict__.get("params", {})}
        cls.space_dim = int(cls.__dict__.get("dim", getattr(cls, "dim", 1)))
        if not cls.description:
            cls.description = (cls.__doc__ or f"user-defined PDE {cls.name}").strip().splitlines()[0]

    # --- what the user writes ---------------------------------------------------
    def equation(self, u: FieldAt, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must define equation(self, u, x)")

    def boundary(self, u: FieldAt, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """Boundary residual; default Dirichlet ``u(x) − g(x)``."""
        return u(x) - g

    def boundary_value(self, x: torch.Tensor) -> torch.Tensor:
        if type(self).exact is PDE.exact:
            raise ProblemError(f"problem {self.name!r} needs exact(x) or boundary_value(x) for its Dirichlet data")
        return self.exact(x)

    def exact(self, x):
        raise NotImplementedError

    # --- plumbing ---------------------------------------------------------------
    @property
    def has_exact(self) -> bool:
        return type(self).exact is not PDE.exact

    def interior_residual(self, theta, x):
        return self.equation(FieldAt(self.network(), theta), x)

    def boundary_residual(self, theta, point):
        x, g = point
        return self.boundary(FieldAt(self.network(), theta), x, g)

    def _box(self, client, n_clients):
        e = np.linspace(self.lower, self.upper, n_clients + 1)
        lo = [e[client]] + [self.lower] * (self.dim - 1)
        hi = [e[client + 1]] + [self.upper] * (self.dim - 1)
        return lo, hi

    def x1_range(self) -> tuple[float, float]:
        return float(self.lower), float(self.upper)

    def interior_points(self, client, n_clients, seed):
        lo, hi = self._box(client, n_clients)
        return sample_box(self.n_interior, lo, hi, self.sampling, seed)

    def inapplicable(self) -> dict[str, str]:
        if self.dim == 1 and type(self).boundary_points is PDE.boundary_points:
            return {"n_boundary": "a 1-D interval's boundary is its two end points (one on each end client), "
                                  "whatever the count"}
        return {}

    def boundary_points(self, client, n_clients, seed):
        return box_boundary_points(self.dim, self.lower, self.upper, client, n_clients, self.n_boundary,
                                   self.sampling, seed)

    def test_inputs(self):
        d = self.dim
        if d <= 2:
            g = grid(1001 if d == 1 else 101, d)
        else:
            g = torch.as_tensor(np.random.default_rng(12345).random((10000, d)), dtype=torch.float64)
        return self.lower + (self.upper - self.lower) * g

    def evaluate(self, theta):
        if not self.has_exact:
            return {}
        return super().evaluate(theta)


class ClientData(FieldProblem):
    """Function fitting on data the user has already split among clients.

    ``ClientData([(X_1, y_1), …, (X_K, y_K)], test=(X_t, y_t), hidden=(20, 20))``;
    arrays or tensors, ``X_k [n_k, d]`` (or ``[n_k]`` for d = 1) and ``y_k [n_k]``.
    The network is an MLP ``[d, *hidden, 1]`` (``activation``, default tanh); the metric is test MSE (or
    the training loss when no test set is given).
    """

    kind = "fit"
    metric = "mse"
    name = "client-data"
    description = "fit a network to user-supplied, already-split client data"
    params: ClassVar[dict] = {}

    hidden: ClassVar[tuple] = (20, 20, 20)

    def __init__(self, clients: Sequence, test=None, hidden: Sequence[int] = (20, 20, 20), name: str | None = None,
                 activation: str = "tanh"):
        super().__init__(hidden=hidden if isinstance(hidden, (str, bytes)) else list(hidden), activation=activation)
        if name:
            self.name = name
        if len(clients) == 0:
            raise ProblemError("ClientData needs at least one client")
        data = []
        for k, pair in enumerate(clients):
            try:
                X, y = pair
            except (TypeError, ValueError):
                raise ProblemError(f"client {k}: expected a pair (X, y), got {type(pair).__name__}")
            X, y = _as_xy(X, y, f"client {k}")
            if X.shape[0] == 0:
                raise ProblemError(f"client {k} has no samples (empty client)")
            data.append((X, y))
        dims = {X.shape[1] for X, _ in data}
        if len(dims) != 1:
            raise ProblemError(f"clients disagree on the input dimension: {sorted(dims)}")
        self._data = data
        self.space_dim = dims.pop()
        self.default_clients = len(data)
        self._test_data = _as_xy(*test, "test set") if test is not None else None

    def data_residual(self, theta, point):
        x, y = point
        return self.u(theta, x) - y

    def client_objectives(self, n_clients=None, seed=0, device="cpu"):
        if n_clients is not None and n_clients != len(self._data):
            raise ProblemError(f"this problem's data are split among {len(self._data)} clients; got clients={n_clients}")
        return [self.objective([ResidualPart("data", self.data_residual, (X.to(device), y.to(device)), 1.0)])
                for X, y in self._data]

    def test_inputs(self):
        return self._test_data[0]

    def exact(self, x):
        if self._test_data is not None and x is self._test_data[0]:
            return self._test_data[1]
        raise ProblemError("ClientData has no exact solution; only its test targets")

    def evaluate(self, theta):
        if self._test_data is None:
            return {}
        return super().evaluate(theta)


def _as_xy(X, y, what):
    try:
        X = torch.as_tensor(np.asarray(X, dtype=np.float64) if not torch.is_tensor(X) else X, dtype=torch.float64)
        y = torch.as_tensor(np.asarray(y, dtype=np.float64) if not torch.is_tensor(y) else y, dtype=torch.float64)
    except (TypeError, ValueError) as e:  # strings, ragged lists, objects
        raise ProblemError(f"{what}: X and y must be numeric arrays: {e}") from None
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise ProblemError(f"{what}: need X [n, d] and y [n] with the same n, got X {tuple(X.shape)} and y {tuple(y.shape)}")
    if not (torch.isfinite(X).all() and torch.isfinite(y).all()):
        raise ProblemError(f"{what}: data contain non-finite values")
    return X, y
