"""A user's federated method, packaged so that the CLI, ``fs.solve`` and every Flower node find it by name (see
pyproject.toml beside this file).

The template is FedAvg under its own name, configuration and client query: the server's strategy asks each sampled
client the query ``my_update``, and this module's handler answers it — here with FedAvg's own local step, which is
where your client's step goes; the aggregator (``FedAvgAggregator``) is where your server's merge goes.  Importing
the module registers both, so a process that imports it (through the entry point) can run the method or answer its
clients' queries.
"""
from __future__ import annotations

from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.methods.averaging import AveragingStrategy, FedAvgConfig
from fedsciml.methods.run import local_config
from fedsciml.runtime.client import Client, register_handler
from fedsciml.runtime.registry import METHODS, Method, register_method

QUERY = "my_update"


class MyAverage(AveragingStrategy):
    """FedAvg's rounds; each sampled client is sent :data:`QUERY`."""

    query = QUERY


def answer(client, request, pre, deadline):
    """A client's answer to :data:`QUERY`: ``{"delta", "n", ...}`` as FedAvg's ``update`` (your local step here)."""
    return Client.handlers["update"].answer(client, request, None, deadline)


def build(cfg: FedAvgConfig, ctx):
    """The strategy of a run: every option of :class:`FedAvgConfig` is used (the server step and the robust
    aggregation's), none ignored — a configuration class of your own declares what your method takes."""
    agg = FedAvgAggregator(server_lr=cfg.server_lr, robust=cfg.robust, trim=cfg.trim, clip_norm=cfg.clip_norm,
                           outlier_ratio=cfg.outlier_ratio)
    return MyAverage(agg, local_config(cfg), ctx.seed)


register_handler(Client, QUERY, answer)
if "my-avg" not in METHODS:
    register_method(Method("my-avg", FedAvgConfig, strategy=build,
                           description="a user's method: FedAvg under its own name and client query"))
