"""The trained model out of a run: one directory, ``model.safetensors`` + ``model.json``.

Format (simple on purpose, so that any language reads it):

* ``model.safetensors`` — named tensors (safetensors: no code runs when it is read);
* ``model.json`` — ``{"format": "fedsciml-model", "version": 1, "kind": KIND, ...}`` with what is needed
  to use the tensors.  ``kind`` says how:

  - ``"field"`` — a network ``u(x)``: tensor ``theta`` (the flat parameter vector, float64), and
    ``architecture`` ``{"type": "mlp", "sizes": [...], "activation": ..., "input_map": {"shift", "scale"}}``
    (the map optional: the fixed affine map of the inputs; a time-marched model's ``window_input_maps``
    give each window's own), ``outputs`` (component
    names), ``inputs`` (axis names), ``evaluation`` (``"batch"``: the network on the whole batch, as
    :class:`~fedsciml.problems.base.FieldProblem` evaluates it; ``"pointwise"``: ``vmap`` over points, as
    :class:`~fedsciml.problems.domain.DomainPDE` does — the loader repeats the run's own operations,
    so its predictions equal the run's bitwise), ``n_network_params`` (θ beyond them holds the
    ``coefficients`` of an inverse problem, also listed by name and value, then the networks of its unknown
    ``fields`` — ``{name: {"architecture", "inputs"}}``, in θ's order; the loaded callable's ``fields``
    evaluates them), ``ansatz`` (true when the
    problem's hard constraint wraps the network: only the problem itself can evaluate it),
    ``problem``, ``options``, ``method``, ``final``;
  - other kinds (``"ridge"``: linear coefficients) are written by their own modules with the same
    :func:`write_model` and read back by a loader registered in :data:`LOADERS`.

:func:`write_model` / :func:`read_model` are the one writer and reader; :func:`load` turns a directory into
a callable by its kind.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

FORMAT = "fedsciml-model"
VERSION = 1
TENSORS = "model.safetensors"
META = "model.json"


class ModelFileError(ValueError):
    """A model directory that cannot be read (missing file, another format, an unknown kind, a corrupt or
    inconsistent file): one line naming the file."""


def write_model(directory: str, tensors: dict[str, torch.Tensor], meta: dict) -> str:
    """Write ``tensors`` and ``meta`` (which must name its ``kind``) to ``directory``; returns the JSON path."""
    from fedsciml.runtime.results import _clean

    if not isinstance(meta.get("kind"), str) or not meta["kind"]:
        raise ValueError("model metadata must name its kind (a non-empty string)")
    for k, v in tensors.items():  # what the reader accepts: float64, finite
        if v.dtype != torch.float64 or not bool(torch.isfinite(v).all()):
            raise ValueError(f"model tensor {k!r} must be finite float64, got {v.dtype} "
                             f"{'with non-finite values' if v.is_floating_point() else ''}".rstrip())
    from safetensors.torch import save

    from fedsciml.runtime.files import write_outputs

    text = json.dumps(_clean({"format": FORMAT, "version": VERSION, **meta}), indent=2, default=str) + "\n"
    tpath, path = os.path.join(directory, TENSORS), os.path.join(directory, META)
    try:  # both files to temporary names first: a full disk leaves no half model that looks valid
        os.makedirs(directory, exist_ok=True)
        data = save({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()})
        write_outputs([(tpath, lambda f: f.write(data)), (path, lambda f: f.write(text.encode()))], binary=True,
                      what="the model file")
    except Exception as e:  # noqa: BLE001 - OSError, safetensors' own error on a full disk: one line
        reason = getattr(e, "strerror", None) or (str(e).splitlines()[0] if str(e) else type(e).__name__)
        raise ModelFileError(f"the model could not be written to {directory!r} ({reason}); nothing was "
                             f"written") from None
    return path


#: bounds of what the reader accepts before it allocates anything: the ``model.json`` file's size and nesting,
#: the safetensors header's size, and the tensors' total size (the file may hold nothing beyond them)
MAX_META_BYTES = 4 * 2**20
MAX_META_DEPTH = 64
MAX_HEADER_BYTES = 1 * 2**20
MAX_TENSOR_BYTES = 8 * 2**30
_DTYPE = "F64"  # every tensor of a model is float64 (what the writer writes)


def _regular_file(path: str, what: str, limit: int) -> int:
    """The size of ``path``, a regular file of at most ``limit`` bytes (no FIFO, device or ``/dev/zero`` link):
    :func:`fedsciml.runtime.files.regular_file_size`, refused as a :class:`ModelFileError`."""
    from fedsciml.runtime.files import FileRefused, regular_file_size

    try:
        return regular_file_size(path, limit, f"a {what}")
    except FileRefused as e:
        raise ModelFileError(str(e)) from None


def _inside(directory: str, path: str) -> None:
    """``path`` (a file of the model directory) is no link out of ``directory``: a model directory names
    nothing outside itself — a ``model.safetensors`` linked to ``/proc/self/mem`` or to another directory's file
    is refused in one line (a link within the directory is followed)."""
    if not os.path.islink(path):
        return
    real, home = os.path.realpath(path), os.path.realpath(directory)
    if os.path.dirname(real) != home and not real.startswith(home.rstrip(os.sep) + os.sep):
        raise ModelFileError(f"{path!r} is a link to {real!r}, outside the model directory; a model directory names "
                             f"nothing outside itself (copy the file in)")


def _finite_float(text: str) -> float:
    v = float(text)
    if v != v or v in (float("inf"), float("-inf")):
        raise ValueError(f"number {text} is out of the float64 range")
    return v


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _depth(obj, limit: int) -> int:
    """The nesting depth of a parsed JSON value (iteratively; ``limit + 1`` as soon as it is exceeded)."""
    depth, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            depth = max(depth, d)
            if depth > limit:
                return depth
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return depth


def _infinity_only(name: str) -> float:
    if name == "Infinity":
        return float("inf")
    if name == "-Infinity":
        return float("-inf")
    raise ValueError(f"{name} is not a JSON number")


def read_json_bounded(path: str, what: str, limit: int = MAX_META_BYTES, depth: int = MAX_META_DEPTH,
                      infinity: bool = False):
    """A small JSON file read with bounds: a regular file of at most ``limit`` bytes, UTF-8, nesting at most
    ``depth``, finite numbers only (no ``NaN``/``Infinity``/``1e400``); every failure a :class:`ModelFileError`
    naming the file.  ``infinity``: ``Infinity``/``-Infinity`` (as Python's ``json.dump`` writes ``inf``) are
    read as ±inf — a jobs file's ``dp_epsilon=inf`` is a value the options' own ranges then check; NaN and
    out-of-range literals stay refused."""
    _regular_file(path, what, limit)
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
        text = raw.decode("utf-8")
        val = json.loads(text, parse_float=_finite_float,
                         parse_constant=_infinity_only if infinity else _refuse_constant)
    except RecursionError:
        raise ModelFileError(f"{path!r} nests deeper than {depth} levels; a {what} is flat") from None
    except UnicodeDecodeError as e:
        raise ModelFileError(f"{path!r} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{path!r} cannot be read as JSON: {e}") from None
    if _depth(val, depth) > depth:
        raise ModelFileError(f"{path!r} nests deeper than {depth} levels; a {what} is flat")
    return val


def _int(meta: dict, key: str, path: str, lo: int = 0, hi: int = 2**40) -> int:
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ModelFileError(f"{path!r}: {key} must be an integer in [{lo}, {hi}], got {v!r}")
    return v


def _strings(meta: dict, key: str, path: str, required: bool = False) -> list:
    v = meta.get(key, None if required else [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v) or (required and not v):
        raise ModelFileError(f"{path!r}: {key} must be a list of names, got {v!r}")
    return v


def _expected_field(meta: dict, path: str) -> dict[str, tuple]:
    """A ``field`` model's tensor shapes from its ``model.json`` (checked), before any tensor is read."""
    from fedsciml.core.nn import _ACTIVATIONS

    arch = meta.get("architecture")
    if not isinstance(arch, dict) or arch.get("type") != "mlp":
        got = arch.get("type") if isinstance(arch, dict) else arch
        raise ModelFileError(f"{path!r}: unknown architecture {got!r}; this fedsciml reads 'mlp'")
    sizes = arch.get("sizes")
    if (not isinstance(sizes, list) or len(sizes) < 2 or len(sizes) > 64
            or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 2**20 for n in sizes)):
        raise ModelFileError(f"{path!r}: architecture sizes must be 2 to 64 integers in [1, 2**20], got {sizes!r}")
    if arch.get("activation") not in _ACTIVATIONS:
        raise ModelFileError(f"{path!r}: unknown activation {arch.get('activation')!r}; allowed: "
                             f"{sorted(_ACTIVATIONS)}")
    _input_map(arch, path, sizes[0])
    p = sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))
    n_net = _int(meta, "n_network_params", path, 1, 2**40) if "n_network_params" in meta else p
    if n_net != p:
        raise ModelFileError(f"{path!r}: n_network_params={n_net} but the architecture {sizes} has {p} parameters")
    coefs = meta.get("coefficients", {})
    if not isinstance(coefs, dict):
        raise ModelFileError(f"{path!r}: coefficients must be an object of name: value, got {coefs!r}")
    if meta.get("evaluation", "batch") not in ("batch", "pointwise"):
        raise ModelFileError(f"{path!r}: unknown evaluation {meta.get('evaluation')!r}; allowed: batch, pointwise")
    outs = _strings(meta, "outputs", path) if "outputs" in meta else ["u"]
    ins = _strings(meta, "inputs", path) if "inputs" in meta else [f"x{i}" for i in range(sizes[0])]
    if len(ins) != sizes[0] or (meta.get("evaluation") == "pointwise" and len(outs) != sizes[-1]):
        raise ModelFileError(f"{path!r}: inputs {ins} / outputs {outs} do not match the architecture {sizes}")
    one = p + len(coefs) + sum(_field_sizes(meta, path, ins).values())
    windows = _window_edges(meta, path)
    if windows is not None:
        _window_maps(meta, path, sizes[0], len(windows))
    elif "window_input_maps" in meta:
        raise ModelFileError(f"{path!r}: window_input_maps without time_windows")
    return {"theta": (one * len(windows or [0]),)}


