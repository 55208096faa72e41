"""The one option dialect: typed method configurations and problem options, one declaration per option.

Every option — of a solve method or of a problem — is declared once with
:func:`option` (its default, its help text, its type and allowed range, a
:class:`Spec`).  A method declares its options as the fields of a frozen
dataclass (one per method, in the method's own module); a problem declares them in its ``params``
dict (``params = {"k": option(0.1, "diffusivity", float, lo=0, lo_open=True)}``,
see :class:`fedsciml.problems.Problem`).  Both are validated by the same code
(:func:`check_value`, :func:`check_options`), so a bad value is the same one
line whoever declared it, and the command line's flags are generated from the
same declarations (:func:`fedsciml.cli.common.add_option_flags`), so a default
or a range exists in exactly one place.

List-valued options (:data:`FLOATS`, e.g. one-shot's ``cv_sigmas``) are
Python lists; the command line's text (``1e-3,0.1`` or ``1e-4:1e3:15``) is
parsed once, at the edge, by :func:`from_text` / :func:`parse_grid`.

The shared parts:

* :class:`MethodConfig` — validation on construction, unknown keys refused, options that have no effect with
  the other settings refused (:meth:`MethodConfig.inapplicable`);
* :class:`StopOptions` — ``budget``, ``clock``, ``tol``, and the collocation ``resample``/``grow`` options
  (every method);
* :class:`RoundOptions` — ``rounds``, ``participation``, ``dropout``,
  ``checkpoint``, ``resume``, ``transport`` (every federated method);
* :class:`LocalOptions` — ``local``, ``local_steps``, ``lr``,
  ``local_damping`` (methods whose clients train locally; their wire form is
  :class:`fedsciml.methods.local.LocalConfig`);
* :class:`RobustOptions` — ``robust``, ``trim``, ``clip_norm`` (methods that combine updates).

A method's configuration is a subclass, declared in the method's own file beside its strategy and client
half: :class:`~fedsciml.methods.centralized.CentralizedConfig`, :class:`~fedsciml.methods.gn.GNConfig`,
:class:`~fedsciml.methods.fipa.FIPAConfig`, :class:`~fedsciml.methods.averaging.FedAvgConfig`,
:class:`~fedsciml.methods.averaging.FedProxConfig`, :class:`~fedsciml.methods.oneshot.OneShotConfig`
(all importable from :mod:`fedsciml.methods` and ``fedsciml``).  This module holds only the machinery they
share; it imports no method.  A new method declares its own subclass (with ``method = "name"``) and registers
it with :func:`fedsciml.runtime.driver.register_method`.

Zero is a value: ``rank=0`` is full-rank FIPA, ``rounds=0`` evaluates θ₀ and
stops, ``mu=0`` is FedProx with μ = 0.  ``None`` is only a default where the
help says what it stands for (e.g. ``rounds=None``: the method's default
number of rounds, or until the ``budget`` is spent).

Errors: an unknown option raises :class:`OptionError` naming it and the
allowed options; a value out of range raises :class:`OptionError` naming the
value and the range; a value of the wrong type (``budget='5'``) raises
:class:`OptionTypeError`.  Both are one line.
"""
from __future__ import annotations

import contextlib
import difflib
import math
import numbers
import os
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar


class OptionError(ValueError):
    """An unknown option, or a value outside its allowed range (the message names both)."""


class OptionTypeError(TypeError):
    """An option value of the wrong type (the message names the option, the value and the type wanted)."""


PATH = "path"  # option type: a file-system path (str or os.PathLike)
FLOATS = "floats"  # option type: a list of numbers (each within the Spec's range); the CLI parses parse_grid's text
PATHS = "paths"  # option type: a list of paths; the CLI's text is comma-separated
INTS = "ints"  # option type: a list of integers (each within the Spec's range); the CLI's text is comma-separated

_STYLE: dict[str, Any] = {"cli": False, "flags": {}}


