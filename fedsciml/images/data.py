"""Image data sets and federated splits.

* ``digits`` — scikit-learn's bundled ``load_digits`` (1797 real 8×8 images, no download).
* ``cifar10`` / ``cifar100`` — the standard python pickle batches
  (``data_batch_1..5``/``test_batch``, or ``train``/``test`` for CIFAR-100) from a
  directory the user names; ``fmnist`` — the IDX files (``train-images-idx3-ubyte``
  etc., optionally ``.gz``).  Nothing is downloaded.  CIFAR batches are read with a
  restricted unpickler that admits only dicts, lists, bytes, strings and numpy
  arrays: a hostile file in ``--data-dir`` is refused, never run.

Splits: IID, the plain Dirichlet label split of Hsu et al. (per class, client
shares ~ Dir(α)), and the balanced-size Dirichlet split used by FedRCL (equal
client sizes, client label priors ~ Dir(α)).  A server-held validation set
(500 samples where the data allow, else 10% of the training set) is taken from
the training data before splitting, as in FedFisher/FedBEns.
"""
from __future__ import annotations

import gzip
import os
import pickle
from dataclasses import dataclass

import numpy as np
import torch

DATASETS = ("digits", "cifar10", "cifar100", "fmnist")


@dataclass
class ImageData:
    x_train: torch.Tensor   # [N, C, H, W] float32, normalized
    y_train: torch.Tensor   # [N] int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int
    name: str

    @property
    def shape(self):
        return tuple(self.x_train.shape[1:])


def _normalize(xtr, xte):
    mean = xtr.mean(axis=(0, 2, 3), keepdims=True)
    std = xtr.std(axis=(0, 2, 3), keepdims=True) + 1e-8
    return (xtr - mean) / std, (xte - mean) / std


def _finish(xtr, ytr, xte, yte, k, name):
    xtr, xte = _normalize(xtr.astype(np.float32), xte.astype(np.float32))
    return ImageData(torch.from_numpy(np.ascontiguousarray(xtr)), torch.as_tensor(ytr, dtype=torch.int64),
                     torch.from_numpy(np.ascontiguousarray(xte)), torch.as_tensor(yte, dtype=torch.int64), k, name)


def load_digits_data(test_fraction: float = 0.2, seed: int = 0) -> ImageData:
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)[:, None]
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), bool)
    for c in range(10):  # stratified test split
        idx = rng.permutation(np.flatnonzero(y == c))
        test[idx[: int(round(test_fraction * len(idx)))]] = True
    return _finish(x[~test], y[~test], x[test], y[test], 10, "digits")


class DataFileMissing(FileNotFoundError, ValueError):
    """A data file is missing (a ``ValueError`` too, so the CLI reports it in one line)."""


def _need(path):
    if not os.path.exists(path):
        raise DataFileMissing(f"expected data file {path!r}; pass --data-dir pointing at the extracted files")
    if not os.path.isfile(path):
        raise ValueError(f"data file {path!r} is not a regular file")
    return path