def _input_map(arch: dict, path: str, d: int) -> tuple | None:
    """An architecture's fixed input map ``(shift, scale)`` (``arch["input_map"]``: d finite floats each, scales
    nonzero; :class:`~fedsciml.core.nn.MLP`), or ``None`` where it has none."""
    m = arch.get("input_map")
    if m is None:
        return None
    ok = isinstance(m, dict) and set(m) == {"shift", "scale"} and all(
        isinstance(m[k], list) and len(m[k]) == d and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                          and math.isfinite(v) for v in m[k]) for k in m)
    if not ok or any(v == 0 for v in m["scale"]):
        raise ModelFileError(f"{path!r}: input_map must be {{shift, scale}} of {d} finite numbers each (scales "
                             f"nonzero), got {m!r:.120}")
    return (m["shift"], m["scale"])


def _window_maps(meta: dict, path: str, d: int, K: int) -> list | None:
    """A time-marched model's per-window input maps (``meta["window_input_maps"]``: one architecture input map
    per window, each window's own box), or ``None``."""
    ms = meta.get("window_input_maps")
    if ms is None:
        return None
    if not isinstance(ms, list) or len(ms) != K:
        raise ModelFileError(f"{path!r}: window_input_maps must give one input map per window ({K}), got {ms!r:.120}")
    return [_input_map({"input_map": m}, path, d) for m in ms]


