#!/usr/bin/env python
"""The anchors' benchmarks: fedsciml against the K-FAC-for-PINNs authors' own code, at equal CPU seconds.

Dangel, Müller & Zeinhofer (NeurIPS 2024) published their experiments as ``f-dangel/kfac-pinns-experiments``
(package ``kfac_pinns_exp``: one training script ``train.py`` and one folder per experiment, whose
``best_runs/*_meta.csv`` hold the command of each optimizer's best run of their hyperparameter sweep).  This
script runs, for each experiment in ``--exps`` and each run in ``--runs``, one process at one thread with a
budget of ``--budget`` **CPU seconds of solver time** (test evaluation excluded on both sides), and reads the
relative L2 error each run had reached at the ``--checkpoints``:

* ``authors:NAME`` — their ``train.py`` with the exact command of their best run of optimizer NAME for that
  experiment (read at run time from ``<anchors-dir>/kfac_pinns_exp/<exp folder>/best_runs``; nothing of
  theirs is copied into this repository, and fedsciml never imports it).  The child process is their script's
  ``main()`` under a small driver (:data:`AUTHORS_DRIVER`) that only changes what it measures:

  - their clock: ``train.py`` stops after ``--num_seconds`` of ``time.time()`` (wall) and logs that time; the
    driver makes its ``time`` the process's CPU seconds (``time.process_time``) minus the time spent in
    their test evaluation (``l2_error`` on ``N_eval = 10·N_Omega`` points), so their budget and their logged
    times are solver CPU seconds, as fedsciml's ``--clock cpu``;
  - their error: ``l2_error`` returns the *absolute* RMS error on the evaluation points; the driver prints
    beside it the RMS of the exact solution on the same points, and this script reports their ratio, the
    relative L2 error (fedsciml's ``rel_l2`` is ‖u_θ − u‖/‖u‖ on its own fixed test points: both are
    Monte-Carlo estimates of the same quantity, on different point sets);
  - their logging: ``train.py`` with ``--num_seconds`` logs at steps 0, 1 and then every 10 % more steps; the
    driver adds one evaluation at the last step before each checkpoint (predicted from the last step's
    time), so that "the last evaluation at or before t" is not a step far behind t;
  - ``wandb``: imported at the top of ``train.py`` and used only with ``--wandb``, which is never passed; the
    driver gives it an empty module (the pinned wandb 0.16.3 does not import with numpy ≥ 2).

* ``fedsciml:NAME`` — ``python -m fedsciml solve PROBLEM --preset EXP ... --device cpu --threads 1 --clock cpu
  --budget B --json F`` (the path users run; the zoo's presets state the authors' problems), where NAME is one
  of :data:`FEDSCIML_RUNS`: ``lm`` (centralized Levenberg–Marquardt, automatic form), ``gn`` (federated
  Gauss–Newton, 4 clients sharing the experiment's points: floats per round and exchanges from the JSON),
  ``kfac`` / ``gn-kfac`` (the matrix-free solve preconditioned by K-FAC for PINNs; ``kfac-cg10`` with CG
  truncated at 10 iterations), ``matfree`` /
  ``gn-matfree`` (the matrix-free solve with the Nyström preconditioner).

Both sides run on the CPU only (``CUDA_VISIBLE_DEVICES`` empty: their ``train.py`` takes CUDA whenever it is
there).

Each child's peak resident memory and total CPU come from ``os.wait4`` on that child (its own
``ru_maxrss``/``ru_utime + ru_stime``; ``getrusage(RUSAGE_CHILDREN)`` would mix the children that run at
once).  ``--jobs N`` runs N children at once, each at one thread (``OMP_NUM_THREADS=1``,
``torch.set_num_threads(1)``); budgets are CPU seconds, so a loaded machine slows the wall clock, not the
comparison — the record still gives the load.

The value at a checkpoint t is the last evaluation at or before t solver CPU seconds (what the run had
reached within t; its own time is in the ``at_s`` column) — never interpolated.

Output: ``--csv`` (one row per experiment × run × checkpoint), ``--md`` (the record: command, commits, machine,
load, the table; both rewritten after each finished run) and, with ``--docs FILE``, the table written into FILE
between the markers ``<!-- anchors-table:begin -->`` and ``<!-- anchors-table:end -->``.  ``--render CSV``
runs nothing and renders a CSV written elsewhere (e.g. on another machine) into the table and ``--docs``.

The authors' side needs their checkout (``--anchors-dir``: the folder holding ``kfac_pinns_exp/train.py``)
and a Python with their dependencies (``--authors-python``, default this one): torch, numpy, einops,
matplotlib, tueplots, backpack-for-pytorch (+ unfoldNd) and ``hessianfree`` (ltatzel/PyTorchHessianFree; not
the PyPI package of that name).  Example (the issue's grid; see ``reproductions/anchors_*.md`` for runs)::

    python scripts/bench/anchors.py --anchors-dir ../kfac-pinns-experiments \\
        --exps exp10,exp16,exp19,exp21,heat4d-medium \\
        --runs fedsciml:lm,fedsciml:gn,fedsciml:matfree,authors:KFAC*,authors:ENGD,authors:Adam \\
        --budget 600 --checkpoints 30,120,300,600 --jobs 16 --md reproductions/anchors_MACHINE.md
"""
from __future__ import annotations

