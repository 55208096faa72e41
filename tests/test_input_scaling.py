"""The fixed affine input map of a network (``MLP(input_map=…)``, the DomainPDE option ``input_scaling="box"``):
values and derivatives of every order by the chain rule, the K-FAC channel forwards (Taylor and Poisson forms)
against the objective's own Jacobian and the dense LM step, time windows with each window's own box, unknown
fields, and saved models that evaluate bitwise as the run."""
import math

import pytest
import torch
from torch.func import jacfwd, vmap

import fedsciml as fs
from fedsciml.core import kfac_forms as kf, kfac_taylor as kt
from fedsciml.core.nn import MLP
from fedsciml.problems import DomainPDE, get_problem
from fedsciml.problems.base import ProblemError
from fedsciml.problems.conditions import Dirichlet, Initial
from fedsciml.problems.domain import box_map
from fedsciml.problems.geometry import Box
from fedsciml.problems.windows import window_problem, windowed
from fedsciml.runtime.modelio import ModelFileError

from _kfac_checks import assert_channels_give_each_rows_jacobian, assert_pcg_reaches_dense_lm_step

SHIFT, SCALE = (0.5, 50.0), (2.0, 0.02)  # the box [0, 1] × [0, 100] (Heat 2d-LT's time axis) to [-1, 1]²


def nets(act="tanh"):
    mapped = MLP([2, 7, 6, 1], act, input_map=(SHIFT, SCALE))
    return mapped, MLP([2, 7, 6, 1], act)


def theta_of(net, seed=0):
    return net.init(seed) + 0.2 * torch.randn(net.n_params, dtype=torch.float64,
                                              generator=torch.Generator().manual_seed(seed + 11))


def test_box_map_takes_the_box_to_the_unit_cube():
    shift, scale = box_map([0.0, -1.0, 0.0], [1.0, 3.0, 100.0])
    lo = torch.tensor([0.0, -1.0, 0.0], dtype=torch.float64)
    hi = torch.tensor([1.0, 3.0, 100.0], dtype=torch.float64)
    net = MLP([3, 4, 1], input_map=(shift, scale))
    assert torch.equal(net.map_input(lo), -torch.ones(3, dtype=torch.float64))  # exact: dyadic numbers
    assert torch.equal(net.map_input(hi), torch.ones(3, dtype=torch.float64))


def test_the_map_is_the_first_layers_input_and_derivatives_follow_the_chain_rule():
    """u(x) = g((x − c) ⊙ s): the same value as the plain network at the mapped point (the same operations:
    bitwise), ∂u/∂x_i = s_i ∂g, ∂²u = diag(s) ∇²g diag(s), ∂³u/∂x_i³ = s_i³ ∂³g (nested jacfwd of both;
    rounding only: 1e-12 relative)."""
    mapped, plain = nets()
    th = theta_of(plain)
    x = torch.tensor([[0.3, 17.0], [0.9, 88.0], [0.05, 0.5]], dtype=torch.float64)
    xm = (x - torch.tensor(SHIFT, dtype=torch.float64)) * torch.tensor(SCALE, dtype=torch.float64)
    assert torch.equal(mapped(th, x), plain(th, xm))
    s = torch.tensor(SCALE, dtype=torch.float64)

    def close(a, b):
        assert float((a - b).abs().max()) <= 1e-12 * max(1.0, float(b.abs().max()))

    g1 = vmap(jacfwd(lambda y: mapped(th, y)))(x)
    close(g1, s * vmap(jacfwd(lambda y: plain(th, y)))(xm))
    H = vmap(jacfwd(jacfwd(lambda y: mapped(th, y))))(x)
    close(H, s[:, None] * vmap(jacfwd(jacfwd(lambda y: plain(th, y))))(xm) * s[None, :])
    d3 = vmap(jacfwd(jacfwd(jacfwd(lambda y: mapped(th, y)))))(x)[:, 1, 1, 1]
    close(d3, s[1] ** 3 * vmap(jacfwd(jacfwd(jacfwd(lambda y: plain(th, y)))))(xm)[:, 1, 1, 1])


@pytest.mark.parametrize("act", ["tanh", "sin"])
def test_forward_laplacian_with_a_map_is_the_hessian_trace(act):
    """value_and_laplacian's closed-form pass starts its input Jacobian at diag(s): the trace of nested jacfwd's
    Hessian of the mapped network (1e-12 relative)."""
    mapped, _ = nets(act)
    th = theta_of(mapped, 3)
    x = torch.tensor([[0.3, 17.0], [0.9, 88.0]], dtype=torch.float64)
    v, lap = mapped.value_and_laplacian(th, x)
    ref = vmap(lambda y: torch.trace(jacfwd(jacfwd(lambda z: mapped(th, z)))(y)))(x)
    assert torch.equal(v, mapped(th, x))
    assert float((lap - ref).abs().max()) <= 1e-12 * float(ref.abs().max())