def _window_edges(meta: dict, path: str) -> list[tuple[float, float]] | None:
    """The windows ``[(t_{k-1}, t_k)]`` of a time-marched model (``meta["time_windows"]``: increasing edges), or
    ``None``."""
    e = meta.get("time_windows")
    if e is None:
        return None
    if (not isinstance(e, list) or not 2 <= len(e) <= 100_001
            or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in e)
            or any(b <= a for a, b in zip(e[:-1], e[1:]))):
        raise ModelFileError(f"{path!r}: time_windows must be 2 or more increasing times, got {e!r:.120}")
    return list(zip(e[:-1], e[1:]))


def _field_sizes(meta: dict, path: str, inputs: list) -> dict[str, int]:
    """``{name: parameters}`` of a field model's unknown coefficient fields (``meta["fields"]``, checked)."""
    from fedsciml.core.nn import _ACTIVATIONS

    fields = meta.get("fields", {})
    if not isinstance(fields, dict):
        raise ModelFileError(f"{path!r}: fields must be an object of name: {{architecture, inputs}}, got {fields!r}")
    out = {}
    for name, f in fields.items():
        arch = f.get("architecture") if isinstance(f, dict) else None
        sizes = arch.get("sizes") if isinstance(arch, dict) else None
        ins = f.get("inputs") if isinstance(f, dict) else None
        if (not isinstance(arch, dict) or arch.get("type") != "mlp" or arch.get("activation") not in _ACTIVATIONS
                or not isinstance(sizes, list) or not 2 <= len(sizes) <= 64
                or not all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 2**20 for n in sizes)
                or sizes[-1] != 1 or not isinstance(ins, list) or len(ins) != sizes[0]
                or not all(isinstance(a, str) and a in inputs for a in ins)):
            raise ModelFileError(f"{path!r}: field {name!r} must give an mlp architecture (sizes ending in 1, a known "
                                 f"activation) and its inputs among {inputs}; got {f!r:.120}")
        _input_map(arch, path, sizes[0])
        out[name] = sum((a + 1) * b for a, b in zip(sizes[:-1], sizes[1:]))
    return out


