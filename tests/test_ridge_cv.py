"""Leave-one-client-out CV (batched == naive), random projection, FedAvg/FedProx baselines."""
import numpy as np
import pytest
import torch

from fedsciml.core import linalg
from fedsciml.problems import get_problem
from fedsciml.ridge import FusionServer, client_message, one_shot, pooled_ridge
from fedsciml.ridge.baselines import fedavg
from fedsciml.core.loco import loco_cv, loco_solutions, loco_solutions_naive, stats_scores, validation_losses
from fedsciml.core.sketch import sketch_matrix

D64 = torch.float64
SIGMAS = torch.logspace(-3, 2, 7, dtype=D64)


def _bsq(data):
    return torch.stack([b @ b for _, b in data])


def _stats(data):
    server = FusionServer(data[0][0].shape[1])
    for k, (A, b) in enumerate(data):
        server.receive(k, client_message(A, b))
    return server.stacked()


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_batched_loco_equals_naive_loop(gamma):
    p = get_problem("ridge-linear", dim=12, n_samples=20, heterogeneity=gamma)
    Gs, hs = _stats(p.client_data(9, seed=0))
    W, info = loco_solutions(Gs, hs, SIGMAS, return_info=True)
    ref = loco_solutions_naive(Gs, hs, SIGMAS)
    assert float(((W - ref).norm(dim=-1) / ref.norm(dim=-1)).max()) < 1e-10
    assert info["direct_solves"] == 0
    packed = torch.stack([linalg.pack_upper(G) for G in Gs])  # what the server holds; unpacked 4 clients at a time
    W2 = loco_solutions(packed, hs, SIGMAS, chunk=4)
    assert float(((W2 - ref).norm(dim=-1) / ref.norm(dim=-1)).max()) < 1e-10


def _factors(data, d):
    server = FusionServer(d)
    server.receive_all({k: client_message(A, b, form="sqrt") for k, (A, b) in enumerate(data)})
    return server


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_loco_on_square_root_factors_equals_naive_loop(gamma):
    p = get_problem("ridge-linear", dim=30, n_samples=12, heterogeneity=gamma)
    data = p.client_data(11, seed=1)
    n = data[0][0].shape[0]
    assert 2 * n <= 30  # fewer training rows than d/2
    server = _factors(data, 30)
    Rs, hs = server.stacked_factors()
    Gs, hs2 = _stats(data)
    ref = loco_solutions_naive(Gs, hs2, SIGMAS)
    err = lambda W: float(((W - ref).norm(dim=-1) / ref.norm(dim=-1)).max())  # noqa: E731
    W, info = loco_solutions(Rs, hs, SIGMAS, sqrt=True, total=server.totals(), return_info=True)
    assert err(W) < 1e-10 and info["direct_solves"] == 0
    assert err(loco_solutions(Rs, hs, SIGMAS, sqrt=True, chunk=3)) < 1e-10       # totals summed from the factors
    assert err(loco_solutions(Gs, hs2, SIGMAS, total=server.totals())) < 1e-10   # Gram form, given totals
    with pytest.raises(ValueError, match="factors"):
        loco_solutions(Gs.reshape(11, -1), hs, SIGMAS, sqrt=True)
    # one_shot (on the runtime): with CV and few rows per client, the clients send factors; same σ and model
    w_auto, i_auto = one_shot(data, cv_sigmas=SIGMAS)
    w_gram, i_gram = one_shot(data, cv_sigmas=SIGMAS, form="gram")
    assert i_auto["form"] == "sqrt" and i_gram["form"] == "gram" and i_auto["sigma"] == i_gram["sigma"]
    # R_k, s_k, loss, n per client, against pack(G_k), g_k, loss, n
    assert i_auto["floats_up_per_client"] == n * 31 + 2 < i_gram["floats_up_per_client"]
    assert torch.allclose(torch.tensor(i_auto["cv_loss"]), torch.tensor(i_gram["cv_loss"]), rtol=1e-10)
    assert float((w_auto - w_gram).norm() / w_gram.norm()) < 1e-12
    res = loco_cv(Rs, hs, SIGMAS, _bsq(data), sqrt=True, total=server.totals())  # the package's CV on the factors
    assert i_auto["sigma"] == res["sigma"]
    assert torch.allclose(torch.tensor(i_auto["cv_loss"]), torch.tensor(res["loss"]), rtol=1e-10)
    w_b, _ = one_shot(data, cv_sigmas=SIGMAS, transport="bytes")
    assert torch.equal(w_b, w_auto)  # the square-root messages cross bytes bitwise too
    with pytest.raises(ValueError, match="Gram form"):
        from fedsciml.ridge import DPConfig

        one_shot(data, cv_sigmas=SIGMAS, form="sqrt", dp=DPConfig(1.0))


