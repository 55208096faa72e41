"""The ridge package on the federated runtime: ``ridge.one_shot``, the ``ridge`` subcommand and the FedAvg /
FedProx / DP-FedAvg baselines all run through the one round loop (issue 9, items 3, 4, 7 for ridge)."""
import math

import pytest
import torch

import fedsciml as fs
from fedsciml.options import parse_grid
from fedsciml.problems import get_problem
from fedsciml.ridge import DPConfig, one_shot, pooled_ridge
from fedsciml.ridge.baselines import client_round_generator, fedavg


def _data(K=4, d=6, n=30, seed=0):
    p = get_problem("ridge-linear", dim=d, n_samples=n)
    return p, p.client_data(K, seed=seed)


def _pool(data):
    return torch.cat([a for a, _ in data]), torch.cat([y for _, y in data])


def _rel(u, v):
    return float((u - v).norm() / v.norm())


def test_one_shot_on_the_runtime_is_pooled_sklearn_ridge():
    from sklearn.linear_model import Ridge

    _, data = _data(K=5, d=8, n=40)
    A, b = _pool(data)
    for sigma in (1e-3, 0.5, 20.0):
        w, info = one_shot(data, sigma)
        ref = Ridge(alpha=sigma, fit_intercept=False, solver="cholesky", tol=1e-14).fit(A.numpy(), b.numpy()).coef_
        assert _rel(w, torch.from_numpy(ref)) < 1e-10  # independent reference (scikit-learn)
        assert info["clients"] == 5 and info["rejections"] == [] and info["sigma"] == sigma


@pytest.mark.parametrize("opts", [dict(), dict(project=5, cv_sigmas=parse_grid("1e-3:1e2:6")),
                                  dict(dp_epsilon=3.0, dp_noise_aware=True), dict(dp_epsilon=2.0, dp_central=True)])
def test_ridge_one_shot_equals_solve_one_shot(opts):
    """The library function and ``solve(..., "one-shot")`` are the same loop on the same rows: σ at the server."""
    prob = get_problem("ridge-linear", dim=7, n_samples=40, sigma=0.3)
    res = fs.solve(prob, "one-shot", clients=4, seed=3, **opts)
    data = prob.client_data(4, seed=3)
    dp = None
    if "dp_epsilon" in opts:
        dp = DPConfig(opts["dp_epsilon"], central=opts.get("dp_central", False),
                      noise_aware_sigma=opts.get("dp_noise_aware"))
    cv = None if "cv_sigmas" not in opts else [float(x) for x in torch.logspace(-3, 2, 6, dtype=torch.float64)]
    w, info = one_shot(data, 0.3, dp=dp, project=opts.get("project"), cv_sigmas=cv, seed=3)
    assert _rel(res.theta, w) < 1e-10 and res.options["penalty"] == "server"
    assert res.history[-1]["floats_sent"] == info["floats_sent"]


def test_sigma_counts_once_on_ridge_problems():
    p = get_problem("ridge-linear", dim=6, n_samples=30)  # problem σ 0.01 (default)
    A, b = _pool(p.client_data(3, seed=0))
    r = fs.solve("ridge-linear", "one-shot", clients=3, sigma=0.5, problem_options={"dim": 6, "n_samples": 30})
    assert _rel(r.theta, pooled_ridge(A, b, 0.5)) < 1e-10          # σ = 0.5 once ...
    assert _rel(r.theta, pooled_ridge(A, b, 0.51)) > 1e-6          # ... not the problem's 0.01 on top
    assert r.options["sigma"] == r.options["method_sigma"] == 0.5
    r = fs.solve("ridge-linear", "one-shot", clients=3, problem_options={"dim": 6, "n_samples": 30})
    assert _rel(r.theta, pooled_ridge(A, b, 0.01)) < 1e-10         # no method σ: the problem's σ, once
    # gn / fedavg need the penalty as residual rows
    with pytest.raises(ValueError, match="penalty='server'"):
        fs.solve("ridge-linear", "gn", clients=3, problem_options={"dim": 6, "n_samples": 30, "penalty": "server"})


