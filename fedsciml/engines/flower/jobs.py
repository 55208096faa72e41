"""Which Flower App runs a job: light enough for the process that only starts the run (no flwr import).

Central DP with a finite ε needs Flower's SecAgg+ (:mod:`fedsciml.engines.flower.secagg`, its App in
``secagg_app/``); every other job runs in fedsciml's generic App (``app/``).  Importing
:mod:`fedsciml.engines.flower.secagg` builds its Flower apps (and imports Flower), so the check lives here.
"""
from __future__ import annotations

import math
from pathlib import Path

APP_DIR = str(Path(__file__).resolve().parent / "app")  # fedsciml's generic Flower App
SECAGG_APP_DIR = str(Path(__file__).resolve().parent / "secagg_app")  # the SecAgg+ ServerApp/ClientApp pair


def app_dirs() -> dict:
    """``{"app": …, "secagg": …}``: the directories of fedsciml's Flower Apps in this installation (what
    ``flwr run DIR`` takes; ``python -m fedsciml flower app-dir`` prints them)."""
    return {"app": APP_DIR, "secagg": SECAGG_APP_DIR}


def is_secagg_job(job: dict) -> bool:
    """A job that needs a secure sum: ``one-shot`` with central DP at a finite ε."""
    opts = job.get("options", {}) or {}
    eps = opts.get("dp_epsilon")
    return (job.get("kind", "solve") == "solve" and job.get("method") == "one-shot" and bool(opts.get("dp_central"))
            and eps is not None and float(eps) != math.inf)
