"""Central DP through Flower's SecAgg+ (:mod:`fedsciml.engines.flower.secagg`).

* the fixed-point sum of Flower's own quantize / dequantize (its public functions, the arithmetic SecAgg+ runs)
  is within :func:`fedsciml.core.dp.secure_sum_error_bound` of the float64 sum, at the range's edges too;
* a site refuses when it holds more rows than the public bound, or would be clipped;
* one Flower simulation (``flwr run`` of the SecAgg+ App on a simulation SuperLink, as ``--engine flower`` runs
  it): what the server received from each site (recorded by a wrapped Grid) is masked — it matches no site's
  clipped statistics — and the fused model equals the in-process central-DP model (whose sites draw the same
  noise shares) within the documented bound (a tolerance: SecAgg+ rounds stochastically).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

import fedsciml as fs  # noqa: E402
from fedsciml.core import dp as _dp  # noqa: E402
from fedsciml.engines.flower import secagg  # noqa: E402
from fedsciml.runtime.client import Client  # noqa: E402

K = 3
OPTS = dict(dp_epsilon=2.0, dp_central=True, sigma=0.5)


def _problem():
    return fs.get_problem("ridge-linear", dim=6, n_samples=40, penalty="server", sigma=0.5)


def _job(problem, **extra):
    return {"kind": "solve", "problem": problem.name, "problem_options": dict(problem.options), "method": "one-shot",
            "clients": K, "seed": 3, "options": dict(OPTS), **extra}


def _site_vectors(problem, pl):
    objs = problem.client_objectives(K, seed=3)
    theta0 = problem.init_params(3)
    return [secagg.site_vector(Client(k, o), theta0, pl) for k, o in enumerate(objs)]


def test_flower_fixed_point_sum_is_within_the_documented_bound():
    """Flower's quantize (stochastic rounding into [0, T]) of each site's vector, the integer sum, its dequantize
    and offset, divided by the summed weights and multiplied back by K': within K'·2c/T + 16·K'·c·2⁻⁵² of the
    float64 sum — vectors at ±c included."""
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    rng = np.random.default_rng(0)
    for K_, c in ((2, 1.0), (3, 1000.0), (7, 40.0)):
        T = _dp.quantization_range(K_)
        assert K_ * T < _dp.MODULUS_RANGE and T <= 2**31 - 1
        xs = [rng.uniform(-c, c, 257) for _ in range(K_)]
        xs[0][:2] = (c, -c)
        q = sum(quantize([x], c, T)[0].astype(np.int64) for x in xs) % _dp.MODULUS_RANGE   # no wrap: K·T < M
        mean = dequantize([q], c, T)[0]
        mean += -(K_ - 1) * c                       # SecAgg+'s offset, then ×T/Σq (Σq = K'·T), then our ×K'
        got = mean * (T / (K_ * T)) * K_
        err = np.abs(got - np.sum(xs, axis=0)).max()
        bound = _dp.secure_sum_error_bound(K_, c, T)
        assert err <= bound, (K_, c, err, bound)
        assert err > bound / 1e3   # the bound is not vacuous: the error is of its order


def test_model_error_bound_holds_for_perturbed_sums():
    """Two fused sums whose entries differ by ≤ B: their repaired ridge solutions differ by at most
    (√d·B + d·B·‖w‖)/σ (checked on a random perturbation at the full ±B)."""
    from fedsciml.core.stats import ridge_solve

    g = torch.Generator().manual_seed(1)
    d, B, sigma = 9, 1e-3, 0.3
    A = torch.randn(30, d, dtype=torch.float64, generator=g)
    G, h = A.T @ A, A.T @ torch.randn(30, dtype=torch.float64, generator=g)
    E = B * torch.sign(torch.randn(d, d, dtype=torch.float64, generator=g))
    E = torch.triu(E) + torch.triu(E, 1).T
    w = ridge_solve(_dp.psd_repair(G)[0], h, sigma)
    w2 = ridge_solve(_dp.psd_repair(G + E)[0], h + B, sigma)
    assert float((w - w2).norm()) <= _dp.model_error_bound(d, w, sigma, B)
    assert _dp.model_error_bound(d, w, 0.0, B) == math.inf


def test_a_site_refuses_more_rows_than_the_public_bound_or_a_clipped_entry():
    problem = _problem()
    with pytest.raises(ValueError, match=f"dp_max_rows=10 is below the {problem.n_train()} rows each site"):
        secagg.plan(_job(problem, options={**OPTS, "dp_max_rows": 10}), problem)  # a zoo problem's rows are public
    pl = secagg.plan(_job(problem, options={**OPTS, "dp_max_rows": 10}), None)  # a site's own table: it refuses
    with pytest.raises(ValueError, match="more than the public bound dp_max_rows=10"):
        _site_vectors(problem, pl)
    pl = secagg.plan(_job(problem), problem)
    assert pl["max_rows"] == problem.n_train() and pl["survivors"] == K
    with pytest.raises(ValueError, match="exceeds SecAgg\\+'s clipping range"):
        _site_vectors(problem, {**pl, "clipping_range": 1e-3})
    with pytest.raises(ValueError, match="cross-validation"):
        secagg.plan(_job(problem, options={**OPTS, "cv_sigmas": [0.1, 1.0]}), problem)


def test_a_loose_row_bound_is_refused_before_any_engine_starts(monkeypatch):
    """Issue 31 #2: SecAgg+'s per-entry error bound ``K·2c/T`` grows with ``c ∝ dp_max_rows``; a bound whose
    rounding would exceed a tenth of the DP noise's std is refused in one line naming the largest bound that
    passes — by the process that starts the run, before Flower or Ray (``run_jobs`` is never reached)."""
    from fedsciml.engines.flower import simulation

    problem = _problem()
    monkeypatch.setattr(simulation, "run_jobs", lambda *a, **k: pytest.fail("an engine was started"))
    for rows in (10**9, 10**12):
        with pytest.raises(ValueError, match=r"fixed-point error up to .* more than 0.1 × the DP noise's std .*"
                                             r"give dp_max_rows ≤ [0-9,]+"):
            simulation.solve(problem, "one-shot", clients=K, **{**OPTS, "dp_max_rows": rows})
    # the largest bound named passes, and its error bound is within the stated fraction of the noise
    with pytest.raises(ValueError) as e:
        secagg.plan(_job(problem, options={**OPTS, "dp_max_rows": 10**9}), problem)
    m_max = int(str(e.value).rsplit("≤ ", 1)[1].split(" ")[0].replace(",", ""))
    pl = secagg.plan(_job(problem, options={**OPTS, "dp_max_rows": m_max}), problem)
    noise = _dp.DPConfig(**pl["dp"]).noise_std
    bound = _dp.secure_sum_error_bound(K, pl["clipping_range"], pl["quantization_range"])
    assert bound <= 0.1 * noise
    with pytest.raises(ValueError, match="fixed-point error"):
        secagg.plan(_job(problem, options={**OPTS, "dp_max_rows": m_max + 1}), problem)
    # where the row bound is one a site can honour (the default, the zoo's own rows), the rounding is negligible
    pl = secagg.plan(_job(problem), problem)
    assert _dp.secure_sum_error_bound(K, pl["clipping_range"], pl["quantization_range"]) < 1e-6 * noise


def _unequal_tables(root):
    """Three site tables, the last with more rows (45) than the runs' public bound dp_max_rows = 40."""
    rng = np.random.default_rng(0)
    paths = []
    for k, n in enumerate([30, 30, 45]):
        X = 0.2 * rng.normal(size=(n, 4))
        y = 0.3 * X.sum(1) + 0.05 * rng.normal(size=n)
        paths.append(str(root / f"site{k}.npz"))
        np.savez(paths[-1], X=X, y=y)
    return paths


