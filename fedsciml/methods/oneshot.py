"""One-shot fusion of Gauss–Newton statistics as a one-round :class:`~fedsciml.runtime.strategy.Strategy`.

Round 1 asks the sampled clients (participation, then dropout: a client that
does not answer is simply absent from the fusion) for their Gauss–Newton
statistics at the broadcast θ₀ — the ``gn_stats`` query and schema of
:mod:`fedsciml.methods.gn`, ``{"H": pack(J_mᵀJ_m), "g": J_mᵀr_m, "loss", "n"}`` —
sums them (:meth:`~fedsciml.methods.gn.GNAggregator.aggregate_stats`) and
takes one damped Gauss–Newton step

    θ₁ = θ₀ − (ΣH_m + σI)⁻¹ Σg_m

with :func:`fedsciml.core.stats.ridge_solve` (Cholesky, a clear
``SingularGram`` error when the fused Gram is singular).  For the linear
residual ``r = A w − b`` at ``w = 0`` this *is* one-shot ridge fusion
(``H = AᵀA = G``, ``g = −Aᵀb = −h``).  σ counts once: on a ridge problem the
driver (``runtime/driver.py``, ``_ridge_sigma_once``) has the clients hold their
data rows only (problem option ``penalty="server"``) and makes ``sigma`` the
problem's σ (the method's when given), so this step adds the whole penalty; on
any other problem ``sigma`` is extra damping (default 0) and the result equals
exact federated GN's first round with LM damping 0.  Then the run stops
(``stopped_by="one-shot"``).

Client-side transforms (``transform``, sent in the request's config): each
client turns its rows ``(a_i, b_i) = (J_i, −r_i)`` at θ₀ into statistics with
the ridge package's own functions, in the order of :func:`fedsciml.ridge.one_shot`:

* ``project`` m (``sketch``, the run's ``seed``): the shared sketch
  ``S = sketch_matrix(p, m, seed, sketch)`` (:mod:`fedsciml.core.sketch`),
  rows ``a_iᵀS`` — the client sends m×m statistics and the server steps
  ``θ₁ = θ₀ + S v``;
* ``dp`` (the :class:`~fedsciml.core.dp.DPConfig` fields): rows clipped
  (:func:`fedsciml.core.privacy.clip_rows`), then, for local DP, the Gaussian
  mechanism on ``(G, h)`` (:func:`fedsciml.core.dp.privatize`) with the
  client's own generator :func:`fedsciml.core.dp.client_generator` (seed,
  cid); the message carries no count and no loss.  Central DP: clipped exact
  statistics plus the client's *share* of the noise, ``s/√t`` from the same
  generator (:func:`fedsciml.core.dp.share_std`; ``t`` = ``min_survivors``, default
  every client asked), so the sum of the shares carries ``s``; a sum of fewer than
  ``t`` is refused.  In process the server sees each message (it logs that it
  trusts the server); on Flower the sum is SecAgg+'s
  (:mod:`fedsciml.engines.flower.secagg`, :meth:`OneShotStrategy.fuse_sum`).  The server repairs the
  noisy sum (:func:`~fedsciml.core.dp.psd_repair`, ``repair``) and optionally
  adds the noise-aware σ.

``cv_sigmas``: σ by leave-one-client-out CV, computed by the server alone from the statistics it received
(each client's held-out loss from its own statistics, :func:`fedsciml.core.loco.stats_scores`): the round stays
one exchange, and under DP nothing leaves a site but its noised statistics — the loop does not ask DP sites
for their losses to monitor the run either (the history's ``loss`` is NaN), so the run's ε is its whole
release.

``fit_intercept``: an unpenalized intercept.  Exact: each client sends its count, means and centered scatter
of ``(a_i, b_i)`` (:func:`fedsciml.core.centered.site_statistics`, the scikit-learn estimators' message) and the
server solves ridge with the intercept from the merged centered blocks (CV from the same messages); under DP
the rows get a constant column ``κ = C_a/√(m+1)`` before clipping (:func:`intercept_column`), whose coordinate
the server leaves unpenalized.  The model is ``(θ, intercept)``; ``info()["intercept"]``.

Otherwise the message is always in the runtime's schema and sign (``{H, g = Jᵀr}``,
:func:`fedsciml.core.stats.to_gn`).  :func:`fedsciml.ridge.one_shot` runs this
strategy on in-process clients of the rows ``(A_k, b_k)`` (θ₀ = 0), so the two
are one loop; ``solve(..., method="one-shot")`` on a ridge problem does the
same with the penalty at the server (problem option ``penalty="server"``).

The file holds the method: its configuration (:class:`OneShotConfig`), its strategy, its client handler
(``oneshot_stats``), its strategy factory (``one_shot_strategy``), its settings text and its registry entry
(``METHOD_ENTRIES``).
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedsciml.core import linalg
from fedsciml.methods.aggregators import Aggregator
from fedsciml.methods.gn import GNAggregator
from fedsciml.core.schema import Field, MessageRejected, Schema
from fedsciml.options import FLOATS, OptionError, RoundOptions, display, option
from fedsciml.runtime.strategy import Exchange, Replies, Strategy
from fedsciml.runtime.client import Client, register_handler
from fedsciml.runtime.transport import Reply, Request
from fedsciml.methods.run import RunContext
from fedsciml.runtime.driver import Method

@dataclass(frozen=True)
class OneShotConfig(RoundOptions):
    """One-shot fusion of the clients' Gauss–Newton statistics at θ₀: one round, one fused step."""

    method: ClassVar[str] = "one-shot"
    default_rounds: ClassVar[int | None] = None  # one round: the strategy is done after it
    holds_sigma: ClassVar[bool] = True  # the driver: on a ridge problem σ is added once, by the fused step

    sigma: float | None = option(None, "damping σ of the fused step; on a ridge problem the ridge σ, added once at "
                                 "the server (default: the problem's σ)", float, lo=0,
                                 none="the problem's ridge σ on ridge problems, else 0")
    # client-side transforms of the statistics (fedsciml.methods.oneshot), seeded by the run's seed
    dp_epsilon: float | None = option(None, "local DP: ε of the Gaussian mechanism on each client's statistics",
                                      float, lo=0, lo_open=True, finite=False, none="no DP noise")
    dp_delta: float = option(1e-5, "DP δ", float, lo=0, hi=1, lo_open=True, hi_open=True)
    dp_clip_a: float = option(1.0, "DP row clip ‖a‖ ≤ C_a", float, lo=0, lo_open=True)
    dp_clip_b: float = option(1.0, "DP target clip |b| ≤ C_b", float, lo=0, lo_open=True)
    dp_clip: str = option("scale", "DP clipping: scale the whole row, or clip a and b separately", str,
                          choices=("scale", "separate"))
    dp_max_shrink: float | None = option(10.0, "DP: a site refuses when clipping would shrink its median row by "
                                         "more than this factor (standardize first, or set the clip bounds to "
                                         "the data's scale)", float, lo=1, none="no check")
    dp_central: bool = option(False, "DP noise once on the secure sum instead of on every client", bool)
    dp_noise_aware: bool | None = option(None, "add the DP noise's spectral norm √(2m)·s_total to σ (a penalty below "
                                         "it fits the noise; --no-dp-noise-aware: σ as given)", bool,
                                         none="on under DP, unless σ is chosen by --cv-sigmas")
    dp_min_survivors: int | None = option(None, "central DP: the fewest sites whose noise shares must reach the "
                                          "sum (each site adds s/√t; fewer arriving fails the run)", int, lo=1,
                                          none="every site asked", metavar="T")
    dp_max_rows: int | None = option(None, "central DP on Flower: a public bound on any site's rows (fixes "
                                     "SecAgg+'s fixed-point range)", int, lo=1,
                                     none="the problem's rows per client when public", metavar="N")
    fit_intercept: bool = option(False, "an unpenalized intercept (linear ridge problems): exact from each "
                                 "client's count, means and centered scatter; under DP an unpenalized constant "
                                 "column inside the clipped rows", bool)
    project: int | None = option(None, "random projection of the parameters to m dimensions", int, lo=1,
                                 none="no projection")
    project_sketch: str = option("gaussian", "projection sketch", str, choices=("gaussian", "sparse", "srht"))
    cv_sigmas: list[float] | None = option(None, "σ by leave-one-client-out CV over these values (a list; on the "
                                                 "command line 'a,b,c' or 'lo:hi:count', log-spaced)", FLOATS,
                                           lo=0, lo_open=True, max_items=10_000, none="σ as given",
                                           metavar="GRID")
    screen: float | None = option(None, "robust: leave-one-client-out influence screen with threshold κ (a client "
                                        "whose statistics cost the others more than κ × the median client's is "
                                        "left out of the fusion; not with DP; fedsciml.runtime.robust)",
                                  float, lo=1, lo_open=True, none="no screen", metavar="KAPPA")
    # the library function fedsciml.ridge.one_shot's knobs (no flag): the message form, the PSD repair, the calibration
    message_form: str = option("auto", "the clients' message form: gram (packed AᵀA, Aᵀb), sqrt (thin-QR factors, "
                                       "no DP) or auto (the server's choice)", str, choices=("auto", "gram", "sqrt"),
                               cli=False)
    repair: bool = option(True, "PSD repair of the noisy fused statistics (DP)", bool, cli=False)
    dp_calibration: str = option("analytic", "DP noise calibration", str, cli=False,
                                 choices=("analytic", "classical", "rdp", "prv", "gdp"))  # core.privacy.METHODS

    def forms_jacobians(self) -> bool:
        return True

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        out["resample"] = "one-shot takes one fused step on the points at θ₀; resampling needs several steps"
        out.pop("grow", None), out.pop("grow_every", None), out.pop("grow_cap", None)
        for k in ("grow", "grow_every", "grow_cap"):
            out[k] = "one-shot takes one fused step on the points at θ₀; the points cannot grow"
        if self.cv_sigmas is not None:
            out["sigma"] = (f"σ is chosen by cross-validation over {display('cv_sigmas')}; give σ, or a grid to "
                            "choose it, not both")
        if self.dp_epsilon is None:
            for k in ("dp_delta", "dp_clip_a", "dp_clip_b", "dp_clip", "dp_max_shrink", "dp_central", "dp_noise_aware",
                      "dp_min_survivors", "dp_max_rows", "dp_calibration", "repair"):
                out[k] = f"it is a differential-privacy option and DP is off (give {display('dp_epsilon')})"
        elif not self.dp_central:
            for k in ("dp_min_survivors", "dp_max_rows"):
                out[k] = f"it sizes central DP's noise shares and secure sum, and {display('dp_central')} is off"
        if self.project is None:
            out["project_sketch"] = f"it is the sketch of {display('project')}, which is off"
        return out

    def _resolve(self):
        super()._resolve()
        if self.screen is not None and self.dp_epsilon is not None:
            raise OptionError(f"one-shot option {display('screen')} compares exact statistics; it cannot be combined "
                              f"with {display('dp_epsilon')} (DP noise perturbs every client's statistics)")

    def dp(self) -> dict | None:
        """The :class:`fedsciml.ridge.DPConfig` fields, or None without DP."""
        if self.dp_epsilon is None:
            return None
        return {"epsilon": self.dp_epsilon, "delta": self.dp_delta, "c_a": self.dp_clip_a, "c_b": self.dp_clip_b,
                "clip": self.dp_clip, "central": self.dp_central,
                # default: on, unless σ is chosen by CV (whose scores already see the noisy statistics)
                "noise_aware_sigma": (self.cv_sigmas is None) if self.dp_noise_aware is None else self.dp_noise_aware,
                "calibration": self.dp_calibration, "max_shrink": self.dp_max_shrink}


