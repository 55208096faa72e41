"""Typed options of the image methods, declared once (:func:`fedsciml.options.option`).

* :class:`ImageConfig` — what one run of an image method takes through the one driver
  (:func:`fedsciml.runtime.driver.plan`): the protocol and the round loop's options.
* :class:`TrainConfig` — the clients' training recipe and every method's knobs, part of the image task and
  sent as plain values with each request.

The options of ``python -m fedsciml bench images`` are declared in :class:`fedsciml.images.bench.BenchImagesOptions`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedsciml.options import PATH, MethodConfig, OptionError, display, option

PROTOCOLS = ("one-shot", "rounds")  # of one method's run; bench images adds warmup-refine (a warm-up, then rounds)


@dataclass
class TrainConfig:
    """The clients' training recipe and each method's knobs: the plain struct sent with every request (its
    fields as a dict) and stored with checkpoints; also :class:`fedsciml.images.methods.TrainConfig`."""

    epochs: int = 30
    lr: float = 0.01
    momentum: float = 0.9
    batch_size: int = 64
    prox_mu: float = 0.01
    # FIPA
    rank: int = 10
    oversample: int = 10
    power_iters: int = 3
    beta: float = 0.0        # extra regularization, relative: beta · max_m (N_m/N) λ_max,m
    gamma: float = 1.0
    tail: bool = True        # isotropic tail floor τ_m = λ_r,m per client (complement correction)
    # FedAvg/FedProx robust aggregation (fedsciml.runtime.robust): "mean" | "median" | "trimmed", trim ∈ [0, 0.5),
    # clip_norm None (off) or C > 0
    robust: str = "mean"
    trim: float = 0.2
    clip_norm: float | None = None
    # FedFish
    fedfish_lr: float = 0.01  # learning rate of the server Adam (FedFish; FedAvg with server_opt="adam")
    # server optimizer of multi-round FedAvg and FedFish: "default" (FedAvg plain average, FedFish server Adam),
    # "avg" (both add their merged delta: θ + Δ), "adam" (both use it as the pseudo-gradient of the server Adam)
    server_opt: str = "default"
    # FedFisher
    fedfisher_steps: int = 2000
    fedfisher_lr: float = 0.01
    fedfisher_start: str = "samples"  # "samples": Σ(n_i/N)w_i (default); "uniform": (1/K)Σw_i (the paper's Alg. 1)
    # FedBEns
    modes: int = 5
    temperature: float = 0.1
    prior_var: float = 0.1
    fedbens_steps: int = 300
    fedbens_lr: float = 1e-3
    # RegMean
    regmean_alphas: tuple = (0.1, 0.5, 0.9)
    device: str = "cpu"


@dataclass(frozen=True)
class ImageConfig(MethodConfig):
    """One image method's run on the round loop.  ``rounds=None``: one round for the one-shot protocol (the
    strategy is done after it), 15 for ``rounds``.  The clients' training recipe (:class:`TrainConfig`) is the
    task's (:class:`fedsciml.images.methods.ImageTask`), as a problem's options are the problem's."""

    method: ClassVar[str] = "images"

    protocol: str = option("one-shot", "one-shot (every client trains once from the shared initialization, one "
                                       "merge) or rounds (multi-round)", str, choices=PROTOCOLS)
    rounds: int | None = option(None, "communication rounds (a run of none would report no accuracy)", int, lo=1,
                                none="one-shot: one round; rounds: 15")
    dropout: float = option(0.0, "probability that a sampled client fails to answer", float, lo=0, hi=1,
                            hi_open=True)
    checkpoint: str | None = option(None, "directory for per-round checkpoints (protocol rounds)", PATH,
                                    none="no checkpoints", metavar="DIR")
    resume: bool = option(False, "resume from the checkpoint in --checkpoint", bool)
    transport: str = option("local", "how requests reach the clients: local or bytes (every request and reply "
                                     "round-tripped through bytes)", str, choices=("local", "bytes"))

    def forms_jacobians(self) -> bool:
        return False

    def _resolve(self):
        if self.rounds is None and self.protocol == "rounds":
            self._set("rounds", 15)
        if self.protocol == "one-shot" and self.rounds not in (None, 1):
            raise OptionError(f"a one-shot image method has a single round; {display('rounds')}={self.rounds} "
                              "applies to protocol rounds")
        if self.protocol == "one-shot" and self.checkpoint:
            raise OptionError(f"{display('checkpoint')}/{display('resume')} apply to the multi-round protocols "
                              "(a one-shot method has a single round)")
        if self.resume and not self.checkpoint:
            raise OptionError(f"{display('resume')} needs {display('checkpoint')} DIR (the directory the "
                              "interrupted run wrote)")
