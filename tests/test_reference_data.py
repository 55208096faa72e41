"""Reference solutions from text files (fs.ReferenceData) and PINNacle's pooled L2RE (``l2re``).

Files are generated in tmp_path with numpy's own formatting (``repr`` of a float64 reads back exactly), so the
points and values read must equal the arrays written bitwise; metrics are compared with a numpy computation of
the same formula to a tolerance of a few float64 ulps times the number of terms (1e-12 relative).
"""
import math
import os

import numpy as np
import pytest
import torch

import fedsciml as fs
from fedsciml.problems.conditions import Dirichlet, Initial
from fedsciml.problems.domain import DomainPDE, pooled_l2re
from fedsciml.problems.geometry import Box, Interval
from fedsciml.problems.reference import ReferenceData
from fedsciml.runtime.results import Result, summary_lines

PI = math.pi


def _write(path, header, A):
    with open(path, "w") as f:
        for h in header:
            f.write(h + "\n")
        for row in A:
            f.write("   ".join(repr(float(v)) for v in row) + "\n")
    return str(path)


def test_rows_layout_reads_points_and_values_bitwise(tmp_path):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((37, 5))  # x, y, u, v, p (ns2d.dat's layout)
    path = _write(tmp_path / "ns.dat", ["% Model: test", "% x   y   u (m/s)   v (m/s)   p (Pa)"], A)
    ref = fs.ReferenceData.from_file(path, inputs=2, outputs=3)
    assert torch.equal(ref.X, torch.as_tensor(A[:, :2])) and torch.equal(ref.U, torch.as_tensor(A[:, 2:]))
    assert ref.X.dtype == torch.float64 and ref.dropped == 0 and len(ref) == 37 and ref.source == path
    X, U = ref  # unpacks as the pair reference() returns
    assert X is ref.X and U is ref.U


def test_unrolled_layout_times_from_comsol_header(tmp_path):
    """COMSOL's time export (burgers1d.dat, heat_multiscale_lesspoints.dat): nodes × (time, component) columns,
    time-major; each (node, time) becomes a point (x, y, t) with its components — as PINNacle's
    trans_time_data_to_dataset builds it (checked here against an explicit double loop)."""
    rng = np.random.default_rng(1)
    n, ts, C = 6, [0.0, 0.25, 0.5, 1.0], 2
    xy = rng.random((n, 2))
    vals = rng.standard_normal((n, len(ts) * C))
    head = "% X   Y   " + "   ".join(f"{c} (1) @ t={t:g}" for t in ts for c in ("u", "v"))
    path = _write(tmp_path / "gs.dat", ["% Dimension: 2", "% Description: u, v", head], np.hstack([xy, vals]))
    ref = ReferenceData.from_file(path, inputs=2, outputs=C, layout="unrolled")
    X_want = np.array([[*xy[i], t] for i in range(n) for t in ts])
    U_want = np.array([[vals[i, j * C + c] for c in range(C)] for i in range(n) for j in range(len(ts))])
    assert torch.equal(ref.X, torch.as_tensor(X_want)) and torch.equal(ref.U, torch.as_tensor(U_want))
    # the same with the times given (no header)
    path2 = _write(tmp_path / "gs2.dat", [], np.hstack([xy, vals]))
    ref2 = ReferenceData.from_file(path2, inputs=2, outputs=C, layout="unrolled", times=ts)
    assert torch.equal(ref2.X, ref.X) and torch.equal(ref2.U, ref.U)


def test_pinnacle_files_read_where_at_hand():
    """PINNacle's own exports (read-only checkout; skipped where absent): shapes as their loader makes them."""
    root = os.environ.get("PINNACLE_ROOT", "/work/pinnacle")
    b = os.path.join(root, "ref", "burgers1d.dat")
    if not os.path.isfile(b):
        pytest.skip("no PINNacle checkout at PINNACLE_ROOT")
    ref = ReferenceData.from_file(b, inputs=1, layout="unrolled")
    assert ref.X.shape == (101 * 11, 2) and ref.U.shape == (101 * 11, 1)
    assert torch.equal(torch.unique(ref.X[:, 1]), torch.linspace(0, 1, 11, dtype=torch.float64).round(decimals=12))
    ns = ReferenceData.from_file(os.path.join(root, "ref", "ns2d.dat"), inputs=2, outputs=3)
    assert ns.X.shape == (11980, 2) and ns.U.shape == (11980, 3)


