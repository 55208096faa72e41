"""The client half of the local-training methods: FIPA's and FedAvg/FedProx's answer to the ``update`` query.

One file for both because they are one query: a FedAvg/FedProx client and a FIPA client run the *same* local
training (:class:`LocalConfig`: Adam steps on the client's own loss, or one exact damped Gauss–Newton step) and
send the same ``{"delta", "n"}``; FIPA's request adds ``curvature`` and the client adds its curvature at the
broadcast θ to the same message.  Splitting the two would put the local step in one file and import it from the
other; here :mod:`fedsciml.methods.averaging` and :mod:`fedsciml.methods.fipa` (the server halves) both import
this one.  Importing it registers the handler on :class:`~fedsciml.runtime.client.Client`
(:func:`~fedsciml.runtime.client.register_handler`, with a vectorized precompute over a
:class:`~fedsciml.runtime.client.ClientBatch`); :mod:`fedsciml.methods` imports it, so every process that runs
or serves these methods (a Flower node included) has it.

The messages (:mod:`fedsciml.core.schema`):

* FedAvg / FedProx (``curvature=None``): ``{"delta", "n"}``;
* FIPA: ``{"delta", "n"}`` plus its curvature at the *broadcast* θ — ``"H"`` (the packed full ``J_mᵀJ_m``,
  ``curvature='full'``) or the top-r eigenpairs ``"U", "lam"`` (``'lowrank'``); ``"loss"`` when asked
  (``report_loss``, FIPA's safeguard), ``"gnorm"`` for adaptive FIPA.

Curvature is the sum form ``H_m = J_mᵀJ_m`` of the objective ``½‖r_m‖²`` (see
:mod:`fedsciml.core.objective`: FIPA's ``N_m/N`` factors cancel).  Spectral work goes through the *smaller*
Gram matrix (:class:`Spectrum`): for ``n_m < p`` (every PINN/fitting client here) the eigenpairs of ``J_mᵀJ_m``
come from ``J_mJ_mᵀ = W Λ Wᵀ`` as ``U = J_mᵀ W Λ^{-1/2}``, and the exact local damped GN step is
``−J_mᵀ (J_mJ_mᵀ + μI)^{-1} r_m`` (push-through identity), so no p×p matrix is formed for a low-rank FIPA
client.  For large p without a dense Jacobian, ``sketch="matfree"`` runs randomized subspace iteration with
Rayleigh–Ritz (paper Eqs. 10–12) on ``jvp``/``vjp`` products (local Adam), or the Nyström sketch and CG step of
:func:`fedsciml.core.matfree.local_gn_sketch` (local GN).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from fedsciml.core import linalg
from fedsciml.core.curvature import Dense, LowRank, ggn_matmat
from fedsciml.core.forms import local_client_form
from fedsciml.core.matfree import local_gn_sketch
from fedsciml.core.objective import LeastSquares, gn_stats_from
from fedsciml.options import LocalOptions, defaults_of
from fedsciml.runtime.client import Client, register_handler, scalar_like
from fedsciml.runtime.history import Progress
from fedsciml.runtime.protocol import Reply

LOCAL_SOLVERS = ("adam", "gn")
LOCAL_LOSSES = ("mean", "parts")
SKETCHES = ("auto", "dense", "matfree")
_LOCAL = defaults_of(LocalOptions)  # one default per option: the typed configuration's


@dataclass
class LocalConfig:
    """Local training of FIPA / FedAvg / FedProx clients.

    ``solver='adam'``: ``steps`` Adam steps (learning rate ``lr``) on the
    client's mean loss ``½‖r_m‖²/n_m`` (+ ``prox/2‖θ − θ_k‖²`` for FedProx),
    a fresh optimizer each round (the paper's choice).  ``loss='parts'``
    trains instead on the sum over residual parts of each part's mean,
    ``mean(r_int²) + β·mean(r_bc²)`` — the FIPA reference code's PINN loss,
    which weighs the boundary far more than ``½‖r_m‖²/n_m`` does (its
    curvature ``J_mᵀJ_m`` is the same either way).
    ``solver='gn'``: one exact damped Gauss–Newton step of the client's own
    linearized problem, ``Δθ_m = −(H_m + μ_m I)^{-1} g_m`` with
    ``μ_m = damping · λ_max(H_m)``; ``damping=0`` gives the minimum-norm
    ``−H_m^† g_m`` of the paper's consistency property.

    This is the wire form built from the typed options (:class:`fedsciml.options.LocalOptions`); its
    defaults are read from there (``loss``: :data:`LOCAL_LOSSES`' first, FIPA's ``local_loss`` default), so
    each option has one default.
    """

    solver: str = _LOCAL["local"]
    steps: int = _LOCAL["local_steps"]
    lr: float = _LOCAL["lr"]
    damping: float = _LOCAL["local_damping"]
    prox: float = 0.0  # FedAvg's local loss; FedProx sets its μ
    loss: str = LOCAL_LOSSES[0]

    def validate(self):
        if self.solver not in LOCAL_SOLVERS:
            raise ValueError(f"local solver must be one of {', '.join(LOCAL_SOLVERS)}, got {self.solver!r}")
        if int(self.steps) != self.steps or self.steps < 1:
            raise ValueError(f"local steps must be an integer ≥ 1, got {self.steps}")
        if not self.lr > 0:
            raise ValueError(f"local learning rate must be > 0, got {self.lr}")
        if not self.damping >= 0:
            raise ValueError(f"local damping must be ≥ 0, got {self.damping}")
        if not self.prox >= 0:
            raise ValueError(f"FedProx μ must be ≥ 0, got {self.prox}")
        if self.loss not in LOCAL_LOSSES:
            raise ValueError(f"local loss must be one of {', '.join(LOCAL_LOSSES)}, got {self.loss!r}")
        return self


class Spectrum:
    """Eigen-decomposition of ``H_m = JᵀJ`` through the smaller Gram matrix.

    ``lam`` descending (clipped at 0), ``basis`` the matching eigenvectors of
    ``JJᵀ`` (n ≤ p, 'gram') or of ``JᵀJ`` (n > p, 'hessian').
    """

    def __init__(self, J: torch.Tensor):
        n, p = J.shape
        self.J = J
        self.mode = "gram" if n <= p else "hessian"
        G = J @ J.T if self.mode == "gram" else J.T @ J
        G = 0.5 * (G + G.T)
        lam, W = torch.linalg.eigh(G)
        self.lam = lam.flip(-1).clamp_min(0.0)
        self.W = W.flip(-1)
        self.lam_max = float(self.lam[0]) if self.lam.numel() else 0.0
        self.cut = max(n, p) * torch.finfo(J.dtype).eps * self.lam_max  # numerical rank cutoff

    @property
    def rank(self) -> int:
        return int((self.lam > self.cut).sum())

    def top(self, r: int):
        """``(U [p, r], λ [r])``, r clipped to the numerical rank (≥ 1)."""
        r = max(1, min(int(r), max(1, self.rank)))
        lam = self.lam[:r]
        if self.mode == "hessian":
            return self.W[:, :r], lam
        U = self.J.T @ self.W[:, :r]
        U = U / U.norm(dim=0).clamp_min(1e-300)  # = Jᵀw/√λ, renormalized
        return U, lam

    def damped_step(self, r_vec: torch.Tensor, mu: float) -> torch.Tensor:
        """``−(JᵀJ + μI)^{-1} Jᵀr`` (μ > 0) or ``−(JᵀJ)^† Jᵀr`` (μ = 0)."""
        keep = self.lam > self.cut
        inv = torch.where(keep, 1.0 / (self.lam + mu), torch.zeros_like(self.lam))
        if self.mode == "gram":  # −Jᵀ W (Λ+μ)^{-1} Wᵀ r
            return -(self.J.T @ (self.W @ (inv * (self.W.T @ r_vec))))
        g = self.J.T @ r_vec
        return -(self.W @ (inv * (self.W.T @ g)))


def spectrum(objective: LeastSquares, theta: torch.Tensor) -> tuple[Spectrum, torch.Tensor]:
    """The :class:`Spectrum` of the objective's ``J(θ)`` and its residual ``r(θ)``."""
    with torch.no_grad():
        r, J = objective.residual_and_jacobian(theta)
    return Spectrum(J), r


def gram_matmat(obj: LeastSquares, theta: torch.Tensor):
    """``V ↦ J(θ)ᵀ J(θ) V`` for a block ``V [p, L]`` from ``jvp``/``vjp`` only (no J, no H): the shared
    :func:`fedsciml.core.curvature.ggn_matmat` with the identity loss Hessian (least squares)."""
    return ggn_matmat(obj.residual, theta)


def sketch_matfree(objective: LeastSquares, theta: torch.Tensor, rank: int, seed: int, oversample: int = 10,
                   iters: int = 3):
    """The top-``rank`` eigenpairs ``(U, λ)`` of ``J(θ)ᵀJ(θ)`` by randomized subspace iteration on
    :func:`gram_matmat` products (no Jacobian formed)."""
    p = theta.numel()
    U, lam = linalg.subspace_iteration(gram_matmat(objective, theta), p, min(rank, p), oversample=oversample,
                                       iters=iters, seed=seed, dtype=theta.dtype, device=theta.device)
    return U.detach(), lam.detach()


def adam_delta(client: Client, theta: torch.Tensor, cfg: LocalConfig, steps: int | None = None,
               deadline: float | None = None) -> torch.Tensor:
    """``θ_m − θ`` after ``steps`` Adam steps on the client's ``½‖r_m‖²/n_m (+ prox/2 ‖θ_m − θ‖²)``
    (``cfg.loss='parts'``: ``Σ_parts mean(r_part²)``, see :class:`LocalConfig`).

    ``deadline`` (a ``time.perf_counter()`` instant, from the run's budget):
    stop early once it has passed, after at least one step.
    """
    steps = cfg.steps if steps is None else int(steps)
    x = theta.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=cfg.lr)
    n = client.n
    by_part = cfg.loss == "parts" and hasattr(client.objective, "part_residuals")
    with Progress(steps, f"client {client.cid} local adam") as bar:  # a long loop shows progress, never prints
        for i in range(steps):
            if deadline is not None and i > 0 and time.perf_counter() >= deadline:
                break
            opt.zero_grad(set_to_none=True)
            loss: torch.Tensor
            if by_part:
                loss = sum(((q @ q) / q.numel() for q in client.objective.part_residuals(x)),  # type: ignore[attr-defined]
                           x.new_zeros(()))
            else:
                r = client.objective.residual(x)
                loss = (0.5 / n if cfg.loss == "mean" else 1.0 / n) * (r @ r)
            if cfg.prox > 0:
                d = x - theta
                loss = loss + 0.5 * cfg.prox * (d @ d)
            loss.backward()
            opt.step()
            bar.update()
    return (x.detach() - theta).detach()


