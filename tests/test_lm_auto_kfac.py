"""LM's automatic solve takes K-FAC-preconditioned CG truncated at 10 on a CPU for residuals in K-FAC's
forward-Laplacian channel form where p ≥ 5 000 and a dense step costs ≥ 2 K-FAC steps by the flop model
(fedsciml.core.forms.choose_lm_solve; record reproductions/lm_auto_kfac_exp16.md).

The choice function is asked at the measured sizes; for runs the thresholds are monkeypatched down to the tiny
problems here (no run of thousands of parameters in the suite)."""
import pytest
import torch

from fedsciml.core import forms
from fedsciml.core.forms import choose_lm_solve
from fedsciml.core.nn import MLP
from fedsciml.problems import get_problem

H100 = 80 * 10**9  # a fake free-memory figure for a CUDA device (the choice function only; no GPU needed)
CPU_24G = 24 * 2**30


def test_the_regime_where_it_was_measured_to_win_and_dense_where_it_lost():
    """The record's four sizes (exp16's 3 500 points; p = 10 065, 5 297 won by K-FAC; p = 2 337 and n = 600 won by
    the dense form), at a free-memory figure where the dense forms fit."""
    for p in (10_065, 5_297, forms.KFAC_MIN_PARAMS):
        c = choose_lm_solve(3_500, p, jets=True, device="cpu", free=CPU_24G)
        assert (c.form, c.precond, c.cg_iters) == ("matfree", "kfac", forms.KFAC_CG_ITERS), p
        assert c.reason.startswith(f"matfree, K-FAC-preconditioned CG capped at {forms.KFAC_CG_ITERS} (from "
                                   f"{forms.KFAC_CG_START} at the first step, +{forms.CG_GROWTH} per accepted step): "
                                   f"a CPU")
        assert c.settings()["precond"] == "kfac" and c.settings()["cg_cap"] == forms.KFAC_CG_ITERS
        assert c.cg_start == c.settings()["cg_start"] == forms.KFAC_CG_START
    below = choose_lm_solve(3_500, forms.KFAC_MIN_PARAMS - 1, jets=True, device="cpu", free=CPU_24G)
    assert below.form == "kernel" and (below.precond, below.cg_iters) == ("nystrom", forms.FULL_CG_ITERS)
    assert "K-FAC" not in below.reason  # below the size threshold the reason is the flop model's alone
    assert "precond" not in below.settings()  # a dense solve records no preconditioner
    assert choose_lm_solve(3_500, 2_337, jets=True, device="cpu", free=CPU_24G).form == "normal"
    few = choose_lm_solve(600, 10_065, jets=True, device="cpu", free=CPU_24G)  # a cheap dense step: 0.73 K-FAC steps
    assert few.form == "kernel" and few.reason.endswith(f"costs 0.73 K-FAC steps (1.3e+10) < {forms.KFAC_MIN_RATIO:g}")
    # nothing dense fits (exp19's J on a 24 GiB CPU): the matrix-free form either way, with K-FAC and the cap
    big = choose_lm_solve(3_500, 116_865, jets=True, device="cpu", free=CPU_24G)
    assert (big.form, big.precond, big.cg_iters) == ("matfree", "kfac", 10) and "no dense form fits" in big.reason


