"""The one-shot runtime's unpenalized intercept (``fit_intercept``): exact from each site's count, means and
centered scatter (:mod:`fedsciml.core.centered`), equal to scikit-learn's ``Ridge(fit_intercept=True)`` on the
pooled rows (independent reference, tolerance: different operations); under DP an unpenalized constant column.
Without ``fit_intercept`` the run is the original path (the ``gn_stats`` query), numbers unchanged."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge

import fedsciml as fs
from fedsciml.ridge import FederatedRidgeCV


@pytest.fixture(scope="module")
def diabetes_sites(tmp_path_factory):
    """scikit-learn's diabetes table: 3 site tables (npz) and a held-out test table."""
    d = load_diabetes()
    X, y = d.data, d.target
    rng = np.random.default_rng(0)
    test = rng.random(len(y)) < 0.2
    site = rng.integers(0, 3, len(y))
    root = tmp_path_factory.mktemp("sites")
    paths = []
    for s in range(3):
        p = str(root / f"site{s}.npz")
        np.savez(p, X=X[~test & (site == s)], y=y[~test & (site == s)])
        paths.append(p)
    tp = str(root / "test.npz")
    np.savez(tp, X=X[test], y=y[test])
    return paths, tp, X[~test], y[~test], X[test], y[test]


def _rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(np.asarray(b)).max(), 1e-300))