@dataclass(frozen=True)
class CurvatureAsk:
    """What a FIPA ``update`` request asks of a client beside its local step: the curvature (``"full"``: the
    whole ``H_m``; ``"lowrank"``: its top-``rank`` eigenpairs), how a client computes it (``sketch``: ``auto``,
    ``dense`` or ``matfree``) and the matrix-free local Gauss–Newton step's CG limits (``cg_iters``, ``cg_rtol``).

    No field has a default: FIPA's configuration (:class:`~fedsciml.methods.fipa.FIPAConfig`) is where each is
    written, once; the request carries them as plain config values (:meth:`to_config`), read back by
    :meth:`from_config` on the client."""

    curvature: str
    rank: int
    sketch: str
    cg_iters: int
    cg_rtol: float

    def to_config(self) -> dict:
        return {"curvature": self.curvature, "rank": int(self.rank), "sketch": self.sketch,
                "cg_iters": int(self.cg_iters), "cg_rtol": float(self.cg_rtol)}

    @classmethod
    def from_config(cls, cfg: dict) -> "CurvatureAsk | None":
        """The ask of an ``update`` request's config, or ``None`` where it asks for no curvature (FedAvg's)."""
        if cfg.get("curvature") is None:
            return None
        missing = [k for k in ("rank", "sketch", "cg_iters", "cg_rtol") if k not in cfg]
        if missing:
            raise ValueError(f"an update request for curvature {cfg['curvature']!r} needs {', '.join(missing)} "
                             f"beside it; got {', '.join(sorted(cfg))}")
        return cls(str(cfg["curvature"]), int(cfg["rank"]), str(cfg["sketch"]), int(cfg["cg_iters"]),
                   float(cfg["cg_rtol"]))


