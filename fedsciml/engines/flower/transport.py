""":class:`FlowerTransport`: fedsciml requests over a Flower ``Grid`` (simulation or deployment).

Each client of the run is one Flower node.  At connection the transport asks
every node it sees a ``describe`` query; the node answers with its partition
id (its fedsciml client id), its number of residual rows and parameters and
whether its residual is linear — never its data.  Then
:meth:`FlowerTransport.ask` pushes one ``Message`` per chosen client (type
``query.<query>``, the request's tensors as float64 ``ArrayRecord`` s, its
config as JSON, see :mod:`fedsciml.engines.flower.codec`) and pulls the replies at a
short interval (1 ms, doubling up to ``poll_max_s``) until every reply
arrived or ``timeout_s`` passed.  Flower's ``Grid.send_and_receive`` sleeps
3 s between pulls in deployment; this loop does not.

Faults become :class:`~fedsciml.runtime.transport.Failure` s of that
exchange, so the round loop applies its rules (gn asks again, fipa and
fedavg fuse the rest; each is logged with the client and the reason):

* no reply within ``timeout_s`` — ``"node N (client c) did not answer within T s"``;
* the message could not be delivered (the node is gone) — ``"node N … is not connected"``;
  these two (and the SuperLink's "node / message / reply unavailable" errors) are
  ``Failure(dropped=True)``: the loop treats the client as dropped out of
  that exchange (``info["unanswered"]``), as with ``--dropout``, so a node
  that stays dead does not stop fipa or fedavg;
* the node replied with an error (Flower's, or the ``failure`` fedsciml's
  ClientApp sends when its computation raised) — the node and the reason
  (a rejection).

A client whose node failed is looked up again before the next exchange: a
SuperNode that was restarted (a new Flower node id, the same partition id)
is found by a new ``describe`` and rejoins the run.

**A dead site is bounded** (``dead_after_s``, the run config's ``dead-after``, default
:data:`DEAD_AFTER_S` = 600 s).  Without a bound, a site that stays away held a run for each of gn's 21
attempts × ``timeout`` (300 s): 105 minutes, and fipa/fedavg ``timeout`` seconds every round for as long as
they ran.  A client that has answered nothing (no reply, no error) since an exchange that began
``dead_after_s`` seconds ago stops the run (:class:`SiteDown`, a :class:`RoundFailed`: the rounds before are
kept and written) in one line naming the client, its node and its last reason; an exchange that asks only
such clients waits no longer than the bound leaves them, so a dead site holds a run at most ``dead_after_s``
(+ ``timeout`` where live clients share the exchange).
"""
from __future__ import annotations

import logging

import time

from fedsciml.engines.flower import codec
from fedsciml.engines.flower.runconfig import DEAD_AFTER_S as _DEAD_AFTER_S
from fedsciml.runtime.loop import RoundFailed
from fedsciml.runtime.transport import Failure, Request, Transport

DESCRIBE = "describe"
FINAL_STATS = "final_stats"  # the problem's end-of-run statistics of one client (e.g. the Laplace std's share)
NODE_GONE_CODES = (5,)  # flwr ErrorCode.NODE_UNAVAILABLE: the SuperLink lost the node's heartbeat
# and MESSAGE_UNAVAILABLE / REPLY_MESSAGE_UNAVAILABLE (e.g. a node killed while uploading its reply): nothing usable
# came back — a dropout of that exchange, like a timeout, not a rejection
NO_REPLY_CODES = (3, 4, 5)
APP_FAILURE = "partition "  # how fedsciml's ClientApp starts the reason of a failure on its own data


def medians_by_query(times, queries) -> dict:
    """``{query: {"exchanges": n, "median_s": …}}`` from the wall seconds of exchanges and their queries: a small
    query (a loss) and a large one (gn's statistics, a curvature sketch) cost different times, and the median
    over all exchanges falls between them."""
    import statistics

    return {q: {"exchanges": queries.count(q),
                "median_s": float(statistics.median(t for t, qq in zip(times, queries) if qq == q))}
            for q in dict.fromkeys(queries)}


class FlowerConnectError(RoundFailed):
    """The nodes of a run could not be found or set up (a :class:`RoundFailed`: the run started and
    cannot go on; the CLI reports it in one line, exit 1)."""


class SiteDown(RoundFailed):
    """A client answered nothing for the run's ``dead_after_s`` (see the module docstring): the run stops."""


#: seconds a client may answer nothing (over exchanges and retries) before the run stops naming it
DEAD_AFTER_S = _DEAD_AFTER_S


