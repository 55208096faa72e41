"""A DomainPDE with an unknown coefficient field (PINNacle's PInv and HInv) in LM's matrix-free operator: each
residual evaluation's graph is freed when the evaluation ends (no reference cycle through ``u.coef``), the blocked
operator gives the one-block operator's step, and the memory estimate charges the path ``auto`` takes (Nyström: the
field's network has no K-FAC form) — issue 36, "their 5×100 network runs on every case within 8 GB"."""
import gc
import math
import weakref

import torch

from fedsciml.core import forms
from fedsciml.core.kfac_forms import has_jets
from fedsciml.core.matfree import BlockGNOperator, GNOperator
from fedsciml.core.stats import row_blocks
from fedsciml.problems.conditions import Dirichlet
from fedsciml.runtime.memory import nested_graph, operator_graph_floats
from test_pde_fields import Inv1D  # −(a u')' = f on [0, 1] with a unknown field a: the problem of those tests

EPS = torch.finfo(torch.float64).eps
PI = math.pi


def test_a_field_problems_jets_are_freed_without_the_cyclic_collector():
    """The values a residual evaluation caches (and the graph they hold) go when its Field goes, with Python's cyclic
    collector off: ``u.coef["a"]`` is made on lookup, not stored in ``u.coef`` (stored, it referred back to the
    mapping — a cycle that kept every evaluation's graph until a collection: HInv's step passed 11 GB).  The field
    read through ``u.coef`` is ``u["a"]``, bitwise (the same function on the same cached pass)."""
    pb = Inv1D(n_interior=8, n_boundary=2)
    theta = pb.init_params(0).requires_grad_(True)
    x = torch.tensor([0.3], dtype=torch.float64)
    was = gc.isenabled()
    gc.disable()
    try:
        u = pb.field(theta)
        a = u.coef["a"]
        v = u(x)
        assert torch.equal(a(x), u["a"](x)) and list(u.coef) == ["a"] and "a" in u.coef and len(u.coef) == 1
        cached = weakref.ref(next(iter(u._cache.values()))[0])
        assert cached() is not None and v.grad_fn is not None
        del u, a, v
        assert cached() is None  # freed by reference counting alone
        u = pb.field(theta)  # the derivatives through u.coef are u["a"]'s (the same cached pass), bitwise
        assert torch.equal(u.coef["a"].diff(x, "x"), u["a"].grad(x)[0])
    finally:
        if was:
            gc.enable()


def dense(obj, theta):
    r, J = obj.residual_and_jacobian(theta)
    return r, J


def test_blocked_operator_of_a_field_problem_gives_the_dense_products_and_step():
    """``Σ_b J_bᵀ(J_b v)`` of the field problem against the dense J's ``Jᵀ(Jv)`` within the summation bound
    ``4n·eps·|J|ᵀ(|J||v|)`` (entrywise; another order of the same per-row products), and the damped Gauss–Newton
    step solved with each operator's products (CG to its end, p iterations) against the dense solve of
    ``(JᵀJ + μI)δ = −Jᵀr`` within ``κ(JᵀJ + μI)·p·n·eps`` relative (the products' error amplified by the
    system's condition number)."""
    from fedsciml.core.matfree import damped_gn_step

    pb = Inv1D(n_interior=24, n_boundary=2)
    (obj,) = pb.client_objectives(1, seed=0)
    theta = pb.init_params(0)
    r, J = dense(obj, theta)
    n, p = J.shape
    blocks = list(row_blocks(obj, theta, 5))
    assert len(blocks) > 4
    op = BlockGNOperator([b.residual for b in blocks], theta)
    one = GNOperator(obj.residual, theta)
    v = torch.randn(p, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    bound = 4 * n * EPS * (J.abs().T @ (J.abs() @ v.abs()))
    assert bool(((op.matvec(v) - J.T @ (J @ v)).abs() <= bound).all())
    assert bool(((op.matvec(v) - one.matvec(v)).abs() <= 2 * bound).all())
    assert bool(((op.g - J.T @ r).abs() <= 4 * n * EPS * (J.abs().T @ r.abs())).all())
    H = J.T @ J
    mu = 1e-2 * float(H.diagonal().max())
    A = H + mu * torch.eye(p, dtype=torch.float64)
    ref = torch.linalg.solve(A, -(J.T @ r))
    kappa = float(torch.linalg.cond(A))
    for o in (op, one):
        step = damped_gn_step(o.matvec, o.g, mu, rtol=1e-14, max_iters=4 * p).delta
        assert float((step - ref).norm() / ref.norm()) <= kappa * p * n * EPS + 1e-13


def test_the_estimate_charges_the_path_auto_takes_for_a_field_problem(monkeypatch):
    """Where a problem has an unknown field, ``auto`` takes Nyström (the field's network has no K-FAC form), so the
    operator's per-row graph charged — and the block size it sets — is the nested-autodiff figure without the K-FAC
    pass; ``precond='kfac'`` named still charges it; a problem without fields under ``auto`` is charged the K-FAC
    pass.  The rows per block are the cap over that figure."""
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", 1)
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    pb = Inv1D(n_interior=40, n_boundary=2)
    objs = pb.client_objectives(1, seed=0)
    n, p = sum(o.n_residuals for o in objs), pb.init_params(0).numel()
    assert not has_jets(objs)
    floats = operator_graph_floats(pb, "auto")
    assert floats == nested_graph(1, [10, 10], kfac=False) < nested_graph(1, [10, 10], kfac=True)
    assert operator_graph_floats(pb, "kfac") == nested_graph(1, [10, 10], kfac=True)
    cap = 8.0 * floats * 12  # 12 rows' graph at once
    monkeypatch.setattr(forms, "MATFREE_GRAPH_BYTES", cap)
    assert not forms.kfac_regime(n, p, jets=has_jets(objs), free=10**12)[0]  # no K-FAC regime without jets
    ch = forms.choose_lm_solve(n, p, solve="matfree", jets=has_jets(objs), graph_floats=floats, free=10**12)
    assert (ch.form, ch.precond) == ("matfree", "nystrom")
    assert ch.chunk_rows == max(forms.MIN_CHUNK_ROWS, 12)

    class NoField(Inv1D):
        unknown_fields: dict = {}
        unknowns = {"a": 1.0}

        def equation(self, u, x):
            return -u.coef["a"] * u.diff(x, "x", "x") - PI ** 2 * torch.sin(PI * x[0])

        @property
        def conditions(self):
            return [Dirichlet("boundary", None)]

    assert operator_graph_floats(NoField(n_interior=8, n_boundary=2), "auto") == nested_graph(1, [10, 10], kfac=True)
