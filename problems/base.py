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

from typing import Any, Callable, ClassVar

from dataclasses import dataclass, field

import numpy as np
import torch

from fedsciml.core.nn import ACTIVATIONS, MLP
from fedsciml.options import INTS, OptionError, OptionTypeError, Spec, check_options, declared, display, option
from fedsciml.runtime.memory import available_memory
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

#: floats a run keeps per network parameter at the least (θ, its gradient, a step, an optimizer's moment):
#: a network whose parameters alone need more memory than there is is refused when the problem is built
FLOATS_PER_PARAMETER = 4


def network_options(hidden, activation: str) -> dict:
    """The options ``hidden`` and ``activation`` of every :class:`FieldProblem` (declared with
    :func:`~fedsciml.options.option`, defaults the problem class's own network)."""
    return {"hidden": option(list(hidden), "hidden layer widths of the network (on the command line "
                                           "comma-separated, e.g. 64,64,48,48)", INTS, lo=1, metavar="W,W,…"),
            "activation": option(activation, "activation of the network's hidden layers", str,
                                 choices=ACTIVATIONS)}


def arch_of(net: MLP) -> dict:
    """``{"type": "mlp", "sizes", "activation"}`` of a network, with ``input_map: {"shift", "scale"}`` where it
    has one (a saved model rebuilds the same network from it: :mod:`fedsciml.runtime.modelio`)."""
    out: dict = {"type": "mlp", "sizes": list(net.sizes), "activation": net.activation}
    if net.input_map is not None:
        out["input_map"] = {"shift": list(net.input_map[0]), "scale": list(net.input_map[1])}
    return out


def check_network_size(sizes, what: str = "") -> None:
    """Refuse (:class:`ProblemOptionError`, one line) a network ``sizes`` whose parameters alone —
    :data:`FLOATS_PER_PARAMETER` float64 vectors of their number — need more memory than is available now
    (:func:`fedsciml.runtime.memory.available_memory`); before anything is allocated."""
    sizes = [int(s) for s in sizes]
    p = sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))
    need = 8 * FLOATS_PER_PARAMETER * p
    avail = available_memory()
    if avail is not None and need > avail:
        raise ProblemOptionError(f"{what or 'the'} network {sizes} has {p:.3g} parameters: {need / 1e9:.3g} GB "
                                 f"for {FLOATS_PER_PARAMETER} vectors of them, more than the {avail / 1e9:.3g} GB "
                                 f"available; give smaller {display('hidden')} widths")


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


@dataclass(frozen=True)
class Preset:
    """A named setting of a problem and of its run: an experiment as its authors ran it.

    ``problem``: problem options, ``method``: method options (e.g. ``resample``); each fills only what the caller
    did not give (options given explicitly win).  ``doc``: what it reproduces, every value with where it was
    read.  Declared in a problem class's :attr:`Problem.presets` and applied by
    :func:`~fedsciml.problems.registry.apply_preset` (``solve NAME --preset P``, ``fs.solve(NAME, preset=P)``)."""

    doc: str
    problem: dict = field(default_factory=dict)
    method: dict = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """The first line of :attr:`doc`."""
        return self.doc.strip().splitlines()[0]


