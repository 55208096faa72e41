"""Random projection of the features (paper Section IV-F): clients send m×m statistics.

All parties build the same ``R ∈ R^{d×m}`` from a shared seed; client k
sends the statistics of ``Ã_k = A_k R`` (``m(m+1)/2 + m`` floats instead of
``d(d+1)/2 + d``); the server fuses them in m dimensions,
``v = (ΣR ᵀA_kᵀA_k R + σI)⁻¹ ΣRᵀA_kᵀb_k``, and maps back, ``w = R v``, so
``aᵀw = (aᵀR) v`` predicts in the original feature space.

Sketches:

* ``gaussian`` — i.i.d. N(0, 1/m) (the paper's),
* ``sparse`` — Achlioptas: ``√(3/m)·{+1, 0, −1}`` with probabilities 1/6, 2/3, 1/6,
* ``srht`` — subsampled randomized Hadamard: ``√(d'/m)·(D H)[:d, S]`` with
  ``H`` the normalized d'×d' Hadamard matrix (d' the next power of two ≥ d),
  ``D`` random signs and ``S`` m columns drawn without replacement.

Each has ``E[R Rᵀ] = I``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

SKETCHES = ("gaussian", "sparse", "srht")


def sketch_matrix(d: int, m: int, seed: int = 0, kind: str = "gaussian", dtype=torch.float64, device="cpu"):
    """The shared projection ``R [d, m]`` (seeded, identical on every client)."""
    if int(d) != d or d < 1:
        raise ValueError(f"feature dimension d must be ≥ 1, got {d}")
    if int(m) != m or not 1 <= m <= d:
        raise ValueError(f"projection dimension m must be an integer in [1, d={d}], got {m}")
    if kind not in SKETCHES:
        raise ValueError(f"unknown sketch {kind!r}; allowed: {', '.join(SKETCHES)}")
    rng = np.random.default_rng([int(seed), 97, d, m])
    if kind == "gaussian":
        R = rng.standard_normal((d, m)) / math.sqrt(m)
    elif kind == "sparse":
        R = rng.choice([-1.0, 0.0, 1.0], size=(d, m), p=[1 / 6, 2 / 3, 1 / 6]) * math.sqrt(3.0 / m)
    else:
        from scipy.linalg import hadamard

        dp = 1 << (d - 1).bit_length()
        H = hadamard(dp).astype(np.float64) / math.sqrt(dp)
        signs = rng.choice([-1.0, 1.0], size=dp)
        cols = rng.choice(dp, size=m, replace=False)
        R = math.sqrt(dp / m) * (signs[:, None] * H)[:d, cols]
    return torch.as_tensor(R, dtype=dtype, device=device)


def project(A: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
    """Client-side projected features ``A_k R``."""
    if A.shape[-1] != R.shape[0]:
        raise ValueError(f"features have {A.shape[-1]} columns, the projection expects d={R.shape[0]}")
    return A @ R
