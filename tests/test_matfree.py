"""Matrix-free damped Gauss–Newton (fedsciml.core.matfree): CG on JᵀJ products, Nyström preconditioning."""
import pytest
import torch

from fedsciml.core import linalg
from fedsciml.core.matfree import GNOperator, Nystrom, cg, damped_gn_step, power_lambda_max
from fedsciml.core.nn import MLP
from fedsciml.problems import get_problem


def tiny_pinn(hidden=(8, 8), **opts):
    pb = get_problem("poisson", **{"dim": 2, "n_interior": 40, "n_boundary": 6, **opts})
    pb.__dict__["_net"] = MLP([pb.input_dim(), *hidden, 1])
    obj = pb.centralized_objective(1, seed=0)
    return obj, pb.init_params(0)


def test_gn_operator_products_match_the_dense_jacobian():
    obj, theta = tiny_pinn()
    op = GNOperator(obj.residual, theta)
    r, J = obj.residual_and_jacobian(theta)
    V = torch.randn(theta.numel(), 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    # different operation order (jvp/vjp against JᵀJ): a tolerance
    torch.testing.assert_close(op.matmat(V), J.T @ (J @ V), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(op.matvec(V[:, 0]), J.T @ (J @ V[:, 0]), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(op.g, J.T @ r, rtol=1e-12, atol=1e-12)
    assert op.products == 4


@pytest.mark.parametrize("precond", [False, True])
def test_matrix_free_step_equals_the_dense_lm_step(precond):
    """The CG step on jvp/vjp products equals the Cholesky step on the dense (JᵀJ + μI) to 1e-10 (relative)."""
    obj, theta = tiny_pinn()
    r, J = obj.residual_and_jacobian(theta)
    H, g = J.T @ J, J.T @ r
    mu = 1e-3 * float(H.diagonal().max())
    dense = -linalg.damped_solve(0.5 * (H + H.T), g, mu)
    op = GNOperator(obj.residual, theta)
    P = None
    if precond:
        P = Nystrom.sketch(op.matmat, op.p, 40, generator=torch.Generator().manual_seed(1)).inverse(mu)
    st = damped_gn_step(op.matvec, op.g, mu, precond=P, rtol=1e-14, max_iters=2000)
    assert float((st.delta - dense).norm() / dense.norm()) < 1e-10
    # the model decrease equals LM's ½δᵀ(μδ − g) for the exact step
    pred = float(0.5 * (dense @ (mu * dense - g)))
    assert abs(st.model_decrease - pred) <= 1e-9 * abs(pred)


def test_nystrom_is_exact_for_a_low_rank_operator():
    gen = torch.Generator().manual_seed(0)
    B = torch.randn(30, 5, dtype=torch.float64, generator=gen)
    A = B @ B.T
    ny = Nystrom.sketch(lambda V: A @ V, 30, 8, generator=gen)
    torch.testing.assert_close((ny.U * ny.lam) @ ny.U.T, A, rtol=1e-8, atol=1e-8)
    assert int((ny.lam > 1e-8 * float(ny.lam[0])).sum()) == 5


def test_cg_solves_an_spd_system_against_a_direct_solve():
    gen = torch.Generator().manual_seed(2)
    M = torch.randn(20, 20, dtype=torch.float64, generator=gen)
    A = M @ M.T + 0.1 * torch.eye(20, dtype=torch.float64)
    b = torch.randn(20, dtype=torch.float64, generator=gen)
    res = cg(lambda v: A @ v, b, rtol=1e-13, max_iters=500)
    torch.testing.assert_close(res.x, torch.linalg.solve(A, b), rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(res.Ax, A @ res.x, rtol=1e-9, atol=1e-9)


def test_nystrom_preconditioner_cuts_cg_iterations_on_an_ill_conditioned_pinn():
    """A PINN's JᵀJ has a fast-decaying spectrum: with small damping (μ = 1e-8·λ_max) plain CG needs many
    iterations (196 here, n = 104, p = 205); a rank-20 Nyström preconditioner (35 measured) removes the top of
    the spectrum.  Asserted: at least a 3× cut, and both solves reach the same step (to CG's accuracy)."""
    obj, theta = tiny_pinn(hidden=(12, 12), n_interior=80)
    op = GNOperator(obj.residual, theta)
    lam_max = power_lambda_max(op.matvec, op.p, generator=torch.Generator().manual_seed(0))
    mu = 1e-8 * lam_max
    plain = damped_gn_step(op.matvec, op.g, mu, rtol=1e-8, max_iters=3000)
    P = Nystrom.sketch(op.matmat, op.p, 20, generator=torch.Generator().manual_seed(1)).inverse(mu)
    pre = damped_gn_step(op.matvec, op.g, mu, precond=P, rtol=1e-8, max_iters=3000)
    assert pre.rel_residual <= 1e-8 and plain.rel_residual <= 1e-8
    assert pre.cg_iters * 3 <= plain.cg_iters, (pre.cg_iters, plain.cg_iters)
    assert float((pre.delta - plain.delta).norm() / plain.delta.norm()) < 1e-2


def test_bad_settings_fail_with_one_clear_line():
    with pytest.raises(ValueError, match="rank"):
        Nystrom.sketch(lambda V: V, 5, 6)
    with pytest.raises(ValueError, match="μ > 0"):
        damped_gn_step(lambda v: v, torch.ones(3, dtype=torch.float64), 0.0)


def test_matrix_free_lm_reaches_the_least_squares_solution():
    from fedsciml.core.objective import LinearLeastSquares
    from fedsciml.methods.centralized import SolveConfig, solve_least_squares
    from fedsciml.core.lm import LMConfig
    from fedsciml.core.matfree import MatfreeConfig

    g = torch.Generator().manual_seed(0)
    A = torch.randn(40, 8, generator=g, dtype=torch.float64) @ torch.diag(torch.logspace(0, -3, 8, dtype=torch.float64))
    b = torch.randn(40, generator=g, dtype=torch.float64)
    w_star = torch.linalg.lstsq(A, b.unsqueeze(-1)).solution.squeeze(-1)
    cfg = SolveConfig(optimizer="lm", max_iters=40, lm=LMConfig(solve="matfree", matfree=MatfreeConfig(rank=4)))
    w, rows, info = solve_least_squares(LinearLeastSquares(A, b), torch.zeros(8, dtype=torch.float64),
                                        lambda t: {}, cfg)
    torch.testing.assert_close(w, w_star, rtol=1e-7, atol=1e-7)
    assert info["lm_solve"] == "matfree" and info["cg_iters"] > 0


def test_centralized_lm_matrix_free_on_a_pinn_tracks_the_dense_solve():
    """Same problem, same start: the matrix-free LM (its own damping unit λ_max) and the dense LM both reduce
    the loss by orders of magnitude in 15 iterations; the matrix-free run never forms J (its stats carry op)."""
    from fedsciml.methods.centralized import run_centralized

    pb = get_problem("poisson", dim=2, n_interior=60, n_boundary=6)
    pb.__dict__["_net"] = MLP([2, 10, 10, 1])
    objs = pb.client_objectives(2, seed=0)
    th0 = pb.init_params(0)
    out = {}
    for solve in ("normal", "matfree"):
        th, rows, info = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=15, lm_solve=solve)
        assert info["lm_solve"] == solve
        out[solve] = rows
    for solve, rows in out.items():
        assert rows[-1]["loss"] < 1e-2 * rows[0]["loss"], (solve, rows[0]["loss"], rows[-1]["loss"])
    assert all("cg_iters" in r for r in out["matfree"][1:])
    assert out["matfree"][-1]["loss"] < 10 * out["normal"][-1]["loss"]


# --- federated matrix-free gn -----------------------------------------------------------------


def _pinn_clients(K=3):
    pb = get_problem("poisson", dim=2, n_interior=30, n_boundary=4)
    pb.__dict__["_net"] = MLP([2, 8, 8, 1])
    return pb, pb.client_objectives(K, seed=0), pb.init_params(0)


def test_federated_matrix_free_gn_equals_centralized_matrix_free_lm():
    """Σ_m J_mᵀJ_m v over exchanges equals the pooled JᵀJ v up to round-off, the Nyström test matrix is the
    same (same seed), so the LM iterates agree to round-off amplified by CG (asserted 1e-8 relative)."""
    from fedsciml.methods import METHODS
    from fedsciml.methods.centralized import run_centralized

    pb, objs, th0 = _pinn_clients()
    th_f, rows_f, info_f = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=5, form="matfree", nystrom_rank=20)
    th_c, rows_c, info_c = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=5,
                                           lm_solve="matfree", nystrom_rank=20)
    assert [r.get("accepted") for r in rows_f] == [r.get("accepted") for r in rows_c]
    for a, b in zip(rows_f, rows_c):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-8)
    assert float((th_f - th_c).norm() / th_c.norm()) < 1e-8
    assert info_f["cg_iters"] == info_c["cg_iters"] > 0


