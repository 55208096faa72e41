"""Centralized solvers on a pooled least-squares objective: the reference.

* ``lm`` — Levenberg–Marquardt (:mod:`fedsciml.core.lm`), float64.  The damped system is solved in
  the form ``lm_solve`` names; ``auto`` (default) picks from the device's free memory and a cost per form
  (:func:`fedsciml.core.forms.choose_form`): the n×n kernel form when n < p, the p×p normal form when
  n ≥ p, both while the n×p Jacobian fits (always while it has at most 5·10⁷ entries), the normal form on
  statistics streamed over row blocks (``chunked``) when only the p×p matrix fits, and matrix-free
  Nyström-preconditioned CG (jvp/vjp only) where that is cheaper or nothing dense fits.  The choice and its
  reason are recorded (``info["lm_solve"]``, ``info["lm_solve_reason"]``).
  ``precond`` picks the matrix-free solve's preconditioner: ``nystrom``, ``kfac`` (K-FAC for PINNs,
  :mod:`fedsciml.core.kfac_pinn`: Kronecker factors of the forward-Laplacian channels, taken with the
  operator at each accepted point), ``none`` or ``auto`` (default).  On a CPU, for residuals in K-FAC's
  channel form at p ≥ 5·10³ where a dense step costs ≥ 2 K-FAC steps by the flop model
  (:data:`fedsciml.core.forms.KFAC_MIN_PARAMS`, ``KFAC_MIN_RATIO``), ``auto`` solves matrix-free with ``kfac``
  and CG capped at 10 (``cg_iters``, unless named; :func:`fedsciml.core.forms.choose_lm_solve`) — a cap that
  grows from 3 at the first step by 2 per accepted step where none is named (:func:`fedsciml.core.matfree.cg_cap`:
  the first step of p ≈ 10⁵ at the full cap ends after 30 CPU-s); elsewhere ``auto`` is ``nystrom`` and the cap
  500.  The resolved preconditioner and cap are recorded with a matrix-free solve (``info["precond"]``,
  ``info["cg_cap"]``, and ``info["cg_start"]`` where the cap grows).
* ``adam`` — Adam on the mean loss ``½‖r‖²/N`` (lr 1e-3 by default).
* ``lbfgs`` — ``torch.optim.LBFGS`` with strong-Wolfe line search (one iteration, up to
  25 function evaluations, per step; restarted from steepest descent if it stops moving).

``resample=K``: fresh collocation points every K iterations (:mod:`fedsciml.runtime.resample`).  LM forms
no statistics at a point accepted just before a resample (the next step takes them on the new points:
:func:`fedsciml.core.lm.deferred_stats`) — with ``resample=1`` one Jacobian per step instead of two.

Every solver stops on the first of: ``tol`` on the mean loss, ``max_iters``
iterations, or ``budget`` seconds (solver time, evaluation excluded) — and LM when its damping reaches its
ceiling (no step lowers the loss: one warning line says so).  ``info["stop_reason"]`` names which
(``tolerance``, ``iterations``, ``budget``, ``damping ceiling (μ = 1e+20)``, ``callback NAME``;
:func:`fedsciml.runtime.results.stop_reason_of`).
"""
from __future__ import annotations

import logging

import math
from dataclasses import dataclass, field
from typing import Callable, ClassVar

import torch

from fedsciml.options import StopOptions, display, option
from fedsciml.core.kfac_forms import factors_of, has_jets, require_jets
from fedsciml.core.forms import KFAC_MIN_PARAMS, NYSTROM_RANK
from fedsciml.core.matfree import (BlockGNOperator, GNOperator, MatfreeConfig, OutOfTime, SplitGNOperator,
                                   local_operator, split_rows)
