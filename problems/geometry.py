"""Geometries: domains, their boundaries, outward normals, named boundary parts, client partitions.

A :class:`Geometry` is a closed set in R^d with

* ``contains(x)`` — a bool per point of ``x [n, d]`` (closed set, tolerance :data:`TOL` × diameter);
* ``on_boundary(x)`` and ``normal(x)`` — the outward unit normal at boundary points;
* ``sample_interior(n, method, seed)`` and ``sample_boundary(n, method, seed, part=None)``;
* named boundary parts: a box's faces (``"x-"``, ``"x+"``, ``"y-"``, …), a polygon's edges
  (``"e0"``, ``"e1"``, … or the names given), a ball's ``"sphere"``, and any predicate of x
  (:meth:`Geometry.with_parts`).

Primitives: :class:`Box` (per-axis bounds), :class:`Interval`, :class:`Ball` (a :class:`Disk` in 2-D),
:class:`Polygon` (:func:`LShape`), and CSG: ``a | b`` (union), ``a - b`` (difference), ``a & b``
(intersection).  :class:`SpaceTime` is ``geometry × [t0, T]``: its boundary is the lateral boundary
(each spatial part × [t0, T], same names) and the ``"initial"`` slice t = t0 — never t = T.

Sampling methods (``SAMPLINGS``): ``lhs`` (pyDOE Latin hypercube, as :func:`fedsciml.problems.base.sample_box`),
``uniform`` (i.i.d.), ``sobol`` and ``halton`` (scrambled, ``scipy.stats.qmc``, seeded).  Each method gives
points of the unit cube that a map takes to the domain: the box's affine map, a ball's polar map, a
boundary piece's parametrization.  Where no such map exists (a polygon, CSG) the points of the bounding
box are kept if inside — rejection, which keeps uniformity but thins a low-discrepancy set (decision:
simple and exact in distribution; the stratification of LHS/Sobol is only approximately kept there).

A boundary is a list of *pieces* (a box face, a polygon edge, a sphere) each with its measure, a
parametrization of the unit cube of dimension d−1, a distance and an outward normal.  CSG keeps each
child's pieces with a filter that decides, per point, whether it lies on the boundary of the
combination: a point p of ∂A with outward normal n is on ∂(A ∪ B) iff p + εn ∉ B; on ∂(A ∩ B) iff p − εn ∈ B;
on ∂(A \\ B) iff p − εn ∉ B; a point p of ∂B is on ∂(A \\ B), with normal −n, iff p ± εn are both in A
(pieces of B where they coincide with pieces of A are counted once: see :class:`Union`, :class:`Intersection`).
ε = 1e-7 × the diameter.  Boundary points are sampled from the pieces in
proportion to their measure and then filtered, so they are uniform on the true boundary.

Client partitions (:class:`Strips`, :class:`Grid`, :class:`ByFunction`) give each point one owner
``0..K−1``; cells are half-open ``[a, b)`` (the last closed), so every point of the domain belongs to
exactly one client.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch

from .base import DTYPE, ProblemError

TOL = 1e-9          # relative tolerance of contains / on_boundary (× diameter)
EPS = 1e-7          # relative offset of the CSG side tests (× diameter)
SAMPLINGS = ("lhs", "uniform", "sobol", "halton")
_AXES = ("x", "y", "z")


def axis_name(i: int) -> str:
    """``x``, ``y``, ``z``, then ``x3``, ``x4``, …"""
    return _AXES[i] if i < 3 else f"x{i}"


def unit_points(n: int, d: int, method: str, rng: np.random.Generator) -> np.ndarray:
    """``n`` points of the unit cube ``[0, 1)^d`` by ``method`` (one of :data:`SAMPLINGS`), seeded by ``rng``."""
    if method not in SAMPLINGS:
        raise ProblemError(f"sampling must be one of {list(SAMPLINGS)}, got {method!r}")
    if n <= 0:
        return np.zeros((0, d))
    if d == 0:
        return np.zeros((n, 0))
    if method == "uniform":
        return rng.random((n, d))
    if method == "lhs":
        import pydoe

        return np.asarray(pydoe.lhs(d, samples=n, seed=rng), dtype=np.float64)
    from scipy.stats import qmc

    seed = int(rng.integers(2**63))
    if method == "sobol":
        m = max(0, math.ceil(math.log2(n)))  # a power of two keeps Sobol's balance; the first n are taken
        return qmc.Sobol(d, scramble=True, seed=seed).random_base2(m)[:n]
    return qmc.Halton(d, scramble=True, seed=seed).random(n)


def _t(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=DTYPE)


def _check_points(x: torch.Tensor, d: int, what: str = "points") -> torch.Tensor:
    x = _t(x)
    if x.ndim == 1 and d == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[1] != d:
        raise ProblemError(f"{what} must have shape [n, {d}], got {tuple(x.shape)}")
    return x


# ----------------------------------------------------------------------------- boundary pieces
class Piece:
    """A boundary piece: ``measure``, ``sample(u [m, d−1]) → x [m, d]``, ``distance(x)``, ``normal(x)``."""

    name: str
    measure: float
    dim: int

    def sample(self, u: np.ndarray) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def distance(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def normal(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class _Face(Piece):
    """The face ``x_axis = value`` of a box (``side`` −1 or +1 is the normal's sign)."""

    def __init__(self, lo, hi, axis, side):
        self.lo, self.hi, self.axis, self.side = lo, hi, axis, side
        self.dim = len(lo)
        self.name = axis_name(axis) + ("-" if side < 0 else "+")
        self.value = lo[axis] if side < 0 else hi[axis]
        others = [i for i in range(self.dim) if i != axis]
        self.others = others
        self.measure = float(np.prod([hi[i] - lo[i] for i in others])) if others else 1.0

    def sample(self, u):
        x = np.empty((u.shape[0], self.dim))
        for j, i in enumerate(self.others):
            x[:, i] = self.lo[i] + (self.hi[i] - self.lo[i]) * u[:, j]
        x[:, self.axis] = self.value
        return _t(x)

    def distance(self, x):
        lo, hi = _t(self.lo), _t(self.hi)
        out = (torch.clamp(lo - x, min=0) + torch.clamp(x - hi, min=0))
        out[:, self.axis] = (x[:, self.axis] - self.value).abs()
        return out.norm(dim=1)

    def normal(self, x):
        n = torch.zeros(x.shape[0], self.dim, dtype=DTYPE)
        n[:, self.axis] = float(self.side)
        return n


class _Segment(Piece):
    """A polygon edge from ``a`` to ``b`` (counterclockwise order: the outward normal is ``(dy, −dx)/ℓ``)."""

    def __init__(self, a, b, name):
        self.a, self.b, self.name, self.dim = np.asarray(a, float), np.asarray(b, float), name, 2
        d = self.b - self.a
        self.measure = float(np.hypot(*d))
        self.n = np.array([d[1], -d[0]]) / self.measure

    def sample(self, u):
        return _t(self.a + u[:, :1] * (self.b - self.a))

    def distance(self, x):
        a, b = _t(self.a), _t(self.b)
        d = b - a
        s = ((x - a) @ d / (d @ d)).clamp(0.0, 1.0)
        return (x - a - s[:, None] * d).norm(dim=1)

    def normal(self, x):
        return _t(self.n).expand(x.shape[0], 2).clone()


class _Sphere(Piece):
    """The sphere ``|x − c| = r`` (a circle in 2-D, two points in 1-D are faces instead)."""

    def __init__(self, center, radius, name="sphere"):
        self.c, self.r, self.name = np.asarray(center, float), float(radius), name
        self.dim = d = len(center)
        self.measure = 2 * math.pi ** (d / 2) / math.gamma(d / 2) * self.r ** (d - 1)

    def sample(self, u):
        d = self.dim
        if d == 2:
            a = 2 * math.pi * u[:, 0]
            v = np.stack([np.cos(a), np.sin(a)], 1)
        elif d == 3:  # Archimedes: z uniform in [−1, 1] and the angle uniform is uniform on the sphere
            z, a = 1 - 2 * u[:, 0], 2 * math.pi * u[:, 1]
            s = np.sqrt(np.clip(1 - z * z, 0, None))
            v = np.stack([s * np.cos(a), s * np.sin(a), z], 1)
        else:  # d − 1 uniforms cannot give d Gaussians; draw them from an extra generator seeded by u
            from scipy.stats import norm

            rng = np.random.default_rng(np.frombuffer(u.tobytes(), dtype=np.uint64)[:8].tolist() if u.size else 0)
            g = norm.ppf(np.clip(np.concatenate([u, rng.random((u.shape[0], 1))], 1), 1e-12, 1 - 1e-12))
            v = g / np.linalg.norm(g, axis=1, keepdims=True)
        return _t(self.c + self.r * v)

    def distance(self, x):
        return ((x - _t(self.c)).norm(dim=1) - self.r).abs()

    def normal(self, x):
        v = x - _t(self.c)
        return v / v.norm(dim=1, keepdim=True).clamp_min(1e-300)


class _Filtered(Piece):
    """A child's piece kept where ``keep(x, n)`` holds, its normal times ``sign`` (CSG)."""

    def __init__(self, base: Piece, keep: Callable, sign: float = 1.0):
        self.base, self.keep, self.sign = base, keep, sign
        self.name, self.measure, self.dim = base.name, base.measure, base.dim

    def sample(self, u):
        return self.base.sample(u)

    def distance(self, x):
        return self.base.distance(x)

    def normal(self, x):
        return self.sign * self.base.normal(x)

    def kept(self, x):
        return self.keep(x, self.base.normal(x))


def _kept(piece: Piece, x: torch.Tensor) -> torch.Tensor:
    """Whether the points ``x`` (on the piece's carrier) belong to the piece (all for an unfiltered one)."""
    if isinstance(piece, _Filtered):
        return piece.kept(x) & _kept(piece.base, x)
    if isinstance(piece, _LateralFiltered):
        return piece.kept(x)
    return torch.ones(x.shape[0], dtype=torch.bool)


# ----------------------------------------------------------------------------- geometries
class Geometry:
    """Base class: a closed domain in R^d.  Subclasses give ``dim``, ``bbox``, ``_contains``, ``pieces``."""

    dim: int
    bbox: tuple  # (lo [d], hi [d]) numpy arrays

    def __init__(self):
        self.parts: dict[str, Callable] = {}   # user parts: name → predicate of boundary points

    # --- the set ---------------------------------------------------------------------------
    @property
    def diameter(self) -> float:
        lo, hi = self.bbox
        return float(np.linalg.norm(np.asarray(hi) - np.asarray(lo)))

    @property
    def tol(self) -> float:
        return TOL * self.diameter

    def _contains(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def contains(self, x) -> torch.Tensor:
        """Bool per point of ``x [n, d]``: inside the closed domain (within the tolerance)."""
        return self._contains(_check_points(x, self.dim))

    def pieces(self) -> list[Piece]:  # pragma: no cover - interface
        raise NotImplementedError

    def _piece_index(self, x: torch.Tensor) -> torch.Tensor:
        """The index of the first piece each point lies on, −1 where none."""
        idx = torch.full((x.shape[0],), -1, dtype=torch.long)
        for i, p in enumerate(self.pieces()):
            on = (idx < 0) & (p.distance(x) <= self.tol * 10)
            if on.any():
                sel = on.nonzero().squeeze(1)
                ok = _kept(p, x[sel])
                idx[sel[ok]] = i
        return idx

    def on_boundary(self, x) -> torch.Tensor:
        x = _check_points(x, self.dim)
        return self._piece_index(x) >= 0

    def normal(self, x) -> torch.Tensor:
        """Outward unit normals ``[n, d]`` at boundary points (a point off the boundary is an error)."""
        x = _check_points(x, self.dim)
        idx = self._piece_index(x)
        if (idx < 0).any():
            i = int((idx < 0).nonzero()[0])
            raise ProblemError(f"point {x[i].tolist()} is not on the boundary of {self!r}; normals exist on the boundary only")
        n = torch.empty_like(x)
        for i, p in enumerate(self.pieces()):
            m = idx == i
            if m.any():
                n[m] = p.normal(x[m])
        return n

    def check_inside(self, x, what: str = "point") -> torch.Tensor:
        """``x`` unchanged if every point is in the domain, else one line naming the first point outside."""
        x = _check_points(x, self.dim)
        inside = self.contains(x)
        if not bool(inside.all()):
            i = int((~inside).nonzero()[0])
            raise ProblemError(f"{what} {x[i].tolist()} lies outside the domain {self!r} "
                               f"({int((~inside).sum())} of {x.shape[0]} points outside)")
        return x

    # --- named parts -------------------------------------------------------------------------
    def part_names(self) -> list[str]:
        names = []
        for p in self.pieces():
            if p.name not in names:
                names.append(p.name)
        return names + [n for n in self.parts if n not in names]

    def with_parts(self, **predicates: Callable) -> "Geometry":
        """This geometry with extra named boundary parts: ``name=lambda x: bool per point of x [n, d]``."""
        for k, f in predicates.items():
            if not callable(f):
                raise ProblemError(f"part {k!r} must be a predicate of x [n, d], got {type(f).__name__}")
            self.parts[k] = f
        return self

    def check_part(self, part: str | None):
        if part is not None and part != "boundary" and part not in self.part_names():
            raise ProblemError(f"{self!r} has no boundary part {part!r}; its parts: {['boundary', *self.part_names()]}")

    # --- sampling ----------------------------------------------------------------------------
    def volume_fraction(self) -> float | None:
        """The share of the bounding box inside the domain when known (guides rejection sampling)."""
        return None

    def sample_interior(self, n: int, method: str = "lhs", seed=None, where: Callable | None = None,
                        box: tuple | None = None) -> torch.Tensor:
        """``n`` points of the domain; ``where(x)`` (a bool per point) and ``box`` (lo, hi) restrict it
        further — a client's subdomain.  Rejection from the bounding box (or ``box``)."""
        rng = np.random.default_rng(seed)
        lo, hi = np.asarray(self.bbox[0], float), np.asarray(self.bbox[1], float)
        if box is not None:
            lo, hi = np.maximum(lo, box[0]), np.minimum(hi, box[1])
            if np.any(hi < lo):
                raise ProblemError(f"the box {box} does not meet the domain {self!r}")
        return _reject(lambda m: _t(lo + (hi - lo) * unit_points(m, self.dim, method, rng)),
                       lambda x: self._contains(x) & (where(x) if where is not None else True), n,
                       f"interior of {self!r}", self.volume_fraction() if box is None and where is None else None)

    def sample_boundary(self, n: int, method: str = "lhs", seed=None, part: str | None = None,
                        where: Callable | None = None, with_normals: bool = False):
        """``n`` boundary points (of one named part, or all), uniform in measure; with ``with_normals``
        also their outward unit normals."""
        self.check_part(part)
        rng = np.random.default_rng(seed)
        pieces = self.pieces()
        if part not in (None, "boundary") and part not in self.parts:
            pieces = [p for p in pieces if p.name == part]
        pred = self.parts.get(part) if part is not None else None
        total = sum(p.measure for p in pieces)

        def draw(m):
            xs, ns = [], []
            counts = _split_counts(m, [p.measure / total for p in pieces], rng)
            for p, c in zip(pieces, counts):
                if c == 0:
                    continue
                x = p.sample(unit_points(c, self.dim - 1, method, rng))
                keep = _kept(p, x)
                xs.append(x[keep])
                ns.append(p.normal(x[keep]))
            x, nn = torch.cat(xs), torch.cat(ns)
            perm = torch.as_tensor(rng.permutation(x.shape[0]))
            return torch.cat([x[perm], nn[perm]], 1)

        def accept(xn):
            x = xn[:, :self.dim]
            ok = torch.ones(x.shape[0], dtype=torch.bool)
            if pred is not None:
                ok &= _as_mask(pred(x), x.shape[0], part)
            if where is not None:
                ok &= where(x)
            return ok

        what = f"boundary part {part!r} of {self!r}" if part else f"boundary of {self!r}"
        xn = _reject(draw, accept, n, what, None)
        return (xn[:, :self.dim], xn[:, self.dim:]) if with_normals else xn[:, :self.dim]

    # --- CSG ---------------------------------------------------------------------------------
    def __or__(self, other):
        return Union(self, other)

    def __and__(self, other):
        return Intersection(self, other)

    def __sub__(self, other):
        return Difference(self, other)


def _as_mask(m, n, part):
    m = torch.as_tensor(m)
    if m.dtype != torch.bool or m.shape != (n,):
        raise ProblemError(f"the predicate of part {part!r} must return a bool per point (shape [{n}]), got "
                           f"{m.dtype} {tuple(m.shape)}")
    return m


def _split_counts(m: int, shares, rng) -> list[int]:
    """``m`` split in proportion to ``shares`` (largest remainders; ties by ``rng``)."""
    raw = np.asarray(shares) * m
    c = np.floor(raw).astype(int)
    rest = m - c.sum()
    if rest > 0:
        frac = raw - c + 1e-9 * rng.random(len(c))
        c[np.argsort(-frac)[:rest]] += 1
    return c.tolist()


def _reject(draw: Callable, accept: Callable, n: int, what: str, fraction: float | None) -> torch.Tensor:
    """The first ``n`` accepted of batches from ``draw(m)``, each batch sized from the acceptance so far."""
    if n <= 0:
        return draw(1)[:0]
    kept, have, tried, acc = [], 0, 0, 0
    rate = fraction or 1.0
    for _ in range(60):
        m = int(min(max(16, math.ceil(1.2 * (n - have) / max(rate, 1e-3)) + 16), 50_000_000))
        x = draw(m)
        ok = torch.as_tensor(accept(x), dtype=torch.bool).reshape(-1) if x.shape[0] else torch.zeros(0, dtype=torch.bool)
        if ok.numel() == 1 and x.shape[0] != 1:
            ok = ok.expand(x.shape[0])
        kept.append(x[ok])
        have += int(ok.sum())
        tried += x.shape[0]
        acc += int(ok.sum())
        if have >= n:
            return torch.cat(kept)[:n]
        if acc == 0 and tried >= 1_000_000:
            break
        rate = max(acc / tried, 1e-4) if acc else rate / 10
    err = ProblemError(f"could not sample {n} points of the {what}: only {have} of {tried} candidates fell in it "
                       f"(is it empty, or of measure zero?)")
    err.found, err.tried = have, tried  # for a caller that names the region itself (a client's cell of a split)
    raise err


def _coords(value, what: str, *, ndim: int = 1) -> np.ndarray:
    """``value`` as a finite float array of ``ndim`` dimensions; one line naming ``what`` otherwise."""
    if isinstance(value, (str, bytes)):
        raise ProblemError(f"{what} must be numbers, got the string {value!r}")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ProblemError(f"{what} must be numbers, got {value!r}") from None
    if ndim == 1:
        arr = np.atleast_1d(arr)
    if arr.ndim != ndim or arr.size == 0:
        raise ProblemError(f"{what} must be a non-empty {'list of numbers' if ndim == 1 else 'list of points'}, "
                           f"got {value!r}")
    if not np.isfinite(arr).all():
        raise ProblemError(f"{what} must be finite, got {arr.tolist()}")
    return arr


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ProblemError(f"{what} must be a number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v):
        raise ProblemError(f"{what} must be finite, got {value!r}")
    return v


def _segments_meet(p1, p2, q1, q2) -> np.ndarray:
    """Whether segments ``p1p2`` and ``q1q2`` (arrays ``[M, 2]``) share a point (crossing, touching or
    overlapping), exactly in floating point (orientation signs)."""
    def orient(a, b, c):
        return (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])

    def within(a, b, c):  # c in the bounding box of ab (c collinear with ab)
        return ((np.minimum(a, b) <= c) & (c <= np.maximum(a, b))).all(1)

    d1, d2, d3, d4 = orient(q1, q2, p1), orient(q1, q2, p2), orient(p1, p2, q1), orient(p1, p2, q2)
    proper = (np.sign(d1) * np.sign(d2) < 0) & (np.sign(d3) * np.sign(d4) < 0)
    return proper | ((d1 == 0) & within(q1, q2, p1)) | ((d2 == 0) & within(q1, q2, p2)) | \
        ((d3 == 0) & within(p1, p2, q1)) | ((d4 == 0) & within(p1, p2, q2))


def check_simple_polygon(v: np.ndarray) -> None:
    """Refuse (one line naming the vertices or edges) a polygon that is not simple: a repeated vertex, an edge
    that folds back onto the previous one, or two non-adjacent edges that cross or touch (its "outward"
    normals would point inward on part of the boundary)."""
    n = len(v)
    same = (v[:, None, :] == v[None, :, :]).all(2) & ~np.eye(n, dtype=bool)
    if same.any():
        i, j = (int(k) for k in np.argwhere(same)[0])
        raise ProblemError(f"polygon vertex {j} {v[j].tolist()} repeats vertex {i}; a simple polygon's vertices "
                           f"are distinct")
    a, b = v, np.roll(v, -1, axis=0)  # edge i: a[i] → b[i]
    nxt = np.roll(b, -1, axis=0)
    turn = (b[:, 0] - a[:, 0]) * (nxt[:, 1] - b[:, 1]) - (b[:, 1] - a[:, 1]) * (nxt[:, 0] - b[:, 0])
    back = (turn == 0) & (((b - a) * (nxt - b)).sum(1) < 0)
    if back.any():
        i = int(np.flatnonzero(back)[0])
        raise ProblemError(f"polygon edges e{i} and e{(i + 1) % n} fold back on each other at vertex "
                           f"{(i + 1) % n} {b[i].tolist()}; the polygon is not simple")
    ii, jj = np.triu_indices(n, 2)
    keep = ~((ii == 0) & (jj == n - 1))  # the first and last edges share vertex 0
    ii, jj = ii[keep], jj[keep]
    hit = _segments_meet(a[ii], b[ii], a[jj], b[jj])
    if hit.any():
        k = int(np.flatnonzero(hit)[0])
        raise ProblemError(f"polygon edges e{ii[k]} {a[ii[k]].tolist()}→{b[ii[k]].tolist()} and e{jj[k]} "
                           f"{a[jj[k]].tolist()}→{b[jj[k]].tolist()} cross or touch; give a simple polygon "
                           f"(its vertices in order around the boundary)")


class Box(Geometry):
    """``[lo_1, hi_1] × … × [lo_d, hi_d]``; faces ``x-``, ``x+``, ``y-``, ``y+``, … (then ``x3-``, …)."""

    def __init__(self, lower: Sequence[float], upper: Sequence[float]):
        super().__init__()
        lo, hi = _coords(lower, "Box lower"), _coords(upper, "Box upper")
        if lo.shape != hi.shape or lo.ndim != 1 or not np.all(hi > lo) or not np.all(np.isfinite(lo) & np.isfinite(hi)):
            raise ProblemError(f"a box needs finite lower < upper on every axis, got lower={lo.tolist()}, upper={hi.tolist()}")
        self.lo, self.hi, self.dim = lo, hi, len(lo)
        self.bbox = (lo, hi)
        self._pieces = [_Face(lo, hi, i, s) for i in range(self.dim) for s in (-1, 1)]

    def __repr__(self):
        return f"Box({self.lo.tolist()}, {self.hi.tolist()})"

    def _contains(self, x):
        t = self.tol
        return ((x >= _t(self.lo) - t) & (x <= _t(self.hi) + t)).all(1)

    def pieces(self):
        return self._pieces

    def volume_fraction(self):
        return 1.0

    @property
    def volume(self) -> float:
        return float(np.prod(self.hi - self.lo))


class Interval(Box):
    """``[a, b]``; its ends are the parts ``x-`` and ``x+``."""

    def __init__(self, a: float, b: float):
        super().__init__([a], [b])

    def __repr__(self):
        return f"Interval({self.lo[0]}, {self.hi[0]})"


class Ball(Geometry):
    """``|x − c| ≤ r``; its boundary is the part ``sphere``.  Interior points by the polar map
    (radius ``r·u^{1/d}``) of the unit cube, so a stratified method stays stratified."""

    def __init__(self, center: Sequence[float], radius: float):
        super().__init__()
        c = _coords(center, f"{type(self).__name__} center")
        radius = _number(radius, f"{type(self).__name__} radius")
        if radius > 0 and (radius ** len(c) == 0.0 or radius < 1e-12 * float(np.abs(c).max())):
            raise ProblemError(f"{type(self).__name__} radius {radius!r} is too small for float64 at center "
                               f"{c.tolist()} (its volume underflows or its points coincide)")
        if not (radius > 0 and math.isfinite(radius)) or c.ndim != 1 or len(c) < 2:
            raise ProblemError(f"a ball needs a center of dimension ≥ 2 and a radius > 0, got center={c.tolist()}, radius={radius}")
        self.c, self.r, self.dim = c, float(radius), len(c)
        self.bbox = (c - radius, c + radius)
        self._pieces = [_Sphere(c, radius)]

    def __repr__(self):
        return f"{type(self).__name__}({self.c.tolist()}, {self.r})"

    def _contains(self, x):
        return (x - _t(self.c)).norm(dim=1) <= self.r + self.tol

    def pieces(self):
        return self._pieces

    def volume_fraction(self):
        d = self.dim
        return math.pi ** (d / 2) / math.gamma(d / 2 + 1) / 2 ** d

    def sample_interior(self, n, method="lhs", seed=None, where=None, box=None):
        if where is not None or box is not None:
            return super().sample_interior(n, method, seed, where, box)
        rng = np.random.default_rng(seed)
        u = unit_points(n, self.dim, method, rng)
        rad = self.r * u[:, 0] ** (1.0 / self.dim)
        dirs = self._pieces[0].sample(np.ascontiguousarray(u[:, 1:])) - _t(self.c) if n else torch.zeros(0, self.dim)
        return _t(self.c) + _t(rad)[:, None] * dirs / self.r


class Disk(Ball):
    """A 2-D ball: ``Disk((cx, cy), r)``; its boundary is the part ``sphere`` (the circle)."""

    def __init__(self, center, radius):
        super().__init__(center, radius)
        if self.dim != 2:
            raise ProblemError(f"a disk is 2-D; center {self.c.tolist()} has dimension {self.dim} (use Ball)")


class Polygon(Geometry):
    """A simple polygon from its vertices (either orientation); edges ``e0`` (v0→v1), ``e1``, … or ``names``."""

    def __init__(self, vertices, names: Sequence[str] | None = None):
        super().__init__()
        v = _coords(vertices, "Polygon vertices", ndim=2)
        if v.ndim != 2 or v.shape[1] != 2 or len(v) < 3:
            raise ProblemError(f"a polygon needs ≥ 3 vertices (x, y), got shape {v.shape}")
        if isinstance(names, str) or (names is not None and not all(isinstance(nm, str) and nm for nm in names)):
            raise ProblemError(f"Polygon names must be a list of non-empty strings, one per edge, got {names!r}")
        names = list(names) if names is not None else [f"e{i}" for i in range(len(v))]
        if len(names) != len(v):
            raise ProblemError(f"a polygon with {len(v)} edges needs {len(v)} edge names, got {len(names)}")
        check_simple_polygon(v)
        area2 = float(np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1]))
        if area2 == 0:
            raise ProblemError("the polygon has zero area")
        edges = [(v[i], v[(i + 1) % len(v)], names[i]) for i in range(len(v))]
        if area2 < 0:  # clockwise: walk each edge backwards so that (dy, −dx) points out
            edges = [(b, a, nm) for a, b, nm in edges]
        self.vertices, self.dim, self.area = v, 2, abs(area2) / 2
        self.bbox = (v.min(0), v.max(0))
        self._pieces = [_Segment(a, b, nm) for a, b, nm in edges]

    def __repr__(self):
        return f"Polygon({self.vertices.tolist()})"

    def _contains(self, x):
        a = _t(np.stack([p.a for p in self._pieces]))   # [E, 2]
        b = _t(np.stack([p.b for p in self._pieces]))
        xx, yy = x[:, :1], x[:, 1:]                      # [n, 1]
        cross = (a[:, 1] > yy) != (b[:, 1] > yy)         # [n, E]
        xint = a[:, 0] + (yy - a[:, 1]) * (b[:, 0] - a[:, 0]) / torch.where(b[:, 1] == a[:, 1], 1.0, b[:, 1] - a[:, 1])
        inside = (cross & (xx < xint)).sum(1) % 2 == 1
        near = torch.stack([p.distance(x) for p in self._pieces], 1).min(1).values <= self.tol
        return inside | near

    def pieces(self):
        return self._pieces

    def volume_fraction(self):
        lo, hi = self.bbox
        return self.area / float(np.prod(hi - lo))


