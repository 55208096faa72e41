"""fedsciml's Flower apps: a ClientApp that answers fedsciml queries on its node's own data, and a ServerApp.

**ClientApp** (``fedsciml.engines.flower.apps:client_app``).  Every fedsciml message
carries a small *job* (JSON: the problem's name and options, the number of
clients, the seed, the thread count); the node's ``Context.node_config``
says which part of it this node holds:

* ``partition-id`` — the node's client id (Flower's simulation engine sets
  it; a SuperNode gets it with ``--node-config "partition-id=0 num-partitions=2"``);
* for the problem zoo nothing else: the node builds client ``partition-id``
  of ``get_problem(name, **options).client_objectives(clients, seed)``
  itself (the same points as an in-process run with that seed), within its
  own limits (:func:`node_limits`: ``max-points``, ``max-params``,
  ``max-floats``; it opens no file the job names unless its ``data-dirs``
  allow it, and takes its threads and device from its own config);
* for a user's own table, ``data="site0.csv"`` (CSV with a header:
  feature columns and a target column, ``target`` names it, default ``y``;
  or ``.npz`` with arrays ``X`` and ``y``) — see
  :func:`fedsciml.problems.table.table_objective`; the server runs problem
  ``table`` (its model size comes from the nodes' ``describe``).

The node answers the query (``describe``: its partition id and sizes;
``gn_loss``, ``gn_stats``, ``update``, ``loss``, ``oneshot_stats``: through
:meth:`fedsciml.runtime.client.Client.answer`; ``final_stats``: its share of the problem's final metrics,
e.g. an inverse problem's Laplace standard deviation); the data never leave it.
A node keeps its objective between messages (a process-level cache keyed by
the job and partition), so a long-lived ClientApp process — a Ray worker in
simulation — builds it once; a stock SuperNode runs each message's ClientApp
in a fresh ``flwr-clientapp`` process, which builds it again (what that costs:
``docs/flower.md``).  If the
computation raises, the reply is a ``failure`` naming the partition, a reason
code and the node's own one line (:func:`failure_reason`; never a file's
content), which the server logs as a rejection, never a crash of the node.

**ServerApp** (``fedsciml.engines.flower.apps:server_app``; the Flower App that
``flwr run`` starts is ``fedsciml/engines/flower/app/``): its run config names
the problem, the method and the options, or a file of several jobs (see
:func:`job_from_run_config`); its main connects a
:class:`~fedsciml.engines.flower.transport.FlowerTransport` to the Grid, runs the
method's strategy in fedsciml's own round loop (:func:`run_on_grid`), logs the
table ``python -m fedsciml solve`` prints (:func:`fedsciml.runtime.results.summary_lines`; Flower
streams it to ``flwr run --stream``) and writes the run's directory where ``out`` says
(:func:`write_result`: ``result.json``, ``history.csv`` and the model that ``fs.load_model(out)`` reads — the
directory ``solve --out`` writes).
"""
from __future__ import annotations

import json
import logging
import os
import sys
from collections import OrderedDict

import torch

import fedsciml.engines.flower  # noqa: F401  (telemetry / update check off before flwr is imported)
from fedsciml.runtime.loop import RoundFailed
from fedsciml.runtime.protocol import Failure, Reply
from fedsciml.runtime.registry import FEDERATED_METHOD
from fedsciml.runtime.results import summary_lines
from fedsciml.engines.flower import codec
from fedsciml.engines.flower.resultio import clear_failure, write_failure, write_result
from fedsciml.engines.flower.runconfig import RUN_CONFIG_KEYS, job_from_run_config, jobs_of  # noqa: F401
from fedsciml.engines.flower.transport import DESCRIBE, FINAL_STATS, FlowerTransport, stderr_log
from fedsciml.core.objective import LinearLeastSquares
from fedsciml.problems.table import table_objective  # noqa: F401  (a node's own table: CSV or npz)

_CACHE: "OrderedDict[str, object]" = OrderedDict()
_CACHE_SIZE = 8
_SPLITS: dict = {}  # job -> (problem, every client's objective): the last two runs' splits of this process


