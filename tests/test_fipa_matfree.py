"""Matrix-free FIPA clients (fedsciml.core.matfree.local_gn_sketch): the local Gauss–Newton step by CG on
``J_mᵀJ_m`` products and the rank-r message from a Nyström sketch, against the dense client that forms ``J_m``.

Tolerances, not bitwise: the dense client eigendecomposes ``J_mJ_mᵀ`` and solves with the exact spectrum, the
matrix-free one applies ``J_mᵀJ_m`` through jvp/vjp sweeps, sketches it with a random test matrix and stops CG at
a relative residual — different operations in a different order, equal in exact arithmetic when the sketch
captures the whole range (``r + oversampling ≥ rank J_m``) and CG has converged.
"""
import pytest
import torch

import fedsciml as fs
from fedsciml.core.matfree import fipa_local_matfree, local_gn_sketch
from fedsciml.methods.fipa import FIPAConfig, fipa_ask
from fedsciml.options import OptionError
from fedsciml.problems import get_problem
from fedsciml.runtime.client import Client


def small_bratu():
    # 20 interior points + 1 boundary row per client strip: rank J_m ≤ 21 < rank 30 (+10 oversampling) < p = 2209
    return get_problem("bratu", n_interior=20)


def fipa(sketch, rounds=3, **kw):
    extra = {"cg_iters": 300, "cg_rtol": 1e-14} if sketch == "matfree" else {}
    return fs.solve(small_bratu(), method="fipa", clients=2, rounds=rounds, rank=30, sketch=sketch,
                    **{**extra, **kw})


@pytest.mark.parametrize("damping", [0.0, 1e-3])
def test_matfree_fipa_rounds_equal_the_dense_rounds(damping):
    """r ≥ rank J_m and CG run to 1e-14: the matrix-free run takes the dense run's iterates (to 1e-9 after 2
    rounds; measured 3e-10 and 2e-10 after 4) — damping 0 is FIPA's default minimum-norm local step."""
    dense, free = fipa("dense", rounds=2, local_damping=damping), fipa("matfree", rounds=2, local_damping=damping)
    a, b = dense.theta, free.theta
    assert float((a - b).norm() / a.norm()) < 1e-9
    for rd, rf in zip(dense.history, free.history):
        assert rf["rel_l2"] == pytest.approx(rd["rel_l2"], rel=1e-8)
    rows = [r for r in free.history[1:] if "answered" in r and "final_check" not in r]  # (the last row is the safeguard's final check)
    assert rows and all(r["matfree_clients"] == 2 and r["cg_iters"] > 0 and r["cg_rel_residual"] <= 1e-14
                        for r in rows)
    assert "cg_iters" not in dense.history[-1]


def test_one_matfree_message_equals_the_dense_message():
    """One client's message: the same step, eigenvalues and eigenvectors (up to sign) as the dense client's."""
    pb = small_bratu()
    obj = pb.client_objectives(2, seed=0)[0]
    theta = pb.init_params(0)
    client = Client(0, obj)
    from fedsciml.methods.local import LocalConfig, local_update

    cfg = LocalConfig(solver="gn", damping=1e-3)
    dense = local_update(client, theta, cfg, ask=fipa_ask("lowrank", rank=30, sketch="dense"), report_loss=True)[0]
    free, info = local_update(client, theta, cfg, report_loss=True,
                              ask=fipa_ask("lowrank", rank=30, sketch="matfree", cg_iters=300, cg_rtol=1e-12))
    k = dense["lam"].numel()
    assert free["lam"].numel() == k <= obj.n_residuals  # clipped to the numerical rank, as the dense client
    torch.testing.assert_close(free["lam"], dense["lam"], rtol=1e-9, atol=1e-12 * float(dense["lam"][0]))
    # eigenvectors up to sign, on the eigenvalues separated from their neighbours by > 1e-6 relative
    lam = dense["lam"]
    gap = torch.minimum(torch.cat([lam[:1] * 0 + float("inf"), lam[:-1] - lam[1:]]),
                        torch.cat([lam[:-1] - lam[1:], lam[-1:]]))
    sep = gap > 1e-6 * float(lam[0])
    cos = (free["U"].T @ dense["U"]).diagonal().abs()
    assert bool(sep.sum() >= k // 2)
    torch.testing.assert_close(cos[sep], torch.ones_like(cos[sep]), rtol=0, atol=1e-6)
    # (the dense step drops the eigenvalues under the rank cutoff, CG does not: 5e-11 of ‖δ‖ measured)
    assert float((free["delta"] - dense["delta"]).norm() / dense["delta"].norm()) < 1e-9
    assert torch.equal(free["loss"], dense["loss"]) or float(free["loss"]) == pytest.approx(float(dense["loss"]),
                                                                                          rel=1e-14)
    assert info["form"] == "matfree" and info["products"] == 30 + 10 + info["cg_iters"]


def test_nystrom_message_is_the_exact_top_r_on_a_spectral_gap():
    """A linear residual r(θ) = Bθ − y with a spectral gap: eigenvalues 10³…10 (r = 6 of them), then a tail
    ≤ 10⁻⁹. The rank-6 message of a rank-16 sketch equals the exact top-6 eigenpairs of BᵀB (eigh): eigenvalues
    to 1e-9 relative, eigenvectors to 1e-9 (the Nyström error is of the size of the tail: Tropp et al. 2017)."""
    gen = torch.Generator().manual_seed(3)
    n, p, r = 80, 60, 6
    Q1, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=gen))
    Q2, _ = torch.linalg.qr(torch.randn(p, p, dtype=torch.float64, generator=gen))
    s2 = torch.cat([torch.logspace(3, 1, r, dtype=torch.float64), 1e-9 * torch.rand(p - r, dtype=torch.float64,
                                                                                        generator=gen)])
    B = Q1[:, :p] @ torch.diag(s2.sqrt()) @ Q2.T
    y = torch.randn(n, dtype=torch.float64, generator=gen)
    out = local_gn_sketch(lambda th: B @ th - y, torch.zeros(p, dtype=torch.float64), r, damping=1e-2,
                          rtol=1e-10, max_iters=100, generator=torch.Generator().manual_seed(0))
    lam_ref, V = torch.linalg.eigh(B.T @ B)
    lam_ref, V = lam_ref.flip(0)[:r], V.flip(1)[:, :r]
    torch.testing.assert_close(out.lam, lam_ref, rtol=1e-9, atol=0)
    torch.testing.assert_close((out.U.T @ V).diagonal().abs(), torch.ones(r, dtype=torch.float64), rtol=0, atol=1e-9)
    # and the step is the damped solve (CG to 1e-10 on a 10⁵-conditioned damped system)
    H, g = B.T @ B, B.T @ (-y)
    mu = 1e-2 * float(lam_ref[0])
    want = -torch.linalg.solve(H + mu * torch.eye(p, dtype=torch.float64), g)
    assert out.mu == pytest.approx(mu, rel=1e-9)  # λ̂_1 from the sketch
    torch.testing.assert_close(out.delta, want, rtol=1e-8, atol=1e-10 * float(want.norm()))


