"""The model out of the ``ridge`` CLI and ``solve … one-shot`` (``--out DIR``), the up-front memory check, and
central DP's one line (issue 21 items 3 and 5; issue 23 item 7)."""
import json
import logging

import pytest
import torch

from fedsciml.ridge.model_io import KIND, read_model, write_model


def test_write_read_model_round_trip(tmp_path):
    coef = torch.linspace(-1, 1, 7, dtype=torch.float64)
    write_model(str(tmp_path), coef, 0.25, {"sigma": 0.1})
    c, b, doc = read_model(str(tmp_path))
    assert torch.equal(c, coef) and b == 0.25 and doc["kind"] == KIND and doc["sigma"] == 0.1
    # the project's loader (fs.load_model, `predict`) turns it into X @ coef + intercept
    import fedsciml as fs

    X = torch.randn(4, 7, dtype=torch.float64)
    assert torch.equal(fs.load_model(str(tmp_path))(X), X @ coef + 0.25)
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(ValueError, match="non-finite"):
        write_model(str(tmp_path / "x"), torch.tensor([1.0, float("nan")]))


def test_ridge_cli_out_writes_the_fitted_model(tmp_path, capsys):
    from fedsciml.cli import main
    from fedsciml.cli.ridge import run_experiment

    out = tmp_path / "m"
    argv = ["--clients", "3", "--dim", "6", "--samples", "30", "--cv", "1e-3:1e2:6", "--seed", "4"]
    assert main(["ridge", *argv, "--out", str(out)]) == 0
    coef, intercept, doc = read_model(str(out))
    ref = run_experiment(clients=3, dim=6, samples=30, cv="1e-3:1e2:6", seed=4, sigma=None)[0]
    assert torch.equal(coef, ref.theta) and intercept == 0.0      # bitwise: the same run, the same operations
    assert doc["sigma"] == ref.extra["sigma_used"] and doc["clients"] == 3 and doc["method"] == "one-shot"
    assert json.loads((out / "result.json").read_text())["runs"][0]["method"] == "one-shot"


def test_solve_one_shot_out_writes_the_model(tmp_path):
    from fedsciml.cli import main

    out = tmp_path / "s"
    assert main(["solve", "ridge-linear", "--method", "one-shot", "--clients", "3", "--dim", "5", "--dp-epsilon",
                 "2", "--quiet", "--out", str(out)]) == 0
    coef, _, doc = read_model(str(out))
    assert coef.shape == (5,) and doc["dp"] == {"epsilon": 2.0, "delta": 1e-5, "central": False}
    # and `predict` evaluates it
    pts, pred = tmp_path / "p.csv", tmp_path / "y.csv"
    pts.write_text("1,0,0,0,0\n0,1,0,0,2\n")
    assert main(["predict", str(out), "--points", str(pts), "--out", str(pred)]) == 0
    got = [float(r.split(",")[-1]) for r in pred.read_text().splitlines()[1:]]
    want = torch.tensor([[1.0, 0, 0, 0, 0], [0, 1, 0, 0, 2]], dtype=torch.float64) @ coef
    assert torch.allclose(torch.tensor(got, dtype=torch.float64), want, rtol=1e-12)


def test_ridge_memory_is_checked_before_anything_is_built(capsys):
    from fedsciml.cli import main

    for extra in (["--dim", "100000"], ["--clients", "1000000"], ["--dim", "10000000"]):
        assert main(["ridge", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "needs about" in err[0] and "available" in err[0]
    assert main(["ridge", "--cv", "1e-3:1:100000000"]) == 2
    assert "count ≤ 10000" in capsys.readouterr().err


def test_central_dp_says_it_trusts_the_server_and_flower_runs_it_through_secagg(capsys, caplog, monkeypatch):
    """In process: one line saying it trusts the server.  On Flower: the job goes to the SecAgg+ App (its run is
    tests/test_flower_secagg.py; here the simulation is replaced by a recorder, which fails the run on purpose)."""
    from fedsciml.cli import main
    from fedsciml.engines.flower import secagg, simulation

    with caplog.at_level(logging.WARNING):
        assert main(["ridge", "--clients", "3", "--dim", "4", "--samples", "20", "--epsilon", "2",
                     "--central-dp"]) == 0
    lines = [r.getMessage() for r in caplog.records if "trusts the server" in r.getMessage()]
    assert len(lines) == 1
    capsys.readouterr()
    seen = []

    def recorder(jobs, clients, *, wait_s=0.0, workdir=None, app=None):
        seen.append((app, [j["method"] for j in jobs], [j["options"].get("dp_central") for j in jobs]))
        raise simulation.EngineFailed("recorded, not run")

    monkeypatch.setattr(simulation, "run_jobs", recorder)
    assert main(["ridge", "--clients", "3", "--dim", "4", "--samples", "20", "--epsilon", "2", "--central-dp",
                 "--engine", "flower"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recorded, not run" in err[0]
    assert seen and seen[0][0] == secagg.APP_DIR and seen[0][2] == [True]
    import fedsciml as fs
    from fedsciml.problems import get_problem

    seen.clear()
    with pytest.raises(simulation.EngineFailed):
        fs.solve(get_problem("ridge-linear", dim=4), "one-shot", clients=3, engine="flower", dp_epsilon=2.0)
    assert seen[0][0] is None   # local DP: fedsciml's generic App
