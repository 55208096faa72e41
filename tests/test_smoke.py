import subprocess
import sys


def test_list_runs():
    out = subprocess.run([sys.executable, "-m", "fedsciml", "list"], capture_output=True, text=True, check=True).stdout
    for name in ("bratu", "allen-cahn", "fisher", "reaction-diffusion", "poisson", "sin1d", "gauss2d"):
        assert name in out


def test_bad_input_is_one_line_exit_2():
    r = subprocess.run([sys.executable, "-m", "fedsciml", "solve", "bratu", "--lam", "4"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "λ_c" in r.stderr