def LShape(names: Sequence[str] | None = None) -> Polygon:
    """``[−1, 1]² \\ (0, 1] × [−1, 0)``: the re-entrant corner at the origin (angle 3π/2).
    Edges: ``e0`` (0,0)→(1,0), ``e1`` → (1,1), ``e2`` → (−1,1), ``e3`` → (−1,−1), ``e4`` → (0,−1), ``e5`` → (0,0)."""
    return Polygon([(0, 0), (1, 0), (1, 1), (-1, 1), (-1, -1), (0, -1)], names)


# ----------------------------------------------------------------------------- CSG
class _CSG(Geometry):
    def __init__(self, a: Geometry, b: Geometry):
        super().__init__()
        if not (isinstance(a, Geometry) and isinstance(b, Geometry)):
            raise ProblemError(f"set operations combine geometries, got {type(a).__name__} and {type(b).__name__}")
        if a.dim != b.dim:
            raise ProblemError(f"cannot combine geometries of dimension {a.dim} and {b.dim}")
        self.a, self.b, self.dim = a, b, a.dim
        self._pieces = None

    def _eps(self):
        return EPS * self.diameter

    def pieces(self):
        if self._pieces is None:
            self._pieces = self._make_pieces()
        return self._pieces

    def _interior(self, g: Geometry, x):
        return g._contains(x) & ~g.on_boundary(x)


