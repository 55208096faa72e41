"""Every restored checkpoint field is checked (issue 31, finding 8): a state this run could not have written — a
NaN, short, 2-D or wrong-dtype SPRING φ, FedAdam ``v < 0`` or NaN, gn ``μ ≤ 0``, a NaN stored loss, a missing
``m`` or aggregator state, fipa ``β < 0``, a resample counter of 10⁹ — is one line naming the field and the
checkpoint, never a traceback, a blamed client or a silently different run.  ``monitor_exchanges`` survives a
resume.

The states are edited and re-saved with :func:`fedsciml.runtime.checkpoint.save` (a valid checksum: what
someone who edits the file can do)."""
from __future__ import annotations

import math

import pytest
import torch

import fedsciml as fs
from fedsciml.runtime import checkpoint as ckpt

SIN = dict(clients=2, seed=0)


def P():
    return fs.get_problem("sin1d", n_samples=20)


def _tamper(d, edit):
    path = ckpt.path_in(str(d))
    state = ckpt.read(path)
    edit(state["strategy"])
    ckpt.save(str(d), state)
    return path


def _set(key, value):
    def edit(s):
        s[key] = value(s) if callable(value) else value
    return edit


def _drop(key):
    def edit(s):
        s.pop(key)
    return edit


def _inner(edit):
    def f(s):
        edit(s["inner"])
    return f


def _agg(edit):
    def f(s):
        edit(s["aggregator"])
    return f


def BRATU():
    return fs.get_problem("bratu", n_interior=40)  # 20 per client of 2 (counts are totals)


GN = ("gn", dict(rounds=2, momentum=0.5), P)
FEDADAM = ("fedadam", dict(rounds=2, local_steps=5), P)
FIPA = ("fipa", dict(rounds=2, local="gn", safeguard=True), P)
RESAMPLE = ("gn", dict(rounds=2, resample=1), BRATU)

CASES = [
    ("phi-nan", GN, _set("phi", lambda s: torch.full_like(s["phi"], math.nan)), "'phi' holds non-finite"),
    ("phi-short", GN, _set("phi", lambda s: s["phi"][:3]), r"'phi' has shape \(3,\)"),
    ("phi-2d", GN, _set("phi", lambda s: s["phi"][None]), r"'phi' has shape \(1, \d+\)"),
    ("phi-float32", GN, _set("phi", lambda s: s["phi"].float()), "'phi' is torch.float32"),
    ("phi-int", GN, _set("phi", lambda s: s["phi"].long()), "'phi' must be a floating-point tensor"),
    ("gn-mu-negative", GN, _set("mu", -1.0), "'mu' = -1.0 must be ≥ 0"),
    ("gn-mu-zero", GN, _set("mu", 0.0), "'mu' = 0 after"),
    ("gn-mu-nan", GN, _set("mu", math.nan), "'mu' must be a finite number"),
    ("gn-loss-nan", GN, _set("loss", math.nan), "'loss' must be a finite number"),
    ("gn-nu", GN, _set("nu", 0.5), "'nu' = 0.5 must be ≥ 2"),
    ("gn-g-short", GN, _set("g", lambda s: s["g"][:2]), r"'g' has shape \(2,\)"),
    ("gn-accepted", GN, _set("accepted", -3), "'accepted' = -3"),
    ("fedadam-v-negative", FEDADAM, _agg(_set("v", lambda s: -torch.ones_like(s["v"]))), "'v' holds negative"),
    ("fedadam-v-nan", FEDADAM, _agg(_set("v", lambda s: torch.full_like(s["v"], math.nan))), "'v' holds non-finite"),
    ("fedadam-m-missing", FEDADAM, _agg(_drop("m")), "'m' of the server optimizer is missing"),
    ("fedadam-aggregator-missing", FEDADAM, _drop("aggregator"), "'aggregator' .* is missing"),
    ("fedadam-m-short", FEDADAM, _agg(_set("m", lambda s: s["m"][:2])), r"'m' has shape \(2,\)|'v' has shape"),
    ("fedadam-t-negative", FEDADAM, _agg(_set("t", -1)), "'t' = -1"),
    ("fipa-beta-negative", FIPA, _set("beta", -1.0), "'beta' = -1.0 must be ≥ 0"),
    ("fipa-prev-loss-nan", FIPA, _set("prev_loss", math.nan), "'prev_loss' must be a finite"),
    ("resample-counter", RESAMPLE, _set("resample", 10**9), "'resample' = 1000000000 is more than"),
    ("resample-inner-mu", RESAMPLE, _inner(_set("mu", -1.0)), "'mu' = -1.0"),
]


@pytest.mark.parametrize("name,run,edit,msg", CASES, ids=[c[0] for c in CASES])
def test_a_restored_field_out_of_range_is_one_line_naming_it(tmp_path, name, run, edit, msg):
    method, opts, problem = run
    fs.solve(problem(), method, checkpoint=str(tmp_path), **SIN, **opts)
    path = _tamper(tmp_path, edit)
    with pytest.raises(ckpt.CheckpointError, match=msg) as e:
        fs.solve(problem(), method, checkpoint=str(tmp_path), resume=True, **SIN, **{**opts, "rounds": 3})
    assert path in str(e.value) and "\n" not in str(e.value)


def test_an_untouched_checkpoint_still_resumes_bitwise(tmp_path):
    """The checks refuse nothing a run writes: gn with SPRING resumed equals the uninterrupted run, bitwise
    (same operations in the same order)."""
    method, opts, _ = GN
    full = fs.solve(P(), method, **SIN, **{**opts, "rounds": 3})
    fs.solve(P(), method, checkpoint=str(tmp_path), **SIN, **opts)
    resumed = fs.solve(P(), method, checkpoint=str(tmp_path), resume=True, **SIN, **{**opts, "rounds": 3})
    assert torch.equal(full.theta, resumed.theta)


def test_monitor_exchanges_survive_a_resume(tmp_path):
    """``extra.monitor_exchanges`` (separate monitoring loss queries) counts on across a kill/resume: a run
    stopped at round 2 and resumed to 4 reports the uninterrupted run's count."""
    opts = dict(clients=2, seed=0, local_steps=5)
    full = fs.solve("sin1d", "fedavg", rounds=4, **opts)
    fs.solve("sin1d", "fedavg", rounds=2, checkpoint=str(tmp_path), **opts)
    state = ckpt.read(ckpt.path_in(str(tmp_path)))
    assert "monitor_exchanges" in state
    resumed = fs.solve("sin1d", "fedavg", rounds=4, checkpoint=str(tmp_path), resume=True, **opts)
    assert resumed.extra["monitor_exchanges"] == full.extra["monitor_exchanges"]
    assert torch.equal(full.theta, resumed.theta)
