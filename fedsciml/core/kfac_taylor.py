"""K-FAC for any PINN operator built from u and its derivatives up to second order: Taylor-mode channels.

The general form of Dangel, Müller & Zeinhofer, *Kronecker-Factored Approximate Curvature for Physics-Informed
Neural Networks* (NeurIPS 2024; their heat equation carries value, every input derivative and the spatial
Laplacian), for systems (several outputs), time-dependent problems and any nonlinear operator — of which the
Poisson channel form of :mod:`fedsciml.core.kfac_pinn` is one case.

**Channels.**  A residual part computed from the network's 2-jet at its point is described by a :class:`Taylor`:
the network (an :class:`~fedsciml.core.nn.MLP`, any number of outputs), the jet's ``order`` (0: the value only —
Dirichlet, initial and data rows; 1: value and the d input derivatives — Neumann, Robin; 2: and second-order
*functionals* ``⟨F_k, ∇²u⟩`` of the Hessian, ``F_k`` symmetric d×d: ``E_ii`` for ``u_xx``, the spatial identity
for a Laplacian, one per independent combination the operator reads) and a ``head`` that maps the output channels
at one point to the residual(s).  Every layer's input is propagated as the channels ``S = 1 + d·[order ≥ 1] + m``
(Taylor mode, forward only): ``z_c = W a_c`` (+ b on the value channel), ``∂ᵢσ(z) = σ′∂ᵢz``,
``⟨F, ∇²σ(z)⟩ = σ′⟨F, ∇²z⟩ + σ″ Σ_ab F_ab ∂_a z ∂_b z`` — exact, since every use of ``W`` is a product ``W a_c``.
So ``∂r_n/∂[W | b] = Σ_c g_{n,c} ã_{n,c}ᵀ`` with ``g = ∂r/∂z_c`` (a vjp with respect to zero perturbations of each
layer's output channels, :func:`taylor_quantities`) and K-FAC "expand" gives per layer and term

    A = (1/Σ N·S) Σ_{n,c} ã ãᵀ,      B = Σ_{rows} Σ_c g gᵀ

— the authors' scaling (their ``kfac_utils.compute_kronecker_factors``: ``Z.T @ Z / (N·S)`` and the output
gradients' Gram matrix of the sum loss); a term's normaliser is its (point, channel) pairs, so parts of different
S share a term.  Parts of order 0 form the *value* term, the others the *operator* term (the two Kronecker
products :class:`~fedsciml.core.kfac_pinn.KroneckerFactors` inverts exactly).  With the Poisson form's channels
(value, ∇, one Laplacian functional) the factors are those of :mod:`fedsciml.core.kfac_pinn` (tests check it).

**Other parameters.**  θ entries after the network's (the scalar unknowns of an inverse problem) get their exact
Gauss–Newton block ``Σ ∂r/∂c ∂r/∂cᵀ`` (k×k, a jvp per unknown), inverted damped beside the layers' blocks.

**Which functionals.**  :func:`functional_basis` turns the gradients of a residual with respect to the Hessian's
entries (sampled by the problem layer at a few points) into the basis of the span they lie in, each functional
scaled to 1 at a pivot entry: a Laplacian comes out as ``Σᵢ ∂ᵢᵢ`` (exactly, one channel), ``u_xx`` and ``u_yy``
read separately as two.  Cost: one forward pass of ``S`` channels and ``R`` reverse passes (R residuals per
point), ``O(Σ_l w_l² · n · S)`` flops; memory ``O(n·S·Σ w)``; the factors ``O(Σ_l w_l²)`` floats.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.func import jacfwd, jacrev, vjp, vmap

from fedsciml.core import linalg
from fedsciml.core.kfac_pinn import KINDS, Jet, KroneckerFactors, _inputs
from fedsciml.core.nn import _SECOND_DERIVATIVES, MLP

ORDERS = (0, 1, 2)


@dataclass(frozen=True)
class Taylor:
    """A residual part in Taylor-mode channel form (attached to a residual part as ``jet``; module docstring).

    ``head(value [C], grad [C, d·(order ≥ 1)], second [C, m], point, extra [n_extra]) -> r`` (a 0-d tensor or
    ``[R]``) at one point, ``second[c, k] = ⟨F_k, ∇²u_c⟩`` with ``F = functionals [m, d, d]`` (symmetric; order 2
    only); ``extra``: θ's entries after the network's."""

    net: MLP
    head: Callable
    order: int
    functionals: torch.Tensor | None = None
    n_extra: int = 0

    def __post_init__(self):
        if self.order not in ORDERS:
            raise ValueError(f"Taylor order must be one of {ORDERS}, got {self.order!r}")
        if self.order >= 1 and self.net.activation not in _SECOND_DERIVATIVES:
            raise ValueError(f"Taylor-mode K-FAC needs an activation with known derivatives "
                             f"({', '.join(_SECOND_DERIVATIVES)}), got {self.net.activation!r}")
        F = self.functionals
        if self.order == 2:
            d = self.net.sizes[0]
            if F is None or F.ndim != 3 or F.shape[1:] != (d, d) or F.shape[0] < 1:
                raise ValueError(f"order-2 Taylor channels need functionals of shape [m ≥ 1, {d}, {d}], got "
                                 f"{None if F is None else tuple(F.shape)}")
            if not torch.equal(F, F.transpose(1, 2)):
                raise ValueError("Taylor functionals must be symmetric matrices")
        elif F is not None:
            raise ValueError(f"functionals are for order 2, got order {self.order}")
        if self.n_extra < 0:
            raise ValueError(f"n_extra must be ≥ 0, got {self.n_extra}")

    @property
    def channels(self) -> int:
        d = self.net.sizes[0]
        m = 0 if self.functionals is None else int(self.functionals.shape[0])
        return 1 + (d if self.order >= 1 else 0) + m

    @property
    def kind(self) -> str:
        """The term a part of this form joins: ``value`` (order 0) or ``jet`` (the operator term)."""
        return "value" if self.order == 0 else "jet"


class Deferred:
    """A part's channel form found on first use (:meth:`resolve`; a problem's detection costs a few forward passes,
    paid only where K-FAC is considered): ``find() -> Taylor | None``, called once."""

    def __init__(self, find: Callable[[], "Taylor | None"]):
        self._find: Callable[[], Taylor | None] | None = find
        self._form: Taylor | None = None

    def resolve(self) -> "Taylor | None":
        if self._find is not None:
            self._form, self._find = self._find(), None
        return self._form


def resolved(jet):
    """A part's ``jet`` with a :class:`Deferred` form resolved."""
    return jet.resolve() if isinstance(jet, Deferred) else jet


