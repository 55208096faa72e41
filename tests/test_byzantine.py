"""Message validation (dtype, finiteness, PSD curvature, losses, counts) and byzantine clients:
count enrollment, overflow-free weights, robust aggregation (median, trimmed mean, norm bound)
and the loss-consistency checks of gn and FIPA."""
import math

import pytest
import torch

from fedsciml.core import linalg
import fedsciml.methods  # noqa: F401  (registers the methods)
from fedsciml.runtime import robust
from fedsciml.methods.aggregators import Aggregator, FedAvgAggregator, FIPAAggregator
from fedsciml.methods.local import LocalConfig, local_update
from fedsciml.methods.fipa import fipa_ask
from fedsciml.runtime.client import Client
from fedsciml.methods.gn import GNAggregator
from fedsciml.core.schema import MAX_COUNT, psd_violation
from fedsciml.runtime.loop import RoundFailed
from fedsciml.core.nn import MLP
from fedsciml.core.objective import PointwiseLeastSquares, ResidualPart
from fedsciml.methods import METHODS

D64 = torch.float64
NET = MLP([1, 6, 6, 1])  # p = 61
P = NET.n_params
THETA0 = NET.init(0)


def _fit(theta, point):
    x, y = point
    return NET(theta, x) - y


def make_clients(K=5, n=20, seed=0):
    """Heterogeneous clients: client m owns the m-th interval of [0, 1] (fit sin 2πx)."""
    gen = torch.Generator().manual_seed(seed)
    objs = []
    for m in range(K):
        x = (m + torch.rand(n, 1, generator=gen, dtype=D64)) / K
        objs.append(PointwiseLeastSquares([ResidualPart("data", _fit, (x, torch.sin(2 * math.pi * x[:, 0])))], P))
    return objs


def evaluate(theta):
    x = torch.linspace(0, 1, 101, dtype=D64).reshape(-1, 1)
    return {"mse": float(((NET(theta, x) - torch.sin(2 * math.pi * x[:, 0])) ** 2).mean())}


def run(method, objs=None, **opts):
    return METHODS[method](None, objs if objs is not None else make_clients(), THETA0, evaluate, **opts)


def hook_for(cid, change, after=0):
    def hook(rnd, c, msg):
        return change(dict(msg)) if c == cid and rnd >= after else msg
    return hook


def _reasons(info):
    return [r["reason"] for r in info["rejections"]]


# --- item 5: dtype, finiteness, PSD curvature, losses ----------------------------------------


def _msgs(kind):
    """One honest message of each kind at θ₀ from client 0 of make_clients(3)."""
    c = Client(0, make_clients(3)[0])
    if kind == "fedavg":
        return FedAvgAggregator(), local_update(c, THETA0, LocalConfig("adam", 2))[0]
    if kind == "fipa-lowrank":
        return (FIPAAggregator("lowrank", "qr", consistency=True),
                local_update(c, THETA0, LocalConfig("gn", damping=0.0), ask=fipa_ask("lowrank", rank=4), report_loss=True)[0])
    if kind == "fipa-full":
        return (FIPAAggregator("full", "pinv", consistency=True),
                local_update(c, THETA0, LocalConfig("gn", damping=0.0), ask=fipa_ask("full"), report_loss=True)[0])
    if kind == "gn":
        return GNAggregator(True, "normal"), c.gn_message(THETA0, "normal")
    return GNAggregator(True, "sqrt"), c.gn_message(THETA0, "sqrt")


KINDS = ["fedavg", "fipa-lowrank", "fipa-full", "gn", "gn-sqrt"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex128, torch.float32])
def test_every_field_must_have_the_servers_real_floating_dtype(kind, dtype):
    agg, msg = _msgs(kind)
    ok, bad = agg.validate({0: msg}, P, D64)
    assert list(ok) == [0], bad  # the honest message passes every check
    for name in msg:
        wrong = {**msg, name: msg[name].to(dtype)}
        ok, bad = agg.validate({0: wrong}, P, D64)
        assert not ok and f"field {name!r} has dtype {dtype}" in bad[0]


@pytest.mark.parametrize("kind", KINDS)
def test_a_field_requiring_grad_is_rejected(kind):
    agg, msg = _msgs(kind)
    name = next(iter(msg))
    ok, bad = agg.validate({0: {**msg, name: msg[name].clone().requires_grad_(True)}}, P, D64)
    assert not ok and f"field {name!r} requires grad" in bad[0]


