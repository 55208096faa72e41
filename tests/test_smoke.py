import subprocess
import sys


def test_list_runs():
    out = subprocess.run([sys.executable, "-m", "fedsciml", "list"], capture_output=True, text=True, check=True).stdout
    for name in ("bratu", "allen-cahn", "fisher", "reaction-diffusion", "poisson", "sin1d", "gauss2d"):
        assert name in out


def test_bad_input_is_one_line_exit_2(capsys):
    """The command line's own ``main`` (what ``python -m fedsciml`` runs: test_list_runs starts that) in this process:
    exit 2, the reason on stderr, no traceback (an exception would propagate out of main here)."""
    from fedsciml.cli import main

    assert main(["solve", "bratu", "--lam", "4"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "λ_c" in err
