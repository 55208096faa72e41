"""``fs.solve("pinnacle", case=…)``: a problem's options as keywords of ``fs.solve`` (issue 36), and PInv's and
HInv's unknown field a — a network of its own — in their pooled L2RE over (u, a).

No PINNacle checkout is needed: Poisson-Nd has a closed form (no reference file), and HInv's sensor file is a
small synthetic one in ``tmp_path``."""
import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.problems import ProblemError, get_problem
from fedsciml.problems.domain import pooled_l2re
from fedsciml.problems.pinnacle import CASES, ENV

TINY = dict(n_interior=30, n_boundary=4, hidden=[6])


def test_problem_options_as_keywords_are_the_same_run(monkeypatch):
    """``case=`` and the other options given as keywords build the same problem as ``problem_options=``: the same
    operations in the same order, so the same bits."""
    monkeypatch.delenv(ENV, raising=False)
    a = fs.solve("pinnacle", case="poissonnd", n_interior=30, n_boundary=4, hidden=[6], max_iters=2)
    b = fs.solve("pinnacle", problem_options=dict(case="poissonnd", n_interior=30, n_boundary=4), hidden=[6],
                 max_iters=2)
    assert a.options["case"] == b.options["case"] == "poissonnd" and a.options["n_interior"] == 30
    assert torch.equal(a.theta, b.theta) and a.final["l2re"] == b.final["l2re"]
    assert a.final["l2re"] < 10  # a closed-form case: a test error without any file


def test_a_bad_case_is_one_line_naming_the_cases():
    with pytest.raises(ProblemError) as e:
        fs.solve("pinnacle", case="hinv2", max_iters=1)
    msg = str(e.value)
    assert "\n" not in msg and "'hinv2'" in msg and all(k in msg for k in CASES)


def test_a_problem_option_given_twice_is_refused():
    with pytest.raises(ValueError, match="case is given twice"):
        fs.solve("pinnacle", case="poissonnd", problem_options={"case": "pinv"}, max_iters=1)


def test_an_option_of_neither_is_still_refused_by_the_method():
    with pytest.raises(ValueError, match="has no option 'cse'"):
        fs.solve("pinnacle", cse="poissonnd", max_iters=1)


def test_pinnacle_dir_as_a_keyword_reaches_the_problem(tmp_path, monkeypatch):
    """``pinnacle_dir=`` names the checkout HInv trains on (its sensor positions): a missing file is refused in one
    line naming it, a present one trains."""
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(ProblemError, match="heatinv_points.dat"):
        fs.solve("pinnacle", case="hinv", pinnacle_dir=str(tmp_path), max_iters=1)
    (tmp_path / "ref").mkdir()
    rng = np.random.default_rng(2)
    np.savetxt(tmp_path / "ref" / "heatinv_points.dat",
               np.column_stack([rng.uniform(-1, 1, (25, 2)), rng.uniform(0, 1, 25)]))
    r = fs.solve("pinnacle", case="hinv", pinnacle_dir=str(tmp_path), max_iters=1, **TINY)
    assert np.isfinite(r.final["l2re"])


@pytest.mark.parametrize("case", ["pinv", "hinv"])
def test_inverse_cases_pool_their_l2re_over_u_and_the_field(case, tmp_path):
    """PInv's and HInv's ``l2re`` is PINNacle's over the array [u, a] at their test points (their ``ref_sol``
    concatenates u_ref and a_ref), recomputed here from the network's u and the field network's a; HInv's a takes
    (x, y) only, so it is the same at every t."""
    (tmp_path / "ref").mkdir()
    rng = np.random.default_rng(3)
    np.savetxt(tmp_path / "ref" / "heatinv_points.dat",
               np.column_stack([rng.uniform(-1, 1, (25, 2)), rng.uniform(0, 1, 25)]))
    p = get_problem("pinnacle", case=case, pinnacle_dir=str(tmp_path), **TINY)
    assert p.outputs == ("u",) and list(p.unknown_fields) == ["a"]
    theta = p.init_params(4) * 3  # away from the initial scale, so that u and a are both far from 0
    X = p.spec.test_points()
    U = torch.stack([p.exact(X), p.exact_coefficients["a"](X)], 1)
    P = torch.stack([p.u(theta, X), p.coefficient_fields(theta)["a"](X)], 1)
    m = p.evaluate(theta)
    # the same sums of squares in another grouping: equal to round-off (n·eps relative)
    assert m["l2re"] == pytest.approx(float((P - U).norm() / U.norm()), rel=1e-12)
    assert m["l2re"] == pytest.approx(pooled_l2re(P, U), rel=1e-12)
    assert m["l2re_u"] == pytest.approx(float((P[:, 0] - U[:, 0]).norm() / U[:, 0].norm()), rel=1e-12)
    assert m["rel_l2"] == pytest.approx(max(m["rel_l2_u"], m["rel_l2_a"]), rel=0)
    if case == "hinv":
        Y = X.clone()
        Y[:, 2] = 1 - Y[:, 2]
        assert torch.equal(p.coefficient_fields(theta)["a"](X), p.coefficient_fields(theta)["a"](Y))


def test_hinv_gn_on_four_sites_takes_the_centralized_steps(tmp_path):
    """HInv with its field network a(x, y), 4 sites owning strips along x (the readings held by the site whose
    strip holds them): federated gn's iterates are centralized LM's on the pooled points — the same sums in another
    grouping, equal up to round-off amplified by the damped system's conditioning (bound 1e-8 of max|θ|, as the
    PInv test in test_pinnacle.py)."""
    (tmp_path / "ref").mkdir()
    rng = np.random.default_rng(5)
    np.savetxt(tmp_path / "ref" / "heatinv_points.dat",
               np.column_stack([rng.uniform(-1, 1, (40, 2)), rng.uniform(0, 1, 40)]))
    po = dict(case="hinv", pinnacle_dir=str(tmp_path), n_interior=12, n_boundary=3)
    c = fs.solve("pinnacle", "centralized", clients=4, problem_options=po, hidden=[6], max_iters=3)
    g = fs.solve("pinnacle", "gn", clients=4, problem_options=po, hidden=[6], rounds=3)
    assert c.n_params == g.n_params > 6 * 4 + 7  # the field network's parameters are in θ
    assert float((c.theta - g.theta).abs().max()) <= 1e-8 * float(c.theta.abs().max())
    assert g.final["l2re"] == pytest.approx(c.final["l2re"], rel=1e-7)
