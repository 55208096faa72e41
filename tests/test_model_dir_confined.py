"""Issue 38, finding 7: a model directory names nothing outside itself.  A crafted ``model.json`` cannot make
``fs.load_model`` / ``predict`` open the files it names (nor show their content); a ``model.safetensors`` (or
``model.json``) that is a link out of the directory — to ``/proc/self/mem``, to another model's file — is one
line; a link within the directory is followed."""
import importlib
import json
import os
import shutil

import pytest
import torch

import fedsciml as fs
from fedsciml.problems import get_problem
from fedsciml.runtime.modelio import ModelFileError
from fedsciml.runtime.results import Result

cli_main = importlib.import_module("fedsciml.cli.main")


def field_dir(root, name="m") -> str:
    p = get_problem("sin1d")
    theta = p.init_params(0)
    res = Result(problem=p.name, method="gn", options={}, seed=0, device="cpu", dtype="float64",
                 n_params=int(theta.numel()), clients=1, solver_seconds=0.0, final={}, history=[], extra={}, theta=theta)
    d = os.path.join(root, name)
    fs.save_model(res, p, d)
    return d


def edit_meta(d, **changes):
    mp = os.path.join(d, "model.json")
    m = json.load(open(mp))
    m.update(changes)
    json.dump(m, open(mp, "w"))


@pytest.mark.parametrize("tables", [["/etc/passwd"], ["/etc/passwd", "/etc/hostname"]])
def test_a_crafted_model_json_opens_no_file_it_names(tmp_path, monkeypatch, capsys, tables):
    d = field_dir(tmp_path)
    edit_meta(d, ansatz=True, problem="table", options={"tables": tables, "target": "y"})
    opened = []
    real = open

    def spy(path, *a, **k):
        opened.append(os.fspath(path) if isinstance(path, (str, os.PathLike)) else path)
        return real(path, *a, **k)
    monkeypatch.setattr("builtins.open", spy)
    with pytest.raises(ModelFileError) as e:
        fs.load_model(d)
    monkeypatch.undo()
    msg = str(e.value)
    assert "\n" not in msg and "names files (option tables)" in msg and "root:" not in msg
    assert not any(str(p).startswith("/etc/") for p in opened), opened
    (tmp_path / "pts.csv").write_text("0.5\n")
    assert cli_main.main(["predict", d, "--points", str(tmp_path / "pts.csv"), "--out", str(tmp_path / "u.csv")]) == 2
    err = capsys.readouterr().err
    assert "root:" not in err and len(err.strip().splitlines()) == 1 and "names files" in err


@pytest.mark.parametrize("target", ["/proc/self/mem", "other model's tensors", "/etc/passwd as model.json"])
def test_links_out_of_the_model_directory_are_refused_in_one_line(tmp_path, capsys, target):
    d = field_dir(tmp_path)
    name = "model.json" if target.endswith("model.json") else "model.safetensors"
    path = os.path.join(d, name)
    os.remove(path)
    if target == "other model's tensors":
        dest = os.path.join(field_dir(tmp_path, "other"), "model.safetensors")
    else:
        dest = target.split(" ")[0]
    os.symlink(dest, path)
    with pytest.raises(ModelFileError) as e:
        fs.load_model(d)
    assert "\n" not in str(e.value) and "outside the model directory" in str(e.value)
    (tmp_path / "pts.csv").write_text("0.5\n")
    assert cli_main.main(["predict", d, "--points", str(tmp_path / "pts.csv"), "--out", str(tmp_path / "u.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside the model directory" in err[0] and "root:" not in err[0]


def test_a_link_within_the_directory_and_a_linked_directory_are_read(tmp_path):
    d = field_dir(tmp_path)
    shutil.move(os.path.join(d, "model.safetensors"), os.path.join(d, "theta.bin"))
    os.symlink("theta.bin", os.path.join(d, "model.safetensors"))
    x = torch.linspace(0, 1, 5, dtype=torch.float64)[:, None]
    want = fs.load_model(d)(x)
    os.symlink(d, tmp_path / "alias")
    assert torch.equal(fs.load_model(str(tmp_path / "alias"))(x), want)
