"""Issue 36 item 3: the held-out validation residual beside the training loss (fedsciml.runtime.validation) —
the same iterates with or without it, its value against a direct evaluation, the warning when the two part."""
import logging

import pytest
import torch

import fedsciml as fs
from fedsciml.runtime.resample import resample_seed
from fedsciml.runtime.validation import PARTING_RATIO, held_out, validation_seed

SMALL = dict(problem_options={"n_interior": 10}, hidden=[8])
# 20 interior + 10 boundary rows against a [2, 16, 16, 1] network (337 parameters): LM interpolates its points
LSHAPE = dict(clients=1, hidden=[16, 16], problem_options={"n_interior": 20, "n_boundary": 10})


@pytest.mark.parametrize("method,kw", [("centralized", {"max_iters": 8}), ("gn", {"clients": 2, "rounds": 4}),
                                       ("fipa", {"clients": 2, "rounds": 2})])
def test_the_iterates_are_the_same_bits_with_and_without_validation(method, kw):
    # the validation points are drawn outside the run's random streams and evaluated off the solver's path
    on = fs.solve("bratu", method=method, **kw, **SMALL)
    off = fs.solve("bratu", method=method, validation=False, **kw, **SMALL)
    assert torch.equal(on.theta, off.theta)  # same operations, same order: bitwise
    assert [r["loss"] for r in on.history] == [r["loss"] for r in off.history]
    assert all("val_loss" in r for r in on.history) and not any("val_loss" in r for r in off.history)
    assert "validation" in on.extra and "validation" not in off.extra


def test_val_loss_is_the_mean_loss_at_the_fresh_points_only():
    r = fs.solve("bratu", max_iters=3, **SMALL)
    problem = fs.get_problem("bratu", **SMALL["problem_options"], hidden=[8])
    fresh = problem.client_objectives(1, seed=validation_seed(0))
    train = problem.client_objectives(1, seed=0)
    (interior,) = [q for q in fresh[0].parts if q.name == "interior"]
    # the 1-D end points are the same in both draws: not held out; the interior points are new
    assert r.extra["validation"]["parts"] == ["interior"] and r.extra["validation"]["points"] == 10
    assert not torch.equal(interior.points, [q for q in train[0].parts if q.name == "interior"][0].points)
    res = torch.stack([problem.interior_residual(r.theta, x) for x in interior.points])  # one point at a time
    want = 0.5 * float(res @ res) / 10
    # the same residuals summed in another order (batched vs one by one): a few ulps of the sum
    assert r.history[-1]["val_loss"] == pytest.approx(want, rel=1e-12)


def test_the_seed_is_its_own():
    assert validation_seed(0) == validation_seed(0) != validation_seed(1)
    assert validation_seed(0) not in {resample_seed(0, j) for j in range(1, 50)} | {0}
    problem = fs.get_problem("poisson-lshape")
    objs = problem.client_objectives(2, seed=0)
    a, b = held_out(problem, 2, 0, objs), held_out(problem, 2, 0, objs)
    assert [q.name for q in a.parts] == ["pde", "dirichlet:boundary"]  # a 2-D boundary is sampled: held out too
    assert all(torch.equal(x.points if not isinstance(x.points, tuple) else x.points[0],
                           y.points if not isinstance(y.points, tuple) else y.points[0]) for x, y in zip(a.parts, b.parts))


def test_an_interpolating_run_warns_once_naming_resample(caplog):
    with caplog.at_level(logging.WARNING, logger="fedsciml.runtime.validation"):
        r = fs.solve("poisson-lshape", max_iters=40, **LSHAPE)
    v = r.extra["validation"]
    assert v["parted"] and v["ratio"] >= PARTING_RATIO and v["val_loss"] == r.history[-1]["val_loss"]
    assert v["loss"] == r.final["loss"] < 1e-20 < 1e-3 < v["val_loss"]
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "fedsciml.runtime.validation"]
    assert len(lines) == 1 and "--resample" in lines[0] and "30 residual rows are fewer than its 337" in lines[0]


def test_a_run_that_generalizes_does_not_warn(caplog):
    with caplog.at_level(logging.WARNING, logger="fedsciml.runtime.validation"):
        r = fs.solve("bratu", max_iters=30)
    v = r.extra["validation"]
    assert not v["parted"] and v["ratio"] < 3 and not caplog.records


def test_validation_on_a_problem_without_collocation_is_refused():
    with pytest.raises(ValueError, match="validation=True: problem 'sin1d' has fixed data"):
        fs.solve("sin1d", max_iters=1, validation=True)
    assert "validation" not in fs.solve("sin1d", max_iters=1).extra  # the default: nothing to hold out
