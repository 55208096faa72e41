"""Federated image-classification protocols on the federated layer's aggregators.

* :func:`run_one_shot` — every client trains from one shared initialization, sends one
  message, the server merges once: FedAvg, FisherMerge, RegMean, FedFisher (Diag, K-FAC),
  FedBEns (K-FAC / diag / diag+full last layer, M modes from M shared initializations);
  each method is a one-round :class:`OneShotImageStrategy` on the federated round loop.
* :func:`run_rounds` — multi-round FedAvg, FedProx, FIPA (full or FC-only) and FedFish
  on the federated round loop (:class:`~fedsciml.runtime.loop.Simulation`, an
  :class:`ImageRoundStrategy` per method, :class:`ImageClient` behind the transport):
  dropout, validation with rejections logged, float accounting per round;
  with ``warmup > 0`` a FedAvg warm-up checkpoint is shared by every method and the
  refinement rounds are compared from it (FIPA Tables 1–2).

Every method is an entry of one registry, :data:`METHODS` (protocol → name →
:class:`ImageMethod`: its aggregator factory, its client message builder, whether it
trains several modes, needs the K-FAC layout, adds the proximal term or trains the head
only); :func:`image_method` looks a name up and refuses an unknown one with the list of
allowed names.  Multi-round runs write checkpoints and resume (``run_rounds(checkpoint=,
resume=)``, the format of :mod:`fedsciml.runtime.checkpoint`).

Each method records test accuracy, floats sent per client (mean over clients and
rounds, from the validated messages), client / server compute seconds
(wall clock, excluding test evaluation) and the loop's history rows
(:attr:`MethodResult.rows`), and the driver's :class:`fedsciml.runtime.results.Result` of the run
(:attr:`MethodResult.result`; :func:`fedsciml.images.bench.to_result` makes the bench's record of it).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

import fedsciml.methods  # noqa: F401  (the built-in methods first: the image ones join fedavg, fedprox, fipa)
from fedsciml.core import linalg
from fedsciml.core.curvature import Diagonal, LowRank
from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.core.schema import floats_in
from fedsciml.runtime.client import dispatch, register_handler
from fedsciml.runtime.driver import METHODS, KindUse, add_kind, kind_error, solve
from fedsciml.runtime.history import Progress
from fedsciml.runtime.results import stop_reason_of
from fedsciml.runtime.loop import RoundConfig
from fedsciml.runtime.simulate import run_loop
from fedsciml.runtime.strategy import Exchange, Strategy
from fedsciml.runtime.transport import BytesTransport, LocalTransport, Reply, Request, Transport
from fedsciml.images import fisher as fz
from fedsciml.images.aggregators import (FedAvgAdamAggregator, FedBEnsAggregator, FedFishAggregator,
                                         FedFisherAggregator, FIPAComplementAggregator, FisherMergeAggregator,
                                         RegMeanAggregator)
from fedsciml.images.config import ImageConfig, TrainConfig
from fedsciml.images.data import FederatedImages
from fedsciml.images.models import FlatModel, build, head_names

SERVER_OPTS = ("default", "avg", "adam")  # TrainConfig.server_opt
IMAGES = "images"  # the kind of task the image methods apply to (fedsciml.runtime.driver.Method.kinds)


@dataclass
class MethodResult:
    method: str
    accuracy: float
    floats_per_client: float
    client_seconds: float
    server_seconds: float
    history: list = field(default_factory=list)  # [(round, accuracy)]
    info: dict = field(default_factory=dict)
    rows: list = field(default_factory=list)     # the loop's history rows (Result.history)
    run: dict = field(default_factory=dict)      # the loop's report: stopped_by, resumed, solver/wall seconds, strategy
    n_params: int = 0
    theta: object = field(default=None, repr=False, compare=False)  # final parameters (all of them), or None
    result: object = field(default=None, repr=False, compare=False)  # the driver's Result of the run, or None

    @property
    def best(self):
        return max((a for _, a in self.history), default=self.accuracy)

    @property
    def mean(self):
        return sum(a for _, a in self.history) / len(self.history) if self.history else self.accuracy


# ------------------------------------------------------------------ primitives
def local_train(model: FlatModel, theta0, x, y, cfg: TrainConfig, seed: int, epochs: int | None = None,
                prox_mu: float = 0.0, label: str = "local training"):
    """SGD with momentum on the client's cross-entropy (+ FedProx's ``μ/2‖θ−θ₀‖²``).  A long training shows
    progress (:class:`fedsciml.runtime.history.Progress`: a bar over the epochs at a terminal, else log lines)."""
    theta = theta0.detach().clone().requires_grad_(True)
    anchor = theta0.detach()
    buf = torch.zeros_like(anchor)
    n = x.shape[0]
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    epochs = cfg.epochs if epochs is None else epochs
    with Progress(epochs, label, unit="epoch") as bar:
        for _ in range(epochs):
            perm = torch.randperm(n, generator=gen).to(x.device)
            for a in range(0, n, cfg.batch_size):
                idx = perm[a:a + cfg.batch_size]
                loss = F.cross_entropy(model(theta, x[idx]), y[idx])
                if prox_mu > 0:
                    loss = loss + 0.5 * prox_mu * ((theta - anchor) ** 2).sum()
                g, = torch.autograd.grad(loss, theta)
                with torch.no_grad():
                    buf.mul_(cfg.momentum).add_(g)
                    theta.sub_(cfg.lr * buf)
            bar.update()
    return theta.detach()


@torch.no_grad()
def predict_proba(model: FlatModel, thetas, x, chunk: int = 1024):
    """Softmax probabilities; ``thetas`` [p] or an ensemble [M, p] (averaged probabilities)."""
    thetas = thetas[None] if thetas.ndim == 1 else thetas
    out = []
    for a in range(0, x.shape[0], chunk):
        out.append(sum(torch.softmax(model(t, x[a:a + chunk]), -1) for t in thetas) / thetas.shape[0])
    return torch.cat(out)


def accuracy(model, thetas, x, y) -> float:
    return float((predict_proba(model, thetas, x).argmax(-1) == y).float().mean())


# --------------------------------------------------------------------- one-shot
def _head_index(model):
    return torch.cat([torch.arange(model.slice(nm).start, model.slice(nm).stop) for nm in head_names(
        model.module)]).to(model.device)


def _fedbens_aggregator(approx):
    def make(model, cfg, modes, template, val):
        return FedBEnsAggregator(approx, modes, template, _head_index(model), cfg.temperature, cfg.prior_var,
                                 cfg.fedbens_steps, cfg.fedbens_lr, evaluate=val)
    return make


def _fedfisher_aggregator(curvature):
    def make(model, cfg, modes, template, val):
        return FedFisherAggregator(curvature, template, evaluate=val, steps=cfg.fedfisher_steps, lr=cfg.fedfisher_lr,
                                   start=cfg.fedfisher_start)
    return make


# one-shot messages: ``(model, theta, ws, x, n)`` with ``ws`` the client's trained model per mode
def _msg_fedavg(model, theta, ws, x, n):  # FedAvg's merge takes the update
    return {"delta": ws[0] - theta, "n": n}


def _msg_fisher_diag(model, theta, ws, x, n):
    return {"w": ws[0], **Diagonal(fz.ggn_diag(model, ws[0], x)).to_message(), "n": n}


def _msg_kfac(model, theta, ws, x, n):
    return {"w": ws[0], **fz.kfac(model, ws[0], x).to_message(), "n": n}


def _msg_regmean(model, theta, ws, x, n):
    grams, _, _ = fz.layer_grams(model, ws[0], x)
    return {"w": ws[0], **{f"gram{i}": g for i, g in enumerate(grams)}, "n": n}


def _msg_fedbens(model, theta, ws, x, n):
    msg = {"w": torch.stack(ws), "n": n}
    ks = [fz.kfac(model, wm, x).to_message() for wm in ws]
    for key in ks[0]:
        msg[key] = torch.stack([k[key] for k in ks])
    return msg


def _msg_fedbens_diag(model, theta, ws, x, n, full_head=False):
    msg = {"w": torch.stack(ws), "n": n}
    msg["diag"] = torch.stack([fz.ggn_diag(model, wm, x) for wm in ws])
    if full_head:
        head = FlatModel(model.module, trainable=lambda nm: nm in head_names(model.module))
        lasts = []
        for wm in ws:
            head.frozen = {k: v for k, v in model.unflatten(wm).items() if k not in head.names}
            idx = torch.cat([torch.arange(model.slice(nm).start, model.slice(nm).stop) for nm in head.names])
            lasts.append(fz.ggn_dense(head, wm[idx.to(wm.device)], x))
        msg["last"] = torch.stack(lasts)
    return msg


def _msg_fedbens_diagfull(model, theta, ws, x, n):
    return _msg_fedbens_diag(model, theta, ws, x, n, full_head=True)


# ------------------------------------------------------------------ multi-round
# round messages: ``(model, theta, w, x, y, cfg, seed, n)`` with ``w`` the client's locally trained model
def _msg_delta(model, theta, w, x, y, cfg, seed, n):
    return {"delta": w - theta, "n": n}


def _msg_fedfish(model, theta, w, x, y, cfg, seed, n):
    return {"delta": w - theta, **Diagonal(fz.empirical_fisher_diag(model, w, x, y, cfg.batch_size)).to_message(),
            "n": n}


def _msg_fipa(model, theta, w, x, y, cfg, seed, n):
    """The delta and the top-r eigenpairs of the softmax GGN at the broadcast model (matrix-free)."""
    delta = w - theta
    r = min(cfg.rank, model.p)
    U, lam = linalg.subspace_iteration(fz.ggn_matmat(model, theta, x), model.p, r, oversample=cfg.oversample,
                                       iters=cfg.power_iters, seed=seed, dtype=theta.dtype, device=theta.device)
    return {"delta": delta, **LowRank(U.contiguous(), lam).to_message(), "n": n}


def _fedavg_round_aggregator(cfg):
    kw = dict(robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm, outlier_ratio=None)
    return FedAvgAdamAggregator(cfg.fedfish_lr, **kw) if cfg.server_opt == "adam" else FedAvgAggregator(**kw)


def _fedprox_round_aggregator(cfg):
    return FedAvgAggregator(robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm, outlier_ratio=None)


def _robust_kw(cfg) -> dict:
    """The byzantine-defence options of ``cfg`` (:mod:`fedsciml.runtime.robust`), for every aggregator of updates."""
    return dict(robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm)


def _fedfish_aggregator(cfg):
    return FedFishAggregator(cfg.fedfish_lr, server_opt="avg" if cfg.server_opt == "avg" else "adam",
                             **_robust_kw(cfg))


def _fipa_aggregator(cfg):
    return FIPAComplementAggregator(beta_rel=cfg.beta, gamma=cfg.gamma, tail=cfg.tail, **_robust_kw(cfg))


# ------------------------------------------------------------------ the registry
@dataclass(frozen=True)
class ImageMethod:
    """One image method, as the loop and the clients need it (an entry of :data:`METHODS`).

    ``protocol`` — ``"one-shot"`` (one round, every client trains from the shared initialization(s)) or
    ``"rounds"`` (multi-round; also the refinement of ``warmup-refine``).  ``aggregator`` — the server's
    merge: ``aggregator(model, cfg, modes, template, val)`` for one-shot methods, ``aggregator(cfg)`` for
    round methods.  ``message`` — the client's reply from its trained model(s) (see the ``_msg_*``
    builders).  ``modes`` — trains ``cfg.modes`` initializations (FedBEns); ``template`` — needs the K-FAC
    layer layout; ``prox`` — local training adds FedProx's ``μ/2‖θ−θ₀‖²``; ``head_only`` — trains and
    merges only the classifier head (FIPA-FC); ``default`` — in the default method set of its protocol;
    ``robust`` — its server combines the clients' updates and takes the byzantine defence of
    :class:`TrainConfig` (``robust``, ``trim``, ``clip_norm``: :mod:`fedsciml.runtime.robust`); the one-shot
    curvature-weighted model merges (FisherMerge, RegMean, FedFisher, FedBEns) have none.
    """

    name: str
    protocol: str
    aggregator: Callable
    message: Callable
    description: str
    modes: bool = False
    template: bool = False
    prox: bool = False
    head_only: bool = False
    default: bool = True
    robust: bool = False


_DECLARED = (
    ImageMethod("fedavg", "one-shot",
                lambda model, cfg, modes, template, val: FedAvgAggregator(outlier_ratio=None, **_robust_kw(cfg)),
                _msg_fedavg, "sample-weighted mean of the local models", robust=True),
    ImageMethod("fishermerge", "one-shot",
                lambda model, cfg, modes, template, val: FisherMergeAggregator(1e-6), _msg_fisher_diag,
                "diagonal-Fisher-weighted mean"),
    ImageMethod("regmean", "one-shot",
                lambda model, cfg, modes, template, val: RegMeanAggregator(template, cfg.regmean_alphas, evaluate=val),
                _msg_regmean, "per-layer regression mean on the layer-input Grams", template=True),
    ImageMethod("fedfisher-diag", "one-shot", _fedfisher_aggregator("diag"), _msg_fisher_diag,
                "Adam on the diagonal-Fisher quadratic"),
    ImageMethod("fedfisher-kfac", "one-shot", _fedfisher_aggregator("kfac"), _msg_kfac,
                "Adam on the K-FAC quadratic", template=True),
    ImageMethod("fedbens", "one-shot", _fedbens_aggregator("kfac"), _msg_fedbens,
                "Bayesian ensemble, K-FAC Laplace precisions", modes=True, template=True),
    ImageMethod("fedbens-diag", "one-shot", _fedbens_aggregator("diag"), _msg_fedbens_diag,
                "Bayesian ensemble, diagonal precisions", modes=True, default=False),
    ImageMethod("fedbens-diagfull", "one-shot", _fedbens_aggregator("diagfull"), _msg_fedbens_diagfull,
                "Bayesian ensemble, diagonal + full last-layer precisions", modes=True, default=False),
    ImageMethod("fedavg", "rounds", _fedavg_round_aggregator, _msg_delta, "FedAvg (plain mean, or server Adam)",
                robust=True),
    ImageMethod("fedprox", "rounds", _fedprox_round_aggregator, _msg_delta, "FedAvg with the proximal term",
                prox=True, robust=True),
    ImageMethod("fipa", "rounds", _fipa_aggregator, _msg_fipa, "delta + top-r GGN eigenpairs, thin-QR merge",
                robust=True),
    ImageMethod("fipa-fc", "rounds", _fipa_aggregator, _msg_fipa, "FIPA on the classifier head only",
                head_only=True, robust=True),
    ImageMethod("fedfish", "rounds", _fedfish_aggregator, _msg_fedfish,
                "delta + empirical Fisher diagonal, server Adam", robust=True),
)


def _register_with_driver(specs) -> None:
    """Put every image method into the one method registry (:data:`fedsciml.runtime.driver.METHODS`) under the
    kind ``images``: its :class:`~fedsciml.runtime.driver.KindUse` runs :func:`run_image_method` with an
    :class:`~fedsciml.images.config.ImageConfig`, and its ``detail`` is ``{protocol: ImageMethod}``."""
    by_name: dict[str, dict[str, ImageMethod]] = {}
    for s in specs:
        by_name.setdefault(s.name, {})[s.protocol] = s
    for name, protocols in by_name.items():
        text = "; ".join(f"{p}: {m.description}" for p, m in protocols.items())
        add_kind(name, IMAGES, KindUse(functools.partial(run_image_method, name), ImageConfig, dict(protocols), text))


def _order(protocol: str) -> tuple[str, ...]:
    """The image methods of ``protocol`` in the one registry, in their order of declaration (the table's)."""
    names = [s.name for s in _DECLARED if s.protocol == protocol]
    return tuple(n for n in names if n in METHODS and protocol in (_detail(n) or {}))


def _detail(name: str) -> dict | None:
    use = METHODS[name].uses.get(IMAGES) if name in METHODS else None
    return None if use is None else use.detail


def image_method(name: str, protocol: str) -> ImageMethod:
    """The registered method ``name`` of ``protocol`` (``"one-shot"``, or ``"rounds"``/``"warmup-refine"``),
    from the one method registry; a method that is not an image method of that protocol is a ``ValueError``
    naming it and the allowed names."""
    proto = "one-shot" if protocol == "one-shot" else "rounds"
    label = "one-shot" if proto == "one-shot" else "multi-round"
    allowed = _order(proto)
    if name in METHODS and not METHODS[name].applies_to(IMAGES):
        raise ValueError(kind_error(METHODS[name], IMAGES))
    detail = _detail(name) if isinstance(name, str) else None
    if detail is None:
        raise ValueError(f"unknown {label} method {name!r} (image benchmarks); choose from {', '.join(allowed)}")
    if proto not in detail:
        other = "one-shot" if "one-shot" in detail else "multi-round"
        raise ValueError(f"method {name!r} is a {other} image method, not a {label} one (image benchmarks); "
                         f"{label} methods: {', '.join(allowed)}")
    return detail[proto]


def default_methods(protocol: str) -> list:
    proto = "one-shot" if protocol == "one-shot" else "rounds"
    return [n for n in _order(proto) if image_method(n, proto).default]


def remote_refusal(protocol: str, methods, engine: str = "this engine") -> str | None:
    """The one line refusing ``methods`` (``None``: ``protocol``'s default set) of ``protocol`` on an engine whose
    clients are rebuilt on remote nodes, or ``None`` when each of them runs there.  A head-only method (FIPA-FC:
    :attr:`ImageMethod.head_only`) trains the classifier head of a body the server fixes, which a remote client
    cannot rebuild yet; one-shot protocols have none."""
    if protocol == "one-shot":
        return None
    names = default_methods(protocol) if methods is None else list(methods)
    declared = {n: image_method(n, "rounds").head_only for n in _order("rounds")}
    head = [n for n in names if declared.get(n)]
    if not head:
        return None
    others = [n for n, only in declared.items() if not only]
    return (f"{engine} does not run {', '.join(head)} (its clients train a head on a body the server fixes, which "
            f"a remote client cannot rebuild yet); give methods without it, e.g. {','.join(others)}")


def _aggregator(meth, cfg):
    """The server aggregator of the multi-round method ``meth`` under ``cfg``."""
    if cfg.server_opt not in SERVER_OPTS:
        raise ValueError(f"server_opt must be one of {', '.join(SERVER_OPTS)}, got {cfg.server_opt!r}")
    return image_method(meth, "rounds").aggregator(cfg)


class ImageClient:
    """One image client behind a :class:`~fedsciml.runtime.transport.Transport`: its own samples and model.

    Answers ``update`` (config ``method``, ``seed``, ``train`` — the
    :class:`TrainConfig` fields) with the registered method's message after
    local training, its local-training seconds as a metric; ``one_shot`` (config ``method``,
    ``modes``, ``seed``, ``train``; tensors ``theta`` and, for FedBEns, the
    other ``inits``) with the registered one-shot message, training each
    initialization once and keeping it for the next method; and ``loss`` with
    its summed training cross-entropy at θ (monitoring).  ``model`` is the network the exchanged
    parameters belong to (for FIPA-FC: the classifier head, the frozen body set
    up at enrollment).
    """

    def __init__(self, cid: int, x, y, model: FlatModel):
        self.cid, self.x, self.y, self.model = cid, x, y, model
        self.n = int(len(y))
        self._trained = {}  # (seed, mode) -> (local model, training seconds): one-shot methods share them

    def answer(self, request, pre=None, deadline=None):
        """Answer ``loss``, ``update`` or ``one_shot`` (the handlers registered below)."""
        return dispatch(self, request, pre, deadline)

    def _count(self, theta):
        return torch.tensor([float(self.n)], device=theta.device)

    def answer_loss(self, request, pre=None, deadline=None):
        theta = request.tensors["theta"]
        n = self._count(theta)
        with torch.no_grad():
            loss = sum(float(F.cross_entropy(self.model(theta, self.x[a:a + 1024]), self.y[a:a + 1024],
                                             reduction="sum")) for a in range(0, self.n, 1024))
        return Reply({"loss": torch.tensor([loss], dtype=theta.dtype, device=theta.device), "n": n})

    def answer_update(self, request, pre=None, deadline=None):
        theta, cfg = request.tensors["theta"], request.config
        n = self._count(theta)
        spec = image_method(cfg["method"], "rounds")
        tc = TrainConfig(**{**cfg["train"], "regmean_alphas": tuple(cfg["train"]["regmean_alphas"])})
        t0 = time.perf_counter()
        seed = int(cfg["seed"]) + self.cid
        w = local_train(self.model, theta, self.x, self.y, tc, seed, prox_mu=tc.prox_mu if spec.prox else 0.0,
                        label=f"client {self.cid} {cfg['method']}")
        msg = spec.message(self.model, theta, w, self.x, self.y, tc, seed, n)
        return Reply(msg, {"seconds": time.perf_counter() - t0})

    def answer_one_shot(self, request, pre=None, deadline=None):
        theta, cfg = request.tensors["theta"], request.config
        n = self._count(theta)
        tc = TrainConfig(**{**cfg["train"], "regmean_alphas": tuple(cfg["train"]["regmean_alphas"])})
        inits = [theta] + (list(request.tensors["inits"]) if "inits" in request.tensors else [])
        modes, s0 = int(cfg["modes"]), int(cfg["seed"])
        local, train_s = [], 0.0
        for m in range(modes):
            if (s0, m) not in self._trained:
                t0 = time.perf_counter()
                w = local_train(self.model, inits[m], self.x, self.y, tc, seed=s0 + self.cid * 31 + m,
                                label=f"client {self.cid} training" + (f" (mode {m + 1}/{modes})" if modes > 1 else ""))
                self._trained[s0, m] = (w, time.perf_counter() - t0)
            local.append(self._trained[s0, m][0])
            train_s += self._trained[s0, m][1]
        t0 = time.perf_counter()
        msg = image_method(cfg["method"], "one-shot").message(self.model, theta, local, self.x, n)
        return Reply(msg, {"train_s": train_s, "message_s": time.perf_counter() - t0})


register_handler(ImageClient, "loss", ImageClient.answer_loss)
register_handler(ImageClient, "update", ImageClient.answer_update)
register_handler(ImageClient, "one_shot", ImageClient.answer_one_shot)


class OneShotImageStrategy(Strategy):
    """A one-shot image method as a one-round strategy: the sampled clients train from the broadcast
    initialization(s) and send one message (``one_shot`` query); the method's aggregator merges once."""

    def __init__(self, meth: str, agg, cfg: TrainConfig, inits, modes: int, seed: int):
        self.meth, self.agg, self.cfg, self.inits, self.modes, self.seed = meth, agg, cfg, inits, modes, seed
        self.name = meth
        self.loss_sum = float("nan")  # not measured: an ensemble (FedBEns) has no single parameter vector
        self.floats, self.client_s, self.server_s = 0.0, 0.0, 0.0

    def configure_round(self, run, k):
        answering, _ = run.sample()
        tensors = {"theta": self.inits[0]}
        if self.modes > 1:
            tensors["inits"] = torch.stack(self.inits[1:self.modes])
        cfg = {"method": self.meth, "modes": self.modes, "seed": self.seed * 7919,
               "train": dataclasses.asdict(self.cfg), "vectorize": False}
        p = self.inits[0].numel()
        return Exchange(answering, Request("one_shot", tensors, cfg),
                        lambda m: self.agg.validate(m, p, self.inits[0].dtype))

    def aggregate_round(self, run, k, replies):
        ok = replies.ok
        if not ok:
            run.fail(f"the {self.meth} merge")
        self.floats = sum(floats_in(m) for m in ok.values()) / len(ok)
        self.client_s = sum(replies.metrics[c]["train_s"] + replies.metrics[c]["message_s"] for c in ok)
        t0 = time.perf_counter()
        self.theta = self.agg.aggregate(self.inits[0], ok, server_round=k)
        self.server_s = time.perf_counter() - t0
        return {"answered": len(ok)}

    def finished(self, run):
        return "one-shot" if run.round_index >= 1 else None

    def state_dict(self):
        return {"theta": self.theta}

    def load_state_dict(self, d):
        self.theta = d["theta"]

    def summary(self):
        return {"method": self.meth, "modes": self.modes, "epochs": self.cfg.epochs, "lr": self.cfg.lr}


def run_one_shot(fed: FederatedImages, model_name: str, methods, seed: int, cfg: TrainConfig,
                 progress=None, dropout: float = 0.0, transport: str = "local", message_hook=None) -> dict:
    """All one-shot methods on one split, each a one-round run of the federated round loop through the one driver
    (:func:`fedsciml.runtime.driver.solve` on an :class:`ImageTask`); every method reuses the same client models
    (each client trains each initialization once and keeps it)."""
    specs = [image_method(m, "one-shot") for m in methods]
    _check_transport(transport)
    say = progress or (lambda s: None)
    dev = torch.device(cfg.device)
    model = FlatModel(build(model_name, fed.shape, fed.n_classes, seed), device=dev)
    task = ImageTask(fed, model, model_name, seed, cfg)
    results = {}
    for spec in specs:
        config = ImageConfig(protocol="one-shot", dropout=dropout,
                             transport=transport if isinstance(transport, str) else "local")
        res = solve(task, spec.name, clients=len(fed.clients), seed=seed, device=dev, config=config,
                    message_hook=message_hook, **_runtime(transport))
        results[spec.name] = r = _method_result(spec.name, task, res, one_shot=True)
        say(f"  {spec.name:17s} acc {r.accuracy:.4f}  floats/client {r.floats_per_client:.0f}  "
            f"server {r.server_seconds:.1f}s")
    return results


def _runtime(transport) -> dict:
    """The driver's runtime keyword for a :class:`Transport` object (Flower's); a name is a config option."""
    return {"transport": transport} if isinstance(transport, Transport) else {}


def _method_result(name: str, task: ImageTask, res, one_shot: bool) -> MethodResult:
    """One method's :class:`MethodResult` from the driver's :class:`~fedsciml.runtime.results.Result` (its
    ``extra`` is the runner's accounting)."""
    x = res.extra
    hist = [] if one_shot else [(row["round"], row["accuracy"]) for row in res.history if "accuracy" in row]
    acc = res.history[-1]["accuracy"] if one_shot else (hist[-1][1] if hist else float("nan"))
    return MethodResult(name, acc, x["floats"], x["client_s"], x["server_s"], history=hist, info=x["info"],
                        rows=res.history, run=x["run"], n_params=x["n_params"], theta=task.lift(res.theta),
                        result=res)


class ImageTask:
    """An image-classification setting as the one driver (:mod:`fedsciml.runtime.driver`) takes a problem: the
    clients' objectives (:class:`ImageClient`: cross-entropy on their images), θ₀, the test accuracy, the memory
    estimate.  Kind ``images``: the driver runs an image method's :func:`run_image_method` on it.

    ``model`` — the network; ``train`` — the clients' training recipe and the methods' knobs; ``start`` — θ₀ (default: the model's initialization); ``head_only`` — the
    parameters are the classifier head of ``start``'s network (FIPA-FC), :meth:`lift` puts them back.  For the
    multi-round protocol: ``cohorts`` (the clients of each round, shared by every method), ``first_round`` (the
    rounds before, e.g. a warm-up), ``label`` (the run's name in progress lines and checkpoints),
    ``eval_every``, ``say`` (progress lines) and ``fingerprint`` (stored with checkpoints)."""

    kind = IMAGES
    name = "images"
    options: dict = {}

    def __init__(self, fed: FederatedImages, model: FlatModel, model_name: str, seed: int, train: TrainConfig, *,
                 start=None,
                 head_only: bool = False, cohorts=None, first_round: int = 0, label: str = "", eval_every: int = 1,
                 say=None, fingerprint: dict | None = None):
        self.fed, self.full, self.model_name, self.seed, self.train = fed, model, model_name, int(seed), train
        self.cohorts, self.first_round, self.label, self.eval_every = cohorts, first_round, label, eval_every
        self.say = say or (lambda s: None)
        self.fingerprint = fingerprint or {}
        self.default_clients = len(fed.clients)
        theta = model.theta() if start is None else start
        self.model, self._idx, self._base = model, None, None
        if head_only:
            heads = head_names(model.module)
            self.model = FlatModel(model.module, trainable=lambda nm: nm in heads)
            self.model.frozen = {k: v for k, v in model.unflatten(theta).items() if k not in heads}
            self._idx = torch.cat([torch.arange(model.slice(h).start, model.slice(h).stop)
                                   for h in heads]).to(theta.device)
            self._base = theta.clone()
            theta = theta[self._idx]
        self.start = theta
        self._clients, self._inits, self._template, self._last = None, [self.start], None, None

    # --- what the driver calls (a problem's hooks)
    def client_objectives(self, clients: int, seed: int = 0, device=None) -> list:
        """The clients (built once: the one-shot methods reuse the local models each client trained)."""
        if clients != self.default_clients:
            raise ValueError(f"this image split has {self.default_clients} clients, got clients={clients}")
        if self._clients is None:
            self._clients = [ImageClient(c, x, y, self.model) for c, (x, y) in enumerate(self.fed.clients)]
        return self._clients

    def init_params(self, seed: int = 0, device=None):
        return self.start

    def evaluate(self, theta) -> dict:
        """``{"accuracy": test accuracy}`` at ``theta`` (the last value is kept: the driver asks again for the
        parameters the loop evaluated last)."""
        if self._last is not None and self._last[0] is theta and self._last[1] == theta._version:
            return dict(self._last[2])
        out = {"accuracy": accuracy(self.full, self.lift(theta), self.fed.x_test, self.fed.y_test)}
        self._last = (theta, theta._version, out)
        return dict(out)

    def final_metrics(self, theta, objectives) -> dict:
        return {}

    def check_objectives(self, clients, theta0) -> None:
        """Before the run (the driver's check): clients with images, and θ₀ of the network's size."""
        from fedsciml.runtime.checks import SetupError

        for c in clients:
            if c.n == 0:
                raise SetupError(f"image client {c.cid} has no images (empty client)")
            if c.model.p != theta0.numel():
                raise SetupError(f"image client {c.cid}: the network has {c.model.p} parameters, θ₀ has "
                                 f"{theta0.numel()}")

    def estimate_memory(self, clients: int, config: ImageConfig, method: str = "") -> tuple[float, str]:
        """Bytes of the clients' images and of the messages the server holds in one round (float32): per client
        the model and what ``method`` sends with it (FIPA r eigenvectors; a diagonal or K-FAC factors, of at
        most the model's size; FedBEns that per mode)."""
        p, cfg = int(self.model.p), self.train
        spec = image_method(method, config.protocol) if method else None
        per = 3 if spec is None else (2 + min(cfg.rank, p) if spec.name.startswith("fipa") else
                                      2 * (cfg.modes if spec.modes else 1) + 1)
        images = sum(int(x.numel()) for x, _ in self.fed.clients)
        how = f"{images:,} image floats + {clients:,} client(s) × {p:,} parameters × {per} × 4 bytes"
        return 4.0 * (images + clients * per * p), how

    # --- what the image runner uses
    def lift(self, theta):
        """The full parameter vector of ``theta`` (the head put back into its network for FIPA-FC)."""
        if self._idx is None:
            return theta
        b = self._base.clone()
        b[self._idx] = theta
        return b

    def initializations(self, modes: int) -> list:
        """``modes`` shared initializations: θ₀, then networks drawn from ``seed·1000 + 17 + m`` (FedBEns)."""
        while len(self._inits) < modes:
            m = len(self._inits)
            self._inits.append(FlatModel(build(self.model_name, self.fed.shape, self.fed.n_classes,
                                               self.seed * 1000 + 17 + m), device=self.start.device).theta())
        return self._inits[:modes]

    def template(self):
        """The K-FAC layer layout (shapes only), from the server's own validation images."""
        if self._template is None:
            self._template = fz.kfac(self.model, self.start, self.fed.x_val[:2])
        return self._template

    def validate(self, theta) -> float:
        """Validation accuracy (the server's own images: RegMean's α, FedFisher's and FedBEns's choices)."""
        return accuracy(self.model, theta, self.fed.x_val, self.fed.y_val)


def run_image_method(name: str, task: ImageTask, objectives, theta0, evaluate, config: ImageConfig, *, seed=0,
                     progress=False, every=10, message_hook=None, transport=None):
    """The runner of image method ``name`` (the ``images`` use of its registry entry; the signature of every
    runner, :mod:`fedsciml.runtime.driver`): its strategy on the round loop over the task's clients.
    Returns ``(θ, history rows, info)``; ``info`` holds the accounting the bench reports (floats per client,
    client / server seconds, the loop's report)."""
    cfg = task.train
    spec = image_method(name, config.protocol)
    if transport is None:
        transport = LocalTransport(list(objectives), vectorize=False)
        if config.transport == "bytes":
            transport = BytesTransport(transport, device=theta0.device)
    if config.protocol == "one-shot":
        modes = cfg.modes if spec.modes else 1
        agg = spec.aggregator(task.model, cfg, modes, task.template() if spec.template else None, task.validate)
        strategy = OneShotImageStrategy(name, agg, cfg, task.initializations(modes), modes, seed)

        def ev(t, k):
            return evaluate(t) if k >= 1 else {}

        t0 = time.perf_counter()
        theta, rows, rinfo = run_loop(transport, strategy, theta0, None,
                                      RoundConfig(dropout=config.dropout, seed=seed), round_evaluate=ev, label=name,
                                      message_hook=message_hook)
        wall = time.perf_counter() - t0
        r = rows[-1]
        info = {"rejections": rinfo["rejections"],
                "rounds": [{"round": 1, **{f: r[f] for f in ("floats_up", "floats_down", "dropped", "rejected",
                                                            "answered") if f in r}}]}
        if getattr(agg, "chosen_alpha", None) is not None:
            info["alpha"] = agg.chosen_alpha
        return theta, rows, {"floats": strategy.floats, "client_s": strategy.client_s / len(objectives),
                             "server_s": strategy.server_s, "info": info, "run": _run_info(rinfo, wall),
                             "stop_reason": stop_reason_of(rinfo),
                             "n_params": task.model.p}
    r0, n = task.first_round, config.rounds
    strategy = ImageRoundStrategy(name, _aggregator(name, cfg), cfg, task.cohorts, r0, seed)

    def ev(t, kk):
        if kk == 0 or not (kk % task.eval_every == 0 or kk == n):
            return {}
        out = evaluate(t)
        task.say(f"  {task.label:8s} round {r0 + kk:4d}  test acc {out['accuracy']:.4f}")
        return out

    t0 = time.perf_counter()
    theta, rows, rinfo = run_loop(transport, strategy, theta0, None,
                                  RoundConfig(rounds=n, dropout=config.dropout, seed=seed,
                                              checkpoint=config.checkpoint, resume=config.resume),
                                  round_evaluate=ev, label=task.label, message_hook=message_hook,
                                  fingerprint={**task.fingerprint, "method": task.label, "first_round": r0})
    wall = time.perf_counter() - t0
    per_round = [{"round": r0 + row["round"], **{f: row[f] for f in ("floats_up", "floats_down", "dropped",
                                                                     "rejected", "answered") if f in row}}
                 for row in rows[1:]]
    info = {"rounds": per_round, "rejections": [{**e, "round": r0 + e["round"]} for e in rinfo["rejections"]],
            "skipped_rounds": rinfo["skipped_rounds"]}
    rows = [{**row, "round": r0 + row["round"], "step": r0 + row["step"]} for row in rows]
    k = len(task.cohorts[r0]) if task.cohorts else len(objectives)
    return theta, rows, {"floats": _mean(strategy.floats), "client_s": strategy.client_s / max(1, n * k),
                         "server_s": strategy.server_s / max(1, n), "info": info, "run": _run_info(rinfo, wall),
                         "stop_reason": stop_reason_of(rinfo),
                         "n_params": task.model.p}


def _run_info(info: dict, wall: float) -> dict:
    """What the loop reported about a run, for the result's ``extra`` (the rejections are in ``info``)."""
    return {"stopped_by": info["stopped_by"], "resumed": info["resumed"], "skipped_rounds": info["skipped_rounds"],
            "solver_time_s": info["solver_time_s"], "wall_time_s": wall, "strategy": info["strategy"]}


def _check_transport(transport):
    if not isinstance(transport, Transport) and transport not in ("local", "bytes"):
        raise ValueError(f"transport must be one of local, bytes (or a Transport), got {transport!r}")


def image_client(spec: dict, cid: int) -> ImageClient:
    """Client ``cid`` of an image setting, built from plain values — what a remote node (Flower) does.

    ``spec``: ``dataset``, ``data_dir``, ``clients``, ``alpha``, ``split``, ``seed``, ``model``, ``device``
    (as :func:`fedsciml.images.bench.run_setting` takes them).  The node loads the data set, splits it with
    :func:`fedsciml.images.data.federate` (the same rows as the in-process run with that seed) and keeps
    client ``cid``'s part only; the model's parameters come with each request.
    """
    from fedsciml.images import data as imdata

    C = int(spec["clients"])
    if not 0 <= int(cid) < C:
        raise ValueError(f"image client {cid} is outside 0..{C - 1} for a split into {C} clients")
    dev = spec.get("device", "cpu")
    fed = imdata.federate(imdata.load(spec["dataset"], spec.get("data_dir")), C, spec.get("alpha"), int(spec["seed"]),
                          spec.get("split", "balanced"), device=dev)
    model = FlatModel(build(spec["model"], fed.shape, fed.n_classes, int(spec["seed"])), device=torch.device(dev))
    x, y = fed.clients[int(cid)]
    return ImageClient(int(cid), x, y, model)


class ImageRoundStrategy(Strategy):
    """Multi-round image methods on the one round loop: the cohort of each round (seeded, shared by every
    method), dropout from the loop, ``update`` requests, the method's aggregator on the validated replies.

    :meth:`state_dict` holds everything the next round depends on beyond the loop's own state (θ, round,
    sampling RNG): the aggregator's state (the sample counts enrolled, FedFish's / server-Adam FedAvg's
    Adam moments and step) and the accounting (floats per round, client / server seconds); client seeds
    and cohorts are functions of the seed and the round, so a resumed run repeats the same operations."""

    def __init__(self, meth: str, agg, cfg: TrainConfig, cohorts, r0: int, seed: int):
        self.meth, self.agg, self.cfg, self.cohorts, self.r0, self.seed = meth, agg, cfg, cohorts, r0, seed
        self.name = meth
        self.floats, self.client_s, self.server_s = [], 0.0, 0.0

    def configure_round(self, run, k):
        r = self.r0 + k - 1
        answering, dropped = run.drop_out(self.cohorts[r])
        self._dropped = dropped
        if not answering:
            return None
        theta = self.theta
        cfg = {"method": self.meth, "seed": self.seed * 100003 + r * 101, "train": dataclasses.asdict(self.cfg),
               "vectorize": False}
        return Exchange(answering, Request("update", {"theta": theta}, cfg),
                        lambda m: self.agg.validate(m, theta.numel(), theta.dtype))

    def aggregate_round(self, run, k, replies):
        ok = replies.ok
        if not ok:
            run.fail("aggregation")
        self.floats.append(sum(floats_in(m) for m in ok.values()) / len(ok))
        self.client_s += sum(replies.metrics[c]["seconds"] for c in ok)
        t0 = time.perf_counter()
        self.theta = self.agg.aggregate(self.theta, ok, server_round=k)
        self.server_s += time.perf_counter() - t0
        return {"answered": len(ok), "rejected_clients": sorted(replies.rejected)}

    def round(self, run, k):
        extra = super().round(run, k)
        return {**extra, "dropped_clients": list(self._dropped)}  # who did not answer (dropout), by id

    def state_dict(self):
        return {"theta": self.theta, "aggregator": self.agg.state_dict(), "floats": list(self.floats),
                "client_s": self.client_s, "server_s": self.server_s}

    def load_state_dict(self, d):
        self.theta = d["theta"]
        self.agg.load_state_dict(d["aggregator"])
        self.floats = [float(f) for f in d["floats"]]
        self.client_s, self.server_s = float(d["client_s"]), float(d["server_s"])

    def summary(self):
        return {"method": self.meth, **{k: v for k, v in dataclasses.asdict(self.cfg).items()
                                         if k in ("epochs", "lr", "momentum", "batch_size", "prox_mu", "rank")}}


def run_rounds(fed: FederatedImages, model_name: str, methods, seed: int, cfg: TrainConfig, rounds: int,
               warmup: int = 0, participation: float = 1.0, progress=None, eval_every: int = 1,
               dropout: float = 0.0, transport: str = "local", message_hook=None, checkpoint: str | None = None,
               resume: bool = False, fingerprint: dict | None = None) -> dict:
    """Multi-round training on the federated round loop, each run through the one driver
    (:func:`fedsciml.runtime.driver.solve` on an :class:`ImageTask`); with ``warmup`` FedAvg rounds first, shared
    by every method.  Each method's ``info`` records per round the floats sent up and down, the dropped and
    rejected clients (``info["rounds"]``) and every rejection with its reason (``info["rejections"]``).

    ``checkpoint`` — a directory: each run (the warm-up, then each method) writes its state after every round
    to ``checkpoint/seed{seed}/{method}/state.pt`` (:mod:`fedsciml.runtime.checkpoint`: checksummed, read
    back with ``weights_only``); with ``resume`` each run continues from its checkpoint (a finished one is
    not run again), so N rounds straight and N/2 + N/2 resumed give bitwise the same history and parameters.
    ``fingerprint`` — settings the caller knows (dataset, split) stored with the checkpoint; resuming with
    other settings is an error naming the first difference."""
    specs = [image_method(m, "rounds") for m in methods]
    if not 0 < participation <= 1:
        raise ValueError(f"participation must be in (0, 1], got {participation}")
    _check_transport(transport)
    if isinstance(transport, Transport) and (no := remote_refusal("rounds", methods, "a remote transport")):
        raise ValueError(f"{no} (or run them with the in-process engine)")
    if resume and not checkpoint:
        raise ValueError("resume needs a checkpoint directory (the one the interrupted run wrote)")
    dev = torch.device(cfg.device)
    say = progress or (lambda s: None)
    full = FlatModel(build(model_name, fed.shape, fed.n_classes, seed), device=dev)
    theta0 = full.theta()
    C = len(fed.clients)
    k = max(1, int(round(participation * C)))
    sched = torch.Generator().manual_seed(seed + 101)
    cohorts = [sorted(torch.randperm(C, generator=sched)[:k].tolist()) for _ in range(warmup + rounds)]
    base_print = {**(fingerprint or {}), "model": model_name, "seed": seed, "clients": C,
                  "client_samples": [int(len(y)) for _, y in fed.clients], "n_params": full.p,
                  "participation": participation, "dropout": dropout, "warmup": warmup,
                  "train": dataclasses.asdict(cfg)}

    def run(name, method, theta, r0, r1, head_only=False):
        task = ImageTask(fed, full, model_name, seed, cfg, start=theta, head_only=head_only, cohorts=cohorts,
                         first_round=r0, label=name, eval_every=eval_every, say=say, fingerprint=base_print)
        where = None if checkpoint is None else os.path.join(checkpoint, f"seed{seed}", name)
        config = ImageConfig(protocol="rounds", rounds=r1 - r0, dropout=dropout, checkpoint=where, resume=resume,
                             transport=transport if isinstance(transport, str) else "local")
        res = solve(task, method, clients=C, seed=seed, device=dev, config=config, message_hook=message_hook,
                    **_runtime(transport))
        return res.theta, _method_result(name, task, res, one_shot=False)

    theta = theta0
    out = {}
    if warmup:
        say(f"FedAvg warm-up: {warmup} rounds")
        theta, out["warmup"] = run("warmup", "fedavg", theta0, 0, warmup)
    for spec in specs:
        _, out[spec.name] = run(spec.name, spec.name, theta, warmup, warmup + rounds, spec.head_only)
    return out


def _mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


_register_with_driver(_DECLARED)
ONE_SHOT = _order("one-shot")
MULTI_ROUND = _order("rounds")
