"""d-dimensional Poisson ``−Δu = f`` on [0, 1]^d with Dirichlet data (1 ≤ d ≤ 100).

Exact solutions (``variant``; the Dirichlet data are the exact solution on the boundary):

* ``product`` (default): ``Π sin(πx_i)``, ``f = dπ² Π sin(πx_i)``, zero boundary values — the FIPA paper's
  text, and the K-FAC-for-PINNs authors' ``sin_product`` (their ``poisson_equation.u_sin_product``);
* ``sum``: ``Σ sin(πx_i)``, ``f = π² Σ sin(πx_i)`` (the FIPA code's);
* ``cos_sum``: ``Σ cos(πx_i)``, ``f = π² Σ cos(πx_i)``, nonzero boundary values (K-FAC for PINNs'
  ``u_cos_sum``/``f_cos_sum``: exp10, exp16, exp19);
* ``weinan``: ``(x₁x₂ + x₃x₄ + … + x_{d−1}x_d)/c_d``, harmonic (``f = 0``), d even; ``c_10 = 1.34``,
  ``c_100 = 12.59`` and ``c_d = 1`` otherwise — their ``u_weinan_prods`` (after E & Yu's deep Ritz paper), whose
  constants make the L2 norm on [0,1]^d about 1 (exp21, d = 10);
* ``weinan_norm``: ``‖x‖²/33.47``, ``f = −2d/33.47`` — their ``u_weinan_norm``/``f_weinan_norm`` (exp14, d = 100;
  33.47 whatever d, as theirs).  Their domain is [0, 1]^d for every solution (``train.create_interior_data``:
  ``rand``; ``poisson_equation.square_boundary``).

Point counts are totals: the points are drawn once for the whole cube, whatever the number of clients, and dealt
out (:meth:`~fedsciml.problems.pinn.PINNProblem.client_objectives`) — client k owns the k-th of K slabs of the
interior points sorted along x₁ (⌊n/K⌋ points, one more for the first n mod K clients) and the boundary points in
its equal strip along x₁.  Boundary points (``boundary_sampling``): ``faces`` (default) samples ``n_boundary``
points on every face of the cube, 2d·``n_boundary`` in all — the faces x₁ = 0 and x₁ = 1 go to the first and
last client, every other face is cut into the clients' strips; ``uniform`` draws ``n_boundary`` points in all,
uniformly on the boundary (the K-FAC authors' ``square_boundary``;
:func:`~fedsciml.problems.base.box_boundary_uniform`), the sane choice at d = 100.

The evaluation set: a grid for d ≤ 2 and 10 000 fixed uniform points beyond, or ``n_eval`` fixed uniform points
(the K-FAC authors': ``N_eval`` = 10·N_Ω = 30 000 uniform points of [0,1]^d).  With ``n_eval`` the metrics also
hold ``rms_error`` ``√mean((u_θ − u)²)``, the K-FAC authors' ``l2_error`` (``pinn_utils.l2_error``: absolute,
not relative — ``rel_l2`` divides it by the solution's RMS, √(d/2) ≈ 1.58 for ``cos_sum`` at d = 5).

The anchors' experiments are presets (:data:`ANCHORS`, ``solve poisson --preset exp10``; docs/guide/scale.md).

Boundary data (``u_conditions``): ``condition`` (default) weighs boundary rows by ``boundary_weight``;
``ansatz`` holds the zero data of variant ``product`` exactly, u = Π 4xᵢ(1 − xᵢ)·N(x), with no boundary rows
(:meth:`Poisson.bubble`: its measured effect and why it is not the default).

Collocation grows with the dimension (``n_interior`` not given): 400 interior
points (in total, as every count) for d ≤ 2 (unchanged), ``800·max(d, 5)`` for d ≥ 3 — 4000
for d = 3…5, the FIPA authors' own script setting for Poisson d = 3 and 5,
and 8000 at d = 10.  Why: with 400 points at d = 5 there are fewer residual
rows than parameters ([5,32,32,32,1], p = 2337), Levenberg–Marquardt
interpolates them (training loss 3e-29) and the relative L2 error stalls at
7e-2; the rows must outnumber p for the collocation to generalize.

``solve --preset paper`` at d = 3 and 5 also takes the authors' script
settings for FIPA (:attr:`Poisson.paper_method_options`: rank 200, 300
local steps, server step γ = 0.5), on top of the published preset
(:data:`fedsciml.methods.fipa.PAPER_PRESET`); options given explicitly win.

FIPA here needs a larger rank than its default 20: at d = 3 / 5 each client
has ~650 / ~850 residual rows for p ≈ 2300 parameters, so rank-20 sketches
keep a small part of its curvature and the merged step lies in a
40-dimensional span;
``rank=300`` (40–50 % more CPU per round, 14× the floats) took
d = 5 from 0.765 to 0.186 relative L2 after 20 rounds, ahead of FedAvg
(0.575) and gn (0.210) — ``scripts/papers/fipa/poisson_dims.py``,
``reproductions/poisson_d5_ablation.md``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from fedsciml.options import option

from .base import (DTYPE, SAMPLING, TOTAL_POINTS, Preset, ProblemError, box_boundary_points, box_boundary_uniform,
                   grid, sample_box, unit_box_bubble)
from .pinn import PINNProblem
from .registry import register

_PI = math.pi
MAX_DIM = 100
VARIANTS = ("product", "sum", "cos_sum", "weinan", "weinan_norm")
#: u_weinan_prods' normalization constants (their poisson_equation.py: 1.34 at d = 10, 12.59 at d = 100, else 1)
WEINAN_NORM = {10: 1.34, 100: 12.59}
#: u_weinan_norm's constant (their poisson_equation.py, whatever d)
WEINAN_NORM_SQ = 33.47


def default_interior_points(dim: int) -> int:
    """Interior points (a total) when ``n_interior`` is not given: 400 for d ≤ 2, ``800·max(d, 5)`` beyond."""
    return 400 if dim <= 2 else 800 * max(dim, 5)


@register
class Poisson(PINNProblem):
    name = "poisson"
    description = ("d-dim Poisson −Δu = f on [0,1]^d (d ≤ 100), u = Π sin πxᵢ (variants sum: Σ sin πxᵢ; cos_sum, "
                   "weinan, weinan_norm: K-FAC-for-PINNs' solutions; --u-conditions ansatz: zero data held exactly)")
    params = {
        "dim": option(2, f"space dimension d (1 ≤ d ≤ {MAX_DIM})", int, lo=1, hi=MAX_DIM),
        "variant": option("product", "exact solution: product (Π sin πxᵢ) | sum (Σ sin πxᵢ) | cos_sum (Σ cos πxᵢ) | "
                                     "weinan ((x₁x₂ + x₃x₄ + …)/c_d, harmonic, d even) | weinan_norm (‖x‖²/33.47)",
                          str, choices=VARIANTS),
        "n_interior": option(None, f"interior collocation points {TOTAL_POINTS} (default 400 for d ≤ 2, "
                                       "800·max(d, 5) for d ≥ 3)", int, lo=1,
                             none="400 for d ≤ 2, 800·max(d, 5) for d ≥ 3"),
        "n_boundary": option(50, "boundary points per face of the cube in total (d ≥ 2; with --boundary-sampling "
                                 "uniform: in total on the whole boundary); each goes to the client whose strip "
                                 "along x₁ holds it", int, lo=1),
        "boundary_sampling": option("faces", "faces: n_boundary points on every face of the cube | "
                                             "uniform: n_boundary points in all, uniform on the boundary "
                                             "(K-FAC for PINNs' square_boundary)", str,
                                    choices=("faces", "uniform")),
        "boundary_weight": option(None, "boundary penalty β (default 10 for d = 1, 100 for d ≥ 2)", float, lo=0,
                                  lo_open=True, none="10 for d = 1, 100 for d ≥ 2"),
        "sampling": SAMPLING,
        "u_conditions": option("condition", "how the Dirichlet data hold: condition (boundary rows weighted by "
                                            "boundary_weight) | ansatz (exactly, u = Π 4xᵢ(1 − xᵢ)·N(x): no "
                                            "boundary rows; zero data only, variant product)", str,
                               choices=("condition", "ansatz")),
        "n_eval": option(None, "evaluation points, uniform in [0,1]^d with a fixed seed (metrics then also hold "
                               "rms_error)", int, lo=1,
                         none="a 1001 / 101² grid for d ≤ 2, 10000 uniform points for d ≥ 3"),
    }

    def _check(self):
        if self.options["n_interior"] is None:
            self.options["n_interior"] = default_interior_points(self.dim)
        if self.options["boundary_weight"] is None and self.options["u_conditions"] != "ansatz":
            # (left None under the ansatz: no boundary rows to weigh, and the options must rebuild the problem)
            self.options["boundary_weight"] = 10.0 if self.dim == 1 else 100.0
        if self.u_conditions == "ansatz" and self.variant != "product":
            raise ProblemError(f"u_conditions 'ansatz' holds zero Dirichlet data (u = Π 4xᵢ(1 − xᵢ)·N(x)): variant "
                               f"'product' only; variant {self.variant!r} has nonzero boundary values")
        if self.variant == "weinan" and self.dim % 2:
            raise ProblemError(f"variant 'weinan' is a sum of products of coordinate pairs (x₁x₂ + x₃x₄ + …): "
                               f"dim must be even, got {self.dim}")

    def inapplicable(self) -> dict[str, str]:
        if self.u_conditions == "ansatz":  # the data hold exactly: no boundary rows to draw or weigh
            why = "with u_conditions ansatz the Dirichlet data hold exactly: there are no boundary rows"
            return {"n_boundary": why, "boundary_sampling": why, "boundary_weight": why}
        if self.dim == 1:  # the boundary of [0, 1] is its two end points: there is no face to sample
            why = "with dim 1 the boundary is the two end points x = 0 and x = 1"
            return {"n_boundary": why, "boundary_sampling": why}
        return {}

    def bubble(self):
        """``u_conditions ansatz``: u = B·N with ``B = Π 4xᵢ(1 − xᵢ)`` (:func:`~fedsciml.problems.base.
        unit_box_bubble`), zero on every face, so the zero data of variant ``product`` hold for every θ and no
        boundary row is drawn.

        Decision, by measurement (``−Δu = f``, u = Π sin πxᵢ, d = 5, [5, 32, 32, 32, 1], 4000 interior points,
        centralized LM, one thread, 120 solver CPU-s; reproductions/poisson_ansatz.md): rel L2 1.3e-4 with the
        ansatz against 5.6e-2 with the default boundary rows (β = 100; 4.9e-6 with the ansatz at 600) — the
        network then learns N = Π sin πxᵢ / 4xᵢ(1 − xᵢ), between (π/4)^d and 1 and smooth, and no boundary misfit
        is traded against the PDE.  Not the default: the FIPA and anchor reproductions state the boundary as weighted rows, and
        the K-FAC preconditioner has no channel form for B·N (``auto`` takes a dense or Nyström form)."""
        return unit_box_bubble if self.u_conditions == "ansatz" else None

    def input_dim(self):
        return self.dim

    @property
    def paper_method_options(self) -> dict:
        """The FIPA authors' script settings for Poisson d = 3 and 5 (applied by ``solve --preset paper``)."""
        return {"rank": 200, "local_steps": 300, "gamma": 0.5} if self.dim in (3, 5) else {}

    def exact(self, x):
        v = self.variant
        if v == "cos_sum":
            return torch.cos(_PI * x).sum(-1)
        if v == "weinan":
            return x.unflatten(-1, (self.dim // 2, 2)).prod(-1).sum(-1) / WEINAN_NORM.get(self.dim, 1.0)
        if v == "weinan_norm":
            return (x * x).sum(-1) / WEINAN_NORM_SQ
        s = torch.sin(_PI * x)
        return s.prod(-1) if v == "product" else s.sum(-1)

    def source(self, x):
        v = self.variant
        if v == "cos_sum":
            return _PI ** 2 * torch.cos(_PI * x).sum(-1)
        if v == "weinan":
            return torch.zeros_like(x[..., 0])
        if v == "weinan_norm":
            return torch.full_like(x[..., 0], -2.0 * self.dim / WEINAN_NORM_SQ)
        s = torch.sin(_PI * x)
        if v == "product":
            return self.dim * _PI ** 2 * s.prod(-1)
        return _PI ** 2 * s.sum(-1)

    def _strip(self, client, n_clients):
        e = np.linspace(0.0, 1.0, n_clients + 1)
        return e[client], e[client + 1]

    def interior_points(self, client, n_clients, seed):
        a, b = self._strip(client, n_clients)
        d = self.dim
        return sample_box(self.n_interior, [a] + [0.0] * (d - 1), [b] + [1.0] * (d - 1), self.sampling, seed)

    def boundary_points(self, client, n_clients, seed):
        if self.u_conditions == "ansatz":
            return torch.empty(0, self.dim, dtype=DTYPE)
        if self.boundary_sampling == "uniform" and self.dim > 1:
            return box_boundary_uniform(self.dim, 0.0, 1.0, client, n_clients, self.n_boundary, seed)
        return box_boundary_points(self.dim, 0.0, 1.0, client, n_clients, self.n_boundary, self.sampling, seed)

    def rows_per_client(self, n_clients: int) -> int:
        if self.u_conditions == "ansatz":
            return self.pde_rows_per_client(n_clients)
        if self.boundary_sampling == "uniform" and self.dim > 1:
            return self.pde_rows_per_client(n_clients) + -(-int(self.n_boundary) // int(n_clients))
        return super().rows_per_client(n_clients)

    def test_inputs(self):
        d = self.dim
        if self.n_eval is not None:
            gen = np.random.default_rng(20260101 + d)  # fixed test set, independent of the run seed
            return torch.as_tensor(gen.random((self.n_eval, d)), dtype=torch.float64)
        if d == 1:
            return grid(1001, 1)
        if d == 2:
            return grid(101, 2)
        gen = np.random.default_rng(20260101 + d)  # fixed test set, independent of the run seed
        return torch.as_tensor(gen.random((10000, d)), dtype=torch.float64)

    def evaluate(self, theta):
        out = super().evaluate(theta)
        if self.n_eval is not None:  # the K-FAC authors' l2_error: the error's root mean square
            out["rms_error"] = rms_error(self, theta)
        return out


def rms_error(problem, theta) -> float:
    """``√mean((u_θ − u)²)`` on the problem's evaluation set: the K-FAC-for-PINNs authors' ``l2_error``
    (``pinn_utils.l2_error``)."""
    X, u = problem._test()
    X, u = X.to(theta.device), u.to(theta.device)
    with torch.no_grad():
        err = problem.u(theta, X).reshape(u.shape) - u
    return float(err.pow(2).mean().sqrt())


# --- the K-FAC-for-PINNs authors' experiments (Dangel, Müller & Zeinhofer, NeurIPS 2024) --------------------------

#: where every value of the anchors' presets was read: github.com/f-dangel/kfac-pinns-experiments at 83ed050
ANCHOR_REPO = "f-dangel/kfac-pinns-experiments@83ed050, kfac_pinns_exp/"

#: what every anchor preset shares, with where it was read (appended to each preset's doc)
ANCHOR_COMMON = f"""
Shared by the anchors' presets (read in {ANCHOR_REPO}):
* interior points uniform in [0,1]^d (train.py create_interior_data: torch.rand): sampling uniform;
* boundary points uniform on ∂[0,1]^d, a total number (poisson_equation.py square_boundary): boundary_sampling
  uniform;
* loss ½·mean(r_Ω²) + ½·mean(r_∂Ω²) (poisson_equation.evaluate_interior_loss, pinn_utils.evaluate_boundary_loss),
  i.e. fedsciml's ½Σr_Ω² + ½β·Σr_∂Ω² scaled by 1/N_Ω with boundary_weight β = N_Ω/N_∂Ω;
* float64 (train.py --dtype default), tanh MLPs (train.py set_up_layers);
* evaluation on N_eval uniform points of [0,1]^d, N_eval = 10·N_Ω (train.py: N_eval default) unless the sweep sets
  it; their metric l2_error = √mean((u_θ − u)²) is rms_error here (rel_l2 is relative);
* resample 1: fresh points every step, as batch_frequency 1 in their Adam, SGD, ENGD, L-BFGS and Hessian-free
  sweeps (sweeps/*.yaml); their KFAC and KFAC* sweeps use batch_frequency 100 (give --resample 100).
What differs: fedsciml's initialization is N(0, 1/fan_in) weights and zero biases (theirs PyTorch's
default nn.Linear), and the random points are other draws of the same distributions.  The counts are theirs
whatever --method and --clients: the points are drawn once and split among the clients."""


def _anchor(doc: str, **problem) -> Preset:
    resample = problem.pop("resample", 1)
    n_omega = problem["n_interior"]
    opts = {"sampling": "uniform", "boundary_sampling": "uniform", "n_eval": 10 * n_omega,
            "boundary_weight": n_omega / problem["n_boundary"], **problem}
    return Preset(doc.strip() + "\n" + ANCHOR_COMMON, problem=opts, method={"resample": resample})


ANCHORS: dict[str, Preset] = {
    "exp10": _anchor("""
K-FAC for PINNs' Poisson 5d, cos_sum, mlp-tanh-64 (p = 449): exp10_reproduce_poisson5d.
dim 5, variant cos_sum, N_Ω = n_interior 3000, N_∂Ω = n_boundary 500 (sweeps/*.yaml: dim_Omega, boundary_condition,
N_Omega, N_dOmega); network [5, 64, 1] (no model key in the sweeps: train.py --model default mlp-tanh-64);
boundary_weight 3000/500 = 6; n_eval 30000 (10·N_Ω; best_runs/*_meta.csv: N_eval 30000).""",
                     dim=5, variant="cos_sum", n_interior=3000, n_boundary=500, hidden=[64]),
    "exp16": _anchor("""
K-FAC for PINNs' Poisson 5d, cos_sum, mlp-tanh-64-64-48-48 (p = 10065): exp16_poisson5d_deepwide.
dim 5, variant cos_sum, n_interior 3000, n_boundary 500, network [5, 64, 64, 48, 48, 1] (sweeps/*.yaml: model
mlp-tanh-64-64-48-48; their ENGD_full sweep alone used mlp-tanh-64-48-32-16); boundary_weight 6; n_eval 30000.""",
                     dim=5, variant="cos_sum", n_interior=3000, n_boundary=500, hidden=[64, 64, 48, 48]),
    "exp19": _anchor("""
K-FAC for PINNs' Poisson 5d, cos_sum, mlp-tanh-256-256-128-128 (p = 116865): exp19_poisson5d_mlp_tanh_256.
dim 5, variant cos_sum, n_interior 3000, n_boundary 500, network [5, 256, 256, 128, 128, 1] (sweeps/*.yaml: model
mlp-tanh-256-256-128-128); boundary_weight 6; n_eval 30000.""",
                     dim=5, variant="cos_sum", n_interior=3000, n_boundary=500, hidden=[256, 256, 128, 128]),
    "exp21": _anchor("""
K-FAC for PINNs' Poisson 10d, weinan (harmonic), mlp-tanh-256-256-128-128 (p = 118145): exp21_poisson_10d.
dim 10, variant weinan ((x₁x₂ + … + x₉x₁₀)/1.34), n_interior 3000, n_boundary 1000, network
[10, 256, 256, 128, 128, 1] (sweeps/*.yaml: dim_Omega 10, boundary_condition u_weinan, N_Omega 3000, N_dOmega 1000,
model mlp-tanh-256-256-128-128); boundary_weight 3000/1000 = 3; n_eval 30000 (best_runs/*_meta.csv).""",
                     dim=10, variant="weinan", n_interior=3000, n_boundary=1000, hidden=[256, 256, 128, 128]),
    "exp14": _anchor("""
K-FAC for PINNs' Poisson 100d, weinan_norm, mlp-tanh-768-768-512-512 (p ≈ 1.3M): exp14_poisson_100d_weinan.
dim 100, variant weinan_norm (‖x‖²/33.47), network [100, 768, 768, 512, 512, 1], n_eval 30000 (sweeps/*.yaml:
dim_Omega 100, boundary_condition u_weinan_norm, model mlp-tanh-768-768-512-512, N_eval 30000).  The sweeps tuned
N_Ω ∈ [100, 5000], N_∂Ω ∈ [50, 2500] and batch_frequency ∈ [0, 1000] per optimizer (Bayesian search); this takes
their best KFAC* run's (best_runs/kfac-pinns_poisson100d_weinan_norm_v8yirqo2_best_meta.csv, labelled KFAC* in
plot.py): n_interior 175, n_boundary 2086, resample 16; boundary_weight 175/2086.""",
                     dim=100, variant="weinan_norm", n_interior=175, n_boundary=2086,
                     hidden=[768, 768, 512, 512], n_eval=30000, resample=16),
}
Poisson.presets = ANCHORS
