"""The public Python API (re-exported from ``fedsciml``).

Everything importable from ``fedsciml`` itself is public and documented;
anything else may change.  Typical use::

    import fedsciml as fs

    result = fs.solve("bratu", method="gn", clients=4, rounds=40)
    print(result.final["rel_l2"])
    result.to_json("bratu.json"); result.plot("plots/")
"""
from __future__ import annotations

from typing import Any, Union

import torch

from fedsciml.problems import get_problem
from fedsciml.problems.base import Problem
from fedsciml.results import Result
from fedsciml.runner import available_methods
from fedsciml.runner import solve as _solve


def solve(problem: Union[str, Problem], method: str = "centralized", clients: int | None = None, *, seed: int = 0,
          device: Union[str, torch.device] = "cpu", progress: bool = False,
          problem_options: dict[str, Any] | None = None, **method_options: Any) -> Result:
    """Solve a problem — a :class:`Problem` instance or a registered name — with one method.

    Parameters
    ----------
    problem : Problem or str
        e.g. ``"bratu"`` (options through ``problem_options={"lam": 2.0}``) or
        ``fs.get_problem("poisson", dim=3)`` or an instance of your own class.
    method : str
        ``centralized`` (pooled-data reference), ``gn``, ``fipa``, ``fedavg``,
        ``fedprox``, ``one-shot`` (see :func:`methods`).
    clients : int, optional
        Number of clients the domain or data is split among (default: the
        problem's own, 1 for most; for :class:`ClientData` the number of
        client datasets given).
    method_options
        The fields of the method's configuration (:mod:`fedsciml.config`:
        ``CentralizedConfig``, ``GNConfig``, ``FIPAConfig``, ``FedAvgConfig``,
        ``FedProxConfig``, ``OneShotConfig``), e.g. ``budget`` (seconds),
        ``optimizer``, ``max_iters``, ``rounds``, ``rank``, ``local``,
        ``local_steps``, ``lr``, ``mu``, ``participation``, ``dropout``,
        ``checkpoint``, ``resume``; or ``config=`` one such object.  ``every``
        (progress-line interval) and ``message_hook`` are passed to the runner.

    Raises
    ------
    OptionError (a ValueError)
        an option the method does not have (the message names it and lists
        the allowed ones) or a value out of range;
    TypeError
        an argument of the wrong type (``budget='5'``, ``seed=1.5``,
        ``checkpoint=123``);
    ValueError
        ``seed`` < 0, an unknown device, a run too large for the memory available.

    Returns
    -------
    Result
        ``.final``, ``.history``, ``.theta``, ``.to_json()``, ``.plot()`` —
        the same schema as the CLI's ``result.json``.
    """
    if problem_options is not None and not isinstance(problem_options, dict):
        raise TypeError(f"problem_options must be a dict, got {type(problem_options).__name__}")
    if isinstance(problem, str):
        problem = get_problem(problem, **(problem_options or {}))
    elif problem_options:
        raise ValueError("problem_options only applies when the problem is given by name")
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a fedsciml Problem or a registered name, got {type(problem).__name__}")
    return _solve(problem, method=method, clients=clients, seed=seed, device=device, progress=progress,
                  **method_options)


def methods() -> list[str]:
    """Names of the available solve methods."""
    return available_methods()


def save_model(result: Result, problem: Problem, directory) -> str:
    """Write the trained model of ``result`` (a run of ``problem``) to ``directory`` as ``model.safetensors`` +
    ``model.json`` (kind ``field``: the network, its architecture, the problem and its options, the method,
    the final metrics and an inverse problem's coefficients; :mod:`fedsciml.modelio`).  Returns the directory."""
    from fedsciml.modelio import write_model

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
    from fedsciml.modelio import ModelFileError, load, read_model

    tensors, meta = read_model(str(directory))
    if meta["kind"] != "field" or not meta.get("ansatz"):
        if problem is not None:
            raise ValueError("problem= applies to a model with a hard-constraint ansatz only")
        return load(str(directory))
    if problem is None:
        from fedsciml.problems import REGISTRY

        if meta.get("problem") not in REGISTRY:
            raise ModelFileError(f"the model of problem {meta.get('problem')!r} has a hard-constraint ansatz and no "
                                 f"such problem is registered: give it, fs.load_model(DIR, problem=...)")
        problem = get_problem(meta["problem"], **meta.get("options", {}))
    theta = tensors["theta"]

    def u(x):
        return problem.predict(theta, torch.as_tensor(x, dtype=theta.dtype))

    u.meta = meta
    return u
