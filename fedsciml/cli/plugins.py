"""Plugins: user modules whose ``@register``-ed problems and methods join the registries before the parser (whose
flags come from the registries) is built — from installed packages' entry points, ``FEDSCIML_PLUGINS`` and the
command line's ``--plugin`` (:func:`load_plugins`, called by :func:`fedsciml.cli.main._parse`)."""
from __future__ import annotations

import os
import sys

from fedsciml.cli.common import CLIError


def load_plugins(specs) -> list[str]:
    """Import user problem modules so their ``@register``-ed problems join the registry.

    Sources, in order: installed packages' entry points in the group
    ``fedsciml.problems``, the ``FEDSCIML_PLUGINS`` environment variable
    (``os.pathsep``-separated), and ``--plugin`` options.  Each is a module
    name or a path to a ``.py`` file.  Any fault — an empty name, the same
    plugin twice, a file that does not exist, a syntax error, an exception
    raised while importing — is a :class:`CLIError` naming the plugin.
    """
    import importlib
    import importlib.metadata
    import importlib.util

    loaded = []
    for ep in importlib.metadata.entry_points(group="fedsciml.problems"):
        _load_one(f"entry point {ep.name!r}", ep.load)
        loaded.append(ep.name)
    env = [s for s in os.environ.get("FEDSCIML_PLUGINS", "").split(os.pathsep) if s]
    seen = {}
    for spec in env + list(specs or []):
        if not spec.strip():
            raise CLIError("--plugin needs a module name or a path to a .py file, got an empty string")
        is_file = spec.endswith(".py") or os.path.sep in spec
        key = os.path.realpath(spec) if is_file else spec
        if key in seen:
            raise CLIError(f"plugin {spec!r} is given twice (also as {seen[key]!r}); load each plugin once")
        seen[key] = spec
        if is_file:
            if not os.path.isfile(spec):
                raise CLIError(f"plugin file {spec!r} does not exist")
            name = "fedsciml_plugin_" + os.path.splitext(os.path.basename(spec))[0]
            mod_spec = importlib.util.spec_from_file_location(name, spec)
            if mod_spec is None or mod_spec.loader is None:
                raise CLIError(f"plugin file {spec!r} cannot be imported as a Python module")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module
            try:
                _load_one(f"plugin file {spec!r}", lambda: mod_spec.loader.exec_module(module))
            except CLIError:
                sys.modules.pop(name, None)
                raise
        else:
            _load_one(f"plugin module {spec!r}", lambda: importlib.import_module(spec))
        loaded.append(spec)
    return loaded


def _load_one(what: str, load):
    try:
        load()
    except SyntaxError as e:
        raise CLIError(f"{what} has a syntax error at line {e.lineno}: {e.msg}") from None
    except ImportError as e:
        raise CLIError(f"cannot import {what}: {e}") from None
    except Exception as e:  # a plugin is user code: any failure is reported, in one line
        raise CLIError(f"{what} failed while loading: {type(e).__name__}: {e}") from None


def _pre_scan_plugins(argv):
    """``--plugin X`` must be known before the parser (whose flags come from the registry) is built."""
    out, it = [], iter(argv)
    for a in it:
        if a == "--plugin":
            out.append(next(it, ""))
        elif a.startswith("--plugin="):
            out.append(a.split("=", 1)[1])
    return out