@contextlib.contextmanager
def cli_names(flags: dict[str, str] | None = None):
    """Within the block, name options in error messages as command-line flags (``--local-steps``);
    ``flags``: ``{option: flag}`` where a flag is spelled otherwise (``{"dp_delta": "--delta"}``)."""
    before = dict(_STYLE)
    _STYLE.update(cli=True, flags={**_STYLE["flags"], **(flags or {})})
    try:
        yield
    finally:
        _STYLE.clear()
        _STYLE.update(before)


def display(name: str) -> str:
    """How an option is named in messages: ``local_steps`` (Python) or ``--local-steps`` (CLI)."""
    if not _STYLE["cli"]:
        return name
    return _STYLE["flags"].get(name) or "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Spec:
    """What an option accepts: a type, a numeric range or a set of choices, and what ``None`` stands for."""

    help: str
    type: Any = float            # int | float | str | bool | PATH | PATHS | FLOATS | INTS
    lo: float | None = None      # lower bound (inclusive unless lo_open)
    hi: float | None = None      # upper bound (inclusive unless hi_open)
    lo_open: bool = False
    hi_open: bool = False
    finite: bool = True          # reject ±inf (NaN is always rejected)
    choices: tuple | None = None
    none: str | None = None      # None allowed; what it stands for
    cli: bool = True             # has a command-line flag
    metavar: str | None = None
    max_items: int | None = None  # FLOATS, INTS: at most this many values

    def __post_init__(self):
        if self.type not in (int, float, str, bool, PATH, PATHS, FLOATS, INTS):
            raise TypeError(f"option type must be int, float, str, bool, PATH, PATHS, FLOATS or INTS, got "
                            f"{self.type!r}")

    def allowed(self, with_none: bool = True) -> str:
        """The allowed values in words, e.g. ``an integer ≥ 0`` or ``a number in (0, 1]``; ``with_none``: add
        what leaving the option out (``None``) means."""
        if self.type is bool:
            s = "True or False"
        elif self.type in (FLOATS, INTS):
            one = float if self.type is FLOATS else int
            item = Spec(self.help, one, self.lo, self.hi, self.lo_open, self.hi_open, self.finite).allowed(False)
            what = "a list of numbers" if one is float else "a list of integers"
            s = f"{what}, each " + item.removeprefix("a finite number ").removeprefix("a number ") \
                .removeprefix("an integer ")
            s = s.rstrip() if s.strip() != f"{what}, each" else what
            if self.max_items is not None:
                s += f" (at most {self.max_items})"
        elif self.choices is not None:
            s = "one of " + ", ".join(map(str, self.choices))
        elif self.type is PATH:
            s = "a path"
        elif self.type is PATHS:
            s = "a list of paths"
        elif self.type is str:
            s = "a string"
        else:
            kind = "an integer" if self.type is int else "a number"
            lo, hi = _fmt(self.lo), _fmt(self.hi)
            if self.lo is not None and self.hi is not None:
                s = f"{kind} in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
            elif self.lo is not None:
                s = f"{kind} {'>' if self.lo_open else '≥'} {lo}"
            elif self.hi is not None:
                s = f"{kind} {'<' if self.hi_open else '≤'} {hi}"
            else:
                s = kind
            if self.type is float and self.finite:
                s = s.replace("a number", "a finite number", 1)
        if self.none is not None and with_none:
            s += f"; if not given: {self.none}" if _STYLE["cli"] else f", or None ({self.none})"
        return s


def _fmt(v):
    if v is None:
        return ""
    return str(int(v)) if float(v).is_integer() else repr(v)


def option(default, help: str, type=float, **spec) -> Any:
    """Declare one option: its default, its help text, its type (``int``, ``float``, ``str``, ``bool``,
    :data:`PATH`, :data:`PATHS`, :data:`FLOATS` or :data:`INTS`) and what it accepts (``lo``/``hi`` with ``lo_open``/``hi_open``,
    ``finite``, ``choices``, ``none``: what ``None`` stands for, ``cli``, ``metavar``, ``max_items``; see
    :class:`Spec`).  The same call declares a method option (a field of a :class:`MethodConfig` dataclass)
    and a problem option (a value of a problem's ``params`` dict)."""
    return field(default=default, metadata={"spec": Spec(help, type, **spec)})


