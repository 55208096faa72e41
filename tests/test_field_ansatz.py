"""An unknown field's boundary values imposed exactly: ``unknown_fields = {"a": dict(ansatz=box_ansatz(lo, hi, g))}``
gives ``a = A + B·N_a`` (``A`` the transfinite interpolation of g from the box's faces, ``B`` zero on them).

Closed forms: the transfinite interpolation reproduces any sum of functions of one axis each, everywhere; on the
interval [0, 1] it is ``A = (1 − y) g(0) + y g(1)``, ``B = 4y(1 − y)``, so a and a' are known given the network N."""
import math

import pytest
import torch
from torch.func import jacrev, vmap

import fedsciml as fs
from fedsciml.problems.base import ProblemError
from fedsciml.problems.conditions import Data, Dirichlet
from fedsciml.problems.domain import box_ansatz
from fedsciml.runtime.modelio import ModelFileError
from test_pde_fields import Inv1D, a_exact  # tests/ is on the path: the problem of those tests

PI = math.pi
EPS = torch.finfo(torch.float64).eps


def _box_points(lo, hi, n, seed):
    g = torch.Generator().manual_seed(seed)
    lo, hi = torch.tensor(lo, dtype=torch.float64), torch.tensor(hi, dtype=torch.float64)
    return lo + (hi - lo) * torch.rand(n, lo.numel(), dtype=torch.float64, generator=g)


@pytest.mark.parametrize("lo, hi", [([0.0, -1.0], [1.0, 2.0]), ([-1.0, 0.0, 0.5], [1.0, 1.0, 2.0])])
def test_box_ansatz_reproduces_a_sum_of_functions_of_one_axis_everywhere(lo, hi):
    """g = Σ_i f_i(y_i): A = g inside too (the Boolean sum of the axes' linear interpolations reproduces it).  The
    ansatz adds 3^d − 1 terms of size ≤ max|g| ≈ 10: tolerance 3^d · 10 · 10 eps."""
    def g(x):
        return torch.sin(x[:, 0]) + x[:, 1] ** 3 + (torch.exp(x[:, 2]) if x.shape[1] > 2 else 0.0)

    f = box_ansatz(lo, hi, g)
    X = _box_points(lo, hi, 50, 0)
    out = torch.full((50, 1), 7.0, dtype=torch.float64)
    B = torch.prod(4 * (X - torch.tensor(lo)) * (torch.tensor(hi) - X) / (torch.tensor(hi) - torch.tensor(lo)) ** 2, 1)
    tol = 3 ** len(lo) * 100 * EPS
    assert torch.allclose(vmap(f)(X, out), g(X) + 7.0 * B, rtol=0, atol=tol)


def test_box_ansatz_equals_its_value_on_every_face_whatever_the_network():
    """A non-separable g (x²y² + e^{xy}) on the faces of [0, 1] × [−1, 2]: the value is g's there for any output."""
    def g(x):
        return x[:, 0] ** 2 * x[:, 1] ** 2 + torch.exp(x[:, 0] * x[:, 1])

    f = box_ansatz([0.0, -1.0], [1.0, 2.0], g)
    t = torch.linspace(0, 1, 9, dtype=torch.float64)
    faces = torch.cat([torch.stack([torch.zeros(9), -1 + 3 * t], 1), torch.stack([torch.ones(9), -1 + 3 * t], 1),
                       torch.stack([t, -torch.ones(9)], 1), torch.stack([t, 2 * torch.ones(9)], 1)]).double()
    for out in (0.0, -3.0, 1e3):
        got = vmap(f)(faces, torch.full((faces.shape[0], 1), out, dtype=torch.float64))
        assert torch.allclose(got, g(faces), rtol=0, atol=8 * 100 * EPS)  # B = 0 exactly on a face
    inside = torch.tensor([[0.5, 0.5]], dtype=torch.float64)  # and not inside: the network's term is B·out there
    assert float(vmap(f)(inside, torch.ones(1, 1, dtype=torch.float64))[0] - g(inside)[0]) != 0.0


