"""What the methods' strategy factories share: the clients' local training from a typed configuration
(:func:`local_config`) and the cap on a sketch or preconditioner rank (:func:`capped_rank`).  The round loop that
runs a factory is the runtime's (:func:`fedsciml.runtime.simulate.run_strategy`, called by the driver for every
method declared with a ``strategy``, :class:`~fedsciml.runtime.driver.Method`).
"""
from __future__ import annotations

import logging

from fedsciml.methods.local import LocalConfig
from fedsciml.options import display, option
from fedsciml.runtime.simulate import RunContext

__all__ = ["RunContext", "capped_rank", "local_config"]


def local_config(cfg, prox: float = 0.0) -> LocalConfig:
    """The clients' local training from a typed configuration's :class:`~fedsciml.options.LocalOptions` fields
    (``prox``: FedProx's μ)."""
    # built from the typed LocalOptions, which checked these values (a hand-built LocalConfig calls .validate())
    return LocalConfig(solver=cfg.local, steps=cfg.local_steps, lr=cfg.lr, damping=cfg.local_damping,
                       prox=prox, loss=getattr(cfg, "local_loss", "mean"))


def subspace_damping_option():
    """The option ``subspace_damping`` of LM's subspace step, the same for centralized ``lm`` and ``gn`` (one
    text, one set of choices: :func:`fedsciml.core.lm.LevenbergMarquardt` reads it for both)."""
    return option("lm", "the subspace step's preconditioner damping γ: lm (LM's μ) or adapt (three directions P_γ⁻¹g "
                        "at γ/10, γ, 10γ in the span, γ moved to the best one: Martens & Grosse 2015 §6.6; two more "
                        "product columns)", str, choices=("lm", "adapt"))


def subspace_inapplicable(subspace: int, out: dict) -> None:
    """The options the subspace step's setting leaves idle, added to ``out`` (``inapplicable``'s ``{option: why}``),
    the same for centralized ``lm`` and ``gn``: ``subspace_damping`` without the step; ``cg_iters`` and
    ``momentum`` with it (unless ``out`` already says why)."""
    if subspace == 0:
        out["subspace_damping"] = f"it sets the subspace step, which is off ({display('subspace')} 0)"
    else:
        out.setdefault("cg_iters", f"the subspace step runs no CG ({display('subspace')} is {subspace})")
        out.setdefault("momentum", f"the subspace step carries its own momentum (the last accepted steps are "
                                   f"directions of it; {display('subspace')} is {subspace})")


def capped_rank(rank: int, p: int, name: str) -> int:
    """A sketch or preconditioner rank above the model's ``p`` parameters holds nothing more than rank ``p``:
    capped there, with one log line (a rank of 10¹² would otherwise allocate and iterate for ever).  FIPA's rank,
    gn's and the centralized solver's Nyström rank."""
    if rank > p:
        logging.getLogger("fedsciml").warning("%s=%s is above the model's %s parameters; capped at %s", name, rank,
                                              p, p)
        return int(p)
    return int(rank)
