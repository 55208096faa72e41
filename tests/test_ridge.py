"""One-shot ridge fusion: exactness (vs scikit-learn), messages, streaming, dropout, problems, CLI."""
import json

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from fedsciml.core import linalg
from fedsciml.core.schema import MessageRejected
from fedsciml.core.objective import LinearLeastSquares
from fedsciml.problems import ProblemError, get_problem
from fedsciml.ridge import (FederatedRidge, FederatedRidgeCV, FusionServer, SingularGram, client_message, dropout_mask, fuse, one_shot,
                            pooled_ridge)

D64 = torch.float64


def _iid(K, n_k, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, generator=g, dtype=D64)
    data = []
    for _ in range(K):
        A = torch.randn(n_k, d, generator=g, dtype=D64)
        data.append((A, A @ w + 0.1 * torch.randn(n_k, generator=g, dtype=D64)))
    return data


def _heterogeneous(K, n_k, d, seed=0):
    """Fully heterogeneous: client k sees only its own block of features, with its own mean and scale."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(d, generator=g, dtype=D64)
    data = []
    for k in range(K):
        A = torch.zeros(n_k, d, dtype=D64)
        cols = torch.arange(d)[torch.arange(d) % K == k]
        if len(cols) == 0:
            cols = torch.tensor([k % d])
        A[:, cols] = (3.0 * k / K) + (1 + k % 3) * torch.randn(n_k, len(cols), generator=g, dtype=D64)
        data.append((A, A @ w + 0.1 * torch.randn(n_k, generator=g, dtype=D64)))
    return data


def _sk(data, sigma):
    A = torch.cat([a for a, _ in data]).numpy()
    b = torch.cat([y for _, y in data]).numpy()
    return torch.as_tensor(Ridge(alpha=sigma, fit_intercept=False, solver="cholesky").fit(A, b).coef_)


@pytest.mark.parametrize("make", [_iid, _heterogeneous])
@pytest.mark.parametrize("K,n_k,d", [(1, 60, 12), (7, 15, 12), (60, 4, 20), (500, 2, 10)])
def test_fusion_equals_sklearn_ridge(make, K, n_k, d):
    data = make(K, n_k, d)
    sigma = 0.3
    w = fuse({k: client_message(A, b) for k, (A, b) in enumerate(data)}, sigma)
    ref = _sk(data, sigma)
    assert float((w - ref).norm() / ref.norm()) < 1e-10


def test_message_is_the_gauss_newton_statistics():
    A, b = _iid(1, 30, 6)[0]
    msg = client_message(A, b)
    st = LinearLeastSquares(A, b).gn_stats(torch.zeros(6, dtype=D64))
    # the blocked syrk computes each entry as the same dot product as AᵀA, but BLAS may block the sum
    # differently: equal to round-off, not bitwise
    assert torch.allclose(linalg.unpack_upper(msg["G"], 6), st.H, rtol=1e-14, atol=1e-13)
    assert torch.allclose(msg["h"], A.T @ b, rtol=1e-14, atol=1e-13)
    assert msg["G"].numel() == 21 and msg["n"].item() == 30
    # square-root form: RᵀR = AᵀA and Rᵀz = Aᵀb, in min(n, d)·(d + 1) floats
    for rows in (4, 30):
        sq = client_message(A[:rows], b[:rows], form="sqrt")
        m = min(rows, 6)
        assert sq["R"].shape == (m, 6) and sq["z"].shape == (m,) and sq["n"].item() == rows
        G = A[:rows].T @ A[:rows]
        assert torch.allclose(sq["R"].T @ sq["R"], G, rtol=1e-13, atol=1e-12)
        assert torch.allclose(sq["R"].T @ sq["z"], A[:rows].T @ b[:rows], rtol=1e-13, atol=1e-12)
    with pytest.raises(ValueError, match="form"):
        client_message(A, b, form="dense")


@pytest.mark.parametrize("d,block", [(1, 256), (7, 3), (300, 64), (300, 256), (513, 256)])
def test_gram_packed_is_the_packed_gram(d, block):
    A = torch.randn(40, d, generator=torch.Generator().manual_seed(d), dtype=D64)
    ref = A.T @ A
    got = linalg.gram_packed(A, block=block)
    assert got.shape == (linalg.n_upper(d),)
    assert torch.allclose(linalg.unpack_upper(got, d), 0.5 * (ref + ref.T), rtol=1e-13, atol=1e-12)


def test_fusion_of_both_forms_equals_sklearn_to_1e12():
    data = _iid(12, 30, 10, seed=4)  # well conditioned: scikit-learn's own round-off is ~1e-15
    ref = _sk(data, 0.2)
    gram = {k: client_message(A, b) for k, (A, b) in enumerate(data)}
    sqrt = {k: client_message(A, b, form="sqrt") for k, (A, b) in enumerate(data)}
    mixed = {k: (sqrt if k % 2 else gram)[k] for k in gram}
    for msgs in (gram, sqrt, mixed):
        server = FusionServer(10)
        ok, bad = server.receive_all(msgs)
        assert len(ok) == 12 and not bad
        assert float((server.solve(0.2) - ref).norm() / ref.norm()) < 1e-12
    # the per-client statistics agree whatever the form
    s_gram, s_sqrt = FusionServer(10), FusionServer(10)
    s_gram.receive_all(gram)
    s_sqrt.receive_all(sqrt)
    assert s_sqrt.factored and not s_gram.factored
    assert torch.allclose(s_sqrt.stacked_packed()[0], s_gram.stacked_packed()[0], rtol=1e-12, atol=1e-11)
    assert torch.allclose(s_sqrt.stacked()[1], s_gram.stacked()[1], rtol=1e-12, atol=1e-11)
    # factors are zero-padded to the largest m: the padding adds nothing to RᵀR
    s_sqrt.receive(99, client_message(*_iid(1, 3, 10, seed=5)[0], form="sqrt"))
    Rs, hs = s_sqrt.stacked_factors()
    assert Rs.shape == (13, 10, 10) and not Rs[-1, 3:].any()
    assert torch.allclose(Rs.transpose(1, 2) @ Rs, s_sqrt.stacked()[0], rtol=1e-12, atol=1e-11)
    with pytest.raises(ValueError, match="Gram form"):
        s_gram.stacked_factors()
    # no copy when the message already has the server's dtype and device
    assert s_gram.G[0] is gram[0]["G"] and s_gram.h[0] is gram[0]["h"]
    s32 = FusionServer(10)
    s32.receive(0, {k: v.float() for k, v in gram[0].items()})
    assert s32.G[0].dtype == D64


def test_streaming_updates_equal_refit():
    (A1, b1), (A2, b2) = _iid(2, 25, 8, seed=3)
    server = FusionServer(8)
    server.receive("a", client_message(A1[:10], b1[:10]))
    server.update("a", client_message(A1[10:], b1[10:]))  # ΔG, Δh of new rows
    server.update("b", client_message(A2, b2))            # first update = receive
    assert server.n["a"] == 25
    w = server.solve(0.1)
    ref = pooled_ridge(torch.cat([A1, A2]), torch.cat([b1, b2]), 0.1)
    assert float((w - ref).norm() / ref.norm()) < 1e-12
    est = FederatedRidge(alpha=0.1, fit_intercept=False)
    A1n, b1n, A2n, b2n = A1.numpy(), b1.numpy(), A2.numpy(), b2.numpy()
    est.partial_fit(A1n, b1n, site=0).partial_fit(A2n[:5], b2n[:5], site=1).partial_fit(A2n[5:], b2n[5:], site=1)
    assert float(np.linalg.norm(est.coef_ - ref.numpy()) / ref.norm()) < 1e-12
    server.drop("b")  # a client withdrawn after the fact
    only_a = pooled_ridge(A1, b1, 0.1)
    assert float((server.solve(0.1) - only_a).norm() / only_a.norm()) < 1e-10
    server.receive("a", client_message(A2, b2))  # re-sending replaces, never double-counts
    assert float((server.solve(0.1) - pooled_ridge(A2, b2, 0.1)).norm()) < 1e-10
    # square-root increments are stacked under the client's factor; mixing forms falls back to the Gram form
    sq = FusionServer(8)
    sq.receive("a", client_message(A1[:10], b1[:10], form="sqrt"))
    sq.update("a", client_message(A1[10:], b1[10:], form="sqrt"))
    sq.update("b", client_message(A2[:5], b2[:5], form="sqrt"))
    sq.update("b", client_message(A2[5:], b2[5:]))
    assert sq.R["a"].shape == (16, 8) and "b" in sq.G and "b" not in sq.R and sq.n["a"] == 25
    assert float((sq.solve(0.1) - ref).norm() / ref.norm()) < 1e-12
    sq.receive("a", client_message(A2, b2, form="sqrt"))  # replace a factor: its Gram leaves the sum
    sq.drop("b")
    assert float((sq.solve(0.1) - pooled_ridge(A2, b2, 0.1)).norm()) < 1e-10


def test_malformed_messages_are_rejected_not_summed():
    data = _iid(3, 20, 5)
    good = {k: client_message(A, b) for k, (A, b) in enumerate(data)}
    bad = dict(good)
    bad["nan"] = {**good[0], "h": torch.full((5,), float("nan"), dtype=D64)}
    bad["inf"] = {**good[1], "G": good[1]["G"].clone().index_fill_(0, torch.tensor([3]), float("inf"))}
    bad["shape"] = {**good[0], "G": good[0]["G"][:-1]}
    bad["dim"] = client_message(torch.ones(4, 6, dtype=D64), torch.ones(4, dtype=D64))
    bad["count"] = {**good[0], "n": torch.tensor([0.0], dtype=D64)}
    bad["huge-count"] = {**good[0], "n": torch.tensor([1e300], dtype=D64)}
    bad["extra"] = {**good[0], "x": torch.zeros(1, dtype=D64)}
    bad["int"] = {**good[0], "G": good[0]["G"].long()}
    bad["complex"] = {**good[0], "h": good[0]["h"].to(torch.complex128)}
    bad["mixed"] = {**good[0], "R": torch.ones(2, 5, dtype=D64)}
    sq = client_message(*data[2], form="sqrt")
    bad["sqrt-nan"] = {**sq, "R": sq["R"].clone().fill_(float("nan"))}
    bad["sqrt-shape"] = {**sq, "z": sq["z"][:-1]}
    server = FusionServer(5)
    ok, rejected = server.receive_all(bad)
    assert ok == [0, 1, 2]
    assert set(rejected) == {"nan", "inf", "shape", "dim", "count", "huge-count", "extra", "int", "complex", "mixed",
                             "sqrt-nan", "sqrt-shape"}
    assert "non-finite" in rejected["nan"] and "'h'" in rejected["nan"] and "'G'" in rejected["inf"]
    assert "'R'" in rejected["sqrt-nan"] and "> 0" in rejected["count"] and "dtype" in rejected["int"]
    assert "2^53" in rejected["huge-count"]
    # the round's finiteness is checked through its sum; after rejecting the culprits the sum is rebuilt from
    # the others in the same order, so the model is bitwise that of the good messages alone
    assert torch.equal(server.solve(0.1), fuse(good, 0.1))
    with pytest.raises(MessageRejected):
        fuse(bad, 0.1)
    with pytest.raises(MessageRejected, match="non-finite"):
        FusionServer(5).receive("x", bad["inf"])
    # a diagonal above √max is out of scale: each such client is rejected by name before pooling (issue 31)
    huge = {**good[2], "G": good[2]["G"] / good[2]["G"].abs().max() * 1e308}
    ok, rejected = FusionServer(5).receive_all({0: good[0], "huge": huge, "huge2": {**huge}})
    assert ok == [0] and all("out of scale" in rejected[c] for c in ("huge", "huge2"))
    # finite messages whose sum overflows (off-diagonal entries: the O(d) scale check reads the diagonal only):
    # the largest is rejected, the rest is fused
    off = good[2]["G"].clone()
    off[1:5] = 1e308  # row 0's off-diagonal entries in the packed upper triangle
    huge = {**good[2], "G": off}
    server = FusionServer(5)
    ok, rejected = server.receive_all({0: good[0], "huge": huge, "huge2": {**huge}})
    assert ok == [0, "huge2"] and "overflow" in rejected["huge"]
    assert torch.isfinite(server.totals()[0]).all()


def test_singular_gram_is_refused_not_solved():
    # 4 rows, 5 features, σ = 0: Cholesky of the rank-4 pooled Gram can pass on a round-off pivot
    # (~1e-15 relative); every seed must be refused, as the pooled reference is
    for seed in range(40):
        A, b = _iid(1, 4, 5, seed=seed)[0]
        msgs = {0: client_message(A[:2], b[:2]), 1: client_message(A[2:], b[2:], form="sqrt")}
        with pytest.raises(SingularGram, match="use σ > 0"):
            fuse(msgs, 0.0)
        with pytest.raises(SingularGram):
            pooled_ridge(A, b, 0.0)
        assert torch.isfinite(fuse(msgs, 1e-3)).all()
    # full rank but ill-conditioned (κ ≈ 1e10) is still solved, and equals least squares
    g = torch.Generator().manual_seed(0)
    A = torch.randn(60, 5, generator=g, dtype=D64)
    A[:, 4] = A[:, 3] + 1e-5 * torch.randn(60, generator=g, dtype=D64)
    b = torch.randn(60, generator=g, dtype=D64)
    w = fuse({0: client_message(A[:30], b[:30]), 1: client_message(A[30:], b[30:])}, 0.0)
    ref = torch.linalg.lstsq(A, b.unsqueeze(-1), driver="gelsd").solution.squeeze(-1)
    assert float((w - ref).norm() / ref.norm()) < 1e-4  # κ(G)·eps ≈ 1e-6: agreement to the conditioning


def test_bad_sigma_and_dimensions():
    A, b = _iid(1, 3, 6)[0]  # 3 rows, 6 features: singular Gram
    msgs = {0: client_message(A, b)}
    with pytest.raises(SingularGram, match="use σ > 0"):
        fuse(msgs, 0.0)
    with pytest.raises(ValueError, match="sigma"):
        fuse(msgs, -1.0)
    assert torch.isfinite(fuse(msgs, 1e-3)).all()
    with pytest.raises(ValueError, match="do not match"):
        one_shot([(A, b), (torch.ones(2, 5, dtype=D64), torch.ones(2, dtype=D64))])
    with pytest.raises(ValueError, match="no client"):
        fuse({}, 0.1)


def test_dropout_fusion_is_oracle_on_participants():
    data = _heterogeneous(12, 10, 9, seed=5)
    present = dropout_mask(12, 0.5, seed=1)
    assert 0 < len(present) < 12
    sub = [data[k] for k in present]
    w, info = one_shot(sub, 0.05)
    ref = _sk(sub, 0.05)
    assert info["clients"] == len(present)
    assert float((w - ref).norm() / ref.norm()) < 1e-10
    assert dropout_mask(12, 1.0) == []
    with pytest.raises(ValueError, match="no clients answered"):
        one_shot([], 0.05)


def test_ridge_linear_problem_gn_step_is_fusion():
    p = get_problem("ridge-linear", dim=8, n_samples=30, sigma=0.2)
    objs = p.client_objectives(4, seed=1)
    theta0 = p.init_params(0)
    assert theta0.dtype == D64 and not theta0.any() and p.network().n_params == 8
    stats = [o.gn_stats(theta0) for o in objs]
    H = sum(s.H for s in stats)
    g = sum(s.g for s in stats)
    w_gn = theta0 - linalg.damped_solve(H, g)  # one exact GN step on the objective with the penalty rows
    w_fused, _ = one_shot(p.client_data(4, seed=1), 0.2)
    assert float((w_gn - w_fused).norm() / w_fused.norm()) < 1e-12
    assert p.evaluate(w_fused)["mse"] < 0.1
    # deterministic, test rows held out (24 train rows per client)
    A1, b1 = p.client_data(4, seed=1)[0]
    assert A1.shape == (24, 8) and torch.equal(A1, p.client_data(4, seed=1)[0][0])
    assert p.test_data()[0].shape == (24, 8)
    with pytest.raises(ProblemError, match="heterogeneity"):
        get_problem("ridge-linear", heterogeneity=1.5)


def test_solve_gn_reaches_the_fused_model_in_one_round():
    from fedsciml.api import solve

    p = get_problem("ridge-linear", dim=6, n_samples=20, sigma=0.05)
    w_fused, _ = one_shot(p.client_data(3, seed=0), 0.05)
    res = solve(p, "gn", clients=3, seed=0, rounds=1)  # linear residuals: the first LM step is undamped
    assert float((res.theta - w_fused).norm() / w_fused.norm()) < 1e-10
    assert res.final["mse"] == pytest.approx(p.evaluate(w_fused)["mse"], rel=1e-9)


def test_ridge_rff_is_federated_the_same_way():
    p = get_problem("ridge-rff", rff_dim=60, n_samples=80, input_dim=2)
    data = p.client_data(5, seed=2)
    assert data[0][0].shape == (64, 60)
    w, _ = one_shot(data, 0.01)
    assert float((w - _sk(data, 0.01)).norm() / w.norm()) < 1e-10
    _, b_test = p.test_data()
    assert p.evaluate(w)["mse"] < 0.5 * float(b_test.var())  # the nonlinear target is learned


def test_estimator_fit_groups_and_predict():
    data = _iid(4, 20, 5, seed=7)
    X = torch.cat([a for a, _ in data])
    y = torch.cat([b for _, b in data])
    groups = torch.arange(4).repeat_interleave(20).numpy()
    X, y = X.numpy(), y.numpy()
    est = FederatedRidge(alpha=0.5, fit_intercept=False).fit(X, y, sites=groups)
    assert float(np.linalg.norm(est.coef_ - _sk(data, 0.5).numpy())) < 1e-10
    assert est.predict(X[:3]).shape == (3,) and est.score(X, y) > 0.5
    cv = FederatedRidgeCV(alphas=[1e-3, 1.0, 1e3], fit_intercept=False).fit(X, y, sites=groups)
    assert cv.alpha_ in (1e-3, 1.0)
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError, match="not fitted"):
        FederatedRidge().predict(X)


def test_ridge_cli_table_and_json(tmp_path, capsys):
    from fedsciml.cli import main

    out = tmp_path / "r.json"
    # the command line's own main (what python -m fedsciml runs) in this process: a subprocess cost ~4 CPU-s to start
    code = main(["ridge", "--clients", "3", "--dim", "6", "--n-samples", "20", "--device", "cpu", "--json", str(out)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "one-shot" in cap.out and "centralized" in cap.out
    from fedsciml.runtime.results import Result

    runs = [Result.from_dict(d) for d in json.loads(out.read_text())["runs"]]  # solve's JSON layout
    one, central = runs[0], runs[1]
    assert (one.method, central.method) == ("one-shot", "centralized") and one.options["penalty"] == "server"
    assert one.final["rel_error"] < 1e-10 and abs(one.final["mse"] - one.final["mse_central"]) < 1e-12
    # θ down, then pack(G), g, loss and count up, per client (the runtime's gn-schema message)
    assert one.history[-1]["floats_sent"] == 3 * (21 + 6 + 2) + 3 * 6 and one.extra["stopped_by"] == "one-shot"
    for bad in (["--sigma", "-1"], ["--dropout", "1"], ["--heterogeneity", "2"], ["--cv-sigmas", "0:1:3"],
                ["--clients", "1", "--cv-sigmas", "1e-3:1:3"]):
        code = main(["ridge", "--clients", "2", "--dim", "3", "--n-samples", "10", "--device", "cpu", *bad])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("error:") and err.count("\n") == 1, (bad, err)
