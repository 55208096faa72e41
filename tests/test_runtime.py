"""The federated runtime: the strategy protocol, the transport seam (bytes round trip bitwise equal to
in-process), the loop's public accounting, and budgets that hold inside local training."""
import time

import numpy as np
import pytest
import torch

from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.methods.averaging import AveragingStrategy
from fedsciml.methods.local import LocalConfig, adam_delta
from fedsciml.runtime.client import Client
from fedsciml.runtime.loop import RoundConfig, Simulation
from fedsciml.runtime.strategy import Strategy
from fedsciml.runtime.transport import (Failure, LocalTransport, Reply, Request,
                                          reply_from_bytes, reply_to_bytes, request_from_bytes, request_to_bytes)
from fedsciml.methods import METHODS
from fedsciml.core.lm import damping_after_failure, damping_after_success

from test_federated import THETA0, evaluate, make_clients


def run(method, objs=None, **opts):
    objs = objs if objs is not None else make_clients()
    return METHODS[method](None, objs, THETA0, evaluate, **opts)


def _strip_times(rows):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]


# --- the transport seam ---------------------------------------------------------------------


def test_request_and_reply_round_trip_through_bytes_exactly():
    theta = torch.randn(7, dtype=torch.float64)
    req = Request("update", {"theta": theta}, {"local": {"solver": "adam", "lr": 1e-3}, "seed": 2**40 + 3,
                                               "deadline_s": None, "x": 0.1 + 0.2})
    back = request_from_bytes(request_to_bytes(req))
    assert back.query == "update" and back.config == req.config
    assert back.tensors["theta"].dtype == torch.float64 and torch.equal(back.tensors["theta"], theta)
    rep = Reply({"delta": theta, "U": torch.randn(7, 3, dtype=torch.float32), "n": torch.tensor([5.0])},
                {"steps": 12})
    got = reply_from_bytes(reply_to_bytes(rep))
    assert set(got.message) == set(rep.message) and got.metrics == {"steps": 12}
    for k in rep.message:  # bitwise: numpy.save stores the raw bytes and the dtype
        assert got.message[k].dtype == rep.message[k].dtype and torch.equal(got.message[k], rep.message[k])
    assert reply_from_bytes(reply_to_bytes(Failure("client failed: x"))) == Failure("client failed: x")


def test_bytes_never_pickle():
    data = request_to_bytes(Request("gn_loss", {"theta": torch.zeros(3, dtype=torch.float64)}))
    assert b"pickle" not in data
    # an object array cannot be sent: numpy.save refuses it without pickling
    with pytest.raises(ValueError):
        np.save(__import__("io").BytesIO(), np.array([object()]), allow_pickle=False)


@pytest.mark.parametrize("method, opts", [
    ("gn", {"rounds": 3}),
    ("gn", {"rounds": 3, "form": "sqrt", "dropout": 0.3, "seed": 4}),
    ("fipa", {"rounds": 3, "rank": 4}),                                        # local GN, safeguard, QR merge
    ("fipa", {"rounds": 2, "rank": 0, "local": "adam", "local_steps": 3}),       # full rank
    ("fipa", {"rounds": 2, "rank": 3, "adaptive": True, "local": "adam", "local_steps": 3}),
    ("fedavg", {"rounds": 2, "local_steps": 3, "participation": 0.67, "dropout": 0.2, "seed": 1}),
])
def test_bytes_transport_is_bitwise_identical_to_local(method, opts):
    objs = make_clients()
    a, rows_a, info_a = run(method, objs, **opts)
    b, rows_b, info_b = run(method, objs, transport="bytes", **opts)
    # bitwise is the point and guaranteed: the clients get the same bits (numpy.save/load and JSON
    # round-trip float64 exactly) and run the same operations in the same order
    assert torch.equal(a, b)
    assert _strip_times(rows_a) == _strip_times(rows_b)
    assert info_a["floats_up"] == info_b["floats_up"] and info_a["rejections"] == info_b["rejections"]


