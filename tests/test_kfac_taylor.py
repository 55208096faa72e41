"""K-FAC for any PINN operator (fedsciml.core.kfac_taylor): Taylor-mode channels of a DomainPDE's parts — the exact
channel Jacobian, the Poisson form as a special case, the detected functionals, the preconditioned CG step against
the dense LM step, the unknowns' block, the refusal where a part has no channel form, and the automatic choice."""
import math

import pytest
import torch
from torch.func import vmap

from fedsciml.core import forms, kfac_forms as kf, kfac_pinn as kp, kfac_taylor as kt
from fedsciml.core.nn import MLP
from fedsciml.problems import DomainPDE, get_problem
from fedsciml.problems.conditions import Dirichlet, Periodic
from fedsciml.problems.geometry import Box

from _kfac_checks import assert_pcg_reaches_dense_lm_step

PI = math.pi


def setup(name, clients=1, **opts):
    pb = get_problem(name, **{"n_interior": 20, "n_boundary": 5, "hidden": [6, 5], **opts})
    objs = pb.client_objectives(clients, seed=0)
    theta = pb.init_params(0) + 0.2 * torch.randn(pb.n_params, dtype=torch.float64,
                                                  generator=torch.Generator().manual_seed(7))
    return pb, objs, theta


def forms_of(obj):
    return {p.name: kt.resolved(p.jet) for p in obj.parts}


def test_detected_forms_name_the_channels_each_part_reads():
    """Heat (u_t − k u_xx): order 2, one functional E_xx; Dirichlet / initial rows: the value only; Neumann: order
    1; Kovasznay's momentum equations read the Laplacian (exactly 1, 1: one channel), its continuity equation only
    first derivatives; heat-nd's interior (its one-pass forward residual) the spatial Laplacian."""
    f = forms_of(setup("heat")[1][0])
    assert f["pde"].order == 2 and torch.equal(f["pde"].functionals, torch.tensor([[[1.0, 0.0], [0.0, 0.0]]],
                                                                                  dtype=torch.float64))
    assert f["dirichlet:x-"].order == 0 and f["initial"].order == 0 and f["neumann:x+"].order == 1
    k = forms_of(setup("kovasznay")[1][0])
    eye = torch.eye(2, dtype=torch.float64).unsqueeze(0)
    assert torch.equal(k["pde0"].functionals, eye) and torch.equal(k["pde1"].functionals, eye)
    assert k["pde2"].order == 1 and k["pde2"].channels == 3
    h = forms_of(setup("heat-nd", dim=2)[1][0])
    assert h["pde"].channels == 5 and torch.equal(h["pde"].functionals[0], torch.diag(torch.tensor(
        [1.0, 1.0, 0.0], dtype=torch.float64)))


@pytest.mark.parametrize("name", ["heat", "kovasznay", "heat-inverse"])
def test_channel_gradients_times_inputs_are_each_rows_jacobian(name):
    """Σ_c g_{n,c} ã_{n,c}ᵀ = ∂r_n/∂[W | b] exactly for every part and layer (each use of W is a product W a_c):
    against the objective's own Jacobian (vmap of jacrev of the problem's residual, a different computation of
    the same numbers): 1e-10 relative."""
    pb, (obj,), theta = setup(name)
    net = pb.network()
    J = obj.jacobian(theta)
    off = 0
    for part in obj.parts:
        spec = kt.resolved(part.jet)
        aug, grads = kt.taylor_quantities(spec, theta, part.points, part.weight)
        rows = J[off:off + part.n_points]
        off += part.n_points
        for l, (w, b, fi, fo) in enumerate(net._layout):
            got = torch.einsum("nso,nsi->noi", grads[0][l], aug[l])
            ref = torch.cat([rows[:, w:w + fi * fo].reshape(-1, fo, fi), rows[:, b:b + fo].unsqueeze(-1)], -1)
            assert float((got - ref).abs().max()) <= 1e-10 * float(ref.abs().max()), (part.name, l)


