"""``--config FILE.toml``: a file of a subcommand's options, read like every other input and typed by the options'
declarations.

* **Read bounded** (:func:`read_config`): a regular file of at most :data:`MAX_CONFIG_BYTES`
  (:func:`fedsciml.runtime.files.read_regular_file`: ``/dev/zero``, a FIFO, a directory are one line, nothing
  hangs), UTF-8, arrays and tables nested at most :data:`MAX_NESTING` deep (checked before the TOML parser, whose
  recursion a 5,000-deep array would exhaust), then TOML (``tomllib``; on Python 3.10 the ``tomli`` package, a
  dependency there, imported only here, only for ``--config``).
* **Typed by the declarations** (:func:`apply_config`): each key is one of the subcommand's options, spelled as
  the option (``local_steps`` or ``local-steps``); its value becomes that option's default in the subcommand's
  parser, so an option given on the command line wins.  A value is checked against the flag it stands for
  (a switch takes ``true``/``false``, ``--clients`` an integer, ``--engine`` one of its choices), and the
  generated options' values go, typed as TOML gives them, to their owner's check, which names the key and the
  file.  A key that is no option: ``run.toml: unknown key 'rnds' (did you mean 'rounds'?)``.
* **Runs no code**: ``plugin`` is refused (a plugin is imported only from ``--plugin`` on the command line,
  ``FEDSCIML_PLUGINS`` or an installed entry point); the file is read after the command line's plugins are
  loaded and cannot add one.

``quiet = true`` is ``-q`` (errors only), ``verbose = true`` is ``-v``; ``no_progress = true`` is
``--no-progress``.  ``problem = "bratu"`` is ``solve``'s problem.
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from typing import Any

from fedsciml.cli.common import CLIError, did_you_mean

#: the largest ``--config`` file read (a file of options is a few hundred bytes)
MAX_CONFIG_BYTES = 1 << 20
#: the deepest nesting of arrays and inline tables read (a file of options needs 2)
MAX_NESTING = 32
#: the top-level flags a config file may set: ``{key: dest}``
GLOBAL_KEYS = {"quiet": "quiet", "verbose": "verbose"}
#: keys refused with a reason: loading code is as explicit as ``--plugin`` on the command line
REFUSED_KEYS = {"plugin": "a config file runs no code: load a plugin with --plugin FILE.py (or MODULE) on the "
                          "command line, or FEDSCIML_PLUGINS",
                "config": "a config file names no other config file",
                "help": "help is --help on the command line"}
#: the generated options' destinations (``args.<prefix><option>``), whose values their owners check
GENERATED = ("mopt_", "popt_", "ropt_", "iopt_")
#: the subcommands that take ``--config``
COMMANDS = ("solve", "ridge", "bench images")


@dataclass
class ConfigFile:
    """A read ``--config`` file: its path, its table and, once applied, ``{option: how messages name it}`` for
    the generated options it set and the command line did not (``'rounds' in run.toml``)."""

    path: str
    table: dict
    names: dict = field(default_factory=dict)


def _toml():
    """``tomllib`` (Python ≥ 3.11), else ``tomli`` (a dependency on Python 3.10): imported for ``--config`` only."""
    import importlib

    try:
        return importlib.import_module("tomllib")
    except ImportError:  # Python 3.10
        pass
    try:
        return importlib.import_module("tomli")
    except ImportError:
        raise CLIError("--config needs the tomli package on Python 3.10 (pip install \"tomli>=2\"; fedsciml's "
                       "dependencies name it there)") from None


_SIGNIFICANT = re.compile(r"\\.|[\"'#\[\]{}\n]")


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in TOML ``text`` outside strings and comments (a scan, no recursion)."""
    depth = most = 0
    quote = ""
    comment = False
    for m in _SIGNIFICANT.finditer(text):
        c = m.group()
        if comment:
            comment = c != "\n"
        elif quote:
            if c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == "#":
            comment = True
        elif c in "[{":
            depth += 1
            most = max(most, depth)
        elif c in "]}":
            depth = max(depth - 1, 0)
    return most


def read_config(path: str) -> ConfigFile:
    """``path`` read (bounded) and parsed; every fault one :class:`CLIError` line naming the file."""
    from fedsciml.runtime.files import FileRefused, read_regular_file

    try:
        data = read_regular_file(path, MAX_CONFIG_BYTES, "a TOML config file", too_large="a file of options is small")
    except FileRefused as e:
        raise CLIError(f"--config {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CLIError(f"--config {path!r} is not UTF-8 text (byte {e.start}: {e.reason}); a TOML file is UTF-8") \
            from None
    depth = nesting_depth(text)
    if depth > MAX_NESTING:
        raise CLIError(f"--config {path!r} nests arrays or tables {depth} deep; at most {MAX_NESTING} (a file of "
                       f"options needs 2)")
    toml = _toml()
    try:
        table = toml.loads(text)
    except toml.TOMLDecodeError as e:
        raise CLIError(f"--config {path!r} is not valid TOML: {e}") from None
    except RecursionError:  # not reached below MAX_NESTING; kept as the parser's own bound
        raise CLIError(f"--config {path!r} nests too deeply to be read") from None
    return ConfigFile(path, table)


def take_config(argv: list) -> tuple[list, ConfigFile | None]:
    """``argv`` without ``--config FILE`` (or ``--config=FILE``), and that file read; ``None`` without one."""
    at = [k for k, a in enumerate(argv) if a == "--config" or a.startswith("--config=")]
    if not at:
        return argv, None
    if len(at) > 1:
        raise CLIError("--config is given twice; give one file")
    i = at[0]
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            raise CLIError("--config needs a TOML file: --config run.toml")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2:]
    else:
        path, rest = argv[i].split("=", 1)[1], argv[:i] + argv[i + 1:]
    if not path.strip():
        raise CLIError("--config needs a TOML file, got an empty path")
    return rest, read_config(path)


