"""Coefficient fields given as data — values on a grid or at scattered points — usable inside a
:class:`~fedsciml.problems.domain.DomainPDE`'s ``equation`` (PINNacle's Heat 2d-VC, Wave 2d-CG, Poisson 2d-MS)::

    kappa = fs.GridCoefficient([xs, ys], K, method="linear")     # K [len(xs), len(ys)]

    def equation(self, u, x):                                      # x = (x, y, t): the grid's axes are x, y
        return u.diff(x, "t") - kappa(x) * u.laplacian(x) - f(x)

A coefficient is called with one point ``x [d]`` (what ``equation`` receives under ``vmap``) or a batch
``x [n, d]``, and returns a scalar or ``[n]``; it reads the first ``ndim`` coordinates of x (its own dimension: the
space of a space-time problem) unless ``dims`` names others.  The call is pure torch — comparisons, ``index_select``
and arithmetic, no ``.item()``, no numpy — so it runs under ``torch.func.vmap`` and inside the θ-Jacobian (it does
not depend on θ), on x's device and in x's dtype (the data are moved once per device and dtype and kept).

* :class:`GridCoefficient` — values on a rectilinear grid (strictly increasing coordinates per axis, uniform or
  not): ``method="linear"`` (multilinear: bilinear in 2-D, trilinear in 3-D; equal to scipy's
  ``RegularGridInterpolator(method="linear")``) or ``"nearest"`` (equal to its ``method="nearest"``, a tie going
  to the lower node as there).  Outside the grid the value of the nearest edge is used (constant extrapolation;
  scipy raises instead — under ``vmap`` a point cannot raise).  Finding the cell costs one comparison per grid
  line and axis for each point.  :meth:`GridCoefficient.from_points` builds one from ``x y value`` rows that
  cover a grid, :meth:`GridCoefficient.from_file` from a file of them (PINNacle's ``ref/heat_2d_coef_256.dat``).
* :class:`ScatteredCoefficient` — values at scattered points: ``method="nearest"`` (the value of the closest data
  point: scipy's ``NearestNDInterpolator``, ``griddata(method="nearest")``; costs ``m`` distances per point, so
  for gridded data prefer :class:`GridCoefficient`) or ``"linear"`` (piecewise linear on the Delaunay
  triangulation of the points, computed by scipy once at construction — scipy's ``LinearNDInterpolator``,
  ``griddata(method="linear")`` — and NaN outside their convex hull, as there; at call time each point is
  located among the few simplices a bucket grid lists for its cell, all in torch).

PINNacle's own calls: Heat 2d-VC reads its coefficient with ``griddata(…, method='nearest')``
(``src/pde/heat.py:28-31``), Wave 2d-CG with ``griddata`` at its default ``linear`` (``src/pde/wave.py:76-79``), both
from ``x y value`` rows on a 256 × 256 grid: ``ScatteredCoefficient`` reproduces them exactly; on such a grid
``GridCoefficient.from_points(…, method="nearest")`` gives the same nearest values at a fraction of the cost, while
its ``linear`` (bilinear on each cell) differs from griddata's Delaunay-linear by O(h² |∇²a|).
"""
from __future__ import annotations

import math

from collections.abc import Sequence

import numpy as np
import torch

from .base import DTYPE, ProblemError

METHODS = ("linear", "nearest")


def _as_array(v, what: str) -> np.ndarray:
    try:
        a = np.asarray(v.detach().cpu().numpy() if torch.is_tensor(v) else v, dtype=np.float64)
    except (TypeError, ValueError):
        raise ProblemError(f"{what} must be numbers, got {type(v).__name__}") from None
    if not np.isfinite(a).all():
        raise ProblemError(f"{what}: {int((~np.isfinite(a)).sum())} value(s) are not finite")
    return a


