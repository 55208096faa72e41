"""Engine ``processes`` (fedsciml/engines/processes.py, one file: ``connect``): each client in its own process,
the run the driver's.  Bitwise equality is asserted against the in-process run whose clients are evaluated one
by one (``LocalTransport(vectorize=False)``): a client process holds one client, so the operations and their order
are the same (the default in-process run batches clients and may differ in the last bits).  The server process
never builds a client's data: its problem's ``client_objectives`` raises while the engine runs."""
import pytest
import torch

import fedsciml as fs
import fedsciml.engines  # noqa: F401  (registers the engines)
from fedsciml.problems import get_problem
from fedsciml.runtime.checks import SetupError
from fedsciml.runtime.client import Client
from fedsciml.runtime.driver import ENGINES, Connect
from fedsciml.runtime.transport import LocalTransport

OPTS = {"n_interior": 60}
K = 3


def _unbatched(problem, seed=0):
    torch.manual_seed(seed)
    objs = problem.client_objectives(K, seed=seed)
    return LocalTransport([Client(i, o) for i, o in enumerate(objs)], vectorize=False)


@pytest.fixture
def no_data_here(monkeypatch):
    """The server's problem cannot build client data: what the engine's run needs of the clients comes from them."""
    problem = get_problem("bratu", **OPTS)

    def refused(*a, **k):
        raise AssertionError("the server built client data")

    monkeypatch.setattr(problem, "client_objectives", refused)
    return problem


def test_the_engine_is_one_connect_function():
    assert isinstance(ENGINES["processes"], Connect)


@pytest.mark.parametrize("method,kw", [("gn", {"rounds": 3}), ("fipa", {"rounds": 3}),
                                       ("fedavg", {"rounds": 2, "local_steps": 5}), ("one-shot", {"sigma": 1e-3})])
def test_processes_are_bitwise_the_in_process_run(no_data_here, method, kw):
    got = fs.solve(no_data_here, method=method, clients=K, engine="processes", **kw)
    want = fs.solve(get_problem("bratu", **OPTS), method=method, clients=K,
                    transport=_unbatched(get_problem("bratu", **OPTS)), **kw)
    assert torch.equal(got.theta, want.theta)
    assert [r["loss"] for r in got.history] == [r["loss"] for r in want.history]
    assert got.final == want.final and got.extra["engine"] == {"name": "processes"}


def test_a_client_that_cannot_build_its_data_is_one_line():
    """A client process builds the job's problem by its registered name: an unregistered one fails there, and
    the run stops before its first round with that client's one line."""
    from fedsciml.problems.pde1d import Bratu

    class Unregistered(Bratu):
        name = "bratu-not-registered"

    with pytest.raises(SetupError, match=r"client 0: .*bratu-not-registered"):
        fs.solve(Unregistered(**OPTS), method="gn", clients=2, engine="processes", rounds=1)


def test_the_pooled_reference_is_refused():
    with pytest.raises(ValueError, match="engine 'processes' carries federated methods' messages only"):
        fs.solve("bratu", method="centralized", clients=2, engine="processes")