def declared(params: dict) -> dict[str, tuple[Any, Spec]]:
    """``{option: (default, Spec)}`` of a ``params`` dict of :func:`option` declarations (a problem's)."""
    out = {}
    for name, f in params.items():
        spec = getattr(f, "metadata", {}).get("spec") if hasattr(f, "metadata") else None
        if spec is None:
            raise TypeError(f"option {name!r} must be declared with fedsciml.option(default, help, type, ...), "
                            f"got {f!r}")
        out[name] = (None if f.default is MISSING else f.default, spec)
    return out


def check_options(owner: str, specs: dict[str, tuple[Any, Spec]], given: dict, *,
                  errors: tuple[type[Exception] | None, type[Exception] | None] = (None, None)) -> dict:
    """Every declared option's value: the given one (unknown names refused, naming the allowed ones) or the
    default, each through :func:`check_value`.  ``None`` given means "not given" (the default).  ``owner``
    names who declared them in messages (``method 'fipa'``, ``problem 'bratu'``); ``errors``: the
    (value, type) exception classes to raise (default :class:`OptionError`, :class:`OptionTypeError`)."""
    refuse_unknown(owner, specs, given, errors[0] or OptionError)
    out = {}
    for name, (default, spec) in specs.items():
        v = given.get(name)
        v = default if v is None else v
        out[name] = None if v is None and spec.none is not None else \
            check_value(name, v, spec, owner, errors=errors)
    return out


def refuse_unknown(owner: str, specs, given, error: type[Exception] | None = None) -> None:
    """One line naming each unknown option of ``given`` (with a close match, if any) and the allowed ones."""
    allowed = list(specs)
    unknown = [k for k in given if k not in specs]
    if unknown:
        hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, allowed, 1)) else repr(k)
                 for k in unknown]
        raise (error or OptionError)(f"{owner} has no option {', '.join(hints)}; "
                                     f"allowed: {', '.join(display(a) for a in sorted(allowed)) or 'none'}")


def from_text(name: str, text, spec: Spec, owner: str = "", *,
              errors: tuple[type[Exception] | None, type[Exception] | None] = (None, None)):
    """The command line's ``text`` for an option converted to its type — a number, a bool, a :data:`FLOATS`
    list (:func:`parse_grid`) — the one place where CLI text becomes a value.  Only parsed, not checked: the
    owner (a :class:`MethodConfig`, a problem) checks the value, once.  Text that is not of the type: one line
    naming the value and what is allowed.  A value that is not text is returned as it is."""
    if not isinstance(text, str) or spec.type in (str, PATH):
        return text
    if spec.type is PATHS:
        return [p.strip() for p in text.split(",") if p.strip()]
    t, s = spec.type, text.strip()
    if t is INTS:  # comma-separated integers: 64,64,48,48
        try:
            return [int(v) for v in s.split(",")]
        except ValueError:
            where = f"{owner} option " if owner else "option "
            raise (errors[0] or OptionError)(f"{where}{display(name)} must be {spec.allowed(False)} "
                                             f"(comma-separated), got {text!r}") from None
    error = errors[0] or OptionError
    try:
        if t is int:
            return int(s)
        if t is float:
            return float(s)
        if t is bool:
            low = s.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return low in ("true", "1", "yes")
        return parse_grid(text, display(name), max_items=spec.max_items)  # FLOATS
    except ValueError as e:
        where = f"{owner} option " if owner else "option "
        raise error(str(e) if t is FLOATS else
                    f"{where}{display(name)} must be {spec.allowed(False)}, got {text!r}") from None


def check_value(name: str, value, spec: Spec, owner: str = "", *,
                errors: tuple[type[Exception] | None, type[Exception] | None] = (None, None)):
    """``value`` converted to the option's type, or :class:`OptionError` / :class:`OptionTypeError`
    (``errors``: other classes to raise instead, subclasses of these, e.g. a problem's)."""
    OptionError_ = errors[0] or OptionError
    OptionTypeError_ = errors[1] or OptionTypeError
    try:
        return _check_value(name, value, spec, owner)
    except OptionTypeError as e:
        if OptionTypeError_ is OptionTypeError:
            raise
        raise OptionTypeError_(str(e)) from None
    except OptionError as e:
        if OptionError_ is OptionError:
            raise
        raise OptionError_(str(e)) from None


