"""FIPA as a :class:`~fedsciml.runtime.strategy.Strategy`, on top of the averaging strategy.

Clients answer ``update`` with their local update ``Δθ_m`` *and* curvature at
the broadcast θ — the full ``H_m = J_mᵀJ_m`` (packed) or its top-r
eigenpairs ``(U_m, λ_m)`` —, and the server merges
``θ + Σ (Σ_j Ĥ_j)^† Ĥ_m Δθ_m`` (paper Eq. 6, or the thin-QR merge of Eq. 13;
:class:`~fedsciml.methods.aggregators.FIPAAggregator`).

``safeguard`` (default with local Gauss–Newton steps): the merge is
regularized, ``(Ĥ + βI)^† Σ Ĥ_m Δθ_m`` (Eq. 13's β), and β is the
Levenberg–Marquardt damping, adapted by the *same* rule as
:mod:`fedsciml.core.lm` (:func:`~fedsciml.core.lm.damping_after_success`,
:func:`~fedsciml.core.lm.damping_after_failure`) from the losses the
clients report at the broadcast θ (one float each):

* β₀ = ``lm_tau`` · max_m max diag(Ĥ_m) (LM's μ₀ = τ·max diag(JᵀJ)), set at
  the first round with answers;
* when every client answered, the broadcast θ is an unverified merged step,
  and the summed loss did not go down (or every answer was non-finite): the
  step is undone, ``β ← β·ν, ν ← 2ν`` (capped at 1e20), and the next trial
  step is merged at once, with the new β, from the messages the clients sent
  at the previous global parameters (the server keeps the last complete
  round's messages; at the same θ the clients would send the same ones again),
  so a rejected step costs one round, not two (one to find the step worse, one
  to ask again at the old θ);
* when every client answered and the step is kept: the gain ratio
  ``ρ = (F_prev − F) / pred``, ``pred = ½ δᵀ(b + βδ)`` with ``b = Σ Ĥ_m Δθ_m``
  (≈ −g), and ``β ← β·max(⅓, 1 − (2ρ−1)³)`` (floored at 1e-20), ``ν = 2``;
* with partial participation or dropout the losses of different rounds are
  not comparable, so every step is kept and β is unchanged;
* after the last round, :meth:`FIPAStrategy.finalize` checks the last merged
  step with one loss query and undoes it if it made things worse.

Matrix-free clients (``sketch='matfree'``, or ``'auto'`` when ``J_m`` and its smaller Gram do not fit the
device's memory budget, :func:`fedsciml.core.forms.choose_form`; local ``gn``, low rank, not
adaptive — :func:`fedsciml.core.forms.local_client_form`, the one rule): the client forms
neither ``J_m`` nor ``H_m``; its step is preconditioned CG on damped
``J_mᵀJ_m`` products (at most ``cg_iters`` iterations, relative residual
``cg_rtol``) and its message the top-r pairs of a randomized Nyström sketch
from ``r + 10`` products (:func:`fedsciml.core.matfree.local_gn_sketch`) — the
same message schema, merged the same way.  A round's row records the clients'
CG iterations, largest final CG residual and products.

With full-rank curvature and exact local solves ``Δθ_m = −H_m^† g_m`` the
merged step is then exactly the LM step ``−(H + βI)^{-1} g``.

``complement``: add the FedAvg average of the updates' components outside the
span ``Q`` of the clients' sketches, ``(I − QQᵀ) Σ (N_m/N) Δθ_m`` —
directions no client's curvature informs (the paper's "orthogonal complement
correction"; off by default).  It is the ``complement='fedavg'`` option of the
one thin-QR merge, :func:`fedsciml.core.curvature.fipa_merge_lowrank` (set on the
aggregator), beside the image benchmarks' isotropic ``'tail'``.

``adaptive`` (an :class:`~fedsciml.methods.local.AdaptiveSchedule`): each
client picks its rank and Adam step count (paper Fig. 2B); the server
broadcasts last round's global gradient-norm estimate (one float).

The file holds the method: its configuration (:class:`FIPAConfig`, :data:`PAPER_PRESET`), its strategy, its
strategy factory (``fipa_strategy``), its settings text and its registry entry (``METHOD_ENTRIES``).  Its client
half — the local step and curvature, shared with FedAvg/FedProx — is :mod:`fedsciml.methods.local`; its merge
is :class:`~fedsciml.methods.aggregators.FIPAAggregator`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Mapping

import torch

from fedsciml.core.curvature import LowRank
from fedsciml.methods.averaging import AveragingStrategy
from fedsciml.methods.local import (LOCAL_LOSSES, SKETCHES, AdaptiveSchedule, CurvatureAsk, LocalConfig,
                                   local_settings)
from fedsciml.options import LocalOptions, OptionError, RobustOptions, RoundOptions, display, option
from fedsciml.methods.gn import GNAggregator
from fedsciml.runtime.strategy import Exchange, Replies
from fedsciml.runtime.transport import Request
from fedsciml.core.lm import damping_after_failure, damping_after_success
from fedsciml.core.forms import local_client_form
from fedsciml.core.matfree import fipa_local_matfree
from fedsciml.methods.aggregators import FIPAAggregator
from fedsciml.methods.run import RunContext, capped_rank, local_config
from fedsciml.runtime.driver import Method

#: The published FIPA for PDEs as the authors' code runs it (``FIPAConfig.from_options(preset="paper")``,
#: ``fs.solve(..., method="fipa", preset="paper")``, ``solve --preset paper``): τ = 100 local Adam steps (lr 1e-4) on the
#: per-part mean loss ``mean(r_int²) + β·mean(r_bc²)``, rank-20 curvature sketches, the merge
#: ``γ Ĥ^† Σ Ĥ_m Δθ_m`` with a pseudo-inverse that drops eigenvalues below 1e-5·λ_max, a fixed γ = 0.3, no
#: safeguard.  The reference code's collocation settings (400 interior points, each end point 20×, boundary
#: weight 10) are problem options: ``problems.pinn.PDE1D.paper_options`` (the CLI preset fills them).
#:
#: Why the paper's stated β = 0, γ = 1 diverged here: the pseudo-inverse cutoff, not γ.  Rank-20 sketches of a
#: PINN's ``J_mᵀJ_m`` keep eigenvalues down to ~1e-12·λ_max, and Adam's ``Δθ_m`` (not a GN step) has components
#: along them, which the merge divides by those eigenvalues: on Bratu (2 clients) the first merged step has norm
#: 1.6e4 with the default cutoff p·eps (FedAvg's: 0.15), 15 with 1e-8, 0.57 with 1e-5, and the run goes
#: non-finite; with 1e-5 it converges with γ = 1 too (relative L2 1.4e-4 after 20 rounds; sin1d n=2: MSE 1.5e-5
#: instead of 3.5e9).  ``reproductions/fipa_ablation.md``, docs/methods.md "The published FIPA".
PAPER_PRESET = {"local": "adam", "lr": 1e-4, "local_steps": 100, "local_loss": "parts", "rank": 20, "merge": "qr",
                "beta": 0.0, "gamma": 0.3, "pinv_rtol": 1e-5, "safeguard": False}


@dataclass(frozen=True)
class FIPAConfig(RobustOptions, LocalOptions, RoundOptions):
    """FIPA.  ``merge=None``: pinv for full rank, qr for low rank; ``safeguard=None``: on with local gn."""

    method: ClassVar[str] = "fipa"
    default_rounds: ClassVar[int] = 40

    local: str = option("gn", LocalOptions.specs()["local"][1].help, str, choices=("adam", "gn"))
    rank: int = option(20, "rank r of each client's curvature sketch (0: the full H_m)", int, lo=0)
    adaptive: bool = option(False, "adaptive per-client rank (≤ rank) and local steps", bool)
    merge: str | None = option(None, "server merge", str, choices=("pinv", "qr"),
                               none="pinv for full rank, qr for low rank")
    beta: float = option(0.0, "QR-merge regularization β", float, lo=0)
    gamma: float = option(1.0, "server step γ", float, lo=0, lo_open=True)
    sketch: str = option("auto", "how a client computes its rank-r curvature (and, with local gn, its step): dense "
                                 "(forms J_m: exact eigenpairs, exact step), matfree (no J_m: with local gn a Nyström "
                                 "sketch of r+10 products and a CG step, with local adam subspace iteration) or auto "
                                 "(matfree when J_m and its Gram do not fit the device's memory; always dense while "
                                 "n_m·p ≤ 5e7)", str, choices=SKETCHES)
    cg_iters: int = option(100, "matrix-free local gn step: at most this many CG iterations", int, lo=1)
    cg_rtol: float = option(1e-10, "matrix-free local gn step: CG relative residual", float, lo=0, lo_open=True)
    safeguard: bool | None = option(None, "LM safeguard on the server merge (β adapted, worse steps undone)", bool,
                                    none="on with local gn")
    complement: bool = option(False, "add the FedAvg average of the update outside the clients' sketches", bool)
    adapt_c: float = option(1e-3, "adaptive FIPA: rank threshold constant C", float, lo=0, lo_open=True)
    adapt_ctau: float = option(1e-3, "adaptive FIPA: local-steps constant C_τ", float, lo=0, lo_open=True)
    pinv_rtol: float | None = option(None, "pseudo-inverse cutoff: merged-curvature eigenvalues below this × λ_max "
                                           "are dropped", float, lo=0, hi=1, hi_open=True, none="p·eps")
    local_loss: str = option(LOCAL_LOSSES[0], "local Adam loss: mean ½‖r_m‖²/n_m, or parts Σ mean(r_part²) (the "
                                              "FIPA reference code's)", str, choices=LOCAL_LOSSES)
    preset: str | None = option(None, "paper: the published FIPA with the authors' settings (local Adam lr 1e-4, "
                                      "τ=100, per-part loss, rank 20, pinv cutoff 1e-5, γ=0.3, no safeguard; 1D PDEs "
                                      "also 400 interior points, end points ×20, boundary weight 10); options given "
                                      "explicitly win", str, choices=("paper",), none="none")

    @classmethod
    def preset_options(cls, given: Mapping) -> tuple[str, ...]:
        """The options the preset ``given`` names fills (``paper``: :data:`PAPER_PRESET`'s), which a problem's
        run defaults must not override (:func:`fedsciml.runtime.driver.run_defaults`)."""
        return tuple(PAPER_PRESET) if given.get("preset") == "paper" else ()

    @classmethod
    def from_options(cls, options: dict | None = None, **more) -> FIPAConfig:
        given = {**(options or {}), **more}
        opts = given
        if given.get("preset") == "paper":  # fill what was not given (an explicit option wins, None included:
            opts = {**PAPER_PRESET, **given}  # pinv_rtol=None is the p·eps cutoff, not "the preset's")
        return cls._build(opts, given=given)  # type: ignore[return-value]  # _build returns cls

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if not self.adaptive:
            out["adapt_c"] = out["adapt_ctau"] = f"it is a constant of {display('adaptive')} FIPA, which is off"
        off = [f"{display(k)} {v}" for k, v, bad in (("local", self.local, self.local != "gn"),
                                                       ("rank", self.rank, self.rank == 0),
                                                       ("adaptive", self.adaptive, self.adaptive),
                                                       ("sketch", self.sketch, self.sketch == "dense")) if bad]
        if off:
            out["cg_iters"] = out["cg_rtol"] = (f"it sets the matrix-free local gn step, which {', '.join(off)} "
                                                f"rules out (it needs local gn, rank ≥ 1, not adaptive, sketch "
                                                f"matfree or auto)")
        if self.rank == 0:
            out["sketch"] = f"{display('rank')} 0 sends the full H_m: there is no sketch"
            out["complement"] = f"{display('rank')} 0 sends the full H_m: no direction lies outside the clients' " \
                                "curvature"
        if self.safeguard:
            out["beta"] = (f"the {display('safeguard')} (on with local gn) sets β itself, from lm_tau·max diag H, "
                           f"and adapts it; give {display('safeguard')} False to fix β")
        if self.safeguard or self.beta > 0:
            out["pinv_rtol"] = ("it is the cutoff of the pseudo-inverse, which only the undamped merge uses (β = 0 "
                                f"and no {display('safeguard')}; the safeguard is on with local gn)")
        return out

    def memory_form(self, rows: int, p: int, clients: int, device=None) -> str:
        form = local_client_form(self.local, "lowrank" if self.rank else "full", self.sketch, self.adaptive, rows, p,
                                 device=device)
        return "graph" if form == "matfree" else "jacobian"  # a matrix-free client keeps a residual graph, never J_m

    def memory_terms(self, rows: int, p: int, clients: int, form: str) -> list[tuple[float, str]]:
        """Beyond the default parameter vectors: full-rank curvature (``rank`` 0) is every client's packed
        ``H_m`` (p(p+1)/2) held by the server with the merge's p×p sum and pseudo-inverse; low rank r, each
        client's r eigenvectors (r·p) and the merge's thin factors."""
        out = super().memory_terms(rows, p, clients, form)
        if self.rank == 0:
            out.append((clients * p * (p + 1) / 2 + 2.0 * p * p,
                        f"every client's H_m ({p:,}×{p:,}, packed) and the merge's two p×p matrices "
                        f"({display('rank')} 0: full rank)"))
        else:
            r = min(int(self.rank), p)
            out.append(((clients + 2.0) * r * p, f"{r:,} eigenvectors of {p:,} a client and the merge's "
                                                 f"({display('rank')} {self.rank})"))
        return out

    def _resolve(self):
        super()._resolve()
        if self.adaptive and self.rank == 0:
            raise OptionError(f"fipa option {display('adaptive')} chooses a rank per client: give "
                              f"{display('rank')} ≥ 1 as its upper bound")
        if self.merge is None:
            self._set("merge", "pinv" if self.rank == 0 else "qr")
        if self.safeguard is None:
            self._set("safeguard", self.local == "gn")
        if self.complement and self.rank > 0 and self.merge != "qr":
            raise OptionError(f"fipa option {display('complement')} is an option of the thin-QR merge; use "
                              f"{display('merge')} qr (the default for low rank)")


BETA_MIN, BETA_MAX = 1e-20, 1e20


class FIPAStrategy(AveragingStrategy):
    """FIPA's round logic (see the module docstring)."""

    name = "fipa"

    def __init__(self, aggregator, local: LocalConfig, ask: CurvatureAsk, adaptive: AdaptiveSchedule | None,
                 seed: int, safeguard: bool = False, complement: bool = False, lm_tau: float = 1e-3,
                 local_form: str | None = None):
        super().__init__(aggregator, local, seed)
        self.local_form = local_form  # "matfree": some client takes its local GN step matrix-free (recorded)
        self.ask = ask  # what each round's update request asks beside the step (curvature, rank, sketch, CG)
        self.curvature, self.rank, self.sketch = ask.curvature, ask.rank, ask.sketch
        self.adaptive = adaptive
        self.safeguard = safeguard
        self.complement = complement
        self.lm_tau = lm_tau
        self.cg_total = 0  # CG iterations of every matrix-free client so far
        self.beta = None
        self.nu = 2.0
        self.pred = 0.0
        self.gnorm = None  # adaptive FIPA: global gradient-norm estimate of the last round
        self.prev_theta = None
        self.prev_loss = None
        self.prev_msgs = None  # the complete round's messages at prev_theta (re-merged after a rejected step)
        self.rejected_steps = 0
        self.final_check = {}

    def request_config(self, run, k):
        return {**super().request_config(run, k), **self.ask.to_config(),
                "adaptive": dataclasses.asdict(self.adaptive) if self.adaptive is not None else None,
                "global_grad_norm": self.gnorm, "report_loss": bool(self.safeguard)}

    def down_floats(self, p):
        # θ, plus one float each for the global gradient norm (adaptive) and the loss-report request (safeguard)
        return p + (1 if self.adaptive is not None else 0) + (1 if self.safeguard else 0)

    def aggregate_round(self, run, k, replies: Replies):
        ok, bad = replies.ok, replies.rejected
        theta = self.theta
        extra = {"answered": len(ok)}
        extra.update(self._matfree_fields(replies))
        if self.safeguard:
            complete = len(ok) == len(run.client_ids)
            loss = sum(float(ok[c]["loss"][0]) for c in sorted(ok)) if complete else None
            bad_point = not ok and len(bad) == len(replies.asked)  # every answer was broken (non-finite) at this θ
            trial = self.prev_theta is not None and theta is not self.prev_theta  # θ is an unverified merged step
            if trial and (bad_point or (complete and not loss < self.prev_loss)):
                # the last merged step made things worse: undo it, raise β, and merge again at once from the
                # messages the clients sent at the previous θ (the same θ: they would send them again)
                self.beta, self.nu = damping_after_failure(self.beta, self.nu, BETA_MAX)
                self.rejected_steps += 1
                extra.update(accepted=False, beta=self.beta)
                if self.prev_msgs is None:  # (a checkpoint written before the messages were kept)
                    self.theta = self.prev_theta
                else:
                    self.agg.beta = self.beta
                    self._propose(self.prev_theta, self.prev_msgs, k)
                return extra
            if self.beta is None and ok:
                self.beta = self.lm_tau * max(float(self.agg.form.from_message(m).diagonal().max())
                                              for m in ok.values())
            elif complete and trial:  # gain ratio of the accepted step (LM rule)
                rho = (self.prev_loss - loss) / self.pred if self.pred > 0 else 1.0
                self.beta, self.nu = damping_after_success(self.beta, rho, BETA_MIN)
            if complete:
                self.prev_theta, self.prev_loss, self.prev_msgs = theta, loss, dict(ok)
            extra.update(accepted=True, beta=self.beta)
            self.agg.beta = self.beta
        if not ok:
            run.fail("aggregation")
        self._propose(theta, ok, k)
        if self.adaptive is not None:
            w = self.agg.sample_weights(ok)
            self.gnorm = sum(w[c] * float(m["gnorm"][0]) for c, m in ok.items())
            ranks = [LowRank.from_message(ok[c]).rank for c in sorted(ok)] if self.curvature == "lowrank" else []
            steps = [replies.metrics[c].get("steps") for c in replies.asked if c in ok]
            extra.update(ranks=" ".join(map(str, ranks)), local_steps=" ".join(map(str, steps)))
        return extra

    def _matfree_fields(self, replies) -> dict:
        """The matrix-free clients' CG figures of this round (:func:`fedsciml.core.matfree.local_gn_sketch`): the
        total CG iterations, the largest final relative residual and the Gauss–Newton products (sketch + CG)."""
        got = [replies.metrics[c] for c in sorted(replies.metrics) if "cg_iters" in replies.metrics[c]]
        if not got:
            return {}
        its = sum(int(m["cg_iters"]) for m in got)
        self.cg_total += its
        return {"cg_iters": its, "cg_rel_residual": max(float(m["cg_rel_residual"]) for m in got),
                "gn_products": sum(int(m["products"]) for m in got), "matfree_clients": len(got)}

    def _propose(self, theta, ok, k: int | None = None):
        """Merge ``ok`` (the messages at ``theta``) into the next global θ; with the safeguard, keep the
        predicted decrease ``½ δᵀ(b + βδ)``, ``b = Σ Ĥ_m Δθ_m ≈ −g``, of the merged step δ."""
        new = self.merge(theta, ok, k)
        if self.safeguard:
            step = new - theta
            b = self.agg.rhs if self.agg.rhs is not None else _merge_rhs(ok, self.agg.form)  # the merge's own b
            self.pred = 0.5 * float(step @ (b + self.beta * step))
        self.theta = new

    def resampled(self, run):
        """Fresh collocation points (``resample``): the safeguard's reference loss at the last accepted θ is
        measured again on them (one loss exchange, counted), so that the next gain compares like with like."""
        self.agg.enrolled = {}  # the clients' row counts may change with their points
        if not (self.safeguard and self.prev_theta is not None):
            return {}
        theta = self.prev_theta
        p = theta.numel()
        got = run.exchange(Exchange(list(run.client_ids), Request("gn_loss", {"theta": theta}, {"vectorize": False}),
                                    lambda m: GNAggregator(False).validate(m, p, theta.dtype), down_floats=p))
        if len(got.ok) != len(run.client_ids):
            run.fail("the reference loss on the resampled points")
        self.prev_loss = GNAggregator.total_loss(got.ok)
        return {}

    def finalize(self, run):
        """Safeguard: check the last, not yet validated merged step with one loss query; undo it if worse."""
        if not (self.safeguard and self.prev_theta is not None and self.theta is not self.prev_theta):
            return
        theta = self.theta
        p = theta.numel()
        got = run.exchange(Exchange(list(run.client_ids), Request("gn_loss", {"theta": theta}, {"vectorize": False}),
                                    lambda m: GNAggregator(False).validate(m, p, theta.dtype)))
        if len(got.ok) == len(run.client_ids):
            loss = GNAggregator.total_loss(got.ok)
            if not loss <= self.prev_loss:
                self.theta = self.prev_theta
                self.rejected_steps += 1
            self.final_check = {"final_step_kept": self.theta is theta, "floats": run.round_floats}

    def state_dict(self):
        return {"theta": self.theta, "gnorm": self.gnorm, "beta": self.beta, "nu": self.nu, "pred": self.pred,
                "prev_theta": self.prev_theta, "prev_msgs": self.prev_msgs,
                "prev_loss": self.prev_loss, "rejected_steps": self.rejected_steps, "enrolled": dict(self.agg.enrolled), "cg_total": self.cg_total}

    def load_state_dict(self, d):
        from fedsciml.runtime import checkpoint as ckpt

        ckpt.restored_number(d, "beta", lo=0.0, optional=True)  # the safeguard's damping (None: not set yet)
        ckpt.restored_number(d, "nu", lo=2.0, optional=True)
        ckpt.restored_number(d, "prev_loss", lo=0.0, optional=True)
        ckpt.restored_number(d, "rejected_steps", lo=0, integer=True)
        ckpt.restored_tensor(d, "prev_theta", like=d.get("theta"), optional=True)
        self.theta, self.gnorm, self.beta = d["theta"], d["gnorm"], d["beta"]
        self.nu, self.pred = d["nu"], d["pred"]
        self.prev_theta, self.prev_loss, self.rejected_steps = d["prev_theta"], d["prev_loss"], d["rejected_steps"]
        self.prev_msgs = d.get("prev_msgs")
        self.agg.enrolled = dict(d.get("enrolled", {}))  # sample counts fixed at enrollment
        self.cg_total = int(d.get("cg_total", 0))

    def summary(self):
        # the rank of a low-rank curvature; 0 for the full H_m (whose request carries an unused rank 1)
        rank = self.rank if self.curvature == "lowrank" else 0
        out = {**super().summary(), "rank": rank, "curvature": self.curvature, "merge": self.agg.merge,
               "beta": self.agg.beta, "gamma": self.agg.gamma, "sketch": self.sketch,
               "adaptive": self.adaptive is not None, "safeguard": self.safeguard, "complement": self.complement}
        out.pop("server_lr", None)
        if self.local.loss != "mean":
            out["local_loss"] = self.local.loss
        if self.local_form is not None:
            out["local_form"] = self.local_form
        return out

    def info(self):
        out = {"rejected_steps": self.rejected_steps, "final_beta": self.beta, **self.final_check} \
            if self.safeguard else {}
        if self.cg_total:
            out["cg_iters"] = self.cg_total
        return out


def _merge_rhs(msgs, form) -> torch.Tensor:
    """``b = Σ_m Ĥ_m Δθ_m`` (sum-form weights), each ``Ĥ_m`` read from its message as the curvature ``form``."""
    b = 0.0
    for m in msgs.values():
        b = b + form.from_message(m).matvec(m["delta"])
    return b


# --- the strategy factory, the settings text and the registry entry ------------------------------------


def fipa_strategy(cfg: FIPAConfig, ctx: RunContext):
    """FIPA (paper Eq. 6 / Eq. 13): curvature-weighted merge of local updates.

    ``preset="paper"`` fills every option not given with :data:`~fedsciml.methods.fipa.PAPER_PRESET` (the published
    algorithm with the authors' settings).  ``pinv_rtol``: eigenvalues of the merged curvature below
    ``pinv_rtol·λ_max`` are dropped by the pseudo-inverse (default ``p·eps``).  Why the published β = 0, γ = 1
    without a relative cutoff diverges (the cutoff, not γ): see PAPER_PRESET and docs/methods.md "The published FIPA".
    """
    objectives, theta0, seed = ctx.objectives, ctx.theta0, ctx.seed
    p = theta0.numel()
    if cfg.sketch == "matfree" and cfg.rank >= p:  # a sketch of every direction: p + 10 products a client a round
        raise OptionError(f"fipa {display('rank')} {cfg.rank} with {display('sketch')} matfree: the model has {p:,} "
                          f"parameters, so the sketch would take {p + 10:,} operator products a client a round "
                          f"(more than forming J_m's {p:,} columns); give a rank below {p:,}, or {display('sketch')} "
                          f"dense or auto")
    rank = capped_rank(cfg.rank, p, "rank")
    curvature = "full" if rank == 0 else "lowrank"
    lc = local_config(cfg, 0.0)
    agg = FIPAAggregator(curvature=curvature, merge=cfg.merge, beta=cfg.beta, gamma=cfg.gamma, weighting="sum",
                         complement="fedavg" if cfg.complement and curvature == "lowrank" else "none",
                         robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm, consistency=lc.solver == "gn",
                         rtol=cfg.pinv_rtol)
    sched = AdaptiveSchedule(C=cfg.adapt_c, C_tau=cfg.adapt_ctau) if cfg.adaptive else None
    # some client takes its local GN step matrix-free (recorded in the strategy's settings)
    matfree = any(fipa_local_matfree(lc.solver, curvature, cfg.sketch, cfg.adaptive, o.n_residuals, theta0.numel())
                  for o in objectives)
    # a full-curvature request carries rank 1, unused (the client sends the whole H_m)
    ask = CurvatureAsk(curvature, max(rank, 1), cfg.sketch, cfg.cg_iters, cfg.cg_rtol)
    return FIPAStrategy(agg, lc, ask, sched, seed, safeguard=cfg.safeguard, complement=cfg.complement,
                        local_form="matfree" if matfree else None)


def fipa_ask(curvature: str, **options) -> CurvatureAsk:
    """What a FIPA ``update`` request asks beside the step, for ``curvature`` (``"full"``/``"lowrank"``) and FIPA's
    options (``rank``, ``sketch``, ``cg_iters``, ``cg_rtol``; :class:`FIPAConfig`'s defaults for those not given):
    the request of one client's message outside a run (tests, the paper's scripts)."""
    cfg = FIPAConfig.from_options(options)
    return CurvatureAsk(curvature, max(cfg.rank, 1), cfg.sketch, cfg.cg_iters, cfg.cg_rtol)


def settings(r) -> str:
    """The summary table's settings text of a fipa run: rank, merge, local solver."""
    o = r.extra.get("strategy", {}) if isinstance(r.extra, dict) else {}
    rank = ("full H_m" if o.get("curvature") == "full" or o.get("rank") == 0
            else f"rank {o.get('rank')}" + (" adaptive" if o.get("adaptive") else ""))
    return ", ".join([rank, f"merge {o.get('merge')}", *local_settings(r)])


#: ``fipa``'s registry entry, its :class:`~fedsciml.runtime.driver.Method` (:mod:`fedsciml.methods`
#: registers every built-in module's entries, in one fixed order)
METHOD_ENTRIES = (
    Method("fipa", FIPAConfig, strategy=fipa_strategy,
           description="Fisher-informed parameterwise aggregation (full, --rank r, --adaptive, --merge qr)",
           settings=settings),
)
