"""Coefficient fields from data (fs.GridCoefficient, fs.ScatteredCoefficient) inside a DomainPDE's equation.

References: scipy's RegularGridInterpolator (nearest/linear), NearestNDInterpolator and LinearNDInterpolator on
random points (nearest: the same data value, bitwise; linear: the same affine combination, computed in another
order — tolerance 1e-12 relative to the values' size, ~100× the float64 round-off of a few products); linear
interpolation reproduces an affine function to the same tolerance.
"""
import numpy as np
import pytest
import torch
from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator, RegularGridInterpolator
from torch.func import jacrev, vmap

import fedsciml as fs
from fedsciml.problems.conditions import Dirichlet, Initial
from fedsciml.problems.domain import DomainPDE
from fedsciml.problems.geometry import Box

F64 = torch.float64
TOL = 1e-12


def _grid(rng, shape):
    return [np.sort(rng.random(n)) for n in shape]


@pytest.mark.parametrize("shape", [(9,), (7, 11), (5, 6, 4)])
@pytest.mark.parametrize("method", ["linear", "nearest"])
def test_grid_matches_scipy_under_vmap(shape, method):
    rng = np.random.default_rng(len(shape))
    axes = _grid(rng, shape)
    V = rng.standard_normal(shape)
    lo, hi = np.array([a[0] for a in axes]), np.array([a[-1] for a in axes])
    Z = lo + (hi - lo) * rng.random((200, len(shape)))
    want = RegularGridInterpolator(axes, V, method=method)(Z)
    c = fs.GridCoefficient(axes, V, method=method)
    X = torch.as_tensor(np.hstack([Z, rng.random((200, 1))]))     # one more input (t): not read
    got_batch, got_vmap = c(X).numpy(), vmap(c)(X).numpy()
    if method == "nearest":
        assert np.array_equal(got_batch, want) and np.array_equal(got_vmap, want)
    else:
        assert np.abs(got_vmap - want).max() <= TOL * np.abs(V).max()
        assert np.abs(got_batch - want).max() <= TOL * np.abs(V).max()


def test_grid_linear_reproduces_affine_and_its_gradient():
    rng = np.random.default_rng(3)
    axes = _grid(rng, (6, 8))
    X, Y = np.meshgrid(*axes, indexing="ij")
    c = fs.GridCoefficient(axes, 2.0 - 3.0 * X + 0.5 * Y)
    lo, hi = np.array([a[0] for a in axes]), np.array([a[-1] for a in axes])
    Z = torch.as_tensor(lo + (hi - lo) * rng.random((100, 2)))
    got = vmap(c)(Z)
    assert torch.allclose(got, 2.0 - 3.0 * Z[:, 0] + 0.5 * Z[:, 1], rtol=0, atol=TOL * 5)
    g = vmap(jacrev(c))(Z)        # ∇a: what ∇·(a∇u) needs; exact for an affine a
    assert torch.allclose(g, torch.tensor([-3.0, 0.5], dtype=F64).expand(100, 2), rtol=0, atol=TOL * 50)


def test_grid_outside_is_the_edge_value_and_dtype_follows_x():
    c = fs.GridCoefficient([np.array([0.0, 1.0])], np.array([1.0, 3.0]), method="linear")
    x = torch.tensor([[-0.5], [0.25], [1.5]], dtype=torch.float32)
    out = c(x)
    assert out.dtype == torch.float32 and torch.equal(out, torch.tensor([1.0, 1.5, 3.0]))
    assert c(torch.tensor([0.5], dtype=F64)).shape == ()


def test_from_points_builds_the_grid_from_shuffled_rows():
    rng = np.random.default_rng(4)
    axes = _grid(rng, (5, 7))
    V = rng.standard_normal((5, 7))
    X, Y = np.meshgrid(*axes, indexing="ij")
    rows = np.column_stack([X.ravel(), Y.ravel(), V.ravel()])[rng.permutation(35)]
    c = fs.GridCoefficient.from_points(rows[:, :2], rows[:, 2], method="nearest")
    assert torch.equal(c.values, torch.as_tensor(V))
    with pytest.raises(fs.ProblemError, match="do not cover the grid"):
        fs.GridCoefficient.from_points(rows[1:, :2], rows[1:, 2])


def test_from_file_reads_rows_bounded(tmp_path):
    rng = np.random.default_rng(5)
    axes = _grid(rng, (4, 6))
    V = rng.standard_normal((4, 6))
    X, Y = np.meshgrid(*axes, indexing="ij")
    rows = np.column_stack([X.ravel(), Y.ravel(), V.ravel()])[rng.permutation(24)]
    path = tmp_path / "coef.dat"
    path.write_text("% x y a\n" + "\n".join(" ".join(repr(float(v)) for v in r) for r in rows) + "\n")
    g = fs.GridCoefficient.from_file(path, method="nearest")
    assert torch.equal(g.values, torch.as_tensor(V))
    s = fs.ScatteredCoefficient.from_file(path)
    Z = torch.as_tensor(rng.random((20, 2)))
    assert torch.equal(s(Z), torch.as_tensor(NearestNDInterpolator(rows[:, :2], rows[:, 2])(Z.numpy())))
    path.write_text("0 0 1\n0 1 nan\n1 0 1\n1 1 1\n")
    with pytest.raises(fs.ProblemError, match="1 row\\(s\\) hold a NaN") as e:
        fs.GridCoefficient.from_file(path)
    assert "coef.dat" in str(e.value)
    with pytest.raises(fs.ProblemError, match="more than the 5"):
        fs.GridCoefficient.from_file(path, max_bytes=5)


