"""Exact federated Gauss–Newton: the server drives the centralized LM state machine on summed statistics.

One round is one Levenberg–Marquardt iteration of
:class:`fedsciml.core.lm.LevenbergMarquardt` — the *same* object the
centralized solver drives:

1. the server proposes a trial point ``θ + δ``, ``(ΣH_m + μI) δ = −Σg_m``,
   and broadcasts it (p floats to each client);
2. every client answers with its loss *and* its statistics there, ``{"H":
   pack_upper(J_mᵀJ_m), "g": J_mᵀr_m, "loss", "n"}`` — or, in the
   square-root form (``form="sqrt"``, the default when the clients hold
   fewer residual rows in all than there are parameters), the thin-QR factor
   ``R_m`` of ``J_m`` and ``s_m = Q_mᵀr_m``: the same information, fewer
   floats, and the server stacks them and solves the damped system in the
   n×n kernel form instead of factorizing a p×p matrix;
3. the server accepts or rejects from the *summed* loss (the LM gain ratio)
   and adapts μ; an accepted trial's statistics, already at hand, become the
   current point's, a rejected trial's are dropped (the server keeps the
   statistics of the current point, so the next, more damped trial needs
   nothing else).

So an LM iteration is **one exchange** (``exchange="one"``, the default),
accepted or not.  On a stock Flower deployment an exchange costs seconds
whatever its size, so exchanges are what a site pays for; the price is the
statistics sent at rejected trials (counted in ``floats_up``).  ``exchange=
"two"`` keeps the older protocol for bandwidth-bound sites: the trial's loss
first (``gn_loss``, one scalar up), then, only if accepted, the statistics
(``gn_stats``, a second exchange at the point the clients already hold) —
two exchanges per accepted step, one per rejected one, and no statistics
sent at rejected trials.  Both take the same steps (the acceptance test
reads the summed loss, which both gather at the same point): the iterates
are those of centralized LM to round-off either way.  With fresh collocation
points before every round (``resample``) the trial's statistics would be
taken on points about to be replaced, so that run asks the loss only.

Matrix-free form (``form="matfree"``, for p where no p×p matrix should
travel or be factorized): the clients never send a matrix.  Per accepted
point each client sends its gradient ``{"g": J_mᵀr_m, "loss", "n"}`` (p + 2
floats) and answers one Nyström sketch request ``{"HV": J_mᵀJ_m Ω}`` (ℓ·p
floats, ℓ the preconditioner's rank, one exchange); then every conjugate-
gradient iteration of the damped solve is one exchange: the server sends a
direction ``v`` (p floats to each client) and each client returns
``J_mᵀ(J_m v)`` (p floats), computed with one jvp and one vjp of its own
residual (:class:`fedsciml.core.matfree.GNOperator`).  The server sums the
products and runs the same LM state machine with ``solve="matfree"``.  The
trial's loss comes with its gradient (``exchange="one"``: ``gn_grad`` at
the trial point; ``"two"``: ``gn_loss`` first, ``gn_grad`` after an
acceptance).  A round (one LM iteration) is therefore 1 + (CG iterations)
exchanges (``"two"``: one more when the trial is accepted), plus the
sketch — and 1 after a rejected trial whose CG solve was truncated: the
next trial (a larger μ at the same point) minimizes the damped model over
that solve's Krylov space, with no product (``MatfreeConfig.krylov_reuse``;
centralized LM runs the same code, so the iterates still agree); the
history's ``floats_up``/``floats_down`` count every one of them, its
``exchanges`` column (the loop's count, for every method) all the
exchanges so far, and the round's row records ``cg_iters``.  Every product is
checked (``vᵀJ_mᵀJ_m v ≥ 0`` up to round-off, the right shape, finite).

With the K-FAC-for-PINNs preconditioner (``precond="kfac"``, :mod:`fedsciml.core.kfac_pinn`) no sketch
is exchanged: each client adds its raw Kronecker sums to the gradient message (``{"kfac"}``:
``KroneckerFactors.size_of(net)`` floats, O(Σ layer widths²), the upper triangles of two factors per
layer and term and two point counts), the server adds them — the factors of the pooled points, so the
iterates equal centralized LM's with the same preconditioner up to round-off — and preconditions every
CG solve at that point with them.

The subspace step (``subspace`` = k > 0, matrix-free form, K-FAC's own step size and momentum after Martens &
Grosse 2015 §7 for k = 2): no CG.  Per accepted point the server builds ``V = [P⁻¹g, δ_{t−1}, …, δ_{t−k+1}]``
(the preconditioned gradient and the last accepted steps) and asks one exchange of products (``gn_gvp``: ``V``
down, ``J_mᵀJ_m V`` up, k·p floats each way); it then minimizes the damped model over span(V) exactly, a k×k
system (:func:`fedsciml.core.matfree.subspace_step`), with the Gauss–Newton model's own decrease in the gain
ratio.  A rejected trial re-solves that k×k system at the larger μ with no exchange, so an accepted step costs 2
exchanges (the trial's gradient, loss and factors; the products at the new point) and a rejected trial 1 —
with fresh points every round (``resample 1``) one more per round, the statistics on the new points.  The
centralized LM runs the same code on the pooled products (``LMConfig.matfree.subspace``): the iterates agree
to round-off.

Choice (``GNConfig.form="auto"``, :func:`choose_form`, one rule with the other
methods' in :func:`fedsciml.core.forms.choose_form`): per client, the
normal form costs ``p(p+1)/2 + p`` floats and the square-root form
``min(n_m, p)(p+1)``; the smaller is taken while it is at most
``MATFREE_FLOATS`` = 6.25·10⁶ floats (50 MB in float64) and the clients'
Jacobians fit the device's memory, else the matrix-free form.  In LM's K-FAC
regime (:func:`fedsciml.core.forms.choose_lm_solve`: a CPU, every client's
residuals in a K-FAC channel form, p ≥ 5·10³, a dense LM step
of at least 2 K-FAC steps by the flop model, ``precond`` auto or kfac) it is the
matrix-free form with ``kfac`` and CG capped at 10 exchanges per solve
(``cg_iters`` unless named; unnamed, the cap grows from 3 at the first step
by 2 per accepted step: :func:`fedsciml.core.matfree.cg_cap`) — the same rule
as centralized LM's ``lm_solve auto``; elsewhere ``precond`` auto is
``nystrom`` and the cap 500.

Since ``Σ_m J_mᵀJ_m = JᵀJ`` and ``Σ_m J_mᵀr_m = Jᵀr`` for the pooled
residual, the iterates equal centralized LM's to round-off.  An exact step
needs every client: a client that drops out or sends a bad message is asked
again (``max_retries`` times, each counted), and the round stops with
:class:`~fedsciml.runtime.loop.RoundFailed` when it never answers.
Partial participation is therefore not offered for ``gn``.

The file holds the method: its configuration (:class:`GNConfig`), its aggregator and strategy, the client
handlers of the matrix-free and multi-trial queries, its strategy factory (``gn_strategy``), its settings text
and its registry entry (``METHOD_ENTRIES``).
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedsciml.core import forms, kfac_forms, kfac_pinn, linalg, matfree
from fedsciml.runtime import robust as _robust
from fedsciml.methods.aggregators import Aggregator, _consistent, consistency_rtol
from fedsciml.core.schema import Field, MessageRejected, Schema
from fedsciml.runtime.strategy import Exchange, Strategy
from fedsciml.runtime.transport import Reply, Request
from fedsciml.runtime.client import Client, register_handler
from fedsciml.core.objective import GNStats, gn_stats_from
from fedsciml.options import OptionError, RoundOptions, display, option
from fedsciml.core.lm import MATFREE_FLOATS, LevenbergMarquardt, LMConfig, deferred_stats, federated_form  # noqa: F401
from fedsciml.core.lm import ceiling_warning, damping_ceiling, default_tau
from fedsciml.core.kfac_forms import has_jets, require_jets
from fedsciml.core.matfree import MatfreeConfig, OutOfTime
from fedsciml.methods.run import RunContext, capped_rank, subspace_damping_option, subspace_inapplicable
from fedsciml.runtime.driver import Method

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class GNConfig(RoundOptions):
    """Exact federated Gauss–Newton (LM on the summed client statistics)."""

    method: ClassVar[str] = "gn"
    default_rounds: ClassVar[int] = 100

    lm_tau: float | None = option(None, "LM initial damping μ₀ = τ·max diag(JᵀJ)", float, lo=0, lo_open=True,
                                  none="the centralized solver's τ for this problem")
    form: str = option("auto", "statistics sent: normal (JᵀJ, Jᵀr), sqrt (thin-QR factors), matfree (Jᵀr, then one "
                               "exchange of p floats per CG iteration) or auto (the smaller of normal and sqrt while "
                               "it is ≤ 6.25e6 floats per client and the Jacobians fit the device, matfree beyond)",
                       str,
                       choices=("auto", "normal", "sqrt", "matfree"))
    nystrom_rank: int = option(forms.NYSTROM_RANK, "rank of the Nyström preconditioner of the matrix-free form "
                                                    "(one sketch exchange of rank·p floats per accepted step)", int, lo=1)
    precond: str = option("auto", "preconditioner of the matrix-free form's CG: nystrom (one sketch exchange), kfac "
                                  "(K-FAC for PINNs: each client sends its Kronecker factors with Jᵀr, O(Σ widths²) "
                                  "floats; PINN residuals of u and its derivatives up to order 2), none, or auto (kfac where form auto goes "
                                  "matrix-free for it: a CPU, PINN residuals in channel form, "
                                  f"p ≥ {forms.KFAC_MIN_PARAMS:,}, a dense step dear; else nystrom)",
                          str, choices=("auto", "nystrom", "kfac", "none"))
    cg_iters: int | None = option(None, "CG iterations (exchanges) per matrix-free solve, at most (a truncated solve is "
                                        "judged by LM's gain ratio); 0 with precond kfac: no CG — the damped K-FAC "
                                        "step itself, one exchange per trial (factors and Jᵀr up, the trial down)",
                                  int, lo=0,
                                  none="10 where form auto takes K-FAC (a CPU, PINN residuals in channel form, "
                                       f"p ≥ {forms.KFAC_MIN_PARAMS:,}, a dense step dear), else 500")
    subspace: int = option(0, "directions of the subspace step (matrix-free form, no CG): the server minimizes the "
                              "damped model exactly over k directions — the preconditioned gradient and the last "
                              "k − 1 accepted steps (K-FAC's step size and momentum, Martens & Grosse 2015, for k = 2) "
                              "— from one exchange of k products J_mᵀJ_m V per accepted point: 2 exchanges per "
                              "accepted step, 1 per rejected trial (0: CG)", int, lo=0)
    subspace_damping: str = subspace_damping_option()
    momentum: float = option(0.0, "SPRING momentum β of the server's LM step (0: plain Levenberg–Marquardt; "
                                  "fedsciml.core.lm; no extra floats)", float, lo=0, hi=1, hi_open=True)
    exchange: str = option("one", "exchanges per LM iteration: one (the trial point down, each client's loss and "
                                  "statistics there up; a rejected trial's statistics are sent for nothing) or two "
                                  "(the loss first, the statistics only after an acceptance: fewer floats, twice the "
                                  "exchanges; for bandwidth-bound sites)", str, choices=("one", "two"))
    trials: int = option(1, "LM trial points per exchange (exchange one, dense forms): the next k points LM would "
                            "try if each were rejected, each client's loss and statistics at all of them (k times "
                            "the floats up); a rejected trial then costs no exchange", int, lo=1)
    max_retries: int = option(20, "rejected LM trials in a row before the run stops", int, lo=0)
    batched: bool = option(True, "evaluate the clients of a round in one vectorized call (same numbers)", bool,
                           cli=False)
    screen: float | None = option(None, "robust: leave-one-client-out influence screen on the statistics at θ₀ "
                                        "with threshold κ (a client whose statistics cost the others more than κ × "
                                        "the median client's is left out of the run; fedsciml.runtime.robust)",
                                  float, lo=1, lo_open=True, none="no screen", metavar="KAPPA")

    def forms_jacobians(self) -> bool:
        return self.form != "matfree"  # the matrix-free form's clients keep one residual graph, never J

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.form in ("normal", "sqrt"):
            out["precond"] = out["cg_iters"] = f"it sets the matrix-free form ({display('form')} matfree or auto)"
            out["nystrom_rank"] = f"it sizes the matrix-free form's Nyström preconditioner ({display('form')} " \
                                  f"matfree or auto)"
            out["subspace"] = f"the subspace step is a matrix-free step ({display('form')} matfree or auto)"
        elif self.precond not in ("nystrom", "auto"):
            out["nystrom_rank"] = f"it sizes the Nyström preconditioner ({display('precond')} nystrom or auto)"
        subspace_inapplicable(self.subspace, out)
        return out

    def memory_form(self, rows: int, p: int, clients: int, device=None) -> str:
        # the choice reads the rows' sum and the largest client's rows (its square-root message): no list of
        # `clients` entries, as a plan refused for 10⁹ clients would build one (8 GB) before refusing
        form = (forms.choose_form(int(rows) * int(clients), p, device=device, need="gn", rows=(int(rows),)).form
                if self.form == "auto" else self.form)
        return "graph" if form == "matfree" else "jacobian"

    def memory_terms(self, rows: int, p: int, clients: int, form: str) -> list[tuple[float, str]]:
        """Beyond the default parameter vectors, the form's statistics: ``normal``, every client's packed
        ``J_mᵀJ_m`` (p(p+1)/2) with the server's p×p sum and its factor; ``sqrt``, every client's
        ``min(n_m, p)×p`` triangle and the server's stacked factor's p×p; matrix-free, the Nyström
        preconditioner's ``nystrom_rank`` vectors."""
        out = super().memory_terms(rows, p, clients, form)
        named = self.form if self.form != "auto" else f"auto → {'matfree' if form == 'graph' else 'dense'}"
        if form == "graph":
            r = min(int(self.nystrom_rank), p)  # capped at p by the run (methods.run.capped_rank)
            out.append((float(r) * p, f"the Nyström preconditioner's {r:,} vectors"))
        elif self.form == "sqrt":
            out.append((clients * min(int(rows), p) * (p + 1.0) + 2.0 * p * p,
                        f"every client's min(n_m, p)×p factor and the server's two p×p ({display('form')} sqrt)"))
        else:
            out.append((clients * p * (p + 1) / 2 + 2.0 * p * p,
                        f"every client's JᵀJ ({p:,}×{p:,}, packed), the server's sum and its factor "
                        f"({display('form')} {named})"))
        return out

    def _resolve(self):
        super()._resolve()
        if self.participation < 1:
            raise OptionError(f"gn takes an exact step on every client's statistics; {display('participation')}="
                              f"{self.participation} < 1 is not possible (use fipa/fedavg for partial participation)")


