"""Issue 31: ``python -m fedsciml flower run`` exits non-zero, with Flower's reason, when the Flower run fails —
``flwr run --stream`` exits 0 whatever happens to the run.  On a local simulation SuperLink (127.0.0.1, private
FLWR_HOME, telemetry off: :class:`fedsciml.engines.flower.deploy.LocalSuperLink`); each run starts Ray (~15 s)."""
import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from fedsciml.engines.flower.deploy import REPO_ROOT, LocalSuperLink  # noqa: E402


@pytest.fixture(scope="module")
def link(tmp_path_factory):
    with LocalSuperLink(str(tmp_path_factory.mktemp("flower-launch")), simulation=True) as sl:
        yield sl


def _cli(link, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "fedsciml", "flower", "run", *args], capture_output=True, text=True,
                          env=link.env(), cwd=REPO_ROOT, timeout=timeout)


def test_a_failed_run_exits_1_with_the_run_id_status_and_reason_in_one_line(link):
    bare = subprocess.run([sys.executable, "-m", "fedsciml", "flower", "app-dir"], capture_output=True, text=True,
                          env=link.env(), cwd=REPO_ROOT).stdout.strip()
    plain = subprocess.run([link.bin + "/flwr", "run", bare, "fedsciml", "--stream", "--run-config",
                            "problem='nosuch' clients=2", "--federation-config", "num-supernodes=2"],
                           capture_output=True, text=True, env=link.env(), cwd=REPO_ROOT, timeout=300)
    assert plain.returncode == 0 and "unknown problem 'nosuch'" in plain.stdout + plain.stderr  # Flower's own exit
    r = _cli(link, "app", "fedsciml", "--no-stream", "--run-config", "problem='nosuch' clients=2",
             "--federation-config", "num-supernodes=2")
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(err) == 1, r.stderr
    assert err[0].startswith("error: Flower run ") and " ended finished:failed: Simulation failed with exception: " \
        "run config: unknown problem 'nosuch'; available: " in err[0]


def test_a_completed_run_exits_0_and_says_so(link, tmp_path):
    r = _cli(link, "app", "fedsciml", "--run-config", f"problem='sin1d' method='gn' clients=2 out='{tmp_path}/r' "
             "problem-options='{\"n_samples\": 20}' method-options='{\"rounds\": 1}'",
             "--federation-config", "num-supernodes=2")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1].endswith(" finished:completed")
    assert (tmp_path / "r").exists()


@pytest.mark.parametrize("args, message", [
    (["/no/such/app"], "flower run: APP '/no/such/app' is neither a directory nor one of fedsciml's Apps (app, secagg)"),
    (["app", "--timeout", "-1"], "argument --timeout: must be a finite number of seconds > 0, got '-1'"),
])
def test_bad_arguments_are_one_line_and_exit_2(args, message, capsys, monkeypatch):
    """The command line's own ``main`` (what ``python -m fedsciml`` runs; the tests above start that) in this process,
    with starting a process made a test failure: exit 2 and one line, before anything is started."""
    from fedsciml.cli import main

    def started(*a, **k):
        raise AssertionError(f"a process was started: {a[:1]}")

    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.chdir(REPO_ROOT)
    code = main(["flower", "run", *args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines  # a --help pointer may follow


def test_a_flwr_cli_failure_is_one_line(tmp_path):
    """flwr's own JSON error (here: a SuperLink connection its config does not have) starts with a newline and may
    span lines: the error is still one line (it was three), exit 1."""
    import os

    r = subprocess.run([sys.executable, "-m", "fedsciml", "flower", "run", "app", "nosuchlink", "--no-stream"],
                       capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                       env={**os.environ, "FLWR_HOME": str(tmp_path)})
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(err) == 1, r.stderr
    assert err[0].startswith("error: flwr run failed: ") and "SuperLink connection 'nosuchlink' not found" in err[0]
