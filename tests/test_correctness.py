"""Issue 23: no silent fallbacks, bad-input holes, records.  Each test fails on commit 4181e5a."""
import math
import os
import sys

import numpy as np
import pytest
import torch

from fedsciml.images import fisher as fz
from fedsciml.images.aggregators import (
    FedBEnsAggregator,
    NonFiniteObjective,
    _adam_best,
)
from fedsciml.images.models import FlatModel, build
from fedsciml.runtime.driver import METHODS

sys.path.insert(0, os.path.dirname(__file__))
from test_federated import THETA0, evaluate, make_clients  # noqa: E402

torch.set_num_threads(1)


# ------------------------------------------------------------------ 1. FedBEns NaN / best-of-starts
def test_adam_best_refuses_a_nan_gradient_instead_of_returning_the_start():
    w0 = torch.ones(5)
    with pytest.raises(NonFiniteObjective, match="not finite at step 1"):
        _adam_best(w0, lambda v: torch.full_like(v, float("nan")), lambda v: 0.5, 10, 1e-2, (0.9, 0.99), 1e-8, 2)


def test_adam_best_refuses_when_no_validation_score_is_finite():
    with pytest.raises(NonFiniteObjective, match="no validation score"):
        _adam_best(torch.ones(3), lambda v: v, lambda v: float("nan"), 4, 1e-2, (0.9, 0.99), 1e-8, 2)


def _rank_deficient_kfac_msgs(C=3, M=2, seed=0):
    """Linear 9→4 model; each client's inputs are zero in all but 3 of 9 features, so its A factor
    has rank ≤ 4 of 10 (most entries exactly 0), as a small client's LeNet factors are."""
    torch.manual_seed(seed)
    m = FlatModel(build("linear", (1, 3, 3), 4, seed))
    msgs, tmpl = {}, None
    for c in range(C):
        modes, facs = [], []
        for _ in range(M):
            x = torch.zeros(6, 1, 3, 3)
            x.view(6, -1)[:, c * 3:(c + 1) * 3] = torch.randn(6, 3)
            w = m.theta() + 0.3 * torch.randn(m.p)
            K = fz.kfac(m, w, x)
            tmpl = tmpl or K
            modes.append(w)
            facs.append(K.to_message())
        msg = {"w": torch.stack(modes), "n": torch.tensor([6.0 + c])}
        msg.update({k: torch.stack([f[k] for f in facs]) for k in facs[0]})
        msgs[c] = msg
    return m, tmpl, msgs


def _psd(S):
    """The float64 projection of a symmetric ``S`` onto the PSD cone (eigenvalues clipped at 0)."""
    lam, U = torch.linalg.eigh(S)
    return (U * lam.clamp_min(0)) @ U.T


