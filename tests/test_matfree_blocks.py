"""LM's matrix-free operator over row blocks (fedsciml.core.matfree.BlockGNOperator): the same products and K-FAC
factors as the one-block operator, chosen by ``auto`` where the residual graph exceeds its cap, and charged that cap
by the driver's memory estimate (issue 36: PINNacle's 5 × 100 network on 33k–164k rows within 8 GB)."""
import torch

from fedsciml.core import forms, kfac_forms
from fedsciml.core.matfree import BlockGNOperator, GNOperator
from fedsciml.core.stats import row_blocks
from fedsciml.problems import get_problem

EPS = torch.finfo(torch.float64).eps


def kovasznay(n_interior=20, n_boundary=5):
    """A DomainPDE with three outputs per point (u, v, p: a block of rows never splits a point's outputs)."""
    pb = get_problem("kovasznay", n_interior=n_interior, n_boundary=n_boundary, hidden=[6, 5])
    (obj,) = pb.client_objectives(1, seed=0)
    return pb, obj, pb.init_params(0)


def test_block_operator_products_equal_the_dense_jacobian_products():
    """``Σ_b J_bᵀ(J_b v)`` against ``Jᵀ(Jv)`` from the dense J: the same per-row products summed in another order,
    so within the summation bound ``n·eps·|J|ᵀ(|J||v|)`` (entrywise), not bitwise; ``Jᵀr`` and ``Jv`` the same."""
    _pb, obj, theta = kovasznay()
    r, J = obj.residual_and_jacobian(theta)
    n = J.shape[0]
    blocks = list(row_blocks(obj, theta, 7))
    assert len(blocks) > 3 and sum(int(b.residual(theta).numel()) for b in blocks) == n
    op = BlockGNOperator([b.residual for b in blocks], theta)
    one = GNOperator(obj.residual, theta)
    v = torch.randn(theta.numel(), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    bound = 4 * n * EPS * (J.abs().T @ (J.abs() @ v.abs()))
    assert bool(((op.matvec(v) - J.T @ (J @ v)).abs() <= bound).all())
    assert bool(((op.matvec(v) - one.matvec(v)).abs() <= 2 * bound).all())
    assert bool(((op.jv(v) - J @ v).abs() <= 4 * J.shape[1] * EPS * (J.abs() @ v.abs())).all())
    assert bool(((op.g - J.T @ r).abs() <= 4 * n * EPS * (J.abs().T @ r.abs())).all())
    # each row's residual by the same function on a smaller vmap batch: equal to a few eps of its size
    assert float((op.r - r).abs().max()) <= 8 * EPS * float(r.abs().max()) and op.n == n and op.products == 2
    V = torch.stack([v, -2 * v], 1)
    assert bool(((op.matmat(V) - J.T @ (J @ V)).abs() <= 2 * bound[:, None]).all()) and op.products == 4


def test_blocked_kfac_factors_equal_the_whole_pass():
    """K-FAC's factors are sums over points: over blocks they add up to the one pass's within ``n·eps·max diag``
    per matrix (|Σ ã_i ã_j| ≤ Σ (ã_i² + ã_j²)/2 bounds each entry's magnitude sum by the largest diagonal)."""
    pb, obj, theta = kovasznay()
    whole = kfac_forms.factors_of(obj, theta)
    parts = kfac_forms.factors_of(obj, theta, 5)
    n = obj.n_residuals
    assert parts.count == whole.count
    for t in whole.A:
        for a, b in zip(whole.A[t] + whole.B[t], parts.A[t] + parts.B[t]):
            tol = 4 * n * EPS * float(a.diagonal().abs().max())
            assert float((a - b).abs().max()) <= tol


def test_auto_holds_a_graph_past_the_cap_in_blocks_and_takes_the_same_steps(monkeypatch):
    """With the cap lowered below this small case's graph, centralized LM's automatic matrix-free K-FAC solve holds
    it in row blocks (recorded with the reason) and its iterates equal the one-block run's to 1e-9 relative (the
    same sums regrouped, amplified by the damped system's conditioning: the bound of the gn-against-centralized
    checks)."""
    from fedsciml.methods.centralized import run_centralized

    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", 1)
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    pb, _obj, _th = kovasznay()
    objs = pb.client_objectives(2, seed=0)
    th0 = pb.init_params(0)
    th_1, rows_1, info_1 = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=3)
    assert info_1["lm_solve"] == "matfree" and "chunk_rows" not in info_1
    graph = float(pb.nested_graph_floats("auto"))
    monkeypatch.setattr(forms, "MATFREE_GRAPH_BYTES", 8.0 * graph * 30)  # 30 rows' graph at once
    th_b, rows_b, info_b = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=3)
    assert (info_b["lm_solve"], info_b["precond"]) == ("matfree", "kfac")
    assert info_b["chunk_rows"] == max(forms.MIN_CHUNK_ROWS, 30)
    assert "held in blocks of" in info_b["lm_solve_reason"]
    assert [r.get("accepted") for r in rows_b] == [r.get("accepted") for r in rows_1]
    assert float((th_b - th_1).norm() / th_1.norm()) < 1e-9