class EngineStopped(FlowerConnectError):
    """The Flower engine under the run stopped (it failed to start, or crashed): no node will answer."""


class FlowerTransport(Transport):
    """Carries requests to the Flower nodes of a run (see the module docstring).

    ``job`` (plain JSON values) tells each node which data it serves for this
    run (problem name, options, number of clients, seed); it travels with
    every message, so any worker of a node can answer any message.
    """

    def cpu_seconds(self) -> float | None:
        """``None``: the nodes' CPU is theirs (other processes, other machines) and never reported, so
        ``clock='cpu'`` is refused on Flower rather than counting the server's CPU alone."""
        return None

    def __init__(self, grid, job: dict, n_clients: int, *, timeout_s: float = 300.0,
                 connect_timeout_s: float = 300.0, poll_max_s: float = 0.02, device="cpu", log=None,
                 stop=None, message_ttl_s: float | None = None, dead_after_s: float | None = None):
        self.grid = grid
        self.stop = stop  # a threading.Event set when the engine under the grid is gone (see _check_engine)
        self.job = dict(job)
        self.n_clients = int(n_clients)
        self.timeout_s = float(timeout_s)
        from fedsciml.engines.flower.runconfig import message_ttl_s as _ttl

        # Flower's lifetime of each request and its reply, separate from how long an exchange waits: equal, a reply
        # that came back near the timeout (a loaded node) expired before it was pulled (seen at timeout=40)
        self.message_ttl_s = _ttl(self.timeout_s, message_ttl_s)
        self.dead_after_s = DEAD_AFTER_S if dead_after_s is None else float(dead_after_s)
        if not self.dead_after_s > 0:
            raise ValueError(f"dead_after_s must be a number of seconds > 0, got {dead_after_s!r}")
        self._silent_since: dict = {}  # client id -> when the first exchange it has not answered since began
        self.poll_max_s = float(poll_max_s)
        self.device = device
        self.log = log
        self.nodes: dict = {}        # client id -> Flower node id
        self.described: dict = {}    # client id -> the node's describe reply (metrics)
        self._stale: set = set()     # client ids whose node failed in the last exchange
        self._dead: set = set()      # node ids that did not answer a describe
        self.rejoined: list = []     # clients whose node was replaced during the run
        self.exchanges = 0
        self.exchange_seconds = 0.0
        self.exchange_times: list = []  # wall seconds of each ask (push, client work, pull)
        self.exchange_queries: list = []  # the query of each ask, beside its time
        t0 = time.perf_counter()
        self._connect(connect_timeout_s)
        self.connect_s = time.perf_counter() - t0  # finding the nodes and their describe replies
        self.client_ids = list(range(self.n_clients))
        self.sample_counts = {c: int(self.described[c]["n"]) for c in self.client_ids}

    # --- what the driver asks of an engine's transport (fedsciml.runtime.driver.run_connected) ---------------

    def engine_info(self) -> dict:
        """The run's record of Flower (``Result.extra["engine"]`` beside the engine's name): the seconds to find
        the nodes (``connect_s``), the exchanges and their wall seconds (in all, the median, by query), the
        clients whose node was replaced, and each client's node id."""
        import numpy as np

        return {"connect_s": self.connect_s, "exchanges": self.exchanges, "exchange_s": self.exchange_seconds,
                "rejoined": self.rejoined,
                "exchange_median_s": float(np.median(self.exchange_times)) if self.exchange_times else None,
                "by_query": medians_by_query(self.exchange_times, self.exchange_queries),
                "nodes": {str(c): int(n) for c, n in self.nodes.items()}}

    def final_metrics(self, problem, theta) -> dict:
        """The problem's final metrics (what an in-process run adds with ``problem.final_metrics``, e.g. an
        inverse problem's ``coef_k_std``) from every node's share (a :data:`FINAL_STATS` query); a node that
        cannot send its share is logged and the metrics are left out (they need every client)."""
        if not (getattr(problem, "final_stats_needed", False)
                and callable(getattr(problem, "final_metrics_from", None))):
            return {}
        got = self.ask(self.client_ids, Request(FINAL_STATS, {"theta": theta}))
        bad = {c: r.reason for c, r in got.items() if isinstance(r, Failure)}
        if bad:
            logging.getLogger(__name__).warning("final metrics left out: %s", "; ".join(
                f"client {c}: {why}" for c, why in bad.items()))
            return {}
        return problem.final_metrics_from(theta, [got[c].message for c in self.client_ids])

    def _check_engine(self):
        """Raise :class:`EngineStopped` once the engine has stopped: waiting on nodes would then only end at
        the connect timeout (Ray failing to start under a memory limit kept a run polling for minutes)."""
        if self.stop is not None and self.stop.is_set():
            raise EngineStopped(getattr(self.stop, "reason", "") or "the Flower engine stopped; no node will answer")

    # --- node discovery -------------------------------------------------------
    def _describe(self, node_ids, timeout_s) -> dict:
        """``{node id: Reply | Failure}`` of a ``describe`` query."""
        return self._round_trip({nid: nid for nid in node_ids}, Request(DESCRIBE), timeout_s)

    def _connect(self, timeout_s: float):
        end = time.monotonic() + timeout_s
        asked: set = set()
        wait = 0.01
        while True:
            self._check_engine()
            fresh = [n for n in self.grid.get_node_ids() if n not in asked]
            if fresh:
                asked.update(fresh)
                for nid, rep in self._describe(fresh, min(60.0, max(1.0, end - time.monotonic()))).items():
                    if isinstance(rep, Failure) and rep.reason.startswith(APP_FAILURE):
                        raise FlowerConnectError(f"node {nid} cannot serve this run: {rep.reason}")
                    if isinstance(rep, Failure):  # still starting (ask again), or gone (not yet expired)
                        asked.discard(nid)
                        if self.log:
                            self.log(f"node {nid} did not describe itself yet: {rep.reason}")
                        continue
                    cid = int(rep.metrics["partition_id"])
                    parts = rep.metrics.get("num_partitions")
                    if isinstance(parts, int) and parts != self.n_clients:  # the federation's SuperNode count
                        from fedsciml.engines.flower.runconfig import count_mismatch

                        raise FlowerConnectError(count_mismatch(self.n_clients, parts))
                    if not 0 <= cid < self.n_clients:
                        raise FlowerConnectError(f"node {nid} says partition-id={cid}; this run has clients "
                                                 f"0..{self.n_clients - 1} (set num-partitions/partition-id in "
                                                 f"its node config)")
                    if cid in self.nodes and self.nodes[cid] != nid:
                        raise FlowerConnectError(f"nodes {self.nodes[cid]} and {nid} both say partition-id={cid}")
                    self.nodes[cid], self.described[cid] = nid, dict(rep.metrics)
            if len(self.nodes) == self.n_clients:
                return
            if time.monotonic() > end:
                missing = sorted(set(range(self.n_clients)) - set(self.nodes))
                raise FlowerConnectError(f"after {timeout_s:.0f} s, no node serves partition(s) {missing} "
                                         f"(connected nodes: {sorted(asked)})")
            time.sleep(wait)
            wait = min(0.5, 2 * wait)

    def _refresh(self):
        """Look for restarted nodes of clients whose node failed (new node id, same partition id)."""
        known = set(self.nodes.values()) | self._dead
        fresh = [n for n in self.grid.get_node_ids() if n not in known]
        if not fresh:
            return
        for nid, rep in self._describe(fresh, min(self.timeout_s, 60.0)).items():
            if isinstance(rep, Failure):
                self._dead.add(nid)
            else:
                cid = int(rep.metrics.get("partition_id", -1))
                if cid in self._stale:
                    self.rejoined.append({"client": cid, "old_node": int(self.nodes[cid]), "new_node": int(nid)})
                    self.nodes[cid], self.described[cid] = nid, dict(rep.metrics)
                    self._stale.discard(cid)
                    if self.log:
                        self.log(f"client {cid} rejoined as node {nid}")

    # --- exchanges ------------------------------------------------------------
    def _round_trip(self, targets: dict, request: Request, timeout_s: float, gone: set | None = None) -> dict:
        """Push ``request`` to ``targets`` (key -> node id), pull until answered or timed out.

        Keys whose node is gone (the request could not be delivered, or the
        SuperLink answered that the node is unavailable) are added to ``gone``."""
        gone = set() if gone is None else gone
        from flwr.app import Message

        keys = list(targets)
        # the message lives message_ttl_s (default twice the timeout: the longest an exchange waits), then
        # expires: a node that comes back much later (a restarted SuperNode) is not handed requests nobody waits
        # for any more, and a reply near the timeout is not lost to its TTL
        msgs = [Message(codec.request_content(request, self.job), int(targets[k]), f"query.{request.query}",
                        ttl=max(1.0, self.message_ttl_s, timeout_s)) for k in keys]
        out: dict = {}
        ids = list(self.grid.push_messages(msgs)) if msgs else []
        pending = {}
        for k, mid in zip(keys, ids + [None] * (len(keys) - len(ids))):
            if mid is None:
                out[k] = Failure(f"node {targets[k]} could not be sent the request (is it connected?)", True)
                gone.add(k)
            else:
                pending[str(mid)] = k
        end = time.monotonic() + timeout_s
        wait = 0.001
        last = False
        while pending:
            self._check_engine()
            # one pull after the deadline too: a pull that itself took long (Flower retrying the objects of a
            # half-uploaded reply of a killed node) must not make the other nodes' replies, which arrived
            # meanwhile, count as missing
            last = time.monotonic() >= end
            for m in self.grid.pull_messages(list(pending)):
                k = pending.pop(str(m.metadata.reply_to_message_id), None)
                if k is None:
                    continue
                if m.has_error():
                    code = int(m.error.code)
                    out[k] = Failure(f"node {targets[k]} replied with error {code}: {m.error.reason}",
                                     code in NO_REPLY_CODES)
                    if code in NODE_GONE_CODES:
                        gone.add(k)
                    continue
                try:
                    out[k] = codec.reply_from_content(m.content, self.device)
                except (KeyError, ValueError, TypeError) as e:  # a malformed reply is rejected, never averaged in
                    out[k] = Failure(f"node {targets[k]} sent a malformed reply: {type(e).__name__}: {e}")
            if not pending:
                break
            if last:
                for k in pending.values():
                    out[k] = Failure(f"node {targets[k]} did not answer within {timeout_s:g} s", True)
                break
            time.sleep(wait)
            wait = min(self.poll_max_s, 2 * wait)
        return out

    def ask(self, client_ids, request: Request) -> dict:
        cids = list(client_ids)
        if self._stale & set(cids):
            self._refresh()
        t0 = time.perf_counter()
        began = time.monotonic()
        wait_s = self._wait_for(cids, began)
        end = began + wait_s
        gone: set = set()
        got = self._round_trip({c: self.nodes[c] for c in cids}, request, wait_s, gone)
        # a client whose node is gone may come back (a restarted SuperNode: a new node id, the same
        # partition id) within this exchange's timeout: look for it, and ask it then
        while gone and time.monotonic() < end:
            self._stale.update(gone)
            time.sleep(min(0.25, max(0.0, end - time.monotonic())))
            self._refresh()
            back = [c for c in gone if c not in self._stale]
            if back:  # asked with the full timeout: the exchange takes at most twice the timeout
                gone -= set(back)
                got.update(self._round_trip({c: self.nodes[c] for c in back}, request, wait_s, gone))
        self.exchange_times.append(time.perf_counter() - t0)
        self.exchange_queries.append(request.query)
        self.exchange_seconds += self.exchange_times[-1]
        self.exchanges += 1
        out = {}
        now = time.monotonic()
        dead = []
        for c in cids:
            rep = got[c]
            if isinstance(rep, Failure):
                rep = Failure(f"{rep.reason} (client {c})", rep.dropped)
                self._stale.add(c)
                if self.log:
                    self.log(f"client {c}: {rep.reason}")
            else:
                self._stale.discard(c)
            if isinstance(rep, Failure) and rep.dropped:  # nothing came back: silent since its first such exchange
                since = self._silent_since.setdefault(c, began)
                if now - since >= self.dead_after_s:
                    dead.append((c, now - since, rep.reason))
            else:  # a reply, or an error the node sent: it is alive
                self._silent_since.pop(c, None)
            out[c] = rep
        if dead:
            c, silent, why = dead[0]
            others = f"; also silent: clients {[d[0] for d in dead[1:]]}" if len(dead) > 1 else ""
            raise SiteDown(f"client {c} (node {self.nodes.get(c)}) has answered nothing for {silent:.0f} s, the "
                           f"dead-site limit (run config dead-after={self.dead_after_s:g} s): the site is taken as "
                           f"down; its last reason: {why}{others}")
        return out

    def _wait_for(self, cids, now: float) -> float:
        """How long this exchange waits: ``timeout_s``, or less where every client asked has been silent and the
        dead-site bound leaves them less (at least 1 s): gn's retries of a dead site end at the bound."""
        if not cids or any(c not in self._silent_since for c in cids):
            return self.timeout_s
        left = max(self.dead_after_s - (now - self._silent_since[c]) for c in cids)
        return min(self.timeout_s, max(1.0, left))


def stderr_log(line: str):
    """The engine's progress and fault lines, through :mod:`logging` (logger ``fedsciml.engines.flower``)."""
    logging.getLogger("fedsciml.engines.flower").info("[flower] %s", line)
