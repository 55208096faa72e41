"""Unknown coefficient fields of a DomainPDE (``unknown_fields``): a(x) recovered with u from data.

The 1-D inverse problem −(a u')' = f on [0, 1] with u = sin(πx), a = 1 + x/2 (closed forms), readings of u at
19 sensors, u and a given at both ends (as PINNacle's PInv gives a on the boundary).
"""
import math
import os
import re

import pytest
import torch
from torch.func import jacrev

import fedsciml as fs
from fedsciml.problems.base import ProblemError
from fedsciml.problems.conditions import Data, Dirichlet, Initial
from fedsciml.problems.domain import DomainPDE
from fedsciml.problems.geometry import Interval

PI = math.pi


def a_exact(x):
    return 1 + 0.5 * x[:, 0]


class Inv1D(DomainPDE):
    """−(a u')' = f on [0, 1], a unknown: u = sin(πx), a = 1 + x/2."""

    name = "t-field-inverse"
    geometry = Interval(0.0, 1.0)
    hidden = (10, 10)
    unknown_fields = {"a": dict(hidden=(8,))}
    exact_coefficients = {"a": a_exact}

    @property
    def conditions(self):
        xs = torch.linspace(0.05, 0.95, 19, dtype=torch.float64)[:, None]
        return [Dirichlet("boundary", None), Dirichlet("boundary", None, component="a"),
                Data(x=xs, y=torch.sin(PI * xs[:, 0]))]

    def equation(self, u, x):
        a = u.coef["a"]
        f = (1 + 0.5 * x[0]) * PI ** 2 * torch.sin(PI * x[0]) - 0.5 * PI * torch.cos(PI * x[0])
        uxx = u.diff(x, "x", "x")  # first: one pass gives every lower derivative of u and a
        return -(a.diff(x, "x") * u.diff(x, "x") + a(x) * uxx) - f

    def exact(self, x):
        return torch.sin(PI * x[:, 0])


DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "pde.md")


def test_docs_example_recovers_the_field_by_centralized_lm():
    """docs/pde.md's unknown-field example as it stands (the ```py block after its heading): the same problem."""
    text = open(DOC).read()
    code = re.search(r"\*\*Unknown coefficient fields\*\*.*?```py\n(.*?)```", text, flags=re.S).group(1)
    ns = {"__name__": "docs_pde_fields"}
    exec(compile(code, DOC, "exec"), ns)
    assert ns["Inverse1D"](n_interior=20, n_boundary=1).n_params == 141 + 25  # u [1, 10, 10, 1], then a [1, 8, 1]
    # measured at one thread: rel_l2 1.3e-3, rel_l2_a 5.5e-3 (an unsolved a is off by ~1)
    assert ns["r"].final["rel_l2"] < 1e-2
    assert ns["r"].final["rel_l2_a"] < 2e-2
    f = ns["r"].final  # PINNacle's pooled L2RE over u and a lies between the two components' errors
    assert min(f["rel_l2"], f["rel_l2_a"]) <= f["l2re_fields"] <= max(f["rel_l2"], f["rel_l2_a"])


def test_gn_with_two_clients_equals_centralized_lm_with_a_field():
    """The field's parameters are part of θ: gn's summed statistics are the pooled ones, so its iterates are
    centralized LM's to round-off (the same solves on sums taken in another order: rel 1e-9);
    40 points in total, 20 per client."""
    g = fs.solve(Inv1D(n_interior=40, n_boundary=2), "gn", clients=2, rounds=6, form="normal")
    c = fs.solve(Inv1D(n_interior=40, n_boundary=2), "centralized", clients=2, max_iters=6, lm_solve="normal")
    assert len(g.history) == len(c.history) == 7
    for rg, rc in zip(g.history, c.history):
        assert abs(rg["loss"] - rc["loss"]) <= 1e-9 * rc["loss"]
    assert float((g.theta - c.theta).norm() / c.theta.norm()) < 1e-9
    assert g.history[-1]["loss"] < 0.5 * g.history[0]["loss"]  # the steps did something (23 → 8.7)


