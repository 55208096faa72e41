"""The one round loop of every method that has a strategy: typed configuration → round settings → transport →
resampling → :class:`~fedsciml.runtime.loop.Simulation` → ``(θ, history rows, info)``.

A method declares its strategy factory ``build(config, ctx) -> (strategy, record)`` on its
:class:`~fedsciml.runtime.driver.Method`; :func:`run_strategy` is what runs it (the driver calls it for every
federated method, in process and over any engine's transport).  ``ctx`` is a :class:`RunContext`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from fedsciml.runtime.client import Client
from fedsciml.runtime.loop import RoundConfig, Simulation
from fedsciml.runtime.resample import Growth, ResamplingStrategy, check_resample, resampled_objectives
from fedsciml.runtime.transport import BytesTransport, LocalTransport, Transport

TRANSPORTS = ("local", "bytes")


@dataclass(frozen=True)
class RunContext:
    """What a strategy factory is given besides the configuration: the problem, the clients' objectives (the
    server reads their sizes), θ₀, the seed, the round settings and the run's evaluation of θ (``evaluate(θ) ->
    {metric: value}``; a factory whose model is more than θ returns its own, see :func:`run_strategy`)."""

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
    if resample is not None:  # fresh collocation points every `resample` rounds (fedsciml.runtime.resample)
        check_resample(problem, resample)
        if isinstance(transport, Transport) and not isinstance(transport, (LocalTransport, BytesTransport)):
            raise ValueError(f"resample needs the clients in this process (transport local or bytes); "
                             f"{type(transport).__name__}'s clients would have to draw their own points")
        n_clients, device = len(objectives), theta0.device
        strategy = ResamplingStrategy(strategy, resample,
                                      lambda j: resampled_objectives(problem, n_clients, seed, j, device, growth,
                                                                     resample))
        options = {**options, "resample": resample}
        if growth is not None:  # a Growth (fedsciml.runtime.resample): the points grow as the run goes
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


def run_strategy(name: str, build: Callable, problem, objectives, theta0, evaluate, cfg, *, seed: int = 0,
                 progress: bool = False, every: int = 10, message_hook=None, transport=None):
    """Run the strategy of method ``name`` built by ``build(cfg, ctx) -> (strategy, record)``: the round settings,
    the transport (``transport``, a :class:`Transport` such as an engine's, or the one ``cfg.transport`` names,
    vectorized across the clients unless ``cfg.batched`` is false), resampling and the round loop are this
    module's; the method says what its strategy is and what to record of its settings.  A factory whose model is
    more than θ (one-shot's ``fit_intercept``) returns ``(strategy, record, evaluate)``: the history's evaluation of
    θ, in place of ``evaluate``."""
    rc = round_config(cfg, seed)
    built = build(cfg, RunContext(problem, objectives, theta0, seed, rc, evaluate))
    if not isinstance(built, tuple) or len(built) not in (2, 3):
        raise TypeError(f"{name}: a strategy factory returns (strategy, record) or (strategy, record, evaluate), "
                        f"got {type(built).__name__}")
    strategy, record = built[0], built[1]
    if len(built) == 3:
        evaluate = built[2]
    return simulate(name, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every, record,
                    message_hook, transport or cfg.transport, getattr(cfg, "batched", True),
                    resample=getattr(cfg, "resample", None), growth=Growth.of(cfg))
