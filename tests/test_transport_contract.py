"""The transport contract an engine implements is declared on fedsciml.runtime.transport.Transport (the driver
calls engine_info, final_metrics and close as methods, never looks them up by name): its defaults, and a connect
function that returns something else refused in one line naming the engine."""
import pytest

import fedsciml as fs
from fedsciml.runtime.driver import ENGINE_KINDS, ENGINES, register_engine
from fedsciml.runtime.transport import LocalTransport, Transport


class _Bare(Transport):
    def ask(self, client_ids, request):
        return {}


def test_the_optional_hooks_have_declared_defaults():
    t = _Bare()
    assert t.engine_info() == {} and t.final_metrics(None, None) == {} and t.close() is None
    for name in ("engine_info", "final_metrics", "close", "cpu_seconds"):  # the in-process transport inherits them
        assert getattr(LocalTransport, name) is getattr(Transport, name)


def test_a_connect_that_returns_no_transport_is_refused_naming_the_engine():
    register_engine("test-no-transport", connect=lambda job, clients: object())
    try:
        with pytest.raises(TypeError, match=r"engine 'test-no-transport': its connect\(job, clients\) returned "
                                            r"object, not a fedsciml\.runtime\.transport\.Transport"):
            fs.solve("bratu", method="gn", clients=2, engine="test-no-transport", rounds=1,
                     problem_options={"n_interior": 20})
    finally:
        ENGINES.pop("test-no-transport")
        ENGINE_KINDS.pop("test-no-transport")
