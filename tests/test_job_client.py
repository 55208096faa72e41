"""Building a client from a job is written once (:func:`fedsciml.runtime.client.job_client`): the processes
engine's client process and a Flower node both call it, and it gives the objective the driver builds in process
(same seed, same split: bitwise residuals)."""
import io
import json

import torch

from fedsciml.engines import processes
from fedsciml.engines.flower import apps
from fedsciml.problems import get_problem
from fedsciml.runtime import client as client_mod
from fedsciml.runtime.client import job_client

OPTS = {"n_interior": 60, "n_boundary": 6}


def _driver_split(p, clients, seed):
    torch.manual_seed(seed)  # the driver's order: seed, then the split
    return p.client_objectives(clients, seed=seed)


def test_job_client_is_the_drivers_objective_and_a_kept_split_is_not_drawn_again():
    p = get_problem("bratu", **OPTS)
    theta = p.init_params(0)
    fresh = _driver_split(p, 3, 5)
    kept: list = []

    def keep(build):  # an engine's keeper of the whole split
        if not kept:
            kept.extend(build())
        return kept

    for cid in (2, 0, 1):
        c = job_client(p, cid, 3, 5, split=keep)
        assert c.cid == cid and c.problem is p
        assert torch.equal(c.objective.residual(theta), fresh[cid].residual(theta))  # same operations: bitwise
    assert len(kept) == 3


def test_a_problem_with_its_own_client_builder_builds_only_that_client():
    calls = []

    class OwnFiles:  # like 'table': each client reads its own file only
        def client_objective(self, cid, clients, device="cpu"):
            calls.append((cid, clients, device))
            return get_problem("bratu", **OPTS).client_objectives(clients, seed=0)[cid]

        def client_objectives(self, *a, **k):
            raise AssertionError("the whole split is not drawn")

    c = job_client(OwnFiles(), 1, 2, 0)
    assert calls == [(1, 2, "cpu")] and c.cid == 1


def test_both_engines_build_their_client_through_it(monkeypatch):
    seen = []

    def spy(problem, cid, clients, seed, device="cpu", split=None):
        seen.append((problem.name, cid, clients, seed))
        return job_client(problem, cid, clients, seed, device, split)

    monkeypatch.setattr(client_mod, "job_client", spy)
    p = get_problem("bratu", **OPTS)
    theta = p.init_params(0)
    fresh = _driver_split(p, 3, 4)
    # a Flower node
    monkeypatch.setattr(apps, "_CACHE", type(apps._CACHE)())
    monkeypatch.setattr(apps, "_SPLITS", {})
    job = {"problem": "bratu", "options": dict(p.options), "clients": 3, "seed": 4, "threads": 1}
    node = apps._client(job, 2, {"partition-id": 2})
    assert torch.equal(node.objective.residual(theta), fresh[2].residual(theta))
    # a client process of the processes engine (its serving function, on in-memory pipes; an empty message ends it)
    threads = torch.get_num_threads()
    out = io.BytesIO()
    try:
        processes._serve({**job, "device": "cpu"}, 1, io.BytesIO(processes._LEN.pack(0)), out)
    finally:
        torch.set_num_threads(threads)
    hello = json.loads(out.getvalue()[processes._LEN.size:])
    assert hello["n"] == fresh[1].n_residuals and hello["p"] == theta.numel()
    assert seen == [("bratu", 2, 3, 4), ("bratu", 1, 3, 4)]
