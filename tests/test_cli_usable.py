"""Issue 40 items 1, 3, 7, 9 and issue 38 finding 2: a command line that runs on Python 3.10, help that fits a
screen, one meaning of quiet, typos in one line, and a ``--config`` file that runs no code and is read bounded."""
import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

from fedsciml.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ["sin1d", "--clients", "2", "--n-samples", "10", "--method", "gn", "--rounds", "1"]


def _run(capsys, *argv):
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _help(capsys, *argv) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    assert e.value.code == 0
    return capsys.readouterr().out


def _one_line(code, err, *want, status=2):
    assert code == status, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for w in want:
        assert w in err, err


# --- 40.1: Python 3.10 ------------------------------------------------------------------------------------------


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


def test_no_command_needs_tomllib_and_config_reads_with_tomli(tmp_path):
    """As on Python 3.10 (no ``tomllib``): every command runs; ``--config`` reads its file with ``tomli`` (on
    Python ≥ 3.11 here the standard module under that name, the same API; on 3.10 the real one)."""
    cfg = tmp_path / "run.toml"
    cfg.write_text('problem = "nosuch"\n')
    code = ("import sys\n"
            "try:\n    import tomllib\nexcept ImportError:\n    pass\n"   # Python 3.10: tomli is installed
            "else:\n    sys.modules['tomli'] = tomllib; sys.modules['tomllib'] = None\n"
            "from fedsciml.cli import main\n"
            "assert main(['list']) == 0\n"
            f"assert main(['solve', '--config', {str(cfg)!r}]) == 2\n")
    r = _python(code)
    assert r.returncode == 0, r.stderr
    assert "bratu" in r.stdout and "unknown problem 'nosuch'" in r.stderr   # the file was read: its problem named


def test_sources_parse_as_python_3_10_and_use_no_3_11_only_names():
    """Every module, test and script parses with Python 3.10's grammar (no ``except*``), and none uses a name that
    Python 3.11 added (TOML is read by ``fedsciml.cli.config._toml``: ``tomllib``, else ``tomli``)."""
    new = {"tomllib", "Self", "StrEnum", "ExceptionGroup", "BaseExceptionGroup", "TaskGroup", "LiteralString",
           "reveal_type", "assert_never", "Never", "TypeVarTuple", "Unpack", "NotRequired", "Required", "UTC"}
    bad = []
    for top in ("fedsciml", "problems", "tests", "scripts", "examples"):
        for path in (ROOT / top).rglob("*.py"):
            src = path.read_text(encoding="utf-8")
            try:
                tree = ast.parse(src, str(path), feature_version=(3, 10))
            except SyntaxError as e:
                bad.append(f"{path.relative_to(ROOT)}:{e.lineno}: {e.msg}")
                continue
            for node in ast.walk(tree):
                name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                        else None)
                names = [a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import) else \
                    ([node.module or ""] + [a.name for a in node.names]) if isinstance(node, ast.ImportFrom) else []
                for n in [name, *names]:
                    if n in new:
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {n}")
    assert not bad, bad


def test_the_lower_bounds_check_runs_on_the_lowest_declared_python():
    from packaging.requirements import Requirement

    from fedsciml.cli.config import _toml

    project = _toml().loads((ROOT / "pyproject.toml").read_text())["project"]
    lowest = re.fullmatch(r">=\s*(3\.\d+)", project["requires-python"]).group(1)
    script = (ROOT / "scripts/tools/lower_bounds.sh").read_text()
    assert "requires-python" in script and "python3.11" not in script   # derived, not written down
    py310 = {"python_version": lowest, "python_full_version": lowest + ".0"}
    deps = [Requirement(t) for t in project["dependencies"]]
    assert any(r.name == "tomli" and r.marker.evaluate(py310) and not r.marker.evaluate({"python_version": "3.11"})
               for r in deps)
    flower = [Requirement(t) for t in project["optional-dependencies"]["flower"]]
    assert all(not r.marker.evaluate(py310) for r in flower)   # flwr 1.41 needs Python 3.11: not required there


# --- 40.3: help that fits a screen ----------------------------------------------------------------------------


