"""The one registry of methods: name → :class:`Method`, declared by each method's own file and added with
:func:`register_method` (and :func:`add_kind` for kinds beyond the problem kinds).  The driver
(:mod:`fedsciml.runtime.driver`) plans and runs them; the summary table reads their settings text from here.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from dataclasses import replace as replace_
from typing import Any, Callable, Mapping

from fedsciml.options import MethodConfig


#: The method a run gets where none is named: the pooled reference for one client (``fs.solve``'s default), FIPA
#: for several (the CLI's ``solve --clients K``, ``flower deploy``, a Flower App's run config) — :func:`default_method`
SOLO_METHOD, FEDERATED_METHOD = "centralized", "fipa"


def default_method(clients: int | None) -> str:
    """:data:`FEDERATED_METHOD` with more than one client, else :data:`SOLO_METHOD`."""
    return FEDERATED_METHOD if clients is not None and clients > 1 else SOLO_METHOD


#: The kinds of :class:`fedsciml.problems.Problem` (``Problem.kind``): what ``solve`` runs.
PROBLEM_KINDS: tuple[str, ...] = ("pinn", "fit", "ridge")


def _load(runner: str | Callable) -> Callable:
    if callable(runner):
        return runner
    module, _, attr = runner.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class KindUse:
    """How a method runs on one kind of task beyond the problem kinds (e.g. ``images``): its runner (the
    signature of a solve runner), its typed configuration and what else that kind needs (``detail``; images:
    the protocols the method runs in)."""

    runner: str | Callable
    config: type[MethodConfig]
    detail: Any = None
    description: str = ""


@dataclass(frozen=True)
class Method:
    """One method, declared in its own file and registered with :func:`register_method`: its name, its typed
    configuration class, what it runs and how its runs read in the summary table.

    * ``strategy``: a federated method's strategy factory ``build(config, ctx) -> strategy`` (or
      ``(strategy, evaluate)``), run by the driver's one round loop
      (:func:`fedsciml.runtime.simulate.run_strategy`, ``ctx`` a :class:`~fedsciml.runtime.simulate.RunContext`);
    * ``run``: a method with a loop of its own (``centralized``: the pooled data, no messages),
      ``fn(problem, objectives, θ₀, evaluate, config, *, seed, progress, every, message_hook) -> (θ, rows, info)``;
      ``"module:function"`` is imported on first use;
    * ``clients``: a strategy method's own clients in this process, ``fn(objectives, config, device) ->
      Transport`` (the ridge SGD baselines' clients answer an ``update`` of their own); default: the runtime's
      :class:`~fedsciml.runtime.client.Client` per objective, behind the transport ``config.transport`` names;
    * ``settings``: its runs' settings text in the summary table, ``fn(result) -> str`` or ``"module:function"``
      (default: its local solver's, :func:`fedsciml.methods.local.local_settings_text`; ``None``: no text);
    * ``kinds``: the kinds of task it applies to — problem kinds (:data:`PROBLEM_KINDS`) and other kinds with
      their :class:`KindUse` in ``uses`` (:func:`add_kind`);
    * ``federated``: whether it exchanges messages (an engine carries them); a method with a ``run`` says so
      itself (``centralized`` does not);
    * ``secure_sum``: ``fn(config) -> str | None``: why a run with this configuration needs a secure sum (one
      line; one-shot's central DP), or ``None``; an engine without one (Flower's generic App) refuses such a run
      with that line;
    * ``linear_model``: on a ridge problem its θ (with ``extra["intercept"]``) is a fitted linear model:
      ``fn(result) -> dict``, what ``model.json`` says of it (``solve --out`` and the Flower App write
      ``model.safetensors`` beside it, :mod:`fedsciml.ridge.model_io`); ``None``: its runs write no model file.

    Calling it validates the options and runs the method."""

    name: str
    config: type[MethodConfig]
    strategy: Callable | None = None
    run: str | Callable | None = None
    description: str = ""
    settings: str | Callable | None = "fedsciml.methods.local:local_settings_text"
    clients: Callable | None = None
    kinds: tuple[str, ...] = PROBLEM_KINDS
    federated: bool = True
    secure_sum: str | Callable | None = None
    linear_model: str | Callable | None = None
    uses: Mapping[str, KindUse] = field(default_factory=dict, compare=False, repr=False)

    def applies_to(self, kind: str) -> bool:
        """Whether the method runs on a task of ``kind`` (a problem of no known kind — a user's own
        :class:`~fedsciml.problems.Problem` subclass — counts as a problem)."""
        known = set(PROBLEM_KINDS).union(*(m.kinds for m in METHODS.values()))
        if kind not in known:
            return any(k in PROBLEM_KINDS for k in self.kinds)
        return kind in self.kinds

    def use(self, kind: str | None = None) -> KindUse:
        """The runner and typed configuration for ``kind`` (the problem kinds' when ``kind`` is one or None)."""
        if kind is not None and kind in self.uses:
            return self.uses[kind]
        if self.strategy is None and self.run is None:
            raise ValueError(kind_error(self, kind or "problem"))
        return KindUse(self.run if self.run is not None else self._run_strategy, self.config, None,
                       self.description)

    def _run_strategy(self, problem, objectives, theta0, evaluate, config, **kw):
        from fedsciml.runtime.simulate import run_strategy

        assert self.strategy is not None
        return run_strategy(self.name, self.strategy, problem, objectives, theta0, evaluate, config,
                            clients=self.clients, **kw)

    def load(self, kind: str | None = None) -> Callable:
        return _load(self.use(kind).runner)

    def make_config(self, options: dict, kind: str | None = None) -> MethodConfig:
        return self.use(kind).config.from_options(options)

    def needs_secure_sum(self, config: MethodConfig) -> str | None:
        """Why a run of this method with ``config`` needs a secure sum (one line), or ``None``."""
        return None if self.secure_sum is None else _load(self.secure_sum)(config)

    def linear_model_meta(self, result) -> dict | None:
        """What ``model.json`` says of the linear model ``result`` fitted (a ridge run), or ``None`` (no model)."""
        return None if self.linear_model is None else _load(self.linear_model)(result)

    def settings_text(self, result) -> str | None:
        """The summary table's settings text of ``result`` (a run of this method), or ``None`` (the default)."""
        return None if self.settings is None else _load(self.settings)(result)

    def __call__(self, problem, objectives, theta0, evaluate, config: MethodConfig | None = None, *, seed: int = 0,
                 progress: bool = False, every: int = 10, message_hook=None, **options):
        runtime = {}
        if "transport" in options and not isinstance(options["transport"], str):  # a Transport object (Flower's)
            runtime["transport"] = options.pop("transport")
        kind = getattr(problem, "kind", None)
        if config is None:
            config = self.make_config(options, kind)
        elif options:
            raise TypeError(f"give the {self.name} options either as config or as keywords, not both")
        return self.load(kind)(problem, objectives, theta0, evaluate, config, seed=seed, progress=progress,
                               every=every, message_hook=message_hook, **runtime)


METHODS: dict[str, Method] = {}


def _check_config_class(name: str, config) -> None:
    if not (isinstance(config, type) and issubclass(config, MethodConfig)):
        raise TypeError(f"method {name!r}: config must be a MethodConfig subclass, got {config!r}")


def register_method(method: Method, *, replace: bool = False) -> Method:
    """Add a solve method (a :class:`Method`: a strategy factory, or a loop of its own as ``run``).  It applies
    to every problem kind, or to ``method.kinds`` (problem kinds; e.g. the ridge SGD baselines: ``("ridge",)``)."""
    if not isinstance(method, Method):
        raise TypeError(f"register_method takes a Method, got {type(method).__name__}")
    name = method.name
    _check_config_class(name, method.config)
    if (method.strategy is None) == (method.run is None):
        raise TypeError(f"method {name!r}: give its strategy factory or its run function, one of them")
    if method.run is None and not method.federated:
        raise ValueError(f"method {name!r}: a strategy runs on the round loop, which exchanges messages: it is "
                         f"federated")
    if name in METHODS and not replace:
        raise ValueError(f"a method named {name!r} is already registered; pass replace=True")
    kinds = method.kinds
    if not kinds or any(k not in PROBLEM_KINDS for k in kinds):
        raise ValueError(f"method {name!r}: kinds must be problem kinds ({', '.join(PROBLEM_KINDS)}), got {kinds!r}; "
                         f"other kinds are added with add_kind")
    method = replace_(method, kinds=tuple(kinds), uses={})
    METHODS[name] = method
    return method


def add_kind(name: str, kind: str, use: KindUse, *, federated: bool = True) -> Method:
    """Let method ``name`` run on tasks of ``kind`` (not a problem kind) with ``use``'s runner and configuration:
    an existing entry gains the kind; a new name becomes an entry for that kind alone (``use.description`` is
    its description).  Adding a kind twice replaces its use."""
    if kind in PROBLEM_KINDS:
        raise ValueError(f"kind {kind!r} is a problem kind; problem methods are added with register_method")
    _check_config_class(name, use.config)
    if name in METHODS:
        old = METHODS[name]
        kinds = old.kinds if kind in old.kinds else old.kinds + (kind,)
        spec = replace_(old, kinds=kinds, uses={**old.uses, kind: use})
    else:
        spec = Method(name, MethodConfig, description=use.description, federated=federated, kinds=(kind,),
                      uses={kind: use})
    METHODS[name] = spec
    return spec


#: The entry-point group of installed method plugins: a package declares the module that registers its methods
#: (and their client handlers) here, e.g. ``[project.entry-points."fedsciml.methods"] my-avg = "my_fedsciml_method"``
#: (template: ``examples/flower_own_method/``).
METHOD_ENTRY_POINT_GROUP = "fedsciml.methods"


def entry_point_modules(group: str) -> dict[str, str]:
    """``{entry point name: module}`` of the plugins installed packages declare in ``group`` (nothing imported)."""
    import importlib.metadata

    return {ep.name: ep.module for ep in importlib.metadata.entry_points(group=group)}


def load_entry_points(group: str, what: str, error: type[Exception] = ValueError) -> list[str]:
    """Import every installed plugin of ``group`` (a module already imported is not imported again); their names.
    A plugin that fails to import raises ``error``, one line naming the ``what`` plugin and what it raised."""
    import importlib.metadata
    import sys

    names = []
    for ep in importlib.metadata.entry_points(group=group):
        if ep.module not in sys.modules:
            try:
                ep.load()
            except Exception as e:  # user code: whatever it raises, one line naming the plugin
                raise error(f"{what} plugin {ep.name!r} ({ep.value}) failed to import: "
                            f"{type(e).__name__}: {e}") from None
        names.append(ep.name)
    return names


def method_entry_point_modules() -> dict[str, str]:
    """``{entry point name: module}`` of the method plugins installed packages declare (nothing imported)."""
    return entry_point_modules(METHOD_ENTRY_POINT_GROUP)


def load_method_entry_points() -> list[str]:
    """Import every installed method plugin (:data:`METHOD_ENTRY_POINT_GROUP`, once each), so that its methods and
    client handlers are registered — in any process that runs methods by name or answers their queries: the CLI
    and ``fs.solve`` (on a name not registered yet), a Flower ServerApp, each Flower node's ClientApp (the node's
    own installed packages, never code a job names).  Returns their names; a plugin that fails to import raises
    a ValueError naming it."""
    return load_entry_points(METHOD_ENTRY_POINT_GROUP, "method")


def available_methods(kind: str | None = None) -> list[str]:
    """Every registered method's name, or those that apply to ``kind``."""
    return sorted(m for m, s in METHODS.items() if kind is None or s.applies_to(kind))


def get_method(name: str, kind: str | None = None) -> Method:
    """The entry ``name``; with ``kind``, refused (one line) unless it applies to that kind.  A name not registered
    yet is looked for among the installed method plugins (:func:`load_method_entry_points`)."""
    if isinstance(name, str) and name not in METHODS:
        load_method_entry_points()
    if not isinstance(name, str) or name not in METHODS:
        import difflib

        close = difflib.get_close_matches(str(name), available_methods(kind), 1, 0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown method {name!r}{hint}; available: {', '.join(available_methods(kind))}")
    spec = METHODS[name]
    if kind is not None and not spec.applies_to(kind):
        raise ValueError(kind_error(spec, kind))
    return spec


def kind_error(spec: Method, kind: str) -> str:
    """The one line refusing ``spec`` on a task of ``kind``: what it applies to, and what does apply."""
    where = ("image classification (python -m fedsciml bench images)" if kind == "images"
             else f"a problem of kind {kind!r}" if kind else "a problem")
    return (f"method {spec.name!r} does not apply to {where}; it applies to: {', '.join(spec.kinds)}; "
            f"methods that do: {', '.join(available_methods(kind)) or 'none'}")