from fedsciml.core.objective import GNStats, LeastSquares, gn_stats_from, stack_objectives
from fedsciml.core.stats import chunked_gn_stats, row_blocks
from fedsciml.runtime.history import Recorder
from fedsciml.runtime.memory import operator_graph_floats
from fedsciml.runtime.resample import Growth, check_resample, resampled_objectives
from fedsciml.methods.run import capped_rank, subspace_damping_option, subspace_inapplicable
from fedsciml.runtime.driver import Method
from fedsciml.core.lm import LevenbergMarquardt, LMConfig, auto_form, ceiling_warning, damping_ceiling, default_tau, deferred_stats

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class CentralizedConfig(StopOptions):
    """The pooled-data reference.  ``max_iters=None``: :attr:`default_iters` of the optimizer (unless a
    budget is given); ``lr=None``: :attr:`default_lr` of the optimizer."""

    method: ClassVar[str] = "centralized"
    default_iters: ClassVar[dict] = {"lm": 500, "adam": 20000, "lbfgs": 5000}
    default_lr: ClassVar[dict] = {"lm": None, "adam": 1e-3, "lbfgs": 1.0}
    #: LM's matrix-free operator holds a residual graph past fedsciml.core.forms.MATFREE_GRAPH_BYTES in row blocks
    #: (the driver's memory estimate charges it that much)
    blocks_graph: ClassVar[bool] = True

    optimizer: str = option("lm", "centralized optimizer: lm (Levenberg–Marquardt), adam or lbfgs", str,
                            choices=("lm", "adam", "lbfgs"))
    max_iters: int | None = option(None, "iteration cap", int, lo=0,
                                   none="lm 500, adam 20000, lbfgs 5000; with a budget, until it is spent")
    lr: float | None = option(None, "learning rate of adam / lbfgs", float, lo=0, lo_open=True,
                              none="adam 1e-3, lbfgs 1.0")
    lm_solve: str = option("auto", "how lm solves its damped system: normal (p×p Cholesky), kernel (n×n), chunked "
                                   "(normal on JᵀJ accumulated over row blocks: J never whole), matfree "
                                   "(Nyström-preconditioned CG on jvp/vjp products, no J) or auto (from the device's "
                                   "free memory and a cost per form: kernel when n < p, normal when n ≥ p while J "
                                   "fits — always up to 5e7 entries —, else the cheaper of chunked and matfree)", str,
                           choices=("auto", "normal", "kernel", "chunked", "matfree"))
    nystrom_rank: int = option(NYSTROM_RANK, "rank of the Nyström preconditioner of the matrix-free lm solve", int,
                               lo=1)
    precond: str = option("auto", "preconditioner of the matrix-free lm solve's CG: nystrom (rank-ℓ sketch), kfac "
                                  "(K-FAC for PINNs: Kronecker factors of the Taylor-mode channels; PINN residuals of u "
                                  "and its derivatives up to order 2), none, or auto (kfac where lm_solve auto goes matrix-free for it: a "
                                  f"CPU, PINN residuals in channel form, p ≥ {KFAC_MIN_PARAMS:,}, a dense step "
                                  "dear; else nystrom)", str,
                          choices=("auto", "nystrom", "kfac", "none"))
    cg_iters: int | None = option(None, "CG iterations per matrix-free lm solve, at most (a truncated solve is judged "
                                        "by LM's gain ratio; with precond kfac, 1–10 take many cheap steps; 0: no CG, "
                                        "the damped K-FAC step itself)", int, lo=0,
                                  none="10 where lm_solve auto takes K-FAC (a CPU, PINN residuals in channel form, "
                                       f"p ≥ {KFAC_MIN_PARAMS:,}, a dense step dear), else 500")
    subspace: int = option(0, "directions of lm's subspace step (matrix-free solve, no CG): the damped model "
                              "minimized exactly over k directions — the preconditioned gradient and the last k − 1 "
                              "accepted steps (K-FAC's step size and momentum, Martens & Grosse 2015, for k = 2) — "
                              "from one batched product JᵀJ V per accepted point (0: CG)", int, lo=0)
    subspace_damping: str = subspace_damping_option()
    momentum: float = option(0.0, "SPRING momentum β of lm (0: plain Levenberg–Marquardt; fedsciml.core.lm)", float,
                             lo=0, hi=1, hi_open=True)
    lm_damping: str = option("adaptive", "lm damping: adaptive (Levenberg–Marquardt's gain-ratio rule) or fixed "
                                         "(μ = lm_mu per residual row, every step taken with the step size of "
                                         "step_decay: ENGD/SPRING-style)", str, choices=("adaptive", "fixed"))
    lm_mu: float = option(1e-6, "fixed lm damping per residual row (μ = lm_mu·n on the summed loss)", float, lo=0,
                          lo_open=True)
    step_decay: float | None = option(None, "fixed lm damping: step size η_k = 1/(1 + k/step_decay) at step k",
                                      float, lo=0, lo_open=True, none="η = 1")
    average: float | None = option(None, "iterate averaging: evaluate and return the EMA θ̄ ← a·θ̄ + (1−a)·θ of the "
                                         "iterates (lm)", float, lo=0, hi=1, hi_open=True, none="the last iterate")

    def forms_jacobians(self) -> bool:
        return self.optimizer == "lm" and self.lm_solve != "matfree"

    def memory_form(self, rows: int, p: int, clients: int, device=None) -> str:
        if self.optimizer != "lm":
            return "data"
        form = auto_form(rows * clients, p, device) if self.lm_solve == "auto" else self.lm_solve  # the pooled rows
        return {"matfree": "graph", "chunked": "chunked", "kernel": "kernel"}.get(form, "jacobian")

    def memory_terms(self, rows: int, p: int, clients: int, form: str) -> list[tuple[float, str]]:
        """The pooled solver's matrices and vectors: ``lm`` with the normal form, ``JᵀJ`` and its Cholesky factor
        (2p²); the kernel form, ``JJᵀ`` of the N pooled rows and its factor (2N²: 10⁵ rows are 160 GB); the
        chunked form's 2p² is counted with its rows; matrix-free, ``nystrom_rank`` vectors; plus six parameter
        vectors (θ, the step, the gradient, SPRING's momentum, trial θ, the average).  ``adam``: θ, the gradient
        and the two moments; ``lbfgs``: torch's 100 curvature pairs too."""
        n = int(rows) * int(clients)
        if self.optimizer == "adam":
            return [(4.0 * p, f"adam's 4 parameter vectors of {p:,}")]
        if self.optimizer == "lbfgs":
            return [(204.0 * p, f"lbfgs's 100 curvature pairs and 4 vectors of {p:,}")]
        out = [(6.0 * p, f"lm's 6 parameter vectors of {p:,}")]
        named = display("lm_solve") + (f" {self.lm_solve}" if self.lm_solve != "auto" else " auto")
        if form == "kernel":
            out.append((2.0 * n * n, f"JJᵀ of the {n:,} pooled rows and its factor ({named} → kernel)"))
        elif form == "jacobian":
            out.append((2.0 * p * p, f"JᵀJ ({p:,}×{p:,}) and its factor ({named} → normal)"))
        elif form == "graph":
            r = min(int(self.nystrom_rank), p)  # capped at p by the run (methods.run.capped_rank)
            out.append((float(r) * p, f"the Nyström preconditioner's {r:,} vectors"))
        return out

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.optimizer == "lm":
            out["lr"] = f"Levenberg–Marquardt has no learning rate (it is for {display('optimizer')} adam or lbfgs)"
        else:
            out["momentum"] = f"SPRING momentum is an option of {display('optimizer')} lm"
            for k in ("lm_damping", "lm_mu", "step_decay", "average", "lm_solve"):
                out[k] = f"it is an option of {display('optimizer')} lm"
        if self.lm_damping != "fixed":
            why = f"it sets the fixed damping, which is off ({display('lm_damping')} is {self.lm_damping})"
            out.setdefault("lm_mu", why)
            out.setdefault("step_decay", why)
        if self.optimizer != "lm" or self.lm_solve in ("normal", "kernel", "chunked"):
            out["precond"] = out["cg_iters"] = (f"it sets the matrix-free lm solve ({display('optimizer')} lm, "
                                                f"{display('lm_solve')} matfree or auto)")
            out["nystrom_rank"] = (f"it sizes the Nyström preconditioner of the matrix-free lm solve "
                                   f"({display('optimizer')} lm, {display('lm_solve')} matfree or auto)")
            out["subspace"] = (f"the subspace step is a matrix-free lm solve ({display('optimizer')} lm, "
                               f"{display('lm_solve')} matfree or auto)")
        elif self.precond not in ("nystrom", "auto"):
            out["nystrom_rank"] = f"it sizes the Nyström preconditioner ({display('precond')} nystrom or auto)"
        subspace_inapplicable(self.subspace, out)
        return out

    def _resolve(self):
        if self.max_iters is None and self.budget is None:
            self._set("max_iters", self.default_iters[self.optimizer])
        if self.lr is None:
            self._set("lr", self.default_lr[self.optimizer])


