"""Federated methods registered in :data:`fedsciml.runner.METHODS`: ``gn``, ``fipa``, ``fedavg``, ``fedprox``,
``one-shot``.

Every runner has the runner signature
``fn(problem, objectives, theta0, evaluate, *, progress, seed, every, budget, tol, lr, rounds, ..., **opts)
-> (θ, history rows, info)`` and runs a :class:`~fedsciml.federated.simulation.Simulation`.

Defaults (chosen so that ``python -m fedsciml solve bratu --clients 4`` is
accurate and finishes well within a minute; see the README section
"Federated solving"):

* ``fipa``: rank 20 (``rank=0`` sends the full ``H_m``), thin-QR merge,
  local solver ``gn`` (an exact damped local Gauss–Newton step, relative
  damping 0, i.e. ``−H_m^† g_m``) with the server safeguard (β adapted by the
  LM rule), ``rounds=40``;  ``local='adam'`` gives the paper's τ Adam
  steps (``local_steps=100``, ``lr=1e-3``).
* ``fedavg`` / ``fedprox``: local Adam, ``local_steps=100``, ``lr=1e-3``,
  ``rounds=30``; FedProx ``mu=0.01``.
* ``gn``: LM with the centralized solver's settings, ``rounds=100``
  (iterations).
* ``one-shot``: one exchange of GN statistics at θ₀ and one fused step
  (ridge fusion for linear residuals), ``sigma=0`` extra damping.

With a ``budget`` and no ``rounds`` a run goes on until the budget is spent.
"""
from __future__ import annotations

from fedsciml.federated.aggregators import FedAvgAggregator, FIPAAggregator
from fedsciml.federated.averaging import AveragingStrategy
from fedsciml.federated.client import SKETCHES, AdaptiveSchedule, Client, LocalConfig
from fedsciml.federated.fipa import FIPAStrategy
from fedsciml.federated.gn import GNStrategy
from fedsciml.federated.oneshot import OneShotStrategy
from fedsciml.federated.simulation import RoundConfig, Simulation
from fedsciml.federated.transport import BytesTransport, LocalTransport, Transport
from fedsciml.runner import register_method
from fedsciml.solvers.lm import LMConfig, default_tau

DEFAULT_ROUNDS = {"gn": 100, "fipa": 40, "fedavg": 30, "fedprox": 30, "one-shot": None}  # one-shot: one round
DEFAULT_RANK = 20
TRANSPORTS = ("local", "bytes")


def _round_config(seed, rounds, budget, tol, participation, dropout, checkpoint, resume, method):
    if rounds is None and budget is None:
        rounds = DEFAULT_ROUNDS[method]
    return RoundConfig(rounds=rounds, budget=budget, tol=tol or 0.0,
                       participation=1.0 if participation is None else float(participation),
                       dropout=0.0 if dropout is None else float(dropout), seed=seed, checkpoint=checkpoint,
                       resume=bool(resume))


def _fingerprint(problem, method, objectives, theta0, seed, options):
    return {"problem": getattr(problem, "name", None), "problem_options": dict(getattr(problem, "options", {}) or {}),
            "method": method, "options": options, "clients": len(objectives), "seed": int(seed),
            "n_params": int(theta0.numel()), "n_residuals": [int(o.n_residuals) for o in objectives]}


def make_transport(objectives, transport="local", vectorize: bool = True, device="cpu"):
    """The clients of ``objectives`` behind a transport: ``"local"`` (in-process, vectorized across clients)
    or ``"bytes"`` (the same, with every request and reply round-tripped through bytes); a
    :class:`~fedsciml.federated.transport.Transport` instance is used as it is (e.g. Flower's, whose
    clients live on other nodes)."""
    if isinstance(transport, Transport):
        return transport
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    local = LocalTransport([Client(i, o) for i, o in enumerate(objectives)], vectorize=vectorize)
    return BytesTransport(local, device=device) if transport == "bytes" else local


def _simulate(method, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every, options, message_hook,
              transport="local", vectorize=True):
    sim = Simulation(make_transport(objectives, transport, vectorize, theta0.device), evaluate, rc, label=method, progress=progress,
                     every=every,
                     fingerprint=_fingerprint(problem, method, objectives, theta0, seed, options),
                     message_hook=message_hook)
    theta, rows, info = sim.run(strategy, theta0)
    info.update(strategy.info())
    info["options"] = options
    return theta, rows, info