def _rows_from_file(path, inputs: int, max_bytes: int | None, name: str):
    """``(points [m, inputs], values [m])`` from ``x … value`` rows, read as a reference file is (bounded, ``%``
    comments; a row holding a NaN is refused here: a coefficient has a value everywhere it is given)."""
    from .reference import MAX_REFERENCE_BYTES, ReferenceData

    ref = ReferenceData.from_file(path, inputs=inputs, outputs=1,
                                  max_bytes=MAX_REFERENCE_BYTES if max_bytes is None else max_bytes)
    if ref.dropped:
        raise ProblemError(f"{name}.from_file({str(path)!r}): {ref.dropped} row(s) hold a NaN; a coefficient needs a "
                           f"value at every point it lists")
    return ref.X, ref.U[:, 0]


class _Coefficient:
    """What both kinds share: the input coordinates read, the per-device copies of the data, the call."""

    ndim: int
    dims: tuple

    def _set_dims(self, dims, name: str):
        if dims is None:
            dims = tuple(range(self.ndim))
        try:
            dims = tuple(int(d) for d in dims)
        except (TypeError, ValueError):
            raise ProblemError(f"{name}: dims must be {self.ndim} input coordinate indices, got {dims!r}") from None
        if len(dims) != self.ndim or len(set(dims)) != len(dims) or min(dims) < 0:
            raise ProblemError(f"{name}: dims must be {self.ndim} distinct input coordinate indices ≥ 0 (one per "
                               f"data axis), got {dims!r}")
        self.dims = dims
        self._copies: dict = {}

    def _data(self, x: torch.Tensor) -> tuple:
        key = (x.device, x.dtype)
        if key not in self._copies:
            self._copies[key] = tuple(t.to(device=x.device, dtype=x.dtype) if t.is_floating_point()
                                      else t.to(device=x.device) for t in self._tensors())
        return self._copies[key]

    def _tensors(self) -> tuple:  # pragma: no cover - interface
        raise NotImplementedError

    def _at(self, z: torch.Tensor, data: tuple) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The coefficient at ``x [d]`` (a scalar) or ``x [n, d]`` (``[n]``), on x's device, in x's dtype."""
        if x.shape[-1] <= max(self.dims):
            raise ProblemError(f"{type(self).__name__} reads input coordinates {list(self.dims)}; the point has "
                               f"{x.shape[-1]}")
        z = torch.stack([x[..., d] for d in self.dims], -1)
        return self._at(z, self._data(x))


class GridCoefficient(_Coefficient):
    """Values on a rectilinear grid: ``axes`` (one strictly increasing 1-D array of ≥ 2 coordinates per data
    axis), ``values [len(axes[0]), …, len(axes[-1])]`` (``indexing="ij"``), ``method`` ``linear`` or
    ``nearest``; ``dims``: the input coordinates it reads (default the first ``len(axes)``).  See the module
    docstring."""

    def __init__(self, axes: Sequence, values, method: str = "linear", dims: Sequence[int] | None = None):
        name = "GridCoefficient"
        if method not in METHODS:
            raise ProblemError(f"{name}: method must be one of {', '.join(METHODS)}, got {method!r}")
        if isinstance(axes, (np.ndarray, torch.Tensor)) and np.ndim(axes) == 1:
            axes = [axes]
        axs = [_as_array(a, f"{name} axis {k}") for k, a in enumerate(axes)]
        for k, a in enumerate(axs):  # a 2-D array is not an axis (flattened, it read as a jumble of coordinates)
            if a.ndim != 1:
                raise ProblemError(f"{name}: axis {k} must be a 1-D array of coordinates, got shape {a.shape}")
        if not axs:
            raise ProblemError(f"{name}: give at least one axis")
        for k, a in enumerate(axs):
            if a.size < 2 or not (np.diff(a) > 0).all():
                raise ProblemError(f"{name}: axis {k} must hold ≥ 2 strictly increasing coordinates, got "
                                   f"{a.size} {'(not increasing)' if a.size >= 2 else ''}".rstrip())
        v = _as_array(values, f"{name} values")
        shape = tuple(a.size for a in axs)
        if v.shape != shape:
            raise ProblemError(f"{name}: values have shape {v.shape}; the axes give {shape} (indexing 'ij')")
        self.method, self.ndim = method, len(axs)
        self.axes = [torch.as_tensor(a, dtype=DTYPE) for a in axs]
        self.values = torch.as_tensor(v, dtype=DTYPE)
        self._set_dims(dims, name)

    @classmethod
    def from_points(cls, points, values, method: str = "linear", dims: Sequence[int] | None = None) -> GridCoefficient:
        """From rows ``points [m, k]``, ``values [m]`` that cover a grid, each node once, in any order
        (PINNacle's ``x y value`` coefficient files); a set that is not a full grid is refused (use
        :class:`ScatteredCoefficient`)."""
        P = _as_array(points, "GridCoefficient.from_points points")
        v = _as_array(values, "GridCoefficient.from_points values").reshape(-1)
        if P.ndim == 1:
            P = P[:, None]
        if P.ndim != 2 or P.shape[0] != v.shape[0]:
            raise ProblemError(f"GridCoefficient.from_points: need points [m, k] and values [m], got {P.shape} and "
                               f"{v.shape}")
        axes = [np.unique(P[:, k]) for k in range(P.shape[1])]
        shape = tuple(a.size for a in axes)
        idx = tuple(np.searchsorted(a, P[:, k]) for k, a in enumerate(axes))
        flat = np.ravel_multi_index(idx, shape)
        if math.prod(shape) != P.shape[0] or np.unique(flat).size != P.shape[0]:
            raise ProblemError(f"GridCoefficient.from_points: the {P.shape[0]} points do not cover the grid of their "
                               f"distinct coordinates ({' × '.join(map(str, shape))}) once each; use "
                               f"ScatteredCoefficient")
        V = np.empty(math.prod(shape))
        V[flat] = v
        return cls(axes, V.reshape(shape), method=method, dims=dims)

    @classmethod
    def from_file(cls, path, inputs: int = 2, method: str = "linear", dims: Sequence[int] | None = None,
                  max_bytes: int | None = None) -> GridCoefficient:
        """:meth:`from_points` of a text file of ``x … value`` rows (``inputs`` coordinates, then the value; read
        as :meth:`ReferenceData.from_file <fedsciml.problems.reference.ReferenceData.from_file>` reads, bounded)."""
        P, v = _rows_from_file(path, inputs, max_bytes, "GridCoefficient")
        return cls.from_points(P, v, method=method, dims=dims)

    def __repr__(self) -> str:
        return f"GridCoefficient({' × '.join(str(a.numel()) for a in self.axes)}, method={self.method!r})"

    def _tensors(self):
        return (*self.axes, self.values.reshape(-1))

    def _at(self, z, data):
        *axes, flat = data
        shape = [a.shape[0] for a in axes]
        strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
        lo, frac = [], []
        for k, a in enumerate(axes):
            zk = z[..., k]
            i = (a[1:-1] < zk[..., None]).sum(-1)       # a[i] < z ≤ a[i+1], clamped to a cell (scipy's rule)
            a0 = torch.index_select(a, 0, i.reshape(-1)).reshape(i.shape)
            a1 = torch.index_select(a, 0, (i + 1).reshape(-1)).reshape(i.shape)
            t = ((zk - a0) / (a1 - a0)).clamp(0.0, 1.0)
            lo.append(i)
            frac.append(t)
        if self.method == "nearest":
            node = sum(((lo[k] + (frac[k] > 0.5).long()) * strides[k] for k in range(len(axes))), torch.zeros_like(lo[0]))
            return torch.index_select(flat, 0, node.reshape(-1)).reshape(node.shape)
        out = torch.zeros_like(z[..., 0])
        for corner in range(2 ** len(axes)):
            w = torch.ones_like(z[..., 0])
            node = torch.zeros_like(lo[0])
            for k in range(len(axes)):
                up = (corner >> k) & 1
                w = w * (frac[k] if up else 1 - frac[k])
                node = node + (lo[k] + up) * strides[k]
            out = out + w * torch.index_select(flat, 0, node.reshape(-1)).reshape(node.shape)
        return out


class ScatteredCoefficient(_Coefficient):
    """Values at scattered points ``points [m, k]``, ``values [m]``; ``method`` ``nearest`` or ``linear``
    (Delaunay, NaN outside the convex hull); ``dims``: the input coordinates it reads (default the first k).  See
    the module docstring."""

    def __init__(self, points, values, method: str = "nearest", dims: Sequence[int] | None = None):
        name = "ScatteredCoefficient"
        if method not in METHODS:
            raise ProblemError(f"{name}: method must be one of {', '.join(METHODS)}, got {method!r}")
        P = _as_array(points, f"{name} points")
        v = _as_array(values, f"{name} values")
        if v.ndim == 2 and v.shape[1] == 1:  # a column of values
            v = v[:, 0]
        if v.ndim != 1:
            raise ProblemError(f"{name}: values must be [m] (one value per point), got shape {v.shape}")
        if P.ndim == 1:
            P = P[:, None]
        if P.ndim != 2 or P.shape[0] != v.shape[0] or P.shape[0] == 0:
            raise ProblemError(f"{name}: need points [m, k] and values [m] with m ≥ 1, got {P.shape} and {v.shape}")
        self.method, self.ndim = method, P.shape[1]
        self.points, self.values = torch.as_tensor(P, dtype=DTYPE), torch.as_tensor(v, dtype=DTYPE)
        self._set_dims(dims, name)
        if method == "linear":
            self._locator = _DelaunayLocator(P, name)

    @classmethod
    def from_file(cls, path, inputs: int = 2, method: str = "nearest", dims: Sequence[int] | None = None,
                  max_bytes: int | None = None) -> ScatteredCoefficient:
        """From a text file of ``x … value`` rows (``inputs`` coordinates, then the value), read bounded as a
        reference file is."""
        P, v = _rows_from_file(path, inputs, max_bytes, "ScatteredCoefficient")
        return cls(P, v, method=method, dims=dims)

    def __repr__(self) -> str:
        return f"ScatteredCoefficient({self.points.shape[0]} points in {self.ndim}-D, method={self.method!r})"

    def _tensors(self):
        if self.method == "nearest":
            return (self.points, self.values)
        L = self._locator
        return (self.values, L.T, L.r, L.simplices, L.cells, L.lo, L.width, L.nb)

    def _at(self, z, data):
        if self.method == "nearest":
            P, v = data
            j = ((z[..., None, :] - P) ** 2).sum(-1).argmin(-1)
            return torch.index_select(v, 0, j.reshape(-1)).reshape(j.shape)
        v, T, r, simplices, cells, lo, width, nb = data
        k = self.ndim
        c = torch.minimum(((z - lo) / width).floor().long().clamp_min(0), nb - 1)   # the bucket of each point
        b = torch.zeros_like(c[..., 0])
        for i in range(k):
            b = b * self._locator.nb_list[i] + c[..., i]
        cand = torch.index_select(cells, 0, b.reshape(-1)).reshape(*b.shape, cells.shape[1])   # [..., K] simplex ids
        valid = cand >= 0
        s = cand.clamp_min(0)
        Ts = torch.index_select(T, 0, s.reshape(-1)).reshape(*s.shape, k, k)
        rs = torch.index_select(r, 0, s.reshape(-1)).reshape(*s.shape, k)
        bary = (Ts @ (z[..., None, :] - rs)[..., None])[..., 0]                                # [..., K, k]
        lam = torch.cat([bary, 1 - bary.sum(-1, keepdim=True)], -1)                          # [..., K, k+1]
        tol = 100 * torch.finfo(z.dtype).eps
        inside = valid & (lam >= -tol).all(-1)
        first = (inside.long().cumsum(-1) == 1) & inside                                     # the first such simplex
        verts = torch.index_select(simplices, 0, s.reshape(-1)).reshape(*s.shape, k + 1)
        vv = torch.index_select(v, 0, verts.reshape(-1)).reshape(verts.shape)
        val = torch.where(first, (lam * vv).sum(-1), torch.zeros_like(vv[..., 0])).sum(-1)
        return torch.where(inside.any(-1), val, torch.full_like(val, float("nan")))


class _DelaunayLocator:
    """scipy's Delaunay triangulation of the points, with what a torch call needs to locate a point in it: each
    simplex's barycentric transform (``T``, ``r``: ``λ[:k] = T (z − r)``, ``r`` its last vertex), and a bucket grid over the points' bounding
    box listing, per bucket, the simplices whose bounding boxes meet it (padded with −1 to the longest list)."""

    def __init__(self, P: np.ndarray, name: str):
        from scipy.spatial import Delaunay, QhullError

        m, k = P.shape
        if k == 1:
            raise ProblemError(f"{name}: linear interpolation of 1-D scattered points is GridCoefficient(sorted "
                               f"points, values, method='linear'); Delaunay needs ≥ 2 dimensions")
        if m < k + 1:
            raise ProblemError(f"{name}: linear interpolation in {k}-D needs at least {k + 1} points, got {m}")
        try:
            tri = Delaunay(P)
        except (QhullError, ValueError) as e:
            raise ProblemError(f"{name}: the points admit no Delaunay triangulation (all on a line or plane?): "
                               f"{str(e).splitlines()[0]}") from None
        S = tri.simplices
        V = P[S]                                            # [s, k+1, k]: each simplex's vertices
        A = np.swapaxes(V[:, :k] - V[:, k:], 1, 2)          # columns v_j − v_k: z − v_k = A λ[:k]
        scale = np.abs(A).max((1, 2)) ** k
        ok = np.abs(np.linalg.det(A)) > 1e3 * np.finfo(np.float64).eps * np.maximum(scale, 1e-300)
        S, V, A = S[ok], V[ok], A[ok]                       # a flat simplex has no transform: never a candidate
        Tinv = np.linalg.inv(A)                             # scipy's Delaunay.transform, without its slow loop
        lo, hi = P.min(0), P.max(0)
        nb = np.maximum(1, np.round((S.shape[0] / 2) ** (1 / k) * np.ones(k))).astype(np.int64)
        width = np.where(hi > lo, (hi - lo) / nb, 1.0)
        smin, smax = V.min(1), V.max(1)
        c0 = np.clip(np.floor((smin - lo) / width).astype(np.int64), 0, nb - 1)
        c1 = np.clip(np.floor((smax - lo) / width).astype(np.int64), 0, nb - 1)
        span = c1 - c0 + 1                                  # buckets each simplex's box covers, per axis
        shapes, group = np.unique(span, axis=0, return_inverse=True)
        sids, buckets = [], []
        for g, sh in enumerate(shapes):                     # one vectorized pass per distinct box shape
            js = np.nonzero(group.reshape(-1) == g)[0]
            off = np.stack(np.meshgrid(*[np.arange(n) for n in sh], indexing="ij"), -1).reshape(-1, k)
            sids.append(np.repeat(js, off.shape[0]))
            cell = (c0[js][:, None, :] + off[None]).reshape(-1, k)
            buckets.append(np.ravel_multi_index(tuple(cell.T), tuple(nb)))
        sid, bucket = np.concatenate(sids), np.concatenate(buckets)
        order = np.lexsort((sid, bucket))
        bucket, sid = bucket[order], sid[order]
        count = np.bincount(bucket, minlength=int(np.prod(nb)))
        start = np.concatenate([[0], np.cumsum(count)[:-1]])
        cells = -np.ones((count.size, max(1, int(count.max()))), dtype=np.int64)
        cells[bucket, np.arange(bucket.size) - start[bucket]] = sid
        self.T = torch.as_tensor(Tinv, dtype=DTYPE)
        self.r = torch.as_tensor(V[:, k], dtype=DTYPE)
        self.simplices = torch.as_tensor(S, dtype=torch.int64)
        self.cells = torch.as_tensor(cells)
        self.lo, self.width = torch.as_tensor(lo, dtype=DTYPE), torch.as_tensor(width, dtype=DTYPE)
        self.nb = torch.as_tensor(nb)
        self.nb_list = [int(n) for n in nb]
