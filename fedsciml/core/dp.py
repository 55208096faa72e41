"""Differentially private one-shot ridge: a Gaussian mechanism on the pair (G_k, h_k).

Neighbouring datasets: client k's data with one row ``(a, b)`` added or
removed (the paper's Theorem 6: DP "for each client's local dataset").  Rows
are clipped first (:func:`fedsciml.core.privacy.clip_rows`, ``‖a‖₂ ≤ C_a``,
``|b| ≤ C_b``, defaults 1 and 1 as in the paper's Definition 3).

Joint sensitivity.  Release the vector ``v = (h, diag G, √2·offdiag G)``:
the √2 makes ``‖v(G, h)‖₂² = ‖G‖_F² + ‖h‖₂²`` (a Frobenius isometry of the
packed triangle).  Adding or removing one row changes ``G`` by ``aaᵀ`` and
``h`` by ``b·a``, so

    Δ² = ‖aaᵀ‖_F² + ‖b a‖₂² = ‖a‖⁴ + b²‖a‖² ≤ C_a⁴ + C_a² C_b²,
    Δ  = C_a √(C_a² + C_b²)           (= √2 for C_a = C_b = 1),

tight at ``a = C_a e_i, b = C_b``.  One Gaussian mechanism on v with noise
``s = z(ε, δ)·Δ`` (``z`` from :func:`fedsciml.core.privacy.noise_multiplier`,
analytic by default, valid for every ε) is (ε, δ)-DP for the *pair*.  The
paper instead budgets G and h separately with Δ_G = Δ_h = 1 and a full (ε, δ)
each, which composes to (2ε, 2δ); and its Algorithm 2 uses τ = √(2 ln(1.25/δ))
with no ε at all.

Symmetric noise.  Noise N(0, s²) on every entry of v is, in G, a symmetric
matrix E with ``Var E_ii = s²`` and ``Var E_ij = s²/2`` (i ≠ j) — exactly the
paper's "symmetrized" ``(Z + Zᵀ)/2`` with Z i.i.d. N(0, s²).

PSD repair.  ``G̃ = ΣG_k + E`` may be indefinite, and ``G̃ + σI`` then need
not be positive definite.  :func:`psd_repair` replaces G̃ by its projection on
the PSD cone (eigenvalues clipped at 0), the nearest PSD matrix in Frobenius
norm; then ``G̃₊ + σI ⪰ σI`` and the Cholesky solve always succeeds for σ > 0.
Being post-processing, the repair costs no privacy.

Noise-aware σ (the paper's future-work item 2; **the default under DP**): the
symmetric noise E has spectral norm ≈ √(2m)·s (Wigner semicircle edge; m the
dimension, ``s√K`` for K local draws); ``noise_aware_sigma=True`` solves with
``σ + √(2m)·s_total``, which keeps ``G̃₊ + σI`` away from the noise floor.
It depends only on public quantities (ε, δ, C_a, C_b, K, m), so it costs no
privacy.  Decision: it is on by default, because σ is otherwise chosen in the
units of the exact statistics while the noisy Gram's eigenvalues move by up to
‖E‖: a penalty below ‖E‖ fits the noise (standardized diabetes, 4 sites,
central DP at ε = 2: σ = 0.1 gives test MSE 1.9, worse than predicting the
mean; the default 0.59 against 0.54 for scikit-learn's non-private Ridge).  It
is the data-independent half of AdaSSP's rule (Wang 2018, λ ≈ noise norm −
λ_min(G)), which would spend a share of ε on λ_min; ``noise_aware_sigma=False``
(``--no-dp-noise-aware``) solves with σ as given.  :func:`noise_dominates`
says when even that cannot help.

Central DP (the paper's future-work item 1, "secure aggregation"): the sum
carries the noise once, with the same s — √K times smaller than K independent
local draws.  The noise is distributed: each site adds its share N(0, s²/t)
(:func:`share_std`, its own :func:`client_generator`) before its statistics
enter the secure sum, so no party sees an un-noised statistic; a sum with fewer
than t shares is refused (:func:`check_survivors`).  On Flower the secure sum is
SecAgg+ (:mod:`fedsciml.engines.flower.secagg`), whose fixed point is bounded by
:func:`secure_sum_error_bound`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedsciml.core import linalg, privacy


def stats_sensitivity(c_a: float = 1.0, c_b: float = 1.0) -> float:
    """Joint L2 sensitivity of (G, h) under add/remove-one-row: ``C_a √(C_a² + C_b²)``."""
    if not (c_a > 0 and c_b > 0):
        raise ValueError(f"clipping bounds must be > 0, got C_a={c_a}, C_b={c_b}")
    return c_a * math.sqrt(c_a * c_a + c_b * c_b)


@dataclass
class DPConfig:
    epsilon: float
    delta: float = 1e-5
    c_a: float = 1.0
    c_b: float = 1.0
    clip: str = "scale"        # fedsciml.core.privacy.clip_rows mode
    central: bool = False      # noise once on the secure sum instead of on every client message
    calibration: str = "analytic"
    # add the noise's expected spectral norm √(2m)·s_total to σ; None: the default rule (on, unless σ is chosen by
    # leave-one-client-out CV, whose scores already see the noisy statistics)
    noise_aware_sigma: bool | None = None
    # a site refuses when clipping would shrink its median row by more than this factor (None: no check):
    # its statistics would then describe the clip bounds, not its data (fedsciml.core.privacy.check_clip_scale)
    max_shrink: float | None = 10.0


    def __post_init__(self):
        if self.epsilon != math.inf:
            privacy._check(self.epsilon, self.delta)
        stats_sensitivity(self.c_a, self.c_b)

    @property
    def noise_multiplier(self) -> float:
        return privacy.noise_multiplier(self.epsilon, self.delta, self.calibration)

    @property
    def noise_std(self) -> float:
        """``s``: the standard deviation of the noise on each entry of ``(h, diag G, √2 offdiag G)``."""
        return self.noise_multiplier * stats_sensitivity(self.c_a, self.c_b)


NOISE_SEED_OFFSET = 104729  # the noise generator of a one-shot run with seed s is seeded s + 104729


def client_generator(seed: int, cid: int) -> torch.Generator:
    """Client ``cid``'s own local-DP noise generator (:func:`fedsciml.ridge.one_shot` and the runtime's ``one-shot``):
    seeded ``(s + 104729)·1000003 + cid`` (mod 2⁶³), so a client's noise does not depend on which other
    clients answer or in which order they are asked."""
    if int(cid) < 0:
        raise ValueError(f"client id must be ≥ 0 for its noise seed, got {cid}")
    return torch.Generator(device="cpu").manual_seed(
        ((int(seed) + NOISE_SEED_OFFSET) * 1000003 + int(cid)) % (2**63))


def _entry_scale(d: int, dtype, device) -> torch.Tensor:
    """Per-entry noise factors of the packed triangle: 1 on the diagonal, 1/√2 off it."""
    i, j = torch.triu_indices(d, d, device=device)
    return torch.where(i == j, 1.0, 1.0 / math.sqrt(2.0)).to(dtype)


def noise_like(d: int, std: float, generator: torch.Generator, dtype=torch.float64, device="cpu") -> dict:
    """One draw of the mechanism's noise: ``{G: packed symmetric E, h: e}``."""
    q = linalg.n_upper(d)
    zG = torch.randn(q, generator=generator, dtype=dtype).to(device)
    zh = torch.randn(d, generator=generator, dtype=dtype).to(device)
    return {"G": std * _entry_scale(d, dtype, device) * zG, "h": std * zh}


