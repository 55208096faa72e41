"""Issue 31: geometries that only touch, and splits with an empty cell, are named for what is wrong (the geometry,
or the client's cell of the split) instead of blaming the split's edges or the whole domain."""
import pytest

from fedsciml.problems import conditions as C
from fedsciml.problems.base import ProblemError
from fedsciml.problems.domain import DomainPDE
from fedsciml.problems.geometry import Ball, Box


def _pde(geo, split):
    class P(DomainPDE):
        name = "touching"
        geometry = geo
        hidden = (4,)
        conditions = [C.Dirichlet("boundary", 0.0)]

        def equation(self, u, x):
            return u.laplacian(x) + 1.0
    P.split = split
    return P()


@pytest.mark.parametrize("b, axis, at", [(Box([1, 0], [2, 1]), "x", "1"), (Box([0, 1], [1, 3]), "y", "1"),
                                         (Box([1, 1], [2, 2]), "x", "1")])
def test_an_intersection_of_boxes_that_only_touch_is_refused_naming_both(b, axis, at):
    a = Box([0, 0], [1, 1])
    with pytest.raises(ProblemError, match=rf"^the intersection of Box\(\[0.0, 0.0\], \[1.0, 1.0\]\) and Box.* has no "
                                           rf"interior: they only touch at {axis} = {at} \(a set of measure zero\)$"):
        a & b


def test_an_overlapping_intersection_and_a_disjoint_one_keep_their_behaviour():
    assert (Box([0, 0], [1, 1]) & Box([0.5, 0], [2, 1])).bbox[0].tolist() == [0.5, 0.0]
    with pytest.raises(ProblemError, match="is empty"):
        Box([0, 0], [1, 1]) & Box([2, 0], [3, 1])
    assert (Ball([0, 0], 1.0) & Ball([1.5, 0], 1.0)).dim == 2  # lens: bounding boxes overlap by 0.5


@pytest.mark.parametrize("geo, split, clients, cell", [
    (Box([0, 0], [2, 1]) - Box([0, 0], [1, 1]), "strips", 2, r"client 0 of 2: its cell \(x in \[0, 1\]\)"),
    (Box([0, 0], [1, 1]) | Box([1, 1], [2, 2]), "grid:2x2", 4, r"client 1 of 4: its cell \(x in \[0, 1\], y in \[1, 2\]\)"),
])
def test_a_split_with_a_cell_outside_the_domain_names_the_client_and_its_cell(geo, split, clients, cell):
    with pytest.raises(ProblemError, match=rf"^{cell} of the split '{split}' holds no interior point of .*"
                                           r"give a split whose every cell meets the domain, fewer clients, or more points \(n_interior\)$"):
        _pde(geo, split).client_objectives(clients)


def test_an_empty_domain_is_named_itself_not_a_cell():
    with pytest.raises(ProblemError, match=r"could not sample 1 points of the interior of \(Box.* - Box.*\)"):
        _pde(Box([0, 0], [1, 1]) - Box([0, 0], [1, 1]), "strips", ).client_objectives(2)


def test_touching_unions_and_differences_still_build():
    assert len(_pde(Box([0, 0], [1, 1]) | Box([1, 0], [2, 1]), "strips").client_objectives(2)) == 2
    assert len(_pde(Box([0, 0], [1, 1]) - Box([1, 0], [2, 1]), "grid:2x2").client_objectives(4)) == 4



def test_a_cell_holding_a_sliver_of_the_domain_says_how_many_points_were_drawn():
    """Client 0's strip x in [0, 1] meets the domain in a sliver 1e-7 wide: the points are drawn once from the whole
    domain (point counts are totals) and none fell in the sliver — the error says how many were drawn."""
    geo = Box([0, 0], [2, 1]) - Box([0, 0], [1 - 1e-7, 1])
    with pytest.raises(ProblemError, match=r"^client 0 of 2: its cell \(x in \[0, 1\]\) of the split 'strips' holds "
                                           r"no interior point of .* \(none of the [\d,]+ drawn from the whole domain "
                                           r"fell in it\); give"):
        _pde(geo, "strips").client_objectives(2)
