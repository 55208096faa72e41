"""Shared helpers of the ridge experiment scripts (``scripts/papers/oneshot-ridge/ridge_*.py``).

Each script runs one experiment of the one-shot ridge paper over several
seeds and writes ``<out>/<name>.{csv,md,json,png}`` with mean ± std columns.
Communication is reported in MB of float64 values (8 bytes per float), counted
from what the protocol actually sent.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

BYTES = 8  # float64


def parser(description: str, seeds: int = 5, out: str = "results/ridge") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seeds", type=int, default=seeds, help="number of seeds (mean ± std over them)")
    p.add_argument("--out", default=out, help="output directory")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (1 is fastest for the small batched ops on a shared machine)")
    return p


def setup(args):
    torch.set_num_threads(max(1, args.threads))
    os.makedirs(args.out, exist_ok=True)
    from fedsciml.runtime.driver import resolve_device

    return resolve_device(args.device)


def mb(floats: float) -> float:
    return floats * BYTES / 1e6


def mean_std(values):
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else 0.0)


def fmt(m, s, digits=5):
    if isinstance(m, float) and math.isnan(m):
        return "–"
    if abs(m) >= 1e4 or (0 < abs(m) < 10 ** (-digits + 1)):
        return f"{m:.3e} ± {s:.1e}"
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def aggregate(rows_per_seed: list[list[dict]], keys: list[str], numeric: list[str]) -> list[dict]:
    """Group the per-seed rows by ``keys`` and return ``{keys…, f_mean, f_std for f in numeric}``."""
    groups = {}
    for rows in rows_per_seed:
        for r in rows:
            groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, rs in groups.items():
        row = dict(zip(keys, key))
        for f in numeric:
            m, s = mean_std([r.get(f) for r in rs])
            row[f + "_mean"], row[f + "_std"] = m, s
        row["n_seeds"] = len(rs)
        out.append(row)
    return out


def write_table(args, name: str, columns: list[tuple[str, str]], rows: list[dict], meta: dict, digits=5):
    """``columns``: (header, field) — a field with ``_mean``/``_std`` is printed as mean ± std."""
    base = os.path.join(args.out, name)
    # CSV: every field
    fields = list(rows[0].keys()) if rows else []
    with open(base + ".csv", "w") as f:
        f.write(",".join(fields) + "\n")
        for r in rows:
            f.write(",".join(str(r[k]) for k in fields) + "\n")
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = []
        for _, fld in columns:
            if fld + "_mean" in r:
                cells.append(fmt(r[fld + "_mean"], r[fld + "_std"], digits))
            else:
                v = r.get(fld, "")
                cells.append(f"{v:.{digits}g}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    md = "\n".join(lines)
    cmd = "python " + " ".join(sys.argv)
    with open(base + ".md", "w") as f:
        f.write(f"<!-- {cmd} -->\n{md}\n")
    with open(base + ".json", "w") as f:
        json.dump({"command": cmd, "meta": meta, "rows": rows}, f, indent=2, default=str)
    print(md)
    print(f"wrote {base}.csv/.md/.json")
    return base


def save_fig(fig, args, name):
    path = os.path.join(args.out, name + ".png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")
    return path


def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as p

    return p


class Timer:
    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.s = time.perf_counter() - self.t0