def from_jet(jet: Jet) -> Taylor:
    """The :class:`Taylor` form of a Poisson-form :class:`~fedsciml.core.kfac_pinn.Jet` (value, ∇, one Laplacian
    over the first ``n_lap`` axes; or the value only)."""
    net = jet.net
    d = net.sizes[0]
    if jet.kind == "value":
        return Taylor(net, lambda v, G, S, pt, ex: jet.head(v[0], pt), 0)
    m = torch.ones(d, dtype=torch.float64) if jet.n_lap is None else (torch.arange(d) < jet.n_lap).to(torch.float64)
    return Taylor(net, lambda v, G, S, pt, ex: jet.head(v[0], G[0], S[0, 0], pt), 2, torch.diag(m).unsqueeze(0))


def _forward(spec: Taylor, layers, x: torch.Tensor, eps: Sequence[torch.Tensor] | None):
    """Every layer's input channels ``[n, S, w_in]`` and the last layer's output channels ``[n, S, C]``."""
    net = spec.net
    n, d = x.shape
    chans = [net.map_input(x).unsqueeze(1)]  # the fixed input map (if any): its Jacobian diag(scale) is the
    if spec.order >= 1:                       # first-order channels' start, its second derivative zero
        s_in = net.input_scale(x)
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        chans.append((eye if s_in is None else torch.diag(s_in)).expand(n, d, d))
    F = None
    if spec.order == 2:
        assert spec.functionals is not None
        F = spec.functionals.to(dtype=x.dtype, device=x.device)
        chans.append(x.new_zeros(n, F.shape[0], d))
    C = torch.cat(chans, 1)
    d2 = _SECOND_DERIVATIVES.get(net.activation)
    last = len(layers) - 1
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
        if spec.order == 0:
            C = net._act(Z)
            continue
        assert d2 is not None  # checked by Taylor
        a, s1, s2 = d2(Z[:, 0])
        zG = Z[:, 1:1 + d]
        out = [a.unsqueeze(1), s1.unsqueeze(1) * zG]
        if F is not None:
            quad = (torch.einsum("kab,nbw->nkaw", F, zG) * zG.unsqueeze(1)).sum(2)
            out.append(s1.unsqueeze(1) * Z[:, 1 + d:] + s2.unsqueeze(1) * quad)
        C = torch.cat(out, 1)
    return inputs, Z