def test_loco_cv_needs_two_clients():
    p = get_problem("ridge-linear", dim=5, n_samples=20)
    data = p.client_data(1, seed=0)
    Gs, hs = _stats(data)
    with pytest.raises(ValueError, match="at least 2 clients"):
        loco_cv(Gs, hs, SIGMAS)
    with pytest.raises(ValueError, match="at least 2 clients"):
        one_shot(data, cv_sigmas=SIGMAS)
    from fedsciml.ridge import FederatedRidgeCV

    X, y = data[0][0].numpy(), data[0][1].numpy()
    with pytest.raises(ValueError, match="at least 2 sites"):  # site labels that name one site
        FederatedRidgeCV().fit(X, y, sites=np.zeros(len(y), dtype=int))
    est = FederatedRidgeCV().fit(X, y)  # no site labels: a one-table fold CV, and it says so (issue 30)
    assert est.cv_mode_ == "folds" and est.cv_folds_ == FederatedRidgeCV.ONE_TABLE_FOLDS


def test_loco_fallback_and_dominant_client():
    # client 0 alone covers feature 0: the preconditioned operator is ill-conditioned there
    g = torch.Generator().manual_seed(0)
    data = []
    for k in range(5):
        A = torch.randn(8, 6, generator=g, dtype=D64)
        if k:
            A[:, 0] = 0
        data.append((A, torch.randn(8, generator=g, dtype=D64)))
    Gs, hs = _stats(data)
    ref = loco_solutions_naive(Gs, hs, SIGMAS)
    Rs, hs_r = _factors(data, 6).stacked_factors()
    for max_iter in (60, 1):  # 1 iteration forces the direct-solve fallback
        W, info = loco_solutions(Gs, hs, SIGMAS, max_iter=max_iter, return_info=True)
        assert float(((W - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-300)).max()) < 1e-10
        W, info_r = loco_solutions(Rs, hs_r, SIGMAS, max_iter=max_iter, return_info=True, sqrt=True)
        assert float(((W - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-300)).max()) < 1e-10
    assert info["direct_solves"] > 0 and info_r["direct_solves"] > 0
    # K = 1: leaving the only client out gives w = 0 (to round-off: PCG starts from the full solution and its
    # residual updates leave ~1e-17 on some CPUs, exact zeros on others)
    W1 = loco_solutions(Gs[:1], hs[:1], SIGMAS)
    assert float(W1.abs().max()) <= 1e-12 * float(hs[0].abs().max())
    with pytest.raises(ValueError, match="> 0"):
        loco_solutions(Gs, hs, [0.1, 0.0])


def test_loco_cv_selects_like_naive_and_explicit_refits():
    p = get_problem("ridge-linear", dim=10, n_samples=25)
    data = p.client_data(6, seed=2)
    Gs, hs = _stats(data)
    fast = loco_cv(Gs, hs, SIGMAS, _bsq(data))
    slow = loco_cv(Gs, hs, SIGMAS, _bsq(data), naive=True)
    assert fast["sigma"] == slow["sigma"]
    assert torch.allclose(torch.tensor(fast["loss"]), torch.tensor(slow["loss"]), rtol=1e-10)
    # one entry against an explicit refit without client 3
    rest = [d for k, d in enumerate(data) if k != 3]
    w = pooled_ridge(torch.cat([a for a, _ in rest]), torch.cat([b for _, b in rest]), float(SIGMAS[2]))
    A3, b3 = data[3]
    assert float(fast["per_client"][3, 2]) == pytest.approx(float(((A3 @ w - b3) ** 2).sum()), rel=1e-10)
    assert fast["floats_up"] == 0 and fast["floats_down"] == 0  # scored by the server from the statistics
    # without ‖b_k‖² the losses omit a σ-independent constant: the same choice
    assert loco_cv(Gs, hs, SIGMAS)["sigma"] == fast["sigma"]


def test_server_scores_equal_client_scores_in_every_form():
    # the held-out loss from client k's statistics (packed Gram, full Gram, square-root factor, projected rows)
    # equals the loss on its rows (validation_losses, the client-side reference)
    p = get_problem("ridge-linear", dim=12, n_samples=30)
    data = p.client_data(5, seed=3)
    W = torch.randn(5, 4, 12, generator=torch.Generator().manual_seed(1), dtype=D64)
    ref = torch.stack([validation_losses(A, b, W[k]) for k, (A, b) in enumerate(data)])
    Gp, hs = _stats(data)
    server = _factors(data, 12)
    Rs, hs_r = server.stacked_factors()
    for got in (stats_scores(linalg.pack_upper(Gp), hs, W, b_sq=_bsq(data)),
                stats_scores(Gp, hs, W, b_sq=_bsq(data), chunk=2),
                stats_scores(Rs, hs_r, W, sqrt=True, b_sq=_bsq(data))):
        assert torch.allclose(got, ref, rtol=1e-10, atol=1e-10)
    S = sketch_matrix(12, 5, seed=0)
    proj = [(A @ S, b) for A, b in data]
    V = W[..., :5]
    refp = torch.stack([validation_losses(A, b, V[k]) for k, (A, b) in enumerate(proj)])
    Gq, hq = _stats(proj)
    assert torch.allclose(stats_scores(Gq, hq, V, b_sq=_bsq(proj)), refp, rtol=1e-10, atol=1e-10)