OPTIMIZERS = CentralizedConfig.specs()["optimizer"][1].choices
DEFAULT_ITERS = CentralizedConfig.default_iters  # the defaults are declared once, in CentralizedConfig
DEFAULT_LR = CentralizedConfig.default_lr


class Diverged(ArithmeticError):
    """The loss became non-finite (NaN or ±inf): the run stops instead of returning NaN results."""


@dataclass
class SolveConfig:
    optimizer: str = "lm"
    max_iters: int | None = None
    budget: float | None = None
    clock: str = "wall"       # what budget and time_s count: wall or cpu seconds (fedsciml.runtime.history.Recorder)
    tol: float = 0.0          # stop when the mean loss ½‖r‖²/N ≤ tol
    lr: float | None = None   # adam / lbfgs learning rate
    lm: LMConfig = field(default_factory=LMConfig)
    resample: int | None = None  # fresh collocation points every K iterations (fedsciml.runtime.resample)
    make_objective: Callable[[int], LeastSquares] | None = None  # the pooled objective of resample j ≥ 1
    damping: str = "adaptive"    # lm: "adaptive" (gain-ratio rule) or "fixed" (μ = mu·n, every step taken)
    mu: float = 1e-6             # lm, fixed damping: μ per residual row
    step_decay: float | None = None  # lm, fixed damping: η_k = 1/(1 + k/step_decay)
    average: float | None = None     # lm: evaluate and return the EMA of the iterates with this decay

    def validate(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; allowed: {', '.join(OPTIMIZERS)}")
        if self.budget is not None and not self.budget > 0:
            raise ValueError(f"budget must be > 0 seconds, got {self.budget}")
        if self.max_iters is not None and self.max_iters < 0:
            raise ValueError(f"max_iters must be ≥ 0, got {self.max_iters}")
        if self.lr is not None and not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"learning rate must be a finite number > 0, got {self.lr}")
        if self.max_iters is None and self.budget is None:
            self.max_iters = DEFAULT_ITERS[self.optimizer]
        if self.resample is not None and (self.resample < 1 or self.make_objective is None):
            raise ValueError(f"resample={self.resample} needs K ≥ 1 and a way to draw the points (make_objective)")
        if self.damping not in ("adaptive", "fixed"):
            raise ValueError(f"lm damping must be adaptive or fixed, got {self.damping!r}")
        if not (self.mu > 0 and math.isfinite(self.mu)):
            raise ValueError(f"fixed lm damping per row must be a finite number > 0, got {self.mu}")
        if self.step_decay is not None and not self.step_decay > 0:
            raise ValueError(f"step_decay must be > 0 steps, got {self.step_decay}")
        if self.average is not None and not 0 <= self.average < 1:
            raise ValueError(f"the averaging decay must be in [0, 1), got {self.average}")

    def step_size(self, it: int) -> float:
        """η of step ``it`` (0, 1, …) under fixed damping: ``1/(1 + it/step_decay)``, 1 without a decay."""
        return 1.0 if self.step_decay is None else 1.0 / (1.0 + it / self.step_decay)

    def resample_index(self, it: int) -> int:
        """Which points iteration ``it`` (1, 2, …) runs on: 0 (the run's own) until K iterations are done,
        then j = (it − 1) // K."""
        return 0 if self.resample is None else (it - 1) // self.resample


