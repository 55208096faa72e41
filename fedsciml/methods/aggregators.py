"""Aggregators: one round's validated client messages → the next global parameters.

The interface is deliberately narrow (in the spirit of Flower's ``Strategy``):
an aggregator declares the :class:`~fedsciml.core.schema.Schema` its
clients must send, and ``aggregate(theta, messages)`` returns the new global
parameters.  Aggregators never see client data, only messages.  Messages are
validated here, before anything is summed: a malformed one raises
:class:`MessageRejected` from :meth:`Aggregator.validate` and the caller
decides whether to drop that client for the round.

Message fields (all plain tensors):

* every aggregator: ``n`` — shape [1], the client's sample count (> 0)
* FedAvg / FedProx: ``delta`` [p] — local update ``θ_m − θ``
* FIPA full rank:   ``delta`` [p], ``H`` [p(p+1)/2] — upper triangle of the client curvature
* FIPA low rank:    ``delta`` [p], ``U`` [p, r], ``lam`` [r] — top-r eigenpairs (r may differ per client)

Beyond the schema (:mod:`fedsciml.core.schema`: real floating dtype,
shape, finite, count in (0, 2^53], losses and eigenvalues ≥ 0, packed
curvature PSD), every aggregator fixes each client's sample count at
*enrollment*: the count of its first valid message is recorded
(:attr:`Aggregator.enrolled`) and a later message claiming another count is
rejected.  FedAvg/FedProx and FIPA take a :class:`~fedsciml.runtime.robust.RobustRule`
(``robust="mean"|"median"|"trimmed"``, ``trim``, ``clip_norm``); see
:mod:`fedsciml.runtime.robust` for what each option guards against and
what it does not.
"""
from __future__ import annotations

import math
from typing import Mapping

import torch

from fedsciml.core.curvature import COMPLEMENTS, Dense, LowRank, fipa_merge_dense, fipa_merge_lowrank
from fedsciml.runtime import robust as _robust
from fedsciml.core.schema import Field, MessageRejected, Schema, floats_in

# Relative round-off allowed in the loss-consistency checks, in float64 (scaled by eps(dtype)/eps(float64) for
# other dtypes): gn's statistics (products and orthogonal transformations) and FIPA's exact local GN steps
# (eigen-decompositions with a rank cutoff); see _consistent and FIPAAggregator.
CONSISTENCY_RTOL = 1e-6
FIPA_CONSISTENCY_RTOL = 1e-3


