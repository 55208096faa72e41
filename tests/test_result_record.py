"""A Result records what ran once: the configuration (``options``: ``config.to_dict()`` beside the problem's
options) and the strategy's resolved settings (``extra["strategy"]``: its ``summary()``), no per-method copy."""
import json

import pytest
import torch

import fedsciml as fs
from fedsciml.methods import METHODS
from fedsciml.methods.averaging import FedAvgConfig, FedAvgAggregator, AveragingStrategy
from fedsciml.methods.fipa import FIPAConfig
from fedsciml.methods.averaging import local_config
from fedsciml.problems import get_problem
from fedsciml.runtime.checkpoint import CheckpointMismatch
from fedsciml.runtime.registry import Method
from fedsciml.runtime.results import Result, method_settings

TINY = {"n": 40}


def test_a_result_holds_each_option_once(tmp_path):
    r = fs.solve("sin1d", "fipa", clients=2, rounds=1, rank=3, local="adam", local_steps=2, **TINY)
    d = json.loads(r.to_json())
    assert "options" not in d["extra"]  # the per-method copy is gone
    cfg = FIPAConfig.from_options({"rank": 3, "local": "adam", "local_steps": 2, "rounds": 1})
    for k, v in cfg.to_dict().items():  # every field of the configuration, once, as it ran
        assert d["options"][k] == (list(v) if isinstance(v, tuple) else v), k
    s = d["extra"]["strategy"]  # what the strategy resolved: the name, the curvature, the merge
    assert s["name"] == "fipa" and s["rank"] == 3 and s["curvature"] == "lowrank" and s["merge"] == "qr"
    assert method_settings(r) == "rank 3, merge qr, local adam τ=2 lr=0.001"


def test_full_curvature_records_rank_0_and_gn_records_why_auto_chose():
    r = fs.solve("sin1d", "fipa", clients=2, rounds=1, rank=0, **TINY)
    assert r.extra["strategy"]["rank"] == 0 and r.extra["strategy"]["curvature"] == "full"
    assert method_settings(r).startswith("full H_m, merge pinv")
    g = fs.solve("sin1d", "gn", clients=2, rounds=1, **TINY)  # form auto: the choice and its reason
    assert g.options["form"] == "auto" and g.extra["strategy"]["form"] in ("normal", "sqrt")
    assert g.extra["strategy"]["form_reason"].startswith(g.extra["strategy"]["form"] + ": ")


def test_an_older_result_file_still_reads_and_summarizes(tmp_path):
    """A result.json written before the move (a per-method ``extra["options"]`` beside ``extra["strategy"]``)."""
    r = fs.solve("sin1d", "fedprox", clients=2, rounds=1, local_steps=2, mu=0.1, **TINY)
    d = r.to_dict()
    d["extra"]["options"] = {"local": "adam", "local_steps": 2, "lr": 1e-3, "mu": 0.1}
    old = Result.from_dict(json.loads(json.dumps(d)))
    assert method_settings(old) == method_settings(r) == "local adam τ=2 lr=0.001, μ=0.1"


def test_a_factory_returning_a_record_is_refused_in_one_line():
    def build(cfg, ctx):
        return AveragingStrategy(FedAvgAggregator(), local_config(cfg), ctx.seed), {"lr": cfg.lr}

    m = Method("record-test", FedAvgConfig, strategy=build)
    pb = get_problem("sin1d", **TINY)
    objs = pb.client_objectives(2, seed=0)
    with pytest.raises(TypeError, match=r"record-test: a strategy factory returns its strategy, or \(strategy, "
                                        r"evaluate\).*summary\(\) is recorded"):
        m(pb, objs, pb.init_params(0), pb.evaluate, rounds=1)


def test_a_checkpoint_fingerprints_the_configuration_but_not_how_long(tmp_path):
    """Resuming with more rounds continues; another local step count is refused, naming the options."""
    ck = str(tmp_path / "ck")
    pb = get_problem("sin1d", **TINY)
    objs = pb.client_objectives(2, seed=0)
    th0 = pb.init_params(0)
    kw = dict(local_steps=2, checkpoint=ck)
    METHODS["fedavg"](pb, objs, th0, pb.evaluate, rounds=1, **kw)
    th, rows, info = METHODS["fedavg"](pb, objs, th0, pb.evaluate, rounds=2, resume=True, **kw)
    assert info["resumed"] and info["rounds"] == 2
    ref, _, _ = METHODS["fedavg"](pb, objs, th0, pb.evaluate, rounds=2, local_steps=2)
    assert torch.equal(th, ref)  # the same operations in the same order: bitwise
    with pytest.raises(CheckpointMismatch, match="options"):
        METHODS["fedavg"](pb, objs, th0, pb.evaluate, rounds=3, resume=True, checkpoint=ck, local_steps=3)
