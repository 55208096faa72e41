"""Issue 38, a short bad-input battery over the surfaces added in the session before: ``solve pinnacle``'s
``--pinnacle-dir`` (nonexistent, a file, a FIFO: was a warning and a run without its test error),
``fs.ReferenceData.from_file``, ``fs.GridCoefficient`` / ``fs.ScatteredCoefficient`` shapes (a 2-D axis was flattened
into a jumble of coordinates; values [2, 2] for 4 points were flattened and accepted) and ``flower deploy``'s
arguments (a file as ``--keep`` was a traceback; an unknown method, ``centralized`` or a negative seed started
the deployment and ended with an empty log; ``--clients 100000000`` started SuperNodes until it hung).  Each is one
line naming the value and what is allowed, before anything runs."""
from __future__ import annotations

import importlib
import os

import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.problems.base import ProblemError

cli_main = importlib.import_module("fedsciml.cli.main")


@pytest.fixture
def not_folders(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"missing": (str(tmp_path / "nope"), "does not exist"), "file": (str(f), "is not a folder"),
            "fifo": (str(fifo), "is not a folder")}


@pytest.mark.parametrize("kind", ["missing", "file", "fifo"])
def test_a_pinnacle_dir_that_is_no_folder_is_one_line(kind, not_folders, monkeypatch):
    monkeypatch.delenv("FEDSCIML_PINNACLE", raising=False)
    path, what = not_folders[kind]
    with pytest.raises(ProblemError) as e:
        fs.get_problem("pinnacle", case="poisson2d-c", pinnacle_dir=path)
    assert str(e.value).startswith(f"pinnacle_dir {path!r} {what}; give a PINNacle checkout")  # the API names it so
    assert "\n" not in str(e.value)
    monkeypatch.setenv("FEDSCIML_PINNACLE", path)  # the environment variable is named when it is the one
    with pytest.raises(ProblemError, match=rf"^\$FEDSCIML_PINNACLE '.*' {what}"):
        fs.get_problem("pinnacle", case="poisson2d-c")


