"""Flower's own processes on 127.0.0.1: a SuperLink (simulation or deployment) and K stock SuperNodes.

Only Flower's command-line programs with their documented options are used:

* :class:`LocalSuperLink` starts ``flower-superlink --insecure
  --disable-runtime-dependency-installation --host 127.0.0.1 --port P``
  (``--simulation`` for Flower's simulation runtime: the SuperLink runs the
  ServerApp and K virtual SuperNodes in a ``flwr-simulation`` process) with a
  private ``FLWR_HOME`` whose ``config.toml`` has one SuperLink connection,
  ``fedsciml``, to it; :meth:`LocalSuperLink.submit` runs ``flwr run
  <fedsciml's app> fedsciml --run-config … --stream`` (the app:
  :data:`APP_DIR`, the ``pyproject.toml`` with fedsciml's ServerApp and
  ClientApp), and :meth:`LocalSuperLink.wait` reads the Result the ServerApp
  wrote (:func:`fedsciml.engines.flower.resultio.write_result`), or fails with the
  run's log after a bounded time;
* :class:`LocalDeployment` adds K stock ``flower-supernode --insecure
  --superlink 127.0.0.1:P --node-config "partition-id=k num-partitions=K"``
  (plus ``data=PATH`` for a site table), each with its own runtime API on a
  free 127.0.0.1 port and Flower's default ``--isolation subprocess``: the
  SuperNode runs each message's ClientApp in a fresh ``flwr-clientapp``
  process (what that costs: ``docs/flower.md`` and ``docs/flower-upstream.md``).

Every process started here runs in its own process group and is stopped on
exit, also after an error (and, as a last resort, when the interpreter exits); telemetry and update checks are off in each;
nothing listens beyond 127.0.0.1; runtime dependency installation is off (and
the app declares no dependencies).

    python -m fedsciml flower deploy bratu --clients 2 --method gn --rounds 2
"""
from __future__ import annotations

import atexit
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import fedsciml.engines.flower  # noqa: F401

REPO_ROOT = str(Path(__file__).resolve().parents[3])  # the directory that holds the fedsciml package
from fedsciml.engines.flower.jobs import APP_DIR  # noqa: E402,F401  (fedsciml's Flower App: pyproject.toml)
from fedsciml.runtime.registry import FEDERATED_METHOD  # noqa: E402
HOST = "127.0.0.1"


_LIVE: "weakref.WeakSet[LocalSuperLink]" = weakref.WeakSet()  # objects with processes that may still run


@atexit.register
def _stop_all():
    """At interpreter exit, stop every process an object here started and nobody stopped (a test or a script
    that failed before its ``with`` block could end): no SuperLink, SuperNode or ClientApp outlives us."""
    for link in list(_LIVE):
        link.stop()


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that started it ends


def die_with_parent(parent: int):
    """A ``preexec_fn`` for a child that must not outlive this process (Linux; elsewhere ``None``): the child asks
    the kernel for SIGTERM when its parent dies, and exits at once if the parent is already gone.  The atexit
    stop (:func:`_stop_all`) cannot run when this process is killed with SIGKILL (a timeout's kill, the OOM
    killer); without this a SuperLink and its SuperNodes ran on, orphaned, for as long as the machine did.
    Decision: SIGTERM, not SIGKILL, so that a SuperLink or SuperNode stops its own children (SuperExec,
    ClientApps) as it does on a stop.  prctl's signal is tied to the *thread* that started the child, so every
    process here is started from the thread that holds the :class:`LocalSuperLink` for its life (the main
    thread in fedsciml's commands)."""
    if not sys.platform.startswith("linux"):
        return None
    try:  # resolved here, in the parent, so that a libc without prctl is said once, not hidden in the child
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError) as e:
        logging.getLogger(__name__).warning("no prctl in this libc (%s): a Flower process this run starts may "
                                            "outlive it if it is killed with SIGKILL", e)
        return None

    def preexec():
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)
    return preexec


def descendants(pid: int) -> list:
    """Every live descendant of ``pid`` (children, their children, …), from ``/proc`` (``[]`` where there is
    none)."""
    children: dict = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for d in entries:
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, stack = [], [int(pid)]
    while stack:
        for c in children.get(stack.pop(), []):
            out.append(c)
            stack.append(c)
    return out


def _pgid(pid: int):
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class PortTaken(RuntimeError):
    """Another process (not the one just started) listens on the port this object chose."""


def _listening_inodes(port: int) -> set | None:
    """The socket inodes listening on TCP ``port`` (IPv4 and IPv6), from ``/proc/net/tcp*``; ``None`` where the
    kernel does not tell (no ``/proc``)."""
    found, readable = set(), False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(cols[9])
    return found if readable else None


