"""A plugin method — its configuration, strategy, its own client query and handler, one file loaded with
``--plugin`` — runs on every engine whose clients are other processes: the job carries the module that registered
the handler (fedsciml.runtime.plugins), as it carries the problem's.  Before, the client processes answered
"unknown query" and the run failed."""
import pytest
import torch

import fedsciml as fs
import fedsciml.engines  # noqa: F401  (registers the engines)
from _own_pde import forget_method
from fedsciml.cli.plugins import load_plugins
from fedsciml.problems import get_problem
from fedsciml.runtime.client import Client
from fedsciml.runtime.transport import LocalTransport

QUERY = "update_plugin_method_test"
PLUGIN = f'''
from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.methods.averaging import AveragingStrategy, FedAvgConfig
from fedsciml.methods.run import local_config
from fedsciml.runtime.client import Client, register_handler
from fedsciml.runtime.driver import METHODS, Method, register_method


class OwnQuery(AveragingStrategy):
    query = "{QUERY}"


def answer(client, request, pre, deadline):  # this file's handler: FedAvg's local step under its own query
    return Client.handlers["update"].answer(client, request, None, deadline)


def build(cfg, ctx):
    return OwnQuery(FedAvgAggregator(server_lr=cfg.server_lr), local_config(cfg), ctx.seed)


register_handler(Client, "{QUERY}", answer)
if "plugin-avg-test" not in METHODS:
    register_method(Method("plugin-avg-test", FedAvgConfig, strategy=build, description="a plugin method"))
'''
OPTS = {"n_interior": 60}
K, KW = 3, dict(rounds=2, local_steps=5)


@pytest.fixture
def plugin(tmp_path):
    path = tmp_path / "plugin_avg_test.py"
    path.write_text(PLUGIN)
    load_plugins([str(path)])
    yield
    forget_method("plugin-avg-test", QUERY)  # the registries are the process's: leave them as they were


def test_a_plugin_method_runs_in_process_and_on_client_processes(plugin):
    problem = get_problem("bratu", **OPTS)
    torch.manual_seed(0)
    objs = problem.client_objectives(K, seed=0)
    unbatched = LocalTransport([Client(i, o) for i, o in enumerate(objs)], vectorize=False)
    here = fs.solve(get_problem("bratu", **OPTS), method="plugin-avg-test", clients=K, transport=unbatched, **KW)
    there = fs.solve(get_problem("bratu", **OPTS), method="plugin-avg-test", clients=K, engine="processes", **KW)
    # bitwise: the same clients' operations in the same order, one process or one a client
    assert torch.equal(here.theta, there.theta) and here.final == there.final
    fedavg = fs.solve(get_problem("bratu", **OPTS), method="fedavg", clients=K, transport=unbatched, **KW)
    assert torch.equal(here.theta, fedavg.theta)  # the plugin's query runs FedAvg's own step
