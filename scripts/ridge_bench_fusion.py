"""Speed of one-shot ridge: fusion at scale and leave-one-client-out CV against the naive loop and sklearn.

Part 1 (``--fusion-clients`` 500, ``--fusion-dim`` 1000, n_k = 200): time of the client statistics (per client,
as clients work in parallel, and all of them sequentially), of the server fusion (validate + sum + Cholesky),
and of one LOCO-CV sweep over ``--fusion-sigmas`` σ values.
Part 2 (``--cv-clients`` 100, ``--cv-dim`` 500, ``--cv-sigmas`` 30 σ values, log grid 1e-3..1e4): batched LOCO CV
vs the naive loop of K·|Σ| Cholesky solves (speed-up, max relative difference), and scikit-learn's ``RidgeCV``
(efficient per-sample LOO/GCV) on the pooled data: time and chosen σ.
Usage: ``python scripts/ridge_bench_fusion.py [--device cpu|cuda] [--threads 1]``.
"""
import time

import torch

import ridge_common as rc
from fedsciml.problems import get_problem
from fedsciml.ridge import FusionServer, client_message
from fedsciml.ridge.cv import loco_cv, loco_solutions, loco_solutions_naive


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _clients(K, d, n, seed, dev):
    prob = get_problem("ridge-linear", dim=d, n_samples=n)
    return prob.client_data(K, seed, dev)


def fusion(args, dev):
    K, d = args.fusion_clients, args.fusion_dim
    data = _clients(K, d, 200, 0, dev)
    _sync(dev)
    per = []
    msgs = {}
    for k, (A, b) in enumerate(data):
        t0 = time.perf_counter()
        msgs[k] = client_message(A, b)
        _sync(dev)
        per.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    server = FusionServer(d, device=dev)
    server.receive_all(msgs)
    w = server.solve(0.01)
    _sync(dev)
    t_fuse = time.perf_counter() - t0
    sig = torch.logspace(-2, 3, args.fusion_sigmas, dtype=torch.float64).tolist()
    t0 = time.perf_counter()
    Gs, hs = server.stacked_packed()
    res = loco_cv(Gs, hs, sig, data, chunk=args.chunk)
    _sync(dev)
    t_cv = time.perf_counter() - t0
    rows = [{"step": "client statistics, one client (max)", "seconds": max(per)},
            {"step": "client statistics, all clients sequentially", "seconds": sum(per)},
            {"step": "server fusion (validate + sum + Cholesky)", "seconds": t_fuse},
            {"step": f"one LOCO-CV sweep ({len(sig)} σ, incl. client scoring)", "seconds": t_cv},
            {"step": "total with parallel clients", "seconds": max(per) + t_fuse + t_cv}]
    meta = {"K": K, "d": d, "n_k_train": int(data[0][0].shape[0]), "cv_sigma": res["sigma"],
            "floats_up_per_client": server.floats_up // K, "w_finite": bool(torch.isfinite(w).all())}
    return rows, meta


def cv_speed(args, dev):
    K, d, S = args.cv_clients, args.cv_dim, args.cv_sigmas
    data = _clients(K, d, 500, 1, dev)
    server = FusionServer(d, device=dev)
    server.receive_all({k: client_message(A, b) for k, (A, b) in enumerate(data)})
    Gs, hs = server.stacked()
    sig = torch.logspace(-3, 4, S, dtype=torch.float64)
    _sync(dev)
    t0 = time.perf_counter()
    W, info = loco_solutions(Gs, hs, sig, return_info=True)
    _sync(dev)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = loco_solutions_naive(Gs, hs, sig)
    _sync(dev)
    t_naive = time.perf_counter() - t0
    diff = float(((W - ref).norm(dim=-1) / ref.norm(dim=-1)).max())
    fast = loco_cv(Gs, hs, sig, data)
    from sklearn.linear_model import RidgeCV

    A = torch.cat([a for a, _ in data]).cpu().numpy()
    b = torch.cat([y for _, y in data]).cpu().numpy()
    t0 = time.perf_counter()
    sk = RidgeCV(alphas=sig.cpu().numpy(), fit_intercept=False).fit(A, b)
    t_sk = time.perf_counter() - t0
    rows = [{"method": "batched PCG LOCO (fedsciml)", "seconds": t_fast, "chosen_sigma": fast["sigma"],
             "note": f"{info['iterations']} iterations, {info['direct_solves']} direct fallbacks, max rel diff {diff:.1e}"},
            {"method": f"naive loop ({K}·{S} Cholesky solves)", "seconds": t_naive, "chosen_sigma": fast["sigma"],
             "note": f"speed-up of batched: {t_naive / t_fast:.1f}x"},
            {"method": "sklearn RidgeCV, pooled data (per-sample LOO)", "seconds": t_sk, "chosen_sigma": float(sk.alpha_),
             "note": "not federated: needs all rows on one machine"}]
    return rows, {"K": K, "d": d, "S": S, "max_rel_diff": diff, "speedup": t_naive / t_fast, **info}


def main():
    p = rc.parser(__doc__, seeds=1)
    p.add_argument("--fusion-clients", type=int, default=500)
    p.add_argument("--fusion-dim", type=int, default=1000)
    p.add_argument("--fusion-sigmas", type=int, default=10)
    p.add_argument("--chunk", type=int, default=25, help="clients whose d×d Grams are unpacked at once in CV")
    p.add_argument("--cv-clients", type=int, default=100)
    p.add_argument("--cv-dim", type=int, default=500)
    p.add_argument("--cv-sigmas", type=int, default=30)
    p.add_argument("--skip-fusion", action="store_true")
    args = p.parse_args()
    dev = rc.setup(args)
    tag = f"{dev.type}" + (f"_{torch.cuda.get_device_name(dev).replace(' ', '_')}" if dev.type == "cuda" else "")
    if not args.skip_fusion:
        rows, meta = fusion(args, dev)
        print(meta)
        rc.write_table(args, f"bench_fusion_{tag}", [("step", "step"), ("seconds", "seconds")], rows,
                       {**meta, **vars(args), "device": str(dev)}, digits=4)
    rows, meta = cv_speed(args, dev)
    print(meta)
    rc.write_table(args, f"bench_cv_{tag}", [("method", "method"), ("seconds", "seconds"), ("chosen σ", "chosen_sigma"),
                                              ("note", "note")], rows, {**meta, **vars(args), "device": str(dev)},
                   digits=4)
    plt = rc.plt()
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.barh([r["method"] for r in rows], [r["seconds"] for r in rows], color=["C2", "C0", "C7"])
    ax.set_xscale("log")
    ax.set_xlabel("seconds")
    ax.set_title(f"LOCO CV, K={meta['K']}, d={meta['d']}, {meta['S']} σ ({dev.type})")
    rc.save_fig(fig, args, f"bench_cv_{tag}")


if __name__ == "__main__":
    main()
