"""Aggregators: one round's validated client messages → the next global parameters.

The interface is deliberately narrow (in the spirit of Flower's ``Strategy``):
an aggregator declares the :class:`~fedsciml.federated.messages.Schema` its
clients must send, and ``aggregate(theta, messages)`` returns the new global
parameters.  Aggregators never see client data, only messages.  Messages are
validated here, before anything is summed: a malformed one raises
:class:`MessageRejected` from :meth:`Aggregator.validate` and the caller
decides whether to drop that client for the round.

Message fields (all plain tensors):

* every aggregator: ``n`` — shape [1], the client's sample count (> 0)
* FedAvg / FedProx: ``delta`` [p] — local update ``θ_m − θ``
* FIPA full rank:   ``delta`` [p], ``H`` [p(p+1)/2] — upper triangle of the client curvature
* FIPA low rank:    ``delta`` [p], ``U`` [p, r], ``lam`` [r] — top-r eigenpairs (r may differ per client)
"""
from __future__ import annotations

from typing import Mapping

import torch

from fedsciml import linalg
from fedsciml.curvature import COMPLEMENTS, fipa_merge_dense, fipa_merge_lowrank
from fedsciml.federated.messages import Field, MessageRejected, Schema, floats_in


class Aggregator:
    name = "aggregator"

    def schema(self) -> Schema:  # pragma: no cover - interface
        raise NotImplementedError

    def validate(self, messages: Mapping, p: int, dtype=None) -> tuple[dict, dict]:
        """Split messages into ``(accepted, rejected)``; rejected maps client id → reason."""
        ok, bad = {}, {}
        schema = self.schema()
        for cid, msg in messages.items():
            try:
                ok[cid] = schema.validate(msg, cid, dtype=dtype, p=p)
            except MessageRejected as e:
                bad[cid] = e.reason
        return ok, bad

    def aggregate(self, theta: torch.Tensor, messages: Mapping) -> torch.Tensor:  # pragma: no cover
        raise NotImplementedError

    @staticmethod
    def sample_weights(messages: Mapping) -> dict:
        """``N_m / N`` over the clients present."""
        n = {cid: float(m["n"].reshape(-1)[0]) for cid, m in messages.items()}
        tot = sum(n.values())
        return {cid: v / tot for cid, v in n.items()}

    @staticmethod
    def floats_up(messages: Mapping) -> int:
        return sum(floats_in(m) for m in messages.values())


class FedAvgAggregator(Aggregator):
    """FedAvg (FIPA paper Eq. 3): ``θ + η_s Σ (N_m/N) Δθ_m``.  FedProx uses the same server rule."""

    name = "fedavg"

    def __init__(self, server_lr: float = 1.0):
        if not server_lr > 0:
            raise ValueError(f"server learning rate must be > 0, got {server_lr}")
        self.server_lr = server_lr

    def schema(self):
        return Schema({"delta": Field(("p",)), "n": Field((1,), positive=True)})

    def aggregate(self, theta, messages):
        if not messages:
            raise ValueError("no client messages to aggregate")
        w = self.sample_weights(messages)
        step = sum(w[c] * m["delta"] for c, m in messages.items())
        return theta + self.server_lr * step


