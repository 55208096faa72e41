"""A client: its own least-squares objective, and the messages it sends.

A client never exposes its data; it turns the broadcast global parameters θ
into a message (a ``dict`` of plain tensors, see
:mod:`fedsciml.core.schema`):

* exact Gauss–Newton: ``{"loss", "n"}`` at a trial point, and
  ``{"H" (packed upper triangle of J_mᵀJ_m), "g" = J_mᵀr_m, "loss", "n"}``
  at an accepted point;
* FIPA: ``{"delta", "n"}`` plus its curvature at the *broadcast* θ — ``"H"``
  (full) or the top-r eigenpairs ``"U", "lam"`` (low rank);
* FedAvg / FedProx: ``{"delta", "n"}``.

Curvature is the sum form ``H_m = J_mᵀJ_m`` of the objective ``½‖r_m‖²``
(see :mod:`fedsciml.core.objective`: FIPA's ``N_m/N`` factors cancel).

Spectral work goes through the *smaller* Gram matrix: for ``n_m < p`` (every
PINN/fitting client here) the eigenpairs of ``J_mᵀJ_m`` come from
``J_mJ_mᵀ = W Λ Wᵀ`` as ``U = J_mᵀ W Λ^{-1/2}``, and the exact local damped
GN step is ``−J_mᵀ (J_mJ_mᵀ + μI)^{-1} r_m`` (push-through identity), so no
p×p matrix is formed for a low-rank FIPA client.  For large p without a
dense Jacobian, ``sketch="matfree"`` runs randomized subspace iteration with
Rayleigh–Ritz (paper Eqs. 10–12) on ``jvp``/``vjp`` products.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, ClassVar

import torch

from fedsciml.core import linalg
from fedsciml.options import FIPAConfig, LocalOptions, defaults_of
from fedsciml.core.curvature import ggn_matmat
from fedsciml.core.forms import choose_form
from fedsciml.core.matfree import fipa_local_matfree, local_gn_sketch
from fedsciml.core.objective import LeastSquares, gn_stats_from
from fedsciml.runtime.history import Progress
from fedsciml.runtime.protocol import MONITOR, Reply, Request

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
    defaults are read from there, so each option has one default.
    """

    solver: str = _LOCAL["local"]
    steps: int = _LOCAL["local_steps"]
    lr: float = _LOCAL["lr"]
    damping: float = _LOCAL["local_damping"]
    prox: float = 0.0  # FedAvg's local loss; FedProx sets its μ
    loss: str = defaults_of(FIPAConfig)["local_loss"]

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