def _keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """``{key: action}``: each option of ``parser`` by its name (``--local-steps`` → ``local_steps``)."""
    out = {}
    for a in parser._actions:
        longs = [o for o in a.option_strings if o.startswith("--")]
        if not longs or isinstance(a, argparse._HelpAction) or a.dest == "config":
            continue
        out[longs[0][2:].replace("-", "_")] = a
    return out


def _given(action: argparse.Action, argv: list) -> bool:
    """Whether the command line gives ``action``'s option (any of its spellings, ``--x v`` or ``--x=v``)."""
    spellings = set(action.option_strings)
    return any(tok.split("=", 1)[0] in spellings for tok in argv)


def _typed(cfg: ConfigFile, key: str, action: argparse.Action, value: Any) -> Any:
    """``value`` for ``action``'s option, checked against the flag: one line naming the file and the key."""
    where = f"{cfg.path}: {key}"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreConstAction, argparse.BooleanOptionalAction)):
        if not isinstance(value, bool):
            raise CLIError(f"{where} must be true or false, got {value!r}")
        if isinstance(action, argparse.BooleanOptionalAction):
            return value
        return action.const if value else action.default
    if isinstance(value, bool) or not isinstance(value, (int, float, str, list)):
        raise CLIError(f"{where} must be a number, a string or a list of them, got {type(value).__name__} "
                       f"{value!r}"[:200])
    if isinstance(value, list):
        if not all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value):
            raise CLIError(f"{where} must be a list of numbers or strings, got {value!r}"[:200])
        if not action.dest.startswith(GENERATED) and action.type in (None, str):  # --compare: a list of methods
            value = ",".join(str(v) for v in value)
        elif not action.dest.startswith(GENERATED):
            raise CLIError(f"{where} takes one value, got a list {value!r}"[:200])
    if action.type is int and not isinstance(value, int):
        raise CLIError(f"{where} must be an integer, got {value!r}")
    if action.type is float:
        if not isinstance(value, (int, float)):
            raise CLIError(f"{where} must be a number, got {value!r}")
        value = float(value)
    if action.type in (None, str) and not action.dest.startswith(GENERATED) and not isinstance(value, str):
        raise CLIError(f"{where} must be a string, got {value!r}")
    if action.choices is not None and value not in action.choices:
        raise CLIError(f"{where} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return value


def apply_config(cfg: ConfigFile, top: argparse.ArgumentParser, sub: argparse.ArgumentParser, command: str,
                 argv: list) -> None:
    """The file's keys as defaults of ``sub`` (the subcommand's parser; ``problem`` is ``solve``'s positional)
    and of ``top`` (``quiet``, ``verbose``): the command line still wins.  ``cfg.names`` is filled in."""
    if command not in COMMANDS:
        raise CLIError(f"--config goes with {', '.join(COMMANDS)} (e.g. solve --config run.toml), not {command}")
    keys = _keys(sub)
    defaults: dict = {}
    for raw, value in cfg.table.items():
        key = str(raw).replace("-", "_")
        if key in REFUSED_KEYS:
            raise CLIError(f"{cfg.path}: key {raw!r} is refused: {REFUSED_KEYS[key]}")
        if key == "problem" and command == "solve":
            if not isinstance(value, str):
                raise CLIError(f"{cfg.path}: problem must be a string (a problem's name), got {value!r}")
            defaults["problem"] = value
            continue
        if key in GLOBAL_KEYS:
            if not isinstance(value, bool):
                raise CLIError(f"{cfg.path}: {raw} must be true or false, got {value!r}")
            other = {"quiet": ("-v", "--verbose"), "verbose": ("-q", "--quiet", "--quiet-log")}[key]
            if value and not any(a in other for a in argv):  # -v on the command line beats the file's quiet
                top.set_defaults(**{GLOBAL_KEYS[key]: True})
            continue
        action = keys.get(key)
        if action is None:
            known = sorted({*keys, *GLOBAL_KEYS, *(("problem",) if command == "solve" else ())})
            raise CLIError(f"{cfg.path}: unknown key {raw!r}{did_you_mean(key, known)}; the keys are the options "
                           f"of `{command}` (`{command} --help`)")
        defaults[action.dest] = _typed(cfg, str(raw), action, value)
        if action.dest.startswith(GENERATED) and not _given(action, argv):
            cfg.names[action.dest.split("_", 1)[1]] = f"{raw!r} in {cfg.path}"
    sub.set_defaults(**defaults)