# --- the node's data and its own limits -----------------------------------------------------------
#
# A site decides what it reads.  The server's job names a problem, its options, the number of clients and a
# seed; the node never opens a path the job names unless its own configuration allows that directory, never
# builds more collocation points or parameters than its own limits, and sets its threads and device from its
# own configuration.  A failure reply carries a reason code and the node's own one-line message, never the
# content of a file it read (the full reason goes to the node's own log).

#: reason codes of a node's failure reply (``partition P: [code] message``)
REFUSED = "refused"        # the job asks what this node's own configuration does not allow
NODE_DATA = "node-data"    # this node's data could not be read: the reason stays in the node's log
BAD_JOB = "bad-job"        # the job's problem or options cannot be built (the message names the job's own values)
BAD_REQUEST = "bad-request"  # the request cannot be answered (shape, dtype, a value out of range)
ERROR = "error"            # anything else (the exception's type; the message stays in the node's log)

#: defaults of a node's limits (node config ``max-points`` / ``max-params`` / ``max-floats``, or the environment
#: variables ``FEDSCIML_NODE_MAX_POINTS`` / ``…_MAX_PARAMS`` / ``…_MAX_FLOATS``): the residual rows a node draws
#: for one run (every client's split: K × rows per client), the model's parameters, and the floats of the
#: largest array it builds (its client's dense Jacobian, rows × p, or the split's data, K × rows × inputs):
#: 2.5·10⁸ floats are 2 GB
NODE_MAX_POINTS = 2_000_000
NODE_MAX_PARAMS = 2_000_000
NODE_MAX_FLOATS = 250_000_000
_MAX_REASON = 300  # characters of a failure reply's message

_log = logging.getLogger(__name__)


class NodeRefused(ValueError):
    """The job asks what this node's own configuration does not allow (reason code ``refused``)."""


class NodeDataError(ValueError):
    """This node's own data could not be read (reason code ``node-data``; the reason is logged on the node)."""


class BadJob(ValueError):
    """The job's problem or options cannot be built on this node (reason code ``bad-job``)."""


def _cfg(node_config, key: str, env: str | None = None):
    val = node_config.get(key) if hasattr(node_config, "get") else None
    if (val is None or val == "") and env:
        val = os.environ.get(env) or None
    return val


def _positive_int(node_config, key: str, env: str, default: int | None) -> int | None:
    raw = _cfg(node_config, key, env)
    if raw is None:
        return default
    try:
        val = int(str(raw).strip())
    except ValueError:
        val = 0
    if val < 1 or str(raw).strip() != str(val):
        raise NodeRefused(f"this node's {key}={raw!r} (node config or ${env}) must be a whole number ≥ 1")
    return val


def node_limits(node_config) -> dict:
    """This node's own limits, from its node config (``--node-config``) or environment, never from the job:
    ``max_points``, ``max_params``, ``threads`` (``None``: leave torch's), ``data_dirs`` (directories whose files
    a job may name, e.g. the simulation engine's tables on the user's own machine; default none), ``device``."""
    dirs = _cfg(node_config, "data-dirs", "FEDSCIML_NODE_DATA_DIRS")
    return {"max_points": _positive_int(node_config, "max-points", "FEDSCIML_NODE_MAX_POINTS", NODE_MAX_POINTS),
            "max_params": _positive_int(node_config, "max-params", "FEDSCIML_NODE_MAX_PARAMS", NODE_MAX_PARAMS),
            "max_floats": _positive_int(node_config, "max-floats", "FEDSCIML_NODE_MAX_FLOATS", NODE_MAX_FLOATS),
            "threads": _positive_int(node_config, "threads", "FEDSCIML_THREADS", None),
            "data_dirs": [os.path.realpath(d) for d in str(dirs or "").split(os.pathsep) if d.strip()],
            "device": str(_cfg(node_config, "device") or "cpu")}


