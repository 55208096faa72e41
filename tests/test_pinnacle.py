"""PINNacle's cases (``problems/pinnacle.py``): each builds, its equation vanishes on its closed form, their reference
files are read and unrolled as theirs are, their pooled L2RE, and a missing file says so in one line.

The suite needs no PINNacle checkout: every file a test reads is a small synthetic one written to ``tmp_path`` in
their format (a COMSOL text export: ``%`` comment lines, then one row per node)."""
import json
import logging
import math

import numpy as np
import pytest
import torch
from torch.func import vmap

from fedsciml.cli import main
from fedsciml.problems import ProblemError, get_problem
from fedsciml.problems.conditions import Field
from fedsciml.problems.pinnacle import CASES, ENV, uniform_points


@pytest.fixture
def checkout(tmp_path):
    """A synthetic PINNacle checkout holding the files the cases *train* on (their reference files absent)."""
    ref = tmp_path / "ref"
    ref.mkdir()
    rng = np.random.default_rng(1)
    pts = np.column_stack([rng.uniform(-1, 1, (40, 2)), rng.uniform(0, 1, 40)])
    np.savetxt(ref / "heatinv_points.dat", pts)
    np.savetxt(ref / "poisson_a_coef.dat", rng.uniform(0.5, 2.0, (5, 5)))
    np.savetxt(ref / "poisson_f_coef.dat", rng.uniform(-1, 1, (25, 4)))
    g = np.linspace(0, 1, 8)
    gx, gy = np.meshgrid(g, g, indexing="ij")
    rows = np.column_stack([gx.reshape(-1), gy.reshape(-1), 1 + gx.reshape(-1) + 2 * gy.reshape(-1)])
    np.savetxt(ref / "heat_2d_coef_256.dat", rng.permutation(rows))      # their rows, in any order
    return tmp_path


def _exact_residual(p, X):
    """The case's equation at the points X with the network replaced by its closed form."""
    def value(z):  # the outputs, then the unknown fields (PInv's and HInv's a)
        return torch.cat([p.exact(z[None]).reshape(-1)]
                         + [p.exact_coefficients[k](z[None]).reshape(-1) for k in p.unknown_fields])

    def one(y):
        f = Field(value, p.components, p.axes, p.geometry.dim, {}, n_main=len(p.outputs))
        out = p.equation(f, y)
        return torch.stack(list(out)) if isinstance(out, tuple) else out.reshape(1)

    return vmap(one)(X)


