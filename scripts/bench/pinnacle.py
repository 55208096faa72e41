#!/usr/bin/env python
"""PINNacle's cases, solved by fedsciml at one thread with a CPU-seconds budget, beside the paper's figures.

For each case in ``--cases`` (``problems/pinnacle.py``) and each run in ``--methods``, one process runs the path
users run::

    python -m fedsciml solve pinnacle --case CASE --pinnacle-dir DIR [--method gn --clients 4 ...]
        --device cpu --threads 1 --clock cpu --budget B --seed S --json F --quiet

with ``OMP_NUM_THREADS=1`` (``--jobs N`` runs N of them at once, each at one thread; budgets are solver CPU seconds
of each process, so a loaded machine slows the wall clock, not the comparison):

* ``centralized`` — fedsciml's default centralized solver (Levenberg–Marquardt, automatic form) on the pooled
  points of the K-site split below (``--method centralized --clients K``): the same points as the federated runs;
* ``gn`` — exact federated Gauss–Newton, ``--clients`` sites (default 4) on a spatial split (strips along x: each
  site owns a region of space): the problem's default ``n_interior`` and ``n_boundary`` (points
  in all, drawn over the whole domain and split by ownership; ``--n-interior``, ``--n-boundary`` change these
  totals), so every run trains on the same points;
* ``fipa`` — FIPA at its defaults on these cases (each site's full H_m where its message fits gn's cap: the case's
  ``run_defaults``; rank 20 for their 5×100 network), the same sites and points.

Each child's peak resident memory and CPU come from ``os.wait4`` on it (``scripts/bench/anchors.py: run_job``).
From its ``--json``: the final ``l2re`` (PINNacle's pooled L2RE on their reference points), the steps or rounds
done, why it stopped (``stop_reason``), floats sent per round and exchanges.

The paper's figures: ``--published FILE``, a CSV ``case,method,l2re`` (a ``#`` line may give the source: version,
table, page) transcribed from the paper; the table then shows, per case, the best published L2RE and its method.
Without it the column is empty: this repository holds no figure of theirs that was not read from the paper.

Output in ``--out DIR``: ``pinnacle.csv`` (one row per case × run) and ``pinnacle.md`` (the command, commit,
machine, load, the table), both rewritten after each finished run.  Example (the full benchmark, 16 cores)::

    python scripts/bench/pinnacle.py --pinnacle-dir ../PINNacle --budget 600 --jobs 16 --out runs/pinnacle
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from anchors import ROOT, BenchError, Job, _names, git_commit, machine, run_job  # noqa: E402  (the same child runner, records, option checks)
from fedsciml.problems.pinnacle import CASES  # noqa: E402

#: ``--methods`` → the method options of the run (``K``: the number of clients, ``--clients``)
METHODS = ("centralized", "gn", "fipa")
DEFAULT_CASES = ",".join(CASES)
CSV_FIELDS = ["case", "method", "clients", "n_params", "l2re", "rel_l2", "steps", "solver_s", "stopped_by",
              "peak_rss_mb", "child_cpu_s", "wall_s", "floats_per_round", "exchanges", "rc", "status",
              "published_best", "published_method"]


def child_env(device: str) -> dict:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def plan(a, out: Path) -> list[Job]:
    """The jobs of ``a.cases`` × ``a.methods``."""
    jobs = []
    for case in a.cases:
        for m in a.methods:
            tag = f"{case}-{m}"
            js = out / f"{tag}.json"
            k = a.clients
            cmd = [a.python, "-m", "fedsciml", "solve", "pinnacle", "--case", case, "--method", m, "--clients", str(k)]
            # point counts are totals, drawn once over the whole domain and split among the sites by ownership (issue
            # 37): every run of a case trains on the same points; unset, the problem's counts (they follow the network)
            if a.n_interior is not None:
                cmd += ["--n-interior", str(a.n_interior)]
            if a.n_boundary is not None:
                cmd += ["--n-boundary", str(a.n_boundary)]
            if a.pinnacle_dir:
                cmd += ["--pinnacle-dir", str(a.pinnacle_dir)]
            if a.hidden:
                cmd += ["--hidden", a.hidden]
            cmd += ["--device", a.device, "--threads", "1", "--clock", "cpu", "--budget", f"{a.budget:g}",
                    "--seed", str(a.seed), "--json", str(js), "--quiet"]
            jobs.append(Job(case, m, cmd, child_env(a.device), out / f"{tag}.log", js))
    return jobs


def read_published(path) -> tuple[dict, str]:
    """``({case: {method: l2re}}, source)`` from a CSV ``case,method,l2re`` (``#`` lines: the source)."""
    out: dict[str, dict[str, float]] = {}
    source = []
    with open(path, newline="") as fh:
        lines = [ln for ln in fh if ln.strip()]
    source = [ln.lstrip("#").strip() for ln in lines if ln.startswith("#")]
    rows = list(csv.DictReader(ln for ln in lines if not ln.startswith("#")))
    for i, r in enumerate(rows, 2):
        try:
            case, method, v = r["case"].strip(), r["method"].strip(), float(r["l2re"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BenchError(f"--published {path}: row {i} needs case, method and a number l2re, got {r}") from None
        if not (v >= 0 and math.isfinite(v)):
            raise BenchError(f"--published {path}: row {i}: l2re must be a finite number ≥ 0, got {v}")
        out.setdefault(case, {})[method] = v
    return out, " ".join(source)


def collect(job: Job, published: dict) -> dict:
    """One CSV row of a finished job."""
    r = {"case": job.exp, "method": job.run,
         **{k: job.result.get(k) for k in ("rc", "wall_s", "child_cpu_s", "peak_rss_mb")}}
    status = "ok" if job.result.get("rc") == 0 else f"failed (exit {job.result.get('rc')})"
    if job.result.get("killed"):
        status = f"killed at the wall-clock timeout ({job.result.get('wall_s', 0):.0f} s)"
    d: dict = {}
    if job.json_out is not None and job.json_out.exists():
        try:
            d = json.loads(job.json_out.read_text())
        except (OSError, ValueError) as e:
            status += f"; unreadable JSON: {e}"
    if status != "ok":
        tail = [ln for ln in (job.log.read_text().strip().splitlines() if job.log.exists() else [])
                if not ln.startswith("$ ")][-1:]
        status += (": " + tail[0][:200]) if tail else ""
    final, extra, hist = d.get("final") or {}, d.get("extra") or {}, d.get("history") or []
    if status == "ok" and "l2re" not in final:
        status = "no reference at hand (no l2re)"
    r.update(status=status, n_params=d.get("n_params"), l2re=final.get("l2re"), rel_l2=final.get("rel_l2"),
             steps=hist[-1].get("step") if hist else None, solver_s=extra.get("solver_time_s"),
             stopped_by=d.get("stop_reason") or extra.get("stopped_by"), clients=d.get("clients"),
             floats_per_round=extra.get("floats_per_round"), exchanges=extra.get("exchanges"))
    pub = published.get(job.exp) or {}
    if pub:
        best = min(pub, key=lambda m: pub[m])
        r.update(published_best=pub[best], published_method=best)
    return r


def _g(v, fmt="{:.2e}"):
    return "—" if v is None or v == "" or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def table(rows: list[dict]) -> str:
    head = ["case", "run", "p", "L2RE", "rel L2 (max comp.)", "steps", "stop reason", "solver CPU s", "peak RSS MB",
            "paper's best L2RE", "its method", "status"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["case"], r["method"] + (f" ×{r['clients']}" if r.get("clients") else ""),
                 _g(r.get("n_params"), "{:d}"), _g(r.get("l2re")), _g(r.get("rel_l2")), _g(r.get("steps"), "{:d}"),
                 r.get("stopped_by") or "—", _g(r.get("solver_s"), "{:.0f}"), _g(r.get("peak_rss_mb"), "{:.0f}"),
                 _g(r.get("published_best")), r.get("published_method") or "—", str(r.get("status")).replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record(rows, meta) -> str:
    m = meta["machine"]
    pub = (f"the paper's figures from `{meta['published']}`" + (f" ({meta['source']})" if meta["source"] else "")
           if meta["published"] else "no `--published` file: the paper's column is empty (no figure of theirs is "
                                     "written here that was not read from the paper)")
    return "\n".join([
        f"# PINNacle's cases on {m['host']}", "",
        f"Command: `{meta['command']}`", "",
        f"* fedsciml commit {meta['commit']}; PINNacle checkout `{meta['pinnacle_dir']}`",
        f"* machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; device {meta['device']}",
        f"* load average (1 min): {meta['load_start']:.1f} at the start, {meta['load_max']:.1f} at most, "
        f"{meta['load_end']:.1f} at the end; {meta['jobs']} job(s) at once, each at one thread; budget "
        f"{meta['budget']:g} solver CPU seconds per run (evaluation excluded)",
        f"* started {meta['started']}, {meta['wall_s']:.0f} s wall in all"
        + (f" — **incomplete: {meta['progress']}**" if meta.get("progress") else ""),
        f"* {pub}", "",
        "L2RE: PINNacle's pooled relative L2 error (√mean over their reference points and all output components, "
        "over the same of the reference), at the end of the run.  steps: LM iterations (centralized) or rounds.  "
        "Peak RSS: the child's ru_maxrss.", "",
        table(rows), ""])


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES, help="cases, comma-separated, of " + DEFAULT_CASES)
    ap.add_argument("--methods", default="centralized,gn,fipa",
                    help="runs, of " + ", ".join(METHODS) + " (centralized: on the pooled points of the split)")
    ap.add_argument("--budget", type=float, default=600.0, help="solver CPU seconds per run")
    ap.add_argument("--clients", type=int, default=4, help="sites of the federated runs (and of the split whose pooled "
                    "points the centralized run trains on)")
    ap.add_argument("--n-interior", type=int, default=None, help="interior points in all, split among the clients "
                    "by ownership (default the problem's: they follow the network)")
    ap.add_argument("--n-boundary", type=int, default=None, help="points of each condition in all, split likewise "
                    "(default the problem's)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (each one thread)")
    ap.add_argument("--pinnacle-dir", default=os.environ.get("FEDSCIML_PINNACLE"),
                    help="a PINNacle checkout (default $FEDSCIML_PINNACLE)")
    ap.add_argument("--hidden", default=None, help="hidden widths, e.g. 100,100,100,100,100 (their network); "
                    "default the problem's")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="the runs' device")
    ap.add_argument("--published", default=None, help="CSV case,method,l2re of the paper's figures")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=None, help="wall seconds after which a run is killed "
                    "(default 3 × budget + 300)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", default=None, help="folder for the CSV, the record and each run's log and JSON "
                    "(default runs/pinnacle-<time>)")
    a = ap.parse_args(argv)
    allowed = DEFAULT_CASES.split(",")
    a.cases = _names(a.cases, allowed, "cases")
    a.methods = _names(a.methods, list(METHODS), "methods")
    if not (a.budget > 0 and math.isfinite(a.budget)):
        raise BenchError(f"--budget must be a finite number of seconds > 0, got {a.budget}")
    for name in ("n_interior", "n_boundary"):
        v = getattr(a, name)
        if v is not None and v < a.clients:
            raise BenchError(f"--{name.replace('_', '-')} must be at least --clients ({a.clients}), got {v}")
    if a.jobs < 1 or a.clients < 1:
        raise BenchError(f"--jobs and --clients must be integers ≥ 1, got {a.jobs} and {a.clients}")
    if a.pinnacle_dir and not (Path(a.pinnacle_dir) / "ref").is_dir():
        raise BenchError(f"--pinnacle-dir {a.pinnacle_dir!r} has no ref/ folder: give a clone of "
                         "https://github.com/i207M/PINNacle")
    if a.hidden is not None:
        try:
            if not all(int(w) > 0 for w in a.hidden.split(",")):
                raise ValueError
        except ValueError:
            raise BenchError(f"--hidden must be comma-separated widths > 0, got {a.hidden!r}") from None
    a.published_rows, a.source = read_published(a.published) if a.published else ({}, "")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out = Path(a.out or ROOT / "runs" / f"pinnacle-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    jobs = plan(a, out)
    timeout = a.timeout if a.timeout is not None else 3 * a.budget + 300
    load = [os.getloadavg()[0]]
    done = threading.Event()

    def sample():
        while not done.wait(10.0):
            load.append(os.getloadavg()[0])

    threading.Thread(target=sample, daemon=True).start()
    t0 = time.perf_counter()
    commit = git_commit(ROOT)
    finished: set[int] = set()
    csv_path, md_path = out / "pinnacle.csv", out / "pinnacle.md"

    def write(final: bool):
        rows = [collect(job, a.published_rows) for i, job in enumerate(jobs) if i in finished]
        with open(csv_path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        meta = {"command": shlex.join(["python", "scripts/bench/pinnacle.py", *(sys.argv[1:] if argv is None
                                                                                else argv)]),
                "commit": commit, "machine": machine(), "pinnacle_dir": a.pinnacle_dir or "—", "device": a.device,
                "load_start": load[0], "load_max": max(load), "load_end": os.getloadavg()[0], "jobs": a.jobs,
                "budget": a.budget, "started": started, "wall_s": time.perf_counter() - t0,
                "published": a.published, "source": a.source,
                "progress": "" if final else f"{len(finished)} of {len(jobs)} runs finished so far"}
        md_path.write_text(record(rows, meta))

    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = {pool.submit(run_job, job, timeout): i for i, job in enumerate(jobs)}
        for fut in as_completed(futures):
            job = fut.result()
            finished.add(futures[fut])
            print(f"{job.exp} {job.run}: exit {job.result.get('rc')}, {job.result.get('wall_s', 0):.0f} s",
                  file=sys.stderr, flush=True)
            write(final=False)
    done.set()
    write(final=True)
    print(md_path.read_text())
    print(f"wrote {csv_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"pinnacle.py: {e}", file=sys.stderr)
        sys.exit(2)
