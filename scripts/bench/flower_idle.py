"""Idle CPU of stock Flower processes: a ``flower-superlink`` and K ``flower-supernode`` s on 127.0.0.1, no run.

Each variant starts the processes (:class:`fedsciml.engines.flower.deploy.LocalDeployment`: only Flower's
programs with their options), waits ``--settle`` seconds, then reads every process's CPU seconds (user +
system, ``/proc/<pid>/stat``) before and after ``--seconds`` seconds of idling.  Per process and per site
(a SuperNode with the SuperExec it starts), and as a percentage of one core.

Variants (``--variants``, comma-separated):

* ``default`` — ``flower-supernode --insecure --superlink … --node-config …`` (isolation ``subprocess``: the
  SuperNode starts a ``flower-superexec`` that launches a ``flwr-clientapp`` per message);
* ``process`` — ``--isolation process``: the SuperNode starts no SuperExec (an operator then runs
  ``flower-superexec`` beside it; without one no ClientApp runs).  It shows the SuperNode's own share;
* ``poll60`` — the default processes with ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL=60`` in their environment: the
  task poll interval that Flower 1.41's ``flower-superexec`` reads from the environment (default 1 s, allowed
  0.01–60 s; not in any ``--help``).  A larger interval delays each message's ClientApp by up to that long.

Where the SuperNode pulls (every 3 s when nothing arrives: a fixed sleep in Flower 1.41's SuperNode loop)
and the SuperExec polls (1 s) is read from Flower's source; no option of ``flower-supernode`` changes them.

    OMP_NUM_THREADS=1 python scripts/bench/flower_idle.py --seconds 30 --variants default,process,poll60
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

TICK = os.sysconf("SC_CLK_TCK")
VARIANTS = {"default": ({}, []), "process": ({}, ["--isolation", "process"]),
            "poll60": ({"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "60"}, [])}


def cpu_s(pid: int):
    """``(program, CPU seconds)`` of a live process (user + system time, ``/proc/<pid>/stat``), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    prog = next((os.path.basename(a) for a in argv if os.path.basename(a).startswith(("flower-", "flwr"))),
                os.path.basename(argv[0]) if argv else str(pid))
    return prog, (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def snapshot(link) -> dict:
    """``{(owner, pid, program): CPU seconds}`` for every process ``link`` started and all their descendants
    (Flower starts some helpers in sessions of their own: the SuperLink's SuperExec), ``owner`` the
    ``link.procs`` name (``superlink``, ``node0``, …)."""
    from fedsciml.engines.flower.deploy import descendants

    out = {}
    for name, p in link.procs.items():
        for pid in [p.pid, *descendants(p.pid)]:
            got = cpu_s(pid)
            if got is not None:
                out[(name, pid, got[0])] = got[1]
    return out


def measure(link, seconds: float) -> dict:
    """CPU seconds per ``"owner: program"`` of ``link`` over ``seconds`` of idling."""
    a = snapshot(link)
    time.sleep(seconds)
    b = snapshot(link)
    out: dict = {}
    for (owner, pid, prog), cpu in b.items():
        key = f"{owner}: {prog}"
        out[key] = out.get(key, 0.0) + cpu - a.get((owner, pid, prog), 0.0)  # born meanwhile: all its CPU
    return out


def run_variant(name: str, clients: int, seconds: float, settle: float) -> dict:
    from fedsciml.engines.flower.deploy import LocalDeployment

    env, node_args = VARIANTS[name]
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with tempfile.TemporaryDirectory(prefix="fedsciml-idle-") as tmp:
            with LocalDeployment(clients, tmp, threads=1, node_args=node_args) as d:
                time.sleep(settle)
                per = measure(d, seconds)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    link = sum(v for k, v in per.items() if k.startswith("superlink"))
    sites = [sum(v for k, v in per.items() if k.startswith(f"node{i}:")) for i in range(clients)]
    return {"variant": name, "seconds": seconds, "processes": per, "superlink_cpu_s": link, "site_cpu_s": sites,
            "total_cpu_s": sum(per.values())}


def table(results, seconds: float) -> list:
    lines = [f"| variant | SuperLink (CPU-s / {seconds:.0f} s) | each site: SuperNode + SuperExec (CPU-s) | "
             "each site, % of a core | SuperLink, % of a core | all (CPU-s) |", "|---|---|---|---|---|---|"]
    for r in results:
        pct = " / ".join(f"{100 * s / seconds:.2f}" for s in r["site_cpu_s"])
        lines.append(f"| {r['variant']} | {r['superlink_cpu_s']:.2f} | "
                     + " / ".join(f"{s:.2f}" for s in r["site_cpu_s"])
                     + f" | {pct} | {100 * r['superlink_cpu_s'] / seconds:.2f} | {r['total_cpu_s']:.2f} |")
    lines += ["", "| variant | process | CPU-s |", "|---|---|---|"]
    for r in results:
        lines += [f"| {r['variant']} | {k} | {v:.2f} |" for k, v in sorted(r["processes"].items())]
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--settle", type=float, default=15.0, help="seconds after start-up before measuring")
    ap.add_argument("--variants", default="default,process,poll60")
    args = ap.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    bad = [v for v in names if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variant(s) {bad}; allowed: {', '.join(VARIANTS)}")
    load0 = os.getloadavg()
    results = [run_variant(v, args.clients, args.seconds, args.settle) for v in names]
    load = os.getloadavg()
    print(f"{args.clients} sites, {args.seconds:.0f} s idle after {args.settle:.0f} s settling; load average "
          f"{load0[0]:.1f} at the start, {load[0]:.1f} at the end, {os.cpu_count()} cores")
    print("\n".join(table(results, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
