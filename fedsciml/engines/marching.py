"""Time-marching over windows and causal weighting of a time-dependent problem: the loops of ``fs.solve(...,
time_windows=K, time_window_growth=r, causal=ε)`` and of ``solve --time-windows K --time-window-growth r --causal ε``.

Decision: the loops live here, above the methods and below both front ends (``fedsciml.api`` and ``fedsciml.cli``
are siblings that may not import each other), so that the command line and ``fs.solve`` run the same code: each
window, and each causal stage, is one run of the one driver (:func:`fedsciml.runtime.driver.solve`) on a problem
built by :mod:`fedsciml.problems.windows` or :mod:`fedsciml.problems.causal` — every method and every exact
invariant unchanged.
"""
from __future__ import annotations

from typing import Any

import torch

from fedsciml.problems.base import Problem
from fedsciml.problems.causal import causal_problem, check_causal
from fedsciml.problems.windows import window_edges, window_problem, windowed
from fedsciml.runtime.driver import make_result
from fedsciml.runtime.results import Result
from fedsciml.runtime.driver import solve as _solve

#: the defaults of causal weighting's slices and stage length (fs.solve's and the command line's)
CAUSAL_SLICES, CAUSAL_EVERY = 16, 5


def marching_options(time_windows: int | None = None, time_window_growth: float = 1.0, causal: float | None = None,
                     causal_slices: int = CAUSAL_SLICES, causal_every: int = CAUSAL_EVERY) -> dict:
    """The time-marching and causal settings given, checked for the ones that need another (``{}``: none given).
    One line for a setting that applies only with another: ``causal_slices``/``causal_every`` without ``causal``,
    ``time_window_growth`` without ``time_windows``."""
    if causal is None and (causal_slices != CAUSAL_SLICES or causal_every != CAUSAL_EVERY):
        raise ValueError("causal_slices and causal_every apply with causal=ε only; give causal")
    if time_windows is None and time_window_growth != 1.0:
        raise ValueError(f"time_window_growth ({time_window_growth!r}) applies with time_windows=K only; give "
                         f"time_windows")
    out: dict = {}
    if time_windows is not None:
        out.update(time_windows=time_windows, time_window_growth=time_window_growth)
    if causal is not None:
        out.update(causal=causal, causal_slices=causal_slices, causal_every=causal_every)
    return out


def check_marching(problem: Problem, method: str, method_options: dict, time_windows: int | None = None,
                   time_window_growth: float = 1.0, causal: float | None = None, causal_slices: int = CAUSAL_SLICES,
                   causal_every: int = CAUSAL_EVERY) -> None:
    """Everything :func:`solve_marched` would refuse, said before any run starts (one line each)."""
    if time_windows is not None:
        window_edges(problem, time_windows, time_window_growth)
    if causal is not None:
        check_causal(problem, causal, causal_slices, causal_every)
        _causal_steps(method, method_options)
    if method_options.get("engine", "local") != "local":
        what = "time_windows runs each window" if time_windows is not None else \
            "causal weighting computes the weights"
        raise ValueError(f"{what} in this process: engine 'local' only, got engine="
                         f"{method_options.get('engine')!r}")


def _causal_steps(method: str, method_options: dict) -> tuple[str, int]:
    from fedsciml.runtime.driver import get_method

    key = "rounds" if get_method(method).federated else "max_iters"  # the pooled data's run counts iterations
    total = method_options.get(key)
    if isinstance(total, bool) or not isinstance(total, int) or total < 1 or "budget" in method_options:
        raise ValueError(f"causal weighting runs {key} in stages of causal_every: give {key} (a whole number ≥ 1) "
                         f"and no budget, got {key}={total!r}")
    return key, total


def solve_marched(problem: Problem, method: str, *, clients: int | None = None, seed: int = 0, device: Any = "cpu",
                  progress: bool = False, time_windows: int | None = None, time_window_growth: float = 1.0,
                  causal: float | None = None, causal_slices: int = CAUSAL_SLICES, causal_every: int = CAUSAL_EVERY,
                  **method_options: Any) -> Result:
    """One run with time windows and/or causal weighting (:func:`marching_options`' settings)."""
    check_marching(problem, method, method_options, time_windows, time_window_growth, causal, causal_slices,
                   causal_every)
    opts = None if causal is None else (causal, causal_slices, causal_every)
    if time_windows is not None:
        return solve_windows(problem, time_windows, method, clients, seed, device, progress, method_options, opts,
                             time_window_growth)
    if opts is None:
        raise ValueError("solve_marched needs time_windows or causal")
    return solve_causal(problem, opts, method, clients, seed, device, progress, method_options)


