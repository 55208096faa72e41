"""``fs.solve(..., engine="flower")``: the same run through Flower's simulation runtime, started as Flower users do.

Flower 1.41's supported simulation entry is ``flwr run`` against a SuperLink
in simulation mode (``flwr.simulation.run_simulation`` is deprecated: its
warning says "use ``flwr run``").  So :func:`solve_many`

1. starts ``flower-superlink --simulation --insecure
   --disable-runtime-dependency-installation`` on a free 127.0.0.1 port with
   a private ``FLWR_HOME`` (:class:`~fedsciml.engines.flower.deploy.LocalSuperLink`);
2. writes the runs as a ``jobs`` file and submits fedsciml's Flower App
   (:data:`~fedsciml.engines.flower.deploy.APP_DIR`, the same app as ``flwr
   run <app> local-simulation``) with ``flwr run … --run-config
   "jobs='…'" --federation-config "num-supernodes=K …"``: one virtual
   SuperNode per client, as many CPUs per ClientApp as it runs torch
   threads, so Ray runs as many ClientApps at once as the cores hold
   (:func:`federation_config`);
3. the ServerApp (``fedsciml.engines.flower.apps:server_app``) runs the jobs
   one after the other in fedsciml's round loop over a
   :class:`~fedsciml.engines.flower.transport.FlowerTransport` and writes each
   Result (JSON and θ as safetensors); this process reads them back.

Each node builds its own client's data from the problem's name, options and
seed (so the problem must be a registered one: ``fs.get_problem(name, …)``)
and keeps it for the rest of the simulation (a Ray actor is a long-lived
process: :func:`fedsciml.engines.flower.apps._client`'s cache).  Ray starts
once per ``flwr run``, hence :func:`solve_many` for several solves.

What is bitwise: a run on Flower evaluates each client on its own (one node,
one client), so it equals the in-process run whose clients are evaluated one
by one — ``LocalTransport(vectorize=False)`` (``batched=False`` for ``gn``)
— with the same torch thread count (the ServerApp gets this process's
through ``FEDSCIML_THREADS`` and sends it with every request).
"""
from __future__ import annotations

import json
import logging
import os

import fedsciml.engines.flower  # noqa: F401  (hygiene environment before flwr/ray import)
from fedsciml.engines.flower import require_flower
from fedsciml.runtime.loop import RoundFailed


class EngineFailed(RoundFailed):
    """Flower's simulation runtime failed to start, crashed, or the ServerApp stopped with an error (the run
    ended without its result, or overran its time); a :class:`RoundFailed` (the CLI: one line, exit 1)."""


def federation_config(clients: int, threads: int = 1) -> dict:
    """Flower's simulation settings for ``clients`` clients whose ClientApps run ``threads`` torch threads: one
    virtual SuperNode each; Ray with one CPU per core and client, at most; ``threads`` CPUs per ClientApp, so
    that Ray runs as many ClientApps at once as the cores hold — with 2 threads on 2 cores one Ray worker, not
    two whose four threads share two cores (the main job, loaded machine: 35 CPU-s of the whole process tree
    against 42–43, the same bits).  ``FEDSCIML_FLOWER_CPUS_PER_CLIENTAPP`` sets the CPUs per ClientApp instead,
    to measure (``flwr run --federation-config``)."""
    cpus = max(1, min(int(clients), os.cpu_count() or 1))
    per = min(max(1, int(threads)), cpus)
    raw = os.environ.get("FEDSCIML_FLOWER_CPUS_PER_CLIENTAPP", "")
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"FEDSCIML_FLOWER_CPUS_PER_CLIENTAPP={raw!r}: give a whole number of CPUs ≥ 1")
        per = min(int(raw), cpus)
    return {"num-supernodes": int(clients), "client-resources-num-cpus": per, "init-args-num-cpus": cpus,
            "init-args-logging-level": "error", "init-args-log-to-driver": False}