class FieldInX(DomainPDE):
    """u_t = (a u_x)_x with a = a(x) (time-independent, PINNacle's HInv shape): only the field's plumbing."""

    name = "t-field-x"
    geometry = Interval(0.0, 1.0)
    T = 1.0
    hidden = (6,)
    unknown_fields = {"a": dict(hidden=(5, 5), activation="sin", inputs=("x",))}
    conditions = [Dirichlet("boundary", 0.0), Initial(0.0)]

    def equation(self, u, x):
        a = u.coef["a"]
        return u.diff(x, "t") - a.diff(x, "x") * u.diff(x, "x") - a(x) * u.diff(x, "x", "x")


def test_field_values_and_derivatives_are_its_network_and_ignore_other_axes():
    pb = FieldInX()
    theta = pb.init_params(3)
    net, idx = pb.field_networks()[0][1:]
    assert idx == [0] and net.sizes == [1, 5, 5, 1] and net.activation == "sin"
    th_a = theta[pb.network().n_params:]
    assert th_a.numel() == net.n_params
    u = pb.field(theta)
    x = torch.tensor([0.3, 0.7], dtype=torch.float64)
    a = u.coef["a"]
    assert torch.equal(a(x), net(th_a, x[:1]).reshape(()))  # the same operations
    ref = jacrev(lambda y: net(th_a, y).reshape(()))(x[:1])[0]
    assert float(abs(a.diff(x, "x") - ref)) <= 1e-14 * max(1.0, float(abs(ref)))
    assert float(a.diff(x, "t")) == 0.0 and float(a.diff(x, "t", "t")) == 0.0  # a takes x only: exactly 0
    assert float(u(x)) == float(pb.u(theta, x[None])[0])                   # u(x) is still u's output alone
    X = torch.tensor([[0.1, 0.0], [0.5, 0.9]], dtype=torch.float64)
    assert torch.equal(pb.coefficient_fields(theta)["a"](X), torch.stack([u.coef["a"](y) for y in X]))


def test_a_saved_model_carries_the_field(tmp_path):
    pb = Inv1D(n_interior=10, n_boundary=1)
    r = fs.solve(pb, "centralized", clients=1, max_iters=2)
    fs.save_model(r, pb, tmp_path / "m")
    u = fs.load_model(tmp_path / "m")
    X = torch.linspace(0, 1, 11, dtype=torch.float64)[:, None]
    assert torch.equal(u(X), pb.predict(r.theta, X))
    # the loader indexes the inputs where the problem passes them whole: the same numbers to round-off
    assert torch.allclose(u.fields["a"](X), pb.coefficient_fields(r.theta)["a"](X), rtol=1e-14, atol=0)
    assert u.meta["fields"]["a"]["inputs"] == ["x"]


def _declare(**attrs):
    base = dict(name="t-field-bad", geometry=Interval(0.0, 1.0), conditions=[Dirichlet("boundary", 0.0)],
                equation=lambda self, u, x: u.diff(x, "x", "x"))
    return type("Bad", (DomainPDE,), {**base, **attrs})


@pytest.mark.parametrize("attrs, match", [
    (dict(unknown_fields={"u": {}}), "name of its own"),
    (dict(unknown_fields={"a": dict(inputs=("t",))}), "unknown axis 't'"),
    (dict(unknown_fields={"a": dict(hidden=(0,))}), "hidden must be widths"),
    (dict(unknown_fields={"a": dict(width=3)}), "keys hidden, activation, inputs"),
    (dict(unknown_fields={"a": {}}, exact_coefficients={"a": 1.0}), "must be a function"),
])
def test_bad_field_declarations_fail_with_one_line(attrs, match):
    with pytest.raises(ProblemError, match=match):
        _declare(**attrs)()


def test_a_condition_on_a_field_without_its_exact_values_is_refused():
    cls = _declare(unknown_fields={"a": {}}, conditions=[Dirichlet("boundary", 0.0),
                                                         Dirichlet("boundary", None, component="a")])
    with pytest.raises(ProblemError, match=r"exact_coefficients\['a'\]"):
        cls().client_objectives(1)


def test_fedavg_trains_the_field_unchanged():
    """FedAvg's local steps move the field's parameters as any others of θ (the method knows nothing of fields)."""
    pb = Inv1D(n_interior=20, n_boundary=1)
    r = fs.solve(pb, "fedavg", clients=2, rounds=2, local_steps=2)
    p = pb.network().n_params
    assert r.theta.numel() == pb.n_params
    assert not torch.equal(r.theta[p:], pb.init_params(0)[p:])
    assert r.final["loss"] < r.history[0]["loss"]
