"""PNG plots of runs: the solution against the exact one, and error against time and steps.

Uses matplotlib's object-oriented API on the Agg canvas (no pyplot, no global
backend change, no display needed).  :func:`plot_runs` is what ``--out``
calls; it never fails a run for a problem it cannot draw a field for (ridge,
a user problem without an exact solution): it just skips that figure.
"""
from __future__ import annotations

import math
import os

from typing import Any, Sequence

import numpy as np
import torch

METRIC_LABELS = {"rel_l2": "relative L2 error", "mse": "test MSE", "loss": "training loss ½‖r‖²/N"}


def _figure(w: float, h: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def run_label(result: Any) -> str:
    """``method`` (plus the optimizer for centralized runs): the legend entry of a run."""
    opt = (getattr(result, "options", None) or {}).get("optimizer")
    return f"{result.method}/{opt}" if result.method == "centralized" and opt else str(result.method)


def _metric(result: Any) -> str:
    name = getattr(result, "metric_name", None)
    if name:
        return name
    rows = result.history or [{}]
    return next((k for k in ("rel_l2", "mse") if k in rows[-1]), "loss")


def _series(result: Any, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(step, time, value) arrays of the history rows that carry a finite ``key``."""
    s: list[int] = []
    t: list[float] = []
    v: list[float] = []
    for row in result.history or []:
        val = row.get(key)
        if val is None or not isinstance(val, (int, float)) or not math.isfinite(val) or val <= 0:
            continue
        s.append(row.get("step", row.get("round", len(s))))
        t.append(row.get("time_s", float("nan")))
        v.append(val)
    return np.asarray(s, float), np.asarray(t, float), np.asarray(v, float)


def plot_convergence(results: Sequence[Any], out_dir: str, prefix: str = "") -> list[str]:
    """``error_vs_time.png`` and ``error_vs_step.png``: one line per run, log scale."""
    results = [r for r in results if r.history]
    if not results:
        return []
    metric = _metric(results[0])
    paths = []
    for xkey, fname, xlabel in (("time", "error_vs_time.png", "wall time [s] (solver only)"),
                                ("step", "error_vs_step.png", "step / round")):
        fig = _figure(6.4, 4.2)
        ax = fig.add_subplot()
        drawn = 0
        for r in results:
            s, t, v = _series(r, metric)
            if v.size == 0:
                continue
            x = t if xkey == "time" else s
            ax.plot(x, v, label=run_label(r), lw=1.6, marker="o" if v.size < 30 else None, ms=3)
            drawn += 1
        if not drawn:
            continue
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(METRIC_LABELS.get(metric, metric))
        r0 = results[0]
        ax.set_title(f"{r0.problem}: {METRIC_LABELS.get(metric, metric)} ({r0.clients} client(s))")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        path = os.path.join(out_dir, prefix + fname)
        fig.savefig(path)
        paths.append(path)
    return paths


def _field_inputs(problem: Any) -> int | None:
    try:
        return int(problem.input_dim())
    except (AttributeError, NotImplementedError, TypeError, ValueError):  # no field over a domain: no field plot
        return None


def plot_solution(problem: Any, theta: torch.Tensor | None, out_dir: str, label: str = "",
                  prefix: str = "") -> list[str]:
    """``solution.png``: predicted vs exact field and the pointwise error (1D: two panels;
    2D: exact / predicted / |error| maps; d ≥ 3: the slice x₃ = … = x_d = ½)."""
    d = _field_inputs(problem)
    if theta is None or d is None or not hasattr(problem, "exact") or not hasattr(problem, "u"):
        return []
    theta = theta.detach()
    dev, dt = theta.device, theta.dtype

    def field(X: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            u = problem.u(theta, X.to(dev, dt)).cpu().numpy()
            ue = problem.exact(X.to(dev, dt)).cpu().numpy()
        return u, ue

    try:
        if d == 1:
            X = torch.linspace(0.0, 1.0, 1001, dtype=torch.float64).reshape(-1, 1)
            u, ue = field(X)
        else:
            n = 161
            ax1 = torch.linspace(0.0, 1.0, n, dtype=torch.float64)
            A, B = torch.meshgrid(ax1, ax1, indexing="xy")
            X = torch.full((n * n, d), 0.5, dtype=torch.float64)
            X[:, 0], X[:, 1] = A.reshape(-1), B.reshape(-1)
            u, ue = field(X)
            u, ue = u.reshape(n, n), ue.reshape(n, n)
    except NotImplementedError:  # no exact solution to compare with
        return []
    err = np.abs(u - ue)
    title = f"{problem.name}" + (f" · {label}" if label else "")
    if d == 1:
        x = X[:, 0].numpy()
        fig = _figure(6.4, 5.6)
        top, bot = fig.subplots(2, 1, sharex=True)
        top.plot(x, ue, "k-", lw=2.5, alpha=0.35, label="exact")
        top.plot(x, u, "C0--", lw=1.4, label="network")
        top.set_ylabel("u(x)")
        top.legend(fontsize=8)
        top.set_title(title)
        bot.semilogy(x, np.maximum(err, 1e-300), "C3-", lw=1.0)
        bot.set_ylabel("|u_θ − u|")
        bot.set_xlabel("x")
        for a in (top, bot):
            a.grid(True, which="both", alpha=0.3)
    else:
        fig = _figure(13.0, 4.0)
        axes = fig.subplots(1, 3)
        vmin, vmax = float(min(ue.min(), u.min())), float(max(ue.max(), u.max()))
        ext = (0, 1, 0, 1)
        for ax, data, name in ((axes[0], ue, "exact"), (axes[1], u, "network")):
            im = ax.imshow(data, origin="lower", extent=ext, vmin=vmin, vmax=vmax, cmap="viridis", aspect="equal")
            ax.set_title(name)
            fig.colorbar(im, ax=ax, shrink=0.85)
        im = axes[2].imshow(err, origin="lower", extent=ext, cmap="magma", aspect="equal")
        axes[2].set_title(f"|error| (max {err.max():.2e})")
        fig.colorbar(im, ax=axes[2], shrink=0.85, format="%.1e")
        for ax in axes:
            ax.set_xlabel("x₁")
            ax.set_ylabel("x₂")
        fig.suptitle(title + ("" if d == 2 else f" · slice x₃…x_{d} = ½"))
    path = os.path.join(out_dir, prefix + "solution.png")
    fig.savefig(path)
    return [path]


def plot_error_vs_exchanges(results: Sequence[Any], out_dir: str, prefix: str = "") -> list[str]:
    """``error_vs_exchanges.png``: the error against the exchanges so far (the history's ``exchanges_total``),
    one line per federated run — the axis that prices a method on a deployment where every exchange costs
    seconds.  Nothing is written when no run counted exchanges (centralized runs only)."""
    runs = []
    for r in results:
        rows = [h for h in (r.history or []) if isinstance(h.get("exchanges_total"), int)]
        if rows:
            runs.append((r, rows))
    if not runs:
        return []
    metric = _metric(runs[0][0])
    fig = _figure(6.4, 4.2)
    ax = fig.add_subplot()
    drawn = 0
    for r, rows in runs:
        pts = [(h["exchanges_total"], h[metric]) for h in rows if isinstance(h.get(metric), (int, float))
               and math.isfinite(h[metric]) and h[metric] > 0]
        if pts:
            x, v = zip(*pts)
            ax.plot(x, v, label=run_label(r), lw=1.6, marker="o" if len(v) < 30 else None, ms=3)
            drawn += 1
    if not drawn:
        return []
    ax.set_yscale("log")
    ax.set_xlabel("exchanges (server ↔ clients, start included)")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(f"{runs[0][0].problem}: {METRIC_LABELS.get(metric, metric)} against exchanges")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = os.path.join(out_dir, prefix + "error_vs_exchanges.png")
    fig.savefig(path)
    return [path]


def plot_runs(problem: Any, results: Sequence[Any], out_dir: str) -> list[str]:
    """All plots of a list of runs of one problem; returns the written paths.

    The solution figure uses the first run that has final parameters
    (``result.theta``) and is drawn for field problems only; the convergence
    figures hold every run (several methods: ``--compare``).
    """
    results = list(results)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    first = next((r for r in results if getattr(r, "theta", None) is not None), None)
    if first is not None and getattr(problem, "kind", "") in ("pinn", "fit"):
        paths += plot_solution(problem, first.theta, out_dir, label=run_label(first))
    paths += plot_convergence(results, out_dir)
    paths += plot_error_vs_exchanges(results, out_dir)
    return paths