def _check_registered(problem):
    from fedsciml.problems.registry import REGISTRY, entry_point_modules

    name = getattr(problem, "name", None)
    if name not in REGISTRY or type(problem) is not REGISTRY[name]:
        raise ValueError(f"engine 'flower' rebuilds each client's data on its node from a registered problem's name "
                         f"and options; {type(problem).__name__} is not registered (register it with "
                         f"@fedsciml.register, or give each node its table: see docs/flower-sites.md)")
    module = type(problem).__module__
    installed = set(entry_point_modules().values())  # every Flower process loads these by name (get_problem)
    if not (module.startswith("problems.") or module.startswith("fedsciml.") or module in installed):
        # a --plugin / FEDSCIML_PLUGINS / script problem: the simulation's nodes (Ray workers) build problems by
        # name from fedsciml's own and the installed plugins only, so each would fail after Ray started
        raise ValueError(f"engine 'flower': problem {name!r} is defined in {module!r}, which Flower's nodes do "
                         f"not import; install it as a package with a 'fedsciml.problems' entry point (template: "
                         f"examples/flower_own_pde/, docs/pde.md), or run it with the local engine")


def _check_method(name) -> None:
    """A method the nodes can run: fedsciml's own or an installed method plugin (every Flower process imports
    those by name); one registered by a ``--plugin`` file or a script is refused before Ray starts."""
    from fedsciml.runtime.registry import get_method, method_entry_point_modules

    spec = get_method(name)
    installed = set(method_entry_point_modules().values())
    for part in (spec.config, spec.strategy, spec.run):
        module = getattr(part, "__module__", None) if part is not None and not isinstance(part, str) else None
        if module and not (module.startswith("fedsciml.") or module.startswith("problems.") or module in installed):
            raise ValueError(f"engine 'flower': method {name!r} is defined in {module!r}, which Flower's nodes do "
                             f"not import; install it as a package with a 'fedsciml.methods' entry point "
                             f"(template: examples/flower_own_method/, docs/methods.md), or run it with the local "
                             f"or processes engine")


def _job(kw: dict, out: str) -> dict:
    kw = dict(kw)
    problem = kw.pop("problem")
    _check_registered(problem)
    _check_method(kw.get("method"))
    opts = dict(problem.options)
    counts = getattr(problem, "point_counts", None)
    if callable(counts) and kw.get("clients") is not None:  # the points the rule chose, named for the App
        pc = counts(int(kw["clients"]))
        opts.update(n_interior=pc["n_interior"], n_boundary=pc["n_boundary"])
    job = {"kind": "solve", "problem": problem.name, "problem_options": opts,
           "method": kw.pop("method"), "clients": int(kw.pop("clients")), "seed": int(kw.pop("seed", 0)),
           "progress": bool(kw.pop("progress", False)), "timeout": float(kw.pop("timeout_s", 300.0)),
           "connect_timeout": float(kw.pop("connect_timeout_s", 300.0)), "out": out,
           "dead_after": kw.pop("dead_after_s", None),
           "table": False}  # the caller prints its own table (the CLI) or none (fs.solve)
    device = kw.pop("device", "cpu")
    if str(device) not in ("cpu", "auto"):
        raise ValueError(f"engine 'flower' runs on the CPU (device='cpu'), got device={device!r}")
    for k, v in kw.items():  # the options travel as JSON to the ServerApp: nothing may be lost on the way
        if not _plain(v):
            raise ValueError(f"engine 'flower' sends the method's options to Flower's ServerApp as JSON; option "
                             f"{k}={v!r} is not a JSON value (numbers, strings, booleans, None, lists, dicts)")
    job["options"] = kw
    return job


def _plain(v) -> bool:
    if v is None or isinstance(v, (bool, int, float, str)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain(x) for k, x in v.items())
    return False


