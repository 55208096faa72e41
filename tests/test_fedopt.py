"""FedAvgM / FedAdam / FedYogi (fedsciml.methods.fedopt): the server step against an independent NumPy
transcription of Reddi et al. 2021, Algorithm 2, and the methods on PDE, fitting and ridge problems."""
import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.methods import METHODS
from fedsciml.methods.fedopt import ServerOptAggregator


def _messages(rng, K=4, p=7):
    return {c: {"delta": torch.tensor(rng.standard_normal(p)), "n": torch.tensor([float(rng.integers(5, 20))])}
            for c in range(K)}


def _reference(kind, theta, rounds, eta, momentum=0.9, b1=0.9, b2=0.99, tau=1e-3):
    """Algorithm 2 of Reddi et al. 2021 in NumPy (and FedAvgM), written from the paper, not from our code."""
    m = np.zeros_like(theta)
    v = np.full_like(theta, tau ** 2)
    for msgs in rounds:
        n = np.array([float(x["n"][0]) for x in msgs.values()])
        d = np.stack([x["delta"].numpy() for x in msgs.values()])
        delta = (n[:, None] * d).sum(0) / n.sum()
        if kind == "avgm":
            m = momentum * m + delta
            theta = theta + eta * m
            continue
        m = b1 * m + (1 - b1) * delta
        if kind == "adam":
            v = b2 * v + (1 - b2) * delta ** 2
        else:
            v = v - (1 - b2) * delta ** 2 * np.sign(v - delta ** 2)
        theta = theta + eta * m / (np.sqrt(v) + tau)
    return theta


@pytest.mark.parametrize("kind,eta", [("avgm", 0.7), ("adam", 0.05), ("yogi", 0.05)])
def test_server_step_matches_the_paper_algorithm(kind, eta):
    rng = np.random.default_rng(3)
    rounds = [_messages(rng) for _ in range(5)]
    theta0 = rng.standard_normal(7)
    agg = ServerOptAggregator(kind, eta, outlier_ratio=None)
    theta = torch.tensor(theta0)
    for msgs in rounds:
        theta = agg.aggregate(theta, msgs)
    # different summation order than NumPy's: equal to round-off, not bitwise
    np.testing.assert_allclose(theta.numpy(), _reference(kind, theta0, rounds, eta), rtol=1e-12, atol=1e-12)


def test_fedavgm_without_momentum_is_fedavg():
    rng = np.random.default_rng(0)
    msgs = _messages(rng)
    theta = torch.tensor(rng.standard_normal(7))
    ours = ServerOptAggregator("avgm", 1.0, momentum=0.0, outlier_ratio=None).aggregate(theta, msgs)
    fedavg = fs.FedAvgAggregator(outlier_ratio=None).aggregate(theta, msgs)
    torch.testing.assert_close(ours, fedavg, rtol=0, atol=1e-14)  # (θ + Δ) − θ + θ: round-off only


def test_registered_with_their_options_and_a_clear_error():
    assert {"fedavgm", "fedadam", "fedyogi"} <= set(METHODS)
    with pytest.raises(ValueError, match="beta2"):
        fs.solve("sin1d", "fedadam", clients=2, rounds=1, beta2=1.5)
    with pytest.raises(ValueError, match="server_momentum"):
        fs.solve("sin1d", "fedadam", clients=2, rounds=1, server_momentum=0.5)  # a FedAvgM option


@pytest.mark.parametrize("method,problem", [("fedadam", "bratu"), ("fedyogi", "sin1d"), ("fedavgm", "ridge-linear")])
def test_on_a_pde_a_fit_and_ridge(method, problem):
    # each method on one problem kind (a PINN, a fit, ridge), with its default server step
    res = fs.solve(problem, method, clients=3, rounds=8, local_steps=20)
    losses = [r["loss"] for r in res.history]
    assert len(losses) == 9 and all(np.isfinite(losses))
    assert losses[-1] < 0.7 * losses[0], losses
    assert res.extra["strategy"]["server_opt"] == method[3:]


def test_resume_continues_the_server_state_bitwise(tmp_path):
    opts = dict(clients=2, local_steps=10, seed=1)
    full = fs.solve("sin1d", "fedadam", rounds=4, **opts)
    fs.solve("sin1d", "fedadam", rounds=2, checkpoint=str(tmp_path), **opts)
    resumed = fs.solve("sin1d", "fedadam", rounds=4, checkpoint=str(tmp_path), resume=True, **opts)
    # same operations in the same order, (m, v, t) restored from the checkpoint: bitwise
    assert torch.equal(full.theta, resumed.theta)


# FedAdam over Flower against the in-process run: tests/test_flower.py (one job of its shared simulation)
