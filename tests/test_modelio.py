"""The trained model out of a run: safetensors + JSON, loaded in a fresh process, equal to the run's own
prediction bitwise (the loader repeats the run's operations in the same order: bitwise is guaranteed)."""
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

import fedsciml as fs
from fedsciml.runtime.modelio import ModelFileError, read_model, write_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fresh_process_prediction(model_dir, points_path, out_path, problem_code=""):
    code = (f"import torch, fedsciml as fs\nfrom safetensors.torch import load_file, save_file\n{problem_code}\n"
            f"u = fs.load_model({model_dir!r}{', problem=P()' if problem_code else ''})\n"
            f"save_file({{'u': u(load_file({points_path!r})['x']).contiguous()}}, {out_path!r})\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return load_file(out_path)["u"]


@pytest.mark.parametrize("name, opts", [("heat-inverse", {"n_interior": 40, "n_boundary": 8}),
                                        ("kovasznay", {"n_interior": 30, "n_boundary": 6}),
                                        ("bratu", {"n_interior": 30})])
def test_round_trip_fresh_process_bitwise(tmp_path, name, opts):
    p = fs.get_problem(name, **opts)
    r = fs.solve(p, method="gn", clients=2, rounds=2)
    fs.save_model(r, p, tmp_path / "model")
    meta = json.loads((tmp_path / "model" / "model.json").read_text())
    assert meta["kind"] == "field" and meta["problem"] == name and meta["options"] == p.options
    x = p.test_inputs()[::7].contiguous()
    save_file({"x": x}, str(tmp_path / "x.safetensors"))
    got = _fresh_process_prediction(str(tmp_path / "model"), str(tmp_path / "x.safetensors"), str(tmp_path / "u.st"))
    own = p.predict(r.theta, x)
    assert got.shape == own.shape and torch.equal(got, own)
    if name == "heat-inverse":
        assert meta["coefficients"]["k"] == float(r.theta[-1]) and meta["n_network_params"] == r.theta.numel() - 1
    if name == "kovasznay":
        assert meta["outputs"] == ["u", "v", "p"] and got.shape == (x.shape[0], 3)


def test_ansatz_model_needs_its_problem(tmp_path):
    import math

    from fedsciml.problems.conditions import Dirichlet  # noqa: F401  (the problem states none: the ansatz holds)
    from fedsciml.problems.geometry import Interval

    class P(fs.DomainPDE):
        name = "t-ansatz-io"
        geometry = Interval(0, 1)
        hidden = (8,)
        conditions = []

        def ansatz(self, x, out):
            return x[0] * (1 - x[0]) * out

        def equation(self, u, x):
            return -u.diff(x, "x", "x") - math.pi ** 2 * torch.sin(math.pi * x[0])

    p = P(n_interior=20)
    r = fs.solve(p, method="gn", clients=1, rounds=2)
    fs.save_model(r, p, tmp_path / "m")
    with pytest.raises(ModelFileError, match="hard-constraint ansatz"):
        fs.load_model(tmp_path / "m")
    x = torch.linspace(0, 1, 11, dtype=torch.float64)[:, None]
    assert torch.equal(fs.load_model(tmp_path / "m", problem=p)(x), p.predict(r.theta, x))


def test_reader_refuses_other_files(tmp_path):
    with pytest.raises(ModelFileError, match="model.json is missing"):
        read_model(str(tmp_path))
    ones = torch.ones(3, dtype=torch.float64)
    write_model(str(tmp_path / "r"), {"w": ones}, {"kind": "custom"})  # a kind with no loader
    t, meta = read_model(str(tmp_path / "r"))
    assert meta["kind"] == "custom" and torch.equal(t["w"], ones)
    with pytest.raises(ValueError, match="must be finite float64, got torch.float32"):
        write_model(str(tmp_path / "s"), {"w": torch.ones(3)}, {"kind": "custom"})
    with pytest.raises(ModelFileError, match="no loader"):
        fs.load_model(tmp_path / "r")
    (tmp_path / "r" / "model.json").write_text('{"format": "other"}')
    with pytest.raises(ModelFileError, match="not a fedsciml model description"):
        read_model(str(tmp_path / "r"))
    with pytest.raises(ValueError, match="must name its kind"):
        write_model(str(tmp_path / "q"), {"w": torch.ones(1)}, {})


def test_cli_out_and_predict(tmp_path):
    from fedsciml.cli import main

    out = tmp_path / "run"
    assert main(["solve", "heat", "--method", "gn", "--clients", "2", "--rounds", "1", "--n-interior", "20",
                 "--n-boundary", "5", "--out", str(out), "--quiet"]) == 0
    (tmp_path / "pts.csv").write_text("x,t\n0.5,0.5\n1.0,0.0\n0.25,1.0\n")
    assert main(["predict", str(out), "--points", str(tmp_path / "pts.csv"), "--out", str(tmp_path / "u.csv")]) == 0
    lines = (tmp_path / "u.csv").read_text().splitlines()
    assert lines[0] == "x,t,u"
    got = torch.tensor([float(r.split(",")[2]) for r in lines[1:]], dtype=torch.float64)
    x = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.25, 1.0]], dtype=torch.float64)
    assert torch.equal(got, fs.load_model(out)(x))  # repr of a float64 round-trips exactly
    (tmp_path / "bad.csv").write_text("0.5\n0.25\n")
    assert main(["predict", str(out), "--points", str(tmp_path / "bad.csv"), "--out", str(tmp_path / "v.csv")]) == 2
    assert main(["predict", str(tmp_path), "--points", str(tmp_path / "pts.csv"), "--out", str(tmp_path / "v.csv")]) == 2


def test_ridge_cli_model_loads_as_kind_ridge(tmp_path):
    from fedsciml.cli import main
    from fedsciml.ridge.model_io import write_model as write_ridge

    coef = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    write_ridge(str(tmp_path), coef, 0.25, {"sigma": 0.1})
    u = fs.load_model(tmp_path)
    X = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    assert u.meta["kind"] == "ridge" and torch.equal(u(X), X @ coef + 0.25)
    (tmp_path / "pts.csv").write_text("1,2,3\n0,0,0\n")
    assert main(["predict", str(tmp_path), "--points", str(tmp_path / "pts.csv"), "--out", str(tmp_path / "y.csv")]) == 0
    assert [float(r.split(",")[-1]) for r in (tmp_path / "y.csv").read_text().splitlines()[1:]] == [4.75, 0.25]