def test_dense_without_jets_on_a_gpu_and_where_the_user_named_another_preconditioner():
    p = 10_065
    no_jets = choose_lm_solve(3_500, p, jets=False, device="cpu", free=CPU_24G)
    assert no_jets.form == "kernel" and no_jets.reason.endswith("residuals not in a channel form K-FAC can use")
    gpu = choose_lm_solve(3_500, p, jets=True, device="cuda", free=H100)
    assert gpu.form == "kernel" and gpu.reason.endswith("a GPU device (dense steps are fast there)")
    # the dense choice is exactly choose_form's (same form, same costs) where the regime is not taken
    ref = forms.choose_form(3_500, p, device="cuda", free=H100)
    assert (gpu.form, gpu.costs) == (ref.form, ref.costs) and gpu.reason.startswith(ref.reason)
    for named, rank in (("nystrom", 50), ("none", 0)):  # the flop model's choice, as without the regime
        c = choose_lm_solve(3_500, p, jets=True, device="cpu", precond=named, free=CPU_24G)
        ref = forms.choose_form(3_500, p, device="cpu", rank=rank, free=CPU_24G)
        assert (c.form, c.precond) == (ref.form, named) and c.reason.endswith(f"precond {named} named")
    assert choose_lm_solve(3_500, p, jets=True, device="cpu", precond="nystrom", free=CPU_24G).form == "kernel"


def test_user_named_precond_and_cg_iters_win():
    p = 10_065
    c = choose_lm_solve(3_500, p, jets=True, cg_iters=25)
    assert (c.form, c.precond, c.cg_iters) == ("matfree", "kfac", 25) and "capped at 25 (as asked):" in c.reason
    assert c.cg_start is None and "cg_start" not in c.settings()  # a named cap is the cap from the first step
    c = choose_lm_solve(3_500, p, jets=True, precond="kfac")
    assert (c.form, c.precond, c.cg_iters) == ("matfree", "kfac", forms.KFAC_CG_ITERS)
    # a named form is no automatic choice: the regime is off, auto/None resolve to Nyström and a full solve
    c = choose_lm_solve(3_500, p, jets=True, solve="matfree")
    assert (c.form, c.precond, c.cg_iters) == ("matfree", "nystrom", forms.FULL_CG_ITERS)
    c = choose_lm_solve(3_500, p, jets=True, solve="matfree", precond="kfac", cg_iters=7)
    assert (c.form, c.precond, c.cg_iters) == ("matfree", "kfac", 7)
    with pytest.raises(ValueError, match="precond must be one of auto, nystrom, kfac, none, got 'kfca'"):
        choose_lm_solve(10, p, precond="kfca")
    with pytest.raises(ValueError, match="cg_iters must be ≥ 0 CG iterations per solve"):
        choose_lm_solve(10, p, cg_iters=-1)
    c = choose_lm_solve(3_500, p, jets=True, cg_iters=0)  # 0: the damped K-FAC step itself, no CG
    assert (c.form, c.precond, c.cg_iters) == ("matfree", "kfac", 0)


def test_federated_gn_asks_the_same_rule():
    p = 10_065
    c = choose_lm_solve(3_500, p, jets=True, need="gn", rows=[875] * 4)
    assert (c.form, c.precond, c.cg_iters) == ("matfree", "kfac", forms.KFAC_CG_ITERS)
    d = choose_lm_solve(400, p, jets=True, need="gn", rows=[100] * 4)  # a cheap dense step; a 1e6-float message
    assert d.form == "sqrt" and d.reason.startswith(forms.choose_form(400, p, need="gn", rows=[100] * 4).reason)


def tiny_poisson(clients=1):
    pb = get_problem("poisson", dim=2, n_interior=30, n_boundary=4)
    pb.__dict__["_net"] = MLP([2, 8, 8, 1])
    return pb, pb.client_objectives(clients, seed=0), pb.network().init(0)