def test_a_domain_pde_maps_its_box_and_field_diff_of_any_order_follows():
    """heat (x ∈ [0, 1], t ∈ [0, 1]) with input_scaling=box: the network maps [0, 1]² to [−1, 1]² (scale 2 on both
    axes), Field.diff of order 1–4 is 2^k × the plain network's derivative at the mapped point (1e-11 relative),
    and the default ``none`` builds the plain network."""
    pb = get_problem("heat", hidden=(6, 6), input_scaling="box")
    assert pb.network().input_map == ((0.5, 0.5), (2.0, 2.0))
    assert get_problem("heat", hidden=(6, 6)).network().input_map is None
    th = pb.init_params(2)
    plain = MLP(pb.network().sizes, pb.network().activation)
    x = torch.tensor([0.3, 0.6], dtype=torch.float64)
    xm = (x - 0.5) * 2.0
    u = pb.field(th)

    def g(*ax):
        f = lambda y: plain(th, y)  # noqa: E731
        for a in ax:
            f = (lambda f, a: lambda y: jacfwd(f)(y)[a])(f, a)
        return f(xm)

    for axes in [(0,), (1,), (0, 0), (0, 1), (0, 0, 0), (0, 0, 1, 1)]:
        ref = 2.0 ** len(axes) * g(*axes)
        got = u.diff(x, *axes)
        assert float(abs(got - ref)) <= 1e-11 * max(1.0, float(abs(ref))), axes
    # finite differences of the value, an independent check of the first derivative (h = 1e-6: error ~1e-9)
    h = 1e-6
    e = torch.tensor([0.0, h], dtype=torch.float64)
    fd = (pb.u(th, (x + e)[None]) - pb.u(th, (x - e)[None]))[0] / (2 * h)
    assert float(abs(fd - u.diff(x, "t"))) <= 1e-7 * max(1.0, float(abs(fd)))


def test_a_bad_input_scaling_or_map_is_one_line():
    with pytest.raises(ProblemError, match="input_scaling"):
        get_problem("heat", input_scaling="unit")
    with pytest.raises(ValueError, match="input_map must be"):
        MLP([2, 3, 1], input_map=((0.0, 0.0), (1.0, 0.0)))
    with pytest.raises(ValueError, match="input_map must be"):
        MLP([2, 3, 1], input_map=((0.0,), (1.0,)))


# --- the K-FAC channel forwards ---------------------------------------------------------------------
def setup(name, **opts):
    pb = get_problem(name, **{"n_interior": 20, "n_boundary": 5, "hidden": [6, 5], "input_scaling": "box", **opts})
    (obj,) = pb.client_objectives(1, seed=0)
    theta = pb.init_params(0) + 0.2 * torch.randn(pb.n_params, dtype=torch.float64,
                                                  generator=torch.Generator().manual_seed(7))
    return pb, obj, theta


@pytest.mark.parametrize("name", ["heat", "kovasznay"])
def test_taylor_channels_with_a_map_give_each_rows_jacobian(name):
    """The map's first-order channels diag(s): Σ_c g ãᵀ equals the objective's own Jacobian (vmap of jacrev of the
    problem's residual through the mapped network) for every part and layer, 1e-10 relative."""
    pb, obj, theta = setup(name)
    net = pb.network()
    assert net.input_map is not None
    J = obj.jacobian(theta)
    off = 0
    for part in obj.parts:
        spec = kt.resolved(part.jet)
        assert spec is not None, part.name
        aug, grads = kt.taylor_quantities(spec, theta, part.points, part.weight)
        rows = J[off:off + part.n_points]
        off += part.n_points
        for l, (w, b, fi, fo) in enumerate(net._layout):
            got = torch.einsum("nso,nsi->noi", grads[0][l], aug[l])
            ref = torch.cat([rows[:, w:w + fi * fo].reshape(-1, fo, fi), rows[:, b:b + fo].unsqueeze(-1)], -1)
            assert float((got - ref).abs().max()) <= 1e-10 * float(ref.abs().max()), (part.name, l)


@pytest.mark.parametrize("name", ["heat", "kovasznay"])
def test_kfac_preconditioned_cg_with_a_map_reaches_the_dense_lm_step(name):
    """K-FAC-preconditioned CG to rtol on (JᵀJ + μI)δ = −Jᵀr with the mapped network: within
    10·cond(JᵀJ + μI)·rtol of the dense solve (the stopping rule bounds the residual; 10 for the recurrence's
    drift; eps·cond is far below it)."""
    pb, obj, theta = setup(name)
    f = kf.factors_of(obj, theta)
    assert isinstance(f, kt.TaylorFactors)
    assert_pcg_reaches_dense_lm_step(obj, theta, f)


