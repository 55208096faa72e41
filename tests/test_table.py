"""Problem ``table``: a user's own regression table, one file per client (what a Flower site's node reads),
and the example examples/flower_ridge_sites.py on the in-process engine (its Flower runs: tests/test_flower.py)."""
import math

import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.problems import ProblemError, get_problem

from _examples import load_example


def example():
    return load_example("flower_ridge_sites")


def test_site_tables_fused_at_infinite_epsilon_are_pooled_sklearn_ridge(tmp_path):
    from sklearn.linear_model import Ridge

    ex = example()
    paths, test, _ = ex.write_site_tables(str(tmp_path), 3)
    p = get_problem("table", tables=paths, test_table=test)
    assert p.default_clients == 3 and p.init_params().shape == (10,)
    res = fs.solve(p, "one-shot", clients=3, dp_epsilon=math.inf, cv_sigmas=ex.SIGMAS)
    sigma = res.extra["sigma_used"]
    assert sigma in res.extra["cv_sigmas"] and res.extra["cv_scored"] == 3
    X = np.vstack([np.loadtxt(q, delimiter=",", skiprows=1)[:, :-1] for q in paths])
    y = np.concatenate([np.loadtxt(q, delimiter=",", skiprows=1)[:, -1] for q in paths])
    ref = torch.as_tensor(Ridge(alpha=sigma, fit_intercept=False, solver="cholesky").fit(X, y).coef_)
    assert torch.allclose(res.theta, ref, rtol=1e-8, atol=1e-8 * float(ref.abs().max()))  # independent reference
    Xt = np.loadtxt(test, delimiter=",", skiprows=1)
    assert res.final["mse"] == pytest.approx(float(np.mean((Xt[:, :-1] @ ref.numpy() - Xt[:, -1]) ** 2)), rel=1e-8)
    # the example's own table (in-process engine): ε = ∞ equals sklearn, noise costs utility
    out = ex.main(["--engine", "local", "--epsilons", "inf,2", "--dir", str(tmp_path / "ex")])
    assert out[0]["rel_to_sklearn"] < 1e-8 and out[1]["test_mse"] > out[0]["test_mse"]


def test_table_problem_names_bad_input(tmp_path):
    (tmp_path / "a.csv").write_text("x,y\n1,2\n3,4\n")
    with pytest.raises(ProblemError, match="has 1 table"):
        fs.solve(get_problem("table", tables=[str(tmp_path / "a.csv")]), "one-shot", clients=2)
    with pytest.raises(ProblemError, match="needs its clients' tables"):
        get_problem("table").client_objectives(2)
    with pytest.raises(ValueError, match="target column 'z'"):
        get_problem("table", tables=[str(tmp_path / "a.csv")], target="z").client_objectives(1)
    assert ex_cli(["--engine", "local", "--sites", "1"]) == 2


def ex_cli(argv):
    return example().cli(argv)