def lm_stats_fn(obj: LeastSquares, lm: LevenbergMarquardt):
    """θ ↦ the Gauss–Newton statistics LM needs: ``(JᵀJ, Jᵀr)`` for the normal-form
    solve, the same accumulated over row blocks for the chunked form
    (:func:`fedsciml.core.stats.chunked_gn_stats`), ``(J, r, Jᵀr)`` without forming ``JᵀJ`` for the kernel form
    (n < p), or a matrix-free operator (:class:`fedsciml.core.matfree.GNOperator`: ``Jᵀr`` and
    jvp/vjp products, no J; :class:`fedsciml.core.matfree.BlockGNOperator` over row blocks, and K-FAC factors
    summed over the same blocks, where the choice cut a graph too large to hold at once) —
    :meth:`LevenbergMarquardt.form_choice` (made on the run's device by :func:`run_lm` before this is called)."""
    choice = lm.form_choice(obj.n_residuals, obj.n_params)
    form = choice.form
    if form == "matfree":
        kfac = choice.precond == "kfac"
        block = choice.chunk_rows  # rows per block of a graph too large to hold at once (None: one block)

        def operator(theta):
            if block is not None and block < obj.n_residuals:
                op: GNOperator | SplitGNOperator | BlockGNOperator = BlockGNOperator(
                    [b.residual for b in row_blocks(obj, theta, block)], theta)
                rows = block
            else:  # the whole graph held; on a CPU in blocks of ~10³ rows (matfree.CPU_BLOCK_ROWS: faster)
                op, rows = local_operator(obj, theta), split_rows(obj, theta)
            return GNStats(H=None, g=op.g, loss=op.loss, n=op.n, op=op,
                           factors=factors_of(obj, theta, rows) if kfac else None)

        return operator
    if form == "chunked":
        rows = choice.chunk_rows or obj.n_residuals
        return lambda theta: chunked_gn_stats(obj, theta, rows)
    if form != "kernel":
        return obj.gn_stats

    def stats(theta):
        r, J = obj.residual_and_jacobian(theta)
        return gn_stats_from(J, r, form_gram=False, keep_jacobian=True)

    return stats


