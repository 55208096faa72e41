"""The result directory of a Flower run: what the ServerApp writes and the process that started the run reads.

A run's ``out`` (the App's run config ``out='DIR'``, or a path the engine chose) is a directory, the same one
``python -m fedsciml solve --out DIR`` writes: ``result.json`` (the Result), ``history.csv``, the trained model
(``model.safetensors`` + ``model.json``, for a problem with a network or a one-shot ridge fit) that
``fs.load_model(DIR)`` reads, and ``theta.safetensors`` (θ exactly as the run ended, for the engine that reads
the Result back).  ``result.json`` is written last, by a rename, so a reader that sees it finds the rest complete.

Apart from :mod:`fedsciml.engines.flower.apps` so that the reading side (``fs.solve(..., engine="flower")``, the
CLI) imports neither Flower nor the apps: it only starts Flower's programs and reads these files.
"""
from __future__ import annotations

import json
import logging
import os

RESULT = "result.json"
THETA = "theta.safetensors"
HISTORY = "history.csv"
FAILED = "failed.json"  # the ServerApp's record of a job that failed: {"error": one line}

log = logging.getLogger(__name__)


def result_path(out: str) -> str:
    """The file whose appearance says that the run's directory ``out`` is complete."""
    return os.path.join(str(out), RESULT)


def ready(out: str) -> bool:
    """Whether ``out`` is complete: a result directory with its ``result.json``, or a result file (an image
    benchmark job writes one JSON file)."""
    out = str(out)
    return os.path.isfile(result_path(out)) or (os.path.isfile(out) and not os.path.isdir(out))


def failure_path(out: str, kind: str = "solve") -> str:
    """Where the ServerApp records that the job writing ``out`` failed: ``failed.json`` in a solve job's result
    directory, ``<out>.failed.json`` beside an image job's result file."""
    out = str(out)
    return os.path.join(out, FAILED) if kind == "solve" else out + "." + FAILED


def write_failure(out: str, reason: str, kind: str = "solve") -> str:
    """Record (ServerApp side) that the job writing ``out`` failed, with its one-line ``reason``: Flower's ``flwr
    run`` neither ends nor exits non-zero when a ServerApp raises, so the process that submitted the run reads this
    record (:func:`read_failure`) instead.  Returns the record's path."""
    from fedsciml.runtime.files import write_text

    path = failure_path(out, kind)
    if kind == "solve":
        os.makedirs(str(out), exist_ok=True)
    write_text(path, json.dumps({"error": str(reason)}) + "\n", what="the run's failure record")
    return path


def clear_failure(out: str, kind: str = "solve") -> None:
    """Remove a failure record left in ``out`` by an earlier run (a reused directory must not fail this one)."""
    try:
        os.remove(failure_path(out, kind))
    except (FileNotFoundError, NotADirectoryError):
        pass


def read_failure(out: str) -> str | None:
    """The one-line reason the ServerApp recorded for the job writing ``out`` (:func:`write_failure`), or ``None``
    while there is none.  A record that cannot be read whole yet (being written) is ``None`` too."""
    out = str(out)
    for path in (os.path.join(out, FAILED), out + "." + FAILED):
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read(65536)
            reason = json.loads(text)["error"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return str(reason).splitlines()[0] if str(reason).strip() else "the ServerApp failed (no reason given)"
    return None


def write_model_files(res, problem, out: str) -> list:
    """The trained model of ``res`` in ``out`` as ``solve --out`` writes it (``model.safetensors`` +
    ``model.json``): a problem with a network (:func:`fedsciml.problems.saved.save_model`) or a one-shot ridge
    fit (:func:`fedsciml.ridge.model_io.write_model`); nothing for other runs.  Returns the paths written."""
    if problem is None or res.theta is None:
        return []
    if getattr(problem, "kind", None) == "ridge":
        from fedsciml.ridge.model_io import model_meta, write_model, writes_model

        if not writes_model(res):
            return []

        return write_model(out, res.theta, float(res.extra.get("intercept", 0.0)), model_meta(res, engine="flower"))
    if hasattr(problem, "model_description"):
        from fedsciml.problems.saved import save_model
        from fedsciml.runtime.modelio import META, TENSORS

        save_model(res, problem, out)
        return [os.path.join(out, TENSORS), os.path.join(out, META)]
    return []


def write_result(res, out: str, problem=None) -> str:
    """Write the run's directory ``out`` (see the module docstring); ``problem``: the run's problem, for the
    model files (without it only the Result, θ and the history).  Returns ``out``."""
    from safetensors.torch import save

    from fedsciml.runtime.files import write_bytes, write_text

    out = str(out)
    os.makedirs(out, exist_ok=True)
    done = result_path(out)
    if os.path.exists(done):  # a directory reused: its old result must not look like this run's
        os.remove(done)
    write_bytes(os.path.join(out, THETA), save({"theta": res.theta.detach().cpu().contiguous()}))
    res.write_history_csv(os.path.join(out, HISTORY))
    write_model_files(res, problem, out)
    write_text(done, res.to_json() + "\n")  # last: its presence says the directory is whole
    return out


def read_result(out: str):
    """The Result :func:`write_result` wrote in ``out``, with its θ (bitwise)."""
    from safetensors.torch import load_file

    from fedsciml.runtime.results import Result

    res = Result.from_json(result_path(out))
    res.theta = load_file(os.path.join(str(out), THETA))["theta"]
    return res
