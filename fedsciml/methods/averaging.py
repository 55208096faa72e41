"""FedAvg / FedProx as a :class:`~fedsciml.runtime.strategy.Strategy`: average the clients' local updates.

Each round the loop samples a fraction of the clients (participation, then
dropout); each is sent ``update`` (θ and the local-training config: Adam
steps on its mean loss, with FedProx's proximal weight, or one local
Gauss–Newton step) and answers ``{"delta", "n"}``; the server takes
``θ + η_s Σ (N_m/N) Δθ_m`` (:class:`~fedsciml.methods.aggregators.FedAvgAggregator`).
FedProx is the same strategy with ``LocalConfig.prox = μ``.
FIPA (:mod:`fedsciml.methods.fipa`) builds on this one: the same exchange
with curvature added to the request, and a curvature-weighted merge.

The file holds both methods: their configurations, the strategy, the strategy factories
(``fedavg_strategy``, ``fedprox_strategy``), FedProx's settings text and the registry entries
(``METHOD_ENTRIES``).  Their client half — the local step, shared with FIPA — is
:mod:`fedsciml.methods.local`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.methods.local import LocalConfig, local_settings
from fedsciml.methods.run import RunContext, local_config
from fedsciml.runtime.driver import Method
from fedsciml.options import LocalOptions, RobustOptions, RoundOptions, option
from fedsciml.runtime.strategy import Exchange, Replies, Strategy
from fedsciml.runtime.transport import Request


@dataclass(frozen=True)
class FedAvgConfig(RobustOptions, LocalOptions, RoundOptions):
    """FedAvg: data-size weighted average of local updates."""

    method: ClassVar[str] = "fedavg"
    default_rounds: ClassVar[int | None] = 30  # None: the strategy decides when it is done

    server_lr: float = option(1.0, "server step applied to the averaged update", float, lo=0, lo_open=True)
    outlier_ratio: float = option(1e3, "reject an update whose norm exceeds this multiple of the median "
                                       "update norm of the round (needs ≥ 3 answering clients; inf: no screen)",
                                  float, lo=1, lo_open=True, finite=False)

    def forms_jacobians(self) -> bool:
        return self.local == "gn"


@dataclass(frozen=True)
class FedProxConfig(FedAvgConfig):
    """FedProx: FedAvg with the proximal term ``μ/2 ‖θ_m − θ_k‖²`` in the local loss."""

    method: ClassVar[str] = "fedprox"

    mu: float = option(0.01, "proximal weight μ (0: FedAvg's local loss)", float, lo=0)


class AveragingStrategy(Strategy):
    """Sampled clients send local updates; ``aggregator`` merges them (FedAvg's weighted mean)."""

    name = "fedavg"
    #: the query each sampled client is sent (its handler answers ``{"delta", "n", ...}``): a method whose clients
    #: answer another query (their own local step) sets this and keeps :meth:`configure_round`
    query: ClassVar[str] = "update"

    def __init__(self, aggregator, local: LocalConfig, seed: int = 0):
        self.agg = aggregator
        self.local = local
        self.seed = int(seed)
        self.theta = None
        self.loss_sum = None

    # --- the request ------------------------------------------------------------
    def request_config(self, run, k: int) -> dict:
        """Plain config values of round ``k``'s ``update`` request (JSON-able)."""
        return {"local": dataclasses.asdict(self.local), "curvature": None,
                "seed": self.seed * 1_000_003 + k * 1009, "round": int(k), "deadline_s": run.time_left()}

    def down_floats(self, p: int) -> int:
        """Floats sent to each asked client: the broadcast θ."""
        return p

    def configure_round(self, run, k):
        answering, _dropped = run.sample()
        if not answering:
            return None
        theta = self.theta
        p = theta.numel()
        return Exchange(answering, Request(self.query, {"theta": theta}, self.request_config(run, k)),
                        lambda m: self.agg.validate(m, p, theta.dtype), down_floats=self.down_floats(p))

    # --- aggregation --------------------------------------------------------------
    def merge(self, theta, ok: dict, k: int | None = None):
        """The next global parameters from round ``k``'s accepted messages."""
        return self.agg.aggregate(theta, ok, server_round=k)

    def aggregate_round(self, run, k, replies: Replies):
        if not replies.ok:
            run.fail("aggregation")
        self.theta = self.merge(self.theta, replies.ok, k)
        return {"answered": len(replies.ok)}

    def resampled(self, run):
        """Fresh collocation points (``resample``): the clients' row counts may change; nothing else refers to them."""
        self.agg.enrolled = {}
        return {}

    def state_dict(self):
        return {"theta": self.theta, "enrolled": dict(self.agg.enrolled)}

    def load_state_dict(self, d):
        self.theta = d["theta"]
        self.agg.enrolled = dict(d.get("enrolled", {}))  # sample counts fixed at enrollment

    def summary(self):
        out = {"local": self.local.solver, "local_steps": self.local.steps, "lr": self.local.lr,
               "server_lr": getattr(self.agg, "server_lr", None)}
        if self.local.prox > 0:
            out["mu"] = self.local.prox
        if self.local.solver == "gn":
            out["local_damping"] = self.local.damping
        rule = getattr(self.agg, "rule", None)  # the byzantine defence as resolved (fedsciml.runtime.robust)
        if rule is not None and not rule.plain:
            out.update(robust=rule.rule, trim=rule.trim, clip_norm=rule.clip_norm)
        return out


# --- the strategy factories, the settings text and the registry entries ----------------------------------


def _averaging(cfg, ctx: RunContext, mu: float | None = None):
    """FedAvg's strategy; FedProx's with its ``mu``."""
    lc = local_config(cfg, 0.0 if mu is None else mu)
    agg = FedAvgAggregator(server_lr=cfg.server_lr, robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm,
                           outlier_ratio=cfg.outlier_ratio)
    return AveragingStrategy(agg, lc, ctx.seed)


def fedavg_strategy(cfg: FedAvgConfig, ctx: RunContext):
    """FedAvg (paper Eq. 3): data-size weighted average of local updates."""
    return _averaging(cfg, ctx)


def fedprox_strategy(cfg: FedProxConfig, ctx: RunContext):
    """FedProx: FedAvg whose local loss carries the proximal term ``μ/2 ‖θ_m − θ_k‖²``."""
    return _averaging(cfg, ctx, cfg.mu)


def fedprox_settings(r) -> str:
    """The summary table's settings text of a fedprox run: the local solver and μ."""
    return ", ".join([*local_settings(r), f"μ={r.options.get('mu')}"])


#: ``fedavg``'s and ``fedprox``'s registry entries, their :class:`~fedsciml.runtime.driver.Method` s
#: (:mod:`fedsciml.methods` registers every built-in module's entries, in one fixed order)
METHOD_ENTRIES = (
    Method("fedavg", FedAvgConfig, strategy=fedavg_strategy,
           description="FedAvg, data-size weighted average of local updates"),
    Method("fedprox", FedProxConfig, strategy=fedprox_strategy,
           description="FedProx, FedAvg with a proximal term μ", settings=fedprox_settings),
)
