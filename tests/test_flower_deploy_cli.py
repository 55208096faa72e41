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
def test_flower_deploy_bad_input_is_one_line_before_any_process(args, message):
    r = _deploy(*args, timeout=120)
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(err) == 1 and message in err[0], r.stderr
