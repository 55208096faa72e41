"""A rejected trial of the matrix-free LM step re-solves in the first CG solve's Krylov space (issue 37): the
damped model at the larger μ minimized over the first CG directions and the step (``MatfreeConfig.krylov_reuse``),
with no operator product — so federated gn pays one exchange (the next trial's) for a rejection, not a CG solve."""
import pytest
import torch

from fedsciml.core.lm import LevenbergMarquardt, LMConfig
from fedsciml.core.matfree import MatfreeConfig, damped_gn_step
from fedsciml.core.objective import GNStats

EPS = torch.finfo(torch.float64).eps


def spd_case(p=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    J = torch.randn(2 * p, p, dtype=torch.float64, generator=gen) * torch.logspace(0, 2, p, dtype=torch.float64)
    return J.T @ J, torch.randn(p, dtype=torch.float64, generator=gen)


class CountingOperator:
    def __init__(self, H):
        self.H, self.calls = H, 0

    def matvec(self, v):
        self.calls += 1
        return self.H @ v

    def matmat(self, V):
        self.calls += V.shape[1]
        return self.H @ V


def galerkin(H, g, V, mu):
    """The damped model's minimizer over span(V), from an orthonormal basis of span(V) (QR): an independent
    reference for :func:`fedsciml.core.matfree.subspace_step`."""
    Q, _ = torch.linalg.qr(V)
    A = Q.T @ H @ Q + mu * torch.eye(Q.shape[1], dtype=H.dtype)
    return Q @ torch.linalg.solve(A, -(Q.T @ g))


def test_cg_keeps_its_krylov_space_where_it_took_at_most_m_iterations():
    """``krylov`` = m: a solve truncated after ≤ m iterations carries its search directions, and JᵀJ V is CG's own products less
    μV — equal to the dense product up to the products' round-off (κ(H) ≈ 1e4 here; 1e-10 relative); the step lies
    in their span (its residual after projection: round-off).  A longer solve, a converged one (rtol reached), or m = 0,
    carries none."""
    H, g = spd_case()
    res = damped_gn_step(lambda v: H @ v, g, 0.5, max_iters=6, krylov=6)
    V, HV = res.basis
    assert V.shape == HV.shape == (12, 6)
    assert float((HV - H @ V).norm() / (H @ V).norm()) < 1e-10
    Q, _ = torch.linalg.qr(V)
    assert float((res.delta - Q @ (Q.T @ res.delta)).norm() / res.delta.norm()) < 1e6 * EPS
    assert damped_gn_step(lambda v: H @ v, g, 0.5, max_iters=6, krylov=4).basis is None  # 6 iterations > 4
    assert damped_gn_step(lambda v: H @ v, g, 0.5, max_iters=6).basis is None  # off by default
    conv = damped_gn_step(lambda v: H @ v, g, 0.5, max_iters=200, rtol=1e-10, krylov=200)
    assert conv.rel_residual <= 1e-10 and conv.basis is None  # converged


def lm_at(H, g, reuse, max_iters=4):
    op = CountingOperator(H)
    lm = LevenbergMarquardt(LMConfig(solve="matfree", matfree=MatfreeConfig(precond="none", max_iters=max_iters,
                                                                            rtol=1e-14, krylov_reuse=reuse)))
    st = GNStats(H=None, g=g, loss=torch.tensor(10.0, dtype=torch.float64), n=24, op=op)
    lm.start(torch.zeros(H.shape[0], dtype=torch.float64), st)
    return lm, op


def test_a_rejected_trial_re_solves_in_the_krylov_space_with_no_product():
    """After a rejection the next trial takes no product, and its step is the damped model's minimizer over the
    span of the first solve's directions at the new μ (the QR reference on a well-conditioned 4×4 system: 1e6·eps
    relative); its predicted decrease is the Gauss–Newton model's −gᵀδ − ½δᵀJᵀJδ."""
    H, g = spd_case()
    lm, op = lm_at(H, g, reuse=20)
    lm.propose()
    V = lm._krylov[1]  # the first solve's 4 directions
    calls, mu0 = op.calls, lm.mu
    assert not lm.observe(1e9, lambda: lm.stats)
    assert lm.mu > mu0 and lm.krylov_mu == mu0
    lm.propose()
    assert op.calls == calls and lm.last_cg_iters == 0
    ref = galerkin(H, g, V, lm.mu)
    d = lm._delta
    assert float((d - ref).norm() / ref.norm()) < 1e6 * EPS
    assert lm._pred == pytest.approx(-float(g @ d) - 0.5 * float(d @ (H @ d)), rel=1e6 * EPS)
    # accepted: new statistics, a new Krylov space from a fresh CG solve
    assert lm.observe(0.0, lambda: GNStats(H=None, g=0.5 * g, loss=torch.tensor(0.0, dtype=torch.float64), n=24,
                                           op=lm.stats.op))
    assert lm.krylov_mu is None
    lm.propose()
    assert op.calls >= calls + 4 and lm.last_cg_iters == 4  # (with the new point's damping unit, precond none)


def test_krylov_reuse_zero_solves_afresh_as_before():
    """``krylov_reuse=0``: a rejected trial's next solve is a fresh CG at the new μ — the same operations as a
    direct :func:`damped_gn_step` at that μ, so bitwise the same step."""
    H, g = spd_case()
    lm, op = lm_at(H, g, reuse=0)
    lm.propose()
    calls = op.calls
    assert not lm.observe(1e9, lambda: lm.stats)
    lm.propose()
    assert op.calls == calls + 4 and lm.krylov_mu is None
    direct = damped_gn_step(lambda v: H @ v, g, lm.mu, max_iters=4, rtol=1e-14)
    assert torch.equal(lm._delta, direct.delta)


def test_a_resumed_run_rebuilds_the_basis_at_its_mu_and_takes_the_same_trial():
    """A checkpoint carries ``krylov_mu``; a new LM on the same statistics with it set rebuilds the basis by the
    same CG at that μ (the same operations: bitwise the same basis) and proposes the same trial, bitwise."""
    H, g = spd_case()
    lm, _ = lm_at(H, g, reuse=20)
    lm.propose()
    assert not lm.observe(1e9, lambda: lm.stats)
    mu, nu, kmu = lm.mu, lm.nu, lm.krylov_mu
    lm.propose()
    again, op = lm_at(H, g, reuse=20)
    again.mu, again.nu, again.krylov_mu = mu, nu, kmu
    again.propose()
    assert torch.equal(again._delta, lm._delta)


def test_federated_gn_equals_centralized_and_a_rejection_costs_one_exchange():
    """gn (3 clients, matrix-free, K-FAC CG) against centralized lm on the pooled points, whose first three trials
    are rejected (the initial damping is too small there): the same accept/reject sequence and iterates to 1e-9 (sums in another
    order); a round after a rejected one is the trial's exchange alone (its solve is in the kept Krylov space),
    a round after an accepted one the CG exchanges plus the trial's."""
    from fedsciml.methods import METHODS
    from fedsciml.methods.centralized import run_centralized
    from fedsciml.core.nn import MLP
    from fedsciml.problems import get_problem

    pb = get_problem("poisson", dim=2, n_interior=30, n_boundary=4)
    pb.__dict__["_net"] = MLP([2, 8, 8, 1])
    objs, th0 = pb.client_objectives(3, seed=0), pb.network().init(0)
    kw = dict(form="matfree", precond="kfac", cg_iters=5)
    th_f, rows_f, info_f = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=10, **kw)
    kw.pop("form")
    th_c, rows_c, _ = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=10, lm_solve="matfree",
                                      **kw)
    acc = [r.get("accepted") for r in rows_f]
    assert acc == [r.get("accepted") for r in rows_c] and False in acc, acc
    assert float((th_f - th_c).norm() / th_c.norm()) < 1e-9
    for prev, row in zip(rows_f, rows_f[1:]):
        if prev.get("accepted", True):
            assert row["exchanges"] == row["cg_iters"] + 1 and row["cg_iters"] > 0, (prev, row)
        else:
            assert row["exchanges"] == 1 and row["cg_iters"] == 0, (prev, row)


def test_a_negative_krylov_reuse_is_refused_in_one_line():
    with pytest.raises(ValueError, match="must be ≥ 0 .0: a fresh CG solve., got -1"):
        MatfreeConfig(krylov_reuse=-1).validate()
