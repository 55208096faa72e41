"""The model out of the ``ridge`` CLI and ``solve … one-shot`` (``--out DIR``), the up-front memory check, and
central DP's one line (issue 21 items 3 and 5; issue 23 item 7)."""
import json

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
    argv = ["--clients", "3", "--dim", "6", "--n-samples", "30", "--cv-sigmas", "1e-3:1e2:6", "--seed", "4"]
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

    for extra in (["--dim", "100000"], ["--dim", "10000000"]):
        assert main(["ridge", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "needs about" in err[0] and "available" in err[0]
    assert main(["ridge", "--clients", "1000000"]) == 2  # refused by the one-process client cap, before the plan
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at most 100,000 clients" in err[0]
    assert main(["ridge", "--cv-sigmas", "1e-3:1:100000000"]) == 2
    assert "count ≤ 10000" in capsys.readouterr().err


def test_central_dp_says_it_trusts_the_server_and_flower_runs_it_through_secagg(capsys, monkeypatch):
    """In process: one line saying it trusts the server.  On Flower: the job goes to the SecAgg+ App (its run is
    tests/test_flower_secagg.py; here the simulation is replaced by a recorder, which fails the run on purpose)."""
    from fedsciml.cli import main
    from fedsciml.engines.flower import secagg, simulation

    capsys.readouterr()
    assert main(["ridge", "--clients", "3", "--dim", "4", "--n-samples", "20", "--dp-epsilon", "2",
                 "--dp-central"]) == 0
    # what the user sees: the CLI's log handler writes to stderr (read there, not through caplog, whose
    # capture misses a logger the CLI makes non-propagating during the test when the test runs alone)
    lines = [line for line in capsys.readouterr().err.splitlines() if "trusts the server" in line]
    assert len(lines) == 1
    seen = []

    def recorder(jobs, clients, *, wait_s=0.0, workdir=None, app=None):
        seen.append((app, [j["method"] for j in jobs], [j["options"].get("dp_central") for j in jobs]))
        raise simulation.EngineFailed("recorded, not run")

    monkeypatch.setattr(simulation, "run_jobs", recorder)
    assert main(["ridge", "--clients", "3", "--dim", "4", "--n-samples", "20", "--dp-epsilon", "2", "--dp-central",
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


# --- the ridge subcommand's flags are generated from the option declarations ------------------------------------


def _ridge_parser():
    from fedsciml.cli import build_parser

    return build_parser()._subparsers._group_actions[0].choices["ridge"]


def test_ridge_flags_are_generated_from_the_declarations(monkeypatch):
    """An option declared on the ridge problem (or the one-shot method) is a ``ridge`` flag, with its help,
    without touching cli/ridge.py; every declared option has one (but penalty and one-shot's rounds, named)."""
    from fedsciml.options import option
    from fedsciml.problems import REGISTRY
    from fedsciml.runtime.driver import METHODS

    lin = REGISTRY["ridge-linear"]
    monkeypatch.setattr(lin, "params", {**lin.params,
                                        "label_shift": option(0.0, "a new ridge option (test)", float, lo=0)})
    ridge = _ridge_parser()
    flags = {s for a in ridge._actions for s in a.option_strings}
    assert "--label-shift" in flags
    helps = {a.option_strings[0]: a.help for a in ridge._actions if a.option_strings}
    assert helps["--label-shift"] == "a new ridge option (test) [ridge-linear: a finite number ≥ 0; default 0.0]"
    for name, (_, spec) in {**lin.specs(), **REGISTRY["ridge-rff"].specs()}.items():
        assert (("--" + name.replace("_", "-")) in flags) == (name != "penalty"), name
    for name, (_, spec) in METHODS["one-shot"].config.specs().items():
        flag = "--" + ("method-" if name == "sigma" else "") + name.replace("_", "-")
        if name == "rounds":  # --rounds is the baselines' (one-shot runs one round)
            assert "rounds of the iterative baselines" in helps[flag]
            continue
        assert (flag in flags) == spec.cli, name
    # the subcommand's older spellings are the same flags
    old = {"--n-samples": "--n-samples", "--cv-sigmas": "--cv-sigmas", "--dp-epsilon": "--dp-epsilon", "--dp-delta": "--dp-delta",
           "--dp-central": "--dp-central", "--dp-clip-a": "--dp-clip-a", "--dp-clip-b": "--dp-clip-b",
           "--dp-noise-aware": "--dp-noise-aware", "--project-sketch": "--project-sketch"}
    by_flag = {s: a for a in ridge._actions for s in a.option_strings}
    for spelling, generated in old.items():
        assert by_flag[spelling] is by_flag[generated], spelling
    for kept in ("--clients", "--dim", "--heterogeneity", "--sigma", "--dropout", "--project", "--features",
                 "--rff-dim", "--baselines", "--rounds", "--seed", "--engine", "--device", "--threads", "--json",
                 "--out"):
        assert kept in flags, kept


def test_ridge_old_and_generated_spellings_give_the_same_run(capsys, tmp_path):
    """``--samples 20 --epsilon 2 --cv …`` and ``--n-samples 20 --dp-epsilon 2 --cv-sigmas …``: one run, the
    same numbers (bitwise: the same options reach the same driver)."""
    import json

    from fedsciml.cli import main

    base = ["ridge", "--clients", "3", "--dim", "4", "--device", "cpu", "--threads", "1", "--json"]
    runs = []
    for flags in (["--samples", "20", "--epsilon", "2", "--clip-a", "2", "--cv", "1e-2:1:3"],   # deprecated
                  ["--n-samples", "20", "--dp-epsilon", "2", "--dp-clip-a", "2", "--cv-sigmas", "1e-2:1:3"]):
        out = str(tmp_path / f"run{len(runs)}.json")
        assert main([*base, out, *flags]) == 0
        runs.append(json.loads(open(out).read())["runs"])
    capsys.readouterr()
    a, b = runs
    assert [r["final"] for r in a] == [r["final"] for r in b] and a[0]["options"] == b[0]["options"]
    assert a[0]["options"]["dp_epsilon"] == 2.0 and a[0]["options"]["dp_clip_a"] == 2.0


@pytest.mark.parametrize("extra,want", [
    (["--sigma", "0.1", "--cv-sigmas", "1e-2:1:3"], "--cv-sigmas chooses σ by cross-validation; give --sigma or --cv-sigmas, not both"),
    (["--features", "rff", "--dim", "5"], "--features rff (ridge-rff) has no option --dim (did you mean --rff-dim?)"),
    (["--dp-delta", "0.5"], "one-shot option --dp-delta has no effect here"),
    (["--n-samples", "many"], "problem 'ridge-linear' option --n-samples must be an integer ≥ 2, got 'many'"),
    (["--method-sigma", "-1"], "one-shot option --method-sigma must be a finite number ≥ 0, got -1.0"),
    (["--baselines", "nope"], "unknown baseline 'nope'"),
    (["--baselines", "dp-fedavg"], "dp-fedavg needs --dp-epsilon"),
])
def test_ridge_generated_flags_are_checked_by_their_owner_in_one_line(capsys, extra, want):
    from fedsciml.cli import main

    base = ["ridge", "--clients", "3", "--n-samples", "20", "--device", "cpu"]
    assert main(base + extra if "--n-samples" not in extra else base[:3] + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and want in err, err


def test_ridge_preset_is_solve_one_shot_bitwise(tmp_path, capsys):
    """``ridge`` is a preset over ``solve``: its one-shot run is ``solve ridge-linear --method one-shot`` with the
    same options, bit for bit (the same driver, the same operations in the same order)."""
    import json

    from fedsciml.cli import main

    common = ["--clients", "4", "--dim", "6", "--seed", "2", "--device", "cpu", "--threads", "1"]
    r, s = str(tmp_path / "r.json"), str(tmp_path / "s.json")
    assert main(["ridge", *common, "--n-samples", "30", "--dp-epsilon", "3", "--project", "4", "--json", r]) == 0
    assert main(["solve", "ridge-linear", "--method", "one-shot", *common, "--n-samples", "30", "--dp-epsilon", "3",
                 "--project", "4", "--quiet", "--json", s]) == 0
    capsys.readouterr()
    one, solved = json.loads(open(r).read())["runs"][0], json.loads(open(s).read())
    assert one["final"]["loss"] == solved["final"]["loss"] and one["final"]["mse"] == solved["final"]["mse"]
    strip = lambda rows: [{k: v for k, v in row.items() if "time" not in k} for row in rows]  # noqa: E731
    assert strip(one["history"]) == strip(solved["history"])
