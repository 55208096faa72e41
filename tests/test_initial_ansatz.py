"""A hard constraint for an initial condition and a Dirichlet condition on a box in space:
``initial_box_ansatz(lo, hi, t0, T, g, h)`` gives ``u = S[h](x, t) + g(x) − S[h](x, t0) + (t − t0)/(T − t0)·B(x)·N``.

Closed forms: with ``h`` 0 it is ``g + (t − t0)/(T − t0)·Π 4(x_i − lo_i)(hi_i − x_i)/(hi_i − lo_i)²·N``; the
transfinite interpolation S reproduces a sum of functions of one spatial axis (and t) each, so there
``A = h(x, t) + g(x) − h(x, t0)`` everywhere; for any h, u = h on the faces and u = g at t0 where g agrees with h
there, whatever N."""
import math

import pytest
import torch
from torch.func import hessian, vmap

from fedsciml.problems.base import ProblemError
from fedsciml.problems.domain import initial_box_ansatz

EPS = torch.finfo(torch.float64).eps


def _points(lo, hi, t0, T, n, seed):
    g = torch.Generator().manual_seed(seed)
    lo_t, hi_t = torch.tensor(lo + [t0], dtype=torch.float64), torch.tensor(hi + [T], dtype=torch.float64)
    return lo_t + (hi_t - lo_t) * torch.rand(n, len(lo) + 1, dtype=torch.float64, generator=g)


def _bubble(X, lo, hi):
    lo_t, hi_t = torch.tensor(lo, dtype=torch.float64), torch.tensor(hi, dtype=torch.float64)
    return torch.prod(4 * (X - lo_t) * (hi_t - X) / (hi_t - lo_t) ** 2, 1)


def g2(y):
    return torch.sin(3 * y[:, 0]) * torch.cos(y[:, 1]) + y[:, 0] * y[:, 1]


def test_zero_boundary_is_the_initial_value_plus_the_bubble_times_the_network():
    """h = 0: u = g(x, t0) + (t − t0)/(T − t0)·B(x)·N; g is read at t = t0 (it depends on t here, to show it).  A few
    products of O(1) terms: tolerance 10 eps."""
    lo, hi, t0, T = [0.0, -1.0], [1.0, 2.0], 0.5, 3.0
    f = initial_box_ansatz(lo, hi, t0, T, lambda y: g2(y) + y[:, 2] ** 2)
    Y = _points(lo, hi, t0, T, 40, 0)
    N = torch.linspace(-2, 2, 40, dtype=torch.float64)[:, None]
    Y0 = Y.clone()
    Y0[:, 2] = t0
    want = g2(Y0) + t0 ** 2 + (Y[:, 2] - t0) / (T - t0) * _bubble(Y[:, :2], lo, hi) * N[:, 0]
    assert torch.allclose(vmap(f)(Y, N), want, rtol=0, atol=10 * 4 * EPS)


def test_a_boundary_of_one_axis_each_is_reproduced_inside():
    """h = Σ_i f_i(x_i, t) (one spatial axis each, any t): S[h] = h everywhere, so with N = 0,
    u = h(x, t) + g(x) − h(x, t0).  S adds 3^d − 1 = 8 terms of size ≤ 10 (twice): tolerance 2·8·10·10 eps."""
    lo, hi, t0, T = [0.0, -1.0], [1.0, 2.0], 0.0, 2.0

    def h(y):
        return torch.exp(y[:, 0]) * (1 + y[:, 2]) + y[:, 1] ** 3 * torch.cos(y[:, 2])

    f = initial_box_ansatz(lo, hi, t0, T, g2, h)
    Y = _points(lo, hi, t0, T, 40, 1)
    Y0 = Y.clone()
    Y0[:, 2] = t0
    got = vmap(f)(Y, torch.zeros(40, 1, dtype=torch.float64))
    assert torch.allclose(got, h(Y) + g2(Y0) - h(Y0), rtol=0, atol=2 * 8 * 100 * EPS)