TRANSFORM_KEYS = ("project", "sketch", "seed", "dp", "form", "noise_shares", "intercept", "max_rows")
logger = logging.getLogger(__name__)
CENTRAL_DP_REFUSED = ("dp_central needs a secure sum: fedsciml's generic Flower App has none (the server would see "
                      "each site's statistics under its noise share only); run it through the SecAgg+ App "
                      "(fedsciml/engines/flower/secagg_app, what --engine flower does), use local DP or the "
                      "in-process engine")


def secure_sum_needed(cfg: OneShotConfig) -> str | None:
    """Central DP at a finite ε needs a secure sum (:attr:`fedsciml.runtime.registry.Method.secure_sum`): the line
    an engine without one (Flower's generic App) refuses it with; ``None`` otherwise."""
    eps = cfg.dp_epsilon
    return CENTRAL_DP_REFUSED if cfg.dp_central and eps is not None and eps != math.inf else None


CENTRAL_DP_TRUST = ("central DP without secure aggregation: each site adds only its share s/√t of the noise, and "
                    "the server sees every site's message (noised below the calibrated s) — this trusts the server; "
                    "on Flower, central DP runs through SecAgg+ (fedsciml.engines.flower.secagg)")


def _dp_config(dp: dict):
    from fedsciml.core.dp import DPConfig

    return DPConfig(**dp)


