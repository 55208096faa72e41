"""Server-side optimizers for the averaging methods: FedAvgM, FedAdam and FedYogi (one file: configs, aggregator,
strategy, runners and their registry entries).

Reddi et al., "Adaptive Federated Optimization" (ICLR 2021), Algorithm 2: the clients train locally exactly
as in FedAvg and send ``{"delta", "n"}``; the server treats the (sample-weighted, optionally robust) average
update ``Δ_t = Σ (N_m/N) Δθ_m`` as a pseudo-gradient step and feeds it to an optimizer with state:

* ``fedavgm`` — server momentum (Hsu et al. 2019): ``m_t = β m_{t−1} + Δ_t``, ``θ ← θ + η m_t``;
* ``fedadam`` — ``m_t = β₁ m_{t−1} + (1−β₁) Δ_t``, ``v_t = β₂ v_{t−1} + (1−β₂) Δ_t²``,
  ``θ ← θ + η m_t / (√v_t + τ)``;
* ``fedyogi`` — as FedAdam with ``v_t = v_{t−1} − (1−β₂) Δ_t² sign(v_{t−1} − Δ_t²)``.

Decisions where the paper leaves room (written here and in the option help):

* No bias correction, as Algorithm 2 (Flower's ``FedAdam`` applies Adam's bias correction to η; ours does not,
  so η means the paper's η).  ``v_0 = τ²`` (the paper's "v_{-1} ≥ τ²"), ``m_0 = 0``.
* Defaults: β₁ = 0.9, β₂ = 0.99 (the paper's), τ = 1e-3 (the paper tunes τ ∈ {1e-1 … 1e-5}; 1e-3 is its most
  frequent best value); η = 1e-2 for FedAdam/FedYogi (the paper's grid is 10^{−3…1}), η = 1 and β = 0.9 for
  FedAvgM.
* The averaging step ``Δ_t`` is FedAvg's aggregator with η_s = 1 (its robust rules, clipping and outlier
  screen apply unchanged); the optimizer state ``(m, v, t)`` is part of the strategy's checkpoint, so a
  resumed run continues bitwise.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.methods.averaging import AveragingStrategy
from fedsciml.methods.run import local_config
from fedsciml.runtime.driver import Method
from fedsciml.methods.averaging import FedAvgConfig
from fedsciml.options import option

SERVER_OPTIMIZERS = ("avgm", "adam", "yogi")


# --- configurations --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FedAvgMConfig(FedAvgConfig):
    """FedAvgM: FedAvg with server momentum ``m ← β m + Δ``, ``θ ← θ + η m``."""

    method: ClassVar[str] = "fedavgm"

    server_momentum: float = option(0.9, "server momentum β of FedAvgM", float, lo=0, hi=1, hi_open=True)


@dataclass(frozen=True)
class FedAdamConfig(FedAvgConfig):
    """FedAdam (Reddi et al. 2021): Adam on the server over the averaged client update."""

    method: ClassVar[str] = "fedadam"

    server_lr: float = option(1e-2, "server step η of the adaptive update (no bias correction, as the paper)",
                              float, lo=0, lo_open=True)
    beta1: float = option(0.9, "server first-moment decay β₁", float, lo=0, hi=1, hi_open=True)
    beta2: float = option(0.99, "server second-moment decay β₂", float, lo=0, hi=1, hi_open=True)
    tau: float = option(1e-3, "adaptivity τ: added to √v (and v₀ = τ²)", float, lo=0, lo_open=True)


@dataclass(frozen=True)
class FedYogiConfig(FedAdamConfig):
    """FedYogi (Reddi et al. 2021): FedAdam with Yogi's additive second-moment update."""

    method: ClassVar[str] = "fedyogi"


# --- the server optimizer --------------------------------------------------------------------------


