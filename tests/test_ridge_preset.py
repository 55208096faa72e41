"""The ``ridge`` preset is the ridge layer's (:mod:`fedsciml.ridge.preset`): the method it runs and its baselines
are registered methods with the options the preset gives them, and the command line names no method outside a
registry lookup (the CLI builds parsers from the registries and prints what the layers return)."""
from __future__ import annotations

import ast
import pathlib

import pytest

import fedsciml.engines  # noqa: F401  (every problem method and the ridge baselines registered)
from fedsciml.options import declared
from fedsciml.problems import get_problem
from fedsciml.ridge import preset
from fedsciml.runtime.driver import METHODS, get_method

CLI = pathlib.Path(__file__).resolve().parents[1] / "fedsciml" / "cli"


def test_the_preset_names_registered_ridge_methods_that_take_its_options():
    assert get_method(preset.METHOD, "ridge").name == preset.METHOD
    help_text = declared(preset.PRESET)["baselines"][1].help
    for name, base in preset.BASELINES.items():
        spec = get_method(base.method, "ridge")  # registered, and applies to ridge problems
        options = spec.config.specs()
        assert "mu" in options and (base.dp_grad_clip is None or "dp_grad_clip" in options), name
        assert name in help_text, name  # --baselines' help is generated from BASELINES
    assert set(preset.PROBLEMS.values()) <= {"ridge-linear", "ridge-rff"}


def test_a_baseline_is_refused_by_name_and_dp_baselines_need_epsilon():
    with pytest.raises(ValueError) as e:  # refused before any problem is built
        preset.run_preset("linear", {}, {}, get_problem=None, baselines="fedavg,nope")
    assert str(e.value) == f"unknown baseline 'nope'; allowed: {', '.join(preset.BASELINES)}"
    dp = [n for n, b in preset.BASELINES.items() if b.dp_grad_clip is not None]
    assert dp, "a DP baseline is declared"
    with pytest.raises(ValueError) as e:
        preset.run_preset("linear", {"dim": 3, "n_samples": 20}, {}, get_problem=get_problem, clients=2,
                          baselines=dp[0])
    assert str(e.value) == f"{dp[0]} needs dp_epsilon"


def _strings_outside_docstrings(tree):
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docstrings]


def test_the_cli_names_no_method_outside_a_registry_lookup():
    """No string constant of ``fedsciml/cli`` (docstrings and comments aside) is a registered method's name: a
    method is found through the registry (or a layer's constant, as ``ridge.preset.METHOD``), never spelled."""
    import fedsciml.images  # noqa: F401  (the image methods too)

    found = [(f.name, n.lineno, n.value) for f in sorted(CLI.glob("*.py"))
             for n in _strings_outside_docstrings(ast.parse(f.read_text(encoding="utf-8"))) if n.value in METHODS]
    assert len(METHODS) > 10 and found == []
