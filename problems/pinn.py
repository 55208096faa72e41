"""Physics-informed least squares: ``−Δu + G(u, x) = f`` with Dirichlet data.

Residual rows (FIPA paper Eqs. 7–9, with the weight inside the residual so the
loss, gradient and curvature agree):

* interior, one per collocation point: ``−Δu_θ(x) + G(u_θ(x), x) − f(x)``
* boundary, one per boundary point: ``√β · (u_θ(x) − g(x))``, ``g`` = exact solution

``Δu_θ`` comes out of the same forward pass as ``u_θ`` (the network carries its
input Jacobian and Laplacian layer by layer, :meth:`fedsciml.core.nn.MLP.value_and_laplacian`);
:func:`laplacian` (trace of the nested-``jacfwd`` Hessian) is the general
fallback.  The Jacobian in θ is then ``vmap`` over points of ``jacrev`` (see
:mod:`fedsciml.core.objective`).
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
from torch.func import jacfwd

from fedsciml.options import option

from .base import (SAMPLING, TOTAL_POINTS, FieldProblem, Preset, ResidualPart, sample_box, split_by_rank,
                   split_by_strip)
def laplacian(u, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``Δ_x u(θ, x)`` at one point ``x [d]`` (u returns a 0-d tensor)."""
    H = jacfwd(jacfwd(u, argnums=1), argnums=1)(theta, x)
    return torch.diagonal(H, dim1=-2, dim2=-1).sum(-1)


def pinn_params(n_interior: int, boundary_weight: float) -> dict:
    """Options of the 1D PDEs.  ``n_boundary`` repeats each Dirichlet end point: the FIPA reference code uses
    20 copies, which weighs the boundary 20× more in ``J_mᵀJ_m`` (and in a sum-form loss) — not in its
    per-part mean local loss (``LocalConfig(loss='parts')``)."""
    return {
        "n_interior": option(n_interior, f"interior collocation points {TOTAL_POINTS}", int, lo=1),
        "n_boundary": option(1, "copies of each Dirichlet end point (1D; the FIPA reference code uses 20)", int, lo=1),
        "boundary_weight": option(boundary_weight, "boundary penalty β (weight of squared boundary residuals)", float, lo=0, lo_open=True),
        "sampling": SAMPLING,
    }


