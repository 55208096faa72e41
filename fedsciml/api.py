"""The public Python API (re-exported from ``fedsciml``).

Everything importable from ``fedsciml`` itself is public and documented;
anything else may change.  Typical use::

    import fedsciml as fs

    result = fs.solve("bratu", method="gn", clients=4, rounds=40)
    print(result.final["rel_l2"])
    result.to_json("bratu.json"); result.plot("plots/")
"""
from __future__ import annotations

from typing import Any, Sequence, Union

import torch

import fedsciml.engines  # noqa: F401  (registers the methods and the engines with the driver)
from fedsciml.engines.marching import marching_options, solve_marched
from fedsciml.problems import REGISTRY, get_problem
from fedsciml.problems.registry import apply_preset, preset_of
from fedsciml.problems.base import Problem
from fedsciml.problems.saved import load_model, save_model  # noqa: F401  (public: fs.save_model, fs.load_model)
from fedsciml.runtime.results import Result
from fedsciml.runtime.driver import available_methods
from fedsciml.runtime.driver import solve as _solve


def solve(problem: Union[str, Problem], method: str = "centralized", clients: int | None = None, *, seed: int = 0,
          device: Union[str, torch.device] = "cpu", progress: bool = False,
          problem_options: dict[str, Any] | None = None, hidden: Sequence[int] | None = None,
          activation: str | None = None, preset: str | None = None, callbacks: Sequence[Any] | None = None,
          time_windows: int | None = None, time_window_growth: float = 1.0, causal: float | None = None,
          causal_slices: int = 16, causal_every: int = 5, **method_options: Any) -> Result:
    """Solve a problem — a :class:`Problem` instance or a registered name — with one method.

    Parameters
    ----------
    problem : Problem or str
        e.g. ``"bratu"`` (options through ``problem_options={"lam": 2.0}``) or
        ``fs.get_problem("poisson", dim=3)`` or an instance of your own class.
    method : str
        ``centralized`` (pooled-data reference), ``gn``, ``fipa``, ``fedavg``,
        ``fedprox``, ``one-shot``, ``fedavgm``, ``fedadam``, ``fedyogi`` (see :func:`list_methods`).
    hidden, activation : optional
        The network of a field problem given by name (its options ``hidden`` and ``activation``, as
        ``problem_options`` would give them): ``hidden=(64, 64, 48, 48)``, ``activation="tanh"``; default
        the problem's own.
    preset : str, optional
        A named setting: a problem's preset (:attr:`Problem.presets`, e.g. ``fs.solve("poisson",
        preset="exp10")``: the K-FAC-for-PINNs authors' experiment — its problem options and its run's, e.g.
        ``resample``), which needs the problem by name, or a method's (fipa's ``"paper"``); options given
        explicitly win (:func:`fedsciml.problems.registry.apply_preset`).  A problem given as an instance keeps
        its own options: only the preset's method options apply.
    clients : int, optional
        Number of clients the domain or data is split among (default: the
        problem's own, 1 for most; for :class:`ClientData` the number of
        client datasets given).
    seed : int
        Seeds the initial network, the collocation points, the client split and every
        random choice of the method: same seed, same numbers.
    device : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or ``"auto"`` (a GPU when there is one).
    progress : bool
        Show the run's progress: a ``tqdm`` bar where stderr is a terminal (with a
        ``budget`` and no step count, a bar over the budget's seconds, so its ETA is the
        budget's end), else a line every ``every`` steps to the logger
        ``fedsciml.progress`` at INFO.  A plain script that configured no logging gets
        those lines on stderr (a handler is added for the run); an application that
        configured logging gets them through its own handlers.  The library itself never
        prints.
    problem_options : dict, optional
        Options of a problem given by name (``{"lam": 2.0}``).  They may also be given as keywords:
        ``fs.solve("pinnacle", case="hinv", pinnacle_dir="PINNacle")`` — a keyword that the problem declares and
        the method does not is the problem's (one that both declare is the method's: give the problem's here).
    callbacks : list, optional
        Called after each step (centralized) or round (federated) with a read-only
        :class:`StepView` (step, a copy of θ, the loss, the test metrics, the history
        row); a callback that returns ``True`` stops the run after that step
        (``result.stop_reason`` names it).  Each is a :class:`Callback` or a
        callable; :class:`EarlyStopping` and :class:`BestModelCheckpoint` ship with
        fedsciml.  In-process engine only.
    time_windows : int, optional
        Time-marching for a time-dependent ``DomainPDE``: K equal windows of ``[t0, T]`` trained in order, each
        window's initial condition the previous window's trained network at its start, each window warm-started
        from the previous θ; the method's options apply to each window.  The result's θ, metrics and saved model
        are the piecewise model on all of ``[t0, T]`` (:mod:`fedsciml.problems.windows`).
    time_window_growth : float
        With ``time_windows``: each window's length is the last one's times this ratio (default 1: equal
        windows; 1.5: short windows near ``t0`` for a transient there, longer ones after).
    causal, causal_slices, causal_every : optional
        Causal weighting of a time-dependent ``DomainPDE`` (Wang, Sankaran & Perdikaris 2022): with ``causal=ε``
        the PDE rows of time slice i (of ``causal_slices`` equal slices) are weighted by
        ``exp(−ε Σ_{k<i} L_k)``, ``L_k`` slice k's mean squared residual, recomputed at the current θ every
        ``causal_every`` LM steps or rounds and held fixed in between (:mod:`fedsciml.problems.causal`); needs
        ``max_iters`` (centralized) or ``rounds``.  With ``time_windows``, within each window.
    method_options
        The fields of the method's configuration (declared in the method's module,
        all importable from :mod:`fedsciml`: ``CentralizedConfig``, ``GNConfig``, ``FIPAConfig``,
        ``FedAvgConfig``, ``FedProxConfig``, ``OneShotConfig``), e.g. ``budget`` (seconds),
        ``optimizer``, ``max_iters``, ``rounds``, ``rank``, ``local``,
        ``local_steps``, ``lr``, ``mu``, ``participation``, ``dropout``,
        ``checkpoint``, ``resume``; or ``config=`` one such object.  ``every``
        (progress-line interval) and ``message_hook`` are passed to the runner.
        ``engine``: ``"local"`` (default: clients in this process) or ``"flower"``
        (the same method with Flower's simulation engine carrying the messages;
        needs the ``flower`` extra); the numbers are the same bits either way.

    Raises
    ------
    OptionError (a ValueError)
        an option the method does not have (the message names it and lists
        the allowed ones) or a value out of range;
    TypeError
        an argument of the wrong type (``budget='5'``, ``seed=1.5``,
        ``checkpoint=123``);
    ValueError
        ``seed`` < 0, an unknown device, a run too large for the memory available.

    Returns
    -------
    Result
        ``.final``, ``.history``, ``.theta``, ``.stop_reason`` (why the run stopped:
        :func:`fedsciml.runtime.results.stop_reason_of`), ``.to_json()``, ``.plot()`` —
        the same schema as the CLI's ``result.json``.
    """
    if problem_options is not None and not isinstance(problem_options, dict):
        raise TypeError(f"problem_options must be a dict, got {type(problem_options).__name__}")
    network = {k: v for k, v in (("hidden", hidden), ("activation", activation)) if v is not None}
    for k in network:
        if k in (problem_options or {}):
            raise ValueError(f"{k} is given twice, as a keyword and in problem_options; give it once")
    if isinstance(problem, str):
        cls = REGISTRY.get(problem)
        by_keyword = _problem_keywords(problem, cls, method, method_options)
        for k in by_keyword:
            if k in (problem_options or {}):
                raise ValueError(f"{k} is given twice, as a keyword and in problem_options; give it once")
        method_options = {k: v for k, v in method_options.items() if k not in by_keyword}
        popts = {**(problem_options or {}), **by_keyword, **network}
        if cls is not None:  # an unknown name is refused by get_problem, naming the registered ones
            popts, method_options = apply_preset(cls, preset, popts, method_options, _method_presets(method))
        problem = get_problem(problem, **popts)
    else:
        if problem_options or network:
            what = "problem_options" if problem_options else " and ".join(network)
            raise ValueError(f"{what} only applies when the problem is given by name (an instance has its "
                             f"options: build it with fs.get_problem(name, ...))")
        if preset is not None:  # an instance keeps its own problem options: the preset's run options only
            own = preset_of(type(problem), preset)
            method_options = {**own.method, **method_options} if own is not None else \
                {**method_options, "preset": preset}  # a method's preset (fipa's paper): the method checks it
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a fedsciml Problem or a registered name, got {type(problem).__name__}")
    from fedsciml.runtime.callbacks import check_callbacks, use_callbacks
    from fedsciml.runtime.history import show_progress

    cbs = check_callbacks(callbacks)
    if cbs and method_options.get("engine", "local") != "local":
        raise ValueError(f"callbacks run in the process of the round loop: engine 'local' only, got engine="
                         f"{method_options.get('engine')!r}")
    with show_progress(bool(progress)), use_callbacks(cbs):
        marching = marching_options(time_windows, time_window_growth, causal, causal_slices, causal_every)
        if marching:
            return solve_marched(problem, method, clients=clients, seed=seed, device=device, progress=progress,
                                 **marching, **method_options)
        return _solve(problem, method=method, clients=clients, seed=seed, device=device, progress=progress,
                      **method_options)


