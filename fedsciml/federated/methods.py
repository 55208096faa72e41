"""Federated methods ``gn``, ``fipa``, ``fedavg``, ``fedprox`` (registered in :data:`fedsciml.runner.METHODS`).

Every runner has the signature
``fn(problem, objectives, theta0, evaluate, config=None, *, progress, seed, every, message_hook, **options)
-> (θ, history rows, info)``: ``config`` is the method's typed configuration
(:mod:`fedsciml.config`: :class:`~fedsciml.config.GNConfig`,
:class:`~fedsciml.config.FIPAConfig`, :class:`~fedsciml.config.FedAvgConfig`,
:class:`~fedsciml.config.FedProxConfig`), or it is built from ``options``
(unknown keys and values out of range are refused).  The defaults live there,
once (chosen so that ``python -m fedsciml solve bratu --clients 4`` is
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

With a ``budget`` and no ``rounds`` a run goes on until the budget is spent.
"""
from __future__ import annotations

import torch

from fedsciml import linalg

from fedsciml.config import FedAvgConfig, FedProxConfig, FIPAConfig, GNConfig
from fedsciml.federated.aggregators import FedAvgAggregator, FIPAAggregator
from fedsciml.federated.client import AdaptiveSchedule, Client, ClientBatch, LocalConfig
from fedsciml.federated.gn import GNAggregator, GNStrategy
from fedsciml.federated.simulation import RoundConfig, Simulation
from fedsciml.solvers.lm import LMConfig, default_tau


