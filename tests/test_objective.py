"""The Jacobian engine: every problem's residual Jacobian against independent references.

References: central finite differences of ``residual()``, the plain per-point
autograd loop (``PointwiseLeastSquares.jacobian_loop``) and, for the network's
forward Laplacian, nested ``jacfwd`` and finite differences in x.
"""
import pytest
import torch
from torch.func import vmap

from fedsciml.core.nn import MLP
from fedsciml.core.objective import (GNStats, LinearLeastSquares, PointwiseLeastSquares, ResidualPart, gn_stats_from,
                                stack_objectives)
from fedsciml.problems import get_problem
from fedsciml.problems.pinn import laplacian

# every built-in field problem (and its variants), shrunk to a few points and a small network
SMALL = {"n_interior": 6}
CASES = [
    ("bratu", {**SMALL}),
    ("bratu", {**SMALL, "variant": "manufactured", "lam": 2.0}),
    ("allen-cahn", {**SMALL}),
    ("fisher", {**SMALL}),
    ("fisher", {**SMALL, "variant": "paper-code", "rho": 2.0}),
    ("reaction-diffusion", {**SMALL}),
    ("poisson", {**SMALL, "dim": 1}),
    ("poisson", {**SMALL, "dim": 2, "n_boundary": 2}),
    ("poisson", {**SMALL, "dim": 3, "n_boundary": 1, "variant": "sum"}),
    ("sin1d", {"n_samples": 6, "n": 4}),
    ("gauss2d", {"n_samples": 3}),
]
CLIENTS = {"gauss2d": 4}  # a √K×√K grid
IDS = [f"{n}-" + "-".join(f"{k}={v}" for k, v in o.items() if k not in ("n_interior", "n_samples")) for n, o in CASES]


def small_problem(name, opts, hidden=(5, 4)):
    """The problem with a narrower network, so finite differences over every parameter stay cheap."""
    pb = get_problem(name, **opts)
    net = MLP([pb.input_dim(), *hidden, 1])
    pb.__dict__["_net"] = net
    return pb


def fd_jacobian(f, theta, h=1e-6):
    cols = []
    for j in range(theta.numel()):
        e = torch.zeros_like(theta)
        e[j] = h
        cols.append((f(theta + e) - f(theta - e)) / (2 * h))
    return torch.stack(cols, dim=1)


@pytest.fixture(scope="module", params=range(len(CASES)), ids=IDS)
def case(request):
    name, opts = CASES[request.param]
    pb = small_problem(name, opts)
    obj = stack_objectives(pb.client_objectives(CLIENTS.get(name, 2), seed=1))
    theta = pb.init_params(4) + 0.1 * torch.randn(obj.n_params, generator=torch.Generator().manual_seed(0),
                                                 dtype=torch.float64)
    return pb, obj, theta


def test_jacobian_matches_autograd_loop(case):
    _pb, obj, theta = case
    J = obj.jacobian(theta)
    assert J.shape == (obj.n_residuals, obj.n_params)
    torch.testing.assert_close(J, obj.jacobian_loop(theta), rtol=1e-11, atol=1e-11)


def test_jacobian_matches_central_differences(case):
    _pb, obj, theta = case
    J = obj.jacobian(theta)
    fd = fd_jacobian(obj.residual, theta)
    scale = float(J.abs().max())
    assert float((J - fd).abs().max()) <= 1e-6 * max(1.0, scale)


def test_residual_and_jacobian_in_one_pass_agree_with_separate_calls(case):
    _pb, obj, theta = case
    r, J = obj.residual_and_jacobian(theta)
    torch.testing.assert_close(r, obj.residual(theta), rtol=1e-12, atol=1e-13)  # another pass: round-off differs
    torch.testing.assert_close(J, obj.jacobian(theta), rtol=0, atol=0)  # bitwise: jacobian() is this very pass


