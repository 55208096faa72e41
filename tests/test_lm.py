"""Levenberg–Marquardt state machine and the centralized drivers (LM, Adam, L-BFGS)."""
import pytest
import torch

from fedsciml.core.nn import MLP
from fedsciml.core.objective import GNStats, LinearLeastSquares, gn_stats_from, stack_objectives
from fedsciml.problems import get_problem
from fedsciml.methods.centralized import SolveConfig, solve_least_squares
from fedsciml.core.lm import LevenbergMarquardt, LMConfig


def no_eval(theta):
    return {}


def tiny_pinn(name="poisson", hidden=(8, 8), **opts):
    opts = {"n_interior": 12, **opts}
    pb = get_problem(name, **opts)
    pb.__dict__["_net"] = MLP([pb.input_dim(), *hidden, 1])
    return pb, pb.centralized_objective(2, seed=0)


@pytest.mark.parametrize("solve", ["normal", "kernel", "auto"])
def test_lm_on_linear_least_squares_reaches_the_closed_form(solve):
    g = torch.Generator().manual_seed(0)
    A = torch.randn(30, 6, generator=g, dtype=torch.float64)
    b = torch.randn(30, generator=g, dtype=torch.float64)
    w_star = torch.linalg.lstsq(A, b.unsqueeze(-1)).solution.squeeze(-1)
    cfg = SolveConfig(optimizer="lm", max_iters=60, lm=LMConfig(solve=solve))
    w, rows, info = solve_least_squares(LinearLeastSquares(A, b), torch.zeros(6, dtype=torch.float64), no_eval, cfg)
    torch.testing.assert_close(w, w_star, rtol=1e-10, atol=1e-10)
    assert info["lm_solve"] == ("kernel" if solve == "kernel" else "normal")  # n > p: auto stays normal


@pytest.mark.parametrize("solve", ["normal", "kernel"])
def test_lm_on_an_underdetermined_linear_problem_finds_the_minimum_norm_solution(solve):
    """Every LM step from 0 lies in the row space of A, so the limit is A⁺b."""
    g = torch.Generator().manual_seed(1)
    A = torch.randn(5, 12, generator=g, dtype=torch.float64)
    b = torch.randn(5, generator=g, dtype=torch.float64)
    cfg = SolveConfig(optimizer="lm", max_iters=200, lm=LMConfig(solve=solve))
    w, _rows, _info = solve_least_squares(LinearLeastSquares(A, b), torch.zeros(12, dtype=torch.float64), no_eval, cfg)
    torch.testing.assert_close(w, torch.linalg.pinv(A) @ b, rtol=1e-9, atol=1e-9)


def test_kernel_and_normal_forms_give_the_same_step():
    _pb, obj = tiny_pinn(n_interior=10, hidden=(6, 6))  # n = 22 < p = 61
    theta = _pb.init_params(0)
    r, J = obj.residual_and_jacobian(theta)
    steps = []
    for solve, st in (("normal", gn_stats_from(J, r)), ("kernel", gn_stats_from(J, r, form_gram=False, keep_jacobian=True))):
        lm = LevenbergMarquardt(LMConfig(solve=solve))
        lm.start(theta, st)
        steps.append(lm.propose() - theta)
        assert lm.mu == pytest.approx(1e-3 * float((J * J).sum(0).max()), rel=1e-12)
    torch.testing.assert_close(steps[0], steps[1], rtol=1e-8, atol=1e-10)
    # the step solves the damped normal equations
    H = J.T @ J
    mu = 1e-3 * float(H.diagonal().max())
    torch.testing.assert_close((H + mu * torch.eye(H.shape[0], dtype=H.dtype)) @ steps[1], -J.T @ r, rtol=1e-8, atol=1e-9)