def test_the_poisson_form_with_a_map_gives_each_rows_jacobian():
    """kfac_pinn's Poisson-form channels (value, ∇ starting at diag(s), Laplacian) of a mapped network: Σ g ãᵀ
    equals the Jacobian of the problem's residual (its forward Laplacian through the same map), 1e-10."""
    pb = get_problem("poisson", dim=2, n_interior=15, n_boundary=3)
    pb.__dict__["_net"] = MLP([2, 6, 5, 1], input_map=((0.5, 0.5), (2.0, 4.0)))
    (obj,) = pb.client_objectives(1, seed=0)
    net = pb.network()
    theta = theta_of(net, 1)
    assert_channels_give_each_rows_jacobian(obj, net, theta, obj.jacobian(theta), rtol=1e-10)


# --- windows, fields, saved models ------------------------------------------------------------------
def test_each_time_window_maps_its_own_box():
    pb = get_problem("heat", hidden=(6, 6), input_scaling="box", n_interior=10, n_boundary=3)
    w = window_problem(pb, 0.5, 1.0)
    assert w.network().input_map == ((0.5, 0.75), (2.0, 4.0))
    assert pb.network().input_map == ((0.5, 0.5), (2.0, 2.0))  # the problem's own is unchanged
    th = [pb.init_params(s) for s in (1, 2)]
    wm = windowed(pb, [0.0, 0.5, 1.0], pb.n_params)
    x = torch.tensor([[0.3, 0.2], [0.3, 0.7], [0.6, 1.0]], dtype=torch.float64)
    u = wm.u(torch.cat(th), x)
    assert torch.equal(u[1:], w.u(th[1], x[1:]))  # window 2's points through window 2's map: bitwise


def test_saved_models_evaluate_bitwise_as_the_run(tmp_path):
    """A run with input_scaling=box, saved and loaded: the same operations, so the same bits — plain, time-marched
    (each window's map in window_input_maps) and with an unknown field (its inputs' part of the map)."""
    pb = get_problem("heat", hidden=(6, 6), input_scaling="box", n_interior=20, n_boundary=4)
    r = fs.solve(pb, "centralized", clients=1, max_iters=2)
    fs.save_model(r, pb, tmp_path / "a")
    u = fs.load_model(tmp_path / "a")
    X = torch.rand(50, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert u.meta["architecture"]["input_map"] == {"shift": [0.5, 0.5], "scale": [2.0, 2.0]}
    assert torch.equal(u(X), pb.predict(r.theta, X))

    rw = fs.solve(get_problem("heat", hidden=(6, 6), input_scaling="box", n_interior=20, n_boundary=4),
                  "centralized", clients=1, max_iters=2, time_windows=2)
    wm = windowed(pb, [0.0, 0.5, 1.0])
    fs.save_model(rw, wm, tmp_path / "w")
    uw = fs.load_model(tmp_path / "w")
    assert uw.meta["window_input_maps"][1] == {"shift": [0.5, 0.75], "scale": [2.0, 4.0]}
    assert torch.equal(uw(X), wm.u(rw.theta, X))
    assert not torch.equal(uw(X), windowed(get_problem("heat", hidden=(6, 6)), [0.0, 0.5, 1.0]).u(rw.theta, X))

    class Inv(DomainPDE):
        name = "t-scaled-field"
        geometry = Box([0.0], [2.0])
        T = 4.0
        outputs = ("u",)
        unknown_fields = {"a": dict(hidden=(4,), inputs=("t",))}
        conditions = [Dirichlet("x-", 0.0), Dirichlet("x+", 0.0), Initial(lambda x: torch.sin(math.pi / 2 * x[:, 0]))]

        def equation(self, u, x):
            return u.diff(x, "t") - u.coef["a"](x) * u.diff(x, "x", "x")

    pf = Inv(n_interior=10, n_boundary=3, input_scaling="box", hidden=(5,))
    assert pf.field_networks()[0][1].input_map == ((2.0,), (0.5,))  # its t axis's map
    rf = fs.solve(pf, "centralized", clients=1, max_iters=2)
    fs.save_model(rf, pf, tmp_path / "f")
    uf = fs.load_model(tmp_path / "f")
    Xf = X * torch.tensor([2.0, 4.0], dtype=torch.float64)
    assert torch.equal(uf(Xf), pf.predict(rf.theta, Xf))
    assert torch.allclose(uf.fields["a"](Xf), pf.coefficient_fields(rf.theta)["a"](Xf), rtol=1e-14, atol=0)


def test_a_bad_input_map_in_a_model_file_is_refused(tmp_path):
    import json

    pb = get_problem("heat", hidden=(4,), input_scaling="box", n_interior=10, n_boundary=3)
    r = fs.solve(pb, "centralized", clients=1, max_iters=1)
    fs.save_model(r, pb, tmp_path / "a")
    p = tmp_path / "a" / "model.json"
    meta = json.loads(p.read_text())
    meta["architecture"]["input_map"]["scale"] = [2.0, 0.0]
    p.write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="input_map"):
        fs.load_model(tmp_path / "a")


