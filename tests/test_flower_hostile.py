"""A hostile server: a Flower node decides what it reads (issue 31, finding 1).

Crafted jobs are sent to fedsciml's real ClientApp object (``fedsciml.engines.flower.apps.client_app``, called as
a SuperNode calls it: a Flower ``Message`` and a ``Context`` with the node's own config).  No job makes a node
open a path it was not configured to read, allocate past its own limits or change its thread count, and no
failure reply carries a byte of a file the node read.
"""
from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("flwr")

from fedsciml.engines.flower import apps, codec  # noqa: E402
from fedsciml.runtime.transport import Failure, Request  # noqa: E402

SECRET = "/etc/passwd"


def _secret_lines() -> list[str]:
    try:
        with open(SECRET) as f:
            return [ln.strip() for ln in f if ln.strip()][:5]
    except OSError:
        return []


SECRET_LINES = _secret_lines()  # read once, before any test watches which files are opened


def ask(job: dict, node_config: dict, query: str = "describe", tensors=None):
    """The node's reply to ``query`` with ``job``, through the ClientApp object a SuperNode runs."""
    import time

    from flwr.app import Context, Message, Metadata, RecordDict

    meta = Metadata(run_id=1, message_id="m1", src_node_id=0, dst_node_id=1, reply_to_message_id="", group_id="",
                    created_at=time.time(), ttl=600.0, message_type=f"query.{query}")
    msg = Message(codec.request_content(Request(query, tensors or {}), job), metadata=meta)
    ctx = Context(run_id=1, node_id=1, node_config=dict(node_config), state=RecordDict(), run_config={})
    return codec.reply_from_content(apps.client_app(msg, ctx).content)


@pytest.fixture(autouse=True)
def fresh_node(monkeypatch):
    monkeypatch.setattr(apps, "_CACHE", type(apps._CACHE)())
    monkeypatch.setattr(apps, "_SPLITS", {})
    for var in ("FEDSCIML_NODE_DATA_DIRS", "FEDSCIML_NODE_MAX_POINTS", "FEDSCIML_NODE_MAX_PARAMS",
                "FEDSCIML_THREADS"):
        monkeypatch.delenv(var, raising=False)


def assert_no_content(rep, code: str):
    assert isinstance(rep, Failure), rep
    assert f"[{code}]" in rep.reason, rep.reason
    assert "\n" not in rep.reason and len(rep.reason) < 400
    for line in SECRET_LINES:
        for field in line.split(":")[:1] + [line]:
            if len(field) >= 4:
                assert field not in rep.reason, rep.reason


def test_a_node_opens_no_file_a_server_names(monkeypatch):
    """The issue's attack: problem 'table' with the server's tables=['/etc/passwd', …] on a node without its own
    data.  The node refuses before opening (nothing is read or probed); with a node's own data the job's
    tables are ignored; a file the node is allowed to read never has its content in the reply."""
    opened = []
    real_open = open

    def spy(path, *a, **k):
        opened.append(os.fspath(path) if isinstance(path, (str, os.PathLike)) else path)
        return real_open(path, *a, **k)

    monkeypatch.setattr("builtins.open", spy)
    job = {"problem": "table", "options": {"tables": [SECRET, SECRET], "test_table": SECRET}, "clients": 2,
           "seed": 0}
    for query in ("describe", "oneshot_stats", "gn_stats"):
        rep = ask(job, {"partition-id": 0}, query)
        assert_no_content(rep, apps.REFUSED)
        assert "opens no file a server names" in rep.reason
    assert SECRET not in opened
    # a different-looking path to the same file, and a link to it: resolved, still refused
    job2 = {**job, "options": {"tables": ["/tmp/../etc/passwd", "x.csv"]}}
    assert_no_content(ask(job2, {"partition-id": 0}), apps.REFUSED)
    # an image job naming a data directory the node was not given
    img = {"images": {"dataset": "cifar10", "data_dir": "/etc", "clients": 2, "seed": 0, "model": "linear"},
           "clients": 2}
    assert_no_content(ask(img, {"partition-id": 0}), apps.REFUSED)
    monkeypatch.setattr("builtins.open", real_open)
    # the node's own data=PATH pointing at a file that is not a table: the reply withholds the reason
    assert_no_content(ask(job, {"partition-id": 0, "data": SECRET}), apps.NODE_DATA)
    # a node whose own configuration allows /etc (e.g. a simulation on the user's machine): still no content
    monkeypatch.setenv("FEDSCIML_NODE_DATA_DIRS", "/etc")
    assert_no_content(ask(job, {"partition-id": 0}), apps.NODE_DATA)


