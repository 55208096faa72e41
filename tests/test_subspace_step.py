"""The subspace step (issue 37): LM's damped Gauss–Newton model minimized exactly over k directions
V = [P⁻¹g, δ_{t−1}, …] from one batched product JᵀJ V (fedsciml.core.matfree.subspace_step), in centralized lm and
federated gn (two exchanges per accepted step, one per rejected trial)."""
import pytest
import torch

from fedsciml.core.lm import LevenbergMarquardt, LMConfig
from fedsciml.core.matfree import MatfreeConfig, subspace_step
from fedsciml.core.nn import MLP
from fedsciml.problems import get_problem

EPS = torch.finfo(torch.float64).eps


def spd_case(p=9, k=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    J = torch.randn(2 * p, p, dtype=torch.float64, generator=gen)
    H = J.T @ J
    g = torch.randn(p, dtype=torch.float64, generator=gen)
    V = torch.randn(p, k, dtype=torch.float64, generator=gen)
    return H, g, V


@pytest.mark.parametrize("mu", [1e-3, 1.0, 50.0])
def test_subspace_step_is_the_dense_damped_step_restricted_to_span_v(mu):
    """Closed form: δ* = V (Vᵀ(H + μI)V)⁻¹ Vᵀ(−g), the minimizer of gᵀδ + ½δᵀ(H + μI)δ over span(V); both a k×k
    solve of the same well-conditioned matrix (κ < 1e4 here): agreement to 1e4·k·eps relative.  The model
    decrease is the Gauss–Newton model's −gᵀδ − ½δᵀHδ, and the gradient of the damped model at δ is
    orthogonal to span(V) (Galerkin)."""
    H, g, V = spd_case()
    A = H + mu * torch.eye(H.shape[0], dtype=H.dtype)
    ref = V @ torch.linalg.solve(V.T @ A @ V, -(V.T @ g))
    res = subspace_step(V, H @ V, g, mu)
    tol = 1e4 * V.shape[1] * EPS
    assert float((res.delta - ref).norm() / ref.norm()) < tol
    dec = -float(g @ ref) - 0.5 * float(ref @ (H @ ref))
    assert res.model_decrease == pytest.approx(dec, rel=tol)
    assert float((V.T @ (g + A @ res.delta)).norm()) < tol * float((V.T @ g).norm())
    # the full space: the dense damped step itself
    Q = torch.eye(H.shape[0], dtype=H.dtype)
    full = subspace_step(Q, H, g, mu)
    assert float((full.delta + torch.linalg.solve(A, g)).norm() / full.delta.norm()) < 1e4 * EPS * H.shape[0]


def test_dependent_and_zero_columns_give_the_same_step():
    """A repeated (rescaled) column and a zero column span nothing more: the same δ as the independent columns
    (the k×k matrix is singular there; its near-zero eigenvalue is left out)."""
    H, g, V = spd_case(k=2)
    mu = 0.1
    base = subspace_step(V, H @ V, g, mu)
    W = torch.cat([V, 3.0 * V[:, :1], torch.zeros_like(V[:, :1])], 1)
    res = subspace_step(W, H @ W, g, mu)
    assert float((res.delta - base.delta).norm() / base.delta.norm()) < 1e6 * EPS
    assert subspace_step(torch.zeros_like(V), torch.zeros_like(V), g, mu).delta.abs().max() == 0
    with pytest.raises(ValueError, match=r"must both be \[p = 9, k\]"):
        subspace_step(V, (H @ V)[:, :1], g, mu)


class CountingOperator:
    def __init__(self, H):
        self.H = H
        self.calls = 0  # matmat calls (the power iteration's matvecs, the damping unit without a preconditioner, apart)

    def matvec(self, v):
        return self.H @ v

    def matmat(self, V):
        self.calls += 1
        return self.H @ V


def test_lm_subspace_takes_one_product_per_point_and_keeps_past_steps():
    """LM with subspace k: one matmat per statistics (a rejected trial re-solves the k×k system at the larger μ in
    the same span, no product more); V's columns are −g (precond none) and the last k − 1 accepted steps."""
    from fedsciml.core.objective import GNStats

    H, g, _ = spd_case(p=6)
    op = CountingOperator(H)
    lm = LevenbergMarquardt(LMConfig(solve="matfree", matfree=MatfreeConfig(precond="none", subspace=3)))
    st = GNStats(H=None, g=g, loss=torch.tensor(10.0, dtype=torch.float64), n=12, op=op)
    lm.start(torch.zeros(6, dtype=torch.float64), st)
    lm.propose()
    assert op.calls == 1
    assert not lm.observe(1e9, lambda: st)  # rejected: same statistics, larger μ
    lm.propose()
    assert op.calls == 1
    d = lm._delta
    assert lm.observe(0.0, lambda: GNStats(H=None, g=g + 0.1, loss=torch.tensor(0.0, dtype=torch.float64), n=12,
                                           op=op))
    assert len(lm.past_steps) == 1 and torch.equal(lm.past_steps[0], d)
    lm.propose()
    assert op.calls == 2 and lm._subspace is not None and lm._subspace[1].shape[1] == 2


def test_bad_settings_are_refused_with_one_line():
    with pytest.raises(ValueError, match="directions must be ≥ 0"):
        MatfreeConfig(subspace=-1).validate()
    with pytest.raises(ValueError, match="momentum β = 0.5 must be 0"):
        LMConfig(matfree=MatfreeConfig(subspace=2), momentum=0.5).validate()
    with pytest.raises(ValueError, match="LM solve is 'normal'"):
        LMConfig(solve="normal", matfree=MatfreeConfig(subspace=2)).validate()
    from fedsciml.methods.centralized import CentralizedConfig
    from fedsciml.methods.gn import GNConfig
    from fedsciml.options import OptionError

    with pytest.raises(OptionError, match="subspace has no effect here: .*matfree or auto"):
        GNConfig.from_options(form="normal", subspace=2)
    with pytest.raises(OptionError, match="cg.iters has no effect here: the subspace step runs no CG"):
        GNConfig.from_options(subspace=2, cg_iters=5)
    with pytest.raises(OptionError, match="subspace has no effect here"):
        CentralizedConfig.from_options(lm_solve="kernel", subspace=2)
    with pytest.raises(OptionError, match="momentum has no effect here: the subspace step carries its own"):
        CentralizedConfig.from_options(subspace=2, momentum=0.5)


def tiny(clients):
    pb = get_problem("poisson", dim=2, n_interior=30, n_boundary=4)
    pb.__dict__["_net"] = MLP([2, 8, 8, 1])
    return pb, pb.client_objectives(clients, seed=0), pb.network()


@pytest.mark.parametrize("damping", ["lm", "adapt"])
def test_federated_gn_subspace_equals_centralized_lm_subspace_and_counts_two_exchanges(damping):
    """gn with 3 clients and the subspace step against centralized lm with it on the same pooled points: the
    server's algebra is the same code on sums (the gradient, the K-FAC factors and JᵀJ V summed over clients —
    sums in another order, so not bitwise; the k×k solves are well conditioned and nothing iterates: 1e-9
    relative after 6 steps).  Exchanges: a round is the trial's gradient exchange plus, after an acceptance, one
    product exchange (V = [P⁻¹g, δ_{t−1}], 2 columns; with adapt, P_γ⁻¹g at three γ: 4 columns)."""
    from fedsciml.methods import METHODS
    from fedsciml.methods.centralized import run_centralized

    pb, objs, net = tiny(3)
    th0 = net.init(0)
    th_f, rows_f, info_f = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=6, form="matfree", precond="kfac",
                                         subspace=2, subspace_damping=damping)
    th_c, rows_c, info_c = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=6,
                                           lm_solve="matfree", precond="kfac", subspace=2, subspace_damping=damping)
    assert [r.get("accepted") for r in rows_f] == [r.get("accepted") for r in rows_c]
    for a, b in zip(rows_f, rows_c):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-9)
    assert float((th_f - th_c).norm() / th_c.norm()) < 1e-9
    assert rows_c[-1]["loss"] < 0.5 * rows_c[0]["loss"]
    assert info_c["subspace"] == 2 and info_f["strategy"]["subspace"] == 2
    for prev, row in zip(rows_f, rows_f[1:]):  # a row's exchanges are its round's own
        assert row["exchanges"] == (2 if prev.get("accepted", True) else 1), (prev, row)
    assert info_f["exchanges"] == sum(r["exchanges"] for r in rows_f)
    assert info_c["subspace_damping"] == info_f["strategy"]["subspace_damping"] == damping


