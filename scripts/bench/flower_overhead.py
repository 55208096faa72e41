"""What Flower costs fedsciml: in process vs Flower's simulation runtime vs a deployment of stock Flower processes.

One table, engine × (start-up, small exchange, ``gn_stats``, ``update``, whole main job, idle CPU):

* **start-up** — the engine's wall time outside the solver for the bench work below (processes, ``flwr run``,
  Ray, the ServerApp, the nodes' set-up and ``describe``);
* **small exchange / gn_stats / update** — median wall time of one exchange (push to every client, their
  work, every reply back) of each query, over the bench work: ``gn`` on ``--problem`` (``--clients`` clients,
  ``--rounds`` LM iterations, each client evaluated on its own) and ``fipa`` (``--rounds`` rounds).
  ``gn_loss`` (θ down, one float up) is the small exchange, ``gn_stats`` carries JᵀJ (or its square root) up,
  ``update`` is fipa's local solve and sketch;
* **main job** — the wall time of the whole command ``python -m fedsciml <--main> --engine E --threads T``
  (imports and start-up included) for E = local and flower (Flower's simulation runtime), and for the stock
  deployment (``--deployment-main``: the same job as one ``flwr run`` on a SuperLink and one stock SuperNode
  per client, started for it, from submission to result; off by default, since every message starts a
  ``flwr-clientapp`` process and the job has ~40 exchanges);
* **idle CPU** — CPU seconds (user + system, from ``/proc``) that the engine's processes and all their
  descendants burn over ``--idle`` seconds with no run: the simulation SuperLink; the stock SuperLink, and
  each site's ``flower-supernode`` with the ``flower-superexec`` it starts (:mod:`flower_idle`).

It prints the table and writes ``<--out>.md`` and ``<--out>.csv`` (default ``reproductions/flower_overhead``)
with the command, the commit, the thread counts, the cores and the load average at the start and the end.
Timings are only comparable within one run on a quiet machine; ``--quick`` (1 round, 3 s idle, no main job)
checks that the script works, its figures mean nothing.

    OMP_NUM_THREADS=1 python scripts/bench/flower_overhead.py              # ~5 min on a quiet 2-core machine
    OMP_NUM_THREADS=1 python scripts/bench/flower_overhead.py --deployment-main

``--main-only`` runs only the main job, in process and over Flower's simulation, ``--repeat N`` times each,
alternating the two (local, flower, flower, local, …), and reports for each run the wall seconds of the whole
command and the CPU seconds (user + system) of its whole process tree — every descendant, also those Flower
and Ray start in sessions of their own (this script is their subreaper, so their CPU time is counted when
they end) — with the CPU seconds per program (the SuperLink, ``flwr run``, ``flwr-simulation`` with the
ServerApp, each Ray worker …), and the same-run ratio Flower / in process of each pair (wall and CPU).
It writes ``reproductions/flower_main_job.{md,csv}`` unless ``--out`` says otherwise:

    OMP_NUM_THREADS=1 python scripts/bench/flower_overhead.py --main-only --repeat 3
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fedsciml.runtime.transport import Transport  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "reproductions", "flower_overhead")
QUERIES = ("gn_loss", "gn_stats", "update")
COLUMNS = ["engine", "startup_s", "gn_loss_median_s", "gn_stats_median_s", "update_median_s", "solver_s",
           "main_job_wall_s", "idle_s", "idle_cpu_s", "idle_superlink_cpu_s", "idle_site_cpu_s",
           "idle_site_pct_core", "theta_bitwise_in_process"]
MAIN_COLUMNS = ["engine", "run", "wall_s", "tree_cpu_s", "solver_s", "exchanges", "final_loss", "load_1min_at_start"]


class TimedTransport(Transport):
    """Wraps a transport; records the wall time and query of each ask."""

    def __init__(self, inner):
        self.inner, self.times, self.queries = inner, [], []
        self.client_ids, self.sample_counts = inner.client_ids, inner.sample_counts

    def ask(self, client_ids, request):
        t0 = time.perf_counter()
        out = self.inner.ask(client_ids, request)
        self.times.append(time.perf_counter() - t0)
        self.queries.append(request.query)
        return out


def _by_query(times, queries) -> dict:
    return {q: statistics.median([t for t, qq in zip(times, queries) if qq == q]) for q in set(queries)}


def _merge(results) -> dict:
    """Median per query over several Flower runs (each run's own medians, pooled by exchange count)."""
    pooled: dict = {}
    for r in results:
        for q, v in r.extra["engine"]["by_query"].items():
            pooled.setdefault(q, []).extend([v["median_s"]] * int(v["exchanges"]))
    return {q: statistics.median(v) for q, v in pooled.items()}


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def in_process(p, K, runs) -> tuple[dict, dict]:
    import fedsciml as fs
    from fedsciml.runtime.client import Client
    from fedsciml.runtime.transport import LocalTransport

    t0 = time.perf_counter()
    loc, times, queries = {}, [], []
    for m, o in runs:  # each client on its own (what one Flower node computes)
        torch.manual_seed(0)
        tt = TimedTransport(LocalTransport([Client(i, ob) for i, ob in enumerate(p.client_objectives(K, seed=0))],
                                           vectorize=False))
        loc[m] = fs.solve(p, m, clients=K, transport=tt, **o)
        times += tt.times
        queries += tt.queries
    solver = sum(r.wall_time_s for r in loc.values())
    return {"engine": "in process", "startup_s": time.perf_counter() - t0 - solver, "solver_s": solver,
            "by_query": _by_query(times, queries), "idle_s": 0.0, "idle_cpu_s": 0.0}, loc


def simulation(p, K, runs, idle_s: float, loc) -> dict:
    from fedsciml.engines.flower.deploy import LocalSuperLink
    from fedsciml.engines.flower.simulation import solve_many
    from flower_idle import measure

    t0 = time.perf_counter()
    res = solve_many([dict(problem=p, method=m, clients=K, seed=0, **o) for m, o in runs], K)
    wall = time.perf_counter() - t0
    solver = sum(r.wall_time_s for r in res)
    with LocalSuperLink(simulation=True) as link:
        time.sleep(min(15.0, idle_s))  # let its SuperExec start and settle
        per = measure(link, idle_s)
    return {"engine": "Flower simulation (flwr run)", "startup_s": wall - solver, "solver_s": solver,
            "by_query": _merge(res), "idle_s": idle_s, "idle_cpu_s": sum(per.values()),
            "idle_superlink_cpu_s": sum(per.values()), "idle_processes": per,
            "bitwise": all(torch.equal(r.theta, loc[m].theta) for r, (m, _) in zip(res, runs))}


def deployment(p, K, runs, idle_s: float, loc, wait_s: float) -> dict:
    from fedsciml.engines.flower.resultio import read_result
    from fedsciml.engines.flower.deploy import LocalDeployment
    from flower_idle import measure

    with LocalDeployment(K, threads=1) as d:
        time.sleep(min(15.0, idle_s))  # let the SuperNodes register and start their SuperExecs
        per = measure(d, idle_s)
        t0 = time.perf_counter()  # the start-up counted: flwr run, the ServerApp, describe (not the processes)
        outs = [str(d.dir / f"bench-{m}") for m, _ in runs]
        jobs = [{"kind": "solve", "problem": p.name, "problem_options": dict(p.options), "method": m, "clients": K,
                 "seed": 0, "options": o, "out": out, "timeout": wait_s, "connect_timeout": wait_s}
                for (m, o), out in zip(runs, outs)]
        (d.dir / "bench-jobs.json").write_text(json.dumps(jobs))
        proc = d.submit_config({"problem": p.name, "clients": K, "jobs": str(d.dir / "bench-jobs.json")}, "bench")
        d.wait_files(proc, outs, wait_s)
        wall = time.perf_counter() - t0
        res = [read_result(o) for o in outs]
    solver = sum(r.wall_time_s for r in res)
    sites = [sum(v for k, v in per.items() if k.startswith(f"node{i}:")) for i in range(K)]
    link = sum(v for k, v in per.items() if k.startswith("superlink"))
    return {"engine": f"stock deployment ({K} SuperNodes, 127.0.0.1)", "startup_s": wall - solver,
            "solver_s": solver, "by_query": _merge(res), "idle_s": idle_s, "idle_cpu_s": sum(per.values()),
            "idle_superlink_cpu_s": link, "idle_site_cpu_s": sites, "idle_processes": per,
            "bitwise": all(torch.equal(r.theta, loc[m].theta) for r, (m, _) in zip(res, runs))}


PR_SET_CHILD_SUBREAPER = 36


def _subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux): Flower and Ray start processes in
    sessions of their own, whose CPU time then still adds up in this process's ``RUSAGE_CHILDREN`` once they
    are reaped here.  ``False`` where the call is not available (the tree's CPU is then left out)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _label(pid: int) -> str | None:
    """A short name of a process of the tree: the Flower program, Ray's helper, or the Python module run."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    if not argv:
        return None
    if os.path.basename(argv[0]) in ("raylet", "gcs_server"):
        return os.path.basename(argv[0])
    if argv[0].startswith("ray::") or any("default_worker.py" in a for a in argv):
        return "ray worker (" + argv[0].split()[0] + ")"  # a Ray worker names itself after its actor or task
    for a in argv:
        b = os.path.basename(a)
        if b.startswith(("flower-", "flwr", "raylet", "gcs_server")):
            return b
    if any("ray" in a and ("dashboard" in a or "log_monitor" in a or "monitor.py" in a) for a in argv):
        return "ray helper (" + next(os.path.basename(a) for a in argv if "ray" in a) + ")"
    if "-m" in argv[:-1]:
        return "python -m " + argv[argv.index("-m") + 1]
    return os.path.basename(argv[0])


def run_tree(cmd: list, env: dict, sample_s: float = 0.25) -> dict:
    """Run ``cmd``; return its wall seconds, ``by_process``: CPU seconds (user + system) per program
    (:func:`_label`) of the whole process tree it started (every descendant, also those in sessions of their own:
    this process is their subreaper and reaps them), sampled from ``/proc`` every ``sample_s`` s, and
    ``tree_cpu_s``, their sum (each process's last sample: the few ms after it are not counted).  Descendants
    still alive 60 s after the command ended fail the measurement."""
    import resource

    from fedsciml.engines.flower.deploy import descendants
    from flower_idle import cpu_s

    reaper = _subreaper()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict = {}  # pid -> (label, last CPU seconds)
    import threading

    out_err: dict = {}
    reader = threading.Thread(target=lambda: out_err.update(zip(("out", "err"), proc.communicate())))
    reader.start()
    while reader.is_alive():
        for pid in [proc.pid, *descendants(proc.pid), *(descendants(os.getpid()) if reaper else [])]:
            got = cpu_s(pid)
            if got is not None:
                lab = seen[pid][0] if pid in seen else _label(pid)
                if lab is not None:
                    seen[pid] = (lab, got[1])
        reader.join(sample_s)
    wall = time.perf_counter() - t0
    end = time.monotonic() + 60.0
    while reaper:  # the orphans Flower and Ray left: wait for them (they are shutting down) and reap them
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            if time.monotonic() > end:
                left = descendants(os.getpid())
                raise RuntimeError(f"{len(left)} process(es) of {' '.join(cmd[:4])} … still alive 60 s after it "
                                   f"ended: {[_label(p) for p in left]}")
            time.sleep(0.05)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    by: dict = {}
    for lab, cpu in seen.values():
        by[lab] = by.get(lab, 0.0) + cpu
    reaped = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime) if reaper else None
    # The whole tree's CPU is the sum over every process seen of its last /proc sample (a lower bound: the last
    # < sample_s of each process is not seen).  The kernel's total of reaped descendants (getrusage
    # RUSAGE_CHILDREN, kept as "reaped_cpu_s") is not used: on a Flower run it missed the Ray worker's CPU
    # (19 against 42 CPU-s for the main job on 2026-11-24, the worker alone sampled at 23 CPU-s).
    tree = sum(by.values()) if by else None
    return {"wall_s": wall, "tree_cpu_s": tree, "reaped_cpu_s": reaped, "by_process": by, "returncode": proc.returncode,
            "stdout": out_err.get("out", ""), "stderr": out_err.get("err", "")}


def main_job(command: str, threads: int, repeat: int = 1, engines=("local", "flower"), omp_wait_policy: str = "") -> dict:
    """Wall seconds and CPU seconds of the whole process tree of ``python -m fedsciml COMMAND --engine E
    --threads T --quiet --json …`` for E = local and flower, ``repeat`` times, alternating the order of the
    engines (ABBA…: a load that changes during the run weighs on both alike), with the solver's seconds, the
    exchanges and the final loss of each (the same job: the same numbers).  ``{engine: the median run, with
    "runs": every run}``; ``"ratios"``: Flower / local of each pair of runs, wall and CPU."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if omp_wait_policy:  # both engines alike (the Flower engine's processes use PASSIVE unless this says)
        env["OMP_WAIT_POLICY"] = omp_wait_policy
    runs: dict = {e: [] for e in engines}
    for i in range(repeat):
        for engine in (engines if i % 2 == 0 else tuple(reversed(engines))):
            with tempfile.TemporaryDirectory() as tmp:
                js = os.path.join(tmp, "r.json")
                cmd = [sys.executable, "-m", "fedsciml", *shlex.split(command), "--engine", engine, "--threads",
                       str(threads), "--quiet", "--json", js]
                load = os.getloadavg()[0]
                got = run_tree(cmd, env)
                if got["returncode"] != 0:
                    raise RuntimeError(f"{' '.join(cmd)} failed ({got['returncode']}):\n{got['stderr'][-2000:]}")
                with open(js) as f:
                    d = json.load(f)
            r = d["runs"][0] if "runs" in d else d
            runs[engine].append({"wall_s": got["wall_s"], "tree_cpu_s": got["tree_cpu_s"],
                                 "by_process": got["by_process"], "load_1min": load,
                                 "solver_s": r.get("solver_seconds", r.get("wall_time_s")), "loss": r["final"]["loss"],
                                 "exchanges": r["extra"].get("engine", {}).get("exchanges"),
                                 "by_query": r["extra"].get("engine", {}).get("by_query")})
            print(f"  main job, {engine}: {got['wall_s']:.1f} s wall, "
                  f"{got['tree_cpu_s'] if got['tree_cpu_s'] is not None else float('nan'):.1f} CPU-s (tree), "
                  f"solver {r.get('solver_seconds', r.get('wall_time_s')):.2f} s, load {load:.1f}", file=sys.stderr, flush=True)
    out: dict = {}
    for e, rs in runs.items():
        med = sorted(rs, key=lambda x: x["wall_s"])[(len(rs) - 1) // 2]
        out[e] = {**med, "runs": rs}
    if "local" in runs and "flower" in runs:
        out["ratios"] = [{"wall": f["wall_s"] / lo["wall_s"],
                          "cpu": (f["tree_cpu_s"] / lo["tree_cpu_s"]) if f["tree_cpu_s"] and lo["tree_cpu_s"]
                          else None} for lo, f in zip(runs["local"], runs["flower"])]
    return out


WAIT_POLICY_JOB = """
import json, resource, sys, time
import torch
torch.set_num_threads(int(sys.argv[1]))
import fedsciml as fs
from fedsciml.problems import get_problem
from fedsciml.runtime.client import Client
from fedsciml.runtime.transport import LocalTransport
p = get_problem("bratu")
torch.manual_seed(0)
tr = LocalTransport([Client(i, o) for i, o in enumerate(p.client_objectives(4, seed=0))], vectorize=False)
r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
res = fs.solve(p, "fipa", clients=4, rounds=int(sys.argv[2]), transport=tr)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.perf_counter() - t0, "loss": res.final["loss"],
                  "cpu_s": r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime}))
"""


def wait_policy(threads: int, rounds: int, procs: int = 2) -> dict:
    """What an OpenMP thread that waits costs when processes share the cores (as the ServerApp and the Ray
    workers of a Flower simulation do): ``procs`` processes side by side, each running bratu's fipa
    (``rounds`` rounds, 4 clients one by one, ``threads`` torch threads), with ``OMP_WAIT_POLICY`` unset
    (OpenMP's default: spin a while, then sleep) and ``PASSIVE`` (sleep at once).  Per policy: each process's
    wall and CPU seconds of its solve and its final loss (the same bits whatever the policy)."""
    env0 = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env0["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    env0["OMP_NUM_THREADS"] = str(threads)
    out = {}
    for policy in ("default", "PASSIVE"):
        env = dict(env0, **({} if policy == "default" else {"OMP_WAIT_POLICY": policy}))
        ps = [subprocess.Popen([sys.executable, "-c", WAIT_POLICY_JOB, str(threads), str(rounds)], env=env, cwd=ROOT,
                               stdout=subprocess.PIPE, text=True) for _ in range(procs)]
        got = []
        for q in ps:
            so, _ = q.communicate()
            if q.returncode != 0:
                raise RuntimeError(f"the wait-policy job failed ({q.returncode})")
            got.append(json.loads(so.strip().splitlines()[-1]))
        out[policy] = got
        print(f"  OMP_WAIT_POLICY {policy}: " + "; ".join(f"{g['wall_s']:.1f} s wall, {g['cpu_s']:.1f} CPU-s"
                                                         for g in got), file=sys.stderr, flush=True)
    return out


def deployment_main(command: str, wait_s: float) -> dict:
    """The main job as one ``flwr run`` on a SuperLink and one stock SuperNode per client, started for it:
    wall seconds from submission to its result (the processes' own start excluded), and its final loss.
    The command may name the problem, ``--clients`` and ``--method`` only (the job's other options are the
    method's defaults, as in the CLI)."""
    argv = shlex.split(command)
    if len(argv) < 2 or argv[0] != "solve":
        raise ValueError(f"--deployment-main runs a 'solve PROBLEM [--clients K] [--method M]' job, got {command!r}")
    from fedsciml.cli.main import build_parser
    from fedsciml.engines.flower.deploy import LocalDeployment

    ns = build_parser().parse_args(argv)
    extra = [a for a in argv[2:] if a.startswith("-") and a not in ("--clients", "--method")]
    if extra:
        raise ValueError(f"--deployment-main takes the problem, --clients and --method only, got {extra}")
    clients = int(ns.clients or 2)
    with LocalDeployment(clients, threads=1) as d:
        t0 = time.perf_counter()
        res, _ = d.run(ns.problem, ns.method or "fipa", wait_s=wait_s, timeout_s=wait_s, name="main")
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "solver_s": res.wall_time_s, "loss": res.final["loss"],
            "exchanges": res.extra["engine"]["exchanges"]}


def write(rows, main, header, args, idle_procs) -> list:
    lines = [*header]
    if rows:
        lines += ["",
             f"| engine | start-up (s) | small exchange: gn_loss (s) | gn_stats (s) | update (s) | bench solver (s) | "
             f"whole main job (s) | idle CPU (CPU-s per {args.idle:.0f} s) | idle, % of a core per site | "
             "θ bitwise = in process |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        q = r["by_query"]
        mj = r.get("main_job_wall_s")
        site = r.get("idle_site_pct_core")
        lines.append(f"| {r['engine']} | {r['startup_s']:.1f} | " + " | ".join(
            f"{q[k]:.3f}" if k in q else "—" for k in QUERIES)
            + f" | {r['solver_s']:.2f} | {'—' if mj is None else f'{mj:.1f}'} | "
            + ("—" if not r["idle_s"] else f"{r['idle_cpu_s']:.2f}") + " | "
            + ("—" if site is None else " / ".join(f"{s:.2f}" for s in site)) + f" | {r.get('bitwise', '—')} |")
    if main:
        lines += ["", f"main job `python -m fedsciml {args.main} --threads {args.threads}` (the median run of each "
                      f"engine by wall time; CPU: user + system seconds of the whole process tree, the sum over "
                      f"its processes of their last /proc sample, taken every 0.25 s):", "",
                  "| engine | whole command (s) | CPU, whole tree (CPU-s) | solver (s) | exchanges | final loss | "
                  "load (1 min) at its start |", "|---|---|---|---|---|---|---|"]
        for e, m in main.items():
            if e == "ratios":
                continue
            cpu = m.get("tree_cpu_s")
            lines.append(f"| {e} | {m['wall_s']:.1f} | {'—' if cpu is None else f'{cpu:.1f}'} | {m['solver_s']:.2f} "
                         f"| {m.get('exchanges') or '—'} | {m['loss']!r} | "
                         f"{'—' if m.get('load_1min') is None else format(m['load_1min'], '.1f')} |")
        if main.get("ratios"):
            wall = [r["wall"] for r in main["ratios"]]
            cpu = [r["cpu"] for r in main["ratios"] if r["cpu"] is not None]
            lines += ["", f"same-run ratio Flower simulation / in process, whole command, over {len(wall)} pair(s) "
                          f"of runs (alternated): wall median {statistics.median(wall):.2f}× "
                          f"(each: {', '.join(f'{x:.2f}' for x in wall)})"
                      + (f"; CPU of the whole tree median {statistics.median(cpu):.2f}× "
                         f"(each: {', '.join(f'{x:.2f}' for x in cpu)})" if cpu else "")]
        per = [(e, m["by_process"]) for e, m in main.items() if e != "ratios" and m.get("by_process")]
        if per:
            lines += ["", "CPU seconds per program of the median run (sampled from /proc every 0.25 s):", "",
                      "| engine | program | CPU-s |", "|---|---|---|"]
            for e, by in per:
                lines += [f"| {e} | {k} | {v:.1f} |" for k, v in sorted(by.items(), key=lambda kv: -kv[1])]
    if idle_procs:
        lines += ["", f"idle CPU per process over {args.idle:.0f} s (a site = its SuperNode and the SuperExec it "
                      "starts; the SuperLink's SuperExec runs in a session of its own):", "",
                  "| engine | process | CPU-s |", "|---|---|---|"]
        for eng, per in idle_procs:
            lines += [f"| {eng} | {k} | {v:.2f} |" for k, v in sorted(per.items())]
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="bratu")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--idle", type=float, default=30.0, help="seconds of idle time measured per engine")
    ap.add_argument("--skip", default="", help="comma-separated: simulation,deployment,main")
    ap.add_argument("--main", default="solve bratu --clients 4", help="the main job (a fedsciml command line)")
    ap.add_argument("--threads", type=int, default=2, help="--threads of the main job")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of the main job per engine, alternating the engines (ABBA…); the median is reported")
    ap.add_argument("--engines", default="local,flower",
                    help="the main job's engines, comma-separated (local, flower; the ratio needs both)")
    ap.add_argument("--wait-policy", type=int, default=0, metavar="ROUNDS",
                    help="only measure OpenMP's wait policy: two fipa runs of ROUNDS rounds side by side, "
                         "--threads threads each, OMP_WAIT_POLICY unset vs PASSIVE (prints; writes nothing)")
    ap.add_argument("--omp-wait-policy", default="", choices=("", "PASSIVE", "ACTIVE"),
                    help="OMP_WAIT_POLICY for both engines' main job (default: the environment's; the Flower "
                         "engine's processes use PASSIVE unless told); on a loaded machine PASSIVE keeps the "
                         "in-process run's threads from spinning, so the ratio measures the engine, not the load")
    ap.add_argument("--main-only", action="store_true",
                    help="only the main job, in process and over Flower's simulation (wall, whole-tree CPU, ratio)")
    ap.add_argument("--deployment-main", action="store_true",
                    help="also run the main job on stock processes (long: a flwr-clientapp process per message)")
    ap.add_argument("--wait", type=float, default=1800.0, help="seconds a Flower run may take before it fails")
    ap.add_argument("--quick", action="store_true", help="1 round, 3 s idle, no main job: checks the script works")
    ap.add_argument("--out", default=DEFAULT_OUT,
                    help="write OUT.md and OUT.csv ('' : do not write)")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be ≥ 1, got {args.repeat}")
    if args.wait_policy:
        load0 = os.getloadavg()
        res = wait_policy(args.threads, args.wait_policy)
        load1 = os.getloadavg()
        print(f"OMP_WAIT_POLICY, 2 processes side by side, bratu fipa {args.wait_policy} rounds, 4 clients one by "
              f"one, {args.threads} threads each; {os.cpu_count()} cores, load (1 min) {load0[0]:.1f} at the start, "
              f"{load1[0]:.1f} at the end; commit {commit()}")
        print("| OMP_WAIT_POLICY | wall (s), each process | CPU (CPU-s), each process | final loss |")
        print("|---|---|---|---|")
        for pol, got in res.items():
            print(f"| {pol} | {' / '.join(format(g['wall_s'], '.1f') for g in got)} | "
                  f"{' / '.join(format(g['cpu_s'], '.1f') for g in got)} | {got[0]['loss']!r} |")
        return 0
    bad = set(args.engines.split(",")) - {"local", "flower"}
    if bad or not args.engines:
        ap.error(f"--engines {args.engines!r}: allowed local, flower (comma-separated)")
    if args.main_only:
        if args.quick:
            ap.error("--main-only runs the main job, which --quick skips: give one of them")
        args.skip = "simulation,deployment"
        if args.out == DEFAULT_OUT:  # the full table's record is not overwritten by a main-job-only run
            args.out = DEFAULT_OUT.replace("flower_overhead", "flower_main_job")
    if args.quick:
        args.rounds, args.idle, args.skip = 1, 3.0, ",".join(filter(None, [args.skip, "main"]))
        args.deployment_main = False
    t_start, load0 = time.perf_counter(), os.getloadavg()
    torch.set_num_threads(1)
    from fedsciml.problems import get_problem

    p = get_problem(args.problem)
    K, R = args.clients, args.rounds
    runs = [("gn", dict(rounds=R, batched=False)), ("fipa", dict(rounds=R))]
    skip = set(filter(None, args.skip.split(",")))
    unknown = skip - {"simulation", "deployment", "main"}
    if unknown:
        ap.error(f"--skip {sorted(unknown)}: allowed simulation, deployment, main")
    stage = {}
    rows, loc = [], {}
    if not args.main_only:
        t = time.perf_counter()
        row, loc = in_process(p, K, runs)
        rows.append(row)
        stage["in process"] = time.perf_counter() - t
    if "simulation" not in skip:
        t = time.perf_counter()
        rows.append(simulation(p, K, runs, args.idle, loc))
        stage["simulation"] = time.perf_counter() - t
    if "deployment" not in skip:
        t = time.perf_counter()
        rows.append(deployment(p, K, runs, args.idle, loc, args.wait))
        stage["deployment"] = time.perf_counter() - t
    main = {}
    if "main" not in skip and args.main:
        t = time.perf_counter()
        main = main_job(args.main, args.threads, args.repeat, tuple(args.engines.split(",")), args.omp_wait_policy)
        if rows and "local" in main:
            rows[0]["main_job_wall_s"] = main["local"]["wall_s"]
        if len(rows) > 1 and rows[1]["engine"].startswith("Flower simulation") and "flower" in main:
            rows[1]["main_job_wall_s"] = main["flower"]["wall_s"]
        stage["main job"] = time.perf_counter() - t
        if args.deployment_main:
            t = time.perf_counter()
            main["stock deployment"] = deployment_main(args.main, args.wait)
            for r in rows:
                if r["engine"].startswith("stock deployment"):
                    r["main_job_wall_s"] = main["stock deployment"]["wall_s"]
            stage["deployment main job"] = time.perf_counter() - t
    for r in rows:
        if r.get("idle_site_cpu_s"):
            r["idle_site_pct_core"] = [100 * s / r["idle_s"] for s in r["idle_site_cpu_s"]]
    load = os.getloadavg()
    total = time.perf_counter() - t_start
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, ROOT), *(argv or sys.argv[1:])])
    header = [f"command: `{cmd}`", f"commit: {commit()}",
              f"date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}",
              f"bench work: {args.problem}, {K} clients, gn and fipa {R} round(s) each, 1 torch thread per client "
              f"and server (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}); main job "
              f"--threads {args.threads}", f"cores: {os.cpu_count()}; load average (1/5/15 min) at the start "
              f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
              f"OMP_WAIT_POLICY of the main job: {args.omp_wait_policy or os.environ.get('OMP_WAIT_POLICY') or 'unset'}"
              " (the Flower engine's own processes: PASSIVE unless set)",
              "stages (s): " + ", ".join(f"{k} {v:.0f}" for k, v in stage.items()) + f"; total {total:.0f}"]
    if args.quick:
        header.append("QUICK MODE: 1 round and 3 s of idling — these figures only show that the script runs")
    idle_procs = [(r["engine"], r["idle_processes"]) for r in rows if r.get("idle_processes")]
    lines = write(rows, main, header, args, idle_procs)
    print("\n".join(lines))
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out + ".md", "w") as f:
            f.write("# Flower overhead (scripts/bench/flower_overhead.py)\n\n" + "\n\n".join(header) + "\n"
                    + "\n".join(lines[len(header):]) + "\n")
        with open(args.out + ".csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["# " + h for h in header])
            if args.main_only:
                w.writerow(MAIN_COLUMNS)
                for e, m in main.items():
                    for i, r in enumerate(m.get("runs", []) if e != "ratios" else []):
                        w.writerow([e, i, f"{r['wall_s']:.2f}", "" if r["tree_cpu_s"] is None else
                                    f"{r['tree_cpu_s']:.2f}", f"{r['solver_s']:.3f}", r.get("exchanges") or "",
                                    repr(r["loss"]), f"{r['load_1min']:.2f}"])
                rows = []
            else:
                w.writerow(COLUMNS)
            for r in rows:
                q = r["by_query"]
                w.writerow([r["engine"], f"{r['startup_s']:.3f}", *(f"{q[k]:.4f}" if k in q else "" for k in QUERIES),
                            f"{r['solver_s']:.3f}", "" if r.get("main_job_wall_s") is None else
                            f"{r['main_job_wall_s']:.2f}", f"{r['idle_s']:.0f}", f"{r['idle_cpu_s']:.3f}",
                            "" if r.get("idle_superlink_cpu_s") is None else f"{r['idle_superlink_cpu_s']:.3f}",
                            " ".join(f"{s:.3f}" for s in r.get("idle_site_cpu_s", [])),
                            " ".join(f"{s:.2f}" for s in r.get("idle_site_pct_core", [])), r.get("bitwise", "")])
        print(f"wrote {args.out}.md and {args.out}.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