class UpdateStrategy:
    """Round logic of FIPA / FedAvg / FedProx: sampled clients send updates, the aggregator merges them.

    ``safeguard`` (FIPA with local Gauss–Newton steps): the server merge is
    regularized, ``(Ĥ + βI)^† Σ Ĥ_m Δθ_m`` (paper Eq. 13's β), with β adapted
    by the Levenberg–Marquardt rule from the losses the clients report at the
    broadcast θ (one float each): β₀ = ``lm_tau`` · max_m max diag(Ĥ_m) (LM's
    μ₀ = τ·max diag(JᵀJ)); when
    every client answered and the summed loss went *up* (or is not finite),
    the server discards the last merged step (returns to the previous global
    parameters) and multiplies β by 10; otherwise it divides β by 3 (down to
    1e-20).  With full-rank curvature and exact local solves
    ``Δθ_m = −H_m^† g_m`` the merged step is then exactly the LM step
    ``−(H + βI)^{-1} g``.  With partial participation or dropout the losses of
    different rounds are not comparable and every step is kept.

    ``complement``: add the FedAvg average of the updates' components outside
    the span ``Q`` of the clients' sketches, ``(I − QQᵀ) Σ (N_m/N) Δθ_m`` —
    directions no client's curvature informs (the paper's "orthogonal
    complement correction"; off by default).
    """

    def __init__(self, aggregator, local: LocalConfig, curvature: str | None, rank: int, sketch: str,
                 adaptive: AdaptiveSchedule | None, seed: int, safeguard: bool = False, complement: bool = False,
                 lm_tau: float = 1e-3, batched: bool = True):
        self.agg = aggregator
        self.local = local
        self.curvature = curvature
        self.rank = rank
        self.sketch = sketch
        self.adaptive = adaptive
        self.seed = seed
        self.safeguard = safeguard
        self.complement = complement
        self.lm_tau = lm_tau
        self.beta = None
        self.nu = 2.0
        self.pred = 0.0
        self.batched = batched  # evaluate the round's clients in one vectorized Jacobian call (same numbers)
        self._batches = {}
        self.theta = None
        self.loss_sum = None
        self.gnorm = None  # adaptive FIPA: global gradient-norm estimate of the last round
        self.prev_theta = None
        self.prev_loss = None
        self.rejected_steps = 0

    def start(self, sim, theta0):
        self.theta = theta0.detach().clone()

    def finished(self, sim):
        return None

    def round(self, sim, k):
        answering, dropped = sim.sample()
        if not answering:
            sim.skipped_rounds += 1
            return {"skipped": True}
        p = self.theta.numel()
        theta = self.theta

        rjs = {}
        if self.batched and (self.local.solver == "gn" or self.curvature == "full" or self.adaptive is not None
                             or (self.curvature == "lowrank" and self.sketch != "matfree")):
            key = tuple(c.cid for c in answering)
            if key not in self._batches:
                self._batches[key] = ClientBatch(answering)
            rjs = self._batches[key].residuals_and_jacobians(theta)

        def make(c: Client):
            msg = c.update_message(theta, self.local, curvature=self.curvature, rank=self.rank, sketch=self.sketch,
                                   seed=(self.seed * 1_000_003 + k * 1009 + c.cid) % (2**31), adaptive=self.adaptive,
                                   rnd=k, global_grad_norm=self.gnorm, report_loss=self.safeguard, rj=rjs.get(c.cid))
            if self.adaptive is not None:
                msg["gnorm"] = torch.tensor([c.last_info["gnorm"]], dtype=theta.dtype, device=theta.device)
            return msg

        down = p + (1 if self.adaptive is not None else 0) + (1 if self.safeguard else 0)
        ok, _bad = sim.ask(answering, make, lambda m: self.agg.validate(m, p, theta.dtype), down_floats=down)
        extra = {"answered": len(ok)}
        if self.safeguard:
            complete = len(ok) == len(sim.clients)
            loss = sum(float(ok[c]["loss"][0]) for c in sorted(ok)) if complete else None
            bad_point = not ok and len(_bad) == len(answering)  # every answer was broken (non-finite) at this θ
            trial = self.prev_theta is not None and theta is not self.prev_theta  # θ is an unverified merged step
            if trial and (bad_point or (complete and not loss < self.prev_loss)):
                self.theta = self.prev_theta  # the last merged step made things worse: undo it
                self.beta = min(1e20, self.beta * self.nu)
                self.nu *= 2.0
                self.rejected_steps += 1
                extra.update(accepted=False, beta=self.beta)
                return extra
            if self.beta is None and ok:
                self.beta = self.lm_tau * max(_max_diag(m) for m in ok.values())
            elif complete and trial:  # gain ratio of the accepted step (LM rule)
                rho = (self.prev_loss - loss) / self.pred if self.pred > 0 else 1.0
                self.beta = max(1e-20, self.beta * max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3))
                self.nu = 2.0
            if complete:
                self.prev_theta, self.prev_loss = theta, loss
            extra.update(accepted=True, beta=self.beta)
            self.agg.beta = self.beta
        if not ok:
            sim.fail("aggregation")
        new = self.agg.aggregate(theta, ok)
        if self.complement and self.curvature == "lowrank":
            w = self.agg.sample_weights(ok)
            d = sum(w[c] * ok[c]["delta"] for c in sorted(ok))
            Q, _ = torch.linalg.qr(torch.cat([ok[c]["U"] for c in sorted(ok)], dim=1), mode="reduced")
            new = new + (d - Q @ (Q.T @ d))
        if self.safeguard:  # predicted decrease of the merged step: ½ δᵀ(b + βδ), b = Σ Ĥ_m Δθ_m ≈ −g
            step = new - theta
            self.pred = 0.5 * float(step @ (_merge_rhs(ok, p) + self.beta * step))
        self.theta = new
        if self.adaptive is not None:
            w = self.agg.sample_weights(ok)
            self.gnorm = sum(w[c] * float(m["gnorm"][0]) for c, m in ok.items())
            ranks = [int(ok[c]["lam"].numel()) for c in sorted(ok)] if self.curvature == "lowrank" else []
            steps = [c.last_info.get("steps") for c in answering if c.cid in ok]
            extra.update(ranks=" ".join(map(str, ranks)), local_steps=" ".join(map(str, steps)))
        return extra

    def finalize(self, sim):
        """Safeguard: check the last, not yet validated merged step with one loss query; undo it if worse."""
        if not (self.safeguard and self.prev_theta is not None and self.theta is not self.prev_theta):
            return
        theta = self.theta
        sim.begin_round(sim.round_index)
        ok, _ = sim.ask(sim.clients, lambda c: c.loss_message(theta),
                        lambda m: GNAggregator(False).validate(m, theta.numel(), theta.dtype), theta.numel())
        sim.end_round()
        complete = len(ok) == len(sim.clients)
        if complete:
            loss = GNAggregator.total_loss(ok)
            if not loss <= self.prev_loss:
                self.theta = self.prev_theta
                self.rejected_steps += 1
            self.final_check = {"final_step_kept": self.theta is theta, "floats": sim._round_up + sim._round_down}

    def state_dict(self):
        return {"theta": self.theta, "gnorm": self.gnorm, "beta": self.beta, "nu": self.nu, "pred": self.pred,
                "prev_theta": self.prev_theta,
                "prev_loss": self.prev_loss, "rejected_steps": self.rejected_steps}

    def load_state_dict(self, d):
        self.theta, self.gnorm, self.beta = d["theta"], d["gnorm"], d["beta"]
        self.nu, self.pred = d["nu"], d["pred"]
        self.prev_theta, self.prev_loss, self.rejected_steps = d["prev_theta"], d["prev_loss"], d["rejected_steps"]

    def info(self):
        if not self.safeguard:
            return {}
        return {"rejected_steps": self.rejected_steps, "final_beta": self.beta, **getattr(self, "final_check", {})}


