"""K-FAC for physics-informed residuals: Kronecker factors that keep the Laplacian's terms, as a preconditioner.

After Dangel, Müller & Zeinhofer, *Kronecker-Factored Approximate Curvature for Physics-Informed Neural
Networks* (NeurIPS 2024), for a tanh/sin :class:`~fedsciml.core.nn.MLP` with a scalar output.

**The weight-sharing view.**  The forward Laplacian (:meth:`fedsciml.core.nn.MLP.value_and_laplacian`)
pushes, through every linear layer ``l``, ``S = d + 2`` *channels* per point — the value ``h``, its ``d``
input derivatives ``∂ᵢh`` and its Laplacian ``Δh`` — with the same weights: ``z_s = W a_s`` (the bias
enters the value channel only, so the augmented input is ``ã_s = [a_s, 1]`` for the value and ``[a_s, 0]``
otherwise).  With ``M = [W | b]`` and ``g_{n,s} = ∂r_n/∂z_{n,s}`` (the residual's gradient with respect to
the layer's output channel ``s`` at point ``n``), the residual's Jacobian row for the layer is exactly
``∂r_n/∂M = Σ_s g_{n,s} ã_{n,s}ᵀ``.  The Gauss–Newton block ``Σ_n vec(·)vec(·)ᵀ`` is approximated by
K-FAC "expand" (the paper's Eq. 11; Eschenhagen et al. 2023 for weight sharing):

    G_l ≈ (1/(N·S)) · (Σ_{n,s} ã ãᵀ) ⊗ (Σ_{n,s} g gᵀ) = A_l ⊗ B_l      (sum-form loss ½‖r‖²),

in ``M``'s row-major ordering: ``(B ⊗ A) vec(M) = vec(B M A)``.  (The paper's normalisation, ``A = ZᵀZ/(N S)``
and ``B = N·Σ(∂L/∂z)(∂L/∂z)ᵀ`` for the mean loss ``L = Σr²/(2N)``, is the same product up to the loss's
``1/N``.)  The cross-channel terms ``s ≠ s'`` are what "expand" drops; with one point and one channel the
factorization is exact.  A value-only part (Dirichlet data ``√β(u − g)``) has ``S = 1``: the ordinary
K-FAC factors.

**Terms.**  Parts are grouped by kind: every ``jet`` part (interior, residual from the channels) into one
*operator* term and every ``value`` part into one *value* term (one K-FAC of the union of those points:
sums added, counts added).  Each layer's approximate block is ``A₁⊗B₁ + A₂⊗B₂``.

**Federated sums.**  A client's message is its raw sums ``Σ ã ãᵀ``, ``Σ g gᵀ`` and point counts per term
and layer (:meth:`KroneckerFactors.pack`).  The server adds them and normalises once: the factors of the
pooled points, ``(Σ_m A_m) ⊗ (Σ_m B_m) / (N S)`` — the expectation form ``E[ããᵀ] ⊗ E[ggᵀ]`` over all
points that the paper's approximation is, so federated factors equal centralized ones up to summation
order.  ``Σ_m A_m ⊗ B_m`` (each client's own K-FAC) is a different, not a Kronecker-factored, matrix.

**The damped inverse.**  ``P = Σ_t (A_t + δ_{A,t} I) ⊗ (B_t + δ_{B,t} I)`` with ``δ_{A,t} δ_{B,t} = μ/T``
(``T`` the terms present) split by the trace-norm heuristic ``π_t = √((tr A_t / dim A)/(tr B_t / dim B))``,
``δ_A = π√(μ/T)``, ``δ_B = √(μ/T)/π`` (Martens & Grosse 2015 §6.3) — so ``P`` contains ``μI`` exactly, plus the
cross terms ``δ_A I⊗B + δ_B A⊗I`` of factored damping.  ``P⁻¹`` is applied *exactly* by the generalized
eigendecomposition of two Kronecker products (Martens, Ba & Johnson 2018, App. B; the authors'
``inverse_kronecker_sum``): with ``K₁ᵀA₁K₁ = I``, ``K₁ᵀA₂K₁ = diag s₁`` (and ``K₂`` for the B's),
``P⁻¹ vec(M) = vec(K_B [(K_Bᵀ M K_A) ⊘ (1 + s_B s_Aᵀ)] K_Aᵀ)``.  Chosen over the single-product
approximation ``(A₁+A₂)⊗(B₁+B₂)`` because the exact form costs the same (two ``eigh`` per factor size, per
damping) and keeps the boundary's rank-deficient block from being smeared over the interior's.

Cost: one forward pass carrying ``S`` channels and one reverse pass, ``O(Σ_l w_l² · n · S)`` flops; memory and
message ``O(Σ_l w_l²)`` floats.  Problems whose interior residual is not a function of these channels (a
general ``Field`` equation) carry no :class:`Jet` and are refused by name (:func:`fedsciml.core.kfac_forms.factors_of`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.func import vjp, vmap

from fedsciml.core import linalg
from fedsciml.core.nn import _SECOND_DERIVATIVES, MLP

KINDS = ("jet", "value")  # the two terms, in message order


@dataclass(frozen=True)
class Jet:
    """How a residual part is computed from the network's channels (attached to a
    :class:`fedsciml.core.objective.ResidualPart` as ``jet``).

    ``kind="jet"``: ``head(u, grad, lap, point) -> r`` at one point (0-d tensors ``u``, ``lap``; ``grad [d]``),
    with ``lap = Σ_{i < n_lap} ∂²u/∂xᵢ²`` (``n_lap=None``: every input axis); ``kind="value"``:
    ``head(u, point) -> r``.  ``point`` is the part's point (a tensor, or a tuple whose first entry is the
    network input).  The part's weight multiplies ``r`` by ``√w`` as in the objective."""

    kind: str
    net: MLP
    head: Callable
    n_lap: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"jet kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.net.sizes[-1] != 1:
            raise ValueError(f"K-FAC for PINNs needs a scalar-output network, got sizes {self.net.sizes}")
        if self.kind == "jet" and self.net.activation not in _SECOND_DERIVATIVES:
            raise ValueError(f"K-FAC for PINNs needs an activation with a forward Laplacian "
                             f"({', '.join(_SECOND_DERIVATIVES)}), got {self.net.activation!r}")