FORMS = ("normal", "sqrt", "matfree")
EXCHANGES = ("one", "two")  # exchanges per LM iteration: loss and statistics together, or loss then statistics

def choose_form(rows: list, p: int, device=None, dtype: torch.dtype = torch.float64) -> str:
    """``form="auto"`` of federated gn (:func:`fedsciml.core.lm.federated_form`, i.e. the one device-aware choice
    :func:`fedsciml.core.forms.choose_form`, so that the memory estimate applies the same rule): the smaller of
    the normal (``p(p+1)/2 + p``) and square-root (``min(n_m, p)(p+1)``, largest client) messages while it is at
    most :data:`MATFREE_FLOATS` and the clients' Jacobians fit the device, else ``matfree``."""
    return federated_form(rows, p, device, dtype)


# --- the clients' side of the matrix-free form ------------------------------------------------------------


def _operator(client, theta) -> matfree.GNOperator | matfree.SplitGNOperator:
    """The client's Gauss–Newton operator at θ, kept while θ is unchanged (one vjp pass per point; on a CPU in
    blocks of ~10³ rows, :func:`fedsciml.core.matfree.local_operator`)."""
    cached = client.__dict__.get("_gn_operator")
    if cached is None or cached.theta.shape != theta.shape or not torch.equal(cached.theta, theta):
        cached = matfree.local_operator(client.objective, theta)
        client.__dict__["_gn_operator"] = cached
    return cached


