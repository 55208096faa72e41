"""The methods: each one's configuration, strategy, aggregator and client-side handlers, registered with the runtime.

Each method's typed configuration is declared in its own module (:class:`~fedsciml.methods.gn.GNConfig`,
:class:`~fedsciml.methods.fipa.FIPAConfig` with :data:`~fedsciml.methods.fipa.PAPER_PRESET`,
:class:`~fedsciml.methods.averaging.FedAvgConfig`, :class:`~fedsciml.methods.averaging.FedProxConfig`,
:class:`~fedsciml.methods.oneshot.OneShotConfig`, :class:`~fedsciml.methods.centralized.CentralizedConfig`) and
re-exported here.  Importing this package registers the built-in solve methods in
:data:`fedsciml.runtime.driver.METHODS` — the federated ones as strategy factories
(:mod:`fedsciml.methods.federated`, run by :func:`fedsciml.methods.run.strategy_runner`), ``centralized`` with its
runner; no entry is a ``"module:function"`` string — and the methods' client handlers in the runtime client's
handler table: FIPA's and FedAvg/FedProx's ``update``
(:mod:`fedsciml.methods.local`), exact GN's matrix-free and multi-trial queries (:mod:`fedsciml.methods.gn`) and
one-shot's (:mod:`fedsciml.methods.oneshot`).  The command line imports this package only once a method is chosen
(``python -m fedsciml --help`` imports no method).
"""
from __future__ import annotations

from fedsciml.methods import averaging as _averaging
from fedsciml.methods import centralized as _centralized
from fedsciml.methods import fipa as _fipa
from fedsciml.methods import gn as _gn
from fedsciml.methods import oneshot as _oneshot
from fedsciml.methods.averaging import FedAvgConfig, FedProxConfig
from fedsciml.methods.centralized import CentralizedConfig
from fedsciml.methods.fipa import PAPER_PRESET, FIPAConfig
from fedsciml.methods.gn import GNConfig
from fedsciml.methods.oneshot import OneShotConfig
from fedsciml.runtime.driver import METHODS, MethodSpec, available_methods, get_method, register_method
from fedsciml.methods import federated as _federated
from fedsciml.methods.run import strategy_runner

__all__ = ["METHODS", "PAPER_PRESET", "CentralizedConfig", "FIPAConfig", "FedAvgConfig", "FedProxConfig", "GNConfig",
           "MethodSpec", "OneShotConfig", "available_methods", "get_method", "register_method"]

if "centralized" not in METHODS:  # importing twice (reload) registers nothing twice
    register_method("centralized", CentralizedConfig, _centralized.run_centralized,
                    "pooled data, Levenberg–Marquardt / Adam / L-BFGS (the reference, not federated)",
                    federated=False, settings=_centralized.settings)

_FEDERATED = (  # name, configuration, strategy factory, description, settings text
    ("gn", GNConfig, _federated.gn_strategy,
     "exact federated Gauss–Newton / Levenberg–Marquardt (clients send JᵀJ, Jᵀr)", _gn.settings),
    ("fipa", FIPAConfig, _federated.fipa_strategy,
     "Fisher-informed parameterwise aggregation (full, --rank r, --adaptive, --merge qr)", _fipa.settings),
    ("fedavg", FedAvgConfig, _federated.fedavg_strategy, "FedAvg, data-size weighted average of local updates", None),
    ("fedprox", FedProxConfig, _federated.fedprox_strategy, "FedProx, FedAvg with a proximal term μ",
     _averaging.fedprox_settings),
    ("one-shot", OneShotConfig, _federated.one_shot_strategy,
     "one-shot fusion of the clients' Gauss–Newton statistics (one-shot ridge for linear residuals)",
     _oneshot.settings),
)
for _name, _config, _build, _description, _settings in _FEDERATED:
    if _name not in METHODS:
        register_method(_name, _config, strategy_runner(_config, _build), _description, settings=_settings)

from fedsciml.methods import local as _local  # noqa: E402,F401  (registers FIPA's and FedAvg's client handler)
from fedsciml.methods import fedopt as _fedopt  # noqa: E402,F401  (FedAvgM, FedAdam, FedYogi)
