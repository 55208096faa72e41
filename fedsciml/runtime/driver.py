"""Run a method on a problem: the one entry point the CLI and the Python API share.

:data:`METHODS` (:mod:`fedsciml.runtime.registry`) is the one registry of solve methods: name → :class:`Method` (its typed configuration class,
its strategy factory — or, for ``centralized``, which pools the clients' data and is labelled as the reference it
is, its own ``run`` — its settings text and a one-line description).  The runtime knows no method by itself:
:mod:`fedsciml.methods` registers the built-in ones when it is imported (as :mod:`fedsciml.api`, the CLI and the
engines do); a federated method is its strategy factory, run by the one round loop
(:func:`fedsciml.runtime.simulate.run_strategy`: the typed configuration, the round settings, the transport,
resampling, the loop and the record), and a new method is one call,

    register_method(Method("my-method", MyConfig, strategy=build, description="what it does"))

Every entry says which kinds of task it applies to (:attr:`Method.kinds`): the problem kinds
:data:`PROBLEM_KINDS` (``pinn``, ``fit``, ``ridge``: what ``solve`` runs) and whatever a package adds with
:func:`add_kind` — :mod:`fedsciml.images` adds ``images`` (``bench images``) to ``fedavg``, ``fedprox`` and
``fipa`` and registers its own methods (``regmean``, ``fedbens``, …) for that kind alone.  A kind other than the
problem kinds brings its own runner and typed configuration (:class:`KindUse`); :func:`plan` refuses a method
on a task of a kind it does not apply to, in one line.

A runner (a method's ``run``, a :class:`KindUse`'s) has the signature
``fn(problem, objectives, theta0, evaluate, config, *, seed, progress, every, message_hook)
-> (θ, history rows, info)``.
"""
from __future__ import annotations

import logging
import math
import numbers
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch

from fedsciml.options import MethodConfig
from fedsciml.runtime.registry import (METHODS, PROBLEM_KINDS, KindUse, Method, add_kind, available_methods,  # noqa: F401
                                       default_method, get_method, kind_error, register_method, SOLO_METHOD,
                                       FEDERATED_METHOD)
from fedsciml.runtime.memory import available_memory, gradient_graph, grown, residual_graph, value_graph
from fedsciml.core.forms import MATFREE_GRAPH_BYTES, device_budget
from fedsciml.runtime.results import Result, jsonable, stop_reason_of
from fedsciml.runtime.validation import held_out, report, with_validation
from fedsciml.runtime.transport import Transport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Connect:
    """An engine that only carries messages: ``connect(job, clients) -> Transport`` reaches ``clients`` clients
    that build their own data from ``job`` (``{"problem", "options", "clients", "seed", "device", "threads"}``)
    and said what the server may know of it (``transport.described``: ``{cid: {"n", "p", "linear"}}``,
    :mod:`fedsciml.runtime.remote`); :func:`run` runs the method with that transport — the run is the driver's.
    The transport's ``close()``, where it has one, is called when the run ends.  ``check``: the engine's own
    check of a planned run, ``check(estimate, clients, device)`` with the run's memory estimate ``(bytes, how)``
    (or ``None``), called by :func:`plan` before anything starts (``processes``: every client on this machine,
    one process each — refused past its memory and its cap on processes)."""

    connect: Callable
    check: Callable | None = None


# Who carries the clients' messages: ``local`` (this process, the runtime's own transports) and whatever
# :mod:`fedsciml.engines` registers: a :class:`Connect` (``processes``: a process per client), or a whole run
# ``fn(problem, method, *, clients, seed, device, progress, **options) -> Result`` (``flower``: Flower's
# simulation engine runs the App, whose ServerApp runs the method with a Flower transport, :func:`run_connected`).
ENGINES: dict[str, Callable | Connect | None] = {"local": None}

#: what an engine runs of a kind beyond the problem kinds (those :func:`add_kind` adds, e.g. ``images``):
#: ``{engine: {kind: run function}}`` (``flower``: ``bench images`` settings); ``local`` runs every kind
ENGINE_KINDS: dict[str, dict[str, Callable]] = {}


def register_engine(name: str, solve_fn: Callable | None = None, *, connect: Callable | None = None,
                    replace: bool = False, kinds: Mapping[str, Callable] | None = None,
                    check: Callable | None = None) -> None:
    """Add an engine (see :data:`ENGINES`): ``connect(job, clients) -> Transport`` (:class:`Connect`; a new
    engine is one file with this function), or a whole run ``solve_fn``.  ``kinds``: what it runs of kinds
    beyond the problem kinds, ``{kind: fn}`` (:data:`ENGINE_KINDS`; the kind's own signature); ``check``: a
    ``connect`` engine's check of a planned run (:class:`Connect`)."""
    if (solve_fn is None) == (connect is None):
        raise TypeError(f"engine {name!r}: give its connect(job, clients) or its solve function, one of them")
    if name in ENGINES and not replace:
        raise ValueError(f"an engine named {name!r} is already registered; pass replace=True")
    bad = [k for k in (kinds or {}) if k in PROBLEM_KINDS]
    if bad:
        raise ValueError(f"engine {name!r}: kinds are kinds beyond the problem kinds ({', '.join(PROBLEM_KINDS)}), "
                         f"got {', '.join(bad)}")
    if check is not None and connect is None:
        raise TypeError(f"engine {name!r}: check applies to an engine given by its connect function")
    ENGINES[name] = Connect(connect, check) if connect is not None else solve_fn
    ENGINE_KINDS[name] = dict(kinds or {})


