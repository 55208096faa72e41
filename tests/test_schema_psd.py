"""The blocked PSD check of packed messages gives the one-line expression's verdict on every entry.

``core.schema._packed_offdiagonal_exceeds`` evaluates ``H_ij² > H_ii·H_jj·(1+tol)² + tiny`` block by block
into reused buffers; it performs the same floating-point operations in the same order as the one-line
form, so the verdicts are equal exactly (not within a tolerance), including for entries that sit on the
bound, in batched stacks and across block edges (the block size is made small here).
"""
import pytest
import torch

import fedsciml.core.schema as schema
from fedsciml.core.schema import Field, MessageRejected, Schema, psd_violation


def _one_line(t):
    q = t.shape[-1]
    d = int(round(((8 * q + 1) ** 0.5 - 1) / 2))
    i, j = torch.triu_indices(d, d)
    diag = t[..., i == j]
    if bool((diag < 0).any()):
        return "negative"
    tol = schema.psd_tolerance(t.dtype)
    bound = diag[..., i] * diag[..., j]
    return "offdiagonal" if bool((t * t > bound * (1 + tol) ** 2 + torch.finfo(t.dtype).tiny).any()) else None


def _verdict(t):
    why = psd_violation(t, "packed")
    return None if why is None else ("negative" if "negative" in why else "offdiagonal")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_blocked_check_equals_one_line(monkeypatch, dtype):
    monkeypatch.setattr(schema, "_CHUNK", 7)  # many blocks, a short last one
    g = torch.Generator().manual_seed(0)
    for trial in range(60):
        d = int(torch.randint(1, 20, (1,), generator=g))
        a = torch.randn(2, 4, d, dtype=dtype, generator=g)
        gram = a.transpose(-1, -2) @ a
        i, j = torch.triu_indices(d, d)
        h = gram[..., i, j].contiguous()
        if trial % 3 == 0 and d > 1:  # push one off-diagonal entry just past (or onto) its bound
            k = int(torch.randint(0, h.shape[-1], (1,), generator=g))
            if i[k] != j[k]:
                h[1, k] = (h[1, int((i == j).nonzero()[i[k]])] * h[1, int((i == j).nonzero()[j[k]])]).sqrt() * (1 + 1e-3 * (trial % 2))
        if trial % 7 == 0:
            h[0, 0] = -1.0
        assert _verdict(h) == _one_line(h)


def test_schema_rejects_by_name_in_one_pass():
    s = Schema({"H": Field(shape=(None,), psd="packed"), "v": Field(shape=(3,), nonneg=True)})
    good = {"H": torch.tensor([2.0, 1.0, 2.0], dtype=torch.float64), "v": torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)}
    assert s.validate(good, "c0") is good
    for field, value, words in [
        ("v", [0.0, float("nan"), 1.0], "non-finite"),
        ("v", [0.0, float("-inf"), 1.0], "non-finite"),
        ("v", [0.0, -1.0, 1.0], "negative"),
        ("v", [0.0, 1e200, 1.0], "magnitude"),
        ("H", [1.0, 3.0, 1.0], "off-diagonal"),
    ]:
        bad = dict(good, **{field: torch.tensor(value, dtype=torch.float64)})
        with pytest.raises(MessageRejected, match=words):
            s.validate(bad, "c1")
