"""A held-out validation residual beside the training loss (PINN problems).

A PINN is trained on a finite set of collocation points.  When the points are fewer than the network's
parameters, Levenberg–Marquardt (or any optimizer run long enough) interpolates them: the training loss falls to
1e-20 and below while the PDE is not solved between the points — and the training loss alone cannot tell.  So
every run of a problem that samples its collocation points (``samples_collocation``) is also measured on a
**fixed set of fresh points**: the problem's own clients' points drawn once more from :func:`validation_seed`
``(seed)`` (a seed no run or resample uses; same run seed, same points), as many as trained on, and never trained
on.  Parts whose points come out the same as the training ones (a 1-D problem's Dirichlet end points, observed
data) are not held out and are left out, so the validation residual is measured on unseen points only.  Readings
can be held out too: a ``Data`` condition with ``holdout`` keeps that share of its readings out of training, and
its validation part is the misfit at them (the problem's ``validation_objectives``) — the measure of an inverse
problem's fit to noisy readings that does not read the reference solution (which it must never do: a θ chosen by
it would be chosen by the test error).

**Keeping the best** (the run option ``keep_best``: ``validation`` or ``none``): with ``validation`` the run
returns the θ of the history row with the lowest ``val_loss`` — the same tensor, copied when that row was
recorded — and its ``extra["keep_best"]`` (and the summary) say which step that was, its validation residual,
and the last step's.  Its default is ``validation`` for a problem whose readings carry noise (``noisy_data``: an
inverse problem, whose network otherwise goes on to fit the noise) and ``none`` otherwise.

Each history row gets ``val_loss``: the mean ``½‖r‖²`` per row at those points (the training ``loss``'s
normalization), a value-only evaluation — one forward pass with the PDE's derivatives over the points, no
Jacobian — off the solver clock like the test metrics, using no random state: the iterates are the same bits with
or without it (``validation=False`` turns it off).  Its cost is that of evaluating the training loss once: measured
at one thread in CPU seconds on three registered problems with their 4 clients pooled — poisson-lshape (1 800 rows,
p = 2 241) 49 ms against 926 ms for an LM step (statistics, solve and trial loss), heat (1 680 rows, p = 921) 46 ms
against 329 ms, kovasznay (5 400 rows, p = 2 307) 189 ms against 3.8 s: 5–14 % of a step, once per history row.

At the end of the run one warning line says so when the training loss fell far below the validation residual —
``val_loss ≥`` :data:`PARTING_RATIO` ``× loss`` — and names the remedy: fresh points every K steps (``resample``),
or more points.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable

import numpy as np
import torch

log = logging.getLogger(__name__)

VALIDATION_TAG = 0x7A1D  # keeps the validation seed apart from the run seeds and the resample seeds (0x5E5A)

#: the warning's threshold: validation residual / training loss.  Both are means of ``½r²`` per row over equally
#: many points drawn the same way, so a solution that generalizes has them within sampling noise of each other (a
#: factor of a few); 100 is a residual 10× larger in RMS between the points than at them — the network fits its
#: points, not the PDE.  Interpolating runs (rows < parameters) part by 1e4 to 1e25.
PARTING_RATIO = 100.0

#: below this validation residual the two are both at round-off and their ratio means nothing
PARTING_FLOOR = 1e-20


def validation_seed(seed: int) -> int:
    """The seed of the validation points of a run with ``seed``: ``SeedSequence([seed, 0x7A1D])``'s first 32-bit
    word (distinct from the run's own points, drawn from ``seed``, and from every resample's)."""
    return int(np.random.SeedSequence([int(seed), VALIDATION_TAG]).generate_state(1)[0])


def held_out(problem: Any, clients: int, seed: int, objectives, device=None):
    """The pooled validation objective of a run — ``problem``'s clients' objectives drawn from
    :func:`validation_seed` ``(seed)`` (its ``validation_objectives`` where it has one: a
    :class:`~fedsciml.problems.domain.DomainPDE`'s held-out readings), without the parts whose points equal the
    training ones (``objectives``) —
    or ``None`` for a problem that does not sample its points, or when nothing is held out.  Draws no number
    from torch's global generator (the run's stream stays as it was)."""
    from fedsciml.core.objective import PointwiseLeastSquares, stack_objectives

    if not getattr(problem, "samples_collocation", False) or not objectives:
        return None
    draw = getattr(problem, "validation_objectives", None) or problem.client_objectives
    with torch.random.fork_rng(devices=[]):
        fresh = draw(clients, seed=validation_seed(seed), device=device)
    val, train = stack_objectives(fresh), stack_objectives(objectives)
    if not (isinstance(val, PointwiseLeastSquares) and isinstance(train, PointwiseLeastSquares)):
        return None
    seen = {(q.name, q.weight): q.points for q in train.parts}
    parts = [q for q in val.parts if not _same_points(seen.get((q.name, q.weight)), q.points)]
    return PointwiseLeastSquares(parts, val.n_params) if parts else None


def _same_points(a, b) -> bool:
    if a is None:
        return False
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y.to(x.device)) for x, y in zip(a, b))


def with_validation(evaluate: Callable, val) -> Callable:
    """``evaluate`` plus ``val_loss``: the mean ``½‖r‖²`` per row of the validation objective ``val`` at θ (a
    value-only evaluation, under ``no_grad``); ``evaluate`` itself when ``val`` is ``None``."""
    if val is None:
        return evaluate
    n = max(1, int(val.n_residuals))
    data = [i for i, q in enumerate(val.parts) if is_readings(q.name)]
    n_data = sum(int(val.parts[i].n_points) for i in data)

    def evaluate_with_validation(theta, **kw):
        with torch.no_grad():
            if not data:
                return {**evaluate(theta, **kw), "val_loss": float(val.loss(theta)) / n}
            sq = [float(r @ r) for r in val.part_residuals(theta)]
        return {**evaluate(theta, **kw), "val_loss": 0.5 * sum(sq) / n,
                "val_readings": 0.5 * sum(sq[i] for i in data) / max(1, n_data)}

    return evaluate_with_validation


def is_readings(name: str) -> bool:
    """Whether a residual part named ``name`` is a misfit to readings (a ``Data`` condition's: ``data``,
    ``data[c]``): in a validation objective, held-out readings."""
    return name == "data" or name.startswith("data[")


def report(name: str, rows: list, val, n_train: int, n_params: int, resample: int | None) -> dict | None:
    """The result's record of the validation residual (``extra["validation"]``: its points, seed-free figures,
    the last training loss and validation residual and their ratio) and, when they parted by
    :data:`PARTING_RATIO` or more, one warning line naming the remedy; ``None`` without validation."""
    if val is None:
        return None
    last = next((r for r in reversed(rows) if r.get("val_loss") is not None and r.get("loss") is not None), None)
    out: dict = {"points": int(val.n_residuals), "parts": [q.name for q in val.parts], "threshold": PARTING_RATIO}
    if last is None:
        return out
    train, v = float(last["loss"]), float(last["val_loss"])
    ratio = v / train if train > 0 else (math.inf if v > 0 else 1.0)
    parted = bool(ratio >= PARTING_RATIO and v > PARTING_FLOOR)
    out.update(loss=train, val_loss=v, ratio=ratio, parted=parted)
    if parted:
        fit = (f"its {n_train:,} residual rows are fewer than its {n_params:,} parameters, so it interpolates them"
               if n_train < n_params else "it fits its points, not the PDE between them")
        fix = ("fresh points more often (a smaller resample K) or more points per draw" if resample else
               "fresh points every K steps or rounds (--resample K, resample=K), or more points (n_interior)")
        log.warning("%s: the training loss %.3e is %.1e× below the validation residual %.3e at %s fresh points: %s; "
                    "remedy: %s", name, train, ratio, v, f"{int(val.n_residuals):,}", fit, fix)
    return out
