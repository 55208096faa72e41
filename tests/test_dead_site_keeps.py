"""Issue 38.3 / 38.9, what a dead site leaves and how long it holds a run.

* ``--engine processes``: a client process killed mid-run stops gn (it needs every client) with exit 1, and
  ``--out`` holds result.json (``stop_reason`` ``"failed"``, the engine named), the model and the checkpoint of the
  last finished round (θ bitwise the checkpoint's) — not an empty directory.
* Flower: the ServerApp writes the rounds before a failed round to the job's ``out`` and says so; the engine that
  started the run raises with that Result (so ``solve --engine flower --out`` writes it), without starting Flower.
* Flower: a site that answers nothing holds a run at most ``dead-after`` seconds (default 600), not gn's 21 attempts
  × ``timeout`` (300 s: 105 minutes); the run stops with one line naming the client and its node.  The exchanges
  are driven with a fake clock (no Flower processes): what is tested is the bound's arithmetic and the message.
"""
from __future__ import annotations

import importlib
import json
import os
import signal

import pytest
import torch

import fedsciml as fs
from fedsciml.runtime import checkpoint as ckpt
from fedsciml.runtime.loop import RoundFailed

cli_main = importlib.import_module("fedsciml.cli.main")


@pytest.mark.slow
def test_a_client_process_killed_mid_run_leaves_the_finished_rounds_in_out(tmp_path, capsys, monkeypatch):
    from fedsciml.engines import processes

    real_ask = processes.ProcessTransport.ask
    asked = [0]

    def ask(self, client_ids, request):
        asked[0] += 1
        if asked[0] == 6 and self._procs[1].poll() is None:  # a few rounds in: client 1's process dies
            os.kill(self._procs[1].pid, signal.SIGKILL)
            self._procs[1].wait()
        return real_ask(self, client_ids, request)

    monkeypatch.setattr(processes.ProcessTransport, "ask", ask)
    out, ck = tmp_path / "out", tmp_path / "ck"
    rc = cli_main.main(["solve", "sin1d", "--method", "gn", "--clients", "2", "--n-samples", "20", "--rounds", "50",
                        "--engine", "processes", "--quiet", "--out", str(out), "--checkpoint", str(ck)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err[-1].startswith("error: gn: round "), err[-3:]
    assert "client 1" in err[-1] and "exit code -9" in err[-1] and err[-1].endswith(f"the rounds before are written: {out}")
    res = json.load(open(out / "result.json"))
    k = res["extra"]["rounds"]
    assert res["extra"]["stop_reason"] == "failed" and k >= 1 and res["extra"]["engine"]["name"] == "processes"
    assert [r["step"] for r in res["history"]] == list(range(k + 1))
    state = ckpt.read(ckpt.path_in(str(ck)))
    assert state["round"] == k
    from safetensors.torch import load_file

    assert torch.equal(load_file(str(out / "model.safetensors"))["theta"], state["strategy"]["theta"])  # bitwise
    assert fs.load_model(str(out))(torch.tensor([[0.5]], dtype=torch.float64)).shape == (1,)


# --- Flower, without starting Flower -----------------------------------------------------------------------------

def _failed_result(rounds=2):
    """A Result as the driver makes of a run that a failed round stopped (``stop_reason`` ``"failed"``)."""
    from fedsciml.runtime.driver import plan, run

    p = plan(fs.get_problem("sin1d", n_samples=20), "gn", clients=2, rounds=rounds)
    res = run(p)
    res.extra.update(stop_reason="failed", stopped_by="failed", error="round 3: client 1 is down")
    res.stop_reason = "failed"
    return res


def test_the_flower_server_app_writes_the_rounds_before_a_dead_site_and_the_engine_raises_with_them(tmp_path,
                                                                                                      monkeypatch):
    pytest.importorskip("flwr")
    from fedsciml.engines.flower import apps, simulation
    from fedsciml.engines.flower.resultio import read_result

    res = _failed_result()

    def run_job(grid, job):
        e = RoundFailed("round 3: client 1 (node 7) has answered nothing for 600 s")
        e.result = res  # type: ignore[attr-defined]  (what keep_partial sets)
        raise e

    monkeypatch.setattr(apps, "run_job", run_job)
    out = tmp_path / "job0"
    with pytest.raises(RoundFailed) as e:
        apps.serve(None, {"problem": "sin1d", "clients": 2, "problem-options": '{"n_samples": 20}',
                          "method": "gn", "out": str(out)})
    assert str(e.value) == f"round 3: client 1 (node 7) has answered nothing for 600 s; the rounds before are written: {out}"
    back = read_result(str(out))
    assert back.stop_reason == "failed" and torch.equal(back.theta, res.theta)
    assert os.path.exists(out / "model.safetensors") and os.path.exists(out / "history.csv")
    with pytest.raises(simulation.EngineFailed) as raised:  # what solve --engine flower then gets, θ with it
        simulation.raise_stopped([{"kind": "solve", "out": str(out)}])
    assert str(raised.value) == "round 3: client 1 is down"
    assert torch.equal(raised.value.result.theta, res.theta)  # type: ignore[attr-defined]
    simulation.raise_stopped([{"kind": "solve", "out": str(tmp_path / "none")}])  # nothing written: nothing raised


def _silent_transport(monkeypatch, dead_after_s=None, timeout_s=300.0):
    """A FlowerTransport whose client 1 never answers (client 0 does), on a fake clock: each round trip takes
    the full wait for a silent client."""
    pytest.importorskip("flwr")
    from fedsciml.engines.flower import transport as T
    from fedsciml.runtime.transport import Failure, Reply

    clock = [1000.0]
    monkeypatch.setattr(T.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(T.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    tr = T.FlowerTransport.__new__(T.FlowerTransport)
    tr.timeout_s, tr.log, tr.nodes, tr._stale, tr._dead = timeout_s, None, {0: 11, 1: 12}, set(), set()
    tr.dead_after_s = T.DEAD_AFTER_S if dead_after_s is None else dead_after_s
    tr._silent_since, tr.exchange_times, tr.exchange_queries = {}, [], []
    tr.exchange_seconds, tr.exchanges, tr.rejoined = 0.0, 0, []
    waits = []

    def round_trip(targets, request, timeout_s, gone=None):
        waits.append(timeout_s)
        if 1 in targets:
            clock[0] += timeout_s
        return {c: Reply({}, {}) if c == 0 else Failure(f"node {n} did not answer within {timeout_s:g} s", True)
                for c, n in targets.items()}

    tr._round_trip = round_trip
    tr._refresh = lambda: None
    return tr, clock, waits


def test_a_dead_site_holds_gns_retries_at_most_dead_after_not_105_minutes(monkeypatch):
    """gn asks the missing client again up to 20 times; before, each retry waited ``timeout`` (300 s): 21 × 300 s
    = 6300 s = 105 min.  Now the retries of a site silent since the first stop at 600 s (the default)."""
    from fedsciml.engines.flower.transport import SiteDown
    from fedsciml.runtime.transport import Request

    tr, clock, waits = _silent_transport(monkeypatch)
    start = clock[0]
    first = tr.ask([0, 1], Request("gn_stats", {}))  # client 0 answers; client 1 is silent 300 s
    assert first[1].dropped and waits == [300.0]
    with pytest.raises(SiteDown) as e:
        for _ in range(20):  # gn's retries ask the missing client only
            tr.ask([1], Request("gn_stats", {}))
    assert clock[0] - start == 600.0 and waits == [300.0, 300.0]  # the bound, not 21 × 300 s
    assert str(e.value).startswith("client 1 (node 12) has answered nothing for 600 s, the dead-site limit "
                                   "(run config dead-after=600 s): the site is taken as down; its last reason: "
                                   "node 12 did not answer within 300 s")
    assert "\n" not in str(e.value) and isinstance(e.value, RoundFailed)  # the rounds before are kept


def test_the_last_wait_is_cut_to_the_bound_and_an_answer_resets_it(monkeypatch):
    from fedsciml.engines.flower.transport import SiteDown
    from fedsciml.runtime.transport import Request

    tr, clock, waits = _silent_transport(monkeypatch, dead_after_s=450.0)
    start = clock[0]
    tr.ask([0, 1], Request("loss", {}))
    with pytest.raises(SiteDown, match=r"^client 1 \(node 12\) has answered nothing for 450 s"):
        tr.ask([1], Request("loss", {}))
    assert waits == [300.0, 150.0] and clock[0] - start == 450.0
    tr._silent_since.clear()
    tr.ask([0], Request("loss", {}))  # a live client alone: the full timeout, and no silence recorded
    assert waits[-1] == 300.0 and tr._silent_since == {}


def test_dead_after_is_a_checked_run_config_key():
    pytest.importorskip("flwr")
    from fedsciml.engines.flower.runconfig import RunConfigError, check_job, job_from_run_config

    rc = {"problem": "sin1d", "clients": 2}
    assert job_from_run_config(rc)["dead_after"] == 600.0
    assert job_from_run_config({**rc, "dead-after": 90})["dead_after"] == 90.0
    for bad in (0, -5, "soon", float("inf")):
        with pytest.raises(RunConfigError, match=r"dead-after=.* must be a number of seconds in \(0, 604800\]"):
            job_from_run_config({**rc, "dead-after": bad})
    with pytest.raises(RunConfigError, match=r"dead_after=-1 must be a number of seconds"):
        check_job({"problem": "sin1d", "clients": 2, "dead_after": -1}, "engine 'flower'")
