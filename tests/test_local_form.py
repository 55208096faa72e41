"""What a local-training client forms to answer ``update`` is decided once (fedsciml.core.forms.local_client_form)
and the per-client path (``local_update``) and the vectorized in-process path (``ClientBatch``, the ``update``
handler's precompute) follow the same decision: a client over the memory threshold forms no Jacobian either way,
and the vectorized path never evaluates a Jacobian that a client then does not use.

Bitwise comparisons where the operations are the same in the same order: a matrix-free client computes its
message the same way whichever path asked it (the precompute hands it nothing), and a dense client handed its own
``(r_m, J_m)`` evaluates the same functions as one that forms them itself only when the batch does not pool; so
the dense comparison below is at round-off, with tolerances derived from the operations (see the test).
"""
import math

import pytest
import torch

from fedsciml.core import forms
from fedsciml.core.forms import LOCAL_FORMS, local_client_form
from fedsciml.core.matfree import fipa_local_matfree
from fedsciml.core.nn import MLP
from fedsciml.core.objective import PointwiseLeastSquares, ResidualPart
from fedsciml.methods.fipa import FIPAConfig, fipa_ask
from fedsciml.methods.local import LocalConfig, local_update
from fedsciml.runtime.client import Client, ClientBatch
from fedsciml.runtime.transport import LocalTransport, Request

NET = MLP([1, 8, 8, 1])  # p = 97
P = NET.n_params
THETA0 = NET.init(0)


def _fit(theta, point):
    x, y = point
    return NET(theta, x) - y


def make_clients(sizes):
    gen = torch.Generator().manual_seed(0)
    out = []
    for m, n in enumerate(sizes):
        x = (m + torch.rand(n, 1, generator=gen, dtype=torch.float64)) / len(sizes)
        out.append(Client(m, PointwiseLeastSquares([ResidualPart("data", _fit, (x, torch.sin(2 * math.pi * x[:, 0])))],
                                                   P)))
    return out


@pytest.fixture
def threshold(monkeypatch):
    """A machine where a Jacobian of more than 20·P entries does not fit (and no memory is free): a client of
    ≤ 20 rows is dense, one of more rows matrix-free under ``sketch='auto'``."""
    monkeypatch.setattr(forms, "DENSE_FLOOR_ENTRIES", 20 * P)
    monkeypatch.setattr(forms, "available_memory", lambda device=None: 1000)
    return 20


@pytest.fixture
def jacobians(monkeypatch):
    """Counts the residual Jacobians evaluated (any objective, pooled or a client's own), by rows."""
    seen = []
    original = PointwiseLeastSquares.residual_and_jacobian

    def counting(self, theta):
        seen.append(int(self.n_residuals))
        return original(self, theta)

    monkeypatch.setattr(PointwiseLeastSquares, "residual_and_jacobian", counting)
    return seen


def test_the_rule():
    """Every case of the one rule, with a fake free-memory figure (``free``): 4 400 × 33 921 does not fit 4 GiB
    (6 GB to form), 401 × 2 209 is under the dense floor."""
    big, small, gib4 = (4400, 33921), (401, 2209), 4 * 2**30
    assert local_client_form("adam", None, "auto", False, *big, free=gib4) == "none"           # FedAvg, Adam
    assert local_client_form("gn", None, "matfree", False, *big, free=gib4) == "dense"         # FedAvg, local GN
    assert local_client_form("gn", "lowrank", "auto", False, *big, free=gib4) == "matfree"
    assert local_client_form("adam", "lowrank", "auto", False, *big, free=gib4) == "matfree"   # subspace iteration
    assert local_client_form("gn", "lowrank", "auto", False, *small, free=gib4) == "dense"
    assert local_client_form("gn", "lowrank", "dense", False, *big, free=gib4) == "dense"
    assert local_client_form("adam", "lowrank", "matfree", False, 10, 10) == "matfree"
    assert local_client_form("gn", "full", "matfree", False, 10, 10) == "dense"               # the full H_m
    assert local_client_form("gn", "lowrank", "matfree", True, 10, 10) == "dense"             # adaptive: spectrum
    assert set(LOCAL_FORMS) == {"none", "dense", "matfree"}
    # fipa_local_matfree and FIPA's memory estimate are read off the same rule
    assert fipa_local_matfree("gn", "lowrank", "matfree", False, 10, 10)
    assert not fipa_local_matfree("adam", "lowrank", "matfree", False, 10, 10)


def test_the_memory_estimate_follows_the_rule(threshold):
    """FIPA's memory form is the rule's: a local-Adam low-rank client over the threshold keeps a residual graph
    (subspace iteration), not a Jacobian."""
    for local in ("adam", "gn"):
        cfg = FIPAConfig.from_options({"local": local})
        assert cfg.memory_form(40, P, 2) == "graph" and cfg.memory_form(20, P, 2) == "jacobian"
        assert FIPAConfig.from_options({"local": local, "rank": 0}).memory_form(40, P, 2) == "jacobian"


