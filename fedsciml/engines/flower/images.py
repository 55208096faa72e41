"""``bench images --engine flower``: the image benchmarks with Flower's simulation engine carrying the messages.

The same protocols and strategies (:mod:`fedsciml.images.methods`, on the
federated round loop); only the transport differs: a
:class:`~fedsciml.engines.flower.transport.FlowerTransport` per seed, whose job
carries the split's plain description (data set, data directory, number of
clients, α, split kind, seed, model).  Each virtual node rebuilds its own
client from it (:func:`fedsciml.images.methods.image_client`: the same rows
as the in-process split) and keeps it between messages; the model's
parameters travel with each request (float32 ``ArrayRecord`` s, bitwise).

What is bitwise: the in-process image runs already evaluate each client on
its own (``LocalTransport(vectorize=False)``), so a Flower run equals
``--engine local`` at the same torch thread count (tested for FedAvg, 2
rounds).  ``fipa-fc`` (a classifier head on a body the server fixes after the
warm-up) is not offered on Flower.
"""
from __future__ import annotations

import torch

import fedsciml.engines.flower  # noqa: F401  (hygiene environment before flwr/ray import)
from fedsciml.engines.flower import require_flower


def _bench_defaults() -> dict:
    import inspect

    from fedsciml.images import bench

    return {k: p.default for k, p in inspect.signature(bench.run_setting).parameters.items()}


_BENCH_DEFAULTS = _bench_defaults()  # one default per keyword: images.bench.run_setting's


def run_setting(timeout_s: float = 600.0, verbose: bool = False, **setting) -> dict:
    """:func:`fedsciml.images.bench.run_setting` (same keywords) inside one Flower simulation with one virtual
    SuperNode per client; the result's setting records ``engine: flower`` and each seed's exchanges."""
    require_flower()
    if setting.get("protocol", "one-shot") != "one-shot" and "fipa-fc" in (setting.get("methods") or ["fipa-fc"]):
        raise ValueError("engine 'flower' does not run fipa-fc (its clients train a head on a body the server fixes); "
                         "give --methods without it, e.g. fedavg,fedprox,fipa,fedfish")
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    from fedsciml.engines.flower.apps import client_app
    from fedsciml.engines.flower.simulation import backend_config
    from fedsciml.engines.flower.transport import FlowerTransport
    from fedsciml.images import bench

    clients = int(setting.get("clients", _BENCH_DEFAULTS["clients"]))
    out: dict = {}
    engine: list = []
    app = ServerApp()

    @app.main()
    def main(grid, context):
        def transport(seed, spec):
            job = {"images": spec, "clients": clients, "threads": torch.get_num_threads()}
            tr = FlowerTransport(grid, job, clients, timeout_s=timeout_s, connect_timeout_s=timeout_s)
            engine.append(tr)
            return tr

        out["res"] = bench.run_setting(transport=transport, **setting)

    run_simulation(server_app=app, client_app=client_app, num_supernodes=clients,
                   backend_config=backend_config(clients), verbose_logging=verbose)
    if "res" not in out:  # pragma: no cover - run_simulation re-raises the ServerApp's error
        raise RuntimeError("the Flower simulation ended before the benchmark finished")
    res = out["res"]
    res["setting"]["engine"] = "flower"
    res["setting"]["flower"] = [{"exchanges": t.exchanges, "exchange_s": t.exchange_seconds} for t in engine]
    return res
