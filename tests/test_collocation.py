"""Collocation that converges (issue 28, item 5b): growing batches for every method that resamples, fixed
damping with a decaying step and iterate averaging for centralized LM."""
import pytest
import torch

import fedsciml as fs
from fedsciml.core.nn import MLP
from fedsciml.core.objective import LinearLeastSquares
from fedsciml.methods.centralized import SolveConfig, solve_least_squares
from fedsciml.runtime.resample import Growth, grown, resampled_objectives
from fedsciml.options import OptionError
from fedsciml.problems import get_problem


def tiny(**opts):
    pb = get_problem("poisson", **{"dim": 2, "n_interior": 20, "n_boundary": 3, **opts})
    pb.__dict__["_net"] = MLP([2, 6, 1])
    return pb


def test_growth_schedule_and_grown_problem():
    g = Growth(1.5, 10, cap=100)
    assert [g.points(40, s) for s in (0, 9, 10, 19, 20, 30, 1000)] == [40, 40, 60, 60, 90, 100, 100]
    assert Growth(2.0, 1).points(3, 5) == 96 and g.points(500, 50) == 500  # at or above the cap: unchanged
    pb = tiny()
    big = grown(pb, 80)
    assert big.options["n_interior"] == 80 and big.options["n_boundary"] == 12 and pb.options["n_interior"] == 20
    assert grown(pb, 20) is pb
    rows = [sum(o.n_residuals for o in resampled_objectives(pb, 2, 0, j, "cpu", Growth(2.0, 2), 1))
            for j in (1, 2, 4)]
    assert rows[0] < rows[1] < rows[2]
    with pytest.raises(ValueError, match="growth factor must be a finite number > 1, got 1.0"):
        Growth(1.0, 5)


@pytest.mark.parametrize("method, opts", [("centralized", {"max_iters": 8}), ("gn", {"rounds": 8, "form": "normal"}),
                                          ("fipa", {"rounds": 6, "rank": 4}), ("fedavg", {"rounds": 4,
                                                                                        "local_steps": 2})])
def test_every_resampling_method_grows_its_points(method, opts):
    r = fs.solve(tiny(), method, clients=2, resample=1, grow=2.0, grow_every=3, grow_cap=60, **opts)
    rec = r.extra if method == "centralized" else r.options
    if method != "centralized":
        assert rec["grow"] == 2.0 and rec["grow_every"] == 3 and rec["grow_cap"] == 60
    assert all(torch.isfinite(torch.as_tensor(r.theta)))
    if method == "centralized":  # the rows of the points in use grow: 2·(20+…) → 40 → 60 interior per client
        rows = [h.get("rows") for h in r.history[1:]]
        assert rows[:3] == [None, None, None] and rows[3] is not None and rows[-1] > rows[3]


def test_gn_with_growing_points_equals_centralized_lm_with_growing_points():
    g = fs.solve(tiny(), "gn", clients=2, resample=2, rounds=8, form="normal", grow=1.5, grow_every=2)
    c = fs.solve(tiny(), "centralized", clients=2, resample=2, max_iters=8, lm_solve="normal", grow=1.5,
                 grow_every=2)
    # the same summed statistics on the same grown points (same seeds): equal to round-off
    for rg, rc in zip(g.history, c.history):
        assert abs(rg["loss"] - rc["loss"]) <= 1e-9 * rc["loss"]
    assert float((torch.as_tensor(g.theta) - c.theta).norm() / c.theta.norm()) < 1e-8


def test_growth_and_fixed_damping_options_are_refused_where_they_do_nothing():
    with pytest.raises(OptionError, match="grow has no effect here: .*give resample"):
        fs.solve(tiny(), "centralized", clients=2, grow=2.0, max_iters=2)
    with pytest.raises(OptionError, match="grow_every"):
        fs.solve(tiny(), "centralized", clients=2, resample=1, grow_every=3, max_iters=2)
    with pytest.raises(OptionError, match="lm_mu"):
        fs.solve(tiny(), "centralized", clients=2, lm_mu=1e-3, max_iters=2)
    with pytest.raises(OptionError, match="average"):
        fs.solve(tiny(), "centralized", clients=2, optimizer="adam", average=0.9, max_iters=2)


def test_fixed_damping_iterates_to_the_least_squares_solution_and_decays_the_step():
    """Linear residual, μ fixed: θ ← θ − η(AᵀA + μI)⁻¹Aᵀ(Aθ − b) is iterative refinement of the normal
    equations; it converges to the least-squares solution (contraction μ/(λ_min + μ) per step with η = 1)."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(40, 6, generator=g, dtype=torch.float64)
    b = torch.randn(40, generator=g, dtype=torch.float64)
    w_star = torch.linalg.lstsq(A, b.unsqueeze(-1)).solution.squeeze(-1)
    cfg = SolveConfig(optimizer="lm", max_iters=40, damping="fixed", mu=0.05)
    w, rows, info = solve_least_squares(LinearLeastSquares(A, b), torch.zeros(6, dtype=torch.float64),
                                        lambda t: {}, cfg)
    torch.testing.assert_close(w, w_star, rtol=1e-10, atol=1e-10)
    assert info["lm_damping"] == "fixed" and all(r["accepted"] for r in rows[1:])
    assert all(r["mu"] == 0.05 * 40 for r in rows)
    cfg = SolveConfig(optimizer="lm", max_iters=5, damping="fixed", mu=0.05, step_decay=2.0)
    _, rows, _ = solve_least_squares(LinearLeastSquares(A, b), torch.zeros(6, dtype=torch.float64),
                                     lambda t: {}, cfg)
    assert [r["eta"] for r in rows[1:]] == [1.0 / (1.0 + k / 2.0) for k in range(5)]


def test_averaging_records_and_returns_the_ema_of_the_iterates():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(30, 5, generator=g, dtype=torch.float64)
    b = torch.randn(30, generator=g, dtype=torch.float64)
    seen = []
    plain = solve_least_squares(LinearLeastSquares(A, b), torch.zeros(5, dtype=torch.float64),
                                lambda t: seen.append(t.clone()) or {}, SolveConfig(optimizer="lm", max_iters=6))
    avg_seen = []
    avg = solve_least_squares(LinearLeastSquares(A, b), torch.zeros(5, dtype=torch.float64),
                              lambda t: avg_seen.append(t.clone()) or {},
                              SolveConfig(optimizer="lm", max_iters=6, average=0.7))
    ema = seen[0].clone()
    for k in range(1, len(seen)):  # the same LM iterates (the averaging only changes what is evaluated)
        ema = 0.7 * ema + 0.3 * seen[k]
        torch.testing.assert_close(avg_seen[k], ema, rtol=1e-14, atol=1e-14)
    assert torch.equal(avg[0], avg_seen[-1]) and avg[2]["average"] == 0.7
    assert [r["loss"] for r in avg[1]] == [r["loss"] for r in plain[1]]
