"""fedsciml: federated scientific machine learning.

Every problem is a least-squares problem in residual form ``min ½‖r(θ)‖²``;
every federated method exchanges a summary of the residual Jacobian.
See docs/design/architecture.md for the layout.
"""
from __future__ import annotations

import os as _os

__version__ = "0.1.0"

# `problems/` sits beside this package in a source checkout and is installed as
# `fedsciml.problems` (pyproject's package-dir mapping).  When the package is
# imported straight from a checkout (for instance `python -m fedsciml` run from
# the repository root), make that subpackage resolvable; `problems/__init__.py`
# refuses to be imported under any other name.
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "problems")):
    _root = _os.path.dirname(_here)
    if _os.path.isfile(_os.path.join(_root, "problems", "__init__.py")):
        __path__.append(_root)  # type: ignore[name-defined]  # noqa: F821


# --- public API (imported lazily so `import fedsciml` stays light) ----------------
_PUBLIC = {
    # running
    "solve": "fedsciml.api", "list_methods": "fedsciml.api", "Result": "fedsciml.runtime.results",
    "save_model": "fedsciml.api", "load_model": "fedsciml.api",
    "register_method": "fedsciml.runtime.registry", "Method": "fedsciml.runtime.registry",
    # per-step callbacks (fs.solve(..., callbacks=[...]))
    "Callback": "fedsciml.runtime.callbacks", "StepView": "fedsciml.runtime.callbacks",
    "EarlyStopping": "fedsciml.runtime.callbacks", "BestModelCheckpoint": "fedsciml.runtime.callbacks",
    # method configurations (one frozen dataclass per method, declared in its method's file; the option
    # machinery they share is fedsciml.options)
    "CentralizedConfig": "fedsciml.methods.centralized", "GNConfig": "fedsciml.methods.gn",
    "FIPAConfig": "fedsciml.methods.fipa", "FedAvgConfig": "fedsciml.methods.averaging",
    "FedProxConfig": "fedsciml.methods.averaging", "OneShotConfig": "fedsciml.methods.oneshot",
    "MethodConfig": "fedsciml.options",
    "RoundOptions": "fedsciml.options", "LocalOptions": "fedsciml.options", "option": "fedsciml.options",
    # problems
    "Problem": "fedsciml.problems.base", "FieldProblem": "fedsciml.problems.base",
    "ProblemError": "fedsciml.problems.base", "PINNProblem": "fedsciml.problems.pinn",
    "PDE": "fedsciml.problems.custom", "FieldAt": "fedsciml.problems.custom", "ClientData": "fedsciml.problems.custom",
    "DomainPDE": "fedsciml.problems.domain", "ReferenceData": "fedsciml.problems.reference",
    "GridCoefficient": "fedsciml.problems.coefficients", "ScatteredCoefficient": "fedsciml.problems.coefficients",
    "register": "fedsciml.problems.registry", "get_problem": "fedsciml.problems.registry",
    "list_problems": "fedsciml.problems.registry",
    # building blocks
    "MLP": "fedsciml.core.nn", "LeastSquares": "fedsciml.core.objective", "PointwiseLeastSquares": "fedsciml.core.objective",
    "LinearLeastSquares": "fedsciml.core.objective", "ResidualPart": "fedsciml.core.objective", "GNStats": "fedsciml.core.objective",
    "LevenbergMarquardt": "fedsciml.core.lm",
    "Aggregator": "fedsciml.methods.aggregators", "FedAvgAggregator": "fedsciml.methods.aggregators",
    "FIPAAggregator": "fedsciml.methods.aggregators",
    # errors
    "SetupError": "fedsciml.runtime.checks", "MessageRejected": "fedsciml.core.schema",
    "OptionError": "fedsciml.options", "OptionTypeError": "fedsciml.options",
}
__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name):
    if name in _PUBLIC:
        import importlib

        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value
        return value
    if name == "Param":  # the problems' own option dialect, replaced by the one of fedsciml.options
        raise AttributeError("fedsciml.Param was replaced by fedsciml.option(default, help, type, lo=…, hi=…, "
                             "choices=…): e.g. Param(0.1, float, 'diffusivity') → option(0.1, 'diffusivity', float)")
    raise AttributeError(f"module 'fedsciml' has no attribute {name!r}")


def __dir__():
    return __all__