@pytest.mark.parametrize("exchange", ["one", "two"])
def test_federated_matrix_free_gn_counts_every_exchange(exchange):
    """Per round: the trial θ down; 2·K·p floats and one exchange per CG iteration; a Nyström sketch (ℓ·p down
    and up per client) whenever the point is new; ``two``: the losses up, then the gradient up when accepted (a
    second exchange); ``one``: the gradient and loss up at the trial in the same exchange, accepted or not."""
    from fedsciml.methods import METHODS

    pb, objs, th0 = _pinn_clients()
    K, p, rank = 3, th0.numel(), 6
    _, rows, _ = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=4, form="matfree", nystrom_rank=rank,
                               exchange=exchange)
    sketch = 2 * K * rank * p
    # start: gradients up (p + 2 each), θ₀ down, one sketch
    assert rows[0]["floats_sent"] == K * (p + 2) + K * p + sketch
    new_point = False
    for prev, r in zip(rows, rows[1:]):
        expect = (sketch if new_point else 0) + 2 * K * p * r["cg_iters"] + K * p
        if exchange == "two":
            expect += 2 * K + (K * (p + 2) if r["accepted"] else 0)
        else:
            expect += K * (p + 2)
        assert r["floats_sent"] - prev["floats_sent"] == expect
        extra = (1 if r["accepted"] else 0) if exchange == "two" else 0
        assert r["exchanges"] == (1 if new_point else 0) + r["cg_iters"] + 1 + extra
        assert r["exchanges_total"] - prev["exchanges_total"] == r["exchanges"]
        new_point = r["accepted"]