def test_centralized_auto_runs_the_regime_bitwise_as_the_flags_by_hand(monkeypatch):
    """With the threshold at the tiny problem's p (and the growing cap's start at the cap, so the cap is fixed),
    ``lm_solve auto`` is the run of ``--lm-solve matfree --precond kfac --cg-iters 10``: the same operations in the
    same order, so bitwise the same iterates; the result records the resolved preconditioner, the cap and the
    reason."""
    from fedsciml.methods.centralized import run_centralized

    pb, objs, th0 = tiny_poisson()
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", th0.numel())
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    monkeypatch.setattr(forms, "KFAC_CG_START", forms.KFAC_CG_ITERS)
    th_a, rows_a, info_a = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=4)
    th_m, rows_m, info_m = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=4,
                                           lm_solve="matfree", precond="kfac", cg_iters=10)
    assert info_a["lm_solve"] == "matfree" and info_a["lm_solve_reason"].startswith(
        "matfree, K-FAC-preconditioned CG capped at 10: a CPU")
    assert (info_a["precond"], info_a["cg_cap"]) == (info_m["precond"], info_m["cg_cap"]) == ("kfac", 10)
    assert torch.equal(th_a, th_m) and [r["loss"] for r in rows_a] == [r["loss"] for r in rows_m]
    assert all(r["cg_iters"] <= 10 for r in rows_a[1:]) and info_a["cg_iters"] > 0
    # one below: the dense kernel form of before (n < p), nothing matrix-free recorded
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", th0.numel() + 1)
    _, _, info_d = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=1)
    assert info_d["lm_solve"] == "kernel" and "precond" not in info_d and "cg_cap" not in info_d
    # at the size threshold, a dense step cheaper than the ratio asks: dense, and the reason says so
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", th0.numel())
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", float("inf"))
    _, _, info_r = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=1)
    kfac_step = forms.KFAC_CG_ITERS * forms.DEVICE_COSTS["cpu"][1] * sum(o.n_residuals for o in objs) * th0.numel()
    assert info_r["lm_solve"] == "kernel" and info_r["lm_solve_reason"].endswith(f"K-FAC steps ({kfac_step:.2g}) < inf")
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    # a named preconditioner other than kfac turns the regime off; a named cap is the cap
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", 1)
    _, _, info_n = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=1, precond="nystrom")
    assert info_n["lm_solve"] == "kernel" and info_n["lm_solve_reason"].endswith("precond nystrom named")
    _, rows_c, info_c = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=3, cg_iters=2)
    assert (info_c["precond"], info_c["cg_cap"]) == ("kfac", 2) and all(r["cg_iters"] <= 2 for r in rows_c[1:])


def test_gn_form_auto_runs_the_regime_bitwise_as_the_flags_by_hand(monkeypatch):
    """Federated gn's ``form auto`` asks the same rule: at the threshold it is ``--form matfree --precond kfac
    --cg-iters 10`` (the same operations: bitwise), and its options record what ran."""
    from fedsciml.methods import METHODS

    pb, objs, th0 = tiny_poisson(clients=2)
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", th0.numel())
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    monkeypatch.setattr(forms, "KFAC_CG_START", forms.KFAC_CG_ITERS)  # a fixed cap, as the named flags give
    th_a, rows_a, info_a = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=3)
    th_m, rows_m, info_m = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=3, form="matfree", precond="kfac",
                                         cg_iters=10)
    o = info_a["strategy"]
    assert (o["form"], o["precond"], o["cg_iters"]) == ("matfree", "kfac", 10)
    assert o["form_reason"].startswith("matfree, K-FAC-preconditioned CG capped at 10")
    assert torch.equal(th_a, th_m) and [r["loss"] for r in rows_a] == [r["loss"] for r in rows_m]
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", th0.numel() + 1)
    _, _, info_d = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=1)
    assert info_d["strategy"]["form"] in ("normal", "sqrt") and "precond" not in info_d["strategy"]


