"""The hooks a Flower user expects of a strategy: the query an averaging strategy sends is an attribute (a method
whose clients answer their own query sets it and keeps ``configure_round``), and an aggregator is given the round
number (``server_round``, counted from 1 as Flower's).  Both leave FedAvg's numbers as they were: bitwise, the
same operations in the same order."""
import pytest
import torch

import fedsciml as fs
from fedsciml.methods.aggregators import FedAvgAggregator
from fedsciml.methods.averaging import AveragingStrategy, FedAvgConfig
from fedsciml.methods.local import _answer_update, _pre_update
from fedsciml.methods.run import local_config
from fedsciml.runtime import client as runtime_client
from fedsciml.runtime.client import Client, register_handler
from fedsciml.runtime.driver import METHODS, Method, register_method

SMALL = dict(clients=2, problem_options={"n_interior": 40}, local_steps=5, rounds=3)
QUERY = "update_hooks_test"


class RoundsSeen(FedAvgAggregator):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.rounds: list = []

    def aggregate(self, theta, messages, server_round=None):
        self.rounds.append(server_round)
        return super().aggregate(theta, messages, server_round)


class OwnQuery(AveragingStrategy):
    query = QUERY


@pytest.fixture
def methods():
    built = {}
    asked = []

    def answer(*args, **kw):
        asked.append(1)
        return _answer_update(*args, **kw)

    register_handler(Client, QUERY, answer, _pre_update)

    def factory(strategy_cls):
        def build(cfg, ctx):
            agg = RoundsSeen(server_lr=cfg.server_lr, outlier_ratio=cfg.outlier_ratio)
            built["agg"] = agg
            return strategy_cls(agg, local_config(cfg), ctx.seed)
        return build

    for name, cls in (("hooks-rounds", AveragingStrategy), ("hooks-query", OwnQuery)):
        register_method(Method(name, FedAvgConfig, strategy=factory(cls), description="a test method"))
    yield built, asked
    for name in ("hooks-rounds", "hooks-query"):
        METHODS.pop(name, None)
    Client.__dict__["handlers"].pop(QUERY, None)  # the handler table is the process's: leave it as it was
    runtime_client._VOCABULARY.pop(QUERY, None)


def test_the_aggregator_sees_each_round_number_and_fedavgs_numbers_stay(methods):
    built, _ = methods
    a = fs.solve("bratu", method="hooks-rounds", **SMALL)
    assert built["agg"].rounds == [1, 2, 3]
    b = fs.solve("bratu", method="fedavg", **SMALL)
    assert torch.equal(a.theta, b.theta)  # bitwise: the same FedAvg operations in the same order, one process


def test_a_strategy_sends_its_own_query_without_its_own_configure_round(methods):
    built, asked = methods
    assert "configure_round" not in OwnQuery.__dict__
    a = fs.solve("bratu", method="hooks-query", **SMALL)
    assert len(asked) == 2 * 3  # each client, each round, was asked OwnQuery.query, not "update"
    b = fs.solve("bratu", method="fedavg", **SMALL)
    assert torch.equal(a.theta, b.theta)  # the same handler behind another name: the same bits


def test_the_round_loop_offers_every_member_of_round_context():
    """``RoundContext`` is what a strategy may use of the loop; ``Simulation`` implements each member (mypy checks
    the signatures where the loop hands itself to a strategy; this checks the names for a run without mypy).  gn's
    screening goes through ``reject`` into the run's rejections: tests/test_correctness.py's screen test."""
    import inspect

    from fedsciml.runtime.loop import Simulation
    from fedsciml.runtime.strategy import RoundContext

    members = {n for n in vars(RoundContext) if not n.startswith("_")} | set(RoundContext.__annotations__)
    assert members >= {"client_ids", "n_total", "round_index", "transport", "round_floats", "sample", "drop_out",
                       "exchange", "count_sent", "reject", "skip_round", "time_left", "out_of_time", "fail"}
    # methods and properties; the attributes, and transport (an attribute the loop sets), are mypy's to check
    for name in members - set(RoundContext.__annotations__) - {"transport"}:
        ours = vars(RoundContext)[name]
        theirs = inspect.getattr_static(Simulation, name, None)
        assert type(theirs) is type(ours), name
        if inspect.isfunction(ours):
            assert list(inspect.signature(theirs).parameters) == list(inspect.signature(ours).parameters), name
