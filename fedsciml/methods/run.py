"""What every federated method's run shares: its typed configuration, its round settings, the clients behind a
transport, the round loop and the record of what ran — so that a method says only what its strategy is.

A method in one file (the pattern; ``examples/fedavg_lr_schedule.py`` is a complete one)::

    from fedsciml.methods.run import local_config, strategy_runner
    from fedsciml.runtime.driver import register_method

    def build(cfg, ctx):                      # cfg: the method's typed configuration; ctx: a RunContext
        strategy = MyStrategy(..., local_config(cfg), ctx.seed)
        return strategy, {"local": cfg.local, ...}   # the strategy, and the record of what it ran with

    register_method("my-method", MyConfig, strategy_runner(MyConfig, build), "what it does",
                    settings=lambda r: "its settings text")

:func:`strategy_runner` turns the factory into a runner of the registry's signature; the driver plans and runs it
as any built-in method (``fs.solve``, ``python -m fedsciml solve --plugin FILE --method my-method``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from fedsciml.methods.local import LocalConfig
from fedsciml.runtime.client import Client
from fedsciml.runtime.loop import RoundConfig, Simulation
from fedsciml.runtime.transport import BytesTransport, LocalTransport, Transport

TRANSPORTS = ("local", "bytes")


@dataclass(frozen=True)
class RunContext:
    """What a strategy factory is given besides the configuration: the problem, the clients' objectives (the
    server reads their sizes), θ₀, the seed, the round settings and the run's evaluation of θ (``evaluate(θ) ->
    {metric: value}``; a factory whose model is more than θ returns its own, see :func:`strategy_runner`)."""

    problem: Any
    objectives: Sequence
    theta0: torch.Tensor
    seed: int
    rounds: RoundConfig
    evaluate: Callable | None = None


def round_config(cfg, seed) -> RoundConfig:
    """The round loop's settings from a typed configuration's :class:`~fedsciml.options.RoundOptions` fields."""
    # the typed RoundOptions already checked these values: the loop does not check them again
    return RoundConfig(rounds=cfg.rounds, budget=cfg.budget, clock=cfg.clock, tol=cfg.tol,
                       participation=cfg.participation, dropout=cfg.dropout, seed=seed, checkpoint=cfg.checkpoint,
                       resume=cfg.resume, checked=True)


def local_config(cfg, prox: float = 0.0) -> LocalConfig:
    """The clients' local training from a typed configuration's :class:`~fedsciml.options.LocalOptions` fields
    (``prox``: FedProx's μ)."""
    # built from the typed LocalOptions, which checked these values (a hand-built LocalConfig calls .validate())
    return LocalConfig(solver=cfg.local, steps=cfg.local_steps, lr=cfg.lr, damping=cfg.local_damping,
                       prox=prox, loss=getattr(cfg, "local_loss", "mean"))


def capped_rank(rank: int, p: int, name: str) -> int:
    """A sketch or preconditioner rank above the model's ``p`` parameters holds nothing more than rank ``p``:
    capped there, with one log line (a rank of 10¹² would otherwise allocate and iterate for ever).  FIPA's rank,
    gn's and the centralized solver's Nyström rank."""
    if rank > p:
        logging.getLogger("fedsciml").warning("%s=%s is above the model's %s parameters; capped at %s", name, rank,
                                              p, p)
        return int(p)
    return int(rank)


def fingerprint(problem, method, objectives, theta0, seed, options):
    """What a checkpoint must match to be resumed."""
    # the network first ("architecture" sorts first, and a checkpoint names the first difference): resuming
    # with another network is refused naming both
    arch = problem.architecture() if callable(getattr(problem, "architecture", None)) else None
    return {"architecture": arch, "problem": getattr(problem, "name", None),
            "problem_options": dict(getattr(problem, "options", {}) or {}),
            "method": method, "options": options, "clients": len(objectives), "seed": int(seed),
            "n_params": int(theta0.numel()), "n_residuals": [int(o.n_residuals) for o in objectives]}


def make_transport(objectives, transport="local", vectorize: bool = True, device="cpu"):
    """The clients of ``objectives`` behind a transport: ``"local"`` (in-process, vectorized across clients)
    or ``"bytes"`` (the same, with every request and reply round-tripped through bytes); a
    :class:`~fedsciml.runtime.transport.Transport` instance is used as it is (e.g. Flower's, whose
    clients live on other nodes)."""
    if isinstance(transport, Transport):
        return transport
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    local = LocalTransport([Client(i, o) for i, o in enumerate(objectives)], vectorize=vectorize)
    return BytesTransport(local, device=device) if transport == "bytes" else local


def simulate(method, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every, options, message_hook,
             transport="local", vectorize=True, resample=None, growth=None):
    """Run ``strategy`` from ``theta0`` with the clients of ``objectives``: ``(θ, history rows, info)``, ``info``
    holding the loop's counters, the strategy's :meth:`~fedsciml.runtime.strategy.Strategy.info` and ``options``
    (the record of what ran)."""
    if resample is not None:  # fresh collocation points every `resample` rounds (fedsciml.methods.resample)
        from fedsciml.methods.resample import ResamplingStrategy, check_resample, resampled_objectives

        check_resample(problem, resample)
        if isinstance(transport, Transport) and not isinstance(transport, (LocalTransport, BytesTransport)):
            raise ValueError(f"resample needs the clients in this process (transport local or bytes); "
                             f"{type(transport).__name__}'s clients would have to draw their own points")
        n_clients, device = len(objectives), theta0.device
        strategy = ResamplingStrategy(strategy, resample,
                                      lambda j: resampled_objectives(problem, n_clients, seed, j, device, growth,
                                                                     resample))
        options = {**options, "resample": resample}
        if growth is not None:  # a Growth (fedsciml.methods.resample): the points grow as the run goes
            options.update(grow=growth.factor, grow_every=growth.every, grow_cap=growth.cap)
    sim = Simulation(make_transport(objectives, transport, vectorize, theta0.device), evaluate, rc, label=method,
                     progress=progress, every=every,
                     fingerprint=fingerprint(problem, method, objectives, theta0, seed, options),
                     message_hook=message_hook)
    try:
        theta, rows, info = sim.run(strategy, theta0)
    except BaseException as e:  # an interrupted or failed run's partial result records its options too
        if getattr(e, "partial", None) is not None:
            e.partial[2]["options"] = options  # type: ignore[attr-defined]
        raise
    info.update(strategy.info())
    info["options"] = options
    return theta, rows, info


def typed_config(cls, config, options, transport=None):
    """``(config, transport)``: the method's typed configuration — ``config`` as given, or built (and checked)
    from keyword ``options`` — and a :class:`Transport` instance that replaces ``config.transport`` (e.g.
    Flower's; ``None``: the one the configuration names).  A transport given by name is a config option."""
    if isinstance(transport, str):
        options = {**options, "transport": transport}
        transport = None
    elif transport is not None and not isinstance(transport, Transport):
        raise TypeError(f"transport must be 'local', 'bytes' or a Transport, got {type(transport).__name__}")
    if config is None:
        return cls.from_options(options), transport
    if options:
        raise TypeError(f"give the {cls.method} options either as config or as keywords, not both "
                        f"(got config and {', '.join(sorted(options))})")
    if type(config) is not cls:
        raise TypeError(f"{cls.method} needs a {cls.__name__}, got {type(config).__name__}")
    return config, transport


def strategy_runner(config_cls, build: Callable[[Any, RunContext], tuple]) -> Callable:
    """A runner for :func:`~fedsciml.runtime.driver.register_method` from a strategy factory
    ``build(config, ctx) -> (strategy, record)``: the typed configuration (``config_cls``, its ``method`` the
    label), the round settings, the transport (vectorized across the clients unless the configuration says
    ``batched=False``), resampling and the round loop are this module's; the method says what its strategy is and
    what to record of its settings.  A factory whose model is more than θ (one-shot's ``fit_intercept``) returns
    ``(strategy, record, evaluate)``: the history's evaluation of θ, in place of ``ctx.evaluate``."""

    def runner(problem, objectives, theta0, evaluate, config=None, *, progress=False, seed=0, every=10,
               message_hook=None, transport=None, **options):
        cfg, transport = typed_config(config_cls, config, options, transport)
        rc = round_config(cfg, seed)
        built = build(cfg, RunContext(problem, objectives, theta0, seed, rc, evaluate))
        if not isinstance(built, tuple) or len(built) not in (2, 3):
            raise TypeError(f"{config_cls.method}: a strategy factory returns (strategy, record) or (strategy, "
                            f"record, evaluate), got {type(built).__name__}")
        strategy, record = built[0], built[1]
        if len(built) == 3:
            evaluate = built[2]
        from fedsciml.methods.resample import Growth

        return simulate(config_cls.method, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every,
                        record, message_hook, transport or cfg.transport, getattr(cfg, "batched", True),
                        resample=getattr(cfg, "resample", None), growth=Growth.of(cfg))

    runner.__doc__ = f"Run {config_cls.method} ({config_cls.__name__}); built by strategy_runner."
    runner.build = build  # type: ignore[attr-defined]  # what the method is: its strategy factory
    return runner