def _sketch(ask: CurvatureAsk | None) -> str:
    """How the client forms what it sends: the ask's ``sketch``; ``auto`` (the form rule's choice) where no
    curvature is asked for (a FedAvg/FedProx step)."""
    return "auto" if ask is None else ask.sketch


def local_update(client: Client, theta: torch.Tensor, cfg: LocalConfig, *, ask: CurvatureAsk | None = None,
                 seed: int = 0, adaptive=None, rnd: int = 0, global_grad_norm=None, report_loss: bool = False,
                 rj=None, deadline: float | None = None) -> tuple[dict, dict]:
    """A FIPA (``ask``: a :class:`CurvatureAsk`) or FedAvg/FedProx (``ask=None``) message, and what the
    client reports beside it (``{"form": "matfree", "cg_iters", …}`` of a matrix-free client; ``{"rank",
    "steps", "gnorm"}`` of an adaptive one; else ``{}``).

    What the client forms is :func:`fedsciml.core.forms.local_client_form`'s one decision (``sketch='matfree'``,
    or ``'auto'`` where J_m does not fit the device): a ``matfree`` client with a local Gauss–Newton step takes
    the step by CG (at most ``ask.cg_iters`` iterations, relative residual ``ask.cg_rtol``) and the eigenpairs from a
    Nyström sketch (:func:`fedsciml.core.matfree.local_gn_sketch`); with local Adam its eigenpairs come from
    subspace iteration (:func:`sketch_matfree`).

    ``adaptive`` (an :class:`AdaptiveSchedule`) picks this client's rank and
    Adam step count for round ``rnd`` from its spectrum and gradient.  ``rj``: the client's ``(r_m, J_m)`` at
    θ when a :class:`~fedsciml.runtime.client.ClientBatch` already evaluated them.
    """
    n = client.n
    curvature = None if ask is None else ask.curvature
    form = local_client_form(cfg.solver, curvature, _sketch(ask), adaptive is not None, n, theta.numel(),
                             device=theta.device, dtype=theta.dtype)
    if form == "matfree" and cfg.solver == "gn":
        assert ask is not None  # a matrix-free client is one that sends a sketch
        return _matfree_gn_message(client, theta, cfg, ask, seed, report_loss)
    need_dense = form == "dense"
    msg: dict = {}
    spec: Spectrum | None = None
    r_vec: torch.Tensor | None = None
    if need_dense and rj is not None:  # residual and Jacobian already evaluated (ClientBatch)
        r_vec, spec = rj[0], Spectrum(rj[1])
    elif need_dense:
        spec, r_vec = spectrum(client.objective, theta)
    # every branch below that reads the Jacobian's spectrum or r is one of the dense form's cases
    info = {}
    steps = cfg.steps
    rank = 0 if ask is None else ask.rank
    if adaptive is not None and ask is not None:
        assert spec is not None and r_vec is not None
        g_norm = float((spec.J.T @ r_vec).norm())
        rank, steps = adaptive.choose(spec.lam / n, g_norm / n, global_grad_norm, rnd, cfg, max_rank=rank)
        info = {"rank": rank, "steps": steps, "gnorm": g_norm / n}
    # local update
    if cfg.solver == "gn":
        assert spec is not None and r_vec is not None
        mu = cfg.damping * spec.lam_max
        delta = spec.damped_step(r_vec, mu)
    else:
        delta = adam_delta(client, theta, cfg, steps, deadline)
    msg["delta"] = delta
    # curvature at the broadcast θ
    if curvature == "full":
        assert spec is not None and r_vec is not None
        msg.update(Dense(gn_stats_from(spec.J, r_vec).H).to_message())  # type: ignore[arg-type]  # H is formed
    elif curvature == "lowrank":
        if spec is not None:
            U, lam = spec.top(rank)
        else:
            U, lam = sketch_matfree(client.objective, theta, rank, seed)
        msg.update(LowRank(U, lam).to_message())
    if report_loss:
        if r_vec is None:
            with torch.no_grad():
                r_vec = client.objective.residual(theta)
        msg["loss"] = (0.5 * (r_vec @ r_vec)).reshape(1)
    msg["n"] = scalar_like(n, theta)
    return msg, info


