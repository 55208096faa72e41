"""Full-rank FIPA's merge computes what it uses: with β > 0 (always, under the default safeguard) one Cholesky solve
and no pseudo-inverse; the strategy's predicted decrease reuses the merge's right-hand side."""
import pytest
import torch

from fedsciml.core import linalg
from fedsciml.methods.aggregators import FIPAAggregator
from fedsciml.methods.fipa import _merge_rhs


def _messages(p=7, M=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = {}
    for c in range(M):
        J = torch.randn(5, p, generator=g, dtype=torch.float64)
        out[c] = {"H": linalg.pack_upper(J.T @ J), "delta": torch.randn(p, generator=g, dtype=torch.float64),
                  "n": torch.tensor([5.0], dtype=torch.float64)}
    return out


def test_regularized_full_merge_forms_no_pseudo_inverse(monkeypatch):
    msgs, p, beta = _messages(), 7, 0.3
    theta = torch.zeros(p, dtype=torch.float64)
    # the reference: the regularized dense merge as written before (same operations, same order: bitwise)
    Hs = [linalg.unpack_upper(m["H"], p) for m in msgs.values()]
    H = sum(1.0 * Hi for Hi in Hs)
    b = sum(1.0 * (Hi @ m["delta"]) for Hi, m in zip(Hs, msgs.values()))
    want = theta + 1.0 * 1.0 * linalg.damped_solve(H, b, beta)

    def refused(*a, **k):
        raise AssertionError("a pseudo-inverse was formed")

    monkeypatch.setattr(linalg, "pinv_solve", refused)
    agg = FIPAAggregator(curvature="full", merge="pinv", beta=beta)
    got = agg.aggregate(theta, msgs)
    assert torch.equal(got, want)
    assert torch.equal(agg.rhs, _merge_rhs(msgs, agg.form))  # the strategy's b is the merge's, bit for bit


@pytest.mark.parametrize("kw", [dict(curvature="full", merge="pinv"), dict(curvature="lowrank", merge="qr", beta=0.2),
                                dict(curvature="lowrank", merge="pinv")])
def test_the_merge_leaves_its_right_hand_side(kw):
    """Where the merge formed b as the strategy does (same operations, same order) it is reused bit for bit; the
    low-rank pseudo-inverse merge forms (U Λ Uᵀ) Δθ, equal only in round-off, and leaves none."""
    msgs, p = _messages(), 7
    if kw["curvature"] == "lowrank":
        for m in msgs.values():
            m["U"], m["lam"] = linalg.top_eigh(linalg.unpack_upper(m.pop("H"), p), 3)
    agg = FIPAAggregator(**kw)
    agg.aggregate(torch.zeros(p, dtype=torch.float64), msgs)
    if kw == dict(curvature="lowrank", merge="pinv"):
        assert agg.rhs is None
    else:
        assert torch.equal(agg.rhs, _merge_rhs(msgs, agg.form))


def test_a_robust_or_bounded_merge_leaves_no_plain_right_hand_side():
    msgs, p = _messages(), 7
    for kw in (dict(robust="median"), dict(clip_norm=0.5)):
        agg = FIPAAggregator(curvature="full", merge="pinv", **kw)
        agg.aggregate(torch.zeros(p, dtype=torch.float64), msgs)
        assert agg.rhs is None  # the strategy forms Σ Ĥ_m Δθ_m of the unbounded deltas itself, as before