def test_adapt_moves_gamma_to_the_column_that_decreases_the_model_most():
    """subspace_damping adapt: V = [P_{γ/10}⁻¹g, P_γ⁻¹g, P_{10γ}⁻¹g, past steps]; after the products γ is the grid
    value whose column alone gives the largest (vᵀg)²/(2vᵀ(H + μI)v) — checked against that formula on a
    preconditioner that is diag(H) + γI, so the three columns differ."""
    from fedsciml.core.objective import GNStats

    H, g, _ = spd_case(p=6)
    D = H.diagonal()

    class Diag:
        def inverse(self, gam):
            return lambda v: v / (D + gam)

    op = CountingOperator(H)
    cfg = LMConfig(solve="matfree", matfree=MatfreeConfig(precond="none", subspace=2, subspace_damping="adapt"))
    lm = LevenbergMarquardt(cfg)
    lm.start(torch.zeros(6, dtype=torch.float64), GNStats(H=None, g=g, loss=torch.tensor(10.0, dtype=torch.float64),
                                                          n=12, op=op))
    lm.precond_damping = 5.0
    lm._solve_subspace(0.1, Diag(), 2)
    V = lm._subspace[1]
    assert V.shape[1] == 3  # no past step yet
    dec = [float(V[:, j] @ g) ** 2 / (2 * float(V[:, j] @ (H + 0.1 * torch.eye(6, dtype=H.dtype)) @ V[:, j]))
           for j in range(3)]
    assert lm.precond_damping == [0.5, 5.0, 50.0][max(range(3), key=dec.__getitem__)]