def test_it_holds_the_boundary_on_every_face_and_the_initial_value_at_t0_whatever_the_network():
    """A non-separable h (x²y² e^t + sin(xy + t)) and g = h(·, t0) + a term vanishing on the faces: u = h on the four
    faces at every t and u = g at t0, for outputs 0, −3 and 1e3 (B = 0 there exactly).  Tolerance 2·8·10·10 eps."""
    lo, hi, t0, T = [0.0, -1.0], [1.0, 2.0], 0.25, 1.0

    def h(y):
        return y[:, 0] ** 2 * y[:, 1] ** 2 * torch.exp(y[:, 2]) + torch.sin(y[:, 0] * y[:, 1] + y[:, 2])

    def g(y):
        return h(y) + _bubble(y[:, :2], lo, hi) * torch.cos(5 * y[:, 0])

    f = initial_box_ansatz(lo, hi, t0, T, g, h)
    s = torch.linspace(0, 1, 9, dtype=torch.float64)
    t = t0 + (T - t0) * torch.linspace(0, 1, 9, dtype=torch.float64).flip(0)
    faces = torch.cat([torch.stack([torch.zeros(9), -1 + 3 * s, t], 1), torch.stack([torch.ones(9), -1 + 3 * s, t], 1),
                       torch.stack([s, -torch.ones(9), t], 1), torch.stack([s, 2 * torch.ones(9), t], 1)]).double()
    start = _points(lo, hi, t0, T, 30, 2)
    start[:, 2] = t0
    for out in (0.0, -3.0, 1e3):
        got = vmap(f)(faces, torch.full((faces.shape[0], 1), out, dtype=torch.float64))
        assert torch.allclose(got, h(faces), rtol=0, atol=2 * 8 * 100 * EPS)
        got0 = vmap(f)(start, torch.full((30, 1), out, dtype=torch.float64))
        assert torch.allclose(got0, g(start), rtol=0, atol=2 * 8 * 100 * EPS)


def test_its_derivatives_are_the_closed_forms():
    """h = 0, N = 1 on [0, 1] × [0, 2]: u = g + t/2·B with B = 4x(1 − x); ∂u/∂t = B/2 and ∂²u/∂x² = g'' − 4t
    (autodiff through the ansatz under vmap; a few flops: 100 eps)."""
    f = initial_box_ansatz([0.0], [1.0], 0.0, 2.0, lambda y: torch.sin(2 * y[:, 0]))
    Y = _points([0.0], [1.0], 0.0, 2.0, 12, 3)
    Hs = vmap(hessian(lambda y: f(y, torch.ones(1, dtype=torch.float64))))(Y)
    grads = vmap(torch.func.grad(lambda y: f(y, torch.ones(1, dtype=torch.float64))))(Y)
    x, t = Y[:, 0], Y[:, 1]
    assert torch.allclose(grads[:, 1], 2 * x * (1 - x), rtol=0, atol=100 * EPS)
    assert torch.allclose(Hs[:, 0, 0], -4 * torch.sin(2 * x) - 4 * t, rtol=0, atol=100 * EPS)


@pytest.mark.parametrize("args, match", [
    (([0.0, 1.0], [1.0, 1.0], 0.0, 1.0, g2), "lo < hi"),
    (([0.0], [1.0], 1.0, 1.0, g2), "T > t0"),
    (([0.0], [1.0], 0.0, 1.0, 3.0), "initial must be a function"),
    (([0.0], [1.0], 0.0, 1.0, g2, "zero"), "boundary must be a finite number or a function"),
    (([0.0], [1.0], 0.0, 1.0, g2, math.inf), "boundary must be a finite number or a function"),
])
def test_it_refuses_a_bad_box_time_or_value_in_one_line(args, match):
    with pytest.raises(ProblemError, match=match):
        initial_box_ansatz(*args)


HARD = initial_box_ansatz([0.0], [1.0], 0.0, 1.0, lambda y: torch.sin(math.pi * y[:, 0]))


def test_a_problem_with_no_condition_solves_through_the_ansatz():
    """docs/pde.md's example (u_t = u_xx, u = sin πx at t = 0, 0 at x = 0, 1; exact e^{−π²t} sin πx) on a small
    network: no condition listed, every row a PDE row, and LM reaches a relative error below 3e-2 (measured 9.2e-3
    after 15 steps at one thread; the bound leaves room for other thread counts' round-off) from 1e-1 or more
    at θ₀.  About 4 CPU-s."""
    import fedsciml as fs
    from fedsciml.problems.geometry import Interval

    class Heat(fs.DomainPDE):
        name = "t-heat-hard"
        geometry, T = Interval(0.0, 1.0), 1.0
        conditions: list = []

        def ansatz(self, x, out):
            return HARD(x, out).reshape(1)

        def equation(self, u, x):
            return u.diff(x, "t") - u.diff(x, "x", "x")

        def exact(self, x):
            return torch.exp(-math.pi ** 2 * x[:, 1]) * torch.sin(math.pi * x[:, 0])

    p = Heat(hidden=[10, 10], n_interior=300)
    assert [q.name for q in p.centralized_objective().parts] == ["pde"]
    assert p.evaluate(p.init_params(0))["rel_l2"] > 1e-1
    r = fs.solve(p, "centralized", max_iters=15)
    assert r.final["rel_l2"] < 3e-2
