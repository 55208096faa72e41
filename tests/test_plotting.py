"""PNG plots of runs (solution vs exact, error vs time and steps) for field and non-field problems."""
import os

import pytest

from fedsciml.runtime.plotting import plot_runs, run_label
from fedsciml.problems import get_problem
from fedsciml.runtime.results import Result

PNG = b"\x89PNG\r\n\x1a\n"


def fake_result(problem, method="centralized", theta=None, metric="rel_l2", optimizer="lm"):
    rows = [{"step": s, "time_s": 0.1 * s, "loss": 10.0 ** -s, metric: 10.0 ** (-s / 2), "floats_sent": 0}
            for s in range(6)]
    return Result(problem=problem.name if hasattr(problem, "name") else str(problem), method=method,
                  options={"optimizer": optimizer}, seed=0, device="cpu", dtype="float64", n_params=3, clients=2,
                  final={"loss": rows[-1]["loss"], metric: rows[-1][metric]}, history=rows, theta=theta)


def assert_pngs(paths, names):
    assert sorted(os.path.basename(p) for p in paths) == sorted(names)
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == PNG
        assert os.path.getsize(p) > 5000


@pytest.mark.parametrize("name,opts", [("bratu", {}), ("poisson", {"dim": 3})])
def test_field_problem_writes_solution_and_convergence_plots(tmp_path, name, opts):
    pb = get_problem(name, **opts)
    metric = "mse" if pb.metric == "mse" else "rel_l2"
    results = [fake_result(pb, theta=pb.init_params(0), metric=metric), fake_result(pb, "fipa", metric=metric)]
    paths = plot_runs(pb, results, str(tmp_path / "out"))
    assert_pngs(paths, ["solution.png", "error_vs_time.png", "error_vs_step.png"])


def test_non_field_problem_skips_the_solution_plot(tmp_path):
    class Ridge:  # what a ridge problem looks like to the plotter: no field, no network
        name = "ridge-linear"
        kind = "ridge"

    results = [fake_result(Ridge(), "fusion", metric="mse"), fake_result(Ridge(), "fedavg", metric="mse")]
    paths = plot_runs(Ridge(), results, str(tmp_path))
    assert_pngs(paths, ["error_vs_time.png", "error_vs_step.png"])


def test_runs_without_parameters_or_history_do_not_crash(tmp_path):
    pb = get_problem("allen-cahn")
    r = fake_result(pb)
    r.history = []
    assert plot_runs(pb, [r], str(tmp_path)) == []
    rounds = fake_result(pb, "gn")
    rounds.history = [{"round": k, "time_s": k, "rel_l2": 1.0 / (k + 1), "loss": float("nan")} for k in range(4)]
    assert_pngs(plot_runs(pb, [rounds], str(tmp_path)), ["error_vs_time.png", "error_vs_step.png"])


def test_run_labels_name_the_centralized_optimizer():
    pb = get_problem("bratu")
    assert run_label(fake_result(pb, optimizer="adam")) == "centralized/adam"
    assert run_label(fake_result(pb, "fipa")) == "fipa"