def test_fipa_with_an_integer_message_rejects_it_instead_of_crashing():
    th, rows, info = run("fipa", make_clients(3), rounds=2, rank=4,
                         message_hook=hook_for(1, lambda m: {**m, "delta": m["delta"].to(torch.int64)}))
    assert rows[-1]["rejected"] == 1 and "field 'delta' has dtype torch.int64" in _reasons(info)[0]


def test_ridge_rejects_a_complex_message_by_dtype():
    from fedsciml.core.stats import FusionServer, client_message

    A = torch.randn(10, 3, dtype=D64, generator=torch.Generator().manual_seed(0))
    msg = client_message(A, A.sum(1))
    bad = {**msg, "h": torch.full((3,), complex(float("nan"), 1.0), dtype=torch.complex128)}
    server = FusionServer(3)
    ok, rej = server.receive_all({0: msg, 1: bad})
    assert ok == [0] and "field 'h' has dtype torch.complex128" in rej[1]


def test_packed_psd_checks_accept_grams_and_reject_negative_diagonals_and_inflated_entries():
    J = torch.randn(7, 5, dtype=D64, generator=torch.Generator().manual_seed(1))
    J[:, 4] = 3.0 * J[:, 0]  # parallel columns: |H_04| = √(H_00 H_44) holds with equality
    H = J.T @ J
    assert psd_violation(linalg.pack_upper(H), "packed") is None
    assert psd_violation(linalg.pack_upper(H).float(), "packed") is None
    neg = H.clone()
    neg[2, 2] = -1e-3
    assert "negative diagonal" in psd_violation(linalg.pack_upper(neg), "packed")
    off = H.clone()
    off[1, 3] = off[3, 1] = 1.01 * float((H[1, 1] * H[3, 3]).sqrt())
    assert "|H_ij| > √(H_ii·H_jj)" in psd_violation(linalg.pack_upper(off), "packed")
    assert "triangle" in psd_violation(torch.ones(8, dtype=D64), "packed")
    # square form: symmetric stacks of factors; asymmetry is named
    stack = torch.stack([H, 2 * H])
    assert psd_violation(stack, "square") is None
    asym = H.clone()
    asym[0, 1] += 0.5 * float(H[0, 0].sqrt() * H[1, 1].sqrt())
    assert "not symmetric" in psd_violation(asym, "square")


@pytest.mark.parametrize("kind,field,change,needle", [
    ("fipa-lowrank", "lam", lambda t: t - 2 * t.max(), "field 'lam' has negative entries"),
    ("fipa-lowrank", "U", lambda t: 3 * t, "field 'U' has columns of norm 3"),
    ("fipa-full", "H", lambda t: -t, "field 'H' has a negative diagonal"),
    ("gn", "H", lambda t: -t, "field 'H' has a negative diagonal"),
    ("gn", "loss", lambda t: -t, "field 'loss' has negative entries"),
    ("fipa-lowrank", "loss", lambda t: -t, "field 'loss' has negative entries"),
    ("fedavg", "n", lambda t: t * 1e300, "field 'n' must be a whole number > 0 and ≤ 2^53"),
    ("fedavg", "n", lambda t: t + 0.5, "field 'n' must be a whole number > 0 and ≤ 2^53"),
    ("fedavg", "n", lambda t: t * 1e15, "field 'n' must be a whole number > 0 and ≤ 2^53"),
    ("fedavg", "delta", lambda t: t * float("nan"), "field 'delta' contains non-finite values"),
])
def test_non_psd_curvature_negative_losses_and_bad_counts_are_rejected_by_name(kind, field, change, needle):
    agg, msg = _msgs(kind)
    ok, bad = agg.validate({0: {**msg, field: change(msg[field])}}, P, D64)
    assert not ok and needle in bad[0], bad


def test_gn_rejects_an_indefinite_curvature_that_passes_the_entrywise_checks():
    agg, msg = _msgs("gn")
    H = linalg.unpack_upper(msg["H"], P)
    lam, V = torch.linalg.eigh(H)
    v = V[:, -1]
    bad_H = H - 2 * lam[-1] * torch.outer(v, v)  # largest eigenvalue flipped: indefinite
    ok, bad = agg.validate({0: {**msg, "H": linalg.pack_upper(bad_H)}}, P, D64)
    assert not ok and ("not positive semidefinite" in bad[0] or "negative diagonal" in bad[0]
                       or "|H_ij|" in bad[0])


