"""Federated layer: exact invariants first (gn == centralized LM, FIPA with exact local
solves == centralized GN step, QR merge == pinv merge), then round controls
(FedAvg weights, dropout, participation, rejection, checkpoint/resume)."""
import math

import pytest
import torch

from fedsciml.core import linalg
from fedsciml.methods.aggregators import FedAvgAggregator, FIPAAggregator
from fedsciml.methods.fipa import fipa_ask
from fedsciml.runtime.checkpoint import CheckpointMismatch
from fedsciml.methods.local import (AdaptiveSchedule, LocalConfig, Spectrum, adam_delta, local_update, sketch_matfree,
                                    spectrum)
from fedsciml.runtime.client import Client
from fedsciml.runtime.loop import RoundFailed
from fedsciml.core.nn import MLP
from fedsciml.core.objective import PointwiseLeastSquares, ResidualPart, stack_objectives
from fedsciml.methods import METHODS
from fedsciml.methods.centralized import SolveConfig, solve_least_squares

NET = MLP([1, 6, 6, 1])  # p = 61


def _fit(theta, point):
    x, y = point
    return NET(theta, x) - y


def make_clients(sizes=(30, 30, 30), seed=0, freq=2.0):
    """Heterogeneous clients: client m owns the m-th interval of [0, 1] (fit sin(freq·πx))."""
    gen = torch.Generator().manual_seed(seed)
    K = len(sizes)
    objs = []
    for m, n in enumerate(sizes):
        x = (m + torch.rand(n, 1, generator=gen, dtype=torch.float64)) / K
        y = torch.sin(freq * math.pi * x[:, 0])
        objs.append(PointwiseLeastSquares([ResidualPart("data", _fit, (x, y))], NET.n_params))
    return objs


def evaluate(theta):
    x = torch.linspace(0, 1, 101, dtype=torch.float64).reshape(-1, 1)
    return {"mse": float(((NET(theta, x) - torch.sin(2 * math.pi * x[:, 0])) ** 2).mean())}


THETA0 = NET.init(0)


def run(method, objs=None, **opts):
    objs = objs if objs is not None else make_clients()
    return METHODS[method](None, objs, THETA0, evaluate, **opts)


# --- exact invariants ---------------------------------------------------------------------


@pytest.mark.parametrize("exchange", ["one", "two"])
def test_gn_iterates_equal_centralized_lm(exchange):
    objs = make_clients()
    th_f, rows_f, info_f = run("gn", objs, rounds=8, exchange=exchange)
    th_c, rows_c, info_c = solve_least_squares(stack_objectives(objs), THETA0, evaluate, SolveConfig("lm", max_iters=8))
    assert len(rows_f) == len(rows_c) == 9
    for a, b in zip(rows_f, rows_c):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-10, abs=1e-300)
        assert a.get("mu", 0.0) == pytest.approx(b.get("mu", 0.0), rel=1e-9)
        assert a.get("accepted") == b.get("accepted")
    assert float((th_f - th_c).norm() / th_c.norm()) < 1e-10
    assert info_f["accepted_steps"] == info_c["accepted_steps"] > 3
    # iterates at every step: rerun for k steps and compare
    for k in (1, 3):
        a, _, _ = run("gn", objs, rounds=k, exchange=exchange)
        b, _, _ = solve_least_squares(stack_objectives(objs), THETA0, evaluate, SolveConfig("lm", max_iters=k))
        assert float((a - b).norm() / b.norm()) < 1e-11


def test_gn_one_exchange_takes_the_steps_of_two_exchanges_in_fewer_exchanges():
    """Both variants read the summed loss at the same trial points, so they take the same decisions and the same
    iterates (to round-off: the loss comes from the statistics' residual pass in one, a residual-only pass in the
    other); an LM iteration is one exchange in ``one``, and 1 + (accepted) in ``two``; both start with one."""
    objs = make_clients(freq=4.0)
    th1, rows1, info1 = run("gn", objs, rounds=12, exchange="one")
    th2, rows2, info2 = run("gn", objs, rounds=12, exchange="two")
    assert [r.get("accepted") for r in rows1] == [r.get("accepted") for r in rows2]
    assert info1["rejected_steps"] > 0 and info1["accepted_steps"] > 0  # both kinds of round are exercised
    assert float((th1 - th2).norm() / th2.norm()) < 1e-10
    for a, b in zip(rows1, rows2):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-10, abs=1e-300)
    assert [r["exchanges_total"] for r in rows1] == list(range(1, 14))
    expect, n = [1], 1
    for r in rows2[1:]:
        n += 2 if r["accepted"] else 1
        expect.append(n)
    assert [r["exchanges_total"] for r in rows2] == expect
    assert info1["exchanges"] == 13 and info2["exchanges"] == expect[-1]
    assert all(r["exchanges"] == 1 for r in rows1)