class Union(_CSG):
    """``a ∪ b``: ∂a where the outer side is not in b, ∂b where the outer side is not in a and not on ∂a."""

    def __init__(self, a, b):
        super().__init__(a, b)
        self.bbox = (np.minimum(a.bbox[0], b.bbox[0]), np.maximum(a.bbox[1], b.bbox[1]))

    def __repr__(self):
        return f"({self.a!r} | {self.b!r})"

    def _contains(self, x):
        return self.a._contains(x) | self.b._contains(x)

    def _make_pieces(self):
        e, a, b = self._eps(), self.a, self.b
        pa = [_Filtered(p, lambda x, n: ~b._contains(x + e * n)) for p in a.pieces()]
        pb = [_Filtered(p, lambda x, n: ~a._contains(x + e * n) & ~a.on_boundary(x)) for p in b.pieces()]
        return pa + pb


class Intersection(_CSG):
    """``a ∩ b``: ∂a where the inner side is in b, ∂b where the inner side is in a and not on ∂a."""

    def __init__(self, a, b):
        super().__init__(a, b)
        self.bbox = (np.maximum(a.bbox[0], b.bbox[0]), np.minimum(a.bbox[1], b.bbox[1]))
        if np.any(self.bbox[1] < self.bbox[0]):
            raise ProblemError(f"the intersection of {a!r} and {b!r} is empty")
        flat = np.flatnonzero(self.bbox[1] - self.bbox[0] <= EPS * max(a.diameter, b.diameter))
        if flat.size:  # they only touch: the intersection lies in a plane of that axis (no interior to solve on)
            i = int(flat[0])
            raise ProblemError(f"the intersection of {a!r} and {b!r} has no interior: they only touch at "
                               f"{axis_name(i)} = {float(self.bbox[0][i]):g} (a set of measure zero)")

    def __repr__(self):
        return f"({self.a!r} & {self.b!r})"

    def _contains(self, x):
        return self.a._contains(x) & self.b._contains(x)

    def _make_pieces(self):
        e, a, b = self._eps(), self.a, self.b
        pa = [_Filtered(p, lambda x, n: b._contains(x - e * n)) for p in a.pieces()]
        pb = [_Filtered(p, lambda x, n: a._contains(x - e * n) & ~a.on_boundary(x)) for p in b.pieces()]
        return pa + pb