def privatize(msg: dict, std: float, generator: torch.Generator) -> dict:
    """``(G_k + E_k, h_k + e_k)`` without the exact sample count."""
    d = msg["h"].shape[-1]
    e = noise_like(d, std, generator, msg["h"].dtype, msg["h"].device)
    return {"G": msg["G"] + e["G"], "h": msg["h"] + e["h"]}


def noise_norm(m: int, total_std: float) -> float:
    """The expected spectral norm of the symmetric noise on an m×m Gram with per-entry std ``total_std``:
    ``√(2m)·s`` (the semicircle edge for ``Var E_ii = s²``, ``Var E_ij = s²/2``)."""
    return (2.0 * m) ** 0.5 * float(total_std)


def noise_dominates(G: torch.Tensor, total_std: float) -> tuple[bool, float, float]:
    """``(dominated, noise norm, mean eigenvalue)``: whether the noise's spectral norm exceeds the mean eigenvalue
    ``tr(G̃)/m`` of the noisy (repaired) Gram — then most directions of the fit are the noise's and the penalty's,
    not the data's, and the model is pulled towards 0 whatever σ.  Post-processing of the released sum: no privacy
    cost."""
    m = int(G.shape[-1])
    nn = noise_norm(m, total_std)
    mean_eig = float(torch.diagonal(G).sum()) / max(m, 1)
    return nn > mean_eig, nn, mean_eig


