"""A real Flower deployment on one machine: a SuperLink and K fedsciml nodes on 127.0.0.1, as separate processes.

:class:`LocalDeployment` (a context manager) starts

* ``flower-superlink --insecure --disable-runtime-dependency-installation``
  on a free 127.0.0.1 port (Fleet, Control and Runtime APIs share it in
  Flower 1.41);
* K sites, each ``python -m fedsciml.engines.flower.node`` (a SuperNode with a warm
  ClientApp, :mod:`fedsciml.engines.flower.node`) with ``--node-config
  "partition-id=k num-partitions=K"`` (plus ``data=PATH`` for a table), its
  own runtime API on another free 127.0.0.1 port;

and :meth:`LocalDeployment.run` submits fedsciml's ServerApp with ``flwr run``
(a private ``FLWR_HOME`` whose only SuperLink connection is this one), waits
for it, and reads the Result the ServerApp wrote.  Every process it started
(and their children: the SuperLink's ServerApp process) runs in its own
process group and is stopped on exit, also after an error.  Telemetry and
update checks are off in every process; nothing listens beyond 127.0.0.1.

    python scripts/tools/flower_deploy.py bratu --clients 2 --method gn --rounds 2
"""
from __future__ import annotations

import logging

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fedsciml.engines.flower  # noqa: F401

REPO_ROOT = str(Path(__file__).resolve().parents[2])
HOST = "127.0.0.1"

APP_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedsciml-app"
version = "1.0.0"
description = "fedsciml methods on Flower: the ServerApp drives fedsciml's round loop, the ClientApp answers its queries"
license = "MIT"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "fedsciml"

[tool.flwr.app.components]
serverapp = "fedsciml.engines.flower.apps:server_app"
clientapp = "fedsciml.engines.flower.apps:client_app"

[tool.flwr.app.config]
problem = "bratu"
method = "gn"
clients = 2
seed = 0
problem-options = "{}"
method-options = "{}"
out = ""
timeout = 300.0
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout_s: float, proc=None, what="process"):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening on {HOST}:{port}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"{what} did not listen on {HOST}:{port} within {timeout_s:.0f} s")


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a TOML basic string