def _expected_ridge(meta: dict, path: str) -> dict[str, tuple]:
    d = _int(meta, "n_features", path, 1, 2**31)
    if isinstance(meta.get("intercept"), bool) or not isinstance(meta.get("intercept"), (int, float)):
        raise ModelFileError(f"{path!r}: intercept must be a number, got {meta.get('intercept')!r}")
    if "inputs" in meta and len(_strings(meta, "inputs", path)) != d:
        raise ModelFileError(f"{path!r}: {len(meta['inputs'])} inputs named, n_features={d}")
    return {"coef": (d,), "intercept": (1,)}


#: ``kind -> fn(meta, path) -> {tensor name: shape}``: what a model of that kind must hold, read from its
#: checked ``model.json`` before the tensors are read
EXPECTED: dict[str, Callable] = {"field": _expected_field, "ridge": _expected_ridge}


def _read_tensors(path: str, expected: dict[str, tuple] | None) -> dict[str, torch.Tensor]:
    """The float64 tensors of a safetensors file, checked against ``expected`` before anything is allocated:
    a bounded header, dtype ``F64``, the expected names and shapes, contiguous non-overlapping data that fill
    the file exactly (nothing is read or mapped beyond the declared tensors), finite values.  Read into fresh
    memory (no mapping), so the tensors are aligned as the run's own were (bitwise predictions).  ``expected``
    ``None`` (a kind with no reader here): the header's own shapes, under the same checks."""

    size = _regular_file(path, "model.safetensors", MAX_TENSOR_BYTES + MAX_HEADER_BYTES + 8)
    try:
        return _read_tensors_of(path, size, expected)
    except OSError as e:  # a file that stat calls regular but that cannot be read as one (/proc, a vanished file)
        raise ModelFileError(f"{path!r} cannot be read ({e.strerror or e})") from None