@functools.lru_cache(maxsize=8)
def _sketch(p: int, m: int, seed: int, kind: str, dtype, device) -> torch.Tensor:
    """The shared sketch, built once per process for each (p, m, seed, kind) (read only: never modified)."""
    from fedsciml.core.sketch import sketch_matrix

    return sketch_matrix(p, m, seed, kind, dtype, device)


def client_rows(r: torch.Tensor, J: torch.Tensor, transform: dict, cid: int | None = None):
    """The rows ``(a_i, b_i) = (J_i, −r_i)`` at θ₀, projected (``a_iᵀS``) and clipped as ``transform`` says."""
    from fedsciml.core import privacy
    from fedsciml.core.sketch import project as _project

    unknown = sorted(set(transform) - set(TRANSFORM_KEYS))
    if unknown:
        raise ValueError(f"unknown one-shot transform option(s) {unknown}; allowed: {', '.join(TRANSFORM_KEYS)}")
    A, b = J, -r
    if transform.get("project") is not None:
        A = _project(A, _sketch(J.shape[1], int(transform["project"]), int(transform.get("seed", 0)),
                                transform.get("sketch", "gaussian"), J.dtype, J.device))
    if transform.get("dp") is not None:
        cfg = _dp_config(transform["dp"])
        if transform.get("intercept"):  # under DP the intercept is a constant column κ inside the clipped row
            A = torch.cat([A, A.new_full((A.shape[0], 1), intercept_column(cfg.c_a, A.shape[1]))], 1)
        privacy.check_clip_scale(A, b, cfg.c_a, cfg.c_b, cfg.max_shrink,
                                 "this site" if cid is None else f"client {cid}")
        A, b = privacy.clip_rows(A, b, cfg.c_a, cfg.c_b, cfg.clip)
    return A, b


def intercept_column(c_a: float, m: int) -> float:
    """Under DP the intercept is the coefficient of a constant column ``κ = C_a/√(m+1)`` appended to each row
    before clipping (a row whose m features are each at most κ in magnitude stays within ``C_a``), unpenalized
    at the server; the model's intercept is ``κ`` times that coefficient."""
    return float(c_a) / math.sqrt(m + 1)


def client_statistics(r: torch.Tensor, J: torch.Tensor, cid: int, transform: dict) -> dict:
    """Client ``cid``'s one-shot message from its residual ``r`` and Jacobian ``J`` at θ₀, transformed
    (projection, clipping, local Gaussian noise; see the module docstring), in the gn schema ``{H, g[, loss, n]}``."""
    from fedsciml.core import dp as _dp
    from fedsciml.core.stats import client_message, to_gn

    if transform.get("max_rows") is not None and J.shape[0] > int(transform["max_rows"]):
        raise ValueError(f"client {cid} holds {J.shape[0]} rows, more than the public bound {display('dp_max_rows')}="
                         f"{transform['max_rows']} the secure sum is sized for; it sends nothing")
    A, b = client_rows(r, J, transform, cid)
    dp = transform.get("dp")
    if dp is None and transform.get("intercept"):  # exact: count, means and centered scatter of (a, b)
        from fedsciml.core.centered import site_statistics

        st = site_statistics(A.detach().cpu().numpy(), b.detach().cpu().numpy())
        out = {k: torch.as_tensor(v, dtype=A.dtype, device=A.device) for k, v in st.items()}
        out["loss"] = (0.5 * (r @ r)).reshape(1)
        return out
    if dp is None and transform.get("form") == "sqrt":  # square-root form: R_kᵀR_k = G_k, s = Q_kᵀr = −z
        msg = client_message(A, b, form="sqrt")
        return {"R": msg["R"], "s": -msg["z"], "loss": (0.5 * (r @ r)).reshape(1), "n": msg["n"]}
    if dp is None:
        msg = to_gn(client_message(A, b))
        msg["loss"] = (0.5 * (r @ r)).reshape(1)
        return msg
    cfg = _dp_config(dp)
    seed = int(transform.get("seed", 0))
    msg = client_message(A, b, with_count=False)
    std = cfg.noise_std
    if cfg.central and std > 0:  # this site's share of the noise on the (secure) sum: s/√t, its own generator
        msg = _dp.privatize(msg, _dp.share_std(std, int(transform["noise_shares"])), _dp.client_generator(seed, cid))
    elif std > 0:
        msg = _dp.privatize(msg, std, _dp.client_generator(seed, cid))
    return to_gn(msg)


def _centered_check(m: int, dtype):
    """Validation of exact centered messages ``{n, mean [m+1], S [(m+1)(m+2)/2], loss}``: the schema (shapes, real
    dtype, finite, a whole count > 0, loss ≥ 0) and :func:`fedsciml.core.centered.check_message` (diag S ≥ 0):
    O(m²) per message."""
    from fedsciml.core.centered import check_message, n_packed

    schema = Schema({"n": Field((1,), positive=True), "mean": Field((m + 1,)), "S": Field((n_packed(m + 1),)),
                     "loss": Field((1,), nonneg=True)})

    def check(msgs):
        ok, bad = {}, {}
        for cid, msg in msgs.items():
            try:
                schema.validate(msg, cid, dtype=dtype)
                try:
                    check_message({k: msg[k].detach().cpu().numpy() for k in ("n", "mean", "S")}, cid, m)
                except ValueError as e:
                    raise MessageRejected(cid, str(e)) from None
                ok[cid] = msg
            except MessageRejected as e:
                bad[cid] = e.reason
        return ok, bad
    return check


class NoisyStatsAggregator(Aggregator):
    """Validates DP one-shot messages ``{H, g}``: shapes, real floating dtype, finite entries.  No count (not
    private), no loss and no PSD or consistency check: the Gaussian noise makes ``H`` indefinite, and the
    server repairs the noisy *sum* (:func:`fedsciml.core.dp.psd_repair`)."""

    name = "one-shot-dp"

    def schema(self) -> Schema:
        return Schema({"H": Field(("h",)), "g": Field(("p",))})

    def context(self, p):
        return {"p": p, "h": linalg.n_upper(p)}


def _at_least_one(value, message: str) -> int | None:
    """``None``, or ``value`` as an int ≥ 1 (else ``ValueError(message + ", got value")``)."""
    if value is None:
        return None
    if int(value) != value or int(value) < 1:
        raise ValueError(f"{message}, got {value}")
    return int(value)


def _sigma_grid(cv_sigmas) -> list[float]:
    """The CV grid of σ values, checked by the leave-one-client-out module (core.loco)."""
    from fedsciml.core.loco import _as_sigmas

    return [float(x) for x in _as_sigmas(cv_sigmas, torch.zeros(1, dtype=torch.float64))]