def _merge_rhs(msgs, p) -> torch.Tensor:
    """``b = Σ_m Ĥ_m Δθ_m`` (sum-form weights)."""
    b = 0.0
    for m in msgs.values():
        if "H" in m:
            b = b + linalg.unpack_upper(m["H"], p) @ m["delta"]
        else:
            b = b + m["U"] @ (m["lam"] * (m["U"].T @ m["delta"]))
    return b


def _max_diag(msg) -> float:
    if "H" in msg:  # the largest entry of a PSD matrix sits on its diagonal
        return float(msg["H"].max())
    return float(((msg["U"] ** 2) @ msg["lam"]).max())


def _round_config(cfg, seed) -> RoundConfig:
    return RoundConfig(rounds=cfg.rounds, budget=cfg.budget, tol=cfg.tol, participation=cfg.participation,
                       dropout=cfg.dropout, seed=seed, checkpoint=cfg.checkpoint, resume=cfg.resume)


def _fingerprint(problem, method, objectives, theta0, seed, options):
    return {"problem": getattr(problem, "name", None), "problem_options": dict(getattr(problem, "options", {}) or {}),
            "method": method, "options": options, "clients": len(objectives), "seed": int(seed),
            "n_params": int(theta0.numel()), "n_residuals": [int(o.n_residuals) for o in objectives]}


def _simulate(method, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every, options, message_hook):
    clients = [Client(i, o) for i, o in enumerate(objectives)]
    sim = Simulation(clients, evaluate, rc, label=method, progress=progress, every=every,
                     fingerprint=_fingerprint(problem, method, objectives, theta0, seed, options),
                     message_hook=message_hook)
    theta, rows, info = sim.run(strategy, theta0)
    info.update(strategy.info())
    info["options"] = options
    return theta, rows, info


def _config(cls, config, options):
    """The method's typed configuration: ``config`` as given, or built (and checked) from keyword ``options``."""
    if config is None:
        return cls.from_options(options)
    if options:
        raise TypeError(f"give the {cls.method} options either as config or as keywords, not both "
                        f"(got config and {', '.join(sorted(options))})")
    if type(config) is not cls:
        raise TypeError(f"{cls.method} needs a {cls.__name__}, got {type(config).__name__}")
    return config


def run_gn(problem, objectives, theta0, evaluate, config: GNConfig | None = None, *, progress=False, seed=0,
           every=10, message_hook=None, **options):
    """Exact federated Gauss–Newton (Levenberg–Marquardt on summed client statistics)."""
    cfg = _config(GNConfig, config, options)
    rc = _round_config(cfg, seed)
    lm_tau = default_tau(objectives) if cfg.lm_tau is None else cfg.lm_tau
    form = cfg.form
    if form == "auto":  # square roots when all clients' rows together are fewer than the parameters
        form = "sqrt" if sum(o.n_residuals for o in objectives) < theta0.numel() else "normal"
    options = {"lm_tau": lm_tau, "form": form}
    strategy = GNStrategy(LMConfig(tau=lm_tau, solve="auto" if form == "sqrt" else "normal"),
                          max_retries=cfg.max_retries, batched=cfg.batched, form=form)
    return _simulate("gn", strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every,
                     options, message_hook)