def _read_tensors_of(path: str, size: int, expected: dict[str, tuple] | None) -> dict[str, torch.Tensor]:
    import math
    import struct

    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ModelFileError(f"{path!r} is not a safetensors file: {size} bytes, shorter than its 8-byte header "
                                 f"length")
        (n,) = struct.unpack("<Q", head)
        if n < 2 or n > MAX_HEADER_BYTES or 8 + n > size:
            raise ModelFileError(f"{path!r} is not a safetensors file: header length {n} (the file holds {size} "
                                 f"bytes; at most {MAX_HEADER_BYTES:,} are read as a header)")
        try:
            header = json.loads(f.read(n).decode("utf-8"), parse_constant=_refuse_constant)
        except RecursionError:
            raise ModelFileError(f"{path!r}: its safetensors header nests too deep") from None
        except (UnicodeDecodeError, ValueError) as e:
            raise ModelFileError(f"{path!r} is not a safetensors file: its header is not JSON ({e})") from None
        if not isinstance(header, dict):
            raise ModelFileError(f"{path!r} is not a safetensors file: its header is not a JSON object")
        header.pop("__metadata__", None)
        if expected is None:  # shapes from the header itself: lists of at most 8 integers ≥ 0
            expected = {}
            for name, entry in header.items():
                shape = entry.get("shape") if isinstance(entry, dict) else None
                if (not isinstance(shape, list) or len(shape) > 8
                        or not all(isinstance(k, int) and not isinstance(k, bool) and 0 <= k < 2**40 for k in shape)):
                    raise ModelFileError(f"{path!r}: tensor {name!r} has shape {shape!r}; a shape is a list of "
                                         f"integers ≥ 0")
                expected[name] = tuple(shape)
        want_bytes = sum(8 * math.prod(s) for s in expected.values())
        if want_bytes > MAX_TENSOR_BYTES:
            raise ModelFileError(f"{path!r}: its tensors would take {want_bytes:,} bytes, more than the "
                                 f"{MAX_TENSOR_BYTES:,} a model may hold")
        if set(header) != set(expected):
            raise ModelFileError(f"{path!r} holds tensors {sorted(header)[:8]}; model.json says "
                                 f"{sorted(expected)}")
        spans = []
        for name, shape in expected.items():
            entry = header[name]
            if not isinstance(entry, dict):
                raise ModelFileError(f"{path!r}: tensor {name!r} has a malformed header entry")
            if entry.get("dtype") != _DTYPE:
                raise ModelFileError(f"{path!r}: tensor {name!r} is of dtype {entry.get('dtype')!r}; a model holds "
                                     f"float64 ({_DTYPE})")
            if entry.get("shape") != list(shape):
                raise ModelFileError(f"{path!r}: tensor {name!r} has shape {entry.get('shape')!r}; model.json "
                                     f"says {list(shape)}")
            off = entry.get("data_offsets")
            if (not isinstance(off, list) or len(off) != 2 or not all(isinstance(o, int) and not isinstance(o, bool)
                                                                      for o in off)
                    or not 0 <= off[0] <= off[1] or off[1] - off[0] != 8 * math.prod(shape)):
                raise ModelFileError(f"{path!r}: tensor {name!r} has data offsets {off!r}, not the "
                                     f"{8 * math.prod(shape)} bytes of its shape")
            spans.append((off[0], off[1], name))
        spans.sort()
        pos = 0
        for lo, hi, name in spans:
            if lo != pos:
                raise ModelFileError(f"{path!r}: tensor {name!r}'s data overlap or leave a gap at byte {lo}")
            pos = hi
        if 8 + n + want_bytes != size:
            raise ModelFileError(f"{path!r} holds {size:,} bytes; its header declares {8 + n + want_bytes:,} "
                                 f"(truncated, or data beyond its tensors)")
        data = bytearray(want_bytes)
        if f.readinto(memoryview(data)) != want_bytes:
            raise ModelFileError(f"{path!r} is shorter than its header declares")
    out = {}
    for lo, hi, name in spans:
        t = torch.frombuffer(data, dtype=torch.float64, count=(hi - lo) // 8, offset=lo).clone()
        if not bool(torch.isfinite(t).all()):
            raise ModelFileError(f"{path!r}: tensor {name!r} holds non-finite values (NaN or ±inf)")
        out[name] = t.reshape(expected[name])
    return out


def read_model(directory: str) -> tuple[dict[str, torch.Tensor], dict]:
    """``(tensors, meta)`` of a model directory written by :func:`write_model` — the one reader of model files:
    every failure a :class:`ModelFileError` naming the file; ``model.json`` bounded (size, depth, finite
    numbers) and checked by its kind (:data:`EXPECTED`) before the tensors are read; the tensors checked
    against it (float64, names, shapes, finite) before anything is allocated (:func:`_read_tensors`)."""
    directory = os.fspath(directory)
    mpath, tpath = os.path.join(directory, META), os.path.join(directory, TENSORS)
    for p in (mpath, tpath):
        if not os.path.lexists(p):
            raise ModelFileError(f"{directory!r} is not a fedsciml model directory: {os.path.basename(p)} is missing")
        _inside(directory, p)
    meta = read_json_bounded(mpath, "model description")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("kind"), str):
        raise ModelFileError(f"{mpath!r} is not a fedsciml model description (format {FORMAT!r} with a kind)")
    if meta.get("version") != VERSION:
        raise ModelFileError(f"{mpath!r} has version {meta.get('version')!r}; this fedsciml reads version {VERSION}")
    expect = EXPECTED.get(meta["kind"])  # a kind of its own (no loader here): the header's shapes, checked alike
    tensors = _read_tensors(tpath, expect(meta, mpath) if expect else None)
    if meta["kind"] == "ridge" and float(tensors["intercept"][0]) != float(meta["intercept"]):
        raise ModelFileError(f"{directory!r}: model.json's intercept {meta['intercept']!r} and model.safetensors' "
                             f"{float(tensors['intercept'][0])!r} disagree")
    return tensors, meta


