"""The methods: one module per method, registered with the runtime.

A method is one file: its typed configuration, its strategy (and aggregator, or the shared one of
:mod:`fedsciml.methods.aggregators`), its client-side handlers, its strategy factory ``build(config, ctx)`` and its
settings text, and ``METHOD_ENTRIES``, the :class:`~fedsciml.runtime.driver.Method` of each method it defines:

* :mod:`fedsciml.methods.gn` — ``gn`` (:class:`~fedsciml.methods.gn.GNConfig`, ``gn_strategy``);
* :mod:`fedsciml.methods.fipa` — ``fipa`` (:class:`~fedsciml.methods.fipa.FIPAConfig`,
  :data:`~fedsciml.methods.fipa.PAPER_PRESET`, ``fipa_strategy``);
* :mod:`fedsciml.methods.averaging` — ``fedavg`` and ``fedprox`` (:class:`~fedsciml.methods.averaging.FedAvgConfig`,
  :class:`~fedsciml.methods.averaging.FedProxConfig`, ``fedavg_strategy``/``fedprox_strategy``);
* :mod:`fedsciml.methods.oneshot` — ``one-shot`` (:class:`~fedsciml.methods.oneshot.OneShotConfig`,
  ``one_shot_strategy``);
* :mod:`fedsciml.methods.centralized` — ``centralized`` (:class:`~fedsciml.methods.centralized.CentralizedConfig`,
  its runner: pooled data, no strategy);
* :mod:`fedsciml.methods.fedopt` — ``fedavgm``, ``fedadam``, ``fedyogi``.

Shared, not a method: FIPA's and FedAvg/FedProx's client half, the one local step both run
(:mod:`fedsciml.methods.local`), the aggregators (:mod:`fedsciml.methods.aggregators`) and what the strategy
factories share (:mod:`fedsciml.methods.run`).  The round loop that runs a factory, and collocation resampling,
are the runtime's (:func:`fedsciml.runtime.simulate.run_strategy`, :mod:`fedsciml.runtime.resample`).

Importing this package registers each module's entries in :data:`fedsciml.runtime.driver.METHODS`, in the fixed
order of ``_MODULES`` (the order the command line's help lists the methods' options in), and, through the imports,
the methods' client handlers in the runtime client's handler table.  A method outside the package (a plugin,
``examples/fedavg_lr_schedule.py``) calls :func:`~fedsciml.runtime.driver.register_method` with its
``Method``.  The command line imports this package only once a method is chosen (``python -m fedsciml --help`` imports no method).
"""
from __future__ import annotations

from fedsciml.methods import averaging, centralized, fedopt, fipa, gn, oneshot
from fedsciml.methods.averaging import FedAvgConfig, FedProxConfig
from fedsciml.methods.centralized import CentralizedConfig
from fedsciml.methods.fipa import PAPER_PRESET, FIPAConfig
from fedsciml.methods.gn import GNConfig
from fedsciml.methods.oneshot import OneShotConfig
from fedsciml.runtime.driver import METHODS, Method, available_methods, get_method, register_method

__all__ = ["METHODS", "PAPER_PRESET", "CentralizedConfig", "FIPAConfig", "FedAvgConfig", "FedProxConfig", "GNConfig",
           "Method", "OneShotConfig", "available_methods", "get_method", "register_method"]

_MODULES = (centralized, gn, fipa, averaging, oneshot, fedopt)  # the registration order

for _module in _MODULES:
    for _entry in _module.METHOD_ENTRIES:
        if _entry.name not in METHODS:  # importing twice (reload) registers nothing twice
            register_method(_entry)