def _answer_gn_grad(client, request, pre, deadline):
    op = _operator(client, request.tensors["theta"])
    msg = {"g": op.g, "loss": op.loss.reshape(1), "n": client.n_like(op.theta)}
    if request.config.get("precond") == "kfac":  # the K-FAC-for-PINNs factors ride with the gradient
        msg["kfac"] = kfac_forms.factors_of(client.objective, op.theta, matfree.split_rows(client.objective,
                                                                                          op.theta)).pack()
    return Reply(msg)


def _answer_gn_gvp(client, request, pre, deadline):
    op = _operator(client, request.tensors["theta"])
    V = request.tensors["V"]
    return Reply({"HV": op.matmat(V) if V.shape[1] > 1 else op.matvec(V[:, 0]).unsqueeze(1)})


def _split_trials(msg: dict, j: int) -> dict:
    """Trial ``j``'s own message out of a ``gn_trials`` answer (fields named ``FIELD@j``)."""
    tail = f"@{j}"
    return {k[: -len(tail)]: v for k, v in msg.items() if k.endswith(tail)}


def _trial_messages(messages_at) -> dict:
    """One ``gn_trials`` answer from the client's ``gn_stats`` answers at each trial point (``FIELD@j``)."""
    return {f"{k}@{j}": v for j, msg in enumerate(messages_at) for k, v in msg.items()}


def _answer_gn_trials(client, request, pre, deadline):
    if pre is not None:
        return Reply(pre)
    form = request.config.get("form", "normal")
    return Reply(_trial_messages([client.gn_message(th, form) for th in request.tensors["thetas"]]))


def _pre_gn_trials(batch, request):
    form = request.config.get("form", "normal")
    per_trial = [batch.gn_messages(th, form) for th in request.tensors["thetas"]]
    return {c.cid: _trial_messages([m[c.cid] for m in per_trial]) for c in batch.clients}


register_handler(Client, "gn_grad", _answer_gn_grad)
register_handler(Client, "gn_trials", _answer_gn_trials, _pre_gn_trials)
register_handler(Client, "gn_gvp", _answer_gn_gvp)


