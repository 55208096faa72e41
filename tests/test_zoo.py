"""The zoo on geometries: exact solutions satisfy their residuals, the Burgers reference against an independent
quadrature, the inverse problem's recovered coefficient and its Laplace standard deviation."""
import math

import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.problems.zoo import _lshape_exact, burgers_reference


def _exact_field(p, theta):
    """Make ``p``'s field the exact solution (θ's coefficients kept): every residual row must be ~0."""
    C = len(p.outputs)
    p._point_fn = lambda th: (lambda x: p.exact(x[None]).reshape(C) + 0.0 * th[0])
    return theta


@pytest.mark.parametrize("name", ["heat", "heat-inverse", "kovasznay", "poisson-lshape"])
def test_exact_solutions_have_zero_residual(name):
    p = fs.get_problem(name, n_interior=50, n_boundary=10)
    theta = p.init_params(0)
    if name == "heat-inverse":
        theta[-1] = p.k   # the true diffusivity
    _exact_field(p, theta)
    for obj in p.client_objectives(4, seed=0):
        for part, r in zip(obj.parts, obj.part_residuals(theta)):
            assert float(r.abs().max()) < 1e-9, (name, part.name, float(r.abs().max()))


def test_lshape_exact_is_the_corner_singularity():
    # closed form along the rays: φ = π/2 (x = 0, y > 0): r^{2/3} sin(π/3); the re-entrant edges are zero
    r = torch.tensor([0.1, 0.5, 1.0], dtype=torch.float64)
    up = torch.stack([torch.zeros(3, dtype=torch.float64), r], 1)
    assert torch.allclose(_lshape_exact(up), r ** (2 / 3) * math.sin(math.pi / 3))
    edges = torch.tensor([[0.3, 0.0], [0.0, -0.3], [0.7, -1e-17]], dtype=torch.float64)
    assert float(_lshape_exact(edges).abs().max()) < 1e-15


def test_burgers_reference_against_independent_quadrature():
    nu = 0.01 / math.pi

    def trapezoid(x, t):  # the Cole–Hopf integrals on a fine uniform grid in η (not Gauss–Hermite)
        eta = np.linspace(-12, 12, 200001) * math.sqrt(4 * nu * t)
        y = x - eta
        a = -np.cos(math.pi * y) / (2 * math.pi * nu) - eta ** 2 / (4 * nu * t)
        e = np.exp(a - a.max())
        return -np.trapezoid(np.sin(math.pi * y) * e, eta) / np.trapezoid(e, eta)

    pts = [(0.001, 1.0), (0.01, 0.5), (-0.003, 0.9), (0.5, 0.1), (-0.8, 0.6)]
    got = burgers_reference(np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    assert np.allclose(got, [trapezoid(x, t) for x, t in pts], atol=1e-10, rtol=0)
    # at t = 0 the initial condition; u(±1, t) = 0
    assert np.allclose(burgers_reference(np.array([0.3, 1.0, -1.0]), np.array([0.0, 0.7, 0.7])),
                       [-math.sin(0.3 * math.pi), 0.0, 0.0], atol=1e-12)
    # the PDE by central differences at smooth points (h = 1e-4: truncation ~1e-7)
    h, x0, t0 = 1e-4, 0.4, 0.5
    f = lambda x, t: burgers_reference(np.array([x]), np.array([t]))[0]  # noqa: E731
    ut = (f(x0, t0 + h) - f(x0, t0 - h)) / (2 * h)
    ux = (f(x0 + h, t0) - f(x0 - h, t0)) / (2 * h)
    uxx = (f(x0 + h, t0) - 2 * f(x0, t0) + f(x0 - h, t0)) / h ** 2
    assert abs(ut + f(x0, t0) * ux - nu * uxx) < 1e-6


def test_heat_inverse_recovers_the_diffusivity():
    # exact readings: k from k0 = 0.05 to 0.1 within 1e-2 relative in a short, small federated run
    p = fs.get_problem("heat-inverse", n_interior=100, n_boundary=20)
    r = fs.solve(p, method="gn", clients=4, rounds=25)
    assert r.final["coef_k_rel_err"] < 1e-2, r.final
    assert r.final["coef_k_std"] > 0 and math.isfinite(r.final["coef_k_std"])
    # noisy readings (σ = 0.02): the estimate is within 3 reported standard deviations of the truth
    q = fs.get_problem("heat-inverse", n_interior=100, n_boundary=20, noise=0.02)
    s = fs.solve(q, method="gn", clients=4, rounds=25)
    assert s.final["noise_sigma"] == 0.02
    assert abs(s.final["coef_k"] - 0.1) < 3 * s.final["coef_k_std"], s.final
    assert s.final["coef_k_std"] > r.final["coef_k_std"]


def test_sensors_are_held_by_their_strips():
    p = fs.get_problem("heat-inverse", n_interior=20, n_boundary=5, sensors=8)
    objs = p.client_objectives(4, seed=0)
    for k, o in enumerate(objs):
        (data,) = [q for q in o.parts if q.name == "data"]
        xs = data.points[0][:, 0]
        assert data.n_points == 2 * 11 and bool(((xs >= k / 4) & (xs < (k + 1) / 4)).all())
