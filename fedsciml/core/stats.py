"""One-shot ridge fusion on sufficient statistics: the linear case of federated Gauss–Newton.

For the linear residual ``r(w) = A_k w − b_k`` the Gauss–Newton statistics at
``w = 0`` are ``H = A_kᵀA_k = G_k`` and ``g = A_kᵀ(A_k·0 − b_k) = −h_k``.  A
client sends them once in one of two forms (the same information):

* **Gram form** ``{G, h, n}``: ``G`` the packed upper triangle of ``A_kᵀA_k``
  (``d(d+1)/2`` floats, formed by :func:`fedsciml.core.linalg.gram_packed`, a
  blocked ``syrk`` that never forms the lower triangle), ``h = A_kᵀb_k``
  (``d`` floats).  Also the streaming increment ``(ΔG, Δh)`` of new rows, or a
  projected ``m×m`` Gram.
* **Square-root form** ``{R, z, n}``: the thin QR ``A_k = Q_kR_k``,
  ``R`` ``[m, d]`` with ``m = min(n_k, d)`` and ``z = Q_kᵀb_k`` (``m``
  floats), so ``R_kᵀR_k = G_k`` and ``R_kᵀz_k = h_k`` — fewer floats than the
  triangle when ``n_k < d/2``, and what fast leave-one-client-out CV needs
  (:mod:`fedsciml.core.loco`); the server then forms ``ΣR_kᵀR_k`` itself.

``n`` ``[1]`` is the sample count (> 0), optional: a DP message omits it, since
the exact count of a private dataset is not itself private.  The server solves
``(ΣG_k + σI) w = Σh_k`` by Cholesky (:func:`ridge_solve`) — the exact
federated GN step from 0 with damping σ, which for a quadratic is the minimizer.

A malformed message (wrong shape, not a real floating dtype — integer, bool
and complex tensors are rejected by name —, non-finite, non-positive count,
or exact Gram-form statistics, i.e. with a count, whose ``G`` has a negative
diagonal entry: O(d) per message) raises
:class:`~fedsciml.core.schema.MessageRejected`; it is never summed in.  So does a finite entry above ``√max`` of the
server's dtype (:func:`~fedsciml.core.schema.max_magnitude`, the bound of every message schema) on ``G``'s
diagonal, ``h``, ``R`` or ``z`` (O(d) per Gram-form message): such a client would swamp the others below its
round-off and — one client sending 1e300 everywhere is a rank-one Gram — leave the pooled Gram singular, blamed on
the pooling instead of on it.  When the solve fails anyway, :meth:`FusionServer.solve` names a client whose ``G``
is no Gram matrix (checked only then).
A DP message (no count) carries Gaussian noise, so its ``G`` may be
indefinite: the server repairs the noisy sum (:func:`fedsciml.core.dp.psd_repair`);
a square-root message's ``RᵀR`` is PSD by construction.  :meth:`FusionServer.receive_all` checks a round's messages for
finiteness *through their sum* (one pass over the data, no per-message scan):
a non-finite sum is traced back to the offending messages, which are rejected,
and the sum is rebuilt from the others.

The same sums for a nonlinear residual, streamed: :func:`chunked_gn_stats` accumulates ``JᵀJ``, ``Jᵀr`` and
``½‖r‖²`` over blocks of rows (:func:`row_blocks`), holding one block of J at a time — the ``chunked`` form of
:mod:`fedsciml.core.forms`, for n whose Jacobian does not fit in memory.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Hashable, Iterator, Mapping, Union

import torch

from torch.func import vmap

from fedsciml.core import linalg
from fedsciml.core.schema import (MAX_COUNT, Field, MessageRejected, Schema, floats_in, max_magnitude,
                                   packed_diagonal_index, psd_violation)
from fedsciml.core.objective import GNStats, LeastSquares, LinearLeastSquares, PointwiseLeastSquares

DTYPE = torch.float64
FORMS = ("gram", "sqrt")

ClientId = Hashable  # a client's id: the key of its message (an int in the runtime, any hashable here)
Message = Mapping[str, torch.Tensor]  # one client's statistics, field name -> tensor
Sigma = Union[float, torch.Tensor]  # a damping σ ≥ 0, or a batch of them
_Item = tuple[ClientId, str, torch.Tensor, torch.Tensor, Union[float, None]]  # (cid, form, G or R, h, n)

SCHEMA = Schema({"G": Field(("q",)), "h": Field(("d",)), "n": Field((1,), positive=True, optional=True)})
SQRT_SCHEMA = Schema({"R": Field(("m", "d")), "z": Field(("m",)), "n": Field((1,), positive=True, optional=True)})


def _structural(schema: Schema) -> Schema:
    """The schema without its per-entry value checks (finiteness and positivity are checked on the sums)."""
    return Schema({k: dataclasses.replace(f, finite=False, positive=False) for k, f in schema.fields.items()})


_FAST = {"gram": _structural(SCHEMA), "sqrt": _structural(SQRT_SCHEMA)}


class SingularGram(ValueError):
    """``ΣG_k + σI`` is not (numerically) positive definite (σ = 0 on a rank-deficient Gram)."""


def client_message(A: torch.Tensor, b: torch.Tensor, *, with_count: bool = True,
                   form: str = "gram") -> dict[str, torch.Tensor]:
    """Client k's one message; also the streaming update for new rows.

    ``form="gram"``: ``{G: pack(A_kᵀA_k), h: A_kᵀb_k, n}``; ``form="sqrt"``: ``{R, z: Q_kᵀb_k, n}`` from the
    thin QR ``A_k = Q_kR_k`` (see the module docstring).  Either is the linear GN statistics at 0 (the same
    numbers as :meth:`fedsciml.core.objective.LinearLeastSquares.gn_stats`, to round-off), computed directly.
    """
    if A.ndim != 2 or b.shape != (A.shape[0],):
        raise ValueError(f"need A [n, d] and b [n] with matching n, got A {tuple(A.shape)} and b {tuple(b.shape)}")
    if form == "gram":
        msg = {"G": linalg.gram_packed(A), "h": A.T @ b}
    elif form == "sqrt":
        Q, R = torch.linalg.qr(A, mode="reduced")
        msg = {"R": R, "z": Q.T @ b}
    else:
        raise ValueError(f"message form must be one of {', '.join(FORMS)}, got {form!r}")
    if with_count:
        msg["n"] = torch.tensor([float(A.shape[0])], dtype=A.dtype, device=A.device)
    return msg


def message_form(msg: Message) -> str:
    return "sqrt" if "R" in msg else "gram"


def message_dim(msg: Message) -> int:
    return int((msg["R"] if "R" in msg else msg["h"]).shape[-1])


def to_gn(msg: Message) -> dict[str, torch.Tensor]:
    """A Gram-form ridge message in the runtime's Gauss–Newton schema and sign: ``{H: G, g: −h}`` (+ ``n``).

    The runtime (:mod:`fedsciml.methods.gn`, :mod:`fedsciml.methods.oneshot`) declares one convention for the
    statistics of a residual ``r``: ``H = pack(JᵀJ)``, ``g = Jᵀr``; the ridge message is the same statistics of
    ``r = A w − b`` at ``w = 0`` with ``h = Aᵀb = −g``.  Negation is exact, so the round trip
    ``from_gn(to_gn(m))`` returns the same bits.
    """
    if "R" in msg:
        raise ValueError("to_gn takes the Gram form {G, h[, n]}; the square-root form {R, z} maps to the gn "
                         "square-root schema {R, s} with s = −z")
    out = {"H": msg["G"], "g": -msg["h"]}
    if "n" in msg:
        out["n"] = msg["n"]
    return out


def from_gn(msg: Message) -> dict[str, torch.Tensor]:
    """The inverse of :func:`to_gn`: ``{G: H, h: −g}`` (+ ``n``; a gn ``loss`` is dropped)."""
    out = {"G": msg["H"], "h": -msg["g"]}
    if "n" in msg:
        out["n"] = msg["n"]
    return out


def validate(msg: Message, client_id: ClientId, d: int, dtype: torch.dtype | None = None) -> dict:
    """Check one message (either form) for dimension d (raises MessageRejected)."""
    schema = SQRT_SCHEMA if isinstance(msg, dict) and "R" in msg else SCHEMA
    return schema.validate(msg, client_id, dtype=dtype, d=int(d), q=linalg.n_upper(int(d)))


def check_sigma(sigma: float) -> float:
    sigma = float(sigma)
    if not (sigma >= 0) or sigma != sigma or sigma == float("inf"):
        raise ValueError(f"regularization sigma must be a finite number ≥ 0, got {sigma}")
    return sigma


def singular_rtol(d: int, dtype: torch.dtype = DTYPE) -> float:
    """Relative pivot tolerance of :func:`ridge_solve`: ``d·eps`` (LAPACK's pivoted-Cholesky rank tolerance)."""
    return int(d) * torch.finfo(dtype).eps


def ridge_solve(G: torch.Tensor, h: torch.Tensor, sigma: Sigma) -> torch.Tensor:
    """``(G + σI)⁻¹ h`` by Cholesky (σ a scalar or a batch), with a clear error when it is (numerically) singular.

    A factorization whose smallest pivot is ≤ ``d·eps`` times the largest diagonal entry is refused
    (:func:`singular_rtol`): with σ = 0 on a rank-deficient Gram, Cholesky can pass through a round-off
    pivot (~1e-15) and return a model dominated by round-off.
    """
    if torch.is_tensor(sigma):
        if bool((sigma < 0).any()) or not bool(torch.isfinite(sigma).all()):
            raise ValueError(f"regularization sigma must be finite and ≥ 0, got {sigma.tolist()}")
    else:
        sigma = check_sigma(sigma)
    if G.shape[-1] != G.shape[-2] or h.shape[-1] != G.shape[-1]:
        raise ValueError(f"Gram matrix {tuple(G.shape)} and moment vector {tuple(h.shape)} do not match")
    try:
        return linalg.damped_solve(G, h, sigma, rtol=singular_rtol(G.shape[-1], G.dtype))
    except linalg.NotPositiveDefinite as e:
        raise SingularGram(f"G + σI is not (numerically) positive definite with σ={sigma if not torch.is_tensor(sigma) else sigma.tolist()} "
                           f"({e}); the pooled Gram matrix is singular (fewer informative rows than d={G.shape[-1]} "
                           f"features or collinear features): use σ > 0") from None


class FusionServer:
    """Receives validated client statistics (either form), keeps their sums, solves for any σ.

    ``receive(cid, msg)`` stores a client's statistics (a client re-sending replaces them);
    ``update(cid, msg)`` adds a streaming increment for new rows to that client's running statistics
    (``(ΔG, Δh)``, or the new rows' factor, stacked under the old one).  ``receive_all`` validates a whole
    round and returns ``(accepted ids, {rejected id: reason})``.  Clients that never answered (dropout)
    simply do not appear: :meth:`solve` is the exact centralized ridge model on the data of the clients
    present.

    Stored per client: ``G[cid]`` (packed Gram, Gram-form clients), ``R[cid]`` (factor, square-root-form
    clients), ``h[cid]`` and ``n[cid]`` (every client).  The running sums are packed, so fusion never stacks
    K messages; a message that already has the server's dtype and device is summed without a copy.
    """

    def __init__(self, d: int, dtype: torch.dtype = DTYPE, device: torch.device | str | None = None):
        if int(d) != d or d < 1:
            raise ValueError(f"feature dimension d must be a positive integer, got {d}")
        self.d = int(d)
        self._q = linalg.n_upper(self.d)
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else None
        self.G: dict[ClientId, torch.Tensor] = {}   # cid -> packed [q] (Gram-form clients)
        self.R: dict[ClientId, torch.Tensor] = {}   # cid -> [m, d] (square-root-form clients)
        self.h: dict[ClientId, torch.Tensor] = {}   # cid -> [d]
        self.n: dict[ClientId, float | None] = {}   # cid -> float or None
        self._Gsum: torch.Tensor | None = None  # running sums (packed), so fusion never stacks K messages
        self._hsum: torch.Tensor | None = None
        self.floats_up = 0

    # --- receiving -------------------------------------------------------------
    def _prepare(self, cid: ClientId, msg: Message) -> tuple[str, torch.Tensor, torch.Tensor, float | None]:
        """Structural checks and conversion to the server's dtype/device: ``(form, G or R, h, n)``.

        Finiteness is left to the caller (checked on the sum, see :meth:`receive_all`).  A message in the runtime's
        gn schema ``{H, g[, loss], n}`` is read through :func:`from_gn` (``G = H``, ``h = −g``)."""
        gn = isinstance(msg, dict) and "H" in msg and "G" not in msg
        if gn:
            msg = from_gn(msg)
        form = "sqrt" if isinstance(msg, dict) and "R" in msg else "gram"
        _FAST[form].validate(msg, cid, d=self.d, q=self._q)
        for k, v in msg.items():
            if not v.is_floating_point():
                raise MessageRejected(cid, f"field {k!r} has dtype {v.dtype}, expected a real floating-point dtype")
        n = None
        if "n" in msg:
            n = float(msg["n"][0])
            if not math.isfinite(n):
                raise MessageRejected(cid, "field 'n' contains non-finite values")
            if not 0 < n <= MAX_COUNT:
                raise MessageRejected(cid, f"field 'n' must be > 0 and ≤ 2^53 (a sample count), got {msg['n'].tolist()}")
            if form == "gram":  # exact statistics: a Gram matrix AᵀA has a diagonal ≥ 0 (O(d) entries read)
                diag = msg["G"].index_select(0, packed_diagonal_index(self.d, msg["G"].device))
                if bool((diag < 0).any()):
                    raise MessageRejected(cid, f"field 'G' has a negative diagonal entry ({float(diag.min()):.3g}); "
                                               "a Gram matrix AᵀA is positive semidefinite")
        main = msg["R"] if form == "sqrt" else msg["G"]
        dev = self.device if self.device is not None else main.device

        def conv(t: torch.Tensor) -> torch.Tensor:
            return t if (t.dtype == self.dtype and t.device == dev) else t.to(device=dev, dtype=self.dtype)

        main = conv(main)
        if form == "gram":
            h = conv(msg["h"])
            self._check_scale(cid, ("H" if gn else "G", "a diagonal entry"),
                              main.index_select(0, packed_diagonal_index(self.d, main.device)))
            self._check_scale(cid, ("g" if gn else "h", "an entry"), h)
        else:
            z = conv(msg["z"])
            self._check_scale(cid, ("R", "an entry"), main)
            self._check_scale(cid, ("z", "an entry"), z)
            h = main.T @ z
        return form, main, h, n

    def _check_scale(self, cid: ClientId, what: tuple[str, str], t: torch.Tensor) -> None:
        """Refuse a finite entry above ``√max`` of the server's dtype (:func:`~fedsciml.core.schema.max_magnitude`,
        the bound every message schema sets): such a client swamps the others' statistics below its round-off
        and, for a rank-deficient message (1e300 everywhere is a rank-one Gram), leaves the pooled Gram
        singular — it is named here, before pooling, rather than the pooled Gram blamed at the solve.
        A Gram-form ``G`` is checked on its diagonal (O(d)): a Gram matrix's entries are bounded by its largest
        diagonal entry (``|G_ij| ≤ √(G_ii G_jj)``); one that breaks that bound is named when the solve fails
        (:meth:`solve`).  Non-finite entries are left to the finiteness check on the round's sum."""
        if not t.numel():
            return
        top = float(t.abs().max())
        bound = max_magnitude(self.dtype)
        if math.isfinite(top) and top > bound:
            raise MessageRejected(cid, f"field {what[0]!r} has {what[1]} of magnitude {top:.3g} > {bound:.3g} "
                                       f"(√ of the largest {self.dtype}): out of scale, its square overflows")

    @staticmethod
    def _gram(form: str, T: torch.Tensor) -> torch.Tensor:
        return T if form == "gram" else linalg.gram_packed(T)

    def _sum(self, items: list[_Item]) -> tuple[torch.Tensor, torch.Tensor]:
        """Packed ``ΣG_k`` and ``Σh_k`` of prepared messages (Gram form summed in place, factors stacked)."""
        G: torch.Tensor | None = None
        H: torch.Tensor | None = None
        sq = [it for it in items if it[1] == "sqrt"]
        for _, form, T, h, _ in items:
            if form == "gram":
                G = T.clone() if G is None else G.add_(T)
            H = h.clone() if H is None else H.add_(h)
        rows = max(256, (1 << 22) // self.d)  # stack factors into blocks of ~4M floats: one long GEMM each
        i = 0
        while i < len(sq):
            block: list[torch.Tensor] = []
            r = 0
            while i < len(sq) and (not block or r + sq[i][2].shape[0] <= rows):
                block.append(sq[i][2])
                r += sq[i][2].shape[0]
                i += 1
            g = linalg.gram_packed(torch.cat(block) if len(block) > 1 else block[0])
            G = g if G is None else G.add_(g)
        if G is None or H is None:
            raise ValueError("no client statistics to sum")
        return G, H

    @staticmethod
    def _finite(G: torch.Tensor, H: torch.Tensor) -> bool:
        # a non-finite entry makes the total non-finite (inf + x = inf, nan propagates), so a finite total
        # proves every entry finite; only a total that is not finite (or overflows) needs the entrywise check
        if bool(torch.isfinite(G.sum() + H.sum())):
            return True
        return bool(torch.isfinite(G).all()) and bool(torch.isfinite(H).all())

    def _screen(self, items: list[_Item], bad: dict[ClientId, str]) -> list[_Item]:
        """Rare path: the round's sum has non-finite entries; reject the messages responsible."""
        keep = []
        for it in items:
            cid, form, T, h, _ = it
            if not bool(torch.isfinite(T).all()):
                bad[cid] = f"field {'R' if form == 'sqrt' else 'G'!r} contains non-finite values"
            elif not bool(torch.isfinite(h).all()):
                bad[cid] = f"field {'z' if form == 'sqrt' else 'h'!r} contains non-finite values"
            else:
                keep.append(it)
        if len(keep) == len(items):  # every message is finite but their sum overflows: reject the largest
            size = [float(self._gram(it[1], it[2]).abs().max().maximum(it[3].abs().max())) for it in keep]
            i = max(range(len(keep)), key=size.__getitem__)
            bad[keep[i][0]] = (f"statistics of magnitude {size[i]:.1e} overflow the sum with the other clients' "
                               f"(the largest {self.dtype} is {torch.finfo(self.dtype).max:.1e})")
            keep.pop(i)
        return keep

    def _commit(self, cid: ClientId, form: str, T: torch.Tensor, h: torch.Tensor, n: float | None) -> None:
        if cid in self.h:  # a client re-sending replaces its statistics
            self._subtract(cid)
        self.G.pop(cid, None)
        self.R.pop(cid, None)
        (self.R if form == "sqrt" else self.G)[cid] = T
        self.h[cid], self.n[cid] = h, n

    def _subtract(self, cid: ClientId) -> None:
        Gsum, hsum = self._sums()
        Gsum.sub_(self._packed(cid))
        hsum.sub_(self.h[cid])

    def _sums(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The running packed ``(ΣG_k, Σh_k)``; raises when nothing was received."""
        if self._Gsum is None or self._hsum is None:
            self._need_clients()
            raise ValueError("no running sums although clients are present")  # an internal inconsistency
        return self._Gsum, self._hsum

    def _add_sums(self, G: torch.Tensor, H: torch.Tensor) -> None:
        if self._Gsum is None or self._hsum is None:
            self._Gsum, self._hsum = G, H
        else:
            self._Gsum.add_(G)
            self._hsum.add_(H)

    def receive_all(self, messages: Mapping[ClientId, Message]) -> tuple[list[ClientId], dict[ClientId, str]]:
        """Validate and add a round of messages; returns ``(accepted ids, {rejected id: reason})``.

        Structure and dtype are checked per message; finiteness is checked once on the round's sum (a
        finite sum proves every summand finite), and only when it fails is each message examined.
        """
        ok: list[ClientId] = []
        bad: dict[ClientId, str] = {}
        items: list[_Item] = []
        for cid, msg in messages.items():
            try:
                items.append((cid, *self._prepare(cid, msg)))
            except MessageRejected as e:
                bad[cid] = e.reason
        G: torch.Tensor | None = None
        H: torch.Tensor | None = None
        while items:
            G, H = self._sum(items)
            if self._finite(G, H):
                break
            items = self._screen(items, bad)
        for cid, form, T, h, n in items:
            self._commit(cid, form, T, h, n)
            self.floats_up += floats_in(dict(messages[cid]))
            ok.append(cid)
        if items and G is not None and H is not None:
            self._add_sums(G, H)
        return ok, bad

    def receive(self, cid: ClientId, msg: Message) -> None:
        ok, bad = self.receive_all({cid: msg})
        if bad:
            raise MessageRejected(cid, bad[cid])

    def update(self, cid: ClientId, msg: Message) -> None:
        """Streaming: add the statistics of new rows at client ``cid`` (a first update is a receive).

        Square-root increments of a square-root client are stacked under its factor; otherwise the client's
        statistics are kept (or converted to) the Gram form.
        """
        if cid not in self.h:
            return self.receive(cid, msg)
        form, T, h, n = self._prepare(cid, msg)
        item: _Item = (cid, form, T, h, n)
        G, H = self._sum([item])
        if not self._finite(G, H):
            bad: dict[ClientId, str] = {}
            self._screen([item], bad)
            raise MessageRejected(cid, bad[cid])
        if form == "sqrt" and cid in self.R:
            self.R[cid] = torch.cat([self.R[cid], T])
        else:
            old = self.G.pop(cid) if cid in self.G else linalg.gram_packed(self.R.pop(cid))
            self.G[cid] = old + G
        self.h[cid] = self.h[cid] + h
        self._add_sums(G, H)
        old_n = self.n[cid]
        if n is not None and old_n is not None:
            self.n[cid] = old_n + n
        self.floats_up += floats_in(dict(msg))

    def drop(self, cid: ClientId) -> None:
        if cid in self.h:
            self._subtract(cid)
        self.G.pop(cid, None)
        self.R.pop(cid, None)
        self.h.pop(cid, None)
        self.n.pop(cid, None)

    # --- statistics ------------------------------------------------------------
    @property
    def clients(self) -> list[ClientId]:
        return list(self.h)

    @property
    def factored(self) -> bool:
        """True when every client present sent the square-root form (see :meth:`stacked_factors`)."""
        return bool(self.h) and len(self.R) == len(self.h)

    def _need_clients(self) -> None:
        if not self.h:
            raise ValueError("no client statistics received (every client dropped out or was rejected); "
                             "cannot fit a model")

    def totals(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(G [d, d], h [d])`` summed over the clients present."""
        self._need_clients()
        Gsum, hsum = self._sums()
        return linalg.unpack_upper(Gsum, self.d), hsum.clone()

    def _packed(self, cid: ClientId) -> torch.Tensor:
        return self.G[cid] if cid in self.G else linalg.gram_packed(self.R[cid])

    def stacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-client ``(G_k [K, d, d], h_k [K, d])`` in :attr:`clients` order."""
        return linalg.unpack_upper(self.stacked_packed()[0], self.d), torch.stack(list(self.h.values()))

    def stacked_packed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-client ``(packed G_k [K, d(d+1)/2], h_k [K, d])`` — no d×d matrix per client is formed."""
        self._need_clients()
        return torch.stack([self._packed(c) for c in self.h]), torch.stack(list(self.h.values()))

    def stacked_factors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-client ``(R_k [K, m, d], h_k [K, d])``: factors zero-padded to the largest ``m`` (exact: zero rows
        add nothing to ``R_kᵀR_k``).  Needs every client in the square-root form (:attr:`factored`)."""
        self._need_clients()
        if not self.factored:
            gram = [c for c in self.h if c not in self.R]
            raise ValueError(f"{len(gram)} client(s) (e.g. {gram[0]!r}) sent the Gram form; per-client factors "
                             f"need every client's square-root statistics (client_message(..., form='sqrt'))")
        m = max(R.shape[0] for R in self.R.values())
        out = self._sums()[1].new_zeros(len(self.h), m, self.d)
        for i, c in enumerate(self.h):
            out[i, :self.R[c].shape[0]] = self.R[c]
        return out, torch.stack(list(self.h.values()))

    def solve(self, sigma: Sigma) -> torch.Tensor:
        """``(ΣG_k + σI)⁻¹ Σh_k`` (:func:`ridge_solve`).  When the pooled Gram is not positive definite, the
        clients' own statistics are examined (only then: O(K·d²)) and a client whose ``G`` cannot be a Gram matrix
        (an entry out of scale, or ``|G_ij| > √(G_ii G_jj)`` in an exact message) is named instead of the pooled
        Gram."""
        G, h = self.totals()
        try:
            return ridge_solve(G, h, sigma)
        except SingularGram:
            culprit = self._culprit()
            if culprit is None:
                raise
            raise SingularGram(f"client {culprit[0]}: field 'G' {culprit[1]}, so the pooled Gram ΣG_k + σI is not "
                               f"positive definite because of this client (drop it: FusionServer.drop"
                               f"({culprit[0]!r}))") from None

    def _culprit(self) -> tuple[ClientId, str] | None:
        """The first client whose stored Gram-form ``G`` is not that of any data, and why; or None."""
        bound = max_magnitude(self.dtype)
        for cid, G in self.G.items():
            top = float(G.abs().max())
            if top > bound:
                return cid, f"has an entry of magnitude {top:.3g} > {bound:.3g} (√ of the largest {self.dtype})"
            why = psd_violation(G, "packed") if self.n[cid] is not None else None  # DP noise: G may be indefinite
            if why is not None:
                return cid, why
        return None


def fuse(messages: Mapping[ClientId, Message], sigma: Sigma, d: int | None = None,
         dtype: torch.dtype = DTYPE) -> torch.Tensor:
    """One-shot fusion of ``{cid: message}``: validate, sum, solve; raises on any rejected message."""
    if not messages:
        raise ValueError("no client messages: at least one client must answer")
    d = d if d is not None else message_dim(next(iter(messages.values())))
    server = FusionServer(d, dtype=dtype)
    _, bad = server.receive_all(messages)
    if bad:
        cid = next(iter(bad))
        raise MessageRejected(cid, bad[cid])
    return server.solve(sigma)


def pooled_ridge(A: torch.Tensor, b: torch.Tensor, sigma: Sigma) -> torch.Tensor:
    """The centralized oracle on pooled data (same Cholesky path)."""
    st = LinearLeastSquares(A, b).gn_stats(A.new_zeros(A.shape[1]))
    if st.H is None:  # gn_stats forms the Gram matrix (form_gram=True); never taken
        raise ValueError("the pooled statistics carry no Gram matrix")
    return ridge_solve(st.H, -st.g, sigma)



# --- Gauss–Newton statistics streamed over row chunks (the ``chunked`` form of fedsciml.core.forms) -------------


def row_blocks(obj: LeastSquares, theta: torch.Tensor, rows: int) -> Iterator[LeastSquares]:
    """The objective cut into consecutive blocks of at most ``rows`` residual rows (at least one point each), in
    ``r``'s own row order: ``torch.cat`` of the blocks' residuals is ``obj.residual(θ)``.

    A :class:`~fedsciml.core.objective.PointwiseLeastSquares` is cut inside each residual part (a block never
    spans two parts; a point with C outputs counts C rows, C read from the part's first point at θ), a linear
    one by rows of ``A``; any other objective is one block.  A block's part keeps the part's other fields (its
    K-FAC channel form ``jet`` included)."""
    if rows < 1:
        raise ValueError(f"a row chunk must hold at least 1 row, got {rows}")
    if isinstance(obj, PointwiseLeastSquares):
        for part in obj.parts:
            first = tuple(t[:1] for t in part.points) if isinstance(part.points, tuple) else part.points[:1]
            with torch.no_grad():
                per_point = max(1, int(vmap(part.fn, in_dims=(None, 0))(theta, first).numel()))
            step = max(1, int(rows) // per_point)
            for a in range(0, part.n_points, step):
                pts = (tuple(t[a:a + step] for t in part.points) if isinstance(part.points, tuple)
                       else part.points[a:a + step])
                yield PointwiseLeastSquares([dataclasses.replace(part, points=pts)], obj.n_params)
    elif isinstance(obj, LinearLeastSquares):
        for a in range(0, obj.n_residuals, int(rows)):
            yield LinearLeastSquares(obj.A[a:a + rows], obj.b[a:a + rows])
    else:
        yield obj


def chunked_gn_stats(obj: LeastSquares, theta: torch.Tensor, rows: int) -> GNStats:
    """``(JᵀJ, Jᵀr, ½‖r‖²)`` accumulated over blocks of at most ``rows`` residual rows (:func:`row_blocks`): only
    one block of J is held at a time, so n is bounded by time, not memory (``H`` is p×p).

    The same statistics as :meth:`~fedsciml.core.objective.LeastSquares.gn_stats` up to the order of the sums:
    ``ΣJ_bᵀJ_b`` adds the rows' products in another order than one ``JᵀJ`` (and a block's rows may be formed by
    a differently batched ``vmap``), so entry (i, j) differs by at most about ``n·eps·‖J_i‖‖J_j‖`` — not the
    same bits.  ``H`` is symmetrized once at the end, as :func:`~fedsciml.core.objective.gn_stats_from` does."""
    H: torch.Tensor | None = None
    g: torch.Tensor | None = None
    ss: torch.Tensor | None = None
    n = 0
    for block in row_blocks(obj, theta, rows):
        r, J = block.residual_and_jacobian(theta)
        if H is None or g is None or ss is None:
            H, g, ss = J.T @ J, J.T @ r, r @ r
        else:
            H.addmm_(J.T, J)
            g.addmv_(J.T, r)
            ss = ss + r @ r
        n += int(r.shape[0])
    if H is None or g is None or ss is None:
        raise ValueError("chunked statistics of an objective without residual rows")
    H = 0.5 * (H + H.T)
    return GNStats(H=H, g=g, loss=0.5 * ss, n=n)
