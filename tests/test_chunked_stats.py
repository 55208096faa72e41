"""Gauss–Newton statistics accumulated over row chunks (fedsciml.core.stats.chunked_gn_stats) against one-shot.

Not bitwise: ΣJ_bᵀJ_b adds the rows' products in another order than one JᵀJ (and a block's rows come from a
differently batched vmap), so entry (i, j) may differ by ~n·eps·‖J_i‖‖J_j‖ ≤ n·eps·max diag(JᵀJ).  With n of a
few hundred rows that bound is ~1e-13 relative: the tests ask 1e-12 of max|H|, ‖g‖ and the loss.
"""
import pytest
import torch

from fedsciml.core.lm import LevenbergMarquardt, LMConfig
from fedsciml.core.nn import MLP
from fedsciml.core.objective import LinearLeastSquares
from fedsciml.core.stats import chunked_gn_stats, row_blocks
from fedsciml.methods.centralized import SolveConfig, solve_least_squares
from fedsciml.problems import get_problem


def tiny_poisson(n_interior=150):
    pb = get_problem("poisson", n_interior=n_interior)
    pb.__dict__["_net"] = MLP([pb.input_dim(), 12, 12, 1])
    obj = pb.centralized_objective(2, seed=0)
    return pb, obj, pb.init_params(0)


def rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("rows", [1, 7, 64, 10_000])
def test_chunked_statistics_equal_the_one_shot_ones(rows):
    _, obj, theta = tiny_poisson()
    one = obj.gn_stats(theta)
    ch = chunked_gn_stats(obj, theta, rows)
    assert ch.n == one.n == obj.n_residuals
    assert rel(ch.H, one.H) <= 1e-12 and rel(ch.g, one.g) <= 1e-12
    assert abs(float(ch.loss - one.loss)) <= 1e-12 * float(one.loss)
    assert torch.equal(ch.H, ch.H.T)  # symmetrized once, as gn_stats_from does


def test_the_blocks_are_the_residual_rows_in_order():
    _, obj, theta = tiny_poisson()
    blocks = list(row_blocks(obj, theta, 50))
    assert all(b.n_residuals <= 50 for b in blocks) and sum(b.n_residuals for b in blocks) == obj.n_residuals
    # the same rows in the same order; a block's vmap batches the network's GEMMs differently, so ~eps apart,
    # not the same bits
    torch.testing.assert_close(torch.cat([b.residual(theta) for b in blocks]), obj.residual(theta), rtol=1e-13,
                               atol=1e-13 * float(obj.residual(theta).abs().max()))


def test_linear_objective_chunks_and_bad_chunk():
    g = torch.Generator().manual_seed(3)
    A = torch.randn(301, 9, generator=g, dtype=torch.float64)
    b = torch.randn(301, generator=g, dtype=torch.float64)
    obj = LinearLeastSquares(A, b)
    w = torch.randn(9, generator=g, dtype=torch.float64)
    one, ch = obj.gn_stats(w), chunked_gn_stats(obj, w, 40)
    assert rel(ch.H, one.H) <= 1e-12 and rel(ch.g, one.g) <= 1e-12
    with pytest.raises(ValueError, match="at least 1 row, got 0"):
        chunked_gn_stats(obj, w, 0)


def test_lm_steps_on_chunked_statistics_equal_the_unchunked_steps():
    """Five LM steps on the chunked statistics against the normal form: the same iterates to 1e-10 (the
    statistics differ by ~1e-15 relative; the damped solves amplify that by at most cond(H + μI))."""
    pb, obj, theta0 = tiny_poisson()
    out = {}
    for solve in ("normal", "chunked"):
        cfg = SolveConfig(optimizer="lm", max_iters=5, lm=LMConfig(solve=solve))
        th, rows, info = solve_least_squares(obj, theta0, lambda t: {}, cfg)
        out[solve] = (th, info)
    th_n, th_c = out["normal"][0], out["chunked"][0]
    assert out["chunked"][1]["lm_solve"] == "chunked" and out["normal"][1]["lm_solve"] == "normal"
    assert float((th_c - th_n).norm() / th_n.norm()) <= 1e-10
    lm = LevenbergMarquardt(LMConfig(solve="chunked"))
    assert lm.statistics_form(10, 10) == "chunked"


def test_centralized_auto_streams_when_the_jacobian_does_not_fit(monkeypatch):
    """With (fake) tiny free memory and a tiny floor, ``lm_solve=auto`` takes the chunked form, records why, and
    runs the same iterates as the normal form to 1e-10."""
    from fedsciml.core import forms
    import fedsciml as fs

    monkeypatch.setattr(forms, "DENSE_FLOOR_ENTRIES", 100)
    p = tiny_poisson()[1].n_params
    free = int((2 * p * p * 8 + forms.JACOBIAN_PEAK * 100 * p * 8) / forms.SAFETY["cpu"]) + 1
    monkeypatch.setattr(forms, "available_memory", lambda device=None: free)
    pb = tiny_poisson()[0]
    auto = fs.solve(pb, "centralized", clients=2, max_iters=4)
    assert auto.extra["lm_solve"] == "chunked" and auto.extra["chunk_rows"] == 100
    assert "does not fit" in auto.extra["lm_solve_reason"]
    normal = fs.solve(tiny_poisson()[0], "centralized", clients=2, max_iters=4, lm_solve="normal")
    a, b = torch.as_tensor(auto.theta), torch.as_tensor(normal.theta)
    assert float((a - b).norm() / b.norm()) <= 1e-10