def psd_repair(G: torch.Tensor, floor: float = 0.0) -> tuple[torch.Tensor, int]:
    """Eigenvalue clipping: ``(V max(Λ, floor) Vᵀ, number of clipped eigenvalues)``."""
    G = 0.5 * (G + G.transpose(-1, -2))
    lam, V = torch.linalg.eigh(G)
    n_clipped = int((lam < floor).sum())
    if n_clipped == 0:
        return G, 0
    return (V * lam.clamp_min(floor).unsqueeze(-2)) @ V.transpose(-1, -2), n_clipped


# --- central DP through a secure sum: distributed noise and fixed point --------------------------------------


def share_std(std: float, survivors: int) -> float:
    """Distributed Gaussian noise: each site's share ``s/√t`` of the calibrated ``s``.

    Each site adds ``N(0, s²/t)`` to its clipped statistics (the same per-entry factors as
    :func:`noise_like`) before they enter the secure sum; the sum of the shares of the ``K' ≥ t`` sites that
    reach it is ``N(0, (K'/t)·s²)``, at least the calibrated noise, so the release is (ε, δ)-DP whenever at
    least ``t`` shares arrive — and is refused otherwise (:func:`check_survivors`).  No party sees an
    un-noised statistic: a site's message is masked by the secure sum, and the sum carries the noise.  Against a
    server colluding with ``c`` sites (who subtract their own shares) the noise left is ``(K' − c)/t · s²``:
    the guarantee holds for up to ``K' − t`` colluders."""
    if int(survivors) != survivors or survivors < 1:
        raise ValueError(f"the number of sites whose noise shares must reach the sum must be an integer ≥ 1, "
                         f"got {survivors}")
    return float(std) / math.sqrt(int(survivors))


def check_survivors(arrived: int, survivors: int, epsilon: float) -> None:
    """Refuse a central-DP sum that carries fewer than ``t`` noise shares (its noise is below the calibrated
    σ, so it cannot deliver its ε): one line."""
    if arrived < survivors:
        raise ValueError(f"central DP: only {arrived} sites' noise shares reached the sum, but each share was sized "
                         f"for at least {survivors} (noise std below the calibrated one: ε={epsilon} is not "
                         f"delivered); nothing is released — lower dp_min_survivors to tolerate dropouts")


MODULUS_RANGE = 2 ** 32   # Flower SecAgg+'s default (and largest documented) mask modulus M
INT32_MAX = 2 ** 31 - 1   # Flower quantizes into int32 before masking


def statistics_bound(max_rows: int, c_a: float, c_b: float, share: float, margin: float = 10.0) -> float:
    """A bound on every entry of one site's clipped, share-noised statistics ``(pack(G), h)``: with
    ``n ≤ max_rows`` rows of ``‖a‖ ≤ C_a``, ``|b| ≤ C_b``, ``|G_ij| ≤ n C_a²`` and ``|h_j| ≤ n C_a C_b``; the
    noise share adds at most ``margin`` of its standard deviations (a site whose draw exceeds it refuses:
    probability below ``2·10⁻²³`` per entry at margin 10).  This is Flower's ``clipping_range`` ``c``."""
    if int(max_rows) != max_rows or max_rows < 1:
        raise ValueError(f"the public bound on a site's rows must be an integer ≥ 1, got {max_rows}")
    return float(max_rows) * c_a * max(c_a, c_b) + margin * float(share)


