"""Bad input at the front end: output paths checked before a run, memory estimated before allocating,
image data directories, plugin faults, a diverging optimizer — each one line (CLI: exit 2, or 1 for a run
that started and failed), never a traceback, never a result lost after the run."""
import json
import os

import pytest

import fedsciml as fs
from fedsciml.cli import main
from fedsciml.runtime.driver import OutOfMemory, available_memory
from fedsciml.methods.centralized import Diverged

SOLVE = ["solve", "sin1d", "--clients", "2", "--n-samples", "10", "--rounds", "1", "--quiet"]
RIDGE = ["ridge", "--clients", "3", "--n-samples", "20", "--dim", "4"]
IMAGES = ["bench", "images", "--quiet", "--clients", "2", "--epochs", "1"]


def _cli(capsys, *args):
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _refused(capsys, *args, want, code=2):
    got, out, err = _cli(capsys, *args)
    assert got == code, (args, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for w in ([want] if isinstance(want, str) else want):
        assert w in err, err
    return out


# --- output paths (checked before the run) --------------------------------------------------------


@pytest.mark.parametrize("cmd", [SOLVE, RIDGE, IMAGES])
def test_json_pointing_to_a_directory_is_refused_before_the_run(capsys, tmp_path, cmd):
    out = _refused(capsys, *cmd, "--json", str(tmp_path), want=["--json", "is a directory"])
    assert "method" not in out  # nothing ran: no result table


@pytest.mark.parametrize("cmd", [SOLVE, RIDGE, IMAGES])
def test_json_in_a_place_that_cannot_be_written_is_refused(capsys, tmp_path, cmd):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    _refused(capsys, *cmd, "--json", str(blocker / "r.json"), want=["--json", "cannot be written"])
    assert blocker.read_text() == "x"


@pytest.mark.parametrize("cmd", [SOLVE, IMAGES])
def test_out_pointing_to_an_existing_file_is_refused(capsys, tmp_path, cmd):
    f = tmp_path / "f"
    f.write_text("keep")
    _refused(capsys, *cmd, "--out", str(f), want=["--out", "is an existing file"])
    assert f.read_text() == "keep"


def test_an_existing_json_file_is_overwritten(capsys, tmp_path):
    f = tmp_path / "r.json"
    f.write_text("old")
    code, out, err = _cli(capsys, *RIDGE, "--json", str(f))
    assert code == 0, err
    assert json.loads(f.read_text())["runs"][0]["clients"] == 3 and not os.path.exists(str(f) + ".tmp")


def test_the_check_leaves_no_file_behind(tmp_path):
    from fedsciml.runtime.results import check_output_dir, check_output_file

    f = tmp_path / "new" / "r.json"
    assert check_output_file(str(f)) == str(f) and not f.exists() and f.parent.is_dir()
    d = tmp_path / "out"
    check_output_dir(str(d))
    assert d.is_dir() and not any(d.iterdir())


# --- memory estimated before anything is allocated ------------------------------------------------


MEMORY = ["GB of memory", "GB available"]
CLIENT_CAP = ["clients=100,000,000 in one process", "at most 100,000 clients here"]  # before the memory plan


@pytest.mark.parametrize("args,want", [(["solve", "bratu", "--clients", "100000000", "--quiet"], CLIENT_CAP),
                                       (["solve", "sin1d", "--n-samples", "100000000000", "--quiet"], MEMORY),
                                       (["solve", "ridge-linear", "--dim", "10000000", "--quiet"], MEMORY),
                                       (["ridge", "--dim", "10000000"], MEMORY),
                                       (["ridge", "--clients", "100000000"], CLIENT_CAP)])
def test_huge_sizes_are_refused_with_the_figures(capsys, args, want):
    _refused(capsys, *args, want=want)


def test_huge_sizes_in_the_api_raise_before_allocating():
    assert available_memory() is not None
    with pytest.raises(OutOfMemory, match="GB available"):
        fs.solve("sin1d", "gn", clients=2, rounds=1, problem_options={"n_samples": 10**11})
    with pytest.raises(ValueError, match="at most 100,000 clients"):
        fs.solve("sin1d", "gn", clients=10**9, rounds=1)


# --- image data -------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra,want", [(["--dataset", "cifar10"], "needs --data-dir"),
                                        (["--dataset", "fmnist", "--data-dir", "/no/such/dir"], "not an existing directory"),
                                        (["--data-dir", "/tmp"], "digits is bundled"),
                                        (["--beta", "inf"], "--beta must be a finite number ≥ 0, got inf"),
                                        (["--beta", "nan"], "--beta must be a finite number ≥ 0, got nan"),
                                        (["--device", "gpu"], "device must be"),
                                        (["--methods", ""], "--methods is empty"),
                                        (["--methods", " , "], "--methods is empty")])
def test_image_bench_bad_input(capsys, extra, want):
    _refused(capsys, *IMAGES, *extra, want=want)


def test_image_bench_missing_file_in_data_dir(capsys, tmp_path):
    _refused(capsys, *IMAGES, "--dataset", "cifar10", "--data-dir", str(tmp_path), want="data_batch_1")


# --- plugins ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("source,want", [("def f(:\n", "syntax error at line 1"),
                                         ("raise RuntimeError('boom')\n", "RuntimeError: boom")])
def test_a_faulty_plugin_file_is_one_line(capsys, tmp_path, source, want):
    p = tmp_path / "plug.py"
    p.write_text(source)
    _refused(capsys, "--plugin", str(p), "list", want=[str(p), want])


def test_empty_and_repeated_plugins_are_refused(capsys, tmp_path):
    _refused(capsys, "--plugin=", "list", want="empty")
    p = tmp_path / "ok.py"
    p.write_text("X = 1\n")
    _refused(capsys, "--plugin", str(p), "--plugin", str(p), "list", want="given twice")
    _refused(capsys, "--plugin", "no_such_plugin_module_xyz", "list", want="cannot import")


# --- a diverging optimizer --------------------------------------------------------------------------


def test_adam_with_lr_inf_is_refused(capsys):
    _refused(capsys, "solve", "sin1d", "--n-samples", "10", "--optimizer", "adam", "--lr", "inf", "--quiet",
             want="--lr must be a finite number > 0, got inf")
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        fs.solve("sin1d", optimizer="adam", lr=float("inf"))


def test_adam_whose_loss_becomes_non_finite_stops_with_a_clear_error(capsys):
    _refused(capsys, "solve", "ridge-linear", "--optimizer", "adam", "--lr", "1e200", "--max-iters", "5", "--quiet",
             want=["the loss became inf", "smaller --lr"], code=1)
    with pytest.raises(Diverged, match="iteration 1"):
        fs.solve("ridge-linear", optimizer="adam", lr=1e200, max_iters=5)


@pytest.mark.parametrize("extra,want", [(["--dp-delta", "2"], "--dp-delta must be a finite number in (0, 1)"),
                                        (["--dp-clip-a", "inf"], "--dp-clip-a must be a finite number > 0"),
                                        (["--sigma", "inf"], "--sigma must be a finite number ≥ 0"),
                                        (["--dropout", "1"], "--dropout must be a finite number in [0, 1)")])
def test_ridge_values_out_of_range(capsys, extra, want):
    _refused(capsys, *RIDGE, *extra, want=want)