def _limit_reached(it: int, rec: Recorder, cfg: SolveConfig) -> str | None:
    """Why a solver stops before iteration ``it + 1``, or ``None``: the recorder's reason (a callback asked),
    ``iterations`` (``max_iters`` done) or ``budget`` (spent) — the loop condition's tests, named."""
    if rec.stop_reason is not None:
        return rec.stop_reason
    if cfg.max_iters is not None and it >= cfg.max_iters:
        return "iterations"
    if rec.out_of_time():
        return "budget"
    return None


def run_lm(obj: LeastSquares, theta: torch.Tensor, rec: Recorder, cfg: SolveConfig):
    """Levenberg–Marquardt; with ``cfg.damping='fixed'`` every step is taken, ``θ ← θ + η_k δ`` with
    ``(JᵀJ + μI)δ = −Jᵀr``, ``μ = cfg.mu·n`` (n the rows of the current points) and ``η_k`` of
    :meth:`SolveConfig.step_size` — the ENGD/SPRING regime, which does not chase each batch as the gain-ratio
    rule does; with ``cfg.average`` the recorded and returned θ is the EMA of the iterates."""
    lm = LevenbergMarquardt(cfg.lm)
    lm.form_choice(obj.n_residuals, obj.n_params, theta.device, theta.dtype)  # once, on the run's device
    stats_at = lm_stats_fn(obj, lm)
    lm.stop = rec.out_of_time  # the budget is asked inside a step too: before every CG product and sketch piece
    try:
        lm.start(theta, stats_at(theta))
        started = True
    except OutOfTime:  # spent in the first curvature sketch: θ₀ is the result, its loss known
        started = False
    fixed = cfg.damping == "fixed"
    if fixed:
        lm.mu = cfg.mu * obj.n_residuals
    avg = lm.theta.clone() if cfg.average is not None and lm.theta is not None else None
    rec.record(0, lm.theta, lm.loss, **({"mu": lm.mu} if started or fixed else {}))
    n = obj.n_residuals
    it = 0
    held = 0  # the resample whose points obj holds
    while True:
        reason = _limit_reached(it, rec, cfg)  # not started: the budget is spent, and stays so
        if reason:
            break
        j = cfg.resample_index(it + 1)
        if j != held:  # fresh points: the statistics at θ on them (μ and the SPRING direction carry over)
            assert cfg.make_objective is not None and lm.theta is not None
            obj, held = cfg.make_objective(j), j
            stats_at = lm_stats_fn(obj, lm)
            lm.stats = stats_at(lm.theta)
            if fixed:
                lm.mu = cfg.mu * obj.n_residuals
        if lm.loss / obj.n_residuals <= cfg.tol:
            reason = "tolerance"
            break
        if lm.mu >= lm.cfg.mu_max:
            reason = damping_ceiling(lm.cfg.mu_max)
            log.warning(ceiling_warning("centralized lm", it, lm.loss / obj.n_residuals, lm.cfg.mu_max))
            break
        try:
            trial = lm.propose()
        except OutOfTime:  # the budget ran out inside the solve: no step came of it, θ is the last accepted
            reason = rec.stop_reason or "budget"
            break
        matfree_step = lm.stats.op is not None
        expires = cfg.resample_index(it + 2) != held  # the next step runs on fresh points
        extra: dict = {}
        if fixed:
            assert lm.theta is not None
            eta = cfg.step_size(it)
            if eta != 1.0:
                trial = lm.theta + eta * (trial - lm.theta)
            trial_loss = float(obj.loss(trial))
            if not math.isfinite(trial_loss):
                raise Diverged(f"lm with fixed damping: the loss became {trial_loss} at iteration {it + 1}; "
                               "try a larger lm_mu or a step_decay")
            if cfg.lm.momentum > 0:
                lm.momentum_direction = lm.theta - trial
            lm.theta = trial
            lm.stats = deferred_stats(trial_loss, lm.stats) if expires or rec.out_of_time() else stats_at(trial)
            lm.accepted_steps += 1
            accepted = True
            extra["eta"] = eta
        else:
            trial_loss = float(obj.loss(trial))
            if rec.out_of_time():  # a finished step, judged; no statistics at it: no step follows
                expires = True
            if expires:
                # the next step takes its statistics on the new points: none are formed at the trial
                accepted = lm.observe(trial_loss, lambda: deferred_stats(trial_loss, lm.stats))
            else:
                accepted = lm.observe(trial_loss, lambda: stats_at(trial))
        it += 1
        if matfree_step:
            extra["cg_iters"] = lm.last_cg_iters
        if held:
            extra["resample"] = held
            if obj.n_residuals != n:
                extra["rows"] = obj.n_residuals
        if avg is not None:
            assert cfg.average is not None and lm.theta is not None
            avg.mul_(cfg.average).add_(lm.theta, alpha=1.0 - cfg.average)
        rec.record(it, lm.theta if avg is None else avg, lm.loss, mu=lm.mu, accepted=accepted, **extra)
    choice = lm.form_choice(n, obj.n_params)
    info = {"accepted_steps": lm.accepted_steps, "rejected_steps": lm.rejected_steps, "final_mu": lm.mu,
            "lm_solve": choice.form, "lm_solve_reason": choice.reason, "stop_reason": reason}
    if choice.chunk_rows is not None:
        info["chunk_rows"] = choice.chunk_rows
    if cfg.resample is not None:
        info["resamples"] = held
    if fixed:
        info.update(lm_damping="fixed", lm_mu=cfg.mu, step_decay=cfg.step_decay)
    if avg is not None:
        info["average"] = cfg.average
    if info["lm_solve"] == "matfree":
        info["cg_iters"] = lm.cg_iters
        info["nystrom_rank"] = lm.cfg.matfree.rank if choice.precond == "nystrom" else 0
        info["precond"], info["cg_cap"] = choice.precond, choice.cg_iters
        if lm.resolved_matfree.cg_start is not None:
            info["cg_start"] = lm.resolved_matfree.cg_start
        if lm.cfg.matfree.subspace > 0:
            info["subspace"], info["subspace_damping"] = lm.cfg.matfree.subspace, lm.cfg.matfree.subspace_damping
    return (lm.theta if avg is None else avg), info


