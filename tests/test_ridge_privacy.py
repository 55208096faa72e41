"""DP for ridge: calibration achieves (ε, δ), joint sensitivity, symmetric noise, PSD repair, central vs local, DP-FedAvg."""
import math

import pytest
import torch
from scipy.stats import norm

from fedsciml.core import linalg, privacy
from fedsciml.ridge import DPConfig, client_message, one_shot, psd_repair, stats_sensitivity
from fedsciml.ridge.baselines import fedavg
from fedsciml.core.dp import noise_like

D64 = torch.float64
EPS = [0.1, 0.5, 1.0, 2.0, 5.0, 10.0]


@pytest.mark.parametrize("eps", EPS)
def test_analytic_calibration_achieves_target(eps):
    delta = 1e-5
    z = privacy.noise_multiplier(eps, delta)
    # independent closed form of the Gaussian privacy profile (Balle & Wang 2018, Thm 8), written out here
    mu = 1.0 / z
    d_of = lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2)  # noqa: E731
    assert d_of(eps) == pytest.approx(delta, rel=1e-6)
    assert d_of(eps * 0.99) > delta  # tight: a smaller ε is not achieved
    assert privacy.epsilon_of(z, delta) == pytest.approx(eps, rel=1e-9)
    # Opacus's accountants on the same single release: PRV's upper bound is within its default discretization
    # error (0.01 absolute) above the target, RDP never below it (its (ε, δ) conversion is conservative)
    assert eps - 1e-6 <= privacy.epsilon_of(z, delta, "prv") <= eps + 0.015
    assert privacy.epsilon_of(z, delta, "rdp") >= eps * (1 - 1e-9)
    if eps < 1:  # the classical formula is valid (and looser) only for ε < 1
        assert privacy.noise_multiplier(eps, delta, "classical") > z
    else:
        with pytest.raises(ValueError, match="ε < 1"):
            privacy.noise_multiplier(eps, delta, "classical")


def test_calibration_edge_cases():
    assert privacy.noise_multiplier(math.inf, 1e-5) == 0.0
    for bad in [(0.0, 1e-5), (-1, 1e-5), (1.0, 0.0), (1.0, 1.5)]:
        with pytest.raises(ValueError):
            privacy.noise_multiplier(*bad)
    with pytest.raises(ValueError, match="compositions"):
        privacy.noise_multiplier(1.0, 1e-5, "analytic", steps=10)
    z = privacy.noise_multiplier(2.0, 1e-5, "rdp", steps=50)
    assert privacy.epsilon_of(z, 1e-5, "rdp", steps=50) == pytest.approx(2.0, rel=0.01)


def _packed_isometric(msg):
    d = msg["h"].numel()
    i, j = torch.triu_indices(d, d)
    scale = torch.where(i == j, 1.0, math.sqrt(2.0)).to(D64)
    return torch.cat([msg["h"], scale * msg["G"]])


def test_joint_sensitivity_bound_and_tightness():
    g = torch.Generator().manual_seed(0)
    d, c_a, c_b = 6, 1.5, 0.7
    A, b = privacy.clip_rows(3 * torch.randn(40, d, generator=g, dtype=D64), 3 * torch.randn(40, generator=g, dtype=D64),
                             c_a, c_b)
    assert (A.norm(dim=1) <= c_a + 1e-12).all() and (b.abs() <= c_b + 1e-12).all()
    base = _packed_isometric(client_message(A, b, with_count=False))
    delta = stats_sensitivity(c_a, c_b)
    for i in range(40):  # remove one row
        keep = torch.arange(40) != i
        v = _packed_isometric(client_message(A[keep], b[keep], with_count=False))
        assert float((v - base).norm()) <= delta + 1e-12
    worst = torch.zeros(1, d, dtype=D64)
    worst[0, 2] = c_a
    v = _packed_isometric(client_message(torch.cat([A, worst]), torch.cat([b, torch.tensor([c_b], dtype=D64)])))
    assert float((v - base).norm()) == pytest.approx(delta, rel=1e-12)


def test_scale_clipping_keeps_the_linear_relation():
    A = torch.tensor([[3.0, 4.0], [0.1, 0.2]], dtype=D64)
    w = torch.tensor([0.2, 0.1], dtype=D64)
    Ac, bc = privacy.clip_rows(A, A @ w, 1.0, 1.0, "scale")
    assert torch.allclose(Ac @ w, bc) and float(Ac[0].norm()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="mode"):
        privacy.clip_rows(A, A @ w, mode="nope")


def test_noise_is_symmetric_with_frobenius_variances():
    d, s = 5, 2.0
    g = torch.Generator().manual_seed(1)
    E = torch.stack([linalg.unpack_upper(noise_like(d, s, g)["G"], d) for _ in range(4000)])
    assert torch.equal(E, E.transpose(1, 2))
    var = E.var(0)
    diag = var.diagonal().mean()
    off = var[~torch.eye(d, dtype=torch.bool)].mean()
    assert float(diag) == pytest.approx(s * s, rel=0.06)
    assert float(off) == pytest.approx(s * s / 2, rel=0.06)


def test_psd_repair_is_projection():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(6, 6, generator=g, dtype=D64)
    M = X + X.T
    P, n = psd_repair(M)
    lam, V = torch.linalg.eigh(M)
    assert n == int((lam < 0).sum()) > 0
    assert torch.linalg.eigvalsh(P).min() > -1e-12
    assert torch.allclose(P, (V * lam.clamp_min(0)) @ V.T, atol=1e-12)
    Q, n0 = psd_repair(X @ X.T)
    assert n0 == 0 and torch.allclose(Q, X @ X.T)


def _small_data(K, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(4, generator=g, dtype=D64)
    out = []
    for _ in range(K):
        A = 0.4 * torch.randn(50, 4, generator=g, dtype=D64)
        out.append((A, A @ w + 0.05 * torch.randn(50, generator=g, dtype=D64)))
    return out


def test_central_dp_error_is_sqrt_k_smaller():
    K = 16
    data = _small_data(K)
    exact, _ = one_shot(data, 1.0, dp=DPConfig(math.inf))
    errs = {}
    for central in (False, True):
        cfg = DPConfig(2.0, 1e-5, central=central)
        e = [float((one_shot(data, 1.0, dp=cfg, seed=s, repair=False)[0] - exact).norm()) for s in range(30)]
        errs[central] = sum(e) / len(e)
    assert 2.5 < errs[False] / errs[True] < 6.0  # √16 = 4


def test_dp_one_shot_properties():
    data = _small_data(4)
    cfg = DPConfig(1.0, 1e-5)
    assert cfg.noise_std == pytest.approx(privacy.noise_multiplier(1.0, 1e-5) * math.sqrt(2))
    w1, info = one_shot(data, 0.1, dp=cfg, seed=3)
    w2, _ = one_shot(data, 0.1, dp=cfg, seed=3)
    # bitwise: the same call twice (same seeded per-client noise, same operations)
    assert torch.equal(w1, w2) and info["noise_std"] > 0 and info["floats_up_per_client"] == 10 + 4  # no count sent
    with pytest.raises(ValueError, match="epsilon"):
        DPConfig(0.0)


def test_dp_fedavg_spends_exactly_its_budget():
    data = _small_data(3, seed=4)
    w, hist, info = fedavg(data, rounds=5, local_epochs=2, dp={"epsilon": 2.0, "delta": 1e-5, "clip": 1.0})
    assert info["dp_steps"] == 10
    assert 0.98 * 2.0 <= info["dp_epsilon_rdp"] <= 2.0 * 1.001
    assert torch.isfinite(w).all()