def test_a_gpu_takes_kfac_where_the_solve_is_matrix_free_anyway():
    """A GPU keeps the dense choice where there is one; where there is none — gn's dense message over its cap
    (exp28 and exp16 with 4 clients: 9·10⁶ floats), the clients' Jacobians too big (exp19), or no dense LM form
    fitting — the solve is matrix-free whatever the preconditioner, and K-FAC is the choice as on a CPU (the H200
    run of reproductions/gpu_h200_anchors.md had Nyström there: 28 CG exchanges a round)."""
    gn = choose_lm_solve(3_500, 10_065, jets=True, device="cuda", free=H100, need="gn", rows=[875] * 4)
    assert (gn.form, gn.precond, gn.cg_iters) == ("matfree", "kfac", forms.KFAC_CG_ITERS)
    assert "a GPU, residuals in K-FAC's channel form" in gn.reason and "matrix-free in any case" in gn.reason
    big = choose_lm_solve(3_500, 116_865, jets=True, device="cuda", free=10**9)  # nothing dense fits 1 GB
    assert (big.form, big.precond) == ("matfree", "kfac")
    # where a dense form is there, the GPU keeps it (as before), and without jets nothing changes
    assert choose_lm_solve(3_500, 10_065, jets=True, device="cuda", free=H100).form == "kernel"
    nj = choose_lm_solve(3_500, 10_065, jets=False, device="cuda", free=H100, need="gn", rows=[875] * 4)
    assert (nj.form, nj.precond) == ("matfree", "nystrom") and nj.reason.endswith("K-FAC can use")
    # a named preconditioner or form still wins
    named = choose_lm_solve(3_500, 10_065, jets=True, device="cuda", free=H100, need="gn", rows=[875] * 4,
                            precond="nystrom")
    assert named.precond == "nystrom"
    assert choose_lm_solve(3_500, 10_065, jets=True, device="cuda", free=H100, solve="matfree").precond == "nystrom"


def test_the_regime_cap_grows_with_the_accepted_steps_alike_in_centralized_and_gn(monkeypatch):
    """Unnamed, the K-FAC regime's cap grows: ``min(10, start + 2k)`` CG iterations at the step after k accepted ones
    (fedsciml.core.matfree.cg_cap; start 1 here so that the tiny problem's CG, which would converge in a few
    iterations, is cut).  Federated gn counts accepted steps as centralized LM does, so with 2 clients it takes the
    same steps: θ within 1e-9 of max|θ| after 4 rounds (the sums of the clients' products differ from the pooled
    products in the BLAS order only; CG over ≤ 10 iterations of a well-damped system keeps that at round-off)."""
    from fedsciml.core.matfree import MatfreeConfig, cg_cap
    from fedsciml.methods import METHODS
    from fedsciml.methods.centralized import run_centralized

    assert [cg_cap(MatfreeConfig(max_iters=10, cg_start=3), k) for k in range(6)] == [3, 5, 7, 9, 10, 10]
    assert cg_cap(MatfreeConfig(max_iters=10), 0) == 10
    with pytest.raises(ValueError, match="cg_start.*must be ≥ 1"):
        MatfreeConfig(cg_start=0).validate()
    pb, objs, th0 = tiny_poisson()
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", th0.numel())
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    monkeypatch.setattr(forms, "KFAC_CG_START", 1)
    th_c, rows_c, info_c = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=4)
    assert (info_c["cg_cap"], info_c["cg_start"]) == (10, 1)
    caps, k = [], 0
    for r in rows_c[1:]:
        caps.append(min(10, 1 + forms.CG_GROWTH * k))
        k += bool(r["accepted"])
    iters = [r["cg_iters"] for r in rows_c[1:]]
    assert iters[0] == 1 and all(i <= c for i, c in zip(iters, caps)), (iters, caps)
    _, _, info_f = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=4, cg_iters=10)
    assert "cg_start" not in info_f  # a named cap is fixed
    pb2, objs2, _ = tiny_poisson(clients=2)
    th_g, rows_g, info_g = METHODS["gn"](pb2, objs2, th0, pb2.evaluate, rounds=4)
    assert (info_g["strategy"]["cg_iters"], info_g["strategy"]["cg_start"]) == (10, 1)
    assert [r["cg_iters"] for r in rows_g[1:]] == iters
    assert torch.allclose(th_g, th_c, rtol=0, atol=1e-9 * float(th_c.abs().max()))