def test_per_client_dp_noise_is_reproducible_and_seeded():
    _, data = _data()
    dp = DPConfig(2.0)
    w1, i1 = one_shot(data, 0.1, dp=dp, seed=5)
    w2, _ = one_shot(data, 0.1, dp=dp, seed=5)
    w3, _ = one_shot(data, 0.1, dp=dp, seed=6)
    assert torch.equal(w1, w2) and not torch.allclose(w1, w3) and i1["noise_std"] > 0  # same seed, same bits


def test_one_shot_crosses_bytes_bitwise_with_dp_projection_dropout_and_cv():
    _, data = _data(K=6)
    kw = dict(dp=DPConfig(20.0), project=4, cv_sigmas=[0.01, 1.0, 100.0], seed=2, dropout=0.3)
    a, ia = one_shot(data, **kw)
    b, ib = one_shot(data, transport="bytes", **kw)
    # bitwise: numpy.save/load and JSON carry float64 exactly, and each client runs the same operations
    assert torch.equal(a, b) and ia["floats_sent"] == ib["floats_sent"] and ia["cv_loss"] == ib["cv_loss"]
    assert 2 <= ia["clients"] < 6  # the loop's dropout: the answering clients were fused


def test_ridge_cli_preset_matches_the_library_and_records_results():
    from fedsciml.cli.ridge import run_experiment
    from fedsciml.ridge.preset import table_rows

    res = run_experiment(clients=3, dim=5, samples=25, sigma=0.2, baselines="fedavg", rounds=3, seed=1)
    one, central, avg = res
    data = get_problem("ridge-linear", dim=5, n_samples=25).client_data(3, seed=1)
    w, info = one_shot(data, 0.2, seed=1)
    assert _rel(one.theta, w) < 1e-12 and one.final["rel_error"] < 1e-10
    assert central.method == "centralized" and _rel(central.theta, pooled_ridge(*_pool(data), 0.2)) < 1e-12
    wb, _, _ = fedavg(data, rounds=3, sigma=0.2, seed=1)
    # bitwise: the preset calls this very fedavg with the same data, seed and options (the same operations)
    assert torch.equal(avg.theta, wb) and avg.method == "fedavg" and len(avg.history) == 4
    rows = table_rows(res)
    assert [r["label"] for r in rows] == ["one-shot", "centralized", "fedavg-3"]
    assert rows[0]["floats_sent"] == info["floats_sent"] and rows[2]["floats_sent"] == 3 * 3 * (5 + 1 + 5)


# --- the baselines on the round loop ----------------------------------------------------------------


def test_fedavg_one_full_batch_step_per_round_is_centralized_gradient_descent():
    """E = 1 full-batch local step, weights n_k/N: FedAvg's round is one GD step on the pooled mean objective
    ``(1/2N)‖Aw − b‖² + (σ/2N)‖w‖²`` (independent reference below), so it converges to pooled ridge."""
    _, data = _data(K=3, d=5, n=20)
    A, b = _pool(data)
    N, sigma, lr = A.shape[0], 0.3, 0.5
    w = torch.zeros(5, dtype=torch.float64)
    for _ in range(30):
        w = w - lr * (A.T @ (A @ w - b) / N + sigma / N * w)
    got, _, _ = fedavg(data, rounds=30, lr=lr, local_epochs=1, batch_size=None, sigma=sigma)
    assert _rel(got, w) < 1e-12
    far, _, info = fedavg(data, rounds=600, lr=lr, local_epochs=1, batch_size=None, sigma=sigma)
    assert _rel(far, pooled_ridge(A, b, sigma)) < 1e-9 and info["floats_sent"] == 600 * 3 * (5 + 5 + 1)


