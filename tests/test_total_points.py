"""Issue 37: one problem, one set of points — ``n_interior`` / ``n_boundary`` are totals, drawn once whatever the
number of clients and dealt out among them (problems.pinn.PINNProblem.client_objectives, problems.domain.DomainPDE),
so a centralized run and a federated one of one problem train on the same points."""
import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.problems.base import TOTAL_POINTS, split_counts
from fedsciml.problems.poisson import Poisson
from fedsciml.problems.registry import apply_preset


def _pooled(objs) -> dict:
    """Each residual part's points over all clients, rows sorted (lexicographically): the pooled set."""
    out: dict = {}
    for o in objs:
        for q in o.parts:
            out.setdefault(q.name, []).append(q.points[0] if isinstance(q.points, tuple) else q.points)
    sets = {}
    for name, pts in out.items():
        x = torch.cat(pts).numpy()
        sets[name] = x[np.lexsort(x.T[::-1])]
    return sets


@pytest.mark.parametrize("name, opts", [("bratu", {"n_interior": 37}),
                                        ("poisson", {"dim": 3, "n_interior": 1003, "n_boundary": 20}),
                                        ("poisson", {"dim": 5, "n_interior": 301, "n_boundary": 50,
                                                     "boundary_sampling": "uniform", "sampling": "uniform"}),
                                        ("heat", {"n_interior": 101, "n_boundary": 23}),
                                        ("kovasznay", {})])
@pytest.mark.parametrize("K", [2, 3, 4])
def test_centralized_and_k_clients_see_the_same_points_bitwise(name, opts, K):
    p = fs.get_problem(name, **opts)
    one, many = _pooled(p.client_objectives(1, seed=7)), _pooled(p.client_objectives(K, seed=7))
    # the same draw (one seed, whatever K) dealt out: every part holds the same points, bit for bit
    assert one.keys() == many.keys()
    for part in one:
        assert one[part].shape == many[part].shape and np.array_equal(one[part], many[part]), part


def test_a_count_not_divisible_by_the_clients_gives_the_first_ones_one_more():
    assert split_counts(10, 4) == [3, 3, 2, 2] and split_counts(3, 3) == [1, 1, 1] and split_counts(7, 1) == [7]
    objs = fs.get_problem("poisson", dim=3, n_interior=1003).client_objectives(4, seed=0)
    assert [o.parts[0].n_points for o in objs] == [251, 251, 251, 250]
    # slabs along x₁: every point of client k lies at or left of every point of client k + 1
    xs = [o.parts[0].points[:, 0] for o in objs]
    assert all(float(a.max()) <= float(b.min()) for a, b in zip(xs, xs[1:]))
    with pytest.raises(fs.ProblemError, match="3 interior points cannot be split among 4 clients"):
        fs.get_problem("bratu", n_interior=3).client_objectives(4)


def test_gn_with_four_clients_equals_centralized_lm_on_the_pooled_points():
    """The iterates of gn (4 clients) and centralized LM (1 client) on the same points: the same sums in another
    order, so equal to round-off — a step's relative difference within κ(JᵀJ + μI)·eps, times 100 for the
    accepted steps and the sums' lengths."""
    opts = {"dim": 2, "n_interior": 203, "n_boundary": 9}
    c = fs.solve("poisson", method="centralized", clients=1, max_iters=3, problem_options=opts, hidden=[16, 16])
    g = fs.solve("poisson", method="gn", clients=4, rounds=3, problem_options=opts, hidden=[16, 16])
    taken = [h.get("accepted") for h in c.history[1:]]
    assert taken == [h.get("accepted") for h in g.history[1:]] and any(taken)  # the same LM decisions
    p = fs.get_problem("poisson", **opts, hidden=[16, 16])
    obj = p.centralized_objective(1, seed=0)
    th0 = p.init_params(0)
    J = obj.residual_and_jacobian(th0)[1]
    mu = float(c.history[0]["mu"])
    ev = torch.linalg.eigvalsh(J.T @ J)
    kappa = float((ev[-1] + mu) / (ev[0].clamp(min=0) + mu))
    tol = 100 * kappa * torch.finfo(torch.float64).eps
    step_c, step_g = c.theta - th0, g.theta - th0
    assert float((step_g - step_c).norm() / step_c.norm()) <= tol, tol
    assert abs(g.final["loss"] - c.final["loss"]) <= tol * c.history[0]["loss"]


def test_the_presets_hold_the_authors_counts_whatever_the_method_and_the_help_says_totals():
    for name, clients in [("exp16", 1), ("exp16", 4)]:
        popts, _ = apply_preset(Poisson, name, {}, {})
        p = Poisson(**popts)
        objs = p.client_objectives(clients, seed=0)
        counts = {q: sum(x.n_points for o in objs for x in o.parts if x.name == q) for q in ("interior", "boundary")}
        assert counts == {"interior": 3000, "boundary": 500}  # their N_Ω and N_∂Ω, with 1 client or 4
    assert TOTAL_POINTS in Poisson.specs()["n_interior"][1].help
    assert TOTAL_POINTS in fs.get_problem("heat-nd").specs()["n_interior"][1].help