@pytest.fixture(scope="module")
def flower_runs(tmp_path_factory):
    """One ``flwr run`` of the SecAgg+ App (as ``--engine flower`` starts it) with three jobs: ridge-linear with the
    server's view recorded; site tables where site 2 exceeds dp_max_rows, with t = 2 (tolerates it) and with
    t = 3 (must fail, releasing nothing)."""
    from fedsciml.engines.flower.resultio import read_result
    from fedsciml.engines.flower.simulation import EngineFailed, run_jobs

    root = tmp_path_factory.mktemp("secagg")
    problem = _problem()
    audit = str(root / "seen.npz")
    tables = _unequal_tables(root)
    tprob = fs.get_problem("table", tables=tables)
    drop = dict(OPTS, dp_max_rows=40, fit_intercept=True)
    jobs = [{**_job(problem, audit=audit)},
            {**_job(tprob, options={**drop, "dp_min_survivors": 2})},
            {**_job(tprob, options={**drop, "dp_min_survivors": 3})}]
    jobs = [{**j, "table": False, "timeout": 120.0, "connect_timeout": 120.0} for j in jobs]
    with pytest.raises(EngineFailed) as failed:
        run_jobs(jobs, K, wait_s=300.0, workdir=str(root), app=secagg.APP_DIR)
    return {"main": (read_result(str(root / "job0")), jobs[0], problem, audit),
            "dropout": (read_result(str(root / "job1")), tables, drop), "failed": str(failed.value)}


