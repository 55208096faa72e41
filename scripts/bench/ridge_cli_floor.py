"""The ``ridge`` CLI's solver time beside the kernels' floor, measured in the same process (issue 21, item 5).

Runs exactly what ``python -m fedsciml ridge --clients K --dim d --samples n --cv GRID`` runs
(:func:`fedsciml.cli.ridge.run_experiment`: ``solve(problem, "one-shot", ...)`` on the runtime's round loop,
strategy, validation and fusion server) and reports its solver time (the one-shot Result's ``wall_time_s``,
the CLI's "seconds" column).  Then, on the same clients' rows, the bare kernels that any implementation of
the method must run:

* ``stats``: every client's message — the thin QR of its rows (square-root form, ``2·n_k ≤ d``) or its packed
  Gram (otherwise);
* ``fusion``: the server's Gram of the stacked factors (or the sum of the packed Grams) and one Cholesky solve;
* ``loco``: leave-one-client-out CV on the clients' factors (:func:`fedsciml.core.loco.loco_solutions`) and
  its server-side scores (:func:`fedsciml.core.loco.stats_scores`).

It prints the ratios CLI / (fusion + loco) — the issue's target, ≤ 2 — and CLI / (stats + fusion + loco),
the floor including the clients' own work (in this simulation the clients run in the same process, so their
statistics are part of the solver time).  Each figure is the best of ``--repeat`` runs, CLI and kernels
interleaved, in wall seconds and in process CPU seconds (the CLI's CPU seconds are those of the solver call
alone, read around the driver's method call; on a loaded machine CPU time leaves out the time spent waiting
for a core, so its ratios are the steadier ones).  Peak RSS (``ru_maxrss``) is read after the first CLI run, before any kernel runs, beside the
size of the clients' data plus their messages.  The load average is printed at the start and the end:
on a loaded machine only the ratios mean anything.

``--repro NAME`` also writes ``reproductions/NAME.{csv,md}`` (command, commit, threads, niceness and load on top).

Usage: ``python scripts/bench/ridge_cli_floor.py [--clients 500 --dim 1000 --samples 200 --cv 1e-2:1e3:10]
[--repro NAME]``
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import torch

from fedsciml.core import linalg
from fedsciml.cli.ridge import run_experiment
from fedsciml.options import parse_grid
from fedsciml.core.loco import loco_solutions, stats_scores
from fedsciml.core.stats import client_message, ridge_solve


SOLVER_CPU = []  # process CPU seconds of each solver call (the driver's method call)


def _count_solver_cpu():
    """Wrap the driver's method call to read the process CPU time around it (this script only)."""
    from fedsciml.runtime.driver import Method

    call = Method.__call__

    def timed(self, *a, **k):
        c0 = time.process_time()
        try:
            return call(self, *a, **k)
        finally:
            SOLVER_CPU.append(time.process_time() - c0)

    Method.__call__ = timed


