"""A fedsciml site: one Flower SuperNode whose ClientApp stays warm (``python -m fedsciml.engines.flower.node``).

Flower 1.41's deployment runs every message in a fresh ``flwr-clientapp``
process (python, torch and the app are imported again, nothing a client
built survives), an idle SuperNode sleeps 3 s between pulls and waits for a
reply in 0.5 s steps: 10–15 s per exchange measured on this machine.  This
launcher runs, in one long-lived process:

* Flower's own SuperNode (``flower-supernode`` with ``--isolation process``:
  the SuperNode does not spawn ClientApp processes itself), its polling
  sleeps capped at ``--poll`` seconds;
* a warm task executor in a thread: it acquires each ClientApp task from the
  SuperNode's runtime API (what ``flower-superexec`` does), pulls the message
  and context, runs :data:`fedsciml.engines.flower.apps.client_app` *in this
  process* and pushes the reply (what ``flwr-clientapp`` does) — so the
  node's data, its objective and torch stay loaded between messages.

Every other flag goes to ``flower-supernode`` unchanged (``--superlink``,
``--insecure`` or ``--root-certificates``, ``--node-config``, ``--host``,
``--port``).  Runtime dependency installation stays off (the SuperNode's
default), and the ClientApp is fedsciml's installed one (the FAB is not
installed or imported).

    python -m fedsciml.engines.flower.node --insecure --superlink 127.0.0.1:9092 \\
        --node-config "partition-id=0 num-partitions=2" --host 127.0.0.1 --port 9094
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time

import fedsciml.engines.flower  # noqa: F401  (telemetry / update check off before flwr is imported)

DEFAULT_POLL_S = 0.01

log = logging.getLogger("fedsciml.engines.flower.node")  # not __name__: the node runs as __main__


def _run_task(address: str, token: str, insecure: bool, certificates: bytes | None):
    """One ClientApp task in this process (the body of Flower's ``run_clientapp``, without a new process)."""
    from flwr.app import Message
    from flwr.app.error import Error
    from flwr.common.constant import ErrorCode, SubStatus
    from flwr.supercore.interceptors import RuntimeTokenHttpInterceptor, RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supernode.runtime.run_clientapp import pull_task_input, push_message, push_task_output

    from fedsciml.engines.flower.apps import client_app

    client = RuntimeHttpClient.from_server_address(
        server_address=address, insecure=insecure, root_certificates=certificates,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
                      RuntimeTokenHttpInterceptor(token)],
        retry_invoker=make_simple_http_retry_invoker())
    context = reply = None
    status, details = SubStatus.FAILED, "ClientApp task failed"
    marks = [time.perf_counter()]
    try:
        message, context, _run, _fab = pull_task_input(client)
        marks.append(time.perf_counter())
        try:
            reply = client_app(message=message, context=context)
            marks.append(time.perf_counter())
            status, details = SubStatus.COMPLETED, ""
        except Exception as e:  # noqa: BLE001 - the server gets the reason as an error reply
            reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=f"{type(e).__name__}: {e}"),
                            reply_to=message)
            details = str(e)
        push_message(client, reply, context)
        marks.append(time.perf_counter())
    finally:
        push_task_output(client=client, context=context, sub_status=status, details=details)
        client.close()
        marks.append(time.perf_counter())
    return [b - a for a, b in zip(marks, marks[1:])]


def warm_executor(address: str, insecure: bool, certificates: bytes | None, poll_s: float, stop: threading.Event):
    """Acquire ClientApp tasks from the SuperNode at ``address`` and run each in this process."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest  # pylint: disable=E0611
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient

    client = None
    trace = bool(os.environ.get("FEDSCIML_NODE_TRACE"))
    while not stop.is_set():
        try:
            if client is None:
                client = RuntimeHttpClient.from_server_address(
                    server_address=address, insecure=insecure, root_certificates=certificates,
                    interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
                    retry_invoker=make_simple_http_retry_invoker())
            res = client.AcquireTask(AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP.value]))
            if res.HasField("task") and res.token:
                t0 = time.perf_counter()
                phases = _run_task(address, res.token, insecure, certificates)
                if trace:  # pull input, ClientApp, push reply, push task output
                    log.info("task %s: %.3f s (phases %s)", res.task.task_id, time.perf_counter() - t0,
                             " ".join(f"{x:.3f}" for x in phases))
                continue
        except Exception as e:  # noqa: BLE001 - the SuperNode may still be starting; keep serving
            log.warning("executor: %s: %s", type(e).__name__, e)
            client = None
            stop.wait(0.2)
        stop.wait(poll_s)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m fedsciml.engines.flower.node", add_help=False)
    ap.add_argument("--poll", type=float, default=DEFAULT_POLL_S)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=9094)
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--root-certificates", default=None)
    ap.add_argument("--isolation", default="process")
    ours, rest = ap.parse_known_args(argv)
    # a site process: its log (task timings, executor faults) goes to stderr, one '[logger] message' a line
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(message)s", stream=sys.stderr)
    if ours.isolation != "process":
        print("error: a fedsciml node runs its ClientApp itself (--isolation process)", file=sys.stderr)
        return 2
    if not ours.poll > 0:
        print(f"error: --poll must be > 0 seconds, got {ours.poll}", file=sys.stderr)
        return 2
    if ours.threads is not None:
        import torch

        torch.set_num_threads(ours.threads)
    from flwr.supernode.cli.flower_supernode import flower_supernode

    from fedsciml.engines.flower.latency import shorten_supernode_sleeps, shorten_waits

    shorten_supernode_sleeps(ours.poll)  # the SuperNode's fixed 3 s / 0.5 s sleeps become ≤ poll
    shorten_waits()  # object pulls: backoff from 5 ms instead of 1 s
    stop = threading.Event()
    th = threading.Thread(target=warm_executor, args=(f"{ours.host}:{ours.port}", True, None, ours.poll, stop),
                          daemon=True, name="fedsciml-warm-clientapp")
    # the SuperNode's own runtime API (ClientAppIo) is on loopback: the executor talks to it without TLS
    th.start()
    flags = ["--isolation", "process", "--host", ours.host, "--port", str(ours.port)]
    if ours.insecure:
        flags.append("--insecure")
    if ours.root_certificates:
        flags += ["--root-certificates", ours.root_certificates]
    sys.argv = ["flower-supernode", *flags, *rest]
    try:
        flower_supernode()
    finally:
        stop.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
