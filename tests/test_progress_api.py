"""Issue 30 item 5: progress visible from Python (``fs.solve(..., progress=True)`` in a plain script) and bars
with a total and an ETA under a time budget."""
import io
import logging
import os
import subprocess
import sys

from fedsciml.runtime import history
from fedsciml.runtime.history import Recorder, show_progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_plain_script_sees_progress_lines_on_stderr():
    """No logging configured (a plain script): ``progress=True`` prints progress lines on stderr."""
    code = ("import fedsciml as fs\n"
            "fs.solve('sin1d', 'centralized', max_iters=6, progress=True, every=2)\n"
            "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "ok"   # the library never writes stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("[fedsciml]") and "loss=" in ln]
    assert len(lines) >= 3, p.stderr


def test_show_progress_leaves_a_configured_application_alone(monkeypatch):
    log = logging.getLogger("fedsciml.progress")
    monkeypatch.setattr(logging.getLogger(), "handlers", [])   # no pytest capture handlers: a bare process
    # an earlier CLI test in the same process may have left its handler on "fedsciml": a bare process has none
    monkeypatch.setattr(logging.getLogger("fedsciml"), "handlers", [])
    monkeypatch.setattr(logging.getLogger("fedsciml"), "propagate", True)
    mine = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(mine)
    try:
        with show_progress(True):
            assert log.handlers == []                      # the application's own handler gets the lines
            assert log.getEffectiveLevel() <= logging.INFO
        assert log.level == logging.NOTSET
    finally:
        logging.getLogger().removeHandler(mine)
    with show_progress(True):
        assert len(log.handlers) == 1                      # nothing configured: a stderr handler for the run
    assert log.handlers == []


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_a_budget_bar_counts_the_budgets_seconds(monkeypatch):
    monkeypatch.setattr(sys, "stderr", _Tty())
    monkeypatch.setitem(history._BARS, "on", True)
    rec = Recorder(lambda th: {}, 10, budget=30.0, progress=True, total=None, label="gn")
    assert rec._bar is not None and rec._bar.total == 30.0 and "of budget" in rec._bar.bar_format
    rec.record(0, None, 5.0)
    rec.close()
    steps = Recorder(lambda th: {}, 10, budget=30.0, progress=True, total=7, label="gn")
    assert steps._bar.total == 7                           # a step count, when known, is the total
    steps.close()
