"""Issue 36 item 3: every run states why it stopped — ``Result.stop_reason``, ``result.json`` and the summary
table — one cheap run per reason that can be triggered: iterations, rounds, budget, tolerance, LM's damping
ceiling (centralized lm and federated gn), a callback, one-shot, a closed form."""
import json
import logging

import fedsciml as fs
from fedsciml.runtime.results import Result, stop_reason_of, summary_lines

CEILING = "damping ceiling (μ = 1e+20)"
# 6 interior points and the 2 ends against a [1, 16, 16, 1] network (321 parameters): LM interpolates the 8 rows to
# round-off within ~50 steps, then every step is rejected and the damping climbs to its ceiling
TINY = dict(problem_options={"n_interior": 6}, hidden=[16, 16])
SMALL = dict(problem_options={"n_interior": 10}, hidden=[8])


def test_centralized_lm_iterations_tolerance_budget():
    assert fs.solve("bratu", max_iters=3, **SMALL).stop_reason == "iterations"
    r = fs.solve("bratu", max_iters=500, tol=1e-8, **SMALL)
    assert r.stop_reason == "tolerance" and r.final["loss"] <= 1e-8 and len(r.history) < 501
    r = fs.solve("bratu", budget=0.2, clock="cpu", **SMALL)
    assert r.stop_reason == "budget" and r.solver_seconds >= 0.2


def test_centralized_lm_damping_ceiling_is_reported_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="fedsciml.methods.centralized"):
        r = fs.solve("bratu", max_iters=300, **TINY)
    assert r.stop_reason == CEILING and len(r.history) < 301
    assert r.history[-1]["mu"] >= 1e20 and r.final["loss"] < 1e-20  # interpolated: no step lowers it
    warned = [rec.getMessage() for rec in caplog.records if "damping reached the ceiling" in rec.getMessage()]
    assert len(warned) == 1 and "resample" in warned[0]


def test_gn_damping_ceiling_and_rounds():
    r = fs.solve("bratu", method="gn", clients=1, rounds=300, **TINY)
    assert r.stop_reason == CEILING and r.extra["stopped_by"] == CEILING and len(r.history) < 301
    assert fs.solve("bratu", method="gn", clients=2, rounds=2, **SMALL).stop_reason == "rounds"


def test_other_methods_and_optimizers():
    assert fs.solve("bratu", optimizer="adam", max_iters=3, **SMALL).stop_reason == "iterations"
    assert fs.solve("bratu", optimizer="lbfgs", max_iters=2, **SMALL).stop_reason == "iterations"
    assert fs.solve("bratu", method="fipa", clients=2, rounds=2, **SMALL).stop_reason == "rounds"
    assert fs.solve("bratu", method="fedavg", clients=2, budget=0.2, clock="cpu", **SMALL).stop_reason == "budget"
    assert fs.solve("bratu", method="fedprox", clients=2, rounds=1, **SMALL).stop_reason == "rounds"
    assert fs.solve("ridge-linear", method="one-shot", clients=2).stop_reason == "one-shot"
    # the loop's tol (its short name 'tol') is stated as 'tolerance'
    r = fs.solve("bratu", method="gn", clients=2, rounds=200, tol=1e-6, **SMALL)
    assert r.extra["stopped_by"] == "tol" and r.stop_reason == "tolerance"


def test_a_callback_stop_is_the_reason():
    r = fs.solve("bratu", max_iters=20, callbacks=[lambda v: v.step == 2], **SMALL)
    assert r.stop_reason == "callback <lambda>" and r.history[-1]["step"] == 2


def test_result_json_and_summary_state_it(tmp_path):
    r = fs.solve("bratu", max_iters=2, **SMALL)
    path = tmp_path / "result.json"
    r.to_json(str(path))
    assert json.loads(path.read_text())["stop_reason"] == "iterations"
    assert Result.from_json(str(path)).stop_reason == "iterations"
    lines = summary_lines([r])
    head = next(i for i, ln in enumerate(lines) if ln.startswith("method"))
    assert "stopped" in lines[head].split() and "iterations" in lines[head + 1].split()
    # an old file without the field reads as None, and the table shows a dash
    old = {k: v for k, v in r.to_dict().items() if k != "stop_reason"}
    assert Result.from_dict(old).stop_reason is None


def test_stop_reason_of_prefers_the_runner_and_maps_the_loop_names():
    assert stop_reason_of({"stop_reason": "iterations", "stopped_by": "callback x"}) == "iterations"
    assert stop_reason_of({"stopped_by": "tol"}) == "tolerance"
    assert stop_reason_of({"stopped_by": "rounds"}) == "rounds"
    assert stop_reason_of({}) is None