def test_nan_rows_are_dropped_and_counted(tmp_path):
    A = np.arange(12, dtype=float).reshape(4, 3)
    A[1, 2] = np.nan
    path = tmp_path / "nan.dat"
    path.write_text("\n".join(" ".join("NaN" if np.isnan(v) else repr(float(v)) for v in r) for r in A) + "\n")
    ref = ReferenceData.from_file(path, inputs=2)
    assert ref.dropped == 1 and torch.equal(ref.U[:, 0], torch.tensor([2.0, 8.0, 11.0], dtype=torch.float64))


@pytest.mark.parametrize("content, kwargs, says", [
    ("1 2 3\n4 5\n", {"inputs": 2}, "data line 2 has 2 numbers"),
    ("1 2 3\n4 five 6\n", {"inputs": 2}, "'five', not a number"),
    ("1 2 inf\n", {"inputs": 2}, "infinite"),
    ("% only a comment\n\n", {"inputs": 2}, "no data line"),
    ("1 2 3 4\n", {"inputs": 2}, "4 columns; inputs=2 + outputs=1 = 3"),
    ("1 2 3 4 5\n", {"inputs": 2, "outputs": 2, "layout": "unrolled", "times": [0.0]}, "not a multiple of outputs=2"),
    ("1 2 3 4\n", {"inputs": 2, "layout": "unrolled"}, "no header line"),
    ("% X @ t=0 @ t=1 @ t=2\n1 2 3 4\n", {"inputs": 2, "layout": "unrolled"}, "no header line"),
    ("1 2 3 4\n", {"inputs": 2, "layout": "unrolled", "times": [0.0, 1.0, 2.0]}, "2 time(s) in its columns, but 3"),
    ("1 2 3\n", {"inputs": 2, "times": [0.0]}, "times apply to layout='unrolled' only"),
    ("1 2 3\n", {"inputs": 0}, "inputs must be a whole number"),
    ("1 2 3\n", {"inputs": 2, "layout": "columns"}, "layout must be one of rows, unrolled"),
    ("1 2 3\n", {"inputs": 2, "max_bytes": 4}, "more than the 4 a reference file may hold"),
])
def test_bad_files_refused_in_one_line_naming_the_file(tmp_path, content, kwargs, says):
    path = tmp_path / "bad.dat"
    path.write_text(content)
    with pytest.raises(fs.ProblemError) as e:
        ReferenceData.from_file(path, **kwargs)
    msg = str(e.value)
    assert says in msg and "bad.dat" in msg and "\n" not in msg


def test_not_a_regular_file_refused(tmp_path):
    with pytest.raises(fs.ProblemError, match="not a regular file"):
        ReferenceData.from_file(tmp_path, inputs=1)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # open() would block forever: refused before opening
    with pytest.raises(fs.ProblemError, match="not a regular file"):
        ReferenceData.from_file(fifo, inputs=1)
    (tmp_path / "bin.dat").write_bytes(b"1 2 \xff\xfe\n")
    with pytest.raises(fs.ProblemError, match="not UTF-8 text"):
        ReferenceData.from_file(tmp_path / "bin.dat", inputs=1)


# ----------------------------------------------------------------------------- a problem measured on a file
class HeatFromFile(DomainPDE):
    """u_t = u_xx/π² on [0, 1] × [0, 1], u = sin(πx) e^{−t}; measured on a reference file (its path an option)."""

    name = "t-heat-file"
    geometry = Interval(0.0, 1.0)
    T = 1.0
    hidden = (8,)
    params = {"ref": fs.option("", "reference file", str)}
    conditions = [Dirichlet("x-", 0.0), Dirichlet("x+", 0.0), Initial(lambda x: torch.sin(PI * x[:, 0]))]

    def equation(self, u, x):
        return u.diff(x, "t") - u.diff(x, "x", "x") / PI ** 2

    def reference(self):
        return fs.ReferenceData.from_file(self.ref, inputs=1, layout="unrolled")