def test_fedbens_kfac_objective_is_float64_and_matches_a_dense_reference():
    """Eq. 5 against dense float64 precisions ``Λ = (n/T) F + I/σ²`` (F from the K-FAC matvec, formed as a
    dense matrix here because p = 40).

    Stable comparison: the softmax G factor has rank C−1, so its smallest eigenvalue is float32 round-off
    (≈ ±1e-9 here, its sign depends on the CPU's float32 kernels); the aggregator clips factor eigenvalues
    at 0 (``FedBEnsAggregator.neg_log_posterior``), which moves the value by ≈ 1e-7. The reference therefore uses the same
    PSD projection of each factor (in float64), after which the two differ only by float64 round-off over
    different operation orders (eigenvalues vs LU log-determinant; eigenbasis vs dense quadratic form).
    Tolerance, derived per Gaussian term: ``p·eps·(p·κ(Λ) + ‖Λ‖·‖w−μ‖²)`` (log-determinant: each of p
    eigenvalues to relative p·eps·κ; quadratic form: p·eps·‖Λ‖‖v‖²), summed over terms, plus the prior's
    ``p·eps·‖w‖²/σ²``. Measured over seeds 0–5: |Δ| ≤ 6e-14 against a bound of ≈ 2.5e-11."""
    m, tmpl, msgs = _rank_deficient_kfac_msgs()
    T, s2 = 0.1, 0.1
    agg = FedBEnsAggregator("kfac", 2, tmpl, temperature=T, prior_var=s2)
    ok, bad = agg.validate(msgs, m.p, torch.float32)
    assert not bad
    f = agg.neg_log_posterior(ok)
    w = m.theta() + 0.1 * torch.randn(m.p)
    got = f(w)
    assert got.dtype == torch.float64
    wd = w.double()
    eps = torch.finfo(torch.float64).eps
    per_client, tol = [], m.p * eps * float(wd @ wd) / s2 * len(msgs)
    for msg in msgs.values():
        terms = []
        for j in range(2):
            fm = {k: (_psd(v[j].double()) if k[0] in "AG" else v[j].double())
                  for k, v in msg.items() if k not in ("w", "n")}
            K = fz.KFAC.from_message(fm, layout=tmpl)
            lam = float(msg["n"]) / T * K.to_dense() + torch.eye(m.p, dtype=torch.float64) / s2
            ev = torch.linalg.eigvalsh(lam)
            dv = wd - msg["w"][j].double()
            tol += m.p * eps * (m.p * float(ev.max() / ev.min()) + float(ev.max()) * float(dv @ dv))
            terms.append(0.5 * torch.linalg.slogdet(lam)[1] - 0.5 * dv @ lam @ dv)
        per_client.append(torch.logsumexp(torch.stack(terms), 0) - math.log(2))
    ref = -(sum(per_client) + (len(msgs) - 1) * (wd @ wd) / (2 * s2))
    assert abs(float(got - ref)) <= tol, (float(got - ref), tol)


# ------------------------------------------------------------------ 3./5. table input
def test_table_refuses_a_target_column_named_twice(tmp_path):
    from fedsciml.problems.table import read_table

    (tmp_path / "d.csv").write_text("a,y,y\n1,2,3\n2,3,4\n3,4,5\n")
    with pytest.raises(ValueError, match="target column 'y' appears 2 times"):
        read_table(str(tmp_path / "d.csv"))


def _npz_with_lying_header(path, shape=(100000, 100000)):
    """A real npz whose X member's header claims ``shape`` but holds 16 bytes of data."""
    import io
    import zipfile

    def member(arr_shape, data):
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": arr_shape})
        return buf.getvalue() + data
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("X.npy", member(shape, b"\0" * 16))
        zf.writestr("y.npy", member((2,), b"\0" * 16))


def test_npz_header_claiming_a_huge_array_is_refused_before_allocating(tmp_path, monkeypatch):
    from fedsciml.problems.table import read_table

    _npz_with_lying_header(tmp_path / "big.npz")
    assert (tmp_path / "big.npz").stat().st_size < 1000
    # np.load must never be reached (it would allocate 74.5 GiB): make it fail the test if it is
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("np.load reached"))
    with pytest.raises(ValueError, match=r"header claims shape \(100000, 100000\)"):
        read_table(str(tmp_path / "big.npz"))


@pytest.mark.parametrize("kind", ["missing", "directory", "not-zip", "fifo"])
def test_unreadable_tables_are_one_line_value_errors(tmp_path, kind):
    import os

    from fedsciml.problems.table import read_table

    p = tmp_path / "t.npz"
    if kind == "directory":
        p.mkdir()
    elif kind == "not-zip":
        p.write_text("hello\n")
    elif kind == "fifo":
        os.mkfifo(p)  # opening it for reading would block forever
    with pytest.raises(ValueError, match="cannot be read|not a regular file|not a zip"):
        read_table(str(p))


# ------------------------------------------------------------------ 6. a disk that fills during the final write
SOLVE = ["solve", "sin1d", "--clients", "2", "--n-samples", "10", "--rounds", "1", "--quiet"]
RIDGE = ["ridge", "--clients", "3", "--n-samples", "20", "--dim", "4"]