@pytest.mark.parametrize("exchange", ["one", "two"])
def test_gn_floats_counted_per_round(exchange):
    """``two``: the trial down and the losses up, then the statistics up after an acceptance (the clients hold
    the point); ``one``: the trial down and the statistics up in every round, accepted or not."""
    objs = make_clients()
    _, rows, info = run("gn", objs, rounds=2, form="normal", exchange=exchange)  # auto: sqrt here
    p, K = THETA0.numel(), 3
    start = K * (linalg.n_upper(p) + p + 2) + K * p
    assert rows[0]["floats_sent"] == start and rows[0]["exchanges_total"] == 1
    per_trial = K * (p + 2)
    per_stats = K * (linalg.n_upper(p) + p + 2)
    r1 = rows[1]
    if exchange == "two":
        assert r1["floats_sent"] - rows[0]["floats_sent"] == per_trial + (per_stats if r1["accepted"] else 0)
        assert r1["exchanges"] == (2 if r1["accepted"] else 1)
    else:
        assert r1["floats_sent"] - rows[0]["floats_sent"] == K * p + per_stats
        assert r1["exchanges"] == 1
    assert r1["floats_up"] + r1["floats_down"] == r1["floats_sent"] - rows[0]["floats_sent"]


def _random_feature(theta, point):
    """A nonlinear residual with a well-conditioned Jacobian: ``a·θ + 0.3 sin(a·θ) − y``."""
    a, y = point
    z = a @ theta
    return z + 0.3 * torch.sin(z) - y


