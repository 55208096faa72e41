"""Start-up: what the command line imports before it runs anything, and what the pre-run checks compute.

Each import check runs in a fresh interpreter (what a module imports is a property of a new process)."""
import pathlib
import subprocess
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _fresh(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})


def test_help_imports_neither_torch_nor_a_registry():
    _fresh("import sys; from fedsciml.cli import build_parser; build_parser().format_help(); "
           "bad = [m for m in ('torch', 'fedsciml.problems', 'fedsciml.methods', 'fedsciml.images') if m in sys.modules]; "
           "assert not bad, bad")


def test_the_solve_parser_imports_no_image_ridge_estimator_or_root_finder_stack():
    _fresh("import sys; from fedsciml.cli import build_parser; "
           "solve = build_parser()._subparsers._group_actions[0].choices['solve']; "
           "assert any('--rank' in a.option_strings for a in solve._actions); "
           "bad = [m for m in ('fedsciml.images', 'sklearn', 'scipy.optimize', 'flwr', 'matplotlib') "
           "if m in sys.modules]; assert not bad, bad")


def test_an_unused_subcommand_is_not_built():
    _fresh("import sys; from fedsciml.cli.main import build_parser; "
           "a = build_parser().parse_args(['predict', 'd', '--points', 'p.csv', '--out', 'o.csv']); "
           "assert a.model == 'd'; assert 'fedsciml.images' not in sys.modules and 'fedsciml.methods' not in sys.modules")


def test_bratu_constants_are_computed_on_first_use():
    from fedsciml.problems import pde1d

    s = pde1d.BRATU_THETA_C / 4  # the fold: (θ/4)·tanh(θ/4) = 1
    assert abs(s * torch.tanh(torch.tensor(s, dtype=torch.float64)).item() - 1.0) < 1e-14
    assert pde1d.BRATU_LAMBDA_C == pde1d._bratu_critical()[1]


def test_check_objectives_forms_no_jacobian(monkeypatch):
    """The pre-run check evaluates residuals only: a Jacobian at θ₀ is the first round's work."""
    from fedsciml.core.objective import PointwiseLeastSquares
    from fedsciml.problems import get_problem
    from fedsciml.runtime.checks import check_objectives

    def no_jacobian(*a, **k):
        raise AssertionError("check_objectives formed a Jacobian")

    monkeypatch.setattr(PointwiseLeastSquares, "_part_jacobian", no_jacobian)
    monkeypatch.setattr(PointwiseLeastSquares, "_part_residual_and_jacobian", no_jacobian)
    problem = get_problem("bratu")
    objectives = problem.client_objectives(4, seed=0, device=torch.device("cpu"))
    check_objectives(objectives, problem.init_params(0, device=torch.device("cpu")))
