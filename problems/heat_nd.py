"""The heat equation in d space dimensions: ``∂ₜu − κΔₓu = 0`` on ``[0, 1]^d × [0, 1]``.

The (4+1)-dimensional heat problem of K-FAC for PINNs (Dangel, Müller & Zeinhofer, NeurIPS 2024; their
experiments' ``heat`` equation with the ``sin_sum`` condition, ``dim_Omega = 4``) at the defaults:

* ``variant="sum"`` (default): ``u = exp(−4κt) Σᵢ sin(2xᵢ)``; at their κ = 1/4 that is ``e^{−t} Σᵢ sin 2xᵢ``
  (their ``u_t − Δu/4 = 0`` with α = 2/π in ``sin(απxᵢ)``).  The lateral Dirichlet data and the initial
  data are taken from it (they are not zero: ``sin 2 ≠ 0``).
* ``variant="product"``: ``u = exp(−dπ²κt) Πᵢ sin(πxᵢ)`` (their ``sin_product``), zero on the lateral boundary.

Both solve the equation for every κ > 0, so κ (option ``k``) may be changed.  Inputs are ``(x₁, …, x_d, t)``,
time last (theirs put t first).  Conditions: Dirichlet on the whole lateral boundary ``∂[0,1]^d × [0, 1]``
(the part ``lateral``) and the initial condition at t = 0; clients own strips along x₁ (``split``).

The K-FAC authors' heat 4d experiments are presets (:data:`ANCHORS`: ``solve heat-nd --preset exp28``, the
small / medium / big networks of exp27 / exp28 / exp29), with their evaluation set (``n_eval``) and metric
(``rms_error``).

Collocation grows with the dimension, by Poisson's rule (:func:`~fedsciml.problems.poisson.default_interior_points`)
on the space-time dimension d + 1, for each of the 4 clients of the default run: 4·400 interior points in total for
d = 1, ``4·800·max(d+1, 5)`` beyond — 16 000 at d = 2…4 — and a tenth of that per condition (``n_boundary``: 1600
lateral + 1600 initial points at d = 4).  Counts are totals, drawn once and split among the clients by their
strips (:class:`~fedsciml.problems.domain.DomainPDE`): the same points whatever ``--clients`` and ``--method``.  The authors used 3000 interior, 250 lateral and 250 initial points, resampled every 100 steps; fixed
points here must outnumber the network's parameters for the collocation to generalize (the Poisson d = 5
lesson: with fewer rows than parameters Levenberg–Marquardt interpolates them).  The network is
[d+1, 32, 32, 32, 1] (p = 2337 at d = 4); theirs was [5, 64, 64, 48, 48, 1] (p = 10065).

The interior residual comes out of one forward pass that carries, layer by layer, the value, the input
gradient (all d + 1 axes: ∂ₜu is its last entry) and the Laplacian over the d spatial axes only (the
"forward Laplacian" of :meth:`fedsciml.core.nn.MLP.value_and_laplacian`, restricted): its Jacobian
(``vmap`` of ``jacrev``) took 2.1–3.1× less CPU than the nested-``jacfwd`` Hessian of the general
:class:`~fedsciml.problems.conditions.Field` path, which stays the definition (:meth:`HeatND.equation`) and
is used for any other activation, ansatz or overridden equation.  Tests check the two agree.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from fedsciml.options import option

from .base import TOTAL_POINTS, Preset, ProblemError
from .conditions import Dirichlet, Initial
from .domain import DomainPDE
from .geometry import Box
from .poisson import ANCHOR_REPO, default_interior_points, rms_error
from .registry import register

_PI = math.pi
MAX_DIM = 10


def heat_jet(net, theta: torch.Tensor, x: torch.Tensor, n_space: int):
    """``(u, ∂u/∂x_last, Σ_{i < n_space} ∂²u/∂xᵢ²)`` of a tanh :class:`~fedsciml.core.nn.MLP` with a scalar
    output at ``x [..., d_in]``, in one forward pass (exact: only matmuls and elementwise ops).

    Layer by layer: ``z = hWᵀ + b``, ``∂z = GWᵀ``, ``Δz = LWᵀ``; ``a = tanh z``, ``∂a = σ′(z)∂z``,
    ``Δa = σ′(z)Δz + σ″(z)Σ_{i < n_space}(∂ᵢz)²`` — the input Jacobian ``G`` over every axis, the Laplacian
    ``L`` over the first ``n_space`` axes only."""
    if net.activation != "tanh" or net.sizes[-1] != 1:
        raise ValueError(f"heat_jet needs a tanh network with one output, got {net!r}")
    layers = net.unflatten(theta if theta.shape[-1] == net.n_params else theta[..., : net.n_params])
    last = len(layers) - 1
    # the spatial axes' mask: Σ_{i < n_space} (∂ᵢz)² as one product (a slice's backward would fill zeros)
    m = (torch.arange(net.sizes[0], device=x.device) < n_space).to(x.dtype)
    h, G, L = x, None, None
    for i, (W, b) in enumerate(layers):
        z = h @ W.T
        if b is not None:
            z = z + b
        Gz = W.T.expand(x.shape[:-1] + W.T.shape) if G is None else G @ W.T
        Lz = None if L is None else L @ W.T
        if i < last:
            a = torch.tanh(z)
            s1 = 1.0 - a * a
            s2 = -2.0 * a * s1
            G = s1.unsqueeze(-2) * Gz
            L = s2 * (m @ (Gz * Gz))
            if Lz is not None:
                L = L + s1 * Lz
            h = a
        else:
            h, G, L = z, Gz, Lz
    if L is None:  # a single linear layer: Δu = 0
        L = torch.zeros_like(h)
    return h[..., 0], G[..., -1, 0], L[..., 0]


class _ForwardResidual:
    """The interior residual ``∂ₜu − κΔₓu`` at one point from :func:`heat_jet` (one object per problem, so
    that the clients' interior parts are recognised as one part when pooled)."""

    def __init__(self, problem: HeatND):
        self.problem = problem

    def __call__(self, theta, x):
        pb = self.problem
        _, ut, lap = heat_jet(pb.network(), theta, x, pb.dim)
        return ut - pb.k * lap


def _everywhere(x: torch.Tensor) -> torch.Tensor:
    return torch.ones(x.shape[0], dtype=torch.bool)


@register
class HeatND(DomainPDE):
    """d-dimensional heat ``∂ₜu = κΔₓu`` on [0,1]^d × [0,1] (K-FAC for PINNs' heat 4d at the defaults); exact."""

    name = "heat-nd"
    description = ("d-dim heat ∂ₜu = κΔₓu on [0,1]^d×[0,1], d=4, κ=1/4, u = e^{−t} Σ sin 2xᵢ (K-FAC-for-PINNs' heat 4d; "
                   "variant product: Π sin πxᵢ); 4·800·max(d+1,5) interior points in total (16000 at d=4; 1600 at "
                   "d=1), a tenth of that per condition")
    T = 1.0
    default_clients = 4
    params = {
        "dim": option(4, f"space dimension d (1 ≤ d ≤ {MAX_DIM}); the network's input is (x₁…x_d, t)", int,
                      lo=1, hi=MAX_DIM),
        "k": option(0.25, "diffusivity κ", float, lo=0, lo_open=True),
        "variant": option("sum", "sum (u = e^{−4κt} Σ sin 2xᵢ) | product (u = e^{−dπ²κt} Π sin πxᵢ)", str,
                          choices=("sum", "product")),
        "n_interior": option(None, f"interior collocation points {TOTAL_POINTS} (default 1600 for d = 1, "
                                   "4·800·max(d+1, 5) for d ≥ 2: 16000 at d = 4)", int, lo=1,
                             none="1600 for d = 1, 4·800·max(d+1, 5) for d ≥ 2"),
        "n_boundary": option(None, f"points of the lateral and of the initial condition, {TOTAL_POINTS} "
                                   "(default a tenth of the interior default: 1600 at d = 4)", int, lo=1,
                             none="a tenth of the interior default"),
        "n_eval": option(None, "evaluation points, uniform in [0,1]^d × [0,1] with a fixed seed (metrics then also "
                               "hold rms_error, the K-FAC authors' l2_error)", int, lo=1,
                         none="20000 fixed uniform points (a grid for d + 1 ≤ 3)"),
    }

    def _check(self):
        if self.options["n_interior"] is None:
            self.options["n_interior"] = self.default_clients * default_interior_points(self.dim + 1)
        if self.options["n_boundary"] is None:
            self.options["n_boundary"] = self.default_clients * (default_interior_points(self.dim + 1) // 10)
        super()._check()

    @property
    def geometry(self):
        if "_geometry" not in self.__dict__:
            d = self.dim
            self.__dict__["_geometry"] = Box([0.0] * d, [1.0] * d).with_parts(lateral=_everywhere)
        return self.__dict__["_geometry"]

    @property
    def conditions(self):
        return [Dirichlet("lateral"), Initial()]

    def equation(self, u, x):
        return u.diff(x, "t") - self.k * u.laplacian(x)

    def exact(self, x):
        xs, t = x[..., :-1], x[..., -1]
        if self.variant == "sum":
            return torch.exp(-4.0 * self.k * t) * torch.sin(2.0 * xs).sum(-1)
        return torch.exp(-self.dim * _PI ** 2 * self.k * t) * torch.sin(_PI * xs).prod(-1)

    def test_inputs(self):
        if self.n_eval is None:
            return super().test_inputs()
        gen = np.random.default_rng(20260101 + self.dim)  # fixed test set, independent of the run seed
        return torch.as_tensor(gen.random((self.n_eval, self.dim + 1)), dtype=torch.float64)

    def evaluate(self, theta):
        out = super().evaluate(theta)
        if self.n_eval is not None:  # the K-FAC authors' l2_error: the error's root mean square
            out["rms_error"] = rms_error(self, theta)
        return out

    def uses_forward_residual(self) -> bool:
        """Whether the interior residual takes the one-pass :func:`heat_jet` path (a tanh network with one
        output, no ansatz, this class's equation and field, on the class or the instance); otherwise the general
        Field path."""
        net = self.network()
        return (net.activation == "tanh" and net.sizes[-1] == 1 and type(self).equation is HeatND.equation
                and type(self).ansatz is DomainPDE.ansatz and type(self)._point_fn is DomainPDE._point_fn
                and "_point_fn" not in self.__dict__ and not self.unknowns)

    def _parts(self, theta0):
        if "_part_fns" not in self.__dict__:
            parts = super()._parts(theta0)   # cached in self.__dict__["_part_fns"]: replaced in place
            if parts[0][2] is not None or parts[0][0] != "pde":
                raise ProblemError(f"heat-nd expected its equation's part first, got {parts[0][0]!r}")
            if self.uses_forward_residual():
                parts[0] = ("pde", _ForwardResidual(self), None, 0)
        return self.__dict__["_part_fns"]


ANCHOR_COMMON = f"""
Shared by the heat presets (read in {ANCHOR_REPO}; sweeps/*.yaml of exp27, exp28, exp29): equation heat,
boundary_condition sin_sum, dim_Omega 4, N_Omega 3000, N_dOmega 500.
* u_t − Δu/4 = 0 (heat_equation.evaluate_interior_loss), u = e^{{−t}} Σ sin(2xᵢ) (heat_equation.u_sin_sum, α = 2/π):
  variant sum, k 0.25, dim 4 (the defaults);
* n_interior 3000 uniform points of [0,1]^4 × [0,1] (train.py create_interior_data: torch.rand), sampling uniform;
* n_boundary 250: N_dOmega = 500 split into 250 lateral points (uniform on ∂[0,1]^4 at uniform times:
  heat_equation.square_boundary_random_time) and 250 initial ones (heat_equation.unit_square_at_start;
  train.py create_condition_data: num_data // 2 each);
* loss ½·mean(r_Ω²) + ½·mean(r_cond²) over the 500 condition points: boundary_weight 3000/500 = 6;
* n_eval 30000 (train.py: N_eval = 10·N_Omega; best_runs/*_meta.csv: 30000), uniform in [0,1]^5; their
  l2_error is rms_error here;
* resample 1: batch_frequency 1 in their Adam, SGD, ENGD, L-BFGS and Hessian-free sweeps; KFAC and KFAC* use 100
  (give --resample 100).
What differs: inputs are (x, t) here (theirs (t, x)); initialization N(0, 1/fan_in) weights and zero biases
(theirs PyTorch's default nn.Linear).  The counts are theirs whatever --method and --clients: the points are
drawn once and split among the clients."""


def _heat_anchor(doc: str, hidden: list) -> Preset:
    return Preset(doc.strip() + "\n" + ANCHOR_COMMON,
                  problem={"dim": 4, "variant": "sum", "k": 0.25, "n_interior": 3000, "n_boundary": 250,
                           "boundary_weight": 6.0, "sampling": "uniform", "n_eval": 30000, "hidden": hidden},
                  method={"resample": 1})


ANCHORS: dict[str, Preset] = {
    "exp27": _heat_anchor("""
K-FAC for PINNs' heat 4d small, mlp-tanh-64 (p = 449): exp27_heat4d_small.
Network [5, 64, 1]: no model key in its sweeps, train.py --model default mlp-tanh-64.""", [64]),
    "exp28": _heat_anchor("""
K-FAC for PINNs' heat 4d medium, mlp-tanh-64-64-48-48 (p = 10065): exp28_heat4d_medium.
Network [5, 64, 64, 48, 48, 1] (sweeps/*.yaml: model mlp-tanh-64-64-48-48; its KFAC.yaml holds an unresolved
merge conflict, KFAC_auto.yaml and best_runs/*_meta.csv agree).""", [64, 64, 48, 48]),
    "exp29": _heat_anchor("""
K-FAC for PINNs' heat 4d big, mlp-tanh-256-256-128-128 (p = 116865): exp29_heat4d_big.
Network [5, 256, 256, 128, 128, 1] (sweeps/*.yaml: model mlp-tanh-256-256-128-128).""", [256, 256, 128, 128]),
}
HeatND.presets = ANCHORS
