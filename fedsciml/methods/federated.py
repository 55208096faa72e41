"""The built-in federated methods' strategy factories: ``gn``, ``fipa``, ``fedavg``, ``fedprox``, ``one-shot``
(registered in :data:`fedsciml.runtime.driver.METHODS` by :mod:`fedsciml.methods`).

Each is a factory ``build(config, ctx) -> (strategy, record)`` run by :func:`fedsciml.methods.run.strategy_runner`
(the pattern every method follows, ``examples/fedavg_lr_schedule.py`` a user's one): ``config`` is the method's
typed configuration, declared beside its strategy (:class:`~fedsciml.methods.gn.GNConfig`,
:class:`~fedsciml.methods.fipa.FIPAConfig`, :class:`~fedsciml.methods.averaging.FedAvgConfig`,
:class:`~fedsciml.methods.averaging.FedProxConfig`, :class:`~fedsciml.methods.oneshot.OneShotConfig`, on the
machinery of :mod:`fedsciml.options`), ``ctx`` a :class:`~fedsciml.methods.run.RunContext`; the typed
configuration, the round settings, the transport, resampling, the round loop and the record are the shared run's.
The defaults live in the configurations, once (chosen so that ``python -m fedsciml solve bratu --clients 4`` is
accurate and finishes well within a minute; docs/methods.md):

* ``fipa``: rank 20 (``rank=0`` sends the full ``H_m``), thin-QR merge,
  local solver ``gn`` (an exact damped local Gauss–Newton step, relative
  damping 0, i.e. ``−H_m^† g_m``) with the server safeguard (β adapted by the
  LM rule), ``rounds=40``;  ``local='adam'`` gives the paper's τ Adam
  steps (``local_steps=100``, ``lr=1e-3``).
* ``fedavg`` / ``fedprox``: local Adam, ``local_steps=100``, ``lr=1e-3``,
  ``rounds=30``; FedProx ``mu=0.01``.
* ``gn``: LM with the centralized solver's settings, ``rounds=100``
  (iterations).
* ``fipa`` with ``preset="paper"``: the published algorithm with the
  authors' settings (:data:`PAPER_PRESET`).
* ``one-shot``: one exchange of GN statistics at θ₀ and one fused step
  (ridge fusion for linear residuals), ``sigma=0`` extra damping.

With a ``budget`` and no ``rounds`` a run goes on until the budget is spent.
"""
from __future__ import annotations

import logging

from fedsciml.methods.averaging import FedAvgConfig, FedProxConfig  # noqa: F401
from fedsciml.methods.fipa import PAPER_PRESET, FIPAConfig  # noqa: F401
from fedsciml.methods.gn import GNConfig  # noqa: F401
from fedsciml.methods.oneshot import OneShotConfig  # noqa: F401
from fedsciml.methods.aggregators import FedAvgAggregator, FIPAAggregator
from fedsciml.methods.averaging import AveragingStrategy
from fedsciml.methods.local import AdaptiveSchedule
from fedsciml.methods.fipa import FIPAStrategy
from fedsciml.core.kfac_pinn import jet_network, require_jets
from fedsciml.core.matfree import MatfreeConfig, fipa_local_matfree
from fedsciml.core import forms
from fedsciml.methods.gn import GNStrategy
from fedsciml.methods.oneshot import OneShotStrategy
from fedsciml.methods.run import RunContext, local_config
from fedsciml.core.lm import LMConfig, default_tau


def capped_rank(rank: int, p: int, name: str) -> int:
    """A sketch or preconditioner rank above the model's ``p`` parameters holds nothing more than rank ``p``:
    capped there, with one log line (a rank of 10¹² would otherwise allocate and iterate for ever)."""
    if rank > p:
        logging.getLogger("fedsciml").warning("%s=%s is above the model's %s parameters; capped at %s", name, rank,
                                              p, p)
        return int(p)
    return int(rank)