class LocalDeployment:
    """A SuperLink and ``clients`` fedsciml nodes on 127.0.0.1 (see the module docstring).

    ``node_configs``: extra node config per site (e.g. ``[{"data": "site0.csv"}, …]``);
    ``threads``: torch threads of each node and of the ServerApp (1 keeps K sites
    from oversubscribing a small machine, and makes runs comparable bit for bit
    with an in-process run at one thread).
    """

    def __init__(self, clients: int, workdir: str | None = None, *, node_configs=None, threads: int = 1,
                 poll_s: float = 0.01, log=None, trace: bool = False):
        if int(clients) < 1:
            raise ValueError(f"clients must be ≥ 1, got {clients}")
        self.clients = int(clients)
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="fedsciml-flower-")
            workdir = self._tmp.name
        self.dir = Path(workdir)
        self.node_configs = list(node_configs or [{} for _ in range(self.clients)])
        if len(self.node_configs) != self.clients:
            raise ValueError(f"node_configs has {len(self.node_configs)} entries for {self.clients} clients")
        self.threads = int(threads)
        self.poll_s = float(poll_s)
        self.log = log or logging.getLogger(__name__).info
        self.trace = trace
        self.procs: dict = {}
        self.superlink_port = None
        self.node_ports: list = []
        self.bin = str(Path(sys.executable).parent)

    # --- processes ------------------------------------------------------------------------
    def env(self) -> dict:
        env = dict(os.environ)
        env.update(FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1", RAY_USAGE_STATS_ENABLED="0",
                   FLWR_HOME=str(self.dir / "flwr-home"), FEDSCIML_THREADS=str(self.threads),
                   OMP_NUM_THREADS=str(self.threads), FLWR_SUPEREXEC_TASK_POLL_INTERVAL="0.05",
                   PATH=self.bin + os.pathsep + env.get("PATH", ""),
                   PYTHONPATH=os.pathsep.join([REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                             if p]))
        if self.trace:
            env["FEDSCIML_NODE_TRACE"] = "1"
        return env

    def _start(self, name: str, argv: list):
        log = open(self.dir / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                            cwd=str(self.dir), start_new_session=True)
        log.close()
        return self.procs[name]

    def start_node(self, k: int):
        cfg = {"partition-id": k, "num-partitions": self.clients, **self.node_configs[k]}
        node_config = " ".join(f"{key}={_toml_value(v)}" for key, v in cfg.items())
        return self._start(f"node{k}", [sys.executable, "-m", "fedsciml.engines.flower.node", "--insecure",
                                        "--superlink", f"{HOST}:{self.superlink_port}", "--node-config", node_config,
                                        "--host", HOST, "--port", str(self.node_ports[k]), "--poll", str(self.poll_s),
                                        "--threads", str(self.threads)])

    def start(self):
        (self.dir / "flwr-home").mkdir(parents=True, exist_ok=True)
        (self.dir / "app").mkdir(exist_ok=True)
        (self.dir / "app" / "pyproject.toml").write_text(APP_PYPROJECT)
        (self.dir / "app" / "README.md").write_text("fedsciml's Flower app (generated by fedsciml.engines.flower.deploy)\n")
        self.superlink_port = free_port()
        self.node_ports = [free_port() for _ in range(self.clients)]
        (self.dir / "flwr-home" / "config.toml").write_text(
            f'[superlink]\ndefault = "fedsciml"\n\n[superlink.fedsciml]\naddress = "{HOST}:{self.superlink_port}"\n'
            f"insecure = true\n")
        sl = self._start("superlink", [os.path.join(self.bin, "flower-superlink"), "--insecure",
                                       "--disable-runtime-dependency-installation", "--host", HOST,
                                       "--port", str(self.superlink_port)])
        _wait_port(self.superlink_port, 120, sl, "flower-superlink")
        for k in range(self.clients):
            self.start_node(k)
        for k in range(self.clients):
            _wait_port(self.node_ports[k], 120, self.procs[f"node{k}"], f"node {k}")
        self.log(f"SuperLink on {HOST}:{self.superlink_port}, {self.clients} node(s) on {self.node_ports}")
        return self

    def kill(self, name: str, sig=signal.SIGKILL):
        """Stop one process this deployment started (and its children), e.g. ``kill("node1")``."""
        p = self.procs.get(name)
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, sig)  # its own process group (start_new_session)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # e.g. a SuperNode retrying a SuperLink that is gone
            pass
        try:  # whatever is left of the group (children such as the SuperLink's ServerApp process)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)

    def stop(self):
        for name in sorted(self.procs, key=lambda n: n == "superlink"):  # nodes first, the SuperLink last
            self.kill(name, signal.SIGTERM)
        self.procs.clear()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    # --- runs ----------------------------------------------------------------------------
    def submit(self, problem: str, method: str = "gn", *, seed: int = 0, problem_options: dict | None = None,
               timeout_s: float = 300.0, name: str = "run", **method_options):
        """Start ``flwr run`` for one fedsciml job (returns the Popen and the result path; see :meth:`run`)."""
        out = self.dir / f"{name}.json"
        for f in (out, Path(str(out) + ".theta.pt")):
            f.unlink(missing_ok=True)
        cfg = {"problem": problem, "method": method, "clients": self.clients, "seed": int(seed),
               "problem-options": json.dumps(problem_options or {}), "method-options": json.dumps(method_options),
               "out": str(out), "timeout": float(timeout_s)}
        rc = self.dir / f"{name}.toml"
        rc.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in cfg.items()))
        proc = self._start(f"flwr-run-{name}", [os.path.join(self.bin, "flwr"), "run", str(self.dir / "app"),
                                                "fedsciml", "--run-config", str(rc), "--stream"])
        return proc, out

    def wait(self, proc, out: Path, timeout_s: float = 600.0):
        """Wait for a submitted run; returns ``(Result, θ)``."""
        import torch

        from fedsciml.runtime.results import Result

        end = time.monotonic() + timeout_s
        theta_path = Path(str(out) + ".theta.pt")
        while time.monotonic() < end:
            if theta_path.exists():
                break
            if proc.poll() is not None and not theta_path.exists():
                time.sleep(0.5)
                if theta_path.exists():
                    break
                tail = (self.dir / [n for n, p in self.procs.items() if p is proc][0]).with_suffix(".log")
                raise RuntimeError(f"the Flower run ended without a result (status {proc.returncode}); "
                                   f"see {tail}:\n" + _tail(tail))
            time.sleep(0.1)
        else:
            raise TimeoutError(f"the Flower run gave no result within {timeout_s:.0f} s")
        time.sleep(0.2)  # the JSON is written before θ
        theta = torch.load(theta_path, weights_only=True)["theta"]
        return Result.from_json(str(out)), theta

    def run(self, problem: str, method: str = "gn", *, timeout_s: float = 300.0, wait_s: float = 600.0, **kw):
        """Run one fedsciml job on this deployment; returns ``(Result, θ)``."""
        proc, out = self.submit(problem, method, timeout_s=timeout_s, **kw)
        return self.wait(proc, out, wait_s)


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""