class Difference(_CSG):
    """The closure of ``a \\ b``: ∂a where the inner side is not in b; ∂b, normal reversed, where
    both sides are in a (so ∂b inside a, not where it runs along ∂a or outside)."""

    def __init__(self, a, b):
        super().__init__(a, b)
        self.bbox = a.bbox

    def __repr__(self):
        return f"({self.a!r} - {self.b!r})"

    def _contains(self, x):
        return self.a._contains(x) & ~self._interior(self.b, x)

    def _make_pieces(self):
        e, a, b = self._eps(), self.a, self.b
        pa = [_Filtered(p, lambda x, n: ~b._contains(x - e * n)) for p in a.pieces()]
        pb = [_Filtered(p, lambda x, n: a._contains(x + e * n) & a._contains(x - e * n), -1.0) for p in b.pieces()]
        return pa + pb


# ----------------------------------------------------------------------------- space-time
class _Lateral(Piece):
    """A spatial piece × [t0, T]."""

    def __init__(self, base: Piece, t0, T):
        self.base, self.t0, self.T = base, t0, T
        self.name, self.dim, self.measure = base.name, base.dim + 1, base.measure * (T - t0)

    def sample(self, u):
        x = self.base.sample(np.ascontiguousarray(u[:, :-1]))
        return torch.cat([x, _t(self.t0 + (self.T - self.t0) * u[:, -1:])], 1)

    def distance(self, x):
        t = x[:, -1]
        out = torch.clamp(self.t0 - t, min=0) + torch.clamp(t - self.T, min=0)
        return self.base.distance(x[:, :-1]) + out

    def normal(self, x):
        return torch.cat([self.base.normal(x[:, :-1]), torch.zeros(x.shape[0], 1, dtype=DTYPE)], 1)


