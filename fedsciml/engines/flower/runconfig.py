"""The Flower App's run config and jobs file, checked before the run: one line naming the bad value and what is
allowed, before the ServerApp waits for a node or sends a message (no flwr import here).

``flwr run … --run-config "problem='bratu' clients=2 …"`` gives the ServerApp a flat dict of TOML values; the
``jobs`` key names a JSON file of several jobs (what ``fs.solve(…, engine="flower")`` writes).  Both are read
with bounds — a regular file of at most :data:`MAX_JOBS_BYTES`, at most :data:`MAX_JOBS` jobs — and every job
is checked as a whole: its problem built from its options and its method's configuration made (so a bad
option is refused here, not rounds later), its ``out`` path checked writable.
"""
from __future__ import annotations

import json
import math

from fedsciml.runtime.registry import FEDERATED_METHOD  # the run config's default method (no torch, no flwr)

RUN_CONFIG_KEYS = ("problem", "method", "clients", "seed", "problem-options", "method-options", "out", "timeout",
                   "connect-timeout", "message-ttl", "dead-after", "jobs")
MAX_CLIENTS = 100_000
MAX_JOBS = 1000
MAX_JOBS_BYTES = 16 * 2**20
MAX_SECONDS = 7 * 24 * 3600.0
#: the default of ``dead-after``: seconds a client may answer nothing before the run stops naming it
#: (:mod:`fedsciml.engines.flower.transport`)
DEAD_AFTER_S = 600.0


class RunConfigError(ValueError):
    """A run config or jobs file that cannot run (one line naming the value and what is allowed)."""


