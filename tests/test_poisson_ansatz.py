"""``poisson --u-conditions ansatz``: zero Dirichlet data held exactly by u = B·N, B = Π 4xᵢ(1 − xᵢ)
(:func:`fedsciml.problems.base.unit_box_bubble`, ``Poisson.bubble``), checked against nested ``jacfwd`` and
closed forms; the residual rows, the split among clients, gn = centralized, the saved model and the options it
makes inapplicable."""
import math

import pytest
import torch
from torch.func import jacfwd, vmap

import fedsciml as fs
from fedsciml.core.nn import MLP
from fedsciml.problems import get_problem
from fedsciml.problems.base import ProblemError, unit_box_bubble


def _rel(a, b):
    return float((a - b).abs().max()) / max(float(b.abs().max()), 1e-300)


@pytest.mark.parametrize("act", ["tanh", "sin", "softplus"])
def test_value_gradient_laplacian_is_the_network_its_jacobian_and_hessian_trace(act):
    """The forward pass's gradient is jacfwd's and its Laplacian the trace of nested jacfwd's Hessian (1e-12
    relative: the same derivatives summed in another order, a few roundings of O(1) terms); the value bitwise
    the network's (the same operations); relu has no closed form and falls back to nested jacfwd."""
    net = MLP([3, 7, 5, 1], act)
    th = torch.randn(net.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x = torch.rand(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    u, g, lap = net.value_gradient_laplacian(th, x)
    assert torch.equal(u, net(th, x)) and g.shape == (6, 3) and lap.shape == (6,)
    assert _rel(g, vmap(jacfwd(lambda y: net(th, y)))(x)) <= 1e-12
    ref = vmap(lambda y: torch.trace(jacfwd(jacfwd(lambda z: net(th, z)))(y)))(x)
    assert _rel(lap, ref) <= 1e-12
    u1, g1, lap1 = net.value_gradient_laplacian(th, x[0])  # one point: [d] and 0-d
    assert g1.shape == (3,) and u1.shape == () and _rel(g1, g[0]) <= 1e-12 and _rel(lap1, lap[0]) <= 1e-12
    _, lap_only = net.value_and_laplacian(th, x)
    assert torch.equal(lap_only, lap)  # one pass serves both: bitwise the same Laplacian


def test_unit_box_bubble_against_autograd_and_its_closed_form():
    """B = Π 4xᵢ(1 − xᵢ): ∇B and ΔB from jacfwd (1e-13 relative), B zero on every face bitwise (a factor 0),
    1 at the centre, and no division by a vanishing factor (finite on the faces)."""
    x = torch.rand(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    B, gB, lB = unit_box_bubble(x)
    one = lambda y: unit_box_bubble(y)[0]  # noqa: E731
    assert _rel(gB, vmap(jacfwd(one))(x)) <= 1e-13
    assert _rel(lB, vmap(lambda y: torch.trace(jacfwd(jacfwd(one))(y)))(x)) <= 1e-13
    assert _rel(B, (4 * x * (1 - x)).prod(-1)) <= 1e-15
    face = x.clone()
    face[:, 2] = 1.0
    Bf, gf, lf = unit_box_bubble(face)
    assert torch.equal(Bf, torch.zeros(5, dtype=torch.float64)) and bool(torch.isfinite(gf).all() & torch.isfinite(lf).all())
    assert float(unit_box_bubble(torch.full((4,), 0.5, dtype=torch.float64))[0]) == 1.0  # (4·½·½)⁴, exact


def _ansatz(**kw):
    return get_problem("poisson", dim=3, u_conditions="ansatz", n_interior=40, hidden=[6, 6], **kw)


def test_the_interior_rows_are_the_pde_residual_of_b_times_n_and_there_are_no_boundary_rows():
    """−Δ(B·N) − f from the product rule equals nested jacfwd's Laplacian of u (1e-12 relative); u is 0 on the
    boundary for every θ (bitwise: B has a factor 0 there); every row is a PDE row."""
    pb = _ansatz()
    th = pb.init_params(4)
    x = torch.rand(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    u, lap = vmap(lambda y: pb.u_and_laplacian(th, y))(x)
    ref = vmap(lambda y: torch.trace(jacfwd(jacfwd(lambda z: pb.u(th, z)))(y)))(x)
    # u: one point at a time against the batch, the same products in another blocking (a few roundings of O(1))
    assert _rel(lap, ref) <= 1e-12 and _rel(u, pb.u(th, x)) <= 1e-13
    x[:, 1] = 0.0
    assert torch.equal(pb.u(th, x), torch.zeros(7, dtype=torch.float64))
    (obj,) = pb.client_objectives(1)
    assert [p.name for p in obj.parts] == ["interior"] and pb.rows_per_client(1) == 40
    assert pb.jets() == (None, None)  # no K-FAC channel form for B·N


def test_gn_on_four_clients_takes_centralized_lm_steps_and_the_error_falls():
    """4 clients hold the same 40 interior points (no boundary rows): gn's θ equals centralized LM's within 1e-9
    of max|θ| (the same sums grouped by client, through the damped solve's conditioning) and 6 steps reduce the
    error on Π sin πxᵢ."""
    pb = _ansatz()
    c = fs.solve(pb, "centralized", max_iters=6)
    g = fs.solve(pb, "gn", clients=4, rounds=6)
    assert float((c.theta - g.theta).abs().max()) <= 1e-9 * float(c.theta.abs().max())
    r0 = pb.evaluate(pb.init_params(0))["rel_l2"]
    assert c.final["rel_l2"] < 0.5 * r0


def test_the_options_rebuild_the_problem_and_a_saved_model_is_evaluated_through_its_ansatz(tmp_path):
    """What a client process, a Flower node and ``fs.load_model`` do — ``get_problem(name, **options)`` — rebuilds
    the problem (boundary_weight stays None: no rows to weigh); the saved model, loaded by name alone, is u = B·N
    bitwise (the same operations on the same θ)."""
    pb = _ansatz()
    assert pb.boundary_weight is None
    again = get_problem("poisson", **pb.options)
    assert again.options == pb.options and again.bubble() is not None
    r = fs.solve(pb, "centralized", max_iters=2)
    fs.save_model(r, pb, tmp_path / "m")
    x = torch.rand(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    for u in (fs.load_model(tmp_path / "m"), fs.load_model(tmp_path / "m", problem=pb)):
        assert torch.equal(u(x).reshape(-1), pb.u(r.theta, x))
    plain = get_problem("poisson", dim=3, n_interior=40, hidden=[6, 6])
    assert plain.bubble() is None and plain.model_description(plain.init_params(0))["ansatz"] is False


def test_bad_input_is_one_line():
    with pytest.raises(ProblemError, match="variant 'product' only; variant 'sum'"):
        get_problem("poisson", dim=3, u_conditions="ansatz", variant="sum")
    with pytest.raises(ProblemError, match="n_boundary has no effect here: with u_conditions ansatz"):
        get_problem("poisson", dim=3, u_conditions="ansatz", n_boundary=7)
    with pytest.raises(ProblemError, match="u_conditions"):
        get_problem("poisson", dim=3, u_conditions="hard")
    assert math.isclose(get_problem("poisson", dim=3, u_conditions="ansatz").exact(
        torch.full((1, 3), 0.5, dtype=torch.float64)).item(), 1.0)
