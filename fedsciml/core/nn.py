"""Functional networks whose parameters are one flat vector.

A flat parameter vector makes every object in fedsciml (Jacobians, curvature,
client messages, checkpoints) a plain tensor, and lets ``torch.func`` transforms
take derivatives with respect to θ and to the input x without module state.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch

_ACTIVATIONS = {
    "tanh": torch.tanh,
    "sin": torch.sin,
    "relu": torch.relu,
    "gelu": torch.nn.functional.gelu,
    "softplus": torch.nn.functional.softplus,
}
#: the activations an :class:`MLP` takes (the problems' ``activation`` option)
ACTIVATIONS = tuple(_ACTIVATIONS)


class MLP:
    """Fully connected network ``u(θ, x)`` with parameters in one flat vector.

    ``sizes = [d_in, h1, ..., d_out]``.  Weights are stored row-major
    (out × in) followed by the bias of each layer.  Initialization: weights
    N(0, 1/fan_in), biases 0 (the FIPA paper's PINN/fitting setting).

    ``model(theta, x)`` accepts ``x`` of shape ``[d_in]`` (one point, the shape
    ``torch.func`` transforms see under ``vmap``) or ``[n, d_in]``; a scalar
    output (d_out = 1) is squeezed, so a single point gives a 0-d tensor.

    ``input_map = (shift, scale)`` (``d_in`` floats each, scales nonzero) puts a fixed affine map
    ``x ↦ (x − shift) ⊙ scale`` before the first layer — no parameters, the same θ layout (a problem maps its
    domain's bounding box to [−1, 1]; see ``input_scaling`` in docs/pde.md).  Every forward path applies it:
    the call, :meth:`value_and_laplacian` and the K-FAC channel forwards, whose first-order input channels are
    ``diag(scale)`` (an affine map has no second derivative).  ``None``: the raw inputs (the same operations
    as a network without one, so the same bits).
    """

    def __init__(self, sizes: Sequence[int], activation: str = "tanh", bias: bool = True,
                 input_map: tuple[Sequence[float], Sequence[float]] | None = None):
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2 or any(s < 1 for s in sizes):
            raise ValueError(f"network sizes must be ≥ 2 positive integers, got {sizes}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; allowed: {sorted(_ACTIVATIONS)}")
        self.sizes = sizes
        self.input_map: tuple[tuple[float, ...], tuple[float, ...]] | None = None
        if input_map is not None:
            shift, scale = (tuple(float(v) for v in a) for a in input_map)
            if len(shift) != sizes[0] or len(scale) != sizes[0] or not all(
                    math.isfinite(v) for v in shift + scale) or any(v == 0 for v in scale):
                raise ValueError(f"input_map must be (shift, scale) of {sizes[0]} finite floats each, scales "
                                 f"nonzero; got {input_map!r}")
            self.input_map = (shift, scale)
        self.activation = activation
        self.bias = bias
        self._act = _ACTIVATIONS[activation]
        self._layout = []  # (w_offset, b_offset or None, fan_in, fan_out)
        off = 0
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            w = off
            off += fan_in * fan_out
            b = None
            if bias:
                b = off
                off += fan_out
            self._layout.append((w, b, fan_in, fan_out))
        self.n_params = off
        self._split_sizes = []
        for _w, b, fan_in, fan_out in self._layout:
            self._split_sizes.append(fan_in * fan_out)
            if b is not None:
                self._split_sizes.append(fan_out)

    def __repr__(self) -> str:
        m = "" if self.input_map is None else ", input_map=…"
        return f"MLP({self.sizes}, activation={self.activation!r}, params={self.n_params}{m})"

    def input_scale(self, x: torch.Tensor) -> torch.Tensor | None:
        """The map's ``scale [d_in]`` in ``x``'s dtype and device (``None`` without a map)."""
        if self.input_map is None:
            return None
        return torch.tensor(self.input_map[1], dtype=x.dtype, device=x.device)

    def map_input(self, x: torch.Tensor) -> torch.Tensor:
        """``(x − shift) ⊙ scale`` (``x`` itself without a map): what the first layer reads."""
        if self.input_map is None:
            return x
        shift, scale = self.input_map
        return (x - torch.tensor(shift, dtype=x.dtype, device=x.device)) * torch.tensor(scale, dtype=x.dtype,
                                                                                         device=x.device)

    def init(self, seed: int = 0, dtype: torch.dtype = torch.float64,
             device: torch.device | str = "cpu") -> torch.Tensor:
        gen = torch.Generator().manual_seed(int(seed))
        theta = torch.zeros(self.n_params, dtype=torch.float64)
        for w, _b, fan_in, fan_out in self._layout:
            theta[w : w + fan_in * fan_out] = torch.randn(fan_in * fan_out, generator=gen, dtype=torch.float64) / math.sqrt(fan_in)
        return theta.to(dtype=dtype, device=device)

    def unflatten(self, theta: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """List of (W, b) views of the flat vector (b is None without biases)."""
        # One split (whose backward is one concatenation) rather than a slice per
        # tensor (whose backward scatters into a zero vector of full length each):
        # under vmap(jacrev) the slices cost a [n, p] fill + add per tensor.
        chunks = iter(theta.split(self._split_sizes, dim=-1))
        out: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        for _w, b, fan_in, fan_out in self._layout:
            W = next(chunks).unflatten(-1, (fan_out, fan_in))
            out.append((W, None if b is None else next(chunks)))
        return out

    def __call__(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if theta.shape[-1] != self.n_params:
            raise ValueError(f"parameter vector has {theta.shape[-1]} entries, network needs {self.n_params}")
        h = self.map_input(x)
        layers = self.unflatten(theta)
        last = len(layers) - 1
        for i, (W, b) in enumerate(layers):
            h = h @ W.T
            if b is not None:
                h = h + b
            if i < last:
                h = self._act(h)
        if self.sizes[-1] == 1:
            h = h.squeeze(-1)
        return h

    # --- derivatives in x by forward propagation ("forward Laplacian") ----------
    @property
    def has_forward_laplacian(self) -> bool:
        """Whether :meth:`value_and_laplacian` has a closed-form path for this activation."""
        return self.activation in _SECOND_DERIVATIVES

    def value_and_laplacian(self, theta: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(u(θ, x), Δₓu(θ, x))`` in one forward pass.

        Propagates, layer by layer, the value ``h``, its input Jacobian
        ``G = ∂h/∂x`` ([..., d, width]) and its Laplacian ``L = Δₓh``:
        ``z = hWᵀ + b``, ``∂z = GWᵀ``, ``Δz = LWᵀ``; then for ``a = σ(z)``:
        ``∂a = σ′(z)∂z``, ``Δa = σ′(z)Δz + σ″(z)Σ_i(∂_i z)²``.  Exact (no finite
        differences), only elementwise ops and matmuls, so ``vmap``/``jacrev``
        over it are cheap — much cheaper than nested ``jacfwd`` for the
        Hessian trace.  ``x`` is one point ``[d]`` or a batch ``[n, d]``;
        needs a scalar output and an activation in ``tanh``/``sin``
        (:attr:`has_forward_laplacian`); otherwise it falls back to nested
        ``torch.func.jacfwd``.
        """
        if not self.has_forward_laplacian:
            self._check_scalar(theta, "value_and_laplacian")
            return self._value_and_laplacian_nested(theta, x)
        h, _G, L = self._forward_jet(theta, x, "value_and_laplacian")
        return h, L

    def value_gradient_laplacian(self, theta: torch.Tensor,
                                 x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(u, ∇ₓu, Δₓu)`` in one forward pass: :meth:`value_and_laplacian`'s pass, whose input Jacobian at the
        output is the gradient (``[d]`` at one point, ``[n, d]`` for a batch) — what a hard-constraint ansatz
        ``B·u`` needs for its Laplacian ``BΔu + 2∇B·∇u + uΔB``.  Nested ``torch.func.jacfwd`` where the
        activation has no forward Laplacian."""
        if not self.has_forward_laplacian:
            from torch.func import jacfwd, vmap

            self._check_scalar(theta, "value_gradient_laplacian")
            u, lap = self._value_and_laplacian_nested(theta, x)
            g1 = jacfwd(lambda y: self(theta, y))
            return u, (g1(x) if x.ndim == 1 else vmap(g1)(x)), lap
        h, G, L = self._forward_jet(theta, x, "value_gradient_laplacian")
        return h, G.squeeze(-1), L

    def _check_scalar(self, theta: torch.Tensor, what: str) -> None:
        if theta.shape[-1] != self.n_params:
            raise ValueError(f"parameter vector has {theta.shape[-1]} entries, network needs {self.n_params}")
        if self.sizes[-1] != 1:
            raise ValueError(f"{what} needs a scalar-output network, this one has {self.sizes[-1]} outputs")

    def _forward_jet(self, theta: torch.Tensor, x: torch.Tensor,
                     what: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(u, ∂ₓu [..., d, 1], Δₓu)``: the forward pass of :meth:`value_and_laplacian` (its docstring)."""
        self._check_scalar(theta, what)
        d2 = _SECOND_DERIVATIVES[self.activation]
        layers = self.unflatten(theta)
        last = len(layers) - 1
        h = self.map_input(x)
        s_in = self.input_scale(x)
        G = None  # ∂h/∂x; diag(scale) (the identity without a map) at the input, applied implicitly in layer 0
        L = None  # Δh; zero at the input (the map is affine)
        for i, (W, b) in enumerate(layers):
            z = h @ W.T
            if b is not None:
                z = z + b
            W0 = W.T if s_in is None or G is not None else s_in.unsqueeze(-1) * W.T
            Gz = W0.expand(x.shape[:-1] + W0.shape) if G is None else G @ W.T
            Lz: torch.Tensor | None = None if L is None else L @ W.T
            if i < last:
                h, s1, s2 = d2(z)
                G = s1.unsqueeze(-2) * Gz
                L = s2 * (Gz * Gz).sum(-2)
                if Lz is not None:
                    L = L + s1 * Lz
            else:
                h, G, L = z, Gz, Lz
        if L is None:  # a single linear layer: Δu = 0
            L = torch.zeros_like(h)
        assert G is not None
        return h.squeeze(-1), G, L.squeeze(-1)

    def _value_and_laplacian_nested(self, theta, x):
        from torch.func import jacfwd, vmap

        def lap1(xi):
            Hx = jacfwd(jacfwd(lambda y: self(theta, y)))(xi)
            return torch.diagonal(Hx, dim1=-2, dim2=-1).sum(-1)

        lap = lap1(x) if x.ndim == 1 else vmap(lap1)(x)
        return self(theta, x), lap


def _tanh_d2(z):
    a = torch.tanh(z)
    s = 1.0 - a * a
    return a, s, -2.0 * a * s


def _sin_d2(z):
    a = torch.sin(z)
    return a, torch.cos(z), -a


# activation → z ↦ (σ(z), σ′(z), σ″(z))
_SECOND_DERIVATIVES = {"tanh": _tanh_d2, "sin": _sin_d2}
