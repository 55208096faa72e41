"""A process a :class:`LocalSuperLink` starts dies with the process that started it, even when that one is killed
with SIGKILL (no atexit stop runs then): before, a battery's timeouts left four ``flower-superlink`` processes
running, orphaned, for 48 minutes.  The child here is a plain ``sleep`` started through the same ``_start``."""
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("flwr")

SCRIPT = r"""
import sys, time
from fedsciml.engines.flower.deploy import LocalSuperLink
link = LocalSuperLink(sys.argv[1])
p = link._start("sleeper", ["sleep", "120"])
print(p.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_started_process_ends_when_its_starter_is_killed(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    parent = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the started process outlived its killed starter"
    finally:
        parent.kill()
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError):
            pass
