"""The ridge SGD baselines in the one registry (issue 18): method ``fedavg-sgd`` (FedAvg / FedProx / DP-FedAvg with
local minibatch SGD on ridge clients) planned and run by the one driver — from ``solve``, from the ``ridge`` preset
and from :func:`fedsciml.ridge.baselines.fedavg` — and the preset's memory estimate as terms of the driver's check."""
import pytest
import torch

import fedsciml as fs
import fedsciml.engines  # noqa: F401  (registers fedavg-sgd)
from fedsciml.problems import get_problem
from fedsciml.ridge.baselines import RidgeAveraging, fedavg, sgd_transport
from fedsciml.runtime import driver


def _standalone(data, rounds, sigma, seed, mu=0.0, dp=None, dropout=0.0, evaluate=None, transport="local"):
    """The baselines' own driver as it was before they joined the registry (transport, RoundConfig, Simulation
    built by hand around :class:`RidgeAveraging`): the reference the driver path must reproduce bit for bit."""
    from fedsciml.core import privacy
    from fedsciml.runtime.loop import RoundConfig, Simulation

    N = sum(int(A.shape[0]) for A, _ in data)
    z, clip, bs = 0.0, None, 32
    if dp is not None:
        bs, clip = None, float(dp["clip"])
        z = privacy.noise_multiplier(dp["epsilon"], dp["delta"], method="rdp", steps=rounds * 5)
    sgd = {"lr": 0.01, "local_epochs": 5, "mu": float(mu), "sigma_share": float(sigma) / N, "batch_size": bs,
           "dp_clip": clip, "dp_z": z}
    tr = sgd_transport(data, range(len(data)), True, transport)
    ev = (lambda w: {"mse": evaluate(w)}) if evaluate is not None else (lambda w: {})
    sim = Simulation(tr, ev, RoundConfig(rounds=rounds, seed=seed, dropout=dropout))
    w, rows, run = sim.run(RidgeAveraging(sgd, seed), torch.zeros(data[0][0].shape[1], dtype=data[0][0].dtype))
    return w, rows, run


@pytest.mark.parametrize("kw", [
    dict(),
    dict(mu=0.01, dropout=0.3),
    dict(dp={"epsilon": 2.0, "delta": 1e-5, "clip": 3.0}, dropout=0.2),
    dict(transport="bytes"),
])
def test_fedavg_on_the_driver_is_bitwise_the_standalone_loop(kw):
    """Bitwise, not to a tolerance: the driver only wraps the rows as a problem and calls the runner, which builds
    the same clients (same ids, so the same per-client generators for reshuffles and DP noise), the same
    RidgeAveraging request, the same round loop with the same seeded sampling — the same floating-point
    operations in the same order."""
    p = get_problem("ridge-linear", dim=6, n_samples=30)
    data = p.client_data(5, seed=2)
    ev = lambda w: p.evaluate(w)["mse"]  # noqa: E731
    w_ref, rows_ref, run_ref = _standalone(data, 4, 0.05, 3, evaluate=ev, **kw)
    w, hist, info = fedavg(data, rounds=4, sigma=0.05, seed=3, evaluate=ev, **kw)
    assert torch.equal(w, w_ref)
    assert [r["mse"] for r in info["rows"]] == [r["mse"] for r in rows_ref]
    assert info["floats_sent"] == run_ref["floats_up"] + run_ref["floats_down"]
    assert [h["round"] for h in hist] == [1, 2, 3, 4] and hist[-1]["mse"] == rows_ref[-1]["mse"]


