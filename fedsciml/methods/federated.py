"""Removed: the federated methods' runners are strategy factories in their own modules.

Importing this module raises one :class:`~fedsciml.options.MovedName` line saying where each of its names went,
as ``from fedsciml.options import GNConfig`` does for the configurations (CHANGELOG, "Changed").
"""
from fedsciml.options import MovedName

raise MovedName(
    "fedsciml.methods.federated was removed: each federated method is one module with its strategy "
    "factory, run by fs.solve(problem, method=NAME) or fedsciml.runtime.driver.METHODS[NAME] — run_gn -> "
    "fedsciml.methods.gn.gn_strategy, run_fipa -> fedsciml.methods.fipa.fipa_strategy, run_fedavg/run_fedprox -> "
    "fedsciml.methods.averaging.fedavg_strategy/fedprox_strategy, run_one_shot -> "
    "fedsciml.methods.oneshot.one_shot_strategy; capped_rank -> fedsciml.methods.run; PAPER_PRESET and the "
    "configurations -> their method modules (also fedsciml.methods.NAME)")
