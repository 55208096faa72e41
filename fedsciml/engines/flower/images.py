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


def run_setting(timeout_s: float = 600.0, wait_s: float = 7200.0, **setting) -> dict:
    """:func:`fedsciml.images.bench.run_setting` (same keywords) inside one Flower simulation (``flwr run`` on a
    simulation SuperLink, :func:`fedsciml.engines.flower.simulation.run_jobs`) with one virtual SuperNode per
    client; the result's setting records ``engine: flower`` and each seed's exchanges."""
    require_flower()
    from fedsciml.images.methods import remote_refusal

    if no := remote_refusal(setting.get("protocol", _BENCH_DEFAULTS["protocol"]), setting.get("methods"),
                         "engine 'flower'"):
        raise ValueError(no)
    import dataclasses

    from fedsciml.engines.flower.simulation import _plain, run_jobs

    setting = dict(setting)
    setting.pop("progress", None)  # a callable cannot travel: the ServerApp logs the progress lines itself
    if setting.get("cfg") is not None:
        setting["cfg"] = dataclasses.asdict(setting["cfg"])  # TrainConfig, rebuilt by the ServerApp
    for k, v in setting.items():
        if not _plain(v):
            raise ValueError(f"engine 'flower' sends the setting to Flower's ServerApp as JSON; {k}={v!r} is not a "
                             f"JSON value")
    clients = int(setting.get("clients", _BENCH_DEFAULTS["clients"]))
    job = {"kind": "images", "clients": clients, "timeout": float(timeout_s), "setting": setting,
           "threads": torch.get_num_threads()}
    return run_jobs([job], clients, wait_s=wait_s)[0]