def engines_for(kind: str | None = None) -> list[str]:
    """The engines that run tasks of ``kind``, in registration order: every engine for the problem kinds (or
    ``None``); ``local`` and those registered with a run of ``kind`` otherwise (what the parsers offer)."""
    if kind is None or kind in PROBLEM_KINDS:
        return list(ENGINES)
    return [e for e in ENGINES if e == "local" or kind in ENGINE_KINDS.get(e, {})]


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``auto`` (CUDA when available), ``cpu``, ``cuda`` or ``cuda:N``; anything else is a ValueError."""
    if isinstance(device, torch.device):
        device = str(device)
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(device, str):
        raise TypeError(f"device must be auto, cpu or cuda, got {device!r} ({type(device).__name__})")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda (or cuda:N), got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} was requested but no CUDA device is available; use cpu or auto")
    return dev


def check_seed(seed) -> int:
    """The seed as an int in [0, 2⁶³), else TypeError / ValueError naming it."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an integer ≥ 0, got {seed!r} ({type(seed).__name__})")
    if not 0 <= int(seed) < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2**63), got {seed}")
    return int(seed)


def check_clients(clients) -> int | None:
    if clients is None:
        return None
    if isinstance(clients, bool) or not isinstance(clients, numbers.Integral):
        raise TypeError(f"clients must be an integer ≥ 1, got {clients!r} ({type(clients).__name__})")
    if clients < 1:
        raise ValueError(f"clients must be an integer ≥ 1, got {clients}")
    return int(clients)


#: clients one process holds at most (engine ``local``): each is Python objects of its own — ``ridge --dim 5
#: --n-samples 20`` (one round) took about 6 ms and 7 KB a client (100 → 3,000 clients: 17 s and 20 MB more, one
#: thread), so 10⁶ clients were a run of hours that looked hung
MAX_LOCAL_CLIENTS = 100_000


class OutOfMemory(ValueError):
    """A run that cannot fit in the memory available (refused before anything is allocated)."""


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def check_memory(n_bytes: float, what: str, device=None, hint: str = "") -> None:
    """Refuse (:class:`OutOfMemory`, one line with both figures) a run whose estimated memory
    ``n_bytes`` exceeds what the machine has available.  Where the available memory cannot be read (no
    ``/proc/meminfo`` and no ``sysconf`` figure), the run is not checked, and a warning says so with the estimate."""
    avail = available_memory(device)
    if avail is None:
        logging.getLogger("fedsciml").warning("the available memory cannot be read on this machine: %s (about %s) "
                                              "is not checked against it", what, _gb(n_bytes))
        return
    if n_bytes > avail:
        raise OutOfMemory(f"{what} needs about {_gb(n_bytes)} of memory, but this machine has {_gb(avail)} "
                          f"available{'; ' + hint if hint else ''}")


def own_kind(problem) -> bool:
    """Whether ``problem`` is a task of a kind added with :func:`add_kind` (e.g. ``images``), which brings its own
    ``check_objectives(objectives, θ₀)`` and ``estimate_memory(clients, config, method)``.  A problem — of a
    problem kind or of none, a user's own :class:`~fedsciml.problems.Problem` subclass — gets the driver's
    check and estimate even where it has methods of those names (its own helpers, of another meaning)."""
    kind = getattr(problem, "kind", None)
    return (isinstance(kind, str) and kind not in PROBLEM_KINDS
            and any(kind in m.uses for m in METHODS.values()))