def test_the_poisson_form_is_the_special_case():
    """The Poisson problem's Jets taken through the Taylor path (value, ∇, one Laplacian functional) give the
    Poisson-form factors of kfac_pinn: the same products summed in another order (1e-12 relative); and a
    DomainPDE whose equation reads the Laplacian, on the same network and points, gets the same factors from its
    detected form."""
    pb = get_problem("poisson", dim=3, n_interior=15, n_boundary=2)
    pb.__dict__["_net"] = MLP([3, 6, 5, 1])
    (obj,) = pb.client_objectives(1, seed=0)
    net = pb.network()
    theta = net.init(0) + 0.3 * torch.randn(net.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    ref = kp.part_factors(net, theta, obj.parts)
    got = kt.taylor_factors(net, theta, obj.parts)
    for (A1, B1), (A2, B2) in zip(ref.terms(), got.terms()):
        for a, b in zip(A1 + B1, A2 + B2):
            assert float((a - b).abs().max()) <= 1e-12 * float(b.abs().max())

    class Lap(DomainPDE):
        name = "t-lap"
        geometry = Box([0, 0, 0], [1, 1, 1])
        conditions = [Dirichlet("boundary", 0.0)]

        def equation(self, u, x):
            return -u.laplacian(x) - 1.0

    dp = Lap(hidden=[6, 5], n_interior=15)
    x = obj.parts[0].points
    spec = kt.resolved(dp.taylor_form(dp._parts(dp.init_params(0))[0][1], None, 0, x))
    assert torch.equal(spec.functionals, torch.eye(3, dtype=torch.float64).unsqueeze(0))
    part = type(obj.parts[0])("pde", None, x, 1.0, spec)
    A1, B1 = kp.part_factors(net, theta, obj.parts[:1]).terms()[0]
    A2, B2 = kt.taylor_factors(net, theta, [part]).terms()[0]
    for a, b in zip(A1 + B1, A2 + B2):
        assert float((a - b).abs().max()) <= 1e-12 * float(b.abs().max())


@pytest.mark.parametrize("name", ["heat", "kovasznay"])
def test_preconditioned_cg_converges_to_the_dense_lm_step(name):
    """A preconditioner changes CG's iterations, not its answer: K-FAC-preconditioned CG to rtol 1e-10 on
    (JᵀJ + μI)δ = −Jᵀr reaches the dense solve's δ within cond(JᵀJ + μI)·rtol (the stopping rule bounds the
    true residual; asserted with a factor 10 for the recurrence's drift)."""
    pb, (obj,), theta = setup(name)
    f = kf.factors_of(obj, theta)
    assert isinstance(f, kt.TaylorFactors)
    assert_pcg_reaches_dense_lm_step(obj, theta, f)


def test_unknowns_get_their_exact_gauss_newton_block():
    """heat-inverse's unknown k: the factors' extra block is Σ ∂r/∂k ∂r/∂kᵀ, the Jacobian's last column's Gram
    (1e-12), sent after the layers' factors, and the damped inverse solves it exactly there."""
    pb, (obj,), theta = setup("heat-inverse")
    f = kf.factors_of(obj, theta)
    J = obj.jacobian(theta)
    p = pb.network().n_params
    E = J[:, p:].T @ J[:, p:]
    assert f.n_extra == 1 and float((f.extra - E).abs().max()) <= 1e-12 * float(E.abs().max())
    flat = f.pack()
    back = kt.TaylorFactors.unpack(pb.network(), flat, 1)
    assert torch.equal(back.pack(), flat) and flat.numel() == kt.TaylorFactors.size_of(pb.network(), 1)
    v = torch.randn(theta.numel(), dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    out = f.inverse(0.5)(v)
    assert float((out[p:] - torch.linalg.solve(E + 0.5 * torch.eye(1, dtype=E.dtype), v[p:])).abs().max()) < 1e-14


class PeriodicX(DomainPDE):
    name = "t-periodic-kfac"
    geometry = Box([0, 0], [2, 1])
    hidden = (6,)
    conditions = [Periodic("x"), Dirichlet("y-", 0.0), Dirichlet("y+", 0.0)]

    def equation(self, u, x):
        return -u.laplacian(x) - 2 * PI ** 2 * torch.sin(PI * x[0]) * torch.sin(PI * x[1])


def test_a_part_outside_the_channel_form_is_refused_by_name_and_auto_stays_dense(monkeypatch):
    """A periodic condition reads u at two points: no channel form (its residual differs from the form's at the
    check), so precond kfac is refused naming the part, and auto keeps the flop model's choice."""
    from fedsciml.methods.centralized import run_centralized

    pb = PeriodicX(n_interior=20, n_boundary=4)
    objs = pb.client_objectives(1, seed=0)
    assert forms_of(objs[0])["periodic:x:value"] is None and not kf.has_jets(objs)
    th0 = pb.init_params(0)
    with pytest.raises(ValueError, match="problem 't-periodic-kfac': residual part 'periodic:x"):
        run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=1, lm_solve="matfree", precond="kfac")
    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", 1)
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    _, _, info = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=1)
    assert info["lm_solve"] != "matfree" and info["lm_solve_reason"].endswith(
        "residuals not in a channel form K-FAC can use")


def test_the_form_is_found_only_where_kfac_is_considered():
    """Finding a part's form costs forward passes: below the K-FAC regime's size the automatic choice never asks."""
    asked = []
    c = forms.choose_lm_solve(500, 2_000, jets=lambda: asked.append(1) or True, device="cpu")
    assert not asked and "K-FAC" not in c.reason
    big = forms.choose_lm_solve(8_000, 40_901, jets=lambda: asked.append(1) or True, device="cpu", free=24 * 2 ** 30)
    assert asked == [1] and (big.form, big.precond, big.cg_iters) == ("matfree", "kfac", forms.KFAC_CG_ITERS)


