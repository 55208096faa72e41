"""heat-nd (∂ₜu − κΔₓu = 0 on [0,1]^d × [0,1], K-FAC for PINNs' heat 4d): the exact solutions against autograd and
finite differences, the problem's residuals at the exact solution, the one-pass residual against the general Field
path, the defaults the description states, a short solve, and the 1-D ``heat`` untouched."""
import math

import pytest
import torch
from torch.func import grad, hessian, jacrev, vmap

import fedsciml as fs
from fedsciml.problems import DomainPDE
from fedsciml.problems.base import TOTAL_POINTS, ProblemError
from fedsciml.problems.conditions import Dirichlet, Field, Initial, Neumann
from fedsciml.problems.domain import _Residual
from fedsciml.problems.geometry import Interval
from fedsciml.problems.heat_nd import HeatND, heat_jet


def _pointwise(p):
    """The exact solution at one point ``x [d+1]`` (a 0-d tensor)."""
    return lambda y: p.exact(y[None])[0]


@pytest.mark.parametrize("variant", ["sum", "product"])
@pytest.mark.parametrize("dim, k", [(1, 0.25), (2, 0.1), (4, 0.25), (4, 1.3)])
def test_exact_solution_solves_the_heat_equation(variant, dim, k):
    """u_t − κΔₓu of the exact solution: 0 to round-off by autograd (torch.func), and to the central differences'
    error by finite differences (h = 1e-4: u_t's truncation h²/6·|u_ttt| ≤ 2e-9·ρ³ with ρ the decay rate,
    the Laplacian's ≈ 1e-7 plus rounding); independent formulas of u."""
    p = fs.get_problem("heat-nd", dim=dim, k=k, variant=variant)
    x = torch.rand(64, dim + 1, dtype=torch.float64, generator=torch.Generator().manual_seed(dim))
    u = _pointwise(p)
    g, H = vmap(grad(u))(x), vmap(hessian(u))(x)
    res = g[:, -1] - k * torch.diagonal(H, dim1=-2, dim2=-1)[:, :dim].sum(-1)
    scale = float(g.abs().max())
    assert float(res.abs().max()) < 1e-13 * max(1.0, scale), float(res.abs().max())
    # the formula itself, written out here (not the problem's): e^{−4κt} Σ sin 2xᵢ or e^{−dπ²κt} Π sin πxᵢ
    xs, t = x[:, :dim], x[:, dim]
    ref = (torch.exp(-4 * k * t) * torch.sin(2 * xs).sum(1) if variant == "sum"
           else torch.exp(-dim * math.pi ** 2 * k * t) * torch.sin(math.pi * xs).prod(1))
    assert torch.allclose(p.exact(x), ref, rtol=0, atol=1e-15)
    # finite differences on the batch
    h = 1e-4
    e = torch.eye(dim + 1, dtype=torch.float64) * h
    ut = (p.exact(x + e[dim]) - p.exact(x - e[dim])) / (2 * h)
    lap = sum((p.exact(x + e[i]) - 2 * p.exact(x) + p.exact(x - e[i])) / h ** 2 for i in range(dim))
    rate = 4 * k if variant == "sum" else dim * math.pi ** 2 * k
    assert float((ut - k * lap).abs().max()) < 1e-6 + 2e-9 * rate ** 3