@register_method("gn")
def run_gn(problem, objectives, theta0, evaluate, *, progress=False, seed=0, every=10, budget=None, tol=0.0,
           lr=None, rounds=None, participation=None, dropout=None, checkpoint=None, resume=False, lm_tau=None,
           max_retries=20, batched=True, message_hook=None, form="auto", transport="local", **ignored):
    """Exact federated Gauss–Newton (Levenberg–Marquardt on summed client statistics)."""
    if participation is not None and participation < 1:
        raise ValueError(f"gn takes an exact step on every client's statistics; participation={participation} < 1 "
                         "is not possible (use fipa/fedavg for partial participation)")
    rc = _round_config(seed, rounds, budget, tol, None, dropout, checkpoint, resume, "gn")
    if lm_tau is None:
        lm_tau = default_tau(objectives)
    if form == "auto":  # square roots when all clients' rows together are fewer than the parameters
        form = "sqrt" if sum(o.n_residuals for o in objectives) < theta0.numel() else "normal"
    options = {"lm_tau": lm_tau, "form": form}
    strategy = GNStrategy(LMConfig(tau=lm_tau, solve="auto" if form == "sqrt" else "normal"),
                          max_retries=max_retries, form=form)
    theta, rows, info = _simulate("gn", strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every,
                                  options, message_hook, transport, batched)
    if ignored:
        info["ignored_options"] = sorted(ignored)
    return theta, rows, info


def _local_config(local, local_steps, lr, damping, prox, default_solver):
    return LocalConfig(solver=local or default_solver, steps=100 if local_steps is None else int(local_steps),
                       lr=1e-3 if lr is None else float(lr), damping=0.0 if damping is None else float(damping),
                       prox=prox).validate()


@register_method("fipa")
def run_fipa(problem, objectives, theta0, evaluate, *, progress=False, seed=0, every=10, budget=None, tol=0.0,
             lr=None, rounds=None, rank=None, adaptive=False, merge=None, beta=None, gamma=None, local=None,
             local_steps=None, local_damping=None, sketch="auto", safeguard=None, complement=False, participation=None, dropout=None, checkpoint=None,
             resume=False, adapt_c=1e-3, adapt_ctau=1e-3, message_hook=None, transport="local", robust="mean",
             trim=0.2, clip_norm=None, **ignored):
    """FIPA (paper Eq. 6 / Eq. 13): curvature-weighted merge of local updates.

    ``robust`` / ``trim`` / ``clip_norm``: see :class:`~fedsciml.federated.aggregators.FIPAAggregator`."""
    rank = DEFAULT_RANK if rank is None else int(rank)
    if rank < 0:
        raise ValueError(f"FIPA rank must be ≥ 1 (low rank) or 0 (full-rank H_m), got {rank}")
    if sketch not in SKETCHES:
        raise ValueError(f"sketch must be one of {', '.join(SKETCHES)}, got {sketch!r}")
    curvature = "full" if rank == 0 else "lowrank"
    if adaptive and curvature == "full":
        raise ValueError("adaptive FIPA chooses a rank per client; give --rank r ≥ 1 as its upper bound")
    merge = merge or ("pinv" if curvature == "full" else "qr")
    if complement and curvature == "lowrank" and merge != "qr":
        raise ValueError("FIPA --complement is an option of the thin-QR merge; use --merge qr (the default)")
    lc = _local_config(local, local_steps, lr, local_damping, 0.0, "gn")
    agg = FIPAAggregator(curvature=curvature, merge=merge, beta=0.0 if beta is None else float(beta),
                         gamma=1.0 if gamma is None else float(gamma), weighting="sum",
                         complement="fedavg" if complement and curvature == "lowrank" else "none",
                         robust=robust, trim=trim, clip_norm=clip_norm, consistency=lc.solver == "gn")
    sched = AdaptiveSchedule(C=float(adapt_c), C_tau=float(adapt_ctau)) if adaptive else None
    rc = _round_config(seed, rounds, budget, tol, participation, dropout, checkpoint, resume, "fipa")
    options = {"rank": rank, "curvature": curvature, "merge": merge, "beta": agg.beta, "gamma": agg.gamma,
               "local": lc.solver, "local_steps": lc.steps, "lr": lc.lr, "local_damping": lc.damping,
               "adaptive": bool(adaptive), "sketch": sketch, "participation": rc.participation,
               "dropout": rc.dropout}
    if adaptive:
        options.update(adapt_c=sched.C, adapt_ctau=sched.C_tau)
    safeguard = (lc.solver == "gn") if safeguard is None else bool(safeguard)
    options.update(safeguard=safeguard, complement=bool(complement))
    if not agg.rule.plain:
        options.update(robust=agg.rule.rule, trim=agg.rule.trim, clip_norm=agg.rule.clip_norm)
    strategy = FIPAStrategy(agg, lc, curvature, max(rank, 1), sketch, sched, seed, safeguard=safeguard,
                            complement=bool(complement))
    theta, rows, info = _simulate("fipa", strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every,
                                  options, message_hook, transport)
    if ignored:
        info["ignored_options"] = sorted(ignored)
    return theta, rows, info


