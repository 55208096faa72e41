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
             sketch: str = "gaussian", cv_sigmas=None, seed: int = 0, repair: bool = True, cv_chunk: int | None = 64):
    """Fit ``w`` from ``data = [(A_k, b_k)]`` in one round.  See the module docstring."""
    if not data:
        raise ValueError("no clients answered: at least one client's statistics are needed to fit a model")
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
    gen = torch.Generator(device="cpu").manual_seed(int(seed) + 104729)
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
        msg = client_message(A, b, with_count=dp is None)
        if dp is not None and not dp.central and std > 0:
            msg = _dp.privatize(msg, std, gen)
        t_clients = max(t_clients, time.perf_counter() - tc)  # clients work in parallel
        server.receive(k, msg)
        local.append((A, b))
    ts = time.perf_counter()
    info = {"clients": len(data), "d": d, "m": m, "floats_up_per_client": server.floats_up // len(data),
            "floats_sent": server.floats_up + len(data) * d, "noise_std": std, "eig_clipped": 0}
    if cv_sigmas is not None:
        Gs, hs = server.stacked_packed()
        noisy = dp is not None and std > 0 and not dp.central
        res = _cv.loco_cv(Gs, hs, cv_sigmas, local, chunk=cv_chunk, repair=noisy and repair)
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