def test_baseline_clients_answer_the_same_alone_or_batched():
    """Each client's reshuffles and DP noise come from its own generator: its answer does not depend on the
    batch it is computed in (one by one vs batched: the same up to round-off)."""
    _, data = _data(K=4, n=50)  # 40 training rows per client: minibatches of 32, one reshuffle per epoch
    for dp in (None, {"epsilon": 2.0, "delta": 1e-5, "clip": 3.0}):
        a, _, _ = fedavg(data, rounds=3, sigma=0.01, seed=4, dp=dp)
        b, _, _ = fedavg(data, rounds=3, sigma=0.01, seed=4, dp=dp, vectorize=False)
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)
        # client ids seed the generators: the same rows under other ids draw other reshuffles / noise
        c, _, _ = fedavg(data, rounds=3, sigma=0.01, seed=4, dp=dp, client_ids=[7, 8, 9, 10])
        assert not torch.allclose(a, c, rtol=1e-6)
    g1, g2 = client_round_generator(0, 1, 2), client_round_generator(0, 1, 2)
    assert torch.equal(torch.rand(3, generator=g1), torch.rand(3, generator=g2))
    assert not torch.equal(torch.rand(3, generator=client_round_generator(0, 1, 2)),
                           torch.rand(3, generator=client_round_generator(0, 2, 2)))


def test_baselines_cross_bytes_bitwise_and_log_rejections_and_dropout():
    _, data = _data(K=5)
    for dp in (None, {"epsilon": 1.0, "delta": 1e-5, "clip": 3.0}):
        a, ha, ia = fedavg(data, rounds=4, sigma=0.01, seed=2, dropout=0.3, dp=dp, evaluate=lambda w: float(w @ w))
        b, hb, ib = fedavg(data, rounds=4, sigma=0.01, seed=2, dropout=0.3, dp=dp, evaluate=lambda w: float(w @ w),
                           transport="bytes")
        assert torch.equal(a, b) and ia["floats_sent"] == ib["floats_sent"]  # same bits, same operations
        assert [h["mse"] for h in ha] == [h["mse"] for h in hb]
        assert sum(r["dropped"] for r in ia["rows"]) > 0
    bad = list(data)
    bad[2] = (data[2][0].clone(), data[2][1].clone())
    bad[2][1][0] = math.nan  # client 2's data hold a NaN: refused up front, never silently left out (issue 23)
    with pytest.raises(ValueError, match="client 2: Input y contains NaN"):
        fedavg(bad, rounds=2, sigma=0.01)
    with pytest.raises(ValueError, match="client 2: Input y contains NaN"):
        one_shot(bad, 0.01)
    bad[2] = (data[2][0].clone(), data[2][1])
    bad[2][0][3, 1] = math.inf
    with pytest.raises(ValueError, match=r"client 2: Input X contains infinity \(row 3\)"):
        one_shot(bad, 0.01, cv_sigmas=[0.1, 1.0])


def test_ridge_cli_preset_on_flower_is_bitwise_the_local_run():
    """``ridge --engine flower``: the one-shot exchange carried by Flower's simulation engine (one client per
    virtual node, one thread): the same model bit for bit as the in-process run, and the same test MSE."""
    pytest.importorskip("flwr")
    from fedsciml.cli.ridge import run_experiment

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        kw = dict(clients=3, dim=5, samples=20, project=4, epsilon=5.0, dropout=0.3, seed=1)
        fl, lo = run_experiment(engine="flower", **kw), run_experiment(**kw)
    finally:
        torch.set_num_threads(threads)
    # bitwise: a linear problem's rows (J = A, r = −b at θ₀ = 0) come out exact whether clients are evaluated
    # together or one per node; each client then projects, clips, adds its own seeded noise and forms its Gram in the
    # same operations, and the server sums in client-id order at the same thread count
    assert torch.equal(fl[0].theta, lo[0].theta) and fl[0].final["mse"] == lo[0].final["mse"]
    assert fl[0].options["engine"] == "flower" and fl[0].extra["fused_clients"] == lo[0].extra["fused_clients"]
    with pytest.raises(ValueError, match="engine local"):
        run_experiment(engine="flower", baselines="fedavg", **kw)
