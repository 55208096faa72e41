"""Your own regression table, one file per client: linear least squares ``A w − b`` on each client's rows.

Each client holds one table — a CSV file with a header row (numeric
columns; ``target`` names the target ``b``, the other columns are the
features ``A``) or an ``.npz`` file with arrays ``X`` [n, d] and ``y`` [n] —
and the problem is linear least squares on the pooled rows, fitted from the
clients' statistics (``one-shot``: ridge fusion, optionally with
differential privacy and σ by leave-one-client-out CV; or ``gn``).  No code
is ever loaded (``allow_pickle=False``; CSV values must parse as floats).
There is no penalty row: the ridge σ is the one-shot method's ``sigma`` (or
its CV choice), added once at the server.

    python -m fedsciml solve table --tables site0.csv,site1.csv,site2.csv --clients 3 \\
        --method one-shot --cv-sigmas 1e-4:10:11

On Flower each site's node reads its own table (node config ``data=PATH``),
so the data never leave it; ``tables`` is then only needed by the in-process
engine and by Flower's simulation engine (whose virtual nodes share this
machine).  ``test_table`` is a held-out table at the server for the test
MSE (optional; without it the metric is the training loss).
"""
from __future__ import annotations

import csv
import math
import os
import stat
import zipfile

import numpy as np
import torch

from fedsciml.runtime.memory import available_memory
from fedsciml.options import PATHS, option

from .base import DTYPE, Problem, ProblemError
from .registry import register
from .ridge import LinearModel


