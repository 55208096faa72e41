"""The one device-aware form choice (fedsciml.core.forms.choose_form), driven with fake free-memory figures."""
import pytest
import torch

from fedsciml.core import forms
from fedsciml.core.forms import DENSE_FLOOR_ENTRIES, choose_form, chunk_rows_for
from fedsciml.core.lm import LevenbergMarquardt, LMConfig, auto_form, federated_form

CPU_24G = 24 * 2**30  # a 24 GiB CPU machine's free memory
H100 = 80 * 10**9     # an 80 GB card's free memory


def test_an_h100_keeps_the_dense_forms_where_the_old_entry_count_went_matrix_free():
    """n·p = 20 000 × 2 337 (turn4: auto went matrix-free at 20 200 rows and took 36 steps against 2 076): dense
    on an 80 GB card, normal for n ≥ p, kernel for n < p; also beyond the 5e7-entry floor (here 3.3e8 entries)."""
    ch = choose_form(20_000, 2_337, device="cuda", free=H100)
    assert ch.form == "normal" and "n ≥ p" in ch.reason
    big = choose_form(140_000, 2_337, device="cuda", free=H100)
    assert big.form == "normal" and "fit" in big.reason and "GB" in big.reason
    assert choose_form(2_000, 23_370, device="cuda", free=H100).form == "kernel"


def test_matrix_free_only_where_no_dense_form_fits_and_chunked_where_only_the_gram_fits():
    # 10⁶ points at p = 2 337 on an H100: J (1.9e10 bytes ×5 to form) does not fit, JᵀJ does → chunked
    ch = choose_form(1_000_000, 2_337, device="cuda", free=H100)
    assert ch.form == "chunked" and ch.chunk_rows is not None and 64 <= ch.chunk_rows < 1_000_000
    assert "does not fit" in ch.reason and f"{ch.chunk_rows:,} rows" in ch.reason
    # exp19 (p ≈ 117k, 3 000 + 500 points): J (4.1e8 entries, 16.4 GB to form) does not fit a 24 GiB CPU's
    # budget (12.9 GB), nor does a p×p matrix → matrix-free, and the reason says so
    mf = choose_form(3_500, 117_000, device="cpu", free=CPU_24G)
    assert mf.form == "matfree" and mf.reason.startswith("matfree: no dense form fits")
    # …while on the H100 the kernel form (J and a 3 500² Gram) fits
    assert choose_form(3_500, 117_000, device="cuda", free=H100).form == "kernel"
    # with 17 600 rows J needs 82 GB to form on the H100 too, and p×p 110 GB: matrix-free there as well
    assert choose_form(17_600, 117_000, device="cuda", free=H100).form == "matfree"
    # every dense form that fits is chosen over matfree on the GPU; matfree is chosen only where none fits
    for n, p in [(4_500, 2_337), (20_000, 2_337), (200_000, 5_000), (3_000, 10_000), (17_600, 33_921)]:
        c = choose_form(n, p, device="cuda", free=H100)
        fits = [x.form for x in c.costs if x.fits and x.form != "matfree"]
        assert (c.form == "matfree") == (not fits), (n, p, c)


