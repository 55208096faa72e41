"""Issue 30 item 6: DP on raw site tables. A site checks the clip bounds against its own rows and refuses in one
line, naming the fix, when clipping would shrink its median row by more than ``dp_max_shrink``; σ and the loss
are reported honestly (the CV's σ, the reason the loss is not measured)."""
import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes

import fedsciml as fs
from fedsciml.core.privacy import check_clip_scale, shrink_factors
from fedsciml.runtime.results import summary_lines


def _tables(tmp_path, scale):
    X, y = load_diabetes(return_X_y=True, scaled=False)
    if scale:  # standardized by (here: pooled) constants so that rows fit the unit clip bounds
        X = (X - X.mean(0)) / X.std(0) / np.sqrt(X.shape[1])
        y = (y - y.mean()) / y.std() / 3
    paths = []
    for k in range(3):
        p = str(tmp_path / f"s{scale}{k}.npz")
        np.savez(p, X=X[k::3], y=y[k::3])
        paths.append(p)
    return paths


def test_shrink_factors_are_the_clips_row_scaling():
    A = torch.tensor([[3.0, 4.0], [0.3, 0.4]], dtype=torch.float64)
    b = torch.tensor([1.0, 20.0], dtype=torch.float64)
    assert shrink_factors(A, b, 1.0, 2.0).tolist() == [5.0, 10.0]
    check_clip_scale(A, b, 1.0, 2.0, 10.0)            # median 7.5 ≤ 10
    with pytest.raises(ValueError, match=r"median row 7\.5× \(more than dp_max_shrink=5×\)"):
        check_clip_scale(A, b, 1.0, 2.0, 5.0)
    check_clip_scale(A, b, 1.0, 2.0, None)            # None: no check


def test_raw_site_tables_are_refused_in_one_line_naming_the_fix(tmp_path):
    prob = fs.get_problem("table", tables=_tables(tmp_path, False))
    with pytest.raises(Exception) as e:
        fs.solve(prob, "one-shot", clients=3, dp_epsilon=2.0, cv_sigmas=[0.01, 0.1, 1.0, 10.0])
    msg = str(e.value)
    assert "dp_clip_a=1, dp_clip_b=1 would shrink its median row" in msg
    assert "federated standardization" in msg and "\n" not in msg


def test_standardized_tables_run_and_the_summary_names_sigma_and_why_no_loss(tmp_path):
    prob = fs.get_problem("table", tables=_tables(tmp_path, True))
    res = fs.solve(prob, "one-shot", clients=3, dp_epsilon=2.0, cv_sigmas=[0.01, 0.1, 1.0, 10.0])
    chosen = res.extra["sigma_used"]
    assert chosen in (0.01, 0.1, 1.0, 10.0)
    text = "\n".join(summary_lines([res]))
    assert f"σ={chosen:g} (leave-one-client-out CV), DP ε=2.0" in text and "σ=None" not in text
    assert "one-shot: loss not measured: under DP the sites send only their noised statistics" in text
    # the check can be turned off (a deliberate choice of bounds): raw rows then run
    raw = fs.get_problem("table", tables=_tables(tmp_path, False))
    fs.solve(raw, "one-shot", clients=3, dp_epsilon=2.0, sigma=1.0, dp_max_shrink=None)
