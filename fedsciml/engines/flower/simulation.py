"""``fs.solve(..., engine="flower")``: the same run through Flower's simulation engine.

Flower's ``run_simulation`` starts K virtual SuperNodes (Ray actors run the
ClientApp, :data:`fedsciml.engines.flower.apps.client_app`) and runs a ServerApp in a
thread of this process; the ServerApp's main runs fedsciml's runner with a
:class:`~fedsciml.engines.flower.transport.FlowerTransport` over the simulation's
Grid (:func:`fedsciml.engines.flower.apps.run_on_grid`).  Each node builds its own
client's data from the problem's name, options and seed (so the problem must
be a registered one: ``fs.get_problem(name, ...)``).

Ray is bound to 127.0.0.1, without dashboard or usage statistics.  Starting
Ray costs seconds (14–35 s measured on a loaded 2-core machine) and
``run_simulation`` shuts it down when its ServerApp returns, so
:func:`solve_many` runs several solves in one simulation.

What is bitwise: a run on Flower evaluates each client on its own (one node,
one client), so it equals the in-process run whose clients are evaluated one
by one — ``LocalTransport(vectorize=False)`` (``batched=False`` for ``gn``)
— with the same torch thread count (the job carries the server's; each node
uses it).  The default in-process run vectorizes several clients in one
call, which may change the last bits of ``gn``'s statistics.
"""
from __future__ import annotations

import os
import threading

import fedsciml.engines.flower  # noqa: F401  (hygiene environment before flwr/ray import)
from fedsciml.engines.flower import require_flower
from fedsciml.runtime.loop import RoundFailed


def backend_config(clients: int) -> dict:
    """Ray on 127.0.0.1, no dashboard, at most one actor per core (one CPU per ClientApp)."""
    cpus = max(1, min(int(clients), os.cpu_count() or 1))
    return {"init_args": {"num_cpus": cpus, "_node_ip_address": "127.0.0.1", "include_dashboard": False,
                          "logging_level": "error", "log_to_driver": False},
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}


def _check_registered(problem):
    from fedsciml.problems.registry import REGISTRY

    name = getattr(problem, "name", None)
    if name not in REGISTRY or type(problem) is not REGISTRY[name]:
        raise ValueError(f"engine 'flower' rebuilds each client's data on its node from a registered problem's name "
                         f"and options; {type(problem).__name__} is not registered (register it with "
                         f"@fedsciml.register, or give each node its table: see README 'Flower')")
    module = type(problem).__module__
    if not (module.startswith("problems.") or module.startswith("fedsciml.")):
        # a --plugin / FEDSCIML_PLUGINS / entry-point problem: the simulation's nodes (Ray workers) import
        # fedsciml's own problems only, so each would fail to build its client 15 s after Ray started
        raise ValueError(f"engine 'flower': problem {name!r} comes from a plugin (module {module!r}), which "
                         f"Flower's simulation nodes do not load; run it with the local engine, or deploy nodes "
                         f"that import it (see README 'Flower')")


def solve_many(calls: list, clients: int, verbose: bool = False) -> list:
    """Run several solves in one Flower simulation with ``clients`` virtual SuperNodes (Ray starts once).

    ``calls``: keyword dicts for :func:`fedsciml.engines.flower.apps.run_on_grid`
    (``problem``, ``method``, ``clients``, ``seed``, options …); every call
    must use ``clients`` clients.  Returns their Results in order.
    """
    require_flower()
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from fedsciml.engines.flower.apps import client_app, run_on_grid

    for kw in calls:
        _check_registered(kw["problem"])
        if int(kw["clients"]) != int(clients):
            raise ValueError(f"every call of one simulation must have clients={clients}, got {kw['clients']}")
    results: list = [None] * len(calls)
    app = ServerApp()
    stop = threading.Event()  # set when run_simulation returns or raises: our ServerApp thread stops waiting

    @app.main()
    def main(grid, context):
        for i, kw in enumerate(calls):
            results[i] = run_on_grid(grid, stop=stop, **kw)

    try:
        run_simulation(server_app=app, client_app=client_app, num_supernodes=int(clients),
                       backend_config=backend_config(clients), verbose_logging=verbose)
    except RuntimeError as e:  # the engine failed to start or crashed; its own message is the root cause
        stop.reason = f"the Flower simulation engine stopped: {_root_cause(e)}"
        stop.set()
        raise EngineFailed(stop.reason) from None
    finally:
        stop.set()
    if any(r is None for r in results):  # pragma: no cover - run_simulation re-raises the ServerApp's error
        raise RuntimeError("the Flower simulation ended before every run finished")
    return results


class EngineFailed(RoundFailed):
    """Flower's simulation engine failed to start or crashed (e.g. Ray could not start its node); a
    :class:`RoundFailed` (the CLI: one line, exit 1)."""


def _root_cause(e: BaseException) -> str:
    """The first line of the innermost exception of ``e``'s cause chain."""
    seen = set()
    while (e.__cause__ or e.__context__) is not None and id(e) not in seen:
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


def solve(problem, method: str, clients: int | None = None, seed: int = 0, device="cpu", progress: bool = False,
          **options):
    """One solve through Flower's simulation engine (what ``fs.solve(..., engine="flower")`` calls)."""
    clients = problem.default_clients if clients is None else int(clients)
    if clients < 1:
        raise ValueError(f"clients must be ≥ 1, got {clients}")
    return solve_many([dict(problem=problem, method=method, clients=clients, seed=seed, device=device,
                            progress=progress, **options)], clients)[0]
