"""The monitoring loss rides on the next exchange (one exchange per round instead of two).

Reference: the same run with ``Simulation.merge_monitoring = False`` (a separate ``loss`` query after every
round, the loop as it was).  The histories, parameters and float counts must be *equal* (``==``, bitwise): the
clients compute the same per-client losses with the same code (their ``loss`` handler, unvectorized) and the loop
sums them in the same client order; only the number of separate ``loss`` queries changes."""
import pytest
import torch

from fedsciml.runtime.client import Client
from fedsciml.runtime.loop import Simulation
from fedsciml.runtime.protocol import MONITOR
from fedsciml.runtime.transport import BytesTransport, LocalTransport

from test_federated import make_clients
from test_runtime import DeadNode, run


class Counting(LocalTransport):
    """In-process clients; records every query asked and to whom."""

    def __init__(self, clients):
        super().__init__(clients)
        self.log: list = []

    def ask(self, client_ids, request):
        self.log.append((request.query, tuple(client_ids), bool(request.config.get(MONITOR))))
        return super().ask(client_ids, request)


def _clients(objs):
    return [Client(i, o) for i, o in enumerate(objs)]


def _both(monkeypatch, method, transport_of=Counting, **opts):
    objs = make_clients()
    out = []
    for merged in (False, True):
        monkeypatch.setattr(Simulation, "merge_monitoring", merged)
        tr = transport_of(_clients(objs))
        theta, rows, info = run(method, objs, transport=tr, **opts)
        out.append((theta, [{k: v for k, v in r.items() if k != "time_s"} for r in rows], info, tr))
    return out


def _same(a, b):
    (th0, rows0, info0, _), (th1, rows1, info1, _) = a, b
    assert torch.equal(th0, th1)
    assert rows0 == rows1  # every loss, metric and float count, bitwise
    for key in ("floats_up", "floats_down", "rounds", "stopped_by", "rejections", "skipped_rounds"):
        assert info0[key] == info1[key], key


@pytest.mark.parametrize("method, opts", [
    ("fipa", {"rank": 3, "rounds": 5}),               # safeguard: its final check carries the last row's loss
    ("fedavg", {"local_steps": 3, "rounds": 4}),
])
def test_merged_monitoring_gives_the_same_run_with_one_exchange_per_round(monkeypatch, method, opts):
    ref, new = _both(monkeypatch, method, **opts)
    _same(ref, new)
    losses = lambda tr: [q for q in tr.log if q[0] == "loss"]  # noqa: E731
    rounds = opts["rounds"]
    assert len(losses(ref[3])) == rounds + 1          # before: one separate query per history row
    assert ref[2]["monitor_exchanges"] == rounds + 1
    carried = [q for q in new[3].log if q[2]]
    assert len(carried) == rounds + (method == "fipa")  # every update (and fipa's final check) carries one
    assert len(losses(new[3])) == new[2]["monitor_exchanges"] == (0 if method == "fipa" else 1)  # fedavg: the last row


def test_partial_participation_and_dropout_ask_only_the_clients_not_reached(monkeypatch):
    ref, new = _both(monkeypatch, "fedavg", local_steps=2, rounds=6, participation=0.67, dropout=0.3, seed=3)
    _same(ref, new)
    everyone = tuple(range(3))
    assert all(q[1] == everyone for q in ref[3].log if q[0] == "loss")
    assert any(q[1] != everyone for q in new[3].log if q[0] == "loss")  # only the clients not reached


def test_a_dead_node_is_asked_separately_and_logged_as_before(monkeypatch):
    ref, new = _both(monkeypatch, "fipa", transport_of=lambda cl: DeadNode(cl, dead=2), rank=3, rounds=3)
    _same(ref, new)
    assert ref[2]["unanswered"] == new[2]["unanswered"]
    assert all(r["loss_clients"] == 2 for r in new[1])


def test_tol_stops_where_it_stopped_and_the_carrying_exchange_is_not_counted(monkeypatch):
    monkeypatch.setattr(Simulation, "merge_monitoring", False)
    _, rows, _ = run("fedavg", make_clients(), local_steps=3, rounds=6)
    tol = rows[3]["loss"]  # the run must stop after round 3
    ref, new = _both(monkeypatch, "fedavg", local_steps=3, rounds=6, tol=tol)
    _same(ref, new)
    assert new[2]["stopped_by"] == "tol" and new[2]["rounds"] == 3 and len(new[1]) == 4
    assert sum(1 for q in new[3].log if q[0] == "update") == 4  # round 4's update carried the loss, was dropped


def test_the_monitoring_loss_crosses_bytes(monkeypatch):
    ref, new = _both(monkeypatch, "fipa", transport_of=lambda cl: BytesTransport(LocalTransport(cl)), rank=3, rounds=3)
    _same(ref, new)
    # 3 rounds: the final check undoes the last step, and the re-recorded row asks its loss in both runs
    assert ref[2]["monitor_exchanges"] - new[2]["monitor_exchanges"] == 4


def test_resume_with_a_pending_loss_continues_the_same_run(monkeypatch, tmp_path):
    objs = make_clients()
    monkeypatch.setattr(Simulation, "merge_monitoring", True)
    full = run("fedavg", objs, local_steps=3, rounds=5)
    run("fedavg", objs, local_steps=3, rounds=3, checkpoint=str(tmp_path))
    theta, rows, info = run("fedavg", objs, local_steps=3, rounds=5, checkpoint=str(tmp_path), resume=True)
    assert info["resumed"] and torch.equal(theta, full[0])
    strip = lambda rs: [{k: v for k, v in r.items() if k != "time_s"} for r in rs]  # noqa: E731
    assert strip(rows) == strip(full[1])
