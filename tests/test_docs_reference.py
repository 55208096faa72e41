"""Issue 30 items 7/8: the API reference is readable — numpydoc style (the docstrings' own), a signature
formatter in the docs extra, every parameter of ``fs.solve`` documented, Sphinx roles rendered as code — and
every name the docs import is public."""
import inspect
import os
import re
import sys

import fedsciml as fs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def test_mkdocs_reads_numpy_docstrings_and_the_docs_extra_has_a_formatter():
    yml = open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8").read()
    assert "docstring_style: numpy" in yml and "separate_signature: true" in yml
    assert "docs_hooks/sphinx_roles.py" in yml
    from fedsciml.cli.config import _toml   # tomllib, or tomli on Python 3.10

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extra = _toml().load(f)["project"]["optional-dependencies"]["docs"]
    assert any(re.match(r"(ruff|black)\b", d) for d in extra)   # mkdocstrings-python formats signatures with it


def test_every_parameter_of_solve_is_in_its_numpy_parameters_section():
    doc = inspect.getdoc(fs.solve)
    section = doc.split("Parameters\n----------\n", 1)[1].split("Raises\n------", 1)[0]
    documented = set()
    for line in section.splitlines():
        m = re.match(r"^([a-z_][a-z_, ]*?)(?: :|$)", line)
        if m and not line.startswith(" "):
            documented |= {n.strip() for n in m.group(1).split(",")}
    params = set(inspect.signature(fs.solve).parameters)
    assert params <= documented, params - documented
    assert "``engine``" in section and "progress" in documented


def test_sphinx_roles_render_as_code():
    from docs_hooks.sphinx_roles import render

    html = "a :class:<code>~fedsciml.problems.base.Problem</code> or :func:<code>fedsciml.api.solve</code>"
    assert render(html) == "a <code>Problem</code> or <code>fedsciml.api.solve</code>"


def test_every_name_the_docs_import_from_fedsciml_is_public():
    """``from fedsciml.x import name`` / ``import fedsciml.x`` in a docs code block: ``name`` (or the module) is
    importable and listed on the API page (a name of ``fedsciml.__all__`` or a module the page documents)."""
    api = open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8").read()
    public_modules = api.split("## Public modules", 1)[1]
    bad = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "docs")):
        for f in files:
            if not f.endswith(".md"):
                continue
            text = open(os.path.join(dirpath, f), encoding="utf-8").read()
            for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
                for mod, names in re.findall(r"^\s*from (fedsciml[\w.]*) import ([\w, ]+)", block, flags=re.M):
                    for n in (x.strip() for x in names.split(",")):
                        import importlib

                        obj = getattr(importlib.import_module(mod), n)
                        if n in fs.__all__ and getattr(fs, n) is obj:
                            continue
                        if not (re.search(rf"^::: [\w.]+\.{n}$", public_modules, flags=re.M)
                                or f"::: {mod}\n" in public_modules):
                            bad.append(f"{f}: from {mod} import {n}")
    assert not bad, bad
