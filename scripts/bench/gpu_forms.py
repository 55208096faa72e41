"""The device-aware form choice on this machine (fedsciml.core.forms.choose_form): what ``auto`` picks for the
research sizes and why, then steps per second of ``lm_solve=auto`` against each forced form on Poisson d = 5 with
n = 20 000 interior points (scripts/bench/gpu_check.sh runs it on a GPU; ``--quick`` is a CPU dry run).

Target (issue 28): ``auto`` never picks a form that takes < ½ the steps of the best form on the device.
Writes one JSON (``--out``) and prints a table."""
from __future__ import annotations

import argparse
import json
import time

import torch

import fedsciml as fs
from fedsciml.core.forms import available_memory, choose_form
from fedsciml.core.nn import MLP

# (label, n rows, network sizes): the anchors' benchmarks and the turn-4 runs
SIZES = [("poisson d=5 defaults (4000+500)", 4_500, [5, 32, 32, 32, 1]),
         ("poisson d=5, 20000+200 (turn4)", 20_200, [5, 32, 32, 32, 1]),
         ("poisson d=5, 10^6 points", 1_000_000, [5, 32, 32, 32, 1]),
         ("exp10 mlp-tanh-64 (3000+500)", 3_500, [5, 64, 1]),
         ("exp16 64-64-48-48 (3000+500)", 3_500, [5, 64, 64, 48, 48, 1]),
         ("exp16 64-64-48-48, 10^5 points", 100_000, [5, 64, 64, 48, 48, 1]),
         ("exp19 256-256-128-128 (3000+500)", 3_500, [5, 256, 256, 128, 128, 1]),
         ("exp19 256-256-128-128, 10^5 points", 100_000, [5, 256, 256, 128, 128, 1]),
         ("poisson d=10 defaults-like (4000+500)", 4_500, [10, 32, 32, 32, 1])]


def choices(device: str) -> list[dict]:
    out = []
    for label, n, sizes in SIZES:
        p = MLP(sizes).n_params
        ch = choose_form(n, p, device=device)
        out.append({"label": label, "n": n, "p": p, "form": ch.form, "chunk_rows": ch.chunk_rows,
                    "reason": ch.reason})
        print(f"{label:40s} n={n:>9,} p={p:>7,} → {ch.form:8s} {ch.reason}", flush=True)
    return out


def run(form: str, device: str, budget: float, n_interior: int, n_boundary: int) -> dict:
    pb = fs.get_problem("poisson", dim=5, n_interior=n_interior, n_boundary=n_boundary)
    t = time.perf_counter()
    try:
        r = fs.solve(pb, "centralized", clients=1, budget=budget, lm_solve=form, device=device)
    except Exception as e:  # record and go on: a form that cannot run here is a finding, not a crash
        return {"lm_solve": form, "error": f"{type(e).__name__}: {e}"[:300]}
    steps = len(r.history) - 1
    solver = float(r.extra.get("solver_time_s", budget))
    row = {"lm_solve": form, "ran": r.extra.get("lm_solve"), "reason": r.extra.get("lm_solve_reason"),
           "steps": steps, "solver_s": solver, "steps_per_s": steps / solver if solver else 0.0,
           "rel_l2": r.final.get("rel_l2"), "loss": r.final.get("loss"), "wall_s": time.perf_counter() - t}
    print(f"  {form:8s} ran {row['ran']:8s} steps {steps:6d} in {solver:6.1f} s = {row['steps_per_s']:8.2f}/s "
          f"rel_l2 {row['rel_l2']:.3g}", flush=True)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--budget", type=float, default=12.0, help="solver seconds per form")
    ap.add_argument("--n-interior", type=int, default=20_000)
    ap.add_argument("--n-boundary", type=int, default=200)
    ap.add_argument("--forms", default="auto,normal,kernel,chunked,matfree")
    ap.add_argument("--out", default="gpu_forms.json")
    args = ap.parse_args(argv)
    free = available_memory(args.device)
    print(f"device {args.device}: {free / 1e9 if free else float('nan'):.1f} GB free", flush=True)
    res = {"device": args.device, "free_bytes": free, "choices": choices(args.device), "runs": []}
    if torch.device(args.device).type == "cuda":
        res["gpu"] = torch.cuda.get_device_name(torch.device(args.device))
    print(f"Poisson d=5, {args.n_interior:,}+{args.n_boundary:,} points, {args.budget:g} s per form:", flush=True)
    for form in args.forms.split(","):
        res["runs"].append(run(form, args.device, args.budget, args.n_interior, args.n_boundary))
        json.dump(res, open(args.out, "w"), indent=1, default=str)
    ok = [r for r in res["runs"] if "steps" in r]
    auto = next((r for r in ok if r["lm_solve"] == "auto"), None)
    if auto is not None and ok:
        best = max(ok, key=lambda r: r["steps_per_s"])
        ratio = auto["steps_per_s"] / best["steps_per_s"] if best["steps_per_s"] else 0.0
        res["target"] = {"auto": auto["ran"], "best": best["lm_solve"], "auto_over_best": ratio,
                         "met": ratio >= 0.5}
        print(f"auto → {auto['ran']}: {ratio:.2f} × the steps/s of the best form ({best['lm_solve']}); "
              f"target ≥ 0.5: {'met' if ratio >= 0.5 else 'MISSED'}", flush=True)
    json.dump(res, open(args.out, "w"), indent=1, default=str)


if __name__ == "__main__":
    main()