def test_secagg_tolerates_dropouts_down_to_t_and_fails_below(flower_runs):
    """Site 2 refuses (more rows than dp_max_rows): with t = 2 the sum of the other two sites' shares carries the
    calibrated noise and is released — the in-process fit of those two sites with t = 2, within the bound; with
    t = 3 the run fails in one line and releases nothing."""
    res, tables, drop = flower_runs["dropout"]
    assert res.extra["arrived"] == 2 and res.extra["noise_shares"] == 2
    assert res.extra["noise_std_total"] == pytest.approx(res.extra["noise_std"])
    two = fs.get_problem("table", tables=tables[:2])
    local = fs.solve(two, "one-shot", clients=2, seed=3, **{**drop, "dp_min_survivors": 2})
    assert float((res.theta - local.theta).norm()) <= res.extra["secagg_model_bound"] < 1e-3
    assert res.extra["intercept"] == pytest.approx(local.extra["intercept"], abs=res.extra["secagg_model_bound"])
    assert "no sum was released" in flower_runs["failed"]


def test_secagg_on_flower_masks_each_site_and_fuses_the_in_process_central_dp_model(flower_runs):
    res, job, problem, audit = flower_runs["main"]
    local = fs.solve(problem, "one-shot", clients=K, seed=3, **OPTS)   # the same shares, summed in the clear

    # the fused model: the in-process central-DP model within the documented bound
    assert res.extra["arrived"] == K and res.extra["secure_sum"] == "SecAgg+"
    bound = res.extra["secagg_model_bound"]
    pl = secagg.plan(job, problem)
    assert bound == pytest.approx(_dp.model_error_bound(
        6, res.theta, res.extra["sigma_used"],
        _dp.secure_sum_error_bound(K, pl["clipping_range"], pl["quantization_range"])))
    assert 0 < bound < 1e-3
    assert float((res.theta - local.theta).norm()) <= bound
    assert float((res.theta - local.theta).norm()) > 0   # a stochastic fixed-point sum, not the float sum

    # the server's view of each site: a masked vector that matches no site's clipped, share-noised statistics
    with np.load(audit, allow_pickle=False) as z:
        seen = [z[k] for k in z.files]
    assert len(seen) == K
    c, T = pl["clipping_range"], pl["quantization_range"]
    for x in _site_vectors(problem, pl):
        pre = (x + c) * T / (2 * c)                      # the site's fixed-point values before masking
        for v in seen:
            assert v.shape == (x.size + 1,)              # the weight factor, then the vector
            masked = v[1:]
            assert np.mean((masked == np.floor(pre)) | (masked == np.ceil(pre))) < 0.05
            assert np.mean(masked > T) > 0.15            # masks uniform on [0, M = 2³²): about half beyond T
            deq = masked * (2 * c / T) - c
            assert np.median(np.abs(deq - x)) > 10 * pl["share_std"]   # nothing near the statistics
    assert math.isfinite(res.final["mse"])
