"""Issue 38, finding 6: a callback's numpy/tensor ``True`` stops the run; an EarlyStopping reused across runs
starts each run afresh; a misspelt monitor is one line at the run's first row naming the fields; a loaded model
evaluates many points in bounded batches (fedsciml.runtime.modelio.eval_rows)."""
import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.runtime import modelio

SIN = dict(problem_options={"n_samples": 40})


@pytest.mark.parametrize("true", [np.True_, torch.tensor(True), torch.tensor([1.0]), np.bool_(True)],
                         ids=["np.True_", "tensor(True)", "tensor([1.])", "np.bool_"])
def test_a_numpy_or_tensor_true_stops_the_run(true):
    res = fs.solve("sin1d", "centralized", max_iters=20, callbacks=[lambda v: true if v.step == 2 else np.False_],
                   **SIN)
    assert res.extra["stopped_by"] == "callback <lambda>" and res.history[-1]["step"] == 2


def test_a_callback_returning_something_else_is_one_line():
    with pytest.raises(TypeError, match=r"^callback <lambda> returned list .*return True"):
        fs.solve("sin1d", "centralized", max_iters=3, callbacks=[lambda v: [v.step]], **SIN)


def test_early_stopping_reused_across_runs_is_reset_at_each_start():
    es = fs.EarlyStopping(monitor="loss", patience=3, rel_delta=0.5)
    runs = [fs.solve("sin1d", "centralized", optimizer="adam", lr=1e-3, max_iters=200, callbacks=[es], **SIN)
            for _ in range(2)]
    # the same problem, seed and settings: the second run stops where the first did (it did stop after one row
    # before the reset: its first row compared against the first run's best)
    assert [len(r.history) for r in runs] == [len(runs[0].history)] * 2 and len(runs[0].history) > 1
    assert es.stopped_step - es.best_step == 3
    ck = fs.BestModelCheckpoint(monitor="loss")
    for r in range(2):
        fs.solve("sin1d", "gn", clients=2, rounds=1 + 2 * r, callbacks=[ck], **SIN)
        assert ck.best_step is not None and ck.best_step <= 1 + 2 * r


@pytest.mark.parametrize("cb", [lambda: fs.EarlyStopping(monitor="rel_l3"),
                                lambda: fs.BestModelCheckpoint(monitor="mes")], ids=["EarlyStopping",
                                                                                     "BestModelCheckpoint"])
def test_a_misspelt_monitor_is_one_line_naming_the_fields_at_the_first_row(cb):
    seen = []
    with pytest.raises(ValueError) as e:
        fs.solve("sin1d", "centralized", max_iters=50, callbacks=[cb(), lambda v: seen.append(v.step)], **SIN)
    msg = str(e.value)
    assert "\n" not in msg and "is not a numeric field of this run's rows; available: " in msg
    assert "loss" in msg and "mse" in msg and seen == []  # at the first row, before anything else ran on it


def test_a_loaded_model_evaluates_in_bounded_batches(tmp_path, monkeypatch):
    """The batch rule: rows × Σ layer widths × 8 bytes ≤ EVAL_BYTES.  With the bound set so that a batch holds
    1,000 points, 10,500 points are 11 calls of at most 1,000 rows; the answer equals one whole-batch call to
    round-off (different batch sizes may take different matmul kernels: tolerance 4·eps relative)."""
    res = fs.solve("sin1d", "gn", clients=2, rounds=1, **SIN)
    p = fs.get_problem("sin1d", n_samples=40)
    d = str(tmp_path / "m")
    fs.save_model(res, p, d)
    sizes = fs.load_model(d).meta["architecture"]["sizes"]
    monkeypatch.setattr(modelio, "EVAL_BYTES", 1000 * 8 * sum(sizes))
    assert modelio.eval_rows(sizes) == 1000
    u = fs.load_model(d)
    from fedsciml.core.nn import MLP

    seen = []
    real = MLP.__call__
    monkeypatch.setattr(MLP, "__call__", lambda self, th, x: (seen.append(x.shape[0]), real(self, th, x))[1])
    x = torch.linspace(0, 1, 10_500, dtype=torch.float64)[:, None]
    out = u(x)
    assert seen == [1000] * 10 + [500] and out.shape == (10_500,)
    monkeypatch.setattr(modelio, "EVAL_BYTES", 1 << 40)
    whole = fs.load_model(d)(x)
    assert torch.allclose(out, whole, rtol=4 * torch.finfo(torch.float64).eps, atol=0)
