"""Derivatives of any order (``u.diff(x, "x", "x", "x", "x")``): exact, under vmap, differentiable in θ.

References, independent of the nested-jvp code: closed forms of an analytic field (exact up to the round-off
of sin/exp, a few ulps: tolerance 1e-12 relative to the derivative's size); torch.autograd's nested
``grad(create_graph=True)`` on a network (reverse mode, other operations: same tolerance); a central
finite-difference stencil of the 4th derivative with its tolerance derived from h (truncation h²/6·|u⁽⁶⁾| with
u⁽⁶⁾ from the same code, plus round-off 16·eps·|u|/h⁴).
"""
import math

import pytest
import torch
from torch.func import jacrev, vmap

import fedsciml as fs
from fedsciml.problems.conditions import Field, Initial, Periodic
from fedsciml.problems.domain import DomainPDE
from fedsciml.problems.geometry import Interval

F64 = torch.float64
EPS = torch.finfo(torch.float64).eps


def analytic(z):
    """Two components of (x, y, t): u = sin(2x) e^{0.3t} cos(y), v = x⁵ t²."""
    return torch.stack([torch.sin(2 * z[0]) * torch.exp(0.3 * z[2]) * torch.cos(z[1]), z[0] ** 5 * z[2] ** 2])


def _field(fn=analytic, names=("u", "v"), axes=("x", "y", "t")):
    return Field(fn, names, axes, len(axes) - 1, {})


@pytest.mark.parametrize("axes, want", [
    (("x", "x", "x", "x"), lambda x, y, t: (16 * torch.sin(2 * x) * torch.exp(0.3 * t) * torch.cos(y), 120 * x * t ** 2)),
    (("x", "x", "t"), lambda x, y, t: (-4 * 0.3 * torch.sin(2 * x) * torch.exp(0.3 * t) * torch.cos(y), 40 * x ** 3 * t)),
    (("t", "x", "x"), lambda x, y, t: (-4 * 0.3 * torch.sin(2 * x) * torch.exp(0.3 * t) * torch.cos(y), 40 * x ** 3 * t)),
    (("x", "y", "t"), lambda x, y, t: (-2 * 0.3 * torch.cos(2 * x) * torch.exp(0.3 * t) * torch.sin(y), 0 * x)),
    (("x",) * 5, lambda x, y, t: (32 * torch.cos(2 * x) * torch.exp(0.3 * t) * torch.cos(y), 120 * t ** 2)),
    ((0, 0, 2, 2, 2), lambda x, y, t: (-4 * 0.027 * torch.sin(2 * x) * torch.exp(0.3 * t) * torch.cos(y), 0 * x)),  # v = x⁵t²: ∂t³ v = 0
])
def test_closed_form_under_vmap(axes, want):
    X = torch.rand(64, 3, generator=torch.Generator().manual_seed(0), dtype=F64) * 2 - 1
    got = vmap(lambda p: _field().diff(p, *axes))(X)                      # the whole system [n, C]
    got_v = vmap(lambda p: _field()["v"].diff(p, *axes))(X)               # one component [n]
    wu, wv = want(X[:, 0], X[:, 1], X[:, 2])
    scale = 64.0 * (1 + X.abs().max()) ** 5
    assert torch.allclose(got[:, 0], wu, rtol=0, atol=1e-12 * scale)
    assert torch.allclose(got[:, 1], wv, rtol=0, atol=1e-12 * scale) and torch.equal(got_v, got[:, 1])


def test_two_axes_path_unchanged_bitwise():
    """≤ 2 axes still read the shared jet (same operations, same order: bitwise equal to the Hessian entry)."""
    x = torch.tensor([0.3, -0.2, 0.7], dtype=F64)
    f = _field()
    assert torch.equal(f.diff(x, "x", "t"), f.hessian(x)[:, 0, 2]) and torch.equal(f.diff(x, "y"), f.grad(x)[:, 1])
    with pytest.raises(fs.ProblemError, match="at least one axis"):
        f.diff(x)
    with pytest.raises(fs.ProblemError, match="unknown axis 'z'"):
        f.diff(x, "x", "x", "z")


class KS(DomainPDE):
    """Kuramoto–Sivashinsky on [0, 2π] × [0, 1] (PINNacle's KS, src/pde/chaotic.py): u_t + αuu_x + βu_xx + γu_xxxx."""

    name = "t-ks"
    geometry = Interval(0.0, 2 * math.pi)
    T = 1.0
    hidden = (12, 12)
    conditions = [Periodic("x"), Initial(lambda x: torch.cos(x[:, 0]) * (1 + torch.sin(x[:, 0])))]

    def equation(self, u, x):
        a, b, g = 100 / 16, 100 / 16 ** 2, 100 / 16 ** 4
        return u.diff(x, "t") + a * u(x) * u.diff(x, "x") + b * u.diff(x, "x", "x") + g * u.diff(x, "x", "x", "x", "x")