def run_jobs(jobs: list, clients: int, *, wait_s: float = 3600.0, workdir: str | None = None,
             app: str | None = None) -> list:
    """Run ``jobs`` (the ServerApp's job dicts, each with an ``out`` path below the run's directory, filled in
    here) in one ``flwr run`` on a simulation SuperLink with ``clients`` virtual SuperNodes; returns what each
    job wrote (a Result with θ, or an images result dict), in order.  ``app``: the Flower App to run (default
    fedsciml's generic one; :data:`fedsciml.engines.flower.secagg.APP_DIR` for central DP through SecAgg+)."""
    require_flower()
    import tempfile

    import torch

    from fedsciml.engines.flower.resultio import read_result
    from fedsciml.engines.flower.deploy import LocalSuperLink, ServerAppFailed

    with tempfile.TemporaryDirectory(prefix="fedsciml-flower-sim-") as tmp:
        work = workdir or tmp
        jobs = [{**j, "out": os.path.join(work, f"job{i}.json" if j.get("kind", "solve") == "images"
                                          else f"job{i}")} for i, j in enumerate(jobs)]
        path = os.path.join(work, "jobs.json")
        with open(path, "w") as f:
            json.dump(jobs, f)
        link = LocalSuperLink(work, simulation=True, threads=torch.get_num_threads())
        dirs = job_data_dirs(jobs)  # the user's own files on the user's own machine: its virtual nodes may read them
        if dirs:
            link.extra_env["FEDSCIML_NODE_DATA_DIRS"] = os.pathsep.join(dirs)
        try:
            link.start()
        except (RuntimeError, TimeoutError, OSError) as e:  # flower-superlink exited or never listened
            link.stop()
            raise EngineFailed(f"the Flower simulation SuperLink did not start: {e} "
                               f"({_root_cause(link.tail('superlink'))})") from None
        try:
            from fedsciml.engines.flower.deploy import APP_DIR

            proc = link.submit_config({"problem": jobs[0].get("problem", "images"), "clients": int(clients),
                                       "jobs": path}, "sim", federation_config(clients, torch.get_num_threads()),
                                      app=app or APP_DIR)
            outs = [j["out"] for j in jobs]
            show = any(j.get("progress") for j in jobs)
            log = logging.getLogger("fedsciml.engines.flower")
            try:
                link.wait_files(proc, outs, wait_s, echo=(lambda line: log.info("%s", line)) if show else None)
            except ServerAppFailed as e:  # the ServerApp's own one-line record of why
                raise_stopped(jobs)  # a job that a dead site stopped after some rounds wrote those: raised with them
                raise EngineFailed(f"the Flower run failed: {e}") from None
            except (RuntimeError, TimeoutError) as e:
                log.error("%s", e)  # the run's log (tail): the root cause is in it
                raise_stopped(jobs)  # a job that a dead site stopped after some rounds wrote those: raised with them
                raise EngineFailed(f"the Flower simulation stopped without its result: {_root_cause(str(e))}"
                                   ) from None
        finally:
            link.stop()
        raise_stopped(jobs)
        out = []
        for j in jobs:
            if j.get("kind", "solve") == "images":
                with open(j["out"]) as f:
                    out.append(json.load(f))
            else:
                out.append(read_result(j["out"]))
        return out


def raise_stopped(jobs: list) -> None:
    """Raise :class:`EngineFailed` for the first solve job whose ``out`` holds a result that a failure stopped
    (``stop_reason`` ``"failed"``: the ServerApp wrote the rounds before a dead site stopped it,
    :func:`fedsciml.engines.flower.apps.keep_partial_result`), with that Result (θ included) as ``.result`` — as
    an in-process run's failed round carries it, for the CLI to write (``--out``, ``--json``) and report."""
    from fedsciml.engines.flower.resultio import read_result, ready
    from fedsciml.runtime.interrupt import FAILED

    for j in jobs:
        if j.get("kind", "solve") != "solve" or not ready(j["out"]):
            continue
        res = read_result(j["out"])
        if res.stop_reason == FAILED or res.extra.get("stop_reason") == FAILED:
            e = EngineFailed(str(res.extra.get("error") or "a round failed"))
            e.result = res  # type: ignore[attr-defined]
            raise e from None


