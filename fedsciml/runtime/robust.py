"""Byzantine-robust combination of client updates, and the statistics checks that go with it.

The update-averaging aggregators (FedAvg / FedProx, FIPA's curvature-weighted
right-hand side, image FedAvg) combine one vector per client.  A
:class:`RobustRule` replaces their weighted mean by one of the standard robust
rules (as Flower's ``FedMedian``, ``FedTrimmedAvg`` and DP-FedAvg's fixed
clipping do):

* ``rule="mean"`` (default): the sample-weighted mean ``Σ (n_m/N) Δ_m`` —
  the unchanged method;
* ``rule="median"``: the coordinate-wise median of the K updates (the mean of
  the two middle values for even K), unweighted;
* ``rule="trimmed"``: per coordinate, drop the ``⌊trim·K⌋`` smallest and
  largest values (``trim`` ∈ [0, 0.5), default 0.2; at least one value is
  kept) and average the rest, unweighted;
* ``clip_norm=C`` (default ``None``: off; any C > 0): first scale every
  client's update to norm at most C, ``Δ_m · min(1, C/‖Δ_m‖)``; combines with
  any rule.

Sample weights are computed without overflow (:func:`sample_weights`:
counts divided by their maximum first), and counts are capped by the schema
(:data:`~fedsciml.core.schema.MAX_COUNT`) and fixed at enrollment (the
first valid message of a client; a later message with another count is
rejected, see :class:`~fedsciml.methods.aggregators.Aggregator`).

What each option guards against and what it does not
----------------------------------------------------
* **Count enrollment** stops a client from *changing* its claimed sample count
  to grab the weight of a round; it does not stop a client that claims a huge
  count from its first message on (up to 2^53).  ``median``/``trimmed``
  ignore counts entirely, so they are not affected by that lie.
* **Median** tolerates fewer than 50 % of the clients sending arbitrary
  updates (values of any size): each coordinate is an honest client's value
  or lies between two of them.  It does not estimate the weighted mean:
  with non-iid clients (different data, different sizes) it is biased even
  without any attacker, so it converges more slowly or to a different point,
  and with K = 2 it is just the mean.
* **Trimmed mean** tolerates up to ``⌊trim·K⌋`` arbitrary clients per
  coordinate (per side) and is less biased than the median on non-iid data
  when nobody attacks; with more attackers than it trims it fails like the
  mean.  Both are coordinate-wise: a minority can still move every
  coordinate within the honest range in a coordinated direction.
* **Norm bound** (``clip_norm``) bounds one client's influence on a round's
  step to ``w_m·C`` (and the whole step to C) whatever it sends; it does not
  stop a coordinated minority of clients each sending a norm-C update in the
  same bad direction, and a C below the honest update norms slows every
  client down (it biases towards the clients with small updates).
* **Consistency checks** (gn and FIPA with local Gauss–Newton steps, in the
  aggregators): statistics must be consistent with the client's own reported
  loss, ``gᵀH⁺g = ‖P_J r‖² ≤ ‖r‖² = 2·loss`` (square-root form
  ``‖s‖² = ‖Qᵀr‖² ≤ ‖r‖²``; FIPA ``Δᵀ Ĥ Δ ≤ 2·loss`` for ``Δ = −(Ĥ+μI)^† g``).
  They catch a gradient or a curvature/step inflated relative to the loss; they
  do not catch a client that lies consistently (a scaled copy of a valid
  message is the valid message of scaled data, a sign-flipped gradient that of
  negated residuals), a client that inflates only
  its curvature in gn (which damps the step in its directions rather than
  steering it), or any lie in FIPA/FedAvg with Adam local steps (no bound
  relates an Adam update to the loss).
* **Schema checks** (every method): dtype, shape, finiteness, counts, losses
  ≥ 0 and PSD curvature (:mod:`fedsciml.core.schema`) reject malformed
  messages; they say nothing about well-formed lies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from fedsciml.core import linalg

RULES = ("mean", "median", "trimmed")


@dataclass(frozen=True)
class RobustRule:
    """How an aggregator combines per-client vectors (see the module docstring for the trade-offs).

    ``rule``: ``"mean"`` | ``"median"`` | ``"trimmed"``; ``trim``: fraction
    trimmed per side for ``"trimmed"``, in [0, 0.5); ``clip_norm``: ``None``
    (off) or the norm bound C > 0 applied to each client's update first.
    """

    rule: str = "mean"
    trim: float = 0.2
    clip_norm: float | None = None

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"robust rule must be one of {', '.join(RULES)}, got {self.rule!r}")
        if not 0.0 <= self.trim < 0.5:
            raise ValueError(f"trim must be a fraction in [0, 0.5) trimmed per side, got {self.trim}")
        if self.clip_norm is not None and not (0 < self.clip_norm < float("inf")):
            raise ValueError(f"clip_norm must be a finite number > 0 (or None: no bound), got {self.clip_norm}")

    @property
    def plain(self) -> bool:
        """The unchanged weighted mean (no robust rule, no norm bound)."""
        return self.rule == "mean" and self.clip_norm is None

    def combine(self, D: torch.Tensor, w: Sequence[float]) -> torch.Tensor:
        """Combine the rows of ``D [K, p]`` (``w``: weights summing to 1, used by ``"mean"`` only)."""
        if self.clip_norm is not None:
            D = clip_rows(D, self.clip_norm)
        if self.rule == "mean":
            wt = torch.as_tensor(list(w), dtype=D.dtype, device=D.device)
            return (wt[:, None] * D).sum(0)
        if self.rule == "median":
            return coordinate_median(D)
        return trimmed_mean(D, self.trim)


def sample_weights(counts: Mapping) -> dict:
    """``n_m / Σn`` without overflow or underflow of the sum: counts are divided by their maximum first.

    (Plain ``n / sum(n)`` gives ``0`` for two counts of 1e308, whose sum is
    ``inf``.)  Counts must be finite and > 0 (the schema checks it).
    """
    top = max(counts.values())
    scaled = {c: v / top for c, v in counts.items()}  # in (0, 1]; the sum is in [1, K]
    tot = sum(scaled.values())
    return {c: v / tot for c, v in scaled.items()}


def row_norms(D: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of every row of ``D``, without overflow for finite entries near the float limit."""
    top = D.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(top > 0, top, torch.ones_like(top))
    return (top * (D / safe).norm(dim=-1, keepdim=True)).squeeze(-1)


