"""Flower as an engine: codec, ClientApp, runs through Flower's simulation runtime (``flwr run`` on a simulation
SuperLink) and through a deployment of stock ``flower-superlink`` / ``flower-supernode`` processes.

The simulation runs share one ``flwr run`` (Ray starts once for the
module: :func:`fedsciml.engines.flower.simulation.solve_many`).  Every run
that starts processes is bounded in time (it fails, never hangs).  Bitwise equality is
asserted against the in-process run that evaluates each client on its own
(``LocalTransport(vectorize=False)``) with the same torch thread count: a
Flower node holds one client, so the operations and their order are the
same; the default in-process run vectorizes clients and may differ in the
last bits (measured, see ``test_vectorized_local_run_is_close``).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

import fedsciml as fs  # noqa: E402
from fedsciml.runtime.client import Client  # noqa: E402
from fedsciml.runtime.transport import Failure, LocalTransport, Reply, Request  # noqa: E402
from fedsciml.engines.flower import codec  # noqa: E402
from fedsciml.engines.flower.apps import answer_content, table_objective  # noqa: E402
from fedsciml.problems import get_problem  # noqa: E402

K = 2
# bratu with a small network (97 parameters, not the default 2209) in the simulation and the in-process tests: what
# they prove — bitwise equality of a Flower run and the in-process one, the model files, the summary table — holds at
# any size; gn's messages (J_kᵀJ_k, p² floats) are 500× smaller, and each node's Jacobian with them.  The stock
# deployment below keeps the default network: its kill-and-restart timing was measured with it
BRATU = {"hidden": [8, 8]}
FEDADAM = dict(clients=K, seed=0, rounds=2, local_steps=10)  # FedAdam on sin1d over Flower (one simulated job)


class Run:
    """An in-process run's θ and history (what the bitwise comparisons need)."""

    def __init__(self, theta, rows, info):
        self.theta, self.history, self.extra = theta, rows, info


def local_run(problem, method, clients, seed=0, **opts):
    """``method`` in process, its clients evaluated one by one (as :func:`fedsciml.runtime.driver.solve` sets it up:
    planned by the driver — one-shot on a ridge problem counts σ once at the server, as the Flower App's run does)."""
    from fedsciml.runtime.driver import plan

    p = plan(problem, method, clients, seed, **opts)
    transport = unbatched(p.problem, clients, seed)
    torch.manual_seed(seed)
    theta0 = p.problem.init_params(seed)
    objs = [transport.clients[c].objective for c in transport.client_ids]
    return Run(*p.spec(p.problem, objs, theta0, p.problem.evaluate, p.config, seed=seed, transport=transport))


def unbatched(problem, clients, seed=0):
    """In-process clients evaluated one by one (what one Flower node per client computes)."""
    torch.manual_seed(seed)
    objs = problem.client_objectives(clients, seed=seed)
    return LocalTransport([Client(i, o) for i, o in enumerate(objs)], vectorize=False)


# --- codec and ClientApp (no Flower runtime) ------------------------------------------------


@pytest.mark.parametrize("packed", [True, False])
def test_request_and_reply_cross_flower_records_bitwise(packed, monkeypatch):
    """Both message forms — one packed bytes value (small messages), or one Flower Array per tensor — keep
    every dtype and bit; a malformed packed message is a ValueError (the transport rejects it)."""
    if not packed:
        monkeypatch.setattr(codec, "COMPACT_MAX_BYTES", 0)
    g = torch.Generator().manual_seed(0)
    theta = torch.randn(257, dtype=torch.float64, generator=g) * 1e-300  # subnormal-scale bits survive too
    req = Request("update", {"theta": theta, "empty": torch.zeros(0, dtype=torch.float64)},
                  {"local": {"solver": "gn", "steps": 3}, "rank": 0, "round": 2, "note": None})
    back, job = codec.request_from_content(codec.request_content(req, {"problem": "bratu", "clients": 2}))
    assert back.query == req.query and back.config == req.config and job == {"problem": "bratu", "clients": 2}
    assert back.tensors["theta"].dtype == torch.float64 and torch.equal(back.tensors["theta"], theta)
    assert back.tensors["empty"].shape == (0,)
    rep = Reply({"H": torch.randn(10, dtype=torch.float64, generator=g),
                 "x32": torch.randn(3, dtype=torch.float32, generator=g)}, {"steps": 7})
    got = codec.reply_from_content(codec.reply_content(rep))
    assert got.metrics == {"steps": 7}
    for k in rep.message:  # same dtype, same bits
        assert got.message[k].dtype == rep.message[k].dtype and torch.equal(got.message[k], rep.message[k])
    fail = codec.reply_from_content(codec.reply_content(Failure("client failed: boom")))
    assert isinstance(fail, Failure) and fail.reason == "client failed: boom"
    content = codec.reply_content(rep)
    assert (codec.PACKED in content.config_records) is packed and (codec.TENSORS in content.array_records) is not packed
    if packed:
        from flwr.app import ConfigRecord, RecordDict

        with pytest.raises(ValueError, match="malformed packed message"):
            codec.reply_from_content(RecordDict({codec.PACKED: ConfigRecord({"bytes": b"\x05garbage"})}))


