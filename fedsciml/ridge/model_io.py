"""The fitted ridge model out of a run, in the project's one model format (:mod:`fedsciml.runtime.modelio`).

A directory with ``model.safetensors`` — ``coef`` ``[d]`` and ``intercept`` ``[1]`` (float64; safetensors, so
reading it back never runs code) — and ``model.json`` of kind ``"ridge"``: ``n_features``, the intercept, the
σ used, how the model was fitted (method, clients, DP ε/δ when private, projection) and ``predict``:
``X @ coef + intercept``.  :func:`fedsciml.runtime.modelio.load` (``fs.load_model``, ``python -m fedsciml
predict``) turns it into a callable; :func:`read_model` returns the numbers and checks that the two files agree.
"""
from __future__ import annotations

import math
import os

import torch

from fedsciml.runtime import modelio

KIND = "ridge"


def write_model(out_dir: str, coef, intercept: float = 0.0, meta: dict | None = None) -> list:
    """Write ``model.safetensors`` and ``model.json`` into ``out_dir``; returns the two paths."""
    coef = torch.as_tensor(coef).detach().to(device="cpu", dtype=torch.float64).reshape(-1).contiguous()
    intercept = float(intercept)
    if not (bool(torch.isfinite(coef).all()) and math.isfinite(intercept)):
        raise ValueError("the model has non-finite coefficients or intercept; nothing written")
    d = int(coef.numel())
    doc = {"kind": KIND, "n_features": d, "intercept": intercept, "inputs": [f"x{i}" for i in range(d)],
           "outputs": ["y"], "predict": "X @ coef + intercept", **(meta or {})}
    js = modelio.write_model(out_dir, {"coef": coef, "intercept": torch.tensor([intercept], dtype=torch.float64)},
                             doc)
    return [os.path.join(out_dir, modelio.TENSORS), js]


def _method(res):
    from fedsciml.methods import METHODS  # every built-in method registered

    return METHODS.get(res.method)


def writes_model(res) -> bool:
    """Whether ``res`` (a run on a ridge problem) fitted a linear model its method describes
    (:attr:`fedsciml.runtime.registry.Method.linear_model`): what ``solve --out`` and the Flower App write out."""
    spec = _method(res)
    return spec is not None and spec.linear_model is not None


def model_meta(res, **extra) -> dict:
    """What ``model.json`` says about ``res``'s linear model: its method's description (one-shot's: σ used, clients
    fused, DP, projection, seed, problem) and ``extra``."""
    spec = _method(res)
    meta = None if spec is None else spec.linear_model_meta(res)
    if meta is None:
        raise ValueError(f"method {res.method!r} fits no linear model to write (its registry entry declares no "
                         f"linear_model)")
    return {**meta, **extra}


def read_model(out_dir: str):
    """``(coef [d] float64 tensor, intercept, model.json dict)`` of a ridge model directory."""
    tensors, meta = modelio.read_model(out_dir)  # checked there: float64, shapes against n_features, intercept
    if meta["kind"] != KIND:
        raise modelio.ModelFileError(f"{out_dir!r} holds a model of kind {meta['kind']!r}, not a ridge model")
    return tensors["coef"], float(tensors["intercept"][0]), meta
