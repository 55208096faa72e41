"""A client: its own least-squares objective, the table of the queries it answers, and the runtime's own queries.

A client never exposes its data; it turns a request (the broadcast global parameters θ and a plain config) into a
message (a ``dict`` of plain tensors, see :mod:`fedsciml.core.schema`).  Which queries a client kind answers is a
table (:func:`register_handler`, :func:`dispatch`): the runtime registers its own here — exact Gauss–Newton's
``{"loss", "n"}`` at a trial point (``loss``, ``gn_loss``) and ``{"H" (packed upper triangle of J_mᵀJ_m),
"g" = J_mᵀr_m, "loss", "n"}`` or the square-root form at an accepted point (``gn_stats``) —, and each method
registers its own beside its strategy (:mod:`fedsciml.methods.local`: FIPA's and FedAvg's ``update``;
:mod:`fedsciml.methods.gn`, :mod:`fedsciml.methods.oneshot`).

:class:`ClientBatch` evaluates several in-process clients' residuals and Jacobians in one vectorized call (the
simulation's speed-up), each client keeping exactly its own rows.
"""
from __future__ import annotations

import logging

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar

import torch

from fedsciml.core import linalg
from fedsciml.core.objective import LeastSquares, gn_stats_from
from fedsciml.options import moved
from fedsciml.runtime.protocol import MONITOR, Reply, Request

def scalar_like(x, like: torch.Tensor) -> torch.Tensor:
    """The number ``x`` as a one-element tensor of ``like``'s dtype and device (a message's ``"n"``, …)."""
    return torch.tensor([float(x)], dtype=like.dtype, device=like.device)


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
    except Exception as e:  # noqa: BLE001 - monitoring only: the loop's separate query asks again and logs why
        logging.getLogger(__name__).debug("client %s: the monitoring loss beside %r failed (%s: %s); the separate "
                                          "loss query asks again", client.cid, request.query,
                                          type(e).__name__, e)
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

    if not TYPE_CHECKING:  # invisible to mypy: a misspelt attribute of a Client stays a type error
        def __getattr__(self, name: str):
            if name in _MOVED_METHODS:  # FIPA's and FedAvg's local training left the runtime
                raise AttributeError(f"Client.{name} moved to {_MOVED_METHODS[name]} (the local-training "
                                     f"methods' client half is fedsciml.methods.local)")
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def n_like(self, theta: torch.Tensor) -> torch.Tensor:
        """The residual count as a message's ``"n"``: a one-element tensor of θ's dtype and device."""
        return scalar_like(self.n, theta)

    # --- exact federated Gauss–Newton ---------------------------------------
    def loss_message(self, theta: torch.Tensor) -> dict:
        with torch.no_grad():
            loss = self.objective.loss(theta)
        return {"loss": loss.reshape(1).to(theta.dtype), "n": self.n_like(theta)}

    def gn_message(self, theta: torch.Tensor, form: str = "normal") -> dict:
        """GN statistics at θ: ``{"H": pack_upper(J_mᵀJ_m), "g": J_mᵀr_m, "loss", "n"}`` (``form="normal"``)
        or the square-root form ``{"R", "s", "loss", "n"}`` (:func:`sqrt_gn_fields`)."""
        if form == "sqrt":
            r, J = self.objective.residual_and_jacobian(theta)
            return {**sqrt_gn_fields(J, r), "loss": (0.5 * (r @ r)).reshape(1), "n": self.n_like(theta)}
        s = self.objective.gn_stats(theta)
        assert s.H is not None  # gn_stats forms H
        return {"H": linalg.pack_upper(s.H), "g": s.g, "loss": s.loss.reshape(1), "n": self.n_like(theta)}

    # --- answering a request (the transport seam) --------------------------------
    def answer(self, request, pre=None, deadline: float | None = None):
        """Answer a :class:`~fedsciml.runtime.transport.Request` from this client's own data.

        Dispatches on ``request.query`` through this client kind's handler table (:func:`register_handler`):
        the runtime's own queries are ``"loss"`` / ``"gn_loss"`` → ``{"loss", "n"}`` at ``theta``;
        ``"gn_stats"`` → :meth:`gn_message` (config ``form``); methods register theirs (FIPA/FedAvg's
        ``update``: :mod:`fedsciml.methods.local`; one-shot's ``oneshot_stats``).  ``pre`` is what a
        :class:`ClientBatch` already computed for this client (a ready message, or ``(r_m, J_m)``); ``deadline`` a ``time.perf_counter()`` instant at which
        local training stops (else ``config["deadline_s"]`` seconds from now).  Returns a
        :class:`~fedsciml.runtime.transport.Reply`.
        """
        return dispatch(self, request, pre, deadline)


