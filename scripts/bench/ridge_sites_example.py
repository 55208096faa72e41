"""Record the output of the Flower ridge-sites example (``examples/flower_ridge_sites.py``) in ``reproductions/``.

Runs the example once per ``--engines`` entry (``local``, ``flower`` — Flower's simulation engine —,
``deployment`` — a SuperLink and one SuperNode per site on 127.0.0.1) as a child process with this
interpreter and environment, keeps its printed output verbatim, and writes ``reproductions/NAME.{csv,md}``
(``--repro``, default ``flower_ridge_sites``): one row per (engine, ε) of the printed table (its leading numbers and
the row as printed, so the record follows the example's columns as they change), the
output of each engine verbatim, the command, the commit (``+dirty`` with the changed files), the thread count,
the niceness, the load average at the start and the end, and the wall and CPU seconds of each run (CPU: the
child processes' user + system time as ``resource.getrusage(RUSAGE_CHILDREN)`` counts it, that is of the
processes that were waited for; processes Flower starts and does not wait for are not counted).

Usage: ``python scripts/bench/ridge_sites_example.py [--engines local,flower,deployment] [--repro NAME]``.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "papers"))  # repro_common
import repro_common  # noqa: E402

EXAMPLE = os.path.join(ROOT, "examples", "flower_ridge_sites.py")
COLUMNS = ["engine", "epsilon", "numbers", "printed row"]


def run_example(engine: str, extra: list[str]) -> tuple[str, float, float]:
    """The example's stdout on ``engine``, its wall seconds and its children's CPU seconds; fails loudly."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, EXAMPLE, "--engine", engine, *extra], cwd=ROOT, capture_output=True,
                          text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"examples/flower_ridge_sites.py --engine {engine} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr[-4000:]}")
    return proc.stdout, wall, cpu


def parse(engine: str, out: str) -> list[dict]:
    """The rows of the example's printed table (the lines after its ``epsilon ...`` header, up to ``(``): the ε, the
    leading numbers of the row (σ, test MSE, floats, ... in the example's own column order, given by its header) and
    the row as printed."""
    lines = out.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["epsilon"])
    except StopIteration:
        raise SystemExit(f"no table in the output of engine {engine}:\n{out}") from None
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("("):
            break
        numbers = []
        for tok in line.split():
            try:
                float(tok)
            except ValueError:
                break
            numbers.append(tok)
        if not numbers:
            raise SystemExit(f"unexpected row {line!r} in the output of engine {engine}")
        rows.append({"engine": engine, "epsilon": numbers[0], "numbers": " ".join(numbers[1:]),
                     "printed row": " ".join(line.split()).replace("|", "¦")})
    if not rows:
        raise SystemExit(f"empty table in the output of engine {engine}:\n{out}")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="local,flower,deployment", help="comma-separated: local, flower, deployment")
    ap.add_argument("--repro", default="flower_ridge_sites", help="write reproductions/REPRO.{csv,md}")
    ap.add_argument("--example-args", default="", help="extra arguments for the example, e.g. '--epsilons inf,1'")
    args = ap.parse_args(argv)
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    bad = [e for e in engines if e not in ("local", "flower", "deployment")]
    if bad or not engines:
        raise SystemExit(f"--engines: {bad or args.engines!r} not allowed; give local, flower and/or deployment")
    extra = args.example_args.split()
    load0 = os.getloadavg()
    rows, blocks = [], []
    for engine in engines:
        out, wall, cpu = run_example(engine, extra)
        print(out, end="", flush=True)
        rows += parse(engine, out)
        blocks.append(f"`--engine {engine}`: {wall:.1f} s wall, {cpu:.1f} CPU s (waited-for child processes), "
                      f"output verbatim:\n\n```\n{out.rstrip()}\n```\n")
    load1 = os.getloadavg()
    same = {e: [(r["epsilon"], r["numbers"]) for r in rows if r["engine"] == e] for e in engines}
    agree = len({tuple(v) for v in same.values()}) == 1
    note = (f"`examples/flower_ridge_sites.py` (sha of the file at this commit: "
            f"{_blob(EXAMPLE)}), one run per engine, in this order.  OMP_NUM_THREADS = "
            f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, MKL_NUM_THREADS = {os.environ.get('MKL_NUM_THREADS', 'unset')}, "
            f"niceness {os.nice(0)}, {os.cpu_count()} cores; load average {load0[0]:.2f} / {load0[1]:.2f} / "
            f"{load0[2]:.2f} at the start, {load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} at the end.  "
            f"The engines printed {'the same' if agree else 'DIFFERENT'} numbers in every row (the leading numeric "
            f"columns; 'numbers' lists them after ε in the example's column order).\n\n"
            + "\n".join(blocks))
    print(repro_common.write(args.repro, COLUMNS, rows, note))
    if not agree:
        raise SystemExit("the engines disagree (see the record)")


def _blob(path: str) -> str:
    """The git blob hash of ``path`` as it is on disk (``git hash-object``), to tell which version of it ran."""
    try:
        return subprocess.run(["git", "hash-object", path], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()[:12]
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    main()
