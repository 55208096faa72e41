"""The exact invariants on CUDA (``pytest -m gpu``): skipped where CUDA is not available (tests/conftest.py).

``FEDSCIML_GPU_TEST_DEVICE=cpu`` runs the same tests on the CPU (the dry run of scripts/bench/gpu_check.sh).
Tolerances are the CPU tests' own: the operations are the same, only the device's BLAS differs.
"""
import math
import os
import subprocess
import sys

import pytest
import torch

import fedsciml as fs
from fedsciml.core.nn import MLP
from fedsciml.core.objective import PointwiseLeastSquares, ResidualPart, stack_objectives
from fedsciml.methods import METHODS
from fedsciml.methods.centralized import SolveConfig, solve_least_squares

DEV = os.environ.get("FEDSCIML_GPU_TEST_DEVICE", "cuda")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.gpu

NET = MLP([1, 6, 6, 1])  # p = 61


def _fit(theta, point):
    x, y = point
    return NET(theta, x) - y


def clients(sizes=(30, 30, 30)):
    """Heterogeneous clients on the device: client m owns the m-th interval of [0, 1] (fit sin 2πx)."""
    gen = torch.Generator().manual_seed(0)
    objs = []
    for m, n in enumerate(sizes):
        x = ((m + torch.rand(n, 1, generator=gen, dtype=torch.float64)) / len(sizes)).to(DEV)
        objs.append(PointwiseLeastSquares([ResidualPart("data", _fit, (x, torch.sin(2 * math.pi * x[:, 0])))],
                                          NET.n_params))
    return objs


def test_the_device_is_the_one_asked():
    assert clients()[0].parts[0].points[0].device.type == torch.device(DEV).type


def test_gn_iterates_equal_centralized_lm_on_the_device():
    objs = clients()
    theta0 = NET.init(0).to(DEV)
    th_f, rows_f, info_f = METHODS["gn"](None, objs, theta0, lambda t: {}, rounds=8)
    th_c, rows_c, info_c = solve_least_squares(stack_objectives(objs), theta0, lambda t: {},
                                               SolveConfig("lm", max_iters=8))
    assert th_f.device.type == torch.device(DEV).type
    for a, b in zip(rows_f, rows_c):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-10, abs=1e-300)
        assert a.get("accepted") == b.get("accepted")
    assert float((th_f - th_c).norm() / th_c.norm()) < 1e-10
    assert info_f["accepted_steps"] == info_c["accepted_steps"] > 3


def test_public_gn_on_the_device_equals_the_cpu_run():
    """Bratu, 4 clients, 10 rounds (the main job's problem): the device's θ within 1e-8 of the CPU's (measured on an
    H100: 3e-13; LM's accept/reject branches are the same, so only round-off separates them)."""
    cpu = fs.solve("bratu", "gn", clients=4, rounds=10, device="cpu")
    dev = fs.solve("bratu", "gn", clients=4, rounds=10, device=DEV)
    a, b = torch.as_tensor(dev.theta).cpu().double(), torch.as_tensor(cpu.theta).double()
    assert float((a - b).norm() / b.norm()) < 1e-8
    assert dev.final["loss"] == pytest.approx(cpu.final["loss"], rel=1e-6)


def test_fusion_equals_centralized_ridge_on_the_device():
    from sklearn.linear_model import Ridge

    from fedsciml.core.stats import client_message, fuse

    g = torch.Generator().manual_seed(0)
    data = []
    for k in range(7):
        A = torch.randn(15, 12, generator=g, dtype=torch.float64) + k / 7
        data.append((A, A @ torch.ones(12, dtype=torch.float64) + 0.1 * torch.randn(15, generator=g,
                                                                                       dtype=torch.float64)))
    w = fuse({k: client_message(A.to(DEV), b.to(DEV)) for k, (A, b) in enumerate(data)}, 0.3)
    assert w.device.type == torch.device(DEV).type
    A = torch.cat([a for a, _ in data]).numpy()
    b = torch.cat([y for _, y in data]).numpy()
    ref = torch.as_tensor(Ridge(alpha=0.3, fit_intercept=False, solver="cholesky").fit(A, b).coef_)
    assert float((w.cpu() - ref).norm() / ref.norm()) < 1e-10


