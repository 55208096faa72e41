"""Time-marching with growing windows (``time_window_growth``) and the command line's ``--time-windows``,
``--time-window-growth``, ``--causal`` (fedsciml.engines.marching: the one loop fs.solve and ``solve`` share)."""
import json
import re

import pytest
import torch
from torch.func import jacrev

import fedsciml as fs
from fedsciml.cli.main import main
from fedsciml.problems.base import ProblemError
from fedsciml.problems.conditions import Dirichlet, Initial
from fedsciml.problems.geometry import Interval
from fedsciml.problems.windows import window_edges, windowed

EPS = torch.finfo(torch.float64).eps


def small(**o):
    return fs.get_problem("heat", **{"n_interior": 30, "n_boundary": 6, "hidden": (8, 8), **o})


def test_growing_windows_have_lengths_in_the_ratio_and_end_at_T():
    pb = small()
    assert window_edges(pb, 4) == window_edges(pb, 4, 1.0) == [0.0, 0.25, 0.5, 0.75, 1.0]
    e = window_edges(pb, 3, 2.0)  # lengths 1/7, 2/7, 4/7 (expm1 ratios: a few ulps each)
    assert e[0] == 0.0 and e[-1] == 1.0
    assert all(abs(a - b) <= 4 * EPS for a, b in zip(e, [0.0, 1 / 7, 3 / 7, 1.0]))
    e = window_edges(pb, 5, 1 + 1e-12)  # r near 1: equal windows to the digits r − 1 leaves (≈ 1e-12 relative)
    assert all(abs(a - k / 5) <= 1e-11 for k, a in enumerate(e))
    e = window_edges(pb, 3, 0.5)  # shrinking windows are allowed too: lengths 4/7, 2/7, 1/7
    assert all(abs(a - b) <= 4 * EPS for a, b in zip(e, [0.0, 4 / 7, 6 / 7, 1.0]))


@pytest.mark.parametrize("growth", [0, -1.0, float("nan"), float("inf"), True, "2"])
def test_a_bad_growth_is_refused_in_one_line(growth):
    with pytest.raises(ProblemError, match=r"time_window_growth .* must be a finite number > 0, got"):
        window_edges(small(), 3, growth)


def test_growth_without_windows_is_refused():
    with pytest.raises(ValueError, match="time_window_growth .* applies with time_windows=K only"):
        fs.solve(small(), "centralized", max_iters=1, time_window_growth=2.0)


class Advection(fs.DomainPDE):
    """u_t = u_x on [0, 1] × [0, 1], u(x, 0) = sin x, u(1, t) = sin(1 + t): u = sin(x + t), which the network
    [2, 1, 1] with activation sin is exactly (W₁ = (1, 1), b₁ = 0, W₂ = 1, b₂ = 0)."""
    name = "advection-sin"
    geometry = Interval(0.0, 1.0)
    T = 1.0
    hidden = (1,)
    activation = "sin"
    conditions = [Initial(lambda x: torch.sin(x[:, 0])), Dirichlet("x+", lambda x: torch.sin(1 + x[:, 1]))]

    def equation(self, u, x):
        return u.diff(x, "t") - u.diff(x, "x")

    def exact(self, x):
        return torch.sin(x[:, 0] + x[:, 1])

    def init_params(self, seed=0, device="cpu"):  # near the exact network, so that LM reaches it
        return torch.tensor([1.05, 0.95, 0.03, 0.97, -0.02], dtype=torch.float64, device=device)


