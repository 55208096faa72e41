"""What leaves a site under DP: exactly the noised statistics, CV included (issue 21, item 2).

A counting transport wraps the in-process clients and records every float of every reply, by client and
query; the run is ``solve(..., "one-shot", dp_epsilon=2, cv_sigmas=...)`` on its round loop — the path of
``python -m fedsciml solve ridge-linear --method one-shot --dp-epsilon 2 --cv-sigmas ...``.
"""
import math

import pytest
import torch

from fedsciml.runtime.client import Client
from fedsciml.methods.oneshot import OneShotStrategy
from fedsciml.runtime.loop import RoundConfig, Simulation
from fedsciml.runtime.transport import LocalTransport, Reply, Transport
from fedsciml.core.objective import LinearLeastSquares
from fedsciml.problems import get_problem
from fedsciml.ridge import DPConfig
from fedsciml.core.loco import validation_losses


class Counting(Transport):
    def __init__(self, inner):
        self.inner = inner
        self.client_ids, self.sample_counts = inner.client_ids, inner.sample_counts
        self.sent = {}       # cid -> floats sent up (every reply, every query)
        self.queries = []

    def ask(self, client_ids, request):
        self.queries.append(request.query)
        out = self.inner.ask(client_ids, request)
        for c, rep in out.items():
            if isinstance(rep, Reply):
                self.sent[c] = self.sent.get(c, 0) + sum(int(t.numel()) for t in rep.message.values())
        return out


def _run(data, sigmas, dp, project=None):
    tr = Counting(LocalTransport([Client(c, LinearLeastSquares(A, b)) for c, (A, b) in enumerate(data)]))
    strategy = OneShotStrategy(0.0, dp=dp, cv_sigmas=sigmas, project=project, seed=3)
    sim = Simulation(tr, lambda theta: {}, RoundConfig(rounds=None, seed=3), label="one-shot")
    d = data[0][0].shape[1]
    w, _, _ = sim.run(strategy, torch.zeros(d, dtype=torch.float64))
    return w, tr, strategy.info()


@pytest.mark.parametrize("project", [None, 4])
def test_dp_cv_sends_exactly_the_noised_statistics(project):
    p = get_problem("ridge-linear", dim=7, n_samples=40)
    data = p.client_data(5, seed=1)
    sigmas = [1e-3, 1e-2, 1e-1, 1.0, 10.0]
    w, tr, info = _run(data, sigmas, DPConfig(epsilon=2.0, delta=1e-5), project)
    m = project or 7
    assert tr.queries == ["oneshot_stats"]      # one exchange: no CV round, no monitoring loss asked of the sites
    assert tr.sent == {c: m * (m + 1) // 2 + m for c in range(5)}  # packed noisy G_k and h_k, nothing more
    assert info["cv_scored"] == 5 and info["sigma_used"] in sigmas and torch.isfinite(w).all()


def test_exact_cv_scores_equal_the_clients_own_losses():
    # without noise the server's scores are the held-out squared errors the clients would compute
    p = get_problem("ridge-linear", dim=6, n_samples=30)
    data = p.client_data(4, seed=2)
    sigmas = [1e-2, 1.0, 100.0]
    _, tr, info = _run(data, sigmas, None)
    assert tr.queries.count("oneshot_stats") == 1 and set(tr.queries) <= {"oneshot_stats", "loss"}  # loss: monitoring
    ref = torch.zeros(len(sigmas), dtype=torch.float64)
    for k, (A, b) in enumerate(data):
        rest = [x for j, x in enumerate(data) if j != k]
        Ar, br = torch.cat([a for a, _ in rest]), torch.cat([y for _, y in rest])
        W = torch.stack([torch.linalg.solve(Ar.T @ Ar + s * torch.eye(6, dtype=Ar.dtype), Ar.T @ br) for s in sigmas])
        ref += validation_losses(A, b, W)
    assert torch.allclose(torch.tensor(info["cv_loss"], dtype=torch.float64), ref, rtol=1e-9)


def test_solve_reports_the_true_epsilon():
    import fedsciml as fs

    prob = get_problem("ridge-linear", dim=5, n_samples=30, penalty="server")
    res = fs.solve(prob, "one-shot", clients=4, seed=0, dp_epsilon=2.0, cv_sigmas=[1e-2, 1.0, 100.0])
    K, d = 4, 5
    # the statistics are the whole release: floats up = K noised messages, and ε is the mechanism's own
    assert res.history[-1]["floats_up"] == K * (d * (d + 1) // 2 + d)
    assert math.isclose(DPConfig(2.0, 1e-5).epsilon, 2.0)


def test_dp_fedavg_does_not_ask_the_sites_for_their_losses():
    from fedsciml.ridge.baselines import fedavg

    data = get_problem("ridge-linear", dim=4, n_samples=20).client_data(3, seed=0)
    _, _, info = fedavg(data, rounds=2, dp={"epsilon": 2.0, "delta": 1e-5, "clip": 1.0})
    assert all(math.isnan(r["loss"]) for r in info["rows"])       # not measured: no release outside the accountant
    _, _, info = fedavg(data, rounds=2)
    assert all(math.isfinite(r["loss"]) for r in info["rows"])