def _local_config(cfg, prox) -> LocalConfig:
    return LocalConfig(solver=cfg.local, steps=cfg.local_steps, lr=cfg.lr, damping=cfg.local_damping,
                       prox=prox).validate()


def run_fipa(problem, objectives, theta0, evaluate, config: FIPAConfig | None = None, *, progress=False, seed=0,
             every=10, message_hook=None, **options):
    """FIPA (paper Eq. 6 / Eq. 13): curvature-weighted merge of local updates."""
    cfg = _config(FIPAConfig, config, options)
    rank = cfg.rank
    curvature = "full" if rank == 0 else "lowrank"
    agg = FIPAAggregator(curvature=curvature, merge=cfg.merge, beta=cfg.beta, gamma=cfg.gamma, weighting="sum")
    lc = _local_config(cfg, 0.0)
    sched = AdaptiveSchedule(C=cfg.adapt_c, C_tau=cfg.adapt_ctau) if cfg.adaptive else None
    rc = _round_config(cfg, seed)
    options = {"rank": rank, "curvature": curvature, "merge": cfg.merge, "beta": agg.beta, "gamma": agg.gamma,
               "local": lc.solver, "local_steps": lc.steps, "lr": lc.lr, "local_damping": lc.damping,
               "adaptive": cfg.adaptive, "sketch": cfg.sketch, "participation": rc.participation,
               "dropout": rc.dropout}
    if cfg.adaptive:
        options.update(adapt_c=sched.C, adapt_ctau=sched.C_tau)
    options.update(safeguard=cfg.safeguard, complement=cfg.complement)
    strategy = UpdateStrategy(agg, lc, curvature, max(rank, 1), cfg.sketch, sched, seed, safeguard=cfg.safeguard,
                              complement=cfg.complement)
    return _simulate("fipa", strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every,
                     options, message_hook)


def _run_avg(method, cfg, prox, problem, objectives, theta0, evaluate, *, progress, seed, every, message_hook):
    lc = _local_config(cfg, prox)
    agg = FedAvgAggregator(server_lr=cfg.server_lr)
    rc = _round_config(cfg, seed)
    options = {"local": lc.solver, "local_steps": lc.steps, "lr": lc.lr, "server_lr": agg.server_lr,
               "participation": rc.participation, "dropout": rc.dropout}
    if method == "fedprox":
        options["mu"] = prox
    if lc.solver == "gn":
        options["local_damping"] = lc.damping
    strategy = UpdateStrategy(agg, lc, None, 1, "auto", None, seed)
    return _simulate(method, strategy, problem, objectives, theta0, evaluate, seed, rc, progress, every,
                     options, message_hook)


def run_fedavg(problem, objectives, theta0, evaluate, config: FedAvgConfig | None = None, *, progress=False, seed=0,
               every=10, message_hook=None, **options):
    """FedAvg (paper Eq. 3): data-size weighted average of local updates."""
    cfg = _config(FedAvgConfig, config, options)
    return _run_avg("fedavg", cfg, 0.0, problem, objectives, theta0, evaluate, progress=progress, seed=seed,
                    every=every, message_hook=message_hook)


def run_fedprox(problem, objectives, theta0, evaluate, config: FedProxConfig | None = None, *, progress=False,
                seed=0, every=10, message_hook=None, **options):
    """FedProx: FedAvg whose local loss carries the proximal term ``μ/2 ‖θ_m − θ_k‖²``."""
    cfg = _config(FedProxConfig, config, options)
    return _run_avg("fedprox", cfg, cfg.mu, problem, objectives, theta0, evaluate, progress=progress, seed=seed,
                    every=every, message_hook=message_hook)