def test_windows_reproduce_the_single_window_answer_on_a_closed_form():
    """Both runs are zero-residual least-squares problems whose solution the network holds exactly, so LM reaches
    it to round-off: each model's distance from sin(x + t) is bounded by the conditioning of u's Jacobian in θ
    at the solution times eps (a perturbation δθ of size κ·eps·|θ| moves u by at most |∂u/∂θ|·δθ).  Windows of
    growing length (1/7, 2/7, 4/7) then give the single window's model to that tolerance."""
    pb = Advection(n_interior=40, n_boundary=10)
    one = fs.solve(pb, "centralized", max_iters=40)
    three = fs.solve(pb, "centralized", max_iters=40, time_windows=3, time_window_growth=2.0)
    edges = [0.0] + [w["t"][1] for w in three.extra["windows"]]
    assert all(abs(a - b) <= 4 * EPS for a, b in zip(edges, [0.0, 1 / 7, 3 / 7, 1.0]))
    assert three.options["time_window_growth"] == 2.0
    X = torch.rand(300, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    J = jacrev(pb.u)(one.theta, X)                         # [300, 5]
    s = torch.linalg.svdvals(J)
    tol = 64 * float(s[0] / s[-1]) * EPS * float(one.theta.abs().max()) * float(J.abs().max())
    u1, u3 = pb.u(one.theta, X), windowed(pb, edges, pb.n_params).u(three.theta, X)
    exact = pb.exact(X)
    assert float((u1 - exact).abs().max()) <= tol and float((u3 - exact).abs().max()) <= tol
    assert float((u1 - u3).abs().max()) <= 2 * tol
    assert tol < 1e-10  # the bound is a round-off figure, not a training error


def _cli_json(tmp_path, *flags):
    path = tmp_path / "r.json"
    code = main(["solve", "heat", "--n-interior", "30", "--n-boundary", "6", "--hidden", "8,8", "--device", "cpu",
                 "--threads", str(torch.get_num_threads()), "--no-progress", "--json", str(path), *flags])
    assert code == 0
    return json.loads(path.read_text())


def _same(cli: dict, r) -> None:
    """The command line's result equals fs.solve's: the same problem, the same loop, the same operations in the
    same order, so bitwise — every history loss and every final metric (timings aside)."""
    api = json.loads(r.to_json())
    assert [h["loss"] for h in cli["history"]] == [h["loss"] for h in api["history"]]
    assert [h.get("window") for h in cli["history"]] == [h.get("window") for h in api["history"]]
    for k in ("loss", "rel_l2"):
        assert cli["final"][k] == api["final"][k]


def test_cli_time_windows_equal_fs_solve_bitwise(tmp_path):
    cli = _cli_json(tmp_path, "--max-iters", "3", "--time-windows", "3", "--time-window-growth", "1.5")
    r = fs.solve(small(), "centralized", max_iters=3, time_windows=3, time_window_growth=1.5)
    _same(cli, r)
    assert [w["t"] for w in cli["extra"]["windows"]] == [w["t"] for w in r.extra["windows"]]
    assert cli["options"]["time_windows"] == 3 and cli["options"]["time_window_growth"] == 1.5


def test_cli_causal_equals_fs_solve_bitwise(tmp_path):
    cli = _cli_json(tmp_path, "--max-iters", "4", "--causal", "2.5", "--causal-slices", "4", "--causal-every", "2")
    r = fs.solve(small(), "centralized", max_iters=4, causal=2.5, causal_slices=4, causal_every=2)
    _same(cli, r)
    stages = json.loads(r.to_json())["extra"]["causal_stages"]  # the weights and steps (timings aside)
    assert [(s["weights"], s["steps"]) for s in cli["extra"]["causal_stages"]] == \
        [(s["weights"], s["steps"]) for s in stages]


@pytest.mark.parametrize("flags, match", [
    (["--time-windows", "0"], r"--time-windows must be a whole number ≥ 1 .*got 0"),
    (["--time-windows", "2", "--time-window-growth", "0"], r"--time-window-growth must be a finite number > 0"),
    (["--time-window-growth", "2"], r"--time-window-growth applies with --time-windows K only"),
    (["--causal", "-1"], r"--causal must be a finite number ≥ 0"),
    (["--causal-slices", "4"], r"--causal-slices applies with --causal EPS only"),
    (["--causal", "1", "--causal-every", "0"], r"--causal-every must be a whole number ≥ 1, got 0"),
    (["--causal", "1", "--budget", "5"], r"causal weighting runs max_iters in stages"),
])
def test_cli_bad_values_get_one_line(capsys, flags, match):
    assert main(["solve", "heat", "--max-iters", "1", "--device", "cpu", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and re.search(match, err[0]), err


def test_cli_refuses_a_problem_without_time(capsys):
    assert main(["solve", "bratu", "--max-iters", "1", "--device", "cpu", "--time-windows", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--time-windows applies to a time-dependent problem" in err[0] and "bratu" in err[0]


def test_cli_help_lists_the_flags(capsys):
    with pytest.raises(SystemExit):
        main(["solve", "heat", "--help"])
    out = capsys.readouterr().out
    for flag in ("--time-windows", "--time-window-growth", "--causal", "--causal-slices", "--causal-every"):
        assert flag in out