import argparse
import ast
import csv
import json
import math
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class BenchError(Exception):
    """A bad argument or a missing prerequisite: printed as one line, exit status 2."""


@dataclass(frozen=True)
class Experiment:
    """One of the authors' experiments and the fedsciml problem that states the same benchmark."""

    folder: str                 # kfac_pinns_exp/<folder> in their checkout
    what: str                   # one line for the tables
    problem: str                # fedsciml problem name
    options: tuple[str, ...]    # its options on the command line (the zoo's preset for this experiment)


#: the anchor experiments (issue 28): the authors' folder and fedsciml's statement of the same problem
EXPERIMENTS: dict[str, Experiment] = {
    "exp10": Experiment("exp10_reproduce_poisson5d", "Poisson 5-d, Σ cos πxᵢ, mlp-tanh-64",
                        "poisson", ("--preset", "exp10")),
    "exp16": Experiment("exp16_poisson5d_deepwide", "Poisson 5-d, Σ cos πxᵢ, mlp-tanh-64-64-48-48",
                        "poisson", ("--preset", "exp16")),
    "exp19": Experiment("exp19_poisson5d_mlp_tanh_256", "Poisson 5-d, Σ cos πxᵢ, mlp-tanh-256-256-128-128",
                        "poisson", ("--preset", "exp19")),
    "exp21": Experiment("exp21_poisson_10d", "Poisson 10-d, weinan, mlp-tanh-256-256-128-128",
                        "poisson", ("--preset", "exp21")),
    "heat4d-small": Experiment("exp27_heat4d_small", "heat 4-d, mlp-tanh-64", "heat-nd", ("--preset", "exp27")),
    "heat4d-medium": Experiment("exp28_heat4d_medium", "heat 4-d, mlp-tanh-64-64-48-48",
                                "heat-nd", ("--preset", "exp28")),
    "heat4d-big": Experiment("exp29_heat4d_big", "heat 4-d, mlp-tanh-256-256-128-128",
                             "heat-nd", ("--preset", "exp29")),
}

#: ``authors:NAME`` → the label of that optimizer in their experiment's plot.py (``sweep_ids``)
AUTHORS_RUNS = {"KFAC*": "KFAC*", "KFAC": "KFAC", "ENGD": "ENGD (full)", "ENGD-layer": "ENGD (layer-wise)",
                "ENGD-diag": "ENGD (diagonal)", "Adam": "Adam", "SGD": "SGD", "LBFGS": "LBFGS",
                "HessianFree": "Hessian-free"}

#: ``fedsciml:NAME`` → the method options of the run (the problem's own come from :data:`EXPERIMENTS`).  Runs
#: with ``--clients K`` share the preset's points among the K clients: ``n_interior`` and ``n_boundary`` count
#: points in total, whatever the method (issue 37), so every run trains on as many points as the authors' runs.
#: (Before that change this script divided the counts by K itself; kept after it, that gave each gn client a
#: sixteenth of the points — a gn row of a record written by such a run is on a quarter of the points.)
#: ``kfac``: the matrix-free solve preconditioned by K-FAC for PINNs (``--precond kfac``).
FEDSCIML_RUNS: dict[str, tuple[str, ...]] = {
    "lm": (),
    "gn": ("--clients", "4", "--method", "gn"),
    "matfree": ("--lm-solve", "matfree"),
    "kfac": ("--lm-solve", "matfree", "--precond", "kfac"),
    # K-FAC with CG truncated at 10 iterations: the setting reproductions/kfac_pinn.md found best at equal CPU
    "kfac-cg10": ("--lm-solve", "matfree", "--precond", "kfac", "--cg-iters", "10"),
    "gn-matfree": ("--clients", "4", "--method", "gn", "--form", "matfree"),
    "gn-kfac": ("--clients", "4", "--method", "gn", "--form", "matfree", "--precond", "kfac"),
    # FIPA at its defaults: each site's local step and rank-20 curvature sketch, one exchange a round (issue 37)
    "fipa": ("--clients", "4", "--method", "fipa"),
}

DEFAULT_EXPS = "exp10,exp16,exp19,exp21,heat4d-medium"
DEFAULT_RUNS = ("fedsciml:lm,fedsciml:gn,fedsciml:kfac,fedsciml:gn-kfac,authors:KFAC*,authors:KFAC,authors:ENGD,"
                "authors:Adam,authors:LBFGS")
DEFAULT_CHECKPOINTS = "30,120,300,600"
DEFAULT_BUDGET = 600.0