def test_solve_fedavg_sgd_is_the_baseline_and_applies_to_ridge_only():
    """``solve(ridge problem, "fedavg-sgd")``: σ is the method's (penalty moved to the server, as one-shot's), and the
    model is fedavg()'s on the problem's rows bit for bit (the same runner on the same rows, seed and options)."""
    prob = get_problem("ridge-linear", dim=5, n_samples=25, sigma=0.2)  # penalty='rows' by default
    res = fs.solve(prob, "fedavg-sgd", clients=3, seed=1, rounds=3, mu=0.01)
    assert res.options["penalty"] == "server" and res.options["method_sigma"] == 0.2
    data = get_problem("ridge-linear", dim=5, n_samples=25).client_data(3, seed=1)
    w, _, info = fedavg(data, rounds=3, sigma=0.2, seed=1, mu=0.01)
    sent = res.extra["floats_up"] + res.extra["floats_down"]  # the round loop's counters, as every method's
    assert torch.equal(res.theta, w) and sent == info["floats_sent"] == 3 * 3 * (5 + 1 + 5)
    assert "fedavg-sgd" in driver.available_methods("ridge") and "fedavg-sgd" not in driver.available_methods("pinn")
    with pytest.raises(ValueError, match="does not apply to a problem of kind 'pinn'"):
        fs.solve(get_problem("poisson"), "fedavg-sgd")
    with pytest.raises(ValueError, match="runs on engine local only, got engine 'flower'"):
        fs.solve(prob, "fedavg-sgd", clients=3, engine="flower")  # refused before Flower starts
    with pytest.raises(ValueError, match="dp_grad_clip has no effect here"):
        fs.solve(prob, "fedavg-sgd", clients=3, dp_grad_clip=3.0)  # no DP: the clip would be ignored


def test_fedavg_options_checked_once_by_the_declarations():
    data = get_problem("ridge-linear", dim=3, n_samples=10).client_data(2, seed=0)
    with pytest.raises(ValueError, match="rounds must be an integer ≥ 1"):
        fedavg(data, rounds=0)
    with pytest.raises(ValueError, match="lr must be a finite number > 0"):
        fedavg(data, lr=0.0)
    with pytest.raises(ValueError, match="transport must be one of"):
        fedavg(data, transport="pigeon")


def test_ridge_preset_memory_is_the_drivers_one_check(monkeypatch):
    """The preset's own estimate is gone: its terms (pooled oracle, messages, CV, baselines) ride on the driver's
    check of the one-shot plan, so one check covers the whole experiment and refuses it before anything runs."""
    from fedsciml.cli.ridge import run_experiment

    seen = []
    real = driver.check_memory
    monkeypatch.setattr(driver, "check_memory", lambda n, what, *a, **k: (seen.append((n, what)), real(n, what, *a, **k)))
    run_experiment(clients=3, dim=4, samples=20, seed=0)
    assert len(seen) == 1 and "ridge-linear with one-shot" in seen[0][1] and "the pooled oracle" in seen[0][1]
    built = []
    monkeypatch.setattr(driver, "available_memory", lambda device=None: 1000.0)
    monkeypatch.setattr(get_problem("ridge-linear").__class__, "client_data",
                        lambda *a, **k: built.append(1))  # nothing may be built before the refusal
    with pytest.raises(driver.OutOfMemory, match=r"the pooled oracle, the baselines\) .* 1e-06 GB available"):
        run_experiment(clients=3, dim=4, samples=20, baselines="fedavg")
    assert built == []
    with pytest.raises(driver.OutOfMemory, match="the pooled oracle"):  # the oracle runs here on any engine
        run_experiment(clients=3, dim=4, samples=20, engine="flower")
    # the preset's terms come from the validated configuration: a bad value is refused by its declaration first
    with pytest.raises(ValueError, match="one-shot option project must be an integer ≥ 1, got 0"):
        run_experiment(clients=3, dim=4, samples=20, project=0)


def test_ridge_help_and_errors_name_only_its_flags(capsys):
    from fedsciml.cli import main

    assert main(["ridge", "--features", "rff", "--dim", "5", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "--rff-dim" in err and "--penalty" not in err and "'dim'" not in err
    with pytest.raises(SystemExit):
        main(["solve", "--help-all"])  # the short --help lists groups; the full list holds every flag
    out = capsys.readouterr().out
    assert "default ()" not in out and "[table: a list of paths]" in " ".join(out.split())


def test_summary_table_names_the_sgd_baselines_settings():
    """The solve table's settings column says what fedavg-sgd ran (it was empty)."""
    from fedsciml.runtime.results import method_settings

    r = fs.solve("ridge-linear", "fedavg-sgd", clients=3, seed=0, rounds=2, mu=0.1,
                 problem_options={"dim": 4, "n_samples": 60})
    s = method_settings(r)
    assert "local SGD 5 epochs, batch 32, lr=0.01" in s and "μ=0.1 (FedProx)" in s
