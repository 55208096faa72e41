"""Name → problem class registry (built-in and user-registered problems)."""
from __future__ import annotations

from .base import Problem, ProblemError

REGISTRY: dict[str, type] = {}


def register(cls=None, *, name: str | None = None, replace: bool = False):
    """Class decorator (or call) adding a :class:`Problem` subclass to the registry.

    Registered problems appear in ``python -m fedsciml list`` and ``solve``.
    """

    def deco(c):
        if not (isinstance(c, type) and issubclass(c, Problem)):
            raise TypeError(f"only Problem subclasses can be registered, got {c!r}")
        key = name or c.name
        if not key:
            raise ValueError(f"problem class {c.__name__} has no name")
        if key in REGISTRY and REGISTRY[key] is not c and not replace:
            raise ValueError(f"a problem named {key!r} is already registered ({REGISTRY[key].__name__}); pass replace=True")
        REGISTRY[key] = c
        return c

    return deco(cls) if cls is not None else deco


def get_problem(name: str, **options) -> Problem:
    """Instantiate a registered problem by name with validated options."""
    if name not in REGISTRY:
        raise ProblemError(f"unknown problem {name!r}; available: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](**{k: v for k, v in options.items() if v is not None})


def list_problems() -> list[tuple[str, str]]:
    return [(k, REGISTRY[k].description) for k in sorted(REGISTRY)]
