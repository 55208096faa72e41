"""The one-shot protocol end to end: clients → messages → server → model, on the federated runtime.

:func:`one_shot` runs Algorithm 1 (and its variants) on a list of client
datasets by putting each ``(A_k, b_k)`` behind an in-process client
(:class:`~fedsciml.runtime.client.Client` of the linear residual
``A_k w − b_k``) and handing the run to the one driver
(:func:`fedsciml.runtime.driver.plan` / :func:`~fedsciml.runtime.driver.run`,
method ``one-shot``: the options checked once as a
:class:`~fedsciml.methods.oneshot.OneShotConfig`, the runtime's one-shot strategy,
the round loop, the Result) — the same driver, loop, messages, validation and
accounting as ``solve(..., method="one-shot")``: optional random
projection (shared seeded sketch), optional row clipping and Gaussian noise
(local — each client from its own generator
:func:`~fedsciml.core.dp.client_generator` — or central on the secure sum),
optional leave-one-client-out CV for σ, then one fusion.  Dropped clients are
simply absent from the list (or drawn by the loop with ``dropout``).  Returns
the model in the original d dimensions and an ``info`` dict (floats sent, σ
used, noise, eigenvalues clipped, timings, rejections).
"""
from __future__ import annotations

import time

import torch

from fedsciml.core import dp as _dp

NOISE_STREAMS = ("per-client",)


def one_shot(data, sigma=0.01, *, dp: _dp.DPConfig | None = None, project: int | None = None,
             sketch: str = "gaussian", cv_sigmas=None, seed: int = 0, repair: bool = True, form: str = "auto",
             client_ids=None, dropout: float = 0.0, transport: str = "local", noise_streams: str = "per-client",
             fit_intercept: bool = False):
    """Fit ``w`` from ``data = [(A_k, b_k)]`` in one round on the runtime.  See the module docstring.

    ``client_ids``: the clients' ids (default ``0 … K−1``); client ``c`` draws its local DP noise from
    ``client_generator(seed, c)``, so its noise does not depend on who else answers.  Central noise is the sum of
    the clients' shares ``s/√K``, each from its own generator (:func:`~fedsciml.core.dp.share_std`).
    ``dropout``: each client fails to answer with this probability (the loop's seeded draw).  ``transport``: ``"local"`` or ``"bytes"`` (every request and
    reply through bytes; the same model bit for bit).  ``form``: the clients' message form, ``"gram"``
    (``{H = pack(A_kᵀA_k), g = −A_kᵀb_k}``), ``"sqrt"`` (``{R_k, s_k}`` from the thin QR ``A_k = Q_kR_k``, no DP) or
    ``"auto"`` — the square-root form when σ is chosen by CV without DP and every client has at most half as many
    rows as (projected) features (fewer floats up, and the CV products per client cost ``4·n_k·d`` instead of
    ``2d²``; the server forms ``ΣR_kᵀR_k`` itself), else the Gram form.
    ``noise_streams``: only ``"per-client"`` (the run-wide shared stream of earlier versions is gone: a site
    cannot draw from another site's generator).
    ``fit_intercept``: an unpenalized intercept (the one-shot method's option of that name; under DP a constant
    column inside the clipped rows), returned as ``info["intercept"]``.
    """
    import fedsciml.methods  # noqa: F401  (registers the one-shot method with the driver)
    from fedsciml.methods.oneshot import OneShotConfig
    from fedsciml.runtime.client import Client
    from fedsciml.runtime.driver import plan, run
    from fedsciml.runtime.transport import BytesTransport, LocalTransport

    if noise_streams not in NOISE_STREAMS:
        raise ValueError(f"noise_streams must be 'per-client' (each client draws its local DP noise from its own "
                         f"generator client_generator(seed, cid)); got {noise_streams!r} — the run-wide 'shared' "
                         f"stream was removed because a site cannot draw from another site's generator")
    if not data:
        raise ValueError("no clients answered: at least one client's statistics are needed to fit a model")
    if form not in ("auto", "gram", "sqrt"):
        raise ValueError(f"message form must be auto, gram or sqrt, got {form!r}")
    if dp is not None and form == "sqrt":
        raise ValueError("DP noise is added to the Gram form of the statistics; use form='gram' (or 'auto') with DP")
    if transport not in ("local", "bytes"):
        raise ValueError(f"transport must be local or bytes, got {transport!r}")
    if client_ids is not None and len(client_ids) != len(data):
        raise ValueError(f"client_ids has {len(client_ids)} entries for {len(data)} clients")
    if cv_sigmas is not None and len(data) < 2:
        raise ValueError(f"leave-one-client-out CV needs at least 2 clients (each is scored on a model fitted "
                         f"without it), got {len(data)}; give σ directly")
    t0 = time.perf_counter()
    A0 = data[0][0]
    d = int(A0.shape[1])
    for k, (A, b) in enumerate(data):
        if A.ndim != 2 or A.shape[1] != d or b.shape != (A.shape[0],):
            raise ValueError(f"client {k}: features {tuple(A.shape)} and targets {tuple(b.shape)} do not match "
                             f"d={d} features with one target per row")
    check_finite(data)
    ids = list(range(len(data))) if client_ids is None else [int(c) for c in client_ids]
    if len(set(ids)) != len(ids):
        raise ValueError(f"client_ids must be distinct, got {ids}")
    m = d if project is None else int(project)
    if form == "auto":
        form = "sqrt" if cv_sigmas is not None and dp is None and all(2 * A.shape[0] <= m for A, _ in data) else "gram"
    cfg = dp if dp is None or isinstance(dp, _dp.DPConfig) else _dp.DPConfig(**dp)
    dp_opts = {} if cfg is None else dict(
        dp_epsilon=cfg.epsilon, dp_delta=cfg.delta, dp_clip_a=cfg.c_a, dp_clip_b=cfg.c_b, dp_clip=cfg.clip,
        dp_central=cfg.central, dp_noise_aware=cfg.noise_aware_sigma, dp_calibration=cfg.calibration)
    # built directly (not from_options): σ is given with a CV grid too, as this function always took it
    config = OneShotConfig(sigma=float(sigma), project=project, project_sketch=sketch,
                           cv_sigmas=None if cv_sigmas is None else [float(s) for s in cv_sigmas],
                           message_form=form, repair=bool(repair), dropout=float(dropout),
                           fit_intercept=bool(fit_intercept), **dp_opts)
    rows = _ClientRows(data, d)
    local = LocalTransport([Client(c, o) for c, o in zip(ids, rows.objectives)])
    tr = BytesTransport(local, device=A0.device) if transport == "bytes" else local
    res = run(plan(rows, "one-shot", clients=len(data), seed=int(seed), device=A0.device, config=config,
                   transport=tr))
    w, st = res.theta, res.extra
    if st["rejections"]:  # the caller handed over every client's data: a rejected one is an error, not a dropout
        r = st["rejections"][0]
        raise ValueError(f"client {r['client']}'s statistics were rejected ({r['reason']}); "
                         f"{len(st['rejections'])} rejection(s) in all — the model would leave it out")
    fused = st["fused_clients"]
    m = st.get("m", d)
    up = st["floats_up"]
    info = {"clients": fused, "d": d, "m": m, "form": form, "floats_up_per_client": up // max(1, fused),
            "floats_up": up, "floats_down": st["floats_down"], "floats_sent": up + st["floats_down"],
            "noise_std": st.get("noise_std", 0.0), "eig_clipped": st.get("eig_clipped", 0),
            "sigma": float(st.get("sigma_used", config.sigma)), "rejections": st["rejections"],
            "answered": res.history[-1].get("answered", fused), "time_s": st["solver_time_s"],
            "time_total_s": time.perf_counter() - t0}
    if "cv_sigmas" in st:
        info.update(cv_sigmas=st["cv_sigmas"], cv_loss=st["cv_loss"], cv_scored=st["cv_scored"])
    if cfg is not None:
        info.update(epsilon=cfg.epsilon, delta=cfg.delta, central=cfg.central)
    if fit_intercept:
        info["intercept"] = float(st.get("intercept", 0.0))
    return w, info