def test_todays_sizes_keep_todays_forms_whatever_the_free_memory():
    """Up to the floor (5e7 entries, the rule before this module) J is always formed: the same forms as before
    with 1 MB or 80 GB free, on either device — so today's problems give the same bits."""
    for free in (10**6, CPU_24G, H100):
        for device in ("cpu", "cuda"):
            assert choose_form(4_500, 2_337, device=device, free=free).form == "normal"     # poisson d=5 defaults
            assert choose_form(402, 2_209, device=device, free=free).form == "kernel"       # bratu
            assert choose_form(DENSE_FLOOR_ENTRIES // 2_337, 2_337, device=device, free=free).form == "normal"
            assert choose_form(401, 2_209, device=device, free=free, need="fipa").form == "dense"
    # the message rule of federated gn is the one before (tests/test_matfree.py pins the same figures)
    assert federated_form([100, 102, 100, 100], 2209) == "sqrt" and federated_form([2000] * 4, 2337) == "normal"
    assert federated_form([4000] * 4, 34_000) == "matfree"


def test_the_cpu_budget_sends_a_large_p_matrix_free_where_a_gpu_streams_it():
    """p = 20 000, n = 100 000: on a 24 GiB CPU both chunked and matrix-free fit… the flop model picks matrix-free
    there (c_P is small on a CPU); on an H100 J does not fit whole and the chunked normal form is taken."""
    cpu = choose_form(100_000, 20_000, device="cpu", free=CPU_24G)
    gpu = choose_form(100_000, 20_000, device="cuda", free=H100)
    assert cpu.form == "matfree" and "cheaper" in cpu.reason
    assert gpu.form == "chunked"


def test_allowed_restricts_and_bad_input_is_one_clear_line():
    assert choose_form(4_500, 2_337, device="cpu", free=CPU_24G, allowed=("matfree",)).form == "matfree"
    forced = choose_form(4_500, 2_337, device="cpu", free=10**6, allowed=("chunked",))
    assert forced.form == "chunked" and forced.chunk_rows == forms.MIN_CHUNK_ROWS
    assert forced.reason.startswith("chunked: as asked") and "does not fit" in forced.reason  # named, not chosen
    with pytest.raises(ValueError, match="form need must be one of lm, gn, fipa, got 'x'"):
        choose_form(10, 10, need="x")
    with pytest.raises(ValueError, match="n=0"):
        choose_form(0, 10)


def test_chunk_rows_fill_the_budget_left_after_the_gram():
    p, budget = 1_000, 1e9
    rows = chunk_rows_for(p, budget)
    assert 2 * p * p * 8 + forms.JACOBIAN_PEAK * rows * p * 8 <= budget
    assert 2 * p * p * 8 + forms.JACOBIAN_PEAK * (rows + 1) * p * 8 > budget
    assert chunk_rows_for(p, budget, n=100) == 100 and chunk_rows_for(p, 0.0) == forms.MIN_CHUNK_ROWS


def test_lm_makes_the_choice_once_per_size(monkeypatch):
    """The LM state machine keeps its first choice for a size: a resample later in the run gets the same form
    whatever the free memory is then."""
    lm = LevenbergMarquardt(LMConfig())
    first = lm.form_choice(4_500, 2_337)
    monkeypatch.setattr(forms, "available_memory", lambda device=None: 1)
    assert lm.form_choice(4_500, 2_337) is first
    assert auto_form(60_000_000 // 2_337, 2_337) in ("chunked", "matfree")  # 1 byte free: J is not formed whole


def test_a_new_size_is_decided_on_the_device_of_the_first_choice(monkeypatch):
    """Growing points: LM decides the first size on the run's device and later sizes on the same device, even when
    the caller (lm_stats_fn) names none."""
    seen = []
    real = forms.choose_form
    monkeypatch.setattr(forms, "choose_form", lambda *a, **k: seen.append(k["device"]) or real(*a, **{**k, "free": H100}))
    lm = LevenbergMarquardt(LMConfig())
    lm.form_choice(4_500, 2_337, "cuda", torch.float64)
    lm.form_choice(9_000, 2_337)
    assert seen == ["cuda", "cuda"]


def test_the_choice_is_logged_and_recorded(caplog):
    import logging

    import fedsciml as fs
    with caplog.at_level(logging.DEBUG, logger="fedsciml.core.forms"):
        res = fs.solve("bratu", "centralized", clients=2, max_iters=2)
    assert res.extra["lm_solve"] == "kernel" and res.extra["lm_solve_reason"].startswith("kernel: J (")
    assert any("form choice (lm" in r.getMessage() for r in caplog.records)
    gn = fs.solve("bratu", "gn", clients=2, rounds=1)
    assert gn.extra["strategy"]["form"] == "sqrt" and gn.extra["strategy"]["form_reason"].startswith("sqrt: ")
    assert torch.is_tensor(torch.as_tensor(gn.theta))
