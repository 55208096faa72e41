"""Typed method configurations (fedsciml.options), the method registry and the options' front end:
unknown keys refused, zero is a value, one clear line per bad value (API: OptionError / TypeError;
CLI: exit 2)."""
import json
import subprocess
import sys
import pathlib

import pytest

import fedsciml as fs
from fedsciml.cli import main
from fedsciml.methods import METHODS, CentralizedConfig, FedAvgConfig, FedProxConfig, FIPAConfig, GNConfig
from fedsciml.options import OptionError, OptionTypeError

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = dict(problem_options={"n_samples": 10})
SMALL = ["sin1d", "--clients", "2", "--n-samples", "10", "--quiet"]


def _cli(capsys, *args):
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_line_exit_2(capsys, *args, want):
    code, _, err = _cli(capsys, *args)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for w in ([want] if isinstance(want, str) else want):
        assert w in err, err


# --- the configurations ---------------------------------------------------------------------------


def test_each_default_is_declared_once_and_resolved():
    assert FIPAConfig().rounds == 40 and GNConfig().rounds == 100 and FedAvgConfig().rounds == 30
    assert FIPAConfig(budget=5.0).rounds is None  # with a budget and no rounds: until the budget is spent
    assert FIPAConfig().rank == 20 and FIPAConfig().merge == "qr" and FIPAConfig(rank=0).merge == "pinv"
    assert FIPAConfig().local == "gn" and FIPAConfig().safeguard and not FIPAConfig(local="adam").safeguard
    assert FedAvgConfig().local == "adam" and FedAvgConfig().local_steps == 100 and FedAvgConfig().lr == 1e-3
    assert FedProxConfig().mu == 0.01
    assert CentralizedConfig().max_iters == 500 and CentralizedConfig(optimizer="adam").lr == 1e-3
    assert CentralizedConfig(optimizer="lbfgs").lr == 1.0 and CentralizedConfig(budget=1.0).max_iters is None


def test_configs_are_frozen_and_typed():
    cfg = FIPAConfig(rank=3)
    with pytest.raises(AttributeError):
        cfg.rank = 4
    assert FIPAConfig(rounds=2.0).rounds == 2 and isinstance(FIPAConfig(gamma=1).gamma, float)
    with pytest.raises(OptionTypeError, match="rounds must be an integer ≥ 0.*2.5"):
        FIPAConfig(rounds=2.5)
    with pytest.raises(OptionTypeError, match="adaptive must be True or False"):
        FIPAConfig(adaptive="yes")


def test_zero_is_a_value():
    assert FIPAConfig(rank=0).rank == 0 and FIPAConfig(rounds=0).rounds == 0 and FedProxConfig(mu=0).mu == 0.0
    assert FIPAConfig(beta=0).beta == 0.0 and FIPAConfig(local_damping=0).local_damping == 0.0
    for cls, kw, word in ((FIPAConfig, {"gamma": 0}, "gamma must be a finite number > 0"),
                          (FedAvgConfig, {"local_steps": 0}, "local_steps must be an integer ≥ 1"),
                          (FIPAConfig, {"participation": 0}, r"participation must be a finite number in \(0, 1\]"),
                          (FedAvgConfig, {"dropout": 1}, r"dropout must be a finite number in \[0, 1\)"),
                          (FIPAConfig, {"rank": -1}, "rank must be an integer ≥ 0")):
        with pytest.raises(OptionError, match=word):
            cls(**kw)


# --- the Python API -------------------------------------------------------------------------------


@pytest.mark.parametrize("method,key,hint", [("fipa", "rnak", "rank"), ("fipa", "roundz", "rounds"),
                                             ("centralized", "rnak", None), ("gn", "local_steps", None)])
def test_unknown_options_are_refused_before_anything_runs(method, key, hint):
    with pytest.raises(OptionError) as e:
        fs.solve("bratu", method, clients=2, **{key: 5})
    msg = str(e.value)
    assert repr(key) in msg and "allowed:" in msg and len(msg.splitlines()) == 1
    allowed = msg.split("allowed:")[1]
    assert all(name in allowed for name in METHODS[method].config.specs())
    if hint:
        assert f"did you mean {hint!r}" in msg