def test_client_app_answers_like_an_in_process_client_and_reports_failures():
    p = get_problem("bratu", **BRATU)
    job = {"problem": "bratu", "options": dict(p.options), "clients": K, "seed": 0}
    theta = p.init_params(0)
    ref = unbatched(p, K).clients[1]
    req = Request("gn_stats", {"theta": theta}, {"form": "normal"})
    got = codec.reply_from_content(answer_content(codec.request_content(req, job), {"partition-id": 1}))
    want = ref.answer(req)
    assert set(got.message) == set(want.message)
    for k in want.message:  # one client, the same operations: bitwise
        assert torch.equal(got.message[k], want.message[k])
    desc = codec.reply_from_content(answer_content(codec.request_content(Request("describe"), job),
                                                   {"partition-id": 1}))
    assert desc.metrics == {"partition_id": 1, "n": ref.n, "p": theta.numel(), "linear": False}
    bad = codec.reply_from_content(answer_content(codec.request_content(req, job), {"partition-id": 5}))
    assert isinstance(bad, Failure) and "partition 5" in bad.reason and "outside 0..1" in bad.reason
    wrong = codec.reply_from_content(answer_content(codec.request_content(Request("gn_stats", {"theta": theta[:3]}),
                                                                          job), {"partition-id": 0}))
    assert isinstance(wrong, Failure) and wrong.reason.startswith("partition 0: ")


def test_a_node_process_draws_a_runs_split_once_for_every_partition(monkeypatch):
    """A Ray worker answers whichever partition it is handed: it draws the run's split once and serves each
    partition's objective from it — the same objective as a fresh split (bitwise residuals)."""
    from fedsciml.engines.flower import apps
    from fedsciml.problems.pde1d import Bratu

    monkeypatch.setattr(apps, "_CACHE", type(apps._CACHE)())
    monkeypatch.setattr(apps, "_SPLITS", {})
    drawn = []
    split = Bratu.client_objectives
    monkeypatch.setattr(Bratu, "client_objectives", lambda self, *a, **k: drawn.append(1) or split(self, *a, **k))
    p = get_problem("bratu")
    job = {"problem": "bratu", "options": dict(p.options), "clients": 3, "seed": 4, "threads": 1}
    got = [apps._client(job, pid, {"partition-id": pid}) for pid in (2, 0, 1)]
    assert len(drawn) == 1 and [c.cid for c in got] == [2, 0, 1]
    torch.manual_seed(4)
    fresh = split(p, 3, seed=4)
    theta = p.init_params(0)
    for c in got:
        assert torch.equal(c.objective.residual(theta), fresh[c.cid].residual(theta))