def read_table(path: str, target: str = "y") -> tuple[np.ndarray, np.ndarray]:
    """``(X [n, d], y [n])`` float64 from a CSV (header row, ``target`` column) or npz (``X``, ``y``) table;
    one line naming the file and the problem otherwise."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ProblemError(f"data file {path!r} cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ProblemError(f"data file {path!r} is not a regular file (a directory, FIFO or device); "
                           "a table is a CSV or .npz file")
    if path.endswith(".npz"):
        _check_npz(path)
        with np.load(path, allow_pickle=False) as z:
            X, y = np.asarray(z["X"], dtype=np.float64), np.asarray(z["y"], dtype=np.float64)
    else:
        try:
            with open(path, newline="", encoding="utf-8-sig") as f:
                rows = [r for r in csv.reader(f) if any(v.strip() for v in r)]
        except UnicodeDecodeError as e:  # a binary file: the raw decoder's line named no file
            raise ValueError(f"{path}: not a UTF-8 text CSV table (byte {e.start}: {e.reason}); a table is a CSV "
                             f"with a header row, or an .npz with X and y") from None
        except csv.Error as e:  # e.g. a NUL byte
            raise ValueError(f"{path}: not a readable CSV table ({e})") from None
        if len(rows) < 2:
            raise ValueError(f"{path}: a CSV table needs a header row and at least one data row")
        head = [h.strip() for h in rows[0]]
        if target not in head:
            raise ValueError(f"{path}: target column {target!r} not in the header {head}")
        if head.count(target) > 1:
            raise ValueError(f"{path}: target column {target!r} appears {head.count(target)} times in the header "
                             f"{head}; rename all but one")
        bad = [i + 2 for i, r in enumerate(rows[1:]) if len(r) != len(head)]
        if bad:
            raise ValueError(f"{path} line {bad[0]}: {len(rows[bad[0] - 1])} fields, the header has {len(head)}")
        j = head.index(target)
        try:
            M = np.array([[float(v) for v in r] for r in rows[1:]], dtype=np.float64)
        except ValueError as e:
            raise ValueError(f"{path}: every value must be a number ({e})") from None
        y, X = M[:, j], np.delete(M, j, axis=1)
    if X.ndim != 2 or y.ndim != 1 or X.shape[0] != y.shape[0]:
        raise ValueError(f"{path}: need X [n, d] and y [n], got {X.shape} and {y.shape}")
    if not (np.isfinite(X).all() and np.isfinite(y).all()):
        raise ValueError(f"{path}: the table has non-finite values")
    return X, y


def _check_npz(path: str) -> None:
    """Refuse an npz table before anything is allocated: not a zip, no ``X``/``y``, an array header
    that is not npy 1.0/2.0 or holds objects, a header whose shape claims more bytes than its zip
    member holds (a 578-byte file claiming (10⁵, 10⁵) would otherwise make numpy allocate 74.5 GiB),
    or arrays larger (as float64) than half the memory available now.  The member sizes come from
    the zip's directory; a member whose directory entry lies is caught by the CRC check on read."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise ProblemError(f"{path}: not an npz table (not a zip archive: {e})") from None
    with zf:
        members = {n.removesuffix(".npy"): n for n in zf.namelist()}
        if "X" not in members or "y" not in members:
            raise ProblemError(f"{path}: an npz table needs arrays 'X' and 'y', found {sorted(members)}")
        need = 0
        for key in ("X", "y"):
            info = zf.getinfo(members[key])
            try:
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                    else:
                        raise ValueError(f"npy format version {version} (1.0 and 2.0 are read)")
                    header_len = f.tell()
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
                raise ProblemError(f"{path}: array {key!r} is not a readable npy array ({e})") from None
            if dtype.hasobject:
                raise ProblemError(f"{path}: array {key!r} holds Python objects; a table holds numbers")
            count = math.prod(shape)
            claimed = count * dtype.itemsize
            if claimed > info.file_size - header_len:
                raise ProblemError(f"{path}: array {key!r}'s header claims shape {shape} of {dtype} "
                                   f"({claimed} bytes) but the file holds {max(0, info.file_size - header_len)}")
            need += count * 8  # read as float64
        avail = available_memory() or (os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        if need > avail // 2:
            raise ProblemError(f"{path}: X and y need {need / 2**30:.1f} GiB as float64, more than half the "
                               f"{avail / 2**30:.1f} GiB of memory available")


def table_objective(path: str, target: str = "y", dtype=DTYPE, device="cpu"):
    """A client's linear least-squares objective ``A w − b`` from its table (:func:`read_table`)."""
    from fedsciml.core.objective import LinearLeastSquares

    X, y = read_table(path, target)
    return LinearLeastSquares(torch.as_tensor(X, dtype=dtype, device=device),
                              torch.as_tensor(y, dtype=dtype, device=device))


@register
class TableProblem(Problem):
    name = "table"
    kind = "ridge"
    metric = "mse"
    file_options = ("tables", "test_table")  # the options that name files (a Flower node opens none of a server's)
    description = "your own regression table, one CSV/npz file per client (--tables a.csv,b.csv): least squares"
    params = {
        "tables": option((), "the clients' tables, one file per client (CSV with a header: feature columns and "
                             "the target column; or npz with X and y); on the command line comma-separated", PATHS,
                         metavar="A.csv,B.csv"),
        "target": option("y", "the target column of the CSV tables", str),
        "test_table": option("", "a held-out table for the test MSE (optional)", str),
    }

    @property
    def paths(self) -> list[str]:
        return list(self.tables)

    @property
    def default_clients(self) -> int:  # one client per table
        return max(1, len(self.paths))

    def _paths_for(self, n_clients: int) -> list[str]:
        paths = self.paths
        if not paths:
            raise ProblemError("problem 'table' needs its clients' tables: --tables a.csv,b.csv (one per client)")
        if int(n_clients) != len(paths):
            raise ProblemError(f"problem 'table' has {len(paths)} table(s) (one per client), got clients={n_clients}")
        return paths

    def n_features(self) -> int:
        """The width of the first table, read once (``network`` and ``init_params`` both ask)."""
        if "_width" not in self.__dict__:
            path = (self.paths or [self.test_table])[0]
            if not path:
                raise ProblemError("problem 'table' needs --tables (or a node's data=PATH on Flower)")
            self.__dict__["_width"] = int(read_table(path, self.target)[0].shape[1])
        return self.__dict__["_width"]

    def feature_names(self) -> list[str] | None:
        """The feature columns of the first CSV table, in the model's order (the header without the target;
        ``None`` for npz tables, whose columns have no names): what ``model.json`` and ``predict`` call the
        inputs."""
        path = (self.paths or [self.test_table])[0]
        if not path or path.endswith(".npz"):
            return None
        try:
            with open(path, newline="", encoding="utf-8-sig") as f:
                head = [h.strip() for h in next(csv.reader(f), [])]
        except (OSError, UnicodeDecodeError, csv.Error):
            return None
        names = [h for h in head if h != self.target]
        return names if len(names) == self.n_features() and len(set(names)) == len(names) else None

    def network(self) -> LinearModel:
        return LinearModel(self.n_features())

    def init_params(self, seed: int = 0, device="cpu") -> torch.Tensor:
        return torch.zeros(self.n_features(), dtype=DTYPE, device=device)

    def init_params_for(self, n_params: int, seed: int = 0, device="cpu") -> torch.Tensor:
        """θ₀ of a run whose clients said the model's size (:func:`fedsciml.runtime.driver.run_connected`): with
        no tables here (the sites' own, on Flower) zeros of their width, else :meth:`init_params`."""
        if self.paths:
            return self.init_params(seed, device)
        return torch.zeros(int(n_params), dtype=DTYPE, device=device)

    def client_objective(self, k: int, n_clients: int, device="cpu"):
        """Client ``k``'s objective alone (what one node reads)."""
        return table_objective(self._paths_for(n_clients)[k], self.target, device=device)

    def client_objectives(self, n_clients: int, seed: int = 0, device="cpu"):
        return [self.client_objective(k, n_clients, device) for k in range(int(n_clients))]

    def evaluate(self, theta: torch.Tensor, intercept: float = 0.0) -> dict:
        if not self.test_table:
            return {}
        if "_test" not in self.__dict__:
            X, y = read_table(self.test_table, self.target)
            self.__dict__["_test"] = (torch.as_tensor(X, dtype=DTYPE), torch.as_tensor(y, dtype=DTYPE))
        A, b = self.__dict__["_test"]
        if A.shape[1] != theta.numel():
            raise ProblemError(f"{self.test_table}: {A.shape[1]} features, the model has {theta.numel()}")
        err = A.to(theta.device, theta.dtype) @ theta - b.to(theta.device, theta.dtype)
        if intercept:  # a one-shot fit with fit_intercept
            err = err + intercept
        return {"mse": float((err @ err) / err.numel())}