def test_block_rows_follow_the_cap_and_the_budget():
    """No blocks while the graph fits; past the cap, as many rows as it holds; a smaller device budget wins."""
    g = 1000.0  # floats a row
    rows, why = forms.graph_block_rows(100, g, free=10**12)
    assert rows is None and why == ""
    n = int(forms.MATFREE_GRAPH_BYTES // (8 * g)) * 3
    rows, why = forms.graph_block_rows(n, g, free=10**12)
    assert rows == int(forms.MATFREE_GRAPH_BYTES // (8 * g)) and "blocks of" in why
    rows, _ = forms.graph_block_rows(n, g, free=int(1e9))  # budget 0.5 × 1 GB < the cap
    assert rows == int(0.5e9 // (8 * g))
    assert forms.graph_block_rows(n, None) == (None, "")


def test_the_memory_estimate_charges_a_blocked_graph_its_cap(monkeypatch):
    """A centralized LM run whose matrix-free graph exceeds the cap is estimated at the cap plus its points (it was
    refused: PINNacle's Poisson-Nd with the 5 × 100 network on 40,960 rows was estimated at 27 GB)."""
    from fedsciml.methods.centralized import CentralizedConfig
    from fedsciml.runtime import driver

    pb, _obj, _th = kovasznay(n_interior=200)
    cfg = CentralizedConfig.from_options({"lm_solve": "matfree"})
    whole, how = driver.estimate_memory(pb, 1, cfg, "centralized")
    assert "blocks" not in how
    cap = whole / 4
    monkeypatch.setattr(driver, "MATFREE_GRAPH_BYTES", cap)
    blocked, how = driver.estimate_memory(pb, 1, cfg, "centralized")
    rows = pb.rows_per_client(1)
    assert "row blocks" in how and blocked <= cap + 8.0 * rows * (pb.network().sizes[0] + 1) + 8.0 * 60 * 1e6
    assert blocked < whole


def test_split_operator_keeps_every_block_and_gives_the_dense_products(monkeypatch):
    """The kept-blocks operator (fedsciml.core.matfree.SplitGNOperator, what a CPU holds past CPU_BLOCK_ROWS rows):
    ``Σ_b J_bᵀ(J_b v)`` against the dense ``Jᵀ(Jv)`` within the summation bound, as the recomputing block operator;
    no forward pass per product (every block's GNOperator is kept, its count of products is the operator's)."""
    from fedsciml.core import matfree

    _pb, obj, theta = kovasznay()
    r, J = obj.residual_and_jacobian(theta)
    n = J.shape[0]
    assert matfree.local_operator(obj, theta).__class__ is GNOperator  # ≤ CPU_BLOCK_ROWS rows: one block
    monkeypatch.setattr(matfree, "CPU_BLOCK_ROWS", 7)
    op = matfree.local_operator(obj, theta)
    assert isinstance(op, matfree.SplitGNOperator) and len(op.ops) > 3 and op.n == n
    assert matfree.split_rows(obj, theta) == 7
    v = torch.randn(theta.numel(), dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    bound = 4 * n * EPS * (J.abs().T @ (J.abs() @ v.abs()))
    assert bool(((op.matvec(v) - J.T @ (J @ v)).abs() <= bound).all())
    assert bool(((op.jv(v) - J @ v).abs() <= 4 * J.shape[1] * EPS * (J.abs() @ v.abs())).all())
    assert bool(((op.g - J.T @ r).abs() <= 4 * n * EPS * (J.abs().T @ r.abs())).all())
    assert float((op.r - r).abs().max()) <= 8 * EPS * float(r.abs().max())
    assert op.products == 1 and all(o.products == 1 for o in op.ops)
    V = torch.stack([v, 3 * v], 1)
    assert bool(((op.matmat(V) - J.T @ (J @ V)).abs() <= 3 * bound[:, None]).all()) and op.products == 3


def test_split_blocks_take_the_one_block_steps_in_centralized_and_gn(monkeypatch):
    """Centralized LM's automatic K-FAC solve and federated gn's matrix-free clients on a CPU hold their graphs in
    kept blocks past CPU_BLOCK_ROWS rows (the K-FAC factors summed over the same blocks): the iterates equal the
    one-block run's to 1e-9 relative (the same sums regrouped, amplified by the damped system's conditioning, as in
    the tests above)."""
    from fedsciml.core import matfree
    from fedsciml.methods import METHODS
    from fedsciml.methods.centralized import run_centralized

    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", 1)
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    pb, _obj, _th = kovasznay(n_interior=40)
    objs = pb.client_objectives(1, seed=0)
    th0 = pb.init_params(0)
    th_1, rows_1, _ = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=3)
    g_1, grows_1, _ = METHODS["gn"](pb, pb.client_objectives(2, seed=0), th0, pb.evaluate, rounds=3)
    monkeypatch.setattr(matfree, "CPU_BLOCK_ROWS", 16)
    made = []
    real = matfree.SplitGNOperator.__init__

    def counting(self, blocks, theta):
        made.append(len(blocks))
        real(self, blocks, theta)

    monkeypatch.setattr(matfree.SplitGNOperator, "__init__", counting)
    th_s, rows_s, _ = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=3)
    assert made and min(made) > 2  # the pooled rows were held in several kept blocks
    assert [r.get("accepted") for r in rows_s] == [r.get("accepted") for r in rows_1]
    assert float((th_s - th_1).norm() / th_1.norm()) < 1e-9
    made.clear()
    g_s, grows_s, _ = METHODS["gn"](pb, pb.client_objectives(2, seed=0), th0, pb.evaluate, rounds=3)
    assert made and min(made) > 1  # each client's rows too
    assert [r.get("accepted") for r in grows_s] == [r.get("accepted") for r in grows_1]
    assert float((g_s - g_1).norm() / g_1.norm()) < 1e-9