@pytest.mark.parametrize("variant", ["sum", "product"])
def test_residual_function_is_zero_at_the_exact_solution(variant):
    """The problem's own equation on a Field that is the exact solution, at random points of the space-time box,
    and every residual row of every client (interior, lateral Dirichlet, initial) with the exact solution as the
    field (the lateral and initial data come from it): ~0."""
    p = fs.get_problem("heat-nd", dim=4, variant=variant, n_interior=60, n_boundary=20)
    x = torch.rand(200, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    f = lambda y: p.exact(y[None]).reshape(1)  # noqa: E731
    r = vmap(lambda y: p.equation(Field(f, p.outputs, p.axes, p.dim, {}), y))(x)
    assert float(r.abs().max()) < 1e-12
    # the network replaced by the exact solution: every part of every client vanishes
    theta = p.init_params(0)
    p._point_fn = lambda th: (lambda y: p.exact(y[None]).reshape(1) + 0.0 * th[0])
    assert not p.uses_forward_residual()      # the instance's field is not the network: the Field path
    objs = p.client_objectives(4, seed=0)
    assert {part.name for part in objs[0].parts} == {"pde", "dirichlet:lateral", "initial"}
    for obj in objs:
        for part, res in zip(obj.parts, obj.part_residuals(theta)):
            assert float(res.abs().max()) < 1e-12, (part.name, float(res.abs().max()))


@pytest.mark.parametrize("dim", [1, 4])
def test_forward_residual_equals_the_field_path(dim):
    """The one-pass interior residual (heat_jet) against the problem's equation through the general Field (nested
    jacrev/jacfwd): residuals and their θ-Jacobians agree to round-off at a random θ."""
    p = fs.get_problem("heat-nd", dim=dim, k=0.3, n_interior=40, n_boundary=5)
    assert p.uses_forward_residual()
    theta = p.init_params(3) + 0.1 * torch.randn(p.n_params, dtype=torch.float64,
                                                 generator=torch.Generator().manual_seed(1))
    obj = p.client_objectives(2, seed=1)[0]
    fast = obj.parts[0]
    assert fast.name == "pde" and not isinstance(fast.fn, _Residual)
    x = fast.points
    slow = _Residual(p, None, 0)
    r_fast, r_slow = vmap(fast.fn, (None, 0))(theta, x), vmap(slow, (None, 0))(theta, x)
    assert torch.allclose(r_fast, r_slow, rtol=1e-12, atol=1e-12)
    J_fast = vmap(jacrev(fast.fn), (None, 0))(theta, x)
    J_slow = vmap(jacrev(slow), (None, 0))(theta, x)
    assert torch.allclose(J_fast, J_slow, rtol=1e-10, atol=1e-11)
    # the jet's value is the network's value
    u, ut, lap = heat_jet(p.network(), theta, x, dim)
    assert torch.allclose(u, p.network()(theta, x), rtol=0, atol=1e-14)


def test_defaults_follow_the_description():
    """Points (totals, 4 clients' worth) grow with d as the description says (Poisson's rule on d + 1), the network is
    [d+1,32,32,32,1], the test set 20000 fixed points of the 5-d box; bad input: one line naming the value."""
    p = fs.get_problem("heat-nd")
    assert (p.dim, p.k, p.variant) == (4, 0.25, "sum")
    assert (p.n_interior, p.n_boundary) == (16000, 1600) and "16000 at d=4" in HeatND.description
    assert p.network().sizes == [5, 32, 32, 32, 1] and p.network().n_params == 2337
    assert (fs.get_problem("heat-nd", dim=1).n_interior, fs.get_problem("heat-nd", dim=1).n_boundary) == (1600, 160)
    assert fs.get_problem("heat-nd", dim=9).n_interior == 32000
    assert fs.get_problem("heat-nd", dim=4, n_interior=123).n_boundary == 1600   # given: kept, the other: default
    X, U = p.reference()
    assert X.shape == (20000, 5) and float(X.min()) >= 0 and float(X.max()) <= 1 and U.shape == (20000, 1)
    assert p.rows_per_client(4) == 4800
    for bad, allowed in [({"dim": 11}, "10"), ({"dim": 0}, "1"), ({"k": 0.0}, "> 0"), ({"variant": "cos"}, "sum")]:
        with pytest.raises(ProblemError) as e:
            fs.get_problem("heat-nd", **bad)
        msg = str(e.value)
        assert "\n" not in msg and list(bad)[0] in msg and allowed in msg, msg


def test_short_solve_reduces_the_error():
    """Centralized Levenberg–Marquardt and federated gn (2 clients) on a small heat 4d: the test error falls."""
    p = fs.get_problem("heat-nd", dim=4, n_interior=150, n_boundary=40)
    e0 = p.evaluate(p.init_params(0))["rel_l2"]
    r = fs.solve(p, method="centralized", clients=2, max_iters=8)
    assert r.history[-1]["rel_l2"] < 0.1 * e0, (e0, r.history[-1]["rel_l2"])
    g = fs.solve(p, method="gn", clients=2, rounds=4)
    assert g.history[-1]["rel_l2"] < 0.5 * e0, (e0, g.history[-1]["rel_l2"])


class _FrozenHeat(DomainPDE):
    """The 1-D ``heat`` as it was defined before heat-nd existed (problems/zoo.py), copied: the registered one must
    give the same numbers bit for bit."""

    name = "heat-frozen-copy"
    geometry = Interval(0.0, 1.0)
    T = 1.0
    hidden = (20, 20, 20)
    default_clients = 4
    params = {"k": fs.option(0.1, "diffusivity k", float, lo=0, lo_open=True),
              "n_interior": fs.option(1200, f"interior collocation points {TOTAL_POINTS}", int, lo=1),
              "n_boundary": fs.option(160, f"points of each boundary/initial condition, {TOTAL_POINTS}", int, lo=1)}

    @property
    def conditions(self):
        return [Dirichlet("x-", 0.0), Neumann("x+", 0.0), Initial(lambda x: torch.sin(math.pi / 2 * x[:, 0]))]

    def equation(self, u, x):
        return u.diff(x, "t") - self.k * u.diff(x, "x", "x")

    def exact(self, x):
        return torch.sin(math.pi / 2 * x[:, 0]) * torch.exp(-self.k * math.pi ** 2 / 4 * x[:, 1])


def test_heat_1d_unchanged_bitwise():
    """``heat`` (1-D) is untouched by heat-nd: its options, residuals, Jacobian and a 3-round gn history equal
    those of the frozen pre-heat-nd definition exactly (same operations in the same order: bitwise)."""
    assert dict(fs.get_problem("heat").options) == dict(_FrozenHeat().options)
    new, old = fs.get_problem("heat", n_interior=80, n_boundary=12), _FrozenHeat(n_interior=80, n_boundary=12)
    assert type(new).__name__ == "Heat" and type(new).__module__ == "fedsciml.problems.zoo"
    assert new.network().sizes == old.network().sizes == [2, 20, 20, 20, 1]
    th = new.init_params(0)
    assert torch.equal(th, old.init_params(0))
    for a, b in zip(new.client_objectives(4, seed=0), old.client_objectives(4, seed=0)):
        ra, Ja = a.residual_and_jacobian(th)
        rb, Jb = b.residual_and_jacobian(th)
        assert torch.equal(ra, rb) and torch.equal(Ja, Jb)
    ha = fs.solve(new, method="gn", clients=4, rounds=3).history
    hb = fs.solve(old, method="gn", clients=4, rounds=3).history
    assert [(h["loss"], h["rel_l2"]) for h in ha] == [(h["loss"], h["rel_l2"]) for h in hb]
