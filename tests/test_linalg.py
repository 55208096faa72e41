"""Shared linear algebra and curvature representations against numpy/scipy references."""
import numpy as np
import pytest
import torch

from fedsciml.core import curvature as C
from fedsciml.core import linalg


def _psd(p, n, seed):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, p, generator=g, dtype=torch.float64)
    return A.T @ A


def test_pack_unpack_roundtrip_and_size():
    H = _psd(7, 10, 0)
    v = linalg.pack_upper(H)
    assert v.numel() == linalg.n_upper(7) == 28
    torch.testing.assert_close(linalg.unpack_upper(v, 7), H, rtol=0, atol=0)
    assert linalg.dim_from_packed(28) == 7
    with pytest.raises(ValueError, match="triangular"):
        linalg.dim_from_packed(27)
    with pytest.raises(ValueError, match="needs 28"):
        linalg.unpack_upper(v[:-1], 7)


def test_damped_solve_matches_numpy_and_batches():
    H = _psd(6, 3, 1)  # rank deficient: only the damping makes it PD
    b = torch.arange(6, dtype=torch.float64)
    x = linalg.damped_solve(H, b, 0.5)
    ref = np.linalg.solve(H.numpy() + 0.5 * np.eye(6), b.numpy())
    np.testing.assert_allclose(x.numpy(), ref, rtol=1e-12)
    mus = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    X = linalg.damped_solve(H.expand(3, 6, 6), b.expand(3, 6), mus)
    for i, mu in enumerate(mus):
        np.testing.assert_allclose(X[i].numpy(), np.linalg.solve(H.numpy() + float(mu) * np.eye(6), b.numpy()), rtol=1e-12)
    with pytest.raises(linalg.NotPositiveDefinite, match="not positive definite"):
        linalg.damped_solve(-torch.eye(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64))


def test_pinv_solve_matches_numpy_pinv():
    H = _psd(8, 3, 2)
    b = torch.randn(8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(linalg.pinv_solve(H, b).numpy(), np.linalg.pinv(H.numpy(), hermitian=True) @ b.numpy(),
                               rtol=1e-8, atol=1e-10)


def test_subspace_iteration_matches_dense_eigh():
    # a spectrum with a clear gap after the top 5
    g = torch.Generator().manual_seed(3)
    Q, _ = torch.linalg.qr(torch.randn(60, 60, generator=g, dtype=torch.float64))
    lam = torch.cat([torch.tensor([50.0, 30.0, 20.0, 10.0, 8.0], dtype=torch.float64), 0.01 * torch.rand(55, generator=g, dtype=torch.float64)])
    H = (Q * lam) @ Q.T
    U, l = linalg.subspace_iteration(lambda V: H @ V, 60, 5, oversample=10, iters=4, seed=1)
    Ud, ld = linalg.top_eigh(H, 5)
    torch.testing.assert_close(l, ld, rtol=1e-10, atol=1e-10)
    # same subspace: |U_dᵀ U| is a rotation
    torch.testing.assert_close((Ud.T @ U).abs(), torch.eye(5, dtype=torch.float64), rtol=0, atol=1e-8)


def test_lowrank_qr_merge_equals_dense_pinv_merge():
    p = 25
    Us, ls, ds, ws = [], [], [], [0.2, 0.5, 0.3]
    for m in range(3):
        U, l = linalg.top_eigh(_psd(p, 8, 10 + m), 5)
        Us.append(U)
        ls.append(l)
        ds.append(torch.randn(p, dtype=torch.float64, generator=torch.Generator().manual_seed(m)))
    dense = C.fipa_merge_dense([(U * l) @ U.T for U, l in zip(Us, ls)], ds, ws)
    qr = C.fipa_merge_lowrank(Us, ls, ds, ws)
    torch.testing.assert_close(qr, dense, rtol=1e-10, atol=1e-12)
    # with β > 0 the QR merge is (Ĥ + βI)⁻¹ b computed in the sketch space
    beta, gamma = 0.7, 0.5
    H = sum(w * (U * l) @ U.T for w, U, l in zip(ws, Us, ls))
    b = sum(w * ((U * l) @ U.T) @ d for w, U, l, d in zip(ws, Us, ls, ds))
    ref = gamma * torch.linalg.solve(H + beta * torch.eye(p, dtype=torch.float64), b)
    torch.testing.assert_close(C.fipa_merge_lowrank(Us, ls, ds, ws, beta=beta, gamma=gamma), ref, rtol=1e-10, atol=1e-12)


def test_fipa_with_exact_local_solves_is_the_gn_step():
    """Paper's consistency property: Δθ_m = −H_m^† g_m  ⇒  Σ B_m Δθ_m = −H^† g."""
    p = 12
    Js = [torch.randn(5, p, dtype=torch.float64, generator=torch.Generator().manual_seed(m)) for m in range(4)]
    rs = [torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(9 + m)) for m in range(4)]
    Hs = [J.T @ J for J in Js]
    gs = [J.T @ r for J, r in zip(Js, rs)]
    deltas = [-linalg.pinv_solve(H, g) for H, g in zip(Hs, gs)]
    step = C.fipa_merge_dense(Hs, deltas)
    gn = -linalg.pinv_solve(sum(Hs), sum(gs))
    torch.testing.assert_close(step, gn, rtol=1e-9, atol=1e-11)


def test_curvature_representations_agree_with_dense():
    H = _psd(10, 4, 5)
    U, l = linalg.top_eigh(H, 4)
    lr = C.LowRank(U, l)
    v = torch.ones(10, dtype=torch.float64)
    torch.testing.assert_close(lr.matvec(v), H @ v, rtol=1e-10, atol=1e-10)  # rank 4 ⇒ exact
    d = C.Diagonal(torch.arange(1.0, 11.0, dtype=torch.float64))
    torch.testing.assert_close((lr + d).to_dense(), lr.to_dense() + torch.diag(d.d))
    torch.testing.assert_close(d.solve(v, 1.0), v / (d.d + 1.0))
    assert C.Dense(H).n_floats == 55 and lr.n_floats == 44 and d.n_floats == 10
    torch.testing.assert_close((lr + lr).to_dense(), 2 * lr.to_dense())