def _refuse_combinations(dp, cv_sigmas, form: str, screen, fit_intercept: bool) -> None:
    """The option combinations one-shot does not offer, each refused in one line saying why."""
    central = dp is not None and dp["central"] and dp["epsilon"] != math.inf
    if cv_sigmas is not None and central:
        raise ValueError("leave-one-client-out CV needs each client's statistics, which central DP (secure "
                         "aggregation) hides from the server; give sigma directly or use local DP")
    if form == "sqrt" and dp is not None:
        raise ValueError("DP noise is added to the Gram form of the statistics; use form='gram' with DP")
    if screen is not None and dp is not None:
        raise ValueError("the influence screen compares exact statistics; with DP noise every client's "
                         "statistics are perturbed on purpose (use robust options without DP)")
    if not fit_intercept:
        return
    if form == "sqrt":
        raise ValueError("fit_intercept sends centered statistics (Gram form); leave form auto or gram")
    if screen is not None:
        raise ValueError("the influence screen compares Gauss–Newton statistics; it is not offered with "
                         "fit_intercept")
    if dp is not None and cv_sigmas is not None:
        raise ValueError("under DP the intercept is an unpenalized constant column, which leave-one-client-"
                         "out CV would penalize: give sigma with fit_intercept and DP")


# --- the server, by concern: the message forms (check and sums), σ by CV, the fused solve under DP ----------------


def _sum_gram(messages, order):
    """``(pack(ΣH), Σg)`` of Gram-form messages, summed in client order."""
    Hp, g = messages[order[0]]["H"].clone(), messages[order[0]]["g"].clone()
    for c in order[1:]:
        Hp += messages[c]["H"]
        g += messages[c]["g"]
    return Hp, g


def stack_factors(messages, order, m, like):
    """``(Rs [K, rows, m], hs [K, m])``: the clients' square-root factors zero-padded to the most rows (zero rows
    add nothing to ``R_kᵀR_k``), built once — the fusion's Gram is that of ``Rs`` viewed as one tall matrix."""
    rows = max(messages[c]["R"].shape[0] for c in order)
    Rs = like.new_zeros(len(order), rows, m)
    S = like.new_zeros(len(order), rows)
    for i, c in enumerate(order):
        n = messages[c]["R"].shape[0]
        Rs[i, :n] = messages[c]["R"]
        S[i, :n] = messages[c]["s"]
    hs = -torch.bmm(Rs.transpose(1, 2), S[..., None])[..., 0]   # h_k = R_kᵀz_k = −R_kᵀs_k
    return Rs, hs


class _Form:
    """One form of the clients' one-shot message: how the server validates it (``check(st, m, dtype)``, the
    exchange's validator) and sums the valid ones into the fused system (``sums``: ``(G, h, Rs, hs)``, the
    factors only for the square-root form).  ``m`` is the (projected) parameter count, ``ms`` the fused system's
    size (``m + 1`` under DP with an intercept: its constant column).  The strategy picks one per run
    (:meth:`OneShotStrategy.message_form`)."""

    name: ClassVar[str]

    def check(self, st: OneShotStrategy, m: int, dtype):
        raise NotImplementedError

    def sums(self, st: OneShotStrategy, messages, order, m: int, ms: int):
        Hp, g = st._cached_sums(messages) or _sum_gram(messages, order)
        return linalg.unpack_upper(Hp, ms), -g, None, None


class _GramForm(_Form):
    """Exact Gram-form statistics ``{H = pack(J_kᵀJ_k), g, loss, n}`` (projected or not): O(m²) per message, the
    consistency check on the round's sum (see :class:`OneShotStrategy`), then the influence screen when asked;
    the validated sums are kept for the fusion."""

    name = "gram"

    def check(self, st, m, dtype):
        cheap = GNAggregator(True, "normal", consistency=False)
        full = GNAggregator(True, "normal")

        def sums(ok):
            order = sorted(ok)
            loss = ok[order[0]]["loss"].clone()
            for c in order[1:]:
                loss += ok[c]["loss"]
            return (*_sum_gram(ok, order), loss)

        def consistent(Hp, g, loss) -> bool:
            try:
                full.check("sum", {"H": Hp, "g": g, "loss": loss}, m)
                return True
            except MessageRejected:
                return False

        def check(msgs):
            ok, bad = cheap.validate(msgs, m, dtype)
            st._sums = None
            if not ok:
                return ok, bad
            Hp, g, loss = sums(ok)
            if not consistent(Hp, g, loss):  # rare: find the inconsistent messages, one Cholesky each
                for c in sorted(ok):
                    try:
                        full.check(c, ok[c], m)
                    except MessageRejected as e:
                        bad[c] = e.reason
                ok = {c: v for c, v in ok.items() if c not in bad}
                if not ok:
                    return ok, bad
                Hp, g, loss = sums(ok)
            st._sums = (frozenset(ok), Hp, g)
            return ok, bad

        return st._screened(check, m)


class _SqrtForm(_Form):
    """Square-root statistics ``{R_k, s_k, loss, n}`` (thin-QR factors of the client's rows, exact only): the gn
    schema and its O(m) check ``‖s‖² ≤ 2·loss``, then the screen; the server forms ``ΣR_kᵀR_k`` from the stacked
    factors and ``Σh_k = −ΣR_kᵀs_k``."""

    name = "sqrt"

    def check(self, st, m, dtype):
        agg = GNAggregator(True, "sqrt")
        return st._screened(lambda msg: agg.validate(msg, m, dtype), m)

    def sums(self, st, messages, order, m, ms):
        Rs, hs = stack_factors(messages, order, m, messages[order[0]]["R"])
        return linalg.unpack_upper(linalg.gram_packed(Rs.reshape(-1, m)), m), hs.sum(0), Rs, hs


class _NoisyForm(_Form):
    """DP statistics ``{H, g}`` (with an intercept: of the rows with their constant column, ``m + 1``): no count,
    no loss, ``H`` may be indefinite (:class:`NoisyStatsAggregator`; repaired on the sum)."""

    name = "noisy"

    def check(self, st, m, dtype):
        agg = NoisyStatsAggregator()
        ms = m + 1 if st.fit_intercept else m
        return lambda msg: agg.validate(msg, ms, dtype)


class _CenteredForm(_Form):
    """Exact statistics with an intercept: each site's count, means and centered scatter of ``(a, b)``
    (:func:`_centered_check`); the server solves from the merged blocks (:meth:`OneShotStrategy._centered_step`),
    not from a Gram sum."""

    name = "centered"

    def check(self, st, m, dtype):
        return _centered_check(m, dtype)


