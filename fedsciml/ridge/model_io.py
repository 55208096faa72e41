"""The fitted ridge model out of a run: ``model.safetensors`` (the numbers) and ``model.json`` (what they are).

``model.safetensors`` holds ``coef`` ``[d]`` and ``intercept`` ``[1]`` (float64) — safetensors, so reading
the file back never runs code; ``model.json`` is small: the format tag, ``n_features``, the intercept, the
σ used, how the model was fitted (method, clients, DP ε/δ when private, projection) and the name of the
tensor file.  Predictions are ``X @ coef + intercept``.  Both files are written to ``NAME.tmp`` and
renamed, so an interrupted write leaves no half file.  :func:`read_model` reads them back (and checks that
they agree).
"""
from __future__ import annotations

import json
import math
import os

import torch

FORMAT = "fedsciml-ridge-model/1"


def write_model(out_dir: str, coef, intercept: float = 0.0, meta: dict | None = None, stem: str = "model") -> list:
    """Write ``stem.safetensors`` and ``stem.json`` into ``out_dir``; returns the two paths."""
    from safetensors.torch import save_file

    coef = torch.as_tensor(coef).detach().to(device="cpu", dtype=torch.float64).reshape(-1).contiguous()
    intercept = float(intercept)
    if not (bool(torch.isfinite(coef).all()) and math.isfinite(intercept)):
        raise ValueError("the model has non-finite coefficients or intercept; nothing written")
    os.makedirs(out_dir, exist_ok=True)
    st = os.path.join(out_dir, stem + ".safetensors")
    js = os.path.join(out_dir, stem + ".json")
    save_file({"coef": coef, "intercept": torch.tensor([intercept], dtype=torch.float64)}, st + ".tmp",
              metadata={"format": FORMAT})
    os.replace(st + ".tmp", st)
    doc = {"format": FORMAT, "n_features": int(coef.numel()), "intercept": intercept,
           "tensors": os.path.basename(st), "predict": "X @ coef + intercept", **(meta or {})}
    with open(js + ".tmp", "w") as f:
        json.dump(doc, f, indent=2, default=str)
        f.write("\n")
    os.replace(js + ".tmp", js)
    return [st, js]


def read_model(out_dir: str, stem: str = "model"):
    """``(coef [d] float64 tensor, intercept, json dict)`` of a model written by :func:`write_model`."""
    from safetensors.torch import load_file

    with open(os.path.join(out_dir, stem + ".json")) as f:
        doc = json.load(f)
    if doc.get("format") != FORMAT:
        raise ValueError(f"{out_dir}/{stem}.json is not a {FORMAT} file (format {doc.get('format')!r})")
    t = load_file(os.path.join(out_dir, doc["tensors"]))
    coef, intercept = t["coef"], float(t["intercept"][0])
    if coef.numel() != doc["n_features"] or intercept != doc["intercept"]:
        raise ValueError(f"{out_dir}: {stem}.json and {doc['tensors']} disagree (features or intercept)")
    return coef, intercept, doc
