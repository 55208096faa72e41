"""Hardening (issue 11): no code runs from a file, corrupt files give one line, bad setups stop early.

Checkpoints are read with ``weights_only=True`` behind a SHA-256 header; CIFAR
batches with a restricted unpickler; the setup check looks at every point.
"""
import hashlib
import math
import io
import os
import pickle
import sys

import numpy as np
import pytest
import torch

from fedsciml.cli import main
from fedsciml.runtime import checkpoint as ckpt
from fedsciml.methods import METHODS

sys.path.insert(0, os.path.dirname(__file__))
from test_federated import THETA0, evaluate, make_clients  # noqa: E402

SMALL = ["sin1d", "--clients", "2", "--n-samples", "20", "--method", "fedavg", "--local-steps", "3", "--quiet"]


def run(method, objs=None, **opts):
    objs = objs if objs is not None else make_clients()
    return METHODS[method](None, objs, THETA0, evaluate, **opts)


def _cli(capsys, *args):
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_line(err, *words):
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)


class _Payload:
    """Unpickling this calls ``os.mkdir(marker)``: the classic ``__reduce__`` code-execution payload."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _with_header(payload: bytes) -> bytes:
    """A file with a *valid* checksum header: the checksum is no defense against a forger, weights_only is."""
    return ckpt.MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


# --- item 1: no code runs from a checkpoint -----------------------------------------------------------


@pytest.mark.parametrize("header", [True, False])
def test_crafted_checkpoint_is_refused_and_runs_no_code(tmp_path, header):
    d = tmp_path / "ck"
    run("fedavg", rounds=1, local_steps=2, checkpoint=str(d))
    marker = tmp_path / "pwned"
    good = ckpt.read(ckpt.path_in(str(d)))
    good["rows"].append(_Payload(marker))
    buf = io.BytesIO()
    torch.save(good, buf)
    (d / "state.pt").write_bytes(_with_header(buf.getvalue()) if header else buf.getvalue())
    with pytest.raises(ckpt.CheckpointError, match="state.pt") as e:
        run("fedavg", rounds=2, local_steps=2, checkpoint=str(d), resume=True)
    assert len(str(e.value).splitlines()) == 1
    assert not marker.exists()


def test_crafted_checkpoint_on_the_command_line_exits_2_with_one_line(tmp_path, capsys):
    ck = tmp_path / "ck"
    assert _cli(capsys, "solve", *SMALL, "--rounds", "1", "--checkpoint", str(ck))[0] == 0
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    pickle.dump({"fingerprint": {}, "x": _Payload(marker)}, buf, protocol=2)
    (ck / "state.pt").write_bytes(_with_header(buf.getvalue()))
    code, _, err = _cli(capsys, "solve", *SMALL, "--rounds", "2", "--checkpoint", str(ck), "--resume")
    assert code == 2
    _one_line(err, "state.pt", "refused")
    assert not marker.exists()


def test_checkpoint_stores_only_plain_data():
    st = {"a": np.float64(1.5), "b": np.int64(3), "c": (1, 2), "d": np.arange(3), "e": [None, "s", True]}
    out = ckpt.plain(st)
    assert out["a"] == 1.5 and type(out["a"]) is float and type(out["b"]) is int and out["c"] == [1, 2]
    assert torch.equal(out["d"], torch.arange(3))
    with pytest.raises(TypeError, match=r"\['x'\].*Path"):
        ckpt.plain({"x": __import__("pathlib").Path(".")})
    with pytest.raises(TypeError, match="key of type"):
        ckpt.plain({(1, 2): 0})


def test_numpy_values_in_history_rows_survive_a_resume(tmp_path):
    """A user's evaluate may return numpy floats: they are stored as Python floats, readable with weights_only."""
    def ev(theta):
        return {"mse": np.float64(evaluate(theta)["mse"])}

    objs = make_clients()
    d = str(tmp_path / "ck")
    METHODS["fedavg"](None, objs, THETA0, ev, rounds=1, local_steps=2, checkpoint=d)
    _, rows, info = METHODS["fedavg"](None, objs, THETA0, ev, rounds=2, local_steps=2, checkpoint=d, resume=True)
    assert info["resumed"] and len(rows) == 3