class GNAggregator(Aggregator):
    """Sums clients' Gauss–Newton statistics; never sees their data.

    Beyond the schema (loss ≥ 0), statistics must be consistent with the
    client's own loss (``consistency``, default on): ``gᵀH⁺g = ‖P_J r‖² ≤ ‖r‖²
    = 2·loss`` — checked through the lower bound ``gᵀ(H + εI)⁻¹g`` (one p×p
    Cholesky per message, as costly as the server's own LM solve and a third of
    forming ``J_mᵀJ_m`` with n_m ≥ p rows; it also rejects an indefinite H, and
    a negative diagonal by name) — and in square-root form ``‖s‖² = ‖Qᵀr‖² ≤
    ‖r‖²`` (O(m)).  Without the consistency check, H gets the schema's entrywise
    PSD test.
    A rejected client is asked again like a dropped one; one that never sends
    consistent statistics ends the run with ``RoundFailed``.
    """

    name = "gn"

    def __init__(self, with_curvature: bool = True, form: str = "normal", consistency: bool = True,
                 kfac_net=None):
        if form not in FORMS:
            raise ValueError(f"gn statistics form must be one of {', '.join(FORMS)}, got {form!r}")
        if kfac_net is not None and form != "matfree":
            raise ValueError(f"K-FAC factors precondition the matrix-free form only, got form={form!r}")
        self.with_curvature = with_curvature
        self.form = form
        self.consistency = bool(consistency)
        self.kfac_net = kfac_net  # the network whose K-FAC factors the matrix-free clients send (None: none)

    def schema(self) -> Schema:
        f = {"loss": Field((1,), nonneg=True), "n": Field((1,), positive=True)}
        if self.with_curvature and self.form == "matfree":
            f["g"] = Field(("p",))
            if self.kfac_net is not None:
                f["kfac"] = Field(("k",))
        elif self.with_curvature and self.form == "sqrt":
            f["R"] = Field(("m", "p"))
            f["s"] = Field(("m",))
        elif self.with_curvature:
            # with the consistency check, one Cholesky of H + εI (in check) replaces the entrywise PSD test
            f["H"] = Field(("h",), psd=None if self.consistency else "packed")
            f["g"] = Field(("p",))
        return Schema(f)

    def context(self, p):
        ctx = {"p": p, "h": linalg.n_upper(p)}
        if self.kfac_net is not None:
            ctx["k"] = kfac_forms.layout_size(self.kfac_net)
        return ctx

    def check(self, cid, msg, p):
        if self.form == "matfree" and self.with_curvature and self.kfac_net is not None:
            try:
                fac = kfac_forms.unpack_factors(self.kfac_net, msg["kfac"])
            except ValueError as e:
                raise MessageRejected(cid, f"field 'kfac': {e}") from None
            if any(bool((m.diagonal() < 0).any()) for t in kfac_pinn.KINDS for m in fac.A[t] + fac.B[t]):
                raise MessageRejected(cid, "field 'kfac' has a Kronecker factor with a negative diagonal entry; "
                                           "a sum of outer products is positive semidefinite")
        if not (self.with_curvature and self.consistency) or self.form == "matfree":
            return
        loss = float(msg["loss"][0])
        rtol = consistency_rtol(msg["loss"].dtype)
        if self.form == "sqrt":
            s = msg["s"]
            _consistent(cid, float(s @ s), loss, "‖s‖²", "‖Qᵀr‖² ≤ ‖r‖² = 2·loss", rtol)
            return
        H = linalg.unpack_upper(msg["H"], p)
        dg = torch.diagonal(H)
        if bool((dg < 0).any()):
            raise MessageRejected(cid, f"field 'H' has a negative diagonal entry ({float(dg.min()):.3g}); a "
                                       "curvature/Gram matrix is positive semidefinite")
        q = _robust.pinv_quadratic_lower(H, msg["g"])
        if q is None:
            raise MessageRejected(cid, "field 'H' is not positive semidefinite (Cholesky of H + εI failed)")
        _consistent(cid, q, loss, "gᵀH⁺g", "gᵀH⁺g = ‖P_J r‖² ≤ ‖r‖² = 2·loss", rtol)

    @staticmethod
    def total_loss(messages) -> float:
        return float(sum(float(messages[c]["loss"][0]) for c in sorted(messages)))

    def aggregate_stats(self, messages, p: int) -> GNStats:
        order = sorted(messages)
        loss = sum(messages[c]["loss"][0] for c in order)
        n = int(round(sum(float(messages[c]["n"][0]) for c in order)))  # counts ≤ 2^53 each (schema): finite
        if self.form == "matfree":  # the operator is bound by the strategy (products are exchanges)
            g = messages[order[0]]["g"].clone()
            for c in order[1:]:
                g += messages[c]["g"]
            factors = None
            if self.kfac_net is not None:
                k = messages[order[0]]["kfac"].clone()
                for c in order[1:]:
                    k += messages[c]["kfac"]
                factors = kfac_forms.unpack_factors(self.kfac_net, k)
            return GNStats(H=None, g=g, loss=loss, n=n, factors=factors)
        if self.form == "sqrt":  # stack the square roots: RᵀR = ΣJ_mᵀJ_m, Rᵀs = ΣJ_mᵀr_m
            R = torch.cat([messages[c]["R"] for c in order])
            s = torch.cat([messages[c]["s"] for c in order])
            kernel = R.shape[0] < p  # kernel-form LM on the stacked factor: no p×p matrix
            st = gn_stats_from(R, s, form_gram=not kernel, keep_jacobian=kernel)
            # ½‖s‖² omits the part of r_m outside range(J_m): keep the clients' own losses
            return dataclasses.replace(st, loss=loss, n=n)
        Hp = messages[order[0]]["H"].clone()
        g = messages[order[0]]["g"].clone()
        for c in order[1:]:
            Hp += messages[c]["H"]
            g += messages[c]["g"]
        return GNStats(H=linalg.unpack_upper(Hp, p), g=g, loss=loss, n=n)

    def aggregate(self, theta, messages, server_round=None):  # pragma: no cover - gn sums statistics, not parameters
        raise NotImplementedError("federated GN sums statistics (aggregate_stats) and steps with LevenbergMarquardt")


