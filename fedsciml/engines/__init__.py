"""Engines carry the clients' messages: in process (the runtime's own transports, engine ``local``) or over
Flower (engine ``flower``, :mod:`fedsciml.engines.flower`).  Importing this package registers ``flower`` with
the driver; Flower itself is imported only when a run asks for it."""
from __future__ import annotations

import fedsciml.images  # noqa: F401  (registers the image methods in the one registry, kind images)
import fedsciml.methods  # noqa: F401  (the engines run registered methods)
import fedsciml.ridge.baselines  # noqa: F401  (registers fedavg-sgd: the ridge SGD baselines, kind ridge)
from fedsciml.runtime.driver import ENGINES, register_engine


def _flower(problem, method, **options):
    # one-shot with central DP runs through Flower's SecAgg+ (fedsciml.engines.flower.secagg; solve_many picks it)
    from fedsciml.engines.flower.simulation import solve

    return solve(problem, method, **options)


if "flower" not in ENGINES:
    register_engine("flower", _flower)