def test_a_model_saved_from_the_device_loads_on_a_cpu_only_process(tmp_path):
    """Trained on the device, saved, loaded in a fresh process that sees no GPU: its prediction equals the CPU
    prediction of the same θ bitwise (the loader repeats the same operations) and the device's to 1e-12."""
    from safetensors.torch import load_file, save_file

    p = fs.get_problem("bratu", n_interior=30)
    r = fs.solve(p, "gn", clients=2, rounds=2, device=DEV)
    fs.save_model(r, p, tmp_path / "model")
    x = p.test_inputs()[::7].contiguous()
    save_file({"x": x}, str(tmp_path / "x.safetensors"))
    code = ("import torch, fedsciml as fs\nfrom safetensors.torch import load_file, save_file\n"
            f"u = fs.load_model({str(tmp_path / 'model')!r})\n"
            f"save_file({{'u': u(load_file({str(tmp_path / 'x.safetensors')!r})['x']).contiguous()}}, "
            f"{str(tmp_path / 'u.st')!r})\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
    got = load_file(str(tmp_path / "u.st"))["u"]
    theta = torch.as_tensor(r.theta)
    assert torch.equal(got, p.predict(theta.cpu(), x))
    own = p.predict(theta, x.to(theta.device)).cpu()
    assert float((got - own).abs().max()) <= 1e-12 * float(own.abs().max())


def test_chunked_statistics_equal_the_one_shot_ones_on_the_device():
    from fedsciml.core.stats import chunked_gn_stats

    pb = fs.get_problem("poisson", n_interior=300)
    pb.__dict__["_net"] = MLP([pb.input_dim(), 16, 16, 1])
    obj = pb.centralized_objective(2, seed=0, device=DEV)
    theta = pb.init_params(0, device=DEV)
    one = obj.gn_stats(theta)
    for rows in (1, 37, 256):
        ch = chunked_gn_stats(obj, theta, rows)
        assert ch.H.device.type == torch.device(DEV).type
        assert float((ch.H - one.H).abs().max() / one.H.abs().max()) <= 1e-12
        assert float((ch.g - one.g).abs().max() / one.g.abs().max()) <= 1e-12


def test_the_form_choice_reads_the_device():
    from fedsciml.core.forms import choose_form

    small = choose_form(20_000, 2_337, device=DEV)
    assert small.form == "normal" and "always formed" in small.reason
    big = choose_form(200_000, 2_337, device=DEV)  # J: 4.7e8 entries, 18.7 GB to form: normal on an 80 GB card
    assert big.form in ("normal", "chunked") and f"free on {torch.device(DEV).type}" in big.reason
    if torch.device(DEV).type == "cuda" and torch.cuda.mem_get_info()[0] > 30e9:
        assert big.form == "normal"


def test_gn_with_kfac_preconditioned_cg_on_the_device_equals_the_cpu_run():
    """gn's matrix-free step with the K-FAC preconditioner (what ``auto`` takes on a GPU where gn's dense message is
    over its cap, forms.choose_lm_solve) on the device against the same run on the CPU: Poisson 2-d, 4 clients,
    5 rounds, CG capped at 10.  The same operations on both devices up to BLAS order: θ within 1e-8 (LM's
    accept/reject branches coincide unless a gain ratio sits within round-off of its threshold)."""
    kw = dict(clients=4, rounds=5, dim=2, hidden=[16, 16], n_interior=200, n_boundary=40, form="matfree",
              precond="kfac", cg_iters=10)
    cpu = fs.solve("poisson", "gn", device="cpu", **kw)
    dev = fs.solve("poisson", "gn", device=DEV, **kw)
    a, b = torch.as_tensor(dev.theta).cpu().double(), torch.as_tensor(cpu.theta).double()
    assert float((a - b).norm() / b.norm()) < 1e-8


def test_a_domain_pde_finds_its_kfac_channel_form_on_the_device():
    """heat-nd (a ``DomainPDE``: its K-FAC form is found by sampling the residual at θ₀ on the points,
    problems/domain.py ``_find_taylor_form``) with gn, K-FAC-preconditioned CG, on the device against the CPU run: the
    form is found there (θ₀ on the points' device; before, a CPU θ₀ beside CUDA points failed the detection, which
    fell back to "no channel form" quietly) and θ agrees within 1e-8."""
    kw = dict(clients=4, rounds=4, dim=2, hidden=[12, 12], n_interior=160, n_boundary=40, form="matfree",
              precond="kfac", cg_iters=10)
    cpu = fs.solve("heat-nd", "gn", device="cpu", **kw)
    dev = fs.solve("heat-nd", "gn", device=DEV, **kw)
    assert dev.extra["strategy"]["precond"] == "kfac"
    a, b = torch.as_tensor(dev.theta).cpu().double(), torch.as_tensor(cpu.theta).double()
    assert float((a - b).norm() / b.norm()) < 1e-8