class GNStrategy(Strategy):
    """Round logic of exact federated Gauss–Newton / Levenberg–Marquardt (see the module docstring).

    A round is one exchange — ``gn_stats`` at the trial point, loss and
    statistics together (``exchange="one"``) — or two kinds of exchange —
    ``gn_loss`` at the trial point, then (if the LM gain ratio accepts it)
    ``gn_stats`` there (``exchange="two"``) — each repeated for the clients
    that dropped out or were rejected, so it overrides :meth:`Strategy.round`.
    """

    name = "gn"

    def __init__(self, lm_config: LMConfig | None = None, max_retries: int = 20, form: str = "normal",
                 screen: float | None = None, kfac_net=None, exchange: str = "one", trials: int = 1,
                 form_reason: str | None = None):
        if form not in FORMS:
            raise ValueError(f"gn statistics form must be one of {', '.join(FORMS)}, got {form!r}")
        if exchange not in EXCHANGES:
            raise ValueError(f"gn exchange must be one of {', '.join(EXCHANGES)} (exchanges per LM iteration), "
                             f"got {exchange!r}")
        self.exchange = exchange
        if int(trials) < 1 or (int(trials) > 1 and (exchange != "one" or form == "matfree")):
            raise ValueError(f"gn trials must be ≥ 1, and > 1 only with exchange='one' and a dense form; got "
                             f"trials={trials}, exchange={exchange!r}, form={form!r}")
        self.trials = int(trials)
        if screen is not None and not screen > 1:
            raise ValueError(f"the influence screen's κ must be > 1, got {screen}")
        if screen is not None and form == "matfree":
            raise ValueError("the influence screen compares each client's dense statistics; the matrix-free form "
                             "sends none (use form='normal' or 'sqrt' with screen)")
        self.screen = None if screen is None else float(screen)
        self.lm_config = lm_config or LMConfig()
        if (self.lm_config.matfree.precond == "kfac") != (kfac_net is not None) and form == "matfree":
            raise ValueError("the K-FAC preconditioner (LMConfig.matfree.precond='kfac') and kfac_net (the network "
                             "whose factors the clients send) go together")
        self.kfac_net = kfac_net if form == "matfree" else None
        self.banned: list = []  # clients the screen left out of the run (at θ₀)
        self.form = form
        self.form_reason = form_reason  # why form auto chose this form (recorded; None: the form was named)
        self.max_retries = int(max_retries)
        self.lm: LevenbergMarquardt | None = None
        self.retries = 0
        self.enrolled = {}  # client id → sample count of its first valid message (fixed from then on)
        self._run = None
        self.points_expire = False  # Strategy.points_expire: an accepted trial's statistics are then not gathered

    # the simulation's view
    @property
    def theta(self):
        return self.lm.theta

    @property
    def loss_sum(self):
        return self.lm.loss

    def summary(self) -> dict:
        out = {"lm_tau": self.lm_config.tau, "form": self.form, "max_retries": self.max_retries,
               "exchange": self.exchange, **({"trials": self.trials} if self.trials > 1 else {})}
        if self.form_reason is not None:
            out["form_reason"] = self.form_reason
        mf = self.lm_config.matfree
        if self.form == "matfree":  # the matrix-free solve as resolved (form auto picks the preconditioner and cap)
            out["precond"] = mf.precond  # always: a record that omitted "nystrom" hid which one ran
            if mf.subspace > 0:
                out.update(subspace=mf.subspace, subspace_damping=mf.subspace_damping)
            elif mf.max_iters != forms.FULL_CG_ITERS:
                out["cg_iters"] = mf.max_iters
                if mf.cg_start is not None:  # the cap grows with the accepted steps (matfree.cg_cap)
                    out["cg_start"] = mf.cg_start
        return out

    def _ask(self, run, request, validate, down: int, clients: list | None = None, what: str | None = None) -> dict:
        """Every client's (of ``clients``, default all) valid answer to ``request``, asking again whoever did not
        answer validly (``max_retries`` times, each counted); then the round fails naming ``what`` was asked
        (default: the matrix-free exchange of ``request``'s query)."""
        ex = Exchange([], request, validate, down_floats=down, dropout=True)
        got: dict = {}
        clients = list(run.client_ids) if clients is None else clients
        missing = list(clients)
        for attempt in range(self.max_retries + 1):
            ex.clients = missing
            got.update(run.exchange(ex).ok)
            missing = [c for c in clients if c not in got]
            if not missing:
                return got
            self.retries += 1
        what = what or f"a matrix-free Gauss–Newton {request.query} exchange"
        run.fail(f"{what} (clients {missing} never answered validly in {self.max_retries + 1} attempts)")

    def _products(self, V: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """``Σ_m J_mᵀJ_m V`` at θ: one exchange, ``V`` down (the clients hold θ), ``J_mᵀJ_m V`` up."""
        msgs = self._ask(self._run, Request("gn_gvp", {"theta": theta, "V": V}),
                         lambda m: validate_products(m, V), V.numel())
        order = sorted(msgs)
        out = msgs[order[0]]["HV"].clone()
        for c in order[1:]:
            out += msgs[c]["HV"]
        return out

    def _matfree_grads(self, run, theta, send: bool = False) -> dict:
        """Every client's ``gn_grad`` (``{"g", "loss", "n"}``, with its raw K-FAC sums under ``precond="kfac"``)
        at θ; ``send``: θ is new to the clients (p floats down to each), else they hold it (θ₀ before its
        broadcast is counted, or a trial they answered)."""
        agg = GNAggregator(True, "matfree", kfac_net=self.kfac_net)
        agg.enrolled = self.enrolled
        p = theta.numel()
        req = Request("gn_grad", {"theta": theta}, {"precond": "kfac"} if self.kfac_net is not None else {})
        return self._ask(run, req, lambda m: agg.validate(m, p, theta.dtype), p if send else 0)

    def _matfree_stats(self, run, theta, msgs: dict | None = None) -> GNStats:
        """The summed gradient and loss at θ with the federated operator bound there (``msgs``: the clients'
        ``gn_grad`` answers already at hand, else asked now)."""
        p = theta.numel()
        st = GNAggregator(True, "matfree", kfac_net=self.kfac_net).aggregate_stats(
            self._matfree_grads(run, theta) if msgs is None else msgs, p)
        st.op = _FederatedOperator(self, theta)
        return st

    def _gather(self, run, theta, with_curvature: bool, send: bool = False) -> dict:
        """Every client's ``gn_stats`` (or ``gn_loss``) at θ, asking again whoever did not answer validly.

        ``gn_loss`` always carries a new trial point (p floats down to each client); ``gn_stats`` is asked at a
        point the clients already hold (θ₀, whose broadcast :meth:`start` counts, or the trial they just answered
        the loss at: nothing down), unless ``send`` (one exchange per iteration: the trial travels with it)."""
        agg = GNAggregator(with_curvature, self.form)
        agg.enrolled = self.enrolled
        p = theta.numel()
        req = (Request("gn_stats", {"theta": theta}, {"form": self.form}) if with_curvature
               else Request("gn_loss", {"theta": theta}))
        return self._ask(run, req, lambda m: agg.validate(m, p, theta.dtype), 0 if with_curvature and not send else p,
                         [c for c in run.client_ids if c not in self.banned], what="an exact Gauss–Newton step")

    def start(self, run, theta0):
        self.lm = LevenbergMarquardt(self.lm_config)
        self._run = run
        if self.form == "matfree":
            st = self._matfree_stats(run, theta0)
            run.count_sent(down=theta0.numel() * len(run.client_ids))  # θ₀ broadcast
            self.lm.start(theta0, st)  # the Nyström sketch (one exchange) sets the damping unit
            return {"mu": self.lm.mu}
        msgs = self._gather(run, theta0, True)
        run.count_sent(down=theta0.numel() * len(run.client_ids))  # θ₀ broadcast
        if self.screen is not None:  # robust: screened once, at θ₀; who is dropped stays out of the run
            from fedsciml.runtime.robust import screen_messages

            why: dict = {}
            self.banned = screen_messages(msgs, why, theta0.numel(), 0.0, self.screen)
            for c in self.banned:
                run.reject(c, f"screened out: {why[c]}")
        self.lm.start(theta0, GNAggregator(True, self.form).aggregate_stats(msgs, theta0.numel()))
        return {"mu": self.lm.mu}

    def resampled(self, run):
        """Fresh collocation points (``resample``): the statistics at θ are gathered again on them (an exchange,
        counted) and replace the LM state's; μ and the SPRING direction carry over."""
        lm = self.lm
        self.enrolled.clear()  # the clients' row counts may change with their points
        self._run = run
        theta = lm.theta
        assert theta is not None
        if self.form == "matfree":
            lm.stats = self._matfree_stats(run, theta)
        else:
            lm.stats = GNAggregator(True, self.form).aggregate_stats(self._gather(run, theta, True), theta.numel())
        return {}

    def finished(self, run):
        if self.lm.mu >= self.lm.cfg.mu_max:
            log.warning(ceiling_warning("gn", run.round_index, self.lm.loss / max(1, run.n_total),
                                        self.lm.cfg.mu_max))
            return damping_ceiling(self.lm.cfg.mu_max)
        return None

    def round(self, run, k):
        if self.form == "matfree":
            return self._matfree_round(run)
        if self.trials > 1 and not self.points_expire:
            return self._trials_round(run)
        trial = self.lm.propose()
        if self.exchange == "one" and not self.points_expire:  # loss and statistics at the trial, together
            msgs = self._gather(run, trial, True, send=True)
            loss = GNAggregator.total_loss(msgs)
            accepted = self.lm.observe(loss, lambda: GNAggregator(True, self.form).aggregate_stats(msgs, trial.numel()))
            return {"mu": self.lm.mu, "accepted": accepted}
        losses = self._gather(run, trial, False)
        loss = GNAggregator.total_loss(losses)
        if self.points_expire:  # fresh points before the next round: its statistics are gathered on them
            accepted = self.lm.observe(loss, lambda: deferred_stats(loss, self.lm.stats))
        else:
            accepted = self.lm.observe(loss, lambda: GNAggregator(True, self.form).aggregate_stats(
                self._gather(run, trial, True), trial.numel()))
        return {"mu": self.lm.mu, "accepted": accepted}

    def _trials_round(self, run):
        """``trials`` = k > 1: one exchange carries the next k trial points LM would propose if each were rejected
        (μ, then μ raised by the failure rule, …; computed on a shallow copy of the LM state, which propose and
        observe only rebind); every client answers its loss and statistics at each.  The server then replays
        LM on them in order until one is accepted — the same decisions and iterates as k one-exchange rounds,
        and a rejected trial costs no exchange (only its statistics, in floats up)."""
        import copy

        lm = self.lm
        trials = [lm.propose()]
        shadow = copy.copy(lm)
        while len(trials) < self.trials:
            shadow.observe(float("nan"), lambda: lm.stats)  # a NaN loss is a rejection: the failure rule
            if shadow.mu >= shadow.cfg.mu_max:
                break
            trials.append(shadow.propose())
        p = trials[0].numel()
        agg = GNAggregator(True, self.form)
        agg.enrolled = self.enrolled
        k = len(trials)

        def validate(messages):
            ok, bad = dict(messages), {}
            for j in range(k):
                good, why = agg.validate({c: _split_trials(m, j) for c, m in ok.items()}, p, trials[0].dtype)
                bad.update({c: f"trial {j}: {reason}" for c, reason in why.items()})
                ok = {c: ok[c] for c in good}
            return ok, bad

        msgs = self._ask(run, Request("gn_trials", {"thetas": torch.stack(trials)}, {"form": self.form}), validate,
                         k * p, [c for c in run.client_ids if c not in self.banned])
        accepted, used = False, 0
        for j, trial in enumerate(trials):
            if j > 0:
                again = lm.propose()  # the same operations on the same state as the copy's: the same point
                if not torch.equal(again, trial):
                    raise RuntimeError("gn trials: a replayed LM proposal differs from the point sent")
            sub = {c: _split_trials(m, j) for c, m in msgs.items()}
            used = j + 1
            accepted = lm.observe(GNAggregator.total_loss(sub), lambda: agg.aggregate_stats(sub, p))
            if accepted or lm.mu >= lm.cfg.mu_max:
                break
        return {"mu": lm.mu, "accepted": accepted, "trials_used": used}

    def _matfree_round(self, run):
        self._run = run
        if self.lm.stats.op is None:  # restored from a checkpoint: bind the operator to this run
            self.lm.stats.op = _FederatedOperator(self, self.lm.theta)
        cg0 = self.lm.cg_iters
        self.lm.stop = run.out_of_time  # the budget is asked before every CG exchange
        trial = self.lm.propose()
        if run.out_of_time():  # spent in the solve: the trial's exchange (every client's gradient) is not started
            raise OutOfTime("the time budget ran out in the CG solve of a matrix-free Gauss–Newton round")
        if self.exchange == "one" and not self.points_expire:  # the trial's loss comes with its gradient
            grads = self._matfree_grads(run, trial, send=True)
            loss = GNAggregator.total_loss(grads)
            accepted = self.lm.observe(loss, lambda: self._matfree_stats(run, trial, grads))
        else:
            losses = self._gather(run, trial, False)
            loss = GNAggregator.total_loss(losses)
            accepted = self.lm.observe(loss, (lambda: deferred_stats(loss, self.lm.stats)) if self.points_expire
                                       else (lambda: self._matfree_stats(run, trial)))
        return {"mu": self.lm.mu, "accepted": accepted, "cg_iters": self.lm.cg_iters - cg0}

    def state_dict(self):
        lm = self.lm
        st = lm.stats
        if st.H is not None:
            curv = {"H": linalg.pack_upper(st.H)}
        elif st.J is not None:
            curv = {"J": st.J, "r": st.r}
        else:  # matrix-free: the operator is re-bound on load (the K-FAC factors are kept)
            curv = {} if st.factors is None else {"kfac": st.factors.pack()}
        return {"theta": lm.theta, **curv, "g": st.g, "loss": st.loss, "n": st.n, "mu": lm.mu, "nu": lm.nu,
                "accepted": lm.accepted_steps, "rejected": lm.rejected_steps, "retries": self.retries,
                "enrolled": dict(self.enrolled), "banned": list(self.banned),
                **({"phi": lm.momentum_direction} if lm.momentum_direction is not None else {}),
                **({"steps": torch.stack(lm.past_steps, 1)} if lm.past_steps else {}),
                **({"gamma": lm.precond_damping} if lm.precond_damping is not None else {}),
                **({"krylov_mu": lm.krylov_mu} if lm.krylov_mu is not None else {})}

    def load_state_dict(self, d):
        from fedsciml.runtime import checkpoint as ckpt

        theta = ckpt.restored_tensor(d, "theta")
        assert theta is not None
        p = theta.numel()
        ckpt.restored_tensor(d, "g", like=theta)
        if "H" in d:
            ckpt.restored_tensor(d, "H", shape=(p * (p + 1) // 2,))
        if "J" in d:
            J = ckpt.restored_tensor(d, "J")
            assert J is not None
            if J.ndim != 2 or J.shape[1] != p:
                raise ckpt.CheckpointError(f"state field 'J' has shape {tuple(J.shape)}, not [rows, {p}]")
            ckpt.restored_tensor(d, "r", shape=(J.shape[0],))
        ckpt.restored_number(d, "loss", lo=0.0, optional=True)  # NaN or negative: refused; None: not measured yet
        ckpt.restored_number(d, "n", lo=0, optional=True)
        accepted = ckpt.restored_number(d, "accepted", lo=0, integer=True)
        ckpt.restored_number(d, "rejected", lo=0, integer=True)
        ckpt.restored_number(d, "retries", lo=0, integer=True)
        mu = ckpt.restored_number(d, "mu", lo=0.0, hi=self.lm_config.mu_max)
        if mu == 0 and accepted > 0:  # after an accepted step μ ≥ mu_min > 0 (only a first, undamped step has 0)
            raise ckpt.CheckpointError(f"state field 'mu' = 0 after {accepted} accepted steps; μ ≥ "
                                       f"{self.lm_config.mu_min:g} then")
        ckpt.restored_number(d, "nu", lo=2.0)
        phi = ckpt.restored_tensor(d, "phi", like=theta, optional=True)
        steps = ckpt.restored_tensor(d, "steps", optional=True)
        k = self.lm_config.matfree.subspace
        if steps is not None and (steps.ndim != 2 or steps.shape[0] != p or not 1 <= steps.shape[1] <= max(k - 1, 0)):
            raise ckpt.CheckpointError(f"state field 'steps' has shape {tuple(steps.shape)}, not [{p}, j] with "
                                       f"1 ≤ j ≤ subspace − 1 = {k - 1}")
        for name, v in (("theta", theta), ("phi", phi)):  # a step whose squares overflow (φ = 1e300): the file's
            if v is not None and not bool(torch.isfinite((v * v).sum())):  # fault, not the clients' next answers
                raise ckpt.CheckpointError(f"state field {name!r} holds values so large that their squares "
                                           f"overflow float64 (max |{name}| = {float(v.abs().max()):.3g}); no run "
                                           f"writes that")
        banned, enrolled = d.get("banned", []), d.get("enrolled", {})
        if not isinstance(banned, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                                                   for c in banned):
            raise ckpt.CheckpointError(f"state field 'banned' must be a list of client ids (integers ≥ 0), got "
                                       f"{str(banned)[:80]}")
        if not isinstance(enrolled, dict):
            raise ckpt.CheckpointError(f"state field 'enrolled' must be a dict, got {type(enrolled).__name__}")
        self.lm = LevenbergMarquardt(self.lm_config)
        self.lm.theta = d["theta"]
        if "H" in d:
            self.lm.stats = GNStats(H=linalg.unpack_upper(d["H"], p), g=d["g"], loss=d["loss"], n=d["n"])
        elif "J" not in d:
            fac = None if "kfac" not in d else kfac_forms.unpack_factors(self.kfac_net, d["kfac"])
            self.lm.stats = GNStats(H=None, g=d["g"], loss=d["loss"], n=d["n"], factors=fac)
        else:
            self.lm.stats = GNStats(H=None, g=d["g"], loss=d["loss"], n=d["n"], J=d["J"], r=d["r"])
        self.lm.mu, self.lm.nu = d["mu"], d["nu"]
        self.lm.accepted_steps, self.lm.rejected_steps = d["accepted"], d["rejected"]
        self.retries = d["retries"]
        self.enrolled = dict(d.get("enrolled", {}))
        self.banned = [int(c) for c in d.get("banned", [])]
        self.lm.momentum_direction = d.get("phi")  # SPRING's last accepted step (absent: none, or β = 0)
        self.lm.past_steps = [] if steps is None else list(steps.unbind(1))  # the subspace step's last steps
        self.lm.precond_damping = ckpt.restored_number(d, "gamma", lo=0.0, optional=True)  # its adapted γ
        # a rejected trial's statistics: the μ of their first CG solve, whose Krylov basis the next trial reuses
        # (rebuilt at that μ on the first solve after the resume: the same operations)
        self.lm.krylov_mu = ckpt.restored_number(d, "krylov_mu", lo=0.0, lo_open=True, optional=True)

    def info(self):
        out = {"accepted_steps": self.lm.accepted_steps, "rejected_steps": self.lm.rejected_steps,
               "final_mu": self.lm.mu, "retried_requests": self.retries}
        if self.screen is not None:
            out["screened_out"] = list(self.banned)
        if self.form == "matfree":
            out["cg_iters"] = self.lm.cg_iters
        return out


class _FederatedOperator:
    """``v ↦ Σ_m J_mᵀJ_m v`` at θ, each product one exchange with the clients (:meth:`GNStrategy._products`)."""

    def __init__(self, strategy: GNStrategy, theta: torch.Tensor):
        self.strategy = strategy
        self.theta = theta
        self.p = theta.numel()

    def matmat(self, V):
        return self.strategy._products(V, self.theta)

    def matvec(self, v):
        return self.strategy._products(v.unsqueeze(1), self.theta)[:, 0]


def validate_products(messages, V: torch.Tensor):
    """Split ``{"HV"}`` answers into ``(accepted, rejected)``: exactly the field ``HV`` with V's shape and
    dtype, finite, and ``vᵀ(J_mᵀJ_m v) ≥ 0`` for every column up to round-off (``√eps·‖v‖·‖J_mᵀJ_m v‖``)."""
    from fedsciml.core.schema import psd_tolerance

    ok, bad = {}, {}
    vn = V.norm(dim=0)
    for cid, msg in messages.items():
        HV = msg.get("HV") if isinstance(msg, dict) else None
        if HV is None or set(msg) != {"HV"}:
            bad[cid] = f"a product message has exactly the field 'HV', got {sorted(msg) if isinstance(msg, dict) else msg!r}"
        elif not isinstance(HV, torch.Tensor) or tuple(HV.shape) != tuple(V.shape) or HV.dtype != V.dtype:
            bad[cid] = f"field 'HV' must be a {V.dtype} tensor of shape {tuple(V.shape)}"
        elif not bool(torch.isfinite(HV).all()):
            bad[cid] = "field 'HV' has non-finite entries"
        elif bool(((V * HV).sum(0) < -psd_tolerance(V.dtype) * vn * HV.norm(dim=0)).any()):
            bad[cid] = "field 'HV' gives vᵀ(J_mᵀJ_m)v < 0: a Gauss–Newton product is positive semidefinite"
        else:
            ok[cid] = msg
    return ok, bad


# --- the strategy factory, the settings text and the registry entry ------------------------------------


def gn_strategy(cfg: GNConfig, ctx: RunContext):
    """Exact federated Gauss–Newton (Levenberg–Marquardt on summed client statistics)."""
    objectives, theta0, seed = ctx.objectives, ctx.theta0, ctx.seed
    lm_tau = default_tau(objectives) if cfg.lm_tau is None else cfg.lm_tau
    form = cfg.form
    reason = None
    if form == "auto":  # the smaller dense message while it fits, matrix-free beyond (K-FAC's regime where it holds)
        rows = [o.n_residuals for o in objectives]  # (fedsciml.core.forms.choose_lm_solve, one rule with LM's)
        choice = forms.choose_lm_solve(sum(rows), theta0.numel(), need="gn", rows=rows, precond=cfg.precond,
                                       cg_iters=cfg.cg_iters, jets=lambda: has_jets(objectives), device=theta0.device,
                                       dtype=theta0.dtype)
        form, reason = choice.form, choice.reason
        precond, cg_cap, cg_start = choice.precond, choice.cg_iters, choice.cg_start
    else:
        precond, cg_cap = forms.matfree_settings(False, cfg.precond, cfg.cg_iters)
        cg_start = None
    assert precond is not None and cg_cap is not None
    if cfg.subspace > 0 and form != "matfree":
        raise ValueError(f"gn subspace={cfg.subspace} is a step of the matrix-free form; form resolved to {form!r}"
                         + (f" ({reason})" if reason else "") + ": name form matfree, or leave subspace at 0")
    solve = {"sqrt": "auto", "normal": "normal", "matfree": "matfree"}[form]
    kfac = form == "matfree" and precond == "kfac"
    if form == "matfree" and cg_cap == 0 and precond != "kfac":
        raise ValueError(f"cg_iters=0 (the damped K-FAC step, no CG) needs precond kfac, got precond {precond}")
    if kfac:  # refused by name unless every client's residual is in a channel form
        require_jets(objectives, getattr(ctx.problem, "name", str(ctx.problem)))
    return GNStrategy(LMConfig(tau=lm_tau, solve=solve, matfree=MatfreeConfig(
                              precond=precond if form == "matfree" else "nystrom",
                              rank=capped_rank(cfg.nystrom_rank, theta0.numel(), "nystrom_rank"),
                              max_iters=cg_cap, cg_start=cg_start if form == "matfree" else None, seed=seed,
                              subspace=cfg.subspace,
                              subspace_damping=cfg.subspace_damping),
                                   momentum=cfg.momentum),
                          max_retries=cfg.max_retries, form=form, screen=cfg.screen,
                          kfac_net=kfac_forms.factor_layout(objectives[0], theta0.numel()) if kfac else None, exchange=cfg.exchange,
                          trials=cfg.trials, form_reason=reason)


def settings(r) -> str:
    """The summary table's settings text of a gn run: the form its statistics took."""
    o = r.extra.get("strategy", {}) if isinstance(r.extra, dict) else {}
    base = "matrix-free LM (CG on Σ J_mᵀJ_m v)" if o.get("form") == "matfree" else "LM on ΣH_m, Σg_m"
    return base + (", loss then statistics" if o.get("exchange") == "two" else "")


#: ``gn``'s registry entry, its :class:`~fedsciml.runtime.driver.Method` (:mod:`fedsciml.methods`
#: registers every built-in module's entries, in one fixed order)
METHOD_ENTRIES = (
    Method("gn", GNConfig, strategy=gn_strategy,
           description="exact federated Gauss–Newton / Levenberg–Marquardt (clients send JᵀJ, Jᵀr)", settings=settings),
)
