"""Geometry: points inside, on the boundary, unit outward normals (against closed forms), CSG, partitions."""
import math

import pytest
import torch

from fedsciml.problems.base import ProblemError
from fedsciml.problems.geometry import (SAMPLINGS, Ball, Box, ByFunction, Disk, Grid, Interval, LShape, Polygon,
                                        SpaceTime, Strips, make_partition)


@pytest.mark.parametrize("method", SAMPLINGS)
def test_interior_points_inside(method):
    for g in (Box([0, -1], [2, 1]), Disk([0.5, 0.5], 0.3), LShape(), Box([0, 0], [1, 1]) - Disk([0.5, 0.5], 0.2),
              Ball([0, 0, 0], 1.0)):
        x = g.sample_interior(300, method, seed=[1, 2])
        assert x.shape == (300, g.dim) and bool(g.contains(x).all())
    # the L-shape's removed quadrant (0, 1] × [−1, 0) holds no point
    x = LShape().sample_interior(400, method, 0)
    assert not bool(((x[:, 0] > 1e-9) & (x[:, 1] < -1e-9)).any())


def test_sampling_seeded_and_uniform_in_measure():
    g = Disk([0, 0], 1.0)
    a, b = g.sample_interior(200, "sobol", 3), g.sample_interior(200, "sobol", 3)
    assert torch.equal(a, b)
    # uniform in area: E|x|² = r²/2 on the unit disk (Monte Carlo tolerance)
    x = g.sample_interior(4000, "uniform", 0)
    assert abs(float((x ** 2).sum(1).mean()) - 0.5) < 0.02
    # boundary points of Box − Disk fall on the circle in proportion to its length: 2π·0.5 / (8 + π)
    h = Box([-1, -1], [1, 1]) - Disk([0, 0], 0.5)
    xb = h.sample_boundary(4000, "uniform", 1)
    share = float(((xb.norm(dim=1) - 0.5).abs() < 1e-9).double().mean())
    assert abs(share - math.pi / (8 + math.pi)) < 0.02


def _closed_form_normal_checks(g, x, n):
    assert bool(g.on_boundary(x).all())
    assert torch.allclose(n.norm(dim=1), torch.ones(len(n), dtype=n.dtype), atol=1e-14)
    assert torch.allclose(g.normal(x), n)
    h = 1e-4  # outward: a small step along n leaves the domain, a step against it stays inside
    assert bool((~g.contains(x + h * n)).all()) and bool(g.contains(x - h * n).all())


@pytest.mark.parametrize("method", ["lhs", "sobol"])
def test_boundary_normals_closed_forms(method):
    d = Disk([0.2, -0.1], 0.7)
    x, n = d.sample_boundary(200, method, 0, with_normals=True)
    _closed_form_normal_checks(d, x, n)
    assert torch.allclose(n, (x - torch.tensor([0.2, -0.1], dtype=x.dtype)) / 0.7, atol=1e-12)
    b = Box([0, 0, 0], [1, 2, 3])
    x, n = b.sample_boundary(300, method, 0, with_normals=True)
    _closed_form_normal_checks(b, x, n)
    # on a box face the normal is ±e_axis: the coordinate along it sits at the bound
    axis = n.abs().argmax(1)
    val = x.gather(1, axis[:, None]).squeeze(1)
    hi = torch.tensor([1.0, 2.0, 3.0], dtype=x.dtype)[axis]
    expect = torch.where(n.sum(1) > 0, hi, torch.zeros_like(hi))
    assert torch.allclose(val, expect)
    L = LShape()
    x, n = L.sample_boundary(300, method, 0, with_normals=True)
    _closed_form_normal_checks(L, x, n)
    # the re-entrant edges: e0 (y = 0, 0 ≤ x ≤ 1) has normal −e_y, e5 (x = 0, −1 ≤ y ≤ 0) has −e_x... outward of L
    x0 = L.sample_boundary(20, method, 0, part="e0")
    assert torch.allclose(x0[:, 1], torch.zeros(20, dtype=x0.dtype)) and torch.allclose(
        L.normal(x0), torch.tensor([0.0, -1.0], dtype=x0.dtype).expand(20, 2))
    x5 = L.sample_boundary(20, method, 0, part="e5")
    assert torch.allclose(L.normal(x5), torch.tensor([1.0, 0.0], dtype=x5.dtype).expand(20, 2))


def test_csg_boundaries_and_normals():
    sq = Box([0, 0], [1, 1])
    cases = [
        Box([-1, -1], [1, 1]) - Box([0, -1], [1, 0]),   # the L-shape by difference
        sq | Box([1, 0], [2, 1]),                        # a shared face disappears
        Disk([0, 0], 1) & Box([0, 0], [2, 2]),           # a quarter disk
        sq - Disk([0.5, 0.5], 0.25),                     # a hole
        (Box([0, 0], [2, 1]) | Disk([2, 0.5], 0.5)) - Disk([0.5, 0.5], 0.2),
    ]
    for g in cases:
        x, n = g.sample_boundary(400, "halton", 2, with_normals=True)
        _closed_form_normal_checks(g, x, n)
    # the union has no boundary point on its inner face x = 1, 0 < y < 1
    x = cases[1].sample_boundary(500, "uniform", 0)
    inner = ((x[:, 0] - 1).abs() < 1e-9) & (x[:, 1] > 1e-6) & (x[:, 1] < 1 - 1e-6)
    assert not bool(inner.any())
    # the L-shape by difference and the L-shape polygon are the same set
    y = LShape().sample_interior(500, "uniform", 0)
    assert bool(cases[0].contains(y).all()) and bool(LShape().contains(cases[0].sample_interior(500, "uniform", 1)).all())
    # the hole's circle has the normal pointing into the hole (outward of the domain)
    h = cases[3]
    x = h.sample_boundary(300, "lhs", 3)
    on_c = (x - 0.5).norm(dim=1).sub(0.25).abs() < 1e-9
    assert on_c.any() and torch.allclose(h.normal(x[on_c]), -(x[on_c] - 0.5) / 0.25)