def gn_strategy(cfg: GNConfig, ctx: RunContext):
    """Exact federated Gauss–Newton (Levenberg–Marquardt on summed client statistics)."""
    objectives, theta0, seed = ctx.objectives, ctx.theta0, ctx.seed
    lm_tau = default_tau(objectives) if cfg.lm_tau is None else cfg.lm_tau
    form = cfg.form
    reason = None
    if form == "auto":  # the smaller dense message while it fits, matrix-free beyond (fedsciml.core.forms)
        rows = [o.n_residuals for o in objectives]
        choice = forms.choose_form(sum(rows), theta0.numel(), device=theta0.device, dtype=theta0.dtype, need="gn",
                                   rows=rows)
        form, reason = choice.form, choice.reason
    options = {"lm_tau": lm_tau, "form": form}
    if reason is not None:
        options["form_reason"] = reason
    solve = {"sqrt": "auto", "normal": "normal", "matfree": "matfree"}[form]
    kfac = form == "matfree" and cfg.precond == "kfac"
    if kfac:  # refused by name unless every client's residual is in the forward-Laplacian channel form
        require_jets(objectives, getattr(ctx.problem, "name", str(ctx.problem)))
        options["precond"] = "kfac"
    if form == "matfree" and cfg.cg_iters != GNConfig.specs()["cg_iters"][0]:
        options["cg_iters"] = cfg.cg_iters
    strategy = GNStrategy(LMConfig(tau=lm_tau, solve=solve, matfree=MatfreeConfig(
                              precond=cfg.precond if form == "matfree" else "nystrom",
                              rank=capped_rank(cfg.nystrom_rank, theta0.numel(), "nystrom_rank"),
                              max_iters=cfg.cg_iters, seed=seed),
                                   momentum=cfg.momentum),
                          max_retries=cfg.max_retries, form=form, screen=cfg.screen,
                          kfac_net=jet_network(objectives[0]) if kfac else None, exchange=cfg.exchange,
                          trials=cfg.trials)
    if cfg.exchange != "one":
        options["exchange"] = cfg.exchange
    if cfg.trials > 1:
        options["trials"] = cfg.trials
    if cfg.screen is not None:
        options["screen"] = cfg.screen
    if cfg.momentum:
        options["momentum"] = cfg.momentum
    return strategy, options


def fipa_strategy(cfg: FIPAConfig, ctx: RunContext):
    """FIPA (paper Eq. 6 / Eq. 13): curvature-weighted merge of local updates.

    ``preset="paper"`` fills every option not given with :data:`~fedsciml.methods.fipa.PAPER_PRESET` (the published
    algorithm with the authors' settings).  ``pinv_rtol``: eigenvalues of the merged curvature below
    ``pinv_rtol·λ_max`` are dropped by the pseudo-inverse (default ``p·eps``).  Why the published β = 0, γ = 1
    without a relative cutoff diverges (the cutoff, not γ): see PAPER_PRESET and docs/methods.md "The published FIPA".
    """
    objectives, theta0, seed, rc = ctx.objectives, ctx.theta0, ctx.seed, ctx.rounds
    rank = capped_rank(cfg.rank, theta0.numel(), "rank")
    curvature = "full" if rank == 0 else "lowrank"
    lc = local_config(cfg, 0.0)
    agg = FIPAAggregator(curvature=curvature, merge=cfg.merge, beta=cfg.beta, gamma=cfg.gamma, weighting="sum",
                         complement="fedavg" if cfg.complement and curvature == "lowrank" else "none",
                         robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm, consistency=lc.solver == "gn",
                         rtol=cfg.pinv_rtol)
    sched = AdaptiveSchedule(C=cfg.adapt_c, C_tau=cfg.adapt_ctau) if cfg.adaptive else None
    options = {"rank": rank, "curvature": curvature, "merge": cfg.merge, "beta": agg.beta, "gamma": agg.gamma,
               "local": lc.solver, "local_steps": lc.steps, "lr": lc.lr, "local_damping": lc.damping,
               "adaptive": cfg.adaptive, "sketch": cfg.sketch, "participation": rc.participation,
               "dropout": rc.dropout}
    if cfg.adaptive:
        options.update(adapt_c=sched.C, adapt_ctau=sched.C_tau)
    if cfg.pinv_rtol is not None:
        options["pinv_rtol"] = cfg.pinv_rtol
    if lc.loss != "mean":
        options["local_loss"] = lc.loss
    if cfg.preset is not None:
        options["preset"] = cfg.preset
    options.update(safeguard=cfg.safeguard, complement=cfg.complement)
    if not agg.rule.plain:
        options.update(robust=agg.rule.rule, trim=agg.rule.trim, clip_norm=agg.rule.clip_norm)
    if any(fipa_local_matfree(lc.solver, curvature, cfg.sketch, cfg.adaptive, o.n_residuals, theta0.numel())
           for o in objectives):  # some client takes its local GN step matrix-free
        options.update(local_form="matfree", cg_iters=cfg.cg_iters, cg_rtol=cfg.cg_rtol)
    strategy = FIPAStrategy(agg, lc, curvature, max(rank, 1), cfg.sketch, sched, seed, safeguard=cfg.safeguard,
                            complement=cfg.complement, cg_iters=cfg.cg_iters, cg_rtol=cfg.cg_rtol)
    return strategy, options


