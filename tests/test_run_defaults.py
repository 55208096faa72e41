"""A problem's run defaults (``Problem.run_defaults``, applied by ``fedsciml.runtime.driver.plan``): PINNacle's
Burgers 1d-C, Heat 2d-MS and NS 2d-C draw fresh points every 10 steps unless told otherwise, in process only; on
every PINNacle case FIPA sends the full H_m where its packed message fits gn's cap on a client's matrix."""
import logging

import fedsciml.methods  # noqa: F401  (registers the methods plan reads)

from fedsciml.problems import get_problem
from fedsciml.runtime.driver import plan


def _burgers():
    return get_problem("pinnacle", case="burgers1d-c", n_interior=8, n_boundary=2, hidden=[4])


def test_burgers_resamples_every_10_steps_by_default_and_an_explicit_option_wins(caplog):
    p = _burgers()
    assert p.run_defaults == {"resample": 10, "rank": 0}
    with caplog.at_level(logging.INFO, logger="fedsciml.runtime.driver"):
        assert plan(p, "centralized").config.resample == 10
    assert "its default resample=10" in caplog.text
    assert plan(p, "gn", clients=2).config.resample == 10
    assert plan(p, "centralized", resample=3).config.resample == 3
    assert plan(p, "centralized", resample=None).config.resample is None  # an explicit None is given
    assert plan(get_problem("pinnacle", case="poisson2d-c"), "centralized").config.resample is None
    for case in ("heat2d-ms", "ns2d-c"):
        other = get_problem("pinnacle", case=case, n_interior=8, n_boundary=2, hidden=[4])
        assert other.run_defaults == {"resample": 10, "rank": 0} and plan(other, "centralized").config.resample == 10


def test_the_default_makes_grow_applicable_and_reaches_the_history():
    """With the default resample, ``grow`` is not refused as idle; a run of 12 steps trains on the points of draw 1
    from step 11 on (the history's ``resample`` column)."""
    import fedsciml as fs

    p = _burgers()
    assert plan(p, "centralized", grow=2.0).config.grow == 2.0
    r = fs.solve(p, "centralized", max_iters=12)
    assert r.options["resample"] == 10
    assert [row.get("resample") for row in r.history][-1] == 1


def test_a_default_that_needs_the_clients_here_is_not_applied_on_another_engine(caplog):
    with caplog.at_level(logging.INFO, logger="fedsciml.runtime.driver"):
        assert plan(_burgers(), "gn", clients=2, engine="processes").config.resample is None
    assert "not applied: the clients draw their own points on engine 'processes'" in caplog.text


def test_fipa_sends_the_full_curvature_on_pinnacle_cases_where_the_message_fits_the_cap(caplog):
    """rank 0 (the full H_m) where p(p+1)/2 ≤ MESSAGE_FLOATS: the default 3×32 network (p = 2,241) and a network
    just under the cap; rank 20 (FIPA's own default) just over it and for their 5×100 network; an explicit rank
    wins; no other method declares ``rank`` (none is handed it); another problem keeps FIPA's default."""
    from fedsciml.core.forms import MESSAGE_FLOATS

    p = get_problem("pinnacle", case="poisson2d-c")
    assert p.n_params == 2241 and p.run_defaults == {"rank": 0}
    with caplog.at_level(logging.INFO, logger="fedsciml.runtime.driver"):
        assert plan(p, "fipa", clients=2).config.rank == 0
    assert "its default rank=0" in caplog.text
    assert plan(p, "fipa", clients=2, rank=5).config.rank == 5
    assert not hasattr(plan(p, "gn", clients=2).config, "rank")
    big = get_problem("pinnacle", case="poisson2d-c", hidden=[100] * 5, n_interior=16, n_boundary=4)
    assert big.run_defaults == {} and plan(big, "fipa", clients=2).config.rank == 20
    # the edge of the cap, on a one-hidden-layer network (p = 4w + 1 for 2 inputs, one output)
    fits = [w for w in (880, 900) if (4 * w + 1) * (4 * w + 2) // 2 <= MESSAGE_FLOATS]
    assert fits == [880]
    for w, rank in ((880, {"rank": 0}), (900, {})):
        assert get_problem("pinnacle", case="poisson2d-c", hidden=[w]).run_defaults == rank
    assert plan(get_problem("bratu"), "fipa", clients=2).config.rank == 20


def test_a_default_never_overrides_a_method_preset_nor_turns_a_valid_call_into_an_error(caplog):
    """fipa's ``preset paper`` sets rank 20 (and the thin-QR merge): the case's rank 0 is not applied.  With
    ``adaptive`` or a ``sketch`` (which need rank ≥ 1) the default is dropped with one info line naming why, and the
    run takes FIPA's own rank; an invalid combination the caller gives is still refused."""
    import pytest

    from fedsciml.options import OptionError

    p = get_problem("pinnacle", case="poisson2d-c")
    assert plan(p, "fipa", clients=2, preset="paper").config.rank == 20
    with caplog.at_level(logging.INFO, logger="fedsciml.runtime.driver"):
        assert plan(p, "fipa", clients=2, adaptive=True).config.rank == 20
    assert "its default rank=0 not applied: with the options given, fipa option adaptive" in caplog.text
    assert "its default rank=0 (give" not in caplog.text
    assert plan(p, "fipa", clients=2, sketch="matfree").config.rank == 20
    with pytest.raises(OptionError, match="adaptive"):
        plan(p, "fipa", clients=2, rank=0, adaptive=True)
