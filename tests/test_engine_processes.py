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

# a small network (97 parameters, not bratu's default 2209): bitwise equality with the in-process run and the server
# building no client data hold at any size; gn's J_kᵀJ_k (p² floats) through each client's pipe is 500× smaller
OPTS = {"n_interior": 60, "hidden": [8, 8]}
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
                                       ("fedavg", {"rounds": 2, "local_steps": 5})])
def test_processes_are_bitwise_the_in_process_run(no_data_here, method, kw):
    got = fs.solve(no_data_here, method=method, clients=K, engine="processes", **kw)
    want = fs.solve(get_problem("bratu", **OPTS), method=method, clients=K,
                    transport=_unbatched(get_problem("bratu", **OPTS)), **kw)
    assert torch.equal(got.theta, want.theta)
    assert [r["loss"] for r in got.history] == [r["loss"] for r in want.history]
    assert got.final == want.final and got.extra["engine"] == {"name": "processes"}


def test_one_shot_ridge_over_processes_is_bitwise_the_in_process_run(monkeypatch):
    """one-shot (linear residuals: kind ridge) over client processes: the clients hold their data rows only
    (penalty=server, as the driver has them in process) and the fused step is the in-process one, bitwise."""
    opts = {"n_samples": 40, "dim": 8}
    problem = get_problem("ridge-linear", **opts)

    def refused(*a, **k):
        raise AssertionError("the server built client data")

    monkeypatch.setattr(problem, "client_objectives", refused)
    got = fs.solve(problem, method="one-shot", clients=K, engine="processes")
    here = get_problem("ridge-linear", penalty="server", **opts)
    want = fs.solve(here, method="one-shot", clients=K, transport=_unbatched(here))
    assert torch.equal(got.theta, want.theta) and got.final == want.final


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


# --- what any engine that only carries messages gets from the driver ---------------------------------------


class _CountingTransport(LocalTransport):
    """In-process clients built from the job (as a client process builds them), with the optional hooks the driver
    asks of an engine's transport: ``engine_info()``, ``final_metrics(problem, θ)`` and ``close()``."""

    def __init__(self, job, clients):
        problem = get_problem(job["problem"], **job["options"])
        torch.manual_seed(job["seed"])  # the driver's order, as a client process does it
        objs = problem.client_objectives(clients, seed=job["seed"])
        super().__init__([Client(i, o) for i, o in enumerate(objs)], vectorize=False)
        self.described = {i: {"n": o.n_residuals, "p": o.n_params, "linear": False} for i, o in enumerate(objs)}
        self.asked, self.closed = 0, False

    def ask(self, client_ids, request):
        self.asked += 1
        return super().ask(client_ids, request)

    def engine_info(self):
        return {"asked": self.asked}

    def final_metrics(self, problem, theta):
        return {"theta_norm": float(theta.norm())}

    def close(self):
        self.closed = True


def test_a_connect_engine_runs_the_drivers_run_and_adds_its_own_record_through_its_transport(no_data_here):
    """A new engine is one connect function: the run is the driver's (bitwise the unbatched in-process run: the
    same operations in the same order), the Result the driver's one constructor, and what is the engine's own
    comes from its transport's engine_info() / final_metrics(problem, θ); close() is called at the end."""
    from fedsciml.runtime.driver import ENGINE_KINDS, register_engine

    made = []

    def connect(job, clients):
        made.append(_CountingTransport(job, clients))
        return made[-1]

    register_engine("test-counting", connect=connect)
    try:
        got = fs.solve(no_data_here, method="gn", clients=K, engine="test-counting", rounds=2)
    finally:
        ENGINES.pop("test-counting")
        ENGINE_KINDS.pop("test-counting")
    want = fs.solve(get_problem("bratu", **OPTS), method="gn", clients=K,
                    transport=_unbatched(get_problem("bratu", **OPTS)), rounds=2)
    assert torch.equal(got.theta, want.theta)
    assert [r["loss"] for r in got.history] == [r["loss"] for r in want.history]
    (tr,) = made
    assert tr.closed and tr.asked > 0
    assert got.extra["engine"] == {"name": "test-counting", "asked": tr.asked}
    assert got.final["theta_norm"] == float(got.theta.norm())
    assert got.options["engine"] == "test-counting" and "engine" not in want.options


def test_the_parsers_offer_the_registrys_engines():
    """Engine names are the registry's in every parser: solve (and ridge) every engine, bench images local and
    the engines registered with a run of kind images (flower); a registered one appears without an edit."""
    pytest.importorskip("flwr")  # the flower engine's image run (Flower needs Python ≥ 3.11: absent on 3.10)
    from fedsciml.cli import build_parser
    from fedsciml.runtime.driver import ENGINE_KINDS, engines_for, register_engine

    assert engines_for("images") == ["local", "flower"] and set(engines_for()) >= {"local", "flower", "processes"}
    # bench images --engine flower runs the registry's function: Flower's image run (which refuses fipa-fc first)
    with pytest.raises(ValueError, match="engine 'flower' does not run fipa-fc"):
        ENGINE_KINDS["flower"]["images"](protocol="multi-round", methods=["fipa-fc"])
    with pytest.raises(ValueError, match="kinds beyond the problem kinds"):
        register_engine("test-bad", connect=lambda job, clients: None, kinds={"ridge": print})
    assert "test-bad" not in ENGINES
    register_engine("test-images", connect=lambda job, clients: None, kinds={"images": lambda **kw: kw})
    try:
        assert build_parser().parse_args(["bench", "images", "--engine", "test-images"]).engine == "test-images"
        assert build_parser().parse_args(["solve", "bratu", "--engine", "test-images"]).engine == "test-images"
        from fedsciml.cli.common import CLIError

        # processes runs no image setting: not offered to bench images (a bad choice is one CLIError line)
        with pytest.raises(CLIError, match="invalid choice: 'processes'"):
            build_parser().parse_args(["bench", "images", "--engine", "processes"])
    finally:
        ENGINES.pop("test-images")
        ENGINE_KINDS.pop("test-images")


_WAVE = '''
import math, torch
import fedsciml as fs

@fs.register
class Wave(fs.PDE):
    """a user's problem: −u″ = π² sin πx"""
    name = "plugin-wave-processes"
    def exact(self, x):
        return torch.sin(math.pi * x[..., 0])
    def equation(self, u, x):
        return -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
'''


@pytest.mark.slow
def test_a_plugin_problem_runs_on_the_client_processes(tmp_path):
    """The client processes import the module that registered the job's problem (a --plugin file here); they
    answered 'unknown problem' before. A problem registered by the running script itself cannot be imported by
    another process: refused in one line, exit 2."""
    import subprocess
    import sys

    plugin = tmp_path / "wave.py"
    plugin.write_text(_WAVE)
    r = subprocess.run([sys.executable, "-m", "fedsciml", "--plugin", str(plugin), "solve", "plugin-wave-processes",
                        "--clients", "2", "--method", "gn", "--rounds", "1", "--n-interior", "20",
                        "--engine", "processes", "--quiet"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "plugin-wave-processes: 2 client(s)" in r.stdout
    script = _WAVE + "fs.solve('plugin-wave-processes', method='gn', clients=2, engine='processes', rounds=1)\n"
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        "ValueError: engine 'processes': problem 'plugin-wave-processes' is registered by the script being run "
        "(__main__), which a client process cannot import; register it in a module (--plugin FILE, "
        "FEDSCIML_PLUGINS or an installed package)")
