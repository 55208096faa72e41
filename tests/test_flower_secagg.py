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


def test_a_site_refuses_more_rows_than_the_public_bound_or_a_clipped_entry():
    problem = _problem()
    pl = secagg.plan(_job(problem, options={**OPTS, "dp_max_rows": 10}), problem)
    with pytest.raises(ValueError, match="more than the public bound dp_max_rows=10"):
        _site_vectors(problem, pl)
    pl = secagg.plan(_job(problem), problem)
    assert pl["max_rows"] == problem.n_train() and pl["survivors"] == K
    with pytest.raises(ValueError, match="exceeds SecAgg\\+'s clipping range"):
        _site_vectors(problem, {**pl, "clipping_range": 1e-3})
    with pytest.raises(ValueError, match="cross-validation"):
        secagg.plan(_job(problem, options={**OPTS, "cv_sigmas": "0.1,1"}), problem)


def test_secagg_on_flower_masks_each_site_and_fuses_the_in_process_central_dp_model(tmp_path):
    from fedsciml.engines.flower.simulation import run_jobs

    problem = _problem()
    audit = str(tmp_path / "seen.npz")
    job = {**_job(problem, audit=audit), "table": False, "timeout": 120.0, "connect_timeout": 120.0}
    res = run_jobs([job], K, wait_s=240.0, app=secagg.APP_DIR)[0]
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
