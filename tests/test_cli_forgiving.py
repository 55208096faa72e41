"""Issue 30 item 9: a CLI that forgives — ``-v``/``-q`` anywhere, did-you-mean for unknown flags, ``solve
PROBLEM --help`` showing what applies, one spelling per option across ``solve`` and ``ridge`` (old ones
accepted with a deprecation line), the problem-vs-method hint, ``--config FILE.toml`` recorded in result.json."""
import json

import pytest

from fedsciml.cli import main
from fedsciml.cli.main import _hoist_global_flags

SMALL = ["--clients", "2", "--n-samples", "20", "--method", "gn", "--rounds", "1"]


def _run(capsys, *argv):
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_verbosity_flags_anywhere():
    assert _hoist_global_flags(["solve", "bratu", "-v", "--rounds", "1"]) == ["-v", "solve", "bratu", "--rounds", "1"]
    assert _hoist_global_flags(["solve", "x", "--", "-q"]) == ["solve", "x", "--", "-q"]


def test_quiet_log_after_the_subcommand(capsys):
    code, out, err = _run(capsys, "solve", "sin1d", *SMALL, "-q")
    assert code == 0 and "final mse" in out and err == ""   # -q: errors only (no header, no progress, nothing)


def test_unknown_flag_gets_the_closest_one(capsys):
    code, _, err = _run(capsys, "solve", "bratu", "--rnak", "5")
    assert code == 2 and "--rnak (did you mean --rank?)" in err and err.count("\n") == 1
    code, _, err = _run(capsys, "solve", "table", "--tables", "a.csv", "--sigma", "1")
    assert code == 2 and "the method option is --method-sigma" in err


def test_solve_problem_help_shows_what_applies(capsys):
    with pytest.raises(SystemExit):
        main(["solve", "table", "--help"])
    table = capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["solve", "--help-all"])
    full = capsys.readouterr().out
    assert "--tables" in table and "--lam" not in table and "--lam" in full   # bratu's option: not table's
    assert "Shown: the options of problem 'table'" in " ".join(table.split())
    assert len(table.splitlines()) < len(full.splitlines())
    with pytest.raises(SystemExit):
        main(["solve", "table", "--method", "one-shot", "--help"])
    one = capsys.readouterr().out
    assert "--dp-epsilon" in one and "--local-steps" not in one and len(one.splitlines()) < len(table.splitlines())


def test_ridge_speaks_solves_spellings_and_the_old_ones_warn(capsys, tmp_path):
    code, out, err = _run(capsys, "ridge", "--clients", "3", "--dim", "4", "--n-samples", "30", "--dp-epsilon", "2",
                          "--cv-sigmas", "0.1,1", "--json", str(tmp_path / "a.json"))
    assert code == 0 and "deprecated" not in err
    code, out2, err = _run(capsys, "ridge", "--clients", "3", "--dim", "4", "--samples", "30", "--epsilon", "2",
                           "--cv", "0.1,1", "--json", str(tmp_path / "b.json"))
    assert code == 0 and "ridge --epsilon is deprecated: use --dp-epsilon" in err and "--cv is deprecated" in err
    a, b = (json.loads((tmp_path / f).read_text())["runs"][1] for f in ("a.json", "b.json"))
    assert a["final"] == b["final"]   # the same flags


def test_config_file_runs_and_is_recorded(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text('problem = "sin1d"\nmethod = "gn"\nclients = 2\nrounds = 1\nn_samples = 20\nquiet = true\n')
    code, _, err = _run(capsys, "solve", "--config", str(cfg), "--rounds", "2", "--json", str(tmp_path / "r.json"))
    assert code == 0, err
    d = json.loads((tmp_path / "r.json").read_text())
    cmd = d["extra"]["command"]
    assert cmd["config_file"] == str(cfg) and cmd["config"]["method"] == "gn"
    assert cmd["resolved"]["rounds"] == 2 and d["extra"]["rounds"] == 2   # the command line wins
    bad = tmp_path / "bad.toml"
    bad.write_text("method = [")
    code, _, err = _run(capsys, "solve", "--config", str(bad))
    assert code == 2 and "is not valid TOML" in err