@pytest.mark.parametrize("lo, hi, value, match", [
    ([0.0, 1.0], [1.0, 1.0], math.sin, "lo < hi"),
    ([0.0], [1.0, 2.0], math.sin, "lo < hi"),
    ([0.0], [1.0], 3.0, "must be a function"),
])
def test_box_ansatz_refuses_a_bad_box_or_value_in_one_line(lo, hi, value, match):
    with pytest.raises(ProblemError, match=match):
        box_ansatz(lo, hi, value)


class HardA(Inv1D):
    """−(a u')' = f on [0, 1] (u = sin πx, a = 1 + x/2; test_pde_fields' problem) with a's end values held by an
    ansatz: no condition on a."""

    name = "t-field-ansatz"
    unknown_fields = {"a": dict(hidden=(8,), ansatz=box_ansatz([0.0], [1.0], a_exact))}

    @property
    def conditions(self):
        xs = torch.linspace(0.05, 0.95, 19, dtype=torch.float64)[:, None]
        return [Dirichlet("boundary", None), Data(x=xs, y=torch.sin(PI * xs[:, 0]))]


def test_the_field_is_the_ansatz_of_its_network_with_its_derivative():
    """a(y) = (1 − y)·1 + y·1.5 + 4y(1 − y) N(y) and a'(y) = 0.5 + 4(1 − 2y) N + 4y(1 − y) N' (N' by jacrev of the
    network alone): the field, its derivative through the jet, and the batch evaluation agree with them."""
    pb = HardA()
    theta = pb.init_params(2) + 0.1
    _, net, _ = pb.field_networks()[0]
    th_a = theta[pb.network().n_params:]
    u = pb.field(theta)
    for y in (0.0, 0.2, 0.7, 1.0):
        x = torch.tensor([y], dtype=torch.float64)
        N = net(th_a, x).reshape(())
        dN = jacrev(lambda z: net(th_a, z).reshape(()))(x)[0]
        a = (1 - y) * 1.0 + y * 1.5 + 4 * y * (1 - y) * N
        da = 0.5 + 4 * (1 - 2 * y) * N + 4 * y * (1 - y) * dN
        assert float(abs(u.coef["a"](x) - a)) <= 100 * EPS
        assert float(abs(u.coef["a"].diff(x, "x") - da)) <= 100 * EPS * (1 + float(abs(da)))
    ends = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    assert torch.allclose(pb.coefficient_fields(theta)["a"](ends), a_exact(ends), rtol=0, atol=10 * EPS)


def test_lm_recovers_the_field_without_a_condition_on_it():
    """The 1-D inverse problem of test_pde_fields with a's end values by the ansatz instead of a weighted condition:
    centralized LM recovers u and a (measured at one thread: rel_l2 4.7e-4, rel_l2_a 2.2e-3 after 40 steps)."""
    pb = HardA(n_interior=20, n_boundary=1)
    assert [type(c).__name__ for c in pb.condition_list()] == ["Dirichlet", "Data"]
    r = fs.solve(pb, "centralized", clients=1, max_iters=40)
    assert r.final["rel_l2"] < 1e-2
    assert r.final["rel_l2_a"] < 2e-2


def test_a_saved_model_with_a_field_ansatz_is_evaluated_by_its_problem(tmp_path):
    pb = HardA(n_interior=10, n_boundary=1)
    r = fs.solve(pb, "centralized", clients=1, max_iters=2)
    fs.save_model(r, pb, tmp_path / "m")
    with pytest.raises(ModelFileError, match="hard-constraint ansatz"):
        fs.load_model(tmp_path / "m")  # the raw network is not the field: refused without its problem
    u = fs.load_model(tmp_path / "m", problem=pb)
    X = torch.linspace(0, 1, 11, dtype=torch.float64)[:, None]
    # bitwise: the file holds θ exactly and the model evaluates a through the same function on the same batch
    assert torch.equal(u.fields["a"](X), pb.coefficient_fields(r.theta)["a"](X))
    assert u.meta["fields"]["a"]["ansatz"] is True


def test_an_ansatz_that_is_not_a_function_is_refused_in_one_line():
    cls = type("BadAnsatz", (HardA,), {"name": "t-field-ansatz-bad",
                                       "unknown_fields": {"a": dict(hidden=(4,), ansatz=1.0)}})
    with pytest.raises(ProblemError, match="ansatz must be a function"):
        cls()