class FIPAAggregator(Aggregator):
    """FIPA: ``θ + η Σ_m B_m Δθ_m`` with ``B_m = (Σ_j w_j Ĥ_j)^† w_m Ĥ_m`` (paper Eq. 6).

    ``curvature='full'``: clients send the packed upper triangle of ``H_m``;
    ``'lowrank'``: top-r eigenpairs ``(U_m, λ_m)``.  ``merge='pinv'`` forms the
    p×p pseudo-inverse (small p); ``merge='qr'`` is the thin-QR merge of Eq. (13)
    with regularization ``beta`` and step ``gamma`` (no p×p matrix; low rank only).
    ``weighting='sum'`` for sum-form curvatures ``J_mᵀJ_m`` (PDE/fitting; the
    ``N_m/N`` factors cancel), ``'samples'`` for mean-form curvatures (images).
    ``complement`` (thin-QR merge only): the orthogonal-complement correction,
    ``'none'``, ``'fedavg'`` or ``'tail'`` (see :func:`fedsciml.curvature.fipa_merge_lowrank`).
    """

    name = "fipa"

    def __init__(self, curvature: str = "lowrank", merge: str = "pinv", beta: float = 0.0, gamma: float = 1.0,
                 eta: float = 1.0, weighting: str = "sum", rtol: float | None = None, complement: str = "none"):
        if curvature not in ("full", "lowrank"):
            raise ValueError(f"FIPA curvature must be 'full' or 'lowrank', got {curvature!r}")
        if merge not in ("pinv", "qr"):
            raise ValueError(f"FIPA merge must be 'pinv' or 'qr', got {merge!r}")
        if merge == "qr" and curvature == "full":
            raise ValueError("the thin-QR merge works on low-rank sketches; use curvature='lowrank' or merge='pinv'")
        if beta < 0:
            raise ValueError(f"FIPA regularization beta must be ≥ 0, got {beta}")
        if not gamma > 0 or not eta > 0:
            raise ValueError(f"FIPA steps must be > 0, got gamma={gamma}, eta={eta}")
        if weighting not in ("sum", "samples"):
            raise ValueError(f"weighting must be 'sum' or 'samples', got {weighting!r}")
        if complement not in COMPLEMENTS:
            raise ValueError(f"FIPA complement must be one of {', '.join(COMPLEMENTS)}, got {complement!r}")
        if complement != "none" and merge != "qr":
            raise ValueError("the orthogonal-complement correction is an option of the thin-QR merge (merge='qr')")
        self.complement = complement
        self.curvature, self.merge = curvature, merge
        self.beta, self.gamma, self.eta, self.weighting, self.rtol = beta, gamma, eta, weighting, rtol

    def schema(self):
        f = {"delta": Field(("p",)), "n": Field((1,), positive=True),
             # optional (fedsciml.federated.methods): ‖∇F_m‖ of the client's mean loss (adaptive FIPA) and
             # ½‖r_m‖² at the broadcast θ (the server's step acceptance)
             "gnorm": Field((1,), optional=True), "loss": Field((1,), optional=True)}
        if self.curvature == "full":
            f["H"] = Field((None,))
        else:
            f["U"] = Field(("p", "r"))
            f["lam"] = Field(("r",))
        return Schema(f)

    def validate(self, messages, p, dtype=None):
        ok, bad = super().validate(messages, p, dtype)
        if self.curvature == "full":
            for cid in list(ok):
                if ok[cid]["H"].numel() != linalg.n_upper(p):
                    bad[cid] = f"field 'H' has {ok[cid]['H'].numel()} entries, the packed upper triangle of a {p}×{p} matrix has {linalg.n_upper(p)}"
                    del ok[cid]
        else:
            for cid in list(ok):
                if bool((ok[cid]["lam"] < 0).any()):
                    bad[cid] = "field 'lam' has negative eigenvalues; a Gauss–Newton/Fisher curvature is PSD"
                    del ok[cid]
        return ok, bad

    def _weights(self, messages):
        if self.weighting == "sum":
            return [1.0] * len(messages)
        w = self.sample_weights(messages)
        return [w[c] for c in messages]

    def aggregate(self, theta, messages):
        if not messages:
            raise ValueError("no client messages to aggregate")
        w = self._weights(messages)
        deltas = [m["delta"] for m in messages.values()]
        p = theta.numel()
        if self.curvature == "full":
            Hs = [linalg.unpack_upper(m["H"], p) for m in messages.values()]
            step = fipa_merge_dense(Hs, deltas, w, self.rtol)
            if self.beta > 0:  # regularized dense merge
                H = sum(wi * Hi for wi, Hi in zip(w, Hs))
                b = sum(wi * (Hi @ di) for wi, Hi, di in zip(w, Hs, deltas))
                step = linalg.damped_solve(H, b, self.beta)
            return theta + self.eta * self.gamma * step
        Us = [m["U"] for m in messages.values()]
        lams = [m["lam"] for m in messages.values()]
        if self.merge == "qr":
            sw = None
            if self.complement == "fedavg":
                sw = self.sample_weights(messages)
                sw = [sw[c] for c in messages]
            step = fipa_merge_lowrank(Us, lams, deltas, w, beta=self.beta, gamma=self.gamma, rtol=self.rtol,
                                      complement=self.complement, sample_weights=sw)
            return theta + self.eta * step
        Hs = [(U * l) @ U.T for U, l in zip(Us, lams)]
        return theta + self.eta * self.gamma * fipa_merge_dense(Hs, deltas, w, self.rtol)
