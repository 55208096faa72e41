"""A new federated method in one file: FedAvg with a server learning-rate schedule.

``η_k = server_lr · lr_decay^⌊(k − 1) / decay_every⌋`` in round ``k = 1, 2, …`` (step decay); everything else is
FedAvg's — the clients' local training, the weighted mean of their updates, the robust rules.  The file holds the whole method:
its configuration (its options become CLI flags), its strategy, the factory that builds the strategy from the
configuration, its settings text, and its registration.  It uses public modules only (no ``_private`` import)::

    python -m fedsciml solve bratu --clients 4 --plugin examples/fedavg_lr_schedule.py \\
        --method fedavg-decay --lr-decay 0.5 --decay-every 10

    import runpy, fedsciml as fs
    runpy.run_path("examples/fedavg_lr_schedule.py")
    fs.solve("bratu", method="fedavg-decay", clients=4, lr_decay=0.5)
"""
from dataclasses import dataclass
from typing import ClassVar

from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.methods.averaging import AveragingStrategy
from fedsciml.methods.run import local_config
from fedsciml.methods.averaging import FedAvgConfig
from fedsciml.methods.local import local_settings
from fedsciml.options import option
from fedsciml.runtime.driver import METHODS, Method, register_method


@dataclass(frozen=True)
class FedAvgDecayConfig(FedAvgConfig):
    """FedAvg whose server step decays: ``η_k = server_lr · lr_decay^⌊(k − 1) / decay_every⌋``, rounds k ≥ 1."""

    method: ClassVar[str] = "fedavg-decay"

    lr_decay: float = option(0.5, "factor applied to the server step every decay_every rounds", float,
                             lo=0, lo_open=True, hi=1)
    decay_every: int = option(10, "rounds between two decays of the server step", int, lo=1)


class DecayStrategy(AveragingStrategy):
    """FedAvg's strategy with the server step of round ``k`` set before the merge."""

    name = "fedavg-decay"

    def __init__(self, aggregator, local, seed, server_lr: float, decay: float, every: int):
        super().__init__(aggregator, local, seed)
        self.server_lr, self.decay, self.every = float(server_lr), float(decay), int(every)

    def step_size(self, k: int) -> float:
        """The server step of round ``k`` (the loop counts rounds from 1)."""
        return self.server_lr * self.decay ** ((k - 1) // self.every)

    def aggregate_round(self, run, k, replies):
        self.agg.server_lr = self.step_size(k)
        return super().aggregate_round(run, k, replies)


def build(cfg: FedAvgDecayConfig, ctx):
    """The strategy of one run (its options are recorded from ``cfg``, its settings from ``summary()``)."""
    agg = FedAvgAggregator(server_lr=cfg.server_lr, robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm,
                           outlier_ratio=cfg.outlier_ratio)
    return DecayStrategy(agg, local_config(cfg), ctx.seed, cfg.server_lr, cfg.lr_decay, cfg.decay_every)


def settings(result) -> str:
    """The summary table's settings text."""
    o = result.options
    return ", ".join([*local_settings(result), f"η={o['server_lr']}·{o['lr_decay']}^⌊(k−1)/{o['decay_every']}⌋"])


if "fedavg-decay" not in METHODS:  # loading the file twice registers nothing twice
    register_method(Method("fedavg-decay", FedAvgDecayConfig, strategy=build,
                           description="FedAvg with a step-decay server learning-rate schedule "
                                       "(examples/fedavg_lr_schedule.py)", settings=settings))
