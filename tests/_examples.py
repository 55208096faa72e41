"""The example scripts under ``examples/`` as modules, for the tests that run them (the examples are not a package)."""
import importlib.util
import pathlib

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def load_example(name: str, module_name: str | None = None):
    """Import ``examples/<name>.py`` (a fresh module each call) and return it."""
    spec = importlib.util.spec_from_file_location(module_name or name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