def test_starting_a_simulation_imports_no_flower():
    """The process that starts Flower's simulation (the CLI, ``fs.solve``) only launches Flower's programs and
    reads their result files: it does not import flwr (that cost ~1 s before anything started)."""
    import subprocess
    import sys

    code = ("import sys, fedsciml.engines, fedsciml.engines.flower.simulation, fedsciml.engines.flower.resultio; "
            "from fedsciml.engines.flower import require_flower; require_flower(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('flwr', 'ray')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"


def test_flower_processes_do_not_spin_openmp_threads(monkeypatch):
    """The ServerApp and the Ray workers share the cores: their OpenMP threads wait passively (a caller's own
    OMP_WAIT_POLICY is kept)."""
    from fedsciml.engines.flower.deploy import LocalSuperLink

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert LocalSuperLink(simulation=True).env()["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert LocalSuperLink(simulation=True).env()["OMP_WAIT_POLICY"] == "ACTIVE"


def test_client_app_sends_its_share_of_the_laplace_std_and_no_residual():
    """``final_stats`` on a node: J_kᵀJ_k (packed), the sum of squares and count of its data residuals; the
    server's combination equals ``final_metrics`` in process (the same operations per client: bitwise)."""
    p = get_problem("heat-inverse")
    job = {"problem": "heat-inverse", "options": dict(p.options), "clients": K, "seed": 0}
    theta = p.init_params(0)
    req = codec.request_content(Request("final_stats", {"theta": theta}), job)
    shares = [codec.reply_from_content(answer_content(req, {"partition-id": k})).message for k in range(K)]
    assert all(set(s) == {"H", "data_ss", "data_n"} and s["data_ss"].numel() == 1 for s in shares)
    torch.manual_seed(0)
    assert p.final_metrics_from(theta, shares) == p.final_metrics(theta, p.client_objectives(K, seed=0))


def test_table_objective_reads_csv_and_npz_and_names_bad_input(tmp_path):
    X = np.arange(12.0).reshape(4, 3) / 7
    y = np.array([1.0, -2.0, 0.5, 3.0])
    with open(tmp_path / "t.csv", "w") as f:
        f.write("a,b,y,c\n" + "".join(f"{float(r[0])!r},{float(r[1])!r},{float(t)!r},{float(r[2])!r}\n" for r, t in zip(X, y)))
    np.savez(tmp_path / "t.npz", X=X, y=y)
    for path in ("t.csv", "t.npz"):
        obj = table_objective(str(tmp_path / path))
        assert torch.equal(obj.A, torch.as_tensor(X)) and torch.equal(obj.b, torch.as_tensor(y))
    with pytest.raises(ValueError, match="target column 'z' not in the header"):
        table_objective(str(tmp_path / "t.csv"), target="z")
    with open(tmp_path / "bad.csv", "w") as f:
        f.write("a,y\n1,x\n")
    with pytest.raises(ValueError, match="every value must be a number"):
        table_objective(str(tmp_path / "bad.csv"))
    with pytest.raises(ValueError, match="cannot be read"):  # a one-line CLI error, no traceback (issue 23)
        table_objective(str(tmp_path / "missing.csv"))


def test_ray_uses_loopback_only():
    """Ray (the simulation engine) as a single-machine cluster: its node address, hence every listener, is
    127.0.0.1 (Ray 2.55 would resolve ray.init(_node_ip_address="127.0.0.1") to the machine's address)."""
    from ray._private import services  # the address Ray gives its GCS, raylet and workers (pinned Ray 2.55)

    assert services.get_node_ip_address() == "127.0.0.1"


def test_engine_is_checked():
    with pytest.raises(ValueError, match="engine must be one of local, flower"):
        fs.solve("bratu", "gn", clients=2, rounds=1, engine="ray")
    from fedsciml.cli import main

    assert main(["solve", "bratu", "--clients", "2", "--engine", "grpc"]) == 2  # one line naming the choices


# --- Flower's simulation engine -----------------------------------------------------------------

RUNS = {
    "gn": ("bratu", "gn", dict(rounds=2, batched=False)),
    "fipa": ("bratu", "fipa", dict(rounds=2)),
    "fedavg": ("bratu", "fedavg", dict(rounds=2, local_steps=5)),
    "heat-inverse-gn": ("heat-inverse", "gn", dict(rounds=2, batched=False)),  # a DomainPDE: space-time, sensors, θ + k
    "ridge-gn": ("ridge-linear", "gn", dict(rounds=1, batched=False)),
    "one-shot": ("ridge-linear", "one-shot", {}),
}


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """Every run of :data:`RUNS` through one Flower simulation, and the matching in-process runs;
    plus a gn run checkpointed after 2 rounds and resumed to 3 (key ``"resumed"``: (resumed, 3 rounds)); FedAdam
    on sin1d (``"fedadam"``: the Flower run only); a user's own PDE installed as a package with an entry point
    (``"own-pde"``); every listening socket of the run's process tree (``"listeners"``); the run's directory
    (``"workdir"``: each job's ``out``)."""
    import os
    import sys

    from _listeners import ListenerWatch
    from _own_pde import install_own_method, install_own_pde
    from fedsciml.engines.flower.simulation import solve_many

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the nodes use the server's thread count (sent with the job)
    ck = str(tmp_path_factory.mktemp("flower-ckpt"))
    work = str(tmp_path_factory.mktemp("flower-sim"))
    site = install_own_pde(str(tmp_path_factory.mktemp("site-packages")))
    install_own_method(site)  # examples/flower_own_method beside it: the method "my-avg", its own client query
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([site] + ([old_path] if old_path else []))
    sys.path.insert(0, site)
    try:
        probs = {name: get_problem(name, **(BRATU if name == "bratu" else {}))
                 for name in {r[0] for r in RUNS.values()} | {"sin1d"}}
        calls = [dict(problem=probs[pn], method=m, clients=K, seed=0, **o) for pn, m, o in RUNS.values()]
        calls += [dict(problem=probs["bratu"], method="gn", clients=K, seed=0, batched=False, rounds=r, checkpoint=ck,
                       resume=r == 3) for r in (2, 3)]
        calls.append(dict(problem=probs["bratu"], method="gn", clients=K, seed=0, batched=False, rounds=3))
        # examples/flower_ridge_sites.py: one CSV per site, one-shot DP ridge with leave-one-client-out CV
        ex = _example()
        paths, test, _ = ex.write_site_tables(str(tmp_path_factory.mktemp("sites")), K)
        table = get_problem("table", tables=paths, test_table=test)
        table_opts = [dict(dp_epsilon=eps, cv_sigmas=ex.SIGMAS) for eps in (float("inf"), 2.0)]
        calls += [dict(problem=table, method="one-shot", clients=K, seed=0, **o) for o in table_opts]
        own = get_problem("my-helmholtz", n_interior=40)  # found through the entry point (not imported here)
        calls.append(dict(problem=own, method="gn", clients=K, seed=0, batched=False, rounds=2))
        calls.append(dict(problem=probs["sin1d"], method="fedadam", **FEDADAM))  # tests/test_fedopt.py's run
        avg_opts = RUNS["fedavg"][2]
        calls.append(dict(problem=probs["bratu"], method="my-avg", clients=K, seed=0, **avg_opts))
        with ListenerWatch() as watch:
            flower = solve_many(calls, clients=K, workdir=work)
        own_method = (flower.pop(), local_run(probs["bratu"], "my-avg", K, **avg_opts))
        fedadam = flower.pop()
        own_run = flower.pop()
        resumed = (flower[-4], flower[-3])
        tables = flower[-2:]
        flower = flower[:len(RUNS)]
        local = [local_run(probs[pn], m, K, **o) for pn, m, o in RUNS.values()]
        tables_local = [local_run(table, "one-shot", K, **o) for o in table_opts]
        own_local = local_run(own, "gn", K, rounds=2)
    finally:
        torch.set_num_threads(threads)
        sys.path.remove(site)
        _forget_own_method()
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path
    return {**dict(zip(RUNS, zip(flower, local))), "resumed": resumed, "tables": (tables, tables_local, paths),
            "own-pde": (own_run, own_local, own), "listeners": watch, "workdir": work, "fedadam": fedadam,
            "own-method": own_method}


def _forget_own_method():
    """This process's registries as they were before the installed method plugin was loaded."""
    from _own_pde import forget_method

    forget_method("my-avg", "my_update", "my_fedsciml_method")


def _example():
    from _examples import load_example

    return load_example("flower_ridge_sites")


def test_dp_ridge_across_site_tables_on_flower(simulated):
    """Each node reads its own site table; one-shot DP fusion with leave-one-client-out CV equals the in-process
    run bit for bit (ε = ∞ and ε = 2: the same seeded noise per client), and at ε = ∞ pooled scikit-learn Ridge."""
    from sklearn.linear_model import Ridge

    (inf, eps2), (inf_lo, eps2_lo), paths = simulated["tables"]
    for fl, lo in ((inf, inf_lo), (eps2, eps2_lo)):
        assert torch.equal(fl.theta, lo.theta) and fl.extra["cv_loss"] == lo.extra["cv_loss"]
        assert fl.extra["cv_scored"] == K and fl.extra["rejections"] == []
    sigma = inf.extra["sigma_used"]
    X = np.vstack([np.loadtxt(q, delimiter=",", skiprows=1)[:, :-1] for q in paths])
    y = np.concatenate([np.loadtxt(q, delimiter=",", skiprows=1)[:, -1] for q in paths])
    ref = torch.as_tensor(Ridge(alpha=sigma, fit_intercept=False, solver="cholesky").fit(X, y).coef_)
    assert torch.allclose(inf.theta, ref, rtol=1e-8, atol=1e-8 * float(ref.abs().max()))
    assert eps2.final["mse"] > inf.final["mse"]  # the noise costs utility on ~180 rows per site


def test_every_listener_of_a_flower_simulation_is_on_loopback(simulated):
    """The SuperLink, ``flwr run``, the simulation process and Ray's GCS, raylet and workers: every listening
    socket their process tree held while the run went (sampled from /proc every 0.25 s) is on 127.0.0.1/::1."""
    watch = simulated["listeners"]
    assert watch.samples > 10 and len({x[1] for x in watch.seen}) >= 2, watch.seen  # SuperLink and Ray were seen
    assert watch.public() == [], watch.public()


def test_the_apps_out_is_the_model_directory_solve_out_writes(simulated, tmp_path):
    """The App's ``out`` (here the engine's job directories) holds result.json, history.csv and the model;
    ``fs.load_model`` reads it and predicts what the model ``fs.save_model`` writes in process predicts."""
    import os

    fl, _ = simulated["gn"]
    out = os.path.join(simulated["workdir"], "generic", "job0")
    assert {"result.json", "history.csv", "model.json", "model.safetensors"} <= set(os.listdir(out))
    problem = get_problem("bratu", **BRATU)
    fs.save_model(fl, problem, str(tmp_path / "ref"))
    x = torch.linspace(0, 1, 33, dtype=torch.float64).reshape(-1, 1)
    assert torch.equal(fs.load_model(out)(x), fs.load_model(str(tmp_path / "ref"))(x))
    with open(os.path.join(out, "history.csv")) as f:
        assert len(f.read().strip().splitlines()) == len(fl.history) + 1


def test_a_users_own_pde_installed_with_an_entry_point_runs_on_flower(simulated):
    """examples/flower_own_pde as pip installs it: every node finds the problem by name through its entry point,
    and the run equals the in-process one bitwise."""
    fl, lo, problem = simulated["own-pde"]
    assert type(problem).__module__ == "my_fedsciml_pde"
    assert torch.equal(fl.theta, lo.theta) and fl.options["engine"] == "flower"
    assert [r["loss"] for r in fl.history] == [r["loss"] for r in lo.history]


def test_a_users_own_method_installed_with_an_entry_point_runs_on_flower(simulated):
    """examples/flower_own_method as pip installs it: the ServerApp finds the method by name and every node's
    ClientApp answers its own query (``my_update``) through the entry point; the run equals the in-process one
    bitwise (one client per node, the same operations in the same order), and FedAvg's, whose step it runs."""
    fl, lo = simulated["own-method"]
    assert torch.equal(fl.theta, lo.theta) and fl.options["engine"] == "flower"
    assert [r["loss"] for r in fl.history] == [r["loss"] for r in lo.history]
    fedavg_flower, _ = simulated["fedavg"]
    assert torch.equal(fl.theta, fedavg_flower.theta) and fl.extra["rejections"] == []


def test_flower_run_checkpoints_and_resumes(simulated):
    resumed, straight = simulated["resumed"]
    assert resumed.extra["resumed"] is True and resumed.extra["rounds"] == 3
    assert torch.equal(resumed.theta, straight.theta)  # the same LM state continued: the same operations


@pytest.mark.parametrize("run", list(RUNS))
def test_flower_simulation_is_bitwise_equal_to_in_process(simulated, run):
    fl, lo = simulated[run]
    # one client per node, the same operations in the same order, the same thread count: bitwise
    assert torch.equal(fl.theta, lo.theta)
    # every history field but the clock: losses, test metrics (the server's test set is the split's), floats
    assert [{k: v for k, v in r.items() if k != "time_s"} for r in fl.history] == \
        [{k: v for k, v in r.items() if k != "time_s"} for r in lo.history]
    assert fl.extra["rounds"] == lo.extra["rounds"] and fl.options["engine"] == "flower"
    eng = fl.extra["engine"]
    assert eng["name"] == "flower" and eng["exchanges"] > 0 and sorted(eng["nodes"]) == ["0", "1"]
    assert fl.extra["rejections"] == []


def test_inverse_problem_reports_its_laplace_std_on_flower(simulated):
    """heat-inverse over Flower reports ``coef_k_std`` (and ``noise_sigma``) as ``fs.solve`` does in process:
    the nodes send their shares (J_kᵀJ_k, the sum of squares and count of their data residuals — no residual),
    the server combines them with the in-process code (bitwise in one process: the test above).  Across the
    Ray workers and the ServerApp process the std agreed to 1.2e-8 relative, not bitwise: it is a diagonal
    entry of the pseudo-inverse of an ill-conditioned Σ J_kᵀJ_k, which magnifies last-bit differences of the
    products between processes (BLAS kernels); hence a tolerance."""
    fl, _ = simulated["heat-inverse-gn"]
    p = get_problem("heat-inverse")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        want = p.final_metrics(fl.theta, p.client_objectives(K, seed=0))
    finally:
        torch.set_num_threads(threads)
    assert want["coef_k_std"] > 0
    assert fl.final["coef_k_std"] == pytest.approx(want["coef_k_std"], rel=1e-6)
    assert fl.final["noise_sigma"] == pytest.approx(want["noise_sigma"], rel=1e-12)


@pytest.mark.parametrize("run", ["ridge-gn", "one-shot"])
def test_ridge_on_flower_is_the_pooled_ridge_solution(simulated, run):
    fl, _ = simulated[run]
    p = get_problem("ridge-linear")
    pooled = p.centralized_objective(K, seed=0)
    A, b = pooled.A, pooled.b
    w = torch.linalg.lstsq(A, b).solution  # independent reference (one undamped GN step is the solution)
    assert torch.allclose(fl.theta, w, rtol=1e-9, atol=1e-12 * float(w.abs().max()))


def test_fedadam_over_flower_equals_in_process(simulated):
    """FedAdam (fedsciml.methods.fedopt) over Flower's simulation: the same strategy and loop, Flower carries the
    messages; against the default (vectorized) in-process run: equal to round-off (one thread per node there).
    One job of this module's Flower simulation (it had a simulation of its own in tests/test_fedopt.py)."""
    flower = simulated["fedadam"]
    local = fs.solve("sin1d", "fedadam", **FEDADAM)
    assert flower.extra["engine"]["name"] == "flower"
    assert flower.final["mse"] == pytest.approx(local.final["mse"], rel=1e-9)


def test_vectorized_local_run_is_close(simulated):
    fl, _ = simulated["gn"]
    # vectorized across clients: round-off may differ
    vec = fs.solve(get_problem("bratu", **BRATU), "gn", clients=K, rounds=2)
    assert torch.allclose(fl.theta, vec.theta, rtol=0, atol=1e-10 * float(vec.theta.abs().max()))
    assert json.dumps(fl.to_dict()["final"])  # the Result serializes like any other


# --- a real deployment: SuperLink and SuperNodes as processes on 127.0.0.1 -----------------------


DEPLOY_WAIT_S = 900.0  # a stock SuperNode starts a flwr-clientapp process per message: seconds each when loaded


def _local_reference(problem_name, method, **opts):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the deployment's ClientApps and ServerApp run one thread each
    try:
        return local_run(get_problem(problem_name), method, K, **opts)
    finally:
        torch.set_num_threads(threads)


DEPLOY_JOBS = {"gn": ("bratu", "gn", dict(rounds=1, batched=False)),
               "one-shot": ("ridge-linear", "one-shot", {})}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """One ``flwr run`` of two jobs — gn on bratu, then one-shot ridge — on a stock SuperLink and 2 stock
    SuperNodes on 127.0.0.1 (free ports), with SuperNode 1 killed and restarted during gn; the results and
    the deployment's log directory.  Every process it starts (SuperLink, SuperNodes and their ClientApp
    processes, ``flwr run``) is stopped when the module ends, also when a test or this fixture fails."""
    import time

    from fedsciml.engines.flower.deploy import LocalDeployment

    from _listeners import ListenerWatch

    d = LocalDeployment(K, str(tmp_path_factory.mktemp("flower-deploy")), threads=1)
    watch = ListenerWatch().__enter__()
    with d:
        outs = {name: d.dir / f"{name}-out" for name in DEPLOY_JOBS}
        jobs = [{"kind": "solve", "problem": pn, "method": m, "clients": K, "seed": 0, "problem_options": {},
                 "options": o, "out": str(outs[name]), "timeout": 180.0, "connect_timeout": 180.0}
                for name, (pn, m, o) in DEPLOY_JOBS.items()]
        (d.dir / "jobs.json").write_text(json.dumps(jobs))
        log = d.dir / "node1.log"

        def received():  # messages the stock SuperNode of site 1 pulled (its own INFO line per message)
            return log.read_text(errors="replace").count("Receiving: query.")

        before = received()
        proc = d.submit_config({"problem": "bratu", "clients": K, "jobs": str(d.dir / "jobs.json")}, "both")
        end = time.monotonic() + DEPLOY_WAIT_S
        while received() < before + 2:  # node 1 pulled describe and θ₀'s statistics request
            assert proc.poll() is None and time.monotonic() < end, d.tail("flwr-run-both")
            time.sleep(0.2)
        d.kill("node1")
        time.sleep(2.0)  # the request in flight is lost with the node
        d.start_node(1)
        results = dict(zip(outs, d.wait(proc, list(outs.values()), DEPLOY_WAIT_S)))
        results["listeners"] = watch
        results["outs"] = outs
        yield results
    watch.__exit__(None, None, None)
    assert not d.procs  # stopped (the context manager kills each process group it started)


def test_every_listener_of_a_local_deployment_is_on_loopback(deployed):
    """A stock SuperLink, 2 stock SuperNodes, their ClientApp processes and ``flwr run``: every listening socket
    of the process tree while the deployment ran is on 127.0.0.1/::1; and the run's ``out`` loads as a model."""
    watch = deployed["listeners"]
    assert watch.samples > 10 and any(c.startswith("flower-superlin") for _, c, _, _ in watch.seen), watch.seen
    assert watch.public() == [], watch.public()
    u = fs.load_model(str(deployed["outs"]["gn"]))
    assert u(torch.linspace(0, 1, 5, dtype=torch.float64).reshape(-1, 1)).shape == (5,)


def test_deployment_gn_and_one_shot_are_bitwise_equal_to_in_process(deployed):
    """Stock processes, one client per node, one thread everywhere: the same operations as the in-process run
    that evaluates each client on its own — bitwise, for gn across the kill and restart of a node, and for
    the one-shot ridge run after it (on the restarted node)."""
    for name, (pn, m, o) in DEPLOY_JOBS.items():
        res, ref = deployed[name], _local_reference(pn, m, **o)
        assert torch.equal(res.theta, ref.theta), name
        assert [r["loss"] for r in res.history] == [r["loss"] for r in ref.history], name
        assert res.extra["engine"]["name"] == "flower"
    one = deployed["one-shot"]
    assert one.extra["floats_up"] == _local_reference("ridge-linear", "one-shot").extra["floats_up"]
    assert deployed["one-shot"].extra["rejections"] == []


def test_deployment_survives_a_killed_node_that_comes_back(deployed):
    """gn needs every client: a killed SuperNode's requests fail (logged with node and reason), gn asks
    again, and the restarted node (a new Flower node id, the same partition id) rejoins."""
    res = deployed["gn"]
    back = res.extra["engine"]["rejoined"]
    assert [b["client"] for b in back] == [1] and back[0]["new_node"] != back[0]["old_node"]
    # within one exchange's timeout the restarted node is asked in place of the dead one; an exchange that
    # failed first is logged with the node and the reason — no answer in time, undeliverable or "node
    # unavailable": a dropout (info["unanswered"]); another error reply: a rejection — and gn asks again
    missed = res.extra["rejections"] + res.extra.get("unanswered", [])
    assert all(r["reason"].startswith("node ") and f"(client {r['client']})" in r["reason"] for r in missed), missed
    if missed:
        assert res.extra["retried_requests"] >= 1


# --- bench images on Flower's simulation engine -----------------------------------------------------


def test_image_clients_built_on_nodes_give_the_in_process_run():
    """Each virtual node rebuilds its image client from the split's plain description (image_client); FedAvg
    for 2 rounds over Flower's simulation runtime gives the in-process run's history, accuracies and floats
    (one client per node, one thread: the same float32 operations); fipa-fc is refused in one line."""
    from fedsciml.engines.flower.images import run_setting
    from fedsciml.images import bench
    from fedsciml.images import methods as M

    setting = dict(dataset="digits", model="linear", clients=K, alpha=0.5, protocol="rounds", rounds=2,
                   methods=["fedavg"], seeds=[0], cfg=M.TrainConfig(epochs=1))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fl = run_setting(wait_s=900.0, **setting)
        lo = bench.run_setting(progress=lambda s: None, **setting)
    finally:
        torch.set_num_threads(threads)
    assert fl["setting"]["engine"] == "flower" and fl["setting"]["flower"][0]["exchanges"] > 0
    assert len(fl["runs"]) == len(lo["runs"]) == 1
    a, b = fl["runs"][0], lo["runs"][0]
    drop = ("time_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a["history"]] == \
        [{k: v for k, v in r.items() if k not in drop} for r in b["history"]]
    assert a["final"] == b["final"]
    with pytest.raises(ValueError, match="does not run fipa-fc"):
        run_setting(dataset="digits", model="linear", clients=K, protocol="rounds", rounds=1)


# --- the Flower App's ServerApp: run config and table ------------------------------------------------


def test_server_app_prints_the_cli_table(capsys):
    """The table the ServerApp logs after a run (``flwr run … --stream`` shows it) is the one ``python -m
    fedsciml solve`` prints: the same lines for the same Result."""
    from fedsciml.cli.solve import _print_summary
    from fedsciml.runtime.results import summary_lines

    for method, opts in (("fipa", dict(rounds=1)), ("gn", dict(rounds=1)), ("fedavg", dict(rounds=1))):
        r = fs.solve(get_problem("bratu", **BRATU), method, clients=K, **opts)
        _print_summary([r])
        assert capsys.readouterr().out.splitlines() == summary_lines([r])


def test_run_config_is_checked_in_one_line():
    from fedsciml.engines.flower.apps import job_from_run_config

    job = job_from_run_config({"problem": "bratu", "method": "fipa", "clients": 4, "method-options": '{"rounds": 3}'})
    assert job["clients"] == 4 and job["options"] == {"rounds": 3} and job["method"] == "fipa"
    with pytest.raises(ValueError, match=r"unknown run-config key\(s\) \['rounds'\]"):
        job_from_run_config({"problem": "bratu", "clients": 2, "rounds": 3})
    with pytest.raises(ValueError, match="method-options='\\[1\\]' must be a JSON object"):
        job_from_run_config({"problem": "bratu", "clients": 2, "method-options": "[1]"})
    with pytest.raises(ValueError, match="problem-options='{rounds' is not JSON"):
        job_from_run_config({"problem": "bratu", "clients": 2, "problem-options": "{rounds"})
    with pytest.raises(ValueError, match="clients must be ≥ 1, got 0"):
        job_from_run_config({"problem": "bratu", "clients": 0})


def test_engine_refuses_options_that_cannot_travel_as_json():
    from fedsciml.engines.flower.simulation import _job

    with pytest.raises(ValueError, match="option callback=.* is not a JSON value"):
        _job(dict(problem=get_problem("bratu"), method="gn", clients=K, callback=print), "")


def test_no_private_flower_module_is_imported():
    """Only Flower's public API: no flwr.supernode / flwr.supercore module, nothing with a leading underscore."""
    import pathlib
    import re

    pat = re.compile(r"flwr\.(supernode|supercore)|from flwr[.a-z_]*\._|import flwr[.a-z_]*\._")
    root = pathlib.Path(fs.__file__).resolve().parent
    hits = [f"{p}:{i}" for p in root.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
            if pat.search(line)]
    assert hits == []