def _split(spec: Taylor, theta: torch.Tensor):
    p = spec.net.n_params
    if theta.numel() != p + spec.n_extra:
        raise ValueError(f"Taylor channels of {spec.net.sizes} with {spec.n_extra} extra parameters take "
                         f"{p + spec.n_extra} parameters, got {theta.numel()}")
    return spec.net.unflatten(theta[:p]), theta[p:]


def _heads(spec: Taylor, out: torch.Tensor, points, extra: torch.Tensor) -> torch.Tensor:
    d = spec.net.sizes[0]
    k = 1 + (d if spec.order >= 1 else 0)
    v = out[:, 0]
    G = out[:, 1:k].transpose(1, 2)
    S = out[:, k:].transpose(1, 2)
    r = vmap(spec.head, in_dims=(0, 0, 0, 0, None))(v, G, S, points, extra)
    return r.reshape(v.shape[0], -1)


def taylor_residual(spec: Taylor, theta: torch.Tensor, points, weight: float = 1.0) -> torch.Tensor:
    """``√w · r [n, R]`` of a part in this form (what a problem compares with its own residual)."""
    layers, extra = _split(spec, theta)
    _, out = _forward(spec, layers, _inputs(points), None)
    return math.sqrt(weight) * _heads(spec, out, points, extra)


def head_sensitivity(spec: Taylor, theta: torch.Tensor, points) -> tuple[torch.Tensor, torch.Tensor]:
    """``(∂r/∂grad [n, R, C, d], ∂r/∂second [n, R, C, m])`` of the head at each point: which channels of the
    output a residual reads (exact zeros where it reads none; a problem samples it to choose a part's form)."""
    layers, extra = _split(spec, theta)
    _, out = _forward(spec, layers, _inputs(points), None)
    d = spec.net.sizes[0]
    k = 1 + (d if spec.order >= 1 else 0)
    v, G, S = out[:, 0], out[:, 1:k].transpose(1, 2), out[:, k:].transpose(1, 2)

    def one(v1, G1, S1, pt):
        return spec.head(v1, G1, S1, pt, extra).reshape(-1)

    dG, dS = vmap(jacrev(one, argnums=(1, 2)))(v, G, S, points)
    return dG, dS


def taylor_quantities(spec: Taylor, theta: torch.Tensor, points, weight: float = 1.0):
    """Per layer the augmented input channels ``ã [n, S, w_in (+1)]`` and, per residual component, the gradients
    ``g = ∂(√w r_{n,i})/∂z_{n,c} [R][n, S, w_out]`` (one forward pass, R pullbacks; point n's residual depends on
    point n's channels only, so a cotangent of ones per component gives every point's gradient)."""
    layers, extra = _split(spec, theta)
    x = _inputs(points)
    net = spec.net
    S = spec.channels
    eps0 = [torch.zeros(x.shape[0], S, fo, dtype=x.dtype, device=x.device) for (_w, _b, _fi, fo) in net._layout]
    sw = math.sqrt(weight)

    def residual(eps):
        ins, out = _forward(spec, layers, x, eps)
        return sw * _heads(spec, out, points, extra), ins

    r, pullback, inputs = vjp(residual, eps0, has_aux=True)  # type: ignore[misc]  # the stub omits has_aux
    grads = []
    for i in range(r.shape[1]):
        ct = torch.zeros_like(r)
        ct[:, i] = 1.0
        grads.append(list(pullback(ct)[0]))
    aug = []
    for (_w, b, _fi, _fo), C in zip(net._layout, inputs):
        if b is not None:
            ind = torch.zeros(C.shape[:2] + (1,), dtype=C.dtype, device=C.device)
            ind[:, 0] = 1.0
            C = torch.cat([C, ind], -1)
        aug.append(C.detach())
    return aug, [[g.detach() for g in gi] for gi in grads]


def extra_jacobian(spec: Taylor, theta: torch.Tensor, points, weight: float = 1.0) -> torch.Tensor:
    """``∂(√w r)/∂(extra θ) [n·R, n_extra]`` (forward mode, one jvp per extra parameter)."""
    p = spec.net.n_params
    base = theta[:p]

    def r_of(extra):
        return taylor_residual(spec, torch.cat([base, extra]), points, weight).reshape(-1)

    return jacfwd(r_of)(theta[p:].detach())


