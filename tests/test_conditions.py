"""Conditions on named boundary parts, time, systems, a hard constraint: each against a known solution.

Two checks per condition type: (1) the residual of the exact solution is ~0 at every row (round-off: the
closed forms and the derivatives by torch.func agree to ~1e-12), and (2) a small federated gn solve
reaches the solution (tolerances far above round-off, far below an unsolved network's error ~1).
"""
import math

import pytest
import torch

import fedsciml as fs
from fedsciml.problems.conditions import Data, Dirichlet, Initial, Neumann, Periodic, Robin
from fedsciml.problems.domain import DomainPDE
from fedsciml.problems.geometry import Box, Interval, LShape

PI = math.pi


class Mixed(DomainPDE):
    """−Δu = f on [0,1]², u = sin(πx)(1 + y²): Dirichlet on x±, Neumann on y−, Robin on y+."""

    name = "t-mixed"
    geometry = Box([0, 0], [1, 1])
    hidden = (16, 16)
    conditions = [Dirichlet("x-", 0.0), Dirichlet("x+", 0.0), Neumann("y-", 0.0),
                  Robin("y+", 1.0, 1.0, lambda x: 4 * torch.sin(PI * x[:, 0]))]   # u + ∂u/∂y = 2s + 2s at y = 1

    def equation(self, u, x):
        s = torch.sin(PI * x[0])
        return -u.laplacian(x) - (PI ** 2 * s * (1 + x[1] ** 2) - 2 * s)

    def exact(self, x):
        return torch.sin(PI * x[:, 0]) * (1 + x[:, 1] ** 2)


class PeriodicX(DomainPDE):
    """−Δu = 2π² sin(πx) sin(πy) on [0,2] × [0,1], u = sin(πx) sin(πy): periodic in x (period 2), Dirichlet on y±."""

    name = "t-periodic"
    geometry = Box([0, 0], [2, 1])
    hidden = (16, 16)
    conditions = [Periodic("x"), Dirichlet("y-", 0.0), Dirichlet("y+", 0.0)]

    def equation(self, u, x):
        return -u.laplacian(x) - 2 * PI ** 2 * torch.sin(PI * x[0]) * torch.sin(PI * x[1])

    def exact(self, x):
        return torch.sin(PI * x[:, 0]) * torch.sin(PI * x[:, 1])


class Wave(DomainPDE):
    """u_tt = u_xx on [0,1] × [0, 0.5], u = sin(πx)(cos πt + sin(πt)/π): initial value and velocity."""

    name = "t-wave"
    geometry = Interval(0, 1)
    T = 0.5
    hidden = (16, 16)
    conditions = [Dirichlet("x-", 0.0), Dirichlet("x+", 0.0),
                  Initial(lambda x: torch.sin(PI * x[:, 0]), velocity=lambda x: torch.sin(PI * x[:, 0]))]

    def equation(self, u, x):
        return u.diff(x, "t", "t") - u.diff(x, "x", "x")

    def exact(self, x):
        return torch.sin(PI * x[:, 0]) * (torch.cos(PI * x[:, 1]) + torch.sin(PI * x[:, 1]) / PI)


class HardLShape(DomainPDE):
    """−Δu = 2π² sin πx sin πy on the L-shape... with u = sin(πx) sin(πy) and the hard ansatz
    u = (1 − x²)(1 − y²)·xy·N: zero on every edge of the L-shape (x = 0, y = 0, |x| = 1, |y| = 1)."""

    name = "t-hard"
    geometry = LShape()
    hidden = (16, 16)
    conditions = []

    def ansatz(self, x, out):
        return (1 - x[0] ** 2) * (1 - x[1] ** 2) * x[0] * x[1] * out

    def equation(self, u, x):
        return -u.laplacian(x) - 2 * PI ** 2 * torch.sin(PI * x[0]) * torch.sin(PI * x[1])

    def exact(self, x):
        return torch.sin(PI * x[:, 0]) * torch.sin(PI * x[:, 1])


class System(DomainPDE):
    """−Δu = f, −Δv + u = g on [0,1]², (u, v) = (sin πx sin πy, xy): a condition per component."""

    name = "t-system"
    geometry = Box([0, 0], [1, 1])
    outputs = ("u", "v")
    hidden = (16, 16)
    conditions = [Dirichlet("boundary", component="u"), Dirichlet("boundary", component="v")]

    def equation(self, u, x):
        s = torch.sin(PI * x[0]) * torch.sin(PI * x[1])
        return (-u["u"].laplacian(x) - 2 * PI ** 2 * s, -u["v"].laplacian(x) + u["u"](x) - s)

    def exact(self, x):
        return torch.stack([torch.sin(PI * x[:, 0]) * torch.sin(PI * x[:, 1]), x[:, 0] * x[:, 1]], 1)


