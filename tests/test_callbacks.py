"""Issue 30 item 12: ``fs.solve(..., callbacks=[...])`` — called after each step/round with a read-only view,
able to stop the run; the shipped EarlyStopping and BestModelCheckpoint."""
import math

import pytest
import torch

import fedsciml as fs

SIN = dict(problem_options={"n_samples": 40})


def test_a_callable_sees_every_row_with_a_copy_of_theta_and_can_stop_the_run():
    seen = []

    def spy(view):
        seen.append((view.step, view.loss, dict(view.metrics), view.theta.clone()))
        view.theta.zero_()                       # a copy: the run does not see this
        with pytest.raises(TypeError):
            view.row["loss"] = 0.0               # read-only
        return view.step == 3

    res = fs.solve("sin1d", "centralized", max_iters=20, callbacks=[spy], **SIN)
    assert [s for s, *_ in seen] == [0, 1, 2, 3]
    assert res.extra["stopped_by"] == "callback spy"
    assert [row["step"] for row in res.history] == [0, 1, 2, 3]
    assert all(s[1] == row["loss"] for s, row in zip(seen, res.history))
    assert "mse" in seen[-1][2]
    assert torch.equal(seen[-1][3], res.theta)   # the copy at the last row is the result's θ


def test_federated_rounds_call_back_and_stop():
    calls = []
    res = fs.solve("bratu", "gn", clients=2, rounds=10, callbacks=[lambda v: calls.append(v.step) or v.step >= 2])
    assert calls == [0, 1, 2] and res.extra["stopped_by"] == "callback <lambda>"
    assert res.history[-1]["round"] == 2


def test_early_stopping_stops_after_patience_rows_without_improvement():
    es = fs.EarlyStopping(monitor="loss", patience=3, rel_delta=0.5)   # demands halving the loss each row
    res = fs.solve("sin1d", "centralized", optimizer="adam", lr=1e-3, max_iters=200, callbacks=[es], **SIN)
    n = len(res.history)
    assert res.extra["stopped_by"] == "callback EarlyStopping" and n < 201
    assert es.stopped_step == res.history[-1]["step"] and es.stopped_step - es.best_step == 3
    assert es.best == min(r["loss"] for r in res.history[:es.best_step + 1])
    with pytest.raises(ValueError, match="patience must be an integer ≥ 1"):
        fs.EarlyStopping(patience=0)


def test_best_model_checkpoint_keeps_and_writes_the_best_theta(tmp_path):
    path = tmp_path / "best.pt"
    ck = fs.BestModelCheckpoint(monitor="mse", path=path)
    res = fs.solve("sin1d", "centralized", optimizer="adam", lr=3e-2, max_iters=30, callbacks=[ck], **SIN)
    best = min(range(len(res.history)), key=lambda i: res.history[i]["mse"])
    assert ck.best_step == res.history[best]["step"] and ck.best == res.history[best]["mse"]
    saved = torch.load(path, weights_only=True)
    assert saved["step"] == ck.best_step and saved["monitor"] == "mse" and torch.equal(saved["theta"], ck.best_theta)
    pb = fs.get_problem("sin1d", n_samples=40)
    assert math.isclose(pb.evaluate(ck.best_theta)["mse"], ck.best, rel_tol=1e-12)


def test_bad_callbacks_are_one_line_errors():
    with pytest.raises(TypeError, match=r"callbacks\[0\] is a int"):
        fs.solve("sin1d", "centralized", max_iters=1, callbacks=[3], **SIN)
    with pytest.raises(ValueError, match="engine 'local' only"):
        fs.solve("sin1d", "centralized", max_iters=1, callbacks=[print], engine="flower", **SIN)