def test_message_hook_sees_replies_of_the_bytes_transport():
    seen = []

    def hook(rnd, cid, msg):
        seen.append((rnd, cid, sorted(msg)))
        return {**msg, "delta": msg["delta"] * float("nan")} if cid == 1 else msg

    _, rows, info = run("fedavg", rounds=1, local_steps=2, transport="bytes", message_hook=hook)
    assert seen == [(1, 0, ["delta", "n"]), (1, 1, ["delta", "n"]), (1, 2, ["delta", "n"])]
    assert [r["client"] for r in info["rejections"]] == [1] and rows[1]["rejected"] == 1


def test_unknown_query_and_transport_are_refused():
    t = LocalTransport([Client(0, make_clients((5,))[0])])
    with pytest.raises(ValueError, match="unknown query 'gn_hessian'"):
        t.ask([0], Request("gn_hessian", {"theta": THETA0}))
    with pytest.raises(ValueError, match="transport must be one of local, bytes"):
        run("fedavg", rounds=1, transport="grpc")


class _FailingTransport(LocalTransport):
    """Client 1's local training fails every time (as a raising residual would)."""

    def ask(self, client_ids, request):
        out = super().ask(client_ids, request)
        if 1 in out and request.query == "update":
            out[1] = Failure("client failed: RuntimeError: out of memory")
        return out


def test_a_failing_client_is_logged_by_the_loop_and_left_out():
    objs = make_clients()
    clients = [Client(i, o) for i, o in enumerate(objs)]
    strat = AveragingStrategy(FedAvgAggregator(), LocalConfig("adam", 2))
    sim = Simulation(_FailingTransport(clients), evaluate, RoundConfig(rounds=2))
    th, rows, info = sim.run(strat, THETA0)
    assert [(r["round"], r["client"]) for r in info["rejections"]] == [(1, 1), (2, 1)]
    assert "out of memory" in info["rejections"][0]["reason"]
    assert rows[1]["rejected"] == 1
    # the average is over clients 0 and 2 only
    d = {c: {"delta": adam_delta(clients[c], THETA0, LocalConfig("adam", 2)), "n": torch.tensor([30.0], dtype=torch.float64)}
         for c in (0, 2)}
    sim2 = Simulation(_FailingTransport(clients), evaluate, RoundConfig(rounds=1))
    th1, _, _ = sim2.run(AveragingStrategy(FedAvgAggregator(), LocalConfig("adam", 2)), THETA0)
    assert torch.allclose(th1, FedAvgAggregator().aggregate(THETA0, d), rtol=0, atol=1e-14)


# --- the strategy protocol --------------------------------------------------------------------


def test_strategy_protocol_is_declared():
    class Incomplete(Strategy):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()
    from fedsciml.methods.fipa import FIPAStrategy
    from fedsciml.methods.gn import GNStrategy

    for cls in (AveragingStrategy, FIPAStrategy, GNStrategy):
        assert issubclass(cls, Strategy)
    assert issubclass(FIPAStrategy, AveragingStrategy)  # FIPA is the averaging exchange plus curvature


def test_fipa_safeguard_uses_the_lm_damping_rule():
    # the one rule, shared by solvers.lm and the FIPA safeguard
    assert damping_after_success(1.0, 1.0, 1e-20) == (1.0 / 3.0, 2.0)
    mu, nu = damping_after_success(2.0, 0.5, 1e-20)
    assert mu == 2.0 and nu == 2.0  # ρ = ½: 1 − 0³ = 1
    assert damping_after_failure(1.0, 2.0, 1e20) == (2.0, 4.0)
    assert damping_after_failure(1e19, 64.0, 1e20) == (1e20, 128.0)
    assert damping_after_failure(0.0, 2.0, 1e20, floor=1e-12) == (1e-12, 4.0)
    _, rows, info = run("fipa", rounds=6, rank=4)
    betas = [r["beta"] for r in rows[1:] if "beta" in r]  # (a last row describing an undone step has none)
    assert len(betas) >= 5 and all(b > 0 for b in betas)
    assert info["final_beta"] > 0 and info["final_beta"] == info["strategy"]["beta"]


# --- budgets inside long loops --------------------------------------------------------------