def job_data_dirs(jobs: list) -> list[str]:
    """The directories of the files ``jobs`` name (a problem's file options, an image setting's ``data_dir``):
    what the simulation's virtual nodes — on this machine, run by this user — are allowed to read
    (:func:`fedsciml.engines.flower.apps.node_limits`; a node opens no other path a job names)."""
    from fedsciml.engines.flower.apps import _file_options
    from fedsciml.problems.registry import REGISTRY

    dirs: set = set()
    for j in jobs:
        paths: list = []
        if j.get("kind", "solve") == "images":
            data_dir = (j.get("setting") or {}).get("data_dir")
            paths += [data_dir] if data_dir else []
        elif j.get("problem") in REGISTRY:
            opts = j.get("problem_options") or {}
            for k in _file_options(REGISTRY[j["problem"]]):
                v = opts.get(k)
                paths += list(v) if isinstance(v, (list, tuple)) else [v] if v else []
        for p in paths:
            real = os.path.realpath(os.fspath(p))
            dirs.add(real if os.path.isdir(real) else os.path.dirname(real))
    return sorted(dirs)


def _root_cause(log_text: str) -> str:
    """The line of a run's log that names the error (the last ``…Error: …`` / ``Exception`` line), or its first
    line."""
    import re

    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    errs = [ln for ln in lines if re.search(r"(Error|Exception|Failed)\b.*:", ln)]
    return (errs[-1] if errs else lines[0] if lines else "no log")[:300]


def solve_many(calls: list, clients: int, *, wait_s: float = 3600.0, workdir: str | None = None) -> list:
    """Run several solves in one Flower simulation with ``clients`` virtual SuperNodes (Ray starts once).

    ``calls``: keyword dicts for :func:`fedsciml.engines.flower.apps.run_on_grid`
    (``problem``, ``method``, ``clients``, ``seed``, options …); every call
    must use ``clients`` clients.  Returns their Results (with θ) in order.  ``workdir``: keep the run's files
    there (``generic/jobI`` and ``secagg/jobI``: each call's result directory, as the App's ``out`` writes it,
    and the processes' logs) instead of a temporary directory.
    """
    for kw in calls:
        if int(kw["clients"]) != int(clients):
            raise ValueError(f"every call of one simulation must have clients={clients}, got {kw['clients']}")
    from fedsciml.engines.flower.jobs import SECAGG_APP_DIR, is_secagg_job

    from fedsciml.engines.flower.runconfig import check_job

    jobs = [check_job(_job(kw, ""), "engine 'flower'") for kw in calls]  # the App's own checks, before Ray starts
    secure = [is_secagg_job(j) for j in jobs]  # central DP: Flower's SecAgg+ App, the rest the generic one
    for kw, j, flag in zip(calls, jobs, secure):
        if flag:  # SecAgg+'s public plan (row bound, fixed-point precision) is refused here, before Ray starts
            from fedsciml.engines.flower.jobs import plan

            plan(j, kw["problem"])
    out: list = [None] * len(jobs)
    for flag, app in ((False, None), (True, SECAGG_APP_DIR)):
        idx = [i for i, f in enumerate(secure) if f == flag]
        if idx:
            sub = None if workdir is None else os.path.join(workdir, "secagg" if flag else "generic")
            if sub is not None:
                os.makedirs(sub, exist_ok=True)
            for i, r in zip(idx, run_jobs([jobs[i] for i in idx], clients, wait_s=wait_s, workdir=sub, app=app)):
                out[i] = r
    return out


def solve(problem, method: str, clients: int | None = None, seed: int = 0, device="cpu", progress: bool = False,
          **options):
    """One solve through Flower's simulation runtime (what ``fs.solve(..., engine="flower")`` calls)."""
    clients = problem.default_clients if clients is None else int(clients)
    if clients < 1:
        raise ValueError(f"clients must be ≥ 1, got {clients}")
    return solve_many([dict(problem=problem, method=method, clients=clients, seed=seed, device=device,
                            progress=progress, **options)], clients)[0]