def test_ridge_exact_statistics_must_be_psd_but_noisy_dp_statistics_need_not_be():
    from fedsciml.core import dp
    from fedsciml.core.stats import FusionServer, client_message

    A = torch.randn(4, 3, dtype=D64, generator=torch.Generator().manual_seed(0))
    msg = client_message(A, A.sum(1))
    H = linalg.unpack_upper(msg["G"], 3)
    H[0, 0] = -1.0
    server = FusionServer(3)
    ok, rej = server.receive_all({0: {**msg, "G": linalg.pack_upper(H)}})
    assert not ok and "field 'G' has a negative diagonal" in rej[0]
    noisy = dp.privatize(msg, 50.0, torch.Generator().manual_seed(0))  # no count: a DP message
    assert float(noisy["G"].min()) < 0
    ok, rej = FusionServer(3).receive_all({0: noisy})
    assert ok == [0] and not rej


def test_image_curvature_factors_are_checked():
    from fedsciml.images import fisher as fz
    from fedsciml.images.aggregators import FedFisherAggregator, RegMeanAggregator
    from fedsciml.images.models import FlatModel, build

    torch.manual_seed(0)
    m = FlatModel(build("linear", (1, 3, 3), 4, 0))
    w, x = m.theta(), torch.randn(20, 1, 3, 3)
    tmpl = fz.kfac(m, w, x)
    n = torch.tensor([20.0])
    agg = FedFisherAggregator("kfac", tmpl)
    good = {"w": w, **tmpl.to_message(), "n": n}
    grams = fz.layer_grams(m, w, x)[0]
    reg = RegMeanAggregator(tmpl)
    assert list(agg.validate({0: good}, m.p, torch.float32)[0]) == [0]
    assert list(reg.validate({0: {"w": w, "gram0": grams[0], "n": n}}, m.p, torch.float32)[0]) == [0]
    A0 = good["A0"].clone()
    A0[0, 0] = -1.0
    ok, bad = agg.validate({0: {**good, "A0": A0}}, m.p, torch.float32)
    assert not ok and "field 'A0' has a negative diagonal" in bad[0]
    G = grams[0].clone()
    G[0, 1] += 10 * float(G.diagonal().max())
    ok, bad = reg.validate({0: {"w": w, "gram0": G, "n": n}}, m.p, torch.float32)
    assert not ok and "field 'gram0'" in bad[0]


def test_fipa_client_reporting_negative_losses_is_rejected_every_round():
    th, rows, info = run("fipa", make_clients(3), rounds=4, rank=4,
                         message_hook=hook_for(2, lambda m: {**m, "loss": -m["loss"]} if "loss" in m else m))
    assert len(info["rejections"]) >= 4 and all("field 'loss' has negative entries" in r for r in _reasons(info))


# --- item 13: counts, weights, robust rules, consistency ---------------------------------------


def test_sample_counts_are_fixed_at_enrollment():
    th, rows, info = run("fedavg", rounds=4, local_steps=2,
                         message_hook=hook_for(1, lambda m: {**m, "n": m["n"] * 1e6}, after=3))
    reasons = _reasons(info)
    assert [r["round"] for r in info["rejections"]] == [3, 4]
    assert "claims 20000000 samples, but the client enrolled with 20 " in reasons[0]
    # honest clients keep sending their enrolled count: never rejected, and the enrollment is remembered
    agg = FedAvgAggregator()
    msg = {"delta": torch.zeros(P, dtype=D64), "n": torch.tensor([20.0], dtype=D64)}
    assert list(agg.validate({0: msg}, P, D64)[0]) == [0] and agg.enrolled == {0: 20.0}
    assert list(agg.validate({0: msg}, P, D64)[0]) == [0]


def test_enrollment_is_kept_across_resume(tmp_path):
    objs = make_clients(3)
    d = str(tmp_path / "ck")
    run("fedavg", objs, rounds=2, local_steps=2, checkpoint=d)
    _, _, info = run("fedavg", objs, rounds=3, local_steps=2, checkpoint=d, resume=True,
                     message_hook=hook_for(0, lambda m: {**m, "n": m["n"] + 1}))
    assert info["resumed"] and "enrolled with 20" in _reasons(info)[0]