@pytest.mark.parametrize("d", [2, 3])
def test_scattered_matches_scipy(d):
    rng = np.random.default_rng(10 + d)
    P, v = rng.random((150, d)), rng.standard_normal(150)
    Z = rng.random((300, d)) * 1.2 - 0.1                       # some outside the convex hull
    near = vmap(fs.ScatteredCoefficient(P, v, method="nearest"))(torch.as_tensor(Z)).numpy()
    assert np.array_equal(near, NearestNDInterpolator(P, v)(Z))
    lin = vmap(fs.ScatteredCoefficient(P, v, method="linear"))(torch.as_tensor(Z)).numpy()
    want = LinearNDInterpolator(P, v)(Z)                      # NaN outside the hull, as scipy's
    assert np.array_equal(np.isnan(lin), np.isnan(want)) and np.isnan(want).any() and (~np.isnan(want)).sum() > 100
    assert np.nanmax(np.abs(lin - want)) <= TOL * np.abs(v).max()
    # an affine function is reproduced inside the hull
    a = fs.ScatteredCoefficient(P, 1.0 + P @ np.arange(1.0, d + 1), method="linear")
    inside = ~np.isnan(want)
    assert np.abs(a(torch.as_tensor(Z[inside])).numpy() - (1.0 + Z[inside] @ np.arange(1.0, d + 1))).max() <= TOL * 10


@pytest.mark.parametrize("bad, says", [
    (lambda: fs.GridCoefficient([np.array([0.0, 1.0])], np.ones(2), method="cubic"), "method must be one of"),
    (lambda: fs.GridCoefficient([np.array([1.0, 0.0])], np.ones(2)), "strictly increasing"),
    (lambda: fs.GridCoefficient([np.array([0.0, 1.0])], np.ones(3)), "values have shape"),
    (lambda: fs.GridCoefficient([np.array([0.0, 1.0])], np.array([1.0, np.nan])), "not finite"),
    (lambda: fs.GridCoefficient([np.array([0.0, 1.0])], np.ones(2), dims=(0, 1)), "dims must be 1 distinct"),
    (lambda: fs.ScatteredCoefficient(np.random.rand(5, 1), np.ones(5), method="linear"), "1-D scattered"),
    (lambda: fs.ScatteredCoefficient(np.random.rand(5, 2), np.ones(4)), "need points"),
    (lambda: fs.ScatteredCoefficient(np.c_[np.arange(5.0), np.arange(5.0)], np.ones(5), method="linear"),
     "no Delaunay triangulation"),
])
def test_bad_input_refused_in_one_line(bad, says):
    with pytest.raises(fs.ProblemError, match=says) as e:
        bad()
    assert "\n" not in str(e.value)


class VaryingHeat(DomainPDE):
    """u_t = ∇·(a∇u) + f on [0, 1]² × [0, 1] with a(x, y) = 1 + x + 2y given on a 5 × 5 grid (bilinear: exact)
    and u = sin πx sin πy e^{−t}: f = u_t − ∇·(a∇u) in closed form."""

    name = "t-varying-heat"
    geometry = Box([0, 0], [1, 1])
    T = 1.0
    hidden = (8,)
    conditions = [Dirichlet("x-", 0.0), Dirichlet("x+", 0.0), Dirichlet("y-", 0.0), Dirichlet("y+", 0.0), Initial(None)]
    g = np.linspace(0, 1, 5)
    a = fs.GridCoefficient([g, g], 1 + g[:, None] + 2 * g[None, :])

    def equation(self, u, x):
        ax = jacrev(self.a)(x)              # ∇a (x, y; the t entry is 0)
        u_lap = u.laplacian(x)
        grad = u.grad(x)
        return u.diff(x, "t") - (self.a(x) * u_lap + ax[0] * grad[0] + ax[1] * grad[1]) - self.f(x)

    @staticmethod
    def f(x):
        pi = torch.pi
        s, c = torch.sin(pi * x[..., 0]), torch.cos(pi * x[..., 0])
        sy, cy = torch.sin(pi * x[..., 1]), torch.cos(pi * x[..., 1])
        e = torch.exp(-x[..., 2])
        a = 1 + x[..., 0] + 2 * x[..., 1]
        u_t = -s * sy * e
        div = a * (-2 * pi ** 2 * s * sy * e) + pi * c * sy * e + 2 * pi * s * cy * e
        return u_t - div

    def exact(self, x):
        return torch.sin(torch.pi * x[:, 0]) * torch.sin(torch.pi * x[:, 1]) * torch.exp(-x[:, 2])


def test_coefficient_inside_equation_vmap_and_theta_jacobian():
    """The exact solution leaves a residual of round-off with the grid coefficient (vmap over points), and the
    θ-Jacobian through the coefficient equals the autograd loop's."""
    p = VaryingHeat(n_interior=12, n_boundary=4)
    X = p.domain().sample_interior(50, "uniform", 0)

    from fedsciml.problems.conditions import Field

    fn = lambda y: p.exact(y[None]).reshape(1)  # noqa: E731  (the closed form as the field)
    r = vmap(lambda y: p.equation(Field(fn, ("u",), p.axes, 2, {}), y))(X)
    assert r.abs().max() <= 1e-12 * 50
    (obj,) = p.client_objectives(1, seed=1)
    theta = p.init_params(2)
    J = obj.jacobian(theta)
    assert torch.allclose(J, obj.jacobian_loop(theta), rtol=1e-12, atol=1e-12 * float(J.abs().max()))