def run_torch_optimizer(obj: LeastSquares, theta: torch.Tensor, rec: Recorder, cfg: SolveConfig):
    p = theta.detach().clone().requires_grad_(True)
    n = obj.n_residuals
    if cfg.optimizer == "adam":
        opt = torch.optim.Adam([p], lr=cfg.lr or DEFAULT_LR["adam"])
    else:
        # One L-BFGS iteration per step.  max_eval must be set: torch's default
        # (max_iter·5//4 = 1) cuts the strong-Wolfe line search short and L-BFGS then
        # stalls; torch's own tolerances are off (0) — the solver's stopping rules apply.
        opt = torch.optim.LBFGS([p], lr=cfg.lr or DEFAULT_LR["lbfgs"], max_iter=1, max_eval=25, history_size=50,
                                tolerance_grad=0.0, tolerance_change=0.0, line_search_fn="strong_wolfe")

    current = [obj]  # the objective in use (replaced by resampling)

    def closure():
        opt.zero_grad()
        loss = current[0].loss(p) / n
        loss.backward()
        return loss

    with torch.no_grad():
        rec.record(0, p.detach(), float(obj.loss(p)))
    it = 0
    restarts = 0
    held = 0
    while not (reason := _limit_reached(it, rec, cfg)):
        j = cfg.resample_index(it + 1)
        if j != held:  # fresh points; L-BFGS's curvature pairs belong to the old function: dropped
            assert cfg.make_objective is not None
            current[0], held = cfg.make_objective(j), j
            if cfg.optimizer == "lbfgs":
                opt.state.clear()
        before = p.detach().clone() if cfg.optimizer == "lbfgs" else None
        opt.step(closure)
        it += 1
        if before is not None and torch.equal(before, p.detach()):
            # L-BFGS made no move: its memory gives a direction that is not a descent
            # direction (torch then returns without stepping, and would do so forever).
            # Restart from steepest descent, as a line-search quasi-Newton method should.
            opt.state.clear()
            restarts += 1
        with torch.no_grad():
            loss = float(current[0].loss(p))
        rec.record(it, p.detach(), loss, **({"resample": held} if held else {}))
        if not math.isfinite(loss):
            raise Diverged(f"{cfg.optimizer}: the loss became {loss} at iteration {it} (lr={opt.param_groups[0]['lr']:g}); "
                           "try a smaller --lr")
        if loss / n <= cfg.tol:
            reason = "tolerance"
            break
    info: dict = {"lbfgs_restarts": restarts} if cfg.optimizer == "lbfgs" else {}
    info["stop_reason"] = reason
    if cfg.resample is not None:
        info["resamples"] = held
    return p.detach(), info