@pytest.mark.parametrize("name,opts", [("heat-nd", {"dim": 1}), ("kovasznay", {})])
def test_heat_and_domain_pdes_take_the_kfac_regime_where_a_dense_step_is_dear(monkeypatch, name, opts):
    """With the regime's thresholds lowered to this small case, centralized auto runs matrix-free K-FAC CG capped at
    10 and records why; federated gn (matrix-free, K-FAC factors with Jᵀr) takes the same iterates to 1e-9."""
    from fedsciml.methods import METHODS
    from fedsciml.methods.centralized import run_centralized

    monkeypatch.setattr(forms, "KFAC_MIN_PARAMS", 1)
    monkeypatch.setattr(forms, "KFAC_MIN_RATIO", 0.0)
    pb = get_problem(name, n_interior=20, n_boundary=5, hidden=[6, 5], **opts)
    objs = pb.client_objectives(2, seed=0)
    th0 = pb.init_params(0)
    th_c, rows_c, info = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=3)
    assert (info["lm_solve"], info["precond"], info["cg_cap"]) == ("matfree", "kfac", forms.KFAC_CG_ITERS)
    assert "K-FAC's channel form" in info["lm_solve_reason"]
    th_f, rows_f, info_f = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=3)
    assert info_f["strategy"]["precond"] == "kfac"
    assert [r.get("accepted") for r in rows_f] == [r.get("accepted") for r in rows_c]
    assert float((th_f - th_c).norm() / th_c.norm()) < 1e-9


def test_functional_basis_reads_the_span_with_unit_pivots():
    """Gradients ∝ (1, 0, 1) (a 2-d Laplacian, scaled differently per row) give one functional, the identity;
    rows spanning E_xx and E_yy give those two; zero rows give none."""
    G = torch.tensor([[2.0, 0.0, 2.0], [-0.5, 0.0, -0.5]], dtype=torch.float64)
    assert torch.equal(kt.functional_basis(G, 2), torch.eye(2, dtype=torch.float64).unsqueeze(0))
    G = torch.tensor([[1.0, 0.0, 3.0], [2.0, 0.0, -1.0]], dtype=torch.float64)
    F = kt.functional_basis(G, 2)
    assert F.shape == (2, 2, 2) and torch.allclose(F[0], torch.diag(torch.tensor([1.0, 0.0], dtype=torch.float64)),
                                                   atol=1e-15)
    assert kt.functional_basis(torch.zeros(3, 3, dtype=torch.float64), 2).shape == (0, 2, 2)
    with pytest.raises(ValueError, match="order"):
        kt.Taylor(MLP([2, 3, 1]), lambda *a: a[0], 3)
    with pytest.raises(ValueError, match="functionals"):
        kt.Taylor(MLP([2, 3, 1]), lambda *a: a[0], 2, torch.zeros(1, 3, 3, dtype=torch.float64))
    # the residual the form reproduces is the part's own (what the detection checks)
    pb, (obj,), theta = setup("burgers")
    for part in obj.parts:
        spec = kt.resolved(part.jet)
        ref = vmap(part.fn, in_dims=(None, 0))(theta, part.points).reshape(part.n_points, -1)
        got = kt.taylor_residual(spec, theta, part.points)
        assert float((got - ref).abs().max()) <= 1e-12 * (1 + float(ref.abs().max()))


def test_the_damped_kfac_step_federated_in_one_exchange_per_trial():
    """cg_iters=0: no CG, the step is −P⁻¹g (P the damped K-FAC matrix), judged by LM's gain ratio on the K-FAC
    model.  Federated gn takes centralized LM's iterates (the summed factors are the pooled ones up to summation
    order: 1e-12) in one exchange per trial, each client sending Jᵀr, its loss and its factors; without K-FAC it is
    refused in one line."""
    from fedsciml.methods import METHODS
    from fedsciml.methods.centralized import run_centralized

    pb = get_problem("heat", n_interior=20, n_boundary=5, hidden=[6, 5])
    objs = pb.client_objectives(3, seed=0)
    th0 = pb.init_params(0)
    th_c, rows_c, info_c = run_centralized(pb, objs, th0, pb.evaluate, optimizer="lm", max_iters=6,
                                           lm_solve="matfree", precond="kfac", cg_iters=0)
    th_f, rows_f, info_f = METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=6, form="matfree", precond="kfac",
                                         cg_iters=0)
    assert info_c["cg_iters"] == 0 and any(r.get("accepted") for r in rows_c[1:])
    assert [r.get("accepted") for r in rows_f] == [r.get("accepted") for r in rows_c]
    assert float((th_f - th_c).norm() / th_c.norm()) < 1e-12
    p, k, K = th0.numel(), kt.TaylorFactors.size_of(pb.network()), 3
    assert all(r["exchanges"] == 1 for r in rows_f[1:])  # one exchange per trial, accepted or not
    per_round = rows_f[2]["floats_sent"] - rows_f[1]["floats_sent"]
    assert per_round == K * (p + 2 + k) + K * p  # Jᵀr, loss, count and the factors up; the trial down
    with pytest.raises(ValueError, match="cg_iters=0 .* needs precond kfac"):
        METHODS["gn"](pb, objs, th0, pb.evaluate, rounds=1, form="matfree", precond="nystrom", cg_iters=0)
