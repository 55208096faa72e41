"""Engines carry the clients' messages: in process (the runtime's own transports, engine ``local``), a process
per client (engine ``processes``, :mod:`fedsciml.engines.processes`) or over Flower (engine ``flower``,
:mod:`fedsciml.engines.flower`; it also runs ``bench images`` settings).  The parsers take the names from the
registry (:func:`fedsciml.runtime.driver.engines_for`).  Importing this package registers ``flower`` with
the driver and the problem methods (:mod:`fedsciml.methods`, the ridge baselines); Flower itself is imported only
when a run asks for it, and the image methods (kind ``images``) by what runs them (``bench images``, ``list``,
Flower's image App): ``solve`` never loads the image stack."""
from __future__ import annotations

import fedsciml.methods  # noqa: F401  (the engines run registered methods)
import fedsciml.ridge.baselines  # noqa: F401  (registers fedavg-sgd: the ridge SGD baselines, kind ridge)
from fedsciml.runtime.driver import ENGINES, register_engine


def _flower(problem, method, **options):
    # one-shot with central DP runs through Flower's SecAgg+ (fedsciml.engines.flower.secagg; solve_many picks it)
    from fedsciml.engines.flower.simulation import solve

    return solve(problem, method, **options)


def _flower_images(**setting):
    # bench images --engine flower: the image setting inside one Flower simulation
    from fedsciml.engines.flower.images import run_setting

    return run_setting(**setting)


if "flower" not in ENGINES:
    register_engine("flower", _flower, kinds={"images": _flower_images})

from fedsciml.engines import processes as _processes  # noqa: E402,F401  (registers engine "processes": one file)
