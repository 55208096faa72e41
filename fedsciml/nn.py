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


class MLP:
    """Fully connected network ``u(θ, x)`` with parameters in one flat vector.

    ``sizes = [d_in, h1, ..., d_out]``.  Weights are stored row-major
    (out × in) followed by the bias of each layer.  Initialization: weights
    N(0, 1/fan_in), biases 0 (the FIPA paper's PINN/fitting setting).

    ``model(theta, x)`` accepts ``x`` of shape ``[d_in]`` (one point, the shape
    ``torch.func`` transforms see under ``vmap``) or ``[n, d_in]``; a scalar
    output (d_out = 1) is squeezed, so a single point gives a 0-d tensor.
    """

    def __init__(self, sizes: Sequence[int], activation: str = "tanh", bias: bool = True):
        sizes = [int(s) for s in sizes]
        if len(sizes) < 2 or any(s < 1 for s in sizes):
            raise ValueError(f"network sizes must be ≥ 2 positive integers, got {sizes}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r}; allowed: {sorted(_ACTIVATIONS)}")
        self.sizes = sizes
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

    def __repr__(self) -> str:
        return f"MLP({self.sizes}, activation={self.activation!r}, params={self.n_params})"

    def init(self, seed: int = 0, dtype: torch.dtype = torch.float64, device="cpu") -> torch.Tensor:
        gen = torch.Generator().manual_seed(int(seed))
        theta = torch.zeros(self.n_params, dtype=torch.float64)
        for w, _b, fan_in, fan_out in self._layout:
            theta[w : w + fan_in * fan_out] = torch.randn(fan_in * fan_out, generator=gen, dtype=torch.float64) / math.sqrt(fan_in)
        return theta.to(dtype=dtype, device=device)

    def unflatten(self, theta: torch.Tensor):
        """List of (W, b) views of the flat vector (b is None without biases)."""
        out = []
        for w, b, fan_in, fan_out in self._layout:
            W = theta[w : w + fan_in * fan_out].reshape(fan_out, fan_in)
            out.append((W, None if b is None else theta[b : b + fan_out]))
        return out

    def __call__(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if theta.shape[-1] != self.n_params:
            raise ValueError(f"parameter vector has {theta.shape[-1]} entries, network needs {self.n_params}")
        h = x
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