def _load_field(tensors: dict, meta: dict) -> Callable:
    from fedsciml.core.nn import MLP

    arch = meta.get("architecture") or {}
    if arch.get("type") != "mlp":
        raise ModelFileError(f"unknown architecture {arch.get('type')!r}; this fedsciml reads 'mlp'")
    if meta.get("ansatz"):
        raise ModelFileError(f"the model of problem {meta.get('problem')!r} has a hard-constraint ansatz: load it with "
                             f"its problem, fs.load_model(DIR, problem=...)")
    net = MLP(arch["sizes"], arch["activation"], input_map=_input_map(arch, "model.json", arch["sizes"][0]))
    if meta.get("time_windows"):
        return _load_windows(net, tensors["theta"], meta)
    theta = tensors["theta"][: net.n_params]
    u = field_callable(net, theta, meta.get("evaluation", "batch"), len(meta.get("outputs", [""])))
    if meta.get("fields"):
        u.fields = field_functions(tensors["theta"], meta)  # type: ignore[attr-defined]
    return u


def _load_windows(net: Any, theta: torch.Tensor, meta: dict) -> Callable:
    """A time-marched model (:mod:`fedsciml.problems.windows`): window k's network at the points with
    ``t_{k-1} < t ≤ t_k`` (t ≤ t_1: the first), t the last input."""
    edges = meta["time_windows"]
    K = len(edges) - 1
    parts = theta.reshape(K, -1)
    evaluation, n_out = meta.get("evaluation", "batch"), len(meta.get("outputs", [""]))
    maps = _window_maps(meta, "model.json", net.sizes[0], K)  # each window's own box where the run mapped inputs
    nets = [net] * K if maps is None else [type(net)(net.sizes, net.activation, input_map=m) for m in maps]
    fns = [field_callable(nets[k], parts[k][: net.n_params], evaluation, n_out) for k in range(K)]
    inner = torch.tensor(edges[1:-1], dtype=theta.dtype)
    d = net.sizes[0]

    def u(x: Any) -> torch.Tensor:
        x = torch.as_tensor(x, dtype=theta.dtype)
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(f"points must have shape [n, {d}], got {tuple(x.shape)}")
        k = torch.bucketize(x[:, -1].contiguous(), inner)
        outs = [fns[j](x[k == j]) for j in range(K)]
        out = torch.zeros((x.shape[0],) + outs[0].shape[1:], dtype=theta.dtype)
        for j in range(K):
            out[k == j] = outs[j]
        return out

    u.inputs_dim = d  # type: ignore[attr-defined]
    return u


def field_functions(theta: torch.Tensor, meta: dict) -> dict[str, Callable]:
    """``{name: a}``, ``a(x [n, d]) → [n]``: a saved model's unknown coefficient fields (``meta["fields"]``; their
    parameters follow the network's and the scalar coefficients' in θ)."""
    from torch.func import vmap

    from fedsciml.core.nn import MLP

    inputs = meta.get("inputs", [])
    p = sum((a + 1) * b for a, b in zip(meta["architecture"]["sizes"][:-1], meta["architecture"]["sizes"][1:]))
    p += len(meta.get("coefficients", {}))
    out = {}
    for name, f in meta["fields"].items():
        fa = f["architecture"]
        net = MLP(fa["sizes"], fa["activation"], input_map=_input_map(fa, "model.json", fa["sizes"][0]))
        th = theta[p: p + net.n_params]
        p += net.n_params
        sel = torch.tensor([inputs.index(a) for a in f["inputs"]])

        def a(x: Any, net=net, th=th, sel=sel) -> torch.Tensor:
            x = torch.as_tensor(x, dtype=th.dtype)
            if x.ndim != 2 or x.shape[1] != len(inputs):
                raise ValueError(f"points must have shape [n, {len(inputs)}], got {tuple(x.shape)}")
            with torch.no_grad():
                return vmap(lambda y: net(th, y[sel]).reshape(()))(x)

        out[name] = a
    return out


