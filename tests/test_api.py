"""The public Python API: user-defined problems, pre-split data, named errors, plugins."""
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.runtime.checks import SetupError


class Poisson1D(fs.PDE):
    """−u″ = π² sin πx written by a user (the zoo's poisson with dim=1, defined inline)."""

    name = "user-poisson-1d"

    def exact(self, x):
        return torch.sin(math.pi * x[..., 0])

    def equation(self, u, x):
        return -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])


def test_public_surface_is_declared_and_importable():
    for name in fs.__all__:
        assert getattr(fs, name) is not None
    assert "solve" in fs.__all__ and "PDE" in fs.__all__ and "ClientData" in fs.__all__


def test_inline_problem_matches_builtin_residuals_and_jacobian():
    user = Poisson1D(n_interior=30)
    builtin = fs.get_problem("poisson", dim=1, n_interior=30)
    theta = builtin.init_params(3)
    for a, b in zip(user.client_objectives(3, seed=1), builtin.client_objectives(3, seed=1)):
        torch.testing.assert_close(a.residual(theta), b.residual(theta), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(a.jacobian(theta), b.jacobian(theta), rtol=1e-12, atol=1e-12)


def test_field_derivatives_match_closed_form():
    net = fs.MLP([2, 8, 1])
    theta = net.init(0)
    u = fs.FieldAt(net, theta)
    x = torch.tensor([0.3, 0.7], dtype=torch.float64)
    h = 1e-4
    e = torch.eye(2, dtype=torch.float64)
    fd_grad = torch.stack([(u(x + h * e[i]) - u(x - h * e[i])) / (2 * h) for i in range(2)])
    torch.testing.assert_close(u.grad(x), fd_grad, rtol=1e-6, atol=1e-8)
    fd_lap = sum((u(x + h * e[i]) - 2 * u(x) + u(x - h * e[i])) / h ** 2 for i in range(2))
    assert abs(float(u.laplacian(x) - fd_lap)) < 1e-5
    torch.testing.assert_close(u.laplacian(x), torch.trace(u.hessian(x)))
    torch.testing.assert_close(u.derivative(x, 1, order=2), u.hessian(x)[1, 1])


def test_wrong_residual_shape_is_named():
    class Bad(Poisson1D):
        def equation(self, u, x):
            return torch.stack([u(x), u(x)])

    with pytest.raises(SetupError, match="one scalar per point"):
        fs.solve(Bad(n_interior=8), max_iters=1)


def test_nonfinite_initial_residual_is_named():
    class Bad(Poisson1D):
        def equation(self, u, x):
            return u(x) / 0.0 * 0.0

    with pytest.raises(SetupError, match="not finite at the initial parameters"):
        fs.solve(Bad(n_interior=8), max_iters=1)


def test_empty_client_is_named():
    with pytest.raises(fs.ProblemError, match="client 1 has no samples"):
        fs.ClientData([(np.ones((3, 1)), np.ones(3)), (np.zeros((0, 1)), np.zeros(0))])


def test_parameter_count_mismatch_is_named():
    class Bad(Poisson1D):
        def init_params(self, seed=0, device="cpu"):
            return torch.zeros(7, dtype=torch.float64)

    with pytest.raises(SetupError, match="columns but the parameter vector has 7"):
        fs.solve(Bad(n_interior=8), max_iters=1)


def test_client_data_fit_with_user_split():
    rng = np.random.default_rng(0)
    X = rng.random(120)
    y = np.sin(2 * np.pi * X)
    site = (X * 3).astype(int)  # a column that names the client
    clients = [(X[site == k], y[site == k]) for k in range(3)]
    xt = np.linspace(0, 1, 50)
    prob = fs.ClientData(clients, test=(xt, np.sin(2 * np.pi * xt)), hidden=(10, 10))
    res = fs.solve(prob, "centralized", max_iters=60)
    assert res.clients == 3
    assert res.final["mse"] < 1e-3
    with pytest.raises(fs.ProblemError, match="split among 3 clients"):
        fs.solve(prob, clients=2)


@pytest.mark.slow
def test_registered_plugin_appears_in_cli(tmp_path):
    plugin = tmp_path / "myproblems.py"
    plugin.write_text(textwrap.dedent('''
        import math, torch
        import fedsciml as fs

        @fs.register
        class Wave(fs.PDE):
            """user plugin problem −u″ = π² sin πx"""
            name = "plugin-wave"
            def exact(self, x):
                return torch.sin(math.pi * x[..., 0])
            def equation(self, u, x):
                return -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
    '''))
    out = subprocess.run([sys.executable, "-m", "fedsciml", "--plugin", str(plugin), "list"],
                         capture_output=True, text=True, check=True).stdout
    assert "plugin-wave" in out
    r = subprocess.run([sys.executable, "-m", "fedsciml", "--plugin", str(plugin), "solve", "plugin-wave",
                        "--n-interior", "20", "--max-iters", "3", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "plugin-wave" in r.stdout
    bad = subprocess.run([sys.executable, "-m", "fedsciml", "--plugin", str(tmp_path / "nope.py"), "list"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_result_round_trips_json(tmp_path):
    res = fs.solve(Poisson1D(n_interior=20), max_iters=3)
    path = tmp_path / "r.json"
    res.to_json(str(path))
    back = fs.Result.from_json(str(path))
    assert back.final == res.to_dict()["final"]
    assert [h["step"] for h in back.history] == [0, 1, 2, 3]


def _readme_python_block():
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "guide" / "python.md").read_text()
    section = text[text.index("# Using fedsciml from Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_python_guide_example_runs_as_pasted(tmp_path, monkeypatch):
    """The Python guide's example (docs/guide/python.md), executed verbatim except for fewer rounds (CI time)."""
    from fedsciml.problems import REGISTRY

    code = _readme_python_block().replace("rounds=30", "rounds=3")
    monkeypatch.chdir(tmp_path)
    saved = dict(REGISTRY)
    try:
        namespace = {}
        exec(compile(code, "docs/guide/python.md", "exec"), namespace)
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)
    assert (tmp_path / "helmholtz_gn.json").exists()
    assert any(p.suffix == ".png" for p in (tmp_path / "helmholtz_plots").iterdir())
    gn, fipa = namespace["gn"], namespace["fipa"]
    assert gn.history[-1]["step"] == 3 and fipa.history[-1]["step"] == 3
    assert gn.history[-1]["loss"] < gn.history[0]["loss"]  # LM never increases the loss


def test_helmholtz_example_runs_quick(tmp_path):
    import pathlib

    script = pathlib.Path(__file__).resolve().parents[1] / "examples" / "helmholtz_federated.py"
    out = tmp_path / "h.json"
    r = subprocess.run([sys.executable, str(script), "--quick", "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    import json

    runs = json.loads(out.read_text())
    # exact federated GN reproduces the centralized LM iterates on the pooled points
    c, g = runs["centralized"]["history"], runs["gn"]["history"]
    assert [h["step"] for h in c] == [h["step"] for h in g]
    for hc, hg in zip(c, g):
        assert abs(hc["rel_l2"] - hg["rel_l2"]) <= 1e-8 * max(1.0, hc["rel_l2"])
    assert runs["gn"]["final"]["rel_l2"] < 0.1 * runs["gn"]["history"][0]["rel_l2"]


def test_ridge_table_example_quick():
    """A user's table split by a column; DP ridge fusion with CV; ε = ∞ equals pooled scikit-learn."""
    from _examples import load_example

    mod = load_example("ridge_table_dp")
    results, mse_ref = mod.main(["--quick", "--epsilons", "inf,5"])
    assert abs(results[math.inf][0] - mse_ref) <= 1e-8 * mse_ref
    assert results[5.0][0] > results[math.inf][0]  # privacy costs utility on 355 rows


def test_inline_problem_solves_federated_to_builtin_accuracy():
    """A problem defined inline in a few lines, solved with exact federated GN, reaches exactly
    the built-in problem's accuracy (same equation, same split, same seed)."""

    class InlinePoisson(fs.PDE):
        name = "inline-poisson"

        def exact(self, x):
            return torch.sin(math.pi * x[..., 0])

        def equation(self, u, x):
            return -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])

    mine = fs.solve(InlinePoisson(n_interior=40), "gn", clients=2, rounds=12)
    ref = fs.solve(fs.get_problem("poisson", dim=1, n_interior=40), "gn", clients=2, rounds=12)
    assert mine.final["rel_l2"] < 1e-2
    assert abs(mine.final["rel_l2"] - ref.final["rel_l2"]) <= 1e-8 * ref.final["rel_l2"]


def test_readme_python_example_prints_what_the_readme_says(tmp_path, monkeypatch, capsys):
    """README.md's Python example, verbatim, and the figures the README quotes (to round-off: another CPU's BLAS
    may sum in another order)."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    quoted = re.search(r"prints `gn ([0-9.e+-]+)  fipa ([0-9.e+-]+)`", text)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    got = re.search(r"gn ([0-9.e+-]+)  fipa ([0-9.e+-]+)", capsys.readouterr().out)
    assert got and quoted
    for g, q in zip(got.groups(), quoted.groups()):
        assert float(g) == pytest.approx(float(q), rel=2e-3)
    assert (tmp_path / "bratu_gn.json").exists()