def test_summed_client_statistics_drive_the_same_iterates_as_pooled_ones():
    """What federated GN relies on: Σ_m (J_mᵀJ_m, J_mᵀr_m) in the state machine == the pooled statistics."""
    pb, pooled = tiny_pinn(hidden=(6, 6))
    clients = pb.client_objectives(2, seed=0)
    theta = pb.init_params(0)

    def summed(th):
        s = [c.gn_stats(th) for c in clients]
        return GNStats(H=sum(x.H for x in s), g=sum(x.g for x in s), loss=sum(x.loss for x in s), n=sum(x.n for x in s))

    a, b = LevenbergMarquardt(LMConfig(solve="normal")), LevenbergMarquardt()
    a.start(theta, summed(theta))
    r, J = pooled.residual_and_jacobian(theta)
    b.start(theta, gn_stats_from(J, r, form_gram=False, keep_jacobian=True))
    for _ in range(5):
        ta, tb = a.propose(), b.propose()
        torch.testing.assert_close(ta, tb, rtol=1e-7, atol=1e-9)
        la = float(sum(c.loss(ta) for c in clients))
        assert a.observe(la, lambda: summed(ta)) == b.observe(
            float(pooled.loss(tb)), lambda: gn_stats_from(*reversed(pooled.residual_and_jacobian(tb)), form_gram=False,
                                                          keep_jacobian=True))
        assert a.mu == pytest.approx(b.mu, rel=1e-6)


def test_rejected_step_keeps_theta_and_raises_damping():
    A = torch.eye(3, dtype=torch.float64)
    b = torch.ones(3, dtype=torch.float64)
    obj = LinearLeastSquares(A, b)
    theta = torch.zeros(3, dtype=torch.float64)
    lm = LevenbergMarquardt()
    lm.start(theta, obj.gn_stats(theta))
    mu0, loss0 = lm.mu, lm.loss
    lm.propose()
    called = []
    assert lm.observe(1e9, lambda: called.append(1)) is False
    assert not called and torch.equal(lm.theta, theta) and lm.loss == loss0
    assert lm.mu == pytest.approx(2 * mu0) and lm.nu == 4.0 and lm.rejected_steps == 1
    trial = lm.propose()
    assert lm.observe(float(obj.loss(trial)), lambda: obj.gn_stats(trial)) is True
    assert lm.accepted_steps == 1 and lm.nu == 2.0 and lm.loss < loss0
    with pytest.raises(RuntimeError, match="before propose"):
        lm.observe(0.0, lambda: None)


def test_lm_configuration_errors_are_named():
    with pytest.raises(ValueError, match="solve must be one of"):
        LevenbergMarquardt(LMConfig(solve="qr"))
    with pytest.raises(ValueError, match="tau must be ≥ 0"):
        LevenbergMarquardt(LMConfig(tau=-1.0))
    with pytest.raises(ValueError, match="mu_min < mu_max"):
        LevenbergMarquardt(LMConfig(mu_min=1.0, mu_max=0.5))
    obj = LinearLeastSquares(torch.eye(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64))
    lm = LevenbergMarquardt(LMConfig(solve="kernel"))
    lm.start(torch.zeros(2, dtype=torch.float64), obj.gn_stats(torch.zeros(2, dtype=torch.float64)))
    with pytest.raises(ValueError, match="carry J and r"):
        lm.propose()


@pytest.mark.parametrize("kw,match", [
    ({"optimizer": "sgd"}, "unknown optimizer 'sgd'"),
    ({"budget": 0.0}, "budget must be > 0"),
    ({"budget": -1.0}, "budget must be > 0"),
    ({"max_iters": -1}, "max_iters must be ≥ 0"),
    ({"lr": 0.0}, "learning rate must be a finite number > 0"),
])
def test_solve_config_errors_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        SolveConfig(**kw).validate()


