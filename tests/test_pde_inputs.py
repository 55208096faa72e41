"""Bad PDE-API input is one line naming the argument (issue 31, finding 6 and the PDE-API list): simple polygons
only (a self-intersecting one would get inward "outward" normals), repeated or non-finite vertices, and every
geometry / condition / declaration argument checked where it is given."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.problems.conditions import Data, Dirichlet, Neumann, Robin
from fedsciml.problems.domain import DomainPDE
from fedsciml.problems.geometry import Box, Disk, LShape, Polygon, make_partition


@pytest.mark.parametrize("make,msg", [
    (lambda: Polygon([(0, 0), (2, 2), (2, 0), (0, 1)]), r"edges e0 .* and e2 .* cross or touch"),  # the issue's
    (lambda: Polygon([(0, 0), (1, 0), (1, 0), (0, 1)]), r"vertex 2 \[1.0, 0.0\] repeats vertex 1"),
    (lambda: Polygon([(0, 0), (1, 0), (1, 1), (0, 1), (0, 0)]), r"vertex 4 .* repeats vertex 0"),
    (lambda: Polygon([(0, 0), (2, 0), (1, 0), (0, 1)]), r"fold back"),
    (lambda: Polygon([(0, 0), (2, 0), (2, 2), (1, 0.0), (0, 2)]), r"cross or touch"),  # a vertex on an edge
    (lambda: Polygon([(0, 0), (float("nan"), 0), (0, 1)]), r"Polygon vertices must be finite"),
    (lambda: Polygon([(0, 0), (math.inf, 0), (0, 1)]), r"Polygon vertices must be finite"),
    (lambda: Polygon("abc"), r"Polygon vertices must be numbers"),
    (lambda: Polygon([(0, 0), (1, 0), (0, 1)], names="abc"), r"names must be a list of non-empty strings"),
    (lambda: Disk((0, 0), "1"), r"Disk radius must be a number, got '1'"),
    (lambda: Disk((0, 0), 1e-300), r"Disk radius 1e-300 is too small"),
    (lambda: Disk((0, "x"), 1.0), r"Disk center must be numbers"),
    (lambda: Disk((0, 0), float("nan")), r"Disk radius must be finite"),
    (lambda: Box([], []), r"Box lower must be a non-empty list of numbers"),
    (lambda: Box([0, "a"], [1, 1]), r"Box lower must be numbers"),
    (lambda: Dirichlet("x-", n=2.5), r"n \(points in total\) must be a whole number ≥ 1, got 2.5"),
    (lambda: Dirichlet("x-", n=0), r"must be a whole number ≥ 1, got 0"),
    (lambda: Dirichlet("x-", 1 + 2j), r"Dirichlet\('x-'\) value must be a real number"),
    (lambda: Dirichlet("x-", float("nan")), r"Dirichlet\('x-'\) value must be finite"),
    (lambda: Dirichlet("x-", weight=-1.0), r"weight must be > 0"),
    (lambda: Dirichlet(3), r"on must name a boundary part"),
    (lambda: Neumann("x-", component=1.5), r"component must be an output name or index"),
    (lambda: Robin("y+", 0.0, 0.0, 1.0), r"alpha and beta are both 0"),
    (lambda: Robin("y+", "a", 1.0, 1.0), r"alpha must be a real number"),
    (lambda: Data(x=[[0.5, 0.5]], y=[0.0], noise=-1.0), r"Data noise .* must be > 0, got -1.0"),
    (lambda: make_partition("strips:z", 2, Box([0, 0], [1, 1])), r"strip axis must be an index 0..1 or one of"),
    (lambda: make_partition("grid:2xq", 2, Box([0, 0], [1, 1])), r"cells per axis as whole numbers"),
], ids=lambda v: "" if callable(v) else v[:30])
def test_a_bad_geometry_or_condition_argument_is_one_line(make, msg):
    with pytest.raises(fs.ProblemError, match=msg) as e:
        make()
    assert "\n" not in str(e.value)


def test_a_simple_polygons_outward_normals_point_out():
    """For simple polygons (convex, non-convex, either orientation) a small step along every sampled boundary
    normal leaves the domain — what the bowtie broke for a third of its points."""
    for g in (LShape(), Polygon([(0, 0), (3, 0), (3, 1), (1, 1), (1, 2), (3, 2), (3, 3), (0, 3)]),
              Polygon([(0, 0), (0, 1), (1, 1), (1, 0)])):
        x, n = g.sample_boundary(400, "uniform", 0, with_normals=True)
        assert torch.allclose(n.norm(dim=1), torch.ones(len(n), dtype=n.dtype))
        assert not bool(g.contains(x + 1e-6 * n).any())
        assert bool(g.contains(x - 1e-6 * n).all())


class _Base(DomainPDE):
    geometry = Box([0, 0], [1, 1])
    hidden = (4,)
    conditions = [Dirichlet("boundary", 0.0)]

    def equation(self, u, x):
        return u.laplacian(x)


@pytest.mark.parametrize("attrs,msg", [
    ({"conditions": None}, r"conditions must be a list of Dirichlet/Neumann/Robin/Periodic/Initial/Data objects"),
    ({"conditions": Dirichlet("boundary", 0.0)}, r"conditions must be a list"),
    ({"unknowns": {"k": float("nan")}}, r"unknown 'k' needs a finite initial value, got nan"),
    ({"unknowns": {"k": "1"}}, r"unknown 'k' needs a finite initial value"),
    ({"unknowns": [1.0]}, r"unknowns must be a dict"),
], ids=lambda v: "" if isinstance(v, dict) else v[:30])
def test_a_bad_pde_declaration_is_one_line(attrs, msg):
    cls = type("Bad", (_Base,), {"name": f"t-bad-{abs(hash(str(attrs)))}", **attrs})
    with pytest.raises(fs.ProblemError, match=msg) as e:
        cls()
    assert "\n" not in str(e.value)


def test_an_equation_or_value_of_the_wrong_kind_is_one_line():
    class FloatEq(_Base):
        name = "t-float-eq"

        def equation(self, u, x):
            return 1.0

    with pytest.raises(fs.ProblemError, match=r"equation\(u, x\) must return a tensor computed from u"):
        FloatEq().client_objectives(1)

    class ComplexValue(_Base):
        name = "t-complex-value"
        conditions = [Dirichlet("boundary", lambda x: np.exp(1j * x[:, 0].numpy()))]

    with pytest.raises(fs.ProblemError, match="returned complex numbers"):
        ComplexValue().client_objectives(1)

    class NaNValue(_Base):
        name = "t-nan-value"
        conditions = [Dirichlet("boundary", lambda x: x[:, 0] / 0.0 * 0.0)]

    with pytest.raises(fs.ProblemError, match=r"value is not finite at \d+ of \d+ points"):
        NaNValue().client_objectives(1)