def _full_disk_under(monkeypatch, full_dir):
    """Every file opened for writing under ``full_dir`` raises ENOSPC on its first write (as a disk
    that filled during the run does: the pre-run check of the path passed)."""
    import builtins
    import errno

    import fedsciml.runtime.results as R

    real_open = builtins.open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, s):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, k):
            return getattr(self.f, k)

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

    def fake_open(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        if "w" in mode and str(path).startswith(str(full_dir)):
            return Full(f)
        return f
    monkeypatch.setattr(R, "open", fake_open, raising=False)
    # the output writer (runtime/files.py) opens by descriptor: a descriptor opened for writing under full_dir
    # gets the same full-disk file object from os.fdopen
    real_os_open, real_fdopen, full_fds = os.open, os.fdopen, set()

    def fake_os_open(path, flags, *a, **k):
        fd = real_os_open(path, flags, *a, **k)
        if flags & (os.O_WRONLY | os.O_RDWR) and str(path).startswith(str(full_dir)):
            full_fds.add(fd)
        return fd

    def fake_fdopen(fd, *a, **k):
        f = real_fdopen(fd, *a, **k)
        return Full(f) if fd in full_fds else f
    monkeypatch.setattr(os, "open", fake_os_open)
    monkeypatch.setattr(os, "fdopen", fake_fdopen)


@pytest.mark.parametrize("cmd", [SOLVE, RIDGE])
def test_results_survive_a_disk_that_fills_during_the_final_json_write(capsys, tmp_path, monkeypatch, cmd):
    import json
    import tempfile

    from fedsciml.cli import main

    full, spare = tmp_path / "full", tmp_path / "spare"
    full.mkdir()
    spare.mkdir()
    _full_disk_under(monkeypatch, full)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(spare))
    capsys.readouterr()
    code = main([*cmd, "--json", str(full / "r.json")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "No space left on device" in err and str(spare) in err
    saved = list(spare.glob("fedsciml-r-*.json"))
    assert len(saved) == 1 and saved[0].as_posix() in err
    payload = json.loads(saved[0].read_text())
    assert payload  # the finished run's results, complete JSON
    assert not (full / "r.json").exists() and not (full / "r.json.tmp").exists()  # no half file left


def test_results_are_printed_when_no_fallback_can_be_written(capsys, tmp_path, monkeypatch):
    import json

    import fedsciml.runtime.results as R
    from fedsciml.cli import main

    _full_disk_under(monkeypatch, tmp_path)
    monkeypatch.setattr(R, "_fallback_dirs", lambda: [str(tmp_path)])
    capsys.readouterr()
    code = main([*SOLVE, "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert code == 1 and "follow on standard output" in err and len(err.strip().splitlines()) == 1
    start = out.index("{\n")
    assert json.loads(out[start:])["method"]


# ------------------------------------------------------------------ 8. options accepted and ignored
IDLE = [  # (method, options, the option refused)
    ("fedavg", dict(trim=0.3), "trim"),
    ("fipa", dict(local="adam", safeguard=True, pinv_rtol=1e-5), "pinv_rtol"),
    ("fipa", dict(merge="qr", beta=0.1, safeguard=False, pinv_rtol=1e-5), "pinv_rtol"),
    ("fipa", dict(beta=0.5), "beta"),  # local gn: the safeguard sets β itself
    ("fipa", dict(adapt_c=0.1), "adapt_c"),
    ("fipa", dict(adapt_ctau=0.1), "adapt_ctau"),
    ("fipa", dict(rank=0, sketch="dense"), "sketch"),
    ("fipa", dict(rank=0, complement=True), "complement"),
    ("fipa", dict(local_steps=5), "local_steps"),
    ("fipa", dict(lr=0.1), "lr"),
    ("fipa", dict(local_loss="parts"), "local_loss"),
    ("fedavg", dict(local_damping=0.1), "local_damping"),
    ("centralized", dict(lr=0.1), "lr"),
    ("one-shot", dict(dp_delta=1e-3), "dp_delta"),
    ("one-shot", dict(dp_clip_a=2.0), "dp_clip_a"),
    ("one-shot", dict(dp_clip_b=2.0), "dp_clip_b"),
    ("one-shot", dict(dp_clip="separate"), "dp_clip"),
    ("one-shot", dict(dp_central=True), "dp_central"),
    ("one-shot", dict(dp_noise_aware=True), "dp_noise_aware"),
    ("one-shot", dict(project_sketch="srht"), "project_sketch"),
    ("one-shot", dict(sigma=0.1, cv_sigmas=[1.0, 2.0]), "sigma"),
]


@pytest.mark.parametrize("method,opts,name", IDLE)
def test_an_option_that_has_no_effect_is_refused_by_name(method, opts, name):
    from fedsciml.options import OptionError
    from fedsciml.runtime.driver import get_method

    with pytest.raises(OptionError, match=f"option {name} has no effect here"):
        get_method(method).make_config(opts)


def test_options_that_apply_are_accepted_and_defaults_passed_along_are_harmless():
    from fedsciml.runtime.driver import get_method

    c = get_method("fedavg").make_config(dict(robust="trimmed", trim=0.3))
    assert (c.robust, c.trim) == ("trimmed", 0.3)
    c = get_method("fipa").make_config(dict(local="adam", local_steps=5, lr=0.1, local_loss="parts", safeguard=False,
                                            pinv_rtol=1e-5, adaptive=True, adapt_c=0.1))
    assert (c.local, c.local_steps, c.lr, c.local_loss, c.safeguard, c.adaptive) == ("adam", 5, 0.1, "parts", False,
                                                                                      True)
    c = get_method("one-shot").make_config(dict(dp_epsilon=1.0, dp_delta=1e-3, dp_central=True, project=3,
                                                project_sketch="srht"))
    assert c.dp()["central"] and (c.project, c.project_sketch) == (3, "srht")
    c = get_method("one-shot").make_config(dict(project_sketch="gaussian"))  # the default, forwarded by a wrapper
    assert c.project is None and c.project_sketch == "gaussian"
    assert get_method("fipa").make_config(dict(preset="paper")).preset == "paper"  # the preset's own cutoff applies


def test_preset_with_an_explicit_none_cutoff_takes_none():
    from fedsciml.methods.fipa import FIPAConfig

    assert FIPAConfig.from_options(preset="paper").pinv_rtol == 1e-5
    assert FIPAConfig.from_options(preset="paper", pinv_rtol=None).pinv_rtol is None  # None: the p·eps cutoff


def _cli(capsys, *args):
    from fedsciml.cli import main

    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("args,want", [
    (["--method", "fedavg", "--trim", "0.3"], "--trim has no effect here"),
    (["--method", "fipa", "--merge", "qr", "--pinv-rtol", "1e-5"], "--pinv-rtol has no effect here"),
    (["--method", "fipa", "--local", "adam", "--adapt-c", "0.1"], "--adapt-c has no effect here"),
])
def test_cli_refuses_idle_options_in_one_line_exit_2(capsys, args, want):
    code, out, err = _cli(capsys, *SOLVE, *args)
    assert code == 2 and want in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "method" not in out  # nothing ran


def test_compare_drops_an_option_where_it_is_idle_but_refuses_it_where_idle_everywhere(capsys):
    code, out, err = _cli(capsys, *SOLVE, "--method", "fipa", "--compare", "fedavg", "--local-steps", "3")
    assert code == 0, err  # fedavg's local Adam uses it; fipa's local gn does not get it
    code, out, err = _cli(capsys, *SOLVE, "--method", "fipa", "--compare", "fedavg", "--adapt-c", "0.1")
    assert code == 2 and "--adapt-c has no effect" in err


@pytest.mark.parametrize("cmd,flag", [(SOLVE, "--json"), (SOLVE, "--out"), (SOLVE, "--checkpoint"), (RIDGE, "--json")])
def test_empty_output_paths_are_refused(capsys, cmd, flag):
    code, out, err = _cli(capsys, *cmd, flag, "")
    assert code == 2 and f"{flag} must be a non-empty path" in err and "method" not in out


# ------------------------------------------------------------------ 4./9. checkpoints: special files, tampering
def _fedavg_run(**opts):
    return METHODS["fedavg"](None, make_clients(), THETA0, evaluate, local_steps=2, **opts)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_resume_from_a_fifo_or_dev_zero_checkpoint_is_refused_at_once(tmp_path, kind):
    import os
    import signal

    from fedsciml.runtime import checkpoint as ckpt

    d = tmp_path / "ck"
    d.mkdir()
    if kind == "fifo":
        os.mkfifo(d / "state.pt")  # the old reader blocked in open() forever
    else:
        os.symlink("/dev/zero", d / "state.pt")  # the old reader read until memory ran out
    signal.signal(signal.SIGALRM, lambda *a: pytest.fail("reading the checkpoint hung"))
    signal.alarm(20)
    try:
        with pytest.raises(ckpt.CheckpointError, match="not a regular file"):
            _fedavg_run(rounds=2, checkpoint=str(d), resume=True)
    finally:
        signal.alarm(0)


@pytest.mark.parametrize("field,value,want", [("round", 99, "round 99 is outside"), ("round", -5, "round -5 is outside"),
                                              ("elapsed", -1.0, "elapsed time"), ("floats_up", -3, "floats_up")])
def test_tampered_checkpoint_with_a_recomputed_checksum_is_refused(tmp_path, field, value, want):
    from fedsciml.runtime import checkpoint as ckpt

    d = tmp_path / "ck"
    _fedavg_run(rounds=1, checkpoint=str(d))
    st = ckpt.read(ckpt.path_in(str(d)))
    st[field] = value
    ckpt.save(str(d), st)  # a valid checksum over the forged state
    with pytest.raises(ckpt.CheckpointError, match=want):
        _fedavg_run(rounds=2, checkpoint=str(d), resume=True)


def test_tampered_checkpoint_parameters_non_finite_are_refused(tmp_path):
    from fedsciml.runtime import checkpoint as ckpt

    d = tmp_path / "ck"
    _fedavg_run(rounds=1, checkpoint=str(d))
    st = ckpt.read(ckpt.path_in(str(d)))
    st["strategy"]["theta"] = st["strategy"]["theta"] * float("inf")
    ckpt.save(str(d), st)
    with pytest.raises(ckpt.CheckpointError, match="stored parameters"):
        _fedavg_run(rounds=2, checkpoint=str(d), resume=True)


# ------------------------------------------------------------------ 9. message validation
def test_a_fractional_sample_count_is_rejected_by_name():
    from fedsciml.methods.aggregators import FedAvgAggregator

    msgs = {0: {"delta": torch.ones(3, dtype=torch.float64), "n": torch.tensor([0.5], dtype=torch.float64)}}
    ok, bad = FedAvgAggregator().validate(msgs, 3, torch.float64)
    assert not ok and "field 'n' must be a whole number" in bad[0]


def test_one_client_sending_1e300_is_rejected_by_name_and_the_fusion_goes_on():
    import fedsciml as fs

    def hook(rnd, cid, msg):
        if cid != 1:
            return msg
        return {k: (torch.full_like(v, 1e300) if k != "n" else v) for k, v in msg.items()}
    res = fs.solve("ridge-linear", "one-shot", clients=3, seed=0, message_hook=hook)
    rej = res.extra["rejections"]
    assert [r["client"] for r in rej] == [1] and "magnitude 1e+300" in rej[0]["reason"]
    assert math.isfinite(res.final["mse"])
    ref = fs.solve("ridge-linear", "one-shot", clients=3, seed=0,
                   message_hook=lambda r, c, m: m if c != 1 else {**m, "n": torch.full_like(m["n"], 0.5)})
    assert torch.equal(torch.as_tensor(res.theta), torch.as_tensor(ref.theta))  # bitwise: the same two clients fused


def test_a_meta_device_tensor_is_rejected_by_name():
    from fedsciml.methods.aggregators import FedAvgAggregator

    msgs = {0: {"delta": torch.empty(3, dtype=torch.float64, device="meta"), "n": torch.tensor([2.0], dtype=torch.float64)}}
    ok, bad = FedAvgAggregator().validate(msgs, 3, torch.float64)
    assert not ok and "field 'delta'" in bad[0] and "meta" in bad[0]


# ------------------------------------------------------------------ 4. a Flower engine that fails to start
def test_flower_transport_stops_waiting_for_nodes_once_the_engine_stopped():
    import threading
    import time

    pytest.importorskip("flwr")
    from fedsciml.engines.flower.transport import EngineStopped, FlowerTransport

    class NoNodes:  # a grid whose engine never started: no node ever registers
        def get_node_ids(self):
            return []

    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(EngineStopped):
        FlowerTransport(NoNodes(), {}, 2, connect_timeout_s=300.0, stop=stop)
    assert time.monotonic() - t0 < 10  # not the 300 s connect timeout


def test_flower_engine_failure_is_one_clear_error(monkeypatch):
    """The Flower engine runs ``flwr run`` on a simulation SuperLink; a run that ends without its result (here:
    Ray could not start its node, as its log says) is one EngineFailed naming the root cause."""
    pytest.importorskip("flwr")
    from fedsciml.engines.flower import deploy
    from fedsciml.engines.flower import simulation as fsim
    from fedsciml.problems import get_problem
    from fedsciml.runtime.loop import RoundFailed

    def crashed(self, proc, outs, timeout_s=600.0, echo=None):  # what wait_files raises with the run's log
        raise RuntimeError("the Flower run ended without its result (flwr run status 1); its log:\n"
                           "ERROR :  RuntimeError: Simulation Runtime crashed.\n"
                           "Exception: The current node timed out during startup.\n")
    monkeypatch.setattr(deploy.LocalSuperLink, "start", lambda self: self)  # no processes in this test
    monkeypatch.setattr(deploy.LocalSuperLink, "submit_config", lambda self, *a, **k: None)
    monkeypatch.setattr(deploy.LocalSuperLink, "wait_files", crashed)
    with pytest.raises(fsim.EngineFailed, match="node timed out during startup") as ei:
        fsim.solve(get_problem("sin1d", n_samples=10), "fedavg", clients=2, rounds=1)
    assert isinstance(ei.value, RoundFailed)  # the CLI: one line, exit 1


# ------------------------------------------------------------------ 10. robust one-shot / gn: a consistent liar
W_FAKE = 3.0


def _consistent_liar(cid=2, weight=100.0):
    """Client ``cid`` sends the statistics of fabricated rows ``(A, A·w_fake)`` at θ₀ = 0, duplicated ``weight``
    times: ``H' = c·AᵀA``, ``g' = −c·AᵀA w_fake``, ``loss' = ½c·w_fakeᵀAᵀA w_fake``, ``n' = c·n`` — every
    statistic consistent with real data (it passes the GN consistency check), just not this client's."""
    from fedsciml.core import linalg

    def hook(rnd, c, msg):
        if c != cid:
            return msg
        if "H" not in msg:  # gn's loss-only query at a trial point: the same duplicated count
            return {**msg, "n": weight * msg["n"]}
        p = msg["g"].numel()
        H = linalg.unpack_upper(msg["H"], p)
        w = torch.full((p,), W_FAKE, dtype=H.dtype)
        return {"H": weight * msg["H"], "g": -weight * (H @ w), "loss": (0.5 * weight * (w @ H @ w)).reshape(1),
                "n": weight * msg["n"]}
    return hook


def _drop(cid):  # the same client made invalid (a fractional count): the others' plain fusion
    return lambda r, c, m: m if c != cid else {**m, "n": torch.full_like(m["n"], 0.5)}


@pytest.mark.parametrize("method", ["one-shot", "gn"])
def test_screen_removes_a_consistent_liar_and_leaves_honest_runs_unchanged(method):
    import fedsciml as fs

    kw = dict(clients=6, seed=0, **({"rounds": 3} if method == "gn" else {}))
    plain = fs.solve("ridge-linear", method, **kw)
    screened = fs.solve("ridge-linear", method, screen=20.0, **kw)
    assert screened.extra["rejections"] == []  # honest clients: nobody dropped, bitwise the plain run
    assert torch.equal(torch.as_tensor(plain.theta), torch.as_tensor(screened.theta))
    from fedsciml.runtime.loop import RoundFailed

    try:  # the lie passes every message check at θ₀ and wrecks the fit (or, for gn, the run)
        attacked = fs.solve("ridge-linear", method, message_hook=_consistent_liar(), **kw)
        assert attacked.final["mse"] > 10 * plain.final["mse"]
    except RoundFailed:
        assert method == "gn"
    robust = fs.solve("ridge-linear", method, screen=20.0, message_hook=_consistent_liar(), **kw)
    rej = robust.extra["rejections"]
    assert [r["client"] for r in rej] == [2] and "influence" in rej[0]["reason"]
    if method == "one-shot":  # bitwise: the same five clients' statistics summed in the same order
        others = fs.solve("ridge-linear", method, message_hook=_drop(2), **kw)
        assert torch.equal(torch.as_tensor(robust.theta), torch.as_tensor(others.theta))
    else:  # gn on the five honest clients alone, same LM damping rule
        from fedsciml.problems import get_problem

        prob = get_problem("ridge-linear")
        objs = prob.client_objectives(6, seed=0)
        th, _, _ = METHODS["gn"](prob, [o for i, o in enumerate(objs) if i != 2], prob.init_params(0),
                                 prob.evaluate, rounds=3)
        assert torch.allclose(torch.as_tensor(robust.theta), th, rtol=1e-8, atol=1e-10)


def test_influence_screen_against_a_direct_leave_one_out_computation():
    """``I_m = ½(δ − δ_{−m})ᵀ H_{−m} (δ − δ_{−m})`` equals the others' quadratic model at δ minus its minimum,
    computed here from the clients' rows with numpy lstsq (independent reference)."""
    from fedsciml.runtime.robust import influence_screen

    rng = np.random.default_rng(0)
    As = [rng.standard_normal((8, 3)) for _ in range(5)]
    bs = [A @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.standard_normal(8) for A in As]
    Hs = torch.tensor(np.stack([A.T @ A for A in As]))
    gs = torch.tensor(np.stack([-A.T @ b for A, b in zip(As, bs)]))
    sc = influence_screen(Hs, gs, kappa=1e9)
    assert sc.dropped == []
    w_all = np.linalg.lstsq(np.vstack(As), np.concatenate(bs), rcond=None)[0]
    for m in range(5):
        A_o = np.vstack([A for j, A in enumerate(As) if j != m])
        b_o = np.concatenate([b for j, b in enumerate(bs) if j != m])
        w_o = np.linalg.lstsq(A_o, b_o, rcond=None)[0]
        excess = 0.5 * (np.sum((A_o @ w_all - b_o) ** 2) - np.sum((A_o @ w_o - b_o) ** 2))
        assert sc.influence[m] == pytest.approx(excess, rel=1e-8, abs=1e-12)


# ------------------------------------------------------------------ 11. FedFisher: the paper's uniform start
def test_fedfisher_uniform_start_is_the_plain_mean_and_samples_is_the_weighted_one():
    from fedsciml.images.aggregators import FedFisherAggregator

    p = 4
    ws = [torch.randn(p, dtype=torch.float64) for _ in range(3)]
    msgs = {c: {"w": w, "fisher": torch.ones(p, dtype=torch.float64), "n": torch.tensor([float(n)], dtype=torch.float64)}
            for c, (w, n) in enumerate(zip(ws, (1, 2, 7)))}
    for start, want in (("uniform", sum(ws) / 3), ("samples", (ws[0] + 2 * ws[1] + 7 * ws[2]) / 10)):
        agg = FedFisherAggregator("diag", evaluate=lambda v: 0.0, steps=0, start=start)  # steps 0: the start itself
        assert torch.allclose(agg.aggregate(None, msgs), want, rtol=1e-14, atol=1e-15)
    with pytest.raises(ValueError, match="start must be one of"):
        FedFisherAggregator("diag", start="median")


def test_fedfisher_start_without_a_fedfisher_method_is_refused(capsys):
    code, out, err = _cli(capsys, "bench", "images", "--quiet", "--clients", "2", "--epochs", "1", "--methods",
                          "fedavg", "--fedfisher-start", "uniform")
    assert code == 2 and "--fedfisher-start has no effect here" in err


def test_regmean_refuses_when_no_alpha_gives_a_finite_score():
    from fedsciml.images.aggregators import RegMeanAggregator

    agg = RegMeanAggregator.__new__(RegMeanAggregator)  # only aggregate()'s selection is under test here
    agg.alphas, agg.evaluate = (0.1, 0.9), (lambda w: float("nan"))
    agg.merge = lambda messages, a: torch.ones(3)
    with pytest.raises(NonFiniteObjective, match="no α gave a finite"):
        agg.aggregate(None, {0: {}})
    agg.evaluate = lambda w: 0.5 if float(w[0]) == 2.0 else float("nan")
    agg.merge = lambda messages, a: torch.full((3,), 1.0 / a if a == 0.9 else 2.0)
    assert float(agg.aggregate(None, {0: {}})[0]) == 2.0 and agg.chosen_alpha == 0.1


def test_loco_cv_never_picks_sigma_by_argmin_over_nan():
    from fedsciml.core import linalg
    from fedsciml.core.loco import loco_cv

    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(6, 3, generator=g, dtype=torch.float64), torch.randn(6, generator=g, dtype=torch.float64))
            for _ in range(3)]
    Gs = torch.stack([linalg.pack_upper(A.T @ A) for A, _ in data])
    hs = torch.stack([A.T @ b for A, b in data])
    b_sq = torch.stack([b @ b for _, b in data])  # the server scores each client from its own statistics
    ok = loco_cv(Gs, hs, [0.1, 1.0], b_sq)
    assert ok["sigma"] in (0.1, 1.0)
    bad = b_sq * float("nan")  # every client's validation loss is NaN
    with pytest.raises(ValueError, match="no σ of the grid"):
        loco_cv(Gs, hs, [0.1, 1.0], bad)


def test_flower_refuses_a_plugin_problem_up_front(tmp_path):
    pytest.importorskip("flwr")
    from fedsciml.engines.flower.simulation import _check_registered
    from fedsciml.problems import get_problem
    from fedsciml.problems.registry import REGISTRY

    _check_registered(get_problem("sin1d"))  # a built-in problem: fine
    plugin = type("AdvPlugin", (REGISTRY["sin1d"],), {"__module__": "fedsciml_plugin_mine", "name": "adv-plugin"})
    REGISTRY["adv-plugin"] = plugin
    try:
        with pytest.raises(ValueError, match="which Flower.s nodes do not import; install it as a package"):
            _check_registered(plugin())
    finally:
        del REGISTRY["adv-plugin"]


def test_one_shot_repair_without_dp_is_refused_not_ignored():
    """repair (the PSD repair of the noisy fused statistics) acts only with DP noise: repair=False without DP was
    accepted and changed nothing; now one line naming it.  With DP it is accepted; the default passes."""
    from fedsciml.options import OptionError
    from fedsciml.runtime.driver import get_method

    one = get_method("one-shot")
    with pytest.raises(OptionError, match=r"one-shot option repair has no effect here: .*DP is off"):
        one.make_config(dict(repair=False))
    assert one.make_config(dict(repair=True)).repair is True
    assert one.make_config(dict(repair=False, dp_epsilon=1.0)).repair is False
