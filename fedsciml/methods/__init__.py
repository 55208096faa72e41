"""The methods: each one's configuration, strategy, aggregator and client-side handlers, registered with the runtime.

Each method's typed configuration is declared in its own module (:class:`~fedsciml.methods.gn.GNConfig`,
:class:`~fedsciml.methods.fipa.FIPAConfig` with :data:`~fedsciml.methods.fipa.PAPER_PRESET`,
:class:`~fedsciml.methods.averaging.FedAvgConfig`, :class:`~fedsciml.methods.averaging.FedProxConfig`,
:class:`~fedsciml.methods.oneshot.OneShotConfig`, :class:`~fedsciml.methods.centralized.CentralizedConfig`) and
re-exported here.  Importing this package registers the built-in solve methods in
:data:`fedsciml.runtime.driver.METHODS` (the runners of :mod:`fedsciml.methods.federated` are imported on first
use) and the methods' client
handlers in the runtime client's handler table: FIPA's and FedAvg/FedProx's ``update``
(:mod:`fedsciml.methods.local`), exact GN's matrix-free and multi-trial queries (:mod:`fedsciml.methods.gn`) and
one-shot's (:mod:`fedsciml.methods.oneshot`).
"""
from __future__ import annotations

from fedsciml.methods.averaging import FedAvgConfig, FedProxConfig
from fedsciml.methods.centralized import CentralizedConfig
from fedsciml.methods.fipa import PAPER_PRESET, FIPAConfig
from fedsciml.methods.gn import GNConfig
from fedsciml.methods.oneshot import OneShotConfig
from fedsciml.runtime.driver import METHODS, MethodSpec, available_methods, get_method, register_method

__all__ = ["METHODS", "PAPER_PRESET", "CentralizedConfig", "FIPAConfig", "FedAvgConfig", "FedProxConfig", "GNConfig",
           "MethodSpec", "OneShotConfig", "available_methods", "get_method", "register_method"]

_BUILTIN = (  # name, configuration, runner, description, federated, settings text (imported on first use)
    ("centralized", CentralizedConfig, "fedsciml.methods.centralized:run_centralized",
     "pooled data, Levenberg–Marquardt / Adam / L-BFGS (the reference, not federated)", False,
     "fedsciml.methods.centralized:settings"),
    ("gn", GNConfig, "fedsciml.methods.federated:run_gn",
     "exact federated Gauss–Newton / Levenberg–Marquardt (clients send JᵀJ, Jᵀr)", True, "fedsciml.methods.gn:settings"),
    ("fipa", FIPAConfig, "fedsciml.methods.federated:run_fipa",
     "Fisher-informed parameterwise aggregation (full, --rank r, --adaptive, --merge qr)", True,
     "fedsciml.methods.fipa:settings"),
    ("fedavg", FedAvgConfig, "fedsciml.methods.federated:run_fedavg",
     "FedAvg, data-size weighted average of local updates", True, None),
    ("fedprox", FedProxConfig, "fedsciml.methods.federated:run_fedprox",
     "FedProx, FedAvg with a proximal term μ", True, "fedsciml.methods.averaging:fedprox_settings"),
    ("one-shot", OneShotConfig, "fedsciml.methods.federated:run_one_shot",
     "one-shot fusion of the clients' Gauss–Newton statistics (one-shot ridge for linear residuals)", True,
     "fedsciml.methods.oneshot:settings"),
)
for _name, _config, _runner, _description, _federated, _settings in _BUILTIN:
    if _name not in METHODS:  # importing twice (reload) registers nothing twice
        register_method(_name, _config, _runner, _description, federated=_federated, settings=_settings)

from fedsciml.methods import local as _local  # noqa: E402,F401  (registers FIPA's and FedAvg's client handler)
from fedsciml.methods import oneshot as _oneshot  # noqa: E402,F401  (registers the one-shot client handlers)
from fedsciml.methods import fedopt as _fedopt  # noqa: E402,F401  (FedAvgM, FedAdam, FedYogi)
