"""What a site operator or a pip user needs without starting Flower (issue 29): where the installed Flower Apps
are, a user's own problem found by name through an installed package's entry point (as every Flower process
finds it), and a Flower run's result directory — the one ``solve --out`` writes, a model ``fs.load_model``
reads."""
from __future__ import annotations

import os
import sys

import torch

import fedsciml as fs
from fedsciml.cli import main


def test_flower_app_dir_prints_the_installed_app_directories(capsys):
    assert main(["flower", "app-dir"]) == 0
    app = capsys.readouterr().out.strip()
    assert os.path.isfile(os.path.join(app, "pyproject.toml"))
    assert main(["flower", "app-dir", "--all"]) == 0
    rows = dict(line.split("\t") for line in capsys.readouterr().out.strip().splitlines())
    assert rows["app"] == app and os.path.isfile(os.path.join(rows["secagg"], "pyproject.toml"))


def test_an_installed_problem_plugin_is_found_by_name(tmp_path):
    """examples/flower_own_pde as pip leaves it (module + dist-info with the entry point): ``get_problem`` by
    name imports it (nothing imported by hand), and Flower's up-front check accepts it (its nodes do the same)."""
    from _own_pde import install_own_pde
    from fedsciml.problems import get_problem
    from fedsciml.problems.registry import REGISTRY, entry_point_modules

    site = install_own_pde(str(tmp_path))
    sys.path.insert(0, site)
    try:
        assert entry_point_modules()["my-helmholtz"] == "my_fedsciml_pde"
        problem = get_problem("my-helmholtz", n_interior=20)
        assert type(problem).__module__ == "my_fedsciml_pde"
        try:
            from fedsciml.engines.flower.simulation import _check_registered
        except ImportError:  # pragma: no cover - flwr not installed
            return
        _check_registered(problem)
    finally:
        sys.path.remove(site)
        REGISTRY.pop("my-helmholtz", None)
        sys.modules.pop("my_fedsciml_pde", None)


def test_a_flower_result_directory_is_the_solve_out_directory(tmp_path):
    """What the App's ``out`` writes (:func:`write_result`): result.json, history.csv (with exchanges), θ bitwise,
    and the model that ``fs.load_model`` reads — predicting what the run's own parameters predict."""
    from fedsciml.engines.flower.resultio import read_result, ready, write_result

    problem = fs.get_problem("bratu", n_interior=30)
    res = fs.solve(problem, "gn", clients=2, rounds=2)
    out = str(tmp_path / "flwr_out")
    assert not ready(out)
    write_result(res, out, problem)
    assert ready(out)
    assert {"result.json", "history.csv", "theta.safetensors", "model.json", "model.safetensors"} <= set(os.listdir(out))
    back = read_result(out)
    assert torch.equal(back.theta, res.theta) and back.history[-1]["exchanges_total"] == 3
    x = torch.linspace(0, 1, 17, dtype=torch.float64).reshape(-1, 1)
    fs.save_model(res, problem, str(tmp_path / "ref"))
    assert torch.equal(fs.load_model(out)(x), fs.load_model(str(tmp_path / "ref"))(x))