def clip_rows(D: torch.Tensor, C: float) -> torch.Tensor:
    """``D_m · min(1, C/‖D_m‖)`` for every row (DP-FedAvg's fixed clipping, without the noise)."""
    norms = row_norms(D)
    scale = torch.where(norms > C, C / norms, torch.ones_like(norms))
    return D * scale[:, None]


def coordinate_median(D: torch.Tensor) -> torch.Tensor:
    """Coordinate-wise median of the rows (for even K the mean of the two middle values, as ``numpy.median``)."""
    K = D.shape[0]
    s = D.sort(dim=0).values
    if K % 2:
        return s[K // 2]
    return 0.5 * s[K // 2 - 1] + 0.5 * s[K // 2]


def trimmed_mean(D: torch.Tensor, trim: float) -> torch.Tensor:
    """Per coordinate: drop the ``⌊trim·K⌋`` smallest and largest rows' values, average the rest."""
    K = D.shape[0]
    k = min(int(trim * K), (K - 1) // 2)
    kept = D.sort(dim=0).values[k:K - k]
    return (kept / kept.shape[0]).sum(0)  # divide first: no overflow for finite values


def pinv_quadratic_lower(H: torch.Tensor, g: torch.Tensor) -> float | None:
    """A lower bound of ``gᵀH⁺g`` for a PSD ``H`` (``g ∈ range(H)``), or ``None`` when H is not PSD.

    ``gᵀ(H + εI)⁻¹g ≤ gᵀH⁺g`` for every ε > 0, by one Cholesky factorization
    (no eigen-decomposition).  H and g are first scaled by ``s = max diag H``
    (``gᵀH⁺g`` is invariant under ``H → H/s, g → g/√s``; no overflow), and
    ``ε = √eps · trace(H/s)``: at least ``√eps·λ_max``, far above Cholesky's
    backward error (≈ p·eps·λ_max), so round-off cannot push the computed value
    above the exact ``gᵀH⁺g`` (up to the final dot product's p·eps), while a
    gradient inflated by c still shows as c² in the bound.  A Cholesky failure
    means H has an eigenvalue below −ε: not positive semidefinite.
    """
    d = torch.diagonal(H)
    s = float(d.max()) if d.numel() else 0.0
    if not s > 0:  # H = 0 (diagonal ≥ 0 checked by the schema): only g = 0 is consistent
        return 0.0 if not bool(g.any()) else float("inf")
    Hn = H / s
    gn = g / s ** 0.5
    eps = float(torch.finfo(H.dtype).eps) ** 0.5 * float(torch.diagonal(Hn).sum())
    L, info = torch.linalg.cholesky_ex(linalg.add_diagonal(Hn, eps))
    if int(info) != 0:
        return None
    y = torch.linalg.solve_triangular(L, gn[:, None], upper=False)
    return float((y * y).sum())


@dataclass
class Screen:
    """Result of :func:`influence_screen`: the clients kept and dropped (indices into the stack), and the
    leave-one-out influences of the last pass (over the clients kept then)."""

    kept: list
    dropped: list
    influence: list
    reasons: dict


def influence_screen(Hs: torch.Tensor, gs: torch.Tensor, sigma: float = 0.0, kappa: float = 20.0,
                     max_drop: int | None = None) -> Screen:
    """Leave-one-client-out influence screening on Gauss–Newton / ridge sufficient statistics.

    ``Hs`` [K, p, p] (each ``J_mᵀJ_m``, PSD), ``gs`` [K, p] (each ``J_mᵀr_m``).  The fused step is
    ``δ = −(ΣH + σI)⁺ Σg``; ``δ_{−m}`` the same without client m.  The influence of m is what its
    statistics cost the *others*: ``I_m = ½ (δ − δ_{−m})ᵀ (H_{−m} + σI) (δ − δ_{−m})`` — the others'
    quadratic model ``Σ_{j≠m} q_j`` at ``δ`` minus its minimum, which is at ``δ_{−m}`` (so ``I_m ≥ 0``,
    exactly, and the others' model loses ``I_m`` because m is in the fit).  The most influential client
    is dropped while ``I_max > κ · median(I)`` (and above a round-off floor, ``√eps`` of the fused
    model's decrease ``½gᵀ(H+σI)⁺g``) and fewer than ``max_drop`` (default ``⌊(K−1)/2⌋``) were
    dropped; influences are recomputed after each drop (one liar inflates every honest ``δ_{−m}`` too).

    What it guards against: a client — lying consistently (its ``H``, ``g`` and loss are those of some
    fabricated rows) or not — whose statistics pull the fused solution far from where the others' data
    put it, by more than κ times a typical client does; up to ``max_drop`` of them, removed one at a time.
    What it does not: a liar whose pull is within κ × the median influence (its damage is then bounded
    by κ times an honest client's), a majority of colluding clients (the median is theirs), K < 3
    (nothing to compare; nothing is dropped).  Honest clients with data unlike the others' (strong
    heterogeneity) can be dropped: κ trades that off; with nobody dropped the fused statistics, hence the
    result, are exactly the plain method's.  Cost: K + 1 dense p×p solves per pass (p the parameter
    count, or the projected dimension)."""
    K, p = gs.shape
    keep, dropped, reasons = list(range(K)), list[int](), dict[int, str]()
    max_drop = (K - 1) // 2 if max_drop is None else int(max_drop)
    eye = torch.eye(p, dtype=Hs.dtype, device=Hs.device)
    infl: list = []
    while len(keep) >= 3:
        idx = torch.tensor(keep, device=Hs.device)
        H, g = Hs[idx].sum(0) + sigma * eye, gs[idx].sum(0)
        Hm, gm = H - Hs[idx], g - gs[idx]                                  # [k, p, p], [k, p]
        d_all = -(torch.linalg.pinv(H, hermitian=True) @ g)
        d_m = -(torch.linalg.pinv(Hm, hermitian=True) @ gm[..., None])[..., 0]
        diff = d_all - d_m
        I_ = 0.5 * torch.einsum("ki,kij,kj->k", diff, Hm, diff).clamp_min(0)
        infl = I_.tolist()
        med = float(I_.median())
        j = int(I_.argmax())
        # round-off floor: with exactly consistent honest data the honest influences are round-off, and a
        # ratio of round-offs means nothing; √eps of the fused model's whole decrease ½gᵀ(H+σI)⁺g
        floor = float(torch.finfo(Hs.dtype).eps) ** 0.5 * 0.5 * abs(float(g @ d_all))
        if len(dropped) >= max_drop or not float(I_[j]) > max(kappa * med, floor):
            break
        reasons[keep[j]] = (f"leave-one-client-out influence {float(I_[j]):.3g} > κ·median = {kappa:g}·{med:.3g}: "
                            "its statistics pull the fused solution away from the others' data")
        dropped.append(keep.pop(j))
    return Screen(keep, dropped, infl, reasons)


def stats_of(msg: dict, p: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(H [p, p], g [p])`` of a Gauss–Newton statistics message: ``H``/``g`` (packed normal form) or the
    square-root form ``R``/``s`` (``H = RᵀR``, ``g = Rᵀs``)."""
    if "H" in msg:
        return linalg.unpack_upper(msg["H"], p), msg["g"]
    return msg["R"].T @ msg["R"], msg["R"].T @ msg["s"]


def screen_messages(ok: dict, bad: dict, p: int, sigma: float, kappa: float) -> list:
    """Apply :func:`influence_screen` to validated statistics messages ``ok`` (client → message): the
    dropped clients move from ``ok`` to ``bad`` with the reason (so the round loop records them as
    rejected, by name).  Returns the dropped client ids."""
    if len(ok) < 3:
        return []
    order = sorted(ok)
    HG = [stats_of(ok[c], p) for c in order]
    sc = influence_screen(torch.stack([h for h, _ in HG]), torch.stack([g for _, g in HG]), sigma, kappa)
    out = []
    for i in sc.dropped:
        c = order[i]
        bad[c] = sc.reasons[i]
        del ok[c]
        out.append(c)
    return out