def test_budget_stops_local_training():
    t = time.perf_counter()
    _, rows, info = run("fedavg", rounds=3, budget=0.5, local_steps=10**8)
    wall = time.perf_counter() - t
    assert info["stopped_by"] == "budget" and len(rows) == 2
    # one round, its local Adam loops cut at the deadline (a few steps of overshoot, plus evaluation)
    assert wall < 15, wall


def test_deadline_cuts_adam_after_at_least_one_step():
    obj = make_clients((10,))[0]
    c = Client(0, obj)
    full = adam_delta(c, THETA0, LocalConfig("adam", 1))
    cut = adam_delta(c, THETA0, LocalConfig("adam", 10**8), deadline=time.perf_counter() - 1.0)
    assert torch.equal(full, cut)  # the deadline had passed: exactly one step
    rep = c.answer(Request("update", {"theta": THETA0}, {"local": {"solver": "adam", "steps": 10**8, "lr": 1e-3,
                                                                     "damping": 0.0, "prox": 0.0},
                                                           "deadline_s": 0.0}))
    assert torch.equal(rep.message["delta"], full)  # bitwise: the same single Adam step


# --- one-shot fusion of GN statistics (ridge) ---------------------------------------------------


def _ridge(clients=5):
    from fedsciml.problems import get_problem

    prob = get_problem("ridge-linear", dim=12, n_samples=40)
    return prob, prob.client_objectives(clients, seed=3), prob.init_params(3)


def test_one_shot_equals_gn_single_round_and_one_shot_ridge():
    from fedsciml.ridge import one_shot

    prob, objs, w0 = _ridge()
    a, rows_a, info_a = METHODS["one-shot"](prob, objs, w0, prob.evaluate)
    b, rows_b, _ = METHODS["gn"](prob, objs, w0, prob.evaluate, rounds=1)
    assert info_a["stopped_by"] == "one-shot" and len(rows_a) == 2 and rows_b[1]["accepted"]
    assert torch.allclose(a, b, rtol=1e-12, atol=1e-14)
    # the ridge package's one-shot protocol on the raw client data (σ as damping, not as rows)
    w, _ = one_shot(prob.client_data(5, seed=3), sigma=prob.sigma)
    assert torch.allclose(a, w, rtol=1e-10, atol=1e-12)
    p, K = w0.numel(), 5
    assert rows_a[1]["floats_down"] == K * p and rows_a[1]["floats_up"] == K * (p * (p + 1) // 2 + p + 2)


def test_one_shot_fuses_the_answering_clients_and_crosses_bytes_bitwise():
    from fedsciml.ridge import one_shot

    prob, objs, w0 = _ridge(6)
    seen = {}

    def hook(rnd, cid, msg):
        seen.setdefault(rnd, []).append(cid)
        return msg

    a, rows, info = METHODS["one-shot"](prob, objs, w0, prob.evaluate, dropout=0.4, seed=2, message_hook=hook)
    got = seen[1]
    assert 0 < len(got) < 6 and rows[1]["dropped"] == 6 - len(got)
    data = prob.client_data(6, seed=3)
    # the answering clients' penalty rows carry σ·|answering|/K of the penalty
    w, _ = one_shot([data[c] for c in got], sigma=prob.sigma * len(got) / 6)
    assert torch.allclose(a, w, rtol=1e-10, atol=1e-12)
    b, rows_b, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate, dropout=0.4, seed=2, transport="bytes")
    assert torch.equal(a, b) and _strip_times(rows) == _strip_times(rows_b)  # bitwise: same bits, same operations


# --- curvature as the currency -------------------------------------------------------------------