def random_feature_clients(sizes, p=10, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [PointwiseLeastSquares([ResidualPart("rf", _random_feature, (
        torch.randn(n, p, generator=gen, dtype=torch.float64) + m, torch.randn(n, generator=gen, dtype=torch.float64)))],
        p) for m, n in enumerate(sizes)]


@pytest.mark.parametrize("sizes", [(5, 5, 5), (15, 15)])  # n_m < p (Gram path) and n_m > p (Hessian path)
def test_fipa_exact_local_solves_equal_centralized_gn_step(sizes):
    p = 10
    objs = random_feature_clients(sizes, p)
    gen = torch.Generator().manual_seed(2)
    theta0 = torch.randn(p, generator=gen, dtype=torch.float64)
    pooled = stack_objectives(objs).gn_stats(theta0)
    assert float(torch.linalg.cond(pooled.H)) < 1e8
    expected = theta0 - linalg.pinv_solve(pooled.H, pooled.g)
    for rank in (0, min(min(sizes), p)):  # full H_m, and low rank r = rank(H_m) (Ĥ_m = H_m) with the QR merge
        th, _, _ = METHODS["fipa"](None, objs, theta0, lambda t: {}, rounds=1, rank=rank, local="gn",
                                   local_damping=0.0, safeguard=False)
        assert float((th - expected).norm() / (expected - theta0).norm()) < 1e-10, rank


def test_fipa_full_rank_with_safeguard_takes_the_lm_step():
    """Full H_m, exact local solves, server β: θ₁ = θ₀ − (H + βI)^{-1} g, β = 1e-3·max_m max diag(H_m)."""
    objs = make_clients()
    th, rows, _ = run("fipa", objs, rounds=1, rank=0, local="gn", local_damping=0.0, safeguard=True)
    H = stack_objectives(objs).gn_stats(THETA0)
    beta = 1e-3 * max(float(o.gn_stats(THETA0).H.diagonal().max()) for o in objs)
    assert rows[1]["beta"] == pytest.approx(beta, rel=1e-10)
    expected = THETA0 - linalg.damped_solve(H.H, H.g, beta)
    # H_m H_m^† g_m = g_m holds up to the pseudo-inverse cutoff of the (numerically singular) MLP curvature
    assert float((th - expected).norm() / (expected - THETA0).norm()) < 1e-6


def test_fipa_safeguard_after_a_rejected_step_merges_again_from_the_kept_messages(monkeypatch):
    """A rejected merged step costs one round: the next trial is merged at once, with the raised β, from the
    messages the clients sent at the previous θ.  Reference: the former rule, which broadcast the previous θ
    again and merged the clients' fresh answers there — the same trials, one wasted round per rejection later."""
    from fedsciml.methods.fipa import FIPAStrategy

    def trajectory(rounds):
        seen = []

        def ev(theta):
            seen.append(theta.clone())
            return evaluate(theta)
        _, rows, info = METHODS["fipa"](None, make_clients(), THETA0, ev, rounds=rounds, rank=4)
        assert info["strategy"]["safeguard"]  # the default with local GN steps
        return seen, rows, info

    new, rows_new, info_new = trajectory(6)
    assert info_new["rejected_steps"] >= 1  # the path under test ran
    kept = FIPAStrategy.aggregate_round

    def former(self, run_, k, replies):  # no kept messages: after a rejection, θ ← previous θ, ask again
        self.prev_msgs = None
        return kept(self, run_, k, replies)

    monkeypatch.setattr(FIPAStrategy, "aggregate_round", former)
    old, rows_old, info_old = trajectory(6 + info_new["rejected_steps"])
    # the former run re-broadcast the previous θ after each rejection: drop those rows
    repeats = [i for i in range(1, len(old)) if rows_old[i].get("accepted") is False]
    assert len(repeats) == info_new["rejected_steps"]
    old_trials = [t for i, t in enumerate(old) if i not in repeats]
    n = len(new) - 1  # the last row may describe an undone final step
    for a, b in zip(new[:n], old_trials[:n]):
        # the same messages merged by the same operations (fresh answers at the same θ are bitwise the same)
        assert float((a - b).norm()) <= 1e-12 * float(b.norm())


def test_lowrank_qr_merge_equals_pinv_merge():
    objs = random_feature_clients((6, 6, 6))
    theta0 = torch.zeros(10, dtype=torch.float64)
    a, _, _ = METHODS["fipa"](None, objs, theta0, lambda t: {}, rounds=2, rank=3, merge="qr", local="adam",
                              local_steps=5, lr=1e-2)
    b, _, _ = METHODS["fipa"](None, objs, theta0, lambda t: {}, rounds=2, rank=3, merge="pinv", local="adam",
                              local_steps=5, lr=1e-2)
    assert float((a - b).norm() / (a - theta0).norm()) < 1e-10


def test_spectrum_matches_dense_eigh_and_matfree_sketch():
    obj = make_clients((20,))[0]
    J = obj.jacobian(THETA0)
    U_ref, lam_ref = linalg.top_eigh(J.T @ J, 4)
    U, lam = Spectrum(J).top(4)
    assert torch.allclose(lam, lam_ref, rtol=1e-9)
    assert torch.allclose((U.T @ U_ref).abs(), torch.eye(4, dtype=torch.float64), atol=1e-7)
    U2, lam2 = sketch_matfree(obj, THETA0, 4, seed=1, oversample=10, iters=30)
    assert torch.allclose(lam2, lam_ref, rtol=1e-8)


def test_local_gn_step_is_damped_solve():
    obj = make_clients((20,))[0]
    s = obj.gn_stats(THETA0)
    spec, r = spectrum(obj, THETA0)
    mu = 1e-2 * spec.lam_max
    want = -linalg.damped_solve(s.H, s.g, mu)
    assert torch.allclose(spec.damped_step(r, mu), want, rtol=1e-8, atol=1e-12)


# --- FedAvg / FedProx -------------------------------------------------------------------


def test_fedavg_is_sample_weighted_average_of_local_adam_updates():
    objs = make_clients((10, 30))
    th, _, _ = run("fedavg", objs, rounds=1, local_steps=7, lr=1e-2)
    cfg = LocalConfig("adam", 7, 1e-2)
    d = [adam_delta(Client(i, o), THETA0, cfg) for i, o in enumerate(objs)]
    assert torch.allclose(th, THETA0 + 0.25 * d[0] + 0.75 * d[1], rtol=0, atol=1e-14)
    agg = FedAvgAggregator()
    msgs = {0: {"delta": d[0], "n": torch.tensor([10.0], dtype=torch.float64)},
            1: {"delta": d[1], "n": torch.tensor([30.0], dtype=torch.float64)}}
    # bitwise: FedAvg clients are not batched, so the run computed these very deltas and this very average
    assert torch.equal(agg.aggregate(THETA0, msgs), th)


def test_fedprox_proximal_term_shrinks_the_update():
    objs = make_clients((20,))
    a, _, _ = run("fedavg", objs, rounds=1, local_steps=30, lr=1e-2)
    b, _, _ = run("fedprox", objs, rounds=1, local_steps=30, lr=1e-2, mu=100.0)
    assert float((b - THETA0).norm()) < float((a - THETA0).norm())


# --- round controls -------------------------------------------------------------------------


def _recording_hook(log):
    def hook(rnd, cid, msg):
        log.setdefault(rnd, []).append(cid)
        return msg
    return hook


def test_dropout_fuses_only_answering_clients():
    objs = make_clients((30, 30, 30, 30))
    log = {}
    th, rows, info = run("fipa", objs, rounds=1, rank=0, local="gn", safeguard=False, dropout=0.5, seed=3,
                         message_hook=_recording_hook(log))
    answered = log[1]
    assert 0 < len(answered) < 4 and rows[1]["dropped"] == 4 - len(answered)
    msgs = {c: local_update(Client(c, objs[c]), THETA0, LocalConfig("gn", damping=0.0), ask=fipa_ask("full"))[0]
            for c in answered}
    want = FIPAAggregator(curvature="full", merge="pinv").aggregate(THETA0, msgs)
    assert torch.allclose(th, want, rtol=0, atol=1e-12)


def test_participation_samples_a_seeded_fraction():
    objs = make_clients((10, 10, 10, 10))
    logs = []
    for _ in range(2):
        log = {}
        run("fedavg", objs, rounds=4, participation=0.5, local_steps=2, seed=11, message_hook=_recording_hook(log))
        logs.append(log)
    assert logs[0] == logs[1]  # deterministic given the seed
    assert all(len(v) == 2 for v in logs[0].values())
    assert len({tuple(v) for v in logs[0].values()}) > 1  # different clients in different rounds


def test_bad_messages_are_rejected_and_the_round_goes_on():
    objs = make_clients()

    def hook(rnd, cid, msg):
        msg = dict(msg)
        if cid == 1:
            msg["delta"] = msg["delta"].clone()
            msg["delta"][3] = float("nan")
        if cid == 2:
            msg["U"] = msg["U"][:-1]  # wrong shape
        return msg

    th, rows, info = run("fipa", objs, rounds=1, rank=4, local="adam", local_steps=3, message_hook=hook)
    reasons = {r["client"]: r["reason"] for r in info["rejections"]}
    assert set(reasons) == {1, 2} and "non-finite" in reasons[1] and "'U'" in reasons[2]
    assert rows[1]["rejected"] == 2
    c0 = local_update(Client(0, objs[0]), THETA0, LocalConfig("adam", 3), ask=fipa_ask("lowrank", rank=4))[0]
    want = FIPAAggregator(curvature="lowrank", merge="qr").aggregate(THETA0, {0: c0})
    assert torch.allclose(th, want, atol=1e-12)


def test_round_fails_clearly_when_every_message_is_bad():
    def hook(rnd, cid, msg):
        return {**msg, "delta": msg["delta"] * float("inf")}

    with pytest.raises(RoundFailed, match=r"round 1: no valid client message.*client 0: field 'delta' contains non-finite"):
        run("fedavg", rounds=1, local_steps=2, message_hook=hook)


def test_gn_repeats_requests_of_dropped_clients_so_iterates_are_unchanged():
    objs = make_clients()
    a, rows_a, _ = run("gn", objs, rounds=4)
    b, rows_b, info = run("gn", objs, rounds=4, dropout=0.4, seed=5)
    assert info["retried_requests"] > 0
    # Not bitwise: a retry evaluates a different batch of clients (another vmap batch size), which changes the
    # round-off of the statistics (1.7e-14 relative seen on an AMD EPYC); the same steps are taken.
    assert [r.get("accepted") for r in rows_a] == [r.get("accepted") for r in rows_b]
    assert float((a - b).norm()) <= 1e-10 * float(a.norm())
    with pytest.raises(ValueError, match="participation"):
        run("gn", objs, rounds=1, participation=0.5)


def test_gn_stops_with_clear_error_when_a_client_never_sends_valid_statistics():
    def hook(rnd, cid, msg):
        if cid == 0 and "H" in msg:
            return {**msg, "g": msg["g"][:5]}
        return msg

    with pytest.raises(RoundFailed, match=r"clients \[0\] never answered"):
        run("gn", rounds=1, max_retries=2, message_hook=hook, form="normal")


# --- checkpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize("method,opts", [
    ("gn", {}),
    ("gn", {"exchange": "two"}),
    ("gn", {"form": "matfree", "precond": "none", "subspace": 2}),  # the subspace step's past steps and γ resume
    ("gn", {"form": "matfree", "precond": "none", "subspace": 3, "subspace_damping": "adapt"}),
    ("fipa", {"rank": 4, "local": "gn", "dropout": 0.3, "participation": 0.67}),
    ("fipa", {"rank": 4}),  # the safeguard: a rejected step after the resume re-merges the checkpointed messages
    ("fedavg", {"local_steps": 3, "participation": 0.67}),
])
def test_resume_after_interruption_ends_with_the_same_numbers(tmp_path, method, opts):
    objs = make_clients()
    full, rows_full, _ = run(method, objs, rounds=6, seed=2, **opts)
    d = str(tmp_path / method)
    run(method, objs, rounds=3, seed=2, checkpoint=d, **opts)  # "killed" after 3 rounds
    th, rows, info = run(method, objs, rounds=6, seed=2, checkpoint=d, resume=True, **opts)
    assert info["resumed"] and info["rounds"] == 6
    # bitwise: the resumed run performs the same operations, on the same client batches, in the same order
    assert torch.equal(th, full)
    assert [r["loss"] for r in rows] == [r["loss"] for r in rows_full]
    if opts.get("form") == "matfree":
        # the matrix-free form's set-up at the resume point (μ₀'s power iteration, or the Nyström sketch) is not in
        # the checkpoint: the resumed run gathers it again, the same numbers at a cost in exchanges
        assert all(a["exchanges_total"] >= b["exchanges_total"] for a, b in zip(rows, rows_full))
        return
    assert [r["floats_sent"] for r in rows] == [r["floats_sent"] for r in rows_full]
    assert [r["exchanges_total"] for r in rows] == [r["exchanges_total"] for r in rows_full]