def _check_value(name: str, value, spec: Spec, owner: str = ""):
    where = f"{owner} option " if owner else "option "
    name = display(name)
    if value is None:
        if spec.none is None:
            raise OptionTypeError(f"{where}{name} must be {spec.allowed()}, got None")
        return None
    t = spec.type
    if t is PATHS:
        if isinstance(value, (str, bytes, os.PathLike)) or not hasattr(value, "__iter__"):
            raise OptionTypeError(f"{where}{name} must be a list of paths, got {value!r} ({type(value).__name__}; on "
                                  f"the command line: comma-separated)")
        paths = list(value)
        for i, v in enumerate(paths):
            if not isinstance(v, (str, os.PathLike)) or not os.fspath(v):
                raise OptionTypeError(f"{where}{name} must be a list of non-empty paths, got {v!r} at position {i}")
            paths[i] = os.fspath(v)
        return paths
    if t in (FLOATS, INTS):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            cli = "a,b,c or lo:hi:count" if t is FLOATS else "a,b,c"
            raise OptionTypeError(f"{where}{name} must be {spec.allowed(False)}, got {value!r} "
                                  f"({type(value).__name__}; on the command line: {cli})")
        values = list(value)
        item = Spec(spec.help, float if t is FLOATS else int, spec.lo, spec.hi, spec.lo_open, spec.hi_open,
                    spec.finite)
        for i, v in enumerate(values):
            try:
                values[i] = _check_value(name, v, item, owner)
            except (OptionError, OptionTypeError):
                raise OptionError(f"{where}{name} must be {spec.allowed(False)}, got {v!r} at position {i}") \
                    from None
        if not values:
            raise OptionError(f"{where}{name} must be {spec.allowed(False)}, got an empty list")
        if spec.max_items is not None and len(values) > spec.max_items:
            raise OptionError(f"{where}{name} holds {len(values)} values; at most {spec.max_items}")
        return values
    if t is bool:
        if not isinstance(value, bool):
            raise OptionTypeError(f"{where}{name} must be True or False, got {value!r} ({type(value).__name__})")
        return value
    if t is PATH:
        if not isinstance(value, (str, os.PathLike)):
            raise OptionTypeError(f"{where}{name} must be a path (str), got {value!r} ({type(value).__name__})")
        value = os.fspath(value)
        if not value:
            raise OptionError(f"{where}{name} must be a non-empty path")
        return value
    if t is str:
        if not isinstance(value, str):
            raise OptionTypeError(f"{where}{name} must be {spec.allowed(False)}, got {value!r} ({type(value).__name__})")
    elif t is int:
        ok = isinstance(value, numbers.Integral) or (isinstance(value, numbers.Real) and float(value).is_integer())
        if isinstance(value, bool) or not ok:
            raise OptionTypeError(f"{where}{name} must be {spec.allowed(False)}, got {value!r} ({type(value).__name__})")
        value = int(value)
    elif t is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise OptionTypeError(f"{where}{name} must be {spec.allowed(False)}, got {value!r} ({type(value).__name__})")
        value = float(value)
        if math.isnan(value) or (spec.finite and math.isinf(value)):
            raise OptionError(f"{where}{name} must be {spec.allowed(False)}, got {value}")
    if spec.choices is not None and value not in spec.choices:
        raise OptionError(f"{where}{name} must be {spec.allowed(False)}, got {value!r}")
    if t in (int, float):
        bad = (spec.lo is not None and (value <= spec.lo if spec.lo_open else value < spec.lo)) or \
              (spec.hi is not None and (value >= spec.hi if spec.hi_open else value > spec.hi))
        if bad:
            raise OptionError(f"{where}{name} must be {spec.allowed(False)}, got {value}")
    return value