def test_a_node_does_not_allocate_what_a_server_asks(monkeypatch):
    """The job's sizes are bounded by the node's own limits before anything is drawn (default and node config)."""
    drawn = []
    from fedsciml.problems.pinn import PINNProblem

    monkeypatch.setattr(PINNProblem, "client_objectives", lambda self, *a, **k: drawn.append(1) or [])
    big = {"problem": "poisson", "options": {"n_interior": 10**9}, "clients": 2, "seed": 0}
    rep = ask(big, {"partition-id": 0})
    assert_no_content(rep, apps.REFUSED)
    assert "max-points=2,000,000 " in rep.reason and "1,000,000,200 points" in rep.reason  # 10⁹ + 200 in total (counts are totals)
    wide = {"problem": "ridge-linear", "options": {"dim": 3_000_000}, "clients": 2, "seed": 0}
    rep = ask(wide, {"partition-id": 0, "max-points": 10**8})
    assert_no_content(rep, apps.REFUSED)
    assert "max-params" in rep.reason
    tall = {"problem": "ridge-linear", "options": {"dim": 1_000_000}, "clients": 2, "seed": 0}
    rep = ask(tall, {"partition-id": 0, "max-points": 10**8})
    assert_no_content(rep, apps.REFUSED)
    assert "max-floats=250,000,000" in rep.reason
    many = {"problem": "bratu", "options": {}, "clients": 10**7, "seed": 0}
    assert_no_content(ask(many, {"partition-id": 0}), apps.REFUSED)
    # the node's own, tighter limit
    small = {"problem": "bratu", "options": {}, "clients": 2, "seed": 0}
    rep = ask(small, {"partition-id": 0, "max-points": 100})
    assert_no_content(rep, apps.REFUSED)
    assert "max-points=100" in rep.reason
    assert drawn == []
    # a malformed limit in the node's own config is the node's refusal, named
    rep = ask(small, {"partition-id": 0, "max-points": "lots"})
    assert_no_content(rep, apps.REFUSED)
    assert "max-points='lots'" in rep.reason


def test_a_node_sets_its_threads_and_device_itself(monkeypatch):
    """The job's ``threads`` and ``device`` are ignored: the node's own config (or ``$FEDSCIML_THREADS``) decides."""
    before = torch.get_num_threads()
    job = {"problem": "bratu", "options": {}, "clients": 2, "seed": 0, "threads": before + 7, "device": "meta"}
    rep = ask(job, {"partition-id": 1})
    assert not isinstance(rep, Failure), rep.reason
    assert torch.get_num_threads() == before
    try:
        ask(job, {"partition-id": 1, "threads": 1})
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_failure_codes_and_one_line():
    """Each failure reply is ``partition P: [code] one line``; an unexpected error's message stays on the node."""
    assert apps.failure_reason(3, apps.NodeRefused("no")) == "partition 3: [refused] no"
    assert apps.failure_reason(0, ValueError("a\nb")) == "partition 0: [bad-request] ValueError: a"
    assert apps.failure_reason(0, OSError("root:x:0:0")) == "partition 0: [error] OSError (the node's log has " \
                                                              "the reason)"
    assert len(apps.failure_reason(0, ValueError("x" * 10_000))) < 400
    rep = ask({"problem": "nosuch", "clients": 2}, {"partition-id": 0})
    assert_no_content(rep, apps.BAD_JOB)


def test_simulation_nodes_may_read_only_the_users_own_table_directories(tmp_path):
    """``engine='flower'`` (simulation on the user's machine) lets its virtual nodes read the directories of the
    tables the user named, and nothing else."""
    from fedsciml.engines.flower.simulation import job_data_dirs

    a = tmp_path / "a.csv"
    a.write_text("x,y\n1,2\n")
    jobs = [{"kind": "solve", "problem": "table", "problem_options": {"tables": [str(a), str(a)]}},
            {"kind": "solve", "problem": "bratu", "problem_options": {}}]
    assert job_data_dirs(jobs) == [os.path.realpath(tmp_path)]
    job = {"problem": "table", "options": {"tables": [str(a), str(a)]}, "clients": 2, "seed": 0}
    rep = ask(job, {"partition-id": 1, "data-dirs": str(tmp_path)})
    assert not isinstance(rep, Failure), rep.reason
    assert rep.metrics["n"] == 1


