"""The trained model out of a run: one directory, ``model.safetensors`` + ``model.json``.

Format (simple on purpose, so that any language reads it):

* ``model.safetensors`` — named tensors (safetensors: no code runs when it is read);
* ``model.json`` — ``{"format": "fedsciml-model", "version": 1, "kind": KIND, ...}`` with what is needed
  to use the tensors.  ``kind`` says how:

  - ``"field"`` — a network ``u(x)``: tensor ``theta`` (the flat parameter vector, float64), and
    ``architecture`` ``{"type": "mlp", "sizes": [...], "activation": ...}``, ``outputs`` (component
    names), ``inputs`` (axis names), ``evaluation`` (``"batch"``: the network on the whole batch, as
    :class:`~fedsciml.problems.base.FieldProblem` evaluates it; ``"pointwise"``: ``vmap`` over points, as
    :class:`~fedsciml.problems.domain.DomainPDE` does — the loader repeats the run's own operations,
    so its predictions equal the run's bitwise), ``n_network_params`` (θ beyond them holds the
    ``coefficients`` of an inverse problem, also listed by name and value), ``ansatz`` (true when the
    problem's hard constraint wraps the network: only the problem itself can evaluate it),
    ``problem``, ``options``, ``method``, ``final``;
  - other kinds (``"ridge"``: linear coefficients) are written by their own modules with the same
    :func:`write_model` and read back by a loader registered in :data:`LOADERS`.

:func:`write_model` / :func:`read_model` are the one writer and reader; :func:`load` turns a directory into
a callable by its kind.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import torch

FORMAT = "fedsciml-model"
VERSION = 1
TENSORS = "model.safetensors"
META = "model.json"


class ModelFileError(ValueError):
    """A model directory that cannot be read (missing file, another format, an unknown kind)."""


def write_model(directory: str, tensors: dict[str, torch.Tensor], meta: dict) -> str:
    """Write ``tensors`` and ``meta`` (which must name its ``kind``) to ``directory``; returns the JSON path."""
    from fedsciml.runtime.results import write_json

    if not isinstance(meta.get("kind"), str) or not meta["kind"]:
        raise ValueError("model metadata must name its kind (a non-empty string)")
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, TENSORS + ".tmp")
    save_file({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, tmp)
    os.replace(tmp, os.path.join(directory, TENSORS))
    path = os.path.join(directory, META)
    write_json({"format": FORMAT, "version": VERSION, **meta}, path)
    return path


def read_model(directory: str) -> tuple[dict[str, torch.Tensor], dict]:
    """``(tensors, meta)`` of a model directory written by :func:`write_model`."""
    from safetensors.torch import load_file

    mpath, tpath = os.path.join(directory, META), os.path.join(directory, TENSORS)
    for p in (mpath, tpath):
        if not os.path.isfile(p):
            raise ModelFileError(f"{directory!r} is not a fedsciml model directory: {os.path.basename(p)} is missing")
    try:
        with open(mpath) as f:
            meta = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ModelFileError(f"{mpath!r} cannot be read as JSON: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or not isinstance(meta.get("kind"), str):
        raise ModelFileError(f"{mpath!r} is not a fedsciml model description (format {FORMAT!r} with a kind)")
    if meta.get("version") != VERSION:
        raise ModelFileError(f"{mpath!r} has version {meta.get('version')!r}; this fedsciml reads version {VERSION}")
    # Copied into fresh memory: a tensor read from the file may sit at an address aligned to 8 bytes only, and
    # vectorized kernels round differently at different alignments (one ulp, seen on this CPU); torch's
    # allocator aligns fresh tensors as the run's own parameters were — the loaded model then equals the run bitwise.
    return {k: v.clone() for k, v in load_file(tpath).items()}, meta


def _load_field(tensors: dict, meta: dict) -> Callable:
    from fedsciml.core.nn import MLP

    arch = meta.get("architecture") or {}
    if arch.get("type") != "mlp":
        raise ModelFileError(f"unknown architecture {arch.get('type')!r}; this fedsciml reads 'mlp'")
    if meta.get("ansatz"):
        raise ModelFileError(f"the model of problem {meta.get('problem')!r} has a hard-constraint ansatz: load it with "
                             f"its problem, fs.load_model(DIR, problem=...)")
    net = MLP(arch["sizes"], arch["activation"])
    theta = tensors["theta"][: int(meta.get("n_network_params", net.n_params))]
    return field_callable(net, theta, meta.get("evaluation", "batch"), len(meta.get("outputs", [""])))


def field_callable(net: Any, theta: torch.Tensor, evaluation: str, n_outputs: int) -> Callable:
    """``x [n, d] → u [n]`` (or ``[n, C]``) with the same operations as the run (see ``evaluation``)."""
    from torch.func import vmap

    if evaluation not in ("batch", "pointwise"):
        raise ModelFileError(f"unknown evaluation {evaluation!r}; allowed: batch, pointwise")
    d = net.sizes[0]

    def u(x: Any) -> torch.Tensor:
        x = torch.as_tensor(x, dtype=theta.dtype)
        if x.ndim == 1 and d == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[1] != d:
            raise ValueError(f"points must have shape [n, {d}], got {tuple(x.shape)}")
        with torch.no_grad():
            if evaluation == "batch":
                return net(theta, x)
            out = vmap(lambda y: net(theta, y).reshape(n_outputs))(x)
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