def _inputs(points) -> torch.Tensor:
    return points[0] if isinstance(points, tuple) else points


def _channels_forward(jet: Jet, theta: torch.Tensor, x: torch.Tensor, eps: Sequence[torch.Tensor] | None):
    """Layer inputs ``[n, S, w_in]`` of every layer and the last layer's output channels ``[n, S]``.
    ``eps[l]`` (zeros) is added to layer l's output channels so that a vjp gives ``∂r/∂z``."""
    net = jet.net
    layers = net.unflatten(theta)
    last = len(layers) - 1
    n, d = x.shape
    xm, s_in = net.map_input(x), net.input_scale(x)  # the fixed input map (if any): Jacobian diag(scale)
    if jet.kind == "jet":
        eye = torch.eye(d, dtype=x.dtype, device=x.device) if s_in is None else torch.diag(s_in)
        C = torch.cat([xm.unsqueeze(1), eye.expand(n, d, d), torch.zeros_like(x).unsqueeze(1)], 1)  # [n, d + 2, d]
        m = None if jet.n_lap is None else (torch.arange(d, device=x.device) < jet.n_lap).to(x.dtype)
        d2 = _SECOND_DERIVATIVES[net.activation]
    else:
        C = xm.unsqueeze(1)
    inputs = []
    Z = C
    for i, (W, b) in enumerate(layers):
        inputs.append(C)
        Z = C @ W.T
        if b is not None:  # the bias enters the value channel only
            Z = Z + torch.nn.functional.pad(b.unsqueeze(0), (0, 0, 0, Z.shape[1] - 1))
        if eps is not None:
            Z = Z + eps[i]
        if i == last:
            break
        if jet.kind == "jet":
            zv, zG, zL = Z[:, 0], Z[:, 1:-1], Z[:, -1]
            a, s1, s2 = d2(zv)
            sq = zG * zG
            lap = s1 * zL + s2 * (sq.sum(1) if m is None else (m @ sq))
            C = torch.cat([a.unsqueeze(1), s1.unsqueeze(1) * zG, lap.unsqueeze(1)], 1)
        else:
            C = net._act(Z)
    return inputs, Z[..., 0]


