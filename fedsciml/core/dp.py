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

Noise-aware σ (the paper's future-work item 2, optional): the symmetric noise
E has spectral norm ≈ √(2m)·s (Wigner semicircle edge; m the dimension,
``s√K`` for K local draws); ``noise_aware_sigma=True`` solves with
``σ + √(2m)·s_total``, which keeps ``G̃₊ + σI`` away from the noise floor.
It depends only on public quantities (ε, δ, C_a, C_b, K, m), so it costs no
privacy.

Central DP (the paper's future-work item 1, "secure aggregation"): clients
send clipped exact statistics into a secure sum and the noise is added once to
the sum, with the same s — the total noise is √K times smaller than K
independent local draws.
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
    noise_aware_sigma: bool = False  # add the noise's expected spectral norm √(2m)·s_total to σ


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


def shared_generator(seed: int) -> torch.Generator:
    """The server's noise generator: central DP draws its one noise sample (on the secure sum) from it.  (Local
    noise used to be drawn from it too, for every client in list order; each client now draws from its own
    :func:`client_generator`, since a site cannot draw from another site's generator.)"""
    return torch.Generator(device="cpu").manual_seed(int(seed) + NOISE_SEED_OFFSET)


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


def psd_repair(G: torch.Tensor, floor: float = 0.0) -> tuple[torch.Tensor, int]:
    """Eigenvalue clipping: ``(V max(Λ, floor) Vᵀ, number of clipped eigenvalues)``."""
    G = 0.5 * (G + G.transpose(-1, -2))
    lam, V = torch.linalg.eigh(G)
    n_clipped = int((lam < floor).sum())
    if n_clipped == 0:
        return G, 0
    return (V * lam.clamp_min(floor).unsqueeze(-2)) @ V.transpose(-1, -2), n_clipped