def test_weights_cannot_overflow():
    # two counts of 1e308: the plain sum is inf and both weights would be 0 (a silent zero update)
    w = robust.sample_weights({0: 1e308, 1: 1e308, 2: 1.0})
    assert w[0] == w[1] == pytest.approx(0.5) and 0 < w[2] < 1e-300 or w[2] == 0.0
    msgs = {c: {"delta": torch.full((3,), float(c + 1), dtype=D64), "n": torch.tensor([1e308], dtype=D64)}
            for c in range(2)}
    assert Aggregator.sample_weights(msgs) == {0: 0.5, 1: 0.5}
    out = FedAvgAggregator().aggregate(torch.zeros(3, dtype=D64), msgs)
    assert torch.allclose(out, torch.full((3,), 1.5, dtype=D64))
    # and the schema never lets such counts through: K counts ≤ 2^53 sum to a finite number
    ok, bad = FedAvgAggregator().validate(msgs, 3, D64)
    assert not ok and all("≤ 2^53" in r for r in bad.values()) and MAX_COUNT == 2.0 ** 53


def test_gn_sums_counts_of_two_huge_but_valid_claims_without_overflow():
    th, rows, info = run("gn", make_clients(3), rounds=2,
                         message_hook=lambda r, c, m: {**m, "n": torch.full_like(m["n"], MAX_COUNT)})
    assert info["rounds"] == 2 and not info["rejections"]


def test_robust_rules_on_known_vectors():
    D = torch.tensor([[1.0, -5.0], [2.0, 0.0], [3.0, 5.0], [1e6, 1e6]], dtype=D64)
    assert torch.equal(robust.coordinate_median(D), torch.tensor([2.5, 2.5], dtype=D64))
    assert torch.equal(robust.coordinate_median(D[:3]), torch.tensor([2.0, 0.0], dtype=D64))
    assert torch.allclose(robust.trimmed_mean(D, 0.25), torch.tensor([2.5, 2.5], dtype=D64))
    assert torch.allclose(robust.trimmed_mean(D, 0.0), D.mean(0))
    C = robust.clip_rows(D, 2.0)
    assert torch.allclose(C[0], D[0] * 2 / D[0].norm()) and torch.equal(C[1], D[1])
    assert torch.allclose(robust.row_norms(torch.tensor([[1e300, 1e300]], dtype=D64)),
                          torch.tensor([math.sqrt(2) * 1e300], dtype=D64), rtol=1e-15)
    with pytest.raises(ValueError, match="robust rule"):
        FedAvgAggregator(robust="mode")
    with pytest.raises(ValueError, match="trim"):
        FedAvgAggregator(robust="trimmed", trim=0.5)
    with pytest.raises(ValueError, match="clip_norm"):
        FIPAAggregator(clip_norm=0.0)


def test_one_client_times_1e6_is_contained_by_median_trimmed_mean_and_norm_bound():
    objs = make_clients(5)
    opts = {"rounds": 8, "local_steps": 10, "lr": 2e-2}
    attack = hook_for(0, lambda m: {**m, "delta": m["delta"] * 1e6})
    honest = run("fedavg", objs, **opts)[1][-1]["mse"]
    # the default outlier screen is turned off here so that each robust rule is tested on its own
    wrecked = run("fedavg", objs, message_hook=attack, outlier_ratio=float("inf"), **opts)[1][-1]["mse"]
    assert wrecked > 1e6 * honest
    for rule in ({"robust": "median"}, {"robust": "trimmed", "trim": 0.2}, {"clip_norm": 0.5}):
        mse = run("fedavg", objs, message_hook=attack, outlier_ratio=float("inf"), **opts, **rule)[1][-1]["mse"]
        assert mse < 3 * honest, (rule, mse, honest)
    th, _, info = run("fedprox", objs, message_hook=attack, robust="median", rounds=1, local_steps=2)
    assert info["strategy"]["robust"] == "median" and evaluate(th)["mse"] < 10  # the ×1e6 update is not applied


def test_default_options_leave_fedavg_and_fipa_bitwise_unchanged():
    """Bitwise: robust='mean' without a norm bound runs the same operations in the same order."""
    objs = make_clients(3)
    a = run("fedavg", objs, rounds=2, local_steps=3)[0]
    b = run("fedavg", objs, rounds=2, local_steps=3, robust="mean", clip_norm=None)[0]
    assert torch.equal(a, b)
    agg, msg = _msgs("fipa-lowrank")
    plain = FIPAAggregator("lowrank", "qr").aggregate(THETA0, {0: msg})
    assert torch.equal(plain, FIPAAggregator("lowrank", "qr", robust="mean").aggregate(THETA0, {0: msg}))