# --- the Flower App's run config and jobs file (issue 31 #7, issue 29 #7) ----------------------------------------

BASE = {"problem": "bratu", "method": "fipa", "clients": 2}


@pytest.mark.parametrize("change,msg", [
    ({"clients": 2.7}, r"clients=2.7 must be a whole number"),
    ({"clients": True}, r"clients=True must be a whole number"),
    ({"clients": 0}, r"clients must be ≥ 1, got 0"),
    ({"clients": 10**9}, r"clients=1000000000 must be in \[1, 100000\]"),
    ({"seed": -1}, r"seed=-1 must be in"),
    ({"timeout": -1.0}, r"timeout=-1.0 must be a number of seconds"),
    ({"timeout": float("nan")}, r"timeout=nan must be a number of seconds"),
    ({"connect-timeout": float("inf")}, r"connect-timeout=inf must be"),
    ({"problem": 3}, r"problem=3 must be a string"),
    ({"problem": "nosuch"}, r"nosuch"),
    ({"method": "nosuch"}, r"unknown method 'nosuch'"),
    ({"method": "centralized"}, r"does not run on Flower"),
    ({"method-options": '{"rounds": -1}'}, r"rounds"),
    ({"problem-options": '{"n_interior": -5}'}, r"n.interior"),
    ({"out": "/proc/1/nope/result.json"}, r"out '/proc/1/nope/result.json'"),
    ({"jobs": "/etc/passwd"}, r"jobs: '/etc/passwd' cannot be read as JSON"),
    ({"jobs": "/dev/zero"}, r"'/dev/zero' is not a regular file"),
    ({"jobs": "/nonexistent/jobs.json"}, r"cannot be read"),
], ids=lambda v: str(v) if isinstance(v, dict) else "")
def test_the_apps_run_config_is_checked_before_the_run(change, msg):
    from fedsciml.engines.flower.runconfig import jobs_of

    with pytest.raises(ValueError, match=msg) as e:
        jobs_of({**BASE, **change})
    assert "\n" not in str(e.value)
    for line in SECRET_LINES:
        assert line not in str(e.value)


def test_a_jobs_file_is_bounded_and_every_job_checked_first(tmp_path):
    from fedsciml.engines.flower.runconfig import jobs_of

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):  # would block forever on open
        jobs_of({**BASE, "jobs": str(fifo)})
    good = {"kind": "solve", "problem": "bratu", "method": "gn", "clients": 2, "seed": 0, "options": {"rounds": 1}}
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([good, {**good, "options": {"rounds": -1}}]))
    with pytest.raises(ValueError, match=r"job 1"):  # the second job's bad option stops the run before the first
        jobs_of({**BASE, "jobs": str(path)})
    path.write_text(json.dumps([good, {**good, "out": str(tmp_path)}]))
    with pytest.raises(ValueError, match="is a directory"):
        jobs_of({**BASE, "jobs": str(path)})
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nests deeper|cannot be read"):
        jobs_of({**BASE, "jobs": str(path)})
    path.write_text(json.dumps([good]))
    assert jobs_of({**BASE, "jobs": str(path)}) == [good]


def test_a_client_supernode_count_mismatch_is_one_line(monkeypatch):
    """Issue 29 #7: 3 clients on the federation's 2 SuperNodes — one line naming both numbers and the flag."""
    from fedsciml.engines.flower.transport import FlowerConnectError, FlowerTransport
    from fedsciml.runtime.transport import Reply

    class Grid:
        def get_node_ids(self):
            return [11, 12]

    monkeypatch.setattr(FlowerTransport, "_describe", lambda self, ids, t: {
        n: Reply({}, {"partition_id": i, "n": 5, "p": 3, "linear": False, "num_partitions": 2})
        for i, n in enumerate(ids)})
    with pytest.raises(FlowerConnectError) as e:
        FlowerTransport(Grid(), {}, 3, connect_timeout_s=30)
    msg = str(e.value)
    assert "clients=3" in msg and "2 SuperNode(s)" in msg and '--federation-config "num-supernodes=3"' in msg
    assert "\n" not in msg
    # the node reports its federation's size from its own config (Flower's simulation sets num-partitions)
    rep = ask({"problem": "bratu", "options": {}, "clients": 3, "seed": 0}, {"partition-id": 0, "num-partitions": 2})
    assert rep.metrics["num_partitions"] == 2
