"""Issue 40.2: the local deployment has a console entry point, ``python -m fedsciml flower deploy`` (what
``scripts/tools/flower_deploy.py`` now wraps), with progress lines on stderr while it runs and one summary line
on stdout.  A stock SuperLink and one SuperNode on 127.0.0.1 (telemetry off: LocalDeployment's environment)."""
import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from fedsciml.engines.flower.deploy import REPO_ROOT  # noqa: E402


def _deploy(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "fedsciml", "flower", "deploy", *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=timeout)


@pytest.mark.slow
def test_flower_deploy_runs_with_progress_on_stderr_and_the_summary_on_stdout(tmp_path):
    r = _deploy("sin1d", "--clients", "1", "--method", "gn", "--rounds", "1", "--problem-options",
                '{"n_samples": 20}', "--timeout", "120", "--json", str(tmp_path / "r.json"))
    assert r.returncode == 0, r.stderr[-3000:]
    err = r.stderr.splitlines()
    assert err[0].startswith("flower deploy: starting flower-superlink and 1 flower-supernode(s) on 127.0.0.1")
    assert any(ln.startswith("SuperLink on 127.0.0.1:") for ln in err)
    assert any(ln.startswith("flower deploy: run submitted (sin1d, gn, 1 clients)") for ln in err)
    assert sum(ln.startswith("  ") for ln in err) >= 3  # the ServerApp's own lines, as they came
    out = r.stdout.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("sin1d · gn · 1 SuperNodes on 127.0.0.1: ") and "1 round(s)" in out[0]
    assert (tmp_path / "r.json").exists()


@pytest.mark.parametrize("args, message", [
    (["nosuchproblem"], "flower deploy: unknown problem 'nosuchproblem'"),
    (["sin1d", "--options", "[1]"], "flower deploy: --options must be a JSON object"),
    (["sin1d", "--clients", "0"], "flower deploy: --clients must be ≥ 1, got 0"),
])
def test_flower_deploy_bad_input_is_one_line_before_any_process(args, message, capsys, monkeypatch):
    """The command line's own ``main`` (what ``python -m fedsciml`` runs; the test above starts that), in this
    process, with starting a process made a test failure: exit 2 and one line, before any process."""
    from fedsciml.cli import main

    def started(*a, **k):
        raise AssertionError(f"a process was started: {a[:1]}")

    monkeypatch.setattr(subprocess, "Popen", started)
    code = main(["flower", "deploy", *args])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and message in err[0], err
