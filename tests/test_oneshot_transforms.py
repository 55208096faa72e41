"""One-shot ridge on the runtime: one schema/sign for the statistics, DP noise and projection as client transforms.

Reference throughout: :func:`fedsciml.ridge.one_shot` on the clients' own rows ``(J_i, −r_i)`` at θ₀ = 0 — for the
ridge problems, ``[A_k; √(σ/K)·I]`` and ``[b_k; 0]`` (the penalty rows are part of each client's data there).
"""
import pytest
import torch

import fedsciml.methods  # noqa: F401  (registers the methods)
from fedsciml.methods import METHODS
from fedsciml.ridge import DPConfig, one_shot
from fedsciml.core.dp import client_generator
from fedsciml.core.stats import client_message, from_gn, fuse, to_gn


def _ridge(clients=5, dim=12):
    from fedsciml.problems import get_problem

    prob = get_problem("ridge-linear", dim=dim, n_samples=40)
    objs = prob.client_objectives(clients, seed=3)
    return prob, objs, prob.init_params(3)


def _rows(objs):
    return [(o.A, o.b) for o in objs]


def _flat(dp):
    """A DPConfig as the one-shot method's typed options (fedsciml.methods.oneshot.OneShotConfig)."""
    return {} if dp is None else dict(dp_epsilon=dp.epsilon, dp_delta=dp.delta, dp_clip_a=dp.c_a, dp_clip_b=dp.c_b,
                                      dp_clip=dp.clip, dp_central=dp.central, dp_noise_aware=dp.noise_aware_sigma)


def _grid(values):
    return [float(v) for v in values]  # a list-valued option is a list (the CLI's text is parsed at the edge)


def _close(a, b, rtol=1e-10):
    return float((a - b).norm() / b.norm()) <= rtol


def test_ridge_messages_are_the_gn_statistics_with_one_sign():
    prob, objs, w0 = _ridge()
    from fedsciml.runtime.client import Client

    for k, (A, b) in enumerate(_rows(objs)):
        msg = client_message(A, b)
        gn = Client(k, objs[k]).gn_message(w0)
        conv = to_gn(msg)
        assert torch.allclose(conv["H"], gn["H"], rtol=1e-12, atol=1e-12)
        assert torch.allclose(conv["g"], gn["g"], rtol=1e-12, atol=1e-12)   # g = Jᵀr = −Aᵀb = −h
        back = from_gn(conv)
        assert all(torch.equal(back[f], msg[f]) for f in msg)            # negation is exact: same bits
    # the runtime's one-shot and the ridge package's fusion of the adapted gn messages: the same model
    a, _, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate)
    msgs = {k: from_gn(Client(k, o).gn_message(w0)) for k, o in enumerate(objs)}
    assert _close(a, fuse(msgs, 0.0), 1e-12)
    with pytest.raises(ValueError, match="square-root form"):
        to_gn(client_message(*_rows(objs)[0], form="sqrt"))


@pytest.mark.parametrize("clip", ["scale", "separate"])
def test_local_dp_on_the_runtime_equals_ridge_one_shot_with_per_client_noise(clip):
    prob, objs, w0 = _ridge()
    dp = DPConfig(epsilon=2.0, delta=1e-5, c_a=1.5, c_b=2.0, clip=clip)
    a, rows, info = METHODS["one-shot"](prob, objs, w0, prob.evaluate, **_flat(dp), sigma=0.3, seed=7)
    w, rinfo = one_shot(_rows(objs), sigma=0.3, dp=dp, seed=7, noise_streams="per-client")
    assert _close(a, w) and info["noise_std"] == rinfo["noise_std"] > 0
    assert info["eig_clipped"] == rinfo["eig_clipped"]
    # per-client noise is the only stream: the default is the same, and the removed run-wide stream is refused
    w_default, _ = one_shot(_rows(objs), sigma=0.3, dp=dp, seed=7)
    assert torch.equal(w_default, w)  # bitwise: the default is the same code path with the same arguments
    with pytest.raises(ValueError, match="per-client"):
        one_shot(_rows(objs), sigma=0.3, dp=dp, seed=7, noise_streams="shared")
    # a DP message carries no count and no loss: p(p+1)/2 + p floats per client
    p = w0.numel()
    assert rows[1]["floats_up"] == len(objs) * (p * (p + 1) // 2 + p)


def test_per_client_noise_does_not_depend_on_who_answers():
    prob, objs, w0 = _ridge(6)
    dp = DPConfig(epsilon=3.0, delta=1e-5, noise_aware_sigma=True)
    seen = []
    a, rows, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate, **_flat(dp), sigma=0.1, seed=4, dropout=0.4,
                                     message_hook=lambda r, c, m: (seen.append(c), m)[1])
    assert 0 < len(seen) < 6
    data = _rows(objs)
    w, _ = one_shot([data[c] for c in seen], sigma=0.1, dp=dp, seed=4, noise_streams="per-client",
                    client_ids=seen)
    assert _close(a, w)
    # client c's noise is its own generator's first draws, whatever the others do
    g1, g2 = client_generator(4, seen[0]), client_generator(4, seen[0])
    assert torch.equal(torch.randn(5, generator=g1), torch.randn(5, generator=g2))
    assert not torch.equal(torch.randn(5, generator=client_generator(4, 0)),
                           torch.randn(5, generator=client_generator(4, 1)))