class Aggregator:
    """Base: schema validation, per-message checks (:meth:`check`) and sample-count enrollment."""

    name = "aggregator"

    def schema(self) -> Schema:  # pragma: no cover - interface
        raise NotImplementedError

    def context(self, p: int) -> dict:
        """Sizes the schema's named dimensions are bound to."""
        return {"p": p}

    def check(self, cid, msg: dict, p: int) -> None:
        """Checks beyond the schema (raise :class:`MessageRejected`); none by default."""

    @property
    def enrolled(self) -> dict:
        """``{client id: sample count}`` from each client's first valid message (fixed from then on)."""
        return self.__dict__.setdefault("_enrolled", {})

    @enrolled.setter
    def enrolled(self, value: dict):
        self.__dict__["_enrolled"] = value

    def validate(self, messages: Mapping, p: int, dtype=None) -> tuple[dict, dict]:
        """Split messages into ``(accepted, rejected)``; rejected maps client id → reason."""
        ok, bad = {}, {}
        schema = self.schema()
        ctx = self.context(p)
        enrolled = self.enrolled
        for cid, msg in messages.items():
            try:
                schema.validate(msg, cid, dtype=dtype, **ctx)
                self.check(cid, msg, p)
                if "n" in msg:
                    n = float(msg["n"].reshape(-1)[0])
                    if cid in enrolled and n != enrolled[cid]:
                        raise MessageRejected(cid, f"field 'n' claims {n:.17g} samples, but the client enrolled with "
                                                   f"{enrolled[cid]:.17g} (its first valid message); a client's sample "
                                                   "count is fixed")
                ok[cid] = msg
            except MessageRejected as e:
                bad[cid] = e.reason
        for cid, msg in ok.items():
            if "n" in msg:
                enrolled.setdefault(cid, float(msg["n"].reshape(-1)[0]))
        return ok, bad

    def aggregate(self, theta: torch.Tensor, messages: Mapping,
                  server_round: int | None = None) -> torch.Tensor:  # pragma: no cover - interface
        """The next global parameters from round ``server_round``'s accepted ``messages`` (``{client id: message}``)
        at the broadcast ``theta``.  ``server_round`` counts the run's rounds from 1, as Flower's ``server_round``
        (a schedule keyed on the round needs nothing else); None outside a run."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        """What later rounds depend on (plain data, for checkpoints): the enrolled sample counts; an aggregator
        with more state across rounds (a server optimizer) adds its own."""
        return {"enrolled": dict(self.enrolled)}

    def load_state_dict(self, d: dict) -> None:
        self.enrolled = {k: float(v) for k, v in dict(d.get("enrolled", {})).items()}

    @staticmethod
    def sample_weights(messages: Mapping) -> dict:
        """``N_m / N`` over the clients present (never overflows: see :func:`fedsciml.runtime.robust.sample_weights`)."""
        n = {cid: float(m["n"].reshape(-1)[0]) for cid, m in messages.items()}
        tot = sum(n.values())
        if math.isfinite(tot) and tot > 0:  # the usual case: the plain quotient (unchanged numbers)
            return {cid: v / tot for cid, v in n.items()}
        return _robust.sample_weights(n)

    @staticmethod
    def floats_up(messages: Mapping) -> int:
        return sum(floats_in(m) for m in messages.values())


class FedAvgAggregator(Aggregator):
    """FedAvg (FIPA paper Eq. 3): ``θ + η_s Σ (N_m/N) Δθ_m``.  FedProx uses the same server rule.

    Robust options (:mod:`fedsciml.runtime.robust`, as Flower's FedMedian /
    FedTrimmedAvg / DP-FedAvg fixed clipping):

    * ``robust="mean"`` (default, the plain method) | ``"median"`` (coordinate-wise
      median, unweighted) | ``"trimmed"`` (coordinate-wise mean after dropping
      ``⌊trim·K⌋`` values per side, unweighted);
    * ``trim`` ∈ [0, 0.5), default 0.2 (used by ``"trimmed"``);
    * ``clip_norm``: ``None`` (default, off) or C > 0 — each Δθ_m is scaled to
      norm ≤ C before combining.

    ``outlier_ratio`` (default 1e3; ``inf`` or ``None`` turns it off): with ≥ 3 accepted
    updates in a round, an update whose norm exceeds ``outlier_ratio`` times the
    round's median update norm is rejected by name.  It is on by default
    because it leaves honest runs untouched (honest local updates of one round
    differ in norm by far less than 10³: no figure of the README changes) while
    a client scaling its update by 10⁶ no longer wrecks the plain mean.  It
    guards against one or a few grossly inflated updates only: a liar that
    stays within the ratio, or a majority of liars, passes (use ``robust`` /
    ``clip_norm`` for those); with 2 clients there is no median to compare to.
    ``solve``'s fedavg/fedprox use the default; the image benchmarks and the
    ridge baselines construct the aggregator with ``outlier_ratio=None`` (their
    published figures use the plain rule).

    The median tolerates < 50 % arbitrary updates but is biased on non-iid
    clients; the trimmed mean tolerates ⌊trim·K⌋ per side; the norm bound limits
    one client's influence to ``w_m·C`` but not a coordinated minority (see
    "What each option guards against and what it does not" in
    :mod:`fedsciml.runtime.robust`).
    """

    name = "fedavg"

    def __init__(self, server_lr: float = 1.0, robust: str = "mean", trim: float = 0.2,
                 clip_norm: float | None = None, outlier_ratio: float | None = 1e3):
        if not server_lr > 0:
            raise ValueError(f"server learning rate must be > 0, got {server_lr}")
        if outlier_ratio is not None and not outlier_ratio > 1:
            raise ValueError(f"outlier_ratio must be a number > 1 (inf or None: no screen), got {outlier_ratio}")
        self.server_lr = server_lr
        self.rule = _robust.RobustRule(robust, float(trim), None if clip_norm is None else float(clip_norm))
        self.outlier_ratio = None if outlier_ratio is None or math.isinf(outlier_ratio) else float(outlier_ratio)

    def validate(self, messages, p: int, dtype=None):
        ok, bad = super().validate(messages, p, dtype)
        if self.outlier_ratio is None or len(ok) < 3:
            return ok, bad
        order = sorted(ok)
        norms = torch.stack([torch.linalg.vector_norm(ok[c]["delta"]) for c in order])
        med = float(norms.median())  # the lower median: a single inflated update cannot raise it
        if not med > 0:
            return ok, bad
        limit = self.outlier_ratio * med
        for c, nrm in zip(order, norms.tolist()):
            if nrm > limit:
                del ok[c]
                bad[c] = (f"update norm {nrm:.3g} is {nrm / med:.3g}× the round's median update norm {med:.3g} "
                          f"(outlier_ratio {self.outlier_ratio:g}); screened as an outlier")
        return ok, bad

    def schema(self):
        return Schema({"delta": Field(("p",)), "n": Field((1,), positive=True)})

    def aggregate(self, theta, messages, server_round: int | None = None):
        if not messages:
            raise ValueError("no client messages to aggregate")
        w = self.sample_weights(messages)
        if self.rule.plain:
            step = sum(w[c] * m["delta"] for c, m in messages.items())
        else:
            step = self.rule.combine(torch.stack([m["delta"] for m in messages.values()]), [w[c] for c in messages])
        return theta + self.server_lr * step


class FIPAAggregator(Aggregator):
    """FIPA: ``θ + η Σ_m B_m Δθ_m`` with ``B_m = (Σ_j w_j Ĥ_j)^† w_m Ĥ_m`` (paper Eq. 6).

    ``curvature='full'``: clients send the packed upper triangle of ``H_m``;
    ``'lowrank'``: top-r eigenpairs ``(U_m, λ_m)``.  ``merge='pinv'`` forms the
    p×p pseudo-inverse (small p); ``merge='qr'`` is the thin-QR merge of Eq. (13)
    with regularization ``beta`` and step ``gamma`` (no p×p matrix; low rank only).
    ``weighting='sum'`` for sum-form curvatures ``J_mᵀJ_m`` (PDE/fitting; the
    ``N_m/N`` factors cancel), ``'samples'`` for mean-form curvatures (images).
    ``complement`` (thin-QR merge only): the orthogonal-complement correction,
    ``'none'``, ``'fedavg'`` or ``'tail'`` (see :func:`fedsciml.core.curvature.fipa_merge_lowrank`).

    Robust options (:mod:`fedsciml.runtime.robust`): ``clip_norm`` (``None``
    or C > 0) bounds every ``Δθ_m`` to norm C before the merge; ``robust=
    "median"|"trimmed"`` (``trim`` ∈ [0, 0.5), default 0.2) replaces the
    right-hand side ``b = Σ w_m Ĥ_m Δθ_m`` by ``(Σ w_m) · rule_m(Ĥ_m Δθ_m)``,
    the coordinate-wise median / trimmed mean of the clients' curvature-weighted
    updates (≈ −g_m), unweighted; the merged curvature ``Σ w_m Ĥ_m`` is kept.
    With either, exact local GN steps no longer give the exact GN step.

    ``consistency=True`` (set by :func:`~fedsciml.methods.fipa.fipa_strategy` when the local solver is exact
    Gauss–Newton, ``Δθ_m = −(H_m + μI)^† g_m``): a message that reports its
    loss must satisfy ``Δθ_mᵀ Ĥ_m Δθ_m ≤ 2·loss`` (with a truncated Ĥ_m the
    left side only shrinks), since ``Δᵀ H Δ ≤ gᵀH⁺g = ‖P_J r‖² ≤ ‖r‖²``.
    The honest value sits at the bound when ``r_m ∈ range(J_m)`` (fewer rows
    than parameters, μ = 0), and the client's step goes through an
    eigen-decomposition whose smallest kept eigenvalues (just above the rank
    cutoff ``max(n, p)·eps·λ_max``) carry a relative error up to
    ``1/max(n, p)``, so the tolerance is :data:`FIPA_CONSISTENCY_RTOL` = 1e-3
    (in float64; honest clients of the tests' problems reached 1.2e-5).
    Messages without a loss (no safeguard) cannot be checked, nor can Adam
    updates (no bound relates them to the loss), nor adaptive FIPA's
    ``gnorm`` (its bound needs λ_max of the full curvature).
    """

    name = "fipa"

    def __init__(self, curvature: str = "lowrank", merge: str = "pinv", beta: float = 0.0, gamma: float = 1.0,
                 eta: float = 1.0, weighting: str = "sum", rtol: float | None = None, complement: str = "none",
                 robust: str = "mean", trim: float = 0.2, clip_norm: float | None = None, consistency: bool = False):
        if curvature not in ("full", "lowrank"):
            raise ValueError(f"FIPA curvature must be 'full' or 'lowrank', got {curvature!r}")
        if merge not in ("pinv", "qr"):
            raise ValueError(f"FIPA merge must be 'pinv' or 'qr', got {merge!r}")
        if merge == "qr" and curvature == "full":
            raise ValueError("the thin-QR merge works on low-rank sketches; use curvature='lowrank' or merge='pinv'")
        if beta < 0:
            raise ValueError(f"FIPA regularization beta must be ≥ 0, got {beta}")
        if not gamma > 0 or not eta > 0:
            raise ValueError(f"FIPA steps must be > 0, got gamma={gamma}, eta={eta}")
        if weighting not in ("sum", "samples"):
            raise ValueError(f"weighting must be 'sum' or 'samples', got {weighting!r}")
        if complement not in COMPLEMENTS:
            raise ValueError(f"FIPA complement must be one of {', '.join(COMPLEMENTS)}, got {complement!r}")
        if complement != "none" and merge != "qr":
            raise ValueError("the orthogonal-complement correction is an option of the thin-QR merge (merge='qr')")
        self.complement = complement
        self.curvature, self.merge = curvature, merge
        self.beta, self.gamma, self.eta, self.weighting, self.rtol = beta, gamma, eta, weighting, rtol
        self.rule = _robust.RobustRule(robust, float(trim), None if clip_norm is None else float(clip_norm))
        self.consistency = bool(consistency)
        self.rhs: torch.Tensor | None = None  # the last merge's plain right-hand side, where it formed one

    def schema(self):
        f = {"delta": Field(("p",)), "n": Field((1,), positive=True),
             # optional (fedsciml.methods.fipa): ‖∇F_m‖ of the client's mean loss (adaptive FIPA) and
             # ½‖r_m‖² at the broadcast θ (the server's step acceptance)
             "gnorm": Field((1,), optional=True, nonneg=True), "loss": Field((1,), optional=True, nonneg=True)}
        f.update(self.form.fields())  # the curvature's message
        return Schema(f)

    @property
    def form(self) -> type[Dense] | type[LowRank]:
        """The curvature form the clients send (:mod:`fedsciml.core.curvature`): read and checked through it."""
        return Dense if self.curvature == "full" else LowRank

    def check(self, cid, msg, p):
        problem = self.form.message_problem(msg, p)
        if problem is not None:
            raise MessageRejected(cid, problem)
        if self.consistency and "loss" in msg:
            d = msg["delta"]
            q = self.form.from_message(msg).quad(d)
            _consistent(cid, q, float(msg["loss"][0]), "Δθᵀ Ĥ Δθ",
                        "for an exact local Gauss–Newton step Δθᵀ H Δθ ≤ ‖P_J r‖² ≤ ‖r‖² = 2·loss",
                        consistency_rtol(d.dtype, FIPA_CONSISTENCY_RTOL))

    def _weights(self, messages):
        if self.weighting == "sum":
            return [1.0] * len(messages)
        w = self.sample_weights(messages)
        return [w[c] for c in messages]

    def _rhs(self):
        """The robust right-hand-side rule for the merges: ``(Σ w_m) · rule_m(C_m)``, or ``None`` (the plain sum)."""
        if self.rule.rule == "mean":
            return None
        rule = _robust.RobustRule(self.rule.rule, self.rule.trim)  # the norm bound is applied to the deltas

        def rhs(C, w):
            return sum(w) * rule.combine(C, w)
        return rhs

    def aggregate(self, theta, messages, server_round: int | None = None):
        if not messages:
            raise ValueError("no client messages to aggregate")
        w = self._weights(messages)
        deltas = [m["delta"] for m in messages.values()]
        if self.rule.clip_norm is not None:
            deltas = list(_robust.clip_rows(torch.stack(deltas), self.rule.clip_norm))
        rhs = self._rhs()
        formed: dict = {}
        # the plain right-hand side Σ Ĥ_m Δθ_m of the broadcast deltas, kept for the strategy's predicted decrease
        # (methods/fipa.py) where the merge formed exactly that: sum weights, mean rule, no norm bound, no tail
        plain = (self.weighting == "sum" and rhs is None and self.rule.clip_norm is None
                 and self.complement != "tail")
        if self.form is Dense:  # β > 0: the regularized dense merge (a Cholesky solve, no pseudo-inverse)
            Hs = [Dense.from_message(m).H for m in messages.values()]
            step = fipa_merge_dense(Hs, deltas, w, self.rtol, rhs=rhs, beta=self.beta, out=formed)
            self.rhs = formed["b"] if plain else None
            return theta + self.eta * self.gamma * step
        curv = [LowRank.from_message(m) for m in messages.values()]
        Us, lams = [c.U for c in curv], [c.lam for c in curv]
        if self.merge == "qr":
            sw = None
            if self.complement == "fedavg":
                sw = self.sample_weights(messages)
                sw = [sw[c] for c in messages]
            step = fipa_merge_lowrank(Us, lams, deltas, w, beta=self.beta, gamma=self.gamma, rtol=self.rtol,
                                      complement=self.complement, sample_weights=sw, rhs=rhs, out=formed)
            self.rhs = formed["b"] if plain else None
            return theta + self.eta * step
        Hs = [(U * l) @ U.T for U, l in zip(Us, lams)]
        self.rhs = None  # its b = Σ (U_m Λ_m U_mᵀ) Δθ_m differs in round-off from the strategy's U_m(Λ_m U_mᵀΔθ_m)
        return theta + self.eta * self.gamma * fipa_merge_dense(Hs, deltas, w, self.rtol, rhs=rhs)


def consistency_rtol(dtype, rtol64: float = CONSISTENCY_RTOL) -> float:
    """``rtol64`` scaled to ``dtype``'s round-off (``eps(dtype)/eps(float64)``; 5.4e8× larger in float32)."""
    return rtol64 * float(torch.finfo(dtype).eps) / float(torch.finfo(torch.float64).eps)


def _consistent(cid, q: float, loss: float, what: str, why: str, rtol: float = CONSISTENCY_RTOL) -> None:
    """Reject unless ``q ≤ 2·loss·(1 + rtol)``: statistics no larger than the client's own loss allows.

    ``rtol`` covers round-off only (the honest value can sit *at* the bound:
    ``r ∈ range(J)`` whenever a client has fewer residuals than parameters).
    The quantities are sums of n_m or p products, computed in the server's
    dtype with relative error ≲ (n_m + p)·eps (2e-11 in float64 for 10⁵
    terms); 1e-6 leaves a wide margin above that, and an inflation that small
    changes no step noticeably.  Callers whose computation loses more
    (eigen-decompositions) or another dtype pass their ``rtol``
    (:func:`consistency_rtol`).
    """
    if not q <= 2.0 * loss * (1.0 + rtol) + 1e-300:
        raise MessageRejected(cid, f"statistics inconsistent with the reported loss: {what} = {q:.6g} > "
                                   f"2·loss = {2.0 * loss:.6g} ({why})")
