"""The problem zoo: equations against their exact solutions, Bratu's closed form, client splits, options."""
import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_bvp
from torch.func import jacfwd, vmap

from fedsciml.core.objective import stack_objectives
from fedsciml.problems import get_problem
from fedsciml.problems.base import FieldProblem, ProblemError
from fedsciml.problems.pde1d import BRATU_LAMBDA_C, BRATU_THETA_C, bratu_theta

PDES = [
    ("bratu", {}),
    ("bratu", {"lam": 3.0}),
    ("bratu", {"variant": "manufactured", "lam": 1.5}),
    ("allen-cahn", {}),
    ("fisher", {"rho": 2.0}),
    ("fisher", {"variant": "paper-code"}),
    ("reaction-diffusion", {}),
    ("poisson", {"dim": 1}),
    ("poisson", {"dim": 2}),
    ("poisson", {"dim": 3, "variant": "sum"}),
    ("poisson", {"dim": 5}),
]
PDE_IDS = [n + "".join(f"-{k}={v}" for k, v in o.items()) for n, o in PDES]


def exact_laplacian(pb, x):
    """Δ of the exact solution at points x [n, d], by nested torch.func (independent of the network path)."""
    def lap(xi):
        H = jacfwd(jacfwd(lambda y: pb.exact(y.unsqueeze(0))[0]))(xi)
        return torch.diagonal(H).sum()
    return vmap(lap)(x)


