"""fedsciml: federated scientific machine learning.

Every problem is a least-squares problem in residual form ``min ½‖r(θ)‖²``;
every federated method exchanges a summary of the residual Jacobian.
See README.md and DESIGN notes for the layout.
"""
from __future__ import annotations

import os as _os

__version__ = "0.1.0"

# `problems/` sits beside this package in a source checkout and is installed as
# `fedsciml.problems`.  When the package is imported straight from a checkout
# (for instance `python -m fedsciml` run from the repository root, where the
# current directory shadows the installed copy), make the subpackage resolvable.
_here = _os.path.dirname(_os.path.abspath(__file__))
if not _os.path.isdir(_os.path.join(_here, "problems")):
    _root = _os.path.dirname(_here)
    if _os.path.isfile(_os.path.join(_root, "problems", "__init__.py")):
        __path__.append(_root)  # type: ignore[name-defined]  # noqa: F821