def _with_exact_field(cls):
    """The same problem whose 'network' is the exact solution (θ ignored): every residual row must be ~0."""

    class E(cls):
        name = cls.name + "-exact"

        def _point_fn(self, theta):
            C = len(self.outputs)
            return lambda x: self.exact(x[None]).reshape(C) + 0.0 * theta[0]

    return E


@pytest.mark.parametrize("cls", [Mixed, PeriodicX, Wave, System])
def test_exact_solution_has_zero_residual(cls):
    p = _with_exact_field(cls)(n_interior=40, n_boundary=10, sampling="sobol")
    theta = p.init_params(0)
    for obj in p.client_objectives(2, seed=0):
        for part, r in zip(obj.parts, obj.part_residuals(theta)):
            assert float(r.abs().max()) < 1e-10, part.name


@pytest.mark.parametrize("cls, rounds, tol", [(Mixed, 40, 5e-3), pytest.param(PeriodicX, 70, 2e-2, marks=pytest.mark.slow), (Wave, 40, 2e-2),
                                              (HardLShape, 40, 1e-3), (System, 40, 5e-2)])
def test_small_federated_solve_reaches_solution(cls, rounds, tol):
    # small and short (the error starts at ~1); the zoo script measures the precision targets
    p = cls(n_interior=120, n_boundary=20)                      # totals: 60 and 10 per client
    r = fs.solve(p, method="gn", clients=2, rounds=rounds)
    assert r.final["rel_l2"] < tol, r.final
    if cls is System:
        assert r.final["rel_l2_u"] < tol and r.final["rel_l2_v"] < tol


def test_hard_constraint_is_exact_on_the_boundary():
    p = HardLShape()
    theta = p.init_params(3)
    xb = p.domain().sample_boundary(200, "uniform", 0)
    assert float(p.u(theta, xb).abs().max()) < 1e-15


def test_parts_are_named_and_split_by_owner():
    p = Mixed(n_interior=120, n_boundary=32)
    objs = p.client_objectives(4, seed=1)
    names = {q.name for o in objs for q in o.parts}
    assert names == {"pde", "dirichlet:x-", "dirichlet:x+", "neumann:y-", "robin:y+"}
    # x− belongs to the first strip, x+ to the last; y± are shared out: 32 points in all (a total), each once
    assert [any(q.name == "dirichlet:x-" for q in o.parts) for o in objs] == [True, False, False, False]
    ys = torch.cat([q.points[0] for o in objs for q in o.parts if q.name == "neumann:y-"])
    assert ys.shape[0] == 32 and torch.unique(ys, dim=0).shape[0] == 32
    for k, o in enumerate(objs):
        x = [q.points for q in o.parts if q.name == "pde"][0]
        assert bool(((x[:, 0] >= k / 4 - 1e-12) & (x[:, 0] <= (k + 1) / 4 + 1e-12)).all())


def test_bad_declarations_fail_with_one_line():
    class NoPart(Mixed):
        name = "t-nopart"
        conditions = [Dirichlet("z+", 0.0)]

    with pytest.raises(fs.ProblemError, match=r"no boundary part 'z\+'"):
        NoPart()

    class BadComp(System):
        name = "t-badcomp"
        conditions = [Dirichlet("boundary", component="w")]

    with pytest.raises(fs.ProblemError, match="unknown component 'w'; this problem's outputs are"):
        BadComp()

    class Unnamed(System):
        name = "t-unnamed"
        conditions = [Dirichlet("boundary")]

    with pytest.raises(fs.ProblemError, match="name the component"):
        Unnamed()

    class Outside(Mixed):
        name = "t-outside"
        conditions = [Dirichlet("x-", 0.0), Data(x=[[0.5, 0.5], [1.5, 0.5]], y=[0.0, 0.0])]

    with pytest.raises(fs.ProblemError, match=r"measurement point \[1.5, 0.5\] lies outside the domain"):
        Outside().client_objectives(2)

    class NoTime(Mixed):
        name = "t-notime"
        conditions = [Initial(0.0)]

    with pytest.raises(fs.ProblemError, match="needs a space-time problem"):
        NoTime().client_objectives(1)

    with pytest.raises(fs.ProblemError, match="unknown axis 's'"):
        Wave().field(Wave().init_params(0)).diff(torch.zeros(2, dtype=torch.float64), "s")