def test_central_dp_on_the_runtime_equals_ridge_one_shot():
    prob, objs, w0 = _ridge()
    dp = DPConfig(epsilon=1.0, delta=1e-5, central=True)
    a, _, info = METHODS["one-shot"](prob, objs, w0, prob.evaluate, **_flat(dp), sigma=0.2, seed=11)
    w, _ = one_shot(_rows(objs), sigma=0.2, dp=dp, seed=11)  # central noise: the sites' shares s/√K
    assert _close(a, w)
    # and it is the exact fusion of the clipped rows plus the K shares, each drawn by its site's own generator
    # with std s/√K (distributed Gaussian noise: the sum carries s; independent reference)
    from fedsciml.core import linalg, privacy
    from fedsciml.core.dp import noise_like, psd_repair
    from fedsciml.core.stats import ridge_solve

    clipped = [privacy.clip_rows(A, b, 1.0, 1.0, "scale") for A, b in _rows(objs)]
    A = torch.cat([c[0] for c in clipped])
    b = torch.cat([c[1] for c in clipped])
    p, K = A.shape[1], len(objs)
    shares = [noise_like(p, info["noise_std"] / K ** 0.5, client_generator(11, k)) for k in range(K)]
    eG, eh = sum(e["G"] for e in shares), sum(e["h"] for e in shares)
    G, _ = psd_repair(A.T @ A + linalg.unpack_upper(eG, p))
    # σ under DP is noise-aware by default: σ + √(2p)·s_total (the noise's spectral norm, public)
    sigma = 0.2 + (2 * p) ** 0.5 * info["noise_std_total"]
    assert info["sigma_used"] == pytest.approx(sigma, rel=1e-15)
    assert _close(a, ridge_solve(G, A.T @ b + eh, sigma), 1e-9)
    assert info["noise_shares"] == K and info["noise_std_total"] == pytest.approx(info["noise_std"])


def test_central_dp_refuses_a_sum_with_too_few_noise_shares():
    """Each share is sized for t sites: a sum with fewer carries less noise than the calibrated σ and is refused
    (ε not delivered); a smaller t tolerates the dropout with more noise."""
    from fedsciml.methods.oneshot import OneShotStrategy

    prob, objs, w0 = _ridge()
    dp = DPConfig(epsilon=1.0, delta=1e-5, central=True)

    st = OneShotStrategy(0.2, dp=dp, min_survivors=len(objs))
    st.size_noise_shares(len(objs))
    p = w0.numel()
    Hp, g = torch.zeros(p * (p + 1) // 2, dtype=torch.float64), torch.zeros(p, dtype=torch.float64)
    with pytest.raises(ValueError, match="noise shares reached the sum"):
        st.fuse_sum(Hp + torch.eye(p, dtype=torch.float64)[torch.triu_indices(p, p).unbind()], g, len(objs) - 1, p)
    with pytest.raises(ValueError, match="dp_min_survivors=9"):
        OneShotStrategy(0.2, dp=dp, min_survivors=9).size_noise_shares(len(objs))


@pytest.mark.parametrize("sketch", ["gaussian", "sparse", "srht"])
def test_projection_on_the_runtime_equals_ridge_one_shot(sketch):
    prob, objs, w0 = _ridge(4, dim=16)
    a, rows, info = METHODS["one-shot"](prob, objs, w0, prob.evaluate, project=6, project_sketch=sketch, seed=5)
    w, _ = one_shot(_rows(objs), sigma=0.0, project=6, sketch=sketch, seed=5)
    assert _close(a, w, 1e-12) and info["m"] == 6
    assert rows[1]["floats_up"] == 4 * (6 * 7 // 2 + 6 + 2)   # m×m statistics, loss and count
    # projection with local DP: the same clipped projected rows and the same per-client noise
    dp = DPConfig(epsilon=4.0)
    a, _, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate, project=6, project_sketch=sketch, **_flat(dp),
                                  sigma=0.05, seed=5)
    w, _ = one_shot(_rows(objs), sigma=0.05, project=6, sketch=sketch, dp=dp, seed=5, noise_streams="per-client")
    assert _close(a, w)


def test_projection_to_the_full_dimension_is_the_plain_path_bitwise():
    prob, objs, w0 = _ridge()
    a, _, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate)
    b, _, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate, project=w0.numel())
    assert torch.equal(a, b)   # project = p is no projection: the same request, the same operations