def _matfree_gn_message(client: Client, theta: torch.Tensor, cfg: LocalConfig, ask: CurvatureAsk, seed: int,
                        report_loss: bool) -> tuple[dict, dict]:
    """The matrix-free low-rank FIPA message with a local GN step (:func:`~fedsciml.core.matfree.local_gn_sketch`)."""
    gen = torch.Generator(device=theta.device).manual_seed(int(seed))
    out = local_gn_sketch(client.objective.residual, theta, ask.rank, damping=cfg.damping, rtol=ask.cg_rtol,
                          max_iters=ask.cg_iters, generator=gen)
    msg = {"delta": out.delta, **LowRank(out.U, out.lam).to_message()}
    if report_loss:
        msg["loss"] = (0.5 * (out.r @ out.r)).reshape(1)
    msg["n"] = scalar_like(client.n, theta)
    info = {"form": "matfree", "cg_iters": out.cg_iters, "cg_rel_residual": out.rel_residual,
            "products": out.products}
    return msg, info


@dataclass
class AdaptiveSchedule:
    """Per-client rank and local step count for adaptive FIPA (paper Fig. 2B).

    The published schedule, with the curvature and gradient of the client's
    *mean* loss ``½‖r_m‖²/n_m`` (so that Adam's learning rate and the
    eigenvalues live on the same scale):

    * keep the eigenpairs with ``λ_i ≥ c_k · λ_max``,
      ``c_k = clip(C / (k (‖g_m‖ + ‖g‖)), 0, 0.99)`` — ``‖g‖`` is the global
      gradient norm of the previous round (broadcast, one float); at most
      ``max_rank`` pairs;
    * ``τ_m = ceil(log(C_τ / (k ‖g_m‖)) / log(1 − lr·λ_min))`` Adam steps,
      ``λ_min`` the smallest kept eigenvalue, clipped to ``[1, tau_max]``;
      when ``lr·λ_min ≥ 1`` (a step already contracts fully) τ = 1, and when
      ``k‖g_m‖ ≤ C_τ`` (already converged) τ = 1.

    ``k`` is the 1-based round number.
    """

    C: float = 1e-3
    C_tau: float = 1e-3
    tau_max: int = 200

    def choose(self, lam_mean: torch.Tensor, g_m: float, g_global, rnd: int, cfg: LocalConfig, max_rank: int):
        k = max(1, int(rnd))
        gg = float(g_global) if g_global is not None else g_m
        denom = k * (g_m + gg)
        c = 0.99 if denom <= 0 else min(0.99, max(0.0, self.C / denom))
        lam = lam_mean[lam_mean > 0]
        if lam.numel() == 0:
            return 1, 1
        keep = int((lam >= c * lam[0]).sum())
        rank = max(1, min(int(max_rank), keep))
        lam_min = float(lam[rank - 1])
        q = cfg.lr * lam_min
        if q >= 1.0 or k * g_m <= self.C_tau:
            tau = 1
        else:
            tau = math.ceil(math.log(self.C_tau / (k * g_m)) / math.log1p(-q))
        return rank, int(min(self.tau_max, max(1, tau)))


