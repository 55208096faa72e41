"""The user's one-shot path takes the fast correct form (issue 21 item 5): the square-root form where
``2·n_k ≤ d`` with CV, and the O(d³) consistency check once on the sum, per message only when the sum fails."""
import pytest
import torch

import fedsciml as fs
from fedsciml.runtime import robust
from fedsciml.problems import get_problem
from fedsciml.ridge import pooled_ridge


def _prob(d=12, n=10):
    return get_problem("ridge-linear", dim=d, n_samples=n, penalty="server")


def test_auto_form_is_square_root_with_cv_and_few_rows_and_equals_gram():
    from fedsciml.methods.oneshot import OneShotStrategy
    from fedsciml.ridge import one_shot

    prob = _prob(d=20, n=10)                         # 8 training rows per client: 2·8 ≤ d
    auto = fs.solve(prob, "one-shot", clients=5, seed=1, cv_sigmas=[1e-3, 1e-1, 10])
    assert auto.extra["form_used"] == "sqrt"
    assert auto.history[-1]["floats_up"] == 5 * (8 * 20 + 8 + 2)  # R_k [8, 20], s_k [8], loss, n
    data = prob.client_data(5, 1)
    w_gram, info = one_shot(data, 0.0, cv_sigmas=[1e-3, 1e-1, 10], form="gram")   # the Gram form's server path
    assert info["form"] == "gram" and auto.extra["sigma_used"] == info["sigma"]
    assert torch.allclose(torch.tensor(auto.extra["cv_loss"]), torch.tensor(info["cv_loss"]), rtol=1e-10)
    assert float((auto.theta - w_gram).norm() / w_gram.norm()) < 1e-10
    A, b = torch.cat([a for a, _ in data]), torch.cat([y for _, y in data])
    ref = pooled_ridge(A, b, auto.extra["sigma_used"])
    assert float((auto.theta - ref).norm() / ref.norm()) < 1e-10
    # more rows than d/2, or DP, or no CV: the Gram form
    assert fs.solve(_prob(d=12, n=10), "one-shot", clients=5, seed=1, cv_sigmas=[1, 10]).extra["form_used"] == "gram"
    assert fs.solve(prob, "one-shot", clients=5, seed=1).extra["form_used"] == "gram"
    assert OneShotStrategy(form="auto").summary() == {"sigma": 0.0}


def test_consistency_is_checked_once_on_the_sum(monkeypatch):
    calls = []
    real = robust.pinv_quadratic_lower
    monkeypatch.setattr(robust, "pinv_quadratic_lower", lambda H, g: calls.append(1) or real(H, g))
    prob = _prob(d=6, n=40)
    res = fs.solve(prob, "one-shot", clients=7, seed=0)
    assert len(calls) == 1 and res.extra["rejections"] == []          # one Cholesky, not one per client
    data = prob.client_data(7, 0)
    ref = pooled_ridge(torch.cat([a for a, _ in data]), torch.cat([y for _, y in data]), prob.options["sigma"])
    assert float((res.theta - ref).norm() / ref.norm()) < 1e-10


def test_an_inconsistent_client_is_still_rejected_by_name(monkeypatch):
    calls = []
    real = robust.pinv_quadratic_lower
    monkeypatch.setattr(robust, "pinv_quadratic_lower", lambda H, g: calls.append(1) or real(H, g))
    prob = _prob(d=6, n=40)

    def inflate(rnd, cid, msg):                       # client 3's gradient ×1000, its loss unchanged
        return {**msg, "g": msg["g"] * 1000.0} if cid == 3 else msg

    res = fs.solve(prob, "one-shot", clients=7, seed=0, message_hook=inflate)
    rej = res.extra["rejections"]
    assert [r["client"] for r in rej] == [3] and "inconsistent" in rej[0]["reason"]
    assert len(calls) == 1 + 7                        # the sum failed: then every message once
    data = [x for k, x in enumerate(prob.client_data(7, 0)) if k != 3]
    ref = pooled_ridge(torch.cat([a for a, _ in data]), torch.cat([y for _, y in data]), prob.options["sigma"])
    assert float((res.theta - ref).norm() / ref.norm()) < 1e-10


@pytest.mark.parametrize("bad", ["nan", "negdiag"])
def test_malformed_gram_messages_are_still_rejected(bad):
    prob = _prob(d=5, n=30)

    def hook(rnd, cid, msg):
        if cid != 2:
            return msg
        H = msg["H"].clone()
        H[0] = float("nan") if bad == "nan" else -1.0
        return {**msg, "H": H}

    res = fs.solve(prob, "one-shot", clients=4, seed=0, message_hook=hook)
    assert [r["client"] for r in res.extra["rejections"]] == [2]