def test_one_ggn_operator_for_least_squares_and_softmax():
    from fedsciml.core.curvature import ggn_matmat, softmax_ce_hessian

    obj = make_clients((20,))[0]
    V = torch.randn(THETA0.numel(), 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    r, J = obj.residual_and_jacobian(THETA0)
    assert torch.allclose(ggn_matmat(obj.residual, THETA0)(V), J.T @ (J @ V), rtol=1e-12, atol=1e-12)
    # softmax: a linear model, logits = X W, Λ = diag p − ppᵀ per row (independent dense reference)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(7, 4, dtype=torch.float64, generator=g)
    w = torch.randn(12, dtype=torch.float64, generator=g)
    f = lambda t: X @ t.reshape(4, 3)  # noqa: E731
    P = torch.softmax(f(w), -1)
    Jf = torch.func.jacrev(f)(w)                                   # [7, 3, 12]
    Lam = torch.diag_embed(P) - P[:, :, None] * P[:, None, :]
    H = torch.einsum("ncp,ncd,ndq->pq", Jf, Lam, Jf)
    V = torch.randn(12, 5, dtype=torch.float64, generator=g)
    assert torch.allclose(ggn_matmat(f, w, softmax_ce_hessian)(V), H @ V, rtol=1e-12, atol=1e-12)


def _sketches(p=30, m=3, r=4, seed=2):
    g = torch.Generator().manual_seed(seed)
    Us, lams, ds = [], [], []
    for _ in range(m):
        U, _ = torch.linalg.qr(torch.randn(p, r, dtype=torch.float64, generator=g))
        Us.append(U)
        lams.append(torch.rand(r, dtype=torch.float64, generator=g).sort(descending=True).values + 0.2)
        ds.append(torch.randn(p, dtype=torch.float64, generator=g))
    return Us, lams, ds


def test_thin_qr_merge_complement_options_match_dense_references():
    from fedsciml.core.curvature import fipa_merge_lowrank

    Us, lams, ds = _sketches()
    p = ds[0].numel()
    w = [0.2, 0.3, 0.5]
    # 'tail': the dense model Ĥ_m = U(Λ − τ)Uᵀ + τI, step Ĥ⁻¹ Σ w_m Ĥ_m Δ_m (+ β in Ĥ)
    beta = 0.05
    Hm = [(U * (l - l.min())) @ U.T + float(l.min()) * torch.eye(p, dtype=torch.float64) for U, l in zip(Us, lams)]
    H = sum(wi * h for wi, h in zip(w, Hm)) + beta * torch.eye(p, dtype=torch.float64)
    want = torch.linalg.solve(H, sum(wi * (h @ d) for wi, h, d in zip(w, Hm, ds)))
    got = fipa_merge_lowrank(Us, lams, ds, w, beta=beta, complement="tail")
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    # 'fedavg': the in-span merge plus (I − QQᵀ) Σ s_m Δ_m
    s = [0.5, 0.25, 0.25]
    Q, _ = torch.linalg.qr(torch.cat(Us, 1))
    d = sum(si * di for si, di in zip(s, ds))
    base = fipa_merge_lowrank(Us, lams, ds, w, beta=beta)
    got = fipa_merge_lowrank(Us, lams, ds, w, beta=beta, complement="fedavg", sample_weights=s)
    assert torch.allclose(got, base + d - Q @ (Q.T @ d), rtol=1e-12, atol=1e-12)
    assert float((Q.T @ (got - base)).abs().max()) < 1e-12  # the correction lives outside the span
    with pytest.raises(ValueError, match="complement must be one of none, fedavg, tail"):
        fipa_merge_lowrank(Us, lams, ds, complement="both")


def test_fipa_complement_runs_through_the_merge_option():
    objs = make_clients()
    a, _, info = run("fipa", objs, rounds=2, rank=3, local="adam", local_steps=3, complement=True)
    b, _, _ = run("fipa", objs, rounds=2, rank=3, local="adam", local_steps=3)
    assert info["strategy"]["complement"] is True and not torch.allclose(a, b)
    with pytest.raises(ValueError, match="option of the thin-QR merge"):
        run("fipa", objs, rounds=1, rank=3, merge="pinv", complement=True)


# --- images on the same loop -------------------------------------------------------------------


def _fed(C=4):
    from fedsciml.images import data as D

    return D.federate(D.load("digits"), C, 0.5, seed=0)


def test_image_rounds_log_dropout_rejections_and_floats_per_round():
    from fedsciml.images import methods as M

    fed = _fed()
    cfg = M.TrainConfig(epochs=1, rank=2, oversample=2, power_iters=1)

    def hook(rnd, cid, msg):  # client 2 sends a broken update every round
        return {**msg, "delta": msg["delta"] * float("nan")} if cid == 2 else msg

    res = M.run_rounds(fed, "linear", ["fedavg", "fipa"], 0, cfg, rounds=2, dropout=0.3, message_hook=hook)
    p = 650
    for meth in ("fedavg", "fipa"):
        info = res[meth].info
        assert [r["round"] for r in info["rounds"]] == [1, 2]
        assert sum(r["dropped"] for r in info["rounds"]) > 0  # seeded: 0.3 over 8 client-rounds
        for r in info["rounds"]:
            assert r["dropped"] + r["answered"] + r["rejected"] == 4
            assert r["floats_down"] == p * (4 - r["dropped"])  # θ to every client that did not drop out
        assert all(e["client"] == 2 and "non-finite" in e["reason"] for e in info["rejections"])
        assert len(info["rejections"]) == sum(r["rejected"] for r in info["rounds"]) > 0
    ups = [r["floats_up"] for r in res["fedavg"].info["rounds"]]
    assert all(u == (p + 1) * (4 - r["dropped"]) for u, r in zip(ups, res["fedavg"].info["rounds"]))


def test_image_method_crosses_bytes_bitwise():
    from fedsciml.images import methods as M

    fed = _fed(3)
    cfg = M.TrainConfig(epochs=1, rank=2, oversample=2, power_iters=1)
    a = M.run_rounds(fed, "linear", ["fedavg", "fipa"], 0, cfg, rounds=1)
    b = M.run_rounds(fed, "linear", ["fedavg", "fipa"], 0, cfg, rounds=1, transport="bytes")
    for meth in ("fedavg", "fipa"):  # bitwise: the clients receive the same float32 bits and train alike
        assert a[meth].history == b[meth].history and a[meth].floats_per_client == b[meth].floats_per_client
        assert a[meth].info["rounds"] == b[meth].info["rounds"]


def test_one_shot_image_methods_are_one_round_runs_with_rejections_logged():
    from fedsciml.images import methods as M

    fed = _fed(3)
    cfg = M.TrainConfig(epochs=1)

    def hook(rnd, cid, msg):  # client 1's Fisher is negative: rejected, logged, not merged
        return {**msg, "fisher": -msg["fisher"] - 1.0} if cid == 1 and "fisher" in msg else msg

    a = M.run_one_shot(fed, "linear", ["fedavg", "fishermerge"], 0, cfg, message_hook=hook)
    assert a["fedavg"].info["rejections"] == [] and a["fedavg"].info["rounds"][0]["answered"] == 3
    rej = a["fishermerge"].info["rejections"]
    assert [(e["round"], e["client"]) for e in rej] == [(1, 1)] and "negative" in rej[0]["reason"]
    assert a["fishermerge"].info["rounds"][0]["answered"] == 2
    b = M.run_one_shot(fed, "linear", ["fedavg", "fishermerge"], 0, cfg, message_hook=hook, transport="bytes")
    for meth in ("fedavg", "fishermerge"):  # bitwise: same float32 bits in, same operations
        assert a[meth].accuracy == b[meth].accuracy and a[meth].floats_per_client == b[meth].floats_per_client


def test_the_loop_records_the_strategy_summary():
    _, _, info = run("fipa", rounds=1, rank=3)
    assert info["strategy"]["name"] == "fipa" and info["strategy"]["rank"] == 3
    assert info["strategy"]["curvature"] == "lowrank" and info["strategy"]["safeguard"] is True
    _, _, info = run("gn", rounds=1, form="normal")
    assert info["strategy"] == {"name": "gn", "lm_tau": 1e-3, "form": "normal", "max_retries": 20, "exchange": "one"}
    _, _, info = run("gn", rounds=1)  # auto: these clients' square roots are smaller than the packed p×p
    assert info["strategy"]["form"] == "sqrt"


# --- a node that never answers (a dead Flower node, a timeout) -----------------------------------


class DeadNode(LocalTransport):
    """In-process clients, but nothing ever comes back from client ``dead`` (as from a Flower node that is
    gone): the transport returns ``Failure(dropped=True)`` for it — for its first ``dead_asks`` asks, or forever."""

    def __init__(self, clients, dead: int, dead_asks: int | None = None):
        super().__init__(clients)
        self.dead, self.dead_asks, self.asked_dead = dead, dead_asks, 0

    def ask(self, client_ids, request):
        cids = list(client_ids)
        alive = self.dead_asks is not None and self.asked_dead >= self.dead_asks
        if self.dead not in cids or alive:
            return super().ask(cids, request)
        self.asked_dead += 1
        out = super().ask([c for c in cids if c != self.dead], request)
        out[self.dead] = Failure(f"node 9 did not answer within 1 s (client {self.dead})", dropped=True)
        return out


@pytest.mark.parametrize("method, opts", [("fedavg", {"local_steps": 5}), ("fipa", {"rank": 3})])
def test_a_dead_node_is_a_dropout_fipa_and_fedavg_fuse_the_rest(method, opts):
    """A client that never answers is dropped from every exchange (not rejected, so no rejection streak stops
    the run): the round fuses the others, the monitoring loss covers the clients that answered
    (``loss_clients``), and every miss is logged with its reason."""
    objs = make_clients()
    R = 12  # more rounds than the loop's rejection-streak limit (10): a dead node must not stop the run
    theta, rows, info = run(method, objs, transport=DeadNode([Client(i, o) for i, o in enumerate(objs)], dead=2),
                            rounds=R, **opts)
    assert info["rounds"] == R and info["rejections"] == []
    assert all(r["answered"] == 2 and r["dropped"] >= 1 and r["loss_clients"] == 2 for r in rows[1:])
    assert rows[0]["loss_clients"] == 2
    assert {e["client"] for e in info["unanswered"]} == {2}
    assert all("did not answer" in e["reason"] for e in info["unanswered"])
    # the monitored loss is the answering clients' mean ½‖r‖² per row
    n01 = objs[0].n_residuals + objs[1].n_residuals
    want = sum(float(o.loss(theta)) for o in objs[:2]) / n01
    assert rows[-1]["loss"] == pytest.approx(want, rel=1e-12)
    assert rows[-1]["loss"] < rows[0]["loss"]
    if method == "fedavg":  # the same operations as a run with only the two live clients: bitwise
        theta2, rows2, _ = run(method, objs[:2], rounds=R, **opts)
        assert torch.equal(theta, theta2)


def test_a_dead_node_that_never_answers_stops_gn_and_one_that_comes_back_does_not():
    objs = make_clients()
    clients = lambda: [Client(i, o) for i, o in enumerate(objs)]  # noqa: E731
    ref, _, _ = run("gn", objs, rounds=3)
    theta, _, info = run("gn", objs, transport=DeadNode(clients(), dead=1, dead_asks=2), rounds=3)
    assert torch.equal(theta, ref)  # gn asked again; the step is the exact one
    assert info["retried_requests"] == 2 and info["rejections"] == [] and len(info["unanswered"]) == 2
    from fedsciml.runtime.loop import RoundFailed

    with pytest.raises(RoundFailed, match=r"clients \[1\] never answered validly"):
        run("gn", objs, transport=DeadNode(clients(), dead=1), rounds=3, max_retries=2)


def test_a_dead_nodes_last_line_names_it_and_the_clients_that_answered():
    """Issue 38.9: gn stopped by one dead node said "every sampled client dropped out" although clients 0 and 2
    had answered.  The line names the node that did not answer, its last reason, and who answered."""
    from fedsciml.runtime.loop import RoundFailed

    objs = make_clients()
    with pytest.raises(RoundFailed) as e:
        run("gn", objs, transport=DeadNode([Client(i, o) for i, o in enumerate(objs)], dead=1), rounds=3,
            max_retries=1)
    msg = str(e.value)
    assert "every sampled client dropped out" not in msg and "\n" not in msg
    assert "no answer from client 1 (node 9 did not answer within 1 s (client 1))" in msg
    assert "client(s) [0, 2] answered" in msg
