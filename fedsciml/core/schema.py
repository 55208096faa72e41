"""Client messages: plain tensors with a declared schema, validated before use.

A message is a ``dict[str, Tensor]``.  A :class:`Schema` declares for each field
its shape (ints, or names bound by the schema's context such as ``"p"`` or
``"r"``; ``None`` for any size) and what its values must satisfy.  Every
message is checked against its schema before an aggregator sees it; a bad one
raises :class:`MessageRejected` naming the client, the field and the reason,
and is never averaged in.  Plain tensors keep messages transport-neutral (a
Flower strategy or any RPC layer can carry them unchanged).

What every field must satisfy (checked in one pass over the message, O(its size)):

* a tensor of a *real floating* dtype — the server's dtype when the caller
  gives one; integer, bool and complex tensors are rejected by name (an
  ``int64`` delta or a complex NaN would otherwise be summed, cast or crash a
  merge later);
* no autograd history (``requires_grad`` is False); a dense (strided) tensor
  with data — a ``meta``-device tensor (shape only) or a sparse one is rejected
  by name before any value is read;
* finite values (``finite=True``, the default), each of magnitude at most
  ``√max`` of the dtype (:func:`max_magnitude`: 1.3e154 in float64, 1.8e19 in
  float32) — a larger entry is finite but its square is not, so one client
  sending 1e300 would otherwise make a Gram matrix or a norm overflow and abort
  the whole fusion instead of being rejected by name;
* ``positive``: every entry a whole number > 0, and at most :data:`MAX_COUNT` — the
  field is a sample count (the largest integer float64 holds exactly; a larger "count" is
  not a count, and K of them can no longer overflow a sum; 0.5 samples would
  silently reweight the clients);
* ``nonneg``: every entry ≥ 0 (losses ``½‖r‖²``, eigenvalues, Fisher diagonals);
* ``psd`` — the field is a positive semidefinite matrix: ``"packed"``, the
  row-major packed upper triangle of :func:`fedsciml.core.linalg.pack_upper` (its
  length must be a triangular number d(d+1)/2), or ``"square"``, a
  ``[..., a, a]`` stack of matrices.  Checked cheaply, without a
  factorization: the diagonal is ≥ 0 and every entry obeys the 2×2-minor
  condition ``|H_ij| ≤ √(H_ii H_jj)`` (for ``"square"`` also the symmetry
  ``H_ij = H_ji``), both up to :func:`psd_tolerance`.  These are necessary
  conditions of positive semidefiniteness, not sufficient ones: they catch a
  negative curvature entry or an inflated off-diagonal, not every indefinite
  matrix.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import math

import torch

MAX_COUNT = float(2 ** 53)  # the largest count float64 represents exactly (9.0e15)
PSD_KINDS = (None, "packed", "square")


class MessageRejected(ValueError):
    def __init__(self, client_id: object, reason: str):
        self.client_id = client_id
        self.reason = reason
        super().__init__(f"message from client {client_id} rejected: {reason}")


@dataclass(frozen=True)
class Field:
    shape: tuple          # entries: int, a context name (str), or None (any size)
    finite: bool = True
    positive: bool = False  # every entry > 0 and ≤ MAX_COUNT (sample counts)
    optional: bool = False
    nonneg: bool = False    # every entry ≥ 0 (losses, eigenvalues, Fisher diagonals)
    psd: str | None = None  # "packed" (upper triangle) or "square" ([..., a, a]): PSD necessary conditions

    def __post_init__(self):
        if self.psd not in PSD_KINDS:
            raise ValueError(f"Field psd must be one of {PSD_KINDS}, got {self.psd!r}")


def max_magnitude(dtype) -> float:
    """The largest entry a message may carry: ``√(largest finite value)`` of ``dtype``, so that any
    entry squared (a Gram matrix, a norm) stays finite."""
    return float(torch.finfo(dtype).max) ** 0.5


def psd_tolerance(dtype) -> float:
    """Relative round-off allowed in the PSD checks: ``√eps`` of the dtype (1.5e-8 in float64, 3.5e-4 in float32).

    An honest Gram/Fisher entry ``H_ij = Σ_k a_ki a_kj`` over n terms carries a
    relative error of at most ``n·eps`` (typically ``√n·eps``), and ``|H_ij| =
    √(H_ii H_jj)`` holds with equality for parallel columns, so the bound must
    allow round-off: ``√eps`` covers the worst case up to n = 1/√eps terms
    (6.7e7 in float64) and the typical one far beyond, while a deliberately
    inflated entry exceeds it by orders of magnitude.
    """
    return float(torch.finfo(dtype).eps) ** 0.5


_PACKED_CACHE: dict = {}


def _packed_index(d: int, device):
    """Row and column of every entry of a row-major packed upper triangle (cached per (d, device))."""
    key = (int(d), str(device))
    if key not in _PACKED_CACHE:
        if len(_PACKED_CACHE) > 16:
            _PACKED_CACHE.clear()
        i, j = torch.triu_indices(d, d, device=device)
        _PACKED_CACHE[key] = (i, j, torch.nonzero(i == j).reshape(-1))
    return _PACKED_CACHE[key]


def packed_diagonal_index(d: int, device) -> torch.Tensor:
    """Positions of the diagonal entries in a row-major packed upper triangle of a d×d matrix (cached)."""
    return _packed_index(d, device)[2]


_OFFDIAGONAL = "has an off-diagonal entry with |H_ij| > √(H_ii·H_jj); a positive semidefinite matrix has none"
_CHUNK = 1 << 16  # entries per block of the packed check (512 kB in float64: the block's buffers stay in cache)


def _negative_diagonal(diag: torch.Tensor) -> str:
    return (f"has a negative diagonal entry ({float(diag.min()):.3g}); a curvature/Gram matrix is "
            "positive semidefinite")


def _packed_offdiagonal_exceeds(t: torch.Tensor, diag: torch.Tensor, i: torch.Tensor, j: torch.Tensor,
                                scale: float, tiny: float) -> bool:
    """Whether some entry has ``H_ij² > H_ii·H_jj·scale + tiny`` (packed rows ``[..., q]``).

    The same operations in the same order as the one-line expression, but block by block into a few
    reused buffers: a fresh q-sized temporary costs a page fault per 4 kB, which made the one-line form of
    this check about 5× slower than this on a 5·10⁵-entry message (a Gram matrix of d = 1000).
    """
    q = t.shape[-1]
    width = max(1, min(_CHUNK, q))
    lead = t.shape[:-1]
    bound = t.new_empty(*lead, width)
    other = t.new_empty(*lead, width)
    square = t.new_empty(*lead, width)
    over = torch.empty(*lead, width, dtype=torch.bool, device=t.device)
    for s in range(0, q, width):
        e = min(s + width, q)
        n = e - s
        b, o, sq, ov = bound[..., :n], other[..., :n], square[..., :n], over[..., :n]
        torch.index_select(diag, -1, i[s:e], out=b)
        torch.index_select(diag, -1, j[s:e], out=o)
        b.mul_(o).mul_(scale).add_(tiny)
        block = t[..., s:e]
        torch.mul(block, block, out=sq)
        torch.gt(sq, b, out=ov)
        if bool(ov.any()):
            return True
    return False


def psd_violation(t: torch.Tensor, kind: str) -> str | None:
    """Why ``t`` is not positive semidefinite by the necessary conditions above, or ``None``."""
    tol = psd_tolerance(t.dtype)
    if kind == "packed":
        q = t.shape[-1]
        d = int(round(((8 * q + 1) ** 0.5 - 1) / 2))
        if d * (d + 1) // 2 != q:
            return f"has {q} entries, not the packed upper triangle d(d+1)/2 of any d×d matrix"
        i, j, dpos = _packed_index(d, t.device)
        diag = t.index_select(-1, dpos)
        if bool((diag < 0).any()):
            return _negative_diagonal(diag)
        if _packed_offdiagonal_exceeds(t, diag, i, j, (1 + tol) ** 2, torch.finfo(t.dtype).tiny):
            return _OFFDIAGONAL
        return None
    else:
        if t.ndim < 2 or t.shape[-1] != t.shape[-2]:
            return f"has shape {tuple(t.shape)}, not a stack of square matrices"
        diag = torch.diagonal(t, dim1=-2, dim2=-1)
        bound = diag[..., :, None] * diag[..., None, :]
    if bool((diag < 0).any()):
        return _negative_diagonal(diag)
    tiny = torch.finfo(t.dtype).tiny
    if bool((t * t > bound * (1 + tol) ** 2 + tiny).any()):
        return _OFFDIAGONAL
    if kind == "square" and bool(((t - t.transpose(-1, -2)).abs() > tol * bound.sqrt() + tiny).any()):
        return "is not symmetric; a curvature/Gram matrix is"
    return None


@dataclass
class Schema:
    fields: dict = field(default_factory=dict)

    def validate(self, msg, client_id, dtype=None, **context) -> dict:
        """Check ``msg`` against the schema; returns it, or raises :class:`MessageRejected`.

        ``dtype``: the dtype every field must have (the server's); without it any
        real floating dtype is accepted.
        """
        if not isinstance(msg, dict):
            raise MessageRejected(client_id, f"expected a dict of tensors, got {type(msg).__name__}")
        extra = set(msg) - set(self.fields)
        if extra:
            raise MessageRejected(client_id, f"unexpected field(s) {sorted(extra)}; schema has {sorted(self.fields)}")
        bound = dict(context)
        for name, spec in self.fields.items():
            if name not in msg:
                if spec.optional:
                    continue
                raise MessageRejected(client_id, f"missing field {name!r}")
            t = msg[name]
            if not torch.is_tensor(t):
                raise MessageRejected(client_id, f"field {name!r} is a {type(t).__name__}, not a tensor")
            if not t.is_floating_point():  # int/bool/complex: rejected by name, before any arithmetic on it
                want = dtype if dtype is not None else "a real floating dtype"
                raise MessageRejected(client_id, f"field {name!r} has dtype {t.dtype}, expected {want}")
            if dtype is not None and t.dtype != dtype:
                raise MessageRejected(client_id, f"field {name!r} has dtype {t.dtype}, expected {dtype}")
            if t.device.type == "meta" or t.layout != torch.strided:
                raise MessageRejected(client_id, f"field {name!r} is a {t.layout} tensor on device "
                                                 f"{t.device.type}; a message carries dense tensors with data")
            if t.requires_grad:  # an autograd graph would follow the message into the server's state
                raise MessageRejected(client_id, f"field {name!r} requires grad; a message carries plain (detached) "
                                                 "tensors")
            if len(spec.shape) != t.ndim:
                raise MessageRejected(client_id, f"field {name!r} has {t.ndim} dimensions {tuple(t.shape)}, expected {len(spec.shape)}")
            for axis, (want, got) in enumerate(zip(spec.shape, t.shape)):
                if want is None:
                    continue
                if isinstance(want, str):
                    if want in bound and bound[want] != got:
                        raise MessageRejected(
                            client_id, f"field {name!r} has size {got} along axis {axis}, expected {want}={bound[want]}")
                    bound.setdefault(want, got)
                elif want != got:
                    raise MessageRejected(client_id, f"field {name!r} has size {got} along axis {axis}, expected {want}")
            # one pass for finiteness, magnitude and sign: aminmax propagates NaN, so a NaN or ±inf entry
            # shows in lo or hi, and max(|lo|, |hi|) is exactly max |t|
            lo = hi = None
            if spec.finite and t.numel():
                lo_t, hi_t = torch.aminmax(t)
                lo, hi = float(lo_t), float(hi_t)
                if not (math.isfinite(lo) and math.isfinite(hi)):
                    raise MessageRejected(client_id, f"field {name!r} contains non-finite values")
            if spec.positive and not bool(((t > 0) & (t <= MAX_COUNT) & (t == torch.round(t))).all()):
                raise MessageRejected(client_id, f"field {name!r} must be a whole number > 0 and ≤ 2^53 (a sample "
                                                 f"count), got {_show(t)}")
            if lo is not None and hi is not None and max(-lo, hi) > max_magnitude(t.dtype):
                raise MessageRejected(client_id, f"field {name!r} has an entry of magnitude {max(-lo, hi):.3g}"
                                                 f" > {max_magnitude(t.dtype):.3g} (√ of the largest {t.dtype}): "
                                                 "its square overflows")

            if spec.nonneg and (lo < 0 if lo is not None else bool((t < 0).any())):
                raise MessageRejected(client_id, f"field {name!r} has negative entries ({_show(t)}); it must be ≥ 0")
            if spec.psd is not None:
                why = psd_violation(t, spec.psd)
                if why is not None:
                    raise MessageRejected(client_id, f"field {name!r} {why}")
        return msg


def _show(t: torch.Tensor):
    return t.tolist() if t.numel() < 5 else f"min {float(t.min()):.3g}"


def floats_in(msg: dict) -> int:
    """Number of scalars a message carries (its communication cost)."""
    return int(sum(t.numel() for t in msg.values() if torch.is_tensor(t)))