class TaylorFactors(KroneckerFactors):
    """:class:`~fedsciml.core.kfac_pinn.KroneckerFactors` of Taylor-mode parts: ``count[t]`` holds the term's
    (point, channel) pairs (its parts may differ in S), and ``extra`` the raw Gauss–Newton block ``Σ JₑᵀJₑ`` of the
    θ entries after the network's (``n_extra`` of them; ``None`` when there are none).  Summable and packed like
    its base (the extra block's upper triangle last)."""

    def __init__(self, net: MLP, d_in: int, A: dict, B: dict, count: dict, extra: torch.Tensor | None = None):
        super().__init__(net, d_in, A, B, count)
        self.extra = extra

    @property
    def channels(self) -> dict:
        return {t: 1 for t in KINDS}

    @property
    def n_extra(self) -> int:
        return 0 if self.extra is None else int(self.extra.shape[0])

    @classmethod
    def zeros(cls, net: MLP, dtype=torch.float64, device="cpu", n_extra: int = 0) -> "TaylorFactors":
        base = KroneckerFactors.zeros(net, dtype, device)
        ex = torch.zeros(n_extra, n_extra, dtype=dtype, device=device) if n_extra else None
        return cls(net, base.d_in, base.A, base.B, base.count, ex)

    def __add__(self, other):
        if not isinstance(other, TaylorFactors) or other.n_extra != self.n_extra:
            raise ValueError("cannot add Taylor K-FAC factors to factors of another form or parameter count")
        s = KroneckerFactors.__add__(self, other)
        ex = None if self.extra is None or other.extra is None else self.extra + other.extra
        return TaylorFactors(self.net, self.d_in, s.A, s.B, s.count, ex)

    @staticmethod
    def size_of(net: MLP, n_extra: int = 0) -> int:  # type: ignore[override]
        return KroneckerFactors.size_of(net) + (linalg.n_upper(n_extra) if n_extra else 0)

    @property
    def size_floats(self) -> int:
        return self.size_of(self.net, self.n_extra)

    def pack(self) -> torch.Tensor:
        flat = super().pack()
        return flat if self.extra is None else torch.cat([flat, linalg.pack_upper(self.extra)])

    @classmethod
    def unpack(cls, net: MLP, flat: torch.Tensor, n_extra: int = 0) -> "TaylorFactors":  # type: ignore[override]
        if flat.ndim != 1 or flat.numel() != cls.size_of(net, n_extra):
            raise ValueError(f"Taylor K-FAC factors of {net.sizes} with {n_extra} extra parameters take "
                             f"{cls.size_of(net, n_extra)} floats, got shape {tuple(flat.shape)}")
        nb = KroneckerFactors.size_of(net)
        base = KroneckerFactors.unpack(net, flat[:nb])
        ex = linalg.unpack_upper(flat[nb:], n_extra) if n_extra else None
        return cls(net, base.d_in, base.A, base.B, base.count, ex)

    def lambda_max(self) -> float:
        lam = super().lambda_max()
        if self.extra is not None:
            lam = max(lam, float(torch.linalg.eigvalsh(self.extra)[-1]))
        return lam

    def inverse(self, mu: float) -> Callable[[torch.Tensor], torch.Tensor]:
        layers = super().inverse(mu)
        p = self.net.n_params
        if self.extra is None:
            return layers
        E = self.extra + mu * torch.eye(self.n_extra, dtype=self.extra.dtype, device=self.extra.device)
        L = torch.linalg.cholesky(E)

        def apply(v: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(v)
            out[:p] = layers(v[:p])
            out[p:] = torch.cholesky_solve(v[p:].unsqueeze(1), L).squeeze(1)
            return out

        return apply


def taylor_factors(net: MLP, theta: torch.Tensor, parts: Sequence) -> TaylorFactors:
    """The raw K-FAC sums of residual parts whose ``jet`` is a :class:`Taylor` (or a Poisson-form
    :class:`~fedsciml.core.kfac_pinn.Jet`, taken as :func:`from_jet`) of the network ``net``."""
    theta = theta.detach()
    n_extra = theta.numel() - net.n_params
    f = TaylorFactors.zeros(net, theta.dtype, theta.device, n_extra)
    for part in parts:
        spec = as_taylor(part)
        if spec.net.sizes != net.sizes:
            raise ValueError(f"residual part {part.name!r} uses network {spec.net.sizes}, not {net.sizes}")
        aug, grads = taylor_quantities(spec, theta, part.points, part.weight)
        t = spec.kind
        for l, C in enumerate(aug):
            Cf = C.reshape(-1, C.shape[-1])
            f.A[t][l] = f.A[t][l] + Cf.T @ Cf
            for gi in grads:
                Gf = gi[l].reshape(-1, gi[l].shape[-1])
                f.B[t][l] = f.B[t][l] + Gf.T @ Gf
        f.count[t] += int(aug[0].shape[0]) * int(aug[0].shape[1])
        if n_extra:
            Je = extra_jacobian(spec, theta, part.points, part.weight)
            assert f.extra is not None
            f.extra = f.extra + Je.T @ Je
    return f


def as_taylor(part) -> Taylor:
    """A residual part's :class:`Taylor` form (a Poisson-form Jet converted); one line naming the part if none."""
    jet = resolved(getattr(part, "jet", None))
    if isinstance(jet, Taylor):
        return jet
    if isinstance(jet, Jet):
        return from_jet(jet)
    raise ValueError(f"residual part {part.name!r} is not in a channel form K-FAC for PINNs can use")


def pair_index(d: int) -> list[tuple[int, int]]:
    """The Hessian's independent entries ``(i, j), i ≤ j``, in the order :func:`functional_basis` reads them."""
    return [(i, j) for i in range(d) for j in range(i, d)]


def pair_functionals(d: int, dtype=torch.float64) -> torch.Tensor:
    """``[d(d+1)/2, d, d]``: one functional per entry of :func:`pair_index` (``⟨F, H⟩ = H_ij``)."""
    pairs = pair_index(d)
    F = torch.zeros(len(pairs), d, d, dtype=dtype)
    for k, (i, j) in enumerate(pairs):
        F[k, i, j] += 0.5
        F[k, j, i] += 0.5
    return F


def functional_basis(G: torch.Tensor, d: int, rtol: float | None = None) -> torch.Tensor:
    """A basis ``[m, d, d]`` of the second-order functionals a residual reads, from its gradients
    ``G [rows, d(d+1)/2]`` with respect to the Hessian's entries (:func:`pair_index` order) at sample points:
    the span of the rows (numerical rank at ``rtol``, default ``rows·eps``), each basis functional 1 at its own
    pivot entry and 0 at the others' (a reduced row-echelon basis: a Laplacian is ``Σᵢ E_ii``); ``m = 0``
    (``[0, d, d]``) when every row is zero."""
    G = G.detach().to(torch.float64).reshape(-1, d * (d + 1) // 2)
    if G.shape[0] == 0 or float(G.abs().max()) == 0.0:
        return torch.zeros(0, d, d, dtype=torch.float64)
    U, s, Vh = torch.linalg.svd(G, full_matrices=False)
    tol = (rtol if rtol is not None else max(G.shape) * torch.finfo(G.dtype).eps) * float(s[0])
    V = Vh[: int((s > tol).sum())]                       # [m, D], orthonormal rows spanning the functionals
    piv: list[int] = []
    R = V.clone()
    for _ in range(V.shape[0]):                          # Gauss–Jordan with column pivoting on the largest entry
        rest = [c for c in range(R.shape[1]) if c not in piv]
        sub = R[len(piv):][:, rest].abs()
        i, j = divmod(int(sub.argmax()), sub.shape[1])
        i += len(piv)
        R[[len(piv), i]] = R[[i, len(piv)]]
        R[len(piv)] = R[len(piv)] / R[len(piv), rest[j]]
        for q in range(R.shape[0]):
            if q != len(piv):
                R[q] = R[q] - R[q, rest[j]] * R[len(piv)]
        piv.append(rest[j])
    # entries within round-off of an integer are that integer (a Laplacian's 1s), so equal operators give equal bits
    near = (R - R.round()).abs() <= 1e-12 * R.abs().clamp_min(1.0)
    R = torch.where(near, R.round(), R) + 0.0  # (+ 0.0: no negative zeros)
    F = torch.zeros(R.shape[0], d, d, dtype=torch.float64)
    for k, (i, j) in enumerate(pair_index(d)):
        if i == j:
            F[:, i, i] = R[:, k]
        else:
            F[:, i, j] = F[:, j, i] = 0.5 * R[:, k]
    order = sorted(range(len(piv)), key=lambda k: piv[k])
    return F[order]


def reconstruction(functionals: torch.Tensor) -> torch.Tensor:
    """``R [m, d, d]`` such that ``H = Σ_k s_k R_k`` is the minimum-norm symmetric matrix with ``⟨F_k, H⟩ = s_k``
    (in the span of the functionals): how a head rebuilds a Hessian from the channels it is given."""
    F = functionals.to(torch.float64)
    if F.shape[0] == 0:
        return F
    Gm = torch.einsum("kab,jab->kj", F, F)
    return torch.einsum("jk,jab->kab", torch.linalg.inv(Gm), F)