#: the driver of the authors' side: their train.main() with the clock, error and logging changes described in
#: the module docstring.  argv: checkpoints (comma-separated CPU seconds), then train.py's own arguments.
AUTHORS_DRIVER = r'''
import sys, time, types
import torch
torch.set_num_threads(1)
torch.set_num_interop_threads(1)
sys.modules["wandb"] = types.ModuleType("wandb")  # used by train.py only under --wandb, never passed here
from kfac_pinns_exp import train as T

checkpoints = sorted(float(c) for c in sys.argv[1].split(",") if c)
sys.argv[:] = ["train.py"] + sys.argv[2:]  # in place: their parse_utils holds this list (from sys import argv)
paused = [0.0]
t0 = [None]


def clock():
    """CPU seconds of this process, less the time spent in test evaluation."""
    return time.process_time() - paused[0]


T.time = clock
_l2_error = T.l2_error


def l2_error(model, X, u):
    t = time.process_time()
    solver_s = clock() - t0[0]
    err = _l2_error(model, X, u)
    with torch.no_grad():
        ref = (u(X) ** 2).mean().sqrt()
    print(f"[anchors] eval solver_s={solver_s:.6f} abs={float(err):.17g} ref={float(ref):.17g}", flush=True)
    paused[0] += time.process_time() - t
    return err


T.l2_error = l2_error
_Trigger = T.LoggingTrigger


class LoggingTrigger(_Trigger):
    """Their trigger, plus one log at the last step before each checkpoint."""

    def __init__(self, *args):
        super().__init__(*args)
        t0[0] = clock()  # train.py reads its own start right after building the triggers
        self.prev = 0.0
        self.pending = list(checkpoints)
        self.theirs = self.should_log
        self.should_log = self.ours

    def ours(self, step):
        now = clock() - t0[0]  # called once per step, after the step (train.py has just read its clock)
        dt, self.prev = now - self.prev, now
        log = self.theirs(step)
        while self.pending and now >= self.pending[0]:
            self.pending.pop(0)
        if self.pending and now + dt >= self.pending[0]:  # the next step would pass the checkpoint
            log = True
        return log


T.LoggingTrigger = LoggingTrigger
T.main()
'''


# --- reading the authors' checkout ------------------------------------------------------------------------

def authors_train(anchors_dir: str | os.PathLike) -> Path:
    """Their ``train.py`` in the checkout ``anchors_dir``; a missing one is one clear line."""
    d = Path(anchors_dir)
    train = d / "kfac_pinns_exp" / "train.py"
    if not train.is_file():
        raise BenchError(f"--anchors-dir {str(d)!r} holds no kfac_pinns_exp/train.py: give the folder of a checkout "
                         "of f-dangel/kfac-pinns-experiments (e.g. the extracted .anchors/kfac-pinns-experiments.tar.gz)")
    return train


def sweep_labels(plot_py: str) -> dict[str, str]:
    """``{sweep id: optimizer label}`` from the uncommented entries of ``sweep_ids`` in an experiment's plot.py."""
    m = re.search(r"sweep_ids\s*=\s*\{(.*?)\n\}", plot_py, re.S)
    if m is None:
        return {}
    out = {}
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0]
        e = re.match(r'\s*"([^"]+)"\s*:\s*"([^"]+)"', line)
        if e:
            out[e.group(1)] = e.group(2)
    return out


def best_commands(anchors_dir, exp: Experiment) -> dict[str, list[str]]:
    """``{optimizer label: train.py arguments}`` of the authors' best run of each optimizer of ``exp`` (from
    ``best_runs/*_<sweep>_best_meta.csv``; ``--wandb`` and ``--num_seconds`` removed)."""
    folder = Path(anchors_dir) / "kfac_pinns_exp" / exp.folder
    labels = sweep_labels((folder / "plot.py").read_text())
    out: dict[str, list[str]] = {}
    for sweep, label in labels.items():
        meta = next((folder / "best_runs").glob(f"*_{sweep}_best_meta.csv"), None)
        if meta is None:
            continue
        with open(meta, newline="") as fh:
            config = ast.literal_eval(next(csv.DictReader(fh))["config"])
        args = shlex.split(config["cmd"])
        args = args[args.index(next(a for a in args if a.endswith("train.py"))) + 1:]
        out[label] = [a for a in args if a != "--wandb" and not a.startswith("--num_seconds")]
    return out


def _ask_preset(python: str, exp: Experiment, expr: str, what: str):
    """The JSON value of ``expr`` about the experiment's fedsciml preset, computed by ``python`` (names in scope:
    ``opts``, the preset's problem options, and ``problem()``, the problem built from them); a failure is one
    line naming ``what``."""
    preset = exp.options[exp.options.index("--preset") + 1]
    code = ("import json, math; from fedsciml.problems.registry import REGISTRY; from fedsciml.problems import "
            f"get_problem; opts = REGISTRY[{exp.problem!r}].presets[{preset!r}].problem; "
            f"problem = lambda: get_problem({exp.problem!r}, **opts); print(json.dumps({expr}))")
    r = subprocess.run([python, "-c", code], capture_output=True, text=True, env=child_env(), cwd=str(ROOT))
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        raise BenchError(f"cannot {what} of fedsciml's {exp.problem} --preset {preset}: {last}")
    return json.loads(r.stdout)


def solution_rms(python: str, exp: Experiment) -> float:
    """``|u|_RMS`` of the exact solution on fedsciml's test points of the experiment's preset (30 000 uniform
    points: a Monte-Carlo estimate of the same quantity as the authors' on their evaluation points), read by
    ``python``."""
    return float(_ask_preset(python, exp, "(lambda u: float(u.norm() / math.sqrt(u.numel())))(problem()._test()[1])",
                             "evaluate the solution"))


