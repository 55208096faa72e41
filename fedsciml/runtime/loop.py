"""The round loop of a federated run: participation, dropout, validation, history, checkpoints.

:class:`Simulation` is the one round loop.  A method supplies a
:class:`~fedsciml.runtime.strategy.Strategy` (the declared protocol: it
configures exchanges and aggregates validated replies) and the loop asks the
clients through a :class:`~fedsciml.runtime.transport.Transport` with
plain-data requests.  Strategies use only the loop's public surface
(:meth:`Simulation.sample`, :meth:`Simulation.drop_out`,
:meth:`Simulation.exchange`, :meth:`Simulation.count_sent`,
:meth:`Simulation.skip_round`, :meth:`Simulation.time_left`, …).

Clients are sampled each round with a seeded ``numpy`` generator: a
fraction ``participation`` of them (at least one), then each sampled client
fails to answer with probability ``dropout``.  Every answer is validated
against the method's message schema before it is used; a bad one is
rejected, logged with the client id and the reason (``info["rejections"]``
and the history row), and the round goes on with the rest.  A client
from which nothing came back at all (the transport's
``Failure(dropped=True)``: a node that is gone or timed out) is treated like
a dropout of that exchange — the strategy goes on with the clients that
answered (gn asks again, fipa/fedavg/one-shot fuse the rest), it does not
count towards a rejection streak, and it is logged with its reason in
``info["unanswered"]``.  The monitoring loss of a strategy that has none of
its own (fipa, fedavg) is then summed over the clients that answered the
``loss`` query: the history row's ``loss`` is their mean ½‖r‖² per row and
``loss_clients`` says how many clients it covers (absent when all did).

That monitoring loss rides on the next exchange where it can (one exchange
per round instead of two): the row of round k is recorded at once with its
loss pending, and the next request that broadcasts the same θ (bitwise) —
the next round's ``update`` — carries the config flag :data:`MONITOR`; each
client then also reports ``½‖r_m‖²`` at that θ, computed by its own
``loss`` handler exactly as the separate query would
(:func:`fedsciml.runtime.client.dispatch`), in the reply's ``metrics``
under the same name.  The loop fills the row from those replies and asks
a separate ``loss`` query only of the clients the exchange did not reach
(not sampled, dropped, failed), or of all of them when no exchange at that
θ follows (the last round, a round that asks elsewhere first).  The history
is the one the separate query gives, number for number: the same per-client
values, summed in client order.  Like that query, the reported float is
monitoring — not counted in ``floats_up`` — and when the filled loss meets
``tol`` the exchange that carried it is discarded unused (its floats
uncounted, its time off the clock), so the run stops where it stopped before.
Communication
is counted in floats: every float sent down (the broadcast θ to each sampled
client) and up (every message received, rejected ones included) — and in
exchanges: every :meth:`Simulation.exchange` that asked at least one client
is one (a retry is another), the currency of a deployment where each costs
seconds whatever its size.  The history row of a round has its ``exchanges``
and the cumulative ``exchanges_total`` beside ``floats_sent``; the separate
monitoring ``loss`` queries are not among them (``info["monitor_exchanges"]``).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np
import torch

from fedsciml.options import RoundOptions, defaults_of
from fedsciml.runtime import checkpoint as ckpt
from fedsciml.core.matfree import OutOfTime
from fedsciml.core.schema import floats_in
from fedsciml.runtime.strategy import Exchange, Replies, Strategy
from fedsciml.runtime.transport import Failure, LocalTransport, Reply, Request, Transport
from fedsciml.runtime.history import Recorder
from fedsciml.runtime.interrupt import deferred
from fedsciml.runtime.protocol import MONITOR

log = logging.getLogger(__name__)

_ROUND = defaults_of(RoundOptions)  # one default per option: the typed configuration's


class RoundFailed(RuntimeError):
    """A round cannot go on: no valid message remained.  ``partial``: ``(θ, rows, info)`` of the last finished
    round (the loop sets it; ``info["stop_reason"] = "failed"``), ``result``: the Result the driver makes of it —
    so that the rounds before are written, not only checkpointed (:mod:`fedsciml.runtime.interrupt`)."""

    partial = None
    result = None


class _Converged(Exception):
    """The pending monitoring loss, filled during a round, met ``tol``: the run stops before that round."""


def _same_bits(a, b) -> bool:
    """``a`` and ``b`` are the same tensor or hold the same bits (-0.0 ≠ 0.0; NaNs by payload)."""
    if a is b:
        return True
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.is_floating_point():
        return bool(torch.equal(a, b))
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}.get(a.element_size())
    if ints is None or a.is_complex():
        return bool(torch.equal(a, b))
    return bool(torch.equal(a.detach().contiguous().view(ints), b.detach().to(a.device).contiguous().view(ints)))


@dataclass
class RoundConfig:
    rounds: int | None = None  # None: until the strategy is finished or the budget is spent
    budget: float | None = _ROUND["budget"]
    clock: str = _ROUND["clock"]  # what budget and time_s count: wall or cpu seconds (history.Recorder)
    tol: float = _ROUND["tol"]
    participation: float = _ROUND["participation"]
    dropout: float = _ROUND["dropout"]
    seed: int = 0
    checkpoint: str | None = _ROUND["checkpoint"]
    resume: bool = _ROUND["resume"]
    max_rejected_rounds: int | None = 10  # stop when one client is rejected this many rounds in a row (None: never)
    checked: bool = field(default=False, repr=False, compare=False)  # built from validated typed RoundOptions

    def validate(self):
        if self.rounds is not None and (int(self.rounds) != self.rounds or self.rounds < 0):
            raise ValueError(f"rounds must be an integer ≥ 0, got {self.rounds}")
        if self.budget is not None and not self.budget > 0:
            raise ValueError(f"budget must be > 0 seconds, got {self.budget}")
        if not 0.0 < self.participation <= 1.0:
            raise ValueError(f"participation must be in (0, 1], got {self.participation}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.resume and not self.checkpoint:
            raise ValueError("--resume needs --checkpoint DIR (the directory the interrupted run wrote)")
        return self


class Simulation:
    """One federated run: the round loop and its public accounting (see the module docstring).

    ``transport`` is a :class:`~fedsciml.runtime.transport.Transport`, or a
    list of :class:`~fedsciml.runtime.client.Client` (then a
    :class:`~fedsciml.runtime.transport.LocalTransport` over them).
    """

    #: the monitoring loss rides on the next exchange at its θ (see the module docstring); ``False``: a
    #: separate ``loss`` query after every round (the reference the tests compare with)
    merge_monitoring = True

    def __init__(self, transport, evaluate, cfg: RoundConfig, *, label: str = "", progress: bool = False,
                 every: int = 10, fingerprint: dict | None = None, message_hook=None):
        if not isinstance(transport, Transport):
            transport = LocalTransport(list(transport))
        self.transport = transport
        self.client_ids = list(transport.client_ids)
        self.cfg = cfg if cfg.checked else cfg.validate()
        self.evaluate = evaluate
        self.n_total = sum(int(transport.sample_counts[c]) for c in self.client_ids)
        elsewhere = None
        if self.cfg.clock == "cpu":  # the clients' CPU counts too: a transport whose clients run elsewhere reports it
            if transport.cpu_seconds() is None:
                raise ValueError(f"clock='cpu' (--clock cpu) counts CPU seconds, and {type(transport).__name__}'s "
                                 f"clients run in processes that do not report theirs; use clock='wall'")
            elsewhere = transport.cpu_seconds
        self.rec = Recorder(evaluate, self.n_total, cfg.budget, progress, every, label, total=cfg.rounds,
                            clock=cfg.clock, cpu_elsewhere=elsewhere)
        self.rec.exchanges = 0
        self.label = label
        self.progress = progress
        self.rng = np.random.default_rng([int(cfg.seed), 7919])
        self.fingerprint = fingerprint or {}
        if message_hook is not None and not callable(message_hook):
            raise TypeError(f"message_hook must be a function hook(round, client_id, message) -> message, "
                            f"got {type(message_hook).__name__}")
        self.message_hook = message_hook  # fault injection (tests): hook(round, cid, msg) -> msg
        self.rejections: list[dict] = []
        self.unanswered: list[dict] = []  # clients from which nothing came back (dead node, timeout)
        self._loss_fields: dict = {}
        self._pending: tuple | None = None  # (history row, θ, round) whose monitoring loss is not known yet
        self._in_round = False
        self.monitor_exchanges = 0  # separate monitoring ``loss`` queries asked (the merged ones are not counted)
        self.skipped_rounds = 0
        self.round_index = 0
        self.floats_up = 0
        self.floats_down = 0
        self._round_up = 0
        self._round_down = 0
        self.exchanges = 0  # exchanges so far (every one that asked a client), beside floats_up/floats_down
        self._round_exchanges = 0
        self._round_rejected: dict = {}
        self._round_dropped: list = []
        self._round_accepted: set = set()
        self._rejected_streak: dict = {}  # client id -> consecutive rounds in which it was rejected

    # --- client sampling ----------------------------------------------------
    def sample(self) -> tuple[list, list]:
        """``(answering, dropped)`` client ids for one round (seeded): a fraction
        ``participation`` of the clients (at least one), then dropout."""
        K = len(self.client_ids)
        m = max(1, int(round(self.cfg.participation * K)))
        chosen = sorted(self.rng.choice(K, size=m, replace=False).tolist()) if m < K else list(range(K))
        return self.drop_out([self.client_ids[i] for i in chosen])

    def drop_out(self, client_ids) -> tuple[list, list]:
        """Split ``client_ids`` into ``(answering, dropped)`` with the dropout probability (seeded);
        the dropped ones are recorded for the round."""
        client_ids = list(client_ids)
        if self.cfg.dropout <= 0:
            return client_ids, []
        fail = self.rng.random(len(client_ids)) < self.cfg.dropout
        dropped = [c for c, f in zip(client_ids, fail) if f]
        self._round_dropped += dropped
        return [c for c, f in zip(client_ids, fail) if not f], dropped

    # --- public accounting ----------------------------------------------------
    def count_sent(self, down: int = 0, up: int = 0) -> None:
        """Count floats sent outside an exchange (e.g. the broadcast of θ₀)."""
        self._round_down += int(down)
        self._round_up += int(up)

    def reject(self, client, reason: str) -> None:
        """Record ``client`` as rejected in this round with ``reason`` (``info["rejections"]``)."""
        self.rejections.append({"round": self.round_index, "client": client, "reason": reason})

    def skip_round(self) -> None:
        """The round had nobody to ask (every sampled client dropped out)."""
        self.skipped_rounds += 1

    @property
    def round_floats(self) -> int:
        """Floats sent so far in the current round (up and down)."""
        return self._round_up + self._round_down

    def time_left(self) -> float | None:
        """Seconds of the budget left (``None`` without a budget); sent to clients as a deadline."""
        return self.rec.time_left()

    def out_of_time(self) -> bool:
        """The budget is spent (or a callback asked the run to stop): a strategy asks it inside a long round and
        raises :class:`fedsciml.core.matfree.OutOfTime` to end the run there, its round not applied."""
        return self.rec.out_of_time()

    def paused(self):
        """Context manager: time inside is not solver time (monitoring, checkpoint writing)."""
        return self.rec.paused()

    # --- one exchange -------------------------------------------------------
    def exchange(self, ex: Exchange) -> Replies:
        """Ask ``ex.clients`` through the transport, validate, count and log; returns :class:`Replies`.

        Each client asked is counted ``ex.down_floats`` (default: the request's
        tensors) floats down; each message received (rejected ones included)
        its floats up.  A client whose computation failed, or whose message the
        schema rejects, is logged with its id and the reason and left out.
        """
        clients, dropped = list(ex.clients), list[int]()
        if ex.dropout:
            clients, dropped = self.drop_out(clients)
        down = ex.request.floats if ex.down_floats is None else int(ex.down_floats)
        request, carry = ex.request, False
        if self._pending is not None:
            carry = bool(clients) and _same_bits(request.tensors.get("theta"), self._pending[1])
            if carry:  # the clients report the pending monitoring loss with this answer
                request = Request(request.query, request.tensors, {**request.config, MONITOR: True})
            else:  # asked elsewhere first: the pending row gets its separate query now
                self._settle({})
        t0 = time.perf_counter()
        got = self.transport.ask(clients, request) if clients else {}
        self._round_exchanges += 1 if clients else 0
        if carry:
            self._settle(got, time.perf_counter() - t0)
        msgs, metrics, bad, gone = {}, {}, {}, []
        for cid in clients:
            self._round_down += down
            rep = got.get(cid, Failure("no reply"))
            if isinstance(rep, Failure) and rep.dropped:  # nothing came back: a dropout of this exchange
                gone.append(cid)
                self._unanswered(cid, rep.reason)
                continue
            if isinstance(rep, Failure):
                bad[cid] = rep.reason
                continue
            msg = rep.message
            if self.message_hook is not None:
                msg = self.message_hook(self.round_index, cid, msg)
            if isinstance(msg, dict):
                self._round_up += floats_in(msg)
            msgs[cid] = msg
            metrics[cid] = {k: v for k, v in rep.metrics.items() if k != MONITOR}
        ok, invalid = ex.validate(msgs)
        bad.update(invalid)
        self._round_accepted.update(ok)
        for cid, reason in bad.items():
            self._round_rejected[cid] = reason
            self.reject(cid, reason)
            log.warning("%s round %s: rejected client %s: %s", self.label, self.round_index, cid, reason)
        self._round_dropped += gone
        return Replies(ok=ok, rejected=bad, dropped=dropped + gone, metrics={c: metrics[c] for c in ok},
                       asked=[c for c in clients if c not in gone])

    def _unanswered(self, cid, reason: str):
        self.unanswered.append({"round": self.round_index, "client": cid, "reason": reason})
        log.warning("%s round %s: no answer from client %s: %s", self.label, self.round_index, cid, reason)

    def begin_round(self, k: int):
        self.round_index = k
        self._round_up = self._round_down = self._round_exchanges = 0
        self._round_rejected = {}
        self._round_dropped = []
        self._round_accepted = set()

    def end_round(self):
        self.floats_up += self._round_up
        self.floats_down += self._round_down
        self.exchanges += self._round_exchanges
        self.rec.floats_sent = self.floats_up + self.floats_down
        self.rec.exchanges = self.exchanges
        self._check_rejection_streaks()

    def _check_rejection_streaks(self):
        """A client rejected ``max_rejected_rounds`` rounds in a row is broken, not unlucky: stop with its reason."""
        for cid in self._round_accepted:
            self._rejected_streak.pop(cid, None)
        for cid in set(self._round_rejected) - self._round_accepted:
            self._rejected_streak[cid] = self._rejected_streak.get(cid, 0) + 1
        limit = self.cfg.max_rejected_rounds
        worst = max(self._rejected_streak.items(), key=lambda kv: (kv[1], -kv[0]), default=None)
        if limit is not None and worst is not None and worst[1] >= limit:
            cid = worst[0]
            raise RoundFailed(f"round {self.round_index}: client {cid} was rejected in {worst[1]} consecutive rounds "
                              f"(last reason: {self._round_rejected[cid]}); stopping instead of dropping it forever — "
                              f"check that client's data and residual")

    def round_fields(self) -> dict:
        return {"floats_up": self._round_up, "floats_down": self._round_down, "exchanges": self._round_exchanges,
                "rejected": len(self._round_rejected), "dropped": len(self._round_dropped)}

    def fail(self, what: str) -> NoReturn:
        raise RoundFailed(f"round {self.round_index}: no valid client message remained for {what}; "
                          + self._why_failed())

    def _why_failed(self) -> str:
        """What happened to this round's clients: the rejected ones with their reasons, the ones that did not
        answer with the last reason (a simulated dropout has none), and which clients did answer — "every sampled
        client dropped out" only when that is what happened."""
        parts = []
        if self._round_rejected:
            parts.append("rejected: " + "; ".join(f"client {c}: {r}" for c, r in self._round_rejected.items()))
        last = {u["client"]: u["reason"] for u in self.unanswered if u["round"] == self.round_index}
        gone = [c for c in dict.fromkeys(self._round_dropped) if c not in self._round_rejected]
        if gone and not self._round_rejected and not self._round_accepted:
            parts.append("every sampled client dropped out")
        if gone:
            parts.append("no answer from " + "; ".join(
                f"client {c}" + (f" ({last[c]})" if c in last else " (simulated dropout)") for c in gone))
        if self._round_accepted:
            parts.append(f"client(s) {sorted(self._round_accepted)} answered")
        return "; ".join(parts) or "no client was asked"

    def global_loss(self, theta, reported: dict | None = None, rnd: int | None = None) -> float:
        """Monitoring only: the global training loss ½‖r‖² at θ (clock paused, nothing counted as sent).

        Clients that do not answer (a dead node, an error) are left out: the
        value is then the sum over the clients that answered, rescaled to all
        rows (``Σ_answered ½‖r_m‖² · N / N_answered``, so that the history's
        per-row ``loss`` is the answering clients' mean), and the next history
        row gets ``loss_clients`` (how many clients it covers).  With no
        answer at all the run stops (:class:`RoundFailed`).

        ``reported``: ``{client id: loss}`` the clients already sent with another answer at θ (the
        :data:`MONITOR` metric); only the others are asked.  ``rnd``: the round the value is for."""
        self._loss_fields = {}
        rnd = self.round_index if rnd is None else rnd
        reported = reported or {}
        with self.paused(), torch.no_grad():
            ask = [c for c in self.client_ids if c not in reported]
            got: dict = {}
            if ask:
                got = self.transport.ask(ask, Request("loss", {"theta": theta}, {"vectorize": False}))
                self.monitor_exchanges += 1
            v, n, missing = 0.0, 0, {}
            for cid in self.client_ids:
                if cid in reported:
                    v += float(reported[cid])
                    n += int(self.transport.sample_counts[cid])
                    continue
                rep = got.get(cid, Failure("no reply"))
                if isinstance(rep, Failure):
                    missing[cid] = rep.reason
                    continue
                v += float(rep.message["loss"][0])
                n += int(self.transport.sample_counts[cid])
        if not missing:
            return float(v)
        if n == 0:
            raise RoundFailed(f"round {rnd}: no client could report its loss for monitoring: "
                              + "; ".join(f"client {c}: {r}" for c, r in missing.items()))
        for cid, reason in missing.items():
            self.unanswered.append({"round": rnd, "client": cid, "reason": f"monitoring loss: {reason}"})
            log.warning("%s round %s: no answer from client %s: monitoring loss: %s", self.label, rnd, cid, reason)
        self._loss_fields = {"loss_clients": len(self.client_ids) - len(missing)}
        return float(v) * self.n_total / n

    def _monitor(self, strategy) -> tuple[float, dict]:
        """The loss for the history row and the row's monitoring fields."""
        if strategy.loss_sum is not None:
            return strategy.loss_sum, {}
        loss = self.global_loss(strategy.theta)
        return loss, self._loss_fields

    def _record(self, k: int, strategy, **fields):
        """Record round ``k``'s row; its monitoring loss left pending for the next exchange where it can."""
        if self._pending is not None:
            self._settle({})
        if strategy.loss_sum is not None or not self.merge_monitoring:
            loss, mon = self._monitor(strategy)
            self.rec.record(k, strategy.theta, loss, **fields, **mon)
            return
        row = self.rec.record(k, strategy.theta, None, **fields)
        self._pending = (row, strategy.theta, k)

    def _settle(self, got: dict, seconds: float = 0.0):
        """Fill the pending row's loss from the :data:`MONITOR` metrics in ``got`` (asking the clients that sent
        none).  Inside a round, a loss that meets ``tol`` stops the run before it (:class:`_Converged`); the
        ``seconds`` of the exchange that carried it then leave the solver clock."""
        assert self._pending is not None
        row, theta, k = self._pending
        self._pending = None
        reported = {c: r.metrics[MONITOR] for c, r in got.items()
                    if isinstance(r, Reply) and isinstance(r.metrics.get(MONITOR), (int, float))}
        loss = self.global_loss(theta, reported, rnd=k)
        self.rec.fill(row, loss, **self._loss_fields)
        if self._in_round and row["loss"] <= self.cfg.tol:
            self.rec.exclude(seconds)
            raise _Converged

    def _settle_before_stop(self, reason: str | None) -> str | None:
        """The loop stops for ``reason``; a pending row gets its loss now, and ``tol`` comes first (as when
        the loss was known at once)."""
        if self._pending is None:
            return reason
        self._settle({})
        return "tol" if self.rec.rows[-1]["loss"] <= self.cfg.tol else reason

    # --- checkpoints --------------------------------------------------------
    def save(self, strategy):
        if not self.cfg.checkpoint:
            return
        with self.paused():  # writing checkpoints is not solver time
            ckpt.save(self.cfg.checkpoint, {
                "fingerprint": self.fingerprint, "round": self.round_index, "rng": self.rng.bit_generator.state,
                "strategy": strategy.state_dict(), "rows": self.rec.rows, "floats_up": self.floats_up,
                "floats_down": self.floats_down, "exchanges": self.exchanges, "elapsed": self.rec.elapsed(), "rejections": self.rejections,
                "skipped_rounds": self.skipped_rounds, "unanswered": self.unanswered,
                "loss_pending": self._pending is not None, "monitor_exchanges": self.monitor_exchanges,
            })

    def restore(self, strategy, theta0) -> bool:
        if not (self.cfg.checkpoint and self.cfg.resume):
            return False
        state = ckpt.load(self.cfg.checkpoint, self.fingerprint, map_location=theta0.device)
        if state is None:
            return False
        rng = state["rng"]
        mine = self.rng.bit_generator.state
        try:  # the client-sampling generator's state: this run's kind of generator, its fields, in range
            if set(rng) != set(mine) or rng.get("bit_generator") != mine["bit_generator"]:
                raise ValueError(f"it holds {sorted(rng)} of {rng.get('bit_generator')!r}")
            self.rng.bit_generator.state = rng
        except (TypeError, ValueError, KeyError, OverflowError) as e:
            raise ckpt.CheckpointError(f"checkpoint {ckpt.path_in(self.cfg.checkpoint)}: field 'rng' is not a "
                                       f"state of this run's client-sampling generator ({mine['bit_generator']}: "
                                       f"{', '.join(sorted(mine))}): {str(e).splitlines()[0][:120]}") from None
        try:  # a file that passed the checksum but holds the wrong structure: one line, not a traceback
            strategy.load_state_dict(state["strategy"])
            th = strategy.theta
            ok = isinstance(th, torch.Tensor) and th.shape == theta0.shape and th.dtype == theta0.dtype
            if ok and bool(torch.isfinite(th).all()):  # θ itself: the one line below
                strategy.check_restored(int(state["round"]))
        except ckpt.CheckpointError as e:  # a restored field out of its range: named, with the checkpoint
            raise ckpt.CheckpointError(f"checkpoint {ckpt.path_in(self.cfg.checkpoint)}: {e}") from None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, RuntimeError) as e:
            raise ckpt.CheckpointError(f"checkpoint {ckpt.path_in(self.cfg.checkpoint)} has a malformed "
                                       f"state: {type(e).__name__}: {e}") from None
        if not ok or not bool(torch.isfinite(th).all()):
            raise ckpt.CheckpointError(f"checkpoint {ckpt.path_in(self.cfg.checkpoint)}: the stored parameters "
                                       f"are not a finite {tuple(theta0.shape)} {theta0.dtype} tensor")
        self._check_consistent(state)
        self._check_loss_at(th, state)
        self.round_index = int(state["round"])
        self.rec.rows = list(state["rows"])
        self.floats_up, self.floats_down = int(state["floats_up"]), int(state["floats_down"])
        self.rec.floats_sent = self.floats_up + self.floats_down
        self.exchanges = self.rec.exchanges = int(state.get("exchanges", 0))
        self.rec.credit(float(state["elapsed"]))  # the clock (and the budget) continue where they stopped
        self.rejections = list(state["rejections"])
        self.skipped_rounds = int(state.get("skipped_rounds", 0))
        self.unanswered = list(state.get("unanswered", []))
        self.monitor_exchanges = int(state.get("monitor_exchanges", 0))  # the count goes on across a resume
        if state.get("loss_pending") and self.rec.rows:  # the last row's loss comes with the next answers
            self._pending = (self.rec.rows[-1], strategy.theta, int(self.rec.rows[-1]["step"]))
        return True

    def _check_loss_at(self, theta, state) -> None:
        """The stored θ gives the stored history's last loss: the clients are asked their ½‖r_m‖² at θ (monitoring:
        clock paused, nothing counted) and the mean must equal the last row's ``loss`` to round-off (relative
        1e-9: the same clients' sums in the same order, up to another thread count's summation order).  A
        checkpoint whose parameters were changed and its checksum recomputed (θ scaled by 10⁶) is refused in one
        line naming both values.  Skipped where the row cannot be recomputed this way: its loss still pending or
        not measured (DP), covering only some clients (``loss_clients``, sampled participation, dropout), points
        redrawn each round (``resample``), or a client that does not answer now."""
        rows = state["rows"]
        last = rows[-1] if rows and isinstance(rows[-1], dict) else {}
        want = last.get("loss")
        if (state.get("loss_pending") or not isinstance(want, float) or not math.isfinite(want)
                or "loss_clients" in last or self.cfg.participation < 1.0 or self.cfg.dropout > 0.0
                or ((self.fingerprint or {}).get("options") or {}).get("resample") is not None or last.get("step") != state["round"]):
            return
        with self.paused(), torch.no_grad():
            got = self.transport.ask(list(self.client_ids), Request("loss", {"theta": theta}, {"vectorize": False}))
        if any(isinstance(got.get(c), Failure) or c not in got for c in self.client_ids):
            return
        have = sum(float(got[c].message["loss"][0]) for c in self.client_ids) / self.n_total
        if not abs(have - want) <= 1e-9 * max(abs(have), abs(want)) + 1e-300:
            raise ckpt.CheckpointError(
                f"checkpoint {ckpt.path_in(str(self.cfg.checkpoint))}: its parameters give the training loss "
                f"{have:.6g}, its history says {want:.6g} at round {state['round']}: the file was changed after it "
                f"was written (its checksum recomputed); not resumed")

    def _check_consistent(self, state) -> None:
        """What a state this run wrote must satisfy (its checksum can be recomputed by whoever edits it):
        the round in ``[0, rounds]``, every history step within ``[0, round]``, non-negative counters and a
        finite, non-negative clock.  One :class:`~fedsciml.runtime.checkpoint.CheckpointError` otherwise."""
        where = f"checkpoint {ckpt.path_in(str(self.cfg.checkpoint))}"
        k = state["round"]
        if k < 0 or (self.cfg.rounds is not None and k > self.cfg.rounds):
            hi = "" if self.cfg.rounds is None else f", {self.cfg.rounds}"
            raise ckpt.CheckpointError(f"{where}: round {k} is outside [0{hi}] for this run")
        for row in state["rows"]:
            step = row.get("step") if isinstance(row, dict) else None
            if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= k:
                raise ckpt.CheckpointError(f"{where}: a history row has step {step!r}, not an integer in [0, {k}]")
        for key in ("floats_up", "floats_down", "skipped_rounds", "monitor_exchanges"):
            if not isinstance(state.get(key, 0), int) or state.get(key, 0) < 0:
                raise ckpt.CheckpointError(f"{where}: {key} = {state.get(key)!r} is not an integer ≥ 0")
        for key in ("floats_up", "floats_down"):
            if state[key] < 0:
                raise ckpt.CheckpointError(f"{where}: {key} = {state[key]} < 0")
        if not (math.isfinite(float(state["elapsed"])) and float(state["elapsed"]) >= 0):
            raise ckpt.CheckpointError(f"{where}: elapsed time {state['elapsed']} is not a finite number ≥ 0")

    # --- the loop -----------------------------------------------------------
    def run(self, strategy: Strategy, theta0: torch.Tensor):
        """Run rounds until ``rounds``, the budget, ``tol`` or the strategy stops; returns ``(θ, rows, info)``.
        Interrupted (Ctrl-C, SIGTERM) or stopped by a failed round, the exception carries ``partial = (θ, rows,
        info)`` of the last finished round — the round of the last checkpoint written (:meth:`_keep`)."""
        from fedsciml.runtime.interrupt import FAILED, INTERRUPTED, Interrupted

        self._kept: dict | None = None
        self._resumed = False
        try:
            return self._run(strategy, theta0)
        except KeyboardInterrupt as e:
            stop = Interrupted.of(e)
            stop.partial = self._partial(INTERRUPTED)
            if stop is e:
                raise
            raise stop from None
        except RoundFailed as e:
            e.partial = self._partial(FAILED, error=str(e))
            raise
        finally:
            self.rec.close()

    def _keep(self, strategy) -> None:
        """Remember the round just finished (θ, the rows, the counters): what an interrupted or failed run keeps."""
        self._kept = {"theta": strategy.theta.detach().clone(), "n_rows": len(self.rec.rows),
                      "round": self.round_index, "floats_up": self.floats_up, "floats_down": self.floats_down,
                      "exchanges": self.exchanges, "elapsed": self.rec.elapsed(), "name": strategy.name}

    def _partial(self, reason: str, **extra):
        """``(θ, rows, info)`` of the last finished round, stopped for ``reason``; ``None`` before the first."""
        k = self._kept
        if k is None:
            return None
        up, down = k["floats_up"], k["floats_down"]
        info = {"rounds": k["round"], "stopped_by": reason, "stop_reason": reason, "resumed": self._resumed,
                "floats_up": up, "floats_down": down, "floats_per_round": (up + down) / max(1, k["round"]),
                "exchanges": k["exchanges"], "rejections": self.rejections, "skipped_rounds": self.skipped_rounds,
                **({"unanswered": self.unanswered} if self.unanswered else {}), "solver_time_s": k["elapsed"],
                "monitor_exchanges": self.monitor_exchanges, "strategy": {"name": k["name"]}, **extra}
        return k["theta"], list(self.rec.rows[:k["n_rows"]]), info

    def _run(self, strategy: Strategy, theta0: torch.Tensor):
        resumed = self._resumed = self.restore(strategy, theta0)
        if resumed:
            self._keep(strategy)
        else:
            self.begin_round(0)
            extra = strategy.start(self, theta0) or {}
            self.end_round()
            self._record(0, strategy, round=0, **self.round_fields(), **extra)
            with deferred():  # the checkpoint written and the round kept are the same round, whenever a signal comes
                self.save(strategy)
                self._keep(strategy)
        reason = None
        while True:
            if self.cfg.rounds is not None and self.round_index >= self.cfg.rounds:
                reason = "rounds"
                break
            if self.rec.out_of_time():
                reason = self.rec.stop_reason or "budget"
                break
            last_loss = self.rec.rows[-1]["loss"] if self.rec.rows else None
            if last_loss is not None and last_loss <= self.cfg.tol:
                reason = "tol"
                break
            reason = strategy.finished(self)
            if reason:
                reason = self._settle_before_stop(reason)
                break
            k = self.round_index + 1
            self.begin_round(k)
            skipped = self.skipped_rounds
            self._in_round = True
            try:
                extra = strategy.round(self, k) or {}
                if self._pending is not None:  # a round without an exchange at the pending θ (e.g. skipped)
                    self._settle({})
            except _Converged:  # the last row's loss met tol: this round is not run (nothing of it counts)
                self.round_index, self.skipped_rounds = k - 1, skipped
                reason = "tol"
                break
            except OutOfTime:  # the budget ran out inside the round (a strategy's solve asks it): no step came of
                # it and θ is the last finished round's; what it sent stays counted (it was sent)
                self.round_index, self.skipped_rounds = k - 1, skipped
                reason = self.rec.stop_reason or "budget"
                break
            finally:
                self._in_round = False
            self.end_round()
            self._record(k, strategy, round=k, **self.round_fields(), **extra)
            with deferred():
                self.save(strategy)
                self._keep(strategy)
        # e.g. a last acceptance check of an unvalidated step (its exchange counts as part of the last round)
        before, sent = strategy.theta, self.floats_up + self.floats_down
        self.begin_round(self.round_index)
        strategy.finalize(self)
        self.end_round()
        if self._pending is not None:
            self._settle({})
        if self.rec.rows and strategy.theta is before:
            if self.floats_up + self.floats_down != sent:
                self.rec.rows[-1]["floats_sent"] = self.rec.floats_sent
            self.rec.rows[-1]["exchanges_total"] = self.exchanges
        elif self.rec.rows:  # the last step was undone: the last row describes the parameters kept
            last = self.rec.rows.pop()
            keep = {k: last[k] for k in ("round", "floats_up", "floats_down", "exchanges", "rejected", "dropped",
                                         "answered")
                    if k in last}
            loss, mon = self._monitor(strategy)
            self.rec.record(last["step"], strategy.theta, loss, **keep, **mon, final_check="last step undone")
        info = {
            "rounds": self.round_index, "stopped_by": reason, "resumed": resumed,
            "floats_up": self.floats_up, "floats_down": self.floats_down,
            "floats_per_round": (self.floats_up + self.floats_down) / max(1, self.round_index),
            "exchanges": self.exchanges,
            "rejections": self.rejections, "skipped_rounds": self.skipped_rounds,
            **({"unanswered": self.unanswered} if self.unanswered else {}),
            "solver_time_s": self.rec.elapsed(),
            "monitor_exchanges": self.monitor_exchanges,
            "strategy": {"name": strategy.name, **strategy.summary()},
        }
        return strategy.theta, self.rec.rows, info
