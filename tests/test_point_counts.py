"""Issue 36 item 3: DomainPDE point counts follow the network — never fewer residual rows than parameters unless
asked (problems.domain.DomainPDE.point_counts)."""
import logging

import fedsciml as fs
import fedsciml.methods  # noqa: F401  (registers the methods get_method reads)
import torch
from fedsciml.problems.domain import OVERSAMPLE
from fedsciml.runtime.driver import check_run_memory, estimate_memory, get_method


def _rows(objs) -> int:
    return sum(int(o.n_residuals) for o in objs)


def test_defaults_below_the_parameters_are_scaled_to_twice_them_keeping_the_boundary_share():
    p = fs.get_problem("poisson-lshape")                       # 1600 interior + 200 boundary in all, p = 2 241
    pc = p.point_counts(1)
    objs = p.client_objectives(1, seed=0)
    assert _rows(objs) == pc["rows"] >= OVERSAMPLE * pc["n_params"] > pc["n_params"] == 2241
    assert pc["rule"].startswith("scaled") and (pc["n_interior"], pc["n_boundary"]) == (3984, 498)
    # the smallest such counts (s = 4 482 / 450, in integers): one point fewer of each leaves fewer than 2p rows
    assert pc["rows"] == 4482 and (pc["n_interior"] - 1) + (pc["n_boundary"] - 1) < OVERSAMPLE * 2241
    assert abs(pc["n_boundary"] / pc["n_interior"] - 200 / 1600) < 1e-3  # the boundary keeps its share
    four = p.point_counts(4)                                   # counts are totals: the same whatever the clients
    assert four["rows"] == _rows(p.client_objectives(4, seed=0)) == pc["rows"] and four["n_interior"] == 3984


def test_defaults_that_already_give_rows_at_least_p_draw_the_same_points_bitwise():
    for name in ("heat", "kovasznay", "burgers"):
        p = fs.get_problem(name)
        K = p.default_clients
        assert p.point_counts(K)["rule"] == "defaults"
        new, old = p.client_objectives(K, seed=0), p._client_objectives(K, seed=0)  # the path before the rule
        for a, b in zip(new, old):
            for qa, qb in zip(a.parts, b.parts):
                pa = qa.points if isinstance(qa.points, tuple) else (qa.points,)
                pb = qb.points if isinstance(qb.points, tuple) else (qb.points,)
                assert qa.name == qb.name and all(torch.equal(x, y) for x, y in zip(pa, pb))


def test_given_counts_win_with_one_warning_line(caplog):
    with caplog.at_level(logging.WARNING, logger="fedsciml.problems.domain"):
        p = fs.get_problem("poisson-lshape", n_interior=100, n_boundary=50)
        objs = p.client_objectives(1, seed=0)
        p.rows_per_client(1)                                   # asked again: no second line
    assert _rows(objs) == 150 and p.point_counts(1)["rule"] == "given"
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "150 residual rows" in lines[0] and "2,241 parameters" in lines[0]
    assert "interpolate" in lines[0]


def test_the_result_records_the_counts_and_the_memory_check_plans_them():
    r = fs.solve("poisson-lshape", clients=1, max_iters=0)
    assert r.extra["points"]["rows"] == 4482 and r.extra["points"]["n_interior"] == 3984
    p = fs.get_problem("poisson-lshape")
    cfg = get_method("centralized").make_config({})
    est = estimate_memory(p, 1, cfg, "centralized")
    assert "4,482 rows" in est[1] and est[0] < 1e9
    check_run_memory(p, "centralized", 1, cfg)                  # planned: no error
