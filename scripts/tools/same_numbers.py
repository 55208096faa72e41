"""The same-numbers record of a restructuring: the main job, ``ridge``, ``solve --compare`` and five ``fs.solve``
runs, each line with its final loss and metric as ``repr`` (every digit) and, for the API runs, a digest of θ.

Run it before and after a change that must keep every number, at one thread, and ``diff`` the two outputs: where
the operations are the same, every line is bitwise equal.  Since issue 37 a PINN problem's point counts are totals
split among the clients (bratu's 400 interior points: 100 per client with 4 clients, where each client drew 400),
so the ``main``, ``compare`` and API ``fipa``/``gn``/``fedavg`` lines hold other numbers than before that change
(``main`` fipa rel L2 2.785e-5 → 9.746e-6); ``ridge`` and ``one-shot`` kept every digit.  Usage::

    OMP_NUM_THREADS=1 python scripts/tools/same_numbers.py > before.txt
    ... change ...
    OMP_NUM_THREADS=1 python scripts/tools/same_numbers.py > after.txt && diff before.txt after.txt
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # run from a checkout, as the usage says: this checkout's fedsciml, not an installed one

CLI = [
    ("main", ["solve", "bratu", "--clients", "4"]),
    ("ridge", ["ridge"]),
    ("compare", ["solve", "bratu", "--clients", "4", "--method", "gn", "--compare", "fedavg,fipa", "--rounds", "5"]),
]
API = [("fipa", {}), ("fipa", {"rank": 0, "rounds": 5}), ("gn", {"rounds": 5}), ("fedavg", {"rounds": 5}),
       ("one-shot", {})]


def runs_of(doc) -> list:
    if isinstance(doc, list):
        return doc
    return doc.get("runs", [doc]) if isinstance(doc, dict) else [doc]


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        for tag, argv in CLI:
            out = os.path.join(d, f"{tag}.json")
            p = subprocess.run([sys.executable, "-m", "fedsciml", *argv, "--json", out], capture_output=True,
                               text=True, cwd=ROOT)
            if p.returncode != 0:
                print(f"{tag} FAILED rc {p.returncode}: {p.stderr.strip().splitlines()[-1:]}")
                continue
            with open(out) as f:
                for r in runs_of(json.load(f)):
                    print(tag, r.get("method"), {k: repr(v) for k, v in r["final"].items()})
    import fedsciml as fs

    for method, kw in API:
        r = fs.solve("bratu" if method != "one-shot" else "ridge-linear", method=method, clients=4, **kw)
        digest = hashlib.sha256(r.theta.detach().cpu().numpy().tobytes()).hexdigest()[:16]
        print(method, kw, repr(r.final.get("loss")), repr(r.final.get("rel_l2")), digest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
