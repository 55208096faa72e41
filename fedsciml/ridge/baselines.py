"""Iterative baselines on the same ridge data: FedAvg, FedProx and DP-FedAvg.

Paper settings (Section V-A): learning rate η = 0.01, E = 5 local epochs, full
participation, FedProx μ = 0.01.  Local loss of client k (mean form, so η is
scale-free): ``f_k(w) = (1/2n_k)‖A_k w − b_k‖² + (σ/2N)‖w‖² + (μ/2)‖w − w_t‖²``.
The paper does not give the batch size; fedsciml uses minibatch SGD with
``batch_size`` 32 (reshuffled every epoch, seeded).  On the paper's Table II
setting FedAvg-100/200/500 and FedProx-200 end within 0.1 % of the exact
model's test MSE (mean gap −0.015 % to +0.005 %, std ≈ 0.06–0.08 % over 5 seeds, with each client's own
reshuffles; ``reproductions/ridge_table2.md``), not 2–3 % above it as in the paper
(0.0103/0.0102 against 0.0100).
The baselines run on the federated runtime's round loop
(:class:`~fedsciml.runtime.loop.Simulation`) as an averaging strategy
(:class:`RidgeAveraging`, an :class:`~fedsciml.methods.averaging.AveragingStrategy`):
each round the sampled clients (participation, then dropout) are asked
``update`` with θ and the local-training config, each answers ``{delta, n}``
from local minibatch SGD on its own ``(A_k, b_k)`` (:class:`RidgeClient`), and
the server validates and averages them
(:class:`~fedsciml.methods.aggregators.FedAvgAggregator`, no outlier screen);
rejections are logged by client and reason, floats are counted by the loop.
Randomness (the minibatch reshuffles, DP-FedAvg's noise) is drawn by each
client from its own generator, seeded from the run's seed, the client id and
the round (:func:`client_round_generator`), so a client's draws do not depend
on which other clients take part.  (Until this runtime version one run-wide
generator drew every client's reshuffles and noise; figures depending on them
changed by that realization only.)  In this process the clients of equal size
are evaluated together (:class:`RidgeTransport`: one batched computation, each
client's answer from its own rows and its own generator).

DP-FedAvg (row-level DP for each client's dataset, the same neighbouring
relation as the one-shot mechanism): each local step is full-batch DP-GD —
per-row gradients clipped to ``C_g``, summed, Gaussian noise ``N(0, z²C_g²)``
added, divided by n_k — so one step is a Gaussian mechanism of sensitivity
``C_g`` and a run is ``R·E`` of them at sampling rate 1, accounted by Opacus's
RDP accountant (``z`` from :func:`fedsciml.core.privacy.noise_multiplier` with
``method='rdp', steps=R·E``).  (The paper splits ε as ε₀ = ε/√R by advanced
composition; the RDP accountant is tighter and exact enough to compare at
equal (ε, δ).)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedsciml.core import privacy
from fedsciml.options import OptionError, RobustOptions, display, option
from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.methods.averaging import AveragingStrategy
from fedsciml.runtime.client import Client, register_handler
from fedsciml.runtime.driver import METHODS, Method, register_method
from fedsciml.runtime.transport import BytesTransport, LocalTransport, Reply, Request
from fedsciml.core.objective import LinearLeastSquares

SGD_KEYS = ("lr", "local_epochs", "mu", "sigma_share", "batch_size", "dp_clip", "dp_z", "seed", "round")


def client_round_generator(seed: int, cid: int, rnd: int) -> torch.Generator:
    """Client ``cid``'s generator for round ``rnd`` of a baseline run with ``seed``: seeded
    ``((seed + 7919)·1000003 + cid)·1009 + rnd`` (mod 2⁶³) — its minibatch reshuffles, then its DP noise."""
    if int(cid) < 0:
        raise ValueError(f"client id must be ≥ 0 for its generator seed, got {cid}")
    return torch.Generator(device="cpu").manual_seed(
        (((int(seed) + 7919) * 1000003 + int(cid)) * 1009 + int(rnd)) % (2**63))


def local_sgd(A: torch.Tensor, b: torch.Tensor, w: torch.Tensor, cfg: dict, gens) -> torch.Tensor:
    """Local training of ``K`` clients of equal size at once: ``A [K, n, d]``, ``b [K, n]``, the broadcast
    ``w [d]``, the ``sgd`` config (:data:`SGD_KEYS`) and one generator per client; returns ``W [K, d]``.

    ``local_epochs`` epochs of minibatch SGD (``batch_size``; one reshuffle per epoch from each client's own
    generator, then contiguous minibatches; ``None``: full batch) on the mean loss
    ``(1/2n)‖A_k w − b_k‖² + (σ/2N)‖w‖² + (μ/2)‖w − w_t‖²``; with ``dp_z`` > 0 full-batch DP-GD (per-row
    gradients clipped to ``dp_clip``, noise ``N(0, z²C²)`` from each client's generator)."""
    K, n, d = A.shape
    lr, mu, share = float(cfg["lr"]), float(cfg["mu"]), float(cfg["sigma_share"])
    z, clip = float(cfg.get("dp_z") or 0.0), cfg.get("dp_clip")
    dp = clip is not None
    bs = cfg.get("batch_size")
    B = n if dp or not bs or bs >= n else int(bs)
    W = w.expand(K, d).clone()
    for _ in range(int(cfg["local_epochs"])):
        if B == n:
            Ap, bp = A, b
        else:  # each client reshuffles its own rows with its own generator
            perm = torch.argsort(torch.stack([torch.rand(n, generator=g) for g in gens]), dim=1).to(A.device)
            Ap = torch.gather(A, 1, perm[..., None].expand(-1, -1, d))
            bp = torch.gather(b, 1, perm)
        for i in range(0, n, B):
            Ab, bb = Ap[:, i:i + B], bp[:, i:i + B]
            res = torch.baddbmm(-bb[..., None], Ab, W[..., None])                 # [K, B, 1]
            if not dp:
                grad = torch.bmm(Ab.transpose(1, 2), res).squeeze(-1) / Ab.shape[1]
            else:
                per_row = privacy.clip_by_norm(res * Ab, float(clip))              # [K, B, d]
                noise = torch.stack([torch.randn(d, generator=g, dtype=A.dtype) for g in gens]).to(A.device)
                grad = (per_row.sum(1) + noise * (z * float(clip))) / Ab.shape[1]
            grad = grad + share * W
            if mu:
                grad = grad + mu * (W - w)
            W = W - lr * grad
    return W


class RidgeClient(Client):
    """A ridge client: its rows ``(A_k, b_k)`` (the linear residual ``A_k w − b_k``).  Besides the runtime's
    queries (``loss``, ``gn_stats``, …) it answers ``update`` with an ``sgd`` config by :func:`local_sgd` on its
    own rows with its own generator (:func:`client_round_generator`)."""

    def __init__(self, cid: int, A: torch.Tensor, b: torch.Tensor):
        super().__init__(cid, LinearLeastSquares(A, b))

    def sgd_message(self, theta: torch.Tensor, cfg: dict) -> dict:
        o = self.objective
        g = client_round_generator(int(cfg["seed"]), self.cid, int(cfg["round"]))
        W = local_sgd(o.A[None], o.b[None], theta, cfg, [g])
        return {"delta": W[0] - theta, "n": torch.tensor([float(self.n)], dtype=theta.dtype, device=theta.device)}



def _answer_update(client, request, pre, deadline):
    """``update`` with an ``sgd`` config: local SGD on the client's rows; any other ``update`` as a
    :class:`Client` answers it."""
    if "sgd" not in request.config:
        return Client.handlers["update"].answer(client, request, pre, deadline)
    return Reply(pre if pre is not None else client.sgd_message(request.tensors["theta"], request.config["sgd"]))


register_handler(RidgeClient, "update", _answer_update,
                 lambda batch, req: {} if "sgd" in req.config else Client.handlers["update"].precompute(batch, req))


class RidgeTransport(LocalTransport):
    """In-process :class:`RidgeClient` s; an ``update`` (``sgd``) is computed for all asked clients of equal size
    in one batched :func:`local_sgd` (each client's rows and generator its own); other queries as
    :class:`~fedsciml.runtime.transport.LocalTransport`."""

    def __init__(self, clients, vectorize: bool = True):
        super().__init__(clients, vectorize)
        self._stacks = {}

    def _stack(self, cids):
        key = tuple(cids)
        if key not in self._stacks:
            self._stacks = {key: (torch.stack([self.clients[c].objective.A for c in cids]),
                                  torch.stack([self.clients[c].objective.b for c in cids]))}
        return self._stacks[key]

    def ask(self, client_ids, request: Request) -> dict:
        cfg = request.config
        if not (request.query == "update" and "sgd" in cfg and self.vectorize):
            return super().ask(client_ids, request)
        theta, sgd = request.tensors["theta"], cfg["sgd"]
        by_size = {}
        for c in client_ids:
            by_size.setdefault(self.clients[c].n, []).append(c)
        pre = {}
        for n, cids in by_size.items():
            A, b = self._stack(cids)
            gens = [client_round_generator(int(sgd["seed"]), c, int(sgd["round"])) for c in cids]
            W = local_sgd(A, b, theta, sgd, gens)
            for i, c in enumerate(cids):
                pre[c] = {"delta": W[i] - theta, "n": torch.tensor([float(n)], dtype=theta.dtype,
                                                                   device=theta.device)}
        return {c: self.clients[c].answer(request, pre=pre[c]) for c in client_ids}


class RidgeAveraging(AveragingStrategy):
    """FedAvg / FedProx / DP-FedAvg on ridge clients: the averaging strategy with the ``sgd`` request."""

    def __init__(self, sgd: dict, seed: int = 0, name: str = "fedavg", robust: str = "mean", trim: float = 0.2,
                 clip_norm: float | None = None, record: dict | None = None):
        unknown = sorted(set(sgd) - set(SGD_KEYS))
        if unknown:
            raise ValueError(f"unknown local SGD option(s) {unknown}; allowed: {', '.join(SGD_KEYS)}")
        # the byzantine defence of FedAvg/FedProx (fedsciml.runtime.robust): median, trimmed mean, norm bound
        super().__init__(FedAvgAggregator(robust=robust, trim=trim, clip_norm=clip_norm, outlier_ratio=None),
                         None, seed)
        self.sgd = dict(sgd)
        self.name = name
        self.record = dict(record or {})  # the run's settings for the result (lr, epochs, μ, DP accountant)
        # DP-FedAvg: the sites' exact losses are not asked for monitoring (a release outside the accountant's ε);
        # the history's loss is NaN ("not measured")
        if self.sgd.get("dp_clip") is not None:
            self.loss_sum = math.nan

    def request_config(self, run, k: int) -> dict:
        return {"sgd": {**self.sgd, "seed": self.seed, "round": int(k)}}

    def summary(self):
        return {k: v for k, v in self.sgd.items() if v is not None}

    def info(self):
        return dict(self.record)


@dataclass(frozen=True)
class SGDAveragingConfig(RobustOptions):
    """``fedavg-sgd``: FedAvg with local minibatch SGD on ridge clients (FedProx with ``mu`` > 0, DP-FedAvg with
    ``dp_epsilon``) — the ridge baselines, in the one registry (kind ``ridge``).  σ is the method's own (a term
    ``(σ/2N)‖w‖²`` of each client's mean loss), so the driver runs it on the problem's data rows only
    (``penalty="server"``), as it runs ``one-shot``.  Its byzantine defence is FedAvg's
    (:class:`~fedsciml.options.RobustOptions`: ``robust``, ``trim``, ``clip_norm``)."""

    method: ClassVar[str] = "fedavg-sgd"
    holds_sigma: ClassVar[bool] = True  # the driver: σ is this method's, not residual rows on every client
    engines: ClassVar[tuple[str, ...]] = ("local",)  # its clients (RidgeClient) answer in this process only

    rounds: int = option(100, "communication rounds", int, lo=1)
    lr: float = option(0.01, "local SGD learning rate η (on each client's mean loss)", float, lo=0, lo_open=True)
    local_epochs: int = option(5, "local epochs E per round", int, lo=1)
    batch_size: int | None = option(32, "local minibatch size (one seeded reshuffle per epoch)", int, lo=1,
                                    none="full batch (batch_size=None in Python)")
    mu: float = option(0.0, "proximal weight μ (0: FedAvg's local loss)", float, lo=0)  # > 0: FedProx
    sigma: float | None = option(None, "ridge σ of the clients' local loss (σ/2N)‖w‖²", float, lo=0,
                                 none="the problem's ridge σ")
    dp_epsilon: float | None = option(None, "DP-FedAvg: ε of the run (full-batch DP-GD steps, RDP accountant)",
                                      float, lo=0, lo_open=True, none="no DP")
    dp_delta: float = option(1e-5, "DP δ", float, lo=0, hi=1, lo_open=True, hi_open=True)
    dp_grad_clip: float = option(1.0, "DP-FedAvg per-row gradient clip C_g", float, lo=0, lo_open=True)
    participation: float = option(1.0, "fraction of the clients sampled per round", float, lo=0, lo_open=True, hi=1)
    dropout: float = option(0.0, "probability that a sampled client fails to answer", float, lo=0, hi=1,
                            hi_open=True)
    transport: str = option("local", "how requests reach the clients: local (clients of equal size batched) or "
                                     "bytes (every request and reply round-tripped through bytes)",
                            str, choices=("local", "bytes"))
    vectorize: bool = option(True, "batch the local SGD of clients of equal size (False: each alone; the same "
                                   "numbers)", bool, cli=False)

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.dp_epsilon is None:
            for k in ("dp_delta", "dp_grad_clip"):
                out[k] = f"DP-FedAvg is on with {display('dp_epsilon')}"
        else:
            out["batch_size"] = "DP-FedAvg's local steps are full-batch DP-GD"
        return out

    def forms_jacobians(self) -> bool:
        return False

    def name(self) -> str:
        """``dp-fedavg``, ``fedprox`` or ``fedavg``: what this configuration runs."""
        return "dp-fedavg" if self.dp_epsilon is not None else "fedprox" if self.mu else "fedavg"


def sgd_transport(data, ids, vectorize: bool = True, kind: str = "local"):
    """The clients' in-process transport: :class:`RidgeTransport` over :class:`RidgeClient` s with ids ``ids``
    (``kind="bytes"``: every request and reply through bytes on top of it; the same model bit for bit)."""
    local = RidgeTransport([RidgeClient(c, A, b) for c, (A, b) in zip(ids, data)], vectorize=vectorize)
    return BytesTransport(local, device=data[0][0].device) if kind == "bytes" else local


def sgd_clients(objectives, config: SGDAveragingConfig, device):
    """The ``fedavg-sgd`` clients in this process (its :class:`~fedsciml.runtime.registry.Method` ``clients``):
    :func:`sgd_transport` over the objectives' rows (ids ``0 … K−1``; :func:`fedavg` gives its own ids)."""
    return sgd_transport([(o.A, o.b) for o in objectives], range(len(objectives)), config.vectorize,
                         config.transport)


def sgd_averaging_strategy(cfg: SGDAveragingConfig, ctx):
    """The ``fedavg-sgd`` strategy factory: FedAvg / FedProx / DP-FedAvg with local SGD (:func:`local_sgd`) on the
    clients' rows ``(A_k, b_k)`` (their :class:`LinearLeastSquares` objectives), :class:`RidgeAveraging` on the
    driver's round loop.  DP-FedAvg's noise multiplier from the RDP accountant over ``rounds·local_epochs``
    steps (in the result's ``extra``, :meth:`RidgeAveraging.info`)."""
    from fedsciml.ridge.protocol import check_finite

    data = [(o.A, o.b) for o in ctx.objectives]
    if not data:
        raise ValueError("no clients: at least one client's data are needed")
    check_finite(data)
    N = sum(int(A.shape[0]) for A, _ in data)
    rounds, local_epochs = int(cfg.rounds), int(cfg.local_epochs)
    info: dict = {"lr": cfg.lr, "local_epochs": local_epochs, "mu": cfg.mu}
    z, clip, batch_size = 0.0, None, cfg.batch_size
    if cfg.dp_epsilon is not None:
        batch_size = None
        steps = rounds * local_epochs
        clip = float(cfg.dp_grad_clip)
        z = privacy.noise_multiplier(cfg.dp_epsilon, cfg.dp_delta, method="rdp", steps=steps)
        info.update(dp_noise_multiplier=z, dp_steps=steps, dp_clip=clip,
                    dp_epsilon_rdp=privacy.epsilon_of(z, cfg.dp_delta, "rdp", steps) if z > 0 else math.inf)
    sgd = {"lr": float(cfg.lr), "local_epochs": local_epochs, "mu": float(cfg.mu),
           "sigma_share": float(cfg.sigma or 0.0) / N, "batch_size": None if not batch_size else int(batch_size),
           "dp_clip": clip, "dp_z": z}
    strategy = RidgeAveraging(sgd, ctx.seed, cfg.name(), robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm,
                              record=info)
    return strategy


def settings(r) -> str:
    """The summary table's settings text of a fedavg-sgd run (from its options)."""
    ro = r.options
    parts = [f"local SGD {ro.get('local_epochs')} epochs, batch {ro.get('batch_size')}, lr={ro.get('lr')}"]
    if ro.get("mu"):
        parts.append(f"μ={ro.get('mu')} (FedProx)")
    if ro.get("dp_epsilon") is not None:
        parts.append(f"DP ε={ro.get('dp_epsilon')}, δ={ro.get('dp_delta')}")
    return ", ".join(parts)


if "fedavg-sgd" not in METHODS:  # importing twice (reload) registers nothing twice
    register_method(Method("fedavg-sgd", SGDAveragingConfig, strategy=sgd_averaging_strategy, clients=sgd_clients,
                           description="FedAvg with local minibatch SGD on ridge clients (FedProx: mu > 0, "
                                       "DP-FedAvg: dp_epsilon); the ridge baselines", kinds=("ridge",),
                           settings=settings))


def _data_rows(data, evaluate=None):
    """Given clients' rows ``[(A_k, b_k)]`` as the problem the driver runs (:func:`fedsciml.ridge.one_shot`'s,
    the linear residuals, θ₀ = 0, no memory estimate), with ``evaluate`` (``w -> test MSE``) when given."""
    from fedsciml.ridge.protocol import _ClientRows

    rows = _ClientRows(data, int(data[0][0].shape[1]))
    if evaluate is not None:
        rows.evaluate = lambda theta: {"mse": evaluate(theta)}  # type: ignore[method-assign]
    return rows


def fedavg(data, rounds: int = 100, lr: float = 0.01, local_epochs: int = 5, mu: float = 0.0, sigma: float = 0.0,
           batch_size: int | None = 32, seed: int = 0, evaluate=None, every: int = 1, dp: dict | None = None,
           dropout: float = 0.0, participation: float = 1.0, transport: str = "local", client_ids=None,
           vectorize: bool = True):
    """FedAvg (``mu=0``) / FedProx (``mu>0``) / DP-FedAvg (``dp={'epsilon','delta','clip'}``) on the round loop:
    method ``fedavg-sgd`` planned and run by the one driver (:func:`fedsciml.runtime.driver.plan` checks every
    option once, as a :class:`SGDAveragingConfig`) on the given rows.

    Returns ``(w, history, info)``; history rows ``{round, mse, floats_sent, time_s}`` every ``every`` rounds
    (with ``evaluate``: ``w -> test MSE``).  ``dp`` forces full-batch local steps.  ``dropout``,
    ``participation``: the loop's seeded client sampling each round.  ``transport``: ``"local"`` (clients of
    equal size batched; ``vectorize=False``: each client computed alone) or ``"bytes"`` (every request and reply
    through bytes; the same model bit for bit).  ``client_ids``: the clients' ids (default ``0 … K−1``), which
    seed their generators.  ``info["rows"]``: the round loop's history rows.
    """
    from fedsciml.runtime.driver import plan, run

    if not data:
        raise ValueError("no clients: at least one client's data are needed")
    if isinstance(every, bool) or int(every) != every or every < 1:
        raise ValueError(f"every must be an integer ≥ 1, got {every!r}")
    ids = list(range(len(data))) if client_ids is None else [int(c) for c in client_ids]
    if len(ids) != len(data) or len(set(ids)) != len(ids):
        raise ValueError(f"client_ids must be {len(data)} distinct ids, got {ids}")
    opts: dict = dict(rounds=rounds, lr=lr, local_epochs=local_epochs, mu=mu, sigma=sigma, dropout=dropout,
                      participation=participation, transport=transport, vectorize=vectorize)
    if dp is not None:  # DP-FedAvg: full-batch DP-GD local steps (batch_size does not apply)
        unknown = sorted(set(dp) - {"epsilon", "delta", "clip"})
        if unknown or "epsilon" not in dp or "delta" not in dp:
            raise OptionError(f"dp must be {{'epsilon', 'delta'[, 'clip']}}, got keys {sorted(dp)}")
        opts.update(dp_epsilon=dp["epsilon"], dp_delta=dp["delta"], dp_grad_clip=dp.get("clip", 1.0))
    else:
        opts["batch_size"] = batch_size or None  # 0 / None: full batch
    config = SGDAveragingConfig.from_options(opts)
    rows_problem = _data_rows(data, evaluate)
    from fedsciml.ridge.protocol import check_finite

    check_finite(data)  # before the transport is built (the runner checks the driver's objectives again)
    tr = sgd_transport(data, ids, config.vectorize, config.transport)  # type: ignore[attr-defined]
    res = run(plan(rows_problem, "fedavg-sgd", clients=len(data), seed=seed, device=data[0][0].device,
                   config=config, transport=tr))
    rows = res.history
    info = dict(res.extra)
    info.update(floats_sent=info["floats_up"] + info["floats_down"], time_s=info["solver_time_s"])
    hist = [{"round": r["step"], "mse": r["mse"], "floats_sent": r["floats_sent"], "time_s": r["time_s"]}
            for r in rows[1:] if evaluate is not None and (r["step"] % every == 0 or r["step"] == rounds)]
    info["rows"] = rows
    return res.theta, hist, info
