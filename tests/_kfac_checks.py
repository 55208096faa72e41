"""Checks shared by the K-FAC tests (``test_kfac_pinn``, ``test_kfac_taylor``, ``test_input_scaling``).

* :func:`assert_channels_give_each_rows_jacobian`: kfac_pinn's channel quantities reproduce every residual row's
  Jacobian, Σ_s g_{n,s} ã_{n,s}ᵀ = ∂r_n/∂[W | b], layer by layer (weight sharing over the channels).
* :func:`assert_pcg_reaches_dense_lm_step`: a preconditioner changes CG's iterations, not its answer — K-FAC-
  preconditioned CG to ``rtol`` on (JᵀJ + μI)δ = −Jᵀr reaches the dense solve within
  10·cond(JᵀJ + μI)·rtol + 100·cond·eps (the stopping rule bounds the true residual; 10 for the recurrence's drift;
  the eps term for the dense solve's own round-off).
"""
from __future__ import annotations

import torch

from fedsciml.core import kfac_pinn as kp
from fedsciml.core.matfree import GNOperator, damped_gn_step

EPS64 = float(torch.finfo(torch.float64).eps)


def assert_channels_give_each_rows_jacobian(obj, net, theta, J, rtol: float) -> None:
    """Every part, every layer: the channels' Σ g ãᵀ equals the rows of ``J`` within ``rtol``·max|J block|."""
    off = 0
    for part in obj.parts:
        aug, grads = kp.channel_quantities(part.jet, theta, part.points, part.weight)
        rows = J[off:off + part.n_points]
        off += part.n_points
        for l, (w, b, fi, fo) in enumerate(net._layout):
            got = torch.einsum("nso,nsi->noi", grads[l], aug[l])
            ref = torch.cat([rows[:, w:w + fi * fo].reshape(-1, fo, fi), rows[:, b:b + fo].unsqueeze(-1)], -1)
            assert float((got - ref).abs().max()) <= rtol * float(ref.abs().max()), (part.name, l)
    assert off == J.shape[0]


def assert_pcg_reaches_dense_lm_step(obj, theta, factors, rtol: float = 1e-10) -> None:
    """K-FAC-preconditioned CG (``factors.inverse(μ)``) against the dense damped Gauss–Newton step, μ = 1e-3·max diag H."""
    r, J = obj.residual_and_jacobian(theta)
    H = J.T @ J
    mu = 1e-3 * float(H.diagonal().max())
    A = H + mu * torch.eye(H.shape[0], dtype=H.dtype)
    dense = -torch.linalg.solve(A, J.T @ r)
    op = GNOperator(obj.residual, theta)
    res = damped_gn_step(op.matvec, op.g, mu, precond=factors.inverse(mu), rtol=rtol, max_iters=5000)
    assert res.rel_residual <= rtol
    cond = float(torch.linalg.cond(A))
    assert float((res.delta - dense).norm() / dense.norm()) <= 10 * cond * rtol + 100 * cond * EPS64