class PINNProblem(FieldProblem):
    kind: ClassVar[str] = "pinn"
    metric: ClassVar[str] = "rel_l2"
    #: collocation points are drawn from a seed, so ``resample=K`` can draw fresh ones (fedsciml.runtime.resample)
    samples_collocation: ClassVar[bool] = True

    # --- the equation ---------------------------------------------------------
    def reaction(self, u: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """G(u, x); zero for Poisson."""
        return torch.zeros_like(u)

    def source(self, x: torch.Tensor) -> torch.Tensor:
        """f at a point ``x [d]`` (or a batch ``[n, d]``)."""
        raise NotImplementedError

    def u_and_laplacian(self, theta, x):
        """``(u_θ(x), Δu_θ(x))`` at one point: one forward pass that carries the
        input Jacobian and Laplacian (:meth:`fedsciml.core.nn.MLP.value_and_laplacian`)
        for the default network; nested ``jacfwd`` otherwise."""
        net = self.network()
        if getattr(net, "has_forward_laplacian", False) and type(self).u is FieldProblem.u:
            bubble = self.bubble()
            if bubble is None:
                return net.value_and_laplacian(theta, x)
            # u = B·N: Δu = BΔN + 2∇B·∇N + NΔB, from the network's one forward pass and B's closed form
            n, gn, ln = net.value_gradient_laplacian(theta, x)
            b, gb, lb = bubble(x)
            return b * n, b * ln + 2.0 * (gb * gn).sum(-1) + n * lb
        return self.u(theta, x), laplacian(self.u, theta, x)

    def jets(self):
        """``(interior, boundary)`` :class:`~fedsciml.core.kfac_pinn.Jet` of the residual parts — how they are
        computed from the network's channels, for the K-FAC-for-PINNs preconditioner — or ``(None, None)``
        when the interior residual does not come out of the forward Laplacian (another activation, an ansatz,
        :meth:`bubble`'s hard constraint)."""
        from fedsciml.core.kfac_pinn import Jet

        net, cls = self.network(), type(self)
        if not (getattr(net, "has_forward_laplacian", False) and cls.u is FieldProblem.u
                and cls.u_and_laplacian is PINNProblem.u_and_laplacian and self.bubble() is None):
            return None, None
        interior = (Jet("jet", net, lambda u, grad, lap, x: -lap + self.reaction(u, x) - self.source(x))
                    if cls.interior_residual is PINNProblem.interior_residual else None)
        boundary = (Jet("value", net, lambda u, point: u - point[1])
                    if cls.boundary_residual is PINNProblem.boundary_residual else None)
        return interior, boundary

    def interior_residual(self, theta, x):
        u, lap = self.u_and_laplacian(theta, x)
        return -lap + self.reaction(u, x) - self.source(x)

    def boundary_residual(self, theta, point):
        x, g = point
        return self.u(theta, x) - g

    def boundary_value(self, x: torch.Tensor) -> torch.Tensor:
        """Dirichlet data g at boundary points ``x [n, d]``: the exact solution."""
        return self.exact(x)

    # --- the domain and its split among clients -------------------------------
    def interior_points(self, client: int, n_clients: int, seed) -> torch.Tensor:
        """The ``n_interior`` points of client strip ``client`` of ``n_clients`` (called with ``(0, 1)``: the
        whole domain, which :meth:`client_objectives` then splits)."""
        raise NotImplementedError

    def boundary_points(self, client: int, n_clients: int, seed) -> torch.Tensor:
        """The boundary points of client strip ``client`` of ``n_clients`` (called with ``(0, 1)``, as above)."""
        raise NotImplementedError

    def x1_range(self) -> tuple[float, float]:
        """The domain's extent along x₁, which the clients' strips cut."""
        return 0.0, 1.0

    def pde_rows_per_client(self, n_clients: int) -> int:
        return -(-int(self.n_interior) // int(n_clients))

    def rows_per_client(self, n_clients: int) -> int:
        d, K = self.input_dim(), int(n_clients)
        nb = 2 * d * self.options.get("n_boundary", 1)
        return self.pde_rows_per_client(K) + (nb // 2 if d == 1 and K > 1 else -(-nb // K))

    def client_objectives(self, n_clients: int, seed: int = 0, device="cpu"):
        """Each client's objective.  One problem, one set of points: ``n_interior`` and the boundary points are
        drawn once for the whole domain (seeds ``[seed, 0, 0]`` and ``[seed, 0, 1]``, whatever the number of
        clients) and dealt out — the interior by rank along x₁ (:func:`~fedsciml.problems.base.split_by_rank`:
        ``⌊n/K⌋`` points each, one more for the first ``n mod K`` clients), the boundary by the equal strip
        along x₁ that holds each point (:func:`~fedsciml.problems.base.split_by_strip`) — so a centralized run
        and a federated one with any number of clients see the same pooled points."""
        self.check_clients(n_clients)
        K = int(n_clients)
        xi_all = self.interior_points(0, 1, [seed, 0, 0])
        xb_all = self.boundary_points(0, 1, [seed, 0, 1])
        lo, hi = self.x1_range()
        ii, ib = split_by_rank(xi_all[:, 0], K), split_by_strip(xb_all[:, 0], lo, hi, K)
        jet_i, jet_b = self.jets()
        objs = []
        for k in range(K):
            xi, xb = xi_all[ii[k]].to(device), xb_all[ib[k]].to(device)
            parts = [ResidualPart("interior", self.interior_residual, xi, 1.0, jet_i)]
            if xb.shape[0]:
                parts.append(ResidualPart("boundary", self.boundary_residual, (xb, self.boundary_value(xb)),
                                          self.boundary_weight, jet_b))
            objs.append(self.objective(parts))
        return objs


class PDE1D(PINNProblem):
    """1D problems on [0, 1]; the ``n_interior`` points (a total) are drawn once on [0, 1] and client k owns the
    k-th run of them in x (:meth:`PINNProblem.client_objectives`); x = 0 belongs to the first client and x = 1
    to the last."""

    space_dim = 1
    #: the FIPA reference code's collocation settings (applied by ``solve --preset paper`` unless given)
    paper_options: ClassVar[dict] = {"n_interior": 400, "n_boundary": 20, "boundary_weight": 10.0}
    presets: ClassVar[dict] = {"paper": Preset(
        "fipa as published (fedsciml.methods.fipa.PAPER_PRESET) with its code's collocation: 400 points, ends ×20, β = 10",
        problem=paper_options, method={"preset": "paper"})}

    def interior_points(self, client, n_clients, seed):
        e = np.linspace(0.0, 1.0, n_clients + 1)
        return sample_box(self.n_interior, [e[client]], [e[client + 1]], self.sampling, seed)

    def boundary_points(self, client, n_clients, seed):
        pts = []
        if client == 0:
            pts.append(0.0)
        if client == n_clients - 1:
            pts.append(1.0)
        return torch.tensor(pts, dtype=torch.float64).repeat_interleave(self.n_boundary).reshape(-1, 1)

    def test_inputs(self):
        return torch.linspace(0.0, 1.0, 1001, dtype=torch.float64).reshape(-1, 1)