def _run_avg(method, problem, objectives, theta0, evaluate, *, progress, seed, every, budget, tol, lr, rounds, local,
             local_steps, local_damping, participation, dropout, checkpoint, resume, prox, server_lr, message_hook,
             ignored, transport="local", robust="mean", trim=0.2, clip_norm=None):
    lc = _local_config(local, local_steps, lr, local_damping, prox, "adam")
    agg = FedAvgAggregator(server_lr=1.0 if server_lr is None else float(server_lr), robust=robust, trim=trim,
                           clip_norm=clip_norm)
    rc = _round_config(seed, rounds, budget, tol, participation, dropout, checkpoint, resume, method)
    options = {"local": lc.solver, "local_steps": lc.steps, "lr": lc.lr, "server_lr": agg.server_lr,
               "participation": rc.participation, "dropout": rc.dropout}
    if not agg.rule.plain:
        options.update(robust=agg.rule.rule, trim=agg.rule.trim, clip_norm=agg.rule.clip_norm)
    if method == "fedprox":
        options["mu"] = prox
    if lc.solver == "gn":
        options["local_damping"] = lc.damping
    strategy = AveragingStrategy(agg, lc, seed)
    theta, rows, info = _simulate(method, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every,
                                  options, message_hook, transport)
    if ignored:
        info["ignored_options"] = sorted(ignored)
    return theta, rows, info


@register_method("fedavg")
def run_fedavg(problem, objectives, theta0, evaluate, *, progress=False, seed=0, every=10, budget=None, tol=0.0,
               lr=None, rounds=None, local=None, local_steps=None, local_damping=None, participation=None,
               dropout=None, checkpoint=None, resume=False, server_lr=None, message_hook=None, transport="local",
               robust="mean", trim=0.2, clip_norm=None, **ignored):
    """FedAvg (paper Eq. 3): data-size weighted average of local updates.

    ``robust`` / ``trim`` / ``clip_norm``: see :class:`~fedsciml.federated.aggregators.FedAvgAggregator`."""
    return _run_avg("fedavg", problem, objectives, theta0, evaluate, progress=progress, seed=seed, every=every,
                    budget=budget, tol=tol, lr=lr, rounds=rounds, local=local, local_steps=local_steps,
                    local_damping=local_damping, participation=participation, dropout=dropout, checkpoint=checkpoint,
                    resume=resume, prox=0.0, server_lr=server_lr, message_hook=message_hook, ignored=ignored,
                    transport=transport, robust=robust, trim=trim, clip_norm=clip_norm)


@register_method("fedprox")
def run_fedprox(problem, objectives, theta0, evaluate, *, progress=False, seed=0, every=10, budget=None, tol=0.0,
                lr=None, rounds=None, mu=None, local=None, local_steps=None, local_damping=None, participation=None,
                dropout=None, checkpoint=None, resume=False, server_lr=None, message_hook=None, transport="local",
                robust="mean", trim=0.2, clip_norm=None, **ignored):
    """FedProx: FedAvg whose local loss carries the proximal term ``μ/2 ‖θ_m − θ_k‖²``.

    ``robust`` / ``trim`` / ``clip_norm``: see :class:`~fedsciml.federated.aggregators.FedAvgAggregator`."""
    mu = 0.01 if mu is None else float(mu)
    if not mu >= 0:
        raise ValueError(f"FedProx μ must be ≥ 0, got {mu}")
    return _run_avg("fedprox", problem, objectives, theta0, evaluate, progress=progress, seed=seed, every=every,
                    budget=budget, tol=tol, lr=lr, rounds=rounds, local=local, local_steps=local_steps,
                    local_damping=local_damping, participation=participation, dropout=dropout, checkpoint=checkpoint,
                    resume=resume, prox=mu, server_lr=server_lr, message_hook=message_hook, ignored=ignored,
                    transport=transport, robust=robust, trim=trim, clip_norm=clip_norm)


@register_method("one-shot")
def run_one_shot(problem, objectives, theta0, evaluate, *, progress=False, seed=0, every=10, budget=None, tol=0.0,
                 lr=None, rounds=None, participation=None, dropout=None, checkpoint=None, resume=False, sigma=0.0,
                 message_hook=None, transport="local", dp=None, project=None, project_sketch="gaussian", repair=True,
                 **ignored):
    """One-shot fusion of the clients' Gauss–Newton statistics (one-shot ridge for linear residuals).

    ``dp`` (a :class:`fedsciml.ridge.DPConfig` or a dict of its fields), ``project`` (m) and ``project_sketch``: client-side
    transforms of the statistics, seeded by ``seed`` (see :mod:`fedsciml.federated.oneshot`)."""
    rc = _round_config(seed, rounds, budget, tol, participation, dropout, checkpoint, resume, "one-shot")
    strategy = OneShotStrategy(0.0 if sigma is None else sigma, dp=dp, project=project,
                               sketch="gaussian" if project_sketch is None else project_sketch, seed=seed, repair=repair)
    options = {**strategy.summary(), "participation": rc.participation, "dropout": rc.dropout}
    theta, rows, info = _simulate("one-shot", strategy, problem, objectives, theta0, evaluate, seed, rc, progress,
                                  every, options, message_hook, transport)
    if ignored:
        info["ignored_options"] = sorted(ignored)
    return theta, rows, info