def channel_quantities(jet: Jet, theta: torch.Tensor, points, weight: float = 1.0):
    """Per layer, the augmented input channels ``ã [n, S, w_in (+1)]`` and the residual's gradients with respect
    to the output channels ``g = ∂(√w r_n)/∂z_{n,s} [n, S, w_out]`` of one residual part: one forward pass
    carrying the channels and one reverse pass (a vjp with respect to zero perturbations of every layer's
    output channels; point n's residual depends on point n's channels only, so one cotangent of ones gives
    every point's gradient)."""
    x = _inputs(points)
    net = jet.net
    S = (x.shape[1] + 2) if jet.kind == "jet" else 1
    eps0 = [torch.zeros(x.shape[0], S, fo, dtype=x.dtype, device=x.device) for (_w, _b, _fi, fo) in net._layout]
    sw = math.sqrt(weight)

    def residual(eps):
        ins, out = _channels_forward(jet, theta, x, eps)
        if jet.kind == "jet":
            r = vmap(jet.head)(out[:, 0], out[:, 1:-1], out[:, -1], points)
        else:
            r = vmap(jet.head)(out[:, 0], points)
        return sw * r.reshape(-1), ins

    r, pullback, inputs = vjp(residual, eps0, has_aux=True)  # type: ignore[misc]  # the stub omits has_aux
    grads = pullback(torch.ones_like(r))[0]
    aug = []
    for (_w, b, _fi, _fo), C in zip(net._layout, inputs):
        if b is not None:
            ind = torch.zeros(C.shape[:2] + (1,), dtype=C.dtype, device=C.device)
            ind[:, 0] = 1.0
            C = torch.cat([C, ind], -1)
        aug.append(C)
    return aug, list(grads)


def _part_sums(jet: Jet, theta: torch.Tensor, points, weight: float):
    """``[(Σ ã ãᵀ, Σ g gᵀ)]`` per layer for one residual part (raw sums over its points and channels)."""
    aug, grads = channel_quantities(jet, theta, points, weight)
    sums = []
    for C, Gr in zip(aug, grads):
        Cf = C.reshape(-1, C.shape[-1])
        Gf = Gr.reshape(-1, Gr.shape[-1])
        sums.append((Cf.T @ Cf, Gf.T @ Gf))
    return sums