def estimate_memory(problem, clients: int, config: MethodConfig, method: str = "",
                    device=None) -> tuple[float, str] | None:
    """``(bytes, how)``: the data of every client, and per row what the method's chosen form holds at once
    (:meth:`MethodConfig.memory_form` on ``device``, 8-byte floats): the residual Jacobian's p columns for the
    dense forms, ``JᵀJ`` and its factor (2p² floats, once) for the chunked form, the matrix-free operator's
    residual graph
    (:func:`fedsciml.core.matfree.graph_floats_per_row`) when the automatic or named form is matrix-free,
    nothing more for first-order methods; ``None`` when the problem cannot say how many rows a client holds.
    A task with its own ``estimate_memory(clients, config, method)`` (the image tasks) gives its own estimate."""
    if own_kind(problem):
        return problem.estimate_memory(clients, config, method)
    problem, grew = _grown_for_estimate(problem, config)
    rows = problem.rows_per_client(clients)
    if rows is None:
        return None
    net = problem.network()
    p = int(net.n_params)
    sizes = list(getattr(net, "sizes", []))
    d_in = int(sizes[0]) if sizes else 1
    # a linear residual's Jacobian is its data
    form = "data" if problem.kind == "ridge" else config.memory_form(int(rows), p, int(clients), device)
    extra, what, once, what_once = 0.0, "", 0.0, ""
    if form == "chunked":
        once = 16.0 * p * p
        what_once = f" + JᵀJ and its factor ({2 * p * p:,} floats; J streamed in row blocks)"
    if form in ("jacobian", "kernel"):
        extra, what = float(p), f" + {p:,} Jacobian columns"
    elif form == "graph":
        extra, what = residual_graph(d_in, sizes, p)
        nested = getattr(problem, "nested_graph_floats", None)  # a DomainPDE's nested-autodiff residual keeps more
        if callable(nested) and nested(getattr(config, "precond", "auto")) is not None:
            extra = float(nested(getattr(config, "precond", "auto")))
            what = f" + {extra:,.0f} floats of matrix-free residual graph (nested autodiff{', K-FAC' if getattr(config, 'precond', 'auto') in ('auto', 'kfac') else ''}; hidden layers {tuple(sizes[1:-1])})"
    elif form == "data" and problem.kind != "ridge":  # a first-order step's gradient holds the residual's graph
        extra, what = gradient_graph(d_in, sizes)
    pde = _pde_rows(problem, clients, rows) if extra and form in ("graph", "data") else rows
    if pde < rows:  # rows whose residual reads the value only keep one channel of the graph, not d_in + 2
        other = value_graph(sizes, p)
        graph = pde * extra + (rows - pde) * other
        how = (f"{clients:,} client(s) × ({rows:,} rows × {d_in + 1:,} + {pde:,} PDE rows × ({what.lstrip(' +')}) + "
               f"{rows - pde:,} other rows × {other:,.0f} floats of the value's graph) × 8 bytes")
    else:
        graph = rows * extra
        how = f"{clients:,} client(s) × {rows:,} rows × ({d_in + 1:,}{what}) × 8 bytes"
    per_client = rows * (d_in + 1) + graph
    if form == "graph" and getattr(config, "blocks_graph", False):  # LM's operator holds at most a block's graph
        limit = min(MATFREE_GRAPH_BYTES, device_budget(device).bytes or MATFREE_GRAPH_BYTES)
        if 8.0 * clients * graph > limit:
            per_client = rows * (d_in + 1) + limit / (8.0 * clients)
            how = (f"{clients:,} client(s) × {rows:,} rows × {d_in + 1:,} × 8 bytes + the matrix-free operator's "
                   f"residual graph held in row blocks of at most {_gb(limit)} (whole: {_gb(8.0 * clients * graph)}: "
                   f"{what.lstrip(' +')})")
    if once:
        how += what_once
    kfac = kfac_factor_floats(problem, config, form, net)
    if kfac >= 1e6:
        once += 8.0 * kfac
        how += f" + the K-FAC preconditioner's factors and their inverses: {_gb(8.0 * kfac)}"
    for floats, label in config.memory_terms(int(rows), p, int(clients), form):
        if floats >= 1e6:  # a term worth naming (the parameter vectors of a small network are not)
            once += 8.0 * floats
            how += f" + {label}: {_gb(8.0 * floats)}"
    total = 8.0 * clients * per_client + once
    sampler = sampler_floats(getattr(problem, "sampling", None), int(rows) * int(clients), d_in)
    if 8.0 * sampler > total:  # the whole-domain draw of every point at once, before the run's own arrays exist
        return 8.0 * sampler, grew + f"the {problem.sampling} draw of {int(rows) * int(clients):,} points in " \
                                     f"{d_in} dimension(s): {_gb(8.0 * sampler)} at its peak (the run: {how})"
    return total, grew + how


def kfac_factor_floats(problem, config: MethodConfig, form: str, net) -> float:
    """Floats of the K-FAC preconditioner a matrix-free LM or gn solve may build for a PINN (``precond`` kfac, or
    auto, which takes it in its K-FAC regime): per Taylor term and layer the Kronecker factors A ((w_in+1)²) and
    B (w_out²), each with its damped inverse — 0 where no K-FAC can be built.  Decision: ``auto`` is charged as if
    it took K-FAC (the choice reads the clients' residuals, which the estimate has not built): the factors are
    O(Σ width²), far below the rest for any network a K-FAC run can afford, and for a million-wide layer they
    are terabytes, which the check must see (without them a [1, 10⁶, 1] network passed and asked for 8 TB)."""
    if form != "graph" or problem.kind != "pinn" or getattr(config, "precond", None) not in ("auto", "kfac"):
        return 0.0
    layout = getattr(net, "_layout", None)
    if not layout:
        return 0.0
    per_term = sum(float(fi + (b is not None)) ** 2 + float(fo) ** 2 for (_w, b, fi, fo) in layout)
    return 2.0 * 2.0 * per_term  # two Taylor terms (value, jet), each factor and its inverse


def sampler_floats(sampling, n: int, d: int) -> float:
    """Floats a draw of ``n`` points in ``d`` dimensions holds at its peak (:func:`fedsciml.problems.base.sample_box`):
    i.i.d. uniform (3·d + 1)·n (the draw, its scaled copy and the tensor: 3.02·n·d measured at d = 2); pyDOE's
    Latin hypercube (d + 8)·n — its per-column temporaries, measured with tracemalloc at n = 2·10⁵ and 2·10⁶:
    6.0–8.3·n at d = 1, 10.0·n at d = 3 (``tests/test_issue38_limits.py``).  0 for another sampler (nothing known)."""
    if sampling == "lhs":
        return float(d + 8) * n
    if sampling == "uniform":
        return float(3 * d + 1) * n
    return 0.0


