"""A FIPA update request's settings (curvature, rank, sketch, CG limits) are a frozen dataclass with no defaults:
each default is written once, in FIPA's configuration, and a request missing one is refused naming it."""
import dataclasses

import pytest

from fedsciml.methods.fipa import FIPAConfig, fipa_ask
from fedsciml.methods.local import CurvatureAsk


def test_the_ask_has_no_default_of_its_own():
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               for f in dataclasses.fields(CurvatureAsk))


def test_the_defaults_are_the_configurations():
    cfg = FIPAConfig.from_options({})
    ask = fipa_ask("lowrank")
    assert (ask.rank, ask.sketch, ask.cg_iters, ask.cg_rtol) == (cfg.rank, cfg.sketch, cfg.cg_iters, cfg.cg_rtol)
    assert fipa_ask("lowrank", rank=7, cg_iters=3).rank == 7 and fipa_ask("lowrank", cg_iters=3).cg_iters == 3


def test_the_request_round_trips_and_a_missing_field_is_named():
    ask = fipa_ask("lowrank", rank=5, sketch="dense")
    assert CurvatureAsk.from_config({"seed": 1, **ask.to_config()}) == ask
    assert CurvatureAsk.from_config({"local": {}}) is None  # FedAvg's request asks for no curvature
    cfg = ask.to_config()
    del cfg["rank"]
    with pytest.raises(ValueError, match="needs rank"):
        CurvatureAsk.from_config(cfg)
