"""Levenberg–Marquardt as a state machine fed with Gauss–Newton statistics.

The same object drives the centralized solver (statistics of the pooled data)
and federated exact Gauss–Newton (statistics summed over clients), so their
iterates agree to round-off by construction: the server never needs the data,
only ``loss`` at each trial point and ``(JᵀJ, Jᵀr)`` at accepted points.

Damping follows Madsen, Nielsen & Tingleff (2004), *Methods for non-linear
least squares problems*, §3.2: ``μ₀ = τ·max diag(JᵀJ)``, gain ratio
``ρ = (F(θ) − F(θ+δ)) / (½δᵀ(μδ − g))``, on success
``μ ← μ·max(⅓, 1 − (2ρ−1)³)``, on failure ``μ ← μν, ν ← 2ν``.

The damped system ``(JᵀJ + μI) δ = −Jᵀr`` is solved in one of two equivalent
forms (``LMConfig.solve``):

* ``normal`` — Cholesky of the p×p matrix ``H + μI`` (``H = JᵀJ``): all that
  federated Gauss–Newton has, since it only receives summed ``H`` and ``g``;
* ``kernel`` — ``δ = −Jᵀ(JJᵀ + μI)⁻¹ r``, a Cholesky of the n×n matrix
  ``JJᵀ + μI``; needs ``J`` and ``r`` in the statistics (a centralized
  solver holding the data), and is much cheaper when n < p, as for the
  PINNs here (402 residuals against 2209 parameters for bratu).
  The identity ``(JᵀJ + μI)⁻¹Jᵀ = Jᵀ(JJᵀ + μI)⁻¹`` makes both the same step;
  they differ only by round-off.
* ``matfree`` — preconditioned conjugate gradients on ``(JᵀJ + μI) δ = −Jᵀr``
  with Jacobian-vector / vector-Jacobian products only
  (:mod:`fedsciml.core.matfree`; the statistics carry an operator ``op``,
  never ``J`` or ``H``), preconditioned by a randomized Nyström sketch of
  ``JᵀJ`` taken once per accepted point.  CG is stopped at a relative
  residual (``MatfreeConfig.rtol``), so the step is inexact: the gain ratio's
  predicted decrease is then the Gauss–Newton model's own ``−gᵀδ − ½‖Jδ‖²``
  (equal to ``½δᵀ(μδ − g)`` for an exact step).  The damping unit
  ``max diag(JᵀJ)`` is not available without J; the matrix-free solve uses
  ``λ_max(JᵀJ)`` instead (the Nyström sketch's top eigenvalue, or 20 power
  iterations without a preconditioner) — the two agree within a factor p, and
  τ sets the initial damping only.
  With ``MatfreeConfig.subspace`` = k > 0 no CG runs: the damped model is minimized exactly over
  ``V = [P⁻¹g, δ_{t−1}, …, δ_{t−k+1}]`` (the preconditioned gradient and the last accepted steps: K-FAC's step
  size and momentum, Martens & Grosse 2015 §7, for k = 2) from one batched product ``JᵀJ V`` per statistics
  (:func:`fedsciml.core.matfree.subspace_step`); a rejected trial re-solves the k×k system at the larger μ.
* ``chunked`` — the normal form on statistics accumulated over blocks of rows
  (:func:`fedsciml.core.stats.chunked_gn_stats`): ``JᵀJ`` without ever holding J whole.
* ``auto`` (default) — ``kernel`` when the statistics carry ``J`` and n < p,
  ``matfree`` when they carry only an operator, else ``normal``.  A caller
  holding the data asks :meth:`LevenbergMarquardt.statistics_form` which
  statistics to compute: :func:`auto_form`, i.e. the one device-aware choice
  :func:`fedsciml.core.forms.choose_form` — the dense forms while J and its
  Gram fit the device's memory budget (always while ``n·p ≤ 5·10⁷``: ``kernel``
  when n < p, else ``normal``), ``chunked`` when only ``JᵀJ`` fits, the
  cheaper of ``chunked`` and ``matfree`` by a flop model beyond — except in the K-FAC regime (on a CPU,
  p ≥ 5·10³, a dense step dear by the flop model, residuals in K-FAC's forward-Laplacian channel form:
  ``LMConfig.jets``), where it is ``matfree`` with K-FAC for
  PINNs preconditioning CG truncated at 10 iterations unless a preconditioner or cap is named
  (:func:`fedsciml.core.forms.choose_lm_solve`; the choice also resolves ``MatfreeConfig.precond='auto'`` and
  ``max_iters=None``: :attr:`LevenbergMarquardt.resolved_matfree`).  Why dense
  first: at p ≈ 2 300 the dense step is the cheaper one while it fits —
  measured on Poisson d = 5 (n = 17 700, p = 2 337, one thread, CPU time): J
  1.8 s, JᵀJ 4.2 s, Cholesky 0.3 s, against 0.4 s per matrix-free product, so
  a rank-50 Nyström sketch alone (20 s) costs three dense steps; on an H100
  the matrix-free step took 77× the dense one (n = 20 200, the same network;
  :mod:`fedsciml.core.forms` gives the runs).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Sequence, cast

import torch

from fedsciml.core import forms, linalg, matfree
from fedsciml.core.objective import GNStats

#: federated gn's automatic form sends no client matrix larger than this many floats (50 MB in float64)
MATFREE_FLOATS = forms.MESSAGE_FLOATS


def federated_form(rows: Sequence[int], p: int, device: torch.device | str | None = None,
                   dtype: torch.dtype = torch.float64) -> str:
    """``form="auto"`` of federated gn from the clients' residual rows and p (:mod:`fedsciml.methods.gn`):
    the smaller of the normal (``p(p+1)/2 + p``) and square-root (``min(n_m, p)(p+1)``, largest client)
    messages while it is at most :data:`MATFREE_FLOATS` and the Jacobians fit, else ``matfree``
    (:func:`fedsciml.core.forms.choose_form`, ``need='gn'``)."""
    rows = [int(n) for n in rows]
    return forms.choose_form(sum(rows), p, device=device, dtype=dtype, need="gn", rows=rows).form


def auto_form(n: int, p: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float64,
              rank: int = forms.NYSTROM_RANK) -> str:
    """The statistics a data holder computes for ``solve='auto'``: ``normal``, ``kernel``, ``chunked`` or
    ``matfree`` (:func:`fedsciml.core.forms.choose_form`, ``need='lm'``; see the module docstring)."""
    return forms.choose_form(n, p, device=device, dtype=dtype, rank=rank).form


@dataclass
class LMConfig:
    tau: float = 1e-3          # initial damping relative to max diag(JᵀJ)
    mu_min: float = 1e-20      # absolute floor (float64 round-off territory)
    mu_max: float = 1e20
    accept_ratio: float = 0.0  # accept a step when ρ > accept_ratio
    solve: str = "auto"        # "normal" (p×p), "kernel" (n×n, needs J), "chunked" (normal on streamed
    #                            statistics), "matfree" (CG, needs op) or "auto"
    matfree: matfree.MatfreeConfig = field(default_factory=matfree.MatfreeConfig)
    momentum: float = 0.0      # SPRING momentum β ∈ [0, 1) (0: plain Levenberg–Marquardt)
    jets: bool | Callable[[], bool] = False  # the residuals are in a K-FAC channel form (a callable: asked when
    #                            the other conditions of the K-FAC regime hold): solve="auto" with
    #                            matfree.precond "auto" may take K-FAC-preconditioned, truncated CG
    #                            (fedsciml.core.forms.choose_lm_solve)
    graph_floats: float | None = None  # floats of residual graph a row keeps in the matrix-free operator: a graph
    #                            past fedsciml.core.forms.MATFREE_GRAPH_BYTES is held in row blocks

    def validate(self) -> None:
        if not self.tau >= 0:
            raise ValueError(f"LM tau must be ≥ 0 (0: an undamped first step), got {self.tau}")
        if self.solve not in SOLVES:
            raise ValueError(f"LM solve must be one of {', '.join(SOLVES)}, got {self.solve!r}")
        if not 0 < self.mu_min < self.mu_max:
            raise ValueError(f"LM damping bounds need 0 < mu_min < mu_max, got {self.mu_min}, {self.mu_max}")
        if not 0.0 <= self.momentum < 1.0:
            raise ValueError(f"SPRING momentum β must be in [0, 1), got {self.momentum}")
        self.matfree.validate()
        if self.matfree.subspace > 0 and self.momentum > 0:
            raise ValueError(f"the subspace step (subspace={self.matfree.subspace}) carries its own momentum (the last "
                             f"accepted steps are directions of it); SPRING momentum β = {self.momentum} must be 0 "
                             f"with it")
        if self.matfree.subspace > 0 and self.solve not in ("auto", "matfree"):
            raise ValueError(f"the subspace step (subspace={self.matfree.subspace}) is a matrix-free solve; LM solve "
                             f"is {self.solve!r} (use matfree or auto)")


SOLVES = ("auto", "normal", "kernel", "chunked", "matfree")


def damping_ceiling(mu_max: float) -> str:
    """The stop reason of a run whose damping reached ``mu_max`` (``damping ceiling (μ = 1e+20)``): no step lowers
    the loss at these points any more — LM raises μ after every rejected step, so it gets there at a minimum of
    the training loss to round-off (or where no direction descends), and a larger budget changes nothing."""
    return f"damping ceiling (μ = {mu_max:.0e})"


def ceiling_warning(who: str, step: int, mean_loss: float, mu_max: float) -> str:
    """The one warning line of a run stopped by :func:`damping_ceiling` (centralized lm, federated gn)."""
    return (f"{who} stopped at step {step}: its damping reached the ceiling μ = {mu_max:.0e} — no step lowers the "
            f"training loss ({mean_loss:.3e}) at these points, so a larger budget changes nothing; fresh points "
            f"every K steps (resample) give it more to fit")


def damping_after_success(mu: float, rho: float, mu_min: float) -> tuple[float, float]:
    """The damping rule after an accepted step with gain ratio ``ρ``:
    ``(μ·max(⅓, 1 − (2ρ−1)³) floored at mu_min, ν = 2)`` (Madsen–Nielsen–Tingleff §3.2)."""
    return max(mu_min, mu * max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)), 2.0


def damping_after_failure(mu: float, nu: float, mu_max: float, floor: float = 0.0) -> tuple[float, float]:
    """The damping rule after a rejected step: ``(min(mu_max, max(μ·ν, floor)), 2ν)``."""
    return min(mu_max, max(mu * nu, floor)), nu * 2.0


class LevenbergMarquardt:
    """Drive with :meth:`start` once, then alternate :meth:`propose` / :meth:`observe`.

    SPRING momentum (``LMConfig.momentum`` = β > 0; Goldshlager, Abrahamsen &
    Lin 2024, for PINNs Guzmán-Cordero, Dangel, Goldshlager & Zeinhofer,
    NeurIPS 2025): the step is ``δ = −φ_k`` with

        φ_k = argmin_φ ‖Jφ − r‖² + μ‖φ − βφ_{k−1}‖² = (JᵀJ + μI)⁻¹(Jᵀr + μβφ_{k−1})
            = βφ_{k−1} + Jᵀ(JJᵀ + μI)⁻¹(r − βJφ_{k−1})        (kernel form),

    LM's damping μ in the role of SPRING's regularization λ, and the gain
    ratio in the role of its learning rate: the predicted decrease is the
    Gauss–Newton model's ``−gᵀδ − ½‖Jδ‖²`` (the momentum step is not the
    model's minimizer).  ``φ_{k−1}`` is the last *accepted* step; a rejected
    trial drops it (``φ := 0``), so the next trial is the plain LM step —
    without that, as μ grows the trial tends to ``−βφ_{k−1}``, not to 0, and
    the gain-ratio safeguard could reject forever.  β = 0 is the plain LM
    step, the same operations as without the option (bitwise).
    """

    def __init__(self, config: LMConfig | None = None):
        self.cfg = config or LMConfig()
        self.cfg.validate()
        self.theta: torch.Tensor | None = None
        self._stats: GNStats | None = None
        self.mu: float = 0.0
        self.nu = 2.0
        self.accepted_steps = 0
        self.rejected_steps = 0
        self._trial: torch.Tensor | None = None
        self._delta: torch.Tensor | None = None
        self._pred = 0.0
        self._kernel: tuple[GNStats, torch.Tensor] | None = None  # (stats, JJᵀ) for the kernel-form solve
        # (stats, preconditioner (Nyström sketch / K-FAC factors) or None, λ_max) for the matrix-free solve
        self._nystrom: tuple[GNStats, matfree.Preconditioning | None, float] | None = None
        self.momentum_direction: torch.Tensor | None = None  # φ_{k−1} of SPRING (None: none yet / dropped)
        #: the subspace step's last accepted steps, newest first (at most ``matfree.subspace − 1``)
        self.past_steps: list[torch.Tensor] = []
        # (stats, V, JᵀJ V) of the subspace step: built once per statistics, so a rejected trial's next one (a larger
        # μ) is solved in the same span with no product more
        self._subspace: tuple[GNStats, torch.Tensor, torch.Tensor] | None = None
        # (stats, V, JᵀJ V) of the first CG solve at these statistics (``matfree.krylov_reuse``): a rejected trial's
        # next solve minimizes the damped model over span(V) with no product
        self._krylov: tuple[GNStats, torch.Tensor, torch.Tensor] | None = None
        #: the μ the current statistics' Krylov basis was built at (None: none built at them): a checkpoint carries
        #: it, and a resumed run rebuilds the basis at that μ (the same operations: the same basis)
        self.krylov_mu: float | None = None
        #: the subspace step's preconditioner damping γ (``subspace_damping="adapt"``; None: LM's μ on first use)
        self.precond_damping: float | None = None
        self.cg_iters = 0     # CG iterations of all matrix-free solves so far
        self.last_cg_iters = 0
        self._choices: dict[tuple[int, int], forms.FormChoice] = {}  # (n, p) → the form chosen for that size
        self._device: tuple[torch.device | str, torch.dtype] | None = None  # where the first choice was made
        self._matfree: matfree.MatfreeConfig | None = None  # the matrix-free settings the first choice resolved
        #: a time budget's test, asked before every CG product of a matrix-free solve: when it says so, :meth:`propose`
        #: raises :class:`fedsciml.core.matfree.OutOfTime` and the state is as before the call (no half step)
        self.stop: Callable[[], bool] | None = None

    @property
    def stats(self) -> GNStats:
        """The statistics at the current point (set by :meth:`start`)."""
        if self._stats is None:
            raise RuntimeError("LevenbergMarquardt: start() has not been called")
        return self._stats

    @stats.setter
    def stats(self, value: GNStats) -> None:
        self._stats = value
        self._krylov, self.krylov_mu = None, None  # a Krylov basis belongs to the statistics it was built on

    @property
    def loss(self) -> float:
        return float(self.stats.loss)

    def statistics_form(self, n: int, p: int, device: torch.device | str | None = None,
                        dtype: torch.dtype = torch.float64) -> str:
        """Which statistics a caller holding the data should compute: ``normal`` (``JᵀJ``, ``Jᵀr``),
        ``kernel`` (``J``, ``r``), ``chunked`` (``JᵀJ``, ``Jᵀr`` accumulated over row blocks) or ``matfree``
        (an operator, :class:`fedsciml.core.matfree.GNOperator`); ``auto``: :meth:`form_choice`."""
        return self.form_choice(n, p, device, dtype).form if self.cfg.solve == "auto" else self.cfg.solve

    def form_choice(self, n: int, p: int, device: torch.device | str | None = None,
                    dtype: torch.dtype = torch.float64) -> forms.FormChoice:
        """The device-aware choice for ``n`` rows and ``p`` parameters (:func:`fedsciml.core.forms.choose_form`),
        restricted to the configured solve unless it is ``auto``.  Made once per size and kept: later calls
        (a resample draws points of the same size) get the same choice whatever the free memory then; a new size
        (growing points) is decided on the device of the first call that named one."""
        key = (int(n), int(p))
        if device is None:  # a later size (growing points) is decided on the device of the first choice
            device, dtype = self._device if self._device is not None else (None, dtype)
        elif self._device is None:
            self._device = (device, dtype)
        if key not in self._choices:
            mc = self.cfg.matfree  # the matrix-free step's products: CG, plus a Nyström sketch's rank
            choice = forms.choose_lm_solve(n, p, solve=self.cfg.solve, precond=mc.precond, cg_iters=mc.max_iters,
                                           jets=self.cfg.jets, device=device, dtype=dtype, rank=mc.rank,
                                           graph_floats=self.cfg.graph_floats)
            self._choices[key] = choice
        choice = self._choices[key]
        assert choice.precond is not None  # choose_lm_solve resolves both
        if choice.form != "matfree" and self.cfg.matfree.subspace > 0:
            raise ValueError(f"the subspace step (subspace={self.cfg.matfree.subspace}) is a matrix-free solve, but "
                             f"this problem's LM solve resolved to {choice.form!r} ({choice.reason}); name the "
                             f"matrix-free solve (lm_solve matfree) or leave subspace at 0")
        # the matrix-free solve's settings are those of the size asked last (the points the next step runs on)
        self._matfree = replace(self.cfg.matfree, precond=choice.precond, max_iters=choice.cg_iters,
                                cg_start=self.cfg.matfree.cg_start if self.cfg.matfree.cg_start is not None
                                else choice.cg_start)
        return choice

    @property
    def resolved_matfree(self) -> matfree.MatfreeConfig:
        """The matrix-free solve's settings, resolved: the preconditioner and CG cap of the last
        :meth:`form_choice` (:func:`fedsciml.core.forms.choose_lm_solve`; it depends on the size through the K-FAC
        regime's cost test, and a caller asks it for the points the next step runs on), or — where no choice was made (federated gn names its
        form) — the configured ones with ``auto`` → Nyström and no cap → :data:`fedsciml.core.forms.FULL_CG_ITERS`."""
        if self._matfree is None:
            mc = self.cfg.matfree
            pre, cap = forms.matfree_settings(False, mc.precond, mc.max_iters)
            return replace(mc, precond=pre, max_iters=cap)
        return self._matfree

    def _op(self) -> matfree.GNProducts:
        op = self.stats.op
        if op is None:
            raise ValueError("LM solve='matfree' needs statistics that carry a Gauss–Newton operator (op)")
        return cast(matfree.GNProducts, op)

    def _use_matfree(self) -> bool:
        st = self.stats
        if self.cfg.solve == "matfree" or (self.cfg.solve == "auto" and st.op is not None
                                           and st.H is None and st.J is None):
            self._op()
            return True
        return False

    def _use_kernel(self) -> bool:
        st = self.stats
        has_j = st.J is not None and st.r is not None
        if self.cfg.solve in ("normal", "chunked") or (self.cfg.solve == "auto" and not has_j):
            if st.H is None:
                raise ValueError("LM solve='normal' needs H = JᵀJ in the statistics")
            return False
        if st.J is None or st.r is None:
            raise ValueError("LM solve='kernel' needs statistics that carry J and r "
                             "(gn_stats_from(J, r, keep_jacobian=True)); federated sums only carry H and g")
        return self.cfg.solve == "kernel" or st.H is None or st.J.shape[0] < st.J.shape[1]

    def start(self, theta: torch.Tensor, stats: GNStats) -> None:
        """Take θ and its statistics; μ from their curvature scale.  A matrix-free operator's scale is a sketch
        that asks :attr:`stop` (set it first to bound it): :class:`~fedsciml.core.matfree.OutOfTime` then leaves
        θ and the statistics taken (the loss is known) and μ unset (0)."""
        self.theta = theta.detach().clone()
        self.stats = stats
        self.mu = self.cfg.tau * self._curvature_scale()
        self.nu = 2.0
        self.momentum_direction = None

    def _curvature_scale(self) -> float:
        """``max diag(JᵀJ)`` of the current statistics (the unit of the damping); ``λ_max(JᵀJ)`` matrix-free."""
        st = self.stats
        if st.H is None and st.J is None and self._use_matfree():
            return max(self._sketch()[1], 1e-300)
        if st.H is not None:
            diag = st.H.diagonal()
        elif st.J is not None:
            diag = (st.J * st.J).sum(0)
        else:
            raise ValueError("LM statistics carry neither H, J nor an operator")
        return float(diag.max().clamp_min(1e-300))

    def _sketch(self) -> tuple[matfree.Preconditioning | None, float]:
        """``(preconditioner or None, λ_max)`` of the current operator, computed once per statistics: the Nyström
        sketch and its ``λ̂_1``; the K-FAC factors the statistics carry and the bound
        :meth:`~fedsciml.core.kfac_pinn.KroneckerFactors.lambda_max` of their approximation; or none and a power
        iteration's ``λ_max``."""
        st = self.stats
        if self._nystrom is None or self._nystrom[0] is not st:
            mc = self.resolved_matfree
            gen = torch.Generator(device=st.g.device).manual_seed(mc.seed + self.accepted_steps)
            p = st.g.numel()
            op = self._op()
            if mc.precond == "nystrom":
                # the budget is asked between pieces of a local operator's ℓ products (each a pass over the
                # rows); a federated operator's matmat is one exchange, not split
                local = isinstance(op, (matfree.GNOperator, matfree.SplitGNOperator, matfree.BlockGNOperator))
                ny = matfree.Nystrom.sketch(op.matmat, p, min(mc.rank, p), dtype=st.g.dtype,
                                            device=st.g.device, generator=gen, stop=self.stop if local else None)
                self._nystrom = (st, ny, float(ny.lam[0]))
            elif mc.precond == "kfac":
                fac = st.factors
                if fac is None:
                    raise ValueError("LM precond='kfac' needs statistics that carry K-FAC factors (GNStats.factors: "
                                     "fedsciml.core.kfac_pinn)")
                self._nystrom = (st, cast(matfree.Preconditioning, fac), float(fac.lambda_max()))  # type: ignore[attr-defined]
            else:
                self._nystrom = (st, None, matfree.power_lambda_max(op.matvec, p, dtype=st.g.dtype,
                                                                    device=st.g.device, generator=gen,
                                                                    stop=self.stop))
        return self._nystrom[1], self._nystrom[2]

    def _momentum_term(self) -> torch.Tensor | None:
        """``βφ_{k−1}`` when SPRING momentum is on and a previous accepted step exists, else ``None``."""
        if self.cfg.momentum > 0 and self.momentum_direction is not None:
            return self.cfg.momentum * self.momentum_direction
        return None

    def _solve_matfree(self, mu: float) -> tuple[torch.Tensor, float]:
        st = self.stats
        ny, _ = self._sketch()
        mu = max(mu, self.cfg.mu_min)
        mc = self.resolved_matfree
        assert mc.max_iters is not None  # resolved by the property
        bphi = self._momentum_term()
        rhs = None if bphi is None else -(st.g + mu * bphi)
        if mc.subspace > 0:  # no CG: the model minimized over [P⁻¹g, the last accepted steps]
            return self._solve_subspace(mu, ny, mc.subspace)
        if mc.max_iters == 0:  # no CG: the damped K-FAC step δ = −P⁻¹(g + μβφ), judged by the K-FAC model
            if ny is None or mc.precond != "kfac":
                raise ValueError("the matrix-free solve without CG (max_iters=0) takes the damped K-FAC step: it needs "
                                 "precond='kfac'")
            b = -st.g if rhs is None else rhs
            delta = ny.inverse(mu)(b)
            # the model with P − μI ⪰ 0 (K-FAC's approximation of JᵀJ): −gᵀδ − ½δᵀ(P − μI)δ, Pδ = b
            pred = -float(st.g @ delta) - 0.5 * float(delta @ b) + 0.5 * mu * float(delta @ delta)
            self.last_cg_iters = 0
            return delta, pred
        reuse = mc.krylov_reuse if rhs is None else 0  # SPRING's right-hand side: a fresh solve every time
        if reuse and self.krylov_mu is not None:  # a trial at these statistics was rejected: no CG, no product
            if self._krylov is None or self._krylov[0] is not st:  # resumed: the basis rebuilt at its μ
                self._cg_solve(st, ny, self.krylov_mu, None, reuse)
            assert self._krylov is not None
            _, V, HV = self._krylov
            sub = matfree.subspace_step(V, HV, st.g, mu)
            self.last_cg_iters = 0
            return sub.delta, sub.model_decrease
        res = self._cg_solve(st, ny, mu, rhs, reuse)
        self.last_cg_iters = res.cg_iters
        self.cg_iters += res.cg_iters
        return res.delta, res.model_decrease

    def _cg_solve(self, st: GNStats, ny: matfree.Preconditioning | None, mu: float, rhs: torch.Tensor | None,
                  reuse: int) -> matfree.StepResult:
        """The damped step by (preconditioned, truncated) CG at μ; with ``reuse`` = m > 0 its Krylov basis is kept
        for the next trial at these statistics (:attr:`krylov_mu`)."""
        mc = self.resolved_matfree
        assert mc.max_iters is not None
        res = matfree.damped_gn_step(self._op().matvec, st.g, mu, precond=ny.inverse(mu) if ny is not None else None,
                                     rtol=mc.rtol, max_iters=matfree.cg_cap(mc, self.accepted_steps), rhs=rhs,
                                     stop=self.stop, krylov=reuse)
        if res.basis is not None:
            self._krylov, self.krylov_mu = (st, *res.basis), mu
        return res

    def _solve_subspace(self, mu: float, pre: matfree.Preconditioning | None, k: int) -> tuple[torch.Tensor, float]:
        """The damped step over ``V = [P_μ⁻¹g, δ_{t−1}, …, δ_{t−k+1}]`` (the accepted steps there are;
        :func:`fedsciml.core.matfree.subspace_step`).  ``V`` and its product ``JᵀJ V`` (one ``matmat``: one
        exchange when federated) are taken once per statistics; the next trial after a rejection re-solves the k×k
        system at the larger μ in the same span."""
        st = self.stats
        if self._subspace is None or self._subspace[0] is not st:
            adapt = pre is not None and self.cfg.matfree.subspace_damping == "adapt"
            if pre is None:
                first = [-st.g]
            elif not adapt:
                first = [pre.inverse(mu)(-st.g)]
            else:  # γ/ω, γ, ωγ (Martens & Grosse 2015 §6.6's candidates, all three kept in the span)
                gam = mu if self.precond_damping is None else self.precond_damping
                w = matfree.SUBSPACE_GAMMA_STEP
                gammas = [min(self.cfg.mu_max, max(self.cfg.mu_min, x)) for x in (gam / w, gam, gam * w)]
                first = [pre.inverse(x)(-st.g) for x in gammas]
            V = torch.stack([*first, *self.past_steps[:k - 1]], 1)
            if self.stop is not None and self.stop():
                raise matfree.OutOfTime("the time budget ran out before the subspace step's products")
            HV = self._op().matmat(V)
            self._subspace = (st, V, HV)
            if adapt:  # γ ← the one whose column alone decreases the damped model most: (vᵀg)² / (2vᵀ(JᵀJ + μI)v)
                Vp, HVp = V[:, :3], HV[:, :3]
                den = (Vp * HVp).sum(0) + mu * (Vp * Vp).sum(0)
                dec = torch.where(den > 0, (Vp.T @ st.g) ** 2 / (2 * den.clamp_min(1e-300)), torch.zeros_like(den))
                self.precond_damping = gammas[int(torch.argmax(dec))]
        _, V, HV = self._subspace
        res = matfree.subspace_step(V, HV, st.g, mu)
        self.last_cg_iters = 0
        return res.delta, res.model_decrease

    def _kernel_gram(self, st: GNStats, J: torch.Tensor) -> torch.Tensor:
        if self._kernel is None or self._kernel[0] is not st:
            K = J @ J.T
            self._kernel = (st, 0.5 * (K + K.T))
        return self._kernel[1]

    def _solve(self, mu: float) -> tuple[torch.Tensor, float | None]:
        """The dense step and, with momentum, its Gauss–Newton model decrease (``None``: LM's own formula)."""
        st = self.stats
        bphi = self._momentum_term()
        if not self._use_kernel():
            H = st.H
            assert H is not None  # _use_kernel checked it
            if bphi is None:
                return -linalg.damped_solve(H, st.g, mu), None
            delta = -linalg.damped_solve(H, st.g + mu * bphi, mu)
            return delta, -float(st.g @ delta) - 0.5 * float(delta @ (H @ delta))
        J, r = st.J, st.r
        assert J is not None and r is not None  # _use_kernel checked them
        K = self._kernel_gram(st, J)
        if bphi is None:
            return -(J.T @ linalg.damped_solve(K, r, mu)), None
        delta = -(bphi + J.T @ linalg.damped_solve(K, r - J @ bphi, mu))
        Jd = J @ delta
        return delta, -float(st.g @ delta) - 0.5 * float(Jd @ Jd)

    def propose(self) -> torch.Tensor:
        """Next trial point ``θ + δ``, ``(H + μI) δ = −g`` (with momentum ``−(g + μβφ)``); raises the damping
        until the system factorizes."""
        g = self.stats.g
        if self.theta is None:
            raise RuntimeError("LevenbergMarquardt: start() has not been called")
        pred: float | None
        if self._use_matfree():
            delta, pred = self._solve_matfree(self.mu)
        else:
            while True:
                try:
                    delta, pred = self._solve(self.mu)
                    break
                except linalg.NotPositiveDefinite:
                    self.mu = min(self.cfg.mu_max, max(self.mu * 10.0, 1e-12 * self._curvature_scale()))
                    if self.mu >= self.cfg.mu_max:
                        raise
        if not bool(torch.isfinite(delta).all()):
            raise FloatingPointError("non-finite LM step; the problem is badly scaled")
        self._pred = float(0.5 * (delta @ (self.mu * delta - g))) if pred is None else pred
        self._delta = delta
        self._trial = self.theta + delta
        return self._trial

    def observe(self, trial_loss: float, stats_fn: Callable[[], GNStats]) -> bool:
        """Accept or reject the last trial from its loss; ``stats_fn()`` gives its statistics if accepted."""
        if self._trial is None or self._delta is None:
            raise RuntimeError("observe() called before propose()")
        trial_loss = float(trial_loss)
        gain = self.loss - trial_loss
        rho = gain / self._pred if self._pred > 0 else -1.0
        accepted = bool(rho > self.cfg.accept_ratio and trial_loss == trial_loss)
        if accepted:
            self.theta = self._trial
            self.stats = stats_fn()
            self.mu, self.nu = damping_after_success(self.mu, rho, self.cfg.mu_min)
            self.accepted_steps += 1
            if self.cfg.momentum > 0:
                self.momentum_direction = -self._delta
            if self.cfg.matfree.subspace > 1:
                self.past_steps = [self._delta, *self.past_steps][: self.cfg.matfree.subspace - 1]
        else:
            self.mu, self.nu = damping_after_failure(self.mu, self.nu, self.cfg.mu_max,
                                                     1e-12 * self._curvature_scale())
            self.rejected_steps += 1
            self.momentum_direction = None
        self._trial = None
        self._delta = None
        return accepted


def deferred_stats(loss: float, like: GNStats) -> GNStats:
    """Statistics at an accepted point whose curvature no step will use: the collocation points change before
    the next step (``resample``), and the statistics are taken again on the new points.  Only the loss is
    real; ``g`` is NaN, so that a step taken from them fails loudly (:meth:`LevenbergMarquardt.propose`
    refuses a non-finite step) instead of running on stale statistics."""
    g = torch.full_like(like.g, float("nan"))
    return GNStats(H=None, g=g, loss=torch.as_tensor(float(loss), dtype=g.dtype, device=g.device), n=like.n)


def default_tau(objectives: Iterable[object]) -> float:
    """Initial damping τ for these objectives: 0 when every residual is linear
    (``LinearLeastSquares``: the Gauss–Newton model is exact, so the undamped
    first step is the solution — ridge converges in one round), else 1e-3."""
    from fedsciml.core.objective import LinearLeastSquares

    return 0.0 if all(isinstance(o, LinearLeastSquares) for o in objectives) else 1e-3