def solve_causal(problem: Problem, causal: tuple, method: str, clients: int | None, seed: int, device: Any,
                 progress: bool, method_options: dict) -> Result:
    """Causal weighting in stages (:mod:`fedsciml.problems.causal`): the weights at the current θ, then
    ``causal_every`` steps or rounds of the method on the problem so weighted, warm-started; until the run's
    ``max_iters`` or ``rounds`` are spent.  Like time-marching, the loop lives at the level of ``fs.solve``: each
    stage is one run of the driver (every method and exact invariant unchanged)."""
    eps, slices, every = causal
    check_causal(problem, eps, slices, every)
    if method_options.get("engine", "local") != "local":
        raise ValueError(f"causal weighting computes the weights in this process: engine 'local' only, got engine="
                         f"{method_options.get('engine')!r}")
    key, total = _causal_steps(method, method_options)
    theta = problem.init_params(seed, device="cpu")
    results, stage_w, done = [], [], 0
    while done < total:
        n = min(every, total - done)
        cp = causal_problem(problem, theta, eps, slices)
        r = _solve(cp, method=method, clients=clients, seed=seed, device=device, progress=progress,
                   **{**method_options, key: n})
        results.append(r)
        stage_w.append([float(v) for v in cp.causal_weights])
        theta, done = r.theta.detach().cpu(), done + n
    last = results[-1]
    history, step, t = [], 0, 0.0
    for j, r in enumerate(results):
        for i, row in enumerate(r.history):
            if j and i == 0:
                continue  # a stage's row 0 is the last stage's end θ, under the new weights
            history.append({**row, "step": step + i, "time_s": t + float(row.get("time_s") or 0.0),
                            "causal_stage": j + 1, "causal_min_weight": min(stage_w[j])})
        step += len(r.history) - 1
        t += float(r.history[-1].get("time_s") or 0.0) if r.history else 0.0
    final = {**last.final, **problem.evaluate(last.theta), "causal_min_weight": min(stage_w[-1])}
    res = make_result(problem, last.method, {**last.options, key: total, "causal": eps, "causal_slices": slices,
                                             "causal_every": every},
                      seed=seed, device=last.device, clients=last.clients, theta=last.theta,
                      seconds=sum(r.solver_seconds for r in results), final=final, history=history,
                      extra={**last.extra, "causal_stages": [
                          {"weights": w, "steps": len(r.history) - 1, "solver_seconds": r.solver_seconds}
                          for w, r in zip(stage_w, results)]})
    res.wall_seconds = sum(r.wall_seconds or 0.0 for r in results)
    return res


def solve_windows(problem: Problem, windows: int, method: str, clients: int | None, seed: int, device: Any,
                  progress: bool, method_options: dict, causal: tuple | None = None, growth: float = 1.0) -> Result:
    """Time-marching (``fs.solve(..., time_windows=K)``; :mod:`fedsciml.problems.windows`).

    Decision: the loop over windows lives here, at the level of ``fs.solve``, not in a problem nor in a method:
    each window is a whole run of the one driver on the window's problem (any method, any options: the same
    code paths, the same exact invariants — gn on a window equals centralized LM on it), and a problem states
    its PDE once, for all of ``[t0, T]``.  In-process only: a Flower node builds its problem by name, with no
    window's conditions."""
    if method_options.get("engine", "local") != "local":
        raise ValueError(f"time_windows runs each window in this process: engine 'local' only, got engine="
                         f"{method_options.get('engine')!r}")
    edges = window_edges(problem, windows, growth)
    prev: tuple | None = None
    results = []
    for k in range(windows):
        wp = window_problem(problem, edges[k], edges[k + 1], prev)
        if causal is not None:
            r = solve_causal(wp, causal, method, clients, seed, device, progress, method_options)
        else:
            r = _solve(wp, method=method, clients=clients, seed=seed, device=device, progress=progress,
                       **method_options)
        results.append(r)
        prev = (wp, r.theta)
    theta = torch.cat([r.theta.reshape(-1) for r in results])
    whole = windowed(problem, edges, results[0].theta.numel())
    last = results[-1]
    final = {"loss": sum(float(r.final.get("loss") or 0.0) for r in results), **whole.evaluate(theta)}
    history = [{**row, "window": k + 1} for k, r in enumerate(results) for row in r.history]
    per_window = [{"t": [edges[k], edges[k + 1]], "final": r.final, "solver_seconds": r.solver_seconds,
                   "stopped_by": r.extra.get("stopped_by")} for k, r in enumerate(results)]
    opts = {**last.options, "time_windows": windows, **({"time_window_growth": growth} if growth != 1.0 else {})}
    res = make_result(whole, last.method, opts, seed=seed, device=last.device, clients=last.clients, theta=theta,
                      seconds=sum(r.solver_seconds for r in results), final=final, history=history, extra={**last.extra, "windows": per_window})
    res.wall_seconds = sum(r.wall_seconds or 0.0 for r in results)
    return res