def test_jvp_vjp_match_dense_products(case):
    _pb, obj, theta = case
    J = obj.jacobian(theta)
    g = torch.Generator().manual_seed(1)
    v = torch.randn(obj.n_params, generator=g, dtype=torch.float64)
    u = torch.randn(obj.n_residuals, generator=g, dtype=torch.float64)
    # different computations: absolute tolerances scale with the products' magnitudes
    s = max(1.0, float(J.abs().max()))
    torch.testing.assert_close(obj.jvp(theta, v), J @ v, rtol=1e-11, atol=1e-11 * s * float(v.abs().sum()))
    torch.testing.assert_close(obj.vjp(theta, u), J.T @ u, rtol=1e-11, atol=1e-11 * s * float(u.abs().sum()))
    r = obj.residual(theta)
    torch.testing.assert_close(obj.gradient(theta), J.T @ r, rtol=1e-11, atol=1e-11 * s * float(r.abs().sum()))


def test_gn_stats_equal_explicit_products(case):
    _pb, obj, theta = case
    J, r = obj.jacobian_loop(theta), obj.residual(theta)
    st = obj.gn_stats(theta)
    torch.testing.assert_close(st.H, J.T @ J, rtol=1e-11, atol=1e-11)
    assert torch.equal(st.H, st.H.T)  # bitwise: H is symmetrized as ½(H + Hᵀ), and a + b == b + a exactly
    torch.testing.assert_close(st.g, J.T @ r, rtol=1e-11, atol=1e-11)
    assert abs(float(st.loss) - 0.5 * float(r @ r)) <= 1e-12 * max(1.0, float(st.loss))
    assert st.n == obj.n_residuals
    assert abs(float(obj.loss(theta)) - float(st.loss)) <= 1e-12 * max(1.0, float(st.loss))


def test_client_objectives_sum_to_the_pooled_one(case):
    pb, obj, theta = case
    clients = pb.client_objectives(CLIENTS.get(pb.name, 2), seed=1)
    H = sum(c.gn_stats(theta).H for c in clients)
    g = sum(c.gn_stats(theta).g for c in clients)
    st = obj.gn_stats(theta)
    # sums in another order: tolerances relative to the entries' scale (round-off of the cancelling ones)
    torch.testing.assert_close(st.H, H, rtol=1e-12, atol=1e-12 * max(1.0, float(H.abs().max())))
    torch.testing.assert_close(st.g, g, rtol=1e-12, atol=1e-12 * max(1.0, float(st.H.diagonal().max()) ** 0.5
                                                                    * float(obj.residual(theta).norm())))


def test_weights_live_inside_the_residual():
    net = MLP([1, 3, 1])
    theta = net.init(0)
    x = torch.linspace(0, 1, 5, dtype=torch.float64).reshape(-1, 1)
    fn = lambda th, p: net(th, p)  # noqa: E731
    a = PointwiseLeastSquares([ResidualPart("a", fn, x, 1.0)], net.n_params)
    b = PointwiseLeastSquares([ResidualPart("a", fn, x, 9.0)], net.n_params)
    torch.testing.assert_close(b.residual(theta), 3.0 * a.residual(theta), rtol=1e-15, atol=0)
    torch.testing.assert_close(b.jacobian(theta), 3.0 * a.jacobian(theta), rtol=1e-15, atol=0)
    torch.testing.assert_close(b.loss(theta), 9.0 * a.loss(theta), rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="weight"):
        PointwiseLeastSquares([ResidualPart("a", fn, x, 0.0)], net.n_params)
    with pytest.raises(ValueError, match="at least one"):
        PointwiseLeastSquares([ResidualPart("a", fn, x[:0], 1.0)], net.n_params)


def test_linear_least_squares_is_exact():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(7, 3, generator=g, dtype=torch.float64)
    b = torch.randn(7, generator=g, dtype=torch.float64)
    w = torch.randn(3, generator=g, dtype=torch.float64)
    obj = LinearLeastSquares(A, b)
    assert torch.equal(obj.jacobian(w), A)
    torch.testing.assert_close(obj.residual(w), A @ w - b)
    st = obj.gn_stats(w)
    torch.testing.assert_close(st.H, A.T @ A)
    torch.testing.assert_close(st.g, A.T @ (A @ w - b))
    pooled = stack_objectives([LinearLeastSquares(A[:3], b[:3]), LinearLeastSquares(A[3:], b[3:])])
    # not bitwise: the pooled A is a copy (other alignment), and BLAS kernels may then sum in another order
    torch.testing.assert_close(pooled.residual(w), obj.residual(w), rtol=1e-14, atol=1e-14)
    with pytest.raises(ValueError, match="matching n"):
        LinearLeastSquares(A, b[:5])