def test_gn_resumed_after_a_rejected_matrix_free_trial_reuses_the_rebuilt_krylov_basis(tmp_path):
    """Matrix-free gn with CG ≤ 3: round 4's trial is rejected, so the checkpoint after it carries ``krylov_mu``
    (the μ of the first CG solve at that point); the resumed run rebuilds that Krylov basis by the same CG (the
    same operations) and its next trials take no CG — bitwise the uninterrupted run's numbers.  A forged
    ``krylov_mu`` is refused by name."""
    from fedsciml.runtime.checkpoint import CheckpointError

    objs, opts = make_clients(), dict(seed=2, form="matfree", precond="none", cg_iters=3)
    full, rows_full, _ = run("gn", objs, rounds=6, **opts)
    assert [r.get("accepted") for r in rows_full[1:5]] == [True, True, True, False]
    assert [r["cg_iters"] for r in rows_full[5:]] == [0, 0]  # in the kept Krylov space: no CG
    d = str(tmp_path / "gn")
    run("gn", objs, rounds=4, checkpoint=d, **opts)
    th, rows, info = run("gn", objs, rounds=6, checkpoint=d, resume=True, **opts)
    assert info["resumed"] and torch.equal(th, full)
    assert [r["loss"] for r in rows] == [r["loss"] for r in rows_full]
    assert [r["cg_iters"] for r in rows[5:]] == [0, 0]
    from fedsciml.methods.gn import GNStrategy

    s = GNStrategy(form="matfree")
    with pytest.raises(CheckpointError, match="krylov_mu"):
        s.load_state_dict({"theta": full, "g": full, "loss": 1.0, "n": 3, "mu": 1.0, "nu": 2.0, "accepted": 1,
                           "rejected": 1, "retries": 0, "krylov_mu": -1.0})


