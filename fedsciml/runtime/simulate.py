"""The one round loop of every method that has a strategy: typed configuration → round settings → transport →
resampling → :class:`~fedsciml.runtime.loop.Simulation` → ``(θ, history rows, info)``.

A method declares its strategy factory ``build(config, ctx) -> strategy`` on its
:class:`~fedsciml.runtime.driver.Method`; :func:`run_strategy` is what runs it (the driver calls it for every
federated method, in process and over any engine's transport).  ``ctx`` is a :class:`RunContext`.  What ran is
recorded once: the configuration (``Result.options``, the driver's) and the strategy's resolved settings
(:meth:`~fedsciml.runtime.strategy.Strategy.summary`, ``Result.extra["strategy"]``) with its counters
(:meth:`~fedsciml.runtime.strategy.Strategy.info`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from fedsciml.runtime.client import Client
from fedsciml.runtime.loop import RoundConfig, Simulation
from fedsciml.runtime.resample import Growth, ResamplingStrategy, check_resample, resampled_objectives
from fedsciml.runtime.strategy import Strategy
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


_LOOP_FIELDS = ("rounds", "budget", "clock", "tol", "participation", "dropout", "checkpoint", "resume")

#: the configuration's fields a resumed run may change (how long it runs, where it checkpoints, how messages are
#: carried): every other field is part of the checkpoint's fingerprint
RESUMABLE = ("rounds", "budget", "clock", "tol", "checkpoint", "resume", "transport", "batched")


def round_config(cfg, seed) -> RoundConfig:
    """The round loop's settings from a typed configuration's :class:`~fedsciml.options.RoundOptions` fields (a
    configuration that declares only some of them — the ridge SGD baselines': rounds, participation, dropout —
    runs with the loop's own setting for the others: no budget, no tolerance, no checkpoint)."""
    # the typed options already checked these values: the loop does not check them again
    return RoundConfig(**{f: getattr(cfg, f) for f in _LOOP_FIELDS if hasattr(cfg, f)}, seed=seed, checked=True)


def fingerprint_options(cfg) -> dict:
    """The options a checkpoint must match: ``cfg.to_dict()`` less the fields a resumed run may change
    (:data:`RESUMABLE`)."""
    return {k: v for k, v in cfg.to_dict().items() if k not in RESUMABLE}


def fingerprint(problem, method, objectives, theta0, seed, options):
    """What a checkpoint must match to be resumed (``options``: :func:`fingerprint_options`)."""
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


def simulate(method, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every, config, message_hook,
             transport="local", vectorize=True, resample=None, growth=None):
    """Run ``strategy`` from ``theta0`` with the clients of ``objectives``: ``(θ, history rows, info)``, ``info``
    holding the loop's counters, the strategy's settings (``info["strategy"]``:
    :meth:`~fedsciml.runtime.strategy.Strategy.summary`) and counters (its
    :meth:`~fedsciml.runtime.strategy.Strategy.info`); ``config`` (the typed configuration) is the checkpoint's
    fingerprint, and the driver's record of the options."""
    if resample is not None:  # fresh collocation points every `resample` rounds (fedsciml.runtime.resample)
        check_resample(problem, resample)
        if isinstance(transport, Transport) and not isinstance(transport, (LocalTransport, BytesTransport)):
            raise ValueError(f"resample needs the clients in this process (transport local or bytes); "
                             f"{type(transport).__name__}'s clients would have to draw their own points")
        n_clients, device = len(objectives), theta0.device
        strategy = ResamplingStrategy(strategy, resample,
                                      lambda j: resampled_objectives(problem, n_clients, seed, j, device, growth,
                                                                     resample))
    theta, rows, info = run_loop(make_transport(objectives, transport, vectorize, theta0.device), strategy, theta0,
                                 evaluate, rc, label=method, progress=progress, every=every, message_hook=message_hook,
                                 fingerprint=fingerprint(problem, method, objectives, theta0, seed,
                                                         fingerprint_options(config)))
    info.update(strategy.info())
    return theta, rows, info


def run_loop(transport: Transport, strategy: Strategy, theta0: torch.Tensor, evaluate: Callable | None,
               rc: RoundConfig, *, round_evaluate: Callable | None = None, label: str = "", progress: bool = False,
               every: int = 10, fingerprint: dict | None = None, message_hook=None):
    """The one place a round loop (:class:`~fedsciml.runtime.loop.Simulation`) is built and run: ``strategy`` from
    ``theta0`` over ``transport``'s clients; ``(θ, history rows, the loop's report)``.  The history's metrics are
    ``evaluate(θ)``, or ``round_evaluate(θ, k)`` where they depend on the round ``k`` being recorded (the image
    benchmarks evaluate every few rounds and say so) — one of the two."""
    if (evaluate is None) == (round_evaluate is None):
        raise TypeError("run_loop takes evaluate(θ) or round_evaluate(θ, k), one of them")
    sim: Simulation | None = None

    def at_round(theta):
        assert sim is not None and round_evaluate is not None
        return round_evaluate(theta, sim.round_index)

    sim = Simulation(transport, evaluate if evaluate is not None else at_round, rc, label=label, progress=progress,
                     every=every, fingerprint=fingerprint, message_hook=message_hook)
    return sim.run(strategy, theta0)


def run_strategy(name: str, build: Callable, problem, objectives, theta0, evaluate, cfg, *, seed: int = 0,
                 progress: bool = False, every: int = 10, message_hook=None, transport=None,
                 clients: Callable | None = None):
    """Run the strategy of method ``name`` built by ``build(cfg, ctx) -> strategy``: the round settings, the
    transport (``transport``, a :class:`Transport` such as an engine's, or the one ``cfg.transport`` names,
    vectorized across the clients unless ``cfg.batched`` is false), resampling and the round loop are this
    module's; the method says what its strategy is (its settings are recorded from the strategy's ``summary()``,
    the options from ``cfg``).  A factory whose model is more than θ (one-shot's ``fit_intercept``) returns
    ``(strategy, evaluate)``: the history's evaluation of θ, in place of ``evaluate``.  ``clients(objectives, cfg, device) -> Transport``: the method's own clients in
    this process (where no ``transport`` instance is given)."""
    rc = round_config(cfg, seed)
    built = build(cfg, RunContext(problem, objectives, theta0, seed, rc, evaluate))
    strategy = built
    if isinstance(built, tuple):
        if len(built) != 2 or not callable(built[1]):
            raise TypeError(f"{name}: a strategy factory returns its strategy, or (strategy, evaluate); got a tuple "
                            f"of {len(built)} whose second is {type(built[1]).__name__ if len(built) > 1 else 'absent'}"
                            f" (a record of settings is no longer returned: the strategy's summary() is recorded)")
        strategy, evaluate = built
    if not isinstance(strategy, Strategy):
        raise TypeError(f"{name}: a strategy factory returns a fedsciml.runtime.strategy.Strategy, got "
                        f"{type(strategy).__name__}")
    if transport is None and clients is not None:
        transport = clients(objectives, cfg, theta0.device)
    return simulate(name, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every, cfg,
                    message_hook, transport or cfg.transport, getattr(cfg, "batched", True),
                    resample=getattr(cfg, "resample", None), growth=Growth.of(cfg))