@pytest.mark.parametrize("case", list(CASES))
def test_every_case_builds_and_gives_finite_residuals(case, checkout, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    p = get_problem("pinnacle", case=case, pinnacle_dir=str(checkout), n_interior=12, n_boundary=3,
                    hidden=[6])
    theta = p.init_params(0)
    objs = p.client_objectives(2, seed=0)
    r = torch.cat([o.residual(theta) for o in objs])
    assert r.numel() >= 12 * len(p.outputs) and bool(torch.isfinite(r).all())  # n_interior: the total (issue 37)
    assert p.network().sizes == [p.domain().dim, 6, len(p.outputs)]
    assert p.spec.source.startswith("src/pde/") and ": " in p.spec.source


@pytest.mark.parametrize("case, options", [("poissonnd", {}), ("heat2d-ms", {}), ("pinv", {}), ("hinv", {})])
def test_the_equation_vanishes_on_the_closed_form(case, options, checkout):
    p = get_problem("pinnacle", case=case, pinnacle_dir=str(checkout), **options)
    X = p.spec.test_points()[::7]
    r = _exact_residual(p, X)
    # autodiff of the closed form: exact up to round-off in terms of size ≲ 4π²·max|u| (≤ 5·40·3)
    assert float(r.abs().max()) < 1e-11


def test_pinv_published_source_leaves_the_stated_residual():
    """Their f_src has (2x + 1), (2y + 1) where the exact (u, a) needs (2x − 1), (2y − 1): the exact pair leaves
    4π a² sin(π(x + y)) — the independent closed form of the difference, as the docstring states."""
    p = get_problem("pinnacle", case="pinv", pinv_source="published")
    X = p.spec.test_points()[::5]
    r = _exact_residual(p, X)[:, 0]
    x, y = X[:, 0], X[:, 1]
    a = 1 / (1 + x ** 2 + y ** 2 + (x - 1) ** 2 + (y - 1) ** 2)
    assert torch.allclose(r, 4 * math.pi * a ** 2 * torch.sin(math.pi * (x + y)), rtol=0, atol=1e-12)
    assert float(r.abs().max()) > 2.0


def test_boundary_values_agree_with_the_closed_forms():
    """Heat 2d-MS's u = 0 on the edges and PInv's a on the boundary are the closed forms' own values there."""
    p = get_problem("pinnacle", case="heat2d-ms")
    x = p.domain().sample_boundary(200, "uniform", 0, part="edges")
    assert float(p.exact(x).abs().max()) < 1e-13
    q = get_problem("pinnacle", case="pinv", a_boundary="condition")
    cond = q.condition_list()[1]
    xb, (_, g) = cond.points(q, q.domain(), 100, "uniform", 0)
    assert torch.allclose(g, q.exact_coefficients["a"](xb), rtol=0, atol=0)


def test_uniform_points_are_deepxdes():
    """DeepXDE's uniform_points(n, boundary=False): 2500 → 50 × 50 interior points (k/51); in 5-d 20,000 → 8⁵;
    space-time [0,1]² × [0,5]: 64 points × 313 times."""
    X = uniform_points([0, 0], [1, 1], 2500)
    assert X.shape == (2500, 2)
    assert torch.equal(torch.unique(X[:, 0]), torch.as_tensor(np.linspace(0, 1, 51, endpoint=False)[1:]))
    assert uniform_points([0] * 5, [1] * 5, 20000).shape == (8 ** 5, 5)
    Y = uniform_points([0, 0], [1, 1], 20000, 0.0, 5.0)
    assert Y.shape == (64 * 313, 3) and float(Y[:, 2].min()) > 0 and float(Y[:, 2].max()) == 5.0


def _comsol(path, header_cols, rows, time_cols=None):
    lines = ["% Model:              synthetic.mph", "% Dimension:          2", f"% Nodes:              {len(rows)}"]
    lines.append("% " + "  ".join(header_cols) + ("" if time_cols is None else "  " + "  ".join(time_cols)))
    lines += ["  ".join(repr(float(v)) for v in r) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def test_reference_file_is_read_from_the_checkout_and_l2re_is_pooled(tmp_path):
    """NS 2d-C against a synthetic lid_driven_a4.dat (a NaN row dropped, as theirs): l2re = √mean over points
    and components / √mean of u_ref², rel_l2 the largest component's ‖e‖/‖u‖ — both recomputed here."""
    (tmp_path / "ref").mkdir()
    rng = np.random.default_rng(0)
    rows = np.column_stack([rng.uniform(0, 1, (9, 2)), rng.normal(size=(9, 3))])
    rows[4, 3] = np.nan
    _comsol(tmp_path / "ref" / "lid_driven_a4.dat", ["x", "y", "u", "v", "p"], rows)
    p = get_problem("pinnacle", case="ns2d-c", pinnacle_dir=str(tmp_path), n_interior=5, n_boundary=2)
    X, U = p.reference()
    keep = ~np.isnan(rows).any(1)              # the row holding a NaN dropped, as theirs
    assert np.array_equal(X.numpy(), rows[keep, :2]) and np.array_equal(U.numpy(), rows[keep, 2:])
    theta = p.init_params(3)
    m = p.evaluate(theta)
    P = p.u(theta, X).detach().numpy()
    Un = U.numpy()
    l2re = np.sqrt(((P - Un) ** 2).mean()) / np.sqrt((Un ** 2).mean())
    rel = max(np.linalg.norm(P[:, c] - Un[:, c]) / np.linalg.norm(Un[:, c]) for c in range(3))
    assert m["l2re"] == pytest.approx(l2re, rel=1e-12) and m["rel_l2"] == pytest.approx(rel, rel=1e-12)


def test_time_dependent_reference_is_unrolled_as_theirs(tmp_path):
    (tmp_path / "ref").mkdir()
    rows = [[-1.0, 0.0, 0.1], [0.0, 0.5, 0.2], [1.0, 0.0, 0.3]]
    _comsol(tmp_path / "ref" / "burgers1d.dat", ["X"], rows, ["u (1) @ t=0", "u (1) @ t=1"])
    p = get_problem("pinnacle", case="burgers1d-c", pinnacle_dir=str(tmp_path))
    X, U = p.reference()                    # node-major, as their trans_time_data_to_dataset (meshgrid(t, x))
    assert X.tolist() == [[-1.0, 0.0], [-1.0, 1.0], [0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]
    assert U[:, 0].tolist() == [0.0, 0.1, 0.5, 0.2, 0.0, 0.3]


@pytest.mark.parametrize("where", ["none", "empty"])
def test_a_missing_reference_says_so_in_one_line_and_still_trains(where, tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(ENV, raising=False)
    opts = {} if where == "none" else {"pinnacle_dir": str(tmp_path)}
    with caplog.at_level(logging.WARNING, logger="fedsciml.problems.pinnacle"):
        p = get_problem("pinnacle", case="heat2d-lt", n_interior=8, n_boundary=2, hidden=[4], **opts)
    msgs = [r.getMessage() for r in caplog.records if r.name == "fedsciml.problems.pinnacle"]
    assert len(msgs) == 1 and "\n" not in msgs[0] and "heat_longtime.dat" in msgs[0]
    assert ("FEDSCIML_PINNACLE" in msgs[0]) if where == "none" else (str(tmp_path) in msgs[0])
    assert not p.has_reference and "l2re" not in p.evaluate(p.init_params(0))
    assert p.client_objectives(1)[0].residual(p.init_params(0)).numel() > 0


def test_the_environment_variable_names_the_checkout(tmp_path, monkeypatch, caplog):
    (tmp_path / "ref").mkdir()
    _comsol(tmp_path / "ref" / "poisson1_cg_data.dat", ["X", "Y", "u"], [[0.5, 0.0, 1.0], [0.0, 0.5, 1.0]])
    monkeypatch.setenv(ENV, str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="fedsciml.problems.pinnacle"):
        p = get_problem("pinnacle", case="poisson2d-c")
    assert not caplog.records and p.has_reference and p.reference().X.shape == (2, 2)


def test_a_file_a_case_trains_on_is_required_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(ProblemError, match="trains on their ref/heatinv_points.dat") as e:
        get_problem("pinnacle", case="hinv", pinnacle_dir=str(tmp_path))
    assert "\n" not in str(e.value)


def test_poisson2d_ms_coefficients_are_their_blocks(checkout):
    """a at a point is a_coef[block] with their block index floor((x + 10 + 1e-5) / ((20 + 2e-5) / 5))."""
    p = get_problem("pinnacle", case="poisson2d-ms", pinnacle_dir=str(checkout))
    A = np.loadtxt(checkout / "ref" / "poisson_a_coef.dat")
    h = (20 + 2e-5) / 5
    for x in np.random.default_rng(0).uniform(-10, 10, (20, 2)):
        i, j = np.floor((x + 10 + 1e-5) / h).astype(int)
        w, r = p.spec.block(torch.as_tensor(x))
        assert float((w * torch.as_tensor(A)).sum()) == A[i, j]
        assert np.allclose(r.numpy(), x + 10 + 1e-5 - np.array([i, j]) * h, rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", ["pinv", "hinv"])
def test_a_boundary_ansatz_holds_a_exactly_on_its_boundary_and_drops_its_condition(case, checkout):
    """``a_boundary=ansatz``: a = A + B·N_a (box_ansatz on a's box in (x, y)) equals the closed form on a's boundary
    part for any θ (B vanishes there), and the case trains on its readings alone; ``field_hidden`` sizes a's
    network and ``data_weight`` weighs the readings."""
    p = get_problem("pinnacle", case=case, pinnacle_dir=str(checkout), a_boundary="ansatz", field_hidden=[7],
                    data_weight=30.0)
    conds = p.condition_list()
    assert [type(c).__name__ for c in conds] == ["Data"] and conds[0].weight == 30.0
    assert p.field_networks()[0][1].sizes == [2, 7, 1]
    xb = p.domain().sample_boundary(64, "uniform", 0, part=p.spec.a_on)
    theta = p.init_params(0) + 0.3
    a = p.coefficient_fields(theta)["a"](xb)
    assert torch.allclose(a, p.exact_coefficients["a"](xb), rtol=0, atol=1e-14)  # 8 terms of size ≤ 3: round-off
    xi = p.domain().sample_interior(16, "uniform", 0)
    assert float((p.coefficient_fields(theta)["a"](xi) - p.exact_coefficients["a"](xi)).abs().max()) > 1e-3
    weighted = get_problem("pinnacle", case=case, pinnacle_dir=str(checkout), a_boundary="condition")
    assert [type(c).__name__ for c in weighted.condition_list()] == ["Data", "Dirichlet"]
    assert weighted.condition_list()[0].weight is None and weighted.field_networks()[0][1].sizes == [2, 20, 20, 1]


def test_the_inverse_cases_defaults_are_their_measured_ones(checkout):
    """Both: a's boundary by the ansatz (no condition on a); u's network 3×20 on PInv, 3×32 on HInv (their
    docstrings' measurements); an explicit option wins."""
    pinv = get_problem("pinnacle", case="pinv")
    assert pinv.options["hidden"] == [20, 20, 20] and pinv.options["a_boundary"] is None
    assert [type(c).__name__ for c in pinv.condition_list()] == ["Data"]
    assert get_problem("pinnacle", case="pinv", hidden=[32, 32, 32]).network().sizes == [2, 32, 32, 32, 1]
    hinv = get_problem("pinnacle", case="hinv", pinnacle_dir=str(checkout))
    assert hinv.network().sizes == [3, 32, 32, 32, 1]
    assert [type(c).__name__ for c in hinv.condition_list()] == ["Data"]


def test_options_for_other_cases_are_refused():
    with pytest.raises(ProblemError, match="pinv_source has no effect here"):
        get_problem("pinnacle", case="poissonnd", pinv_source="published")
    for opt in (dict(a_boundary="ansatz"), dict(field_hidden=[4]), dict(data_weight=2.0)):
        with pytest.raises(ProblemError, match="has no effect here"):
            get_problem("pinnacle", case="poissonnd", **opt)
    with pytest.raises(ProblemError, match="case must be one of burgers1d-c"):
        get_problem("pinnacle", case="nope")


def test_cli_solves_a_case_and_reports_l2re(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["solve", "pinnacle", "--case", "poissonnd", "--method", "gn", "--clients", "2", "--rounds", "1",
                 "--n-interior", "20", "--n-boundary", "4", "--hidden", "5", "--quiet", "--json", str(out)])
    capsys.readouterr()
    assert code == 0
    res = json.loads(out.read_text())
    assert res["options"]["case"] == "poissonnd" and 0 < res["final"]["l2re"] < 10
    assert res["final"]["l2re"] == pytest.approx(res["final"]["rel_l2"], rel=1e-12)  # one output: the same figure


def test_gn_on_two_sites_takes_the_centralized_steps():
    """PInv (a system with readings held by the sites that own them): federated gn's iterates are centralized LM's
    on the pooled points — the same sums in another order, so equal up to round-off amplified by the damped
    system's conditioning (seen: 5e-13 of max|θ| on NS 2d-C; bound 1e-8)."""
    import fedsciml as fs

    po = dict(case="pinv", n_interior=15, n_boundary=3, hidden=[6])
    c = fs.solve("pinnacle", "centralized", clients=2, problem_options=po, max_iters=3)
    g = fs.solve("pinnacle", "gn", clients=2, problem_options=po, rounds=3)
    assert float((c.theta - g.theta).abs().max()) <= 1e-8 * float(c.theta.abs().max())
    assert g.final["l2re"] == pytest.approx(c.final["l2re"], rel=1e-7)


def test_ks_equation_on_a_manufactured_field():
    """KS's residual u_t + α u u_x + β u_xx + γ u_xxxx at u = sin(x) e^{−t}: (−1 − β + γ) u + α u cos(x) e^{−t}
    (u_xxxx = u, u_xx = −u), by hand; autodiff to round-off."""
    p = get_problem("pinnacle", case="ks")
    X = p.domain().sample_interior(50, "uniform", 0)
    s = p.spec

    def one(y):
        f = Field(lambda z: (torch.sin(z[0]) * torch.exp(-z[1])).reshape(1), p.outputs, p.axes, 1, {})
        return p.equation(f, y)

    r = vmap(one)(X)
    u = torch.sin(X[:, 0]) * torch.exp(-X[:, 1])
    want = (-1 - s.beta + s.gamma) * u + s.alpha * u * torch.cos(X[:, 0]) * torch.exp(-X[:, 1])
    assert torch.allclose(r, want, rtol=0, atol=1e-12)


def test_heat2d_vc_reads_its_coefficient_grid_and_states_the_equation(checkout):
    """The coefficient at the grid's nodes is the file's value there (nearest), and the equation at u = x·y·t
    (Δu = 0) is u_t − A sin(πx) sin(5πy) sin(πt) = x·y − 200 sin(πx) sin(5πy) sin(πt), by hand."""
    p = get_problem("pinnacle", case="heat2d-vc", pinnacle_dir=str(checkout))
    a = p.spec.coefficient()
    rows = torch.as_tensor(np.loadtxt(checkout / "ref" / "heat_2d_coef_256.dat"))
    t = torch.full((rows.shape[0], 1), 0.5, dtype=torch.float64)
    assert torch.equal(a(torch.cat([rows[:, :2], t], 1)), rows[:, 2])    # the file's own numbers, bitwise
    X = p.domain().sample_interior(40, "uniform", 0)
    r = vmap(lambda y: p.equation(Field(lambda z: (z[0] * z[1] * z[2]).reshape(1), p.outputs, p.axes, 2, {}), y))(X)
    want = X[:, 0] * X[:, 1] - 200 * torch.sin(math.pi * X[:, 0]) * torch.sin(5 * math.pi * X[:, 1]) \
        * torch.sin(math.pi * X[:, 2])
    assert torch.allclose(r, want, rtol=0, atol=1e-11)


def test_the_boundary_weight_defaults_to_the_cases_and_an_explicit_one_wins():
    """Poisson 2d-C's default condition weight is 1e4 (its 0.1-wide gaps: see the case's docstring), the other
    cases' 10; ``boundary_weight`` given explicitly is used as given, and reaches the condition rows."""
    assert get_problem("pinnacle", case="poisson2d-c").options["boundary_weight"] == 1e4
    assert get_problem("pinnacle", case="ns2d-c").options["boundary_weight"] == 10.0
    assert get_problem("pinnacle", case="burgers1d-c").options["boundary_weight"] == 10.0
    p = get_problem("pinnacle", case="poisson2d-c", boundary_weight=3.0, n_interior=5, n_boundary=4, hidden=[4])
    parts = p.client_objectives(1, 0)[0].parts
    assert [q.weight for q in parts] == [1.0, 3.0, 3.0]


def test_the_input_scaling_defaults_to_the_cases_and_an_explicit_one_wins(tmp_path):
    """HInv's default input scaling is none (measured: box stalls it, see the case's docstring), every other case's
    box; ``input_scaling`` given explicitly is used as given.  HInv builds only with its sensor file: a stand-in
    checkout holds three sensors."""
    (tmp_path / "ref").mkdir()
    np.savetxt(tmp_path / "ref" / "heatinv_points.dat", [[0.1, 0.2, 0.3], [0.4, -0.5, 0.6], [-0.7, 0.8, 0.9]])
    hinv = get_problem("pinnacle", case="hinv", pinnacle_dir=str(tmp_path))
    assert hinv.options["input_scaling"] == "none" and hinv.network().input_map is None
    assert get_problem("pinnacle", case="hinv", pinnacle_dir=str(tmp_path),
                       input_scaling="box").network().input_map is not None
    for case in ("poisson2d-c", "burgers1d-c", "heat2d-ms"):
        assert get_problem("pinnacle", case=case).options["input_scaling"] == "box"
    assert get_problem("pinnacle", case="ns2d-c", input_scaling="none").network().input_map is None


@pytest.mark.parametrize("case", list(CASES))
def test_gn_on_four_strips_takes_the_centralized_steps(case, checkout):
    """Every case on 4 sites (strips along x; each owns its region's interior points, condition points and
    readings): the 4 sites together hold exactly the points of one client — sorted residuals equal, nothing
    dropped or duplicated, each site non-empty — and federated gn takes centralized LM's steps on the pooled points:
    the same sums in another order, so equal up to round-off amplified by the damped system's conditioning (seen
    ≤ 2e-13 of max|θ|; bound 1e-8).  Cases that train on a file (HInv's sensors, Poisson 2d-MS's and Heat 2d-VC's
    coefficients) read it from the stand-in checkout; reference files are absent there (no test error, not needed).
    6 steps, so that each run accepts steps (at 3, Heat 2d-VC and HInv reject all three and θ never moves)."""
    import fedsciml as fs

    po = dict(case=case, n_interior=12, n_boundary=4, hidden=[6], pinnacle_dir=str(checkout))
    p = get_problem("pinnacle", **po)
    theta = p.init_params(0)
    one = p.client_objectives(1, seed=0)[0].residual(theta)
    four = [o.residual(theta) for o in p.client_objectives(4, seed=0)]
    assert all(r.numel() > 0 for r in four)
    # the same per-point expressions on the same points, batched differently: equal to a few ulps of the largest
    assert torch.allclose(torch.sort(torch.cat(four)).values, torch.sort(one).values, rtol=0,
                          atol=1e-12 * float(one.abs().max()))
    c = fs.solve("pinnacle", "centralized", clients=4, problem_options=po, max_iters=6)
    g = fs.solve("pinnacle", "gn", clients=4, problem_options=po, rounds=6)
    assert c.extra["accepted_steps"] >= 1 and g.extra["accepted_steps"] == c.extra["accepted_steps"]
    assert float((c.theta - g.theta).abs().max()) <= 1e-8 * float(c.theta.abs().max())
    lc, lg = [h["loss"] for h in c.history], [h["loss"] for h in g.history]
    assert len(lc) == len(lg) and lg == pytest.approx(lc, rel=1e-8)
    assert g.final["loss"] == pytest.approx(c.final["loss"], rel=1e-8)


def test_heat2d_ms_defaults_to_its_frequency_scaled_sine_network_and_an_explicit_option_wins():
    """Heat 2d-MS's defaults are the measured setting (sin, first-layer scale 30,1,1, 3000 / 1000 points, u's
    initial and edge conditions by the ansatz; see the
    case's docstring), the other cases keep tanh, no scale and 2000 / 100 (Burgers 1d-C 4000 interior); options given explicitly are used as
    given; the network built is the one the options name (θ₀ bitwise the explicit options': same draws)."""
    ms = get_problem("pinnacle", case="heat2d-ms")
    assert (ms.options["activation"], ms.options["first_layer_scale"]) == ("sin", [30.0, 1.0, 1.0])
    assert (ms.options["n_interior"], ms.options["n_boundary"]) == (3000, 1000)
    # its initial and edge conditions hold by the ansatz (the docstring's choice): no condition, u = g at t = 0
    assert ms.options["u_conditions"] == "ansatz" and ms.condition_list() == []  # recorded: a saved run reads back
    X0 = ms.domain().sample_initial(8, "uniform", 0)
    assert torch.allclose(ms.u(ms.init_params(0), X0), ms.exact(X0), rtol=0, atol=1e-14)
    assert get_problem("pinnacle", case="ns2d-c").options["u_conditions"] == "condition"
    assert get_problem("pinnacle", case="poissonnd").options["u_conditions"] is None  # states no hard constraint
    explicit = get_problem("pinnacle", case="heat2d-ms", activation="sin", first_layer_scale=[30.0, 1.0, 1.0],
                           n_interior=3000, n_boundary=1000)
    assert torch.equal(ms.init_params(seed=0), explicit.init_params(seed=0))
    assert get_problem("pinnacle", case="burgers1d-c").options["n_interior"] == 4000  # see its docstring
    for case in ("poisson2d-c", "ns2d-c", "poissonnd"):
        o = get_problem("pinnacle", case=case).options
        assert (o["activation"], o["first_layer_scale"], o["n_interior"], o["n_boundary"]) == ("tanh", None, 2000,
                                                                                                100)
    mine = get_problem("pinnacle", case="heat2d-ms", activation="tanh", first_layer_scale=[2.0], n_interior=7)
    assert (mine.options["activation"], mine.options["first_layer_scale"], mine.options["n_interior"]) == \
        ("tanh", [2.0], 7)


@pytest.mark.parametrize("case", ["heat2d-ms", "ns2d-c"])
def test_u_conditions_ansatz_holds_u_s_conditions_exactly_and_drops_them(case):
    """``u_conditions=ansatz``: Heat 2d-MS's u = g + t/T·B·N equals the closed form at t = 0 and 0 on the edges,
    NS 2d-C's velocity equals the lid's a x(1 − x), 0 on the walls, for any θ (B vanishes there; a few terms of size
    ≤ 4: 1e-14), and the case lists no condition on u (NS keeps its pressure pin); ``condition`` lists them as
    before.  The saved model says it has an ansatz (it is evaluated by its problem); a case without one does not."""
    p = get_problem("pinnacle", case=case, u_conditions="ansatz")
    theta = p.init_params(0) + 0.3
    dom = p.domain()
    if case == "heat2d-ms":
        assert p.condition_list() == []
        X0 = dom.sample_initial(64, "uniform", 0)
        assert torch.allclose(p.u(theta, X0), p.exact(X0), rtol=0, atol=1e-14)
        Xb = dom.sample_boundary(64, "uniform", 0, part="edges")
        assert float(p.u(theta, Xb).abs().max()) <= 1e-14
        Xi = dom.sample_interior(16, "uniform", 0)
        assert float((p.u(theta, Xi) - p.exact(Xi)).abs().max()) > 1e-3  # inside: the network's
        soft = ["Initial", "Dirichlet"]
    else:
        assert [type(c).__name__ for c in p.condition_list()] == ["Data"]
        lid, walls = dom.sample_boundary(64, "uniform", 0, part="lid"), dom.sample_boundary(64, "uniform", 0,
                                                                                            part="walls")
        U = p.u(theta, lid)
        assert torch.allclose(U[:, 0], 4 * lid[:, 0] * (1 - lid[:, 0]), rtol=0, atol=1e-14)
        assert float(U[:, 1].abs().max()) <= 1e-14 and float(p.u(theta, walls)[:, :2].abs().max()) <= 1e-14
        soft = ["Dirichlet"] * 4 + ["Data"]
    assert p.model_description(theta)["ansatz"] is True
    weighted = get_problem("pinnacle", case=case, u_conditions="condition")
    assert [type(c).__name__ for c in weighted.condition_list()] == soft
    assert weighted.model_description(theta)["ansatz"] is False
    assert get_problem("pinnacle", case="poissonnd").model_description(
        get_problem("pinnacle", case="poissonnd").init_params(0))["ansatz"] is False
    with pytest.raises(ProblemError, match="has no effect here"):
        get_problem("pinnacle", case="poissonnd", u_conditions="ansatz")


def test_an_n_boundary_that_acts_on_nothing_is_said(caplog):
    """With ``u_conditions=ansatz`` Heat 2d-MS lists no condition, so an ``n_boundary`` other than the case's acts on
    nothing: the run says so in one warning line (it was taken in silence); with weighted conditions it is used."""
    import logging

    with caplog.at_level(logging.WARNING, logger="fedsciml.problems.pinnacle"):
        get_problem("pinnacle", case="heat2d-ms", n_boundary=8192)
        get_problem("pinnacle", case="heat2d-ms")  # the case's own count: nothing to say
    said = [r.getMessage() for r in caplog.records if "has no effect" in r.getMessage()]
    assert said == ["PINNacle case 'heat2d-ms' holds its initial and boundary conditions exactly (u_conditions "
                    "ansatz): it draws no condition points, so n_boundary=8192 has no effect"]
    assert get_problem("pinnacle", case="heat2d-ms", u_conditions="condition", n_boundary=64).condition_list()


def test_ns2d_c_ansatz_leaves_a_continuity_residual_of_a_at_the_lid_corners_for_every_theta():
    """Why the lid/wall ansatz cannot lower NS 2d-C's held-out residual near the lid's corners: there ``u_x = a(1 − 2x)
    = ±a`` along the lid and ``v_y = 0`` along the wall, so ``∇·u = ±a`` (a = 4) whatever θ — the data themselves
    meet ∇·u = 0 at no smooth velocity (the true solution is singular there).  The ansatz's bubble and its first
    derivatives vanish at the corners, so the network's terms there are round-off (a few terms of size ≤ 16·|N|:
    1e-12)."""
    from torch.func import vmap
    p = get_problem("pinnacle", case="ns2d-c", u_conditions="ansatz", n_interior=4, n_boundary=2)
    div = [q for q in p.centralized_objective(seed=0).parts if q.name == "pde2"][0]
    X = torch.tensor([[0.0, 1.0], [1.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    for seed in (0, 1):
        r = vmap(div.fn, in_dims=(None, 0))(p.init_params(seed) + 0.3 * seed, X)
        assert torch.allclose(r[:2], torch.tensor([4.0, -4.0], dtype=torch.float64), rtol=0, atol=1e-12)
