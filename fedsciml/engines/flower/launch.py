"""``python -m fedsciml flower run APP [SUPERLINK] …``: a Flower run that exits non-zero, with the reason, when it fails.

``flwr run APP SUPERLINK --stream`` exits 0 whatever happens to the run it started (Flower 1.41): a ServerApp
that raises — a bad run config, a site that refuses, a lost result — ends the run with the status
``finished:failed``, which ``flwr run`` does not look at.  The status is public: ``flwr ls SUPERLINK --run-id N
--format json`` reports it (``"status": "finished:failed"``) and the exception's message (``"status-details":
"Simulation failed with exception: …"`` or ``"ServerApp failed with exception: …"``).  :func:`flower_run` uses
Flower's CLI only, as a user would:

1. ``flwr run APP [SUPERLINK] --format json`` (the run configuration and federation overrides passed through),
   which starts the run and answers its id;
2. with ``stream``, ``flwr log RUN_ID [SUPERLINK] --stream`` — the log ``flwr run --stream`` shows — written to
   this process's standard output by ``flwr`` itself;
3. ``flwr ls [SUPERLINK] --run-id RUN_ID --format json`` until the status is ``finished:…``: ``finished:completed``
   returns the run's record; any other ending (``failed``, ``stopped``) raises :class:`FlowerRunFailed` with the
   run id, the status and Flower's one-line details.

The ``flwr`` executable beside this interpreter is used (the one of this installation), with the caller's
environment (``FLWR_HOME`` names the SuperLink connections).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Sequence

from fedsciml.engines.flower.simulation import EngineFailed

#: the status ``flwr ls`` reports for a run that ended without an error
COMPLETED = "finished:completed"


class FlowerRunFailed(EngineFailed):
    """The Flower run ended other than ``finished:completed``, or ``flwr`` could not start or report it."""


def flwr_executable() -> str:
    """``flwr`` beside this interpreter (this installation's), else the one on ``PATH``."""
    here = os.path.join(os.path.dirname(sys.executable), "flwr")
    return here if os.access(here, os.X_OK) else "flwr"


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def _json_of(what: str, proc: subprocess.CompletedProcess) -> dict:
    """The JSON object ``flwr … --format json`` printed (the last ``{``-line through the end), or one line why not."""
    out = proc.stdout or ""
    start = out.find("{")
    try:
        payload = json.loads(out[start:]) if start >= 0 else None
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise FlowerRunFailed(f"{what} exited {proc.returncode} without its JSON answer: "
                              f"{_one_line((proc.stderr or '') + out)}")
    if payload.get("success") is False:  # Flower's message may span lines (it starts with one): one line here
        why = " ".join(str(payload.get("error-message") or "").split()) or _one_line(proc.stderr or out)
        raise FlowerRunFailed(f"{what} failed: {why}")
    return payload


def _flwr(args: list, env, timeout_s: float | None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout_s)
    except FileNotFoundError:
        raise FlowerRunFailed(f"{args[0]!r} was not found: install Flower (pip install 'fedsciml[flower]')") from None
    except subprocess.TimeoutExpired:
        raise FlowerRunFailed(f"{' '.join(args[:3])} gave no answer in {timeout_s:g} s") from None


def run_status(run_id: str, superlink: str | None = None, *, env=None, flwr: str | None = None,
               timeout_s: float | None = 60.0) -> dict:
    """The run's record from ``flwr ls [SUPERLINK] --run-id RUN_ID --format json`` (``status``,
    ``status-details``, times, …)."""
    exe = flwr or flwr_executable()
    args = [exe, "ls", *([superlink] if superlink else []), "--run-id", str(run_id), "--format", "json"]
    payload = _json_of("flwr ls", _flwr(args, env, timeout_s))
    runs = payload.get("runs") or []
    if len(runs) != 1 or not isinstance(runs[0], dict) or "status" not in runs[0]:
        raise FlowerRunFailed(f"flwr ls reported {len(runs)} run(s) for run id {run_id}, not its status")
    return runs[0]


def check_config_value(flag: str, value: str) -> None:
    """One line for a ``flwr run`` config value that is not ``key=value`` pairs with a key and a value each:
    ``--federation-config num-supernodes=`` (no value) ran Flower's default job and exited 0.  (A config file
    path, ``*.toml`` with no ``=``, is passed as Flower takes it.)"""
    import shlex

    try:
        items = shlex.split(value)
    except ValueError as e:
        raise ValueError(f"{flag} {value!r}: {e}") from None
    if len(items) == 1 and "=" not in items[0] and items[0].endswith(".toml"):
        return
    if not items:
        raise ValueError(f"{flag} is empty; give key=value pairs (e.g. {flag} \"num-supernodes=4\")")
    for item in items:
        key, eq, val = item.partition("=")
        if not eq or not key.strip() or not val.strip():
            raise ValueError(f"{flag} {value!r}: {item!r} is not key=value with a key and a value")


def _config_value(values: Sequence[str], key: str, what: str):
    """``key``'s value in ``flwr run``'s ``--run-config`` / ``--federation-config`` strings, parsed as Flower parses
    them (``None`` where they do not set it)."""
    from flwr.common.config import parse_config_args

    try:
        return parse_config_args([str(v) for v in values]).get(key) if values else None
    except (ValueError, OSError) as e:
        raise FlowerRunFailed(f"{what} {list(values)!r} cannot be read: {e}") from None


def check_federation_size(app: str, run_config: Sequence[str] = (), federation_config: Sequence[str] = ()):
    """Before the run: refuse, in one line, a simulation federation whose ``num-supernodes`` (given in
    ``federation_config``) is not the run's ``clients`` (from ``run_config``, else the App's default in its
    ``pyproject.toml``).  fedsciml's ServerApp needs one SuperNode per client (partition ids 0 … K−1): with fewer it
    waits ``connect-timeout`` and fails behind Flower's traceback (70 s for ``clients=3`` on 2
    nodes); with more, the nodes' ``num-partitions`` is not the run's K.  Where ``num-supernodes`` is not given
    (a deployment's real SuperNodes), nothing is checked here: the ServerApp's connect timeout says which
    partitions no node serves."""
    nodes = _config_value(federation_config, "num-supernodes", "--federation-config")
    if nodes is None:
        return
    clients = _config_value(run_config, "clients", "--run-config")
    where = "--run-config"
    if clients is None:
        from flwr.common.config import get_project_config

        try:
            clients = get_project_config(app).get("tool", {}).get("flwr", {}).get("app", {}).get("config", {}) \
                .get("clients")
        except Exception:  # noqa: BLE001 - flwr's own one-line reasons (no pyproject.toml, bad TOML)
            clients = None
        where = f"the App's default ({app}/pyproject.toml)"
    if clients is None:
        return
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise FlowerRunFailed(f"--federation-config num-supernodes={nodes!r} must be a whole number ≥ 1")
    if nodes != clients:
        raise FlowerRunFailed(f"the run has clients={clients} ({where}) but the federation num-supernodes={nodes} "
                              f"(--federation-config): fedsciml needs one SuperNode per client; give "
                              f"--federation-config num-supernodes={clients} or --run-config clients={nodes}")


def flower_run(app: str, superlink: str | None = None, *, run_config: Sequence[str] = (),
               federation_config: Sequence[str] = (), federation: str | None = None, stream: bool = True,
               timeout_s: float | None = None, poll_s: float = 1.0, env=None, flwr: str | None = None) -> dict:
    """Start ``app`` on ``superlink`` (a connection of ``$FLWR_HOME/config.toml``; ``None``: its default), follow
    it to the end and return its ``flwr ls`` record, or raise :class:`FlowerRunFailed` (one line: the run id, the
    status and Flower's details).  ``run_config`` / ``federation_config``: ``flwr run``'s ``--run-config`` /
    ``--federation-config`` values, each passed as given.  ``stream``: ``flwr log --stream`` writes the run's log
    to this process's standard output meanwhile.  ``timeout_s``: stop waiting (the run goes on; ``flwr stop``
    ends it) after this many seconds; ``None``: no limit.  See the module docstring."""
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0 seconds (or None: no limit), got {timeout_s}")
    if not poll_s > 0:
        raise ValueError(f"poll_s must be > 0 seconds, got {poll_s}")
    for flag, values in (("--run-config", run_config), ("--federation-config", federation_config)):
        for value in values:
            check_config_value(flag, str(value))
    check_federation_size(app, run_config, federation_config)
    exe = flwr or flwr_executable()
    where = [superlink] if superlink else []
    args = [exe, "run", str(app), *where, "--format", "json"]
    for value in run_config:
        args += ["--run-config", str(value)]
    for value in federation_config:
        args += ["--federation-config", str(value)]
    if federation:
        args += ["--federation", federation]
    started = _json_of("flwr run", _flwr(args, env, 600.0))
    run_id = started.get("run-id")
    if not run_id:
        raise FlowerRunFailed(f"flwr run answered no run id: {json.dumps(started)[:200]}")
    end = None if timeout_s is None else time.monotonic() + float(timeout_s)
    if stream:  # returns when the run's log ends (the run finished), or at the time limit
        try:
            subprocess.run([exe, "log", str(run_id), *where, "--stream"], env=env,
                           timeout=None if end is None else max(1.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:  # the time limit: the loop below says the run is still going, and raises
            pass
    while True:
        record = run_status(run_id, superlink, env=env, flwr=exe)
        status = str(record["status"])
        if status.startswith("finished"):
            break
        if end is not None and time.monotonic() >= end:
            raise FlowerRunFailed(f"Flower run {run_id} is still {status} after {timeout_s:g} s (it goes on: "
                                  f"flwr stop {run_id} ends it)")
        time.sleep(poll_s)
    if status != COMPLETED:
        details = " ".join(str(record.get("status-details") or "no details").split())
        raise FlowerRunFailed(f"Flower run {run_id} ended {status}: {details}")
    return record