@dataclass(frozen=True)
class MethodConfig:
    """Base of every method configuration: validation on construction, unknown keys rejected."""

    method: ClassVar[str] = ""
    #: the heading under which the command line's help lists the options this class declares (a shared part's;
    #: a method's own options are listed under "METHOD options")
    help_group: ClassVar[str] = ""

    def __post_init__(self):
        for f in fields(self):
            object.__setattr__(self, f.name, check_value(f.name, getattr(self, f.name), f.metadata["spec"],
                                                         self.method))
        self._resolve()

    def _resolve(self):
        """Fill in the values that depend on other options (each subclass documents its own)."""

    def _set(self, name, value):
        object.__setattr__(self, name, value)

    @classmethod
    def specs(cls) -> dict[str, tuple[Any, Spec]]:
        """``{option: (default, Spec)}`` in declaration order."""
        return {f.name: (None if f.default is MISSING else f.default, f.metadata["spec"]) for f in fields(cls)}

    def inapplicable(self) -> dict[str, str]:
        """``{option: why it has no effect with these settings}`` (e.g. ``trim`` unless
        ``robust='trimmed'``); each configuration class adds its own.  An option listed here that was
        *given* with a value other than its default is refused by :meth:`from_options`: an option
        accepted and ignored would report a run that did not happen."""
        return {}

    @classmethod
    def from_options(cls, options: dict | None = None, **more) -> MethodConfig:
        """Build from keyword options; an unknown key raises :class:`OptionError` listing the allowed ones,
        a given option that has no effect with the other settings one naming it and why."""
        opts = {**(options or {}), **more}
        return cls._build(opts, given=opts)

    @classmethod
    def _build(cls, opts: dict, given) -> MethodConfig:
        refuse_unknown(f"method {cls.method!r}", cls.specs(), opts)
        cfg = cls(**opts)
        idle, specs = cfg.inapplicable(), cls.specs()
        for name in given:  # a default value passed along (a wrapper forwarding all its options) changes nothing
            if name in idle and given[name] != specs[name][0]:
                raise OptionError(f"{cls.method} option {display(name)} has no effect here: {idle[name]}")
        return cfg

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def forms_jacobians(self) -> bool:
        """Whether the method holds every client's residual Jacobian at once (for the memory estimate)."""
        return True

    def memory_form(self, rows: int, p: int, clients: int, device=None) -> str:
        """What the method holds per residual row, for the memory estimate (``rows`` per client, ``p``
        parameters, on ``device``): ``jacobian`` (J's p columns), ``chunked`` (``JᵀJ`` and one block of J rows),
        ``graph`` (a matrix-free residual graph, no J) or ``data`` (the points only)."""
        return "jacobian" if self.forms_jacobians() else "data"

    def memory_terms(self, rows: int, p: int, clients: int, form: str) -> list[tuple[float, str]]:
        """What the method holds beyond its rows, for the memory estimate: ``[(floats, how)]`` counted once each
        (``rows`` per client, ``p`` parameters, ``form`` of :meth:`memory_form`).  The default: four parameter
        vectors on the server and on each client (θ, a gradient or step, a first-order method's two moments) —
        at ``p = 10⁸`` (``hidden=(10**4, 10**4)``) that is 3.2 GB a holder, which the rows alone never showed.
        A method that builds a p×p or n×n matrix adds it (:class:`fedsciml.methods.gn.GNConfig`,
        :class:`fedsciml.methods.centralized.CentralizedConfig`, :class:`fedsciml.methods.fipa.FIPAConfig`)."""
        return [(4.0 * p * (int(clients) + 1), f"4 parameter vectors of {p:,} on the server and each client")]


