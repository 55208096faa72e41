"""The curvature forms' message interface (fedsciml.core.curvature) that FIPA's clients, aggregator and strategy use:
``diagonal`` and ``quad`` against the dense matrix (an independent reference: ``to_dense``), ``message_problem``
for a wrong size or non-unit eigenvectors, and a client's message read back bitwise."""
import torch

from fedsciml.core import linalg
from fedsciml.core.curvature import Dense, Diagonal, LowRank

D64 = torch.float64


def _forms(p=6, r=3):
    g = torch.Generator().manual_seed(0)
    J = torch.randn(9, p, generator=g, dtype=D64)
    H = J.T @ J
    U, lam = linalg.top_eigh(H, r)
    return [Dense(H), LowRank(U, lam), Diagonal(torch.rand(p, generator=g, dtype=D64))], p


def test_diagonal_and_quad_match_the_dense_matrix():
    forms, p = _forms()
    v = torch.randn(p, generator=torch.Generator().manual_seed(1), dtype=D64)
    for c in forms:
        M = c.to_dense()
        # a sum of p (quad) or r (diagonal) products per entry: relative round-off ≲ p·eps of the magnitudes
        tol = 10 * p * torch.finfo(D64).eps * float(M.abs().max()) * float(v.abs().max()) ** 2
        assert torch.allclose(c.diagonal(), torch.diagonal(M), rtol=0, atol=10 * p * torch.finfo(D64).eps
                              * float(M.abs().max())), type(c).__name__
        assert abs(c.quad(v) - float(v @ M @ v)) <= tol, type(c).__name__


def test_a_message_reads_back_bitwise_and_its_problems_are_named():
    forms, p = _forms()
    dense, low = forms[0], forms[1]
    back = Dense.from_message(dense.to_message())
    assert torch.equal(back.H, torch.triu(dense.H) + torch.triu(dense.H, 1).T)  # the upper triangle, mirrored
    assert Dense.message_problem(dense.to_message(), p) is None
    assert "packed upper triangle of a 5×5 matrix has 15" in Dense.message_problem(dense.to_message(), 5)
    assert LowRank.message_problem(low.to_message(), p) is None
    long = {"U": 2 * low.U, "lam": low.lam}
    assert "eigenvectors must have unit norm" in LowRank.message_problem(long, p)
    assert torch.equal(LowRank.from_message(low.to_message()).U, low.U)
