"""Speed of one-shot ridge at scale, each figure beside its floor measured in the same run (issue 14).

Default: K = 500 clients of the ``ridge-linear`` generator, n_k = 160 training rows (``--samples 200``, 20 %
held out), d = 1000, 10 σ for leave-one-client-out CV, ``--threads 1``; about a minute on a quiet machine.
Rows (time, floor, ratio):

* client statistics, Gram form (``client_message``) vs the bare products ``A.T @ A`` and ``A.T @ b`` on the
  same clients (median over ``--stat-clients`` clients, each the best of 3, interleaved); the square-root
  form (thin QR) against the same floor;
* server fusion — the runtime's one-shot server (:class:`~fedsciml.methods.oneshot.OneShotStrategy` on the
  round loop, validation included: what ``solve``/``ridge`` run), fed the K precomputed Gram-form messages by a
  replaying transport — vs summing the K packed vectors alone (best of 3, interleaved); the same for
  square-root messages, whose server must form ``ΣR_kᵀR_k`` itself, vs the bare Gram ``RᵀR`` of the stacked
  factors;
* LOCO-CV (``loco_solutions`` on the clients' factors, the default chunk and each ``--chunks`` setting) vs
  its flop/traffic floor: (iterations + 1) × (one GEMM of every (k, σ) vector with its σ's d×d
  preconditioner + one read of all factors), plus the one-time factorizations of ``G + σI``;
* exactness: fusion vs pooled scikit-learn ``Ridge`` (relative), CV vs the naive per-pair Cholesky solve on
  ``--naive-pairs`` sampled (k, σ) pairs.

``--compare`` adds the older comparison (K = 100, d = 500, 30 σ): batched LOCO on the clients' packed Gram
messages vs the naive loop of K·|Σ| Cholesky solves and scikit-learn's ``RidgeCV`` on the pooled data.  The
machine's load average is recorded at the start and the end (figures taken under load are slower; the ratios
come from the same run).  Each row carries wall seconds and process CPU seconds (best of the repeats; CPU time
leaves out the time spent waiting for a core, so on a loaded machine its ratios are the steadier ones).
``--repro NAME`` also writes ``reproductions/NAME.{csv,md}`` with the command, commit, thread count, niceness and
load average on top (``scripts/papers/repro_common.py``).
Usage: ``python scripts/bench/ridge_bench_fusion.py [--device cpu|cuda] [--threads 1] [--compare] [--repro NAME]``.
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "papers", "oneshot-ridge"))  # ridge_common
import ridge_common as rc  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "papers"))  # repro_common
import repro_common  # noqa: E402
from fedsciml.core import linalg
from fedsciml.problems import get_problem
from fedsciml.methods.oneshot import OneShotStrategy, stack_factors
from fedsciml.runtime.loop import RoundConfig, Simulation
from fedsciml.runtime.transport import Reply, Transport
from fedsciml.ridge import client_message
from fedsciml.core.stats import to_gn
from fedsciml.core.loco import loco_cv, loco_solutions, loco_solutions_naive


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _clients(K, d, n, seed, dev):
    prob = get_problem("ridge-linear", dim=d, n_samples=n)
    return prob.client_data(K, seed, dev)


CPU = {}  # best process CPU seconds, by label


def _best(f, dev, repeat=3, label=None):
    """Best wall time of ``repeat`` calls (after the first, which also warms up) and the last result.

    The best process CPU time is kept in ``CPU[label]``: on a loaded machine it excludes the time spent
    waiting for a core, so CPU ratios stay meaningful where wall ratios do not (1 thread)."""
    out, best, best_cpu = None, float("inf"), float("inf")
    for _ in range(max(1, repeat + 1) if repeat else 1):
        _sync(dev)
        t0, c0 = time.perf_counter(), time.process_time()
        out = f()
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    if label:
        CPU[label] = min(CPU.get(label, float("inf")), best_cpu)
    return best, out


def client_stats(data, dev, n_clients):
    """Median over clients of (best-of-3) times: Gram message, square-root message, bare products."""
    gram, sqrt, bare, cpu = [], [], [], {"gram": [], "sqrt": [], "bare": []}
    for A, b in data[:n_clients]:
        for name, f, out in (("bare", lambda: (A.T @ A, A.T @ b), bare), ("gram", lambda: client_message(A, b), gram),
                             ("sqrt", lambda: client_message(A, b, form="sqrt"), sqrt)):
            CPU.pop("c", None)
            out.append(_best(f, dev, label="c")[0])
            cpu[name].append(CPU["c"])
    for name, v in cpu.items():
        CPU["client_" + name] = statistics.median(v)
    return statistics.median(gram), statistics.median(sqrt), statistics.median(bare)


class Replay(Transport):
    """Answers the one-shot ``gn_stats`` request with precomputed messages (the clients' work done beforehand),
    so that a timed run is the runtime's server alone: validation, fusion, solve."""

    def __init__(self, msgs):
        self.msgs = msgs
        self.client_ids = list(msgs)
        self.sample_counts = {c: int(m["n"][0]) for c, m in msgs.items()}

    def ask(self, client_ids, request):
        return {c: Reply(self.msgs[c]) for c in client_ids}


def runtime_fusion(msgs, d, sigma, form, dev):
    """The runtime's one-shot server on ``msgs`` (gn schema): ``θ₁`` from θ₀ = 0."""
    sim = Simulation(Replay(msgs), lambda theta: {}, RoundConfig(rounds=None, seed=0), label="one-shot")
    w, _, info = sim.run(OneShotStrategy(sigma, form=form), torch.zeros(d, dtype=torch.float64, device=dev))
    assert not info["rejections"], info["rejections"]
    return w


def gn_messages(data, form):
    """Each client's one-shot message in the runtime's schema (loss = ½‖b‖² at θ₀ = 0)."""
    out = {}
    for k, (A, b) in enumerate(data):
        m = client_message(A, b, form=form)
        loss = (0.5 * (b @ b)).reshape(1)
        out[k] = ({**to_gn(m), "loss": loss} if form == "gram"
                  else {"R": m["R"], "s": -m["z"], "loss": loss, "n": m["n"]})
    return out


def fusion(msgs, d, sigma, dev, repeat=3):
    """Best-of-``repeat`` runtime fusion time and summation floor, interleaved; returns the last model too."""
    vecs = [m["H"] for m in msgs.values()]

    def floor():
        acc = vecs[0].clone()
        for v in vecs[1:]:
            acc.add_(v)
        return acc

    t_floor = t_fuse = float("inf")
    out = None
    for _ in range(repeat):
        t_floor = min(t_floor, _best(floor, dev, 1, "sum")[0])
        t, out = _best(lambda: runtime_fusion(msgs, d, sigma, "gram", dev), dev, 1, "fuse")
        t_fuse = min(t_fuse, t)
    return t_fuse, t_floor, out


def main():
    p = rc.parser(__doc__, seeds=1)
    p.add_argument("--clients", type=int, default=500)
    p.add_argument("--dim", type=int, default=1000)
    p.add_argument("--samples", type=int, default=200, help="rows per client before the 20 %% test split")
    p.add_argument("--sigmas", type=int, default=10, help="σ values in the CV grid (log grid 1e-2..1e3)")
    p.add_argument("--sigma", type=float, default=0.01, help="σ of the timed fusion")
    p.add_argument("--stat-clients", type=int, default=20, help="clients whose statistics are timed")
    p.add_argument("--chunks", default="100,500", help="explicit CV chunk sizes timed beside the default")
    p.add_argument("--naive-pairs", type=int, default=20, help="(k, σ) pairs checked against direct solves")
    p.add_argument("--no-sklearn", action="store_true", help="skip the pooled scikit-learn reference")
    p.add_argument("--compare", action="store_true", help="also the K=100, d=500, 30 σ comparison with the naive "
                                                           "loop and scikit-learn's RidgeCV")
    p.add_argument("--repro", default=None, help="also write reproductions/REPRO.{csv,md} (command, commit, threads, "
                                                 "load on top)")
    args = p.parse_args()
    dev = rc.setup(args)
    load0 = os.getloadavg()
    K, d, S = args.clients, args.dim, args.sigmas
    tag = f"{dev.type}" + (f"_{torch.cuda.get_device_name(dev).replace(' ', '_')}" if dev.type == "cuda" else "")
    t_all = time.perf_counter()
    data = _clients(K, d, args.samples, 0, dev)
    n_k = int(data[0][0].shape[0])
    rows = []

    def row(path, seconds, floor, floor_is, target=None, note="", cpu=None):
        r = {"path": path, "seconds": seconds, "floor_seconds": floor, "ratio": seconds / floor if floor else None,
             "cpu_ratio": (CPU[cpu[0]] / CPU[cpu[1]]) if cpu else None,
             "cpu_seconds": CPU[cpu[0]] if cpu else None, "floor_cpu_seconds": CPU[cpu[1]] if cpu else None,
             "floor": floor_is, "target": target or "", "note": note}
        rows.append(r)
        return r

    # 1. client statistics
    t_gram, t_sqrt, t_bare = client_stats(data, dev, min(K, args.stat_clients))
    row("client statistics, Gram form (client_message)", t_gram, t_bare, "bare A.T@A + A.T@b", "≤ 1.3×",
        f"median of {min(K, args.stat_clients)} clients", cpu=("client_gram", "client_bare"))
    row("client statistics, square-root form (thin QR)", t_sqrt, t_bare, "bare A.T@A + A.T@b", "",
        f"{min(n_k, d) * (d + 1)} floats instead of {linalg.n_upper(d) + d}", cpu=("client_sqrt", "client_bare"))

    # 2. fusion, Gram form
    msgs = gn_messages(data, "gram")
    t_fuse, t_sum, w = fusion(msgs, d, args.sigma, dev)
    row(f"fusion, Gram form (runtime one-shot server, K={K})", t_fuse, t_sum, f"sum of the {K} packed vectors",
        "≤ 1.5×", cpu=("fuse", "sum"))
    del msgs

    # 3. fusion, square-root form
    sq = gn_messages(data, "sqrt")
    Rall = torch.cat([m["R"] for m in sq.values()])
    t_fs, w_sqrt = _best(lambda: runtime_fusion(sq, d, args.sigma, "sqrt", dev), dev, 1, "fuse_sqrt")
    t_rr, _ = _best(lambda: Rall.T @ Rall, dev, 1, "rr")
    row("fusion, square-root form (server forms ΣR_kᵀR_k)", t_fs, t_rr, "bare RᵀR of the stacked factors", "",
        f"model vs Gram form {float((w_sqrt - w).norm() / w.norm()):.1e}", cpu=("fuse_sqrt", "rr"))
    G = Rall.T @ Rall
    Rall = None  # free the stacked factors (a lambda above read them)

    # 4. LOCO-CV on the factors
    Rs, hs = stack_factors(sq, sorted(sq), d, G)
    total = (G, hs.sum(0))
    sig = torch.logspace(-2, 3, S, dtype=torch.float64, device=dev)
    V = torch.randn(S, K, d, dtype=torch.float64, device=dev)
    Pm = torch.randn(S, d, d, dtype=torch.float64, device=dev)
    t_prec, _ = _best(lambda: torch.bmm(V, Pm), dev, 2, "prec")
    V = Pm = None  # free them (a lambda above read them)
    t_read, _ = _best(lambda: Rs.sum(), dev, 2, "read")
    t_fact, _ = _best(lambda: [torch.cholesky_inverse(torch.linalg.cholesky(linalg.add_diagonal(total[0], x)))
                               for x in sig], dev, 1, "fact")
    t_cv, (W, info) = _best(lambda: loco_solutions(Rs, hs, sig, sqrt=True, total=total, return_info=True), dev, 1,
                            "cv")
    its = info["iterations"]
    floor_cv = (its + 1) * (t_prec + t_read) + t_fact
    CPU["cv_floor"] = (its + 1) * (CPU["prec"] + CPU["read"]) + CPU["fact"]
    row(f"LOCO-CV, {S} σ, default (chunk {info['chunk']})", t_cv, floor_cv,
        f"{its + 1} × (preconditioner GEMM {t_prec:.3f} s + factor read {t_read:.3f} s) + factorizations "
        f"{t_fact:.3f} s", "≤ 2 s", f"{its} PCG iterations, {info['direct_solves']} direct solves",
        cpu=("cv", "cv_floor"))
    for ch in [int(c) for c in args.chunks.split(",") if c.strip()]:
        if ch != info["chunk"]:
            t_c, _ = _best(lambda: loco_solutions(Rs, hs, sig, sqrt=True, total=total, chunk=ch), dev, 1, f"cv{ch}")
            row(f"LOCO-CV, {S} σ, chunk {ch}", t_c, floor_cv, "as above", "", cpu=(f"cv{ch}", "cv_floor"))
    # exactness of CV on sampled pairs: the naive per-pair Cholesky solve
    g = torch.Generator().manual_seed(0)
    kk = torch.randint(0, K, (args.naive_pairs,), generator=g).tolist()
    jj = torch.randint(0, S, (args.naive_pairs,), generator=g).tolist()
    cv_err = 0.0
    for k, j in zip(kk, jj):
        Mk = linalg.add_diagonal(total[0] - Rs[k].T @ Rs[k], float(sig[j]))
        ref = torch.cholesky_solve((total[1] - hs[k])[:, None], torch.linalg.cholesky(Mk))[:, 0]
        cv_err = max(cv_err, float((W[k, j] - ref).norm() / ref.norm()))
    Rs = hs = W = None  # free them (lambdas above read them)

    # exactness of fusion against pooled scikit-learn
    fuse_err = None
    if not args.no_sklearn and dev.type == "cpu":
        from sklearn.linear_model import Ridge

        A = torch.cat([a for a, _ in data]).numpy()
        b = torch.cat([y for _, y in data]).numpy()
        ref = torch.as_tensor(Ridge(alpha=args.sigma, fit_intercept=False, solver="cholesky").fit(A, b).coef_)
        fuse_err = float((w - ref).norm() / ref.norm())
        del A, b
    load1 = os.getloadavg()
    meta = {"K": K, "d": d, "n_k_train": n_k, "sigmas": S, "threads": args.threads, "device": str(dev),
            "torch": torch.__version__, "load_start": load0, "load_end": load1,
            "fusion_vs_sklearn_rel": fuse_err, "cv_vs_naive_max_rel": cv_err, "cv_pairs_checked": args.naive_pairs,
            "cv_iterations": its, "cv_direct_solves": info["direct_solves"], "cpu_seconds": dict(CPU),
            "seconds_total": time.perf_counter() - t_all}
    print(f"K={K}, n_k={n_k}, d={d}, {S} σ, {args.threads} thread(s), {dev}; load average "
          f"{load0[0]:.2f} at start, {load1[0]:.2f} at end" + ("  (LOADED: > 1.5)" if max(load0[0], load1[0]) > 1.5
                                                             else ""))
    print(f"LOCO-CV CPU time {CPU['cv']:.2f} s (floor {CPU['cv_floor']:.2f} s); fusion CPU {CPU['fuse']:.3f} s "
          f"(sum {CPU['sum']:.3f} s)")
    print(f"exactness: fusion vs pooled scikit-learn {fuse_err if fuse_err is None else f'{fuse_err:.1e}'}, "
          f"CV vs naive Cholesky (max over {args.naive_pairs} pairs) {cv_err:.1e}")
    for r in rows:
        r["ratio_str"] = f"{r['ratio']:.2f}×"
        r["cpu_ratio_str"] = f"{r['cpu_ratio']:.2f}×" if r["cpu_ratio"] else ""
    rc.write_table(args, f"bench_fusion_{tag}", [("path", "path"), ("seconds", "seconds"),
                                                 ("floor s", "floor_seconds"), ("ratio", "ratio_str"),
                                                 ("CPU ratio", "cpu_ratio_str"),
                                                 ("target", "target"), ("floor is", "floor"), ("note", "note")],
                   rows, {**meta, **vars(args)}, digits=3)
    if args.repro:
        note = (f"K = {K} clients of `ridge-linear`, n_k = {n_k} training rows, d = {d}, {S} σ (log grid 1e-2..1e3), "
                f"fusion σ = {args.sigma}; device {dev}, torch {torch.__version__}, {args.threads} thread(s) "
                f"(torch.get_num_threads() = {torch.get_num_threads()}, OMP_NUM_THREADS = "
                f"{os.environ.get('OMP_NUM_THREADS', 'unset')}), niceness {os.nice(0)}, {os.cpu_count()} cores; "
                f"load average {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} at the start, {load1[0]:.2f} / "
                f"{load1[1]:.2f} / {load1[2]:.2f} at the end; {meta['seconds_total']:.0f} s wall in all.  "
                f"Wall and CPU seconds are the best of the repeats; ratios are figure / floor from the same run.  "
                f"Exactness: fusion vs pooled scikit-learn `Ridge` "
                f"{'not run' if fuse_err is None else f'{fuse_err:.1e}'} (relative), CV vs the naive Cholesky solve "
                f"{cv_err:.1e} (max over {args.naive_pairs} sampled (k, σ) pairs); {its} PCG iterations, "
                f"{info['direct_solves']} direct solves.")
        cols = ["path", "seconds", "floor_seconds", "ratio", "cpu_seconds", "floor_cpu_seconds", "cpu_ratio",
                "target", "floor", "note"]
        print(repro_common.write(args.repro, cols, rows, note))
    if args.compare:
        compare(args, dev, tag)


def compare(args, dev, tag, K=100, d=500, S=30):
    """Batched LOCO vs the naive loop and scikit-learn's RidgeCV (the older comparison)."""
    data = _clients(K, d, 500, 1, dev)
    msgs = [client_message(A, b) for A, b in data]  # each client's packed Gram and h (the one-shot statistics)
    Gs, hs = linalg.unpack_upper(torch.stack([m["G"] for m in msgs]), d), torch.stack([m["h"] for m in msgs])
    sig = torch.logspace(-3, 4, S, dtype=torch.float64)
    t_fast, (W, info) = _best(lambda: loco_solutions(Gs, hs, sig, return_info=True), dev, 1)
    t_naive, ref = _best(lambda: loco_solutions_naive(Gs, hs, sig), dev, 0)
    diff = float(((W - ref).norm(dim=-1) / ref.norm(dim=-1)).max())
    fast = loco_cv(Gs, hs, sig, torch.stack([b @ b for _, b in data]))
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
    rc.write_table(args, f"bench_cv_{tag}", [("method", "method"), ("seconds", "seconds"), ("chosen σ", "chosen_sigma"),
                                              ("note", "note")], rows,
                   {"K": K, "d": d, "S": S, "max_rel_diff": diff, **info, **vars(args), "device": str(dev)}, digits=4)
    if args.repro:
        load = os.getloadavg()
        note = (f"The older comparison: K = {K} clients of `ridge-linear` (500 rows each before the 20 % test split), "
                f"d = {d}, {S} σ (log grid 1e-3..1e4); wall seconds (batched: best of 1 after a warm-up; the naive "
                f"loop and RidgeCV: one run); device {dev}, {args.threads} thread(s), niceness {os.nice(0)}, "
                f"{os.cpu_count()} cores, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the end.")
        print(repro_common.write(args.repro + "_compare", ["method", "seconds", "chosen_sigma", "note"], rows, note))


if __name__ == "__main__":
    main()
