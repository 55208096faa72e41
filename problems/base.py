"""Problem base types, sampling and the registry.

A problem is declarative: its options, domain, how the domain (or data)
splits among clients, its default network, its residual parts, its exact
solution and its test metric.  No training code lives here.

Options are declared in the one dialect of :mod:`fedsciml.options`, as a
method's are: ``params = {"k": option(0.1, "diffusivity k", float, lo=0,
lo_open=True)}`` — a default, a help text, a type and what is allowed — and
validated by the same code (:func:`fedsciml.options.check_options`); the
``solve`` and ``ridge`` command lines generate their flags from them.
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch

from fedsciml.core.nn import MLP
from fedsciml.options import OptionError, OptionTypeError, Spec, check_options, declared, display, option
from fedsciml.core.objective import LeastSquares, PointwiseLeastSquares, ResidualPart, stack_objectives

DTYPE = torch.float64


class ProblemError(ValueError):
    """Invalid problem options or data (the message names the value and what is allowed)."""


class ProblemOptionError(ProblemError, OptionError):
    """A problem option out of its allowed range, or unknown (both a :class:`ProblemError` and an
    :class:`~fedsciml.options.OptionError`, as a method option's would be)."""


class ProblemOptionTypeError(ProblemError, OptionTypeError):
    """A problem option of the wrong type (``n_samples='many'``): a :class:`ProblemError` and an
    :class:`~fedsciml.options.OptionTypeError`."""


PROBLEM_ERRORS = (ProblemOptionError, ProblemOptionTypeError)

SAMPLING = option("lhs", "collocation sampling: lhs (pyDOE Latin hypercube) or uniform", str,
                  choices=("lhs", "uniform"))


def sample_box(n: int, lo, hi, method: str, seed) -> torch.Tensor:
    """``n`` points in the box ``[lo, hi]`` (arrays of length d), seeded.

    ``method='lhs'`` uses pyDOE's Latin hypercube (``pydoe.lhs``), ``'uniform'``
    i.i.d. uniform draws.  ``seed`` is anything ``numpy.random.default_rng``
    accepts (fedsciml passes ``[run_seed, client, purpose]``).
    """
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    d = lo.shape[0]
    rng = np.random.default_rng(seed)
    if n <= 0:
        return torch.zeros(0, d, dtype=DTYPE)
    if method == "lhs":
        import pydoe

        u = pydoe.lhs(d, samples=n, seed=rng)
    elif method == "uniform":
        u = rng.random((n, d))
    else:
        raise ProblemError(f"sampling must be 'lhs' or 'uniform', got {method!r}")
    return torch.as_tensor(lo + (hi - lo) * u, dtype=DTYPE)


class Problem:
    """Base class.  Subclasses set the class attributes and implement the hooks."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""          # "pinn" | "fit" | "ridge"
    description: ClassVar[str] = ""
    metric: ClassVar[str] = "rel_l2"  # "rel_l2" or "mse"
    params: ClassVar[dict] = {}
    default_clients: ClassVar[int] = 1

    def __init__(self, **options):
        """Validate ``options`` against :meth:`specs` (unknown names, types, ranges: one line naming the value and
        what is allowed, a :class:`ProblemOptionError` / :class:`ProblemOptionTypeError`); ``None``: the default."""
        specs = self.specs()
        self.options = check_options(f"problem {self.name!r}", specs, options, errors=PROBLEM_ERRORS)
        self._check()
        idle = self.inapplicable()
        for name, value in options.items():  # a default passed along (a wrapper forwarding all) changes nothing
            if name in idle and value is not None and self.options[name] != specs[name][0]:
                raise ProblemOptionError(f"problem {self.name!r} option {display(name)} has no effect here: "
                                         f"{idle[name]}")

    @classmethod
    def specs(cls) -> dict[str, tuple[Any, Spec]]:
        """``{option: (default, Spec)}`` of the problem's ``params`` (declaration order), as
        :meth:`fedsciml.options.MethodConfig.specs` of a method."""
        return declared(cls.params)

    def _check(self):
        """Cross-option validation hook."""

    def inapplicable(self) -> dict[str, str]:
        """``{option: why}`` for the options that act on nothing with the other options' values (as
        :meth:`fedsciml.options.MethodConfig.inapplicable`): such an option given at another value than its
        default is refused, one line naming it and why, rather than silently ignored."""
        return {}

    def __getattr__(self, item):
        opts = self.__dict__.get("options")
        if opts is not None and item in opts:
            return opts[item]
        raise AttributeError(item)

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.options.items())})"

    # --- hooks -----------------------------------------------------------------
    def network(self) -> MLP:
        raise NotImplementedError

    def init_params(self, seed: int = 0, device="cpu") -> torch.Tensor:
        return self.network().init(seed, dtype=DTYPE, device=device)

    def client_objectives(self, n_clients: int, seed: int = 0, device="cpu") -> list[LeastSquares]:
        raise NotImplementedError

    def evaluate(self, theta: torch.Tensor) -> dict:
        raise NotImplementedError

    def final_metrics(self, theta: torch.Tensor, objectives) -> dict:
        """Metrics computed once at the end of a run from the clients' objectives (e.g. an inverse problem's
        coefficient uncertainty from the final ``Σ_k J_kᵀJ_k``); none by default."""
        return {}

    def rows_per_client(self, n_clients: int) -> int | None:
        """About how many residual rows one client holds (``None``: unknown).  Read before any data is
        built, to refuse a run that cannot fit in memory (:func:`fedsciml.runtime.driver.check_memory`)."""
        return None

    # --- shared helpers -------------------------------------------------------
    def check_clients(self, n_clients: int):
        if int(n_clients) != n_clients or n_clients < 1:
            raise ProblemError(f"number of clients must be a positive integer, got {n_clients}")

    def centralized_objective(self, n_clients: int = 1, seed: int = 0, device="cpu") -> LeastSquares:
        """The pooled objective of the same client split (the reference every federated run is compared with)."""
        return stack_objectives(self.client_objectives(n_clients, seed, device))


class FieldProblem(Problem):
    """A problem whose unknown is a field ``u(x)`` represented by an MLP.

    Subclasses give ``exact(x)`` for a batch ``x [n, d]``, ``test_inputs()`` and
    ``network_sizes``; the metric is relative L2 (PINNs) or MSE (fitting) of
    ``u_θ`` against ``exact`` on the test inputs.
    """

    space_dim: ClassVar[int] = 1
    hidden: ClassVar[tuple] = (32, 32, 32)

    def input_dim(self) -> int:
        return self.space_dim

    def network(self) -> MLP:
        if not hasattr(self, "_net"):
            self.__dict__["_net"] = MLP([self.input_dim(), *self.hidden, 1], "tanh")
        return self.__dict__["_net"]

    def u(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The network at one point ``x [d]`` (0-d result) or a batch ``[n, d]``."""
        return self.network()(theta, x)

    def exact(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def test_inputs(self) -> torch.Tensor:
        raise NotImplementedError

    def _test(self):
        if "_test_cache" not in self.__dict__:
            X = self.test_inputs()
            self.__dict__["_test_cache"] = (X, self.exact(X))
        return self.__dict__["_test_cache"]

    def predict(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.u(theta, x.to(theta.device, theta.dtype))

    def model_description(self, theta: torch.Tensor) -> dict:
        """What a saved model needs beside θ (:mod:`fedsciml.runtime.modelio`, kind ``field``): the network, its
        evaluation (``batch``: the network on the whole batch, as :meth:`u` does here) and whether
        :meth:`u` is more than the network (then only the problem can evaluate the model)."""
        net = self.network()
        return {"architecture": {"type": "mlp", "sizes": list(net.sizes), "activation": net.activation},
                "evaluation": "batch", "outputs": ["u"], "inputs": [f"x{i}" for i in range(net.sizes[0])],
                "n_network_params": net.n_params, "coefficients": {},
                "ansatz": type(self).u is not FieldProblem.u}

    def evaluate(self, theta: torch.Tensor) -> dict:
        X, u = self._test()
        X, u = X.to(theta.device), u.to(theta.device)
        with torch.no_grad():
            pred = self.u(theta, X)
        err = pred - u
        if self.metric == "mse":
            return {"mse": float((err ** 2).mean())}
        return {"rel_l2": float(err.norm() / u.norm())}

    def objective(self, parts: list[ResidualPart]) -> PointwiseLeastSquares:
        return PointwiseLeastSquares(parts, self.network().n_params)


def grid(n_per_dim: int, d: int, lo=0.0, hi=1.0) -> torch.Tensor:
    """Tensor-product grid of ``n_per_dim**d`` points in ``[lo, hi]^d``."""
    ax = torch.linspace(lo, hi, n_per_dim, dtype=DTYPE)
    mesh = torch.meshgrid(*([ax] * d), indexing="ij")
    return torch.stack([m.reshape(-1) for m in mesh], dim=1)


def interval_edges(n_clients: int, edges=None) -> np.ndarray:
    """Client interval edges on [0, 1]: equal, or user-given (checked)."""
    if edges is None:
        return np.linspace(0.0, 1.0, n_clients + 1)
    e = np.asarray(edges, dtype=np.float64)
    if len(e) != n_clients + 1 or e[0] != 0.0 or e[-1] != 1.0 or np.any(np.diff(e) <= 0):
        raise ProblemError(f"client edges must be {n_clients + 1} increasing values from 0 to 1, got {list(e)}")
    return e


def box_boundary_points(dim: int, lower: float, upper: float, client: int, n_clients: int, n_per_face: int,
                        sampling: str, seed) -> torch.Tensor:
    """Boundary points of ``[lower, upper]^dim`` that belong to client strip ``client`` along x₁.

    The faces x₁ = lower / upper belong to the first / last client; every other
    face is cut into the clients' strips.  In 1D the two end points.
    """
    e = np.linspace(lower, upper, n_clients + 1)
    faces = []
    if client == 0:
        faces.append((0, lower))
    if client == n_clients - 1:
        faces.append((0, upper))
    faces += [(i, v) for i in range(1, dim) for v in (lower, upper)]
    if dim == 1:
        return torch.tensor([[v] for _, v in faces], dtype=torch.float64).reshape(-1, 1)
    rng = np.random.default_rng(seed)
    pts = []
    for i, v in faces:
        lo = [e[client]] + [lower] * (dim - 1)
        hi = [e[client + 1]] + [upper] * (dim - 1)
        lo[i] = hi[i] = v
        pts.append(sample_box(n_per_face, lo, hi, sampling, rng.integers(2**32)))
    return torch.cat(pts)