def test_repaired_loco_on_noisy_statistics():
    from fedsciml.ridge import DPConfig, psd_repair, ridge_solve
    from fedsciml.core.loco import loco_solutions_repaired

    p = get_problem("ridge-linear", dim=6, n_samples=30)
    data = p.client_data(4, seed=0)
    Gs, hs = _stats(data)
    # on exact statistics the repaired path is the plain LOCO
    assert float((loco_solutions_repaired(Gs, hs, SIGMAS) - loco_solutions_naive(Gs, hs, SIGMAS)).abs().max()) < 1e-10
    # on an indefinite LOCO Gram it is the repaired ridge solve
    noisy = Gs + 50 * torch.eye(6, dtype=D64)[None] * torch.tensor([1.0, 1.0, 1.0, -30.0], dtype=D64)[:, None, None]
    W = loco_solutions_repaired(noisy, hs, SIGMAS)
    M, _ = psd_repair(noisy.sum(0) - noisy[0])
    assert torch.allclose(W[0, 3], ridge_solve(M, hs.sum(0) - hs[0], float(SIGMAS[3])), rtol=1e-9, atol=1e-12)
    est_w, info = one_shot(data, 0.0, dp=DPConfig(0.5), cv_sigmas=[1e-2, 1.0, 1e2])  # local DP + CV runs
    assert torch.isfinite(est_w).all() and info["sigma"] in (1e-2, 1.0, 1e2)


@pytest.mark.parametrize("kind", ["gaussian", "sparse", "srht"])
def test_sketches(kind):
    R = sketch_matrix(20, 8, seed=3, kind=kind)
    assert R.shape == (20, 8) and torch.equal(R, sketch_matrix(20, 8, seed=3, kind=kind))
    assert not torch.equal(R, sketch_matrix(20, 8, seed=4, kind=kind))
    # E[R Rᵀ] = I: average over seeds
    M = sum(sketch_matrix(20, 8, seed=s, kind=kind) @ sketch_matrix(20, 8, seed=s, kind=kind).T for s in range(300)) / 300
    assert float((M - torch.eye(20, dtype=D64)).abs().max()) < 0.3
    with pytest.raises(ValueError, match="m"):
        sketch_matrix(20, 21)


def test_projection_protocol_counts_and_exact_limit():
    p = get_problem("ridge-linear", dim=12, n_samples=40)
    data = p.client_data(4, seed=0)
    w, info = one_shot(data, 1e-2, project=6, seed=1)
    assert info["m"] == 6 and info["floats_up_per_client"] == 21 + 6 + 2  # pack(G), g, loss, n
    R = sketch_matrix(12, 6, seed=1)
    # the model lies in range(R) and equals ridge on the projected pooled features, mapped back
    A = torch.cat([a for a, _ in data])
    b = torch.cat([y for _, y in data])
    v = pooled_ridge(A @ R, b, 1e-2)
    assert float((w - R @ v).norm() / w.norm()) < 1e-10
    # square invertible sketch, σ = 0: the exact least-squares model
    w_full, _ = one_shot(data, 0.0, project=12, seed=1)
    assert float((w_full - pooled_ridge(A, b, 0.0)).norm() / w_full.norm()) < 1e-8


def test_fedavg_and_fedprox_approach_the_oracle():
    p = get_problem("ridge-linear", dim=5, n_samples=50)
    data = p.client_data(4, seed=1)
    w_star, _ = one_shot(data, 0.01)
    ev = lambda w: p.evaluate(w)["mse"]  # noqa: E731
    w, hist, info = fedavg(data, rounds=40, lr=0.05, sigma=0.01, evaluate=ev, every=10)
    assert [h["round"] for h in hist] == [10, 20, 30, 40]
    assert hist[-1]["mse"] < hist[0]["mse"] and ev(w) < 1.1 * ev(w_star)
    assert info["floats_sent"] == 40 * 4 * (5 + 1 + 5)
    w2, _, _ = fedavg(data, rounds=40, lr=0.05, sigma=0.01, mu=0.01)
    assert ev(w2) < 1.1 * ev(w_star) and not torch.equal(w, w2)
    with pytest.raises(ValueError, match="rounds"):
        fedavg(data, rounds=0)
