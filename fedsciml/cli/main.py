"""Command line: ``python -m fedsciml {list,solve,predict,ridge,bench,flower} ...`` — the top parser, logging, the
command line's pre-processing (global flags anywhere, ``--config``, ``--plugin``, the help's scope), :func:`_parse`
and :func:`main`.  Each command's parser and run live in its own module: :mod:`~fedsciml.cli.listing`,
:mod:`~fedsciml.cli.solve`, :mod:`~fedsciml.cli.predict`, :mod:`~fedsciml.cli.ridge`, :mod:`~fedsciml.cli.bench`
(with :mod:`~fedsciml.cli.images`), :mod:`~fedsciml.cli.flower` (with :mod:`~fedsciml.cli.flower_deploy`); what they
share is :mod:`~fedsciml.cli.common`, plugins :mod:`~fedsciml.cli.plugins`, ``--config`` :mod:`~fedsciml.cli.config`.

Bad input (unknown problem or method, an option out of range, an output path
that cannot be written) exits with status 2 and one line on stderr, no
traceback, before anything runs.  A run that starts but cannot finish (no
valid client message left, a diverging optimizer) exits with status 1 and one
line.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from fedsciml.cli import bench, flower, listing, predict, solve
from fedsciml.cli.common import (_COMMAND_START, EXIT_FAILED, EXIT_USAGE, CLIError, RunFailed, did_you_mean, help_of,
                                 lazy_commands)


def _run_ridge(args) -> int:
    from fedsciml.cli import ridge as ridge_cli

    return ridge_cli.run(args)


def _add_ridge_parser(sub):
    from fedsciml.cli import ridge as ridge_cli

    ridge_cli.add_parser(sub)


class _Parser(argparse.ArgumentParser):
    """A parser whose refusals are one line (``--clients four``: the argument and the value, and where the
    options are listed), not the usage of a hundred flags: a :class:`CLIError`, exit 2.  Subcommands' parsers
    are of this class too (``add_subparsers`` makes them of the parent's class)."""

    def error(self, message):
        import re

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:  # `solve bratu --engine flowr`, `solv`: the closest choice
            message += did_you_mean(m.group(1), re.findall(r"'([^']*)'", m.group(2)))
        raise CLIError(f"{message} (`{self.prog} --help` lists the options)")


def build_parser():
    """The parser; each subcommand's own flags are built when that subcommand is used
    (:func:`fedsciml.cli.common.lazy_commands`)."""
    parser = _Parser(
        prog="python -m fedsciml",
        description="fedsciml: federated scientific machine learning — PINNs, function fitting and ridge "
                    "regression on data split across clients, with exact Gauss–Newton, FIPA, FedAvg and "
                    "one-shot sufficient-statistic fusion.",
    )
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE",
                        help="import a module or .py file that registers extra problems (repeatable; also "
                             "FEDSCIML_PLUGINS and the 'fedsciml.problems' entry-point group; not from a --config "
                             "file)")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true",
                           help="also show debug messages of the library (logging level DEBUG); anywhere on the line")
    verbosity.add_argument("-q", "--quiet", "--quiet-log", dest="quiet", action="store_true",
                           help="errors only on standard error: no run header, progress, warnings or `wrote` lines "
                                "(the results on standard output stay); anywhere on the line. --no-progress "
                                "drops the progress lines alone")
    lazy_commands(parser, "command", "{list,solve,predict,ridge,bench,flower}", [
        ("list", "list problems and methods", None, listing.cmd_list),
        ("solve", "solve a registered problem (centralized or federated)", solve.add_parser, solve.cmd_solve),
        ("predict", "evaluate a saved model (solve --out DIR) at the points of a CSV file", predict.add_parser,
         predict.cmd_predict),
        ("ridge", "one-shot federated ridge regression (sufficient statistics, DP, projection, CV)", _add_ridge_parser,
         _run_ridge),
        ("bench", "benchmarks (bench images ...)", bench.add_parser, help_of("bench")),
        ("flower", "fedsciml's Flower Apps in this installation (flower app-dir), and flower run: flwr run that exits "
                   "non-zero when the run fails", flower.add_parser, help_of("flower")),
    ])
    return parser


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the record (a redirected or captured stderr too)."""

    def emit(self, record):
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(args) -> None:
    """The CLI decides what the user sees: the library's log records and the commands' status lines
    (:func:`fedsciml.cli.common.status`: the run header, the thread notice, ``wrote …``) go to stderr — INFO:
    progress lines, status lines and warnings; ``-v`` DEBUG; ``-q`` errors only — and long runs show a
    progress bar when stderr is a terminal (not with ``-q``)."""
    from fedsciml.runtime.history import use_progress_bars

    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO
    root = logging.getLogger("fedsciml")
    root.setLevel(level)
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
    root.propagate = False
    use_progress_bars(not args.quiet)


#: the top-level flags that may stand anywhere on the line (moved before the subcommand, where the parser reads
#: them): -q/--quiet is the one quiet (errors only), whichever side of the subcommand it stands
_GLOBAL_FLAGS = ("-v", "--verbose", "-q", "--quiet", "--quiet-log")
_COMMANDS = ("list", "solve", "predict", "ridge", "bench", "flower")


def _hoist_global_flags(argv: list) -> list:
    """``-v``/``-q``/``--quiet`` anywhere on the line (``solve bratu -q``): moved before the subcommand, where
    the parser reads them (nothing after ``--`` is touched)."""
    end = argv.index("--") if "--" in argv else len(argv)
    front = [a for a in argv[:end] if a in _GLOBAL_FLAGS]
    return front + [a for a in argv[:end] if a not in _GLOBAL_FLAGS] + argv[end:]


def _command_of(argv: list) -> tuple[str | None, int]:
    """The subcommand and its index (the first token that names one; ``--plugin X`` skipped)."""
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--plugin":
            skip = True
            continue
        if a in _COMMANDS:
            return a, i
    return None, -1


def _subparser(parser, argv: list, cmd: str, at: int) -> tuple[argparse.ArgumentParser, str]:
    """The parser of the subcommand at ``argv[at]`` (``bench images``: the nested one) and its name."""
    def choices(p):
        action = next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)
        return action.choices if action is not None else {}

    sub = choices(parser)[cmd]
    if cmd == "bench" and at + 1 < len(argv) and argv[at + 1] in choices(sub):
        return choices(sub)[argv[at + 1]], f"bench {argv[at + 1]}"
    return sub, cmd


def _unknown_flags_error(parser, args, extras: list) -> str:
    """One line for arguments the command does not take, with the closest flag of that command (``--rnak`` →
    ``--rank``; ``--sigma`` → ``--method-sigma``)."""
    import difflib

    sub = parser
    for dest in ("command", "bench_command"):
        name = getattr(args, dest, None)
        if name is None:
            break
        action = next((a for a in sub._actions if isinstance(a, argparse._SubParsersAction)), None)
        if action is None:
            break
        sub = action.choices[name]
    known = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    parts = []
    for tok in extras:
        flag = tok.split("=", 1)[0]
        if not flag.startswith("-"):
            parts.append(repr(tok))
            continue
        close = difflib.get_close_matches(flag, known, 1, 0.7) or \
            [k for k in known if k.endswith("-" + flag.lstrip("-"))][:1]
        parts.append(f"{flag} (did you mean {close[0]}?)" if close else flag)
    return "unrecognized argument(s): " + ", ".join(parts)


def _parse(argv: list):
    """The command line (and its ``--config`` file) parsed: ``(parser, args, deprecation lines)``.  Every
    refusal is a :class:`CLIError` (one line, exit 2): a bad ``--config`` file, a faulty plugin, a value argparse
    refuses, an unknown flag (with the closest one)."""
    from fedsciml.cli.config import take_config
    from fedsciml.cli.plugins import _pre_scan_plugins, load_plugins

    argv = _hoist_global_flags(argv)
    line = list(argv)  # what result.json records: the command line as given, --config FILE included
    argv, config = take_config(argv)  # read and parsed (bounded) before anything is imported
    load_plugins(_pre_scan_plugins(argv))  # the command line's --plugin only: a config file loads no code
    cmd, at = _command_of(argv)
    notes = []
    if cmd == "ridge":
        from fedsciml.cli.ridge import deprecated_spellings

        old = deprecated_spellings()
        notes = [f"ridge {flag} is deprecated: use {old[flag]} (as solve spells it)"
                 for flag in (tok.split("=", 1)[0] for tok in argv[at + 1:]) if flag in old]
    solve.set_help_focus(argv, cmd, at)
    try:  # the focus is this command line's (a later build_parser() builds the whole parser)
        parser = build_parser()
        if config is not None:
            from fedsciml.cli.config import apply_config

            if cmd is None:
                raise CLIError("--config goes with a subcommand: solve --config run.toml (or ridge --config "
                               "run.toml)")
            sub, name = _subparser(parser, argv, cmd, at)
            apply_config(config, parser, sub, name, argv)
        args, extras = parser.parse_known_args(argv)
    finally:
        solve.HELP_FOCUS.clear()
    if extras:
        raise CLIError(_unknown_flags_error(parser, args, extras))
    args._config = config
    args._argv = line
    args._parser = parser
    return parser, args, notes


def main(argv=None) -> int:
    _COMMAND_START[0] = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser, args, notes = _parse(argv)
    except CLIError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    for flag in ("json", "out", "checkpoint"):  # given but empty: refused, not taken as "not given"
        v = getattr(args, flag, None)
        if isinstance(v, str) and not v.strip():
            print(f"error: --{flag} must be a non-empty path, got {v!r}", file=sys.stderr)
            return EXIT_USAGE
    from fedsciml.options import OptionTypeError, cli_names
    from fedsciml.runtime.loop import RoundFailed
    from fedsciml.runtime.results import ResultsNotWritten

    configure_logging(args)
    for line in notes:
        logging.getLogger("fedsciml.cli").warning(f"[fedsciml] {line}")
    from fedsciml.runtime.files import protect_inputs
    from fedsciml.runtime.interrupt import Interrupted, exit_status, terminate_as_interrupt

    try:
        with cli_names(), protect_inputs(_command_inputs(args, args._argv, args._config)), \
                terminate_as_interrupt():
            return args._run(args)  # the subcommand's, set by its parser (set_defaults(_run=...))
    except (RunFailed, RoundFailed) as e:  # RoundFailed: a round of bench images that cannot go on
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except ResultsNotWritten as e:  # the run finished; its results are in e.saved, or printed here
        print(f"error: {e}", file=sys.stderr)
        if e.saved is None and e.text:
            print(e.text, end="" if e.text.endswith("\n") else "\n")
        return EXIT_FAILED
    except (CLIError, ValueError, OptionTypeError) as e:  # ProblemError, OptionError, MessageRejected: ValueErrors
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:  # Ctrl-C (130) or SIGTERM (143); a run's finished rounds are already written
        print("interrupted" if not isinstance(e, Interrupted) or not e.kept else f"interrupted: {e.kept}",
              file=sys.stderr)
        return exit_status(e)


def _command_inputs(args, argv: list, config=None) -> list:
    """The files the command reads, which none of its outputs may replace (:func:`fedsciml.runtime.files.
    protect_inputs`): every regular file named on the command line (``--points``, ``--tables a,b``, ``--plugin``;
    a comma list's items too) or in the ``--config`` file (its values but ``json`` and ``out``) other than the
    outputs' own values, the ``--config`` file, and the model and checkpoint files in a directory named there
    (``predict DIR``, ``--checkpoint DIR``)."""
    out_flags = ("--json", "--out")
    names, skip = [config.path if config is not None else None], False
    for key, value in (config.table.items() if config is not None else ()):
        if str(key).replace("-", "_") not in ("json", "out"):
            argv = argv + [str(v) for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)]
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok in out_flags:
            skip = True
            continue
        if tok.split("=", 1)[0] in out_flags:
            continue
        value = tok.split("=", 1)[1] if tok.startswith("-") and "=" in tok else tok
        for part in {value, *value.split(",")}:
            if part and os.path.isdir(part):
                names += [os.path.join(part, f) for f in ("model.json", "model.safetensors", "state.pt")]
            elif part:
                names.append(part)
    return [n for n in names if n is not None and os.path.isfile(n)]