def test_problem_reference_from_file_gives_its_metrics(tmp_path):
    xs, ts = np.linspace(0, 1, 21), np.linspace(0, 1, 6)
    vals = np.sin(PI * xs)[:, None] * np.exp(-ts)[None, :]
    head = "% X   " + "   ".join(f"u (1) @ t={t:g}" for t in ts)
    path = _write(tmp_path / "heat.dat", [head], np.hstack([xs[:, None], vals]))
    p = HeatFromFile(ref=path, n_interior=10, n_boundary=4)
    assert p.has_reference and not p.has_exact
    theta = p.init_params(3)
    m = p.evaluate(theta)
    X = np.array([[x, t] for x in xs for t in ts])
    U = np.sin(PI * X[:, 0]) * np.exp(-X[:, 1])
    P = p.u(theta, torch.as_tensor(X)).detach().numpy()
    want = np.linalg.norm(P - U) / np.linalg.norm(U)
    assert m["rel_l2"] == pytest.approx(want, rel=1e-12) and m["l2re"] == pytest.approx(want, rel=1e-12)


def test_reference_shape_mismatch_named(tmp_path):
    path = _write(tmp_path / "two.dat", [], np.ones((3, 4)))  # x, t, and two values for one output
    p = HeatFromFile(ref=path)
    p.reference = lambda: ReferenceData.from_file(path, inputs=2, outputs=2)
    with pytest.raises(fs.ProblemError, match=r"has 2 value column\(s\); its outputs are \['u'\]"):
        p.evaluate(p.init_params(0))
    q = HeatFromFile(ref=path)
    q.reference = lambda: ReferenceData.from_file(path, inputs=1, outputs=3)
    with pytest.raises(fs.ProblemError, match=r"points with 1 coordinates; its inputs are \['x', 't'\]"):
        q.evaluate(q.init_params(0))


# ----------------------------------------------------------------------------- the pooled metric
def test_pooled_l2re_is_pinnacles_formula():
    """PINNacle src/utils/callbacks.py:170-175: sqrt(mean((y − y*)²)) / sqrt(mean(y*²)) over [n, C]."""
    rng = np.random.default_rng(2)
    U = rng.standard_normal((200, 3)) * np.array([1.0, 0.01, 5.0])
    P = U + 0.1 * rng.standard_normal(U.shape)
    want = np.sqrt(((P - U) ** 2).mean()) / np.sqrt((U ** 2).mean())
    assert pooled_l2re(torch.as_tensor(P), torch.as_tensor(U)) == pytest.approx(want, rel=1e-12)
    # a constant offset on an up-to-constant component is not an error; the denominator stays the reference
    P2 = U.copy()
    P2[:, 2] += 7.0
    assert pooled_l2re(torch.as_tensor(P2), torch.as_tensor(U), [2]) < 1e-14


class System(DomainPDE):
    """Two outputs on [0, 1]²: u = sin πx sin πy, v = 0.01 (x + y) — very different scales."""

    name = "t-system-l2re"
    geometry = Box([0, 0], [1, 1])
    outputs = ("u", "v")
    hidden = (8,)
    conditions = [Dirichlet("boundary", None, component="u"), Dirichlet("boundary", None, component="v")]

    def equation(self, u, x):
        return u["u"].laplacian(x), u["v"].laplacian(x)

    def exact(self, x):
        return torch.stack([torch.sin(PI * x[:, 0]) * torch.sin(PI * x[:, 1]), 0.01 * (x[:, 0] + x[:, 1])], 1)


def test_system_reports_l2re_beside_rel_l2_and_in_the_summary():
    p = System()
    theta = p.init_params(1)
    m = p.evaluate(theta)
    X, U = p._test()
    P = p.u(theta, X).detach().numpy()
    U = U.numpy()
    per = np.linalg.norm(P - U, axis=0) / np.linalg.norm(U, axis=0)
    assert m["rel_l2"] == pytest.approx(per.max(), rel=1e-12)
    assert m["l2re"] == pytest.approx(np.sqrt(((P - U) ** 2).mean()) / np.sqrt((U ** 2).mean()), rel=1e-12)
    assert m["l2re"] < m["rel_l2"]  # v's large relative error weighs little when pooled
    r = Result("t-system-l2re", "gn", {}, 0, "cpu", "float64", p.n_params, 2, final={"loss": 1.0, **m})
    head, row = summary_lines([r])[2:4]
    assert "l2re" in head.split() and f"{m['l2re']:.3e}" in row.split()
    one = Result("heat", "gn", {}, 0, "cpu", "float64", 10, 2, final={"loss": 1.0, "rel_l2": 0.5, "l2re": 0.5})
    assert "l2re" not in summary_lines([one])[2].split()  # one output: the same number, shown once
