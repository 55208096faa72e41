"""Time-marching over windows (``fs.solve(..., time_windows=K)``, fedsciml.problems.windows) on the heat equation
u_t = k u_xx (closed form u = sin(πx/2) exp(−kπ²t/4))."""
import os
import re

import pytest
import torch

import fedsciml as fs
from fedsciml.problems.base import ProblemError
from fedsciml.problems.conditions import Initial
from fedsciml.problems.windows import window_edges, window_problem, windowed


def small(**o):
    return fs.get_problem("heat", **{"n_interior": 30, "n_boundary": 6, "hidden": (8, 8), **o})


def test_windows_cover_the_interval_and_carry_the_previous_network():
    pb = small()
    assert window_edges(pb, 4) == [0.0, 0.25, 0.5, 0.75, 1.0]
    w1 = window_problem(pb, 0.0, 0.5)
    theta = w1.init_params(5)
    w2 = window_problem(pb, 0.5, 1.0, (w1, theta))
    assert w2.domain().t0 == 0.5 and w2.domain().T == 1.0 and pb.domain().t0 == 0.0  # the problem is unchanged
    assert torch.equal(w2.init_params(0), theta)                                       # warm start
    (init,) = [c for c in w2.condition_list() if isinstance(c, Initial)]
    x, (xp, g, _) = init.points(w2, w2.domain(), 7, "lhs", 0)
    assert bool((x[:, 1] == 0.5).all())
    assert torch.equal(g, w1.u(theta, x))     # the previous window's network at t = 0.5: the same operations
    # the window's objective holds those values as its initial rows' targets
    objs = w2.client_objectives(2)
    parts = [p for o in objs for p in o.parts if p.name.startswith("initial")]
    for p in parts:  # evaluated on the pooled draw, read back per client: another batch size, so to round-off
        ref = w1.u(theta, p.points[0])  # (a few eps of the network's output, whose layers sum ≤ 9 terms each)
        assert float((p.points[1] - ref).abs().max()) <= 64 * torch.finfo(ref.dtype).eps * (1 + float(ref.abs().max()))


def test_the_piecewise_model_takes_each_window_network_on_its_interval():
    pb = small()
    th = [pb.init_params(s) for s in (1, 2, 3)]
    wm = windowed(pb, [0.0, 0.2, 0.6, 1.0], pb.n_params)
    x = torch.tensor([[0.3, 0.0], [0.3, 0.2], [0.3, 0.2001], [0.3, 0.6], [0.7, 0.61], [0.1, 1.0]], dtype=torch.float64)
    u = wm.u(torch.cat(th), x)
    owner = torch.tensor([0, 0, 1, 1, 2, 2])         # t in (t_{k-1}, t_k] → window k; t0 itself → the first
    for k in range(3):  # each window's points as one batch: the same operations, so bitwise
        assert torch.equal(u[owner == k], pb.u(th[k], x[owner == k]))
    with pytest.raises(ProblemError, match="3 × "):
        wm.u(th[0], x)


DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "pde.md")


def test_time_marching_solves_heat_and_saves_the_piecewise_model(tmp_path):
    """docs/pde.md's time-marching example as it stands (the ```py block after its heading), then its model."""
    text = open(DOC).read()
    code = re.search(r"\*\*Time-marching over windows\*\*.*?```py\n(.*?)```", text, flags=re.S).group(1)
    ns = {"fs": fs}
    exec(compile(code, DOC, "exec"), ns)
    r = ns["r"]
    assert r.options["time_windows"] == 2 and r.theta.numel() == 2 * small().n_params
    assert [w["t"] for w in r.extra["windows"]] == [[0.0, 0.5], [0.5, 1.0]]
    assert {row["window"] for row in r.history} == {1, 2}
    # the whole-interval error of the piecewise model against the closed form (measured 2e-4 at one thread;
    # an untrained network is off by ~1)
    assert r.final["rel_l2"] < 5e-3
    pb = small()
    wm = windowed(pb, [0.0, 0.5, 1.0])
    X, U = pb.reference()
    assert r.final["rel_l2"] == pytest.approx(float((wm.u(r.theta, X) - U[:, 0]).norm() / U[:, 0].norm()), rel=1e-12)
    fs.save_model(r, wm, tmp_path / "m")
    u = fs.load_model(tmp_path / "m")
    assert u.meta["time_windows"] == [0.0, 0.5, 1.0]
    assert torch.equal(u(X), wm.u(r.theta, X))  # the loader repeats the run's operations: bitwise


def test_gn_time_marching_equals_centralized_lm_time_marching():
    """Each window is one run of the driver: gn == centralized LM there, and the next window starts from equal
    θ and equal initial values (to round-off: rel 1e-9)."""
    g = fs.solve(small(), "gn", clients=2, rounds=4, form="normal", time_windows=2)
    c = fs.solve(small(), "centralized", clients=2, max_iters=4, lm_solve="normal", time_windows=2)
    for rg, rc in zip(g.history, c.history):
        assert rg["window"] == rc["window"]
        assert abs(rg["loss"] - rc["loss"]) <= 1e-9 * rc["loss"]
    assert float((g.theta - c.theta).norm() / c.theta.norm()) < 1e-9


@pytest.mark.parametrize("problem, windows, match", [
    ("poisson-lshape", 2, "no time axis"),
    ("heat", 0, "whole number ≥ 1"),
    ("heat", 1.5, "whole number ≥ 1"),
])
def test_time_windows_refused_with_one_line(problem, windows, match):
    with pytest.raises(ProblemError, match=match):
        fs.solve(problem, "centralized", max_iters=1, time_windows=windows)


def test_time_windows_refuse_the_flower_engine():
    with pytest.raises(ValueError, match="engine 'local' only"):
        fs.solve(small(), "gn", clients=2, rounds=1, time_windows=2, engine="flower")


def test_a_window_of_a_problem_with_its_own_reference_keeps_the_rows_in_the_window():
    base = small()

    class FromFile(type(base)):  # a reference of its own, as a file-backed problem has
        params = type(base).params

        def reference(self):
            X = torch.tensor([[0.5, 0.1], [0.5, 0.5], [0.5, 0.7], [0.2, 1.0]], dtype=torch.float64)
            return X, self.exact(X)[:, None]

    pb = FromFile(n_interior=30, n_boundary=6, hidden=(8, 8))
    X, U = window_problem(pb, 0.5, 1.0)._test()
    assert X[:, 1].tolist() == [0.5, 0.7, 1.0] and torch.equal(U[:, 0], pb.exact(X))
    with pytest.raises(ProblemError, match=r"no point in the window \[0.2, 0.3\]"):
        window_problem(pb, 0.2, 0.3)._test()
