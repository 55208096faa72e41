"""The problem zoo, importable as ``fedsciml.problems``.

Each module is one family and reads like the paper's equations.  Registered
problems appear in ``python -m fedsciml list``.

The directory sits at the top of the repository but is the package
``fedsciml.problems`` (pyproject's package-dir mapping; in a source checkout
``fedsciml/__init__.py`` adds the repository root to the package path).  It
refuses to be imported as a top-level ``problems``: that would be a second
copy of every class and a second registry, so a problem registered in one
would be unknown to the other.
"""
if __name__ != "fedsciml.problems":
    raise ImportError(f"import fedsciml.problems (e.g. `from fedsciml.problems import get_problem`), not "
                      f"{__name__!r}: a second copy would hold a second problem registry")

from .base import FieldProblem, Problem, ProblemError, sample_box
from .pinn import PDE1D, PINNProblem, laplacian
from .registry import REGISTRY, get_problem, list_problems, register
from .custom import ClientData, FieldAt, PDE
from .domain import DomainPDE
from .reference import ReferenceData
from .coefficients import GridCoefficient, ScatteredCoefficient
from . import pde1d, poisson, fitting, ridge, table, zoo, heat_nd, pinnacle  # noqa: F401  (the built-in families register their problems)

__all__ = ["PDE", "DomainPDE", "ReferenceData", "GridCoefficient", "ScatteredCoefficient", "FieldAt", "ClientData", "Problem", "FieldProblem", "PINNProblem", "PDE1D", "ProblemError", "register",
           "get_problem", "list_problems", "REGISTRY", "laplacian", "sample_box"]