# --- shared parts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class StopOptions(MethodConfig):
    help_group: ClassVar[str] = "when to stop, and the collocation points"

    budget: float | None = option(None, "time budget in seconds (solver time; evaluation excluded)", float,
                                  lo=0, lo_open=True, finite=False, none="no time limit", metavar="SECONDS")
    clock: str = option("wall", "what the budget and the history's time_s count: wall (elapsed seconds) or cpu "
                                "(this process's CPU seconds, time.process_time: with --threads 1, timings that a "
                                "shared, loaded machine does not distort)", str, choices=("wall", "cpu"))
    tol: float = option(0.0, "stop when the mean loss ½‖r‖²/N falls to this value", float, lo=0)
    resample: int | None = option(None, "draw fresh collocation points every K steps (centralized) or rounds "
                                        "(federated), seeded from the run seed (PINN problems; "
                                        "fedsciml.runtime.resample)", int, lo=1, none="fixed points", metavar="K")
    grow: float | None = option(None, "growing batches: the collocation points (totals) grow by this factor every "
                                      "grow_every steps or rounds (at the resamples; up to grow_cap)", float, lo=1,
                                lo_open=True, none="a fixed number of points", metavar="FACTOR")
    grow_every: int = option(50, "steps or rounds between two growths of the collocation points", int, lo=1)
    grow_cap: int | None = option(None, "largest number of interior points (in total) the growth reaches", int,
                                  lo=1, none="no cap")
    validation: bool | None = option(None, "track a held-out validation residual: the mean loss at a fixed set of "
                                           "fresh collocation points, as many as trained on, drawn once from its own "
                                           "seed and never trained on (history val_loss; a warning when the training "
                                           "loss falls 100× below it; fedsciml.runtime.validation)", bool,
                                     none="on for PINN problems run in process")
    keep_best: str | None = option(None, "what θ the run returns: validation (the θ of the history row with the "
                                         "lowest held-out validation residual val_loss; the result says its step) "
                                         "or none (the last iterate; fedsciml.runtime.validation)", str,
                                   choices=("validation", "none"),
                                   none="validation where the problem's readings carry noise (inverse problems), "
                                        "else none")

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.resample is None:
            why = f"the points grow when they are drawn afresh: give {display('resample')}"
            out.update({"grow": why, "grow_every": why, "grow_cap": why})
        elif self.grow is None:
            why = f"it shapes the growth of the points, which is off (give {display('grow')})"
            out.update({"grow_every": why, "grow_cap": why})
        return out


@dataclass(frozen=True)
class RoundOptions(StopOptions):
    """Options of the federated round loop.  ``rounds=None``: :attr:`default_rounds`, or with a ``budget``
    as many rounds as fit in it."""
    help_group: ClassVar[str] = "the rounds and the clients"

    default_rounds: ClassVar[int | None] = 30  # None: the strategy decides when it is done

    rounds: int | None = option(None, "communication rounds (0: evaluate θ₀ and stop)", int, lo=0,
                                none="the method's default (one-shot: 1); with a budget, until it is spent")
    participation: float = option(1.0, "fraction of the clients sampled per round", float, lo=0, lo_open=True, hi=1)
    dropout: float = option(0.0, "probability that a sampled client fails to answer", float, lo=0, hi=1, hi_open=True)
    checkpoint: str | None = option(None, "directory for per-round checkpoints", PATH, none="no checkpoints",
                                    metavar="DIR")
    resume: bool = option(False, "resume from the checkpoint in --checkpoint", bool)
    transport: str = option("local", "how requests reach the clients: local (in-process, clients evaluated together) "
                                     "or bytes (the same, every request and reply round-tripped through bytes)",
                            str, choices=("local", "bytes"))

    def _resolve(self):
        super()._resolve()
        if self.rounds is None and self.budget is None:
            self._set("rounds", self.default_rounds)
        if self.resume and not self.checkpoint:
            raise OptionError(f"{display('resume')} needs {display('checkpoint')} DIR (the directory the "
                              "interrupted run wrote)")


@dataclass(frozen=True)
class LocalOptions(MethodConfig):
    """Local training on the clients (see :class:`fedsciml.methods.local.LocalConfig`)."""
    help_group: ClassVar[str] = "local training on the clients"

    local: str = option("adam", "local solver: adam (τ Adam steps) or gn (one exact damped Gauss–Newton step)",
                        str, choices=("adam", "gn"))
    local_steps: int = option(100, "local Adam steps τ per round", int, lo=1)
    lr: float = option(1e-3, "local Adam learning rate", float, lo=0, lo_open=True)
    local_damping: float = option(0.0, "local GN damping relative to λ_max(H_m) (0: minimum-norm step −H_m^† g_m)",
                                  float, lo=0)

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.local == "gn":
            why = f"{display('local')} gn takes one exact Gauss–Newton step; this option sets the local Adam steps"
            out.update({"local_steps": why, "lr": why, "local_loss": why})
        else:
            out["local_damping"] = f"it damps the {display('local')} gn step; local is {self.local}"
        return out


