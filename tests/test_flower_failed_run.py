"""A failed ServerApp reaches the user in one line with exit 1.  ``flwr run --stream`` exits 0 whatever happens to
the run, so before: a ServerApp that failed before any result left ``flower deploy`` with "the Flower run ended
without its result (flwr run status 0)" (the cause only in the echoed log; ``solve --engine flower`` fished it out
of the log text), and one that a dead site stopped after some rounds wrote its partial result, which made
``flower deploy`` print the summary and exit 0.  Now the ServerApp records the job's one-line reason in its
``out`` (``failed.json``, :func:`resultio.write_failure`; a partial result also in ``extra.error``) and the
waiting side reads that record — no Flower internals, no log parsing — and stops at once with that line.

The first four tests start no Flower process; the last starts a stock deployment on 127.0.0.1 (marked ``slow``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

pytest.importorskip("flwr")

from fedsciml.engines.flower import apps, deploy, resultio  # noqa: E402


def test_failure_records_round_trip_and_a_stale_one_is_cleared(tmp_path):
    out = tmp_path / "run-out"
    assert resultio.read_failure(str(out)) is None
    path = resultio.write_failure(str(out), "after 5 s, no node serves partition(s) [0]\nsecond line")
    assert path == str(out / resultio.FAILED) and json.loads(open(path).read())["error"].startswith("after 5 s")
    assert resultio.read_failure(str(out)) == "after 5 s, no node serves partition(s) [0]"  # one line
    resultio.clear_failure(str(out))
    assert resultio.read_failure(str(out)) is None and out.is_dir()
    img = tmp_path / "job0.json"  # an image job's out is a file: its record lies beside it
    resultio.write_failure(str(img), "boom", kind="images")
    assert not img.exists() and resultio.read_failure(str(img)) == "boom"
    resultio.clear_failure(str(img), kind="images")
    assert resultio.read_failure(str(img)) is None


def test_the_server_app_records_why_a_job_failed_in_its_out(tmp_path, monkeypatch):
    out = tmp_path / "out"

    def run_job(grid, job):
        raise RuntimeError("the method broke on the server")

    monkeypatch.setattr(apps, "run_job", run_job)
    rc = {"problem": "sin1d", "method": "gn", "clients": 1, "out": str(out)}
    with pytest.raises(RuntimeError, match="broke"):
        apps.serve(None, rc)
    assert resultio.read_failure(str(out)) == "RuntimeError: the method broke on the server"
    assert not os.path.exists(resultio.result_path(str(out)))  # no result: nothing looks finished


def test_waiting_on_a_run_stops_at_the_failure_record_and_ends_flwr_run(tmp_path):
    link = deploy.LocalSuperLink(str(tmp_path))
    flwr_run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    link.procs["flwr-run-run"] = flwr_run  # stands for `flwr run --stream`, still streaming the run's log
    (tmp_path / "flwr-run-run.log").write_text("")
    out = tmp_path / "run-out"
    resultio.write_failure(str(out), "client 0 refused the job: this node's max-params=1")
    t0 = time.monotonic()
    with pytest.raises(deploy.ServerAppFailed) as e:
        link.wait_files(flwr_run, [out], timeout_s=50.0)
    assert time.monotonic() - t0 < 20.0  # not the wait bound: at the record
    assert str(e.value) == "client 0 refused the job: this node's max-params=1"
    assert flwr_run.poll() is not None  # flwr run was ended


@pytest.mark.slow
def test_a_stock_deployment_whose_server_app_fails_ends_with_its_reason(tmp_path):
    """A SuperNode whose own limit refuses the job (``max-params=1``): the ServerApp fails; the wait ends at its
    record with the ServerApp's line, long before the wait bound (wall time is mostly Flower's start on a loaded
    machine: 167 s at load 18 on 2 cores)."""
    with deploy.LocalDeployment(1, str(tmp_path / "d"), node_configs=[{"max-params": 1}]) as d:
        proc, out = d.submit("sin1d", "gn", timeout_s=5.0, rounds=2)
        with pytest.raises(deploy.ServerAppFailed) as e:
            d.wait_files(proc, [out], timeout_s=550.0)
    line = str(e.value)
    assert "\n" not in line and line == resultio.read_failure(str(out))
    assert "partition" in line or "max-params" in line, line
    assert not os.path.exists(resultio.result_path(str(out)))


def test_flower_deploy_exits_1_with_the_reason_when_a_dead_site_stopped_the_run_after_some_rounds(tmp_path,
                                                                                                  monkeypatch, capsys):
    """Before: the partial result (``stop_reason`` failed) made ``wait_files`` return, and ``flower deploy``
    printed the summary and exited 0.  Now: exit 1 with the reason, and ``--json`` keeps the rounds."""
    import fedsciml as fs
    from fedsciml.cli.main import main as cli_main
    from fedsciml.runtime.driver import plan, run

    res = run(plan(fs.get_problem("sin1d", n_samples=20), "gn", clients=1, rounds=2))
    res.stop_reason = "failed"
    res.extra.update(stop_reason="failed", error="round 3: client 0 (node 7) has answered nothing for 60 s")
    out = tmp_path / "run-out"
    resultio.write_result(res, str(out))
    flwr_run = subprocess.Popen([sys.executable, "-c", "pass"])
    flwr_run.wait()

    class Deployment:  # the stock deployment, its run already ended as a dead site leaves it
        def __init__(self, clients, keep, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, *a, **kw):
            return flwr_run, out

        def wait_files(self, proc, outs, timeout_s, echo=None):
            return None

    monkeypatch.setattr(deploy, "LocalDeployment", Deployment)
    kept = tmp_path / "r.json"
    rc = cli_main(["flower", "deploy", "sin1d", "--method", "gn", "--clients", "1", "--rounds", "2", "--problem-options",
                   '{"n_samples": 20}', "--json", str(kept)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1, err
    assert err[-1].startswith("error: flower deploy: the run failed: round 3: client 0 (node 7) has answered "
                              "nothing for 60 s; the rounds before are written: "), err[-1]
    assert json.loads(kept.read_text())["stop_reason"] == "failed"