def quantization_range(sites: int, modulus: int = MODULUS_RANGE) -> int:
    """Flower's ``quantization_range`` T for ``sites`` summands: the largest with ``sites·T < M`` (the masked
    sum of the quantized values, each in ``[0, T]``, and of the weight factors ``T`` never wraps modulo M)
    and ``T ≤ 2³¹ − 1`` (Flower rounds into int32)."""
    if int(sites) != sites or sites < 1:
        raise ValueError(f"the number of sites must be an integer ≥ 1, got {sites}")
    return int(min(INT32_MAX, (int(modulus) - 1) // int(sites)))


def secure_sum_error_bound(arrived: int, clipping_range: float, quant_range: int) -> float:
    """Per-entry bound on ``|sum returned by SecAgg+ − Σ_k x_k|`` for ``arrived`` sites' vectors with
    ``|x_k| ≤ c`` (Flower 1.41's fixed point, ``max_weight = num_examples = 1`` so its weights are exactly 1,
    the average multiplied back by the number of sites; see :mod:`fedsciml.engines.flower.secagg`).

    Each site rounds ``(x + c)·T/(2c)`` stochastically to an integer: an error below one step ``2c/T``
    (unbiased); the integer sum is exact (no wrap: :func:`quantization_range`).  The server's float64
    dequantization ``Σq·(2c/T) − K'c``, its division by ``K'`` and our multiplication by ``K'`` add a few
    roundings of numbers below ``3K'c``: at most ``16·K'·c·2⁻⁵²`` in all.  So the bound is
    ``K'·2c/T + 16·K'·c·2⁻⁵²`` (c = 1000 at K' = K = 3 sites, T = ⌊(2³² − 1)/3⌋: 4.2e-6)."""
    K, c = int(arrived), float(clipping_range)
    return K * 2.0 * c / int(quant_range) + 16.0 * K * c * 2.0 ** -52


#: the largest SecAgg+ quantization error bound (per entry of the sum) accepted, as a fraction of the DP noise's
#: standard deviation on that entry: at 0.1 the fixed point adds at most 1 % to the released sum's error variance
QUANTIZATION_NOISE_FRACTION = 0.1


def check_secure_sum_precision(sites: int, max_rows: int, c_a: float, c_b: float, noise_std: float, share: float,
                               fraction: float = QUANTIZATION_NOISE_FRACTION) -> float:
    """Refuse (``ValueError``, one line) a public row bound so loose that SecAgg+'s fixed point would swamp the
    statistics: the per-entry error bound :func:`secure_sum_error_bound` grows with the clipping range
    ``c ∝ max_rows`` (:func:`statistics_bound`) while the quantization range ``T`` is fixed by the modulus, so a
    bound of 10⁹ rows for sites of 50 rows quantizes the sum in steps larger than its DP noise.  Accepted when
    the bound is at most ``fraction`` × the noise's standard deviation ``noise_std``; returns the bound.  The
    message names the largest ``dp_max_rows`` that passes."""
    K = int(sites)
    T = quantization_range(K)
    c = statistics_bound(int(max_rows), c_a, c_b, share)
    bound = secure_sum_error_bound(K, c, T)
    allowed = float(fraction) * float(noise_std)
    if bound > allowed:
        c_max = allowed / (2.0 * K / T + 16.0 * K * 2.0 ** -52)
        m_max = math.floor((c_max - 10.0 * float(share)) / (c_a * max(c_a, c_b)))
        hint = (f"give dp_max_rows ≤ {m_max:,} (a true bound on each site's rows)" if m_max >= 1 else
                "no row bound is small enough at this ε; raise ε or lower the clip norms")
        raise ValueError(f"dp_max_rows={int(max_rows):,} makes SecAgg+'s fixed-point error up to {bound:.3g} per "
                         f"entry of the sum, more than {fraction:g} × the DP noise's std {noise_std:.3g}: the "
                         f"model would be lost in rounding; {hint}")
    return bound


def model_error_bound(d: int, w: torch.Tensor, lam_min: float, entry_bound: float) -> float:
    """Bound on ``‖w − w'‖₂`` between the ridge solutions (dimension ``d``) of two fused statistics whose entries
    differ by at most ``B = entry_bound``, both PSD-repaired (a projection: it does not increase the Frobenius
    distance), given the fused one's solution ``w`` and ``lam_min`` ≤ the smallest eigenvalue of the *other*
    system matrix ``G'₊ + σD``: ``w' − w = (G'₊ + σD)⁻¹[(h' − h) − (G'₊ − G₊)w]``, ``‖G'₊ − G₊‖₂ ≤ ‖G' − G‖_F ≤
    d·B`` and ``‖h' − h‖ ≤ √d·B``, so ``‖w − w'‖ ≤ (√d·B + d·B·‖w‖)/lam_min``.  With every coordinate penalized
    ``lam_min = σ`` (``G'₊ ⪰ 0``); with an unpenalized intercept, ``λ_min(G₊ + σD) − d·B`` (Weyl) from the
    fused system.  ``inf`` when ``lam_min ≤ 0`` (no bound)."""
    if not lam_min > 0:
        return math.inf
    B = float(entry_bound)
    return (math.sqrt(d) * B + d * B * float(w.norm())) / float(lam_min)