def _owns_socket(pids, inodes: set) -> bool:
    """Whether one of ``pids`` holds one of the socket ``inodes`` open."""
    want = {f"socket:[{i}]" for i in inodes}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in want:
                    return True
            except OSError:
                continue
    return False


def _wait_port(port: int, timeout_s: float, proc=None, what="process"):
    """Wait until ``proc`` (or one of its descendants) listens on ``HOST:port``.  A listener there that is not
    ``proc``'s — another run took the port between :func:`free_port`'s probe and this start — raises
    :class:`PortTaken` (the caller starts again on a new port): connecting to any listener sent one run's job
    to another run's SuperLink.  Where ``/proc`` cannot tell who listens, a listener is accepted."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening on {HOST}:{port}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                pass
        except OSError:
            time.sleep(0.1)
            continue
        inodes = _listening_inodes(port)
        if proc is None or inodes is None or _owns_socket([proc.pid, *descendants(proc.pid)], inodes):
            return
        if inodes:  # someone else's listener (not one closing between the connect and the look-up)
            raise PortTaken(f"{HOST}:{port} is served by another process, not by {what} (pid {proc.pid})")
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not listen on {HOST}:{port} within {timeout_s:.0f} s")


#: starts of a process whose port another process took before it could bind it
PORT_TRIES = 5


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a JSON string is a TOML basic string


class LocalSuperLink:
    """A ``flower-superlink`` on 127.0.0.1 and a private ``FLWR_HOME`` to submit fedsciml runs to it (see the
    module docstring).  ``simulation``: Flower's simulation runtime (virtual SuperNodes, Ray) instead of a
    deployment's Fleet of real SuperNodes.  ``threads``: torch threads of the ServerApp (and, through each
    request's job, of every ClientApp)."""

    def __init__(self, workdir: str | None = None, *, simulation: bool = False, threads: int = 1, log=None,
                 start_timeout_s: float = 120.0):
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="fedsciml-flower-")
            workdir = self._tmp.name
        self.dir = Path(workdir)
        self.simulation = bool(simulation)
        self.threads = int(threads)
        self.log = log or logging.getLogger(__name__).info
        self.start_timeout_s = float(start_timeout_s)
        self.procs: dict = {}
        self.extra_env: dict = {}  # more environment for every process (e.g. FEDSCIML_NODE_DATA_DIRS)
        self.superlink_port = None
        self.bin = str(Path(sys.executable).parent)

    # --- processes ------------------------------------------------------------------------
    def env(self) -> dict:
        env = dict(os.environ)
        env.update(FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1", RAY_USAGE_STATS_ENABLED="0",
                   RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_DISABLE_DOCKER_CPU_WARNING="1",
                   FLWR_HOME=str(self.dir / "flwr-home"), FEDSCIML_THREADS=str(self.threads),
                   OMP_NUM_THREADS=str(self.threads), PATH=self.bin + os.pathsep + env.get("PATH", ""),
                   PYTHONPATH=os.pathsep.join([REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                             if p]))
        # OpenMP threads that wait for work sleep instead of spinning (unless the caller chose): Flower's
        # processes share the cores — the ServerApp, two or more Ray workers with `threads` torch threads each —
        # and a spinning thread burns the core another needs.  Bratu's fipa, 10 rounds, 2 threads, two such
        # processes side by side on 2 loaded cores: 41 CPU-s each spinning, 4.1 passive; the same bits
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        env.update(self.extra_env)
        return env

    def _start(self, name: str, argv: list):
        log = open(self.dir / f"{name}.log", "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                            cwd=str(self.dir), start_new_session=True,
                                            preexec_fn=die_with_parent(os.getpid()))
        log.close()
        _LIVE.add(self)
        return self.procs[name]

    def start_superlink(self):
        """``flower-superlink`` on a free port; started again on another port (at most :data:`PORT_TRIES` times)
        when another process took the probed port first (:class:`PortTaken`)."""
        for attempt in range(PORT_TRIES):
            try:
                return self._start_superlink_once()
            except PortTaken as e:
                self.kill("superlink")
                self.procs.pop("superlink", None)
                if attempt == PORT_TRIES - 1:
                    raise RuntimeError(f"flower-superlink: {e} (after {PORT_TRIES} ports)") from None
                self.log(f"{e}; starting flower-superlink on another port")

    def _start_superlink_once(self):
        (self.dir / "flwr-home").mkdir(parents=True, exist_ok=True)
        self.superlink_port = free_port()
        (self.dir / "flwr-home" / "config.toml").write_text(
            f'[superlink]\ndefault = "fedsciml"\n\n[superlink.fedsciml]\naddress = "{HOST}:{self.superlink_port}"\n'
            f"insecure = true\n")
        argv = [os.path.join(self.bin, "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                "--host", HOST, "--port", str(self.superlink_port)]
        if self.simulation:
            argv.append("--simulation")
        sl = self._start("superlink", argv)
        _wait_port(self.superlink_port, self.start_timeout_s, sl, "flower-superlink")

    def start(self):
        self.start_superlink()
        self.log(f"SuperLink{' (simulation)' if self.simulation else ''} on {HOST}:{self.superlink_port}")
        return self

    def kill(self, name: str, sig=signal.SIGKILL):
        """Stop one process this object started and everything it started, e.g. ``kill("node1")``.

        Its process group (its own session), and the group of every descendant: Flower starts some of its
        helpers in sessions of their own (the SuperLink's ``flower-superexec`` and the ``flwr-serverapp`` it
        launches), which a signal to the group alone would leave running."""
        p = self.procs.get(name)
        if p is None:
            return
        tree = descendants(p.pid) if p.poll() is None else []
        groups = ({p.pid} | {g for g in map(_pgid, tree) if g is not None}) - {os.getpgrp()}
        for g in groups:
            try:
                os.killpg(g, sig)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # e.g. a SuperNode retrying a SuperLink that is gone
            pass
        for g in groups:  # whatever is left (children: a SuperNode's flower-superexec and flwr-clientapp)
            try:
                os.killpg(g, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        p.wait(timeout=10)

    def stop(self):
        for name in sorted(self.procs, key=lambda n: n == "superlink"):  # the SuperLink last
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
    def submit_config(self, run_config: dict, name: str = "run", federation_config: dict | None = None,
                      app: str = APP_DIR):
        """``flwr run <app> fedsciml --run-config <file> [--federation-config …] --stream`` in the background
        (``app``: fedsciml's, :data:`APP_DIR`, unless told); returns its Popen (its output goes to
        ``flwr-run-<name>.log`` in this object's directory)."""
        rc = self.dir / f"{name}.toml"
        rc.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in run_config.items()))
        argv = [os.path.join(self.bin, "flwr"), "run", str(app), "fedsciml", "--run-config", str(rc), "--stream"]
        if federation_config:
            argv += ["--federation-config", " ".join(f"{k}={_toml_value(v)}" for k, v in federation_config.items())]
        return self._start(f"flwr-run-{name}", argv)

    def submit(self, problem: str, method: str = FEDERATED_METHOD, *, clients: int, seed: int = 0,
               problem_options: dict | None = None, timeout_s: float = 300.0, name: str = "run",
               federation_config: dict | None = None, app: str = APP_DIR, dead_after_s: float | None = None,
               **method_options):
        """Start one fedsciml job (returns the Popen and the run's result directory; see :meth:`wait`)."""
        out = self.dir / f"{name}-out"
        shutil.rmtree(out, ignore_errors=True)
        cfg = {"problem": problem, "method": method, "clients": int(clients), "seed": int(seed),
               "problem-options": json.dumps(problem_options or {}), "method-options": json.dumps(method_options),
               "out": str(out), "timeout": float(timeout_s), "connect-timeout": float(timeout_s)}
        if dead_after_s is not None:
            cfg["dead-after"] = float(dead_after_s)
        return self.submit_config(cfg, name, federation_config, app=app), out

    def wait_files(self, proc, outs, timeout_s: float = 600.0, echo=None):
        """Wait (at most ``timeout_s``) until a submitted run wrote every path in ``outs``.  A run that ends
        without them, or overruns, raises with the tail of its log (and is stopped).  ``echo``: called with
        each new line of the run's log (what ``flwr run --stream`` shows: the ServerApp's progress) as it
        comes."""
        outs = [Path(o) for o in outs]
        name = next(n for n, p in self.procs.items() if p is proc)
        end = time.monotonic() + timeout_s
        seen = 0

        def forward():
            nonlocal seen
            if echo is None:
                return
            try:
                with open(self.dir / f"{name}.log", "rb") as f:
                    f.seek(seen)
                    data = f.read()
            except OSError:
                return
            done = data.rfind(b"\n") + 1  # whole lines only
            seen += done
            for line in data[:done].decode(errors="replace").splitlines():
                echo(line)

        from fedsciml.engines.flower.resultio import read_failure, ready

        def failed():  # the ServerApp's own record (flwr run neither ends nor exits non-zero when it raises)
            for o in outs:
                reason = read_failure(str(o))
                if reason is not None:
                    forward()
                    self.kill(name)
                    raise ServerAppFailed(reason)

        while not all(ready(str(o)) for o in outs):
            forward()
            failed()
            if proc.poll() is not None:
                time.sleep(0.2)
                if all(ready(str(o)) for o in outs):
                    break
                raise RuntimeError(f"the Flower run ended without its result (flwr run status {proc.returncode}); "
                                   f"its log:\n" + self.tail(name))
            if time.monotonic() > end:
                self.kill(name)
                raise TimeoutError(f"the Flower run gave no result within {timeout_s:.0f} s; its log:\n"
                                   + self.tail(name))
            time.sleep(0.05)
        forward()
        failed()  # a job stopped after some rounds: its result is there, and its failure record says why

    def wait(self, proc, outs, timeout_s: float = 600.0) -> list:
        """:meth:`wait_files`, then the Results (with θ) the ServerApp wrote there."""
        from fedsciml.engines.flower.resultio import read_result

        outs = [outs] if isinstance(outs, (str, Path)) else list(outs)
        self.wait_files(proc, outs, timeout_s)
        return [read_result(str(o)) for o in outs]

    def tail(self, name: str, n: int = 40) -> str:
        out = _tail(self.dir / f"{name}.log", n)
        if name != "superlink":
            out += "\n--- superlink.log ---\n" + _tail(self.dir / "superlink.log", n)
        return out


class ServerAppFailed(RuntimeError):
    """A submitted run's ServerApp failed; the message is the one-line reason it recorded in the job's ``out``."""


class LocalDeployment(LocalSuperLink):
    """A SuperLink and ``clients`` stock ``flower-supernode`` s on 127.0.0.1 (see the module docstring).

    ``node_configs``: extra node config per site (e.g. ``[{"data": "site0.csv"}, …]``);
    ``threads``: torch threads of the ServerApp and each ClientApp (1 keeps K sites
    from oversubscribing a small machine, and makes runs comparable bit for bit
    with an in-process run at one thread); ``node_args``: more of ``flower-supernode``'s documented
    options for every node (e.g. ``["--isolation", "process"]``, to measure).
    """

    def __init__(self, clients: int, workdir: str | None = None, *, node_configs=None, threads: int = 1,
                 log=None, start_timeout_s: float = 120.0, node_args: list | None = None):
        if int(clients) < 1:
            raise ValueError(f"clients must be ≥ 1, got {clients}")
        super().__init__(workdir, simulation=False, threads=threads, log=log, start_timeout_s=start_timeout_s)
        self.clients = int(clients)
        self.node_configs = list(node_configs or [{} for _ in range(self.clients)])
        if len(self.node_configs) != self.clients:
            raise ValueError(f"node_configs has {len(self.node_configs)} entries for {self.clients} clients")
        self.node_ports: list = []
        self.node_args = [str(a) for a in (node_args or [])]  # more documented options, e.g. ["--isolation", "process"]

    def start_node(self, k: int):
        """Start site ``k``: a stock ``flower-supernode`` (again, after :meth:`kill`: a new Flower node id)."""
        cfg = {"partition-id": k, "num-partitions": self.clients, **self.node_configs[k]}
        node_config = " ".join(f"{key}={_toml_value(v)}" for key, v in cfg.items())
        for attempt in range(PORT_TRIES):  # its runtime API's port taken meanwhile by another process: a new one
            proc = self._start(f"node{k}", [os.path.join(self.bin, "flower-supernode"), "--insecure",
                                            "--superlink", f"{HOST}:{self.superlink_port}", "--node-config",
                                            node_config, "--host", HOST, "--port", str(self.node_ports[k]),
                                            *self.node_args])
            try:
                _wait_port(self.node_ports[k], self.start_timeout_s, proc, f"flower-supernode {k}")
                return proc
            except PortTaken as e:
                self.kill(f"node{k}")
                if attempt == PORT_TRIES - 1:
                    raise RuntimeError(f"flower-supernode {k}: {e} (after {PORT_TRIES} ports)") from None
                self.node_ports[k] = free_port()
        raise AssertionError("unreachable")

    def start(self):
        self.start_superlink()
        self.node_ports = [free_port() for _ in range(self.clients)]
        for k in range(self.clients):
            self.start_node(k)
        self.log(f"SuperLink on {HOST}:{self.superlink_port}, {self.clients} SuperNode(s), runtime APIs on "
                 f"{self.node_ports}")
        return self

    def submit(self, problem: str, method: str = FEDERATED_METHOD, **kw):
        return super().submit(problem, method, clients=self.clients, **kw)

    def run(self, problem: str, method: str = FEDERATED_METHOD, *, timeout_s: float = 300.0, wait_s: float = 600.0, **kw):
        """Run one fedsciml job on this deployment; returns ``(Result, θ)``."""
        proc, out = self.submit(problem, method, timeout_s=timeout_s, **kw)
        res = self.wait(proc, out, wait_s)[0]
        return res, res.theta


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""