def _autograd_diff(net_u, x, axes):
    """The same derivative by nested reverse-mode autograd (create_graph), one point."""
    x = x.detach().clone().requires_grad_(True)
    out = net_u(x)
    for a in axes:
        (g,) = torch.autograd.grad(out, x, create_graph=True)
        out = g[a]
    return out


def test_network_matches_nested_autograd_and_finite_differences():
    p = KS()
    theta = p.init_params(4)
    X = p.domain().sample_interior(16, "uniform", 1)
    ours = vmap(lambda y: p.field(theta).diff(y, "x", "x", "x", "x"))(X)
    mixed = vmap(lambda y: p.field(theta).diff(y, "x", "x", "t"))(X)
    for i in range(4):
        fu = lambda y: p.u(theta, y)  # noqa: E731
        ref = _autograd_diff(fu, X[i], (0, 0, 0, 0)).detach()
        assert abs(float(ours[i] - ref)) <= 1e-11 * max(1.0, abs(float(ref)))
        ref = _autograd_diff(fu, X[i], (0, 0, 1)).detach()
        assert abs(float(mixed[i] - ref)) <= 1e-11 * max(1.0, abs(float(ref)))
    # a 5-point central stencil of ∂⁴/∂x⁴: error ≤ h²/6·max|u⁽⁶⁾| (truncation) + 16·eps·max|u|/h⁴ (round-off)
    h = 2e-2
    u6 = vmap(lambda y: p.field(theta).diff(y, *["x"] * 6))(X).abs()
    for i in range(X.shape[0]):
        pts = X[i] + torch.tensor([[k * h, 0.0] for k in (-2, -1, 0, 1, 2)], dtype=F64)
        v = p.u(theta, pts)
        fd = (v[0] - 4 * v[1] + 6 * v[2] - 4 * v[3] + v[4]) / h ** 4
        tol = 2 * (h ** 2 / 6 * float(u6[i]) + 16 * EPS * float(v.abs().max()) / h ** 4) + 1e-9
        assert abs(float(fd - ours[i])) <= tol, (i, float(fd), float(ours[i]), tol)


def test_jacobian_in_theta_through_fourth_derivative():
    """The residual's Jacobian in θ (what gn/LM take: vmap + jacrev) equals autograd's, point by point."""
    p = KS(n_interior=6, n_boundary=3)
    theta = p.init_params(5) * 1.5
    (obj,) = p.client_objectives(1, seed=2)
    J = obj.jacobian(theta)
    J_ref = obj.jacobian_loop(theta)  # a plain autograd loop over points (reverse mode through the jvps)
    assert torch.allclose(J, J_ref, rtol=1e-10, atol=1e-10 * float(J_ref.abs().max()))
    # and against reverse-over-reverse in x: d/dθ of the autograd u_xxxx at one interior point
    x = obj.parts[0].points[0]
    net = p.network()
    th = theta.detach().clone().requires_grad_(True)
    d4 = _autograd_diff(lambda y: net(th[: net.n_params], y).reshape(()), x, (0, 0, 0, 0))
    (g,) = torch.autograd.grad(d4, th)
    ours = jacrev(lambda t: p.field(t).diff(x, "x", "x", "x", "x"))(theta)
    assert torch.allclose(ours, g, rtol=1e-10, atol=1e-10 * float(g.abs().max()))


def test_the_memory_estimate_charges_the_nested_passes_of_a_fourth_derivative():
    """A derivative of order k ≥ 3 is k nested forward passes (2^k primal evaluations a point, each kept for the
    θ-graph): the field counts them (``nested_channels``: Σ 2^k over the distinct derivatives taken), the problem
    reads them off its one-point probe of the equation, and the operator's per-row charge grows by
    ``NESTED_HIGHER·2^k·Σ hidden`` — KS's u_xxxx adds 16; u_xxt 8 more; a second-order equation adds nothing.
    Integer and exact-float arithmetic on both sides (bitwise)."""
    from fedsciml.runtime.memory import NESTED_HIGHER, nested_graph, operator_graph_floats

    p = KS()
    u = p.field(p.init_params(0))
    x = p.domain().sample_interior(1, "uniform", 0)[0]
    assert u.nested_channels() == 0
    u.diff(x, "x", "x")  # second order: the shared jet, no nested pass
    assert u.nested_channels() == 0
    u.diff(x, "x", "x", "x", "x")
    u.diff(x, "x", "x", "x", "x")  # the same derivative again: cached, counted once
    assert u.nested_channels() == 16
    u.diff(x, "x", "t", "x")
    assert u.nested_channels() == 16 + 8
    # the problem's charge: no K-FAC pass (a fourth derivative has no K-FAC channel form), 16 channels
    assert p.nested_graph_floats("auto") == nested_graph(2, [12, 12], kfac=False, higher=16)
    assert operator_graph_floats(p, "auto") == nested_graph(2, [12, 12], kfac=False) + NESTED_HIGHER * 16 * 24

    class Burgers(KS):
        def equation(self, u, x):
            return u.diff(x, "t") + u(x) * u.diff(x, "x") - 0.01 * u.diff(x, "x", "x")

    assert Burgers().nested_graph_floats("auto") == nested_graph(2, [12, 12], kfac=True)