def _latin1_encode(text, encoding="latin1", errors="strict"):
    """``_codecs.encode`` as Python 3 pickles of bytes use it (protocol ≤ 2), for latin-1 only."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} is not part of a CIFAR batch")
    return text.encode("latin1", errors)


def _numpy_allowed() -> dict:
    core = getattr(np, "_core", None) or np.core
    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype, ("_codecs", "encode"): _latin1_encode}
    for mod in ("numpy.core", "numpy._core"):  # Python 2 era files name numpy.core, numpy ≥ 2 writes numpy._core
        allowed[(f"{mod}.multiarray", "_reconstruct")] = core.multiarray._reconstruct
        allowed[(f"{mod}.multiarray", "scalar")] = core.multiarray.scalar
        allowed[(f"{mod}.numeric", "_frombuffer")] = core.numeric._frombuffer
    return allowed


class _BatchUnpickler(pickle.Unpickler):
    """Admits only what CIFAR batches hold: dicts, lists, bytes, strings, numbers and numpy arrays.

    Any other global (a class, a function such as ``os.system``) is refused
    before it is looked up, so a hostile file in ``--data-dir`` cannot run code.
    """

    ALLOWED = _numpy_allowed()

    def find_class(self, module, name):
        try:
            return self.ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"it references {module}.{name}; a CIFAR batch holds only dicts, lists, "
                                         f"bytes, strings and numpy arrays") from None


def _unpickle(path):
    with open(_need(path), "rb") as f:
        try:
            d = _BatchUnpickler(f, encoding="bytes").load()
        except Exception as e:  # noqa: BLE001 - refused or malformed: one line naming the file
            raise ValueError(f"{path!r} is not a CIFAR python batch (refused): {type(e).__name__}: {e}") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path!r} is not a CIFAR python batch: it holds a {type(d).__name__}, not a dict")
    return {k.encode() if isinstance(k, str) else k: v for k, v in d.items()}


def _cifar_arrays(d, label_key, path="", n_classes=None):
    if b"data" not in d or label_key not in d:
        raise ValueError(f"{path!r} is not a CIFAR python batch: it lacks {b'data'!r} or {label_key!r}")
    x, y = d[b"data"], d[label_key]
    if not (isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 2 and x.shape[1] == 3 * 32 * 32):
        desc = f"{x.dtype} array of shape {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
        raise ValueError(f"{path!r}: {b'data'!r} must be a uint8 array of shape (N, 3072), got a {desc}")
    try:
        y = np.asarray(y)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{path!r}: labels {label_key!r} are not a list of integers: {e}") from None
    if y.ndim != 1 or y.dtype.kind not in "iu" or len(y) != len(x):
        raise ValueError(f"{path!r}: labels {label_key!r} must be {len(x)} integers, got {y.dtype} of shape {y.shape}")
    if len(y) and (y.min() < 0 or (n_classes is not None and y.max() >= n_classes)):
        raise ValueError(f"{path!r}: labels {label_key!r} must lie in [0, {n_classes}), got [{y.min()}, {y.max()}]")
    if len(x) == 0:
        raise ValueError(f"{path!r} holds no images")
    x = x.reshape(-1, 3, 32, 32).astype(np.float32) / 255.0
    return x, y.astype(np.int64)


def _find(data_dir, *names):
    for sub in ("", "cifar-10-batches-py", "cifar-100-python"):
        base = os.path.join(data_dir, sub)
        if all(os.path.exists(os.path.join(base, n)) for n in names):
            return base
    return data_dir


def _batch(base, name, label_key, k):
    path = os.path.join(base, name)
    return _cifar_arrays(_unpickle(path), label_key, path, k)


def load_cifar10(data_dir: str) -> ImageData:
    base = _find(data_dir, "data_batch_1", "test_batch")
    parts = [_batch(base, f"data_batch_{i}", b"labels", 10) for i in range(1, 6)
             if i == 1 or os.path.exists(os.path.join(base, f"data_batch_{i}"))]
    xtr = np.concatenate([p[0] for p in parts])
    ytr = np.concatenate([p[1] for p in parts])
    xte, yte = _batch(base, "test_batch", b"labels", 10)
    return _finish(xtr, ytr, xte, yte, 10, "cifar10")


def load_cifar100(data_dir: str) -> ImageData:
    base = _find(data_dir, "train", "test")
    xtr, ytr = _batch(base, "train", b"fine_labels", 100)
    xte, yte = _batch(base, "test", b"fine_labels", 100)
    return _finish(xtr, ytr, xte, yte, 100, "cifar100")


def read_idx(path: str) -> np.ndarray:
    """One IDX file (uint8 data, big-endian dims), plain or gzipped."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path = path + ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(_need(path), "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{path!r} cannot be read as an IDX file: {e}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path!r} is not an IDX file of unsigned bytes (magic {raw[:4].hex()})")
    ndim = raw[3]
    dims = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path!r}: header says {dims} but holds {data.size} bytes")
    return data.reshape(dims)


def load_fmnist(data_dir: str) -> ImageData:
    f = lambda n: os.path.join(data_dir, n)  # noqa: E731
    xtr = read_idx(f("train-images-idx3-ubyte"))[:, None].astype(np.float32) / 255.0
    ytr = read_idx(f("train-labels-idx1-ubyte")).astype(np.int64)
    xte = read_idx(f("t10k-images-idx3-ubyte"))[:, None].astype(np.float32) / 255.0
    yte = read_idx(f("t10k-labels-idx1-ubyte")).astype(np.int64)
    return _finish(xtr, ytr, xte, yte, 10, "fmnist")


def load(name: str, data_dir: str | None = None, seed: int = 0) -> ImageData:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose from {list(DATASETS)}")
    if name == "digits":
        return load_digits_data(seed=seed)
    if not data_dir:
        raise ValueError(f"dataset {name!r} needs --data-dir (a local directory with the files; nothing is downloaded)")
    return {"cifar10": load_cifar10, "cifar100": load_cifar100, "fmnist": load_fmnist}[name](data_dir)