def test_federated_matrix_free_gn_rejects_a_bad_product_and_resumes(tmp_path):
    from fedsciml.methods import METHODS
    from fedsciml.methods.gn import validate_products

    V = torch.eye(4, dtype=torch.float64)[:, :2]
    ok, bad = validate_products({0: {"HV": V.clone()}, 1: {"HV": -V}, 2: {"HV": V[:3]},
                                 3: {"HV": V, "x": V}}, V)
    assert list(ok) == [0] and set(bad) == {1, 2, 3}
    pb, objs, th0 = _pinn_clients()
    full, rows_full, _ = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=4, form="matfree", nystrom_rank=6)
    METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=2, form="matfree", nystrom_rank=6, checkpoint=str(tmp_path))
    res, rows_res, _ = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=4, form="matfree", nystrom_rank=6,
                                     checkpoint=str(tmp_path), resume=True)
    assert [r["loss"] for r in rows_full] == pytest.approx([r["loss"] for r in rows_res], rel=1e-9)


def test_gn_automatic_form_by_message_size():
    from fedsciml.methods.gn import MATFREE_FLOATS, choose_form

    assert choose_form([100, 102, 100, 100], 2209) == "sqrt"        # bratu, 4 clients: as before
    assert choose_form([850] * 4, 2337) == "sqrt"                   # poisson d=5: 850·2338 < 2337·2338/2
    assert choose_form([2000] * 4, 2337) == "normal"
    assert choose_form([4000] * 4, 34_000) == "matfree"             # 4000·34001 floats > 50 MB
    assert min(34_000 * 34_001 // 2, 4000 * 34_001) > MATFREE_FLOATS
