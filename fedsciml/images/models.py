"""Image classifiers in plain torch, used as functions of ONE flat parameter vector.

Every network is an ordinary ``nn.Module`` sized by the input shape
``(channels, height, width)``, so 8×8 digits and 32×32 CIFAR both work.
:class:`FlatModel` wraps a module as ``logits = model(theta, x)`` through
``torch.func.functional_call``: federated messages, curvature products
(``jvp``/``vjp``) and aggregators all work on flat vectors.

Normalization: ResNets use GroupNorm instead of BatchNorm.  BatchNorm's running
statistics are buffers, not parameters — averaging parameters while every
client keeps its own statistics breaks both the flat-vector aggregators and the
functional Jacobians (FedFish's ResNet-18 and many FL papers make the same swap).

FC-only training (FIPA's partial-parameter setting): ``FlatModel(module,
trainable=lambda name: name.startswith("fc."))`` — the remaining parameters are
frozen at their current values.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.func import functional_call


# --------------------------------------------------------------------- networks
def _flat_dim(features: nn.Module, shape) -> int:
    with torch.no_grad():
        return int(features(torch.zeros(1, *shape)).numel())


class SimpleCNN(nn.Module):
    """FIPA's SimpleCNN family (no biases): two 3×3 conv + ReLU + 2×2 max-pool
    blocks (pooling skipped once the map is 2×2), a 2×2 adaptive average pool,
    a hidden FC layer and the classifier ``fc``.  Widths ``(a, b, h)`` give about
    8k / 24k / 209k parameters on 32×32×3 inputs."""

    def __init__(self, shape, n_classes, a, b, h):
        super().__init__()
        c, H, _ = shape
        layers = [nn.Conv2d(c, a, 3, padding=1, bias=False), nn.ReLU()]
        if H >= 4:
            layers.append(nn.MaxPool2d(2))
        layers += [nn.Conv2d(a, b, 3, padding=1, bias=False), nn.ReLU()]
        if H >= 8:
            layers.append(nn.MaxPool2d(2))
        layers += [nn.AdaptiveAvgPool2d(2), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.hidden = nn.Linear(b * 4, h, bias=False)
        self.fc = nn.Linear(h, n_classes, bias=False)

    def forward(self, x):
        return self.fc(torch.relu(self.hidden(self.features(x))))


class LeNet5(nn.Module):
    """LeNet-5 (conv 6 → conv 16 → FC 120 → 84 → classes); 5×5 convs padded when the image is small."""

    def __init__(self, shape, n_classes):
        super().__init__()
        c, H, _ = shape
        pad = 2 if H < 32 else 0
        self.features = nn.Sequential(
            nn.Conv2d(c, 6, 5, padding=2 if H < 32 else 0), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5, padding=pad), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        d = _flat_dim(self.features, shape)
        self.fc1, self.fc2, self.fc = nn.Linear(d, 120), nn.Linear(120, 84), nn.Linear(84, n_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.fc2(torch.relu(self.fc1(self.features(x))))))


class WangCNN(nn.Module):
    """The CNN used by FedFisher and FedBEns for SVHN/CIFAR-10 (Wang et al. 2020,
    FedMA's simple CNN): conv 32 → pool → conv 64 → pool → conv 64 → FC 64 → classes."""

    def __init__(self, shape, n_classes):
        super().__init__()
        c = shape[0]
        self.features = nn.Sequential(
            nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.Flatten())
        d = _flat_dim(self.features, shape)
        self.fc1, self.fc = nn.Linear(d, 64), nn.Linear(64, n_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.fc1(self.features(x))))


def _gn(ch):
    return nn.GroupNorm(min(8, ch), ch)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.n1 = _gn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.n2 = _gn(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _gn(cout))

    def forward(self, x):
        out = torch.relu(self.n1(self.conv1(x)))
        out = self.n2(self.conv2(out))
        return torch.relu(out + (x if self.short is None else self.short(x)))