def authors_logged(anchors_dir, exps, checkpoints, python) -> list[dict]:
    """CSV rows of the authors' own logged best runs (``best_runs/*_<sweep>_best_history.csv`` of each experiment:
    ``time``, their ``train.py``'s wall seconds on their GPU — an RTX 6000, 24 GiB, double precision, says their
    paper — evaluations included; ``l2_error``, the *absolute* RMS error on their evaluation points), run
    ``authors-log:LABEL``.  rel L2 = ``l2_error`` / :func:`solution_rms` (fedsciml's test points: within 0.5 % of
    the RMS on their own points, which their driver prints on a CPU run — 1.5830 against 1.5888 on exp16)."""
    rows = []
    for e in exps:
        exp = EXPERIMENTS[e]
        folder = Path(anchors_dir) / "kfac_pinns_exp" / exp.folder
        labels = sweep_labels((folder / "plot.py").read_text())
        rms = solution_rms(python, exp)
        for sweep, label in labels.items():
            hist = next((folder / "best_runs").glob(f"*_{sweep}_best_history.csv"), None)
            if hist is None:
                continue
            with open(hist, newline="") as fh:
                logged = [(float(r["time"]), float(r["l2_error"]) / rms, int(float(r["step"])))
                          for r in csv.DictReader(fh) if r.get("time") and r.get("l2_error")]
            base = {"exp": e, "run": f"authors-log:{label}", "side": "authors-log", "status": "ok",
                    "note": f"their logged GPU run ({hist.name.split('_best_')[0].rsplit('_', 1)[-1]}; RTX 6000, "
                            f"wall s); rel L2 = their l2_error / {rms:.4g}",
                    "steps": max((s for _t, _v, s in logged), default=None)}
            for t, v in at_checkpoints(logged, checkpoints).items():
                rel, at, step = v if v is not None else (None, None, None)
                rows.append({**base, "checkpoint_s": t, "rel_l2": rel, "at_s": at, "step_at": step})
    return rows


# --- jobs ------------------------------------------------------------------------------------------------

@dataclass
class Job:
    exp: str
    run: str                  # "fedsciml:lm", "authors:KFAC*"
    cmd: list[str]
    env: dict
    log: Path
    json_out: Path | None = None
    note: str = ""            # e.g. the authors' model when it differs from the experiment's
    skipped: str = ""         # why it does not run (nothing to run)
    result: dict = field(default_factory=dict)

    @property
    def side(self) -> str:
        return self.run.split(":", 1)[0]