def _request(solver, curvature="lowrank", sketch="auto"):
    return Request("update", {"theta": THETA0},
                   {"local": {"solver": solver, "steps": 2, "lr": 1e-3, "damping": 1e-3, "prox": 0.0, "loss": "mean"},
                    "curvature": curvature, "rank": 4, "sketch": sketch, "seed": 7, "round": 1, "report_loss": True,
                    "cg_iters": 50, "cg_rtol": 1e-12})


@pytest.mark.parametrize("solver", ["gn", "adam"])
def test_a_client_over_the_threshold_is_matrix_free_both_ways(threshold, jacobians, solver):
    """Two clients of 40 rows (over the threshold): the vectorized path evaluates no Jacobian (before this rule it
    formed both clients' and threw them away under local Adam), the per-client path none either, and the
    messages are the same bits both ways (same operations, same seeds)."""
    clients = make_clients((40, 40))
    req = _request(solver)
    assert ClientBatch(clients).precompute(req) == {}
    vec = LocalTransport(clients).ask([0, 1], req)
    assert jacobians == []
    one = LocalTransport(clients, vectorize=False).ask([0, 1], req)
    assert jacobians == []
    for c in (0, 1):
        assert set(vec[c].message) == set(one[c].message) >= {"delta", "U", "lam", "loss", "n"}
        for k, v in vec[c].message.items():
            assert torch.equal(v, one[c].message[k]), k
    if solver == "gn":  # the CG step's record rides with the reply
        assert vec[0].metrics["cg_iters"] == one[0].metrics["cg_iters"] > 0


def test_beside_a_matrix_free_client_a_dense_one_forms_only_its_own(threshold, jacobians):
    """Clients of 12 (dense) and 40 rows (matrix-free): the batch pools nothing, the small client forms its own
    12-row Jacobian once, the big one none; the small client's message is the dense one (exact eigenpairs)."""
    clients = make_clients((12, 40))
    req = _request("gn")
    vec = LocalTransport(clients).ask([0, 1], req)
    assert jacobians == [12]
    assert "cg_iters" in vec[1].metrics and "cg_iters" not in vec[0].metrics
    want, info = local_update(clients[0], THETA0, LocalConfig("gn", damping=1e-3), ask=fipa_ask("lowrank", rank=4, sketch="dense"),
                              seed=7, report_loss=True)
    assert info == {}
    for k, v in want.items():
        assert torch.equal(vec[0].message[k], v), k


def test_under_the_threshold_the_batch_evaluates_every_jacobian_once(jacobians):
    """Every client dense (the default machine, far under the floor): one pooled Jacobian for the round, handed
    to each client, and the messages equal the per-client ones to round-off (pooled rows)."""
    clients = make_clients((12, 20, 7))
    req = _request("adam")
    vec = LocalTransport(clients).ask([0, 1, 2], req)
    assert jacobians == [39]
    one = LocalTransport(clients, vectorize=False).ask([0, 1, 2], req)
    assert jacobians == [39, 12, 20, 7]
    eps = torch.finfo(torch.float64).eps
    for c, client in enumerate(clients):
        a, b = vec[c].message, one[c].message
        # the pooled Jacobian's rows and the client's own differ by the forward/backward matmuls' summation order
        # (another batch shape), and each path forms J_mJ_mᵀ and its eigh itself: by Weyl, every eigenvalue moves
        # by at most ‖Δ(J_mJ_mᵀ)‖₂ ≲ (p + n_m)·eps·λ_max (the Gram's p-term sums, the n_m×n_m eigh) — an absolute
        # bound, as the small eigenvalues (1e-8·λ_max here) carry the largest one's round-off
        lam_max = float(b["lam"].max())
        torch.testing.assert_close(a["lam"], b["lam"], rtol=0, atol=(P + client.n) * eps * lam_max)
        # ½‖r_m‖²: an n_m-term sum of squares, each residual through two 8-term dot products (widths 8, 8) summed in
        # an order the batch shape may change; r = u(x) − sin(2πx) with u ≈ 0 at θ₀: no cancellation
        torch.testing.assert_close(a["loss"], b["loss"], rtol=2 * (client.n + 16) * eps, atol=0)
        assert torch.equal(a["delta"], b["delta"])  # local Adam on the client's own objective: the same operations


def test_fedavg_with_adam_forms_no_jacobian(jacobians):
    clients = make_clients((12, 20))
    out = LocalTransport(clients).ask([0, 1], _request("adam", curvature=None))
    assert jacobians == [] and set(out[0].message) == {"delta", "loss", "n"}