def test_one_shot_with_dp_crosses_bytes_bitwise():
    prob, objs, w0 = _ridge(6)
    kw = dict(dp_epsilon=2.0, project=8, seed=3, dropout=0.3, cv_sigmas=[0.01, 0.1, 1.0])
    a, rows_a, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate, **kw)
    b, rows_b, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate, transport="bytes", **kw)
    strip = [{k: v for k, v in r.items() if "time" not in k} for r in rows_a]
    # repr: under DP the history's loss is NaN (the sites are not asked for it), and NaN != NaN
    assert torch.equal(a, b) and repr(strip) == repr([{k: v for k, v in r.items() if "time" not in k} for r in rows_b])


def test_noisy_messages_are_checked_and_bad_options_are_refused():
    prob, objs, w0 = _ridge()

    def hook(rnd, cid, msg):  # client 2 sends a NaN: rejected, logged, the others fused
        return {**msg, "g": msg["g"] * float("nan")} if cid == 2 else msg

    a, rows, info = METHODS["one-shot"](prob, objs, w0, prob.evaluate, dp_epsilon=2.0, seed=1,
                                        sigma=0.1, message_hook=hook)
    assert [e["client"] for e in info["rejections"]] == [2] and info["fused_clients"] == 4
    keep = [c for c in range(5) if c != 2]
    w, _ = one_shot([_rows(objs)[c] for c in keep], sigma=0.1, dp=DPConfig(epsilon=2.0), seed=1,
                    noise_streams="per-client", client_ids=keep)
    assert _close(a, w)
    with pytest.raises(ValueError, match="projection dimension"):
        METHODS["one-shot"](prob, objs, w0, prob.evaluate, project=w0.numel() + 1)
    with pytest.raises(ValueError, match="project_sketch"):
        METHODS["one-shot"](prob, objs, w0, prob.evaluate, project=3, project_sketch="fourier")
    with pytest.raises(ValueError, match="epsilon"):
        METHODS["one-shot"](prob, objs, w0, prob.evaluate, dp_epsilon=-1.0)
    with pytest.raises(ValueError, match="noise_streams"):
        one_shot(_rows(objs), dp=DPConfig(epsilon=1.0), noise_streams="each")


def test_the_fusion_server_reads_the_runtime_gn_schema_and_streams_it():
    from fedsciml.runtime.client import Client
    from fedsciml.ridge import FusionServer

    prob, objs, w0 = _ridge()
    a, _, _ = METHODS["one-shot"](prob, objs, w0, prob.evaluate)
    server = FusionServer(w0.numel())
    server.receive_all({k: Client(k, o).gn_message(w0) for k, o in enumerate(objs[:4])})
    # the last client streams its rows in two increments, in the gn schema too
    A, b = objs[4].A, objs[4].b
    from fedsciml.core.objective import LinearLeastSquares

    for rows in (slice(0, 20), slice(20, None)):
        server.update(4, Client(4, LinearLeastSquares(A[rows], b[rows])).gn_message(w0))
    assert _close(server.solve(0.0), a, 1e-12) and server.n[4] == A.shape[0]


@pytest.mark.parametrize("dp,project", [(None, None), (None, 9), (DPConfig(epsilon=20.0), 9)])
def test_loco_cv_on_the_runtime_equals_ridge_one_shot(dp, project):
    prob, objs, w0 = _ridge(5)
    grid = [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0]
    a, rows, info = METHODS["one-shot"](prob, objs, w0, prob.evaluate, cv_sigmas=_grid(grid), **_flat(dp),
                                        project=project, seed=2)
    w, rinfo = one_shot(_rows(objs), cv_sigmas=grid, dp=dp, project=project, seed=2, form="gram",
                        noise_streams="per-client")
    # the same choice of σ and the same CV curve (compared below)
    assert info["sigma_used"] == rinfo["sigma"] and info["cv_scored"] == 5
    assert torch.allclose(torch.tensor(info["cv_loss"]), torch.tensor(rinfo["cv_loss"]), rtol=1e-10, atol=0)
    assert _close(a, w)
    # floats: the statistics up and θ₀ down, nothing else: the server scores the CV from the statistics
    m, K = project or w0.numel(), 5
    per_msg = m * (m + 1) // 2 + m + (0 if dp else 2)
    assert rows[1]["floats_up"] == K * per_msg and rows[1]["floats_down"] == K * w0.numel()
    with pytest.raises(ValueError, match="central DP"):
        METHODS["one-shot"](prob, objs, w0, prob.evaluate, cv_sigmas=_grid(grid), dp_epsilon=1.0, dp_central=True)
