"""Run results: history, final metrics, JSON / CSV output.

``result.json`` schema (stable; later features add keys, never rename):

``problem, method, options, seed, device, dtype, n_params, clients, wall_time_s,
final {loss, rel_l2 | mse, ...}, history [{step, time_s, loss, rel_l2 | mse,
floats_sent}], extra {...}``

``loss`` is the mean of the squared weighted residuals, ``½‖r(θ)‖² / N``
(N residual rows over all clients), so runs with different client counts are
comparable.  ``time_s`` is the solver's own wall time: evaluating the test
metrics for the history is excluded.  ``floats_sent`` is cumulative: all
floats sent up (clients → server) and down (server → clients) so far.
"""
from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:
        return _clean(v.item())
    return v


@dataclass
class Result:
    problem: str
    method: str
    options: dict
    seed: int
    device: str
    dtype: str
    n_params: int
    clients: int
    wall_time_s: float = 0.0
    final: dict = field(default_factory=dict)
    history: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    theta: Any = field(default=None, repr=False, compare=False)  # final parameters (not serialized)

    @property
    def metric_name(self) -> str:
        """``rel_l2`` (PDEs), ``mse`` (fitting, ridge), or ``loss`` when the problem has no reference."""
        for k in ("rel_l2", "mse"):
            if k in self.final:
                return k
        return "loss"

    @property
    def error(self) -> float:
        return float(self.final.get(self.metric_name, float("nan")))

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("theta", None)
        return _clean(d)

    def to_json(self, path: str | None = None) -> str:
        s = json.dumps(self.to_dict(), indent=2)
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.write(s + "\n")
        return s

    def write_history_csv(self, path: str):
        if not self.history:
            return
        keys = list(dict.fromkeys(k for h in self.history for k in h))
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            for h in self.history:
                w.writerow(_clean(h))

    def plot(self, out_dir: str, problem=None) -> list:
        """Write the PNG plots of this run (error against time and rounds; the solution when
        ``problem`` is given and the final parameters are known).  Returns the paths."""
        from fedsciml.plotting import plot_runs

        os.makedirs(out_dir, exist_ok=True)
        return plot_runs(problem, [self], out_dir)

    @classmethod
    def from_dict(cls, d: dict) -> "Result":
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "theta"}
        return cls(**fields)

    @classmethod
    def from_json(cls, path: str) -> "Result":
        with open(path) as f:
            return cls.from_dict(json.load(f))