def _load_autodiff():
    """Import what ``torch.func``'s first ``vjp``/``jacrev`` imports (``torch._dynamo``, seconds
    on a busy machine) before the solver clock starts: a one-time library load, not solver work."""
    try:
        import torch._dynamo.compiled_autograd  # noqa: F401
    except ImportError:  # pragma: no cover - a torch build without dynamo: torch.func then loads what it needs
        logging.getLogger(__name__).debug("torch._dynamo not importable; autodiff loads on first use")


def solve_least_squares(obj: LeastSquares, theta0: torch.Tensor, evaluate, cfg: SolveConfig,
                        progress: bool = False, every: int = 10, label: str = ""):
    """Minimize ``½‖r(θ)‖²`` from ``theta0``; returns ``(θ, history rows, info)``.

    ``evaluate(θ) -> dict`` gives the test metrics recorded at every step.
    """
    cfg.validate()
    _load_autodiff()
    rec = Recorder(evaluate, obj.n_residuals, cfg.budget, progress, every, label, total=cfg.max_iters,
                   clock=cfg.clock)
    run = run_lm if cfg.optimizer == "lm" else run_torch_optimizer
    try:
        theta, info = run(obj, theta0, rec, cfg)
    except KeyboardInterrupt as e:  # Ctrl-C / SIGTERM: the last recorded step is kept (fedsciml.runtime.interrupt)
        from fedsciml.runtime.interrupt import INTERRUPTED, Interrupted

        stop = Interrupted.of(e)
        if rec.last_theta is not None:
            stop.partial = (rec.last_theta, list(rec.rows), {"stopped_by": INTERRUPTED, "stop_reason": INTERRUPTED,
                                                             "solver_time_s": rec.elapsed()})
        if stop is e:
            raise
        raise stop from None
    finally:
        rec.close()
    info["solver_time_s"] = rec.elapsed()
    if rec.stop_reason is not None:
        info["stopped_by"] = rec.stop_reason
    return theta, rec.rows, info