def test_the_docs_example_runs_as_it_stands(capsys):
    import os
    import re

    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "pde.md")
    code = re.search(r"\*\*Input scaling\*\*.*?```py\n(.*?)```", open(doc).read(), flags=re.S).group(1)
    exec(compile(code, doc, "exec"), {"fs": fs})
    assert capsys.readouterr().out.strip().startswith("((0.5, 0.5), (2.0, 2.0))")


def test_first_layer_scale_scales_the_initial_first_layer_only():
    """first_layer_scale (one number or one per axis) multiplies the first layer's initial weight columns
    (exactly: a product by the scale) and draws its biases in [−π, π]; the other layers are θ₀'s own; a wrong
    count is one line."""
    plain = get_problem("heat", hidden=(6, 5))
    pb = get_problem("heat", hidden=(6, 5), first_layer_scale=[3.0, 0.5])
    th0, th = plain.init_params(4), pb.init_params(4)
    w, b, fi, fo = pb.network()._layout[0]
    W0, W = th0[w:w + fi * fo].reshape(fo, fi), th[w:w + fi * fo].reshape(fo, fi)
    assert torch.equal(W[:, 0], 3.0 * W0[:, 0]) and torch.equal(W[:, 1], 0.5 * W0[:, 1])
    assert bool((th[b:b + fo].abs() <= math.pi).all()) and float(th[b:b + fo].abs().max()) > 0
    assert torch.equal(th[b + fo:], th0[b + fo:])
    assert torch.equal(get_problem("heat", hidden=(6, 5), first_layer_scale=[2.0]).init_params(4)[w:w + fi * fo],
                       2.0 * th0[w:w + fi * fo])
    with pytest.raises(ProblemError, match="one number or one per input axis"):
        get_problem("heat", hidden=(6, 5), first_layer_scale=[1.0, 2.0, 3.0]).init_params(0)


def test_pinnacle_maps_its_box_by_default():
    """PINNacle's cases default to input_scaling=box: Heat 2d-LT's t ∈ [0, 100] reaches the first layer in [−1, 1]
    (raw, tanh saturates along t: the reduced run's L2RE 1.00); none is still there to ask for."""
    p = get_problem("pinnacle", case="heat2d-lt", n_interior=8, n_boundary=2, hidden=[4])
    assert p.options["input_scaling"] == "box"
    assert p.network().input_map == ((0.5, 0.5, 50.0), (2.0, 2.0, 0.02))
    q = get_problem("pinnacle", case="heat2d-lt", n_interior=8, n_boundary=2, hidden=[4], input_scaling="none")
    assert q.network().input_map is None


def test_heat_longtime_reference_reads_time_in_order():
    """Their ref/heat_longtime.dat (COMSOL, one column per time): the rows at t = 0 are the initial condition
    sin(4πx) sin(3πy) to COMSOL's projection of it (6.9e-4 measured; 2e-3 asserted), and t reaches 100 — a column
    read out of order would be off by O(1) (|u| reaches √π ≈ 1.77 by t = 1).  Needs a checkout in
    $FEDSCIML_PINNACLE."""
    import os

    d = os.environ.get("FEDSCIML_PINNACLE")
    if not d or not os.path.isfile(os.path.join(d, "ref", "heat_longtime.dat")):
        pytest.skip("no PINNacle checkout with ref/heat_longtime.dat in $FEDSCIML_PINNACLE")
    p = get_problem("pinnacle", case="heat2d-lt", pinnacle_dir=d, n_interior=8, n_boundary=2, hidden=[4])
    X, U = p._test()
    m = X[:, 2] == 0
    ic = torch.sin(4 * math.pi * X[m, 0]) * torch.sin(3 * math.pi * X[m, 1])
    assert int(m.sum()) == 192 and float(X[:, 2].max()) == 100.0
    assert float((U[m, 0] - ic).abs().max()) <= 2e-3
