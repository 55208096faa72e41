"""What every subcommand shares: exit codes, the one-line error, the thread policy, the flag generator, the
subcommands whose parsers are built on first use."""
from __future__ import annotations

import argparse
import os

EXIT_USAGE = 2
EXIT_FAILED = 1


class CLIError(Exception):
    pass


class RunFailed(Exception):
    """A run that started but could not finish (exit 1, one line)."""


def did_you_mean(word: str, choices, quote: bool = True) -> str:
    """`` (did you mean 'bratu'?)`` for the closest of ``choices`` to ``word`` (``bratuu``), else ``""``."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], 1, 0.6)
    if not close:
        return ""
    return f" (did you mean {close[0]!r}?)" if quote else f" (did you mean {close[0]}?)"


THREADS_HELP = ("CPU threads for torch/BLAS (default: all cores, or 1 when the load average already exceeds the "
                "core count: oversubscribed threads spin)")


def status(line: str) -> None:
    """A command's status line on standard error — the run header, the thread notice, ``wrote PATH`` — through the
    log (logger ``fedsciml.cli``, INFO), so that ``-q`` (errors only) silences it with everything else."""
    import logging

    logging.getLogger("fedsciml.cli").info(line)


def set_threads(threads, quiet=False):
    """The one thread policy of every subcommand: ``threads`` if given, else all cores, or 1 when the load
    average already exceeds the core count (and OMP_NUM_THREADS is not set): a status line says so unless
    ``quiet``."""
    import torch

    if threads is not None:
        if threads < 1:
            raise CLIError(f"--threads must be ≥ 1, got {threads}")
        torch.set_num_threads(threads)
        return
    try:
        load, cores = os.getloadavg()[0], os.cpu_count() or 1
    except OSError:  # pragma: no cover - no load average on this platform
        return
    if cores > 1 and load >= cores and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(1)
        if not quiet:
            status(f"[fedsciml] load average {load:.1f} ≥ {cores} cores: using 1 thread (--threads N to override)")


# --- flags generated from option declarations ---------------------------------------------------------------------
#
# The one generator of command-line flags: ``solve``, ``ridge`` (and ``bench images``) build their option flags
# from the declarations of :mod:`fedsciml.options` (a method configuration's ``specs()``, a problem's ``specs()``),
# so a default, a range or a help text is written once.  API (kept stable; other subcommands build on it):
#
#   flags = add_option_flags(group, {"fipa": FIPAConfig.specs(), "gn": GNConfig.specs()}, dest="mopt_")
#   ...
#   given = given_options(args, "mopt_")                       # {option: value} of the flags given
#   values = given_options(args, "popt_", specs=problem_cls.specs(), owner="problem 'bratu'")  # text converted
#
# and ``with fedsciml.options.cli_names(flags): ...`` names the options by their flags in error messages.

def option_flag(name: str, prefix: str = "") -> str:
    """The flag of an option: ``local_steps`` → ``--local-steps`` (``prefix``: ``method-`` → ``--method-sigma``)."""
    return "--" + prefix + name.replace("_", "-")


def flag_help(per_owner: dict, name_owners: bool | str = True) -> str:
    """Help of a generated flag from ``{owner: (default, Spec)}``: what it does, its allowed values and its default,
    per owner, one group per help text and per allowed values and default (``text [a, b: an integer ≥ 1; default
    400 · c: an integer ≥ 1; default 1500]``).  ``name_owners``: ``True`` names the owners always, ``False`` never,
    ``"differ"`` only where they differ (``text [an integer ≥ 1; default 100]`` when all agree; the largest of
    several groups of three or more owners is "the others") — for flags under a heading that says whose options
    they are (``solve``'s method groups), so that no flag repeats the list of methods."""
    from fedsciml.options import cli_names

    texts: dict[str, dict[tuple, list]] = {}
    with cli_names():
        for owner, (default, s) in per_owner.items():
            empty = isinstance(default, (list, tuple, dict, set, str)) and not default  # () is no default to show
            shown = "" if default is None or default is False or empty else f"; default {default!r}"
            allowed = "" if s.type is bool else s.allowed()
            texts.setdefault(s.help, {}).setdefault((allowed, shown), []).append(owner)
    groups = [owners for g in texts.values() for owners in g.values()]
    differ = name_owners == "differ"
    named = len(groups) > 1 if differ else bool(name_owners)
    largest = max(groups, key=len) if differ and named and len(max(groups, key=len)) >= 3 else None
    parts = []
    for text, by_value in texts.items():
        inner = []
        for (allowed, default), owners in by_value.items():
            who = ("the others" if owners is largest else ", ".join(owners)) if named else ""
            inner.append((who + (": " if who and allowed else "") + allowed + default).strip("; "))
        inner = [x for x in inner if x]
        parts.append(f"{text} [{' · '.join(inner)}]" if inner else text)
    return " | ".join(parts).replace("%", "%%")


def add_option_flags(group, owners: dict, *, dest: str, typed: bool = True, rename: dict | None = None,
                     aliases: dict | None = None, skip=(), name_owners: bool | str = True) -> dict[str, str]:
    """Add one flag per option declared by any of ``owners`` (``{owner: {option: (default, Spec)}}``, e.g.
    ``{m.name: m.config.specs()}`` or ``{cls.name: cls.specs()}``) to ``group`` (a parser or argument group).

    Each flag's value lands in ``args.<dest><option>``, ``None`` when not given (so the declared default applies
    downstream, once).  ``typed``: argparse converts the text by the first owner's Spec type (int, float, str;
    a bool is a switch, ``--x/--no-x`` when its Spec has ``none``); with ``typed=False`` (owners whose Specs for
    one name may differ, e.g. every problem's) the text is kept and :func:`given_options` converts it by the
    chosen owner's Spec.  :data:`~fedsciml.options.FLOATS` options are text either way, parsed by
    :func:`given_options` (:func:`~fedsciml.options.parse_grid`).  ``rename``: ``{option: flag}`` for a flag
    spelled otherwise than ``--option-name``; ``aliases``: ``{option: [more flags]}`` (older spellings kept
    working); ``skip``: options without a flag here (a Spec with ``cli=False`` never has one).
    Returns ``{option: flag}`` (pass it to :func:`fedsciml.options.cli_names` so messages name the flags)."""
    import argparse

    from fedsciml.options import FLOATS, INTS, PATH

    rename, aliases = dict(rename or {}), dict(aliases or {})
    per_option: dict[str, dict] = {}
    for owner, specs in owners.items():
        for name, (default, spec) in specs.items():
            if spec.cli and name not in skip:
                per_option.setdefault(name, {})[owner] = (default, spec)
    flags = {}
    for name, per_owner in per_option.items():
        spec = next(iter(per_owner.values()))[1]
        flag = rename.get(name) or option_flag(name)
        kw: dict = dict(dest=dest + name, default=None, help=flag_help(per_owner, name_owners))
        if spec.type is bool and all(s.type is bool for _, s in per_owner.values()):
            if spec.none is not None:
                kw["action"] = argparse.BooleanOptionalAction
            else:
                kw.update(action="store_const", const=True)
        else:
            if typed and spec.type in (int, float, str, PATH):
                kw["type"] = str if spec.type is PATH else spec.type
                if spec.choices is not None:
                    kw["choices"] = spec.choices
            kw["metavar"] = spec.metavar or ("N" if spec.type is int else "X" if spec.type is float else
                                             "LIST" if spec.type in (FLOATS, INTS) else None)
            if kw["metavar"] is None and "choices" not in kw:
                kw["metavar"] = name.upper()
        group.add_argument(flag, *aliases.get(name, ()), **kw)
        flags[name] = flag
    return flags


def given_options(args, dest: str, specs: dict | None = None, owner: str = "", errors=(None, None)) -> dict:
    """``{option: value}`` of the generated flags given on the command line (``args.<dest><option>`` not None).
    Text is converted to the declared type, once, here (:func:`fedsciml.options.from_text`; a
    :data:`~fedsciml.options.FLOATS` option's list by :func:`~fedsciml.options.parse_grid`) by ``specs``
    (``{option: (default, Spec)}``: the chosen owner's, or the union of the owners' for typed flags); values are
    checked by their owner afterwards, once.  An option that ``specs`` does not declare is returned as given
    (the owner's validation refuses it by name)."""
    from fedsciml.options import from_text

    out = {}
    for key, v in vars(args).items():
        if not key.startswith(dest) or v is None:
            continue
        name = key[len(dest):]
        if specs is not None and name in specs:
            v = from_text(name, v, specs[name][1], owner, errors=errors)
        out[name] = v
    return out


def union_specs(owners: dict) -> dict:
    """``{option: (default, Spec)}`` of the first owner declaring each option (``{owner: specs}`` as
    :func:`add_option_flags` takes): the types by which :func:`given_options` converts typed flags' text."""
    out: dict = {}
    for specs in owners.values():
        for name, ds in specs.items():
            out.setdefault(name, ds)
    return out


#: perf_counter at ``main()``'s start (set by :func:`fedsciml.cli.main.main`): a result's wall_seconds is the
#: whole command's
_COMMAND_START = [0.0]


def write_json_collecting(payload, path: str, failed: list, shown: str | None = None) -> None:
    """Write ``payload`` as JSON to ``path`` and say so on stderr (``wrote SHOWN``, default the path); a path that
    cannot take it is added to ``failed`` (every output is tried; ``raise_collected`` reports them together)."""
    from fedsciml.runtime.results import ResultsNotWritten, write_json

    try:
        write_json(payload, path)
        if path != "-":
            status(f"wrote {shown or path}")
    except ResultsNotWritten as e:
        failed.append(e)


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0, else one line naming the text."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def help_of(*command: str):
    """The ``_run`` of a command that needs a subcommand (``flower``, ``bench``): its help, as ``--help`` prints it."""
    return lambda args: args._parser.parse_args([*command, "--help"])


# --- subcommands whose parsers are built on first use (the top parser's and bench's) ------------------------------

class _BuiltOnUse(dict):
    """A subcommand table whose parsers are filled in when first looked up — by the parse that chose the command,
    or by a caller that asks for it (``choices["solve"]``): building ``solve``'s flags imports the problem and
    method registries, ``bench images``' the image stack, and ``--help``, ``list`` or ``predict`` need neither."""

    def __init__(self):
        super().__init__()
        self.builders: dict = {}

    def __getitem__(self, name):
        parser = super().__getitem__(name)
        build = self.builders.pop(name, None)
        if build is not None:
            build(_Into(parser))
        return parser

    def get(self, name, default=None):
        return self[name] if name in self else default


class _Into:
    """What a subcommand's ``add_parser(subparsers)`` is given when its parser already exists (registered with its
    one-line help by :func:`lazy_commands`): ``add_parser`` sets the remaining attributes and returns it."""

    def __init__(self, parser):
        self.parser = parser

    def add_parser(self, name, **kwargs):
        for k, v in kwargs.items():
            setattr(self.parser, k, v)
        return self.parser


def lazy_commands(parser, dest: str, metavar: str, commands) -> None:
    """Subcommands ``(name, one-line help, builder or None, run)``; a builder ``fn(subparsers)`` runs on first
    use; ``run(args) -> exit status`` is what :func:`fedsciml.cli.main.main` calls for that subcommand
    (``args._run``)."""
    sub = parser.add_subparsers(dest=dest, metavar=metavar)
    sub.choices = sub._name_parser_map = table = _BuiltOnUse()
    for name, help_text, build, run in commands:
        sub.add_parser(name, help=help_text).set_defaults(_run=run)
        if build is not None:
            table.builders[name] = build
