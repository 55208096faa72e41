"""The ``ridge`` preset: one-shot federated ridge on the zoo's synthetic ridge problems, beside the pooled-data
reference fit and the iterative baselines — what ``python -m fedsciml ridge`` runs (:mod:`fedsciml.cli.ridge` builds
its parser from these declarations and prints what :func:`run_preset` returns).

The preset is :data:`METHOD` (``solve ridge-linear --method one-shot``: the same driver, round loop, one-shot
strategy and transport), then the pooled oracle (:data:`REFERENCE`: the closed-form ridge on every client's rows
with the σ the one-shot used), then the chosen :data:`BASELINES` (each a registered method with its options:
FedProx's μ, DP-FedAvg's gradient clip) on the same problem and clients.  Every one gives a
:class:`~fedsciml.runtime.results.Result` with the summary columns of :data:`COLUMNS` (:func:`table_rows`).

The problem is built by the caller's ``get_problem`` (the problem registry's, :func:`fedsciml.problems.get_problem`):
the ridge layer names the zoo problems (:data:`PROBLEMS`) but does not import the problems layer beside it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from typing import Callable

import torch

from fedsciml.options import option

#: the preset's method, looked up in the registry (``ridge`` is ``solve … --method one-shot`` with a summary table)
METHOD = "one-shot"
#: the name of the pooled-data reference fit (a closed form, not a registered method's run) in the results
REFERENCE = "centralized"
#: ``--features`` → the zoo problem whose options the preset takes
PROBLEMS = {"linear": "ridge-linear", "rff": "ridge-rff"}
#: the problem options the preset sets: the one-shot protocol puts σ at the server
PROBLEM_DEFAULTS = {"penalty": "server"}


@dataclasses.dataclass(frozen=True)
class Baseline:
    """An iterative baseline of the preset: the registered ``method`` it runs, with ``mu`` (FedProx's proximal
    weight; 0: FedAvg) and ``dp_grad_clip`` (DP-FedAvg's per-row gradient clip; ``None``: no DP; with it the run
    takes the one-shot's ε and δ, so it needs ``dp_epsilon``)."""

    method: str = "fedavg-sgd"
    mu: float = 0.0
    dp_grad_clip: float | None = None


#: the iterative baselines ``--baselines`` may name: the registry's fedavg-sgd with the paper's settings (FedProx:
#: μ = 0.01).  DP-FedAvg's per-row gradient clip 3: the best of 1, 3, 10, 30 on a public draw of the ridge-linear
#: generator, none of the evaluated data (scripts/papers/oneshot-ridge/ridge_table5_privacy.py --fedavg-clip public)
BASELINES = {"fedavg": Baseline(), "fedprox": Baseline(mu=0.01), "dp-fedavg": Baseline(dp_grad_clip=3.0)}

#: the preset's own options, declared in the one dialect (checked by :func:`fedsciml.options.check_options`)
PRESET = {
    "features": option("linear", "linear features (ridge-linear) or random Fourier features (ridge-rff)", str,
                       choices=tuple(PROBLEMS)),
    "baselines": option("", f"comma-separated iterative baselines to add: {', '.join(BASELINES)} (on the round "
                            "loop, in this process)", str),
    "rounds": option(100, "rounds of the iterative baselines", int, lo=0),
}

COLUMNS = [("method", "label", "<28s"), ("test MSE", "mse", "10.5f"), ("central MSE", "mse_central", "12.5f"),
           ("rel. error", "rel_error", "11.3e"), ("rounds", "rounds", "6d"), ("floats sent", "floats_sent", "12d"),
           ("seconds", "seconds", "8.3f")]


def method_specs() -> dict:
    """``{option: (default, Spec)}`` of the preset's method (the registry's :data:`METHOD`)."""
    from fedsciml.methods import METHODS  # every built-in method registered

    return METHODS[METHOD].config.specs()


def estimate_memory(clients, dim, samples, features="linear", rff_dim=300, cv=None, project=None, epsilon=None,
                    baselines=()) -> tuple[float, str]:
    """``(bytes, how)``: the memory a ``ridge`` run needs besides the clients' data rows, estimated before
    anything is built (8-byte floats) — the preset's terms of the driver's one memory check
    (:func:`fedsciml.runtime.driver.plan` ``memory=``; the driver counts every client's rows itself).

    The projected rows (``--project``), the clients' messages (square-root factors ``min(n_k, m)×m`` with CV and
    no DP where ``2n_k ≤ m``, else packed Grams), the server's working set (a few m×m matrices; with CV one more
    per σ and the candidate models ``K·|Σ|·m``), the pooled oracle (the rows once more, and d×d) and the
    baselines (``2·K·n·d``)."""
    d = int(rff_dim if features == "rff" else dim)
    m = int(project or d)
    K, n = int(clients), int(samples)
    n_train = n - n // 5
    S = len(cv) if cv else 0
    sqrt = bool(S) and epsilon is None and 2 * n_train <= m
    data = K * n * m if project else 0
    msgs = K * (min(n_train, m) * (m + 1) if sqrt else m * (m + 1) // 2 + m)
    server = 4 * m * m + S * (m * m + K * m) + (min(K * 32 << 20, 6 * S * K * m) if S else 0)
    oracle = K * n_train * d + 2 * d * d
    base = 2 * K * n * d if baselines else 0
    total = 8.0 * (data + msgs + server + oracle + base)
    how = (f"{'square-root' if sqrt else 'Gram'} messages" + (f", CV over {S} σ" if S else "")
           + (f", projection to {m}" if project else "") + ", the pooled oracle" + (", the baselines" if base else ""))
    return total, how


def _summary(res, w_c, mse_c, label, rounds):
    """Add the preset's summary columns to a Result (``final``: central MSE, relative model error)."""
    w = res.theta
    res.final["mse_central"] = mse_c
    res.final["rel_error"] = float((w - w_c).norm() / w_c.norm().clamp_min(1e-300))
    res.extra["label"] = label
    res.extra.setdefault("rounds", rounds)
    return res


def run_preset(features: str, problem_options: dict, method_options: dict, *, get_problem: Callable, clients=None,
               seed=0, device="cpu", engine="local", baselines=(), rounds=100, progress=False,
               flags: tuple[dict, dict] = ({}, {})) -> list:
    """``ridge``: ``solve(PROBLEMS[features](**problem_options), METHOD, **method_options)`` planned and run by
    the driver (every option checked once, by its declaration), then the pooled oracle with the σ the one-shot
    used, then the ``baselines`` on the round loop.  Returns the Results (:data:`METHOD`, :data:`REFERENCE`,
    baselines).  ``get_problem(name, **options)``: the problem registry's lookup.  ``flags``: ``({problem option:
    flag}, {method option: flag})``, how messages name them (the CLI's)."""
    from fedsciml.core.stats import pooled_ridge
    from fedsciml.options import cli_names, display
    from fedsciml.runtime.driver import make_result, plan, run

    import fedsciml.ridge.baselines  # noqa: F401  (registers fedavg-sgd, the baselines' method)

    if features not in PROBLEMS:
        raise ValueError(f"features must be one of {', '.join(PROBLEMS)}, got {features!r}")
    names = [x.strip() for x in (baselines.split(",") if isinstance(baselines, str) else baselines) if x.strip()]
    for name in names:
        if name not in BASELINES:
            raise ValueError(f"unknown baseline {name!r}; allowed: {', '.join(BASELINES)}")
    eps = method_options.get("dp_epsilon")
    use_dp = eps is not None and eps != math.inf
    if names and engine != "local":
        raise ValueError(f"--baselines run in this process (engine local); with --engine {engine} leave them out")
    with cli_names(flags[0]) if flags[0] else contextlib.nullcontext():
        problem = get_problem(PROBLEMS[features], **{**PROBLEM_DEFAULTS, **problem_options})
    # the preset's work besides the one-shot run (the oracle's pooled rows, the CV candidates, the baselines):
    # its terms of the driver's memory check, from the validated one-shot configuration, checked once by plan()
    def terms(prob, K, cfg):
        return estimate_memory(K, prob.options.get("dim", 0), prob.n_samples, features, prob.options.get("rff_dim", 0),
                               cfg.cv_sigmas, cfg.project, eps if use_dp else None, names)

    with cli_names(flags[1]) if flags[1] else contextlib.nullcontext():
        for name in names:
            if BASELINES[name].dp_grad_clip is not None and not use_dp:
                raise ValueError(f"{name} needs {display('dp_epsilon')}")
        p = plan(problem, METHOD, clients=clients, seed=seed, device=device, engine=engine, progress=progress,
                 memory=terms, **method_options)  # every option of the run checked here, once
    cfg, problem, K = p.config, p.problem, problem.default_clients if p.clients is None else p.clients
    one = run(p)
    dev = p.device
    s_used = float(one.extra.get("sigma_used", cfg.sigma or 0.0))  # type: ignore[attr-defined]
    # the pooled oracle on every client's data (those that dropped out included), σ as the one-shot used
    t0 = time.perf_counter()
    data = problem.client_data(int(K), seed, dev)
    A = torch.cat([a for a, _ in data])
    b = torch.cat([y for _, y in data])
    w_c = pooled_ridge(A, b, s_used)
    t_c = time.perf_counter() - t0
    ev = lambda u: problem.evaluate(u)["mse"]  # noqa: E731
    mse_c = ev(w_c)
    d = int(w_c.numel())
    project = cfg.project  # type: ignore[attr-defined]
    central_dp = cfg.dp_central  # type: ignore[attr-defined]
    label = METHOD + ("" if not use_dp else f" DP ε={eps}{' central' if central_dp else ''}") \
        + ("" if not project or project == d else f" m={project}")
    # the test rows of this split (a Flower ServerApp evaluates on its own problem copy, which has not split)
    one.final["mse"] = ev(one.theta)
    out = [_summary(one, w_c, mse_c, label, 1)]
    central = make_result(problem, REFERENCE,
                          {**problem.options, "solver": "pooled ridge (Cholesky)", "sigma_used": s_used},
                          seed=seed, device=dev, clients=int(K), theta=w_c, seconds=t_c, final={"mse": mse_c},
                          history=[{"step": 0, "time_s": t_c, "mse": mse_c, "floats_sent": 0}],
                          extra={"rounds": 0, "stop_reason": "closed form"})
    out.append(_summary(central, w_c, mse_c, REFERENCE, 0))
    dropout = cfg.dropout  # type: ignore[attr-defined]
    for name in names:
        # the baseline's registered method (BASELINES) on the same problem and clients through the driver, with
        # the σ the one-shot used (DP-FedAvg: the one-shot's ε and δ)
        base = BASELINES[name]
        opts: dict = {"rounds": rounds, "mu": base.mu, "sigma": s_used, "dropout": dropout}
        if base.dp_grad_clip is not None:
            opts.update(dp_epsilon=eps, dp_delta=cfg.dp_delta, dp_grad_clip=base.dp_grad_clip)  # type: ignore[attr-defined]
        # the driver's Result of the run, under the baseline's name (its options record: the problem's and
        # the method's configuration, lr, local_epochs, mu, rounds and dropout among them)
        rb = run(plan(problem, base.method, clients=int(K), seed=seed, device=dev, progress=progress, **opts))
        res = dataclasses.replace(rb, method=name, options={**rb.options, "sigma_used": s_used})
        out.append(_summary(res, w_c, mse_c, f"{name}-{rounds}", rounds))
    return out


def table_rows(results) -> list[dict]:
    """The summary columns of each Result (what the table prints)."""
    rows = []
    for r in results:
        last = r.history[-1] if r.history else {}
        rows.append({"label": r.extra.get("label", r.method), "mse": r.final["mse"],
                     "mse_central": r.final["mse_central"], "rel_error": r.final["rel_error"],
                     "rounds": int(r.extra.get("rounds", 0)), "floats_sent": int(last.get("floats_sent", 0)),
                     "seconds": r.solver_seconds})
    return rows
