"""The published FIPA (``preset="paper"``): its settings are applied, explicit options win, and it converges."""
import pytest
import torch

from fedsciml.cli import main
from fedsciml.methods.local import LocalConfig, adam_delta
from fedsciml.runtime.client import Client
from fedsciml.methods.fipa import PAPER_PRESET
from fedsciml.problems import get_problem
from fedsciml.api import solve

SMALL = {"variant": "manufactured", "n_interior": 40, "n_boundary": 20}


def test_paper_preset_settings_are_applied_and_the_error_falls():
    pb = get_problem("bratu", **SMALL)
    r = solve(pb, method="fipa", clients=2, seed=0, rounds=4, preset="paper")
    o = r.options  # the configuration as it ran, the preset filled in
    for k in ("local", "lr", "local_steps", "local_loss", "rank", "merge", "beta", "gamma", "pinv_rtol", "safeguard"):
        assert o[k] == PAPER_PRESET[k], k
    assert o["preset"] == "paper" and "rejected_steps" not in r.extra  # no safeguard ran
    err = [row["rel_l2"] for row in r.history]
    assert all(b < a for a, b in zip(err, err[1:])), err  # falls every round, as the authors' runs do
    assert err[-1] < 0.5 * err[0]


def test_explicit_options_override_the_preset_and_bad_presets_are_refused():
    pb = get_problem("bratu", **SMALL)
    r = solve(pb, method="fipa", clients=2, seed=0, rounds=1, preset="paper", gamma=0.5, local_steps=3)
    o = r.options  # the configuration as it ran, the preset filled in
    assert o["gamma"] == 0.5 and o["local_steps"] == 3 and o["pinv_rtol"] == 1e-5
    with pytest.raises(ValueError, match="preset"):
        solve(pb, method="fipa", clients=2, rounds=1, preset="papr")
    with pytest.raises(ValueError, match="pinv_rtol"):
        solve(pb, method="fipa", clients=2, rounds=1, pinv_rtol=2.0)


def test_parts_loss_is_the_reference_codes_per_part_mean():
    """``loss='parts'``: Adam on mean(r_int²) + β·mean(r_bc²); one Adam step from θ moves by −lr·sign(∇) (exact)."""
    pb = get_problem("bratu", **SMALL)
    obj = pb.client_objectives(2, seed=0)[0]
    th = pb.init_params(0)
    x = th.clone().requires_grad_(True)
    ri, rb = obj.part_residuals(x)
    assert ri.numel() == 20 and rb.numel() == 20  # 40 points in total, 20 per client; x = 0 repeated 20 times
    assert torch.equal(torch.cat([ri, rb]).detach(), obj.residual(th))
    loss = (ri ** 2).mean() + (rb ** 2).mean()  # rb already carries √β
    (g,) = torch.autograd.grad(loss, x)
    d = adam_delta(Client(0, obj), th, LocalConfig(solver="adam", steps=1, lr=1e-4, loss="parts"))
    torch.testing.assert_close(d, -1e-4 * g / (g.abs() + 1e-8), rtol=1e-6, atol=1e-12)
    with pytest.raises(ValueError, match="local loss must be one of mean, parts"):
        LocalConfig(loss="sum").validate()


def test_cli_preset_paper_uses_the_reference_collocation_settings(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["solve", "bratu", "--variant", "manufactured", "--clients", "2", "--method", "fipa", "--preset",
                 "paper", "--rounds", "1", "--local-steps", "2", "--n-interior", "30", "--quiet", "--json", str(out)])
    assert code == 0
    import json

    d = json.loads(out.read_text())
    assert d["options"]["n_boundary"] == 20 and d["options"]["n_interior"] == 30  # preset fills, explicit wins
    assert d["options"]["boundary_weight"] == 10.0 and d["options"]["preset"] == "paper"