def test_gn_stats_from_is_symmetric_and_typed():
    J = torch.randn(5, 4, dtype=torch.float64)
    r = torch.randn(5, dtype=torch.float64)
    st = gn_stats_from(J, r)
    assert isinstance(st, GNStats) and torch.equal(st.H, st.H.T) and st.n == 5  # bitwise: symmetrized ½(H + Hᵀ)


# --- the network's derivatives in x ---------------------------------------------------------

@pytest.mark.parametrize("activation", ["tanh", "sin", "softplus"])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_forward_laplacian_matches_nested_jacfwd(activation, d):
    net = MLP([d, 6, 5, 1], activation)
    theta = net.init(2)
    x = torch.rand(9, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64)
    u, lap = net.value_and_laplacian(theta, x)
    torch.testing.assert_close(u, net(theta, x), rtol=1e-13, atol=1e-14)  # another pass: round-off may differ
    ref = vmap(lambda xi: laplacian(net, theta, xi))(x)
    torch.testing.assert_close(lap, ref, rtol=1e-12, atol=1e-12)
    # one point at a time (the shape vmap sees) gives the same numbers
    u0, lap0 = net.value_and_laplacian(theta, x[0])
    assert u0.ndim == 0 and lap0.ndim == 0
    torch.testing.assert_close(lap0, lap[0], rtol=1e-13, atol=1e-13)


def test_forward_laplacian_matches_finite_differences():
    net = MLP([2, 8, 8, 1])
    theta = net.init(0)
    x = torch.tensor([0.3, 0.6], dtype=torch.float64)
    h = 1e-4
    e = torch.eye(2, dtype=torch.float64)
    fd = sum((net(theta, x + h * e[i]) - 2 * net(theta, x) + net(theta, x - h * e[i])) / h ** 2 for i in range(2))
    assert abs(float(net.value_and_laplacian(theta, x)[1] - fd)) < 1e-5


def test_forward_laplacian_of_a_linear_network_is_zero_and_bad_networks_are_named():
    net = MLP([2, 1])
    theta = net.init(0)
    _, lap = net.value_and_laplacian(theta, torch.rand(4, 2, dtype=torch.float64))
    assert torch.equal(lap, torch.zeros(4, dtype=torch.float64))
    with pytest.raises(ValueError, match="scalar-output"):
        MLP([2, 3, 2]).value_and_laplacian(MLP([2, 3, 2]).init(0), torch.zeros(2, dtype=torch.float64))
    with pytest.raises(ValueError, match="entries"):
        net.value_and_laplacian(torch.zeros(5, dtype=torch.float64), torch.zeros(2, dtype=torch.float64))


def test_mlp_layout_and_init():
    net = MLP([2, 3, 1])
    assert net.n_params == 2 * 3 + 3 + 3 * 1 + 1
    theta = net.init(0)
    (W1, b1), (W2, b2) = net.unflatten(theta)
    assert W1.shape == (3, 2) and b1.shape == (3,) and W2.shape == (1, 3) and b2.shape == (1,)
    assert torch.equal(b1, torch.zeros(3, dtype=torch.float64)) and torch.equal(theta, net.init(0))
    x = torch.rand(4, 2, dtype=torch.float64)
    torch.testing.assert_close(net(theta, x), (torch.tanh(x @ W1.T + b1) @ W2.T + b2).squeeze(-1))
    # weights N(0, 1/fan_in): the empirical variance of a wide layer is close to 1/fan_in
    wide = MLP([400, 400, 1]).init(1)
    w = MLP([400, 400, 1]).unflatten(wide)[0][0]
    assert abs(float(w.var()) * 400 - 1.0) < 0.02
    with pytest.raises(ValueError, match="activation"):
        MLP([1, 2, 1], "swish")
    with pytest.raises(ValueError, match="sizes"):
        MLP([1])