def job_client(problem, cid: int, clients: int, seed: int, device="cpu", split: Callable | None = None) -> Client:
    """Client ``cid`` of a job's split, built where it runs (an engine's client process, a Flower node) from the
    job's problem, client count and seed: the driver's order — ``torch.manual_seed(seed)``, then the problem's own
    one-client builder where it has one (``client_objective(cid, clients, device=)``, e.g. ``table``: this client's
    file only), else the seeded split ``client_objectives(clients, seed=, device=)`` — so the objective is the one
    the driver builds in process and the numbers do not depend on the engine.  ``split(build) -> objectives``: the
    caller's keeper of the whole split (``build()`` seeds and draws it; a Flower process keeps it for the next
    partition it is sent, and hands that back without drawing again).  The client holds ``problem`` (its end-of-run statistics read the conditions that built it)."""
    own = getattr(problem, "client_objective", None)
    if callable(own):
        torch.manual_seed(int(seed))
        objective = own(int(cid), int(clients), device=device)
    else:
        def build() -> list:
            torch.manual_seed(int(seed))
            return problem.client_objectives(int(clients), seed=int(seed), device=device)

        objective = (build() if split is None else split(build))[int(cid)]
    client = Client(int(cid), objective)
    client.problem = problem  # type: ignore[attr-defined]
    return client


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
                out[c.cid] = {**sqrt_gn_fields(Jm, rm), "loss": (0.5 * (rm @ rm)).reshape(1), "n": c.n_like(theta)}
                continue
            s = gn_stats_from(Jm, rm)
            assert s.H is not None
            out[c.cid] = {"H": linalg.pack_upper(s.H), "g": s.g, "loss": s.loss.reshape(1), "n": c.n_like(theta)}
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
            out[c.cid] = {"loss": (0.5 * (rm @ rm)).reshape(1), "n": c.n_like(theta)}
        return out


# --- the runtime's own queries ---------------------------------------------------------------


def _answer_loss(client, request, pre, deadline):
    return Reply(pre if pre is not None else client.loss_message(request.tensors["theta"]))


def _answer_gn_stats(client, request, pre, deadline):
    return Reply(pre if pre is not None else client.gn_message(request.tensors["theta"],
                                                               request.config.get("form", "normal")))


register_handler(Client, "loss", _answer_loss)
register_handler(Client, "gn_loss", _answer_loss, lambda batch, req: batch.loss_messages(req.tensors["theta"]))
register_handler(Client, "gn_stats", _answer_gn_stats,
                 lambda batch, req: batch.gn_messages(req.tensors["theta"], req.config.get("form", "normal")))


#: the client half of FIPA / FedAvg / FedProx that this module held until it moved to
#: ``fedsciml.methods.local``: its names, and the Client methods that became its functions
_MOVED = ("LocalConfig", "Spectrum", "AdaptiveSchedule", "gram_matmat", "LOCAL_SOLVERS", "LOCAL_LOSSES", "SKETCHES")
_MOVED_METHODS = {"update_message": "fedsciml.methods.local.local_update(client, theta, cfg, ...), which returns "
                                    "(message, info)",
                  "last_info": "fedsciml.methods.local.local_update(...)'s second return value (info)",
                  "adam_delta": "fedsciml.methods.local.adam_delta(client, theta, cfg, steps, deadline)",
                  "spectrum": "fedsciml.methods.local.spectrum(client.objective, theta)",
                  "sketch_matfree": "fedsciml.methods.local.sketch_matfree(client.objective, theta, rank, seed)"}

if not TYPE_CHECKING:  # invisible to mypy, so that a misspelt import from this module stays a type error
    def __getattr__(name: str):
        if name in _MOVED:
            raise moved(__name__, name, "fedsciml.methods.local", "the local-training methods' client half")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