class _LateralFiltered(_Lateral):
    def __init__(self, base: _Filtered, t0, T):
        super().__init__(base, t0, T)

    def kept(self, x):
        return _kept(self.base, x[:, :-1])


def _on_space(f: Callable) -> Callable:
    """A predicate of spatial points as one of space-time points (t dropped)."""
    return lambda x: f(x[:, :-1])


class SpaceTime(Geometry):
    """``geometry × [t0, T]`` (inputs ``(x, t)``, t last).  Boundary: the lateral parts (the spatial
    parts × [t0, T], same names) and ``initial`` (t = t0).  The slice t = T is no part of the boundary:
    an initial-value problem states nothing there."""

    def __init__(self, geometry: Geometry, T: float, t0: float = 0.0):
        super().__init__()
        if not isinstance(geometry, Geometry):
            raise ProblemError(f"SpaceTime needs a geometry, got {type(geometry).__name__}")
        if not (T > t0):
            raise ProblemError(f"the time interval needs T > t0, got t0={t0}, T={T}")
        self.space, self.t0, self.T, self.dim = geometry, float(t0), float(T), geometry.dim + 1
        self.bbox = (np.append(geometry.bbox[0], t0), np.append(geometry.bbox[1], T))
        self._pieces = [_LateralFiltered(p, self.t0, self.T) if isinstance(p, _Filtered) else _Lateral(p, self.t0, self.T)
                        for p in geometry.pieces()]
        self.parts = {k: _on_space(f) for k, f in geometry.parts.items()}

    def __repr__(self):
        return f"SpaceTime({self.space!r}, T={self.T}, t0={self.t0})"

    def _contains(self, x):
        t = x[:, -1]
        return self.space._contains(x[:, :-1]) & (t >= self.t0 - self.tol) & (t <= self.T + self.tol)

    def pieces(self):
        return self._pieces

    def part_names(self):
        return self.space.part_names() + ["initial"]

    def volume_fraction(self):
        return self.space.volume_fraction()

    def sample_initial(self, n, method="lhs", seed=None, where=None):
        """``n`` points of the slice t = t0 (the spatial domain, closed)."""
        w = None if where is None else (lambda y: where(torch.cat([y, torch.full((y.shape[0], 1), self.t0, dtype=DTYPE)], 1)))
        x = self.space.sample_interior(n, method, seed, where=w)
        return torch.cat([x, torch.full((x.shape[0], 1), self.t0, dtype=DTYPE)], 1)

    def sample_boundary(self, n, method="lhs", seed=None, part=None, where=None, with_normals=False):
        if part == "initial":
            x = self.sample_initial(n, method, seed, where)
            if with_normals:
                nn = torch.zeros_like(x)
                nn[:, -1] = -1.0
                return x, nn
            return x
        if part in (None, "boundary"):
            raise ProblemError("a space-time boundary is sampled part by part: the lateral parts "
                               f"{self.space.part_names()} and 'initial'")
        return super().sample_boundary(n, method, seed, part, where, with_normals)


