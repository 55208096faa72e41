"""Name → problem class registry (built-in and user-registered problems)."""
from __future__ import annotations

from .base import Preset, Problem, ProblemError

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


#: installed packages declare their problem modules here (``[project.entry-points."fedsciml.problems"]``)
ENTRY_POINT_GROUP = "fedsciml.problems"


def entry_point_modules() -> dict[str, str]:
    """``{entry point name: module}`` of the problem plugins installed packages declare (nothing imported)."""
    from fedsciml.runtime.registry import entry_point_modules as of_group

    return of_group(ENTRY_POINT_GROUP)


def load_entry_points() -> list[str]:
    """Import every installed problem plugin (:data:`ENTRY_POINT_GROUP`), so that its ``@register``-ed problems
    join the registry — in any process that builds problems by name: the CLI, a Flower ServerApp, a Flower node
    (where a user's own PDE is therefore the same installed package everywhere).  Returns their names; a plugin
    that fails to import raises :class:`ProblemError` naming it."""
    from fedsciml.runtime.registry import load_entry_points as load_group

    return load_group(ENTRY_POINT_GROUP, "problem", ProblemError)


def get_problem(name: str, **options) -> Problem:
    """Instantiate a registered problem by name with validated options (a name not registered yet is looked
    for among the installed plugins' problems, :func:`load_entry_points`)."""
    if name not in REGISTRY:
        load_entry_points()
    if name not in REGISTRY:
        import difflib

        close = difflib.get_close_matches(str(name), sorted(REGISTRY), 1, 0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ProblemError(f"unknown problem {name!r}{hint}; available: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name](**{k: v for k, v in options.items() if v is not None})


def file_options(cls: type) -> list[str]:
    """The options of problem class ``cls`` that name files: declared of type ``PATH``/``PATHS``, or listed in
    ``cls.file_options`` (``table``'s ``tables``) — what a Flower node and a saved model may not choose."""
    from fedsciml.options import PATH, PATHS

    specs = cls.specs() if hasattr(cls, "specs") else {}
    return sorted({k for k, (_, spec) in specs.items() if spec.type in (PATH, PATHS)}
                  | set(getattr(cls, "file_options", ())))


def list_problems() -> list[tuple[str, str]]:
    return [(k, REGISTRY[k].description) for k in sorted(REGISTRY)]


def preset_of(cls: type, preset: str) -> Preset | None:
    """The preset ``preset`` that the problem class ``cls`` declares (:attr:`Problem.presets`), or ``None``."""
    return (getattr(cls, "presets", None) or {}).get(preset)


def apply_preset(cls: type, preset: str | None, problem_options: dict, method_options: dict,
                 method_presets: tuple = ()) -> tuple[dict, dict]:
    """``(problem options, method options)`` with the problem class's preset ``preset`` filled in where not
    given (explicit options win; a given ``None`` counts as given).  The one place ``solve --preset P`` and
    ``fs.solve(NAME, preset=P)`` resolve a preset.

    A name the problem does not declare is a method's preset when one of ``method_presets`` (fipa's ``paper``):
    it is passed on as the method option ``preset``, which that method checks.  Any other name is refused in one
    line naming the problem's presets."""
    if preset is None:
        return dict(problem_options), dict(method_options)
    p = preset_of(cls, preset)
    if p is None:
        if preset in method_presets:
            return dict(problem_options), {**method_options, "preset": preset}
        own = sorted(getattr(cls, "presets", None) or {})
        allowed = ", ".join([*own, *[f"{m} (a method's)" for m in method_presets if m not in own]]) or "none"
        raise ProblemError(f"problem {getattr(cls, 'name', cls)!r} has no preset {preset!r}; allowed: {allowed}")
    return {**p.problem, **problem_options}, {**p.method, **method_options}