class KroneckerFactors:
    """Raw per-layer sums of the two terms (``jet``, ``value``): ``A[t][l] = Σ ã ãᵀ``, ``B[t][l] = Σ g gᵀ``,
    ``count[t]`` points and ``channels[t]`` channels per point.  Summable (``+``: the factors of the union of
    the points) and sent as one flat tensor (:meth:`pack`, :attr:`size_floats`)."""

    def __init__(self, net: MLP, d_in: int, A: dict, B: dict, count: dict):
        self.net = net
        self.d_in = int(d_in)
        self.A, self.B, self.count = A, B, count

    @property
    def channels(self) -> dict:
        return {"jet": self.d_in + 2, "value": 1}

    @classmethod
    def zeros(cls, net: MLP, dtype=torch.float64, device="cpu") -> "KroneckerFactors":
        dims = [(fi + (b is not None), fo) for (_w, b, fi, fo) in net._layout]
        A = {t: [torch.zeros(a, a, dtype=dtype, device=device) for a, _ in dims] for t in KINDS}
        B = {t: [torch.zeros(o, o, dtype=dtype, device=device) for _, o in dims] for t in KINDS}
        return cls(net, net.sizes[0], A, B, {t: 0 for t in KINDS})

    def __add__(self, other: "KroneckerFactors") -> "KroneckerFactors":
        if other.net.sizes != self.net.sizes:
            raise ValueError(f"cannot add K-FAC factors of networks {self.net.sizes} and {other.net.sizes}")
        return KroneckerFactors(self.net, self.d_in,
                                {t: [a + b for a, b in zip(self.A[t], other.A[t])] for t in KINDS},
                                {t: [a + b for a, b in zip(self.B[t], other.B[t])] for t in KINDS},
                                {t: self.count[t] + other.count[t] for t in KINDS})

    @staticmethod
    def size_of(net: MLP) -> int:
        """Floats of :meth:`pack` for this network: both terms' packed upper triangles and the 2 counts."""
        per = sum(linalg.n_upper(fi + (b is not None)) + linalg.n_upper(fo) for (_w, b, fi, fo) in net._layout)
        return len(KINDS) * (per + 1)

    @property
    def size_floats(self) -> int:
        return self.size_of(self.net)

    def pack(self) -> torch.Tensor:
        """One flat tensor: per term, every layer's packed ``A`` then ``B``, then the term's point count."""
        out = []
        for t in KINDS:
            for a, b in zip(self.A[t], self.B[t]):
                out += [linalg.pack_upper(a), linalg.pack_upper(b)]
            out.append(self.A[t][0].new_tensor([float(self.count[t])]))
        return torch.cat(out)

    @classmethod
    def unpack(cls, net: MLP, flat: torch.Tensor) -> "KroneckerFactors":
        if flat.ndim != 1 or flat.numel() != cls.size_of(net):
            raise ValueError(f"K-FAC factors of {net.sizes} take {cls.size_of(net)} floats, got shape "
                             f"{tuple(flat.shape)}")
        A: dict = {t: [] for t in KINDS}
        B: dict = {t: [] for t in KINDS}
        count = {}
        off = 0
        for t in KINDS:
            for (_w, b, fi, fo) in net._layout:
                a = fi + (b is not None)
                A[t].append(linalg.unpack_upper(flat[off:off + linalg.n_upper(a)], a))
                off += linalg.n_upper(a)
                B[t].append(linalg.unpack_upper(flat[off:off + linalg.n_upper(fo)], fo))
                off += linalg.n_upper(fo)
            c = float(flat[off])
            if not (c >= 0 and c == int(c)):
                raise ValueError(f"K-FAC factor point count must be a non-negative integer, got {c}")
            count[t] = int(c)
            off += 1
        return cls(net, net.sizes[0], A, B, count)

    def terms(self) -> list[tuple[list, list]]:
        """The normalised factors ``[(A_l / (N S) for l, B_l for l)]`` of the terms with points."""
        out = []
        for t in KINDS:
            if self.count[t] > 0:
                s = 1.0 / (self.count[t] * self.channels[t])
                out.append(([a * s for a in self.A[t]], self.B[t]))
        return out

    def lambda_max(self) -> float:
        """An upper bound of ``λ_max`` of the K-FAC approximation: the largest layer's ``Σ_t λ(A_t) λ(B_t)``
        (the damping unit of LM when it preconditions with K-FAC)."""
        best = 0.0
        terms = self.terms()
        for l in range(len(self.net._layout)):
            best = max(best, sum(float(torch.linalg.eigvalsh(A[l])[-1]) * float(torch.linalg.eigvalsh(B[l])[-1])
                                 for A, B in terms))
        return best

    def inverse(self, mu: float) -> Callable[[torch.Tensor], torch.Tensor]:
        """``v ↦ P⁻¹ v``, ``P`` the damped K-FAC approximation of ``JᵀJ + μI`` (module docstring); μ > 0."""
        if not mu > 0:
            raise ValueError(f"the K-FAC preconditioner needs damping μ > 0, got {mu}")
        terms = self.terms()
        if not terms:
            raise ValueError("K-FAC factors of no points: nothing to precondition with")
        mu_t = mu / len(terms)
        blocks = []
        for l, (_w, b, fi, fo) in enumerate(self.net._layout):
            damped = []
            for A, B in terms:
                a, bb = A[l], B[l]
                ta, tb = float(a.diagonal().sum()) / a.shape[0], float(bb.diagonal().sum()) / bb.shape[0]
                pi = math.sqrt(ta / tb) if ta > 0 and tb > 0 else 1.0
                da, db = pi * math.sqrt(mu_t), math.sqrt(mu_t) / pi
                damped.append((a + da * torch.eye(a.shape[0], dtype=a.dtype, device=a.device),
                               bb + db * torch.eye(bb.shape[0], dtype=bb.dtype, device=bb.device)))
            blocks.append(_KronSumInverse(damped))
        layout = self.net._layout

        def apply(v: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(v)
            for blk, (w, b, fi, fo) in zip(blocks, layout):
                M = v[w:w + fi * fo].reshape(fo, fi)
                if b is not None:
                    M = torch.cat([M, v[b:b + fo].unsqueeze(1)], 1)
                X = blk(M)
                out[w:w + fi * fo] = X[:, :fi].reshape(-1)
                if b is not None:
                    out[b:b + fo] = X[:, fi]
            return out

        return apply


class _KronSumInverse:
    """``M ↦ X`` with ``Σ_t B_t X A_t = M`` for one or two SPD Kronecker products (module docstring)."""

    def __init__(self, damped: list[tuple[torch.Tensor, torch.Tensor]]):
        if len(damped) == 1:
            (A, B), = damped
            sa, self.KA = torch.linalg.eigh(A)
            sb, self.KB = torch.linalg.eigh(B)
            self.D = sb.unsqueeze(1) * sa.unsqueeze(0)
        else:
            (A1, B1), (A2, B2) = damped
            self.KA, sa = _generalized(A1, A2)
            self.KB, sb = _generalized(B1, B2)
            self.D = 1.0 + sb.unsqueeze(1) * sa.unsqueeze(0)

    def __call__(self, M: torch.Tensor) -> torch.Tensor:
        return self.KB @ ((self.KB.T @ M @ self.KA) / self.D) @ self.KA.T


def _generalized(A1: torch.Tensor, A2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(K, s)`` with ``KᵀA₁K = I`` and ``KᵀA₂K = diag s`` (A₁ SPD, A₂ symmetric): Cholesky of A₁ and one eigh."""
    L = torch.linalg.cholesky(A1)
    Li = torch.linalg.solve_triangular(L, torch.eye(L.shape[0], dtype=L.dtype, device=L.device), upper=False)
    C = Li @ A2 @ Li.T
    s, E = torch.linalg.eigh(0.5 * (C + C.T))
    return Li.T @ E, s


def part_factors(net: MLP, theta: torch.Tensor, parts: Sequence) -> KroneckerFactors:
    """The raw K-FAC sums of residual parts (objects with ``jet``, ``points``, ``weight``, ``name``; every
    part must carry a :class:`Jet` of this network)."""
    f = KroneckerFactors.zeros(net, theta.dtype, theta.device)
    theta = theta.detach()
    for part in parts:
        jet = getattr(part, "jet", None)
        if not isinstance(jet, Jet):
            raise ValueError(f"residual part {part.name!r} is not in the channel form K-FAC for PINNs needs")
        if jet.net.sizes != net.sizes:
            raise ValueError(f"residual part {part.name!r} uses network {jet.net.sizes}, not {net.sizes}")
        sums = _part_sums(jet, theta, part.points, part.weight)
        f.A[jet.kind] = [a + s for a, (s, _) in zip(f.A[jet.kind], sums)]
        f.B[jet.kind] = [b + s for b, (_, s) in zip(f.B[jet.kind], sums)]
        f.count[jet.kind] += int(_inputs(part.points).shape[0])
    return f