@pytest.mark.parametrize("optimizer,iters,factor", [("lm", 15, 1e-3), ("lbfgs", 40, 1e-1), ("adam", 60, 0.9)])
def test_every_optimizer_reduces_the_loss_of_a_tiny_pinn(optimizer, iters, factor):
    pb, obj = tiny_pinn("bratu", hidden=(8, 8))
    theta0 = pb.init_params(0)
    cfg = SolveConfig(optimizer=optimizer, max_iters=iters, lr=1e-2 if optimizer == "adam" else None)
    theta, rows, _info = solve_least_squares(obj, theta0, pb.evaluate, cfg)
    assert len(rows) == iters + 1 and [r["step"] for r in rows] == list(range(iters + 1))
    assert rows[-1]["loss"] < factor * rows[0]["loss"]
    assert rows[-1]["loss"] == pytest.approx(float(obj.loss(theta)) / obj.n_residuals, rel=1e-9)
    assert rows[-1]["rel_l2"] < rows[0]["rel_l2"]
    assert all(r["time_s"] >= 0 for r in rows)
    if optimizer == "lm":  # accepted LM steps never increase the loss
        losses = [r["loss"] for r in rows]
        assert all(b <= a for a, b in zip(losses, losses[1:]))


def test_lm_solves_a_small_poisson_problem_accurately():
    pb, obj = tiny_pinn("poisson", hidden=(10, 10), dim=1, n_interior=20)
    cfg = SolveConfig(optimizer="lm", max_iters=60)
    theta, rows, info = solve_least_squares(obj, pb.init_params(1), no_eval, cfg)
    assert info["lm_solve"] == "kernel"  # 42 residuals < 141 parameters
    assert pb.evaluate(theta)["rel_l2"] < 1e-3, rows[-1]


def test_tolerance_and_iteration_cap_stop_the_solver():
    pb, obj = tiny_pinn("bratu", hidden=(6,))
    theta0 = pb.init_params(0)
    _t, rows, _i = solve_least_squares(obj, theta0, no_eval, SolveConfig(max_iters=3))
    assert len(rows) == 4
    _t, rows, _i = solve_least_squares(obj, theta0, no_eval, SolveConfig(max_iters=50, tol=1e9))
    assert len(rows) == 1
    _t, rows, _i = solve_least_squares(obj, theta0, no_eval, SolveConfig(optimizer="adam", max_iters=50, tol=1e9))
    assert len(rows) == 2


def test_pooled_objective_of_one_client_is_the_client_objective():
    pb, _ = tiny_pinn("allen-cahn", hidden=(4,))
    (c,) = pb.client_objectives(1, seed=3)
    pooled = stack_objectives([c])
    theta = pb.init_params(2)
    # not bitwise: the pooled points are a copy (other alignment), and BLAS kernels may then sum in another order
    torch.testing.assert_close(pooled.residual(theta), c.residual(theta), rtol=1e-13, atol=1e-14)


def test_undamped_first_step_solves_linear_least_squares_and_damping_can_grow():
    """τ = 0 (the default for linear residuals): one LM step is the exact least-squares solution."""
    g = torch.Generator().manual_seed(0)
    A = torch.randn(30, 5, generator=g, dtype=torch.float64)
    b = torch.randn(30, generator=g, dtype=torch.float64)
    obj = LinearLeastSquares(A, b)
    x0 = torch.zeros(5, dtype=torch.float64)
    lm = LevenbergMarquardt(LMConfig(tau=0.0))
    lm.start(x0, obj.gn_stats(x0))
    trial = lm.propose()
    assert lm.observe(float(obj.loss(trial)), lambda: obj.gn_stats(trial))
    ref = torch.linalg.lstsq(A, b).solution
    assert float((lm.theta - ref).norm() / ref.norm()) < 1e-12
    # a rejected undamped step must still increase the damping (μ = 0 · ν would stay 0)
    lm2 = LevenbergMarquardt(LMConfig(tau=0.0))
    lm2.start(x0, obj.gn_stats(x0))
    lm2.propose()
    assert not lm2.observe(float("inf"), lambda: None)
    assert lm2.mu > 0