def test_resume_with_different_settings_is_refused(tmp_path):
    d = str(tmp_path / "ck")
    run("fedavg", rounds=1, local_steps=2, checkpoint=d)
    with pytest.raises(CheckpointMismatch, match="local_steps"):
        run("fedavg", rounds=2, local_steps=3, checkpoint=d, resume=True)


# --- adaptive FIPA ---------------------------------------------------------------------------


def test_adaptive_schedule_formula():
    s = AdaptiveSchedule(C=1.0, C_tau=1e-3, tau_max=200)
    lam = torch.tensor([10.0, 5.0, 1.0, 0.1], dtype=torch.float64)
    # k=2, ‖g_m‖=0.1, ‖g‖=0.15: c = clip(1/(2·0.25)) = 0.99 → keep λ ≥ 9.9 → rank 1
    r, tau = s.choose(lam, 0.1, 0.15, 2, LocalConfig("adam", lr=1e-3), max_rank=3)
    assert r == 1
    assert tau == min(200, math.ceil(math.log(1e-3 / 0.2) / math.log(1 - 1e-3 * 10.0)))
    # k=50, ‖g_m‖=‖g‖=0.1: c = 0.1 → keep λ ≥ 1 → rank 3 (= max_rank), τ capped at 200
    r, tau = s.choose(lam, 0.1, 0.1, 50, LocalConfig("adam", lr=1e-3), max_rank=3)
    assert (r, tau) == (3, 200)