# --- the handler --------------------------------------------------------------------------------------------


def _answer_update(client, request, pre, deadline):
    cfg, theta = request.config, request.tensors["theta"]
    ad = cfg.get("adaptive")
    msg, info = local_update(
        client, theta, LocalConfig(**cfg["local"]), ask=CurvatureAsk.from_config(cfg),
        seed=(int(cfg.get("seed", 0)) + client.cid) % (2**31),
        adaptive=AdaptiveSchedule(**ad) if ad is not None else None, rnd=int(cfg.get("round", 0)),
        global_grad_norm=cfg.get("global_grad_norm"), report_loss=bool(cfg.get("report_loss", False)),
        rj=pre, deadline=deadline)
    metrics = {}
    if info.get("form") == "matfree":
        metrics.update({k: info[k] for k in ("cg_iters", "cg_rel_residual", "products")})
    if ad is not None:
        msg["gnorm"] = scalar_like(info["gnorm"], theta)
        metrics["steps"] = info.get("steps")
    return Reply(msg, metrics)


def _pre_update(batch, request):
    """Every client's ``(r_m, J_m)`` in one vectorized call when every client of the batch forms its Jacobian
    (:func:`~fedsciml.core.forms.local_client_form`, the rule :func:`local_update` applies); ``{}`` otherwise —
    a ``none`` or ``matfree`` client forms no Jacobian, and beside one the others form their own (a Jacobian
    evaluated here for a client that does not use it would be work thrown away)."""
    cfg = request.config
    theta = request.tensors["theta"]
    ask = CurvatureAsk.from_config(cfg)
    if all(local_client_form(cfg["local"]["solver"], cfg.get("curvature"), _sketch(ask),
                             cfg.get("adaptive") is not None, c.n, theta.numel(), device=theta.device,
                             dtype=theta.dtype) == "dense" for c in batch.clients):
        return batch.residuals_and_jacobians(theta)
    return {}


register_handler(Client, "update", _answer_update, _pre_update)


def local_settings(r) -> list[str]:
    """The local solver of a run, from its strategy's settings (``extra["strategy"]``): ``local GN`` or ``local adam
    τ=… lr=…``; nothing for a run without one."""
    o = r.extra.get("strategy", {}) if isinstance(r.extra, dict) else {}
    if o.get("local") == "gn":
        return ["local GN"]
    if o.get("local"):
        return [f"local adam τ={o.get('local_steps')} lr={o.get('lr')}"]
    return []


def local_settings_text(r) -> str:
    """A method's default settings text in the summary table (:attr:`fedsciml.runtime.registry.Method.settings`):
    its local solver (:func:`local_settings`)."""
    return ", ".join(local_settings(r))
