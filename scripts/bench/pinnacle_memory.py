#!/usr/bin/env python
"""PINNacle's 5 × 100 network on their own point counts: what ``auto`` picks and the memory it needs (issue 36:
"their 5×100 network runs on every case within 8 GB peak RSS on a CPU").

For each case: the parameters p, the residual rows at their point counts, the centralized LM solve ``auto`` picks
(``fedsciml.core.forms.choose_lm_solve`` with the case's K-FAC channel form and its residual graph per row: the
form, the preconditioner, the rows per block of the matrix-free operator) and the driver's memory estimate
(``fedsciml.runtime.driver.estimate_memory``, what the up-front check compares with the free memory).  With
``--run``, one child per case on the path users run::

    python -m fedsciml solve pinnacle --case CASE --pinnacle-dir DIR --hidden 100,100,100,100,100
        --n-interior N --n-boundary B --device cpu --threads 1 --clock cpu --max-iters 1 --cg-iters 2 --json F

(one at a time, ``OMP_NUM_THREADS=1``; ``--cg-iters 2`` keeps the step short — the operator, its K-FAC factors and
two products are what a step holds at its peak), its peak RSS from ``os.wait4``, killed past ``--kill-gb`` of RSS.

Their counts (``src/pde/baseclass.py``: 8192 domain and 2048 boundary points, and 2048 initial points for a
time-dependent case, times the ``mul`` of each class's ``training_points`` call: 4 for Poisson-Nd, the heat cases,
HInv, NS 2d-LT and GS): ``--n-interior`` their domain count; ``--n-boundary`` their boundary count, which fedsciml
draws per condition (theirs is shared by the conditions on the boundary), so the rows here are at least theirs.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: (domain, boundary) points of their class (mul included)
POINTS = {"burgers1d-c": (8192, 2048), "poisson2d-c": (8192, 2048), "poissonnd": (32768, 8192),
          "heat2d-ms": (32768, 8192), "ns2d-c": (8192, 2048), "heat2d-lt": (32768, 8192), "pinv": (8192, 2048),
          "hinv": (32768, 8192), "poisson2d-ms": (8192, 2048), "heat2d-vc": (32768, 8192),
          "ns2d-lt": (32768, 8192), "grayscott": (32768, 8192), "ks": (8192, 2048)}
HIDDEN = [100] * 5


def plan(case: str, pinnacle_dir: str | None) -> dict:
    """p, rows, auto's choice and the memory estimate of one case (builds the points, solves nothing)."""
    import fedsciml.engines  # noqa: F401  (registers the methods)
    from fedsciml.core.forms import choose_lm_solve
    from fedsciml.core.kfac_forms import has_jets
    from fedsciml.problems import get_problem
    from fedsciml.runtime import driver
    from fedsciml.runtime.memory import operator_graph_floats

    ni, nb = POINTS[case]
    pb = get_problem("pinnacle", case=case, pinnacle_dir=pinnacle_dir, n_interior=ni, n_boundary=nb, hidden=HIDDEN)
    p = int(pb.network().n_params)
    objs = pb.client_objectives(1, seed=0)
    rows = sum(int(o.n_residuals) for o in objs)
    ch = choose_lm_solve(rows, p, jets=has_jets(objs), graph_floats=operator_graph_floats(pb, "auto"))
    pl = driver.plan(pb, "centralized", clients=1, device="cpu")
    est = driver.estimate_memory(pb, 1, pl.config, "centralized", "cpu")
    return {"case": case, "p": p, "rows": rows, "form": ch.form, "precond": ch.precond, "block_rows": ch.chunk_rows,
            "estimate_gb": None if est is None else est[0] / 1e9}


def run(case: str, pinnacle_dir: str, out: Path, kill_gb: float, timeout: float) -> dict:
    ni, nb = POINTS[case]
    js = out / f"{case}.json"
    cmd = [sys.executable, "-m", "fedsciml", "solve", "pinnacle", "--case", case, "--pinnacle-dir", pinnacle_dir,
           "--hidden", ",".join(map(str, HIDDEN)), "--n-interior", str(ni), "--n-boundary", str(nb), "--device", "cpu",
           "--threads", "1", "--clock", "cpu", "--max-iters", "1", "--cg-iters", "2", "--json", str(js)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    killed: list[str] = []
    with open(out / f"{case}.log", "w") as fh:
        child = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                                 start_new_session=True)

        def watch():
            t0 = time.monotonic()
            while child.poll() is None:
                try:
                    with open(f"/proc/{child.pid}/status") as f:
                        rss = next((int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmRSS:")), 0)
                except OSError:
                    return
                if rss > kill_gb * 1e9 or time.monotonic() - t0 > timeout:
                    killed.append(f"rss {rss / 1e9:.1f} GB" if rss > kill_gb * 1e9 else "timeout")
                    os.killpg(child.pid, signal.SIGKILL)
                    return
                time.sleep(0.5)

        th = threading.Thread(target=watch, daemon=True)
        th.start()
        _pid, status, ru = os.wait4(child.pid, 0)
        th.join()
    res = {"case": case, "rc": os.waitstatus_to_exitcode(status), "peak_rss_gb": ru.ru_maxrss * 1024 / 1e9,
           "cpu_s": ru.ru_utime + ru.ru_stime, "killed": ",".join(killed)}
    if js.is_file():
        d = json.loads(js.read_text())
        h, x = d.get("history") or [], d.get("extra") or {}
        res.update(lm_solve=x.get("lm_solve"), precond=x.get("precond"), chunk_rows=x.get("chunk_rows"),
                   loss=[r.get("loss") for r in h[:3]], solver_s=x.get("solver_time_s"))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pinnacle-dir", default=os.environ.get("FEDSCIML_PINNACLE"))
    ap.add_argument("--cases", default=",".join(POINTS))
    ap.add_argument("--run", action="store_true", help="also run each case one LM step and measure its peak RSS")
    ap.add_argument("--out", default="runs/pinnacle_memory")
    ap.add_argument("--kill-gb", type=float, default=12.0, help="kill a child whose RSS passes this")
    ap.add_argument("--timeout", type=float, default=3600.0, help="wall seconds per child")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for case in a.cases.split(","):
        try:
            row: dict = plan(case, a.pinnacle_dir)
        except Exception as e:  # a case that cannot be built here (a file it trains on absent): said, and skipped
            print(json.dumps({"case": case, "error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        if a.run:
            row.update(run(case, a.pinnacle_dir, out, a.kill_gb, a.timeout))
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
