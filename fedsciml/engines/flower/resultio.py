"""The result files of a Flower run: what the ServerApp writes and the process that started the run reads.

Apart from :mod:`fedsciml.engines.flower.apps` so that the reading side (``fs.solve(..., engine="flower")``, the
CLI) imports neither Flower nor the apps: it only starts Flower's programs and reads these files.
"""
from __future__ import annotations

import os


def write_result(res, out: str):
    """``out`` (the Result as JSON) and ``out + ".theta.safetensors"`` (θ, bitwise); θ is written first, the JSON
    last and renamed into place, so a reader that sees the JSON finds both complete."""
    from safetensors.torch import save_file

    save_file({"theta": res.theta.detach().cpu().contiguous()}, out + ".theta.safetensors")
    res.to_json(out + ".part")
    os.replace(out + ".part", out)


def read_result(out: str):
    """The Result :func:`write_result` wrote, with its θ."""
    from safetensors.torch import load_file

    from fedsciml.runtime.results import Result

    res = Result.from_json(out)
    res.theta = load_file(out + ".theta.safetensors")["theta"]
    return res