def _grown_for_estimate(problem, config: MethodConfig):
    """``(problem, how)``: with growing batches (``grow``, :class:`~fedsciml.runtime.resample.Growth`), the
    problem at the largest number of interior points the run draws — at its last resample before its last round or
    iteration (``rounds``, ``max_iters``), at most ``grow_cap`` — so that the memory check sees the schedule, not
    its first step (``--grow 1000`` without a cap reached 10⁹ points a client in three resamples and hung).  A
    growth without a cap and without a limit on rounds or iterations (a budget only) is refused: it has no last
    size to check."""
    factor, every = getattr(config, "grow", None), getattr(config, "resample", None)
    if factor is None or every is None or "n_interior" not in getattr(problem, "options", {}):
        return problem, ""
    from fedsciml.options import display

    cap, grow_every = getattr(config, "grow_cap", None), int(getattr(config, "grow_every", 1))
    federated = hasattr(config, "rounds")
    steps = getattr(config, "rounds" if federated else "max_iters", None)
    unit = "round" if federated else "iteration"
    n0 = int(problem.options["n_interior"])
    given = f"{display('grow')} {factor:g} every {grow_every} {unit}(s), {display('resample')} {every}"
    if steps is None:
        if cap is None:
            raise OutOfMemory(f"{given} and no {display('grow_cap')}: with a time budget only, the points grow "
                              f"without bound; give {display('grow_cap')} N (interior points in total) or a "
                              f"number of {unit}s")
        n = max(n0, int(cap))
        at = "at the cap"
    else:
        last = max(0, (int(steps) - 1) // int(every)) * int(every)  # the last draw is after step `last`
        k = last // grow_every
        log_n = math.log(max(n0, 1)) + k * math.log(float(factor))
        n = n0 if k == 0 else (int(cap) if cap is not None and log_n >= math.log(cap) else
                               (2**62 if log_n > math.log(2**62) else round(math.exp(log_n))))
        if cap is not None:
            n = min(n, max(n0, int(cap)))
        at = f"after {unit} {last:,}"
    if n <= n0:
        return problem, ""
    if n >= 2**62:
        raise OutOfMemory(f"{given}: the points grow past 2**62 interior points {at}; give "
                          f"{display('grow_cap')} N")
    return grown(problem, n), f"{given}: {n:,} interior points in total {at}; "


def _pde_rows(problem, clients: int, rows: int) -> int:
    """The rows of a client whose residual carries the PDE's derivative channels (``problem.pde_rows_per_client``;
    every row where the problem does not say), at most ``rows``."""
    fn = getattr(problem, "pde_rows_per_client", None)
    n = fn(clients) if callable(fn) else None
    return rows if n is None else max(0, min(int(n), int(rows)))


def _options(problem, config: MethodConfig) -> dict:
    """The problem's options and the method's; a method option named like a problem option (one-shot's
    ``sigma`` beside ridge's) is recorded as ``method_NAME``, as its CLI flag ``--method-NAME``."""
    out = dict(problem.options)
    for k, v in jsonable(config.to_dict()).items():
        out["method_" + k if k in problem.options else k] = v
    return out


#: a caller's memory terms around a run: ``fn(problem, clients, config) -> (bytes, how)``, called by :func:`plan`
#: with the validated configuration (the ``ridge`` preset's pooled oracle, CV candidates and baselines)
MemoryTerms = Callable[[Any, int, MethodConfig], "tuple[float, str]"]


def check_run_memory(problem, method: str, clients: int, config: MethodConfig, device=None,
                     extra: tuple[float, str] | None = None) -> None:
    """Refuse, before any data is built, a run whose estimated memory exceeds what is available.  ``extra``:
    ``(bytes, how)`` a caller adds to the run's estimate (a preset's work around the run: the ``ridge``
    preset's pooled oracle, CV candidates and baselines), checked together, once."""
    est = estimate_memory(problem, clients, config, method, device)
    if extra is not None:
        est = (extra[0], extra[1]) if est is None else (est[0] + extra[0], f"{est[1]}; {extra[1]}")
    if est is not None:
        check_memory(est[0], f"{problem.name} with {method} ({est[1]})", device, _memory_hint(problem))


def _memory_hint(problem) -> str:
    """What to change when a run does not fit: a problem with a network also has its width (the Jacobian's
    columns and the residual graph grow with it: ``hidden=(10**6,)`` is refused for its width, not its points)."""
    if getattr(problem, "kind", None) in ("pinn", "fit"):
        return "use fewer clients, fewer points per client or a smaller network (hidden=… / --hidden)"
    return "use fewer clients or fewer points per client"


def _ridge_sigma_once(problem, method: str, config: MethodConfig):
    """On a ridge problem σ counts once.  A method whose configuration holds σ itself
    (:attr:`~fedsciml.options.MethodConfig.holds_sigma`: one-shot's fused step adds ``σI`` at the server, the ridge
    SGD baselines' σ is a term of each client's local loss) runs on the clients' data rows only (problem option
    ``penalty="server"``) with the method's ``sigma`` when given (it then becomes the problem's σ, so that the
    recorded options say what ran), else the problem's ``sigma``.  Every other method needs the penalty as residual
    rows (``penalty="rows"``).  A ridge problem without a ``penalty`` option (``table``) has no σ of its own: the
    method's ``sigma`` (default 0) is the only one."""
    if getattr(problem, "kind", None) != "ridge" or "penalty" not in problem.options:
        return problem, config  # (a table problem has no penalty rows: σ is the method's alone)
    if not config.holds_sigma:
        if problem.options.get("penalty") == "server":
            holders = ", ".join(n for n, m in METHODS.items() if m.config.holds_sigma)
            raise ValueError(f"problem option penalty='server' leaves σ to a method that adds it itself "
                             f"({holders}); method {method!r} needs penalty='rows' (σ as residual rows on every "
                             f"client)")
        return problem, config
    import dataclasses

    sigma = getattr(config, "sigma")  # a configuration that holds σ has a sigma option
    s = problem.options["sigma"] if sigma is None else float(sigma)
    if problem.options.get("penalty") != "server" or s != problem.options["sigma"]:
        problem = type(problem)(**{**problem.options, "sigma": s, "penalty": "server"})
    return problem, dataclasses.replace(config, sigma=s)  # type: ignore[call-arg]  # the config has sigma


@dataclass(frozen=True)
class Plan:
    """A run checked before anything is built: the method, its validated typed configuration, the resolved
    device, the engine, and the memory estimate passed.  :func:`plan` makes one, :func:`run` executes it —
    the CLI plans every method of a ``--compare`` first (so a bad option or too large a run fails before the
    first run starts) and runs them afterwards; :func:`solve` is the two in one call."""

    problem: Any
    method: str
    spec: Method
    config: MethodConfig
    clients: int | None
    seed: int
    device: torch.device
    device_arg: Any
    engine: str
    progress: bool
    every: int
    message_hook: Callable | None
    runtime: dict


#: run options that need the clients' data in this process (a problem's default of them applies only there)
LOCAL_ONLY = ("resample",)


def run_defaults(problem, config_cls: type[MethodConfig], engine: str, given: Mapping) -> dict:
    """The options of ``problem.run_defaults`` (:attr:`fedsciml.problems.base.Problem.run_defaults`) that the
    method's configuration declares and the caller did not give, neither as an option nor through the method's
    own preset (``config_cls.preset_options``: fipa's ``paper``) — ``resample`` (:data:`LOCAL_ONLY`) only where
    the clients run in this process (engine ``local``, transport local or bytes), with one info line naming what
    is held back and why.  :func:`configure` applies them and says so (or drops them, naming why)."""
    wanted = dict(getattr(problem, "run_defaults", None) or {})
    declared = config_cls.specs()
    preset = getattr(config_cls, "preset_options", None)
    chosen = set(given) | set(preset(given) if preset is not None else ())
    out = {k: v for k, v in wanted.items() if k in declared and k not in chosen}
    remote = engine != "local" or given.get("transport", "local") not in ("local", "bytes")
    held = [k for k in out if k in LOCAL_ONLY and remote]
    name = getattr(problem, "name", "the problem")
    if held:
        log.info("%s: its default %s not applied: the clients draw their own points on engine %r", name,
                 ", ".join(f"{k}={out[k]!r}" for k in held), engine)
    return {k: v for k, v in out.items() if k not in held}


def configure(problem, config_cls: type[MethodConfig], engine: str, options: Mapping) -> MethodConfig:
    """The method's configuration from the caller's ``options`` and the problem's :func:`run_defaults`.  A problem's
    default is a soft one: where it makes the configuration invalid with the caller's own options (PINNacle's FIPA
    ``rank`` 0 beside ``adaptive``, a ``sketch`` or the thin-QR merge), it is dropped with one info line naming
    why, and the caller's options are built alone — so a default never turns a valid call into an error."""
    from fedsciml.options import OptionError

    defaults = run_defaults(problem, config_cls, engine, options)
    if not defaults:
        return config_cls.from_options(dict(options))
    name, listed = getattr(problem, "name", "the problem"), ", ".join(f"{k}={v!r}" for k, v in defaults.items())
    try:
        config = config_cls.from_options({**defaults, **options})
    except OptionError as e:
        config = config_cls.from_options(dict(options))  # the caller's own error, if any, is raised here
        log.info("%s: its default %s not applied: with the options given, %s", name, listed, e)
        return config
    log.info("%s: its default %s (give the option to change it)", name, listed)
    return config


def plan(problem, method: str = SOLO_METHOD, clients: int | None = None, seed: int = 0, device="cpu",
         progress: bool = False, every: int = 10, message_hook=None, config: MethodConfig | None = None,
         engine: str = "local", memory: MemoryTerms | None = None, **options: Any) -> Plan:
    """Check a run — every option, the seed, clients, device, engine and (in process) its memory — once.
    Raises what :func:`solve` raises for bad input; builds no data.  ``memory``: a caller's work around the run,
    ``fn(problem, clients, config) -> (bytes, how)`` called with the validated configuration, added to the run's
    own estimate (:func:`check_run_memory`)."""
    kind = getattr(problem, "kind", "") or ""
    spec = get_method(method, kind)
    use = spec.use(kind)
    runtime = {}
    if "transport" in options and not isinstance(options["transport"], str):  # a Transport object, not a name
        if not spec.federated:
            raise ValueError(f"transport applies to federated methods; {method!r} exchanges no messages")
        runtime["transport"] = options.pop("transport")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    engines = getattr(use.config, "engines", None)  # a configuration may name the engines it runs on
    if engines is not None and engine not in engines:
        raise ValueError(f"method {method!r} runs on engine {', '.join(engines)} only, got engine {engine!r}")
    if config is None:
        config = configure(problem, use.config, engine, options)
    elif options:
        raise TypeError(f"give the {method} options either as config or as keywords, not both")
    elif not isinstance(config, use.config):
        raise TypeError(f"method {method!r} needs a {use.config.__name__}, got {type(config).__name__}")
    if message_hook is not None and not spec.federated:
        raise ValueError(f"message_hook applies to federated methods; {method!r} exchanges no messages")
    seed = check_seed(seed)
    clients = check_clients(clients)
    if isinstance(every, bool) or not isinstance(every, numbers.Integral) or every < 1:
        raise ValueError(f"every must be an integer ≥ 1, got {every!r}")
    dev = resolve_device(device)
    problem, config = _ridge_sigma_once(problem, method, config)
    n_clients = problem.default_clients if clients is None else clients
    extra = None if memory is None else memory(problem, n_clients, config)
    if isinstance(ENGINES[engine], Connect):
        _refuse_pooled(spec, engine)
    if engine != "local":
        if runtime:
            raise ValueError(f"engine {engine!r} brings its own transport; do not give one")
        if message_hook is not None:
            raise ValueError(f"message_hook runs in this process; it does not apply to engine {engine!r}")
        if getattr(config, "transport", "local") != "local":  # the engine's transport carries the messages
            raise ValueError(f"transport={config.transport!r} applies to engine 'local'; engine {engine!r} brings its own")
        if extra is not None:  # the caller's work around the run stays in this process
            check_memory(extra[0], f"{problem.name} with {method} ({extra[1]})", dev,
                         "use fewer clients or fewer points per client")
        eng = ENGINES[engine]
        if not isinstance(eng, Connect) and getattr(config, "clock", "wall") == "cpu":
            raise ValueError(f"clock='cpu' (--clock cpu) counts CPU seconds, and engine {engine!r} runs its clients "
                             f"in processes whose CPU it cannot read; use clock='wall'")
        if isinstance(eng, Connect) and eng.check is not None:  # the engine knows where its clients run
            eng.check(estimate_memory(problem, n_clients, config, method, dev), n_clients, dev)
    else:
        if n_clients > MAX_LOCAL_CLIENTS:
            raise ValueError(f"clients={n_clients:,} in one process: each client is Python objects of its own, "
                             f"about 6 ms a client for a one-round ridge run (measured), so this run would take "
                             f"{n_clients * 6e-3 / 60:,.0f} minutes or more; at most {MAX_LOCAL_CLIENTS:,} clients here")
        check_run_memory(problem, method, n_clients, config, dev, extra)
    return Plan(problem, method, spec, config, clients, seed, dev, device, engine, progress, every, message_hook,
                runtime)


def with_loss_terms(evaluate, objectives):
    """``evaluate`` plus, for a problem whose objectives have several named residual parts (a PDE's residual and
    each condition), each part's share of the loss at θ: ``loss[pde]``, ``loss[Dirichlet(boundary)]``, … —
    ``½‖r_part‖²`` summed over the clients, over all N rows, so the terms add up to the row's ``loss``.  The
    history (``history.csv``) gets one column per term and ``--out`` a ``loss_terms.png``.  Monitoring only,
    off the solver clock like the test metrics; in process (the driver holds the clients' objectives here —
    a Flower run's server does not hold the sites' points, so its history has no terms)."""
    if not objectives or not all(hasattr(o, "parts") and hasattr(o, "part_residuals") for o in objectives):
        return evaluate
    names: list = []
    for o in objectives:
        names += [q.name for q in o.parts if q.name not in names]
    if len(names) < 2:
        return evaluate
    n_total = max(1, sum(int(o.n_residuals) for o in objectives))

    def terms(theta) -> dict:
        acc = dict.fromkeys(names, 0.0)
        with torch.no_grad():
            for o in objectives:  # monitoring, once per history row: a residual evaluation per client
                for q, r in zip(o.parts, o.part_residuals(theta)):
                    acc[q.name] += 0.5 * float(r @ r)
        return {f"loss[{n}]": v / n_total for n, v in acc.items()}

    def evaluate_with_terms(theta, **kw):
        return {**evaluate(theta, **kw), **terms(theta)}
    return evaluate_with_terms


def run(p: Plan) -> Result:
    """Execute a :class:`Plan`: seed, the clients' objectives, θ₀, the method's run, the :class:`Result`
    (its ``wall_seconds``: this whole call, set-up and final metrics included)."""
    t_all = time.perf_counter()
    res = _run_plan(p)
    if res.wall_seconds is None:
        res.wall_seconds = time.perf_counter() - t_all
    return res


def _run_plan(p: Plan) -> Result:
    engine = ENGINES[p.engine]
    if isinstance(engine, Connect):
        return run_connected(p, engine.connect)
    if p.engine != "local":  # the same strategy and round loop; the engine's transport carries the messages
        if getattr(p.config, "keep_best", None) == "validation":
            raise ValueError(f"keep_best='validation' keeps the θ of the best held-out validation residual, which "
                             f"runs in process only (engine 'local'); engine {p.engine!r} returns the last iterate: "
                             f"give keep_best='none'")
        opts = p.config.to_dict()
        opts.pop("transport", None)
        assert engine is not None  # "local" is the only engine without a function, and it runs below
        return engine(p.problem, p.method, clients=p.clients, seed=p.seed, device=p.device_arg,
                      progress=p.progress, **opts)
    problem, dev = p.problem, p.device
    clients = problem.default_clients if p.clients is None else p.clients
    from fedsciml.runtime.checks import check_objectives

    torch.manual_seed(p.seed)
    objectives = problem.client_objectives(clients, seed=p.seed, device=dev)
    theta0 = problem.init_params(p.seed, device=dev)
    (problem.check_objectives if own_kind(problem) else check_objectives)(objectives, theta0)
    # the held-out validation residual (PINN problems; fedsciml.runtime.validation): drawn once, never trained on
    want = getattr(p.config, "validation", False)
    if want and not getattr(problem, "samples_collocation", False):
        raise ValueError(f"validation=True: problem {problem.name!r} has fixed data, not sampled collocation points; "
                         f"the held-out validation residual applies to the PINN problems")
    val = held_out(problem, clients, p.seed, objectives, dev) if want is not False else None
    best = _best_keeper(problem, p.config, val)
    t0 = time.perf_counter()
    with keep_partial(p, clients, t0, best=best), _keeping(best):
        theta, rows, info = p.spec(problem, objectives, theta0,
                                   with_validation(with_loss_terms(problem.evaluate, objectives), val),
                                   p.config, seed=p.seed,
                                   progress=p.progress, every=p.every, message_hook=p.message_hook, **p.runtime)
    wall = time.perf_counter() - t0
    if best is not None:
        theta, info["keep_best"] = kept_best(best, theta, rows)
    checked = None if val is None else report(problem.name, rows, val, sum(int(o.n_residuals) for o in objectives),
                                              int(theta0.numel()), getattr(p.config, "resample", None))
    if checked is not None:
        info["validation"] = checked
    counts = getattr(problem, "point_counts", None)
    if callable(counts):  # the collocation points drawn, and by which rule (problems.domain.DomainPDE.point_counts)
        info["points"] = counts(clients)
    return run_result(p, clients, theta, rows, info, wall, problem.final_metrics(theta, objectives))


def _best_keeper(problem, config, val):
    """The run option ``keep_best`` resolved (:mod:`fedsciml.runtime.validation`): a
    :class:`~fedsciml.runtime.callbacks.BestModelCheckpoint` of ``val_loss`` when the run keeps its best
    validation θ — ``keep_best="validation"``, or by default where the problem's readings carry noise
    (``problem.noisy_data``) and a validation residual is tracked — else ``None``.  ``validation`` asked for on a
    run without a validation residual is one clear error."""
    from fedsciml.runtime.callbacks import BestModelCheckpoint

    keep = getattr(config, "keep_best", None)
    if keep == "validation" and getattr(config, "validation", None) is False:
        raise ValueError("keep_best='validation' returns the θ of the best validation residual, and validation is "
                         "off (validation=False): turn it on, or give keep_best='none'")
    if keep == "validation" and val is None:
        raise ValueError(f"keep_best='validation': problem {problem.name!r} has no held-out validation residual "
                         f"in this run (it needs sampled collocation points, or held-out readings); give "
                         f"keep_best='none'")
    if keep is None:
        keep = "validation" if val is not None and bool(getattr(problem, "noisy_data", False)) else "none"
    return BestModelCheckpoint("val_loss") if keep == "validation" else None


@contextmanager
def _keeping(best) -> Iterator[None]:
    """Within the block, the run's recorder also calls ``best`` (the ``keep_best`` checkpoint) after each row."""
    if best is None:
        yield
        return
    from fedsciml.runtime.callbacks import active, use_callbacks

    with use_callbacks(active() + (best,)):
        yield


def kept_best(best, theta, rows: list) -> tuple:
    """``(θ, record)`` of a run that keeps its best validation θ: the copy ``best`` (a
    :class:`~fedsciml.runtime.callbacks.BestModelCheckpoint` of ``val_loss``) took of θ when the row with the
    lowest ``val_loss`` was recorded, and ``extra["keep_best"]``: ``{"monitor", "step", "val_loss", "last_step",
    "last_val_loss", "why"}``.  Without a finite ``val_loss`` on any row, the run's own θ (``step`` ``None``)."""
    last = rows[-1] if rows else {}
    rec: dict = {"monitor": "val_loss", "step": best.best_step, "val_loss": None if best.best_step is None
                 else float(best.best), "last_step": last.get("step"), "last_val_loss": last.get("val_loss")}
    if best.best_theta is None:
        rec["why"] = "no history row had a finite validation residual: the last iterate is returned"
        return theta, rec
    rec["why"] = ("the lowest held-out validation residual (keep_best validation): the last iterate's is "
                  + ("the same step" if best.best_step == last.get("step") else "higher"))
    return best.best_theta.to(theta.device), rec


@contextmanager
def keep_partial(p: Plan, clients: int, t0: float, engine: Callable | None = None, best=None) -> Iterator[None]:
    """A run stopped by Ctrl-C/SIGTERM or a failed round whose exception carries ``partial = (θ, rows, info)``
    (the round loop's, the centralized solvers'): ``e.result`` is set to the :class:`Result` of it (final
    metrics at that θ, ``stop_reason`` ``"interrupted"``/``"failed"``), for the caller to write
    (:mod:`fedsciml.runtime.interrupt`).  ``engine``: gives the engine's record (``info["engine"]``) of a run
    over one, as a finished run has it.  ``best``: the run's ``keep_best`` checkpoint (:func:`_best_keeper`):
    the partial result holds its θ, as a finished run's would."""
    try:
        yield
    except BaseException as e:
        partial = getattr(e, "partial", None)
        if partial is not None and getattr(e, "result", None) is None:
            theta, rows, info = partial
            try:
                if best is not None:  # keep_best: the interrupted run's best validation θ, as a finished run's
                    theta, kept = kept_best(best, theta, rows)
                    info = {**info, "keep_best": kept}
                if engine is not None:
                    info = {**info, "engine": engine()}
                e.result = run_result(p, clients, theta, rows, info, time.perf_counter() - t0, {})  # type: ignore[attr-defined]
            except Exception as why:  # noqa: BLE001 - the partial result is a by-product: the stop itself is raised
                logging.getLogger(__name__).warning("the partial result could not be made: %s: %s",
                                                    type(why).__name__, why)
        raise


def _refuse_pooled(spec: Method, engine: str) -> None:
    if not spec.federated:
        raise ValueError(f"method {spec.name!r} pools the clients' data in this process; engine {engine!r} carries "
                         f"federated methods' messages only")


def run_connected(p: Plan, connect: Callable) -> Result:
    """The run of an engine that only carries messages (a :class:`Connect` engine's, and Flower's ServerApp's):
    ``connect(job, clients)`` gives the transport to clients that build their own data from ``job``; this process
    holds their sizes (:func:`fedsciml.runtime.remote.remote_objectives`), θ and the strategy, and runs the
    method as in process.  What is the engine's own comes from the transport (each a declared
    :class:`~fedsciml.runtime.transport.Transport` method, with a default):
    ``engine_info() -> dict`` (recorded in ``Result.extra["engine"]`` beside the engine's name, e.g. Flower's
    exchanges and their times), ``final_metrics(problem, θ) -> dict`` (the problem's final metrics from the
    clients' shares; none without it) and ``close()`` (called when the run ends).  θ₀ is the problem's; a
    problem whose model size is its clients' (``init_params_for(n_params, seed, device)``, e.g. ``table`` whose
    tables are on the sites only) sizes it from what they said."""
    from fedsciml.runtime.remote import remote_objectives

    _refuse_pooled(p.spec, p.engine)
    problem, dev = p.problem, p.device
    clients = problem.default_clients if p.clients is None else p.clients
    opts = dict(problem.options)
    counts = getattr(problem, "point_counts", None)
    if callable(counts):  # the points the rule chose for these clients, named: every site draws the same ones
        pc = counts(int(clients))
        opts.update(n_interior=pc["n_interior"], n_boundary=pc["n_boundary"])
    job = {"problem": problem.name, "options": opts, "clients": int(clients), "seed": p.seed,
           "device": "cpu", "threads": torch.get_num_threads()}
    transport = connect(job, clients)
    if not isinstance(transport, Transport):
        raise TypeError(f"engine {p.engine!r}: its connect(job, clients) returned {type(transport).__name__}, not a "
                        "fedsciml.runtime.transport.Transport")
    try:
        objectives = remote_objectives(transport)
        if hasattr(problem, "client_data"):  # the ridge zoo draws its test set with the split (as the clients do)
            torch.manual_seed(p.seed)
            problem.client_data(clients, seed=p.seed)
        torch.manual_seed(p.seed)
        sized = getattr(problem, "init_params_for", None)
        theta0 = (sized(objectives[0].n_params, p.seed, device=dev) if callable(sized) and objectives
                  else problem.init_params(p.seed, device=dev))
        for c, o in zip(transport.client_ids, objectives):
            if o.n_params != theta0.numel():
                raise ValueError(f"client {c}: its objective has {o.n_params} parameters, the model {theta0.numel()}")
        t0 = time.perf_counter()
        def engine_record() -> dict:
            return {"name": p.engine, **transport.engine_info()}

        with keep_partial(p, clients, t0, engine_record):
            theta, rows, info = p.spec(problem, objectives, theta0, problem.evaluate, p.config, seed=p.seed,
                                       progress=p.progress, every=p.every, transport=transport)
        wall = time.perf_counter() - t0
        info["engine"] = engine_record()
        metrics = transport.final_metrics(problem, theta)
    finally:
        transport.close()
    return run_result(p, clients, theta, rows, info, wall, metrics)


def run_result(p: Plan, clients: int, theta, rows, info: dict, wall: float, metrics: dict) -> Result:
    """A run's :class:`Result` (the driver's runs, and the SecAgg+ App's, whose secure sum is Flower's own run):
    the last loss, the problem's evaluation of θ (with a one-shot ``fit_intercept`` model's intercept,
    ``info["intercept"]``), ``metrics``, and the record of the options (``config.to_dict()``, and the engine
    where it is not ``local``); ``solver_seconds`` is the solver's own time on the run's clock (``clock``: wall or
    CPU seconds; the loop's ``info["solver_time_s"]``, which leaves out evaluation and monitoring), ``wall`` where
    a runner records none.  Built by :func:`make_result`."""
    problem = p.problem
    last = rows[-1] if rows else {}
    kept = info.get("keep_best") if isinstance(info, dict) else None
    if isinstance(kept, dict) and kept.get("step") is not None:  # the returned θ's row (keep_best)
        last = next((r for r in rows if r.get("step") == kept["step"]), last)
    final = {"loss": last.get("loss")}
    final.update(problem.evaluate(theta, intercept=info["intercept"]) if "intercept" in info
                 else problem.evaluate(theta))
    final.update(metrics)
    options = _options(problem, p.config)
    if p.engine != "local":
        options["engine"] = p.engine
    return make_result(problem, p.method, options, seed=p.seed, device=p.device, clients=clients, theta=theta,
                       seconds=float(info.get("solver_time_s", wall)), final=final, history=rows, extra=info)


def make_result(problem, method: str, options: dict, *, seed: int, device, clients: int, theta, seconds: float,
                final: dict, history: list, extra: dict) -> Result:
    """The one constructor of a :class:`Result`: what is derived is derived here — the problem's name, the
    device's and θ's dtype's text, the parameter count, ``extra`` made JSON-safe.  :func:`run_result` calls it for
    every run; a caller whose answer is no registered method's run calls it directly (the ``ridge`` preset's
    pooled oracle, a closed-form solve)."""
    return Result(
        problem=problem.name, method=method, options=options, seed=seed,
        device=str(device), dtype=str(theta.dtype).replace("torch.", ""), n_params=int(theta.numel()),
        clients=int(clients), solver_seconds=seconds, final=final, history=history, extra=jsonable(extra),
        theta=theta, stop_reason=stop_reason_of(extra),
    )


def solve(problem, method: str = SOLO_METHOD, clients: int | None = None, seed: int = 0, device="cpu",
          progress: bool = False, every: int = 10, message_hook=None, config: MethodConfig | None = None,
          engine: str = "local", **options: Any) -> Result:
    """Solve ``problem`` (a :class:`~fedsciml.problems.Problem`) with ``method``: :func:`run` of :func:`plan`.

    ``clients`` defaults to the problem's own default (1 for most).  The method's
    options come as keywords (``rounds=``, ``rank=``, …: the fields of the method's configuration,
    :attr:`Method.config`) or as a ready ``config``; unknown options and values
    out of range raise before anything runs.  ``message_hook(round, client, msg)
    -> msg`` (federated methods; tests) alters the messages clients send.
    ``engine="flower"`` runs the same method with Flower's simulation engine
    carrying the messages (:mod:`fedsciml.engines.flower`).
    """
    return run(plan(problem, method, clients, seed, device, progress, every, message_hook, config, engine,
                    **options))
