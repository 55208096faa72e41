"""``python -m fedsciml predict DIR --points IN.csv --out OUT.csv``: a saved model (``solve --out DIR``) evaluated at
the points of a CSV file — its parser (:func:`add_parser`) and its run (:func:`cmd_predict`)."""
from __future__ import annotations

from fedsciml.cli.common import CLIError, status


def add_parser(sub):
    pr = sub.add_parser("predict")
    pr.add_argument("model", metavar="DIR", help="a model directory (model.safetensors + model.json)")
    pr.add_argument("--points", required=True, metavar="FILE.csv",
                    help="one point per line, one column per input axis; a header line is optional")
    pr.add_argument("--out", required=True, metavar="FILE.csv", help="the points and the model's outputs (overwritten)")


#: the largest ``--points`` file ``predict`` reads (a regular file; no FIFO, no device)
MAX_POINTS_BYTES = 1 << 30


def _read_points(path: str) -> list:
    """The rows of ``--points``: a bounded regular UTF-8 CSV file, every failure one line naming the file."""
    import csv

    from fedsciml.runtime.files import FileRefused, regular_file_size

    try:
        regular_file_size(path, MAX_POINTS_BYTES, "a CSV of points", too_large="split it into several files")
    except FileRefused as e:
        raise CLIError(f"--points {e}") from None
    reader = None
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            return [r for r in reader if r and not r[0].lstrip().startswith("#")]
    except OSError as e:
        raise CLIError(f"--points {path!r} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise CLIError(f"--points {path!r} is not UTF-8 text (byte {e.start}: {e.reason}); give a CSV of "
                       f"numbers") from None
    except csv.Error as e:
        line = reader.line_num if reader is not None else 0
        raise CLIError(f"--points {path!r} line {line}: not a CSV of numbers ({e})") from None


def _write_csv_atomic(path: str, header: list, rows) -> None:
    """``path`` written by :func:`fedsciml.runtime.files.write_output`'s rules (atomically over a regular file or
    a link's target, through to a device, ``-``: standard output; never onto an input of the command): a failed
    write (a full disk) leaves no half file that looks valid, and one line names the file."""
    import csv

    from fedsciml.runtime.files import write_output

    def write(f):
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)

    try:
        write_output(path, write, newline="", what="--out", stdout=True)
    except OSError as e:
        raise CLIError(f"--out {path!r} could not be written ({e.strerror or e}); nothing was written") from None


def cmd_predict(args):
    """``predict DIR --points IN.csv --out OUT.csv``: the saved model at the points, written with a header of
    the input axes and the output components."""
    import numpy as np
    import torch

    from fedsciml.problems.saved import load_model
    from fedsciml.runtime.results import check_output_file

    u = load_model(args.model)
    meta = getattr(u, "meta", {})
    to_stdout = args.out == "-"  # --out -: the CSV on standard output (status lines go to stderr)
    check_output_file(args.out, "--out", stdout=True)  # never the model's own files or --points (main's inputs)
    rows = _read_points(args.points)
    header = None
    if rows and not _numeric(rows[0]):
        header, rows = [h.strip() for h in rows[0]], rows[1:]  # a header line
    inputs = list(meta.get("inputs") or [])
    if header is not None and inputs and header != inputs and set(inputs) <= set(header):
        # named columns (a site table, target included): the model's inputs by name, in the model's order
        cols = [header.index(n) for n in inputs]
        rows = [[r[c] for c in cols] if len(r) == len(header) else r for r in rows]
    try:
        x = np.asarray([[float(v) for v in r] for r in rows], dtype=np.float64)
    except ValueError as e:
        raise CLIError(f"--points {args.points!r}: every value must be a number ({e})") from None
    d = len(meta.get("inputs") or []) or None
    if x.ndim != 2 or x.shape[0] == 0 or (d is not None and x.shape[1] != d):
        want = f"{d} columns {meta.get('inputs')}" if d is not None else "one column per input"
        raise CLIError(f"--points {args.points!r}: need one point per line with {want}, got "
                       f"{x.shape[1] if x.ndim == 2 else 0} column(s) in {x.shape[0]} line(s)")
    bad = ~np.isfinite(x).all(axis=1)
    if bad.any():
        raise CLIError(f"--points {args.points!r}: {int(bad.sum())} point(s) are not finite (NaN or ±inf), the "
                       f"first on data line {int(np.flatnonzero(bad)[0]) + 1}")
    out = u(torch.as_tensor(x)).reshape(x.shape[0], -1).numpy()
    nonfinite = ~np.isfinite(out).all(axis=1)
    if nonfinite.any():
        raise CLIError(f"the model {args.model!r} gives non-finite values at {int(nonfinite.sum())} of "
                       f"{x.shape[0]} points (the first on data line {int(np.flatnonzero(nonfinite)[0]) + 1}); "
                       f"nothing was written")
    names = list(meta.get("inputs") or [f"x{i}" for i in range(x.shape[1])]) + \
        list(meta.get("outputs") or [f"u{i}" for i in range(out.shape[1])])
    lines = ([repr(float(v)) for v in xi] + [repr(float(v)) for v in ui] for xi, ui in zip(x, out))
    _write_csv_atomic(args.out, names, lines)
    if not to_stdout:
        status(f"wrote {args.out} ({x.shape[0]} points)")
    return 0


def _numeric(row) -> bool:
    try:
        [float(v) for v in row]
        return True
    except ValueError:
        return False
