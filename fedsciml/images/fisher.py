"""Classification curvature: the softmax Gauss–Newton / Fisher ``Jᵀ(diag p − ppᵀ)J``.

Mean form over a client's samples, ``H = (1/N) Σ_n J_nᵀ Λ_n J_n`` with
``Λ_n = diag p_n − p_n p_nᵀ`` (the Hessian of cross-entropy in the logits), so it is
the true Fisher of the softmax likelihood.  Representations:

* :func:`ggn_matmat` — ``V ↦ H V`` matrix-free (``torch.func`` jvp/vjp, vmapped over
  the columns of V, chunked over samples); never a p×p matrix.  Fed to
  :func:`fedsciml.core.linalg.subspace_iteration` for FIPA's top-r eigenpairs.
* :func:`ggn_diag` — the exact diagonal (FisherMerge, FedFisher(Diag), FedBEns diag).
* :func:`empirical_fisher_diag` — sum of squared mini-batch gradients (FedFish, Alg. 2).
* :class:`KFAC` / :func:`kfac` — Kronecker factors ``G ⊗ A`` per Linear/Conv2d
  layer (Conv2d by KFC: unfolded patches, spatial sum; bias as an extra input of 1),
  other parameters diagonal.  ``G`` is built from the exact GGN factor
  ``Λ_n = L_n L_nᵀ`` (one backward pass per class), not a sampled label.
* :func:`layer_grams` — Gram matrices ``XᵀX`` of layer inputs (RegMean).

Why hand-written K-FAC: laplace-torch 0.3 requires torchvision and asdfghjkl, and
curvlinops-for-pytorch 3.0.1 requires backpack-for-pytorch, which requires
torchvision; pip resolves both to a different torch (2.15 plus CUDA wheels),
which this project pins at 2.13.0.  The factors here are ~100 lines and are
checked against the exact GGN in the tests (exact for a linear softmax model).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import vjp, vmap

from fedsciml.core.curvature import Curvature, softmax_ce_hessian
from fedsciml.core.curvature import ggn_matmat as ggn_matmat_of
from fedsciml.core.schema import Field
from fedsciml.images.models import FlatModel


def _chunks(n, size):
    for a in range(0, n, size):
        yield a, min(n, a + size)


def _lambda_factor(p: torch.Tensor) -> torch.Tensor:
    """``L`` with ``L Lᵀ = diag p − ppᵀ`` per sample: ``diag(√p)(I − √p√pᵀ)``; shape [N, C, C]."""
    s = p.clamp_min(0).sqrt()
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    return s[:, :, None] * (eye - s[:, :, None] * s[:, None, :])


def ggn_matmat(model: FlatModel, theta: torch.Tensor, x: torch.Tensor, chunk: int = 256):
    """``V [p, L] ↦ H V`` with ``H = (1/N) Σ Jᵀ(diag p − ppᵀ)J`` at ``theta``: the shared
    :func:`fedsciml.core.curvature.ggn_matmat` with the softmax cross-entropy Hessian, summed over chunks."""
    theta = theta.detach()
    n = x.shape[0]

    def matmat(V):
        out = torch.zeros_like(V)
        for a, b in _chunks(n, chunk):
            xb = x[a:b]
            out += ggn_matmat_of(lambda t: model(t, xb), theta, softmax_ce_hessian)(V)
        return out / n

    return matmat


def ggn_dense(model: FlatModel, theta, x) -> torch.Tensor:
    """Dense GGN through the full Jacobian — for tests and tiny models only."""
    J = torch.func.jacrev(lambda t: model(t, x))(theta.detach())  # [N, C, p]
    prob = torch.softmax(model(theta, x).detach(), -1)
    Lam = torch.diag_embed(prob) - prob[:, :, None] * prob[:, None, :]
    return torch.einsum("ncp,ncd,ndq->pq", J, Lam, J) / x.shape[0]


def _per_sample_factor_grads(model: FlatModel, theta, xb):
    """``Lᵀ J_n`` for each sample: [N, C, p] (rows whose squares sum to the GGN diagonal)."""
    logits = model(theta, xb).detach()
    Lf = _lambda_factor(torch.softmax(logits, -1))  # [N, C, C]

    def one(xi, Li):
        f = lambda t: model(t, xi[None])[0]  # noqa: E731
        _, fn = vjp(f, theta)
        return vmap(lambda u: fn(u)[0])(Li.T)  # rows: (L[:, k])ᵀ J

    return vmap(one)(xb, Lf)


def ggn_diag(model: FlatModel, theta, x, chunk: int = 128) -> torch.Tensor:
    """Exact diagonal of the mean-form softmax GGN (= true Fisher diagonal): per-sample
    layer gradients from inputs × output gradients (as BackPACK's DiagGGN); parameters
    outside Linear/Conv2d layers through per-sample ``vjp``."""
    theta = theta.detach()
    blocks, mods, rest_idx = kfac_structure(model)
    d = torch.zeros_like(theta)
    tmp = KFAC(model.p, blocks, [], [], rest_idx, theta.new_zeros(0))
    acc = [0.0] * len(mods)
    for B, ins, gk in _layer_passes(model, theta, x, chunk):
        for i in range(len(mods)):
            a = ins[i].reshape(B, -1, ins[i].shape[-1])  # [B, T, in]
            for g in gk[i]:
                per = torch.einsum("bto,bti->boi", g, a)
                acc[i] = acc[i] + (per * per).sum(0)
    for i in range(len(mods)):
        tmp._scatter(d, i, acc[i])
    d = d / x.shape[0]
    if rest_idx.numel():
        d[rest_idx] = _vmap_diag(model, theta, x)[rest_idx]
    return d


def _vmap_diag(model: FlatModel, theta, x, chunk: int = 64) -> torch.Tensor:
    """GGN diagonal through per-sample ``vjp`` of every parameter (slow; fallback and reference)."""
    theta = theta.detach()
    d = torch.zeros_like(theta)
    for a, b in _chunks(x.shape[0], chunk):
        g = _per_sample_factor_grads(model, theta, x[a:b])
        d += (g * g).sum((0, 1))
    return d / x.shape[0]


def empirical_fisher_diag(model: FlatModel, theta, x, y, batch_size: int = 64) -> torch.Tensor:
    """FedFish Alg. 2 lines 9–12: Σ over mini-batches of the squared mini-batch gradient."""
    theta = theta.detach()
    out = torch.zeros_like(theta)
    for a, b in _chunks(x.shape[0], batch_size):
        t = theta.clone().requires_grad_(True)
        g, = torch.autograd.grad(F.cross_entropy(model(t, x[a:b]), y[a:b]), t)
        out += g * g
    return out


# --------------------------------------------------------------------- K-FAC
def _layer_inputs(m: nn.Module, inp: torch.Tensor, with_bias: bool) -> torch.Tensor:
    """Rows a (per sample, per spatial position for convs) such that the layer is ``W a``."""
    if isinstance(m, nn.Conv2d):
        a = F.unfold(inp, m.kernel_size, m.dilation, m.padding, m.stride)  # [N, in*k*k, T]
        a = a.transpose(1, 2).reshape(-1, a.shape[1])
    else:
        a = inp.reshape(-1, inp.shape[-1])
    if with_bias:
        a = torch.cat([a, torch.ones_like(a[:, :1])], 1)
    return a


@dataclass
class KFAC(Curvature):
    """Block-diagonal ``⊕_l G_l ⊗ A_l`` (row-major weight blocks ``[out, in(+1)]``) plus a diagonal
    on parameters outside Linear/Conv2d layers.  ``blocks[l] = (weight_slice, bias_slice or None, out)``.
    A :class:`~fedsciml.core.curvature.Curvature`: ``to_message`` / ``from_message(msg, layout=)`` /
    ``fields(layout)`` / ``n_floats``."""

    p: int
    blocks: list
    A: list
    G: list
    rest_idx: torch.Tensor
    rest: torch.Tensor
    names: list = field(default_factory=list)

    def _block(self, v, i):
        ws, bs, out = self.blocks[i]
        W = v[..., ws].reshape(*v.shape[:-1], out, -1)
        if bs is not None:
            W = torch.cat([W, v[..., bs].unsqueeze(-1)], -1)
        return W

    def _scatter(self, res, i, W):
        ws, bs, out = self.blocks[i]
        if bs is not None:
            res[..., bs] = W[..., -1]
            W = W[..., :-1]
        res[..., ws] = W.reshape(*W.shape[:-2], -1)

    def matvec(self, v: torch.Tensor) -> torch.Tensor:
        """``F v`` for v of shape [p] or [..., p]."""
        res = torch.zeros_like(v)
        for i in range(len(self.blocks)):
            self._scatter(res, i, self.G[i] @ self._block(v, i) @ self.A[i])
        res[..., self.rest_idx] = self.rest * v[..., self.rest_idx]
        return res

    def to_dense(self) -> torch.Tensor:
        return self.matvec(torch.eye(self.p, dtype=self.rest.dtype, device=self.rest.device)).T

    def scaled(self, c) -> "KFAC":
        return KFAC(self.p, self.blocks, list(self.A), [c * G for G in self.G], self.rest_idx, c * self.rest,
                    self.names)

    def to_message(self) -> dict:
        """``A{l}``, ``G{l}`` per layer and ``rest`` (the diagonal outside the layers): plain tensors."""
        msg = {f"A{i}": A for i, A in enumerate(self.A)}
        msg.update({f"G{i}": G for i, G in enumerate(self.G)})
        msg["rest"] = self.rest
        return msg

    @classmethod
    def from_message(cls, msg, layout: "KFAC | None" = None) -> "KFAC":
        """The K-FAC carried by ``msg``; ``layout`` (any K-FAC of the same network, e.g. the server's
        template) gives the layer layout, which the message does not carry."""
        if layout is None:
            raise ValueError("a K-FAC message does not carry its layer layout: pass layout= (a KFAC of the same "
                             "network)")
        k = len(layout.blocks)
        return cls(layout.p, layout.blocks, [msg[f"A{i}"] for i in range(k)], [msg[f"G{i}"] for i in range(k)],
                   layout.rest_idx, msg["rest"], layout.names)

    @classmethod
    def fields(cls, layout: "KFAC | None" = None) -> dict:
        """The message schema: Kronecker factors positive semidefinite, the rest diagonal ≥ 0."""
        if layout is None:
            raise ValueError("the K-FAC message schema depends on the layer layout: pass layout=")
        f = {}
        for i, (a, g) in enumerate(layout.factor_shapes()):
            f[f"A{i}"] = Field((a, a), psd="square")
            f[f"G{i}"] = Field((g, g), psd="square")
        f["rest"] = Field((layout.rest_idx.numel(),), nonneg=True)
        return f

    def factor_shapes(self) -> list:
        return [(A.shape[0], G.shape[0]) for A, G in zip(self.A, self.G)]


def kfac_structure(model: FlatModel):
    """``(blocks, layer modules, rest_idx)`` for the model's trainable Linear/Conv2d layers."""
    blocks, mods, covered = [], [], torch.zeros(model.p, dtype=torch.bool)
    for m, wn, bn in model.layers():
        ws = model.slice(wn)
        bs = model.slice(bn) if bn is not None else None
        blocks.append((ws, bs, m.weight.shape[0]))
        mods.append(m)
        covered[ws] = True
        if bs is not None:
            covered[bs] = True
    rest_idx = torch.nonzero(~covered).reshape(-1).to(model.device)
    return blocks, mods, rest_idx


def _layer_passes(model: FlatModel, theta, x, chunk: int = 128):
    """Per chunk of samples: ``(B, [a_l], [[g_lk for each class k]])`` — layer inputs (rows as in
    :func:`_layer_inputs`) and the output gradients of ``Σ_n L_n[:, k]ᵀ f_n`` (GGN factor columns),
    reshaped to ``[B, T, out]``."""
    blocks, mods, _ = kfac_structure(model)
    cap_in, cap_out = {}, {}

    def make(i):
        def hook(mod, inp, out):
            cap_in[i] = inp[0].detach()
            cap_out[i] = out
        return hook
    hooks = [m.register_forward_hook(make(i)) for i, m in enumerate(mods)]
    try:
        for a, b in _chunks(x.shape[0], chunk):
            t = theta.detach().clone().requires_grad_(True)
            logits = model(t, x[a:b])
            Lf = _lambda_factor(torch.softmax(logits.detach(), -1))
            ins = [_layer_inputs(m, cap_in[i], blocks[i][1] is not None) for i, m in enumerate(mods)]
            outs = [cap_out[i] for i in range(len(mods))]
            C = logits.shape[-1]
            gk = [[] for _ in mods]
            for k in range(C):
                grads = torch.autograd.grad((logits * Lf[:, :, k]).sum(), outs, retain_graph=k < C - 1)
                for i, g in enumerate(grads):
                    g = g.flatten(2).transpose(1, 2) if g.ndim == 4 else g.reshape(g.shape[0], 1, -1)
                    gk[i].append(g)
            yield b - a, ins, gk
    finally:
        for h in hooks:
            h.remove()


def kfac(model: FlatModel, theta, x, chunk: int = 128) -> KFAC:
    """K-FAC of the mean-form softmax GGN at ``theta`` (KFC for convolutions:
    ``A = E_{n,t}[a aᵀ]``, ``G = (1/N) Σ_{n,t,k} g gᵀ``)."""
    theta = theta.detach()
    blocks, mods, rest_idx = kfac_structure(model)
    n = x.shape[0]
    A = [0.0] * len(mods)
    G = [0.0] * len(mods)
    n_pos = [1] * len(mods)
    for B, ins, gk in _layer_passes(model, theta, x, chunk):
        for i in range(len(mods)):
            n_pos[i] = ins[i].shape[0] // B
            A[i] = A[i] + ins[i].T @ ins[i]
            for g in gk[i]:
                g = g.reshape(-1, g.shape[-1])
                G[i] = G[i] + g.T @ g
    A = [Ai / (n * n_pos[i]) for i, Ai in enumerate(A)]
    G = [Gi / n for Gi in G]
    rest = _vmap_diag(model, theta, x)[rest_idx] if rest_idx.numel() else theta.new_zeros(0)
    return KFAC(model.p, blocks, A, G, rest_idx, rest, [m.__class__.__name__ for m in mods])


def layer_grams(model: FlatModel, theta, x, chunk: int = 256) -> tuple[list, list, torch.Tensor]:
    """RegMean: per Linear/Conv2d layer the Gram ``XᵀX`` of its inputs (patches for convs,
    bias as an input of 1); returns ``(grams, blocks, rest_idx)`` in K-FAC's block layout."""
    blocks, mods, rest_idx = kfac_structure(model)
    grams = [None] * len(mods)
    cap = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, i=i: cap.__setitem__(i, inp[0].detach()))
             for i, m in enumerate(mods)]
    try:
        with torch.no_grad():
            for a, b in _chunks(x.shape[0], chunk):
                model(theta.detach(), x[a:b])
                for i, m in enumerate(mods):
                    ai = _layer_inputs(m, cap[i], blocks[i][1] is not None)
                    grams[i] = ai.T @ ai if grams[i] is None else grams[i] + ai.T @ ai
    finally:
        for h in hooks:
            h.remove()
    return grams, blocks, rest_idx
