"""PNG plots of runs: the solution against the exact one, and error against time and steps.

Uses matplotlib's object-oriented API on the Agg canvas (no pyplot, no global
backend change, no display needed).  :func:`plot_runs` is what ``--out``
calls; it never fails a run: a problem without a field (ridge) gets no solution
figure, a user problem without an exact solution gets the network alone, and a
figure that cannot be drawn is a logged warning.  Fields are drawn on the
problem's own domain (outside its geometry nothing is drawn), with the
problem's axis names (``x, t`` for space-time, time slices for 2-D space).
"""
from __future__ import annotations

import logging
import math
import os
from typing import Any, Sequence

import numpy as np
import torch

from fedsciml.runtime.files import save_figure

log = logging.getLogger(__name__)

METRIC_LABELS = {"rel_l2": "relative L2 error", "mse": "test MSE", "loss": "training loss ½‖r‖²/N"}


def _figure(w: float, h: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def run_label(result: Any) -> str:
    """``method`` (plus the optimizer of a run of the pooled data, which names one): the legend entry of a run."""
    opt = (getattr(result, "options", None) or {}).get("optimizer")
    return f"{result.method}/{opt}" if opt and not _federated(result.method) else str(result.method)


def _federated(method) -> bool:
    from fedsciml.runtime.registry import METHODS

    spec = METHODS.get(str(method))
    return spec is None or spec.federated


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


def _same_as(curves: list[tuple[str, np.ndarray, np.ndarray]], x: np.ndarray, v: np.ndarray) -> str | None:
    """The label of an earlier curve with exactly the same points (e.g. gn under ``--compare centralized``: the
    same iterates, so the same errors bitwise), or None."""
    return next((lab for lab, xs, vs in curves if np.array_equal(xs, x) and np.array_equal(vs, v)), None)


def _plot_curve(ax: Any, curves: list, x: np.ndarray, v: np.ndarray, label: str) -> None:
    """One run's line; a run whose points equal an earlier run's is drawn dashed with open markers on top and
    says so in the legend ("= centralized/lm: identical iterates"), instead of vanishing under it."""
    same = _same_as(curves, x, v)
    if same is None:
        ax.plot(x, v, label=label, lw=1.6, marker="o" if v.size < 30 else None, ms=3)
    else:
        ax.plot(x, v, label=f"{label} (= {same}: identical iterates)", lw=1.4, ls="--", marker="s", ms=6,
                mfc="none", markevery=max(1, v.size // 12), zorder=3)
    curves.append((label, x, v))


def plot_convergence(results: Sequence[Any], out_dir: str, prefix: str = "") -> list[str]:
    """``error_vs_time.png`` and ``error_vs_step.png``: one line per run, log scale (a run with the same points
    as an earlier one is drawn dashed and named so in the legend)."""
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
        curves: list = []
        for r in results:
            s, t, v = _series(r, metric)
            if v.size == 0:
                continue
            x = t if xkey == "time" else s
            if xkey == "time":  # wall times differ run to run: identical iterates are judged on the steps
                ax.plot(x, v, label=run_label(r), lw=1.6, marker="o" if v.size < 30 else None, ms=3)
            else:
                _plot_curve(ax, curves, x, v, run_label(r))
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
        save_figure(fig, path)
        paths.append(path)
    return paths


def _field_inputs(problem: Any) -> int | None:
    try:
        return int(problem.input_dim())
    except (AttributeError, NotImplementedError, TypeError, ValueError):  # no field over a domain: no field plot
        return None


def _axis_label(i: int, d: int) -> str:
    """The built-in box problems' axis names, as the geometries name theirs: ``x``, ``y``, ``z``, ``x3``, …"""
    return "x" if d == 1 else ("x", "y", "z")[i] if i < 3 else f"x{i}"


def plot_domain(problem: Any) -> dict | None:
    """What the solution figure draws on: ``geometry`` (``None``: the whole box), ``lo``/``hi`` (its box),
    ``axes`` (the problem's own input names: ``x, t`` for space-time), ``time`` (the index of the time axis or
    ``None``) and ``outputs`` (the field's component names).  ``None`` for a problem without a field."""
    d = _field_inputs(problem)
    if d is None:
        return None
    domain = getattr(problem, "domain", None)
    geom = domain() if callable(domain) else None
    if geom is not None and hasattr(geom, "bbox") and hasattr(geom, "contains") and int(geom.dim) == d:
        lo, hi = (np.asarray(b, dtype=float) for b in geom.bbox)
        axes = tuple(str(a) for a in getattr(problem, "axes", ())) or tuple(_axis_label(i, d) for i in range(d))
        time = axes.index("t") if getattr(problem, "T", None) is not None and "t" in axes else None
    else:  # the built-in box problems live on [0, 1]^d
        geom, lo, hi = None, np.zeros(d), np.ones(d)
        axes, time = tuple(_axis_label(i, d) for i in range(d)), None
    outputs = tuple(str(o) for o in (getattr(problem, "outputs", None) or ("u",)))
    return {"geometry": geom, "lo": lo, "hi": hi, "axes": axes, "time": time, "outputs": outputs}


def _views(dom: dict, n: int) -> list[dict]:
    """The panels' rows: a 1-D line, or 2-D maps over the first two axes drawn (space-time with one space
    axis: ``x`` against ``t``; more space axes: the first two, the others at the box's middle, one row per
    time slice t0, middle, T).  Each view: ``X [m, d]`` (grid points), ``inside [m]`` (the geometry's mask),
    ``shape`` and ``extent`` of the map, the two axis indices and a title."""
    lo, hi, time = dom["lo"], dom["hi"], dom["time"]
    d = lo.size
    space = [i for i in range(d) if i != time]
    mid = (lo + hi) / 2
    pairs: list[tuple[tuple, dict, str]]
    if d == 1:
        X = torch.linspace(float(lo[0]), float(hi[0]), 1001, dtype=torch.float64).reshape(-1, 1)
        pairs = [((0,), {}, "")]
    elif len(space) == 1:
        pairs = [((space[0], time), {}, "")]
    else:
        fixed = {i: float(mid[i]) for i in space[2:]}
        rest = ", ".join(f"{dom['axes'][i]} = {v:.3g}" for i, v in fixed.items())
        if time is None:
            pairs = [((space[0], space[1]), fixed, rest)]
        else:
            ts = (float(lo[time]), float(mid[time]), float(hi[time]))
            pairs = [((space[0], space[1]), {**fixed, time: t}, ", ".join(filter(None, [f"t = {t:.3g}", rest])))
                     for t in ts]
    views: list[dict[str, Any]] = []
    for ij, fixed, title in pairs:
        if len(ij) == 1:
            views.append({"X": X, "ij": ij, "title": title, "shape": (X.shape[0],)})
            continue
        i, j = ij
        a = torch.linspace(float(lo[i]), float(hi[i]), n, dtype=torch.float64)
        b = torch.linspace(float(lo[j]), float(hi[j]), n, dtype=torch.float64)
        A, B = torch.meshgrid(a, b, indexing="xy")
        Xv = torch.as_tensor(np.broadcast_to(mid, (n * n, d)).copy())
        Xv[:, i], Xv[:, j] = A.reshape(-1), B.reshape(-1)
        for k, val in fixed.items():
            Xv[:, k] = val
        views.append({"X": Xv, "ij": ij, "title": title, "shape": (n, n),
                      "extent": (float(lo[i]), float(hi[i]), float(lo[j]), float(hi[j]))})
    geom = dom["geometry"]
    for v in views:
        npts = int(v["X"].shape[0])
        v["inside"] = (geom.contains(v["X"]).cpu().numpy().astype(bool) if geom is not None
                       else np.ones(npts, dtype=np.bool_))
        v["outside"] = _outside_overlay(geom, v, dom, FINE * n) if geom is not None and len(v["ij"]) == 2 else None
    return views


FINE = 4  # the domain's edge (holes, curved boundaries) is drawn on a raster this many times finer than the map's


def _outside_overlay(geom: Any, view: dict, dom: dict, m: int) -> np.ndarray | None:
    """An ``[m, m, 4]`` RGBA image, white where the finer raster's points lie outside the geometry and clear
    inside: drawn over a map, it gives holes and curved edges at ``FINE`` times the map's resolution (the map's
    own cells are evaluated on the coarse raster).  None where the whole view is inside."""
    i, j = view["ij"]
    x0, x1, y0, y1 = view["extent"]
    a = torch.linspace(x0, x1, m, dtype=torch.float64)
    b = torch.linspace(y0, y1, m, dtype=torch.float64)
    A, B = torch.meshgrid(a, b, indexing="xy")
    base = view["X"][0]
    X = base.expand(m * m, base.numel()).clone()
    X[:, i], X[:, j] = A.reshape(-1), B.reshape(-1)
    inside = geom.contains(X).cpu().numpy().astype(bool).reshape(m, m)
    if inside.all():
        return None
    rgba = np.zeros((m, m, 4))
    rgba[~inside] = (1.0, 1.0, 1.0, 1.0)
    return rgba


def _evaluate(problem: Any, theta: torch.Tensor, X: torch.Tensor, inside: np.ndarray, C: int,
              exact: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """``(u [m, C], exact [m, C] or None)`` on the points inside the geometry (NaN outside)."""
    dev, dt = theta.device, theta.dtype
    Xi = X[torch.as_tensor(inside)].to(dev, dt)
    u = np.full((X.shape[0], C), np.nan)
    ue = np.full((X.shape[0], C), np.nan) if exact else None
    if Xi.shape[0]:
        with torch.no_grad():
            u[inside] = problem.u(theta, Xi).reshape(Xi.shape[0], C).cpu().numpy()
            if ue is not None:
                ue[inside] = problem.exact(Xi).reshape(Xi.shape[0], C).cpu().numpy()
    return u, ue


def _has_exact(problem: Any) -> bool:
    has = getattr(problem, "has_exact", None)
    if isinstance(has, bool):
        return has
    return hasattr(problem, "exact")


def solution_figures(problem: Any, theta: torch.Tensor, label: str = "", n: int = 161) -> list[tuple[str, Any]]:
    """``[(output name, figure)]``: for each output component, the network against the exact solution and
    the pointwise error on the problem's own domain (outside the geometry nothing is drawn; axes named by the
    problem; space-time: ``x`` against ``t``, or time slices).  Without an exact solution: the network alone."""
    dom = plot_domain(problem)
    if dom is None or not hasattr(problem, "u"):
        return []
    theta = theta.detach()
    views = _views(dom, n)
    outputs = dom["outputs"]
    C = len(outputs)
    exact = _has_exact(problem)
    data = []
    for v in views:
        try:
            u, ue = _evaluate(problem, theta, v["X"], v["inside"], C, exact)
        except NotImplementedError:  # no exact solution after all: the network alone
            exact = False
            u, ue = _evaluate(problem, theta, v["X"], v["inside"], C, False)
        data.append((u, ue))
    if not exact:
        data = [(u, None) for u, _ in data]
    figs = []
    axes_names = dom["axes"]
    for c, name in enumerate(outputs):
        title = f"{problem.name}" + (f" · {name}" if C > 1 else "") + (f" · {label}" if label else "")
        if len(views) == 1 and len(views[0]["ij"]) == 1:
            figs.append((name, _line_figure(views[0], data[0], c, title, name, axes_names[0])))
        else:
            figs.append((name, _map_figure(views, data, c, title, name, axes_names)))
    return figs


def _line_figure(view: dict, data, c: int, title: str, name: str, xname: str) -> Any:
    u, ue = data
    x = view["X"][:, 0].numpy()
    fig = _figure(6.4, 5.6 if ue is not None else 3.6)
    if ue is None:
        top = fig.subplots(1, 1)
        top.plot(x, u[:, c], "C0-", lw=1.4, label="network")
    else:
        top, bot = fig.subplots(2, 1, sharex=True)
        top.plot(x, ue[:, c], "k-", lw=2.5, alpha=0.35, label="exact")
        top.plot(x, u[:, c], "C0--", lw=1.4, label="network")
        bot.semilogy(x, np.maximum(np.abs(u[:, c] - ue[:, c]), 1e-300), "C3-", lw=1.0)
        bot.set_ylabel(f"|{name}_θ − {name}|")
        bot.set_xlabel(xname)
        bot.grid(True, which="both", alpha=0.3)
    top.set_ylabel(f"{name}({xname})")
    top.legend(fontsize=8)
    top.set_title(title)
    top.grid(True, which="both", alpha=0.3)
    if ue is None:
        top.set_xlabel(xname)
    return fig


def _map_figure(views: list, data: list, c: int, title: str, name: str, axes_names: tuple) -> Any:
    ncol = 3 if data[0][1] is not None else 1
    fig = _figure(4.4 * ncol, 3.7 * len(views))
    grid = np.asarray(fig.subplots(len(views), ncol, squeeze=False))
    vals = [a[:, c] for u, ue in data for a in (u, ue) if a is not None]
    finite = np.concatenate([v[np.isfinite(v)] for v in vals]) if vals else np.zeros(1)
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    for row, (v, (u, ue)) in enumerate(zip(views, data)):
        i, j = v["ij"]
        span = (v["extent"][1] - v["extent"][0], v["extent"][3] - v["extent"][2])
        aspect = "equal" if max(span) <= 4 * min(span) else "auto"
        panels: list[tuple[Any, str, str, tuple[float | None, float | None]]] = [
            (u[:, c], "network", "viridis", (vmin, vmax))]
        if ue is not None:
            err = np.abs(u[:, c] - ue[:, c])
            emax = float(np.nanmax(err)) if np.isfinite(err).any() else 0.0
            panels = [(ue[:, c], "exact", "viridis", (vmin, vmax)), panels[0],
                      (err, f"|error| (max {emax:.2e})", "magma", (None, None))]
        for col, (vals_c, head, cmap, (lo, hi)) in enumerate(panels):
            ax = grid[row, col]
            img = np.ma.masked_array(vals_c.reshape(v["shape"]), mask=~v["inside"].reshape(v["shape"]))
            cm = _cmap(cmap)
            if cmap == "magma":  # the error: log colours where its range is wide (error_norm)
                im = ax.imshow(img, origin="lower", extent=v["extent"], norm=error_norm(vals_c), cmap=cm,
                               aspect=aspect)
            else:
                im = ax.imshow(img, origin="lower", extent=v["extent"], vmin=lo, vmax=hi, cmap=cm, aspect=aspect)
            if v.get("outside") is not None:  # the domain's edge at 4× the raster's resolution
                ax.imshow(v["outside"], origin="lower", extent=v["extent"], aspect=aspect, interpolation="none")
            ax.set_title(head + (f" · {v['title']}" if v["title"] else ""), fontsize=9)
            ax.set_xlabel(axes_names[i])
            ax.set_ylabel(axes_names[j])
            fig.colorbar(im, ax=ax, shrink=0.85, format="%.1e" if cmap == "magma" else None)
    fig.suptitle(title)
    return fig


LOG_DECADES = 3.0  # an error map whose finite positive values span more decades than this is drawn on a log scale


def error_norm(err: np.ndarray) -> Any:
    """The error panel's colour norm: ``LogNorm`` from the smallest to the largest finite positive |error| when
    they span more than ``LOG_DECADES`` decades (a corner singularity would otherwise leave the rest of a linear
    map one colour), else a linear ``Normalize`` from 0 to the largest."""
    from matplotlib.colors import LogNorm, Normalize

    pos = err[np.isfinite(err) & (err > 0)]
    if pos.size and math.log10(float(pos.max()) / float(pos.min())) > LOG_DECADES:
        return LogNorm(vmin=float(pos.min()), vmax=float(pos.max()))
    return Normalize(vmin=0.0, vmax=float(pos.max()) if pos.size else 1.0)


def _cmap(name: str) -> Any:
    """A copy of a colormap whose masked (outside the domain) cells are blank."""
    import matplotlib

    return matplotlib.colormaps[name].with_extremes(bad=(0.0, 0.0, 0.0, 0.0))


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in str(text))


def plot_solution(problem: Any, theta: torch.Tensor | None, out_dir: str, label: str = "",
                  prefix: str = "", name: str = "solution") -> list[str]:
    """``solution.png`` (``solution_<output>.png`` for each output of a system): the network against the
    exact field and the pointwise error, drawn on the problem's own domain (:func:`solution_figures`)."""
    if theta is None:
        return []
    figs = solution_figures(problem, theta, label)
    paths = []
    for out, fig in figs:
        fname = prefix + name + (f"_{_slug(out)}" if len(figs) > 1 else "") + ".png"
        path = os.path.join(out_dir, fname)
        save_figure(fig, path)
        paths.append(path)
    return paths


def _plot_error_against(results: Sequence[Any], out_dir: str, fname: str, x_of, xlabel: str, title: str,
                        log_x: bool) -> list[str]:
    """The error against a communication count, one line per run with such rows: ``x_of(row)`` is the row's
    count (None: the row is left out), the error its metric where finite and > 0.  Nothing is written when no
    run has a point."""
    runs = [(r, [(x, h) for h in (r.history or []) if (x := x_of(h)) is not None]) for r in results]
    runs = [(r, rows) for r, rows in runs if rows]
    if not runs:
        return []
    metric = _metric(runs[0][0])
    fig = _figure(6.4, 4.2)
    ax = fig.add_subplot()
    drawn = 0
    curves: list = []
    for r, rows in runs:
        pts = [(x, float(h[metric])) for x, h in rows if isinstance(h.get(metric), (int, float))
               and math.isfinite(h[metric]) and h[metric] > 0]
        if pts:
            xs, vs = zip(*pts)
            _plot_curve(ax, curves, np.asarray(xs, float), np.asarray(vs, float), run_label(r))
            drawn += 1
    if not drawn:
        return []
    ax.set_yscale("log")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.set_title(f"{runs[0][0].problem}: {METRIC_LABELS.get(metric, metric)} {title}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = os.path.join(out_dir, fname)
    save_figure(fig, path)
    return [path]


def plot_error_vs_floats(results: Sequence[Any], out_dir: str, prefix: str = "") -> list[str]:
    """``error_vs_floats.png``: the error against the floats the clients have sent so far (the history's
    cumulative ``floats_sent``), one line per run that sent any — communication on the x-axis."""
    def floats(h):
        fl = h.get("floats_sent")
        return float(fl) if isinstance(fl, (int, float)) and fl > 0 else None

    return _plot_error_against(results, out_dir, prefix + "error_vs_floats.png", floats,
                               "floats sent by the clients (cumulative)", "vs communication", log_x=True)


def plot_loss_terms(result: Any, out_dir: str, name: str = "loss_terms") -> list[str]:
    """``loss_terms.png``: the history's per-term losses (``loss[pde]``, ``loss[<condition>]``, …: each residual
    part's share of ½‖r‖²/N) and the total against the step — which part of the problem the solver is still
    fighting.  Nothing for a run without terms."""
    rows = result.history or []
    keys = list(dict.fromkeys(k for row in rows for k in row if k.startswith("loss[")))
    if not keys:
        return []
    fig = _figure(6.4, 4.2)
    ax = fig.add_subplot()
    for key in ["loss", *keys]:
        s, _, v = _series(result, key)
        if v.size:
            ax.plot(s, v, label="total" if key == "loss" else key[5:-1], lw=2.2 if key == "loss" else 1.4,
                    color="k" if key == "loss" else None, alpha=0.5 if key == "loss" else 1.0)
    ax.set_yscale("log")
    ax.set_xlabel("step / round")
    ax.set_ylabel("loss term ½‖r_part‖²/N")
    ax.set_title(f"{result.problem}: loss by residual part · {run_label(result)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    path = os.path.join(out_dir, name + ".png")
    save_figure(fig, path)
    return [path]


def plot_error_vs_exchanges(results: Sequence[Any], out_dir: str, prefix: str = "") -> list[str]:
    """``error_vs_exchanges.png``: the error against the exchanges so far (the history's ``exchanges_total``),
    one line per federated run — the axis that prices a method on a deployment where every exchange costs
    seconds.  Nothing is written when no run counted exchanges (centralized runs only)."""
    def exchanges(h):
        return h["exchanges_total"] if isinstance(h.get("exchanges_total"), int) else None

    return _plot_error_against(results, out_dir, prefix + "error_vs_exchanges.png", exchanges,
                               "exchanges (server ↔ clients, start included)", "against exchanges", log_x=False)


def _one_shot(result: Any) -> bool:
    """A run without a per-round curve: one round at most (one-shot fusion, a closed-form centralized solve)."""
    return len(result.history or []) <= 2


def plot_ridge_fit(problem: Any, results: Sequence[Any], out_dir: str, name: str = "ridge_fit") -> list[str]:
    """``ridge_fit.png`` for linear models (``problem.test_data()`` → ``(A, b)``): each run's prediction ``A θ``
    against the actual test targets ``b`` beside the line y = x, and its coefficients θ by index — what a
    one-shot fit has to show in place of a two-point loss curve.  Nothing for runs without parameters."""
    runs = [r for r in results if getattr(r, "theta", None) is not None]
    if not runs or not hasattr(problem, "test_data"):
        return []
    A, b = problem.test_data()
    y = b.detach().cpu().numpy().reshape(-1)
    fig = _figure(11.0, 4.2)
    left, right = fig.subplots(1, 2)
    for k, r in enumerate(runs):
        theta = r.theta.detach().cpu().to(A.dtype).reshape(-1)
        pred = (A @ theta).numpy().reshape(-1)
        mark = dict(marker="o", ms=3, ls="none", alpha=0.5) if k == 0 else dict(marker="x", ms=4, ls="none")
        left.plot(y, pred, label=run_label(r), **mark)
        right.plot(np.arange(theta.numel()), theta.numpy(), label=run_label(r), lw=1.2 if k == 0 else 0,
                   **({"marker": "x", "ms": 4} if k else {}))
    lo, hi = float(np.min(y)), float(np.max(y))
    left.plot([lo, hi], [lo, hi], "k-", lw=0.8, alpha=0.6, label="y = x")
    left.set_xlabel("actual (test set)")
    left.set_ylabel("predicted")
    left.set_title(f"{problem.name}: test predictions ({y.size} rows)")
    right.set_xlabel("coefficient index")
    right.set_ylabel("coefficient")
    right.set_title("coefficients θ")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    path = os.path.join(out_dir, name + ".png")
    save_figure(fig, path)
    return [path]


def plot_runs(problem: Any, results: Sequence[Any], out_dir: str) -> list[str]:
    """All plots of a list of runs of one problem; returns the written paths.

    The solution figure is drawn for every run that has final parameters (``result.theta``) of a field
    problem — ``solution.png`` for one run, ``solution_<method>.png`` for each of several (``--compare``),
    one file per output of a system; the convergence figures hold every run.  A figure that cannot be
    drawn is a logged warning naming it, never a failed run: the results and the model are already written.
    """
    results = list(results)
    os.makedirs(out_dir, exist_ok=True)
    paths: list[str] = []

    def attempt(what: str, fn, *args, **kw):
        try:
            paths.extend(fn(*args, **kw))
        except Exception as e:  # noqa: BLE001 - a plot is a by-product: warn, keep the run's results
            log.warning("plot %s not drawn: %s: %s", what, type(e).__name__, e)

    drawn = [r for r in results if getattr(r, "theta", None) is not None]
    if getattr(problem, "kind", "") in ("pinn", "fit"):
        labels = [run_label(r) for r in drawn]
        for r, label in zip(drawn, labels):
            name = "solution" if len(drawn) == 1 else f"solution_{_slug(label.replace('/', '-'))}"
            attempt(f"{name} ({label})", plot_solution, problem, r.theta, out_dir, label=label, name=name)
    if getattr(problem, "kind", "") == "ridge":
        attempt("ridge_fit", plot_ridge_fit, problem, results, out_dir)
    if results and all(_one_shot(r) for r in results):  # no run has a per-round curve: no loss/error plots
        return paths
    for r in results:
        name = "loss_terms" if len(results) == 1 else f"loss_terms_{_slug(run_label(r).replace('/', '-'))}"
        attempt(name, plot_loss_terms, r, out_dir, name)
    attempt("error_vs_time/error_vs_step", plot_convergence, results, out_dir)
    attempt("error_vs_floats", plot_error_vs_floats, results, out_dir)
    attempt("error_vs_exchanges", plot_error_vs_exchanges, results, out_dir)
    return paths