class ServerOptAggregator(FedAvgAggregator):
    """FedAvg's (robust) weighted average as a pseudo-gradient, then a stateful server step (module docstring)."""

    def __init__(self, kind: str, server_lr: float, *, momentum: float = 0.9, beta1: float = 0.9,
                 beta2: float = 0.99, tau: float = 1e-3, **fedavg):
        if kind not in SERVER_OPTIMIZERS:
            raise ValueError(f"server optimizer must be one of {', '.join(SERVER_OPTIMIZERS)}, got {kind!r}")
        super().__init__(server_lr=1.0, **fedavg)  # Δ_t: the plain (or robust) average update
        self.kind, self.eta = kind, float(server_lr)
        self.momentum, self.beta1, self.beta2, self.tau = float(momentum), float(beta1), float(beta2), float(tau)
        self.m: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.t = 0

    def aggregate(self, theta: torch.Tensor, messages, server_round: int | None = None) -> torch.Tensor:
        delta = super().aggregate(theta, messages, server_round) - theta
        if self.m is None:
            self.m = torch.zeros_like(theta)
            self.v = torch.full_like(theta, self.tau ** 2)
        self.t += 1
        if self.kind == "avgm":
            self.m = self.momentum * self.m + delta
            return theta + self.eta * self.m
        self.m = self.beta1 * self.m + (1 - self.beta1) * delta
        d2 = delta * delta
        if self.kind == "adam":
            self.v = self.beta2 * self.v + (1 - self.beta2) * d2
        else:  # yogi
            self.v = self.v - (1 - self.beta2) * d2 * torch.sign(self.v - d2)
        return theta + self.eta * self.m / (self.v.sqrt() + self.tau)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "m": self.m, "v": self.v, "t": self.t}

    def load_state_dict(self, d: dict) -> None:
        from fedsciml.runtime import checkpoint as ckpt

        super().load_state_dict(d)
        for key in ("m", "v", "t"):
            if key not in d:
                raise ckpt.CheckpointError(f"state field {key!r} of the server optimizer is missing")
        t = ckpt.restored_number(d, "t", lo=0, integer=True)
        m = ckpt.restored_tensor(d, "m", optional=t == 0)
        v = ckpt.restored_tensor(d, "v", optional=t == 0, nonneg=self.kind == "adam",
                                 shape=None if m is None else tuple(m.shape))
        if (m is None) != (v is None):
            raise ckpt.CheckpointError("state fields 'm' and 'v' of the server optimizer: one is missing")
        self.m, self.v, self.t = m, v, int(t)


class ServerOptStrategy(AveragingStrategy):
    """:class:`AveragingStrategy` whose aggregator keeps a server optimizer's state across rounds."""

    def state_dict(self):
        return {"theta": self.theta, "aggregator": self.agg.state_dict()}

    def load_state_dict(self, d):
        from fedsciml.runtime import checkpoint as ckpt

        if not isinstance(d.get("aggregator"), dict):
            raise ckpt.CheckpointError("state field 'aggregator' (the server optimizer's state) is missing")
        self.theta = d["theta"]
        self.agg.load_state_dict(d["aggregator"])

    def check_restored(self, round_index):
        super().check_restored(round_index)
        from fedsciml.runtime import checkpoint as ckpt

        for key in ("m", "v"):
            val = getattr(self.agg, key, None)
            if val is not None and tuple(val.shape) != tuple(self.theta.shape):
                raise ckpt.CheckpointError(f"state field {key!r} has shape {tuple(val.shape)}, the parameters "
                                           f"{tuple(self.theta.shape)}")

    def summary(self):
        out = {**super().summary(), "server_opt": self.agg.kind, "server_lr": self.agg.eta}
        if self.agg.kind == "avgm":
            out["server_momentum"] = self.agg.momentum
        else:
            out.update(beta1=self.agg.beta1, beta2=self.agg.beta2, tau=self.agg.tau)
        return out


# --- runners -----------------------------------------------------------------------------------------


def _factory(kind: str):
    """The strategy factory of server optimizer ``kind`` (run by :func:`fedsciml.runtime.simulate.run_strategy`)."""

    def build(cfg, ctx):
        extra = ({"momentum": cfg.server_momentum} if kind == "avgm"
                 else {"beta1": cfg.beta1, "beta2": cfg.beta2, "tau": cfg.tau})
        agg = ServerOptAggregator(kind, cfg.server_lr, robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm,
                                  outlier_ratio=cfg.outlier_ratio, **extra)
        return ServerOptStrategy(agg, local_config(cfg), ctx.seed)
    return build


#: the registry entries, FedAvgM (FedAvg with server momentum), FedAdam and FedYogi (Reddi et al. 2021,
#: Algorithm 2): their :class:`~fedsciml.runtime.driver.Method` s (:mod:`fedsciml.methods` registers every
#: built-in module's entries, in one fixed order)
METHOD_ENTRIES = (
    Method("fedavgm", FedAvgMConfig, strategy=_factory("avgm"), description="FedAvg with server momentum (FedAvgM)"),
    Method("fedadam", FedAdamConfig, strategy=_factory("adam"),
           description="FedAvg with Adam on the server (FedAdam, Reddi et al. 2021)"),
    Method("fedyogi", FedYogiConfig, strategy=_factory("yogi"),
           description="FedAvg with Yogi on the server (FedYogi, Reddi et al. 2021)"),
)
