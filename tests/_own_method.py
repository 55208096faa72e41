"""examples/flower_own_method installed as pip installs it, for the tests (no build, no network)."""
from __future__ import annotations


def install_own_method(root) -> str:
    """``examples/flower_own_method`` as ``pip install`` leaves it: the module and a ``*.dist-info`` whose
    ``entry_points.txt`` declares it in the group ``fedsciml.methods``, in directory ``root`` (to put on the path
    of every process of the run — as a pip-installed package is)."""
    import os
    import shutil

    ex = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "flower_own_method")
    shutil.copy(os.path.join(ex, "my_fedsciml_method.py"), root)
    info = os.path.join(root, "my_fedsciml_method-0.1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: my-fedsciml-method\nVersion: 0.1.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[fedsciml.methods]\nmy-avg = my_fedsciml_method\n")
    return str(root)