@pytest.mark.parametrize("kw,exc,word", [({"budget": "5"}, TypeError, "budget"),
                                         ({"seed": -1}, ValueError, "seed"),
                                         ({"seed": 1.5}, TypeError, "seed"),
                                         ({"checkpoint": 123}, TypeError, "checkpoint"),
                                         ({"clients": "2"}, TypeError, "clients"),
                                         ({"device": "gpu"}, ValueError, "device"),
                                         ({"beta": float("inf")}, ValueError, "beta"),
                                         ({"beta": float("nan")}, ValueError, "beta")])
def test_api_arguments_of_the_wrong_type_or_range(kw, exc, word):
    kw = {"clients": 2, **kw}
    with pytest.raises(exc, match=word):
        fs.solve("sin1d", "fipa", rounds=1, **TINY, **kw)


def test_a_config_object_can_be_given_instead_of_keywords():
    a = fs.solve("sin1d", "fedavg", clients=2, config=FedAvgConfig(rounds=1, local_steps=2), **TINY)
    b = fs.solve("sin1d", "fedavg", clients=2, rounds=1, local_steps=2, **TINY)
    assert a.final == b.final  # the same options, the same operations: bitwise
    assert a.options["local_steps"] == 2 and a.options["rounds"] == 1 and a.options["lr"] == 1e-3
    with pytest.raises(TypeError, match="FedAvgConfig"):
        fs.solve("sin1d", "fedavg", clients=2, config=FIPAConfig(), **TINY)


# --- the CLI --------------------------------------------------------------------------------------


