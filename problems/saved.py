"""The trained model of a run, saved and loaded (:mod:`fedsciml.runtime.modelio` holds the format).

Here, in the problems layer, because a model whose problem wraps the network in a hard-constraint ansatz
is evaluated by that problem; re-exported as ``fs.save_model`` and ``fs.load_model``.
"""
from __future__ import annotations

from typing import Union

import torch

from fedsciml.runtime.results import Result

from .base import Problem
from .registry import get_problem


def save_model(result: Result, problem: Problem, directory) -> str:
    """Write the trained model of ``result`` (a run of ``problem``) to ``directory`` as ``model.safetensors`` +
    ``model.json`` (kind ``field``: the network, its architecture, the problem and its options, the method,
    the final metrics and an inverse problem's coefficients; :mod:`fedsciml.runtime.modelio`).  Returns the directory."""
    from fedsciml.runtime.modelio import write_model

    if not hasattr(problem, "model_description"):
        raise TypeError(f"problem {getattr(problem, 'name', problem)!r} has no network to save")
    if result.theta is None:
        raise ValueError("this result holds no parameters to save")
    theta = result.theta.detach()
    meta = {"kind": "field", **problem.model_description(theta), "problem": problem.name,
            "options": dict(problem.options), "method": result.method, "clients": result.clients,
            "seed": result.seed, "final": result.final}
    write_model(str(directory), {"theta": theta}, meta)
    return str(directory)


def load_model(directory, problem: Union[Problem, None] = None):
    """A callable evaluating a saved model at a batch of points: ``u = fs.load_model(DIR); u(x)`` with
    ``x [n, d]`` → ``[n]`` (one output) or ``[n, C]`` (a system), the same operations as the run (so the same
    bits).  A model whose problem wraps the network in a hard-constraint ansatz is evaluated by its problem:
    the registered one of the saved name and options, or the ``problem`` given."""
    from fedsciml.runtime.modelio import ModelFileError, load, read_model

    tensors, meta = read_model(str(directory))
    if meta["kind"] != "field" or not meta.get("ansatz"):
        if problem is not None:
            raise ValueError("problem= applies to a model with a hard-constraint ansatz only")
        return load(str(directory))
    if problem is None:
        from .registry import REGISTRY

        if meta.get("problem") not in REGISTRY:
            raise ModelFileError(f"the model of problem {meta.get('problem')!r} has a hard-constraint ansatz and no "
                                 f"such problem is registered: give it, fs.load_model(DIR, problem=...)")
        opts = meta.get("options", {})
        if not isinstance(opts, dict):
            raise ModelFileError(f"{directory!r}: model.json's options must be an object, got {opts!r}")
        from .registry import file_options

        named = [k for k in file_options(REGISTRY[meta["problem"]]) if opts.get(k) not in (None, "", [], ())]
        if named:  # a model directory names nothing outside itself: no file is opened on model.json's word
            raise ModelFileError(f"{directory!r}: model.json's problem {meta['problem']!r} names files (option "
                                 f"{', '.join(named)}); a model directory names nothing outside itself: build the "
                                 f"problem yourself and give it, fs.load_model(DIR, problem=...)")
        try:
            problem = get_problem(meta["problem"], **opts)
        except (ValueError, TypeError) as e:
            raise ModelFileError(f"{directory!r}: model.json's problem {meta['problem']!r} cannot be built from its "
                                 f"options ({e})") from None
    theta = tensors["theta"]
    if meta.get("time_windows"):  # a time-marched model: the problem's piecewise model (fedsciml.problems.windows)
        from .windows import windowed

        problem = windowed(problem, meta["time_windows"])
    p = int(problem.network().n_params)
    if p != meta.get("n_network_params", p) or theta.numel() < p:
        raise ModelFileError(f"{directory!r}: the model holds {theta.numel()} parameters for a network of "
                             f"{meta.get('n_network_params')}; problem {problem.name!r} has {p}")

    from fedsciml.runtime.modelio import batched, eval_rows

    rows = eval_rows(meta.get("architecture", {}).get("sizes") or [p])

    def u(x):  # in batches of eval_rows points (fedsciml.runtime.modelio.EVAL_BYTES), as a plain field model
        x = torch.as_tensor(x, dtype=theta.dtype)
        return batched(lambda xb: problem.predict(theta, xb), x, rows) if x.ndim >= 1 else problem.predict(theta, x)

    u.meta = meta
    if meta.get("fields") and hasattr(problem, "coefficient_fields"):  # its fields, each through its own ansatz
        u.fields = problem.coefficient_fields(theta)  # type: ignore[attr-defined]
    return u