def _whole(value, key: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RunConfigError(f"run config {key}={value!r} must be a whole number in [{lo}, {hi}] "
                             f"(got {type(value).__name__})")
    if not lo <= value <= hi:
        raise RunConfigError(f"run config {key}={value} must be in [{lo}, {hi}]")
    return int(value)


def _seconds(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= MAX_SECONDS:
        raise RunConfigError(f"run config {key}={value!r} must be a number of seconds in (0, {MAX_SECONDS:g}]")
    return float(value)


def _message_ttl(value, timeout) -> float | None:
    """``message-ttl``: ``0`` → ``None`` (twice the timeout, :func:`message_ttl_s`), else seconds ≥ ``timeout``."""
    if not isinstance(value, bool) and value == 0:
        return None
    ttl = _seconds(value, "message-ttl")
    if ttl < float(timeout):
        raise RunConfigError(f"run config message-ttl={value!r} is shorter than timeout={timeout!r}: every reply "
                             f"that takes longer than message-ttl would expire while the exchange still waits for "
                             f"it; give message-ttl ≥ timeout (or 0: twice timeout)")
    return ttl


def message_ttl_s(timeout_s: float, message_ttl_s: float | None = None) -> float:
    """Flower's TTL of each request (and so of its reply, which lives as long as the request): ``message_ttl_s``
    when given, else twice the exchange timeout — the longest an exchange waits (it asks a node that came back
    after a restart with the full timeout again) — so a reply is never expired while the exchange waits for it."""
    return float(message_ttl_s) if message_ttl_s is not None else 2.0 * float(timeout_s)


def _text(value, key: str) -> str:
    if not isinstance(value, str):
        raise RunConfigError(f"run config {key}={value!r} must be a string (quote it: {key}='…')")
    return value


def _json_object(rc, key: str) -> dict:
    raw = rc.get(key, "{}")
    if isinstance(raw, dict):
        return raw
    raw = str(raw or "{}")
    try:
        val = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as e:
        raise RunConfigError(f"run config {key}={raw!r} is not JSON ({getattr(e, 'msg', 'nested too deep')}); "
                             f"give an object, e.g. {key}='{{\"rounds\": 5}}'") from None
    if not isinstance(val, dict):
        raise RunConfigError(f"run config {key}={raw!r} must be a JSON object, e.g. {key}='{{\"rounds\": 5}}'")
    return val


def job_from_run_config(rc) -> dict:
    """The ServerApp's run config (``flwr run --run-config``, defaults in the app's ``pyproject.toml``) as a job,
    its types and ranges checked: ``problem`` (a registered name), ``method``, ``clients`` (a whole number
    ≥ 1), ``seed`` (≥ 0), ``problem-options`` and ``method-options`` (JSON objects as strings), ``out`` (result
    path, ``""``: none), ``timeout`` (seconds a node may take for one answer), ``connect-timeout`` (seconds to
    wait for the nodes at the start), ``message-ttl`` (seconds each request message and its reply live at the
    SuperLink, Flower's message TTL; ``0``, the default: twice ``timeout``, the longest one exchange waits, which
    includes asking a restarted node again; otherwise at least ``timeout``), ``dead-after`` (seconds a client
    may answer nothing, over exchanges and gn's retries, before the run stops naming it; default
    :data:`~fedsciml.engines.flower.transport.DEAD_AFTER_S` = 600), ``jobs`` (a JSON file listing several jobs, each a dict with these keys in
    snake case, run one after the other; ``""``: this one job).  :func:`check_job` checks the job as a whole."""
    unknown = sorted(set(rc) - set(RUN_CONFIG_KEYS))
    if unknown:
        raise RunConfigError(f"unknown run-config key(s) {unknown}; allowed: {', '.join(RUN_CONFIG_KEYS)}")
    for k in ("problem", "clients"):
        if k not in rc:
            raise RunConfigError(f"run config needs {k!r} (e.g. --run-config \"problem='bratu' clients=2\")")
    clients = rc["clients"]
    if isinstance(clients, (int, float)) and not isinstance(clients, bool) and clients < 1:
        raise RunConfigError(f"run config clients must be ≥ 1, got {clients}")
    return {"kind": "solve", "problem": _text(rc["problem"], "problem"),
            "method": _text(rc.get("method", FEDERATED_METHOD), "method"),
            "clients": _whole(clients, "clients", 1, MAX_CLIENTS),
            "seed": _whole(rc.get("seed", 0), "seed", 0, 2**63 - 1),
            "problem_options": _json_object(rc, "problem-options"), "options": _json_object(rc, "method-options"),
            "out": _text(rc.get("out", "") or "", "out"), "timeout": _seconds(rc.get("timeout", 300.0), "timeout"),
            "connect_timeout": _seconds(rc.get("connect-timeout", 300.0), "connect-timeout"),
            "message_ttl": _message_ttl(rc.get("message-ttl", 0.0), rc.get("timeout", 300.0)),
            "dead_after": _seconds(rc.get("dead-after", DEAD_AFTER_S), "dead-after"),
            "jobs": _text(rc.get("jobs", "") or "", "jobs")}


def read_jobs(path: str) -> list:
    """The jobs of a ``jobs`` file: a regular file of at most :data:`MAX_JOBS_BYTES` (no FIFO, no device),
    a JSON list of at most :data:`MAX_JOBS` objects."""
    from fedsciml.runtime.modelio import ModelFileError, read_json_bounded

    try:
        jobs = read_json_bounded(path, "jobs file", MAX_JOBS_BYTES, infinity=True)
    except ModelFileError as e:
        raise RunConfigError(f"run config jobs: {e}") from None
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, dict) for j in jobs):
        raise RunConfigError(f"run config jobs={path!r}: the file must hold a JSON list of job objects")
    if len(jobs) > MAX_JOBS:
        raise RunConfigError(f"run config jobs={path!r} holds {len(jobs)} jobs; at most {MAX_JOBS}")
    return jobs