def _allowed_path(path, limits: dict, what: str) -> str:
    """``path`` if it lies in one of this node's ``data_dirs`` (resolved, links followed); a refusal otherwise
    (nothing is opened or probed: the refusal does not say whether the path exists)."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise NodeRefused(f"{what} must be a path")
    real = os.path.realpath(os.fspath(path))
    for d in limits["data_dirs"]:
        if real == d or real.startswith(d.rstrip(os.sep) + os.sep):
            return os.fspath(path)
    raise NodeRefused(f"this node opens no file a server names ({what}); a site reads only its own data "
                      "(node config data=PATH, docs/flower-sites.md)")


def _file_options(cls) -> list[str]:
    """The problem options that name files: declared of type PATH/PATHS, or listed in ``cls.file_options``."""
    from fedsciml.options import PATH, PATHS

    specs = cls.specs() if hasattr(cls, "specs") else {}
    return sorted({k for k, (_, spec) in specs.items() if spec.type in (PATH, PATHS)}
                  | set(getattr(cls, "file_options", ())))


def _job_problem(job: dict, limits: dict):
    """The job's zoo problem, built only after its file options were checked against this node's ``data_dirs``."""
    from fedsciml.problems import get_problem
    from fedsciml.problems.registry import REGISTRY, load_entry_points

    name, opts = job.get("problem"), job.get("options", {})
    if isinstance(name, str) and name not in REGISTRY:
        load_entry_points()  # the node's own installed problem plugins (a user's PDE package), never the job's code
    if not isinstance(name, str) or name not in REGISTRY:
        raise BadJob(f"the job's problem {name!r} is not one this node knows")
    if not isinstance(opts, dict):
        raise BadJob("the job's problem options are not an object")
    for k in _file_options(REGISTRY[name]):
        val = opts.get(k)
        for i, v in enumerate(val if isinstance(val, (list, tuple)) else [val] if val else []):
            _allowed_path(v, limits, f"job option {k!r}" + (f" item {i}" if isinstance(val, (list, tuple)) else ""))
    try:
        return get_problem(name, **opts)
    except (ValueError, TypeError) as e:
        raise BadJob(str(e).splitlines()[0] if str(e) else type(e).__name__) from None


def _check_size(problem, K: int, limits: dict) -> None:
    """Refuse a job whose split would make this node draw more points or parameters than its limits allow
    (read from the problem's declared sizes before anything is allocated)."""
    if getattr(problem, "name", None) == "table":
        return  # a table's rows are its files' (already within this node's data_dirs)
    rows = problem.rows_per_client(K)
    if rows is None:
        raise NodeRefused(f"problem {problem.name!r} cannot say how many points a client holds; this node "
                          f"builds only problems whose size it can bound")
    total = int(rows) * int(K)
    if total > limits["max_points"]:
        raise NodeRefused(f"the job's split draws {total:,} points ({K} clients × {int(rows):,}), more than this "
                          f"node's max-points={limits['max_points']:,} (node config)")
    try:
        net = problem.network()
    except NotImplementedError:
        raise NodeRefused(f"problem {problem.name!r} cannot say its model's size; this node builds only problems "
                          f"whose size it can bound") from None
    p = int(net.n_params)
    if p > limits["max_params"]:
        raise NodeRefused(f"the job's model has {p:,} parameters, more than this node's "
                          f"max-params={limits['max_params']:,} (node config)")
    sizes = list(getattr(net, "sizes", []) or [p])
    floats = max(int(rows) * p, total * (int(sizes[0]) + 1))
    if floats > limits["max_floats"]:
        raise NodeRefused(f"the job needs arrays of {floats:,} floats on this node (a client's Jacobian {int(rows):,}"
                          f" × {p:,}, or the split's data), more than its max-floats={limits['max_floats']:,} "
                          f"(node config)")


def _node_client(job: dict, pid: int, node_config):
    """This node's :class:`~fedsciml.runtime.client.Client` of the job: its own table (node config ``data``), or
    partition ``pid`` of the job's split built by the runtime's :func:`~fedsciml.runtime.client.job_client` (the
    same objective as in process), after this node's checks of the job."""
    from fedsciml.runtime.client import Client, job_client

    limits = node_limits(node_config)
    data = node_config.get("data") if hasattr(node_config, "get") else None
    device = limits["device"]
    if data:
        try:
            client = Client(pid, table_objective(str(data), str(node_config.get("target", "y")), device=device))
            client.problem = None  # type: ignore[attr-defined]  # a node's own table: no problem built it
            return client
        except Exception as e:  # noqa: BLE001 - the reason (it may quote the file) stays on the node
            _log.warning("this node's data %s could not be read: %s", data, e)
            raise NodeDataError("this node's own data could not be read (the node's log has the reason)") from None
    if "problem" not in job:
        raise BadJob("the job names no problem and this node's config gives no data=PATH")
    try:
        K = int(job["clients"])
    except (TypeError, ValueError, KeyError):
        raise BadJob(f"the job's clients={job.get('clients')!r} is not a whole number") from None
    if not 0 <= pid < K:
        raise BadJob(f"partition-id {pid} is outside 0..{K - 1} for a run with {K} clients")
    key = json.dumps({k: v for k, v in job.items() if k not in ("threads", "device")}, sort_keys=True, default=str)
    seed = int(job.get("seed", 0))
    if key in _SPLITS:  # this process already built the run's clients (a Ray worker serves any partition)
        problem, objs = _SPLITS[key]
        return job_client(problem, pid, K, seed, device, split=lambda build: objs)
    problem = _job_problem(job, limits)
    _check_size(problem, K, limits)

    def keep(build) -> list:
        # the split draws every client's points at once: keep it, so that another partition this process is sent
        # (Ray hands each message to whichever worker is free) does not draw all K again
        objs = build()
        _SPLITS[key] = (problem, objs)
        while len(_SPLITS) > 2:
            _SPLITS.pop(next(iter(_SPLITS)))
        return objs

    own = hasattr(problem, "client_objective")  # e.g. 'table': read only this client's own file
    try:
        return job_client(problem, pid, K, seed, device, split=keep)
    except Exception as e:  # noqa: BLE001 - a file this node was allowed to read: its content stays here
        if not own:
            raise
        _log.warning("partition %s: its table could not be read: %s", pid, e)
        raise NodeDataError("this node's table could not be read (the node's log has the reason)") from None


def _image_spec(spec: dict, node_config) -> dict:
    """The job's image setting with this node's own data directory and device (never the job's path)."""
    limits = node_limits(node_config)
    spec = dict(spec)
    own = _cfg(node_config, "data-dir")
    if own:
        spec["data_dir"] = str(own)
    elif spec.get("data_dir"):
        _allowed_path(spec["data_dir"], limits, "the job's image data_dir")
    spec["device"] = limits["device"]
    return spec


def _client(job: dict, pid: int, node_config):
    """This node's :class:`~fedsciml.runtime.client.Client` for ``job`` (built once per process)."""

    key = json.dumps([{k: v for k, v in job.items() if k not in ("threads", "device")}, pid,
                      dict(node_config) if hasattr(node_config, "items") else None], sort_keys=True, default=str)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    if "images" in job:  # an image-classification client (bench images): its split of the data set
        from fedsciml.images.methods import image_client

        client = image_client(_image_spec(job["images"], node_config), pid)
    else:
        client = _node_client(job, pid, node_config)
    _CACHE[key] = client
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return client


def set_node_threads(node_config) -> None:
    """This node's torch threads from its own config (``threads``, or ``$FEDSCIML_THREADS``), never the job's."""
    threads = node_limits(node_config)["threads"]
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def failure_reason(pid, e: BaseException) -> str:
    """A node's failure reply: ``partition P: [code] message`` — the node's own one-line message for a refusal,
    a bad job or a bad request, never a file's content (a data error's reason and any unexpected error's
    message go to the node's log only)."""
    if isinstance(e, NodeRefused):
        code, msg = REFUSED, str(e)
    elif isinstance(e, NodeDataError):
        code, msg = NODE_DATA, str(e)
    elif isinstance(e, BadJob):
        code, msg = BAD_JOB, str(e)
    elif isinstance(e, (ValueError, TypeError, RuntimeError, ArithmeticError, KeyError, IndexError)):
        code, msg = BAD_REQUEST, f"{type(e).__name__}: {e}"
    else:
        code, msg = ERROR, f"{type(e).__name__} (the node's log has the reason)"
    _log.warning("partition %s: [%s] %s: %s", pid, code, type(e).__name__, e)
    first = (msg.splitlines() or [""])[0]
    if len(first) > _MAX_REASON:
        first = first[:_MAX_REASON - 1] + "…"
    return f"partition {pid}: [{code}] {first}"


def _describe(client, node_config=None) -> dict:
    """A node's ``describe`` reply: its partition, sizes and, where its config says, ``num_partitions`` (the
    federation's SuperNode count: Flower's simulation sets it; a deployment's sites are told it)."""
    if not hasattr(client, "objective"):  # an image client: its sample count and the model's size
        out = {"partition_id": int(client.cid), "n": int(client.n), "p": int(client.model.p), "linear": False}
    else:
        obj = client.objective
        out = {"partition_id": int(client.cid), "n": int(obj.n_residuals), "p": int(obj.n_params),
               "linear": isinstance(obj, LinearLeastSquares)}
    parts = node_config.get("num-partitions") if hasattr(node_config, "get") else None
    if isinstance(parts, int) and not isinstance(parts, bool) and parts >= 1:
        out["num_partitions"] = parts
    return out


def answer_content(content, node_config):
    """The reply ``RecordDict`` to one fedsciml request ``content`` on this node."""
    pid = None
    try:
        req, job = codec.request_from_content(content)
        pid = int(node_config["partition-id"])
        set_node_threads(node_config)
        client = _client(job, pid, node_config)
        if req.query == DESCRIBE:
            rep = Reply({}, _describe(client, node_config))
        elif req.query == FINAL_STATS:
            rep = Reply(_final_stats(job, client, req.tensors["theta"]))
        else:
            rep = client.answer(req)
    except Exception as e:  # noqa: BLE001 - a node answers with its reason instead of crashing
        rep = Failure(failure_reason(pid, e))
    return codec.reply_content(rep)



def _final_stats(job: dict, client, theta) -> dict:
    """This node's share of the problem's final metrics (:meth:`DomainPDE.final_stats`: ``J_kᵀJ_k``, the sum
    of squares and count of its data residuals — no residual leaves the node); ``{}`` where the problem
    has none."""
    problem = getattr(client, "problem", None)  # the instance that built the objective (its conditions)
    share = getattr(problem, "final_stats", None)
    return share(theta, client.objective) if callable(share) else {}


def query_names() -> tuple[str, ...]:
    """Every message type a fedsciml ClientApp answers: ``describe`` and the queries the registered client kinds
    answer (objective clients with the methods' handlers, the installed method plugins' included, image clients) —
    derived, never listed."""
    import fedsciml.images.methods  # noqa: F401  (registers the image client's queries)
    import fedsciml.methods  # noqa: F401  (registers the methods' client handlers)
    from fedsciml.runtime.client import queries
    from fedsciml.runtime.registry import load_method_entry_points

    load_method_entry_points()  # this node's installed method plugins and their handlers: never the job's code

    return (DESCRIBE, FINAL_STATS, *queries())


def _make_client_app():
    from flwr.app import Message
    from flwr.clientapp import ClientApp

    app = ClientApp()

    def handle(msg, context):
        return Message(answer_content(msg.content, context.node_config), reply_to=msg)

    for q in query_names():
        app.query(q)(handle)
    return app


# --- the server side -----------------------------------------------------------------------


def run_on_grid(grid, problem, method: str, clients: int, *, seed: int = 0, device="cpu", progress: bool = False,
                timeout_s: float = 300.0, connect_timeout_s: float = 300.0, job_extra: dict | None = None,
                stop=None, message_ttl_s: float | None = None, dead_after_s: float | None = None, **options):
    """Run ``method`` on ``problem`` with its clients on the Flower nodes of ``grid``; returns a Result.

    The driver's run (:func:`fedsciml.runtime.driver.plan` and :func:`~fedsciml.runtime.driver.run_connected`:
    the same strategy, round loop and Result as ``fs.solve``); Flower only connects the
    :class:`FlowerTransport` that carries the messages, and says what is its own through the transport's
    ``engine_info()`` and ``final_metrics(problem, θ)``.  Central DP needs a secure sum, which this App lacks
    (the SecAgg+ App, :mod:`fedsciml.engines.flower.secagg`, has Flower's)."""
    from fedsciml.runtime.driver import plan, run_connected

    options = dict(options)
    options.pop("transport", None)  # the configured in-process transport name: Flower's replaces it
    p = plan(problem, method, clients, seed, device, progress, engine="flower", **options)
    need = p.spec.needs_secure_sum(p.config)  # e.g. one-shot's central DP: the SecAgg+ App's, not this one's
    if need is not None:
        raise ValueError(need)

    def connect(job: dict, n_clients: int) -> FlowerTransport:
        return FlowerTransport(grid, {**job, **(job_extra or {})}, n_clients, timeout_s=timeout_s,
                               connect_timeout_s=connect_timeout_s, device=p.device,
                               log=stderr_log if progress else None, stop=stop, message_ttl_s=message_ttl_s,
                               dead_after_s=dead_after_s)

    return run_connected(p, connect)


def run_job(grid, job: dict):
    """One job of the ServerApp (:func:`job_from_run_config`'s dict, or one entry of its ``jobs`` file):
    ``kind`` ``"solve"`` (a method on a problem; returns the Result) or ``"images"`` (the image benchmark's
    setting, :func:`fedsciml.images.bench.run_setting`; returns its result dict)."""
    from fedsciml.problems import get_problem

    if job.get("kind", "solve") == "images":
        from fedsciml.images import bench

        clients, timeout = int(job["clients"]), float(job.get("timeout", 600.0))
        engine: list = []

        def transport(seed, spec):
            tr = FlowerTransport(grid, {"images": spec, "clients": clients, "threads": torch.get_num_threads()},
                                 clients, timeout_s=timeout, connect_timeout_s=timeout)
            engine.append(tr)
            return tr

        from fedsciml.images.methods import TrainConfig

        setting = dict(job["setting"])
        if setting.get("cfg") is not None:
            setting["cfg"] = TrainConfig(**setting["cfg"])
        log = logging.getLogger("fedsciml.engines.flower.app")
        res = bench.run_setting(transport=transport, progress=lambda line: log.info("%s", line), **setting)
        res["setting"]["engine"] = "flower"
        res["setting"]["flower"] = [{"exchanges": t.exchanges, "exchange_s": t.exchange_seconds} for t in engine]
        return res
    problem = get_problem(job["problem"], **job.get("problem_options", {}))
    return run_on_grid(grid, problem, job.get("method", FEDERATED_METHOD), int(job["clients"]), seed=int(job.get("seed", 0)),
                       progress=bool(job.get("progress", True)), timeout_s=float(job.get("timeout", 300.0)),
                       connect_timeout_s=float(job.get("connect_timeout", 300.0)),
                       message_ttl_s=job.get("message_ttl"), dead_after_s=job.get("dead_after"),
                       **job.get("options", {}))


def serve(grid, run_config):
    """The ServerApp's main: run the job(s) of ``run_config`` on ``grid``; log each solve's table; write each
    result where its ``out`` says."""
    torch.set_num_threads(int(os.environ.get("FEDSCIML_THREADS", torch.get_num_threads())))
    jobs = jobs_of(run_config)  # every job checked (types, ranges, options, out) before the first one runs
    log = logging.getLogger("fedsciml.engines.flower.app")
    for i, j in enumerate(jobs):
        if j.get("out"):
            clear_failure(str(j["out"]), j.get("kind", "solve"))
        try:
            res = run_job(grid, j)
        except BaseException as e:  # a dead site (or Ctrl-C) stopped it: its finished rounds are written to out
            keep_partial_result(e, j)
            record_failure(e, j)
            raise
        if j.get("kind", "solve") == "solve" and j.get("table", True):
            for line in summary_lines([res]):
                log.info("%s", line)
        if j.get("out"):
            if j.get("kind", "solve") == "images":
                from fedsciml.runtime.files import write_text

                write_text(str(j["out"]), json.dumps(res), what="the run config's out")
            else:  # the directory `solve --out` writes: result, history, model (fs.load_model reads it)
                from fedsciml.problems import get_problem

                write_result(res, str(j["out"]), get_problem(j["problem"], **j.get("problem_options", {})))


def keep_partial_result(e: BaseException, job: dict) -> None:
    """A solve job stopped after some rounds (a :class:`RoundFailed` — a dead site, :class:`SiteDown` — or an
    interrupt, whose ``result`` the driver made of the last finished round, ``stop_reason`` ``"failed"`` /
    ``"interrupted"``): that result is written to the job's ``out`` as a finished run's is (result.json, the
    history, the model), and the error's message says so.  Nothing where the job has no ``out`` or no round
    finished; a failure to write is logged, never raised over the stop itself."""
    res = getattr(e, "result", None)
    if res is None or not job.get("out") or job.get("kind", "solve") != "solve":
        return
    from fedsciml.problems import get_problem

    res.extra.setdefault("error", failure_line(e))  # why it stopped, with the rounds (the failure record follows)
    try:
        write_result(res, str(job["out"]), get_problem(job["problem"], **job.get("problem_options", {})))
    except Exception as why:  # noqa: BLE001 - the stop is the error to report; this is its by-product
        logging.getLogger("fedsciml.engines.flower.app").warning("the rounds before were not written to %s: %s",
                                                                 job["out"], why)
        return
    if e.args and isinstance(e.args[0], str):
        e.args = (f"{e.args[0]}; the rounds before are written: {job['out']}",) + tuple(e.args[1:])


def failure_line(e: BaseException) -> str:
    """An exception as the one line a user reads: its message (first line) for fedsciml's own refusals, the
    exception's type and message for anything else."""
    msg = str(e).splitlines()[0] if str(e).strip() else ""
    if isinstance(e, (ValueError, TypeError, RoundFailed)):
        return msg or type(e).__name__
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def record_failure(e: BaseException, job: dict) -> None:
    """The job stopped with ``e``: its one-line reason to the job's ``out`` (:func:`resultio.write_failure`), which
    the process that submitted the run reads (``flwr run`` itself neither ends nor exits non-zero then).  Nothing
    without ``out``; a failure to write is logged, never raised over ``e``."""
    if not job.get("out"):
        return
    try:
        write_failure(str(job["out"]), failure_line(e), job.get("kind", "solve"))
    except Exception as why:  # noqa: BLE001 - the stop is the error to report; this is its by-product
        logging.getLogger("fedsciml.engines.flower.app").warning("the failure was not recorded in %s: %s",
                                                                 job["out"], why)


def _app_logging():
    """The ServerApp's lines (its progress and table) to stderr, which Flower streams to ``flwr run --stream``."""
    log = logging.getLogger("fedsciml")
    if not any(getattr(h, "_fedsciml_app", False) for h in log.handlers):
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(message)s"))
        h._fedsciml_app = True
        log.addHandler(h)
        log.setLevel(logging.INFO)
        log.propagate = False


def _make_server_app():
    from flwr.serverapp import ServerApp

    app = ServerApp()

    @app.main()
    def main(grid, context):
        _app_logging()
        try:
            serve(grid, context.run_config)
        except (ValueError, TypeError, RoundFailed) as e:  # one line first; the run is still marked failed
            logging.getLogger("fedsciml.engines.flower.app").error("error: %s", e)
            raise RunFailedError(str(e)) from None
        except Exception as e:  # anything else: its line first, then Flower logs its traceback
            logging.getLogger("fedsciml.engines.flower.app").error("error: %s", failure_line(e))
            raise

    return app


class RunFailedError(RuntimeError):
    """The ServerApp's run failed (its one-line reason was logged first); Flower marks the run failed."""


try:
    client_app = _make_client_app()
    server_app = _make_server_app()
except ImportError:  # flwr is not installed: the pure helpers above still import
    client_app = server_app = None
