"""Write docs/api.md: one mkdocstrings entry per name of ``fedsciml.__all__``, at the module that defines it.

    python scripts/tools/gen_api_page.py            # rewrite docs/api.md
    python scripts/tools/gen_api_page.py --check    # exit 1 if docs/api.md is not what this would write

``fedsciml/__init__.py`` maps each public name to its module lazily (``_PUBLIC``); mkdocstrings reads the
source statically, so each entry points at the defining module's path (``::: fedsciml.runtime.results.Result``),
not at the lazy re-export; where the module ``_PUBLIC`` names re-exports the name (``from fedsciml.x import name``),
the entry follows the import to the module that defines it.  Names are grouped by layer, in alphabetical order.
The sources are read, not imported (no fedsciml module is), so this runs without torch.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(ROOT, "docs", "api.md")

# (title, module prefix) in the order of the layers; the first matching prefix wins.
GROUPS = (
    ("Running", ("fedsciml.api", "fedsciml.runtime.driver", "fedsciml.runtime.registry", "fedsciml.runtime.results")),
    ("Callbacks", ("fedsciml.runtime.callbacks",)),
    ("Method configurations", ("fedsciml.options", "fedsciml.methods.averaging", "fedsciml.methods.centralized",
                               "fedsciml.methods.fipa", "fedsciml.methods.gn", "fedsciml.methods.oneshot")),
    ("Problems", ("fedsciml.problems",)),
    ("Building blocks", ("fedsciml.core.nn", "fedsciml.core.objective", "fedsciml.core.lm",
                         "fedsciml.methods.aggregators")),
    ("Errors", ("fedsciml.runtime.checks", "fedsciml.core.schema")),
)
ERRORS = {"OptionError", "OptionTypeError", "ProblemError"}  # defined beside what they guard; listed under Errors
# Modules whose names the guides import (``from fedsciml.problems.geometry import Interval``): public as well,
# documented after the names of ``fedsciml.__all__`` — a whole module, or (module, names) where the module
# re-exports names defined elsewhere (each entry then points at the defining module).
PUBLIC_MODULES = (
    ("fedsciml.problems.geometry", None),
    ("fedsciml.problems.conditions", None),
    ("fedsciml.ridge", ("FederatedRidge", "FederatedRidgeCV", "site_statistics", "one_shot", "FusionServer",
                        "client_message")),
)
RIDGE_SOURCES = {"FederatedRidge": "fedsciml.ridge.estimator", "FederatedRidgeCV": "fedsciml.ridge.estimator",
                 "site_statistics": "fedsciml.core.centered"}  # imported lazily by fedsciml.ridge (no static import)


def public() -> dict[str, str]:
    """``fedsciml._PUBLIC`` (name → defining module), read from the source without importing fedsciml."""
    tree = ast.parse(open(os.path.join(ROOT, "fedsciml", "__init__.py"), encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_PUBLIC" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit("error: fedsciml/__init__.py defines no _PUBLIC")


def _source(module: str) -> str:
    """The source file of a fedsciml module in this checkout (``fedsciml.problems`` is the top-level ``problems/``)."""
    parts = module.split(".")
    base = ["problems", *parts[2:]] if parts[:2] == ["fedsciml", "problems"] else parts
    for path in (os.path.join(ROOT, *base) + ".py", os.path.join(ROOT, *base, "__init__.py")):
        if os.path.isfile(path):
            return path
    raise SystemExit(f"error: no source file for {module}")


def defining_module(module: str, name: str) -> str:
    """Follow ``from fedsciml.x import name`` re-exports from ``module`` to the module that defines ``name``."""
    seen = set()
    while module not in seen:
        seen.add(module)
        tree = ast.parse(open(_source(module), encoding="utf-8").read())
        origin = next((node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.level == 0
                       and (node.module or "").startswith("fedsciml")
                       and any(a.name == name and a.asname in (None, name) for a in node.names)), None)
        if origin is None:
            return module
        module = origin
    raise SystemExit(f"error: import circle while looking for {name}")


def render(names: dict[str, str]) -> str:
    names = {name: defining_module(module, name) for name, module in names.items()}
    groups: dict[str, list[str]] = {title: [] for title, _ in GROUPS}
    for name in sorted(names, key=str.lower):
        module = names[name]
        title = "Errors" if name in ERRORS else next(
            (t for t, prefixes in GROUPS if any(module == p or module.startswith(p + ".") for p in prefixes)), None)
        if title is None:
            raise SystemExit(f"error: {name} ({module}) fits no group of {os.path.relpath(__file__, ROOT)}; add one")
        groups[title].append(name)
    out = ["# API reference", "",
           "Everything in `fedsciml.__all__` is the public API (`import fedsciml as fs`; `fs.solve`, `fs.Result`, …);",
           "anything else may change. Each name is documented where it is defined; `fedsciml` re-exports it lazily.",
           "This page is generated by `python scripts/tools/gen_api_page.py` from `fedsciml._PUBLIC`.", "",
           "`fedsciml.__version__` is the package version (a string).", ""]
    for title, members in groups.items():
        if not members:
            continue
        out += [f"## {title}", ""]
        for name in members:
            out += [f"::: {names[name]}.{name}", "    options:", "      heading_level: 3", ""]
    out += ["## Public modules", "",
            "The guides import from these modules too; they are public as well (`fedsciml.problems.geometry` and",
            "`fedsciml.problems.conditions`: the geometries and conditions of `fs.DomainPDE`, and `Field`, the",
            "`u` its `equation` receives, with `u.diff`, `u.dn`, `u.laplacian`; `fedsciml.ridge`: the",
            "scikit-learn estimators and the one-shot ridge runtime).", ""]
    for module, members in PUBLIC_MODULES:
        if members is None:
            out += [f"::: {module}", "    options:", "      heading_level: 3", "      show_submodules: false", ""]
            continue
        for name in members:
            where = RIDGE_SOURCES.get(name) or defining_module(module, name)
            out += [f"::: {where}.{name}", "    options:", "      heading_level: 3", ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with docs/api.md instead of writing it")
    args = ap.parse_args(argv)
    text = render(public())
    if args.check:
        current = open(PAGE, encoding="utf-8").read() if os.path.exists(PAGE) else ""
        if current != text:
            print(f"{os.path.relpath(PAGE, ROOT)} is out of date: run python scripts/tools/gen_api_page.py",
                  file=sys.stderr)
            return 1
        return 0
    with open(PAGE, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.relpath(PAGE, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