def test_adaptive_fipa_runs_with_per_client_ranks_and_steps():
    th, rows, info = run("fipa", rounds=3, rank=6, adaptive=True, local="adam", lr=1e-2, adapt_c=0.05, safeguard=True)
    chosen = [row for row in rows[1:] if "ranks" in row]
    assert chosen
    for row in chosen:
        ranks = [int(v) for v in row["ranks"].split()]
        steps = [int(v) for v in row["local_steps"].split()]
        assert len(ranks) == 3 and all(1 <= r <= 6 for r in ranks) and all(1 <= t <= 200 for t in steps)
    assert evaluate(th)["mse"] < rows[0]["mse"]


def test_fipa_beats_fedavg_on_heterogeneous_fit():
    objs = make_clients()
    a, _, _ = run("fipa", objs, rounds=25, rank=10)
    b, _, _ = run("fedavg", objs, rounds=25, local_steps=20, lr=1e-2)
    assert evaluate(a)["mse"] < 0.01 * evaluate(b)["mse"]


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="dropout"):
        run("fedavg", rounds=1, dropout=1.0)
    with pytest.raises(ValueError, match="participation"):
        run("fipa", rounds=1, participation=0.0)
    with pytest.raises(ValueError, match="local must be one of adam, gn, got 'sgd'"):
        run("fipa", rounds=1, local="sgd")
    with pytest.raises(ValueError, match="resume needs checkpoint"):
        run("fipa", rounds=1, resume=True)


def test_batched_client_evaluation_gives_each_client_its_own_statistics():
    from fedsciml.runtime.client import ClientBatch

    objs = make_clients((12, 20, 7))
    clients = [Client(i, o) for i, o in enumerate(objs)]
    batch = ClientBatch(clients[::-1])
    assert batch.pooled is not None
    got = batch.gn_messages(THETA0)
    for c in clients:
        want = c.gn_message(THETA0)
        for k in ("H", "g", "loss", "n"):
            assert torch.allclose(got[c.cid][k], want[k], rtol=1e-12, atol=1e-14), k
        assert torch.allclose(batch.loss_messages(THETA0)[c.cid]["loss"], want["loss"], rtol=1e-12)
    a, _, _ = run("gn", objs, rounds=4)
    b, _, _ = run("gn", objs, rounds=4, batched=False)
    assert float((a - b).norm() / a.norm()) < 1e-10



# --- square-root statistics for gn ---------------------------------------------------------


@pytest.mark.parametrize("sizes", [(8, 7, 9), (30, 30, 30)])  # fewer rows than p = 61 (kernel form), and more
def test_gn_square_root_form_equals_normal_form_and_centralized_lm(sizes):
    objs = make_clients(sizes)
    th_s, rows_s, _ = run("gn", objs, rounds=6, form="sqrt")
    th_n, rows_n, _ = run("gn", objs, rounds=6, form="normal")
    th_c, _, _ = solve_least_squares(stack_objectives(objs), THETA0, evaluate, SolveConfig("lm", max_iters=6))
    for a, b in zip(rows_s, rows_n):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-9, abs=1e-300)
        assert a.get("accepted") == b.get("accepted")
    assert float((th_s - th_n).norm() / th_n.norm()) < 1e-9
    assert float((th_s - th_c).norm() / th_c.norm()) < 1e-9