class ResNet(nn.Module):
    """CIFAR-style ResNet with GroupNorm: 3×3 stem, stages of BasicBlocks, global pool, ``fc``."""

    def __init__(self, shape, n_classes, widths, blocks):
        super().__init__()
        c = shape[0]
        self.stem = nn.Sequential(nn.Conv2d(c, widths[0], 3, 1, 1, bias=False), _gn(widths[0]), nn.ReLU())
        layers, cin = [], widths[0]
        for i, (w, n) in enumerate(zip(widths, blocks)):
            for j in range(n):
                layers.append(BasicBlock(cin, w, 2 if (i > 0 and j == 0) else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(cin, n_classes)

    def forward(self, x):
        return self.fc(self.pool(self.layers(self.stem(x))))


def _resnet20(shape, k):
    return ResNet(shape, k, (16, 32, 64), (3, 3, 3))


def _resnet18(shape, k):
    return ResNet(shape, k, (64, 128, 256, 512), (2, 2, 2, 2))


MODELS: dict[str, Callable] = {
    "cnn8k": lambda s, k: SimpleCNN(s, k, 16, 28, 32),
    "cnn23k": lambda s, k: SimpleCNN(s, k, 32, 48, 48),
    "cnn207k": lambda s, k: SimpleCNN(s, k, 64, 128, 256),
    "lenet5": LeNet5,
    "cnn": WangCNN,
    "resnet20": _resnet20,
    "resnet18": _resnet18,
    "linear": lambda s, k: nn.Sequential(nn.Flatten(), _named_fc(s[0] * s[1] * s[2], k)),
}


def _named_fc(d, k):
    return nn.Linear(d, k)


def build(name: str, shape, n_classes: int, seed: int = 0) -> nn.Module:
    """Network ``name`` for inputs of ``shape = (C, H, W)``; parameters drawn from ``seed``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS)}")
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"input shape must be (channels, height, width), got {tuple(shape)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return MODELS[name](tuple(shape), int(n_classes))


def head_names(module: nn.Module) -> list[str]:
    """Parameter names of the final classifier layer (FC-only training)."""
    last = [m for m in module.modules() if isinstance(m, nn.Linear)][-1]
    ids = {id(p) for p in last.parameters()}
    return [n for n, p in module.named_parameters() if id(p) in ids]


# --------------------------------------------------------------- flat wrapper
class FlatModel:
    """``logits = model(theta, x)`` for a module whose (trainable) parameters live in one flat vector."""

    def __init__(self, module: nn.Module, trainable: Callable[[str], bool] | None = None, device=None):
        self.module = module if device is None else module.to(device)
        named = dict(self.module.named_parameters())
        self.names = [n for n in named if trainable is None or trainable(n)]
        if not self.names:
            raise ValueError("no trainable parameters selected")
        self.shapes = [named[n].shape for n in self.names]
        self.numels = [named[n].numel() for n in self.names]
        self.offsets = [0]
        for k in self.numels:
            self.offsets.append(self.offsets[-1] + k)
        self.p = self.offsets[-1]
        self.frozen = {n: t.detach() for n, t in named.items() if n not in self.names}
        self.buffers = dict(self.module.named_buffers())
        self.dtype = named[self.names[0]].dtype
        self.device = named[self.names[0]].device

    def slice(self, name: str) -> slice:
        i = self.names.index(name)
        return slice(self.offsets[i], self.offsets[i + 1])

    def unflatten(self, theta: torch.Tensor) -> dict:
        if theta.shape != (self.p,):
            raise ValueError(f"parameter vector has shape {tuple(theta.shape)}, model needs ({self.p},)")
        return {n: theta[a:b].view(s) for n, a, b, s in zip(self.names, self.offsets, self.offsets[1:], self.shapes)}

    def theta(self) -> torch.Tensor:
        """The module's current trainable parameters as one flat vector (a copy)."""
        named = dict(self.module.named_parameters())
        return torch.cat([named[n].detach().reshape(-1) for n in self.names]).clone()

    def full_params(self, theta) -> dict:
        return {**self.frozen, **self.unflatten(theta), **self.buffers}

    def __call__(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, self.full_params(theta), (x,))

    def layers(self):
        """Trainable Linear/Conv2d layers as ``(module, weight_name, bias_name or None)``."""
        out = []
        names = {id(p): n for n, p in self.module.named_parameters()}
        for m in self.module.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                wn = names[id(m.weight)]
                if wn not in self.names:
                    continue
                if isinstance(m, nn.Conv2d) and m.groups != 1:
                    continue
                bn = names[id(m.bias)] if m.bias is not None else None
                out.append((m, wn, bn if bn in self.names else None))
        return out


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())
