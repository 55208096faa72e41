"""The one-shot protocol end to end (simulation): clients → messages → server → model.

:func:`one_shot` runs Algorithm 1 (and its variants) on a list of client
datasets: optional random projection (shared seeded sketch), optional row
clipping and Gaussian noise (local, or central on the secure sum), optional
leave-one-client-out CV for σ, then one fusion.  Dropped clients are simply
absent from the list.  Returns the model in the original d dimensions and an
``info`` dict (floats sent, σ used, noise, eigenvalues clipped, timings).
"""
from __future__ import annotations

import time

import torch

from fedsciml import linalg, privacy
from fedsciml.ridge import cv as _cv
from fedsciml.ridge import dp as _dp
from fedsciml.ridge.sketch import project as _project, sketch_matrix
from fedsciml.ridge.stats import FusionServer, client_message, ridge_solve


def one_shot(data, sigma=0.01, *, dp: _dp.DPConfig | None = None, project: int | None = None,
             sketch: str = "gaussian", cv_sigmas=None, seed: int = 0, repair: bool = True, cv_chunk: int | None = None,
             form: str = "auto", noise_streams: str = "shared", client_ids=None):
    """Fit ``w`` from ``data = [(A_k, b_k)]`` in one round.  See the module docstring.

    ``form``: the clients' message form (:func:`~fedsciml.ridge.stats.client_message`): ``"gram"``,
    ``"sqrt"``, or ``"auto"`` — the square-root form when σ is chosen by CV without DP and every client has
    at most half as many rows as features (fewer floats up, and the CV products per client cost ``4·n_k·d``
    instead of ``2d²``; the server then forms ``ΣR_kᵀR_k`` itself), else the Gram form.

    ``noise_streams`` (local DP): ``"shared"`` (default, the published numbers) draws every client's noise from one
    run-wide generator (:func:`~fedsciml.ridge.dp.shared_generator`) in list order; ``"per-client"`` gives client
    ``client_ids[k]`` (default ``k``) its own generator (:func:`~fedsciml.ridge.dp.client_generator`) — what the
    runtime's ``one-shot`` method does, so both give the same model for the same seed.  Central noise is always
    the first draw of the shared generator.
    """
    if not data:
        raise ValueError("no clients answered: at least one client's statistics are needed to fit a model")
    if form not in ("auto", "gram", "sqrt"):
        raise ValueError(f"message form must be auto, gram or sqrt, got {form!r}")
    if dp is not None and form == "sqrt":
        raise ValueError("DP noise is added to the Gram form of the statistics; use form='gram' (or 'auto') with DP")
    if noise_streams not in ("shared", "per-client"):
        raise ValueError(f"noise_streams must be 'shared' or 'per-client', got {noise_streams!r}")
    if client_ids is not None and len(client_ids) != len(data):
        raise ValueError(f"client_ids has {len(client_ids)} entries for {len(data)} clients")
    if cv_sigmas is not None and len(data) < 2:
        raise ValueError(f"leave-one-client-out CV needs at least 2 clients (each is scored on a model fitted "
                         f"without it), got {len(data)}; give σ directly")
    if cv_sigmas is not None and dp is not None and dp.central and dp.epsilon != float("inf"):
        raise ValueError("leave-one-client-out CV needs each client's statistics, which central DP (secure "
                         "aggregation) hides from the server; choose σ without --cv or use local DP")
    t0 = time.perf_counter()
    A0 = data[0][0]
    d = int(A0.shape[1])
    for k, (A, b) in enumerate(data):
        if A.ndim != 2 or A.shape[1] != d or b.shape != (A.shape[0],):
            raise ValueError(f"client {k}: features {tuple(A.shape)} and targets {tuple(b.shape)} do not match "
                             f"d={d} features with one target per row")
    R = None
    if project is not None and int(project) != d:
        R = sketch_matrix(d, int(project), seed, sketch, A0.dtype, A0.device)
    m = d if R is None else R.shape[1]
    if form == "auto":
        form = "sqrt" if cv_sigmas is not None and dp is None and all(2 * A.shape[0] <= m for A, _ in data) else "gram"
    gen = _dp.shared_generator(seed)
    std = 0.0 if dp is None else dp.noise_std
    server = FusionServer(m, dtype=A0.dtype, device=A0.device)
    local = []
    t_clients = 0.0
    for k, (A, b) in enumerate(data):
        tc = time.perf_counter()
        if R is not None:
            A = _project(A, R)
        if dp is not None:
            A, b = privacy.clip_rows(A, b, dp.c_a, dp.c_b, dp.clip)
        msg = client_message(A, b, with_count=dp is None, form=form)
        if dp is not None and not dp.central and std > 0:
            msg = _dp.privatize(msg, std, gen if noise_streams == "shared" else
                                _dp.client_generator(seed, k if client_ids is None else client_ids[k]))
        t_clients = max(t_clients, time.perf_counter() - tc)  # clients work in parallel
        server.receive(k, msg)
        local.append((A, b))
    ts = time.perf_counter()
    info = {"clients": len(data), "d": d, "m": m, "form": form, "floats_up_per_client": server.floats_up // len(data),
            "floats_sent": server.floats_up + len(data) * d, "noise_std": std, "eig_clipped": 0}
    if cv_sigmas is not None:
        noisy = dp is not None and std > 0 and not dp.central
        sqrt = server.factored and not noisy
        Gs, hs = server.stacked_factors() if sqrt else server.stacked_packed()
        res = _cv.loco_cv(Gs, hs, cv_sigmas, local, chunk=cv_chunk, repair=noisy and repair, sqrt=sqrt,
                          total=None if noisy else server.totals())
        sigma = res["sigma"]
        info.update(cv_sigmas=res["sigmas"], cv_loss=res["loss"])
        info["floats_sent"] += res["floats_down"] + res["floats_up"]
    G, h = server.totals()
    if dp is not None and dp.central and std > 0:
        e = _dp.noise_like(m, std, gen, G.dtype, G.device)
        G = G + linalg.unpack_upper(e["G"], m)
        h = h + e["h"]
    if dp is not None and std > 0 and repair:
        G, info["eig_clipped"] = _dp.psd_repair(G)
    if dp is not None and std > 0 and dp.noise_aware_sigma:
        s_total = std * (1.0 if dp.central else len(data) ** 0.5)
        sigma = float(sigma) + (2.0 * m) ** 0.5 * s_total
    v = ridge_solve(G, h, sigma)
    w = v if R is None else R @ v
    info.update(sigma=float(sigma), time_server_s=time.perf_counter() - ts, time_client_s=t_clients,
                time_s=time.perf_counter() - t0)
    if dp is not None:
        info.update(epsilon=dp.epsilon, delta=dp.delta, central=dp.central)
    return w, info


def dropout_mask(n_clients: int, p: float, seed: int = 0) -> list[int]:
    """Indices of the clients that answer when each drops out independently with probability p."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    g = torch.Generator(device="cpu").manual_seed(int(seed) + 15485863)
    keep = torch.rand(n_clients, generator=g, dtype=torch.float64) >= p
    return [int(i) for i in torch.nonzero(keep).reshape(-1)]