@pytest.mark.parametrize("sigma", [1e-3, 0.5, 10.0])
def test_one_shot_intercept_equals_sklearn_ridge_on_pooled_rows(diabetes_sites, sigma):
    paths, tp, X, y, Xt, yt = diabetes_sites
    prob = fs.get_problem("table", tables=paths, test_table=tp)
    res = fs.solve(prob, "one-shot", clients=3, sigma=sigma, fit_intercept=True)
    ref = Ridge(alpha=sigma, fit_intercept=True, solver="cholesky").fit(X, y)
    assert _rel(res.theta.numpy(), ref.coef_) < 1e-10
    assert abs(res.extra["intercept"] - ref.intercept_) / abs(ref.intercept_) < 1e-10
    mse = float(np.mean((ref.predict(Xt) - yt) ** 2))
    assert res.final["mse"] == pytest.approx(mse, rel=1e-10)   # evaluated with the intercept
    assert res.history[1]["floats_up"] == 3 * (1 + 11 + 11 * 12 // 2 + 1)   # n, means, centered S, loss


def test_one_shot_intercept_cv_is_the_estimators_leave_one_site_out_choice(diabetes_sites):
    paths, tp, X, y, *_ = diabetes_sites
    grid = np.logspace(-4, 1, 11)
    prob = fs.get_problem("table", tables=paths, test_table=tp)
    res = fs.solve(prob, "one-shot", clients=3, cv_sigmas=list(grid), fit_intercept=True)
    tables = [np.load(p, allow_pickle=False) for p in paths]
    est = FederatedRidgeCV(alphas=grid).fit_clients([(t["X"], t["y"]) for t in tables])
    assert res.extra["sigma_used"] == pytest.approx(est.alpha_, rel=1e-12)
    assert _rel(res.extra["cv_loss"], est.cv_loss_) < 1e-10
    assert _rel(res.theta.numpy(), est.coef_) < 1e-10
    assert res.extra["intercept"] == pytest.approx(est.intercept_, rel=1e-10)


def test_intercept_under_dp_is_an_unpenalized_constant_column(diabetes_sites):
    """At ε = ∞ with bounds that never bind, the DP path (rows [x, κ], clipped, Gram form, the constant column's
    coordinate unpenalized) is the same ridge fit as scikit-learn's with an intercept; CV with it is refused."""
    paths, tp, X, y, *_ = diabetes_sites
    prob = fs.get_problem("table", tables=paths)
    res = fs.solve(prob, "one-shot", clients=3, sigma=0.5, fit_intercept=True, dp_epsilon=float("inf"),
                   dp_clip_a=1e3, dp_clip_b=1e4)
    ref = Ridge(alpha=0.5).fit(X, y)
    assert _rel(res.theta.numpy(), ref.coef_) < 1e-8
    assert res.extra["intercept"] == pytest.approx(ref.intercept_, rel=1e-8)
    with pytest.raises(ValueError, match="give sigma with fit_intercept and DP"):
        fs.solve(prob, "one-shot", clients=3, cv_sigmas=[0.1, 1.0], fit_intercept=True, dp_epsilon=2.0)


def test_without_intercept_the_original_path_runs():
    """No ``fit_intercept``: the plain ``gn_stats`` exchange (no transform), so the numbers are those of before
    (bitwise: the same operations); with it on a zoo problem the test MSE counts the intercept."""
    prob = fs.get_problem("ridge-linear", dim=5, n_samples=30)
    a = fs.solve(prob, "one-shot", clients=3)
    b = fs.solve(prob, "one-shot", clients=3)
    assert torch.equal(a.theta, b.theta) and "intercept" not in a.extra
    assert a.history[1]["floats_up"] == 3 * (5 * 6 // 2 + 5 + 2)   # pack(H), g, loss, n
    c = fs.solve(prob, "one-shot", clients=3, fit_intercept=True)
    prob.client_data(3, seed=0)   # the test rows of the 3-client split the run used
    A, y = prob.test_data()
    assert c.final["mse"] == pytest.approx(float(((A @ c.theta + c.extra["intercept"] - y) ** 2).mean()), rel=1e-12)
    with pytest.raises(ValueError, match="method 'one-shot' does not apply to a problem of kind 'pinn'"):
        fs.solve("bratu", "one-shot", clients=2, fit_intercept=True)   # linear residuals only (kind ridge)


def test_solve_one_shot_out_writes_the_intercept(diabetes_sites, tmp_path, capsys):
    from fedsciml.cli import main
    from fedsciml.ridge.model_io import read_model

    paths, tp, X, y, Xt, _ = diabetes_sites
    out = str(tmp_path / "model")
    assert main(["solve", "table", "--tables", ",".join(paths), "--clients", "3", "--method", "one-shot",
                 "--fit-intercept", "--method-sigma", "0.5", "--out", out]) == 0
    capsys.readouterr()
    coef, intercept, meta = read_model(out)
    ref = Ridge(alpha=0.5).fit(X, y)
    assert meta["fit_intercept"] is True and _rel(coef.numpy(), ref.coef_) < 1e-10
    assert intercept == pytest.approx(ref.intercept_, rel=1e-10)
    assert np.allclose(fs.load_model(out)(torch.as_tensor(Xt)).numpy(), ref.predict(Xt), rtol=1e-10, atol=1e-8)


@pytest.mark.parametrize("sigma", [1e-3, 1.0])
def test_one_shot_intercept_loss_is_sklearns_half_mse(diabetes_sites, sigma):
    """Issue 30 item 2: the history's loss with ``fit_intercept`` is the model's (θ, β₀) training ½·MSE — the
    sites' loss query knows θ but not β₀, so the strategy computes it from the pooled centered statistics.
    Reference: scikit-learn's Ridge on the pooled rows, ½·mean((Xβ + β₀ − y)²); tolerance: different operations
    (centered scatter vs residuals) on a well-conditioned 10-feature problem, relative 1e-9."""
    paths, tp, X, y, *_ = diabetes_sites
    res = fs.solve(fs.get_problem("table", tables=paths), "one-shot", clients=3, sigma=sigma, fit_intercept=True)
    ref = Ridge(alpha=sigma, fit_intercept=True, solver="cholesky").fit(X, y)
    half_mse = 0.5 * float(np.mean((ref.predict(X) - y) ** 2))
    assert res.history[-1]["loss"] == pytest.approx(half_mse, rel=1e-9)
    assert res.history[-1]["loss"] < res.history[0]["loss"]   # below the loss at θ = 0, β₀ = 0