def run_centralized(problem, objectives, theta0, evaluate, config: CentralizedConfig | None = None, *, seed=0,
                    progress=False, every=10, message_hook=None, **options):
    """The ``centralized`` method: all clients' data pooled on one machine, one optimizer (the reference)."""
    if config is None:
        config = CentralizedConfig.from_options(options)
    elif options:
        raise TypeError("give the centralized options either as config or as keywords, not both")
    if message_hook is not None:
        raise ValueError("message_hook applies to federated methods; centralized exchanges no messages")
    if config.precond == "kfac":
        require_jets(objectives, getattr(problem, "name", str(problem)))
    lm = LMConfig(tau=default_tau(objectives), solve=config.lm_solve,
                  matfree=MatfreeConfig(precond=config.precond,
                                        rank=capped_rank(config.nystrom_rank, theta0.numel(), "nystrom_rank"),
                                        max_iters=config.cg_iters, seed=seed, subspace=config.subspace,
                                        subspace_damping=config.subspace_damping),
                  momentum=config.momentum, jets=lambda: has_jets(objectives),
                  graph_floats=operator_graph_floats(problem, config.precond))
    make = None
    if config.resample is not None:
        check_resample(problem, config.resample)
        n_clients, device, every, growth = len(objectives), theta0.device, config.resample, Growth.of(config)

        def make(j: int) -> LeastSquares:
            return stack_objectives(resampled_objectives(problem, n_clients, seed, j, device, growth, every))

    cfg = SolveConfig(optimizer=config.optimizer, max_iters=config.max_iters, budget=config.budget,
                      clock=config.clock, tol=config.tol,
                      lr=config.lr, lm=lm, resample=config.resample, make_objective=make, damping=config.lm_damping,
                      mu=config.lm_mu, step_decay=config.step_decay, average=config.average)
    theta, rows, info = solve_least_squares(stack_objectives(objectives), theta0, evaluate, cfg, progress=progress,
                                            every=every, label=f"centralized/{config.optimizer}")
    info["reference"] = "centralized: all clients' data pooled on one machine (not federated)"
    return theta, rows, info


def settings(r) -> str:
    """The summary table's settings text of a centralized run."""
    return f"pooled data, {r.options.get('optimizer', 'lm')}"


#: ``centralized``'s registry entry, its :class:`~fedsciml.runtime.driver.Method`
#: (:mod:`fedsciml.methods` registers every built-in module's entries, in one fixed order)
METHOD_ENTRIES = (
    Method("centralized", CentralizedConfig, run=run_centralized,
           description="pooled data, Levenberg–Marquardt / Adam / L-BFGS (the reference, not federated)",
           federated=False, settings=settings),
)