GRAM, SQRT, NOISY, CENTERED = _GramForm(), _SqrtForm(), _NoisyForm(), _CenteredForm()


def cross_validated_sigma(form: str, order, messages, G, h, noisy: bool, repair: bool, cv_sigmas: list,
                          Rs=None, hs=None) -> tuple[float, dict]:
    """σ by leave-one-client-out CV (:mod:`fedsciml.core.loco`) and its record, scored by the server from each
    client's own statistics: the server forms client k's models ``w_{−k}(σ_j)`` from the others' statistics and
    its held-out loss ``wᵀG_kw − 2wᵀh_k + ‖b_k‖²`` from client k's message (:func:`~fedsciml.core.loco.stats_scores`;
    ``‖b_k‖² = 2·loss`` when the message carries its loss, i.e. exact statistics; a DP message does not, and the
    reported CV losses then omit that σ-independent constant).  No model goes down, no score comes up, no second
    exchange: under DP, CV is post-processing of the noised statistics and costs no privacy."""
    from fedsciml.core import loco as _cv

    if len(order) < 2:
        raise ValueError(f"leave-one-client-out CV needs at least 2 clients (each is scored on a model fitted "
                         f"without it), got {len(order)}; give sigma directly")
    b_sq = (torch.stack([2.0 * messages[c]["loss"][0] for c in order])
            if all("loss" in messages[c] for c in order) else None)
    if form == "sqrt":
        W = _cv.loco_solutions(Rs, hs, cv_sigmas, sqrt=True, total=(G, h))
        losses = _cv.stats_scores(Rs, hs, W, sqrt=True, b_sq=b_sq)
    else:
        Gs = torch.stack([messages[c]["H"] for c in order])
        hs = -torch.stack([messages[c]["g"] for c in order])
        if noisy and repair:
            W = _cv.loco_solutions_repaired(Gs, hs, cv_sigmas)
        else:
            W = _cv.loco_solutions(Gs, hs, cv_sigmas, total=None if noisy else (G, h))
        losses = _cv.stats_scores(Gs, hs, W, b_sq=b_sq)
    total = losses.sum(0)
    j = int(torch.argmin(total))
    return cv_sigmas[j], {"cv_sigmas": list(cv_sigmas), "cv_loss": total.tolist(), "cv_scored": len(order),
                          "cv_loss_includes_b_sq": b_sq is not None}


def dp_at_the_server(G, sigma: float, m: int, arrived: int, cfg, shares: int, repair: bool):
    """The server's side of DP on fused statistics of ``arrived`` sites: the noise the sum carries (central DP:
    each site's share ``s/√t``, so the sum carries ``s·√(K'/t)`` ≥ s, or it is refused), the PSD repair, the
    noise-aware σ, and a warning when the noise dominates.  Returns ``(G, σ, eigenvalues clipped, s, s_total)``."""
    from fedsciml.core import dp as _dp

    std = cfg.noise_std
    if cfg.central and std > 0:  # the sites' shares s/√t: the sum carries s·√(K'/t) ≥ s, or is refused
        _dp.check_survivors(arrived, shares, cfg.epsilon)
        total = std * (arrived / shares) ** 0.5
    else:
        total = std * arrived ** 0.5
    clipped = 0
    if std > 0 and repair:
        G, clipped = _dp.psd_repair(G)
    if std > 0 and cfg.noise_aware_sigma:
        sigma = float(sigma) + _dp.noise_norm(m, total)
    if std > 0:
        dominated, nn, mean_eig = _dp.noise_dominates(G, total)
        if dominated:
            logger.warning(
                "DP: the noise's spectral norm (%.3g) exceeds the mean eigenvalue of the noisy statistics "
                "(%.3g): the fit is mostly noise and penalty, and the model is pulled towards 0 (ε=%g, %d "
                "site(s)); more rows per site, a larger ε, clip bounds closer to the data's scale or central "
                "DP lower the noise", nn, mean_eig, cfg.epsilon, arrived)
    return G, sigma, clipped, std, total


