"""Issue 30 items 9/10: result files say what they hold — solver and whole-command seconds named as such,
``schema_version``, a table's column names kept in ``model.json`` and ``predict``, the checkpoint docs' recipe
true; status lines on stderr and ``predict --out -`` on stdout."""
import csv
import io
import json
import os

import numpy as np
import torch

import fedsciml as fs
from fedsciml.cli import main
from fedsciml.runtime.results import SCHEMA_VERSION, Result


def _tables(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for k in range(2):
        X = rng.normal(size=(30, 3))
        y = X @ [1.0, -2.0, 0.5] + 3.0 + 0.01 * rng.normal(size=30)
        p = tmp_path / f"site{k}.csv"
        with open(p, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["age", "dose", "price", "y"])
            w.writerows(np.c_[X, y].tolist())
        paths.append(str(p))
    return paths


def test_result_json_names_solver_and_wall_seconds_and_its_schema(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["solve", "sin1d", "--clients", "2", "--n-samples", "20", "--method", "gn", "--rounds", "2",
                 "--no-progress", "--out", str(out)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    d = json.loads((out / "result.json").read_text())
    assert d["schema_version"] == SCHEMA_VERSION == 2 and "wall_time_s" not in d
    assert 0 < d["solver_seconds"] <= d["wall_seconds"]
    assert "wrote" not in cap.out and f"wrote {out}/result.json" in cap.err   # status lines on stderr
    old = {k: v for k, v in d.items() if k not in ("schema_version", "solver_seconds", "wall_seconds")}
    r = Result.from_dict({**old, "wall_time_s": 1.5})      # a schema-1 file: its one time was the solver's
    assert r.solver_seconds == 1.5 and r.wall_time_s == 1.5 and r.wall_seconds is None
    res = fs.solve("sin1d", "centralized", max_iters=2, problem_options={"n_samples": 20})
    assert 0 < res.solver_seconds <= res.wall_seconds


def test_table_column_names_reach_model_json_and_predict(tmp_path, capsys):
    paths = _tables(tmp_path)
    out = tmp_path / "model"
    code = main(["solve", "table", "--tables", ",".join(paths), "--clients", "2", "--method", "one-shot",
                 "--fit-intercept", "--method-sigma", "1e-6", "--quiet", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    meta = json.loads((out / "model.json").read_text())
    assert meta["inputs"] == ["age", "dose", "price"] and meta["outputs"] == ["y"]
    pts = tmp_path / "pts.csv"   # a site-table-like file: other order, the target column too
    pts.write_text("y,price,age,dose\n0,0,1,0\n0,2,0,1\n")
    capsys.readouterr()
    assert main(["predict", str(out), "--points", str(pts), "--out", "-"]) == 0
    cap = capsys.readouterr()
    rows = list(csv.reader(io.StringIO(cap.out)))
    assert rows[0] == ["age", "dose", "price", "y"] and not (tmp_path / "-").exists()
    got = np.array([[float(v) for v in r] for r in rows[1:]])
    assert np.allclose(got[:, :3], [[1, 0, 0], [0, 1, 2]])
    assert np.allclose(got[:, 3], [1 + 3, -2 + 1 + 3], atol=0.05)   # by name: age=1 → 1+3; dose=1, price=2
    assert "wrote" not in cap.out


def test_the_checkpoint_docs_recipe_reads_state_pt(tmp_path, capsys):
    ck = tmp_path / "ck"
    assert main(["solve", "bratu", "--clients", "2", "--method", "gn", "--rounds", "1", "--quiet",
                 "--checkpoint", str(ck)]) == 0
    raw = open(ck / "state.pt", "rb").read()
    state = torch.load(io.BytesIO(raw[raw.index(b"\n") + 1:]), weights_only=True)
    from fedsciml.runtime.checkpoint import read

    assert state["round"] == read(os.path.join(ck, "state.pt"))["round"] == 1