def kernels(data, grid, sigma0):
    """Seconds (wall, CPU) of each bare kernel on ``data`` (the clients' training rows), and the chosen σ."""
    d = data[0][0].shape[1]
    sqrt = all(2 * A.shape[0] <= d for A, _ in data)
    t, c = {}, {}
    t0, c0 = time.perf_counter(), time.process_time()
    msgs = [client_message(A, b, form="sqrt" if sqrt else "gram") for A, b in data]
    t["stats"], c["stats"] = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    if sqrt:
        rows = max(m["R"].shape[0] for m in msgs)
        Rs = torch.zeros(len(msgs), rows, d, dtype=torch.float64)
        for i, m in enumerate(msgs):
            Rs[i, :m["R"].shape[0]] = m["R"]
        hs = torch.stack([m["R"].T @ m["z"] for m in msgs])
        G = linalg.unpack_upper(linalg.gram_packed(Rs.reshape(-1, d)), d)
    else:
        Gp = torch.stack([m["G"] for m in msgs])
        hs = torch.stack([m["h"] for m in msgs])
        G = linalg.unpack_upper(Gp.sum(0), d)
    h = hs.sum(0)
    ridge_solve(G, h, sigma0)
    t["fusion"], c["fusion"] = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    W = loco_solutions(Rs if sqrt else Gp, hs, grid, sqrt=sqrt, total=(G, h))
    scores = stats_scores(Rs if sqrt else Gp, hs, W, sqrt=sqrt).sum(0)
    t["loco"], c["loco"] = time.perf_counter() - t0, time.process_time() - c0
    return t, c, grid[int(torch.argmin(scores))], "sqrt" if sqrt else "gram"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=500)
    ap.add_argument("--dim", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--cv", default="1e-2:1e3:10")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs of each (interleaved)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repro", default=None, help="also write reproductions/REPRO.{csv,md}")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    grid = parse_grid(args.cv)
    load0 = os.getloadavg()
    print(f"load average at start: {load0[0]:.2f} (threads {args.threads}, {os.cpu_count()} cores)")
    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024      # Python, torch, scikit-learn loaded
    kw = dict(clients=args.clients, dim=args.dim, samples=args.samples, cv=args.cv, sigma=None, seed=args.seed)
    _count_solver_cpu()
    run_experiment(**{**kw, "clients": 3, "dim": 8, "samples": 8})  # first-call costs out of the figures
    cli, cli_cpu, best, best_cpu, rss_mb, chosen, form = float("inf"), float("inf"), {}, {}, None, None, None
    data = None
    for r in range(args.repeat):
        SOLVER_CPU.clear()
        res = run_experiment(**kw)[0]
        cli = min(cli, res.wall_time_s)
        cli_cpu = min(cli_cpu, SOLVER_CPU[0])
        chosen, form = res.extra["sigma_used"], res.extra.get("form_used")
        if r == 0:
            rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            from fedsciml.cli.ridge import make_problem

            data = make_problem("linear", args.dim, args.samples, 0.5, 0.0, penalty="server").client_data(
                args.clients, args.seed)
        t, c, s_k, kform = kernels(data, grid, chosen)
        for k, v in t.items():
            best[k] = min(best.get(k, float("inf")), v)
            best_cpu[k] = min(best_cpu.get(k, float("inf")), c[k])
    floor = best["fusion"] + best["loco"]
    floor_cpu = best_cpu["fusion"] + best_cpu["loco"]
    n_rows = sum(A.shape[0] for A, _ in data)
    d = args.dim
    data_mb = 8 * args.clients * args.samples * (d + 1) / 2**20          # every row, test rows included
    msg_mb = 8 * sum(min(A.shape[0], d) * (d + 1) if kform == "sqrt" else d * (d + 1) // 2 + d
                     for A, _ in data) / 2**20
    print(f"K={args.clients} clients, n_k={n_rows // args.clients} training rows, d={d}, {len(grid)} σ; "
          f"CLI form {form}, kernel form {kform}; σ chosen: CLI {chosen:.4g}, kernels {s_k:.4g}")
    print(f"{'figure':<36s} {'wall s':>9s} {'CPU s':>9s}")
    print(f"{'CLI solver time (one-shot)':<36s} {cli:9.3f} {cli_cpu:9.3f}")
    for k in ("stats", "fusion", "loco"):
        print(f"{'kernel: ' + k:<36s} {best[k]:9.3f} {best_cpu[k]:9.3f}")
    print(f"{'ratio CLI / (fusion + loco)':<36s} {cli / floor:9.2f} {cli_cpu / floor_cpu:9.2f}   (target ≤ 2)")
    print(f"{'ratio CLI / (stats + fusion + loco)':<36s} {cli / (floor + best['stats']):9.2f} "
          f"{cli_cpu / (floor_cpu + best_cpu['stats']):9.2f}")
    print(f"peak RSS after the CLI run: {rss_mb:.0f} MB, {rss_mb - base_mb:.0f} MB above the process's baseline "
          f"({base_mb:.0f} MB: Python, torch, scikit-learn); clients' data + messages: {data_mb + msg_mb:.0f} MB "
          f"(ratio {(rss_mb - base_mb) / (data_mb + msg_mb):.2f}, target ≤ 2)")
    load1 = os.getloadavg()
    print(f"load average at end: {load1[0]:.2f}")
    if args.repro:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "papers"))
        import repro_common

        rows = [{"figure": "CLI solver time (one-shot)", "wall_s": cli, "cpu_s": cli_cpu}]
        rows += [{"figure": f"kernel: {k}", "wall_s": best[k], "cpu_s": best_cpu[k]} for k in ("stats", "fusion", "loco")]
        rows += [{"figure": "ratio CLI / (fusion + loco) (target ≤ 2)", "wall_s": cli / floor,
                  "cpu_s": cli_cpu / floor_cpu},
                 {"figure": "ratio CLI / (stats + fusion + loco)", "wall_s": cli / (floor + best["stats"]),
                  "cpu_s": cli_cpu / (floor_cpu + best_cpu["stats"])}]
        note = (f"K = {args.clients} clients, n_k = {n_rows // args.clients} training rows, d = {d}, {len(grid)} σ "
                f"(`--cv {args.cv}`); CLI form {form}, kernel form {kform}; σ chosen: CLI {chosen:.4g}, kernels "
                f"{s_k:.4g}.  Best of {args.repeat} runs each, interleaved.  {args.threads} thread(s) "
                f"(OMP_NUM_THREADS = {os.environ.get('OMP_NUM_THREADS', 'unset')}), niceness {os.nice(0)}, "
                f"{os.cpu_count()} cores; load average {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} at the start, "
                f"{load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} at the end.  Peak RSS after the first CLI run "
                f"{rss_mb:.0f} MB, {rss_mb - base_mb:.0f} MB above the baseline ({base_mb:.0f} MB: Python, torch, "
                f"scikit-learn); clients' data + messages {data_mb + msg_mb:.0f} MB (ratio "
                f"{(rss_mb - base_mb) / (data_mb + msg_mb):.2f}, target ≤ 2).")
        print(repro_common.write(args.repro, ["figure", "wall_s", "cpu_s"], rows, note))
    return cli, best


if __name__ == "__main__":
    main()