def test_named_parts_and_errors():
    b = Box([0, 0], [2, 1])
    assert b.part_names() == ["x-", "x+", "y-", "y+"]
    x = b.sample_boundary(50, "lhs", 0, part="y+")
    assert torch.allclose(x[:, 1], torch.ones(50, dtype=x.dtype))
    g = Box([0, 0], [1, 1]).with_parts(inlet=lambda x: (x[:, 0] < 1e-12) & (x[:, 1] < 0.5))
    x = g.sample_boundary(40, "sobol", 0, part="inlet")
    assert bool((x[:, 0].abs() < 1e-12).all() and (x[:, 1] < 0.5).all())
    p = Polygon([(0, 0), (0, 1), (1, 0)], names=["a", "b", "c"])  # clockwise: normals still outward
    x, n = p.sample_boundary(100, "uniform", 0, with_normals=True)
    _closed_form_normal_checks(p, x, n)
    with pytest.raises(ProblemError, match=r"no boundary part 'x\+'"):
        p.sample_boundary(5, part="x+")
    with pytest.raises(ProblemError, match="outside the domain"):
        LShape().check_inside(torch.tensor([[0.5, -0.5]]))
    with pytest.raises(ProblemError, match="not on the boundary"):
        b.normal(torch.tensor([[1.0, 0.5]]))
    with pytest.raises(ProblemError, match="sampling must be one of"):
        b.sample_interior(5, "grid")
    with pytest.raises(ProblemError, match="lower < upper"):
        Box([0, 1], [1, 1])


def test_space_time():
    st = SpaceTime(Interval(0, 1), T=2.0)
    assert st.part_names() == ["x-", "x+", "initial"]
    x, n = st.sample_boundary(50, "lhs", 0, part="x+", with_normals=True)
    assert torch.allclose(x[:, 0], torch.ones(50, dtype=x.dtype)) and float(x[:, 1].max()) <= 2.0
    assert torch.allclose(n, torch.tensor([1.0, 0.0], dtype=n.dtype).expand(50, 2))
    x0 = st.sample_boundary(30, "sobol", 0, part="initial")
    assert torch.equal(x0[:, 1], torch.zeros(30, dtype=x0.dtype))
    xi = st.sample_interior(100, "halton", 0)
    assert bool(st.contains(xi).all()) and float(xi[:, 1].max()) <= 2.0
    # no part at t = T
    assert not bool(st.on_boundary(torch.tensor([[0.5, 2.0]], dtype=torch.float64)).all())
    st2 = SpaceTime(LShape(), T=1.0)
    x, n = st2.sample_boundary(100, "lhs", 0, part="e0", with_normals=True)
    assert torch.allclose(n, torch.tensor([0.0, -1.0, 0.0], dtype=n.dtype).expand(100, 3))


@pytest.mark.parametrize("make", [
    lambda g: Strips(4, g), lambda g: Grid([3, 1], g),
    lambda g: ByFunction(3, lambda x: (x[:, 0] ** 2 + x[:, 1] ** 2 > 0.5).long() + (x[:, 1] > 0).long()),
    lambda g: make_partition("grid:1x3", 3, g), lambda g: make_partition("strips:1", 3, g),
])
def test_partitions_cover_exactly_once(make):
    g = LShape()
    part = make(g)
    K = part.n_clients
    # every point of the domain has exactly one owner in 0..K−1 (cells are half-open; edges included)
    x = torch.cat([g.sample_interior(2000, "uniform", 0), g.sample_boundary(500, "uniform", 1),
                   torch.tensor([[0.0, 0.0], [1.0, 1.0], [-1.0, -1.0], [0.0, 0.5], [-0.5, 0.0]], dtype=torch.float64)])
    own = part.owner(x)
    assert own.shape == (x.shape[0],) and int(own.min()) >= 0 and int(own.max()) < K
    # the clients' own samples: inside the domain and owned by that client; their shares add up to the whole
    u = g.sample_interior(4000, "uniform", 9)
    vol = 0.0
    for k in range(K):
        box = part.cell_box(k, g)
        xk = g.sample_interior(200, "lhs", [0, k], where=lambda y, k=k: part.owner(y) == k, box=box)
        assert bool(g.contains(xk).all()) and bool((part.owner(xk) == k).all())
        vol += float((part.owner(u) == k).double().sum())
    assert vol == u.shape[0]   # the clients' shares of one sample add up to all of it


def test_partition_errors():
    g = Box([0, 0], [1, 1])
    with pytest.raises(ProblemError, match="square number"):
        make_partition("grid", 3, g)
    with pytest.raises(ProblemError, match="owners must be in"):
        ByFunction(2, lambda x: torch.full((x.shape[0],), 2)).owner(torch.zeros(3, 2))
    L = LShape()  # a 2 × 2 grid leaves the cut-out quadrant's client empty: one clear line
    with pytest.raises(ProblemError, match="could not sample"):
        L.sample_interior(10, "lhs", 0, where=lambda y: Grid([2, 2], L).owner(y) == 2, box=Grid([2, 2], L).cell_box(2, L))
    with pytest.raises(ProblemError, match="partition must be"):
        make_partition("rings", 2, g)