@dataclass(frozen=True)
class RobustOptions(MethodConfig):
    """How the server combines the clients' updates (see :mod:`fedsciml.runtime.robust`)."""
    help_group: ClassVar[str] = "how the server combines the clients' updates"

    robust: str = option("mean", "combination of the clients' updates: mean (the plain method), median "
                                 "(coordinate-wise) or trimmed (coordinate-wise trimmed mean)", str,
                         choices=("mean", "median", "trimmed"))
    trim: float = option(0.2, "fraction trimmed per side by robust=trimmed", float, lo=0, hi=0.5, hi_open=True)
    clip_norm: float | None = option(None, "bound C on the norm of each client's update", float, lo=0, lo_open=True,
                                     none="no bound")

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.robust != "trimmed":
            out["trim"] = f"it is the fraction trimmed by {display('robust')} trimmed (robust is {self.robust})"
        return out


def defaults_of(cls) -> dict:
    """``{option: default}`` of a typed configuration class — how the runtime's low-level structs
    (:class:`~fedsciml.methods.local.LocalConfig`, :class:`~fedsciml.runtime.loop.RoundConfig`)
    take their defaults from here, so that every option has one default."""
    return {f.name: f.default for f in fields(cls) if f.default is not MISSING}


def parse_grid(text: str, flag: str = "--cv", max_items: int | None = None) -> list[float]:
    """The command line's list of σ values: ``"1e-3,0.01,0.1"`` or a log grid ``"1e-4:1e3:15"`` (lo:hi:count);
    ``flag`` names the option in messages; at most ``max_items`` (default :data:`MAX_GRID`) values."""
    most = MAX_GRID if max_items is None else max_items
    try:
        if ":" in text:
            a, b, c = text.split(":")
            lo, hi, n = float(a), float(b), int(c)
            if not (lo > 0 and hi > lo and 2 <= n <= most):
                raise ValueError
            import torch  # the grid the ridge experiments were run with, to the bit

            return torch.logspace(math.log10(lo), math.log10(hi), n, dtype=torch.float64).tolist()
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} grid {text!r} must be comma-separated σ values or lo:hi:count with 0 < lo < hi, "
                         f"2 ≤ count ≤ {most}")
    if not vals or any(not (v > 0) for v in vals):
        raise ValueError(f"{flag} grid {text!r} must hold σ values > 0")
    if len(vals) > most:
        raise ValueError(f"{flag} grid {text[:40]!r}… holds {len(vals)} σ values; at most {most}")
    return vals


MAX_GRID = 10_000  # σ values in a CV grid: each costs a d×d factorization at the server


#: names this module held until the method configurations moved into their method modules: where
#: each is now (each is also ``fedsciml.methods.NAME``, and each configuration ``fedsciml.NAME``)
MOVED = {"CentralizedConfig": "fedsciml.methods.centralized", "GNConfig": "fedsciml.methods.gn",
         "FIPAConfig": "fedsciml.methods.fipa", "PAPER_PRESET": "fedsciml.methods.fipa",
         "FedAvgConfig": "fedsciml.methods.averaging", "FedProxConfig": "fedsciml.methods.averaging",
         "OneShotConfig": "fedsciml.methods.oneshot"}


class MovedName(ImportError):
    """A name that moved to another module: the one line names its new home.  An :class:`ImportError` (not an
    ``AttributeError``, which ``from … import`` would replace by its own line without the new home)."""


def moved(module: str, name: str, home: str, why: str) -> MovedName:
    """The error for ``module.name``, which is now ``home.name`` (``why``: the change that moved it)."""
    return MovedName(f"{module}.{name} moved to {home}.{name} ({why}): import it from there")


if not TYPE_CHECKING:  # invisible to mypy, so that a misspelt import from this module stays a type error
    def __getattr__(name: str):
        if name in MOVED:
            raise moved(__name__, name, MOVED[name], "each method's configuration is declared in its method's module")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
