"""The network as an option of every field problem (``hidden``, ``activation``): declared once for every
PINN/fitting problem, on the command line, in ``fs.solve``, in model files and in checkpoints; the defaults
are the networks the problems had before the option existed."""
import json

import pytest
import torch

import fedsciml as fs
from fedsciml.cli import main
from fedsciml.core.nn import ACTIVATIONS, MLP
from fedsciml.problems import REGISTRY, FieldProblem, ProblemError, get_problem
from fedsciml.runtime.checkpoint import CheckpointMismatch

#: every registered field problem's network before the option existed (git 5e61764): the defaults keep them
BEFORE = {"allen-cahn": [1, 32, 32, 32, 1], "bratu": [1, 32, 32, 32, 1], "burgers": [2, 20, 20, 20, 20, 1],
          "fisher": [1, 32, 32, 32, 1], "gauss2d": [2, 20, 20, 20, 20, 1], "heat": [2, 20, 20, 20, 1],
          "heat-inverse": [2, 20, 20, 20, 1], "heat-nd": [5, 32, 32, 32, 1], "kovasznay": [2, 32, 32, 32, 3],
          "poisson": [2, 32, 32, 32, 1], "poisson-lshape": [2, 32, 32, 32, 1],
          "reaction-diffusion": [1, 32, 32, 32, 1], "sin1d": [1, 20, 20, 20, 1]}
FIELD = sorted(n for n, c in REGISTRY.items() if issubclass(c, FieldProblem))


def test_every_field_problem_declares_the_network_and_keeps_its_default():
    assert set(BEFORE) <= set(FIELD)
    for name in BEFORE:
        specs = REGISTRY[name].specs()
        assert specs["hidden"][0] == BEFORE[name][1:-1] and specs["activation"][0] == "tanh", name
        pb = get_problem(name)
        net = pb.network()
        assert net.sizes == BEFORE[name] and net.activation == "tanh", name
        # the same operations as the network built directly: θ₀ bitwise
        assert torch.equal(pb.init_params(3)[: net.n_params], MLP(BEFORE[name], "tanh").init(3)), name


@pytest.mark.parametrize("name", ["poisson", "sin1d", "kovasznay", "heat-nd", "bratu"])
def test_the_options_build_the_network_asked_for(name):
    pb = get_problem(name, hidden=(7, 5), activation="sin")
    net = pb.network()
    assert net.sizes == [BEFORE[name][0], 7, 5, BEFORE[name][-1]] and net.activation == "sin"
    assert pb.options["hidden"] == [7, 5] and pb.architecture() == {"type": "mlp", "sizes": net.sizes,
                                                                     "activation": "sin"}


@pytest.mark.parametrize("hidden, match", [((0, 8), "got 0 at position 0"), ((8, -3), "got -3 at position 1"),
                                           ((2.5,), "got 2.5 at position 0"), (("a",), "got 'a' at position 0"),
                                           ((), "empty list"), (64, "must be a list of integers"),
                                           ((10 ** 9, 10 ** 9), "more than the .* GB available")])
def test_bad_widths_are_refused_in_one_line(hidden, match):
    with pytest.raises(ProblemError, match=match) as e:
        get_problem("poisson", hidden=hidden)
    assert "\n" not in str(e.value) and "hidden" in str(e.value)


def test_bad_activation_is_refused_naming_the_allowed_ones():
    with pytest.raises(ProblemError, match="activation must be one of " + ", ".join(ACTIVATIONS)):
        get_problem("bratu", activation="swish")


def test_cli_hidden_and_activation_reach_the_run_and_its_records(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["solve", "poisson", "--method", "gn", "--clients", "2", "--rounds", "2", "--n-interior", "30",
                 "--n-boundary", "4", "--hidden", "9,7", "--activation", "sin", "--quiet", "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    res = json.loads((out / "result.json").read_text())
    assert res["options"]["hidden"] == [9, 7] and res["options"]["activation"] == "sin"
    assert res["n_params"] == (2 + 1) * 9 + (9 + 1) * 7 + (7 + 1) * 1
    assert "hidden 9,7, sin" in text
    meta = json.loads((out / "model.json").read_text())
    assert meta["architecture"] == {"type": "mlp", "sizes": [2, 9, 7, 1], "activation": "sin"}
    # the saved model predicts what the run's problem predicts, bitwise (same operations, same order)
    u = fs.load_model(out)
    pb = get_problem("poisson", n_interior=30, n_boundary=4, hidden=[9, 7], activation="sin")
    x = pb.test_inputs()[::13]
    theta = fs.solve(pb, method="gn", clients=2, rounds=2).theta
    assert torch.equal(u(x), pb.predict(theta, x))
    # and `predict` writes the same values (repr round-trips a float64 exactly)
    pts, pred = tmp_path / "x.csv", tmp_path / "u.csv"
    pts.write_text("\n".join(",".join(repr(float(v)) for v in row) for row in x) + "\n")
    assert main(["predict", str(out), "--points", str(pts), "--out", str(pred)]) == 0
    rows = pred.read_text().splitlines()
    assert rows[0] == "x0,x1,u" and [float(r.split(",")[-1]) for r in rows[1:]] == u(x).tolist()


def test_cli_refuses_bad_widths_with_exit_2(capsys):
    assert main(["solve", "bratu", "--hidden", "32,0", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--hidden must be a list of integers, each ≥ 1, got 0 at position 1" in err
    assert main(["solve", "bratu", "--hidden", "32;16", "--quiet"]) == 2
    assert "comma-separated" in capsys.readouterr().err


def test_api_keywords_and_their_misuse():
    r = fs.solve("sin1d", method="gn", clients=2, rounds=1, hidden=(6,), activation="sin",
                 problem_options={"n_samples": 20})
    assert r.n_params == 2 * 6 + 7 and r.options["hidden"] == [6] and r.options["activation"] == "sin"
    with pytest.raises(ValueError, match="given twice"):
        fs.solve("sin1d", hidden=(6,), problem_options={"hidden": [4]})
    with pytest.raises(ValueError, match="only applies when the problem is given by name"):
        fs.solve(get_problem("sin1d"), hidden=(6,))


def test_client_data_takes_the_network_options():
    x = torch.linspace(0, 1, 20, dtype=torch.float64)
    cd = fs.ClientData([(x[:10], x[:10] ** 2), (x[10:], x[10:] ** 2)], hidden=(5, 4), activation="sin")
    assert cd.network().sizes == [1, 5, 4, 1] and cd.network().activation == "sin"
    assert fs.ClientData([(x, x)]).network().sizes == [1, 20, 20, 20, 1]
    with pytest.raises(ProblemError, match="hidden"):
        fs.ClientData([(x, x)], hidden=(0,))


def test_resuming_with_another_network_is_refused_naming_both(tmp_path):
    d = str(tmp_path / "ck")
    opts = {"n_interior": 20}
    fs.solve(get_problem("bratu", hidden=[6, 6], **opts), method="gn", clients=2, rounds=1, checkpoint=d)
    with pytest.raises(CheckpointMismatch) as e:
        fs.solve(get_problem("bratu", hidden=[8, 6], **opts), method="gn", clients=2, rounds=2, checkpoint=d,
                 resume=True)
    msg = str(e.value)
    assert "\n" not in msg and "architecture" in msg and "[1, 6, 6, 1]" in msg and "[1, 8, 6, 1]" in msg
    # the same network resumes
    r = fs.solve(get_problem("bratu", hidden=[6, 6], **opts), method="gn", clients=2, rounds=2, checkpoint=d,
                 resume=True)
    assert r.extra["resumed"]