class OneShotStrategy(Strategy):
    """One exchange of GN statistics, one fused step (see the module docstring).

    ``form``: the clients' message form — ``"gram"`` (packed ``H = pack(J_kᵀJ_k)``, ``g``), ``"sqrt"``
    (``R_k``, ``s_k`` from the thin QR of the client's rows; exact statistics only) or ``"auto"`` (default):
    decided when the round is configured, from the answering clients' row counts — the square-root form when
    σ is chosen by CV without DP and every client holds at most half as many rows as (projected) parameters
    (fewer floats up, and the LOCO products cost ``4·n_k·m`` per vector instead of ``2m²``), else the Gram form.

    Validation of exact Gram-form statistics costs O(m²) per message — the schema (shapes, dtype, finiteness,
    counts, losses ≥ 0, the entrywise PSD conditions of ``H``) — and the consistency check
    ``gᵀH⁺g ≤ 2·loss`` (one m×m Cholesky) runs once, on the round's sum.  The check is subadditive (the
    matrix-fractional function ``(g, H) ↦ gᵀH⁺g`` is jointly convex and 1-homogeneous), so statistics that
    are each consistent always pass on the sum; only when the sum fails is every message checked (one
    Cholesky each) and the inconsistent ones rejected by name.  What this gives up against checking every
    message: an inconsistent client whose excess is covered by the other clients' slack passes, but then the
    fused statistics are still consistent with the clients' total loss — the step cannot be inflated beyond
    what the total loss allows.  Square-root messages keep their O(m) check ``‖s‖² ≤ 2·loss``.

    By concern: the message forms (:meth:`message_form`: Gram, square-root, noisy, centered — each its check and
    its sums), σ by CV (:func:`cross_validated_sigma`) and the server's side of DP (:func:`dp_at_the_server`) are
    outside the class; it keeps the run's state and the order of the steps.
    """

    name = "one-shot"

    def __init__(self, sigma: float = 0.0, *, dp=None, project: int | None = None, sketch: str = "gaussian",
                 seed: int = 0, repair: bool = True, cv_sigmas=None, form: str = "auto", screen: float | None = None,
                 min_survivors: int | None = None, secure_sum: bool = False, fit_intercept: bool = False,
                 max_rows: int | None = None):
        from fedsciml.core.sketch import SKETCHES
        from fedsciml.core.stats import check_sigma

        self.sigma = check_sigma(sigma)
        if dp is not None and not isinstance(dp, dict):  # a DPConfig
            dp = dataclasses.asdict(dp)
        self.dp = None if dp is None else dataclasses.asdict(_dp_config(dp))  # validated, plain values
        self.project = _at_least_one(project, "projection dimension must be a positive integer")
        if sketch not in SKETCHES:
            raise ValueError(f"unknown sketch {sketch!r}; allowed: {', '.join(SKETCHES)}")
        self.sketch, self.seed, self.repair = sketch, int(seed), bool(repair)
        self.cv_sigmas = None if cv_sigmas is None else _sigma_grid(cv_sigmas)
        if form not in ("auto", "gram", "sqrt"):
            raise ValueError(f"one-shot message form must be auto, gram or sqrt, got {form!r}")
        if screen is not None and not screen > 1:
            raise ValueError(f"the influence screen's κ must be > 1, got {screen}")
        _refuse_combinations(self.dp, self.cv_sigmas, form, screen, bool(fit_intercept))
        self.form = form
        self.screen = None if screen is None else float(screen)
        self.fit_intercept = bool(fit_intercept)
        self.min_survivors = _at_least_one(min_survivors, "dp_min_survivors must be an integer ≥ 1")
        self.max_rows = _at_least_one(max_rows, "dp_max_rows must be an integer ≥ 1")  # central DP: a site with more rows refuses
        # said once the fusion has happened (aggregate_round), so that a run refused by a check or by a site
        # prints its one line, not this one beside it
        self._trusts_server = self._central() and not secure_sum
        self._init_state()

    def _init_state(self) -> None:
        """What the run fills in: the screen's rejections, the intercept, the fusion's sums, θ, the noise record."""
        self.screened: list = []
        self.intercept = 0.0
        self._shares = 0  # central DP: t, sized when the round is configured (size_noise_shares)
        self._form = "gram" if self.form == "auto" else self.form  # resolved in configure_round
        self._sums = None  # (clients, packed ΣH, Σg) of the validated round (exact Gram form), reused by the fusion
        self.theta = None
        # under DP nothing but the noised statistics may leave a site: the loop must not ask the sites for their
        # exact losses to monitor the run (a release outside ε), so the history's loss is NaN ("not measured")
        self.loss_sum = math.nan if self.dp is not None and self.dp["epsilon"] != math.inf else None
        self.fused = 0
        self.noise = {}

    def _transform(self, p):
        """The request's transform config, or None for plain GN statistics (the original path, bit for bit)."""
        project = self.project if self.project is not None and self.project != p else None
        if (self.dp is None and project is None and self.cv_sigmas is None and self._form == "gram"
                and not self.fit_intercept):
            return None
        if project is not None and project > p:
            raise ValueError(f"projection dimension must be an integer in [1, p={p}], got {project}")
        tr = {"project": project, "sketch": self.sketch, "seed": self.seed, "dp": self.dp}
        if self._central():
            tr["noise_shares"] = self._shares
            if self.max_rows is not None:
                tr["max_rows"] = self.max_rows
        if self.fit_intercept:
            tr["intercept"] = True
        if self._form == "sqrt":
            tr["form"] = "sqrt"
        return tr

    def _central(self) -> bool:
        return self.dp is not None and bool(self.dp["central"]) and self.dp["epsilon"] != math.inf

    def size_noise_shares(self, sampled: int) -> int:
        """Central DP: the number ``t`` of sites whose noise shares must reach the sum (each adds ``s/√t``):
        ``min_survivors``, or every site sampled for the round; more than sampled is refused."""
        t = int(sampled) if self.min_survivors is None else self.min_survivors
        if t > int(sampled):
            raise ValueError(f"central DP: {display('dp_min_survivors')}={t} sites' noise shares must reach the sum, but only "
                             f"{sampled} sites are asked")
        self._shares = t
        return t

    def request_transform(self, p: int) -> dict | None:
        """The transform a client's ``oneshot_stats`` request carries for a model of ``p`` parameters (projection,
        DP, noise shares, intercept, form; ``None``: plain GN statistics) — what an engine that computes the sum
        itself (Flower's SecAgg+, :mod:`fedsciml.engines.flower.secagg`) sends its sites."""
        return self._transform(p)

    @property
    def fused_system(self) -> torch.Tensor | None:
        """The last fusion's system with the unpenalized intercept (``G + diag(σ, …, σ, 0)``, its last coordinate
        the constant column's), or ``None`` (no intercept, or nothing fused yet): its smallest eigenvalue bounds
        the model's error under a secure sum's rounding."""
        return getattr(self, "_system", None)

    def _resolve_form(self, run, answering, m):
        if self.form != "auto":
            return self.form
        if self.fit_intercept:
            return "gram"
        counts = getattr(run.transport, "sample_counts", {}) or {}
        small = bool(answering) and all(c in counts and 2 * int(counts[c]) <= m for c in answering)
        return "sqrt" if self.cv_sigmas is not None and self.dp is None and small else "gram"

    def _cached_sums(self, messages):
        """``(pack(ΣH), Σg)`` kept by the Gram form's check for exactly these messages, or ``None``."""
        if self._sums is not None and self._sums[0] == frozenset(messages):
            return self._sums[1], self._sums[2]
        return None

    def message_form(self, p: int) -> _Form | None:
        """The form of this run's messages for a model of ``p`` parameters (``None``: plain GN statistics, the
        ``gn_stats`` query) — the one place the options decide it."""
        if self._transform(p) is None:
            return None
        if self.fit_intercept and self.dp is None:
            return CENTERED
        if self.dp is not None:
            return NOISY
        return SQRT if self._form == "sqrt" else GRAM

    def configure_round(self, run, k):
        answering, _dropped = run.sample()  # nobody answering fails the round in aggregate_round
        if self._central():
            self.size_noise_shares(max(1, len(answering)))
        theta = self.theta
        p = theta.numel()
        m0 = p if self.project is None else min(p, self.project)
        self._form = self._resolve_form(run, answering, m0)
        form = self.message_form(p)
        if form is None:
            return Exchange(answering, Request("gn_stats", {"theta": theta}, {"form": "normal"}),
                            GRAM.check(self, p, theta.dtype))
        tr = self._transform(p)
        m = p if tr["project"] is None else tr["project"]
        return Exchange(answering, Request("oneshot_stats", {"theta": theta}, {"transform": tr}),
                        form.check(self, m, theta.dtype))

    def _screened(self, validate, m: int):
        """``validate``, then (``screen`` κ given) the leave-one-client-out influence screen
        (:func:`fedsciml.runtime.robust.influence_screen`) on the valid statistics."""
        if self.screen is None:
            return validate

        def check(msgs):
            from fedsciml.runtime.robust import screen_messages

            ok, bad = validate(msgs)
            ok, bad = dict(ok), dict(bad)
            before = set(ok)
            self.screened = screen_messages(ok, bad, m, self.sigma, self.screen)
            if set(ok) != before:
                self._sums = None  # the validated round's sums included a screened client: fused anew
            return ok, bad
        return check

    def _transformed_step(self, messages, p):
        """The server side of the transforms: the form's sums, σ by CV, then :meth:`_solve_fused` (server DP,
        solve, map back).  Central DP's noise is already in the sum: each site added its share."""
        tr = self._transform(p)
        m = p if tr["project"] is None else tr["project"]
        form = self.message_form(p)
        if form is CENTERED:
            return self._centered_step(messages, p, m)
        ms = m + 1 if self.fit_intercept else m  # under DP the intercept's constant column is one more dimension
        order = sorted(messages)
        G, h, Rs, hs = form.sums(self, messages, order, m, ms)
        sigma = self.sigma
        cfg = None if self.dp is None else _dp_config(self.dp)
        if self.cv_sigmas is not None:
            noisy = cfg is not None and cfg.noise_std > 0 and not cfg.central
            sigma, self.cv = cross_validated_sigma(form.name, order, messages, G, h, noisy, self.repair,
                                                   self.cv_sigmas, Rs, hs)
        return self._solve_fused(G, h, ms, p, sigma, len(order))

    def _centered_step(self, messages, p, m):
        """Exact ridge with an unpenalized intercept from the sites' centered statistics (:mod:`fedsciml.core.centered`):
        merged by the parallel-axis rule, σ by leave-one-client-out CV scored from each site's own message when
        a grid is given, ``β = (S_xx + σI)⁻¹S_xy``, ``β₀ = μ_y − μ_xᵀβ``."""
        import numpy as np

        from fedsciml.core import centered
        from fedsciml.core.sketch import sketch_matrix

        order = sorted(messages)
        msgs = [{k: messages[c][k].detach().cpu().to(torch.float64).numpy() for k in ("n", "mean", "S")}
                for c in order]
        sigma = self.sigma
        if self.cv_sigmas is not None:
            if len(order) < 2:
                raise ValueError(f"leave-one-client-out CV needs at least 2 clients, got {len(order)}; give sigma")
            losses = centered.loco_path(msgs, m, np.asarray(self.cv_sigmas, dtype=np.float64), True, False)
            total = losses.sum(0)
            sigma = self.cv_sigmas[int(np.argmin(total))]
            self.cv = {"cv_sigmas": list(self.cv_sigmas), "cv_loss": total.tolist(), "cv_scored": len(order),
                       "cv_loss_includes_b_sq": True}
        N, mu, S = centered.combine(msgs)
        coef, b0, _ = centered.solve_ridge(N, mu, S, m, float(sigma), True, False)
        like = messages[order[0]]["mean"]
        v = torch.as_tensor(coef, dtype=like.dtype, device=like.device)
        tr = self._transform(p)
        if tr["project"] is not None:
            v = sketch_matrix(p, m, self.seed, self.sketch, v.dtype, v.device) @ v
        self.intercept = float(b0)
        self.noise = {"m": m, "sigma_used": float(sigma), "form_used": "centered", "intercept": self.intercept}
        # the fitted model is (β, β₀): its global ½‖r‖² comes exactly from the pooled centered statistics
        # (½·uᵀSu with u = (−β, 1); the mean term vanishes at β₀ = μ_y − μ_xᵀβ), not from the sites' loss
        # query, which knows θ but not the intercept
        self.loss_sum = 0.5 * float(centered.site_losses(np.array([N]), mu[None], S[None], coef[None, None],
                                                         np.array([[b0]]))[0, 0])
        return v

    def fuse_sum(self, Hp: torch.Tensor, g: torch.Tensor, arrived: int, p: int) -> torch.Tensor:
        """The server's step from a *sum* of ``arrived`` sites' messages (``pack(ΣH)``, ``Σg``) that it never saw
        one by one — what a secure sum (Flower's SecAgg+, :mod:`fedsciml.engines.flower.secagg`) hands it: the
        same PSD repair, noise-aware σ and solve as :meth:`aggregate_round`; central DP refuses a sum that
        carries fewer noise shares than it was sized for."""
        tr = self._transform(p)
        m = p if tr is None or tr["project"] is None else tr["project"]
        ms = m + 1 if self.fit_intercept else m
        self.fused = int(arrived)
        return self._solve_fused(linalg.unpack_upper(Hp, ms), -g, ms, p, self.sigma, int(arrived))

    def _solve_fused(self, G, h, m, p, sigma, arrived):
        """Server DP (:func:`dp_at_the_server`), solve, map back (projection) — on fused statistics of
        ``arrived`` sites."""
        from fedsciml.core.sketch import sketch_matrix
        from fedsciml.core.stats import ridge_solve

        clipped, std, total = 0, 0.0, 0.0
        cfg = None if self.dp is None else _dp_config(self.dp)
        if cfg is not None:
            G, sigma, clipped, std, total = dp_at_the_server(G, sigma, m, arrived, cfg, self._shares, self.repair)
        if self.fit_intercept:  # the last coordinate is the constant column's: unpenalized
            pen = torch.full((m,), float(sigma), dtype=G.dtype, device=G.device)
            pen[-1] = 0.0
            self._system = G + torch.diag(pen)
            va = ridge_solve(self._system, h, 0.0)
            m -= 1
            self.intercept = float(va[m]) * intercept_column(cfg.c_a if cfg is not None else 1.0, m)
            v = va[:m]
        else:
            self._system = None
            v = ridge_solve(G, h, sigma)
        tr = self._transform(p)
        if tr is not None and tr["project"] is not None:
            v = sketch_matrix(p, m, self.seed, self.sketch, v.dtype, v.device) @ v
        self.noise = {"m": m, "noise_std": std, "eig_clipped": clipped, "sigma_used": float(sigma),
                      "form_used": self._form}
        if self.fit_intercept:
            self.noise["intercept"] = self.intercept
            if self.loss_sum is None:  # ε = ∞: the sites' loss query knows θ but not the intercept
                self.loss_sum = math.nan
                self.noise["loss_not_measured"] = ("the sites' loss query does not carry the intercept of the "
                                                   "constant-column (DP) form")
        if cfg is not None and cfg.central and std > 0:
            self.noise.update(noise_shares=self._shares, noise_std_total=total)
        if self.loss_sum is not None and math.isnan(self.loss_sum) and "loss_not_measured" not in self.noise:
            self.noise["loss_not_measured"] = ("under DP the sites send only their noised statistics; their exact "
                                               "loss would be a release outside ε")
        return v

    def aggregate_round(self, run, k, replies: Replies):
        from fedsciml.core.stats import ridge_solve

        if not replies.ok:
            run.fail("the one-shot fusion")
        p = self.theta.numel()
        if self._transform(p) is not None:
            self.theta = self.theta + self._transformed_step(replies.ok, p)
        else:
            cached = self._cached_sums(replies.ok)
            if cached is not None:
                H, g = linalg.unpack_upper(cached[0], p), cached[1]
            else:
                st = GNAggregator(True, "normal").aggregate_stats(replies.ok, p)
                H, g = st.H, st.g
            self.theta = self.theta + ridge_solve(H, -g, self.sigma)
            self.noise = {"sigma_used": float(self.sigma), "form_used": "gram"}
        self.fused = len(replies.ok)
        if self._trusts_server:
            logger.warning(CENTRAL_DP_TRUST)
        return {"answered": len(replies.ok)}

    def finished(self, run):
        return "one-shot" if run.round_index >= 1 else None

    def state_dict(self):
        out = {"theta": self.theta, "fused": self.fused}
        if self.fit_intercept:
            out["intercept"] = self.intercept
        return out

    def load_state_dict(self, d):
        self.theta, self.fused = d["theta"], int(d["fused"])
        self.intercept = float(d.get("intercept", 0.0))

    def summary(self):
        out = {"sigma": self.sigma}
        if self.dp is not None or self.project is not None or self.cv_sigmas is not None:
            out.update(dp=self.dp, project=self.project, sketch=self.sketch, repair=self.repair,
                       cv_sigmas=self.cv_sigmas)
        if self.form != "auto":
            out["form"] = self.form
        if self.screen is not None:
            out["screen"] = self.screen
        if self.fit_intercept:
            out["fit_intercept"] = True
        return out

    def info(self):
        out = {"fused_clients": self.fused, **self.noise, **getattr(self, "cv", {})}
        if self.screen is not None:
            out["screened_out"] = list(self.screened)
        return out