def test_solve_pinnacle_with_a_file_as_its_dir_is_one_line_exit_2(not_folders, capsys, monkeypatch):
    monkeypatch.delenv("FEDSCIML_PINNACLE", raising=False)
    path = not_folders["file"][0]
    rc = cli_main.main(["solve", "pinnacle", "--case", "poisson2d-c", "--pinnacle-dir", path, "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"error: --pinnacle-dir {path!r} is not a folder; give a PINNacle checkout (git clone "
                               f"https://github.com/i207M/PINNacle), the folder that holds ref/"]


def test_coefficient_shapes_are_checked_not_flattened():
    with pytest.raises(ProblemError, match=r"^GridCoefficient: axis 0 must be a 1-D array of coordinates, got shape "
                                           r"\(3, 2\)$"):
        fs.GridCoefficient([torch.zeros(3, 2)], torch.zeros(3))
    with pytest.raises(ProblemError, match=r"^ScatteredCoefficient: values must be \[m\] \(one value per point\), "
                                           r"got shape \(2, 2\)$"):
        fs.ScatteredCoefficient(torch.rand(4, 2), torch.zeros(2, 2))
    col = fs.ScatteredCoefficient(torch.tensor([[0.0, 0.0], [1.0, 0.0]]), torch.tensor([[1.0], [2.0]]))  # a column
    assert col(torch.tensor([0.9, 0.0], dtype=torch.float64)).item() == 2.0
    with pytest.raises(ProblemError, match=r"values have shape \(4,\); the axes give \(5,\)"):
        fs.GridCoefficient([torch.linspace(0, 1, 5)], torch.zeros(4))


@pytest.mark.parametrize("text, message", [
    ("1 2 3\n4 5\n", "data line 2 has 2 numbers, the first has 3"),
    ("1 2\n3 4\n", "has 2 columns; inputs=2 + outputs=1 = 3 were expected"),
    ("nan 1 2\nnan 3 4\n", "every one of its 2 points holds a NaN value"),
    ("1 2 inf\n", "data line 1 holds an infinite value"),
    ("", "holds no data line"),
])
def test_reference_files_that_cannot_be_read_are_one_line(tmp_path, text, message):
    f = tmp_path / "ref.dat"
    f.write_text(text)
    with pytest.raises(ProblemError) as e:
        fs.ReferenceData.from_file(str(f), inputs=2, outputs=1)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_reference_file_rows_holding_nan_are_dropped_as_pinnacle_does(tmp_path):
    f = tmp_path / "ref.dat"
    f.write_text("1 2 3\nnan 5 6\n7 8 9\n")
    ref = fs.ReferenceData.from_file(str(f), inputs=2, outputs=1)
    assert np.array_equal(ref.X.numpy(), [[1, 2], [7, 8]]) and np.array_equal(ref.U.numpy().ravel(), [3, 9])


def test_a_reference_path_that_is_no_regular_file_is_refused(not_folders, tmp_path):
    for path in (not_folders["fifo"][0], str(tmp_path), "/dev/zero"):
        with pytest.raises(ProblemError, match="is not a regular file"):
            fs.ReferenceData.from_file(path, inputs=2, outputs=1)


@pytest.mark.parametrize("args, message", [
    (["--keep", "FILE"], "flower deploy: --keep 'FILE' is not a folder"),
    (["--keep", ""], "flower deploy: --keep '' names no folder; give a folder for the logs and the result"),
    (["--method", "nosuch"], "flower deploy: unknown method 'nosuch'; methods that run on Flower for 'sin1d': "
                             "fedadam, fedavg, fedavgm, fedprox, fedyogi, fipa, gn"),
    (["--method", "centralized"], "flower deploy: method 'centralized' pools the clients' data on one machine; it "
                                  "does not run on Flower; methods that run on Flower for 'sin1d': fedadam, fedavg, "
                                  "fedavgm, fedprox, fedyogi, fipa, gn"),
    (["--method", "one-shot"], "flower deploy: method 'one-shot' does not apply to problem 'sin1d'; methods that "
                               "run on Flower for 'sin1d': fedadam,"),
    (["--seed", "-1"], "seed=-1 must be in [0, "),
    (["--clients", "100000000"], "flower deploy: --clients 100,000,000 starts one flower-supernode process per "
                                 "client"),
    (["--options", '{"rounds": "x"}'], "flower deploy: fipa option --rounds must be an integer ≥ 0, got 'x'"),
    (["--dead-after", "0"], "argument --dead-after: must be a finite number of seconds > 0, got '0'"),
])
def test_flower_deploy_bad_arguments_are_one_line_before_any_process(args, message, tmp_path, capsys, monkeypatch):
    pytest.importorskip("flwr")
    from fedsciml.engines.flower import deploy

    def never(*a, **k):
        raise AssertionError("a deployment was started")

    monkeypatch.setattr(deploy.LocalDeployment, "__enter__", never)
    f = tmp_path / "FILE"
    f.write_text("x")
    monkeypatch.chdir(tmp_path)
    rc = cli_main.main(["flower", "deploy", "sin1d", *args, "-q"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and message in err[0], err


def test_flower_method_list_is_the_federated_methods_of_the_problems_kind():
    """The methods `flower deploy` lists are exactly the registered federated ones that apply to the problem's
    kind: `centralized` (no transport) never, `one-shot` only for ridge."""
    from fedsciml.engines.flower.runconfig import RunConfigError, check_job, flower_methods
    from fedsciml.runtime.driver import METHODS

    for kind in ("pinn", "fit", "ridge"):
        listed = flower_methods(kind)
        assert "centralized" not in listed and listed == sorted(listed)
        assert set(listed) == {m for m, s in METHODS.items() if s.federated and s.applies_to(kind)}
    assert "one-shot" in flower_methods("ridge") and "one-shot" not in flower_methods("fit")
    with pytest.raises(RunConfigError, match=r"unknown method 'fpia' \(did you mean 'fipa'\?\); methods that run on "
                                             r"Flower for 'ridge-linear': .*one-shot$") as e:
        check_job({"kind": "solve", "problem": "ridge-linear", "method": "fpia", "clients": 2}, "flower deploy")
    assert "centralized" not in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("kind", ["fifo", "device link", "folder"])
def test_a_pinnacle_reference_that_is_there_but_no_regular_file_is_refused(kind, tmp_path, monkeypatch):
    """Battery (issue 38): a checkout whose ref/burgers1d.dat is a FIFO, a link to /dev/zero or a folder was
    taken for a clone without its large files — a warning (silent under -q) and a run without its test error.
    It is refused in one line; a file that is simply absent still trains with the warning."""
    monkeypatch.delenv("FEDSCIML_PINNACLE", raising=False)
    ref = tmp_path / "ref"
    ref.mkdir()
    f = ref / "burgers1d.dat"
    {"fifo": lambda: os.mkfifo(f), "device link": lambda: os.symlink("/dev/zero", f), "folder": f.mkdir}[kind]()
    with pytest.raises(ProblemError) as e:
        fs.get_problem("pinnacle", case="burgers1d-c", pinnacle_dir=str(tmp_path))
    assert str(e.value) == (f"PINNacle case 'burgers1d-c': reference ref/burgers1d.dat: {f} is not a regular file "
                            f"(a FIFO, a device or a link to one)")
