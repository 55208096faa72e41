"""One-shot ridge fusion on sufficient statistics: the linear case of federated Gauss–Newton.

For the linear residual ``r(w) = A_k w − b_k`` the Gauss–Newton statistics at
``w = 0`` are ``H = A_kᵀA_k = G_k`` and ``g = A_kᵀ(A_k·0 − b_k) = −h_k``; they
come from the shared :meth:`fedsciml.objective.LinearLeastSquares.gn_stats`
(the one place a Gram matrix is formed), travel as the packed upper triangle
(:func:`fedsciml.linalg.pack_upper`, ``d(d+1)/2`` floats) plus ``h_k``
(``d`` floats), and the server solves ``(ΣG_k + σI) w = Σh_k`` with
:func:`fedsciml.linalg.damped_solve` (Cholesky) — the exact federated GN step
from 0 with damping σ, which for a quadratic is the minimizer.

Messages (``dict`` of tensors, validated by :data:`SCHEMA` before use):

* ``G`` — ``[d(d+1)/2]`` packed upper triangle of ``A_kᵀA_k`` (or of its
  increment ``ΔG`` for new rows, or a projected ``m×m`` Gram),
* ``h`` — ``[d]`` moment vector ``A_kᵀb_k`` (or ``Δh``),
* ``n`` — ``[1]`` sample count (> 0), optional: a DP message omits it, since
  the exact count of a private dataset is not itself private.

A malformed message (not a real floating dtype, wrong shape, non-finite,
count not in (0, 2^53], or — for exact statistics, i.e. with a count — a
``G`` that is not positive semidefinite by the cheap necessary conditions of
:func:`fedsciml.federated.messages.psd_violation`) raises
:class:`~fedsciml.federated.messages.MessageRejected`; it is never summed in.
A DP message (no count) carries Gaussian noise, so its ``G`` may be
indefinite: the server repairs the noisy sum instead (:func:`fedsciml.ridge.dp.psd_repair`).
"""
from __future__ import annotations

from typing import Mapping

import torch

from fedsciml import linalg
from fedsciml.federated.messages import Field, MessageRejected, Schema, floats_in
from fedsciml.objective import LinearLeastSquares

DTYPE = torch.float64

SCHEMA = Schema({"G": Field(("q",), psd="packed"), "h": Field(("d",)), "n": Field((1,), positive=True)})
DP_SCHEMA = Schema({"G": Field(("q",)), "h": Field(("d",))})  # noisy statistics: no count, G may be indefinite


class SingularGram(ValueError):
    """``ΣG_k + σI`` is not positive definite (σ = 0 on a rank-deficient Gram)."""


def client_message(A: torch.Tensor, b: torch.Tensor, *, with_count: bool = True) -> dict:
    """Client k's one message ``{G: pack(A_kᵀA_k), h: A_kᵀb_k, n}``; also the streaming update for new rows."""
    obj = LinearLeastSquares(A, b)
    st = obj.gn_stats(A.new_zeros(obj.n_params))  # H = AᵀA, g = Aᵀ(A·0 − b) = −h
    msg = {"G": linalg.pack_upper(st.H), "h": -st.g}
    if with_count:
        msg["n"] = torch.tensor([float(st.n)], dtype=A.dtype, device=A.device)
    return msg


def message_dim(msg: Mapping) -> int:
    return int(msg["h"].shape[-1])


def validate(msg, client_id, d: int, dtype=None) -> dict:
    """Check one message against :data:`SCHEMA` (:data:`DP_SCHEMA` without a count) for dimension d
    (raises MessageRejected)."""
    schema = SCHEMA if isinstance(msg, dict) and "n" in msg else DP_SCHEMA
    return schema.validate(msg, client_id, dtype=dtype, d=int(d), q=linalg.n_upper(int(d)))


def check_sigma(sigma) -> float:
    sigma = float(sigma)
    if not (sigma >= 0) or sigma != sigma or sigma == float("inf"):
        raise ValueError(f"regularization sigma must be a finite number ≥ 0, got {sigma}")
    return sigma


def ridge_solve(G: torch.Tensor, h: torch.Tensor, sigma) -> torch.Tensor:
    """``(G + σI)⁻¹ h`` by Cholesky (σ a scalar or a batch), with a clear error when it is singular."""
    if torch.is_tensor(sigma):
        if bool((sigma < 0).any()) or not bool(torch.isfinite(sigma).all()):
            raise ValueError(f"regularization sigma must be finite and ≥ 0, got {sigma.tolist()}")
    else:
        sigma = check_sigma(sigma)
    if G.shape[-1] != G.shape[-2] or h.shape[-1] != G.shape[-1]:
        raise ValueError(f"Gram matrix {tuple(G.shape)} and moment vector {tuple(h.shape)} do not match")
    try:
        return linalg.damped_solve(G, h, sigma)
    except linalg.NotPositiveDefinite as e:
        raise SingularGram(f"G + σI is not positive definite with σ={sigma if not torch.is_tensor(sigma) else sigma.tolist()} "
                           f"({e}); the pooled Gram matrix is singular (fewer informative rows than d={G.shape[-1]} "
                           f"features or collinear features): use σ > 0") from None