@pytest.mark.parametrize("name,opts", PDES, ids=PDE_IDS)
def test_source_is_consistent_with_the_exact_solution(name, opts):
    pb = get_problem(name, n_interior=50, **opts)
    d = pb.input_dim()
    x = torch.rand(50, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u = pb.exact(x)
    res = -exact_laplacian(pb, x) + pb.reaction(u, x) - pb.source(x)
    assert float(res.abs().max()) < 1e-10 * max(1.0, float(pb.source(x).abs().max()))


@pytest.mark.parametrize("name,opts", PDES, ids=PDE_IDS)
def test_residual_vanishes_when_the_network_is_replaced_by_the_exact_solution(name, opts):
    """The assembled residual vector (interior and boundary rows, weights inside) is zero at u = u_exact."""
    base = type(get_problem(name, **opts))
    Exact = type("Exact", (base,), {"u": lambda self, theta, x: self.exact(x)})
    pb = Exact(n_interior=20, **opts)
    objs = pb.client_objectives(3, seed=2)
    theta = pb.init_params(0)
    for obj in objs:
        r = obj.residual(theta)
        assert float(r.abs().max()) < 1e-9, (name, [p.name for p in obj.parts])
    # the boundary rows of the real network are u_θ − u_exact on the boundary
    pb_net = get_problem(name, n_interior=20, **opts)
    pooled = stack_objectives(pb_net.client_objectives(3, seed=2))
    bnd = [p for p in pooled.parts if p.name == "boundary"][0]
    xb, g = bnd.points
    # not bitwise: g was evaluated per client, in batches of other sizes (vectorized and scalar tails of sin/exp
    # may differ in the last bit)
    torch.testing.assert_close(g, pb_net.exact(xb), rtol=1e-14, atol=1e-15)


def test_zero_dirichlet_data_where_the_paper_says_so():
    for pb in (get_problem("bratu"), get_problem("poisson", dim=3), get_problem("allen-cahn"),
               get_problem("reaction-diffusion"), get_problem("fisher")):
        xb = torch.cat([pb.boundary_points(k, 2, [0, k, 1]) for k in range(2)])
        assert xb.shape[0] > 0
        assert float(pb.exact(xb).abs().max()) < 1e-15


# --- Bratu ---------------------------------------------------------------------------------------

def test_bratu_critical_value():
    assert abs(BRATU_LAMBDA_C - 3.513830719) < 1e-9
    assert abs(BRATU_THETA_C - 4.7987145610) < 1e-9
    s = BRATU_THETA_C / 4
    assert abs(s * math.tanh(s) - 1.0) < 1e-14


@pytest.mark.parametrize("lam", [0.1, 1.0, 3.0, 3.5])
def test_bratu_closed_form_solves_the_equation(lam):
    t = bratu_theta(lam)
    assert abs(t - math.sqrt(2 * lam) * math.cosh(t / 4)) < 1e-12
    assert t < BRATU_THETA_C  # lower branch
    pb = get_problem("bratu", lam=lam)
    # finite differences of the closed form: −u″ − λeᵘ ≈ 0 (O(h²) truncation)
    x = torch.linspace(0.05, 0.95, 19, dtype=torch.float64).reshape(-1, 1)
    h = 1e-3
    u = pb.exact(x)
    upp = (pb.exact(x + h) - 2 * u + pb.exact(x - h)) / h ** 2
    assert float((-upp - lam * torch.exp(u)).abs().max()) < 1e-5 * max(1.0, float(torch.exp(u).max()) * lam)
    assert float(pb.exact(torch.tensor([[0.0], [1.0]], dtype=torch.float64)).abs().max()) < 1e-15
    # an independent boundary-value solver converges to the same (lower) branch
    xs = np.linspace(0, 1, 41)
    sol = solve_bvp(lambda x, y: np.vstack([y[1], -lam * np.exp(y[0])]), lambda a, b: np.array([a[0], b[0]]),
                    xs, np.zeros((2, xs.size)), tol=1e-10, max_nodes=100000)
    assert sol.success
    xt = np.linspace(0, 1, 101)
    ref = sol.sol(xt)[0]
    ours = pb.exact(torch.as_tensor(xt).reshape(-1, 1)).numpy()
    assert np.max(np.abs(ours - ref)) < 1e-7 * max(1.0, np.abs(ref).max())


@pytest.mark.parametrize("lam", [3.6, 4.0, 100.0, 0.0, -1.0])
def test_bratu_without_solution_is_a_clear_error(lam):
    with pytest.raises(ProblemError, match="λ_c = 3.513830719"):
        get_problem("bratu", lam=lam)


def test_bratu_manufactured_accepts_any_finite_lambda():
    pb = get_problem("bratu", variant="manufactured", lam=5.0)
    x = torch.rand(7, 1, dtype=torch.float64)
    torch.testing.assert_close(pb.exact(x), x[:, 0] * (1 - x[:, 0]))
    with pytest.raises(ProblemError, match="finite"):
        get_problem("bratu", variant="manufactured", lam=float("inf"))


# --- options and errors ----------------------------------------------------------------------------

@pytest.mark.parametrize("name,opts,match", [
    # the one option dialect's words (fedsciml.options.check_value), as a method option's
    ("poisson", {"dim": 0}, r"problem 'poisson' option dim must be an integer in \[1, 100\], got 0$"),
    ("poisson", {"dim": 101}, r"dim must be an integer in \[1, 100\], got 101"),
    ("bratu", {"n_interior": -3}, "n_interior must be an integer ≥ 1, got -3"),
    ("reaction-diffusion", {"boundary_weight": 0.0}, "boundary_weight must be a finite number > 0, got 0.0"),
    ("fisher", {"rho": -1.0}, "rho must be a finite number > 0, got -1.0"),
    ("fisher", {"variant": "other"}, "variant must be one of standard, paper-code, got 'other'"),
    ("bratu", {"sampling": "sobol"}, "must be one of lhs, uniform"),
    ("allen-cahn", {"lam": 1.0}, "has no option 'lam'; allowed: activation, boundary_weight, hidden, n_boundary"),
    ("sin1d", {"n": 0}, "n must be an integer ≥ 1, got 0"),
    ("gauss2d", {"n_samples": "many"}, r"n_samples must be an integer ≥ 1, got 'many' \(str\)"),
])
def test_bad_options_are_named(name, opts, match):
    with pytest.raises(ProblemError, match=match):
        get_problem(name, **opts)


def test_problem_and_method_options_are_one_dialect():
    """A problem option and a method option are declared by the same ``option()`` and checked by the same code:
    a bad value is one line naming the owner, the value and what is allowed, in the same words."""
    import fedsciml as fs
    from fedsciml.options import OptionError, OptionTypeError, Spec
    from fedsciml.problems.base import ProblemOptionError, ProblemOptionTypeError

    (_, p_spec), (_, m_spec) = get_problem("sin1d").specs()["n_samples"], fs.FIPAConfig.specs()["local_steps"]
    assert isinstance(p_spec, Spec) and isinstance(m_spec, Spec) and p_spec.allowed() == m_spec.allowed()
    with pytest.raises(OptionError) as p_err:
        get_problem("sin1d", n_samples=0)
    with pytest.raises(OptionError) as m_err:
        fs.FIPAConfig.from_options(local_steps=0)
    assert str(p_err.value) == "problem 'sin1d' option n_samples must be an integer ≥ 1, got 0"
    assert str(m_err.value) == "fipa option local_steps must be an integer ≥ 1, got 0"
    assert isinstance(p_err.value, ProblemOptionError) and isinstance(p_err.value, ProblemError)
    with pytest.raises(OptionTypeError) as p_type:  # a TypeError and still a ProblemError (a ValueError)
        get_problem("sin1d", n_samples=2.5)
    assert isinstance(p_type.value, ProblemOptionTypeError) and "\n" not in str(p_type.value)
    with pytest.raises(OptionTypeError, match=r"local_steps must be an integer ≥ 1, got 2.5 \(float\)"):
        fs.FIPAConfig.from_options(local_steps=2.5)
    with pytest.raises(AttributeError, match=r"fedsciml.option\(default, help, type"):  # Param's replacement named
        fs.Param


def test_a_user_problem_declares_options_with_option():
    import fedsciml as fs

    class Wave(fs.PDE):
        name = "wave-dialect-test"
        params = {"k": fs.option(2.0, "wave number", float, lo=0, lo_open=True)}

        def exact(self, x):
            return x[..., 0] * 0

        def equation(self, u, x):
            return u(x)

    assert Wave().k == 2.0 and Wave(k=3).k == 3.0 and isinstance(Wave(k=3).k, float)
    with pytest.raises(ProblemError, match="problem 'wave-dialect-test' option k must be a finite number > 0, got -1"):
        Wave(k=-1)
    with pytest.raises(TypeError, match="declared with fedsciml.option"):
        type("Bad", (fs.PDE,), {"name": "bad-dialect-test", "params": {"k": 2.0}})()


def test_a_problem_option_without_effect_is_refused_not_ignored(capsys):
    """As a method's (MethodConfig.inapplicable), a problem option given at another value than its default that
    acts on nothing with the other options is refused, one line naming it and why: ridge-linear's decay with
    the flat spectrum (its data were the same whatever the decay).  Its default passed along, and the option
    where it acts, pass; the data do depend on it there."""
    from fedsciml.cli.main import main
    from fedsciml.problems import get_problem
    from fedsciml.problems.base import ProblemOptionError

    with pytest.raises(ProblemOptionError, match=r"problem 'ridge-linear' option decay has no effect here: .*flat"):
        get_problem("ridge-linear", decay=3.0)
    assert get_problem("ridge-linear", decay=2.0).decay == 2.0  # the default, forwarded: changes nothing
    a = get_problem("ridge-linear", dim=4, spectrum="powerlaw", decay=3.0).spectrum_values()
    b = get_problem("ridge-linear", dim=4, spectrum="powerlaw").spectrum_values()
    assert a[-1] / a[0] == pytest.approx(4.0 ** -3, rel=1e-12) and b[-1] / b[0] == pytest.approx(4.0 ** -2, rel=1e-12)
    with pytest.raises(ProblemOptionError, match=r"option data_seed has no effect here: .*noise is 0"):
        get_problem("heat-inverse", data_seed=3)
    y3 = get_problem("heat-inverse", noise=0.1, data_seed=3).sensor_data()[1]
    assert not torch.equal(y3, get_problem("heat-inverse", noise=0.1).sensor_data()[1])
    import fedsciml as fs

    class Line(fs.PDE):  # a user's 1-D PDE: --n-boundary acts on nothing (the two end points)
        name = "line-idle-test"

        def exact(self, x):
            return x[..., 0] * 0

        def equation(self, u, x):
            return u(x)

    with pytest.raises(ProblemOptionError, match=r"option n_boundary has no effect here: a 1-D interval"):
        Line(n_boundary=7)

    class Square(Line):
        name = "square-idle-test"
        dim = 2

    assert Square(n_boundary=7).n_boundary == 7 and Line().n_boundary == 50
    assert main(["ridge", "--decay", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: problem 'ridge-linear' option --decay has no effect here: it is the exponent of "
                   "--spectrum powerlaw, and the spectrum is flat"]


def test_unknown_problem_and_bad_client_counts():
    with pytest.raises(ProblemError, match="unknown problem 'nope'"):
        get_problem("nope")
    for k in (0, -2, 1.5):
        with pytest.raises(ProblemError, match="positive integer"):
            get_problem("bratu", n_interior=4).client_objectives(k)
    with pytest.raises(ProblemError, match="perfect square"):
        get_problem("gauss2d", n_samples=4).client_objectives(2)
    with pytest.raises(ProblemError, match="8-client"):
        get_problem("sin1d", split="uneven", n_samples=4).client_objectives(4)


@pytest.mark.parametrize("name,opts,sizes,n_int,beta", [
    ("bratu", {}, [1, 32, 32, 32, 1], 400, 10.0),
    ("allen-cahn", {}, [1, 32, 32, 32, 1], 400, 10.0),
    ("fisher", {}, [1, 32, 32, 32, 1], 400, 10.0),
    ("reaction-diffusion", {}, [1, 32, 32, 32, 1], 800, 100.0),
    ("poisson", {"dim": 1}, [1, 32, 32, 32, 1], 400, 10.0),
    ("poisson", {"dim": 2}, [2, 32, 32, 32, 1], 400, 100.0),
    ("poisson", {"dim": 5}, [5, 32, 32, 32, 1], 4000, 100.0),  # the FIPA authors' d = 5 script's 4000, in total
])
def test_pde_defaults_follow_the_paper(name, opts, sizes, n_int, beta):
    pb = get_problem(name, **opts)
    assert pb.network().sizes == sizes and pb.network().activation == "tanh"
    assert pb.n_interior == n_int and pb.boundary_weight == beta
    obj = pb.client_objectives(2, seed=0)[0]
    assert obj.parts[0].n_points == n_int // 2  # a total, split among the clients
    bnd = [p for p in obj.parts if p.name == "boundary"]
    assert bnd and bnd[0].weight == beta


def test_fitting_defaults_follow_the_paper():
    s = get_problem("sin1d")
    assert s.network().sizes == [1, 20, 20, 20, 1] and s.n == 2 and s.n_samples == 400
    g = get_problem("gauss2d")
    assert g.network().sizes == [2, 20, 20, 20, 20, 1] and g.n_samples == 1000 and g.default_clients == 9
    X = g.test_inputs()
    assert X.shape == (256 * 256, 2)
    # the mixture's first component peaks near (0.18, 0.28) with height ≈ 1.40
    peak = g.exact(torch.tensor([[0.18, 0.28]], dtype=torch.float64))
    assert abs(float(peak) - 1.40) < 0.02
    assert set(g.evaluate(g.init_params(0))) == {"mse"}
    assert set(get_problem("bratu").evaluate(get_problem("bratu").init_params(0))) == {"rel_l2"}


def test_relative_l2_of_the_exact_interpolant_is_zero():
    pb = get_problem("allen-cahn")
    X, u = pb._test()
    assert X.shape == (1001, 1)
    assert float((pb.exact(X) - u).norm() / u.norm()) == 0.0  # bitwise: u is exact(X), the same call


# --- client splits -----------------------------------------------------------------------------------

def _interior(obj):
    part = obj.parts[0]
    return part.points[0] if isinstance(part.points, tuple) else part.points


SPLITS = [
    ("bratu", {"n_interior": 30}, 3),
    ("reaction-diffusion", {"n_interior": 30}, 4),             # 30 among 4 clients: 8, 8, 7, 7
    ("poisson", {"dim": 2, "n_interior": 30, "n_boundary": 5}, 3),
    ("poisson", {"dim": 3, "n_interior": 30, "n_boundary": 4}, 2),
    ("sin1d", {"n_samples": 30}, 5),
    ("sin1d", {"n_samples": 30, "split": "uneven"}, 8),
    ("gauss2d", {"n_samples": 30}, 9),
]


@pytest.mark.parametrize("name,opts,K", SPLITS, ids=[f"{n}-K{k}" for n, _o, k in SPLITS])
def test_client_points_lie_in_their_subdomain_and_union_is_the_pooled_data(name, opts, K):
    pb = get_problem(name, **opts)
    objs = pb.client_objectives(K, seed=5)
    pooled = pb.centralized_objective(K, seed=5)
    for part in pooled.parts:
        pts = [q.points for o in objs for q in o.parts if q.name == part.name]
        if isinstance(part.points, tuple):
            for j, t in enumerate(part.points):
                assert torch.equal(t, torch.cat([p[j] for p in pts]))
        else:
            assert torch.equal(part.points, torch.cat(pts))
    assert pooled.n_residuals == sum(o.n_residuals for o in objs)
    if name == "gauss2d":
        e = np.linspace(0, 1, 4)
        for k, o in enumerate(objs):
            x = _interior(o)
            i, j = k % 3, k // 3
            assert bool(((x[:, 0] >= e[i]) & (x[:, 0] <= e[i + 1]) & (x[:, 1] >= e[j]) & (x[:, 1] <= e[j + 1])).all())
        return
    edges = np.array([0, .1, .3, .5, .6, .7, .85, .9, 1]) if opts.get("split") == "uneven" else np.linspace(0, 1, K + 1)
    pinn = "n_interior" in opts
    for k, o in enumerate(objs):
        x = _interior(o)
        if pinn:  # a total, dealt out by rank along x₁: ⌊n/K⌋ each, one more for the first n mod K clients
            n = opts["n_interior"]
            assert x.shape[0] == n // K + (k < n % K)
            if k + 1 < K:
                assert float(x[:, 0].max()) <= float(_interior(objs[k + 1])[:, 0].min())
        else:
            assert x.shape[0] == opts.get("n_samples")
            assert bool(((x[:, 0] >= edges[k]) & (x[:, 0] <= edges[k + 1])).all()), (k, x[:, 0].min(), x[:, 0].max())
        assert bool(((x >= 0) & (x <= 1)).all())
        for part in o.parts:
            if part.name == "boundary":
                xb = part.points[0]
                on_face = ((xb == 0) | (xb == 1)).any(dim=1)
                assert bool(on_face.all())
                assert bool(((xb[:, 0] >= edges[k]) & (xb[:, 0] <= edges[k + 1])).all())


@pytest.mark.parametrize("d,K", [(2, 3), (3, 2), (5, 4)])
def test_poisson_boundary_points_cover_every_face(d, K):
    pb = get_problem("poisson", dim=d, n_interior=5, n_boundary=6)
    xb = torch.cat([[p for p in o.parts if p.name == "boundary"][0].points[0] for o in pb.client_objectives(K, seed=1)])
    for i in range(d):
        for v in (0.0, 1.0):
            on = xb[:, i] == v
            assert int(on.sum()) >= 6, (i, v)
            # points on a face spread over it (not stuck on an edge)
            others = xb[on][:, [j for j in range(d) if j != i]]
            assert bool(((others > 0) & (others < 1)).any())
    # only the first / last client holds the faces x₁ = 0 / x₁ = 1
    objs = pb.client_objectives(K, seed=1)
    for k, o in enumerate(objs):
        xk = [p for p in o.parts if p.name == "boundary"][0].points[0]
        assert bool((xk[:, 0] == 0).any()) == (k == 0) or d == 1
        assert bool((xk[:, 0] == 1).any()) == (k == K - 1)


def test_1d_boundary_points_belong_to_the_end_clients():
    pb = get_problem("fisher", n_interior=5)
    objs = pb.client_objectives(3, seed=0)
    names = [[p.name for p in o.parts] for o in objs]
    assert names == [["interior", "boundary"], ["interior"], ["interior", "boundary"]]
    assert objs[0].parts[1].points[0].tolist() == [[0.0]] and objs[2].parts[1].points[0].tolist() == [[1.0]]
    single = pb.client_objectives(1, seed=0)[0]
    assert single.parts[1].points[0].reshape(-1).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("sampling", ["lhs", "uniform"])
def test_sampling_is_seeded(sampling):
    pb = get_problem("poisson", dim=2, n_interior=20, n_boundary=3, sampling=sampling)
    a = pb.centralized_objective(2, seed=7)
    b = pb.centralized_objective(2, seed=7)
    c = pb.centralized_objective(2, seed=8)
    for pa, pb_, pc in zip(a.parts, b.parts, c.parts):
        ta = pa.points[0] if isinstance(pa.points, tuple) else pa.points
        tb = pb_.points[0] if isinstance(pb_.points, tuple) else pb_.points
        tc = pc.points[0] if isinstance(pc.points, tuple) else pc.points
        assert torch.equal(ta, tb) and not torch.equal(ta, tc)
    # clients draw different points, and the network initialization is seeded too
    o = pb.client_objectives(2, seed=7)
    assert not torch.equal(_interior(o[0])[:, 1], _interior(o[1])[:, 1])
    assert torch.equal(pb.init_params(3), pb.init_params(3)) and not torch.equal(pb.init_params(3), pb.init_params(4))


def test_latin_hypercube_stratifies_each_coordinate():
    pb = get_problem("poisson", dim=2, n_interior=10, sampling="lhs")
    x = _interior(pb.client_objectives(1, seed=3)[0])
    for j in range(2):
        bins = np.floor(x[:, j].numpy() * 10).astype(int)
        assert sorted(bins.tolist()) == list(range(10))


def test_field_problems_are_field_problems():
    for name in ("bratu", "allen-cahn", "fisher", "reaction-diffusion", "poisson", "sin1d", "gauss2d"):
        assert isinstance(get_problem(name), FieldProblem)


def test_poisson_in_one_dimension_refuses_n_boundary():
    """Poisson's boundary at dim 1 is the two end points: --n-boundary acts on nothing there and is refused in one
    line (the adversarial battery found it silently ignored); at dim 2 it is the points per face."""
    from fedsciml.problems.base import ProblemOptionError
    with pytest.raises(ProblemOptionError, match=r"option n_boundary has no effect here: with dim 1"):
        get_problem("poisson", dim=1, n_boundary=7)
    assert get_problem("poisson", dim=2, n_boundary=7).n_boundary == 7
    assert get_problem("poisson", dim=1).n_boundary == 50