class Problem:
    """Base class.  Subclasses set the class attributes and implement the hooks."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""          # "pinn" | "fit" | "ridge"
    description: ClassVar[str] = ""
    metric: ClassVar[str] = "rel_l2"  # "rel_l2" or "mse"
    params: ClassVar[dict] = {}
    default_clients: ClassVar[int] = 1
    #: named settings of the problem and its run (``solve NAME --preset P``, ``fs.solve(NAME, preset=P)``;
    #: :class:`Preset`, applied by :func:`~fedsciml.problems.registry.apply_preset`)
    presets: ClassVar[dict[str, "Preset"]] = {}

    @property
    def run_defaults(self) -> dict:
        """Run (method) options this problem, with its options, sets where the caller gives none — e.g. a PINNacle
        case's ``resample`` — applied by :func:`fedsciml.runtime.driver.plan` to the methods that declare the option
        and run with their clients in this process; an option given explicitly (``None`` included) wins.  None by
        default."""
        return {}

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

    def pde_rows_per_client(self, n_clients: int) -> int | None:
        """Of :meth:`rows_per_client`, about how many carry the PDE's derivatives (the rest read the network's
        value only, e.g. Dirichlet conditions and data): the memory check charges those rows the residual graph's
        derivative channels (``None``: every row)."""
        return None

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
    #: the problem's default network: hidden widths and activation (the options ``hidden`` and ``activation``,
    #: declared for every field problem by :meth:`specs`, change them; the options hold what is used)
    hidden: ClassVar[tuple] = (32, 32, 32)
    activation: ClassVar[str] = "tanh"
    #: output components of the network
    n_outputs: ClassVar[int] = 1

    def __init__(self, **options):
        super().__init__(**options)
        check_network_size([1, *self.options["hidden"], 1], f"problem {self.name!r}:")

    @classmethod
    def specs(cls) -> dict[str, tuple[Any, Spec]]:
        """The problem's ``params`` and the network's options ``hidden`` and ``activation`` (defaults the class's
        :attr:`hidden` and :attr:`activation`; a ``params`` entry of the same name wins)."""
        out = declared(cls.params)
        for name, spec in declared(network_options(cls.hidden, cls.activation)).items():
            out.setdefault(name, spec)
        return out

    def input_dim(self) -> int:
        return self.space_dim

    def network_sizes(self) -> list[int]:
        """``[d_in, *hidden, outputs]`` of the network the options ask for."""
        return [self.input_dim(), *self.options["hidden"], self.n_outputs]

    def network(self) -> MLP:
        """The MLP ``network_sizes()`` with the option ``activation`` (built once; refused, one line, when its
        parameters alone exceed the memory available: :func:`check_network_size`)."""
        if "_net" not in self.__dict__:
            sizes = self.network_sizes()
            check_network_size(sizes, f"problem {self.name!r}:")
            self.__dict__["_net"] = MLP(sizes, self.options["activation"], input_map=self.input_map())
        return self.__dict__["_net"]

    def input_map(self) -> tuple | None:
        """The network's fixed input map ``(shift, scale)`` (:class:`~fedsciml.core.nn.MLP`), ``None`` here: the
        raw coordinates (a :class:`~fedsciml.problems.domain.DomainPDE` maps its box with ``input_scaling``)."""
        return None

    def architecture(self) -> dict:
        """The network as a saved model and a checkpoint record it: ``{"type": "mlp", "sizes", "activation"}``
        (and ``input_map: {"shift", "scale"}`` where the network has one)."""
        net = self.network()
        return arch_of(net)

    def u(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The network at one point ``x [d]`` (0-d result) or a batch ``[n, d]``; times :meth:`bubble`'s factor
        where the problem holds zero Dirichlet data exactly."""
        out = self.network()(theta, x)
        bubble = self.bubble()
        return out if bubble is None else bubble(x)[0] * out

    def bubble(self) -> Callable | None:
        """A hard Dirichlet constraint with zero data, ``u = B(x)·N(x)``: the function ``x ↦ (B, ∇B, ΔB)`` (one
        point ``[d]`` or a batch ``[n, d]``, B zero on the boundary), or ``None`` (the default: u is the network
        and the boundary holds by condition rows).  An instance's choice (an option: ``poisson``'s
        ``u_conditions``), so the fast paths that need u to be the network alone ask it, not the class."""
        return None

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
        return self.u_batched(theta, x.to(theta.device, theta.dtype))

    def u_batched(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """:meth:`u` on ``x`` without gradients, in batches whose activations stay under
        :data:`~fedsciml.runtime.modelio.EVAL_BYTES` (a wide network on a test grid is never ``n × width`` at
        once: 1001 points of one hidden layer of 300,000 were 2.4 GB); one call — the same operations — where
        ``x`` fits in one batch."""
        from fedsciml.runtime.modelio import batched, eval_rows

        with torch.no_grad():
            return batched(lambda xb: self.u(theta, xb), x, eval_rows(self.network().sizes))

    def model_description(self, theta: torch.Tensor) -> dict:
        """What a saved model needs beside θ (:mod:`fedsciml.runtime.modelio`, kind ``field``): the network, its
        evaluation (``batch``: the network on the whole batch, as :meth:`u` does here) and whether
        :meth:`u` is more than the network (then only the problem can evaluate the model)."""
        net = self.network()
        return {"architecture": self.architecture(), "evaluation": "batch", "outputs": ["u"], "inputs": [f"x{i}" for i in range(net.sizes[0])],
                "n_network_params": net.n_params, "coefficients": {},
                "ansatz": type(self).u is not FieldProblem.u or self.bubble() is not None}

    def evaluate(self, theta: torch.Tensor) -> dict:
        X, u = self._test()
        X, u = X.to(theta.device), u.to(theta.device)
        err = self.u_batched(theta, X) - u
        if self.metric == "mse":
            return {"mse": float((err ** 2).mean())}
        return {"rel_l2": float(err.norm() / u.norm())}

    def objective(self, parts: list[ResidualPart]) -> PointwiseLeastSquares:
        return PointwiseLeastSquares(parts, self.network().n_params)


def unit_box_bubble(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(B, ∇B, ΔB)`` of ``B(x) = Π_i 4x_i(1 − x_i)`` at one point ``x [d]`` or a batch ``[n, d]``: zero on every
    face of [0, 1]^d, 1 at the centre.  With ``b_i = 4x_i(1 − x_i)``: ``∂_i B = (4 − 8x_i) Π_{j≠i} b_j`` and
    ``ΔB = −8 Σ_i Π_{j≠i} b_j``; the products that leave b_i out are the exclusive prefix and suffix products
    (``cumprod``, O(d) a point), not a division by b_i (zero on the faces)."""
    b = 4.0 * x * (1.0 - x)
    ones = torch.ones_like(b[..., :1])
    before = torch.cumprod(torch.cat([ones, b[..., :-1]], -1), -1)                        # Π_{j<i} b_j
    after = torch.cumprod(torch.cat([ones, b.flip(-1)[..., :-1]], -1), -1).flip(-1)       # Π_{j>i} b_j
    others = before * after
    return b.prod(-1), (4.0 - 8.0 * x) * others, -8.0 * others.sum(-1)


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


#: how a problem's collocation counts are read, said in every ``n_interior`` / ``n_boundary`` help text
TOTAL_POINTS = "in total, split among the clients (the same points whatever --clients and --method)"


def split_counts(n: int, n_clients: int) -> list[int]:
    """How ``n`` points split among ``n_clients`` clients: ``⌊n/K⌋`` each, one more for each of the first
    ``n mod K`` clients (so 10 points among 4 clients: 3, 3, 2, 2)."""
    n, K = int(n), int(n_clients)
    return [n // K + (k < n % K) for k in range(K)]


def split_by_rank(x1: torch.Tensor, n_clients: int) -> list[torch.Tensor]:
    """The clients' shares of points whose first coordinates are ``x1 [n]``: the points sorted along x₁ (a
    stable sort: ties keep their order) are cut into ``n_clients`` consecutive runs of :func:`split_counts`'s
    sizes, so client k owns the k-th slab along x₁.  Returns one index tensor per client, each in the points'
    own order (one client: all of them, in order — a pooled run draws exactly these points)."""
    K, n = int(n_clients), int(x1.shape[0])
    if n < K:
        raise ProblemError(f"{n} interior points cannot be split among {K} clients: give n_interior ≥ {K}")
    order = torch.sort(x1, stable=True).indices
    owner = torch.empty(n, dtype=torch.long)
    owner[order] = torch.repeat_interleave(torch.arange(K), torch.tensor(split_counts(n, K)))
    return [(owner == k).nonzero().squeeze(1) for k in range(K)]


def split_by_strip(x1: torch.Tensor, lower: float, upper: float, n_clients: int) -> list[torch.Tensor]:
    """The clients' shares of points by the equal strips ``[e_k, e_{k+1})`` of ``[lower, upper]`` along x₁ that
    they own (a point on an inner edge goes to the strip on its right, x₁ = upper to the last client): the
    boundary points of :func:`box_boundary_points` and :func:`box_boundary_uniform` drawn for one client and
    dealt out as those functions deal the faces.  One index tensor per client, in the points' own order."""
    K = int(n_clients)
    e = np.linspace(lower, upper, K + 1)
    owner = torch.as_tensor(np.searchsorted(e[1:-1], x1.detach().cpu().numpy(), side="right"))
    return [(owner == k).nonzero().squeeze(1) for k in range(K)]


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


def box_boundary_uniform(dim: int, lower: float, upper: float, client: int, n_clients: int, n: int,
                         seed) -> torch.Tensor:
    """``n`` points drawn i.i.d. uniformly (in surface measure) on the part of ``∂[lower, upper]^dim`` that
    belongs to client strip ``client`` along x₁ (the faces x₁ = lower / upper go to the first / last client,
    every other face is cut into the strips, as :func:`box_boundary_points`).

    Each point picks a face with probability ∝ its area, then a uniform point on it.  With one client every
    face has the same area and this is the K-FAC-for-PINNs authors' ``square_boundary`` (a uniform point of the
    cube with one uniformly chosen coordinate set to 0 or 1): a total number of boundary points, however many
    faces (2d of them: 200 at d = 100)."""
    e = np.linspace(lower, upper, n_clients + 1)
    lo = np.array([e[client]] + [lower] * (dim - 1))
    hi = np.array([e[client + 1]] + [upper] * (dim - 1))
    width = (hi[0] - lo[0]) / (upper - lower)  # a face across the strips: the strip's share of its area
    faces = [(0, lower, 1.0)] * (client == 0) + [(0, upper, 1.0)] * (client == n_clients - 1)
    faces += [(axis, v, width) for axis in range(1, dim) for v in (lower, upper)]
    if n <= 0:
        return torch.zeros(0, dim, dtype=DTYPE)
    axes, values, areas = (np.asarray(c) for c in zip(*faces))
    rng = np.random.default_rng(seed)
    face = rng.choice(len(areas), size=n, p=areas / areas.sum())
    x = lo + (hi - lo) * rng.random((n, dim))
    x[np.arange(n), axes[face]] = values[face]
    return torch.as_tensor(x, dtype=DTYPE)