def test_solve_help_is_short_and_points_to_the_rest(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")   # argparse wraps to the terminal's width: a standard one
    short = _help(capsys, "solve", "--help")
    assert len(short.splitlines()) <= 60 and "--help-all" in short and "solve PROBLEM --help" in short
    assert "--rank N" not in short and "--lam X" not in short and "bratu" in short   # names, not every flag
    full = _help(capsys, "solve", "--help-all")
    assert "--rank" in full and "--lam" in full and "fipa options:" in full
    assert "the rounds and the clients (every federated method but fedavg-sgd):" in full   # shared: grouped once
    bratu = _help(capsys, "solve", "bratu", "--help")
    assert "the rounds and the clients (every federated method):" in bratu


def test_no_flag_repeats_the_list_of_methods():
    from fedsciml.cli import build_parser
    from fedsciml.cli.solve import method_owners

    methods = list(method_owners())
    solve = build_parser()._subparsers._group_actions[0].choices["solve"]
    for a in solve._actions:
        if a.help and a.dest != "method":
            named = [m for m in methods if re.search(rf"(?<![\w-]){re.escape(m)}(?![\w-])", a.help)]
            assert len(named) <= 3, (a.option_strings, named)


def test_problem_help_shows_the_methods_that_apply_by_the_registry(capsys):
    import dataclasses

    from fedsciml.runtime.driver import METHODS, register_method

    bratu = _help(capsys, "solve", "bratu", "--help")
    assert "one-shot" not in bratu and "--dp-epsilon" not in bratu and "--fit-intercept" not in bratu
    assert "gn options:" in bratu and "--lam" in bratu
    ridge = _help(capsys, "solve", "ridge-linear", "--help")
    assert "one-shot options:" in ridge and "--dp-epsilon" in ridge
    register_method(dataclasses.replace(METHODS["gn"], name="fit-only-test", description="a test method for fits",
                                        kinds=("fit",)))
    try:
        assert "fit-only-test" in _help(capsys, "solve", "sin1d", "--help")
        assert "fit-only-test" not in _help(capsys, "solve", "bratu", "--help")
    finally:
        del METHODS["fit-only-test"]


def test_a_method_that_does_not_apply_is_refused_before_running(capsys):
    code, out, err = _run(capsys, "solve", "bratu", "--method", "one-shot", "--clients", "2")
    _one_line(code, err, "method 'one-shot' does not apply to a problem of kind 'pinn'", "methods that do:", "gn")
    assert out == "" and "[fedsciml]" not in err   # nothing started
    code, out, err = _run(capsys, "solve", "bratu", "--method", "one-shot", "--help")
    _one_line(code, err, "does not apply")


# --- 40.7: one quiet --------------------------------------------------------------------------------------------


@pytest.fixture
def loaded(monkeypatch):
    """A machine whose load average exceeds its cores: the thread notice is due (torch's threads restored)."""
    import torch

    before = torch.get_num_threads()
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("quiet", [["-q"], ["--quiet"]])
def test_quiet_is_errors_only(capsys, tmp_path, loaded, quiet):
    code, out, err = _run(capsys, "solve", *TINY, *quiet, "--json", str(tmp_path / "r.json"))
    assert code == 0 and "final mse" in out and err == ""   # no load notice, header, progress or wrote line
    assert (tmp_path / "r.json").exists()


def test_no_progress_drops_the_progress_alone(capsys, tmp_path, loaded):
    code, out, err = _run(capsys, "solve", *TINY, "--no-progress", "--json", str(tmp_path / "r.json"))
    assert code == 0 and "load average 64.0" in err and "sin1d · method=gn" in err and "wrote" in err
    assert "gn[" not in err   # the progress line
    code, out, err = _run(capsys, "solve", *TINY)
    assert code == 0 and "gn[" in err


def test_config_quiet_is_the_quiet_and_no_progress_the_other(capsys, tmp_path, loaded):
    cfg = tmp_path / "run.toml"
    cfg.write_text("quiet = true\n")
    code, out, err = _run(capsys, "solve", *TINY, "--config", str(cfg))
    assert code == 0 and err == ""
    cfg.write_text("no_progress = true\n")
    code, out, err = _run(capsys, "solve", *TINY, "--config", str(cfg))
    assert code == 0 and "sin1d · method=gn" in err and "gn[" not in err
    cfg.write_text("quiet = true\n")
    code, out, err = _run(capsys, "solve", *TINY, "--config", str(cfg), "-v")   # the command line wins
    assert code == 0 and "sin1d · method=gn" in err


# --- 40.9: typos --------------------------------------------------------------------------------------------------


def test_a_misspelt_problem_or_method_gets_the_closest_name(capsys):
    code, _, err = _run(capsys, "solve", "bratuu")
    _one_line(code, err, "unknown problem 'bratuu' (did you mean 'bratu'?)")
    code, _, err = _run(capsys, "solve", "bratu", "--method", "fipaa")
    _one_line(code, err, "unknown method 'fipaa' (did you mean 'fipa'?)")
    code, _, err = _run(capsys, "solve", "bratu", "--engine", "flowr")
    _one_line(code, err, "invalid choice: 'flowr'", "(did you mean 'flower'?)")


def test_a_value_argparse_refuses_is_one_line(capsys):
    code, _, err = _run(capsys, "solve", "bratu", "--clients", "four")
    _one_line(code, err, "argument --clients: invalid int value: 'four'", "solve --help")


def test_config_keys_and_values_are_named_with_the_file(capsys, tmp_path):
    cfg = tmp_path / "config.toml"
    for text, want in [('rnds = 5\n', f"{cfg}: unknown key 'rnds' (did you mean 'rounds'?)"),
                       ('clients = "four"\n', f"{cfg}: clients must be an integer, got 'four'"),
                       ('engine = "flowr"\n', f"{cfg}: engine must be one of local, flower, processes"),
                       ('adaptive = "yes"\n', f"{cfg}: adaptive must be true or false"),
                       ('rounds = -1\n', f"gn option 'rounds' in {cfg} must be an integer ≥ 0, got -1"),
                       ('n_samples = 0\n', f"problem 'sin1d' option 'n_samples' in {cfg} must be an integer ≥ 1")]:
        cfg.write_text(text)
        argv = [a for a in TINY if a not in ("--rounds", "1", "--n-samples", "10")] if "rounds" in text or \
            "n_samples" in text else TINY
        code, _, err = _run(capsys, "solve", *argv, "--config", str(cfg))
        _one_line(code, err, want)


def test_config_values_typed_as_toml_gives_them(capsys, tmp_path):
    import json

    cfg = tmp_path / "run.toml"
    cfg.write_text('problem = "sin1d"\nmethod = "gn"\nclients = 2\nrounds = 1\nn-samples = 10\nhidden = [8, 8]\n'
                   'compare = ["gn"]\n')
    code, _, err = _run(capsys, "solve", "--config", str(cfg), "--rounds", "2", "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["extra"]["rounds"] == 2 and d["n_params"] == 8 * 1 + 8 + 8 * 8 + 8 + 8 + 1   # 1 → 8 → 8 → 1
    assert d["extra"]["command"]["config_file"] == str(cfg) and "--config" in d["extra"]["command"]["argv"]


# --- 38.2: a config file runs no code and is read bounded ------------------------------------------------------


def test_a_config_file_loads_no_plugin(capsys, tmp_path):
    marker = tmp_path / "ran"
    plugin = tmp_path / "x.py"
    plugin.write_text(f"open({str(marker)!r}, 'w').write('code ran')\n")
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'plugin = "{plugin}"\n')
    code, _, err = _run(capsys, "solve", "bratu", "--config", str(cfg))
    _one_line(code, err, f"{cfg}: key 'plugin' is refused", "--plugin")
    assert not marker.exists()


def test_config_is_read_bounded(capsys, tmp_path):
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (1 << 20) + "\n")
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"x = 1\n\xff\xfe\n")
    for path, want in [("/dev/zero", "is not a regular file"), (str(tmp_path), "is not a regular file"),
                       (str(big), "more than the 1,048,576 a TOML config file may hold"),
                       (str(deep), "nests arrays or tables 5000 deep; at most 32"),
                       (str(binary), "is not UTF-8 text"), (str(tmp_path / "none.toml"), "cannot be read")]:
        code, _, err = _run(capsys, "solve", "bratu", "--config", path)
        _one_line(code, err, f"--config {path!r}", want)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_config_on_a_fifo_does_not_hang(tmp_path):
    fifo = tmp_path / "run.toml"
    os.mkfifo(fifo)
    r = _python(f"from fedsciml.cli import main; raise SystemExit(main(['solve', 'bratu', '--config', {str(fifo)!r}]))",
                timeout=120)
    assert r.returncode == 2 and "is not a regular file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_nesting_depth_scan_skips_strings_and_comments():
    from fedsciml.cli.config import nesting_depth

    assert nesting_depth('a = [[1, 2], [3]]\n[table]\nb = "[[[[" # [[[[[\nc = \'{{{\'') == 2
    assert nesting_depth('x = {a = [1, {b = [2]}]}') == 4
