"""The API reference page (docs/api.md) documents exactly ``fedsciml.__all__``, each name at its defining module."""
import importlib
import importlib.util
import pathlib
import re


import fedsciml

ROOT = pathlib.Path(__file__).resolve().parents[1]
ENTRY = re.compile(r"^::: (fedsciml(?:\.\w+)+)\.(\w+)$", re.M)


def _entries() -> dict[str, str]:
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8").split("## Public modules")[0]  # fs.__all__'s part
    found = ENTRY.findall(text)
    names = [name for _, name in found]
    assert len(names) == len(set(names)), "a name is documented twice"
    return {name: module for module, name in found}


def test_api_page_lists_exactly_the_public_names():
    entries = _entries()
    # __version__ is a string, not an object mkdocstrings documents: the page names it in its text instead.
    assert set(entries) == set(fedsciml.__all__) - {"__version__"}
    assert "`fedsciml.__version__`" in (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


def test_api_page_points_at_the_defining_modules():
    for name, module in _entries().items():
        obj = getattr(importlib.import_module(fedsciml._PUBLIC[name]), name)  # what fs.<name> resolves to
        assert getattr(obj, "__module__", module) == module, f"{name} is defined in {obj.__module__}, not {module}"
        assert getattr(importlib.import_module(module), name) is obj, name


def test_public_names_are_the_documented_objects():
    # fs.methods is the subpackage fedsciml.methods (the method list is fs.list_methods): no public name is
    # shadowed by a subpackage once that is imported
    import fedsciml.methods  # noqa: F401  (what any solve imports)

    for name, module in _entries().items():
        assert getattr(fedsciml, name) is getattr(importlib.import_module(module), name), name
    assert fs_list_methods_is_the_registry()


def fs_list_methods_is_the_registry() -> bool:
    from fedsciml.methods import METHODS

    return fedsciml.list_methods() == sorted(METHODS)


def test_api_page_is_what_the_generator_writes():
    spec = importlib.util.spec_from_file_location("gen_api_page", ROOT / "scripts" / "tools" / "gen_api_page.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.main(["--check"]) == 0, "docs/api.md is out of date: run python scripts/tools/gen_api_page.py"


def test_architecture_page_names_every_module():
    text = (ROOT / "docs" / "design" / "architecture.md").read_text(encoding="utf-8").split("## Every module")[1]
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", text, re.M))
    modules = {str(p.relative_to(ROOT / "fedsciml")) for p in (ROOT / "fedsciml").rglob("*.py")}
    modules |= {str(p.relative_to(ROOT)) for p in (ROOT / "problems").rglob("*.py")}
    modules = {m for m in modules if not m.endswith(("__init__.py", "__main__.py"))}
    assert listed == modules, (f"docs/design/architecture.md's module list lacks {sorted(modules - listed)} and "
                               f"names {sorted(listed - modules)} that do not exist")


def _builtin_methods() -> dict:
    """The registry's built-in entries (a plugin another test loaded declares its configuration in its own file)."""
    from fedsciml.runtime.driver import METHODS

    return {m: s for m, s in METHODS.items() if s.config.__module__.startswith("fedsciml.")}


def _problem_methods() -> set[str]:
    from fedsciml.runtime.driver import PROBLEM_KINDS

    return {m for m, s in _builtin_methods().items() if any(k in PROBLEM_KINDS for k in s.kinds)}


def test_solve_docstring_names_every_method_a_problem_runs():
    # the built-in methods `import fedsciml` registers (the ridge baselines' fedavg-sgd is the ridge preset's own)
    import fedsciml.api

    doc = fedsciml.api.solve.__doc__.split("    method : str")[1].split("\n    hidden")[0]
    named = set(re.findall(r"``([\w-]+)``", doc))
    assert named == _problem_methods() - {"fedavg-sgd"}, "fs.solve's docstring lists other methods than the registry"


def test_methods_page_table_is_the_registry():
    import fedsciml.images  # noqa: F401  (registers the image methods)
    import fedsciml.ridge.baselines  # noqa: F401  (registers fedavg-sgd)
    METHODS = _builtin_methods()
    text = (ROOT / "docs" / "methods.md").read_text(encoding="utf-8").split("## What a client sends")[0]
    # each row's first cell, less its parenthesized notes (fedavg-sgd's names its options there)
    rows = [re.sub(r"\(.*?\)", "", line.split(" | ")[0]) for line in text.splitlines() if line.startswith("| `")]
    named = set(re.findall(r"`([\w-]+)`", "".join(rows)))
    assert named == set(METHODS), (f"docs/methods.md's table lacks {sorted(set(METHODS) - named)} and names "
                                   f"{sorted(named - set(METHODS))} the registry does not hold")