# --- item 2: checkpoint integrity ---------------------------------------------------------------------


def _corrupt(path, how, theta):
    raw = bytearray(open(path, "rb").read())
    if how == "truncated":
        raw = raw[: len(raw) // 2]
    elif how == "garbage":
        raw = bytearray(os.urandom(len(raw)))
    elif how == "empty":
        raw = bytearray()
    elif how == "flipped parameter bit":
        at = bytes(raw).find(theta.numpy().tobytes())
        assert at > 0, "the stored parameters are kept as raw float64 bytes"
        raw[at + 8 * 5 + 3] ^= 0x10  # one bit of the 6th parameter
    with open(path, "wb") as f:
        f.write(raw)


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty", "flipped parameter bit"])
def test_corrupt_checkpoint_gives_one_line_naming_the_file(tmp_path, capsys, how):
    ck = tmp_path / "ck"
    assert _cli(capsys, "solve", *SMALL, "--rounds", "2", "--checkpoint", str(ck))[0] == 0
    theta = ckpt.read(ckpt.path_in(str(ck)))["strategy"]["theta"]
    _corrupt(ckpt.path_in(str(ck)), how, theta)
    code, _, err = _cli(capsys, "solve", *SMALL, "--rounds", "3", "--checkpoint", str(ck), "--resume")
    assert code == 2
    _one_line(err, str(ck / "state.pt"))


def test_checkpoint_with_a_wrong_structure_gives_one_line(tmp_path):
    d = tmp_path / "ck"
    run("fedavg", rounds=1, local_steps=2, checkpoint=str(d))
    st = ckpt.read(ckpt.path_in(str(d)))
    st["strategy"]["theta"] = torch.zeros(3, dtype=torch.float64)  # forged: a valid checksum, wrong parameters
    ckpt.save(str(d), st)
    with pytest.raises(ckpt.CheckpointError, match="stored parameters"):
        run("fedavg", rounds=2, local_steps=2, checkpoint=str(d), resume=True)
    del st["rows"]
    ckpt.save(str(d), st)
    with pytest.raises(ckpt.CheckpointError, match="'rows'"):
        run("fedavg", rounds=2, local_steps=2, checkpoint=str(d), resume=True)


def test_leftover_temporary_file_is_removed_and_resume_gives_the_same_numbers(tmp_path):
    objs = make_clients()
    full, rows_full, _ = run("fedavg", objs, rounds=3, local_steps=2, seed=1)
    d = tmp_path / "ck"
    run("fedavg", objs, rounds=1, local_steps=2, seed=1, checkpoint=str(d))
    (d / "state.pt.tmp").write_bytes(b"half a checkpoint")  # a write killed before os.replace
    th, rows, info = run("fedavg", objs, rounds=3, local_steps=2, seed=1, checkpoint=str(d), resume=True)
    assert not (d / "state.pt.tmp").exists() and info["resumed"]
    # bitwise: the resumed run performs the same operations in the same order as the uninterrupted one
    assert torch.equal(th, full) and [r["loss"] for r in rows] == [r["loss"] for r in rows_full]


def test_unwritable_checkpoint_directory_gives_one_line(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = _cli(capsys, "solve", *SMALL, "--rounds", "1", "--checkpoint", str(f / "sub"))
    assert code == 2
    _one_line(err, "checkpoint")


# --- item 1: CIFAR batches are read with a restricted unpickler ---------------------------------------


class _Py2Pickler(pickle._Pickler):
    """Writes bytes as Python 2 ``str`` (SHORT_BINSTRING/BINSTRING), as the real CIFAR files (cPickle) do."""

    dispatch = pickle._Pickler.dispatch.copy()

    def save_bytes(self, obj):
        n = len(obj)
        self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj if n < 256
                   else pickle.BINSTRING + n.to_bytes(4, "little") + obj)
        self.memoize(obj)

    dispatch[bytes] = save_bytes


def _py2_dumps(obj) -> bytes:
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")  # numpy 1.x names


def _batch(n, k, key, seed):
    rng = np.random.default_rng(seed)
    return {b"batch_label": b"training batch 1 of 5", key: rng.integers(0, k, n).tolist(),
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"filenames": [b"img%d.png" % i for i in range(n)]}


def _write_cifar10(d, dumps):
    d.mkdir(parents=True, exist_ok=True)
    batches = {"data_batch_1": _batch(4, 10, b"labels", 0), "test_batch": _batch(3, 10, b"labels", 1)}
    for name, b in batches.items():
        (d / name).write_bytes(dumps(b))
    return batches


@pytest.mark.parametrize("fmt", ["python2 cPickle", "protocol 2", "protocol 4", "protocol 5"])
def test_cifar_batches_in_every_pickle_format_load(tmp_path, fmt):
    from fedsciml.images import data as D

    dumps = _py2_dumps if fmt.startswith("python2") else (lambda b: pickle.dumps(b, protocol=int(fmt[-1])))
    if fmt.startswith("python2"):
        raw = dumps(_batch(1, 10, b"labels", 0))
        assert b"cnumpy.core.multiarray\n_reconstruct" in raw and b"_codecs" not in raw  # the real files' layout
    batches = _write_cifar10(tmp_path, dumps)
    data = D.load("cifar10", str(tmp_path))
    assert data.y_train.tolist() == batches["data_batch_1"][b"labels"]
    assert data.y_test.tolist() == batches["test_batch"][b"labels"]
    back = D._unpickle(str(tmp_path / "test_batch"))[b"data"]
    assert np.array_equal(back, batches["test_batch"][b"data"])  # bytes read back as written: exact


class _Call:
    """Unpickling this calls ``fn(*args)``."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def test_hostile_cifar_batch_is_refused_and_runs_no_code(tmp_path, capsys):
    from fedsciml.images import data as D

    marker = tmp_path / "pwned"
    _write_cifar10(tmp_path, lambda b: pickle.dumps(b, protocol=2))
    hostile = _batch(2, 10, b"labels", 3)
    hostile[b"filenames"] = [_Call(os.mkdir, str(marker))]
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps(hostile, protocol=4))
    with pytest.raises(ValueError, match=r"data_batch_1.*posix.mkdir|data_batch_1.*os.mkdir"):
        D.load("cifar10", str(tmp_path))
    assert not marker.exists()
    code, _, err = _cli(capsys, "bench", "images", "--dataset", "cifar10", "--data-dir", str(tmp_path), "--quiet",
                        "--methods", "fedavg", "--epochs", "1", "--clients", "2")
    assert code == 2 and not marker.exists()
    _one_line(err, "data_batch_1", "refused")


@pytest.mark.parametrize("payload", [
    _Call(__import__("codecs").encode, "abc", "rot13"),  # _codecs.encode is admitted for latin-1 only
    _Call(np.frombuffer, b"\0" * 8),                     # numpy, but not one of the array-pickle helpers
    _Call(eval, "1+1"),
])
def test_cifar_unpickler_admits_only_the_array_helpers(tmp_path, payload):
    from fedsciml.images import data as D

    p = tmp_path / "data_batch_1"
    p.write_bytes(pickle.dumps({b"data": payload, b"labels": []}, protocol=2))
    with pytest.raises(ValueError, match="data_batch_1"):
        D._unpickle(str(p))


@pytest.mark.parametrize("content,word", [
    (b"", "not a CIFAR python batch"),
    (b"\x80\x04garbage", "not a CIFAR python batch"),
    (pickle.dumps([1, 2, 3]), "holds a list"),
    (pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}), "shape"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.float64), b"labels": [0, 1]}), "uint8"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}), "labels"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}), "[0, 10)"),
    (pickle.dumps({b"data": np.zeros((2, 3072), np.uint8)}), "lacks"),
])
def test_malformed_cifar_batch_gives_one_clear_error_naming_the_file(tmp_path, content, word):
    from fedsciml.images import data as D

    _write_cifar10(tmp_path, lambda b: pickle.dumps(b, protocol=2))
    (tmp_path / "test_batch").write_bytes(content)
    with pytest.raises(ValueError, match="test_batch") as e:
        D.load("cifar10", str(tmp_path))
    assert word in str(e.value) and len(str(e.value).splitlines()) == 1


# --- item 10: the setup check looks at every point; a client rejected round after round stops the run -----


def _nan_beyond(limit):
    from test_federated import NET

    def fn(theta, point):
        x, y = point
        r = NET(theta, x) - y
        return torch.where(x[0] > limit, torch.full_like(r, float("nan")), r)
    return fn


def test_setup_check_finds_a_residual_bad_on_a_sliver_of_the_domain():
    from fedsciml.runtime.checks import SetupError, check_objectives
    from fedsciml.core.objective import PointwiseLeastSquares, ResidualPart

    objs = make_clients()
    x = torch.linspace(0, 1, 201, dtype=torch.float64).reshape(-1, 1)
    bad = PointwiseLeastSquares([ResidualPart("data", _nan_beyond(0.99), (x, torch.sin(x[:, 0])))], THETA0.numel())
    with pytest.raises(SetupError, match=r"client 3: residual part 'data' is not finite at the initial parameters "
                                         r"at point 199 \(x = \[0\.995\]: residual nan; 2 of 201 points bad\)"):
        check_objectives([*objs, bad], THETA0)
    check_objectives(objs, THETA0)  # the good clients pass


_SLIVER = """
import math, torch
import fedsciml as fs

@fs.register
class Sliver(fs.PDE):
    \"\"\"−u″ = π² sin πx, with a residual that is NaN for x > 0.99 only\"\"\"
    name = "hardening-sliver"
    def exact(self, x):
        return torch.sin(math.pi * x[..., 0])
    def equation(self, u, x):
        r = -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
        return torch.where(x[..., 0] > 0.99, torch.full_like(r, float("nan")), r)
"""


def test_setup_check_reaches_the_api_and_the_command_line(tmp_path, capsys):
    import fedsciml as fs
    from fedsciml.runtime.checks import SetupError

    plugin = tmp_path / "sliver.py"
    plugin.write_text(_SLIVER)
    code, _, err = _cli(capsys, "--plugin", str(plugin), "solve", "hardening-sliver", "--n-interior", "400",
                        "--clients", "2", "--method", "fedavg", "--rounds", "2", "--quiet")
    assert code == 2
    _one_line(err, "client 1", "'interior'", "point", "x = [0.99")
    with pytest.raises(SetupError, match=r"client 1: residual part 'interior' is not finite .* at point \d+ \(x = \[0\.99"):
        fs.solve(fs.get_problem("hardening-sliver", n_interior=400), method="fedavg", clients=2, rounds=1)


def test_a_client_rejected_every_round_stops_the_run_after_a_bounded_number_of_rounds():
    from fedsciml.runtime.loop import RoundConfig, RoundFailed

    limit = RoundConfig().max_rejected_rounds
    assert 1 < limit <= 20

    def always(rnd, cid, msg):
        return {**msg, "delta": msg["delta"] * float("nan")} if cid == 1 else msg

    with pytest.raises(RoundFailed, match=rf"round {limit}: client 1 was rejected in {limit} consecutive rounds "
                                          r"\(last reason: field 'delta' contains non-finite"):
        run("fedavg", rounds=limit + 20, local_steps=2, message_hook=always)

    def every_other(rnd, cid, msg):  # intermittent faults are dropped round by round, the run goes on
        return always(rnd, cid, msg) if rnd % 2 else msg

    _, rows, info = run("fedavg", rounds=limit + 5, local_steps=2, message_hook=every_other)
    assert info["rounds"] == limit + 5 and len(info["rejections"]) == (limit + 6) // 2


# --- item 12: examples/ridge_table_dp.py with a user's table ------------------------------------------


def _example():
    from _examples import load_example

    return load_example("ridge_table_dp", "ridge_table_dp_hardening")


def _good_rows(n=60, sites=4, seed=0):
    rng = np.random.default_rng(seed)
    rows = [["site", "x1", "x2", "x3", "y"]]
    for i in range(n):
        x = rng.normal(size=3)
        rows.append([f"s{i % sites}", *[f"{v:.6f}" for v in x], f"{x @ [1.0, -2.0, 0.5] + 0.1 * rng.normal():.6f}"])
    return rows


def _csv(rows):
    return "\n".join(",".join(r) for r in rows) + "\n"


def _edit(fn):
    rows = _good_rows()
    fn(rows)
    return _csv(rows)


def _set(i, j, v):
    def fn(rows):
        rows[i][j] = v
    return fn


BAD_TABLES = {
    "empty file": "",
    "header only": "site,x1,x2,x3,y\n",
    "header and blank lines": "site,x1,x2,x3,y\n\n\n",
    "no target column": _csv([[c for c in r[:-1]] for r in _good_rows()]),
    "no client column": _csv([r[1:] for r in _good_rows()]),
    "NaN feature": _edit(_set(5, 1, "nan")),
    "inf target": _edit(_set(7, 4, "inf")),
    "string feature": _edit(_set(3, 2, "abc")),
    "empty feature cell": _edit(_set(3, 3, "")),
    "empty client id": _edit(_set(9, 0, "")),
    "one row": _csv(_good_rows()[:2]),
    "two rows": _csv(_good_rows()[:3]),
    "one group": _csv([_good_rows()[0]] + [["s0", *r[1:]] for r in _good_rows()[1:]]),
    "duplicate column": _csv([["site", "x1", "x1", "x3", "y"]] + _good_rows()[1:]),
    "short row": _edit(lambda rows: rows[4].pop()),
    "long row": _edit(lambda rows: rows[4].append("1.0")),
    "no feature columns": _csv([[r[0], r[4]] for r in _good_rows()]),
    "all-zero features": _csv([_good_rows()[0]] + [[r[0], "0", "0", "0", r[4]] for r in _good_rows()[1:]]),
    "all-zero target": _csv([_good_rows()[0]] + [r[:4] + ["0"] for r in _good_rows()[1:]]),
    "overflowing feature": _edit(_set(2, 1, "1.5e308")),
    "overflowing target": _edit(_set(2, 4, "1e200")),
    "empty header names": ",,,,\n" + _csv(_good_rows()[1:]),
    "semicolon separated": _csv(_good_rows()).replace(",", ";"),
    "binary garbage": bytes(range(256)) * 4,
    "NUL byte in a value": _edit(_set(3, 1, "1\x000")),
    "quote not closed": _edit(_set(6, 2, '"1.0')),
}


@pytest.mark.parametrize("name", sorted(BAD_TABLES))
def test_every_bad_table_gives_one_line_and_exit_2(tmp_path, capsys, name):
    mod = _example()
    p = tmp_path / "t.csv"
    content = BAD_TABLES[name]
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    capsys.readouterr()
    assert mod.cli(["--csv", str(p), "--epsilons", "inf", "--quick"]) == 2, name
    err = capsys.readouterr().err
    _one_line(err, "error:")


@pytest.mark.parametrize("args,word", [
    (["--csv", "/nonexistent/t.csv"], "no such file"),
    (["--csv", "."], "cannot read"),
    (["--target", "site"], "same column"),
    (["--epsilons", "0"], "--epsilons"),
    (["--epsilons", "nan"], "--epsilons"),
    (["--epsilons", "1,,2"], "--epsilons"),
    (["--epsilons", "-1"], "--epsilons"),
    (["--delta", "1"], "--delta"),
    (["--seeds", "0"], "--seeds"),
])
def test_bad_example_options_give_one_line_and_exit_2(tmp_path, capsys, args, word):
    mod = _example()
    p = tmp_path / "t.csv"
    p.write_text(_csv(_good_rows()))
    capsys.readouterr()
    argv = ["--csv", str(p), "--quick", *args] if args[0] != "--csv" else ["--quick", *args]
    assert mod.cli(argv) == 2
    _one_line(capsys.readouterr().err, word)


def test_example_without_inf_epsilon_and_with_a_bom_header(tmp_path, capsys):
    mod = _example()
    p = tmp_path / "t.csv"
    p.write_bytes(b"\xef\xbb\xbf" + _csv(_good_rows(n=80)).encode())  # a spreadsheet's UTF-8 export
    results, mse_ref = mod.main(["--csv", str(p), "--epsilons", "2", "--quick"])  # was KeyError: inf
    assert set(results) == {2.0} and math.isfinite(mse_ref) and mse_ref > 0
    assert math.isfinite(results[2.0][0])
    r_inf, ref_inf = mod.main(["--csv", str(p), "--epsilons", "inf", "--quick"])
    assert ref_inf == mse_ref  # the reference's σ comes from the same noise-free CV either way
    assert abs(r_inf[math.inf][0] - ref_inf) <= 1e-8 * ref_inf  # ε = ∞ is the pooled model


def test_missing_or_unreadable_image_files_give_one_line(tmp_path, capsys):
    import gzip

    from fedsciml.images import data as D

    _write_cifar10(tmp_path, lambda b: pickle.dumps(b, protocol=2))
    (tmp_path / "test_batch").unlink()
    (tmp_path / "test_batch").mkdir()
    with pytest.raises(ValueError, match="test_batch.*not a regular file"):
        D.load("cifar10", str(tmp_path))
    (tmp_path / "test_batch").rmdir()
    code, _, err = _cli(capsys, "bench", "images", "--dataset", "cifar10", "--data-dir", str(tmp_path), "--quiet")
    assert code == 2
    _one_line(err, "test_batch", "--data-dir")
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="train-images-idx3-ubyte.gz"):
        D.read_idx(str(tmp_path / "train-images-idx3-ubyte"))
    with gzip.open(tmp_path / "t.gz", "wb") as f:
        f.write(b"\x00\x00\x08\x01")
    (tmp_path / "t.gz").write_bytes((tmp_path / "t.gz").read_bytes()[:-6])  # truncated gzip stream
    with pytest.raises(ValueError, match="t.gz"):
        D.read_idx(str(tmp_path / "t.gz"))


def test_client_data_that_is_not_numeric_is_named():
    import fedsciml as fs

    with pytest.raises(fs.ProblemError, match=r"client 0.*numeric arrays.*'a'"):
        fs.ClientData([(np.array([["a"], ["b"]]), np.ones(2)), (np.ones((2, 1)), np.ones(2))])
    with pytest.raises(fs.ProblemError, match="numeric arrays"):
        fs.ClientData([(np.ones((2, 1)), [1.0, [2.0, 3.0]])])


def test_a_failed_round_in_bench_images_is_one_line(capsys, monkeypatch):
    from fedsciml.runtime.loop import RoundFailed
    from fedsciml.cli import images as images_cli

    def fail(args):
        raise RoundFailed("round 1: no valid client message remained for aggregation; rejected: client 0: nan")

    monkeypatch.setattr(images_cli, "run", fail)
    code, _, err = _cli(capsys, "bench", "images", "--dataset", "digits", "--quiet")
    assert code == 1  # a run that started and cannot go on (bad values are refused before, with exit 2)
    _one_line(err, "error: round 1")


def test_a_message_hook_that_is_not_a_function_is_refused():
    with pytest.raises(TypeError, match="message_hook must be a function"):
        run("fedavg", rounds=1, local_steps=2, message_hook=5)


def test_a_users_problem_with_helpers_named_like_a_task_hook_gets_the_drivers_check_and_estimate():
    """Only a task of a kind added with add_kind (images) brings its own check_objectives/estimate_memory; a
    user's Problem whose own helpers have those names (another meaning) still gets the driver's setup check
    (here: the residual is NaN on a sliver of the domain) and memory estimate, not its helpers called in their
    place (a TypeError, or a check silently skipped)."""
    import fedsciml as fs
    from fedsciml.runtime.checks import SetupError
    from fedsciml.runtime.driver import estimate_memory, get_method, own_kind

    class Sliver(fs.PDE):
        name = "hardening-sliver-helpers"

        def exact(self, x):
            return torch.sin(math.pi * x[..., 0])

        def equation(self, u, x):
            r = -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
            return torch.where(x[..., 0] > 0.99, torch.full_like(r, float("nan")), r)

        def check_objectives(self):  # the user's own helpers, of other signatures
            return "fine"

        def estimate_memory(self):
            return 0.0

    p = Sliver(n_interior=400)
    assert not own_kind(p)
    assert estimate_memory(p, 2, get_method("fedavg").make_config({}), "fedavg")[0] > 0
    with pytest.raises(SetupError, match=r"client 1: residual part 'interior' is not finite"):
        fs.solve(p, method="fedavg", clients=2, rounds=1)