class FusionServer:
    """Receives validated client statistics, keeps their sums, solves for any σ.

    ``receive(cid, msg)`` stores a client's statistics; ``update(cid, msg)``
    adds a streaming increment ``(ΔG, Δh)`` for new rows to that client's
    running statistics.  ``receive_all`` validates a whole round and returns
    ``(accepted ids, {rejected id: reason})``.  Clients that never answered
    (dropout) simply do not appear: :meth:`solve` is the exact centralized
    ridge model on the data of the clients present.
    """

    def __init__(self, d: int, dtype=DTYPE, device=None):
        if int(d) != d or d < 1:
            raise ValueError(f"feature dimension d must be a positive integer, got {d}")
        self.d = int(d)
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else None
        self.G = {}   # cid -> packed [q]
        self.h = {}   # cid -> [d]
        self.n = {}   # cid -> float or None
        self._Gsum = None  # running sums (packed), so fusion never stacks K messages
        self._hsum = None
        self.floats_up = 0

    def _add(self, G, h, sign=1.0):
        if self._Gsum is None:
            self._Gsum, self._hsum = torch.zeros_like(G), torch.zeros_like(h)
        self._Gsum.add_(G, alpha=sign)
        self._hsum.add_(h, alpha=sign)

    # --- receiving -------------------------------------------------------------
    def _checked(self, cid, msg):
        msg = validate(msg, cid, self.d)
        dev = self.device or msg["G"].device
        return {k: v.to(device=dev, dtype=self.dtype) for k, v in msg.items()}

    def receive(self, cid, msg):
        msg = self._checked(cid, msg)
        if cid in self.G:  # a client re-sending replaces its statistics
            self._add(self.G[cid], self.h[cid], -1.0)
        self.G[cid], self.h[cid] = msg["G"], msg["h"]
        self._add(msg["G"], msg["h"])
        self.n[cid] = float(msg["n"][0]) if "n" in msg else None
        self.floats_up += floats_in(msg)

    def update(self, cid, msg):
        """Streaming: add ``(ΔG, Δh)`` of new rows at client ``cid`` (a first update is a receive)."""
        if cid not in self.G:
            return self.receive(cid, msg)
        msg = self._checked(cid, msg)
        self.G[cid] = self.G[cid] + msg["G"]
        self.h[cid] = self.h[cid] + msg["h"]
        self._add(msg["G"], msg["h"])
        if "n" in msg and self.n[cid] is not None:
            self.n[cid] += float(msg["n"][0])
        self.floats_up += floats_in(msg)

    def receive_all(self, messages: Mapping):
        ok, bad = [], {}
        for cid, msg in messages.items():
            try:
                self.receive(cid, msg)
                ok.append(cid)
            except MessageRejected as e:
                bad[cid] = e.reason
        return ok, bad

    def drop(self, cid):
        if cid in self.G:
            self._add(self.G[cid], self.h[cid], -1.0)
        for store in (self.G, self.h, self.n):
            store.pop(cid, None)

    # --- statistics ------------------------------------------------------------
    @property
    def clients(self) -> list:
        return list(self.G)

    def _need_clients(self):
        if not self.G:
            raise ValueError("no client statistics received (every client dropped out or was rejected); "
                             "cannot fit a model")

    def totals(self):
        """``(G [d, d], h [d])`` summed over the clients present."""
        self._need_clients()
        return linalg.unpack_upper(self._Gsum, self.d), self._hsum.clone()

    def stacked(self):
        """Per-client ``(G_k [K, d, d], h_k [K, d])`` in :attr:`clients` order."""
        self._need_clients()
        return (linalg.unpack_upper(torch.stack(list(self.G.values())), self.d),
                torch.stack(list(self.h.values())))

    def stacked_packed(self):
        """Per-client ``(packed G_k [K, d(d+1)/2], h_k [K, d])`` — no d×d matrix per client is formed."""
        self._need_clients()
        return torch.stack(list(self.G.values())), torch.stack(list(self.h.values()))

    def solve(self, sigma) -> torch.Tensor:
        G, h = self.totals()
        return ridge_solve(G, h, sigma)


def fuse(messages: Mapping, sigma, d: int | None = None, dtype=DTYPE) -> torch.Tensor:
    """One-shot fusion of ``{cid: message}``: validate, sum, solve; raises on any rejected message."""
    if not messages:
        raise ValueError("no client messages: at least one client must answer")
    d = d if d is not None else message_dim(next(iter(messages.values())))
    server = FusionServer(d, dtype=dtype)
    for cid, msg in messages.items():
        server.receive(cid, msg)
    return server.solve(sigma)


def pooled_ridge(A: torch.Tensor, b: torch.Tensor, sigma) -> torch.Tensor:
    """The centralized oracle on pooled data (same Cholesky path)."""
    st = LinearLeastSquares(A, b).gn_stats(A.new_zeros(A.shape[1]))
    return ridge_solve(st.H, -st.g, sigma)