def test_fipa_robust_rules_combine_the_curvature_weighted_updates():
    objs = make_clients(3)
    msgs = {c: local_update(Client(c, o), THETA0, LocalConfig("gn", damping=0.0), ask=fipa_ask("full"))[0]
            for c, o in enumerate(objs)}
    Hs = [linalg.unpack_upper(m["H"], P) for m in msgs.values()]
    B = torch.stack([H @ m["delta"] for H, m in zip(Hs, msgs.values())])
    want = THETA0 + linalg.pinv_solve(sum(Hs), 3 * robust.coordinate_median(B))
    got = FIPAAggregator("full", "pinv", robust="median").aggregate(THETA0, msgs)
    assert torch.allclose(got, want, rtol=1e-10, atol=1e-12)
    # a norm bound larger than every update changes nothing; a small one bounds each client's delta
    big = FIPAAggregator("full", "pinv", clip_norm=1e12).aggregate(THETA0, msgs)
    assert torch.allclose(big, FIPAAggregator("full", "pinv").aggregate(THETA0, msgs), rtol=0, atol=1e-12)
    C = 1e-3
    clipped = {c: {**m, "delta": robust.clip_rows(m["delta"][None], C)[0]} for c, m in msgs.items()}
    # not bitwise: the aggregator clips the stacked rows, the reference one row at a time (norms reduced in another
    # order, 1 ulp apart on some CPUs), and the pseudo-inverse of the ill-conditioned ΣH_m amplifies that
    assert torch.allclose(FIPAAggregator("full", "pinv", clip_norm=C).aggregate(THETA0, msgs),
                          FIPAAggregator("full", "pinv").aggregate(THETA0, clipped), rtol=1e-7, atol=1e-8)


def test_pinv_quadratic_lower_bound_against_the_pseudo_inverse():
    gen = torch.Generator().manual_seed(3)
    for n, p in ((5, 12), (30, 12)):
        J = torch.randn(n, p, dtype=D64, generator=gen)
        r = torch.randn(n, dtype=D64, generator=gen)
        H, g = J.T @ J, J.T @ r
        exact = float(g @ torch.linalg.pinv(H, hermitian=True) @ g)
        low = robust.pinv_quadratic_lower(H, g)
        assert low <= exact * (1 + 1e-10) and low == pytest.approx(exact, rel=1e-6)
        assert exact <= float(r @ r) * (1 + 1e-12)  # ‖P_J r‖² ≤ ‖r‖²
    indefinite = torch.tensor([[1.0, 2.0], [2.0, 1.0]], dtype=D64)  # eigenvalues 3 and −1, diagonal > 0
    assert robust.pinv_quadratic_lower(indefinite, torch.ones(2, dtype=D64)) is None


@pytest.mark.parametrize("form,field", [("normal", "g"), ("sqrt", "s")])
def test_gn_rejects_statistics_inconsistent_with_the_loss_and_retries_then_fails_clearly(form, field):
    objs = make_clients(3, n=10 if form == "sqrt" else 20)
    honest, _, info0 = run("gn", objs, rounds=3, form=form)
    assert not info0["rejections"]
    # a lie on the first attempt only: rejected, asked again (like a dropped client), same iterates
    state = {"lied": 0}

    def once(rnd, cid, msg):
        if cid == 1 and field in msg and not state["lied"]:
            state["lied"] += 1
            return {**msg, field: msg[field] * 3.0}
        return msg
    th, _, info = run("gn", objs, rounds=3, form=form, message_hook=once)
    assert info["retried_requests"] == 1 and "statistics inconsistent with the reported loss" in _reasons(info)[0]
    assert torch.allclose(th, honest, rtol=1e-12, atol=1e-12)
    # a persistent liar: the round stops with RoundFailed after max_retries, not a hang
    with pytest.raises(RoundFailed, match=r"clients \[1\] never answered validly in 3 attempts.*inconsistent"):
        run("gn", objs, rounds=3, form=form, max_retries=2,
            message_hook=hook_for(1, lambda m: {**m, field: m[field] * 3.0} if field in m else m))


def test_honest_gn_and_fipa_runs_reject_nothing():
    objs = make_clients(3)
    for method, opts in (("gn", {"form": "normal"}), ("fipa", {"rank": 0}), ("fipa", {"rank": 4}),
                         ("fipa", {"rank": 4, "local_damping": 1e-3})):
        _, rows, info = run(method, objs, rounds=5, **opts)
        assert not info["rejections"], (method, opts, info["rejections"][:1])