#: a loaded model evaluates its points in batches whose activations — rows × (the sum of the network's layer
#: widths) × 8 bytes — stay under this many bytes (256 MiB: 1.6 million points of a 3×50 network); ``u(x)`` on
#: 10⁸ points then allocates the batches' activations once each and the ``[n]`` / ``[n, C]`` answer, never
#: ``n × width`` at once.  Up to one batch, the call is the run's own operations on the whole batch (bitwise)
EVAL_BYTES = 1 << 28


def eval_rows(widths: Sequence[int]) -> int:
    """The points one batch holds for a network of layer ``widths`` (:data:`EVAL_BYTES`; at least 1)."""
    return max(1, EVAL_BYTES // (8 * max(1, sum(int(w) for w in widths))))


def batched(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, rows: int) -> torch.Tensor:
    """``fn(x)`` evaluated ``rows`` points at a time, into one preallocated answer (``fn`` maps ``[m, d]`` to
    ``[m, ...]``); a single call where ``x`` fits in one batch."""
    n = x.shape[0]
    if n <= rows:
        return fn(x)
    first = fn(x[:rows])
    out = first.new_empty((n, *first.shape[1:]))
    out[:rows] = first
    for i in range(rows, n, rows):
        out[i:i + rows] = fn(x[i:i + rows])
    return out


def field_callable(net: Any, theta: torch.Tensor, evaluation: str, n_outputs: int) -> Callable:
    """``x [n, d] → u [n]`` (or ``[n, C]``) with the same operations as the run (see ``evaluation``), in batches
    of :func:`eval_rows` points."""
    from torch.func import vmap

    if evaluation not in ("batch", "pointwise"):
        raise ModelFileError(f"unknown evaluation {evaluation!r}; allowed: batch, pointwise")
    d = net.sizes[0]
    rows = eval_rows(net.sizes)

    def u(x: Any) -> torch.Tensor:
        x = torch.as_tensor(x, dtype=theta.dtype)
        if x.ndim == 1 and d == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(f"points must have shape [n, {d}], got {tuple(x.shape)}")
        with torch.no_grad():
            if evaluation == "batch":
                return batched(lambda xb: net(theta, xb), x, rows)
            out = batched(vmap(lambda y: net(theta, y).reshape(n_outputs)), x, rows)
            return out.squeeze(-1) if n_outputs == 1 else out

    u.inputs_dim = d  # type: ignore[attr-defined]  # the callable says how many inputs it takes
    return u


def _load_ridge(tensors: dict, meta: dict) -> Callable:
    """``kind="ridge"`` (:mod:`fedsciml.ridge.model_io`): ``x [n, d] → x @ coef + intercept``."""
    if set(tensors) != {"coef", "intercept"} or tensors["coef"].ndim != 1 or tensors["intercept"].numel() != 1:
        raise ModelFileError(f"a ridge model holds tensors coef [d] and intercept [1], got {sorted(tensors)}")
    coef, intercept = tensors["coef"], tensors["intercept"][0]

    def f(x: Any) -> torch.Tensor:
        x = torch.as_tensor(x, dtype=coef.dtype)
        if x.ndim != 2 or x.shape[1] != coef.numel():
            raise ValueError(f"points must have shape [n, {coef.numel()}], got {tuple(x.shape)}")
        return x @ coef + intercept

    f.inputs_dim = coef.numel()  # type: ignore[attr-defined]
    return f


LOADERS: dict[str, Callable] = {"field": _load_field, "ridge": _load_ridge}


def load(directory: str) -> Callable:
    """A callable evaluating the saved model at a batch of points, chosen by the model's ``kind``."""
    tensors, meta = read_model(directory)
    kind = meta["kind"]
    if kind not in LOADERS:
        raise ModelFileError(f"model kind {kind!r} has no loader; known kinds: {sorted(LOADERS)}")
    fn = LOADERS[kind](tensors, meta)
    fn.meta = meta
    return fn