# --- the client side: the queries one-shot adds to every objective client ----------------------


def _answer_stats(client, request, pre, deadline):
    """``oneshot_stats``: the client's GN statistics at θ after its own transforms (projection, clipping, noise;
    config ``transform``), from its own rows."""
    if pre is None:
        with torch.no_grad():
            pre = client.objective.residual_and_jacobian(request.tensors["theta"])
    return Reply(client_statistics(pre[0], pre[1], client.cid, request.config["transform"]))


register_handler(Client, "oneshot_stats", _answer_stats,
                 lambda batch, req: batch.residuals_and_jacobians(req.tensors["theta"]))


# --- the strategy factory, the settings text and the registry entry ------------------------------------


def one_shot_strategy(cfg: OneShotConfig, ctx: RunContext):
    """One-shot fusion of the clients' Gauss–Newton statistics (one-shot ridge for linear residuals).

    Client-side transforms (:class:`OneShotConfig`): ``dp_*`` (Gaussian mechanism), ``project``/``project_sketch``,
    seeded by the run's seed; ``cv_sigmas``: σ by leave-one-client-out CV (see :mod:`fedsciml.methods.oneshot`).
    With ``fit_intercept`` the model is (θ, intercept): the run's evaluation takes the fused intercept."""
    problem = ctx.problem
    strategy = OneShotStrategy(cfg.sigma or 0.0, dp=cfg.dp(), project=cfg.project, sketch=cfg.project_sketch,
                               seed=ctx.seed, cv_sigmas=cfg.cv_sigmas, screen=cfg.screen,
                               min_survivors=cfg.dp_min_survivors, form=cfg.message_form, repair=cfg.repair,
                               fit_intercept=cfg.fit_intercept, max_rows=cfg.dp_max_rows)
    if not cfg.fit_intercept:
        return strategy
    if getattr(problem, "kind", None) != "ridge":
        raise ValueError(f"fit_intercept applies to linear ridge problems (kind 'ridge'); {problem.name!r} is "
                         f"not one")
    plain = ctx.evaluate
    return strategy, lambda th: plain(th, intercept=strategy.intercept)


