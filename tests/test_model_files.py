"""One reader for model files (issue 31, findings 4 and 5): every corrupt or inconsistent ``model.safetensors`` /
``model.json`` is one :class:`ModelFileError` line naming the file — from ``fs.load_model`` and from ``predict``
(exit 2) — and nothing is allocated or mapped beyond the tensors ``model.json`` declares."""
from __future__ import annotations

import json
import os
import pickle
import re
import struct

import pytest
import torch

import fedsciml as fs
from fedsciml.problems import get_problem
from fedsciml.ridge.model_io import write_model as write_ridge
from fedsciml.runtime import modelio
from fedsciml.runtime.modelio import ModelFileError, read_model
from fedsciml.runtime.results import Result


def field_dir(root) -> str:
    p = get_problem("sin1d")
    theta = p.init_params(0)
    res = Result(problem=p.name, method="gn", options={}, seed=0, device="cpu", dtype="float64",
                 n_params=int(theta.numel()), clients=1, solver_seconds=0.0, final={}, history=[], extra={}, theta=theta)
    d = os.path.join(root, "field")
    fs.save_model(res, p, d)
    return d


def ridge_dir(root) -> str:
    d = os.path.join(root, "ridge")
    write_ridge(d, torch.arange(1.0, 4.0, dtype=torch.float64), 0.5)
    return d