def _scalar(x, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor([float(x)], dtype=like.dtype, device=like.device)


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


def gram_matmat(obj: LeastSquares, theta: torch.Tensor):
    """``V ↦ J(θ)ᵀ J(θ) V`` for a block ``V [p, L]`` from ``jvp``/``vjp`` only (no J, no H): the shared
    :func:`fedsciml.core.curvature.ggn_matmat` with the identity loss Hessian (least squares)."""
    return ggn_matmat(obj.residual, theta)


@dataclass(frozen=True)
class Handler:
    """How one kind of client answers one query: ``answer(client, request, pre, deadline) -> Reply``, and
    optionally ``precompute(batch, request) -> {cid: pre}``, what one vectorized call over a
    :class:`ClientBatch` computes for every client at once (``pre`` is then handed to ``answer``)."""

    answer: Callable
    precompute: Callable | None = None


_VOCABULARY: dict[str, set] = {}  # query name -> the client kinds that answer it


def register_handler(kind: type, query: str, answer: Callable, precompute: Callable | None = None, *,
                     replace: bool = False) -> None:
    """Teach the client class ``kind`` (and its subclasses that do not override it) to answer ``query``.

    Each class keeps its own table; a client answers with the nearest class in its MRO that registered the
    query (:func:`handlers_of`), so a subclass can override one query (e.g. ``RidgeClient``'s SGD ``update``)
    and still answer whatever is registered with its parent later.
    """
    if not isinstance(query, str) or not query:
        raise ValueError(f"a query name must be a non-empty string, got {query!r}")
    if "handlers" not in kind.__dict__:
        setattr(kind, "handlers", {})
    table: dict[str, Handler] = kind.__dict__["handlers"]
    if query in table and not replace and table[query].answer is not answer:
        raise ValueError(f"{kind.__name__} already answers {query!r}; pass replace=True")
    table[query] = Handler(answer, precompute)
    _VOCABULARY.setdefault(query, set()).add(kind)


def handlers_of(kind: type) -> dict[str, Handler]:
    """The queries a client class answers: its own table over its parents' (nearest class wins)."""
    table: dict[str, Handler] = {}
    for k in reversed(kind.__mro__):
        table.update(k.__dict__.get("handlers", {}))
    return table


def dispatch(client, request, pre=None, deadline: float | None = None):
    """Answer ``request`` with the handler that ``client``'s class registered for its query (any client kind:
    :class:`Client`, an image client, …).  An unknown query is a ValueError naming what the client answers."""
    table = handlers_of(type(client))
    handler = table.get(request.query)
    if handler is None:
        raise ValueError(f"client {client.cid}: unknown query {request.query!r}; "
                         f"{type(client).__name__} answers {', '.join(sorted(table))}")
    # the monitoring loss first, in the place of the separate query it replaces
    monitor = _monitor_loss(client, table, request) if request.config.get(MONITOR) else None
    if deadline is None and request.config.get("deadline_s") is not None:
        deadline = time.perf_counter() + float(request.config["deadline_s"])
    reply = handler.answer(client, request, pre, deadline)
    if monitor is not None and isinstance(reply, Reply):
        reply = Reply(reply.message, {**reply.metrics, MONITOR: monitor})
    return reply


def _monitor_loss(client, table, request) -> float | None:
    """The client's monitoring loss ½‖r_m‖² at the request's θ, from its own ``loss`` handler, exactly as a
    separate ``loss`` query (unvectorized) answers it — computed first, in that query's place.  ``None`` when
    it cannot be had here (no ``loss`` handler, no θ, the computation failed): the round loop then asks the
    separate query, which reports the reason."""
    handler = table.get("loss")
    if handler is None or "theta" not in request.tensors:
        return None
    try:
        rep = handler.answer(client, Request("loss", {"theta": request.tensors["theta"]}, {"vectorize": False}),
                             None, None)
        return float(rep.message["loss"][0])
    except Exception:  # noqa: BLE001 - monitoring only: the loop's separate query asks again and logs why
        return None


def queries() -> tuple[str, ...]:
    """Every query some registered client kind answers (derived from the handler tables, never listed)."""
    return tuple(sorted(_VOCABULARY))


class Client:
    """One party of a federated problem: an id, its private least-squares objective, and a table of the
    queries it answers (:func:`register_handler`)."""

    handlers: ClassVar[dict[str, Handler]] = {}

    def __init__(self, cid: int, objective: LeastSquares):
        self.cid = cid
        self.objective = objective

    @property
    def n(self) -> int:
        return int(self.objective.n_residuals)

    def _n(self, theta):
        return _scalar(self.n, theta)

    # --- exact federated Gauss–Newton ---------------------------------------
    def loss_message(self, theta: torch.Tensor) -> dict:
        with torch.no_grad():
            loss = self.objective.loss(theta)
        return {"loss": loss.reshape(1).to(theta.dtype), "n": self._n(theta)}

    def gn_message(self, theta: torch.Tensor, form: str = "normal") -> dict:
        """GN statistics at θ: ``{"H": pack_upper(J_mᵀJ_m), "g": J_mᵀr_m, "loss", "n"}`` (``form="normal"``)
        or the square-root form ``{"R", "s", "loss", "n"}`` (:func:`sqrt_gn_fields`)."""
        if form == "sqrt":
            r, J = self.objective.residual_and_jacobian(theta)
            return {**sqrt_gn_fields(J, r), "loss": (0.5 * (r @ r)).reshape(1), "n": self._n(theta)}
        s = self.objective.gn_stats(theta)
        assert s.H is not None  # gn_stats forms H
        return {"H": linalg.pack_upper(s.H), "g": s.g, "loss": s.loss.reshape(1), "n": self._n(theta)}

    # --- answering a request (the transport seam) --------------------------------
    def answer(self, request, pre=None, deadline: float | None = None):
        """Answer a :class:`~fedsciml.runtime.transport.Request` from this client's own data.

        Dispatches on ``request.query`` through this client kind's handler table (:func:`register_handler`):
        the runtime's own queries are ``"loss"`` / ``"gn_loss"`` → ``{"loss", "n"}`` at ``theta``;
        ``"gn_stats"`` → :meth:`gn_message` (config ``form``); ``"update"`` → :meth:`update_message`
        (config: ``local`` — the :class:`LocalConfig` fields —, ``curvature``, ``rank``, ``sketch``, ``seed``,
        ``adaptive``, ``round``, ``global_grad_norm``, ``report_loss``); methods register theirs (one-shot:
        ``oneshot_stats``).  ``pre`` is what a :class:`ClientBatch` already computed for this
        client (a ready message, or ``(r_m, J_m)``); ``deadline`` a ``time.perf_counter()`` instant at which
        local training stops (else ``config["deadline_s"]`` seconds from now).  Returns a
        :class:`~fedsciml.runtime.transport.Reply`.
        """
        return dispatch(self, request, pre, deadline)

    # --- local training -----------------------------------------------------
    def adam_delta(self, theta: torch.Tensor, cfg: LocalConfig, steps: int | None = None,
                   deadline: float | None = None) -> torch.Tensor:
        """``θ_m − θ`` after ``steps`` Adam steps on ``½‖r_m‖²/n_m (+ prox/2 ‖θ_m − θ‖²)``
        (``cfg.loss='parts'``: ``Σ_parts mean(r_part²)``, see :class:`LocalConfig`).

        ``deadline`` (a ``time.perf_counter()`` instant, from the run's budget):
        stop early once it has passed, after at least one step.
        """
        steps = cfg.steps if steps is None else int(steps)
        x = theta.detach().clone().requires_grad_(True)
        opt = torch.optim.Adam([x], lr=cfg.lr)
        n = self.n
        by_part = cfg.loss == "parts" and hasattr(self.objective, "part_residuals")
        with Progress(steps, f"client {self.cid} local adam") as bar:  # a long loop shows progress, never prints
            for i in range(steps):
                if deadline is not None and i > 0 and time.perf_counter() >= deadline:
                    break
                opt.zero_grad(set_to_none=True)
                loss: torch.Tensor
                if by_part:
                    loss = sum(((q @ q) / q.numel() for q in self.objective.part_residuals(x)),  # type: ignore[attr-defined]
                               x.new_zeros(()))
                else:
                    r = self.objective.residual(x)
                    loss = (0.5 / n if cfg.loss == "mean" else 1.0 / n) * (r @ r)
                if cfg.prox > 0:
                    d = x - theta
                    loss = loss + 0.5 * cfg.prox * (d @ d)
                loss.backward()
                opt.step()
                bar.update()
        return (x.detach() - theta).detach()

    def spectrum(self, theta: torch.Tensor) -> tuple[Spectrum, torch.Tensor]:
        with torch.no_grad():
            r, J = self.objective.residual_and_jacobian(theta)
        return Spectrum(J), r

    def sketch_matfree(self, theta: torch.Tensor, rank: int, seed: int, oversample: int = 10, iters: int = 3):
        p = theta.numel()
        U, lam = linalg.subspace_iteration(gram_matmat(self.objective, theta), p, min(rank, p), oversample=oversample,
                                           iters=iters, seed=seed, dtype=theta.dtype, device=theta.device)
        return U.detach(), lam.detach()

    def update_message(self, theta: torch.Tensor, cfg: LocalConfig, *, curvature: str | None = None, rank: int = 20,
                       sketch: str = "auto", seed: int = 0, adaptive=None, rnd: int = 0, global_grad_norm=None,
                       report_loss: bool = False, rj=None, deadline: float | None = None, cg_iters: int = 100,
                       cg_rtol: float = 1e-10) -> dict:
        """A FIPA (``curvature='full'|'lowrank'``) or FedAvg/FedProx (``curvature=None``) message.

        A low-rank FIPA client with a local Gauss–Newton step forms no Jacobian when
        :func:`fedsciml.core.matfree.fipa_local_matfree` says so (``sketch='matfree'``, or ``'auto'`` where
        J_m does not fit the device: :func:`fedsciml.core.forms.choose_form`): the step by CG (at most ``cg_iters`` iterations, relative residual ``cg_rtol``) and the eigenpairs from a Nyström
        sketch (:func:`fedsciml.core.matfree.local_gn_sketch`).

        ``adaptive`` (an :class:`AdaptiveSchedule`) picks this client's rank and
        Adam step count for round ``rnd`` from its spectrum and gradient.
        """
        p = theta.numel()
        n = self.n
        if fipa_local_matfree(cfg.solver, curvature, sketch, adaptive is not None, n, p, theta.device, theta.dtype):
            return self._matfree_gn_message(theta, cfg, rank, seed, report_loss, cg_iters, cg_rtol)
        dense_ok = sketch == "dense" or (sketch == "auto" and choose_form(
            n, p, device=theta.device, dtype=theta.dtype, need="fipa").form == "dense")
        need_dense = cfg.solver == "gn" or curvature == "full" or adaptive is not None or (
            curvature == "lowrank" and dense_ok)
        msg: dict = {}
        spec: Spectrum | None = None
        r_vec: torch.Tensor | None = None
        if need_dense and rj is not None:  # residual and Jacobian already evaluated (ClientBatch)
            r_vec, spec = rj[0], Spectrum(rj[1])
        elif need_dense:
            spec, r_vec = self.spectrum(theta)
        # every branch below that reads the Jacobian's spectrum or r is one of need_dense's cases
        info = {}
        steps = cfg.steps
        if adaptive is not None and curvature is not None:
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
            delta = self.adam_delta(theta, cfg, steps, deadline)
        msg["delta"] = delta
        # curvature at the broadcast θ
        if curvature == "full":
            assert spec is not None and r_vec is not None
            msg["H"] = linalg.pack_upper(gn_stats_from(spec.J, r_vec).H)  # type: ignore[arg-type]  # H is formed
        elif curvature == "lowrank":
            if spec is not None:
                U, lam = spec.top(rank)
            else:
                U, lam = self.sketch_matfree(theta, rank, seed)
            msg["U"], msg["lam"] = U, lam
        if report_loss:
            if r_vec is None:
                with torch.no_grad():
                    r_vec = self.objective.residual(theta)
            msg["loss"] = (0.5 * (r_vec @ r_vec)).reshape(1)
        msg["n"] = _scalar(n, theta)
        self.last_info = info
        return msg


    def _matfree_gn_message(self, theta: torch.Tensor, cfg: LocalConfig, rank: int, seed: int, report_loss: bool,
                            cg_iters: int, cg_rtol: float) -> dict:
        """The matrix-free low-rank FIPA message with a local GN step (:func:`~fedsciml.core.matfree.local_gn_sketch`)."""
        gen = torch.Generator(device=theta.device).manual_seed(int(seed))
        out = local_gn_sketch(self.objective.residual, theta, rank, damping=cfg.damping, rtol=cg_rtol,
                              max_iters=cg_iters, generator=gen)
        msg = {"delta": out.delta, "U": out.U, "lam": out.lam}
        if report_loss:
            msg["loss"] = (0.5 * (out.r @ out.r)).reshape(1)
        msg["n"] = _scalar(self.n, theta)
        self.last_info = {"form": "matfree", "cg_iters": out.cg_iters, "cg_rel_residual": out.rel_residual,
                          "products": out.products}
        return msg


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


def sqrt_gn_fields(J: torch.Tensor, r: torch.Tensor) -> dict:
    """Square-root Gauss–Newton statistics: ``J_m = Q_m R_m`` (thin QR), ``s_m = Q_mᵀ r_m``.

    ``R_mᵀR_m = J_mᵀJ_m`` and ``R_mᵀs_m = J_mᵀr_m``: the same information as the
    pair ``(J_mᵀJ_m, J_mᵀr_m)`` (either is computable from the other when J_m
    has full row rank), in ``min(n_m, p)·(p + 1)`` floats.  With fewer rows
    than parameters this is smaller than the packed ``p(p+1)/2`` triangle, and
    the server can take the same LM step in its n×n kernel form, never
    factorizing a p×p matrix.
    """
    Q, R = torch.linalg.qr(J, mode="reduced")
    return {"R": R, "s": Q.T @ r}


class ClientBatch:
    """Evaluate several clients' residuals and Jacobians in *one* vectorized call (simulation speed-up).

    In a deployment every client computes its ``J_m`` on its own machine, in
    parallel; a single-process simulation that loops over clients pays the
    per-call overhead K times instead.  When the clients' objectives share
    their residual functions (every built-in problem), this helper pools their
    points once (:func:`fedsciml.core.objective.stack_objectives`) and hands each
    client exactly its own rows of ``r`` and ``J`` — the same numbers, row by
    row, that the client would compute alone — so each message is still built
    from that client's data only.  Falls back to the per-client loop otherwise.
    """

    def __init__(self, clients):
        from fedsciml.core.objective import PointwiseLeastSquares, stack_objectives

        self.clients = list(clients)
        self.pooled = None
        objs = [c.objective for c in self.clients]
        if len(objs) > 1 and all(isinstance(o, PointwiseLeastSquares) for o in objs):
            try:
                self.pooled = stack_objectives(objs)
            except (TypeError, ValueError):
                self.pooled = None
        if self.pooled is not None:  # row owners, in stack_objectives' order (part-major, then client)
            rows: dict[int, list[torch.Tensor]] = {c.cid: [] for c in self.clients}
            start = 0
            for part in self.pooled.parts:  # type: ignore[attr-defined]  # pooled pointwise objectives have parts
                for c in self.clients:
                    for q in c.objective.parts:
                        if q.name == part.name and q.weight == part.weight:
                            rows[c.cid].append(torch.arange(start, start + q.n_points))
                            start += q.n_points
            self.rows = {cid: torch.cat(v) for cid, v in rows.items()}

    def gn_messages(self, theta: torch.Tensor, form: str = "normal") -> dict:
        """``{cid: Client.gn_message(θ, form)}`` for every client of the batch."""
        if self.pooled is None:
            return {c.cid: c.gn_message(theta, form) for c in self.clients}
        r, J = self.pooled.residual_and_jacobian(theta)
        out = {}
        for c in self.clients:
            idx = self.rows[c.cid].to(J.device)
            Jm, rm = J.index_select(0, idx), r.index_select(0, idx)
            if form == "sqrt":
                out[c.cid] = {**sqrt_gn_fields(Jm, rm), "loss": (0.5 * (rm @ rm)).reshape(1), "n": c._n(theta)}
                continue
            s = gn_stats_from(Jm, rm)
            assert s.H is not None
            out[c.cid] = {"H": linalg.pack_upper(s.H), "g": s.g, "loss": s.loss.reshape(1), "n": c._n(theta)}
        return out

    def precompute(self, request) -> dict:
        """What one vectorized call can compute for every client of the batch, for :meth:`Client.answer`
        (the query's :attr:`Handler.precompute`); ``{}`` when nothing is shared."""
        kinds = {type(c) for c in self.clients}
        handler = handlers_of(kinds.pop()).get(request.query) if len(kinds) == 1 else None
        if handler is None or handler.precompute is None:
            return {}
        return handler.precompute(self, request)

    def residuals_and_jacobians(self, theta: torch.Tensor) -> dict:
        """``{cid: (r_m, J_m)}`` — each client's own rows."""
        if self.pooled is None:
            return {c.cid: c.objective.residual_and_jacobian(theta) for c in self.clients}
        with torch.no_grad():
            r, J = self.pooled.residual_and_jacobian(theta)
        out = {}
        for c in self.clients:
            idx = self.rows[c.cid].to(J.device)
            out[c.cid] = (r.index_select(0, idx), J.index_select(0, idx))
        return out

    def loss_messages(self, theta: torch.Tensor) -> dict:
        if self.pooled is None:
            return {c.cid: c.loss_message(theta) for c in self.clients}
        with torch.no_grad():
            r = self.pooled.residual(theta)
        out = {}
        for c in self.clients:
            rm = r.index_select(0, self.rows[c.cid].to(r.device))
            out[c.cid] = {"loss": (0.5 * (rm @ rm)).reshape(1), "n": c._n(theta)}
        return out


# --- the runtime's own queries ---------------------------------------------------------------


def _answer_loss(client, request, pre, deadline):
    return Reply(pre if pre is not None else client.loss_message(request.tensors["theta"]))


def _answer_gn_stats(client, request, pre, deadline):
    return Reply(pre if pre is not None else client.gn_message(request.tensors["theta"],
                                                               request.config.get("form", "normal")))


def _answer_update(client, request, pre, deadline):
    cfg, theta = request.config, request.tensors["theta"]
    ad = cfg.get("adaptive")
    msg = client.update_message(
        theta, LocalConfig(**cfg["local"]), curvature=cfg.get("curvature"), rank=int(cfg.get("rank", 20)),
        sketch=cfg.get("sketch", "auto"), seed=(int(cfg.get("seed", 0)) + client.cid) % (2**31),
        adaptive=AdaptiveSchedule(**ad) if ad is not None else None, rnd=int(cfg.get("round", 0)),
        global_grad_norm=cfg.get("global_grad_norm"), report_loss=bool(cfg.get("report_loss", False)),
        rj=pre, deadline=deadline, cg_iters=int(cfg.get("cg_iters", 100)), cg_rtol=float(cfg.get("cg_rtol", 1e-10)))
    metrics = {}
    if client.last_info.get("form") == "matfree":
        metrics.update({k: client.last_info[k] for k in ("cg_iters", "cg_rel_residual", "products")})
    if ad is not None:
        msg["gnorm"] = _scalar(client.last_info["gnorm"], theta)
        metrics["steps"] = client.last_info.get("steps")
    return Reply(msg, metrics)


def _pre_update(batch, request):
    cfg = request.config
    curvature = cfg.get("curvature")
    theta = request.tensors["theta"]
    if any(fipa_local_matfree(cfg["local"]["solver"], curvature, cfg.get("sketch", "auto"),
                              cfg.get("adaptive") is not None, c.n, theta.numel(), theta.device, theta.dtype)
           for c in batch.clients):
        return {}  # the matrix-free clients form no Jacobian (the others, if any, form their own)
    if (cfg["local"]["solver"] == "gn" or curvature == "full" or cfg.get("adaptive") is not None
            or (curvature == "lowrank" and cfg.get("sketch", "auto") != "matfree")):
        return batch.residuals_and_jacobians(theta)
    return {}


register_handler(Client, "loss", _answer_loss)
register_handler(Client, "gn_loss", _answer_loss, lambda batch, req: batch.loss_messages(req.tensors["theta"]))
register_handler(Client, "gn_stats", _answer_gn_stats,
                 lambda batch, req: batch.gn_messages(req.tensors["theta"], req.config.get("form", "normal")))
register_handler(Client, "update", _answer_update, _pre_update)
