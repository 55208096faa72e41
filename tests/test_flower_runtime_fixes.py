"""Issue 38.9 / 40.10, the Flower launcher's smaller faults, without starting Flower: the message TTL is its own
run-config key (not the exchange timeout), a federation whose SuperNode count is not the run's clients is refused
before the run in one line, the launcher accepts a port only when the process it started listens there, and the
processes it starts find Flower's helpers (``flower-superexec``) without the venv on ``PATH``."""
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from fedsciml.engines.flower import deploy  # noqa: E402
from fedsciml.engines.flower.jobs import app_dirs  # noqa: E402
from fedsciml.engines.flower.launch import FlowerRunFailed, check_federation_size  # noqa: E402
from fedsciml.engines.flower.runconfig import RunConfigError, job_from_run_config, message_ttl_s  # noqa: E402


def test_message_ttl_is_its_own_key_default_twice_the_timeout():
    rc = {"problem": "sin1d", "clients": 2, "timeout": 40.0}
    assert job_from_run_config(rc)["message_ttl"] is None and message_ttl_s(40.0) == 80.0
    assert job_from_run_config({**rc, "message-ttl": 0.0})["message_ttl"] is None
    assert job_from_run_config({**rc, "message-ttl": 600})["message_ttl"] == 600.0 and message_ttl_s(40.0, 600.0) == 600
    with pytest.raises(RunConfigError, match=r"message-ttl=30 is shorter than timeout=40.0"):
        job_from_run_config({**rc, "message-ttl": 30})
    with pytest.raises(RunConfigError, match=r"message-ttl=-1 must be a number of seconds"):
        job_from_run_config({**rc, "message-ttl": -1})


def test_each_request_lives_the_message_ttl_not_the_timeout(monkeypatch):
    """The messages FlowerTransport pushes are made with Flower's ``ttl`` = the message TTL (default 2 × timeout),
    not the exchange's timeout (``flwr.app.Message`` recorded: a real one needs a run's identity)."""
    import flwr.app

    made = []

    def message(content, dst, kind, *, ttl):
        made.append(ttl)
        return object()

    monkeypatch.setattr(flwr.app, "Message", message)
    from fedsciml.engines.flower.transport import FlowerTransport
    from fedsciml.runtime.transport import Request

    class Grid:
        def __init__(self):
            self.sent = []

        def push_messages(self, msgs):
            self.sent += msgs
            return []  # not delivered: the exchange ends at once

    for ttl, want in ((None, 80.0), (500.0, 500.0)):
        tr = FlowerTransport.__new__(FlowerTransport)
        tr.grid, tr.job, tr.stop, tr.poll_max_s, tr.device = Grid(), {"problem": "sin1d"}, None, 0.01, "cpu"
        tr.timeout_s = 40.0
        from fedsciml.engines.flower.runconfig import message_ttl_s as ttl_of

        tr.message_ttl_s = ttl_of(40.0, ttl)
        out = tr._round_trip({0: 7}, Request("gn_loss", {}), 40.0)
        assert out[0].dropped and made[-1] == want and len(tr.grid.sent) == 1


def test_a_federation_of_the_wrong_size_is_refused_before_the_run():
    app = app_dirs()["app"]
    check_federation_size(app, ["problem='sin1d' clients=3"], ["num-supernodes=3"])
    check_federation_size(app, ["problem='sin1d' clients=3"], [])  # a deployment: nothing to compare here
    with pytest.raises(FlowerRunFailed) as e:
        check_federation_size(app, ["problem='sin1d' clients=3"], ["num-supernodes=2"])
    assert "\n" not in str(e.value) and str(e.value).startswith(
        "the run has clients=3 (--run-config) but the federation num-supernodes=2")
    with pytest.raises(FlowerRunFailed, match=r"clients=2 \(the App's default"):  # the App's pyproject: clients = 2
        check_federation_size(app, [], ["num-supernodes=3"])


def test_flower_run_refuses_the_wrong_size_in_one_line_without_starting_a_run(tmp_path, capsys, monkeypatch):
    """``flower run … clients=3`` on a 2-node federation: one line, exit 1, before ``flwr run`` (no SuperLink is
    needed: the connection named does not even exist).  The command line's own ``main`` in this process (what
    ``python -m fedsciml`` runs), with starting any process — ``flwr run`` included — made a test failure."""
    from fedsciml.cli import main

    def started(*a, **k):
        raise AssertionError(f"a process was started: {a[:1]}")

    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.chdir(deploy.REPO_ROOT)
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    code = main(["flower", "run", "app", "nosuchlink", "--run-config", "problem='sin1d' clients=3",
                 "--federation-config", "num-supernodes=2"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 1 and len(err) == 1 and "num-supernodes=2" in err[0] and "clients=3" in err[0], err


def test_wait_port_accepts_only_the_started_process_listener():
    other = socket.socket()
    other.bind((deploy.HOST, 0))
    other.listen()
    port = other.getsockname()[1]
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:  # this test process listens there, not the process just started: refused, not accepted
        with pytest.raises(deploy.PortTaken, match=f"{deploy.HOST}:{port} is served by another process"):
            deploy._wait_port(port, 20, sleeper, "sleeper")
    finally:
        sleeper.kill()
        sleeper.wait()
        other.close()
    port = deploy.free_port()
    server = subprocess.Popen([sys.executable, "-c", "import socket, time; s = socket.socket(); "
                               f"s.bind(('{deploy.HOST}', {port})); s.listen(); time.sleep(30)"])
    try:
        deploy._wait_port(port, 60, server, "listener")  # its own listener: accepted
    finally:
        server.kill()
        server.wait()


def test_launched_processes_find_flowers_helpers_without_the_venv_on_path(monkeypatch, tmp_path):
    """``flower-superlink`` starts ``flower-superexec`` from ``PATH``: every process the launcher starts gets this
    interpreter's ``bin`` first on its ``PATH``."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = deploy.LocalSuperLink(str(tmp_path)).env()
    first = env["PATH"].split(os.pathsep)[0]
    assert first == os.path.dirname(sys.executable) and os.access(os.path.join(first, "flower-superexec"), os.X_OK)
    assert env["FLWR_TELEMETRY_ENABLED"] == "0"