def check_job(job: dict, where: str = "run config") -> dict:
    """Refuse a job that cannot run, before the run: a ``solve`` job's problem is built from its options (a
    registered name, options in range) and its method's configuration made; ``clients``, ``seed``, the timeouts
    and ``out`` checked (``out`` writable, before the result exists).  Returns the job."""
    from fedsciml.problems import get_problem
    from fedsciml.runtime.driver import METHODS, get_method
    from fedsciml.runtime.results import check_output_file

    kind = job.get("kind", "solve")
    if kind not in ("solve", "images"):
        raise RunConfigError(f"{where}: job kind {kind!r}; allowed: solve, images")
    _whole(job.get("clients"), f"{where} clients", 1, MAX_CLIENTS)
    for k in ("timeout", "connect_timeout", "dead_after"):
        if k in job and not (k == "dead_after" and job[k] is None):
            _seconds(job[k], f"{where} {k}")
    if job.get("message_ttl") is not None:
        ttl = _seconds(job["message_ttl"], f"{where} message_ttl")
        if ttl < float(job.get("timeout", 300.0)):
            raise RunConfigError(f"{where} message_ttl={ttl:g} is shorter than timeout={job.get('timeout', 300.0)!r}; "
                                 f"give message_ttl ≥ timeout (or none: twice timeout)")
    out = job.get("out") or ""
    if not isinstance(out, str):
        raise RunConfigError(f"{where} out={out!r} must be a path")
    if out:
        try:
            check_output_file(out, f"{where} out")
        except ValueError as e:
            raise RunConfigError(str(e)) from None
    if kind == "images":
        if not isinstance(job.get("setting"), dict):
            raise RunConfigError(f"{where}: an images job needs a 'setting' object")
        return job
    _whole(job.get("seed", 0), f"{where} seed", 0, 2**63 - 1)
    for k in ("problem_options", "options"):
        if not isinstance(job.get(k, {}), dict):
            raise RunConfigError(f"{where} {k} must be an object, got {job.get(k)!r}")
    name = _text(job.get("problem"), f"{where} problem")
    method = _text(job.get("method", FEDERATED_METHOD), f"{where} method")
    try:
        problem = get_problem(name, **job.get("problem_options", {}))
        kind = getattr(problem, "kind", None)
        on_flower = flower_methods(kind)
        if method not in on_flower:
            spec = METHODS.get(method)
            if spec is not None and not spec.federated:
                why = f"method {method!r} pools the clients' data on one machine; it does not run on Flower"
            elif spec is not None:
                why = f"method {method!r} does not apply to problem {name!r}"
            else:
                import difflib

                close = difflib.get_close_matches(method, on_flower, 1, 0.6)
                why = f"unknown method {method!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            raise RunConfigError(f"{where}: {why}; methods that run on Flower for {name!r}: {', '.join(on_flower)}")
        opts = {k: v for k, v in job.get("options", {}).items() if k != "transport"}
        get_method(method, kind).make_config(opts, kind)
        problem.check_clients(int(job["clients"]))
    except RunConfigError:
        raise
    except (ValueError, TypeError) as e:
        raise RunConfigError(f"{where}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    return job


def flower_methods(kind: str | None) -> list[str]:
    """The registered methods that run over Flower on a problem of ``kind``: the federated ones (``centralized``
    pools the data on one machine and has no transport)."""
    from fedsciml.runtime.driver import METHODS, available_methods

    return [m for m in available_methods(kind) if METHODS[m].federated]


def jobs_of(rc) -> list:
    """Every job of a run config (its ``jobs`` file's, or the run config's own), each checked
    (:func:`check_job`) — all before the first one runs."""
    job = job_from_run_config(rc)
    jobs = read_jobs(job["jobs"]) if job["jobs"] else [job]
    for i, j in enumerate(jobs):
        check_job(j, f"run config jobs={job['jobs']!r} job {i}" if job["jobs"] else "run config")
    return jobs


def count_mismatch(clients: int, supernodes: int) -> str:
    """The one line for a run whose client count and SuperNode count differ."""
    return (f"the run has clients={clients} but the federation has {supernodes} SuperNode(s), one per client: "
            f"give --federation-config \"num-supernodes={clients}\" (or --run-config \"clients={supernodes}\"; "
            f"on a deployment, start {clients} SuperNodes with num-partitions={clients})")