def _averaging(cfg, ctx: RunContext, mu: float | None = None):
    """FedAvg's strategy and record; FedProx's with its ``mu`` (recorded, 0 included)."""
    lc = local_config(cfg, 0.0 if mu is None else mu)
    agg = FedAvgAggregator(server_lr=cfg.server_lr, robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm,
                           outlier_ratio=cfg.outlier_ratio)
    rc = ctx.rounds
    options = {"local": lc.solver, "local_steps": lc.steps, "lr": lc.lr, "server_lr": agg.server_lr,
               "participation": rc.participation, "dropout": rc.dropout}
    if not agg.rule.plain:
        options.update(robust=agg.rule.rule, trim=agg.rule.trim, clip_norm=agg.rule.clip_norm)
    if mu is not None:
        options["mu"] = mu
    if lc.solver == "gn":
        options["local_damping"] = lc.damping
    return AveragingStrategy(agg, lc, ctx.seed), options


def fedavg_strategy(cfg: FedAvgConfig, ctx: RunContext):
    """FedAvg (paper Eq. 3): data-size weighted average of local updates."""
    return _averaging(cfg, ctx)


def fedprox_strategy(cfg: FedProxConfig, ctx: RunContext):
    """FedProx: FedAvg whose local loss carries the proximal term ``μ/2 ‖θ_m − θ_k‖²``."""
    return _averaging(cfg, ctx, cfg.mu)


def one_shot_strategy(cfg: OneShotConfig, ctx: RunContext):
    """One-shot fusion of the clients' Gauss–Newton statistics (one-shot ridge for linear residuals).

    Client-side transforms (:class:`OneShotConfig`): ``dp_*`` (Gaussian mechanism), ``project``/``project_sketch``,
    seeded by the run's seed; ``cv_sigmas``: σ by leave-one-client-out CV (see :mod:`fedsciml.methods.oneshot`).
    With ``fit_intercept`` the model is (θ, intercept): the run's evaluation takes the fused intercept."""
    problem, rc = ctx.problem, ctx.rounds
    strategy = OneShotStrategy(cfg.sigma or 0.0, dp=cfg.dp(), project=cfg.project, sketch=cfg.project_sketch,
                               seed=ctx.seed, cv_sigmas=cfg.cv_sigmas, screen=cfg.screen,
                               min_survivors=cfg.dp_min_survivors, form=cfg.message_form, repair=cfg.repair,
                               fit_intercept=cfg.fit_intercept, max_rows=cfg.dp_max_rows)
    options = {**strategy.summary(), "participation": rc.participation, "dropout": rc.dropout}
    if not cfg.fit_intercept:
        return strategy, options
    if getattr(problem, "kind", None) != "ridge":
        raise ValueError(f"fit_intercept applies to linear ridge problems (kind 'ridge'); {problem.name!r} is "
                         f"not one")
    plain = ctx.evaluate
    return strategy, options, lambda th: plain(th, intercept=strategy.intercept)
