"""Run a method on a problem: the one entry point the CLI and the Python API share.

Methods live in :data:`METHODS` (name → runner).  A runner receives the
problem, the per-client objectives, the initial parameters, the evaluation
function and its options, and returns ``(θ, history rows, info)``.  The
federated layer registers its methods here (``gn``, ``fipa``, ``fedavg``,
``fedprox``); ``centralized`` pools the clients' data and is labelled as the
reference it is.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from fedsciml.checks import check_objectives
from fedsciml.objective import stack_objectives
from fedsciml.results import Result
from fedsciml.solvers.centralized import SolveConfig, solve_least_squares
from fedsciml.solvers.lm import LMConfig, default_tau

METHODS: dict[str, Callable] = {}
ENGINES = ("local", "flower")  # who carries the clients' messages: this process, or Flower (fedsciml.flower)


def register_method(name: str):
    def deco(fn):
        METHODS[name] = fn
        return fn

    return deco


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was requested but no CUDA device is available; use --device cpu or auto")
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    return dev


@register_method("centralized")
def _run_centralized(problem, objectives, theta0, evaluate, *, optimizer="lm", budget=None, max_iters=None,
                     tol=0.0, lr=None, progress=False, every=10, **unused):
    cfg = SolveConfig(optimizer=optimizer, max_iters=max_iters, budget=budget, tol=tol, lr=lr, lm=LMConfig(tau=default_tau(objectives)))
    obj = stack_objectives(objectives)
    theta, rows, info = solve_least_squares(obj, theta0, evaluate, cfg, progress=progress, every=every,
                                            label=f"centralized/{optimizer}")
    info["reference"] = "centralized: all clients' data pooled on one machine (not federated)"
    return theta, rows, info


def _ensure_methods_loaded():
    try:  # the federated layer registers its methods on import
        import fedsciml.federated.methods  # noqa: F401
    except ImportError as e:  # pragma: no cover - only while the layer is being written
        if "fedsciml.federated.methods" not in str(e):
            raise


def available_methods() -> list[str]:
    _ensure_methods_loaded()
    return sorted(METHODS)


def solve(problem, method: str = "centralized", clients: int | None = None, seed: int = 0,
          device="cpu", progress: bool = False, **options) -> Result:
    """Solve ``problem`` (a :class:`~fedsciml.problems.Problem`) with ``method``.

    ``clients`` defaults to the problem's own default (1 for most).  Remaining
    keyword options go to the method (``optimizer``, ``budget``, ``max_iters``,
    ``rounds``, ``rank``, ...).
    """
    _ensure_methods_loaded()
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; available: {', '.join(sorted(METHODS))}")
    engine = options.pop("engine", "local")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "flower":  # the same strategy and round loop; Flower's simulation engine carries the messages
        from fedsciml.flower.simulation import solve as solve_on_flower

        return solve_on_flower(problem, method, clients=clients, seed=seed, device=device, progress=progress,
                               **options)
    dev = resolve_device(device)
    if clients is None:
        clients = problem.default_clients
    torch.manual_seed(seed)
    objectives = problem.client_objectives(clients, seed=seed, device=dev)
    theta0 = problem.init_params(seed, device=dev)
    check_objectives(objectives, theta0)
    t0 = time.perf_counter()
    theta, rows, info = METHODS[method](problem, objectives, theta0, problem.evaluate, progress=progress, seed=seed,
                                        **options)
    wall = time.perf_counter() - t0
    last = rows[-1] if rows else {}
    final = {"loss": last.get("loss")}
    final.update(problem.evaluate(theta))
    return Result(
        problem=problem.name, method=method, options={**problem.options, **_jsonable(options)}, seed=seed,
        device=str(dev), dtype=str(theta.dtype).replace("torch.", ""), n_params=int(theta.numel()),
        clients=int(clients), wall_time_s=wall, final=final, history=rows, extra=_jsonable(info), theta=theta,
    )


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, (int, float, str, bool)) or v is None:
            out[k] = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (int, float, str, bool)) for x in v):
            out[k] = list(v)
        elif isinstance(v, dict):
            out[k] = _jsonable(v)
        elif isinstance(v, (list, tuple)) and all(isinstance(x, dict) for x in v):  # e.g. rejected messages
            out[k] = [_jsonable(x) for x in v]
        else:
            out[k] = repr(v)
    return out