def test_an_early_stopped_cg_step_still_passes_the_consistency_check():
    """CG iterates satisfy the Galerkin condition, so ‖J δ‖ ≤ ‖r‖ after any number of iterations: a run with 2 CG
    iterations per client is accepted by the server's check ``Δθᵀ Ĥ Δθ ≤ 2·loss`` (no client rejected)."""
    res = fipa("matfree", rounds=2, cg_iters=2, cg_rtol=1e-10)
    rows = [r for r in res.history[1:] if "answered" in r and "final_check" not in r]
    assert rows and all(r["rejected"] == 0 and r["cg_iters"] == 4 for r in rows)


def test_auto_is_dense_below_the_limit_bitwise_and_matfree_beyond(monkeypatch):
    """``sketch='auto'`` forms J_m while it fits (always while n_m·p ≤ the 5e7-entry floor of
    :func:`fedsciml.core.forms.choose_form`): the same bits as ``sketch='dense'`` (the dense code is untouched);
    where it does not fit (here: a floor of 1 000 entries and 1 kB free), the same bits as ``sketch='matfree'``
    (same seeds, same operations)."""
    auto, dense = fs.solve(small_bratu(), method="fipa", clients=2, rounds=2, rank=30), fipa("dense", rounds=2)
    assert torch.equal(auto.theta, dense.theta)
    assert "local_form" not in auto.extra["strategy"]  # the recorded options of a dense run are as before
    from fedsciml.core import forms

    monkeypatch.setattr(forms, "DENSE_FLOOR_ENTRIES", 1000)
    monkeypatch.setattr(forms, "available_memory", lambda device=None: 1000)
    auto2 = fs.solve(small_bratu(), method="fipa", clients=2, rounds=2, rank=30, cg_iters=300, cg_rtol=1e-14)
    free = fipa("matfree", rounds=2)
    assert torch.equal(auto2.theta, free.theta)
    assert auto2.history[1]["matfree_clients"] == 2 and auto2.extra["strategy"]["local_form"] == "matfree"


def test_the_rule_and_the_memory_form(monkeypatch):
    """The rule on a machine with 4 GiB free (a 2 GiB budget): J_m of 4 400 × 33 921 (1.5e8 entries, 6 GB to
    form) does not fit → matrix-free; Bratu's is under the 5e7-entry floor → dense whatever the memory."""
    from fedsciml.core import forms

    monkeypatch.setattr(forms, "available_memory", lambda device=None: 4 * 2**30)
    p = 33921
    assert fipa_local_matfree("gn", "lowrank", "auto", False, 4400, p)          # 6 GB to form > 2 GiB
    assert not fipa_local_matfree("gn", "lowrank", "auto", False, 401, 2209)    # Bratu: dense
    assert not fipa_local_matfree("gn", "lowrank", "dense", False, 4400, p)
    assert not fipa_local_matfree("adam", "lowrank", "matfree", False, 10, 10)  # adam: subspace iteration
    assert not fipa_local_matfree("gn", "full", "matfree", False, 10, 10)
    assert not fipa_local_matfree("gn", "lowrank", "matfree", True, 10, 10)     # adaptive reads the spectrum
    cfg = FIPAConfig.from_options({})
    assert cfg.memory_form(4400, p, 4) == "graph" and cfg.memory_form(401, 2209, 4) == "jacobian"
    with pytest.raises(OptionError, match="cg_iters"):
        FIPAConfig.from_options({"sketch": "dense", "cg_iters": 5})
    with pytest.raises(OptionError, match="cg_rtol"):
        FIPAConfig.from_options({"local": "adam", "cg_rtol": 1e-6})
