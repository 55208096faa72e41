"""examples/flower_own_pde and examples/flower_own_method installed as pip installs them, for the tests (no build,
no network)."""
from __future__ import annotations


def install_example(root, example: str, module: str, dist: str, group: str, entry: str) -> str:
    """``examples/<example>`` as ``pip install`` leaves it: ``<module>.py`` and a ``*.dist-info`` (distribution
    ``dist``) whose ``entry_points.txt`` declares ``entry = module`` in the entry-point ``group``, in directory
    ``root`` (to put on the path of every process of the run — as a pip-installed package is)."""
    import os
    import shutil

    ex = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", example)
    shutil.copy(os.path.join(ex, f"{module}.py"), root)
    info = os.path.join(root, f"{module}-0.1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write(f"[{group}]\n{entry} = {module}\n")
    return str(root)


def forget_method(name: str, query: str | None = None, module: str | None = None) -> None:
    """This process's registries as they were before a test registered method ``name`` (and the client handler of
    ``query``, and imported ``module``): the registries are the process's, shared by the tests after it."""
    import sys

    from fedsciml.runtime import client as runtime_client
    from fedsciml.runtime.client import Client
    from fedsciml.runtime.registry import METHODS

    METHODS.pop(name, None)
    if query is not None:
        Client.__dict__["handlers"].pop(query, None)
        runtime_client._VOCABULARY.pop(query, None)
    if module is not None:
        sys.modules.pop(module, None)


def install_own_pde(root) -> str:
    """``examples/flower_own_pde``: the problem ``my-helmholtz`` (entry-point group ``fedsciml.problems``)."""
    return install_example(root, "flower_own_pde", "my_fedsciml_pde", "my-fedsciml-pde", "fedsciml.problems",
                           "my-helmholtz")


def install_own_method(root) -> str:
    """``examples/flower_own_method``: the method ``my-avg`` (entry-point group ``fedsciml.methods``)."""
    return install_example(root, "flower_own_method", "my_fedsciml_method", "my-fedsciml-method", "fedsciml.methods",
                           "my-avg")
