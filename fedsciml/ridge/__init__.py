"""One-shot federated ridge regression on sufficient statistics (the linear case of federated GN).

* :mod:`~fedsciml.core.stats` — client messages ``(pack(A_kᵀA_k), A_kᵀb_k)``, validation, fusion, streaming.
* :mod:`~fedsciml.core.dp` — Gaussian mechanism on the pair (G, h): joint sensitivity, symmetric noise, PSD repair.
* :mod:`~fedsciml.core.sketch` — shared random projections (Gaussian, sparse, SRHT).
* :mod:`~fedsciml.core.loco` — leave-one-client-out CV over a σ grid, batched.
* :mod:`~fedsciml.ridge.baselines` — FedAvg / FedProx / DP-FedAvg.
* :mod:`~fedsciml.ridge.preset` — the ``ridge`` command's preset: one-shot, the pooled reference, the baselines.
* :mod:`~fedsciml.ridge.protocol` — the whole one-shot round; :class:`FederatedRidge` — the estimator.
"""
from fedsciml.core.dp import DPConfig, psd_repair, stats_sensitivity
from fedsciml.ridge.protocol import dropout_mask, one_shot
from fedsciml.core.stats import SCHEMA, FusionServer, SingularGram, client_message, fuse, pooled_ridge, ridge_solve

__all__ = ["FederatedRidge", "FederatedRidgeCV", "site_statistics", "FusionServer", "SCHEMA", "SingularGram", "DPConfig", "client_message", "fuse",
           "one_shot", "dropout_mask", "pooled_ridge", "ridge_solve", "psd_repair", "stats_sensitivity"]

_LAZY = {"FederatedRidge", "FederatedRidgeCV", "site_statistics"}


def __getattr__(name):
    """The scikit-learn estimators are imported on first use: importing scikit-learn costs ~1 s, which every
    process that imports the ridge runtime paid before — the CLI's start-up and each message a stock Flower
    SuperNode answers (a fresh ClientApp process per message)."""
    if name in _LAZY:
        from fedsciml.ridge import estimator

        return getattr(estimator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