# ----------------------------------------------------------------------------- client partitions
class Partition:
    """Who owns each point: ``owner(x) → long [n]`` in ``0..K−1``.  ``cell_box(k)`` bounds client k's
    cell when known (rejection then draws from it instead of the whole bounding box)."""

    n_clients: int

    def owner(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError

    def cell_box(self, k: int, geometry: Geometry):
        return None

    def check(self, n_clients: int):
        if n_clients != self.n_clients:
            raise ProblemError(f"this partition has {self.n_clients} cells; the run asks for {n_clients} clients")


def _cells(edges: np.ndarray, v: torch.Tensor) -> torch.Tensor:
    """Half-open cells [e_i, e_{i+1}); the last closed; points outside go to the nearest end cell."""
    k = torch.searchsorted(_t(edges[1:-1]).contiguous(), v.contiguous(), right=True)
    return k.clamp(0, len(edges) - 2)


class Strips(Partition):
    """``n_clients`` strips along ``axis`` (equal over the bounding box, or at the given ``edges``)."""

    def __init__(self, n_clients: int, geometry: Geometry, axis: int = 0, edges: Sequence[float] | None = None):
        if not 0 <= axis < geometry.dim:
            raise ProblemError(f"strip axis must be in 0..{geometry.dim - 1}, got {axis}")
        lo, hi = geometry.bbox[0][axis], geometry.bbox[1][axis]
        e = np.linspace(lo, hi, n_clients + 1) if edges is None else np.asarray(edges, float)
        if len(e) != n_clients + 1 or np.any(np.diff(e) <= 0) or e[0] > lo or e[-1] < hi:
            raise ProblemError(f"strip edges must be {n_clients + 1} increasing values covering [{lo}, {hi}], got {list(e)}")
        self.n_clients, self.axis, self.edges = int(n_clients), axis, e

    def owner(self, x):
        return _cells(self.edges, x[:, self.axis])

    def cell_box(self, k, geometry):
        lo, hi = np.array(geometry.bbox[0], float), np.array(geometry.bbox[1], float)
        lo[self.axis] = max(lo[self.axis], self.edges[k])
        hi[self.axis] = min(hi[self.axis], self.edges[k + 1])
        return lo, hi


class Grid(Partition):
    """A grid of ``cells[0] × cells[1] × …`` cells over the bounding box (axes beyond ``len(cells)`` uncut);
    client index row-major (the last listed axis fastest)."""

    def __init__(self, cells: Sequence[int], geometry: Geometry):
        cells = [int(c) for c in cells]
        if not cells or len(cells) > geometry.dim or any(c < 1 for c in cells):
            raise ProblemError(f"grid cells must be 1..{geometry.dim} positive counts, got {cells}")
        self.cells, self.n_clients = cells, int(np.prod(cells))
        self.edges = [np.linspace(geometry.bbox[0][i], geometry.bbox[1][i], c + 1) for i, c in enumerate(cells)]

    def owner(self, x):
        k = torch.zeros(x.shape[0], dtype=torch.long)
        for i, c in enumerate(self.cells):
            k = k * c + _cells(self.edges[i], x[:, i])
        return k

    def cell_box(self, k, geometry):
        lo, hi = np.array(geometry.bbox[0], float), np.array(geometry.bbox[1], float)
        idx = np.unravel_index(k, self.cells)
        for i, j in enumerate(idx):
            lo[i], hi[i] = self.edges[i][j], self.edges[i][j + 1]
        return lo, hi


class ByFunction(Partition):
    """A user's ``fn(x [n, d]) → int [n]`` in ``0..n_clients−1``."""

    def __init__(self, n_clients: int, fn: Callable):
        if not callable(fn):
            raise ProblemError(f"a partition function must be callable, got {type(fn).__name__}")
        self.n_clients, self.fn = int(n_clients), fn

    def owner(self, x):
        k = torch.as_tensor(self.fn(x)).reshape(-1).long()
        if k.shape[0] != x.shape[0]:
            raise ProblemError(f"the partition function returned {k.shape[0]} owners for {x.shape[0]} points")
        if k.numel() and (int(k.min()) < 0 or int(k.max()) >= self.n_clients):
            raise ProblemError(f"the partition function returned owner {int(k.min()) if int(k.min()) < 0 else int(k.max())}; "
                               f"owners must be in 0..{self.n_clients - 1}")
        return k


def make_partition(spec, n_clients: int, geometry: Geometry) -> Partition:
    """``"strips"`` / ``"strips:AXIS"`` / ``"grid:AxB"`` / a callable of x / a :class:`Partition`."""
    if isinstance(spec, Partition):
        spec.check(n_clients)
        return spec
    if callable(spec):
        return ByFunction(n_clients, spec)
    if isinstance(spec, str):
        kind, _, arg = spec.partition(":")
        if kind == "strips":
            names = [axis_name(i) for i in range(geometry.dim)]
            if isinstance(geometry, SpaceTime):
                names[-1] = "t"
            if arg and not (arg.isdigit() or arg in names):
                raise ProblemError(f"partition {spec!r}: the strip axis must be an index 0..{geometry.dim - 1} or "
                                   f"one of {names}, got {arg!r}")
            return Strips(n_clients, geometry, axis=(int(arg) if arg.isdigit() else names.index(arg)) if arg else 0)
        if kind == "grid":
            if arg and not all(c.isdigit() and int(c) >= 1 for c in arg.split("x")):
                raise ProblemError(f"partition {spec!r}: give the grid's cells per axis as whole numbers ≥ 1, "
                                   f"e.g. 'grid:2x2'")
            cells = [int(c) for c in arg.split("x")] if arg else None
            if cells is None:
                r = round(math.sqrt(n_clients))
                if r * r != n_clients:
                    raise ProblemError(f"partition 'grid' without cells needs a square number of clients, got {n_clients}; "
                                       f"give e.g. 'grid:{n_clients}x1'")
                cells = [r, r]
            g = Grid(cells, geometry)
            g.check(n_clients)
            return g
    raise ProblemError(f"partition must be 'strips', 'strips:AXIS', 'grid', 'grid:AxB', a function of x or a "
                       f"Partition, got {spec!r}")