def settings(r) -> str:
    """The summary table's settings text of a one-shot run: σ as used (the CV's choice when a grid chose it)."""
    ex = r.extra if isinstance(r.extra, dict) else {}
    sigma = ex.get("sigma_used", r.options.get("sigma"))
    text = f"one fused step on ΣH_m, Σg_m, σ={sigma:g}" if isinstance(sigma, (int, float)) else \
        f"one fused step on ΣH_m, Σg_m, σ={sigma}"
    if r.options.get("cv_sigmas") is not None or ex.get("cv_sigmas") is not None:
        text += " (leave-one-client-out CV)"
    if r.options.get("dp_epsilon") is not None:
        text += f", DP ε={r.options.get('dp_epsilon')}" + (" central" if r.options.get("dp_central") else "")
    return text


def model_meta(res) -> dict:
    """What ``model.json`` says about a one-shot Result's linear model
    (:attr:`fedsciml.runtime.registry.Method.linear_model`): σ used, clients fused, DP, projection, seed, problem."""
    o = res.options
    meta = {"method": res.method, "problem": res.problem, "fit_intercept": "intercept" in res.extra,
            "sigma": float(res.extra.get("sigma_used", o.get("sigma", 0.0))), "clients": res.clients,
            "clients_fused": res.extra.get("fused_clients", res.clients), "seed": res.seed}
    dp = o.get("dp")
    if o.get("dp_epsilon") is not None or dp:
        eps = o.get("dp_epsilon", (dp or {}).get("epsilon"))
        meta["dp"] = {"epsilon": eps, "delta": o.get("dp_delta", (dp or {}).get("delta")),
                      "central": bool(o.get("dp_central", (dp or {}).get("central", False)))}
    if o.get("project"):
        meta["project"] = {"m": o["project"], "sketch": o.get("project_sketch", o.get("sketch"))}
    return meta


#: ``one-shot``'s registry entry: its :class:`~fedsciml.runtime.driver.Method`
#: (:mod:`fedsciml.methods` registers every built-in module's entries, in one fixed order)
METHOD_ENTRIES = (
    Method("one-shot", OneShotConfig, strategy=one_shot_strategy,
           description="one-shot fusion of the clients' Gauss–Newton statistics (one-shot ridge for linear "
                       "residuals)", settings=settings, secure_sum=secure_sum_needed, linear_model=model_meta,
           # linear residuals only: on a network's residuals one fused step from θ₀ is no solver (the Gram of
           # an overparametrized network is singular: σ = 0 fails) — gn --rounds 1 is that step, damped
           kinds=("ridge",)),
)