def split(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def join(header: dict, data: bytes) -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


class Payload:
    def __reduce__(self):  # a pickle that would run code if unpickled
        return (os.system, ("touch /tmp/fedsciml-pwned-by-model",))


def _retype(dtype: str, name: str = "theta"):
    def f(h, d):
        h[name]["dtype"] = dtype
        return join(h, d)
    return f


def _values(value: float):
    def f(h, d):
        t = torch.frombuffer(bytearray(d), dtype=torch.float64).clone()
        t[1] = value
        return join(h, t.numpy().tobytes())
    return f


# (name, which model, how the valid file's bytes are changed, what the one line says)
SAFETENSORS = [
    ("truncated", "field", lambda raw, h, d: raw[:20], "header length|holds .* bytes"),
    ("empty", "field", lambda raw, h, d: b"", "shorter than its 8-byte header"),
    ("random", "field", lambda raw, h, d: bytes(range(256)) * 4, "header length"),
    ("pickle", "field", lambda raw, h, d: pickle.dumps({"theta": Payload()}), "header length|not JSON"),
    ("header-length-0", "field", lambda raw, h, d: struct.pack("<Q", 0) + raw[8:], "header length 0"),
    ("header-length-2^63", "field", lambda raw, h, d: struct.pack("<Q", 2**63) + raw[8:], "header length"),
    ("header-past-eof", "field", lambda raw, h, d: struct.pack("<Q", len(raw)) + raw[8:], "header length"),
    ("header-not-json", "field", lambda raw, h, d: struct.pack("<Q", 4) + b"{{{{" + d, "header is not JSON"),
    ("header-a-list", "field", lambda raw, h, d: join([1, 2], d), "not a JSON object"),  # type: ignore[arg-type]
    ("overlapping", "ridge", lambda raw, h, d: join({**h, "intercept": {**h["intercept"], "data_offsets":
                                                                      [0, 8]}}, d), "overlap|holds .* bytes"),
    ("negative-shape", "field", lambda raw, h, d: join({"theta": {**h["theta"], "shape": [-1]}}, d), "shape"),
    ("unknown-dtype", "field", lambda raw, h, d: _retype("Q99")(h, d), "dtype 'Q99'"),
    ("int64-coef", "ridge", lambda raw, h, d: _retype("I64", "coef")(h, d), "dtype 'I64'"),
    ("bool-intercept", "ridge", lambda raw, h, d: _retype("BOOL", "intercept")(h, d), "dtype 'BOOL'"),
    ("float32-theta", "field", lambda raw, h, d: _retype("F32")(h, d), "dtype 'F32'"),
    ("float16-theta", "field", lambda raw, h, d: _retype("F16")(h, d), "dtype 'F16'"),
    ("nan-theta", "field", lambda raw, h, d: _values(float("nan"))(h, d), "non-finite"),
    ("inf-theta", "field", lambda raw, h, d: _values(float("inf"))(h, d), "non-finite"),
    ("trailing-bytes", "field", lambda raw, h, d: raw + b"\0" * 64, "data beyond its tensors"),
    ("wrong-shape", "field", lambda raw, h, d: join({"theta": {**h["theta"], "shape": [3]}}, d), "shape"),
    ("missing-tensor", "ridge", lambda raw, h, d: join({"coef": h["coef"]}, d), "holds tensors"),
    ("offsets-past-data", "field", lambda raw, h, d: join({"theta": {**h["theta"], "data_offsets":
                                                                     [8, len(d) + 8]}}, d), "gap|holds .* bytes"),
]


@pytest.mark.parametrize("name,which,change,msg", SAFETENSORS, ids=[c[0] for c in SAFETENSORS])
def test_a_corrupt_safetensors_is_one_line_naming_the_file(tmp_path, name, which, change, msg):
    d = field_dir(tmp_path) if which == "field" else ridge_dir(tmp_path)
    path = os.path.join(d, modelio.TENSORS)
    raw = open(path, "rb").read()
    h, data = split(path)
    h.pop("__metadata__", None)
    open(path, "wb").write(change(raw, h, data))
    with pytest.raises(ModelFileError, match=msg) as e:
        fs.load_model(d)
    assert path in str(e.value) and "\n" not in str(e.value)
    assert not os.path.exists("/tmp/fedsciml-pwned-by-model")


def test_a_huge_sparse_file_with_a_valid_header_is_not_mapped(tmp_path):
    """A 64 GiB sparse ``model.safetensors`` whose header is valid: refused from its size, nothing read."""
    d = field_dir(tmp_path)
    path = os.path.join(d, modelio.TENSORS)
    with open(path, "r+b") as f:
        f.truncate(64 * 2**30)
    with pytest.raises(ModelFileError, match="more than the"):
        fs.load_model(d)


def _json_cases():
    deep = '{"a": ' * 200_000 + "1" + "}" * 200_000
    return [
        ("200000-deep", lambda m: deep, "nests deeper|cannot be read as JSON"),
        ("1e400", lambda m: json.dumps(m).replace('"version": 1', '"version": 1, "x": 1e400'), "out of the float64"),
        ("nan-literal", lambda m: json.dumps(m).replace('"version": 1', '"version": 1, "x": NaN'), "not a JSON number"),
        ("no-architecture", lambda m: json.dumps({k: v for k, v in m.items() if k != "architecture"}),
         "unknown architecture None"),
        ("architecture-a-list", lambda m: json.dumps({**m, "architecture": [1]}), "unknown architecture"),
        ("sizes-a-string", lambda m: json.dumps({**m, "architecture": {**m["architecture"], "sizes": "1,2"}}),
         "sizes must be"),
        ("huge-sizes", lambda m: json.dumps({**m, "architecture": {**m["architecture"], "sizes": [1, 10**9, 1]}}),
         "sizes must be"),
        ("bad-activation", lambda m: json.dumps({**m, "architecture": {**m["architecture"], "activation": "exec"}}),
         "unknown activation"),
        ("n-network-params", lambda m: json.dumps({**m, "n_network_params": 5}), "n_network_params=5"),
        ("n-network-params-inf", lambda m: json.dumps({**m, "n_network_params": 1e300}), "must be an integer"),
        ("evaluation", lambda m: json.dumps({**m, "evaluation": "eval"}), "unknown evaluation"),
        ("not-utf8", lambda m: b"\xff\xfe" + json.dumps(m).encode("utf-16-le"), "not UTF-8"),
        ("not-an-object", lambda m: "[1, 2]", "not a fedsciml model description"),
        ("too-big", lambda m: json.dumps({**m, "pad": "x" * (modelio.MAX_META_BYTES + 1)}), "more than the"),
    ]


@pytest.mark.parametrize("name,change,msg", _json_cases(), ids=[c[0] for c in _json_cases()])
def test_a_bad_model_json_is_one_line_naming_the_file(tmp_path, name, change, msg):
    d = field_dir(tmp_path)
    path = os.path.join(d, modelio.META)
    text = change(json.load(open(path)))
    open(path, "wb").write(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ModelFileError, match=msg) as e:
        fs.load_model(d)
    assert path in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name,change,msg", [
    ("n-features", lambda m: {**m, "n_features": 4}, "3 inputs named, n_features=4"),
    ("n-features-no-inputs", lambda m: {**{k: v for k, v in m.items() if k != "inputs"}, "n_features": 4},
     "model.json says \\[4\\]"),
    ("intercept", lambda m: {**m, "intercept": 0.25}, "intercept 0.25 and model.safetensors' 0.5 disagree"),
    ("intercept-a-bool", lambda m: {**m, "intercept": True}, "intercept must be a number"),
    ("n-features-float", lambda m: {**m, "n_features": 3.0}, "n_features must be an integer"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_a_ridge_model_json_that_disagrees_with_its_tensors_is_refused(tmp_path, name, change, msg):
    d = ridge_dir(tmp_path)
    path = os.path.join(d, modelio.META)
    json.dump(change(json.load(open(path))), open(path, "w"))
    with pytest.raises(ModelFileError, match=msg):
        fs.load_model(d)


def test_special_files_are_not_read(tmp_path):
    """A FIFO (would block) and a link to /dev/zero (would be read to MemoryError) are refused by their type."""
    d = ridge_dir(tmp_path)
    for name in (modelio.META, modelio.TENSORS):
        path = os.path.join(d, name)
        os.replace(path, path + ".bak")
        os.mkfifo(path)
        with pytest.raises(ModelFileError, match="not a regular file"):
            fs.load_model(d)
        os.remove(path)
        os.symlink("/dev/zero", path)  # a link out of the directory (issue 38): refused before its type is read
        with pytest.raises(ModelFileError, match="outside the model directory"):
            fs.load_model(d)
        os.remove(path)
        os.replace(path + ".bak", path)
    coef, intercept, _ = __import__("fedsciml.ridge.model_io", fromlist=["x"]).read_model(d)
    assert coef.dtype == torch.float64 and intercept == 0.5


def test_predict_says_one_line_for_a_corrupt_model(tmp_path, capsys):
    from fedsciml.cli import main

    d = ridge_dir(tmp_path)
    path = os.path.join(d, modelio.TENSORS)
    open(path, "wb").write(open(path, "rb").read()[:20])
    (tmp_path / "pts.csv").write_text("1,2,3\n")
    assert main(["predict", d, "--points", str(tmp_path / "pts.csv"), "--out", str(tmp_path / "u.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and path in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "u.csv").exists()


def test_the_reader_gives_the_writers_bits(tmp_path):
    """The checked reader returns the tensors written, bit for bit (and float64)."""
    d = ridge_dir(tmp_path)
    t, meta = read_model(d)
    assert torch.equal(t["coef"], torch.arange(1.0, 4.0, dtype=torch.float64)) and float(t["intercept"][0]) == 0.5
    assert meta["n_features"] == 3


# --- predict's inputs and outputs (issue 31 #9) ----------------------------------------------------------------


def _predict(tmp_path, points_path, out=None):
    from fedsciml.cli import main

    d = ridge_dir(tmp_path) if not os.path.isdir(os.path.join(tmp_path, "ridge")) else os.path.join(tmp_path, "ridge")
    out = out or str(tmp_path / "u.csv")
    return main(["predict", d, "--points", str(points_path), "--out", out]), out


@pytest.mark.parametrize("name,make,msg", [
    ("fifo", lambda p: os.mkfifo(p), "is not a regular file"),
    ("dev-zero-link", lambda p: os.symlink("/dev/zero", p), "is not a regular file"),
    ("directory", lambda p: os.mkdir(p), "is not a regular file"),
    ("long-field", lambda p: open(p, "w").write("1,2," + "3" * 200_000 + "\n"), "line 1: not a CSV of numbers"),
    ("latin-1", lambda p: open(p, "wb").write("1,2,3\n# caf\xe9\n".encode("latin-1")), "is not UTF-8 text"),
    ("binary", lambda p: open(p, "wb").write(bytes(range(256))), "is not UTF-8 text"),
    ("nan-point", lambda p: open(p, "w").write("1,2,3\nnan,1,1\n"), r"1 point\(s\) are not finite"),
    ("inf-point", lambda p: open(p, "w").write("1,2,3\n1,inf,1\n"), r"1 point\(s\) are not finite"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_predict_reads_only_a_bounded_csv_of_finite_points(tmp_path, capsys, name, make, msg):
    p = str(tmp_path / "pts.csv")
    make(p)
    rc, out = _predict(tmp_path, p)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and re.search(msg, err[0]), err
    assert "pts.csv" in err[0]
    assert not os.path.exists(out)


def test_predict_refuses_a_model_that_overflows(tmp_path, capsys):
    """A finite but huge coefficient (1e300) predicts inf: refused, nothing written."""
    d = os.path.join(tmp_path, "ridge")
    write_ridge(d, torch.tensor([1e300, 1e300, 1e300], dtype=torch.float64), 0.5)
    (tmp_path / "pts.csv").write_text("1e10,1e10,1e10\n")
    rc, out = _predict(tmp_path, tmp_path / "pts.csv")
    assert rc == 2 and "non-finite values" in capsys.readouterr().err and not os.path.exists(out)


def test_predict_and_model_writes_on_a_full_disk_leave_nothing_half_written(tmp_path, monkeypatch, capsys):
    """``--out`` goes through a temporary file and ``os.replace``; a write that fails (ENOSPC) is one line and
    leaves neither the output nor the temporary; the same for a model directory (a ridge ``--out``)."""
    import errno

    (tmp_path / "pts.csv").write_text("1,2,3\n4,5,6\n")
    ridge_dir(tmp_path)
    def full(fd):  # the disk fills while the temporary file is written (fedsciml.runtime.files writes it, fsyncs it)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    rc, out = _predict(tmp_path, tmp_path / "pts.csv")
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "No space left on device" in err[0] and "nothing was written" in err[0]
    assert not os.path.exists(out) and not os.path.exists(out + ".tmp")

    import safetensors.torch

    def enospc(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save", enospc)
    new = str(tmp_path / "m2")
    with pytest.raises(ModelFileError, match="No space left on device.*nothing was written"):
        write_ridge(new, torch.ones(3, dtype=torch.float64), 0.0)
    assert not os.path.exists(os.path.join(new, modelio.TENSORS)) and not os.path.exists(
        os.path.join(new, modelio.META)) and not any(n.endswith(".tmp") for n in os.listdir(new))


def test_a_jobs_file_may_say_infinity_but_never_nan(tmp_path):
    """``json.dump`` writes ε = ∞ as ``Infinity``: a Flower jobs file is read with ``infinity=True`` (the options'
    ranges check the value after), while NaN stays refused, and a model file refuses both."""
    import json

    from fedsciml.runtime.modelio import ModelFileError, read_json_bounded

    p = tmp_path / "jobs.json"
    json.dump([{"dp_epsilon": float("inf")}], open(p, "w"))
    assert read_json_bounded(str(p), "jobs file", infinity=True) == [{"dp_epsilon": float("inf")}]
    with pytest.raises(ModelFileError, match="Infinity is not a JSON number"):
        read_json_bounded(str(p), "model.json")
    p.write_text("[NaN]")
    with pytest.raises(ModelFileError, match="NaN is not a JSON number"):
        read_json_bounded(str(p), "jobs file", infinity=True)