def test_rank_0_runs_full_rank_fipa_and_records_it(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, _, err = _cli(capsys, "solve", *SMALL, "--method", "fipa", "--rank", "0", "--rounds", "2", "--json", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["options"]["rank"] == 0 and d["extra"]["strategy"]["curvature"] == "full"
    assert d["extra"]["strategy"]["merge"] == "pinv" and [h["round"] for h in d["history"]] == [0, 1, 2]


def test_rounds_0_evaluates_theta0_and_stops(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, _, err = _cli(capsys, "solve", *SMALL, "--method", "fipa", "--rounds", "0", "--json", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert [h["round"] for h in d["history"]] == [0] and d["extra"]["rounds"] == 0


def test_mu_0_is_fedprox_with_mu_0(tmp_path, capsys):
    out = tmp_path / "r.json"
    code, _, err = _cli(capsys, "solve", *SMALL, "--method", "fedprox", "--mu", "0", "--rounds", "1",
                        "--local-steps", "2", "--json", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["options"]["mu"] == 0.0
    ref = fs.solve("sin1d", "fedavg", clients=2, rounds=1, local_steps=2, **TINY)
    assert d["final"]["mse"] == ref.final["mse"]  # μ = 0: FedAvg's local loss, the same operations (bitwise)


@pytest.mark.parametrize("args,want", [(["--method", "fedavg", "--local-steps", "0"], "--local-steps must be an integer ≥ 1"),
                                       (["--method", "fipa", "--gamma", "0"], "--gamma must be a finite number > 0"),
                                       (["--participation", "0"], "--participation must be a finite number in (0, 1]"),
                                       (["--beta", "inf"], "--beta must be a finite number ≥ 0, got inf"),
                                       (["--beta", "nan"], "--beta must be a finite number ≥ 0, got nan"),
                                       (["--device", "gpu"], "device must be auto, cpu or cuda"),
                                       (["--method", "gn", "--rank", "3"], "--rank does not apply to method gn"),
                                       (["--compare", "gn,fedavg", "--method", "gn", "--rank", "3"], "--rank"),
                                       (["--seed", "-1"], "seed"),
                                       (["--every", "0"], "--every")])
def test_cli_values_not_allowed_exit_2_with_one_line(capsys, args, want):
    _one_line_exit_2(capsys, "solve", *SMALL, *args, want=want)


def test_cli_flags_are_generated_from_the_configurations():
    from fedsciml.cli import build_parser

    parser = build_parser()
    solve = parser._subparsers._group_actions[0].choices["solve"]
    flags = {s for a in solve._actions for s in a.option_strings}
    from fedsciml.cli.solve import problem_owners

    problem_names = {n for specs in problem_owners().values() for n in specs}
    for spec in METHODS.values():
        for name, (_, opt) in spec.config.specs().items():
            flag = "--" + ("method-" if name in problem_names else "") + name.replace("_", "-")
            assert (flag in flags) == opt.cli, name
    assert "--sigma" in flags and "--method-sigma" in flags  # ridge's σ keeps --sigma; one-shot's is --method-sigma
    helps = {a.option_strings[0]: a.help for a in solve._actions if a.option_strings}
    assert "[fedprox: a finite number ≥ 0; default 0.01 · fedavg-sgd: a finite number ≥ 0; default 0.0]" in helps["--mu"]
    assert helps["--rank"].endswith("[an integer ≥ 0; default 20]")   # fipa's alone: the group says whose


# --- the registry ---------------------------------------------------------------------------------


def test_registry_without_import_cycle():
    # the runtime knows no method by itself; importing fedsciml.methods registers the built-in ones: the
    # federated ones as strategy factories (no "module:function" runner strings); centralized's runner is a
    # function of its module, which the registry imports anyway for its configuration (configs live beside their
    # methods)
    code = ("import sys, fedsciml.runtime.driver as r; assert not r.METHODS; "
            "assert not any(m.startswith('fedsciml.methods') for m in sys.modules); "
            "import fedsciml.methods; "
            "assert r.METHODS and all(s.kinds == (r.PROBLEM_KINDS if n != 'one-shot' else ('ridge',)) "
            "for n, s in r.METHODS.items()); "
            "assert all(callable(s.strategy) and s.run is None for s in r.METHODS.values() if s.federated); "
            "assert [n for n, s in r.METHODS.items() if s.run is not None] == ['centralized']; "
            "assert callable(r.METHODS['centralized'].run)")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})


def test_registering_a_method_is_one_call():
    from dataclasses import dataclass

    from fedsciml.options import StopOptions, option
    from fedsciml.runtime.driver import Method, register_method

    @dataclass(frozen=True)
    class ZeroConfig(StopOptions):
        method = "zero-test"
        scale: float = option(0.0, "θ is multiplied by this", float, lo=0)

    def run_zero(problem, objectives, theta0, evaluate, config, *, seed, progress, every, message_hook):
        theta = theta0 * config.scale
        return theta, [{"step": 0, "loss": float(sum(o.loss(theta) for o in objectives))}], {}

    register_method(Method("zero-test", ZeroConfig, run=run_zero, description="test method", federated=False))
    try:
        res = fs.solve("sin1d", "zero-test", scale=0.0, **TINY)
        assert float(res.theta.abs().max()) == 0.0 and res.options["scale"] == 0.0
        with pytest.raises(OptionError, match="'scal'"):
            fs.solve("sin1d", "zero-test", scal=1.0, **TINY)
    finally:
        del METHODS["zero-test"]


def test_top_level_problems_import_is_refused():
    r = subprocess.run([sys.executable, "-c", "import problems"], cwd=ROOT, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT)})
    assert r.returncode != 0 and "import fedsciml.problems" in r.stderr
    r = subprocess.run([sys.executable, "-m", "fedsciml", "list"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0 and "bratu" in r.stdout and "fipa" in r.stdout


def test_a_transport_object_replaces_the_configured_one():
    """What the Flower engine does (fedsciml.engines.flower.apps.run_on_grid): the runner receives a Transport instance."""
    from fedsciml.runtime.client import Client
    from fedsciml.runtime.transport import LocalTransport

    prob = fs.get_problem("sin1d", n_samples=10)
    objs = prob.client_objectives(2, seed=0)
    theta0 = prob.init_params(0)
    a, rows_a, _ = METHODS["gn"](prob, objs, theta0, prob.evaluate, rounds=2, batched=False)
    t = LocalTransport([Client(i, o) for i, o in enumerate(objs)], vectorize=False)
    b, rows_b, _ = METHODS["gn"](prob, objs, theta0, prob.evaluate, rounds=2, transport=t)
    assert [r["loss"] for r in rows_a] == [r["loss"] for r in rows_b]  # the same transport, the same operations
    with pytest.raises(OptionError, match="transport must be one of local, bytes"):
        METHODS["gn"](prob, objs, theta0, prob.evaluate, rounds=2, transport="grpc")


def test_a_method_option_named_like_a_problem_option_keeps_them_apart(tmp_path, capsys):
    """ridge's σ (the problem) keeps --sigma; one-shot's σ is --method-sigma / options.method_sigma.  On a ridge
    problem σ counts once: the one-shot's σ, when given, is the ridge σ (added at the server, no penalty rows)."""
    out = tmp_path / "r.json"
    code, _, err = _cli(capsys, "solve", "ridge-linear", "--clients", "3", "--n-samples", "20", "--dim", "4",
                        "--method", "one-shot", "--sigma", "0.2", "--quiet", "--json", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["options"]["sigma"] == d["options"]["method_sigma"] == 0.2 and d["options"]["penalty"] == "server"
    code, _, err = _cli(capsys, "solve", "ridge-linear", "--clients", "3", "--n-samples", "20", "--dim", "4",
                        "--method", "one-shot", "--sigma", "0.2", "--method-sigma", "0.5", "--quiet", "--json", str(out))
    assert code == 0, err
    d = json.loads(out.read_text())
    assert d["options"]["sigma"] == d["options"]["method_sigma"] == 0.5
    _one_line_exit_2(capsys, "solve", "ridge-linear", "--clients", "3", "--method", "gn", "--method-sigma", "0.5",
                     "--quiet", want="--method-sigma does not apply to method gn")


# --- the flag generator's API (cli.common), the one every subcommand uses -----------------------------------------


def test_add_option_flags_and_given_options_parse_text_once():
    """Flags from declarations: typed flags are converted by argparse, untyped and list-valued ones once by
    given_options (options.from_text); renamed and alias spellings land on the same option; the owner checks."""
    import argparse

    from fedsciml.cli.common import add_option_flags, given_options
    from fedsciml.options import FLOATS, PATHS, OptionError, check_options, cli_names, declared, option

    specs = declared({"k": option(0.5, "a rate", float, lo=0, lo_open=True),
                      "n": option(3, "a count", int, lo=1),
                      "grid": option(None, "σ values", FLOATS, lo=0, lo_open=True, none="no grid"),
                      "files": option((), "inputs", PATHS),
                      "on": option(False, "a switch", bool)})
    for typed in (True, False):
        p = argparse.ArgumentParser()
        flags = add_option_flags(p, {"mine": specs}, dest="o_", typed=typed, rename={"n": "--count"},
                                 aliases={"n": ["--n"]})
        assert flags == {"k": "--k", "n": "--count", "grid": "--grid", "files": "--files", "on": "--on"}
        args = p.parse_args(["--k", "2", "--n", "4", "--grid", "1e-2:1:3", "--files", "a.csv, b.csv", "--on"])
        got = given_options(args, "o_", specs, "mine")
        assert got["k"] == 2.0 and got["n"] == 4 and got["files"] == ["a.csv", "b.csv"] and got["on"] is True
        assert got["grid"] == pytest.approx([1e-2, 1e-1, 1.0], rel=1e-15) and isinstance(got["grid"], list)
        assert given_options(p.parse_args([]), "o_", specs) == {}  # nothing given: the declared defaults apply later
        with cli_names(flags), pytest.raises(OptionError, match="^mine option --count must be an integer ≥ 1, got 0$"):
            check_options("mine", specs, given_options(p.parse_args(["--count", "0"]), "o_", specs, "mine"))
    p = argparse.ArgumentParser()
    add_option_flags(p, {"mine": specs}, dest="o_", typed=False)
    with cli_names(), pytest.raises(OptionError, match="mine option --k must be a finite number > 0, got 'x'"):
        given_options(p.parse_args(["--k", "x"]), "o_", specs, "mine")
    with cli_names(), pytest.raises(ValueError, match="--grid grid '0:1:3' must be"):
        given_options(p.parse_args(["--grid", "0:1:3"]), "o_", specs, "mine")


def test_one_shot_calibrations_are_the_privacy_modules():
    from fedsciml.core.privacy import METHODS as CALIBRATIONS
    from fedsciml.methods.oneshot import OneShotConfig

    assert OneShotConfig.specs()["dp_calibration"][1].choices == CALIBRATIONS  # declared without importing core
