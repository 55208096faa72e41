"""The published FIPA (``--preset paper``) against fedsciml's default FIPA, and why β = 0, γ = 1 diverges.

``table``: Bratu (manufactured, 2 clients, rank 20): relative L2 at rounds
0, 10, …, 50 of the paper preset (with the reference code's collocation
settings: 400 interior points, each end point ×20, boundary weight 10) and of
the default FIPA (local Gauss–Newton steps, safeguarded merge).

``ablation``: the paper preset with one setting changed at a time (pinv
cutoff, γ, local loss, Adam lr, boundary copies), plus the issue's two
divergent cases (sin1d n = 2 and Allen–Cahn, β = 0, γ = 1, no cutoff) with and
without the cutoff; and the size of the first merged step against the cutoff.

Writes ``reproductions/fipa_bratu_paper.{csv,md}`` and
``reproductions/fipa_ablation.{csv,md}`` / ``fipa_first_step.{csv,md}``.
Run with ``OMP_NUM_THREADS=1``; ``table`` takes ~3 min, ``ablation`` ~10 min on one core.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # repro_common

import repro_common  # noqa: E402
from fedsciml.methods.fipa import PAPER_PRESET, fipa_ask  # noqa: E402
from fedsciml.runtime.loop import RoundFailed  # noqa: E402
from fedsciml.problems import get_problem  # noqa: E402
from fedsciml.api import solve  # noqa: E402

PAPER_PDE = {"n_interior": 400, "n_boundary": 20, "boundary_weight": 10.0}
BRATU = {"variant": "manufactured"}


def run(problem, popts, **opts):
    """Relative L2 / MSE per round; a run whose clients' updates go non-finite at round k (the round fails:
    no valid message) is rerun for k − 1 rounds and its later rounds are reported as ``inf``."""
    pb = get_problem(problem, **popts)
    t = time.perf_counter()
    try:
        r = solve(pb, method="fipa", clients=2, seed=0, **opts)
    except RoundFailed as e:
        k = int(re.match(r"round (\d+)", str(e)).group(1))
        r = solve(pb, method="fipa", clients=2, seed=0, **{**opts, "rounds": k - 1})
        errs = [row[r.metric_name] for row in r.history]
        return errs + [math.inf] * (opts["rounds"] + 1 - len(errs)), time.perf_counter() - t, r.metric_name
    errs = [row[r.metric_name] for row in r.history]
    return errs, time.perf_counter() - t, r.metric_name


def table(args):
    marks = list(range(0, args.rounds + 1, 10))
    rows = []
    for label, popts, opts in [
        ("paper preset (--preset paper)", {**BRATU, **PAPER_PDE}, {"preset": "paper"}),
        ("fedsciml default FIPA", BRATU, {}),
    ]:
        errs, secs, metric = run("bratu", popts, rounds=args.rounds, **opts)
        row = {"method": label, "seconds": round(secs, 1)}
        row.update({f"round {k}": errs[k] for k in marks if k < len(errs)})
        rows.append(row)
        print(row, flush=True)
    cols = ["method", *[f"round {k}" for k in marks], "seconds"]
    note = ("Bratu −u″ − λeᵘ = f, u = x(1−x) (manufactured), 2 clients, rank 20, seed 0; relative L2 on 1001 points. "
            "Paper preset: " + ", ".join(f"{k}={v}" for k, v in PAPER_PRESET.items()) +
            "; problem: " + ", ".join(f"{k}={v}" for k, v in PAPER_PDE.items()) + ". Default FIPA: local GN step, "
            "safeguarded merge, problem defaults (1 copy of each end point). Seconds: wall time on a shared CPU.")
    print(repro_common.write("fipa_bratu_paper", cols, rows, note))


def ablation(args):
    R = args.rounds
    P = PAPER_PRESET
    cases = [
        ("bratu", "paper preset", {**BRATU, **PAPER_PDE}, {}),
        ("bratu", "γ = 1", {**BRATU, **PAPER_PDE}, {"gamma": 1.0}),
        ("bratu", "no cutoff (p·eps)", {**BRATU, **PAPER_PDE}, {"pinv_rtol": 0.0}),
        ("bratu", "no cutoff, γ = 1 (paper text)", {**BRATU, **PAPER_PDE}, {"pinv_rtol": 0.0, "gamma": 1.0}),
        ("bratu", "cutoff 1e-8", {**BRATU, **PAPER_PDE}, {"pinv_rtol": 1e-8}),
        ("bratu", "local loss ½‖r‖²/n (ours)", {**BRATU, **PAPER_PDE}, {"local_loss": "mean"}),
        ("bratu", "end points ×1 (boundary weight 10 in H)", BRATU, {}),
        ("bratu", "Adam lr 1e-3", {**BRATU, **PAPER_PDE}, {"lr": 1e-3}),
        ("sin1d", "no cutoff, γ = 1 (paper text)", {"n": 2}, {"pinv_rtol": 0.0, "gamma": 1.0}),
        ("sin1d", "cutoff 1e-5, γ = 1", {"n": 2}, {"gamma": 1.0}),
        ("sin1d", "paper preset", {"n": 2}, {}),
        ("allen-cahn", "no cutoff, γ = 1 (paper text)", PAPER_PDE, {"pinv_rtol": 0.0, "gamma": 1.0}),
        ("allen-cahn", "paper preset", PAPER_PDE, {}),
    ]
    marks = [k for k in (0, 1, 5, 10, 20, 30, 40) if k <= R]
    rows = []
    for problem, label, popts, change in cases:
        opts = {**P, **change}
        if opts["pinv_rtol"] == 0.0:
            opts["pinv_rtol"] = None  # the library default p·eps
        errs, secs, metric = run(problem, popts, rounds=R, **opts)
        row = {"problem": problem, "setting": label, "metric": metric, "seconds": round(secs, 1)}
        row.update({f"round {k}": errs[k] for k in marks})
        rows.append(row)
        print(row, flush=True)
    cols = ["problem", "setting", "metric", *[f"round {k}" for k in marks], "seconds"]
    note = (f"2 clients, seed 0, rank 20, {R} rounds. Each row is the paper preset ({', '.join(f'{k}={v}' for k, v in P.items())}) "
            "with the change named; PDE rows use the reference code's collocation settings "
            f"({', '.join(f'{k}={v}' for k, v in PAPER_PDE.items())}) unless the row says otherwise. "
            "sin1d: MSE; PDEs: relative L2.")
    print(repro_common.write("fipa_ablation", cols, rows, note))
    first_step()


def first_step():
    """‖merged step‖ of round 1 (Bratu, paper preset's local training) against the pseudo-inverse cutoff."""
    from fedsciml.core.curvature import fipa_merge_lowrank
    from fedsciml.methods.local import LocalConfig, local_update
    from fedsciml.runtime.client import Client

    pb = get_problem("bratu", **BRATU, **PAPER_PDE)
    objs, th = pb.client_objectives(2, seed=0), pb.init_params(0)
    cfg = LocalConfig(solver="adam", steps=P_STEPS, lr=PAPER_PRESET["lr"], loss=PAPER_PRESET["local_loss"])
    msgs = [local_update(Client(i, o), th, cfg, ask=fipa_ask("lowrank", rank=PAPER_PRESET["rank"]))[0]
            for i, o in enumerate(objs)]
    Us, lams, ds = [m["U"] for m in msgs], [m["lam"] for m in msgs], [m["delta"] for m in msgs]
    lam_all = torch.cat(lams)
    avg = sum(ds) / len(ds)
    rows = []
    for rt in (None, 1e-12, 1e-10, 1e-8, 1e-5, 1e-3):
        step = fipa_merge_lowrank(Us, lams, ds, rtol=rt)
        rows.append({"cutoff": "p·eps" if rt is None else rt, "‖merged step‖ (γ = 1)": float(step.norm()),
                     "‖FedAvg step‖": float(avg.norm())})
    note = (f"Bratu manufactured, 2 clients, round 1 of the paper preset's local training (Adam lr {PAPER_PRESET['lr']}, "
            f"τ = {P_STEPS}, per-part mean loss). Clients' kept eigenvalues span λ_min/λ_max = "
            f"{float(lam_all.min() / lam_all.max()):.1e}.")
    print(repro_common.write("fipa_first_step", ["cutoff", "‖merged step‖ (γ = 1)", "‖FedAvg step‖"], rows, note))


P_STEPS = PAPER_PRESET["local_steps"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["table", "ablation", "first-step"])
    ap.add_argument("--rounds", type=int, default=None, help="rounds (table: 50, ablation: 20)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.what == "table":
        args.rounds = args.rounds or 50
        table(args)
    elif args.what == "ablation":
        args.rounds = args.rounds or 20
        ablation(args)
    else:
        first_step()


if __name__ == "__main__":
    main()