def child_env(extra_path: str | None = None, cuda: bool = False) -> dict:
    env = dict(os.environ)
    # CPU only (unless ``cuda``, fedsciml's GPU runs): their train.py takes CUDA whenever it is there, and the
    # CPU comparison is CPU seconds at one thread
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", WANDB_MODE="disabled",
               PYTHONUNBUFFERED="1")
    if not cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([extra_path] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def plan(exps, runs, budget, checkpoints, out: Path, anchors_dir, authors_python, python, seed=0,
         device="cpu") -> list[Job]:
    """The jobs of ``exps`` × ``runs``, in that order (experiment by experiment); a run ``RUN@EXP+EXP`` only on
    those experiments.  ``device="cuda"``: fedsciml's runs on the GPU with a wall-clock budget (authors' runs are
    refused by :func:`parse_args`: their driver measures CPU seconds)."""
    jobs: list[Job] = []
    points: dict[str, tuple[int, int]] = {}
    for e in exps:
        exp = EXPERIMENTS[e]
        commands = None
        for r in runs:
            r, _, only = r.partition("@")
            if only and e not in only.split("+"):
                continue
            side, name = r.split(":", 1)
            tag = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{e}-{side}-{name.replace('*', 'star')}")
            log = out / f"{tag}.log"
            if side == "fedsciml":
                js = out / f"{tag}.json"
                method = FEDSCIML_RUNS[name]
                k = int(method[method.index("--clients") + 1]) if "--clients" in method else 1
                note = ""
                if k > 1:  # the preset's counts are totals: the clients share them (nothing to pass)
                    if e not in points:
                        points[e] = preset_points(python, exp)
                    note = f"{k} clients share {points[e][0]} + {points[e][1]} points"
                clock = "cpu" if device == "cpu" else "wall"
                cmd = [python, "-m", "fedsciml", "solve", exp.problem, *exp.options, *method,
                       "--device", device, "--threads", "1", "--clock", clock, "--budget", f"{budget:g}",
                       "--seed", str(seed),
                       "--json", str(js), "--quiet"]
                jobs.append(Job(e, r, cmd, child_env(cuda=device != "cpu"), log, js, note=note))
                continue
            if commands is None:
                commands = best_commands(anchors_dir, exp)
            label = AUTHORS_RUNS[name]
            if label not in commands:
                jobs.append(Job(e, r, [], {}, log, skipped=f"the authors tuned no {label} for {exp.folder} "
                                                           f"(their best runs: {', '.join(sorted(commands))})"))
                continue
            args = commands[label] + [f"--num_seconds={budget:g}"]
            model = next((a.split("=", 1)[1] for a in args if a.startswith("--model=")), "mlp-tanh-64")
            cmd = [authors_python, "-c", AUTHORS_DRIVER, ",".join(f"{c:g}" for c in checkpoints), *args]
            jobs.append(Job(e, r, cmd, child_env(str(Path(anchors_dir).resolve())), log, note=model))
    return jobs


def preset_points(python: str, exp: Experiment) -> tuple[int, int]:
    """``(n_interior, n_boundary)`` of the experiment's fedsciml preset (in total, shared by the clients), read by
    ``python``."""
    n_in, n_bd = _ask_preset(python, exp, "[opts['n_interior'], opts['n_boundary']]", "read the point counts")
    return int(n_in), int(n_bd)


def run_job(job: Job, timeout: float) -> Job:
    """Run one child, its output to ``job.log``; peak RSS and CPU from ``os.wait4`` on it."""
    if job.skipped:
        return job
    t0 = time.perf_counter()
    with open(job.log, "w") as fh:
        fh.write("$ " + shlex.join(c if len(c) < 200 else "<driver>" for c in job.cmd) + "\n")
        fh.flush()
        p = subprocess.Popen(job.cmd, stdout=fh, stderr=subprocess.STDOUT, env=job.env, cwd=str(ROOT),
                             start_new_session=True)
        killed = []

        def kill():
            killed.append(True)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _pid, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    job.result.update(rc=p.returncode, wall_s=time.perf_counter() - t0, child_cpu_s=ru.ru_utime + ru.ru_stime,
                      peak_rss_mb=ru.ru_maxrss / 1024.0, killed=bool(killed))
    return job


# --- reading what the children wrote -------------------------------------------------------------------

_EVAL = re.compile(r"^\[anchors\] eval solver_s=(\S+) abs=(\S+) ref=(\S+)")
_STEP = re.compile(r"^Step: (\d+), Loss: (\S+), L2 Error: (\S+),.*Time: (\S+)s")
_PARAMS = re.compile(r"^Number of parameters: (\d+)")


def parse_authors_log(text: str) -> dict:
    """``{"evals": [(solver_s, rel_l2, steps done)], "n_params", "steps"}`` from the driver's and train.py's
    output: each ``[anchors] eval`` line is followed by train.py's ``Step:`` line of the same evaluation."""
    evals, pending, n_params, steps = [], None, None, None
    for line in text.splitlines():
        m = _EVAL.match(line)
        if m:
            s, a, ref = (float(v) for v in m.groups())
            pending = (s, a / ref if ref > 0 else math.nan)
            continue
        m = _STEP.match(line)
        if m and pending is not None:
            steps = int(m.group(1)) + 1
            evals.append((pending[0], pending[1], steps))
            pending = None
            continue
        m = _PARAMS.match(line)
        if m:
            n_params = int(m.group(1))
    return {"evals": evals, "n_params": n_params, "steps": steps}


def parse_fedsciml_json(path) -> dict:
    """``{"evals": [(solver_s, rel_l2, step)], "n_params", "steps", "floats_per_round", "exchanges", ...}`` from
    a ``solve --json`` file (history rows: ``time_s``, ``rel_l2``, ``step``)."""
    with open(path) as fh:
        d = json.load(fh)
    extra = d.get("extra") or {}
    rows = [r for r in d.get("history", []) if r.get("rel_l2") is not None and r.get("time_s") is not None]
    federated = "floats_per_round" in extra
    return {"evals": [(float(r["time_s"]), float(r["rel_l2"]), int(r["step"])) for r in rows],
            "n_params": d.get("n_params"), "steps": rows[-1]["step"] if rows else None,
            "solver_s": extra.get("solver_time_s"), "clock": (d.get("options") or {}).get("clock"),
            "floats_per_round": extra.get("floats_per_round") if federated else None,
            "exchanges": extra.get("exchanges") if federated else None,
            "form": extra.get("lm_solve") or (extra.get("strategy") or {}).get("form"),
            "stopped_by": extra.get("stopped_by")}


def at_checkpoints(evals, checkpoints) -> dict:
    """``{t: (rel_l2, at_s, step) or None}``: the last evaluation at or before ``t`` solver seconds (``None``:
    none that early).  ``evals`` are ``(solver_s, rel_l2, step)`` in any order."""
    ordered = sorted(evals, key=lambda e: e[0])
    out = {}
    for t in checkpoints:
        before = [e for e in ordered if e[0] <= t]
        out[t] = (before[-1][1], before[-1][0], before[-1][2]) if before else None
    return out


def collect(job: Job, checkpoints) -> list[dict]:
    """One CSV row per checkpoint of ``job``."""
    base = {"exp": job.exp, "run": job.run, "side": job.side, "note": job.note, **{
        k: job.result.get(k) for k in ("rc", "wall_s", "child_cpu_s", "peak_rss_mb")}}
    if job.skipped:
        return [{**base, "status": "skipped: " + job.skipped, "checkpoint_s": t} for t in checkpoints]
    info: dict = {}
    status = "ok" if job.result.get("rc") == 0 else f"failed (exit {job.result.get('rc')})"
    if job.result.get("killed"):
        status = f"killed at the wall-clock timeout ({job.result.get('wall_s', 0):.0f} s)"
    try:
        if job.side == "fedsciml":
            info = parse_fedsciml_json(job.json_out) if job.json_out and job.json_out.exists() else {}
        else:
            info = parse_authors_log(job.log.read_text())
    except (OSError, ValueError, KeyError) as e:
        status += f"; unreadable output: {type(e).__name__}: {e}"
    if not info.get("evals") and status == "ok":
        status = "no evaluation recorded"
    if status != "ok":
        tail = [ln for ln in (job.log.read_text().strip().splitlines() if job.log.exists() else [])
                if not ln.startswith("$ ")][-1:]  # the child's last line, not the command the log starts with
        status += (": " + tail[0][:200]) if tail else ""
    base.update(status=status, n_params=info.get("n_params"), steps=info.get("steps"),
                floats_per_round=info.get("floats_per_round"), exchanges=info.get("exchanges"),
                form=info.get("form"))
    rows = []
    for t, v in at_checkpoints(info.get("evals", []), checkpoints).items():
        rel, at, step = v if v is not None else (None, None, None)
        rows.append({**base, "checkpoint_s": t, "rel_l2": rel, "at_s": at, "step_at": step})
    return rows


# --- output ---------------------------------------------------------------------------------------------

CSV_FIELDS = ["exp", "run", "side", "note", "n_params", "checkpoint_s", "rel_l2", "at_s", "step_at", "steps",
              "peak_rss_mb", "child_cpu_s", "wall_s", "floats_per_round", "exchanges", "form", "rc", "status"]


def _g(v, fmt="{:.2e}"):
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def table(rows: list[dict], checkpoints) -> str:
    """The markdown table: one line per experiment × run, rel L2 at each checkpoint, steps, RSS, messages."""
    head = ["experiment", "run", "p", *[f"rel L2 @ {t:g} s" for t in checkpoints], "steps", "peak RSS MB",
            "floats/round", "exchanges", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    seen = {}
    for r in rows:
        seen.setdefault((r["exp"], r["run"]), []).append(r)
    for (exp, run), rs in seen.items():
        r0 = rs[0]
        by_t = {r["checkpoint_s"]: r for r in rs}
        note = r0.get("note") or ""
        if r0.get("status") != "ok":
            note = (note + "; " if note else "") + str(r0.get("status"))
        if r0.get("form"):
            note = (note + "; " if note else "") + f"form {r0['form']}"
        cells = [exp, run, _g(r0.get("n_params"), "{:d}"),
                 *[_g(by_t.get(t, {}).get("rel_l2")) for t in checkpoints],
                 _g(r0.get("steps"), "{:d}"), _g(r0.get("peak_rss_mb"), "{:.0f}"),
                 _g(r0.get("floats_per_round"), "{:.3g}"), _g(r0.get("exchanges"), "{:d}"), note.replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def best_lines(rows: list[dict], checkpoints) -> str:
    """Per experiment and checkpoint: fedsciml's best run against the authors' best run (and against their best
    logged run, where ``authors-log`` rows are there)."""
    out = []
    for exp in dict.fromkeys(r["exp"] for r in rows):
        for t in checkpoints:
            best = {}
            for side in ("fedsciml", "authors", "authors-log"):
                cand = [r for r in rows if r["exp"] == exp and r["side"] == side and r["checkpoint_s"] == t
                        and r.get("rel_l2") is not None and math.isfinite(r["rel_l2"])]
                best[side] = min(cand, key=lambda r: r["rel_l2"]) if cand else None
            f = best["fedsciml"]
            for side, what in (("authors", "authors' best"), ("authors-log", "authors' best logged")):
                a = best[side]
                if f and a:
                    out.append(f"* {exp} @ {t:g} s: fedsciml best {f['run']} {f['rel_l2']:.2e}, {what} "
                               f"{a['run']} {a['rel_l2']:.2e} (ratio {f['rel_l2'] / a['rel_l2']:.2g})")
    return "\n".join(out)


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"host": platform.node(), "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


def gpu_name() -> str:
    """The GPU's name and driver from ``nvidia-smi`` ("" where it does not answer)."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip().splitlines()[0].replace(",", ", driver") if r.returncode == 0 and r.stdout.strip() else ""


def git_commit(path) -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "-C", str(path), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def anchors_commit(anchors_dir) -> str:
    """The authors' commit: ``<dir>/.commit`` (written beside a checkout made without .git), else git's."""
    f = Path(anchors_dir) / ".commit"
    return f.read_text().strip() if f.is_file() else git_commit(anchors_dir)


def record(rows, checkpoints, meta: dict) -> str:
    m = meta["machine"]
    return "\n".join([
        f"# The anchors' benchmarks on {m['host']}",
        "",
        f"Command: `{meta['command']}`",
        "",
        f"* fedsciml commit {meta['commit']}; the authors' checkout (f-dangel/kfac-pinns-experiments) at "
        f"{meta['anchors_commit']}",
        f"* machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; fedsciml side `{meta['python']}`, "
        f"authors' side `{meta['authors_python']}` ({meta['authors_versions']})",
        f"* load average (1 min): {meta['load_start']:.1f} at the start, {meta['load_max']:.1f} at most while "
        f"it ran (sampled every 10 s), {meta['load_end']:.1f} at the end; {meta['jobs']} job(s) at once, each at "
        "one thread; " + ("budgets and times are solver CPU seconds of each process (test evaluation excluded)"
                          if meta.get("device", "cpu") == "cpu" else
                          f"fedsciml on the GPU ({meta.get('gpu') or '?'}): budgets and times are wall seconds "
                          "of the solver (`--clock wall`; test evaluation excluded)"),
        f"* started {meta['started']}, {meta['wall_s']:.0f} s wall in all"
        + (f" — **incomplete: {meta['progress']}**" if meta.get("progress") else ""),
        "",
        "rel L2 @ t: the last evaluation at or before t solver CPU seconds (fedsciml: every step's history row on "
        "its fixed test points; the authors': their train.py's evaluations on 10·N_Omega points, at their "
        "logged steps plus one just before each checkpoint, |u_θ − u|_RMS / |u|_RMS).  steps: steps or rounds "
        "done in the budget.  Peak RSS: the child's ru_maxrss (os.wait4).  floats/round, exchanges: federated "
        "gn with 4 clients, from its JSON.",
        "",
        table(rows, checkpoints),
        "",
        best_lines(rows, checkpoints) or "(no experiment had both sides' results)",
        "",
    ])


_NUMERIC = {"n_params": int, "checkpoint_s": float, "rel_l2": float, "at_s": float, "step_at": int, "steps": int,
            "peak_rss_mb": float, "child_cpu_s": float, "wall_s": float, "floats_per_round": float,
            "exchanges": int, "rc": int}


def read_csv(path) -> list[dict]:
    """The rows of a CSV this script wrote, numbers as numbers (empty cells ``None``)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k, t in _NUMERIC.items():
            v = r.get(k)
            r[k] = None if v in (None, "") else t(float(v)) if t is int else t(v)
    return rows


def write_docs(path, text: str):
    begin, end = "<!-- anchors-table:begin -->", "<!-- anchors-table:end -->"
    p = Path(path)
    s = p.read_text()
    if begin not in s or end not in s:
        raise BenchError(f"--docs {path}: no {begin} … {end} markers to write the table between")
    i, j = s.index(begin) + len(begin), s.index(end)
    p.write_text(s[:i] + "\n" + text + "\n" + s[j:])


# --- main ------------------------------------------------------------------------------------------------

def _names(text: str, allowed, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise BenchError(f"--{what} {text!r}: unknown {', '.join(bad) or '(none given)'}; allowed: "
                         f"{', '.join(allowed)}")
    return names


def _runs(text: str, allowed, exps) -> list[str]:
    """The ``--runs`` names; ``RUN@EXP+EXP`` runs RUN on those of ``exps`` only (each EXP one of ``exps``)."""
    names = _names(",".join(n.split("@", 1)[0] for n in text.split(",")), allowed, "runs")
    out = []
    for raw, name in zip((n.strip() for n in text.split(",") if n.strip()), names):
        if "@" in raw:
            only = [e for e in raw.split("@", 1)[1].split("+") if e.strip()]
            bad = [e for e in only if e not in exps]
            if bad or not only:
                raise BenchError(f"--runs {raw!r}: after '@' give experiments of --exps joined by '+' "
                                 f"({', '.join(exps)}), got {', '.join(bad) or '(none)'}")
            name = f"{name}@{'+'.join(only)}"
        out.append(name)
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--anchors-dir", default=None, help="checkout of f-dangel/kfac-pinns-experiments (the folder "
                    "holding kfac_pinns_exp/train.py); needed for authors:* runs")
    ap.add_argument("--exps", default=DEFAULT_EXPS, help=f"experiments, of {', '.join(EXPERIMENTS)}")
    ap.add_argument("--runs", default=DEFAULT_RUNS, help="runs: fedsciml:{" + ",".join(FEDSCIML_RUNS)
                    + "} and authors:{" + ",".join(AUTHORS_RUNS) + "}; RUN@EXP+EXP runs RUN on those "
                    "experiments only (e.g. authors:KFAC@exp16)")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET, help="solver CPU seconds per run (with "
                    "--device cuda: wall seconds)")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: fedsciml's runs on the GPU "
                    "with --clock wall (budgets and checkpoints in wall seconds); authors:* runs are CPU only")
    ap.add_argument("--checkpoints", default=DEFAULT_CHECKPOINTS, help="CPU seconds at which rel L2 is read "
                    "(those past the budget are dropped)")
    ap.add_argument("--jobs", type=int, default=1, help="children at once (each one thread)")
    ap.add_argument("--timeout", type=float, default=None, help="wall seconds after which a child is killed "
                    "(default 3 × budget + 300)")
    ap.add_argument("--python", default=sys.executable, help="Python of the fedsciml side")
    ap.add_argument("--authors-python", default=None, help="Python with the authors' dependencies (default "
                    "--python)")
    ap.add_argument("--out", default=None, help="folder for the children's logs and JSON (default "
                    "runs/anchors-<time>)")
    ap.add_argument("--csv", default=None, help="CSV file (default <out>/anchors.csv)")
    ap.add_argument("--md", default=None, help="markdown record (default <out>/anchors.md)")
    ap.add_argument("--docs", default=None, help="also write the table into this file between its markers")
    ap.add_argument("--seed", type=int, default=0, help="fedsciml's --seed (the authors' seeds are their runs')")
    ap.add_argument("--render", default=None, metavar="CSV", help="run nothing: print the table of a CSV this "
                    "script wrote (and write it into --docs)")
    ap.add_argument("--authors-logs", default=None, metavar="DIR", help="with --render: add the authors' own "
                    "logged best runs (their GPU, wall seconds; best_runs/*_history.csv of the checkout DIR) as "
                    "authors-log:* rows")
    a = ap.parse_args(argv)
    if a.authors_logs is not None and not a.render:
        raise BenchError("--authors-logs is read with --render CSV (the rows of a run made elsewhere)")
    if a.render:
        if a.authors_logs is not None:
            authors_train(a.authors_logs)
        return a
    a.exps = _names(a.exps, list(EXPERIMENTS), "exps")
    allowed = [f"fedsciml:{n}" for n in FEDSCIML_RUNS] + [f"authors:{n}" for n in AUTHORS_RUNS]
    a.runs = _runs(a.runs, allowed, a.exps)
    if not (a.budget > 0 and math.isfinite(a.budget)):
        raise BenchError(f"--budget must be a finite number of seconds > 0, got {a.budget}")
    try:
        a.checkpoints = sorted({float(c) for c in a.checkpoints.split(",") if c.strip()})
    except ValueError:
        raise BenchError(f"--checkpoints must be comma-separated seconds, got {a.checkpoints!r}") from None
    a.checkpoints = [c for c in a.checkpoints if 0 < c <= a.budget] or [a.budget]
    if a.jobs < 1:
        raise BenchError(f"--jobs must be an integer ≥ 1, got {a.jobs}")
    a.authors_python = a.authors_python or a.python
    if a.device != "cpu" and any(r.startswith("authors:") for r in a.runs):
        raise BenchError(f"--device {a.device}: authors:* runs measure CPU seconds on the CPU; run them without "
                         "--device (their GPU figures are in their best_runs/*_history.csv)")
    if any(r.startswith("authors:") for r in a.runs):
        if a.anchors_dir is None:
            raise BenchError("authors:* runs need --anchors-dir (a checkout of f-dangel/kfac-pinns-experiments)")
        authors_train(a.anchors_dir)
    return a


def preflight(a):
    """Each side's Python imports what it needs, else one line naming the module."""
    checks = []
    if any(r.startswith("fedsciml:") for r in a.runs):
        checks.append((a.python, "import fedsciml.problems, fedsciml.cli", child_env(), "fedsciml"))
    if any(r.startswith("authors:") for r in a.runs):
        checks.append((a.authors_python, "import torch, einops, backpack, hessianfree.optimizer, tueplots, "
                       "matplotlib", child_env(str(Path(a.anchors_dir).resolve())), "the authors' code"))
    for py, code, env, what in checks:
        r = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, cwd=str(ROOT))
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["?"])[-1]
            raise BenchError(f"{py} cannot run {what}: {last}")


