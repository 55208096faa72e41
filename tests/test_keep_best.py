"""keep_best: a run returns the θ of its best held-out validation residual; Data(holdout=) holds readings out.

The problem: −(a u')' = f on [0, 1] with the coefficient field a unknown (a network of its own), u = sin πx and
a = 1 + x/2 in closed form, 30 readings of u with N(0, 0.1²) noise of which 30 % are held out — a small network
that goes on to fit the noise of its 21 trained readings (its L2RE over (u, a) falls to 2.4e-2 by step 15, then
rises to 8.9e-2 by step 60 while the training loss keeps falling).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.options import OptionError
from fedsciml.problems.base import ProblemError
from fedsciml.problems.conditions import Data, Dirichlet
from fedsciml.problems.geometry import Interval

XS = torch.linspace(0.02, 0.98, 30, dtype=torch.float64)[:, None]
NOISE = 0.1 * torch.as_tensor(np.random.default_rng(0).standard_normal(30))


def _exact(x):
    return torch.sin(math.pi * x[:, 0])


class NoisyInverse(fs.DomainPDE):
    """−(a u')' = f on [0, 1], a unknown; exact u = sin πx, a = 1 + x/2; 30 noisy readings, 30 % held out."""
    name = "noisy-inverse-1d"
    geometry = Interval(0.0, 1.0)
    unknown_fields = {"a": dict(hidden=(8,))}
    exact_coefficients = {"a": lambda x: 1 + 0.5 * x[:, 0]}
    holdout, noise = 0.3, 0.1

    @property
    def conditions(self):
        return [Dirichlet("boundary", None), Dirichlet("boundary", None, component="a"),
                Data(x=XS, y=_exact(XS) + NOISE, noise=self.noise, holdout=self.holdout)]

    def equation(self, u, x):
        a, uxx = u.coef["a"], u.diff(x, "x", "x")
        f = (1 + 0.5 * x[0]) * math.pi ** 2 * torch.sin(math.pi * x[0]) - 0.5 * math.pi * torch.cos(math.pi * x[0])
        return -(a.diff(x, "x") * u.diff(x, "x") + a(x) * uxx) - f

    def exact(self, x):
        return _exact(x)


class Exact(NoisyInverse):
    """The same readings said to carry no noise (no ``noise``): keep_best is off by default."""
    name = "exact-inverse-1d"
    noise = None


def _problem(cls=NoisyInverse):
    return cls(hidden=(16, 16), n_interior=30, n_boundary=1)


def test_keep_best_returns_the_recorded_best_theta_bitwise_and_helps():
    r = fs.solve(_problem(), "centralized", max_iters=60)      # keep_best: validation by default (noisy readings)
    kept = r.extra["keep_best"]
    rows = {h["step"]: h for h in r.history}
    best = min(r.history, key=lambda h: h["val_loss"])
    assert kept["step"] == best["step"] < r.history[-1]["step"] == kept["last_step"] == 60
    assert kept["val_loss"] == best["val_loss"] and kept["last_val_loss"] == r.history[-1]["val_loss"]
    assert r.final["loss"] == rows[kept["step"]]["loss"]      # the summary's loss is the returned θ's
    # the same run stopped at that step returns the same θ, bit for bit: LM makes the same operations in the same
    # order up to it (the validation evaluation draws no random number and does not touch θ)
    again = fs.solve(_problem(), "centralized", max_iters=kept["step"], keep_best="none")
    assert "keep_best" not in again.extra
    assert torch.equal(r.theta, again.theta)
    # it helps: the noise is fitted after the best validation step (the last iterate's error is larger)
    assert r.final["l2re_fields"] == again.final["l2re_fields"] < r.history[-1]["l2re_fields"]
    assert r.final["l2re_fields"] < 5e-2 and r.history[-1]["l2re_fields"] > 5e-2


def test_keep_best_default_and_off():
    # no noise on the readings: the last iterate (no record)
    assert "keep_best" not in fs.solve(_problem(Exact), "centralized", max_iters=2).extra
    r = fs.solve(_problem(), "centralized", max_iters=2, keep_best="none")
    assert "keep_best" not in r.extra
    # a problem without a validation residual (fixed data): off by default, refused when asked for
    assert "keep_best" not in fs.solve("sin1d", max_iters=1).extra
    with pytest.raises(ValueError, match="keep_best='validation'.*no held-out validation residual"):
        fs.solve("sin1d", max_iters=1, keep_best="validation")


def test_keep_best_bad_values_one_line():
    with pytest.raises(OptionError) as e:
        fs.solve(_problem(), "centralized", max_iters=1, keep_best="best")
    assert "validation" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ValueError, match="validation is off") as e:
        fs.solve(_problem(), "centralized", max_iters=1, keep_best="validation", validation=False)
    assert "\n" not in str(e.value)


def test_holdout_split_is_fixed_disjoint_and_out_of_training():
    d = Data(x=XS, y=_exact(XS), holdout=0.3)
    tr, held = d.split(30)
    assert len(held) == 9 and len(tr) == 21 and d.n_trained() == 21
    assert sorted(torch.cat([tr, held]).tolist()) == list(range(30))
    assert torch.equal(held, Data(x=XS, y=_exact(XS), holdout=0.3).split(30)[1])     # fixed by holdout_seed
    assert not torch.equal(held, Data(x=XS, y=_exact(XS), holdout=0.3, holdout_seed=1).split(30)[1])
    assert len(Data(x=XS, y=_exact(XS)).split(30)[1]) == 0
    p = _problem()
    data_pts = lambda objs: [q.points for o in objs for q in o.parts if q.name == "data"]  # noqa: E731
    (train,) = data_pts(p.client_objectives(1, seed=0))
    (val,) = data_pts(p.validation_objectives(1, seed=5))
    assert torch.equal(train[0], XS[tr]) and torch.equal(val[0], XS[held])
    # the validation residual of a run holds the held-out readings, and the history their misfit alone
    r = fs.solve(p, "centralized", max_iters=1)
    assert "data" in r.extra["validation"]["parts"] and "val_readings" in r.history[-1]


@pytest.mark.parametrize("bad", [1.0, -0.1, True, "0.2", float("nan")])
def test_holdout_bad_values_one_line(bad):
    with pytest.raises(ProblemError) as e:
        Data(x=XS, y=_exact(XS), holdout=bad)
    assert "holdout" in str(e.value) and "[0, 1)" in str(e.value) and "\n" not in str(e.value)


def test_pinnacle_holdout_default_and_inapplicable():
    p = fs.get_problem("pinnacle", case="pinv")
    (d,) = [c for c in p.conditions if isinstance(c, Data)]
    assert d.holdout == 0.2 and d.n_trained() == 2000
    with pytest.raises(OptionError, match="holdout"):
        fs.get_problem("pinnacle", case="burgers1d-c", holdout=0.1)