def test_square_root_message_carries_exactly_the_gn_statistics():
    from fedsciml.runtime.client import sqrt_gn_fields

    obj = make_clients((12,))[0]
    r, J = obj.residual_and_jacobian(THETA0)
    f = sqrt_gn_fields(J, r)
    assert f["R"].shape == (12, NET.n_params) and f["s"].shape == (12,)
    torch.testing.assert_close(f["R"].T @ f["R"], J.T @ J, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(f["R"].T @ f["s"], J.T @ r, rtol=1e-10, atol=1e-12)


def test_gn_auto_form_sends_fewer_floats_when_rows_are_few():
    objs = make_clients((8, 7, 9))  # 24 rows < 61 parameters
    _, rows_auto, _ = run("gn", objs, rounds=2)
    _, rows_norm, _ = run("gn", objs, rounds=2, form="normal")
    p = NET.n_params
    # start: each client sends R_m (n_m×p), s_m (n_m), loss, n; θ₀ is broadcast to 3 clients
    assert rows_auto[0]["floats_sent"] == sum(n * p + n + 2 for n in (8, 7, 9)) + 3 * p
    assert rows_norm[0]["floats_sent"] == 3 * (linalg.n_upper(p) + p + 2) + 3 * p
    assert rows_auto[0]["floats_sent"] < rows_norm[0]["floats_sent"]


def test_gn_square_root_form_rejects_a_malformed_factor():
    from fedsciml.methods.gn import GNAggregator

    agg = GNAggregator(True, "sqrt")
    p = NET.n_params
    good = {"R": torch.zeros(4, p, dtype=torch.float64), "s": torch.zeros(4, dtype=torch.float64),
            "loss": torch.ones(1, dtype=torch.float64), "n": torch.ones(1, dtype=torch.float64)}
    bad_rows = {**good, "s": torch.zeros(5, dtype=torch.float64)}
    bad_cols = {**good, "R": torch.zeros(4, p + 1, dtype=torch.float64)}
    ok, bad = agg.validate({0: good, 1: bad_rows, 2: bad_cols}, p, torch.float64)
    assert list(ok) == [0] and set(bad) == {1, 2}
    with pytest.raises(ValueError, match="form must be one of"):
        GNAggregator(True, "cholesky")


def test_gn_square_root_form_resumes_with_the_same_numbers(tmp_path):
    objs = make_clients((8, 7, 9))
    full, rows_full, _ = run("gn", objs, rounds=5, form="sqrt")
    run("gn", objs, rounds=2, form="sqrt", checkpoint=str(tmp_path))
    resumed, rows_res, _ = run("gn", objs, rounds=5, form="sqrt", checkpoint=str(tmp_path), resume=True)
    assert torch.equal(full, resumed)  # bitwise: same operations in the same order as the uninterrupted run
    assert [r["loss"] for r in rows_full] == [r["loss"] for r in rows_res]


def test_gn_trials_take_the_one_exchange_steps_with_rejections_at_no_exchange():
    """``trials=3``: one exchange carries the next three points LM would try; the server replays LM on them, so
    the iterates are those of centralized LM after as many LM iterations (to 1e-10), and a round (one exchange)
    ends with the first accepted trial (or after k rejections) — 1 + rounds exchanges for more LM iterations."""
    objs = make_clients(freq=4.0)
    th3, rows3, info3 = run("gn", objs, rounds=8, trials=3, form="normal")
    iters = info3["accepted_steps"] + info3["rejected_steps"]
    assert info3["rejected_steps"] > 0 and info3["accepted_steps"] >= 6  # most rounds end with an acceptance
    assert [r["exchanges_total"] for r in rows3] == list(range(1, 10))
    th1, rows1, info1 = run("gn", objs, rounds=iters, form="normal")
    assert (info1["accepted_steps"], info1["rejected_steps"]) == (info3["accepted_steps"], info3["rejected_steps"])
    assert float((th3 - th1).norm() / th1.norm()) < 1e-10
    th_c, _, _ = solve_least_squares(stack_objectives(objs), THETA0, evaluate, SolveConfig("lm", max_iters=iters))
    assert float((th3 - th_c).norm() / th_c.norm()) < 1e-10
    p, K = THETA0.numel(), 3
    per_round = [r["floats_sent"] - q["floats_sent"] for q, r in zip(rows3, rows3[1:])]
    assert all(f == 3 * K * (p + linalg.n_upper(p) + p + 2) for f in per_round)  # 3 trials down, 3 stats up
    with pytest.raises(ValueError, match="trials"):
        run("gn", objs, rounds=1, trials=2, exchange="two")
