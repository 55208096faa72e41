"""Causal weighting (``fs.solve(..., causal=ε)``, fedsciml.problems.causal; Wang, Sankaran & Perdikaris 2022)."""
import os
import re

import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.problems.base import ProblemError
from fedsciml.problems.causal import causal_problem


DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "pde.md")


def small(**o):
    return fs.get_problem("heat", **{"n_interior": 30, "n_boundary": 6, "hidden": (8, 8), **o})


def test_weights_follow_the_formula_and_scale_the_pde_rows():
    pb = small()
    theta = pb.init_params(1)
    eps, M = 3.0, 8
    plain = pb.client_objectives(2)
    cp = causal_problem(pb, theta, eps, M)
    weighted = cp.client_objectives(2)
    # the formula in numpy, from each client's PDE rows (their part "pde": weight 1, the points are (x, t))
    sums, counts = np.zeros(M), np.zeros(M)
    for o in plain:
        (p,) = [q for q in o.parts if q.name == "pde"]
        r = o._part_residual(p, theta).detach().numpy()
        s = np.clip(np.floor(p.points[:, 1].numpy() / 1.0 * M), 0, M - 1).astype(int)
        np.add.at(sums, s, r ** 2)
        np.add.at(counts, s, 1)
    L = sums / counts
    w = np.exp(-eps * np.concatenate([[0.0], np.cumsum(L)[:-1]]))
    assert w[0] == 1.0 and np.all(np.diff(w) <= 0)
    assert np.allclose(cp.causal_weights.numpy(), w, rtol=1e-12, atol=0)  # sums in another order: round-off
    # each PDE row is √w of its slice times the plain row; the condition rows are the plain ones, bitwise
    for o, ow in zip(plain, weighted):
        for p, pw in zip(o.parts, ow.parts):
            assert p.name == pw.name
            r, rw = o._part_residual(p, theta), ow._part_residual(pw, theta)
            if p.name == "pde":
                s = np.clip(np.floor(p.points[:, 1].numpy() * M), 0, M - 1).astype(int)
                # the same factors, multiplied once in either order: equal to one rounding (2 ulp)
                assert torch.allclose(rw, r * cp.causal_weights[torch.as_tensor(s)].sqrt(), rtol=4.5e-16, atol=0)
            else:
                assert torch.equal(r, rw)
    assert torch.equal(cp.init_params(0), theta)


def test_gn_with_causal_weights_equals_centralized_lm_with_causal_weights():
    """Within a stage the weights are fixed: a weighted least-squares problem on which gn's summed statistics are
    the pooled ones; the weights of the next stage come from equal θ (to round-off: rel 1e-9)."""
    text = open(DOC).read()  # docs/pde.md's example as it stands (the ```py block after its heading) is the gn run
    code = re.search(r"\*\*Causal weighting\*\*.*?```py\n(.*?)```", text, flags=re.S).group(1)
    ns = {"fs": fs}
    exec(compile(code, DOC, "exec"), ns)
    g = ns["r"]
    c = fs.solve(small(), "centralized", clients=2, max_iters=6, lm_solve="normal", causal=5.0, causal_every=3)
    assert [r["causal_stage"] for r in g.history] == [1, 1, 1, 1, 2, 2, 2]
    for rg, rc in zip(g.history, c.history):
        assert abs(rg["loss"] - rc["loss"]) <= 1e-9 * rc["loss"]
    assert float((g.theta - c.theta).norm() / c.theta.norm()) < 1e-9
    for sg, sc in zip(g.extra["causal_stages"], c.extra["causal_stages"]):
        assert np.allclose(sg["weights"], sc["weights"], rtol=1e-9, atol=0)
    assert min(g.extra["causal_stages"][0]["weights"]) < 0.5  # at the start the late slices are damped
    assert g.options["causal"] == 5.0 and 0 < g.final["causal_min_weight"] <= 1


def test_causal_weighting_composes_with_time_windows():
    r = fs.solve(small(), "centralized", clients=2, max_iters=4, causal=1.0, causal_every=2, time_windows=2)
    assert [w["t"] for w in r.extra["windows"]] == [[0.0, 0.5], [0.5, 1.0]]
    assert {row["causal_stage"] for row in r.history} == {1, 2}


@pytest.mark.parametrize("problem, opts, err, match", [
    ("poisson-lshape", dict(causal=1.0, max_iters=2), ProblemError, "no time axis"),
    ("heat", dict(causal=-1.0, max_iters=2), ProblemError, "ε"),
    ("heat", dict(causal=1.0, causal_every=0, max_iters=2), ProblemError, "causal_every"),
    ("heat", dict(causal=1.0), ValueError, "give max_iters"),
    ("heat", dict(causal=1.0, max_iters=2, budget=5.0), ValueError, "no budget"),
    ("heat", dict(causal_slices=8, max_iters=2), ValueError, "apply with causal"),
])
def test_bad_causal_settings_fail_with_one_line(problem, opts, err, match):
    with pytest.raises(err, match=match):
        fs.solve(problem, "centralized", **opts)