# ---------------------------------------------------------------------- splits
def validation_split(n: int, seed: int, size: int | None = None):
    """``(server_val_idx, client_pool_idx)``: 500 samples, or 10% when the set is small."""
    size = min(500, max(1, n // 10)) if size is None else int(size)
    if not 0 <= size < n:
        raise ValueError(f"validation size {size} must be in [0, {n})")
    perm = np.random.default_rng(seed + 7919).permutation(n)
    return np.sort(perm[:size]), np.sort(perm[size:])


def iid_split(labels, n_clients: int, seed: int):
    n = len(labels)
    _check_clients(n_clients, n)
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(s) for s in np.array_split(perm, n_clients)]


def _check_clients(k, n):
    if not 1 <= k <= n:
        raise ValueError(f"number of clients must be in [1, {n}], got {k}")


def _check_alpha(alpha):
    if not (alpha > 0 and np.isfinite(alpha)):
        raise ValueError(f"Dirichlet alpha must be a positive number, got {alpha}")


def dirichlet_split(labels, n_clients: int, alpha: float, seed: int, min_size: int = 2, max_tries: int = 1000):
    """Hsu et al. split: for each class, client shares ~ Dir(α·1); redrawn until every
    client holds at least ``min_size`` samples.  Client sizes vary."""
    labels = np.asarray(labels)
    _check_alpha(alpha)
    _check_clients(n_clients, len(labels))
    if n_clients * min_size > len(labels):
        raise ValueError(f"{len(labels)} samples cannot give {n_clients} clients {min_size} each")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    for _ in range(max_tries):
        parts = [[] for _ in range(n_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            q = rng.dirichlet(alpha * np.ones(n_clients))
            cuts = (np.cumsum(q)[:-1] * len(idx)).astype(int)
            for k, s in enumerate(np.split(idx, cuts)):
                parts[k].extend(s.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ValueError(f"Dirichlet split with alpha={alpha} left a client with fewer than {min_size} samples "
                     f"after {max_tries} draws; use fewer clients or a larger alpha")


def balanced_dirichlet_split(labels, n_clients: int, alpha: float, seed: int):
    """FedRCL-style split: equal client sizes; client k's label prior q_k ~ Dir(α·1);
    each of its samples is drawn from q_k renormalized over classes that still have samples."""
    labels = np.asarray(labels)
    _check_alpha(alpha)
    _check_clients(n_clients, len(labels))
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in classes]
    left = np.array([len(p) for p in pools], dtype=float)
    q = rng.dirichlet(alpha * np.ones(len(classes)), size=n_clients)
    sizes = np.full(n_clients, len(labels) // n_clients)
    sizes[: len(labels) % n_clients] += 1
    parts = [[] for _ in range(n_clients)]
    for k in range(n_clients):
        for _ in range(sizes[k]):
            w = q[k] * (left > 0)
            w = w / w.sum() if w.sum() > 0 else (left > 0) / (left > 0).sum()
            c = rng.choice(len(classes), p=w)
            parts[k].append(pools[c].pop())
            left[c] -= 1
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]


def split(labels, n_clients: int, alpha: float | None, seed: int, kind: str = "balanced"):
    """``alpha=None`` → IID; otherwise ``kind`` 'balanced' (FedRCL) or 'hsu' (plain Dirichlet)."""
    if alpha is None:
        return iid_split(labels, n_clients, seed)
    if kind == "balanced":
        return balanced_dirichlet_split(labels, n_clients, alpha, seed)
    if kind == "hsu":
        return dirichlet_split(labels, n_clients, alpha, seed)
    raise ValueError(f"split kind must be 'balanced' or 'hsu', got {kind!r}")


@dataclass
class FederatedImages:
    clients: list            # list of (x, y) tensors per client
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int
    shape: tuple


def federate(data: ImageData, n_clients: int, alpha: float | None, seed: int, kind: str = "balanced",
             val_size: int | None = None, device="cpu") -> FederatedImages:
    """Server validation set first, then the client split of the rest."""
    val, pool = validation_split(len(data.y_train), seed, val_size)
    y_pool = data.y_train[pool].numpy()
    parts = split(y_pool, n_clients, alpha, seed, kind)
    dev = torch.device(device)
    clients = [(data.x_train[pool[p]].to(dev), data.y_train[pool[p]].to(dev)) for p in parts]
    return FederatedImages(clients, data.x_train[val].to(dev), data.y_train[val].to(dev),
                           data.x_test.to(dev), data.y_test.to(dev), data.n_classes, data.shape)