def authors_versions(a) -> str:
    if not any(r.startswith("authors:") for r in a.runs):
        return "not used"
    code = ("import torch, numpy, backpack, importlib.metadata as m;"
            "print(f'torch {torch.__version__}, numpy {numpy.__version__}, backpack-for-pytorch "
            "{m.version(\"backpack-for-pytorch\")}')")
    r = subprocess.run([a.authors_python, "-c", code], capture_output=True, text=True, env=child_env())
    return r.stdout.strip() or "?"


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.render:
        rows = read_csv(a.render)
        checkpoints = sorted({r["checkpoint_s"] for r in rows})
        if a.authors_logs:
            rows += authors_logged(a.authors_logs, [e for e in dict.fromkeys(r["exp"] for r in rows)
                                                    if e in EXPERIMENTS], checkpoints, a.python)
        text = table(rows, checkpoints)
        if a.docs:
            write_docs(a.docs, text)
        print(text + "\n\n" + best_lines(rows, checkpoints))
        return 0
    preflight(a)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    out = Path(a.out or ROOT / "runs" / f"anchors-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    jobs = plan(a.exps, a.runs, a.budget, a.checkpoints, out, a.anchors_dir, a.authors_python, a.python, a.seed,
                a.device)
    timeout = a.timeout if a.timeout is not None else 3 * a.budget + 300
    load = [os.getloadavg()[0]]
    done = threading.Event()

    def sample():
        while not done.wait(10.0):
            load.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    csv_path, md_path = Path(a.csv or out / "anchors.csv"), Path(a.md or out / "anchors.md")
    versions = authors_versions(a)
    gpu = gpu_name() if a.device != "cpu" else ""
    commit = git_commit(ROOT)  # at the start: the code the children run (a checkout changed mid-run would mix)
    finished: set[int] = set()

    def write(final: bool):
        """The CSV and the record of the jobs finished so far (rewritten after each: a run cut short keeps them)."""
        rows = [r for i, job in enumerate(jobs) if i in finished for r in collect(job, a.checkpoints)]
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        with open(csv_path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        meta = {"command": shlex.join(["python", "scripts/bench/anchors.py",
                                       *(sys.argv[1:] if argv is None else argv)]),
                "commit": commit, "anchors_commit": anchors_commit(a.anchors_dir) if a.anchors_dir else "—",
                "machine": machine(), "python": a.python, "authors_python": a.authors_python,
                "authors_versions": versions, "load_start": load[0], "load_max": max(load),
                "load_end": os.getloadavg()[0], "jobs": a.jobs, "started": started,
                "wall_s": time.perf_counter() - t0, "device": a.device, "gpu": gpu,
                "progress": "" if final else f"{len(finished)} of {len(jobs)} runs finished so far"}
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(record(rows, a.checkpoints, meta))
        return rows

    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        futures = {pool.submit(run_job, job, timeout): i for i, job in enumerate(jobs)}
        for fut in as_completed(futures):
            job = fut.result()
            finished.add(futures[fut])
            status = job.skipped and "skipped" or f"exit {job.result.get('rc')}, {job.result.get('wall_s', 0):.0f} s"
            print(f"{job.exp} {job.run}: {status}", file=sys.stderr, flush=True)
            write(final=False)
    done.set()
    rows = write(final=True)
    if a.docs:
        write_docs(a.docs, table(rows, a.checkpoints))
    print(md_path.read_text())
    print(f"wrote {csv_path} and {md_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"anchors.py: {e}", file=sys.stderr)
        sys.exit(2)