def _problem_keywords(name: str, cls: Any, method: str, method_options: dict) -> dict:
    """The keywords of ``fs.solve(NAME, **kw)`` that are options of the problem ``NAME`` (its ``params``, e.g.
    ``fs.solve("pinnacle", case="hinv")``), taken out of the method's options: a keyword the problem declares and
    the method does not.  One the problem and the method both declare stays the method's, as before keywords
    reached problems (``fs.solve("ridge-linear", "one-shot", sigma=0.5)``: the method's σ; give the problem's in
    ``problem_options=``); any other keyword stays a method option (the method refuses an unknown one, naming its
    options).  Nothing for a name not registered (``get_problem`` refuses it)."""
    from fedsciml.runtime.driver import METHODS

    if cls is None or not hasattr(cls, "specs"):
        return {}
    mine = set(cls.specs()) - {"hidden", "activation"}  # the network's: the keywords hidden= and activation=
    theirs = set(METHODS[method].config.specs()) if method in METHODS else set()
    out = {}
    for k, v in method_options.items():
        if k in mine and k not in theirs:
            out[k] = v
    return out


def _method_presets(method: str) -> tuple:
    """The presets a method declares (the choices of its option ``preset``: fipa's ``paper``), () for none."""
    from fedsciml.runtime.driver import METHODS

    spec = METHODS[method].config.specs().get("preset") if method in METHODS else None
    return tuple(spec[1].choices or ()) if spec is not None else ()


def list_methods() -> list[str]:
    """Names of every registered method, the image methods (kind ``images``) included (``fs.methods`` is the
    subpackage :mod:`fedsciml.methods`)."""
    import fedsciml.images  # noqa: F401  (registers the image methods; fs.solve itself does not load them)

    return available_methods()

