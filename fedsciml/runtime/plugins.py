"""What travels with a job to a client in another process: the user modules (a ``--plugin`` file, a module of the
user's) that registered what the client needs — the job's problem and the client handlers of the methods
(:func:`fedsciml.runtime.client.register_handler`) — so that a plugin method answers its own queries on every
engine whose clients import them (``processes``), not only in this process.  Each is ``[module name, file]``:
imported by its name where the client can, else from its file under that name (as ``--plugin`` loads it).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Iterable

from fedsciml.runtime.client import _VOCABULARY


def user_module(obj: Any, what: str) -> list | None:
    """``[module, file]`` of the module that defines ``obj`` when it is the user's (not fedsciml's); ``None`` for
    fedsciml's own and for a module without a file.  One defined by the script being run (``__main__``) cannot
    be imported by another process: refused in one line naming ``what``."""
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    if module is None or module.__name__ == "fedsciml" or module.__name__.startswith("fedsciml."):
        return None
    if module.__name__ == "__main__":
        raise ValueError(f"{what} is registered by the script being run (__main__), which a client process cannot "
                         f"import; register it in a module (--plugin FILE, FEDSCIML_PLUGINS or an installed package)")
    path = getattr(module, "__file__", None)
    return [module.__name__, path] if path else None


def handler_modules() -> list:
    """The user modules that registered a client handler in this process (every client kind's table), in the order
    of the queries' names: what a client process imports to answer a plugin method's queries."""
    out: list = []
    for query in sorted(_VOCABULARY):
        for kind in sorted(_VOCABULARY[query], key=lambda k: k.__qualname__):
            handler = kind.__dict__.get("handlers", {}).get(query)
            if handler is None:
                continue
            for fn in (handler.answer, handler.precompute):
                mod = None if fn is None else user_module(fn, f"the client handler of query {query!r}")
                if mod is not None and mod not in out:
                    out.append(mod)
    return out


def import_modules(modules: Iterable) -> None:
    """In a client process: import each ``[name, file]`` (by its name where this process can, else from its file
    under that name), once."""
    for name, path in modules or ():
        if name in sys.modules:
            continue
        try:
            here = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package this process does not have: load from the file
            here = False
        if here:  # importable by its name: imported so (an error inside it is the module's own, raised)
            importlib.import_module(name)
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"the module {name!r} of the job cannot be imported from {path!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
