"""Results built once (issue 32): every :class:`~fedsciml.runtime.results.Result` the package makes comes from
:func:`fedsciml.runtime.driver.make_result` — the driver's runs through ``run_result``, the ``ridge`` preset's
pooled oracle directly — and the preset's baselines and ``bench images``' records are the driver's Results of
their runs, relabelled."""
import ast
import pathlib

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _result_calls():
    """``(file, enclosing function)`` of every call ``Result(...)`` in the package's source."""
    out = []
    for path in sorted((ROOT / "fedsciml").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Result":
                    out.append((str(path.relative_to(ROOT)), fn.name))
    return out


def test_the_package_constructs_a_result_in_one_place():
    assert _result_calls() == [("fedsciml/runtime/driver.py", "make_result")]


def test_the_ridge_preset_s_results_are_the_driver_s():
    """The baseline is the driver's fedavg-sgd run under the baseline's name (θ, history and the derived fields
    bitwise: the same run, the same operations); the pooled oracle's derived fields are make_result's."""
    from fedsciml.cli.ridge import run_experiment
    from fedsciml.problems import get_problem
    from fedsciml.runtime.driver import plan, run

    one, central, avg = run_experiment(clients=3, dim=5, samples=25, sigma=0.2, baselines="fedavg", rounds=3, seed=1)
    problem = get_problem("ridge-linear", dim=5, n_samples=25, sigma=0.2, penalty="server")
    ref = run(plan(problem, "fedavg-sgd", clients=3, seed=1, rounds=3, mu=0.0, sigma=one.extra["sigma_used"],
                   dropout=0.0))
    assert avg.method == "fedavg" and torch.equal(avg.theta, ref.theta)
    timeless = [{k: v for k, v in row.items() if k != "time_s"} for row in avg.history]
    assert timeless == [{k: v for k, v in row.items() if k != "time_s"} for row in ref.history]
    assert avg.final["loss"] == ref.final["loss"] and avg.final["mse"] == ref.final["mse"]
    assert {k: avg.options[k] for k in ref.options} == ref.options and avg.options["sigma_used"] == 0.2
    assert (avg.dtype, avg.n_params, avg.clients, avg.device) == (ref.dtype, ref.n_params, ref.clients, ref.device)
    assert central.method == "centralized" and central.dtype == "float64" and central.n_params == 5
    assert central.final["rel_error"] == 0.0 and central.options["solver"] == "pooled ridge (Cholesky)"
