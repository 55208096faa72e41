"""Which Flower App runs a job: light enough for the process that only starts the run (no flwr import).
:func:`plan` (the SecAgg+ run's public fixed-point plan) lives here too, so that the process that starts a run
checks it before Flower or Ray starts.

Central DP with a finite ε needs Flower's SecAgg+ (:mod:`fedsciml.engines.flower.secagg`, its App in
``secagg_app/``); every other job runs in fedsciml's generic App (``app/``).  Importing
:mod:`fedsciml.engines.flower.secagg` builds its Flower apps (and imports Flower), so the check lives here.
"""
from __future__ import annotations

from pathlib import Path

APP_DIR = str(Path(__file__).resolve().parent / "app")  # fedsciml's generic Flower App
SECAGG_APP_DIR = str(Path(__file__).resolve().parent / "secagg_app")  # the SecAgg+ ServerApp/ClientApp pair
#: the SecAgg+ App is one-shot's own: it fuses the masked sum of one-shot's statistics
#: (:class:`fedsciml.methods.oneshot.OneShotStrategy`); whether a run needs a secure sum is the method's to say
#: (:attr:`fedsciml.runtime.registry.Method.secure_sum`)
SECAGG_METHOD = "one-shot"


def app_dirs() -> dict:
    """``{"app": …, "secagg": …}``: the directories of fedsciml's Flower Apps in this installation (what
    ``flwr run DIR`` takes; ``python -m fedsciml flower app-dir`` prints them)."""
    return {"app": APP_DIR, "secagg": SECAGG_APP_DIR}


def is_secagg_job(job: dict) -> bool:
    """A job for the SecAgg+ App: its method's (:data:`SECAGG_METHOD`) run that needs a secure sum, as the method
    says of the job's options (one-shot: central DP at a finite ε)."""
    if job.get("kind", "solve") != "solve" or job.get("method") != SECAGG_METHOD:
        return False
    from fedsciml.runtime.driver import get_method

    spec = get_method(SECAGG_METHOD)
    return spec.needs_secure_sum(spec.make_config(dict(job.get("options", {}) or {}))) is not None


def _default_max_rows(problem) -> int | None:
    """A public bound on a site's rows: a zoo ridge problem's rows per client (its option, public); else None."""
    n_train = getattr(problem, "n_train", None)
    return int(n_train()) if callable(n_train) else None


def plan(job: dict, problem=None) -> dict:
    """Everything the sites and the server must agree on before the exchange, from public quantities only:
    ``K``, ``t``, the DP config, the transform, ``max_rows``, ``c``, ``T``."""
    from fedsciml.core import dp as _dp
    from fedsciml.methods.oneshot import OneShotStrategy
    from fedsciml.runtime.driver import get_method

    cfg = get_method(SECAGG_METHOD).make_config(dict(job.get("options", {})))
    if cfg.cv_sigmas is not None or cfg.project is not None or cfg.screen is not None:
        raise ValueError("one-shot through SecAgg+ fuses one sum: cross-validation (needs each site's statistics), "
                         "projection and the influence screen are not offered with dp_central on Flower")
    K = int(job["clients"])
    if K < 2:
        raise ValueError(f"SecAgg+ needs at least 2 sites, got clients={K}")
    dpc = cfg.dp()
    st = OneShotStrategy(cfg.sigma or 0.0, dp=dpc, seed=int(job.get("seed", 0)), min_survivors=cfg.dp_min_survivors,
                         secure_sum=True, fit_intercept=cfg.fit_intercept, max_rows=cfg.dp_max_rows)
    t = st.size_noise_shares(K)
    max_rows = cfg.dp_max_rows if cfg.dp_max_rows is not None else (
        _default_max_rows(problem) if problem is not None else None)
    if max_rows is None:
        raise ValueError("central DP through SecAgg+ needs a public bound on each site's rows to fix the "
                         "fixed-point range: give dp_max_rows (a site with more rows refuses)")
    noise_std = _dp.DPConfig(**st.dp).noise_std
    share = _dp.share_std(noise_std, t)
    rows = _default_max_rows(problem) if problem is not None else None
    if rows is not None and int(max_rows) < rows:
        raise ValueError(f"dp_max_rows={int(max_rows):,} is below the {rows:,} rows each site of problem "
                         f"{problem.name!r} holds; every site would refuse: give dp_max_rows ≥ {rows:,}")
    _dp.check_secure_sum_precision(K, int(max_rows), cfg.dp_clip_a, cfg.dp_clip_b, noise_std, share)
    c = _dp.statistics_bound(int(max_rows), cfg.dp_clip_a, cfg.dp_clip_b, share)
    T = _dp.quantization_range(K)
    tr = {**st.request_transform(0), "max_rows": int(max_rows)}  # the request's transform: dp, seed, shares, bound
    return {"clients": K, "survivors": t, "max_rows": int(max_rows), "clipping_range": c, "quantization_range": T,
            "modulus_range": _dp.MODULUS_RANGE, "share_std": share, "transform": tr,
            "sigma": float(cfg.sigma or 0.0), "dp": st.dp, "seed": int(job.get("seed", 0)),
            "fit_intercept": bool(cfg.fit_intercept)}
