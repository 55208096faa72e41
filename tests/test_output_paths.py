"""Issue 38, finding 1: a write never changes what a path is (fedsciml.runtime.files.write_output, the one writer).

Run as whoever runs the suite (root here).  A character device is a private one made with ``mknod`` (the same
device as /dev/null: what a bad writer would turn into a regular file is then the test's own node, never the
machine's /dev/null); where ``mknod`` is not allowed, /dev/null itself (a user other than root cannot replace it).
"""
from __future__ import annotations

import json
import os
import stat

import pytest
import torch

import fedsciml as fs
import importlib
from fedsciml.ridge.model_io import write_model as write_ridge
from fedsciml.runtime import files

cli_main = importlib.import_module("fedsciml.cli.main")  # the module (fedsciml.cli.main is also a function)


@pytest.fixture
def chardev(tmp_path):
    p = str(tmp_path / "null")
    try:
        os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        if os.geteuid() == 0:
            pytest.skip("mknod not allowed, and as root a bad writer could replace the real /dev/null")
        p = "/dev/null"
    return p


def is_chardev(p) -> bool:
    return stat.S_ISCHR(os.lstat(p).st_mode)


def ridge_model(tmp_path):
    d = str(tmp_path / "m")
    write_ridge(d, torch.arange(1.0, 4.0, dtype=torch.float64), 0.5)
    pts = tmp_path / "pts.csv"
    pts.write_text("1,2,3\n4,5,6\n")
    return d, str(pts)


def snapshot(d):
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d))}


def predict(model, points, out):
    return cli_main.main(["predict", model, "--points", points, "--out", out])


SOLVE = ["solve", "sin1d", "--clients", "2", "--n-samples", "10", "--rounds", "1", "--method", "gn", "--quiet"]


def test_predict_out_to_a_character_device_writes_through_and_it_stays_a_device(tmp_path, chardev, capsys):
    d, pts = ridge_model(tmp_path)
    assert predict(d, pts, chardev) == 0
    assert is_chardev(chardev)
    assert not os.path.exists(chardev + ".tmp")


def test_predict_out_through_a_symlink_writes_the_target_and_the_link_stays(tmp_path, capsys):
    d, pts = ridge_model(tmp_path)
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    link = tmp_path / "link.csv"
    os.symlink(target, link)
    assert predict(d, pts, str(link)) == 0
    assert os.path.islink(link) and os.readlink(link) == str(target)
    assert target.read_text().splitlines()[0] == "x0,x1,x2,y" and len(target.read_text().splitlines()) == 3
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640  # the replaced file's permission bits are kept


@pytest.mark.parametrize("onto", ["model.safetensors", "model.json", "link to model.safetensors", "points",
                                  "points by another name"])
def test_predict_out_onto_an_input_is_refused_in_one_line_and_the_inputs_survive(tmp_path, capsys, onto):
    d, pts = ridge_model(tmp_path)
    before, points = snapshot(d), open(pts, "rb").read()
    if onto.startswith("model"):
        out = os.path.join(d, onto)
    elif onto == "link to model.safetensors":
        out = str(tmp_path / "l.csv")
        os.symlink(os.path.join(d, "model.safetensors"), out)
    elif onto == "points":
        out = pts
    else:
        out = str(tmp_path / "hard.csv")
        os.link(pts, out)
    assert predict(d, pts, out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is an input of this command" in err[0], err
    assert snapshot(d) == before and open(pts, "rb").read() == points
    assert fs.load_model(d)(torch.ones(1, 3)).item() == pytest.approx(6.5)


def test_predict_out_to_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path, capsys):
    d, pts = ridge_model(tmp_path)
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    assert predict(d, pts, fifo) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a FIFO" in err[0] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_solve_json_to_a_device_a_link_and_stdout(tmp_path, chardev, capsys):
    assert cli_main.main(SOLVE + ["--json", chardev]) == 0 and is_chardev(chardev)
    target = tmp_path / "r.json"
    target.write_text("{}")
    link = tmp_path / "r-link.json"
    os.symlink(target, link)
    assert cli_main.main(SOLVE + ["--json", str(link)]) == 0
    assert os.path.islink(link) and json.loads(target.read_text())["method"] == "gn"
    capsys.readouterr()
    assert cli_main.main(SOLVE + ["--json", "-"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["method"] == "gn" and "method" in captured.err  # the table on stderr
    assert not os.path.exists("-")


def test_solve_out_dir_whose_result_json_is_a_link_keeps_the_link(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    os.symlink(target, out / "result.json")
    assert cli_main.main(SOLVE + ["--out", str(out)]) == 0
    assert os.path.islink(out / "result.json") and json.loads(target.read_text())["method"] == "gn"


def test_solve_json_onto_its_config_file_is_refused(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text('method = "gn"\nclients = 2\nrounds = 1\nn_samples = 10\n')
    before = cfg.read_bytes()
    assert cli_main.main(["solve", "sin1d", "--config", str(cfg), "--quiet", "--json", str(cfg)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is an input of this command" in err[0] and cfg.read_bytes() == before


def test_ridge_json_to_a_device(tmp_path, chardev, capsys):
    assert cli_main.main(["ridge", "--clients", "2", "--dim", "3", "--n-samples", "20", "--json", chardev]) == 0
    assert is_chardev(chardev)


def test_best_model_checkpoint_path_to_a_device_and_a_link(tmp_path, chardev):
    target = tmp_path / "best.pt"
    target.write_bytes(b"old")
    link = tmp_path / "best-link.pt"
    os.symlink(target, link)
    for path in (chardev, str(link)):
        cb = fs.BestModelCheckpoint(path=path)
        fs.solve("sin1d", "gn", clients=2, rounds=2, problem_options={"n_samples": 10}, callbacks=[cb])
    assert is_chardev(chardev) and os.path.islink(link)
    saved = torch.load(str(target), weights_only=True)
    assert torch.equal(saved["theta"], cb.best_theta)


def test_write_output_rules(tmp_path):
    """The rules by what the path is: a new file and a regular file are replaced whole (no ``.tmp`` left);
    a leftover ``.tmp`` that is a link is removed, never followed; a directory and a socket are refused."""
    import socket

    p = tmp_path / "a.txt"
    files.write_text(str(p), "one")
    files.write_text(str(p), "two")
    assert p.read_text() == "two" and sorted(os.listdir(tmp_path)) == ["a.txt"]
    victim = tmp_path / "victim"
    victim.write_text("keep")
    os.symlink(victim, str(p) + ".tmp")  # planted where the temporary file goes
    files.write_text(str(p), "three")
    assert p.read_text() == "three" and victim.read_text() == "keep" and not os.path.lexists(str(p) + ".tmp")
    with pytest.raises(files.OutputRefused, match="is a directory"):
        files.write_text(str(tmp_path), "x")
    s = socket.socket(socket.AF_UNIX)
    sock = str(tmp_path / "s")
    s.bind(sock)
    try:
        with pytest.raises(files.OutputRefused, match="is a socket"):
            files.write_text(sock, "x")
    finally:
        s.close()
    with pytest.raises(files.OutputRefused, match="standard output is not a place"):
        files.write_text("-", "x")


def test_solve_out_dir_holding_a_fifo_where_a_run_writes_is_refused_before_the_run(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "history.csv")
    assert cli_main.main(SOLVE + ["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a FIFO" in err[0] and not (out / "result.json").exists()
