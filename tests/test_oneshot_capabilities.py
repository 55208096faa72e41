"""One-shot is named only inside ``methods/``: what the CLI, the Flower App and the result writer need of it is
declared on its registry entry (``Method.linear_model``, ``Method.secure_sum``), so a new one-shot-like method,
registered here from a test file, gets its model written and its central DP refused by the generic Flower App
without an edit outside its own file."""
import dataclasses

import pytest
import torch

import fedsciml as fs
from fedsciml.methods import METHODS
from fedsciml.methods.oneshot import CENTRAL_DP_REFUSED
from fedsciml.problems import get_problem
from fedsciml.ridge.model_io import model_meta, read_model, writes_model
from fedsciml.runtime.registry import register_method

NAME = "one-shot-copy-test"


@pytest.fixture
def copy_method():
    """A new method: one-shot's strategy and capabilities under another name (what a plugin file declares)."""
    register_method(dataclasses.replace(METHODS["one-shot"], name=NAME))
    yield NAME
    METHODS.pop(NAME, None)


def test_a_new_one_shot_method_writes_its_model_from_solve_out(copy_method, tmp_path):
    from fedsciml.cli import main

    out = tmp_path / "s"
    assert main(["solve", "ridge-linear", "--method", NAME, "--clients", "3", "--dim", "5", "--quiet",
                 "--out", str(out)]) == 0
    coef, intercept, doc = read_model(str(out))
    ref = fs.solve(get_problem("ridge-linear", dim=5), "one-shot", clients=3)
    assert torch.equal(coef, ref.theta) and intercept == 0.0  # the same strategy, the same operations: bitwise
    assert doc["method"] == NAME and doc["sigma"] == ref.extra["sigma_used"] and doc["clients"] == 3


def test_the_flower_result_writer_asks_the_method(copy_method, tmp_path):
    from fedsciml.engines.flower.resultio import write_model_files

    pb = get_problem("ridge-linear", dim=4)
    r = fs.solve(pb, NAME, clients=2)
    assert writes_model(r) and len(write_model_files(r, pb, str(tmp_path / "m"))) == 2
    assert read_model(str(tmp_path / "m"))[2]["method"] == NAME
    base = fs.solve(pb, "fedavg-sgd", clients=2, rounds=1)  # a method that declares no linear model: none written
    assert not writes_model(base) and write_model_files(base, pb, str(tmp_path / "n")) == []
    with pytest.raises(ValueError, match="method 'fedavg-sgd' fits no linear model to write"):
        model_meta(base)


def test_central_dp_is_refused_by_the_generic_app_through_the_methods_hook(copy_method):
    from fedsciml.engines.flower.apps import run_on_grid
    from fedsciml.engines.flower.jobs import is_secagg_job

    pb = get_problem("ridge-linear", dim=4)
    opts = {"dp_epsilon": 2.0, "dp_central": True}
    assert METHODS[NAME].needs_secure_sum(METHODS[NAME].make_config(opts)) == CENTRAL_DP_REFUSED
    assert METHODS[NAME].needs_secure_sum(METHODS[NAME].make_config({"dp_epsilon": 2.0})) is None
    assert METHODS["gn"].needs_secure_sum(METHODS["gn"].make_config({})) is None  # no hook: never
    job = {"kind": "solve", "problem": "ridge-linear", "clients": 3, "options": opts}
    assert is_secagg_job({**job, "method": "one-shot"})  # the SecAgg+ App is one-shot's own
    assert not is_secagg_job({**job, "method": NAME})   # so the copy goes to the generic App, which refuses it
    with pytest.raises(ValueError) as e:
        run_on_grid(None, pb, NAME, 3, **opts)  # refused before the grid is used
    assert str(e.value) == CENTRAL_DP_REFUSED