def test_fipa_rejects_an_inflated_local_step_or_curvature():
    objs = make_clients(3)
    for change in (lambda m: {**m, "delta": 10 * m["delta"]} if "delta" in m else m,
                   lambda m: {**m, "lam": 10 * m["lam"]} if "lam" in m else m):
        _, _, info = run("fipa", objs, rounds=2, rank=4, message_hook=hook_for(0, change))
        assert info["rejections"] and all("Δθᵀ Ĥ Δθ" in r for r in _reasons(info))
    # local Adam steps are not bounded by the loss: no consistency check, nothing rejected
    _, _, info = run("fipa", objs, rounds=2, rank=4, local="adam", local_steps=3, safeguard=True)
    assert not info["rejections"]


def test_image_fedavg_takes_the_robust_options():
    from fedsciml.images import data as D
    from fedsciml.images import methods as M

    fed = D.federate(D.load("digits"), 5, 100.0, seed=0)  # near-iid: the median is not biased by heterogeneity
    gen = torch.Generator().manual_seed(0)
    attack = hook_for(0, lambda m: {**m, "delta": 1e3 * torch.randn(m["delta"].shape, generator=gen)}
                      if "delta" in m else m)  # large finite noise
    acc = {}
    for name, cfg, hook in (("honest", M.TrainConfig(epochs=1), None),
                            ("mean", M.TrainConfig(epochs=1), attack),
                            ("median", M.TrainConfig(epochs=1, robust="median"), attack),
                            ("clip", M.TrainConfig(epochs=1, clip_norm=1.0), attack)):
        acc[name] = M.run_rounds(fed, "linear", ["fedavg"], 0, cfg, rounds=3, message_hook=hook)["fedavg"].accuracy
    assert acc["honest"] > 0.3 and acc["mean"] < acc["honest"] - 0.2  # the ×1e6 client wrecks the plain average
    assert acc["median"] > acc["honest"] - 0.1 and acc["clip"] > acc["honest"] - 0.15, acc


def test_default_outlier_screen_rejects_a_grossly_inflated_update_and_leaves_honest_runs_unchanged():
    """FedAvg's default screen (outlier_ratio 1e3): an update ×1e6 is rejected by name; honest runs are the
    same numbers as with the screen off (bitwise: no update is screened, so the same sums run in the same order)."""
    import fedsciml as fs

    kw = dict(method="fedavg", clients=4, rounds=3, local_steps=3)

    def hook(rnd, cid, msg):
        return {**msg, "delta": msg["delta"] * 1e6} if cid == 1 else msg

    honest = fs.solve("sin1d", **kw)
    off = fs.solve("sin1d", outlier_ratio=float("inf"), **kw)
    assert [r["loss"] for r in honest.history] == [r["loss"] for r in off.history]
    bad = fs.solve("sin1d", message_hook=hook, **kw)
    reasons = [r["reason"] for r in bad.extra["rejections"]]
    assert len(reasons) == 3 and all("screened as an outlier" in r for r in reasons)
    assert bad.final["mse"] < 2 * honest.final["mse"] + 1e-3  # the three honest clients carry on
    wrecked = fs.solve("sin1d", message_hook=hook, outlier_ratio=float("inf"), **kw)
    assert wrecked.final["mse"] > 1e3 * honest.final["mse"]  # what the screen prevents


def test_fedavg_sgd_takes_fedavgs_robust_rule_against_a_scaling_client():
    """The ridge baselines' fedavg-sgd has FedAvg's byzantine defence (issue 31): one client sending its update
    ×1e6 ruins the mean; the coordinate-wise median keeps the run near the honest one (5 clients, 1 attacker)."""
    import fedsciml as fs

    def attack(rnd, c, msg):
        return {**msg, "delta": msg["delta"] * 1e6} if c == 0 and "delta" in msg else msg

    popts = {"dim": 5, "n_samples": 40}
    honest = fs.solve("ridge-linear", "fedavg-sgd", clients=5, rounds=5, problem_options=popts)
    mean = fs.solve("ridge-linear", "fedavg-sgd", clients=5, rounds=5, problem_options=popts, message_hook=attack)
    median = fs.solve("ridge-linear", "fedavg-sgd", clients=5, rounds=5, problem_options=popts, message_hook=attack,
                      robust="median")
    assert mean.final["mse"] > 1e3 * honest.final["mse"]
    assert median.final["mse"] < 2 * honest.final["mse"]