class _ClientRows:
    """The clients' given rows ``[(A_k, b_k)]`` as the problem the driver runs (the linear residuals
    ``A_k w − b_k``, θ₀ = 0, no test set, no memory estimate: the rows are already in memory)."""

    name, kind, options = "client-rows", "ridge", {}  # type: ignore[var-annotated]  # ridge: no penalty option, σ is one_shot's

    def __init__(self, data, d: int):
        from fedsciml.core.objective import LinearLeastSquares

        self.objectives = [LinearLeastSquares(A, b) for A, b in data]
        self.default_clients, self._zero = len(data), torch.zeros(d, dtype=data[0][0].dtype, device=data[0][0].device)

    def rows_per_client(self, n_clients: int) -> None:
        return None

    def client_objectives(self, n_clients: int, seed: int = 0, device=None) -> list:
        return self.objectives

    def init_params(self, seed: int = 0, device=None) -> torch.Tensor:
        return self._zero.clone()

    def evaluate(self, theta: torch.Tensor, intercept: float = 0.0) -> dict:
        return {}

    def final_metrics(self, theta: torch.Tensor, objectives) -> dict:
        return {}


def check_finite(data) -> None:
    """Refuse a client whose rows hold NaN or infinity, in scikit-learn's words (``Input X contains NaN``):
    a library call that was handed every client's data never leaves one out silently."""
    for k, (A, b) in enumerate(data):
        for name, T in (("X", A), ("y", b)):
            if not bool(torch.isfinite(T).all()):
                what = "NaN" if bool(torch.isnan(T).any()) else "infinity"
                raise ValueError(f"client {k}: Input {name} contains {what} "
                                 f"(row {int(torch.nonzero(~torch.isfinite(T))[0, 0])}); remove or impute it")


def dropout_mask(n_clients: int, p: float, seed: int = 0) -> list[int]:
    """Indices of the clients that answer when each drops out independently with probability p."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    g = torch.Generator(device="cpu").manual_seed(int(seed) + 15485863)
    keep = torch.rand(n_clients, generator=g, dtype=torch.float64) >= p
    return [int(i) for i in torch.nonzero(keep).reshape(-1)]
