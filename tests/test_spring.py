"""SPRING momentum of the Levenberg–Marquardt step (fedsciml.core.lm), against a dense reference of the recursion.

The reference is written here with numpy on the explicit Jacobian: φ_k = (JᵀJ + μI)⁻¹(Jᵀr + μβφ_{k−1}),
δ = −φ_k, gain ratio on the Gauss–Newton model decrease −gᵀδ − ½‖Jδ‖², Madsen–Nielsen–Tingleff damping,
φ dropped after a rejected trial.  Different operations (CG / kernel form / Cholesky against numpy's LU):
compared with a tolerance.
"""
import numpy as np
import pytest
import torch

from fedsciml.core.lm import LevenbergMarquardt, LMConfig
from fedsciml.core.matfree import GNOperator, MatfreeConfig
from fedsciml.core.nn import MLP
from fedsciml.core.objective import GNStats, gn_stats_from
from fedsciml.problems import get_problem


def tiny_pinn():
    pb = get_problem("poisson", dim=2, n_interior=40, n_boundary=6)
    pb.__dict__["_net"] = MLP([2, 8, 8, 1])
    return pb.centralized_objective(1, seed=0), pb.init_params(0)


def stats_for(obj, form):
    if form == "matfree":
        def st(theta):
            op = GNOperator(obj.residual, theta)
            return GNStats(H=None, g=op.g, loss=op.loss, n=op.n, op=op)
        return st
    if form == "kernel":
        def st(theta):
            r, J = obj.residual_and_jacobian(theta)
            return gn_stats_from(J, r, form_gram=False, keep_jacobian=True)
        return st
    return obj.gn_stats


def dense_reference(obj, theta0, mu0, beta, steps):
    """The SPRING/LM recursion on explicit J with numpy; returns the θ after each trial and the accept flags."""
    theta = theta0.numpy().copy()

    def rj(th):
        r, J = obj.residual_and_jacobian(torch.from_numpy(th))
        return r.numpy(), J.numpy()

    r, J = rj(theta)
    mu, nu, phi = mu0, 2.0, None
    thetas, flags = [], []
    for _ in range(steps):
        g = J.T @ r
        A = J.T @ J + mu * np.eye(theta.size)
        rhs = g if phi is None else g + mu * beta * phi
        delta = -np.linalg.solve(A, rhs)
        pred = -g @ delta - 0.5 * np.sum((J @ delta) ** 2)
        trial = theta + delta
        rt, _ = rj(trial)
        gain = 0.5 * r @ r - 0.5 * rt @ rt
        rho = gain / pred if pred > 0 else -1.0
        if rho > 0:
            theta = trial
            r, J = rj(theta)
            mu, nu = mu * max(1 / 3, 1 - (2 * rho - 1) ** 3), 2.0
            phi = -delta
        else:
            mu, nu = mu * nu, 2 * nu
            phi = None
        thetas.append(theta.copy())
        flags.append(rho > 0)
    return thetas, flags


@pytest.mark.parametrize("form", ["normal", "kernel", "matfree"])
def test_spring_momentum_follows_the_dense_reference_recursion(form):
    obj, theta0 = tiny_pinn()
    beta, steps = 0.6, 8
    lm = LevenbergMarquardt(LMConfig(tau=1e-3, solve=form, momentum=beta,
                                     matfree=MatfreeConfig(rank=20, rtol=1e-14, max_iters=3000)))
    st = stats_for(obj, form)
    lm.start(theta0, st(theta0))
    ref, flags = dense_reference(obj, theta0, lm.mu, beta, steps)
    used_momentum = 0
    for k in range(steps):
        used_momentum += lm.momentum_direction is not None
        trial = lm.propose()
        accepted = lm.observe(float(obj.loss(trial)), lambda: st(trial))
        assert accepted == flags[k]
        err = float(np.linalg.norm(lm.theta.numpy() - ref[k]) / np.linalg.norm(ref[k]))
        assert err < 1e-10, (k, err)
    assert used_momentum >= 2  # the momentum term took part in accepted steps (not a plain-LM run)


def test_spring_differs_from_plain_lm_and_beta_zero_is_plain_lm_bitwise():
    obj, theta0 = tiny_pinn()
    runs = {}
    for beta in (None, 0.0, 0.6):
        cfg = LMConfig(solve="normal") if beta is None else LMConfig(solve="normal", momentum=beta)
        lm = LevenbergMarquardt(cfg)
        lm.start(theta0, obj.gn_stats(theta0))
        for _ in range(8):  # three rejections first (μ₀ too small), then accepted steps with momentum
            trial = lm.propose()
            lm.observe(float(obj.loss(trial)), lambda: obj.gn_stats(trial))
        runs[beta] = lm.theta
    assert torch.equal(runs[None], runs[0.0])  # β = 0 takes the same operations: bitwise
    assert float((runs[0.6] - runs[0.0]).norm()) > 1e-6 * float(runs[0.0].norm())


def test_momentum_is_dropped_after_a_rejected_trial():
    obj, theta0 = tiny_pinn()
    lm = LevenbergMarquardt(LMConfig(solve="normal", momentum=0.5))
    lm.start(theta0, obj.gn_stats(theta0))
    trial = lm.propose()
    while not lm.observe(float(obj.loss(trial)), lambda: obj.gn_stats(trial)):
        trial = lm.propose()
    assert lm.momentum_direction is not None
    lm.propose()
    assert not lm.observe(float("inf"), lambda: obj.gn_stats(trial))
    assert lm.momentum_direction is None


@pytest.mark.parametrize("beta", [-0.1, 1.0])
def test_momentum_out_of_range_fails_with_one_line(beta):
    with pytest.raises(ValueError, match=r"momentum β must be in \[0, 1\)"):
        LevenbergMarquardt(LMConfig(momentum=beta))


def test_momentum_option_reaches_centralized_and_gn():
    import fedsciml as fs

    def pb():
        p = get_problem("poisson", dim=1, n_interior=30)
        p.__dict__["_net"] = MLP([1, 8, 8, 1])
        return p

    a = fs.solve(pb(), "centralized", clients=2, max_iters=8, momentum=0.5)
    b = fs.solve(pb(), "centralized", clients=2, max_iters=8)
    assert a.history[-1]["rel_l2"] != b.history[-1]["rel_l2"]
    g = fs.solve(pb(), "gn", clients=2, rounds=8, momentum=0.5, form="normal")
    c = fs.solve(pb(), "centralized", clients=2, max_iters=8, momentum=0.5, lm_solve="normal")
    # federated sums of the same statistics: equal to round-off
    assert abs(g.history[-1]["rel_l2"] - c.history[-1]["rel_l2"]) <= 1e-8 * c.history[-1]["rel_l2"]
    with pytest.raises(ValueError, match="momentum"):
        fs.solve(pb(), "centralized", clients=2, optimizer="adam", momentum=0.5)
