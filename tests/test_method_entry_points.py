"""An installed method plugin (entry-point group ``fedsciml.methods``, template ``examples/flower_own_method``) is
found by name where a method is asked for (``fs.solve``, the CLI, a Flower ServerApp) and its client queries are
answered by a ClientApp (``query_names``); a method that Flower's nodes cannot import (a ``--plugin`` file) is
refused in one line before any Flower process starts.  The run of the installed method on Flower's simulation:
``tests/test_flower.py::test_a_users_own_method_installed_with_an_entry_point_runs_on_flower``."""
import sys

import pytest
import torch

import fedsciml as fs
from _own_pde import forget_method
from fedsciml.problems import get_problem
from fedsciml.runtime.client import Client
from fedsciml.runtime.registry import METHODS, load_method_entry_points, method_entry_point_modules
from fedsciml.runtime.transport import LocalTransport

OPTS = {"n_interior": 60}
K, KW = 3, dict(rounds=2, local_steps=5)


@pytest.fixture
def installed(tmp_path):
    from _own_pde import install_own_method

    site = install_own_method(str(tmp_path))
    sys.path.insert(0, site)
    yield site
    sys.path.remove(site)
    forget_method("my-avg", "my_update", "my_fedsciml_method")


def _unbatched(problem):
    torch.manual_seed(0)
    objs = problem.client_objectives(K, seed=0)
    return LocalTransport([Client(i, o) for i, o in enumerate(objs)], vectorize=False)


def test_an_installed_method_is_found_by_name_and_runs_fedavgs_step(installed):
    assert "my-avg" not in METHODS and method_entry_point_modules() == {"my-avg": "my_fedsciml_method"}
    problem = get_problem("bratu", **OPTS)
    mine = fs.solve(problem, method="my-avg", clients=K, transport=_unbatched(problem), **KW)
    assert "my-avg" in METHODS and sys.modules["my_fedsciml_method"].QUERY == "my_update"
    fedavg = fs.solve(get_problem("bratu", **OPTS), method="fedavg", clients=K,
                      transport=_unbatched(get_problem("bratu", **OPTS)), **KW)
    # bitwise: the template's handler is FedAvg's local step, the same operations in the same order
    assert torch.equal(mine.theta, fedavg.theta) and mine.final == fedavg.final


def test_a_flower_client_app_answers_the_installed_methods_query(installed):
    from fedsciml.engines.flower.apps import query_names

    assert "my_update" in query_names()


def test_a_plugin_that_fails_to_import_is_one_line_naming_it(tmp_path):
    (tmp_path / "broken_method.py").write_text("raise RuntimeError('boom')\n")
    info = tmp_path / "broken_method-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-method\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fedsciml.methods]\nbroken = broken_method\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(ValueError, match=r"method plugin 'broken' \(broken_method\) failed to import: "
                                             r"RuntimeError: boom"):
            load_method_entry_points()
        with pytest.raises(ValueError, match="method plugin 'broken'"):
            fs.solve("bratu", method="no-such-method", clients=2, rounds=1)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("broken_method", None)


def test_a_plugin_file_method_on_flower_is_refused_before_any_process(tmp_path):
    pytest.importorskip("flwr")
    from fedsciml.cli.plugins import load_plugins

    path = tmp_path / "file_method_test.py"
    path.write_text(
        "from fedsciml.methods.averaging import FedAvgConfig, fedavg_strategy\n"
        "from fedsciml.runtime.registry import METHODS, Method, register_method\n"
        "if 'file-avg' not in METHODS:\n"
        "    register_method(Method('file-avg', FedAvgConfig, strategy=lambda c, x: fedavg_strategy(c, x)))\n")
    load_plugins([str(path)])
    try:
        with pytest.raises(ValueError, match="engine 'flower': method 'file-avg' is defined in "
                                             "'fedsciml_plugin_file_method_test', "
                                             "which Flower's nodes do not import; install it as a package with a "
                                             "'fedsciml.methods' entry point"):
            fs.solve("bratu", method="file-avg", clients=2, rounds=1, engine="flower")
    finally:
        forget_method("file-avg", module="fedsciml_plugin_file_method_test")
