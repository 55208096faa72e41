"""Adversarial battery (issue 11): bad inputs, faults and hostile files against fedsciml.

Runs a broad set of cheap cases against the CLI (``solve``, ``ridge``, ``bench images``,
plugins, checkpoints, image data directories, output paths), the Python API (wrong
argument types, injected client messages through ``message_hook``, byzantine clients,
faulty user problems) and ``examples/ridge_table_dp.py --csv`` (bad tables), and sorts
every outcome into one category:

  clear_error    one clear line and exit 2 (CLI; exit 1 with one "error:" line for a run that started and
                 could not go on), or an exception fedsciml raised on purpose (API)
  handled        the run succeeded and its result passed the case's check (valid or tolerated input)
  traceback      a Python traceback, or an exception nobody raised on purpose
  hang           still running at the timeout
  silent_wrong   exit 0 / a returned result, but the bad input was ignored or the result is wrong/NaN
  lost_outputs   the run did the work, printed results, then failed writing them
  code_executed  a hostile file ran code (its marker file exists)
  unclear_exit   any other failure (another exit status, a multi-line error, a refused valid input)

Each case runs in its own process: by default a fork of this script after torch, fedsciml
and scikit-learn are imported (a case then costs its own work, not an interpreter start;
the CLI runs exactly as ``python -m fedsciml``, through ``runpy``); ``--subprocess`` starts
a fresh interpreter per case instead.  Sizes are tiny (a few clients, 1-2 rounds), every
case has a timeout (``--timeout``, default 60 s) and a memory cap.

    nice -n 10 python scripts/tools/adversarial.py [--jobs 2] [--json adversarial.json] [--only WORD] [--list]

The summary prints the counts per category (overall and per group) and every case that is
not ``clear_error``/``handled``; the JSON holds every case with its outcome and evidence.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import pickle
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "ridge_table_dp.py")
CATEGORIES = ("clear_error", "handled", "traceback", "hang", "silent_wrong", "lost_outputs", "code_executed",
              "unclear_exit")


@dataclass
class Case:
    name: str
    group: str
    kind: str                      # cli | example | api
    argv: list = field(default_factory=list)   # cli/example arguments; "{dir}", "{marker}" are substituted
    source: str = ""               # api: body of ``def case(d, marker)`` returning a JSON-able value
    expect: str = "error"          # error | ok | any
    check: Callable | None = None  # on success: check(outcome) -> None (fine) or a reason (silent_wrong)
    setup: Callable | None = None  # setup(case_dir, marker) run in the parent before the case
    output_case: bool = False      # bad output path: failing after printing results = lost outputs
    env: dict = field(default_factory=dict)
    timeout: float | None = None


# ----------------------------------------------------------------------------- helpers for cases

# (the default method, fipa, takes a local GN step: --local-steps would be refused there as an option without effect)
SOLVE = ["solve", "sin1d", "--clients", "2", "--n-samples", "20", "--rounds", "1", "--seed", "0", "--quiet"]
GN = ["solve", "sin1d", "--clients", "2", "--n-samples", "20", "--rounds", "1", "--method", "gn", "--quiet"]
RIDGE = ["ridge", "--clients", "3", "--dim", "5", "--n-samples", "20"]
IMAGES = ["bench", "images", "--dataset", "digits", "--methods", "fedavg", "--clients", "2", "--epochs", "1",
          "--quiet"]


def _json(outcome, name="r.json"):
    p = os.path.join(outcome["dir"], name)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def finite_final(outcome):
    """Success is fine when every final metric in the written JSON is a finite number."""
    d = _json(outcome)
    if d is None:
        return None
    runs = d.get("runs", [d])
    for r in runs:
        for k, v in (r.get("final") or {}).items():
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                return f"final {k} = {v!r}"
    return None


def honored(key, value):
    """The written JSON records option ``key`` with ``value`` (not silently replaced by a default)."""
    def check(outcome):
        d = _json(outcome)
        if d is None:
            return "no result JSON written"
        got = (d.get("options") or {}).get(key, (d.get("extra") or {}).get(key))
        if got != value:
            return f"{key}={value!r} was replaced by {got!r}"
        return finite_final(outcome)
    return check


def rounds_run(n):
    def check(outcome):
        d = _json(outcome)
        if d is None:
            return "no result JSON written"
        got = (d.get("extra") or {}).get("rounds")
        return None if got == n else f"--rounds {n} ran {got} rounds"
    return check


def steps_run(n):
    def check(outcome):
        d = _json(outcome)
        if d is None:
            return "no result JSON written"
        got = (d.get("history") or [{}])[-1].get("step")
        return None if got == n else f"asked for {n} iterations, ran {got}"
    return check


def within_seconds(limit):
    def check(outcome):
        return None if outcome["wall_s"] <= limit else f"took {outcome['wall_s']:.0f} s (> {limit} s)"
    return check


def api_value(fn):
    """Check of an API case's returned value: fn(value) -> None or a reason."""
    def check(outcome):
        return fn(outcome.get("value"))
    return check


def write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(content if isinstance(content, bytes) else content.encode())


# ----------------------------------------------------------------------------- hostile payloads


class _Mkdir:
    """Unpickling this calls ``os.mkdir(marker)``: proof that a file ran code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _checkpoint_bytes(state: dict, header: bool) -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    if not header:
        return payload
    try:
        from fedsciml.runtime.checkpoint import MAGIC
    except ImportError:  # a version without checksum headers: the raw file is what it reads
        return payload
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


SEED_CKPT = {}  # filled once: a valid checkpoint directory to copy from


def _seed_checkpoint(workdir):
    if "dir" not in SEED_CKPT:
        d = os.path.join(workdir, "_seed_ckpt")
        r = subprocess.run([sys.executable, "-m", "fedsciml", *SOLVE[:-1], "--method", "fedavg", "--checkpoint", d,
                            "--quiet"], capture_output=True, text=True, cwd=workdir, env=_env({}))
        if r.returncode != 0 or not os.path.exists(os.path.join(d, "state.pt")):
            raise SystemExit(f"cannot write the seed checkpoint: {r.stderr[-2000:]}")
        SEED_CKPT["dir"] = d
    return SEED_CKPT["dir"]


def _read_state(path):
    """A valid checkpoint's state, read the safe way (``fedsciml.runtime.checkpoint.read``)."""
    from fedsciml.runtime.checkpoint import read
    return read(path)


def ckpt_setup(kind):
    def setup(d, marker):
        src = _seed_checkpoint(os.path.dirname(d))
        ck = os.path.join(d, "ck")
        shutil.copytree(src, ck)
        path = os.path.join(ck, "state.pt")
        raw = open(path, "rb").read()
        if kind == "payload":
            st = _read_state(path)
            st["rows"].append(_Mkdir(marker))
            write(path, _checkpoint_bytes(st, header=True))
        elif kind == "payload-raw":
            st = _read_state(path)
            st["rows"].append(_Mkdir(marker))
            write(path, _checkpoint_bytes(st, header=False))
        elif kind == "pickle":
            buf = io.BytesIO()
            pickle.dump({"fingerprint": {}, "x": _Mkdir(marker)}, buf, protocol=2)
            write(path, buf.getvalue())
        elif kind == "truncated":
            write(path, raw[: len(raw) // 2])
        elif kind == "garbage":
            write(path, os.urandom(len(raw)))
        elif kind == "empty":
            write(path, b"")
        elif kind == "bitflip":
            theta = _read_state(path)["strategy"]["theta"]
            at = raw.find(theta.numpy().tobytes())
            b = bytearray(raw)
            b[at + 8 * 3 + 2] ^= 0x04
            write(path, bytes(b))
        elif kind == "directory":
            os.remove(path)
            os.makedirs(path)
        elif kind == "tmp-only":
            os.replace(path, path + ".tmp")
        elif kind == "tmp-leftover":
            write(path + ".tmp", raw[:100])
        elif kind == "wrong-theta":
            import torch
            st = _read_state(path)
            st["strategy"]["theta"] = torch.zeros(3, dtype=torch.float64)
            write(path, _checkpoint_bytes(st, header=True))
        elif kind == "nan-theta":
            st = _read_state(path)
            st["strategy"]["theta"] = st["strategy"]["theta"] * float("nan")
            write(path, _checkpoint_bytes(st, header=True))
        elif kind == "missing-key":
            st = _read_state(path)
            del st["rows"]
            write(path, _checkpoint_bytes(st, header=True))
        elif kind == "symlink-passwd":
            os.remove(path)
            os.symlink("/etc/passwd", path)
        elif kind == "fifo":  # open() would block forever
            os.remove(path)
            os.mkfifo(path)
        elif kind == "dev-zero":  # read() would run until memory runs out
            os.remove(path)
            os.symlink("/dev/zero", path)
        elif kind in ("round-99", "round-neg"):  # forged values, checksum recomputed
            st = _read_state(path)
            st["round"] = 99 if kind == "round-99" else -5
            write(path, _checkpoint_bytes(st, header=True))
    return setup


def _cifar_batch(n, key=b"labels", k=10, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return {b"batch_label": b"batch", key: rng.integers(0, k, n).tolist(),
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"filenames": [b"f%d" % i for i in range(n)]}


def cifar_setup(kind):
    def setup(d, marker):
        import numpy as np

        base = os.path.join(d, "cifar")
        os.makedirs(base)
        good = {"data_batch_1": _cifar_batch(60, seed=1), "test_batch": _cifar_batch(20, seed=2)}
        for name, b in good.items():
            write(os.path.join(base, name), pickle.dumps(b, protocol=2))
        target = os.path.join(base, "data_batch_1")
        if kind == "payload-data":
            b = _cifar_batch(60)
            b[b"filenames"] = [_Mkdir(marker)]
            write(target, pickle.dumps(b, protocol=2))
        elif kind == "payload-test":
            write(os.path.join(base, "test_batch"), pickle.dumps(_Mkdir(marker), protocol=4))
        elif kind == "payload-system":
            class _Sys:
                def __reduce__(self):
                    return (os.system, (f"mkdir {marker}",))
            write(target, pickle.dumps({b"data": _Sys(), b"labels": []}, protocol=2))
        elif kind == "garbage":
            write(target, os.urandom(4096))
        elif kind == "empty":
            write(target, b"")
        elif kind == "text":
            write(target, "this is not a pickle\n")
        elif kind == "shape":
            write(target, pickle.dumps({b"data": np.zeros((5, 100), np.uint8), b"labels": [0] * 5}))
        elif kind == "labels":
            b = _cifar_batch(60)
            b[b"labels"] = [99] * 60
            write(target, pickle.dumps(b))
        elif kind == "float-data":
            write(target, pickle.dumps({b"data": np.zeros((5, 3072)), b"labels": [0] * 5}))
        elif kind == "object-array":
            write(target, pickle.dumps({b"data": np.array([object()] * 3, dtype=object), b"labels": [0] * 3}))
        elif kind == "directory":
            os.remove(target)
            os.makedirs(target)
        elif kind == "missing-test":
            os.remove(os.path.join(base, "test_batch"))
        elif kind == "list":
            write(target, pickle.dumps([1, 2, 3]))
    return setup


PLUGINS = {
    "syntax": "def broken(:\n",
    "raises": "raise RuntimeError('plugin import failed on purpose')\n",
    "import-missing": "import module_that_does_not_exist_anywhere\n",
    "empty-file": "",
    "sliver-nan": textwrap.dedent('''
        import math, torch
        import fedsciml as fs

        @fs.register
        class Sliver(fs.PDE):
            """NaN residual for x > 0.99 only"""
            name = "adv-sliver"
            def exact(self, x):
                return torch.sin(math.pi * x[..., 0])
            def equation(self, u, x):
                r = -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
                return torch.where(x[..., 0] > 0.99, torch.full_like(r, float("nan")), r)
        '''),
    "residual-raises": textwrap.dedent('''
        import math, torch
        import fedsciml as fs

        @fs.register
        class Boom(fs.PDE):
            """residual raises"""
            name = "adv-boom"
            def exact(self, x):
                return torch.sin(math.pi * x[..., 0])
            def equation(self, u, x):
                raise ZeroDivisionError("user residual failed")
        '''),
    "shadow-builtin": textwrap.dedent('''
        import math, torch
        import fedsciml as fs

        @fs.register
        class Poisson(fs.PDE):
            """tries to replace the built-in poisson"""
            name = "poisson"
            def exact(self, x):
                return torch.sin(math.pi * x[..., 0])
            def equation(self, u, x):
                return -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
        '''),
    "good": textwrap.dedent('''
        import math, torch
        import fedsciml as fs

        @fs.register
        class Good(fs.PDE):
            """a valid plugin"""
            name = "adv-good"
            def exact(self, x):
                return torch.sin(math.pi * x[..., 0])
            def equation(self, u, x):
                return -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
        '''),
}


def plugin_setup(kind):
    def setup(d, marker):
        write(os.path.join(d, f"plug_{kind.replace('-', '_')}.py"), PLUGINS[kind])
    return setup


def plugin_path(kind):
    return "{dir}/" + f"plug_{kind.replace('-', '_')}.py"


# --------------------------------------------------------------------------------- the CSV tables

def _rows(n=60, sites=4, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    out = [["site", "x1", "x2", "x3", "y"]]
    for i in range(n):
        x = rng.normal(size=3)
        out.append([f"s{i % sites}", *[f"{v:.6f}" for v in x], f"{x @ [1.0, -2.0, 0.5] + 0.1 * rng.normal():.6f}"])
    return out


def _csv(rows):
    return "\n".join(",".join(r) for r in rows) + "\n"


def _table_cases():
    def edit(i, j, v):
        rows = _rows()
        rows[i][j] = v
        return _csv(rows)

    def pop(i):
        rows = _rows()
        rows[i].pop()
        return _csv(rows)

    def extra(i):
        rows = _rows()
        rows[i].append("1.0")
        return _csv(rows)

    tables = {
        "empty file": "", "header only": "site,x1,x2,x3,y\n", "header and blank lines": "site,x1,x2,x3,y\n\n\n",
        "no target column": _csv([r[:-1] for r in _rows()]), "no client column": _csv([r[1:] for r in _rows()]),
        "NaN feature": edit(5, 1, "nan"), "inf target": edit(7, 4, "inf"), "-inf feature": edit(8, 2, "-inf"),
        "string feature": edit(3, 2, "abc"), "string target": edit(3, 4, "high"), "empty feature cell": edit(3, 3, ""),
        "empty target cell": edit(4, 4, ""), "empty client id": edit(9, 0, ""), "one row": _csv(_rows()[:2]),
        "two rows": _csv(_rows()[:3]), "one group": _csv([_rows()[0]] + [["s0", *r[1:]] for r in _rows()[1:]]),
        "duplicate column": _csv([["site", "x1", "x1", "x3", "y"]] + _rows()[1:]), "short row": pop(4),
        "long row": extra(4), "no feature columns": _csv([[r[0], r[4]] for r in _rows()]),
        "all-zero features": _csv([_rows()[0]] + [[r[0], "0", "0", "0", r[4]] for r in _rows()[1:]]),
        "all-zero target": _csv([_rows()[0]] + [r[:4] + ["0"] for r in _rows()[1:]]),
        "overflowing feature": edit(2, 1, "1.5e308"), "overflowing target": edit(2, 4, "1e200"),
        "empty header names": ",,,,\n" + _csv(_rows()[1:]), "semicolon separated": _csv(_rows()).replace(",", ";"),
        "binary garbage": bytes(range(256)) * 4, "NUL byte in a value": edit(3, 1, "1\x000"),
        "quote not closed": edit(6, 2, '"1.0'), "hex float": edit(6, 2, "0x1p3"),
        "tab separated": _csv(_rows()).replace(",", "\t"),
    }
    cases = []
    for name, content in tables.items():
        cases.append(Case(f"csv: {name}", "example-csv", "example", ["--csv", "{dir}/t.csv", "--epsilons", "inf",
                                                                      "--quick"],
                          setup=(lambda c: lambda d, m: write(os.path.join(d, "t.csv"), c))(content)))
    good = lambda d, m: write(os.path.join(d, "t.csv"), _csv(_rows(n=80)))  # noqa: E731
    for args in (["--epsilons", "0"], ["--epsilons", "nan"], ["--epsilons", "-1"], ["--epsilons", "1,,2"],
                 ["--epsilons", ""], ["--delta", "1"], ["--delta", "0"], ["--seeds", "0"], ["--target", "site"],
                 ["--target", "nope"], ["--client-column", "nope"]):
        cases.append(Case(f"csv option {' '.join(args)}", "example-csv", "example",
                          ["--csv", "{dir}/t.csv", "--quick", *args], setup=good))
    cases.append(Case("csv: missing file", "example-csv", "example", ["--csv", "{dir}/nope.csv", "--quick"]))
    cases.append(Case("csv: a directory", "example-csv", "example", ["--csv", "{dir}", "--quick"]))
    cases.append(Case("csv: --epsilons 1 without inf", "example-csv", "example",
                      ["--csv", "{dir}/t.csv", "--quick", "--epsilons", "1"], setup=good, expect="ok"))
    cases.append(Case("csv: valid table with a UTF-8 BOM", "example-csv", "example",
                      ["--csv", "{dir}/t.csv", "--quick", "--epsilons", "inf"], expect="ok",
                      setup=lambda d, m: write(os.path.join(d, "t.csv"), b"\xef\xbb\xbf" + _csv(_rows(n=80)).encode())))
    return cases


# ------------------------------------------------------------------------------- API case sources

API_PRELUDE = "import math, torch, numpy as np\nimport fedsciml as fs\n"
TINY = 'problem_options={"n_samples": 40}'


def _hook_case(method, body, opts="", expect="any", check=None, name=None, group="api-messages"):
    """Run ``method`` clean and with ``hook`` (body of ``hook(rnd, cid, msg)``), return both results."""
    extra = {"fedavg": "local_steps=3", "fedprox": "local_steps=3, mu=0.1", "fipa": "rank=4",  # fipa: local gn
             "gn": ""}[method]
    src = f'''
def hook(rnd, cid, msg):
{textwrap.indent(textwrap.dedent(body), "    ")}
kw = dict(method="{method}", clients=4, rounds=3, {TINY}, {extra}{", " + opts if opts else ""})
clean = fs.solve("sin1d", **kw)
bad = fs.solve("sin1d", message_hook=hook, **kw)
return {{"clean": clean.final["mse"], "bad": bad.final["mse"], "rejections": len(bad.extra.get("rejections", [])),
         "rounds": bad.extra.get("rounds")}}
'''
    return Case(name or f"{method}: {body.strip().splitlines()[-1][:70]}", group, "api", source=src, expect=expect,
                check=check)


def rejected_and_sound(v):
    """An invalid message must be rejected (counted) and the result stay finite and close to the clean run."""
    if not isinstance(v, dict):
        return f"returned {v!r}"
    if not (isinstance(v["bad"], float) and math.isfinite(v["bad"])):
        return f"final mse {v['bad']!r}"
    if v["rejections"] < 1:
        return "the invalid message was not rejected"
    return None


def robust(factor=10.0):
    """Byzantine client: the run stops clearly, or rejects the client (logged), or ends within ``factor`` x the
    clean error (+0.05); a finite result far off with no rejection is silently wrong."""
    def fn(v):
        if not isinstance(v, dict):
            return f"returned {v!r}"
        bad, clean = v["bad"], v["clean"]
        if v.get("rejections", 0) >= 1 and isinstance(bad, float) and math.isfinite(bad):
            return None  # the lie was caught and logged (the error then reflects the clients left: sin1d's
            # clients own disjoint intervals, so losing one costs accuracy on its interval)
        if not (isinstance(bad, float) and math.isfinite(bad)):
            return f"final mse {bad!r} (clean run {clean:.3g})"
        if bad > factor * clean + 0.05:
            return f"final mse {bad:.3g} against {clean:.3g} without the byzantine client"
        return None
    return fn


def _api_cases():
    cases = []
    A = lambda name, src, expect="error", check=None, group="api-arguments": cases.append(  # noqa: E731
        Case(name, group, "api", source=src, expect=expect, check=check))
    base = {"method": '"fedavg"', "clients": "2", "rounds": "1", "local_steps": "2"}
    for arg in ("budget='5'", "budget=-1", "budget=float('nan')", "seed=-1", "seed='a'", "seed=1.5",
                "checkpoint=123", "clients='2'", "clients=2.5", "clients=0", "rounds='3'", "rounds=2.5",
                "rounds=-1", "device='gpu'", "device=123", "dropout='x'", "dropout=1.0", "participation=0",
                "participation=float('nan')", "local_steps=-1", "lr=float('inf')", "lr=-1", "mu=-1",
                "tol=float('nan')", "resume=True", "message_hook=5", "unknown_option=3"):
        kw = {**base, arg.split("=")[0]: arg.split("=", 1)[1]}
        if arg.startswith("mu="):
            kw["method"] = '"fedprox"'  # the method that uses it
        A(f"solve({arg})", 'return fs.solve("sin1d", ' + ", ".join(f"{k}={v}" for k, v in kw.items())
          + f", {TINY}).final")
    A("solve(problem=123)", "return fs.solve(123).final")
    A("solve('nope')", "return fs.solve('nope').final")
    A("solve(method=None)", 'return fs.solve("sin1d", method=None).final')
    A("solve(method='nope')", 'return fs.solve("sin1d", method="nope").final')
    A("problem_options unknown key", 'return fs.solve("sin1d", problem_options={"nope": 1}).final')
    A("problem_options n_samples=-3", 'return fs.solve("sin1d", problem_options={"n_samples": -3}).final')
    A("problem_options n_samples='x'", 'return fs.solve("sin1d", problem_options={"n_samples": "x"}).final')
    A("centralized adam lr=inf", 'return fs.solve("sin1d", optimizer="adam", lr=float("inf"), max_iters=3, '
                                 + TINY + ').final')
    A("centralized max_iters=-1", 'return fs.solve("sin1d", max_iters=-1, ' + TINY + ').final')
    # user problems and data
    U = "api-user-problems"
    A("ClientData with an empty client", "return fs.ClientData([(np.ones((3, 1)), np.ones(3)), "
      "(np.zeros((0, 1)), np.zeros(0))])", group=U)
    A("ClientData with NaN data", "d = fs.ClientData([(np.ones((5, 1)), np.ones(5)), "
      "(np.full((5, 1), np.nan), np.ones(5))]); return fs.solve(d, method='fedavg', rounds=1).final", group=U)
    A("ClientData with mismatched lengths", "return fs.ClientData([(np.ones((5, 1)), np.ones(4))])", group=U)
    A("ClientData with strings", "return fs.ClientData([(np.array([['a'], ['b']]), np.ones(2))])", group=U)
    A("ClientData not pairs", "return fs.ClientData([np.ones(3)])", group=U)
    A("ClientData empty list", "return fs.ClientData([])", group=U)
    pde = '''
class P(fs.PDE):
    name = "adv-inline"
    def exact(self, x):
        return torch.sin(math.pi * x[..., 0])
    def equation(self, u, x):
        r = -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
        return {ret}
return fs.solve(P(n_interior=200), method="{method}", clients=2, rounds=2).final
'''
    for label, ret in (("NaN on x > 0.99", 'torch.where(x[..., 0] > 0.99, torch.full_like(r, float("nan")), r)'),
                       ("inf everywhere", "r / 0.0"), ("two values per point", "torch.stack([r, r])"),
                       ("a string", "'oops'"), ("raises", "1 / 0")):
        for method in ("fedavg", "fipa"):
            A(f"user PDE residual {label} ({method})", pde.format(ret=ret, method=method), group=U)
    A("user PDE without exact()", '''
class P(fs.PDE):
    name = "adv-noexact"
    def equation(self, u, x):
        return -u.laplacian(x)
return fs.solve(P(n_interior=20), max_iters=2).final''', expect="any",
      check=api_value(lambda v: None if isinstance(v, dict) else f"returned {v!r}"), group=U)
    # injected client messages (message_hook)
    M = "api-messages"
    corrupt = {
        "NaN in every float field": 'if cid == 1:\n    msg = {k: v * float("nan") for k, v in msg.items()}\nreturn msg',
        # an index, not reshape(-1)[0]: gn's R is a transposed view, whose reshape is a copy (the inf never landed)
        "inf in one entry": 'if cid == 1:\n    k = sorted(msg)[0]\n    v = msg[k].clone()\n    v[(0,) * v.dim()] = float("inf")\n'
                            '    msg = {**msg, k: v}\nreturn msg',
        "int64 tensors": 'if cid == 1:\n    msg = {k: v.to(torch.int64) for k, v in msg.items()}\nreturn msg',
        "bool tensors": 'if cid == 1:\n    msg = {k: v != 0 for k, v in msg.items()}\nreturn msg',
        "float32 tensors": 'if cid == 1:\n    msg = {k: v.float() for k, v in msg.items()}\nreturn msg',
        "complex NaN": 'if cid == 1:\n    msg = {k: v.to(torch.complex128) * complex(float("nan"), 0) '
                       'for k, v in msg.items()}\nreturn msg',
        "wrong shape": 'if cid == 1:\n    k = next(iter(msg))\n    msg = {**msg, k: msg[k].reshape(-1)[:-1]}\nreturn msg',
        "missing field": 'if cid == 1:\n    msg = dict(list(msg.items())[1:])\nreturn msg',
        "extra field": 'if cid == 1:\n    msg = {**msg, "evil": torch.zeros(3, dtype=torch.float64)}\nreturn msg',
        "None message": 'return None if cid == 1 else msg',
        "a list": 'return [1, 2] if cid == 1 else msg',
        "a string": 'return "hello" if cid == 1 else msg',
        "numpy arrays": 'return {k: v.numpy() for k, v in msg.items()} if cid == 1 else msg',
        "negative sample count": 'if cid == 1 and "n" in msg:\n    msg = {**msg, "n": -msg["n"]}\nreturn msg',
        "zero sample count": 'if cid == 1 and "n" in msg:\n    msg = {**msg, "n": msg["n"] * 0}\nreturn msg',
        "NaN sample count": 'if cid == 1 and "n" in msg:\n    msg = {**msg, "n": msg["n"] * float("nan")}\nreturn msg',
        "negative loss": 'if cid == 1 and "loss" in msg:\n    msg = {**msg, "loss": -msg["loss"].abs() - 1}\nreturn msg',
        "negative curvature lam": 'if cid == 1 and "lam" in msg:\n    msg = {**msg, "lam": -msg["lam"].abs() - 1}\n'
                                  'return msg',
    }
    for method in ("fedavg", "fipa", "gn"):  # valid values, only marked for autograd: rejected or harmless
        cases.append(_hook_case(method, 'if cid == 1:\n    msg = {k: v.clone().requires_grad_(v.is_floating_point()) '
                                        'for k, v in msg.items()}\nreturn msg', check=api_value(robust(1.5)),
                                name=f"{method}: client 1 sends tensors requiring grad", group=M))
    only = {"negative loss": ("fipa", "gn"), "negative curvature lam": ("fipa",)}
    for label, body in corrupt.items():
        for method in only.get(label, ("fedavg", "fipa", "gn")):
            cases.append(_hook_case(method, body, check=api_value(rejected_and_sound),
                                    name=f"{method}: client 1 sends {label}", group=M))
    # byzantine clients: finite, well-formed, wrong
    B = "api-byzantine"
    byz = {
        "update x1e6": 'if cid == 1:\n    msg = {k: (v * 1e6 if k not in ("n",) else v) for k, v in msg.items()}\n'
                       'return msg',
        "sign flip": 'if cid == 1:\n    msg = {k: (-v if k in ("delta", "g") else v) for k, v in msg.items()}\nreturn msg',
        "sample count 1e300": 'if cid == 1 and "n" in msg:\n    msg = {**msg, "n": msg["n"] * 0 + 1e300}\nreturn msg',
        "two clients claim 1e308": 'if cid in (1, 2) and "n" in msg:\n    msg = {**msg, "n": msg["n"] * 0 + 1e308}\n'
                                   'return msg',
        "sample count changes": 'if cid == 1 and "n" in msg and rnd > 1:\n    msg = {**msg, "n": msg["n"] * 50}\n'
                                'return msg',
        "curvature x1e6, loss kept": 'if cid == 1:\n    msg = {k: (v * 1e6 if k in ("H", "lam", "R") else v) '
                                     'for k, v in msg.items()}\nreturn msg',
        "statistics g / Qᵀr x1e3, loss kept": 'if cid == 1:\n    msg = {k: (v * 1e3 if k in ("g", "s") else v) '
                                              'for k, v in msg.items()}\nreturn msg',
    }
    only = {"curvature x1e6, loss kept": ("fipa", "gn"), "statistics g / Qᵀr x1e3, loss kept": ("gn",)}
    for label, body in byz.items():
        for method in only.get(label, ("fedavg", "fipa", "gn")):
            cases.append(_hook_case(method, body, check=api_value(robust()), name=f"{method}: byzantine {label}",
                                    group=B))
    cases.append(_hook_case("fedprox", byz["update x1e6"], check=api_value(robust()),
                            name="fedprox: byzantine update x1e6", group=B))
    for method, opts in (("fedavg", 'robust="median"'), ("fedavg", 'clip_norm=1.0'), ("fipa", 'robust="median"'),
                         ("fipa", 'robust="trimmed", trim=0.25')):  # the documented robust options
        cases.append(_hook_case(method, byz["update x1e6"], opts=opts, check=api_value(robust()),
                                name=f"{method} {opts}: byzantine update x1e6", group=B))
    # a client rejected every round must stop the run after a bounded number of rounds
    cases.append(Case("fedavg: client 1 rejected in every one of 40 rounds", M, "api", source=f'''
def hook(rnd, cid, msg):
    return {{**msg, "delta": msg["delta"] * float("nan")}} if cid == 1 else msg
r = fs.solve("sin1d", method="fedavg", clients=3, rounds=40, local_steps=1, message_hook=hook, {TINY})
return {{"rounds": r.extra.get("rounds"), "rejections": len(r.extra.get("rejections", []))}}
'''))
    return cases


# --------------------------------------------------------------------------------------- CLI cases

def _cli_cases():
    cases = []

    def C(name, argv, group, expect="error", check=None, **kw):
        cases.append(Case(name, group, "cli", argv, expect=expect, check=check, **kw))

    S = "cli-solve"
    bad_solve = [
        ["--clients", "0"], ["--clients", "-1"], ["--clients", "1000000000"], ["--n-samples", "-5"],
        ["--n-samples", "0"], ["--n-samples", "1000000000000"], ["--n-samples", "1e3"], ["--rounds", "-1"],
        ["--rank", "-1"], ["--budget", "0"], ["--budget", "-1"], ["--budget", "nan"], ["--tol", "nan"], ["--participation", "0"],
        ["--participation", "1.5"], ["--participation", "nan"], ["--dropout", "1"], ["--dropout", "-0.1"],
        ["--dropout", "nan"], ["--beta", "inf"], ["--beta", "nan"], ["--beta", "-1"], ["--gamma", "nan"],
        ["--gamma", "-1"], ["--gamma", "inf"], ["--local-steps", "-1"],
        ["--seed", "-1"], ["--threads", "0"], ["--threads", "-2"], ["--device", "gpu"], ["--device", "tpu"],
        ["--device", "cuda:7"], ["--every", "0"], ["--every", "-1"], ["--method", "nope"], ["--compare", "fedavg,nope"],
        ["--merge", "bogus"], ["--local", "sgd"], ["--optimizer", "sgd"], ["--resume"], ["--split", "bogus"],
        ["--freq", "nan"],
    ] + [["--method", "fedavg", "--lr", v] for v in ("0", "-1", "nan", "inf")] + [
        ["--method", "fedprox", "--mu", v] for v in ("-1", "nan", "inf")]
    for extra in bad_solve:
        C("solve " + " ".join(extra), SOLVE + extra, S)
    C("solve --tol -1 (never stops early)", SOLVE + ["--tol", "-1", "--json", "{dir}/r.json"], S, expect="any",
      check=finite_final)
    C("solve unknown problem", ["solve", "nope", "--quiet"], S)
    C("solve no problem", ["solve"], S)
    C("solve poisson --dim 0", ["solve", "poisson", "--dim", "0", "--max-iters", "1", "--quiet"], S)
    C("solve poisson --dim 101", ["solve", "poisson", "--dim", "101", "--max-iters", "1", "--quiet"], S)  # d ≤ 100
    C("solve poisson --dim 100000", ["solve", "poisson", "--dim", "100000", "--max-iters", "1", "--quiet"], S)
    C("solve poisson --n-interior 0", ["solve", "poisson", "--n-interior", "0", "--max-iters", "1", "--quiet"], S)
    C("solve poisson --n-interior 100000000", ["solve", "poisson", "--dim", "1", "--n-interior", "100000000",
                                               "--max-iters", "1", "--quiet"], S)
    C("solve poisson --variant bogus", ["solve", "poisson", "--variant", "bogus", "--quiet"], S)
    C("solve poisson --boundary-weight 0", ["solve", "poisson", "--boundary-weight", "0", "--quiet"], S)
    C("solve poisson --boundary-weight nan", ["solve", "poisson", "--boundary-weight", "nan", "--quiet"], S)
    C("solve bratu --lam 10 (no solution)", ["solve", "bratu", "--lam", "10", "--max-iters", "2", "--quiet"], S)
    C("solve bratu --lam nan", ["solve", "bratu", "--lam", "nan", "--max-iters", "2", "--quiet"], S)
    C("solve ridge-linear --heterogeneity 2", ["solve", "ridge-linear", "--heterogeneity", "2", "--quiet"], S)
    C("solve centralized adam --lr inf", ["solve", "sin1d", "--n-samples", "20", "--optimizer", "adam", "--lr", "inf",
                                          "--max-iters", "3", "--quiet", "--json", "{dir}/r.json"], S)
    C("solve --max-iters -1", ["solve", "sin1d", "--n-samples", "20", "--max-iters", "-1", "--quiet"], S)
    C("solve gn --participation 0.5", GN + ["--participation", "0.5"], S)
    # zero-valued options: an error, or the value honored (not replaced by a default)
    Z = "cli-zero-values"
    for opt, key, method in (("--rank", "rank", "fipa"), ("--mu", "mu", "fedprox"),
                             ("--local-steps", "local_steps", "fedavg"), ("--gamma", "gamma", "fipa"),
                             ("--participation", "participation", "fedavg")):
        C(f"solve {opt} 0 ({method})", SOLVE + ["--method", method, opt, "0", "--json", "{dir}/r.json"], Z,
          expect="any", check=honored(key, 0))
    C("solve --rounds 0", SOLVE + ["--method", "fedavg", "--rounds", "0", "--json", "{dir}/r.json"], Z,
      expect="any", check=rounds_run(0))
    C("solve --max-iters 0", ["solve", "sin1d", "--n-samples", "20", "--max-iters", "0", "--quiet", "--json",
                              "{dir}/r.json"], Z, expect="any", check=steps_run(0))
    # budgets must hold inside long local work too
    T = "cli-budget"
    C("solve --budget 2 with --local-steps 100000000", SOLVE[:-5] + ["--method", "fedavg", "--local-steps",
                                                                    "100000000", "--budget", "2", "--rounds", "2",
                                                                    "--quiet"], T, expect="any",
      check=within_seconds(30))
    C("solve --budget 1 fipa --local-steps 10000000", SOLVE[:-5] + ["--method", "fipa", "--local", "adam", "--local-steps", "10000000",
                                                                   "--budget", "1", "--rounds", "2", "--quiet"],
      T, expect="any", check=within_seconds(30))
    # valid runs must work (controls)
    K = "controls"
    C("solve fedavg (valid)", SOLVE + ["--method", "fedavg", "--json", "{dir}/r.json"], K, expect="ok",
      check=finite_final)
    C("solve gn (valid)", GN + ["--json", "{dir}/r.json"], K, expect="ok", check=finite_final)
    C("ridge (valid)", RIDGE + ["--json", "{dir}/r.json"], K, expect="ok")
    C("bench images digits (valid)", IMAGES + ["--json", "{dir}/r.json"], K, expect="ok")
    # output paths: refused before the run, never after
    O = "cli-output-paths"
    for label, opt, path, setup in (
            ("--json is a directory", "--json", "{dir}", None),
            ("--json in a missing, uncreatable place", "--json", "/proc/adv/r.json", None),
            ("--json under a file", "--json", "{dir}/f/r.json", lambda d, m: write(os.path.join(d, "f"), "x")),
            ("--out is a file", "--out", "{dir}/f", lambda d, m: write(os.path.join(d, "f"), "x")),
            ("--out under /proc", "--out", "/proc/adv-out", None)):
        for cmd, argv in (("solve", SOLVE + ["--method", "fedavg"]), ("ridge", RIDGE), ("bench images", IMAGES)):
            if cmd == "ridge" and opt == "--out":
                continue
            C(f"{cmd} {label}", argv + [opt, path], O, setup=setup, output_case=True)
    # ridge
    R = "cli-ridge"
    for extra in (["--clients", "0"], ["--clients", "-3"], ["--clients", "100000000"], ["--dim", "0"],
                  ["--dim", "10000000"], ["--n-samples", "0"], ["--n-samples", "1"], ["--n-samples", "100000000000"],
                  ["--heterogeneity", "-1"], ["--heterogeneity", "2"], ["--heterogeneity", "nan"], ["--sigma", "-1"],
                  ["--sigma", "nan"], ["--sigma", "inf"], ["--cv-sigmas", "abc"], ["--cv-sigmas", "0:1:5"], ["--cv-sigmas", "1,-1"],
                  ["--cv-sigmas", ""], ["--dp-epsilon", "0"], ["--dp-epsilon", "-1"], ["--dp-epsilon", "nan"], ["--dp-delta", "0"],
                  ["--dp-delta", "1"], ["--dp-clip-a", "0"], ["--dp-clip-a", "nan"], ["--dp-clip-b", "-1"], ["--project", "0"],
                  ["--project", "-1"], ["--project", "1000000"], ["--dropout", "1"], ["--dropout", "-0.5"],
                  ["--features", "rff", "--rff-dim", "0"], ["--features", "rff", "--rff-dim", "-5"], ["--baselines", "nope"],
                  ["--baselines", "fedavg", "--rounds", "-1"], ["--device", "gpu"], ["--seed", "-1"],
                  ["--clients", "1", "--cv-sigmas", "1e-3:1:5"]):
        C("ridge " + " ".join(extra), RIDGE + extra, R)
    C("ridge --sigma 0 rank-deficient (4 rows, d=5)", ["ridge", "--clients", "1", "--dim", "5", "--n-samples", "5",
                                                        "--sigma", "0", "--json", "{dir}/r.json"], R, expect="any",
      check=finite_final)
    # bench images
    I = "cli-images"
    for extra in (["--clients", "0"], ["--clients", "-1"], ["--clients", "100000"], ["--alpha", "0"],
                  ["--alpha", "-1"], ["--alpha", "nan"], ["--epochs", "-1"], ["--lr", "-1"], ["--lr", "nan"],
                  ["--lr", "inf"], ["--rounds", "-1", "--protocol", "rounds"], ["--participation", "0"],
                  ["--participation", "2"], ["--rank", "-1"], ["--beta", "inf"], ["--beta", "nan"], ["--gamma", "nan"],
                  ["--modes", "0"], ["--seeds", "0"], ["--seeds", "-1"], ["--threads", "0"], ["--methods", "nope"],
                  ["--methods", ""], ["--device", "gpu"], ["--dataset", "cifar10"], ["--dataset", "fmnist"],
                  ["--dataset", "cifar10", "--data-dir", "{dir}/missing"], ["--dataset", "fmnist", "--data-dir", "{dir}"],
                  ["--dataset", "imagenet"], ["--model", "bogus"], ["--warmup", "-1", "--protocol", "warmup-refine"]):
        C("bench images " + " ".join(extra), IMAGES + extra, I)
    # plugins
    P = "cli-plugins"
    for kind in ("syntax", "raises", "import-missing", "shadow-builtin"):
        C(f"plugin {kind}", ["--plugin", plugin_path(kind), "list"], P, setup=plugin_setup(kind))
    C("plugin empty file (registers nothing)", ["--plugin", plugin_path("empty-file"), "list"], P, expect="any",
      setup=plugin_setup("empty-file"))
    C("plugin empty --plugin ''", ["--plugin", "", "list"], P)
    C("plugin missing file", ["--plugin", "{dir}/nope.py", "list"], P)
    C("plugin is a directory", ["--plugin", "{dir}", "list"], P)
    C("plugin same file twice", ["--plugin", plugin_path("good"), "--plugin", plugin_path("good"), "solve", "adv-good",
                                 "--n-interior", "10", "--max-iters", "1", "--quiet"], P, expect="any",
      setup=plugin_setup("good"))
    C("plugin via FEDSCIML_PLUGINS raising", ["list"], P, setup=plugin_setup("raises"),
      env={"FEDSCIML_PLUGINS": plugin_path("raises")})
    C("plugin residual NaN on a sliver (fedavg)", ["--plugin", plugin_path("sliver-nan"), "solve", "adv-sliver",
                                                   "--n-interior", "400", "--clients", "2", "--method", "fedavg",
                                                   "--rounds", "2", "--quiet"], P, setup=plugin_setup("sliver-nan"))
    C("plugin residual raises", ["--plugin", plugin_path("residual-raises"), "solve", "adv-boom", "--n-interior", "10",
                                 "--max-iters", "1", "--quiet"], P, setup=plugin_setup("residual-raises"))
    # hostile and corrupt checkpoints
    H = "cli-checkpoints"
    resume = SOLVE[:-1] + ["--method", "fedavg", "--rounds", "2", "--checkpoint", "{dir}/ck", "--resume", "--quiet"]
    for kind in ("payload", "payload-raw", "pickle", "truncated", "garbage", "empty", "bitflip", "directory",
                 "wrong-theta", "nan-theta", "missing-key", "symlink-passwd"):
        C(f"checkpoint {kind}", resume, H, setup=ckpt_setup(kind))
    C("checkpoint leftover state.pt.tmp only (starts fresh)", resume + ["--json", "{dir}/r.json"], H, expect="ok",
      setup=ckpt_setup("tmp-only"), check=lambda o: (
          "state.pt.tmp left behind" if os.path.exists(os.path.join(o["dir"], "ck", "state.pt.tmp")) else None))
    C("checkpoint leftover state.pt.tmp beside a good one", resume + ["--json", "{dir}/r.json"], H, expect="ok",
      setup=ckpt_setup("tmp-leftover"), check=lambda o: (
          "state.pt.tmp left behind" if os.path.exists(os.path.join(o["dir"], "ck", "state.pt.tmp")) else None))
    C("checkpoint from another method", SOLVE[:-1] + ["--method", "fipa", "--rounds", "2", "--checkpoint", "{dir}/ck",
                                                     "--resume", "--quiet"], H, setup=ckpt_setup("good"))
    C("checkpoint dir is a file", SOLVE + ["--method", "fedavg", "--checkpoint", "{dir}/f"], H,
      setup=lambda d, m: write(os.path.join(d, "f"), "x"))
    # hostile image data directories
    D = "cli-cifar-dirs"
    cifar = IMAGES[:3] + ["cifar10", "--data-dir", "{dir}/cifar"] + IMAGES[4:]
    for kind in ("payload-data", "payload-test", "payload-system", "garbage", "empty", "text", "shape", "labels",
                 "float-data", "object-array", "directory", "missing-test", "list"):
        C(f"cifar10 dir: {kind}", cifar, D, setup=cifar_setup(kind))
    return cases


def _dialect_cases():
    """The one option dialect, the one method registry and today's options (2026-11-24): problem options declared
    with fs.option, FLOATS/PATHS text parsed once, SPRING momentum, central DP's survivors and row bound, image
    methods in the one registry, bench images' generated flags.  Each bad value: one clear line."""
    cases = []
    G = "cli-dialect"

    def C(name, argv, expect="error", check=None, **kw):
        cases.append(Case(name, G, "cli", argv, expect=expect, check=check, **kw))

    one = ["solve", "ridge-linear", "--method", "one-shot", "--clients", "3", "--n-samples", "40", "--quiet"]
    lm = ["solve", "sin1d", "--n-samples", "20", "--max-iters", "1", "--quiet"]
    for extra in (["--momentum", "1"], ["--momentum", "-0.1"], ["--momentum", "nan"],
                  ["--momentum", "0.5", "--optimizer", "adam"]):
        C("solve centralized " + " ".join(extra), lm + extra)
    C("solve fipa --momentum 0.5 (gn and lm only)", SOLVE + ["--momentum", "0.5"])
    C("solve gn --momentum 1", GN + ["--momentum", "1"])
    C("solve sin1d --method regmean (an image method)", lm + ["--method", "regmean"])
    C("solve sin1d --compare fedbens (an image method)", lm + ["--compare", "fedbens"])
    C("solve bratu --tables a.csv (another problem's option)", ["solve", "bratu", "--tables", "a.csv", "--quiet"])
    C("solve bratu --n-interior 1e3 (int option as text)", ["solve", "bratu", "--n-interior", "1e3", "--quiet"])
    C("solve bratu --sampling bogus", ["solve", "bratu", "--sampling", "bogus", "--quiet"])
    C("solve heat-inverse --data-seed -1", ["solve", "heat-inverse", "--data-seed", "-1", "--quiet"])
    C("solve heat-inverse --noise -1", ["solve", "heat-inverse", "--noise", "-1", "--quiet"])
    C("solve table --tables , (no paths)", ["solve", "table", "--tables", ",", "--quiet"])
    C("solve ridge-linear --decay 3 (flat spectrum: no effect)", one + ["--decay", "3"])
    C("solve heat-inverse --data-seed 3 (noise 0: no effect)", ["solve", "heat-inverse", "--data-seed", "3",
                                                                "--quiet"])
    C("solve poisson --dim 1 --n-boundary 7 (1D: no effect)", ["solve", "poisson", "--dim", "1", "--n-boundary",
                                                               "7", "--max-iters", "1", "--quiet"])
    for grid in ("1,nan", "1,inf", "1e-3:1e3:100000", "", "1:2", "a,b", "-1,2"):
        C(f"solve one-shot --cv-sigmas {grid!r}", one + ["--cv-sigmas", grid])
    C("solve one-shot --dp-min-survivors 2 (DP off)", one + ["--dp-min-survivors", "2"])
    C("solve one-shot --dp-max-rows 5 (central DP off)", one + ["--dp-epsilon", "1", "--dp-max-rows", "5"])
    C("solve one-shot --dp-min-survivors 0", one + ["--dp-epsilon", "1", "--dp-central", "--dp-min-survivors", "0"])
    C("solve one-shot --dp-min-survivors 9 > clients 3", one + ["--dp-epsilon", "1", "--dp-central",
                                                                "--dp-min-survivors", "9"])
    C("solve one-shot central DP --dp-max-rows 5 in process (sites hold more rows)",
      one + ["--dp-epsilon", "1", "--dp-central", "--dp-max-rows", "5"])
    C("ridge --dp-min-survivors 2 (DP off)", RIDGE + ["--dp-min-survivors", "2"])
    C("ridge --epsilon 1 --dp-central --dp-min-survivors 0", RIDGE + ["--dp-epsilon", "1", "--dp-central",
                                                                      "--dp-min-survivors", "0"])
    C("ridge --epsilon 1 --dp-max-rows 3 (central DP off)", RIDGE + ["--dp-epsilon", "1", "--dp-max-rows", "3"])
    for extra in (["--participation", "0.5"], ["--iid", "--split", "hsu"], ["--iid", "--alpha", "0.5"],
                  ["--methods", "regmean", "--protocol", "rounds"], ["--methods", "centralized"],
                  ["--methods", "fedavg", "--rank", "3"], ["--methods", "fedavg", "--modes", "3"],
                  ["--checkpoint", "{dir}/ck"], ["--resume"], ["--rounds", "3"], ["--warmup", "3"],
                  ["--methods", ",,"], ["--server-opt", "sgd"], ["--protocol", "bogus"]):
        C("bench images " + " ".join(extra), IMAGES + extra)
    return cases


def _issue23_cases():
    """One case per finding of issue 23 (correctness and records), each expected as a clear error or handled."""
    cases = []
    G = "issue23"

    def C(name, argv, expect="error", check=None, **kw):
        cases.append(Case(name, G, "cli", argv, expect=expect, check=check, **kw))

    def A(name, src, expect="error", check=None, **kw):
        cases.append(Case(name, G, "api", source=src, expect=expect, check=check, **kw))

    # 1. a server optimisation whose objective is NaN must not return its start as "the best"
    A("FedBEns/FedFisher server Adam on a NaN objective", '''
from fedsciml.images.aggregators import _adam_best
w, _ = _adam_best(torch.ones(4), lambda v: v * float("nan"), lambda v: 0.5, 10, 1e-2, (0.9, 0.99), 1e-8, 2)
return w.tolist()
''')
    # 3. / 5. tables
    table = ["solve", "table", "--clients", "1", "--method", "one-shot", "--quiet", "--tables"]
    C("table: target column named twice", table + ["{dir}/t.csv"],
      setup=lambda d, m: write(os.path.join(d, "t.csv"), "a,y,y\n1,2,3\n2,3,4\n3,4,5\n"))

    def lying_npz(d, m):
        import zipfile

        import numpy as np

        def member(shape, data):
            b = io.BytesIO()
            np.lib.format.write_array_header_1_0(b, {"descr": "<f8", "fortran_order": False, "shape": shape})
            return b.getvalue() + data
        with zipfile.ZipFile(os.path.join(d, "t.npz"), "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("X.npy", member((100000, 100000), b"\0" * 16))
            z.writestr("y.npy", member((2,), b"\0" * 16))
    C("table: 578-byte npz claiming (100000, 100000)", table + ["{dir}/t.npz"], setup=lying_npz, timeout=30)
    C("table: missing file", table + ["{dir}/missing.csv"])
    C("table: a directory", table + ["{dir}/sub"], setup=lambda d, m: os.makedirs(os.path.join(d, "sub")))
    C("table: not a zip .npz", table + ["{dir}/t.npz"], setup=lambda d, m: write(os.path.join(d, "t.npz"), "hello\n"))
    # 4. hangs: special checkpoint files; a Flower engine that fails to start
    resume = SOLVE[:-1] + ["--method", "fedavg", "--rounds", "2", "--checkpoint", "{dir}/ck", "--resume", "--quiet"]
    for kind in ("fifo", "dev-zero"):
        C(f"checkpoint state.pt is {kind}", resume, setup=ckpt_setup(kind), timeout=30)
    A("Flower engine whose run ends without its result (the simulation runtime crashed)", '''
from fedsciml.engines.flower import deploy
def crashed(self, proc, outs, timeout_s=600.0, echo=None):
    raise RuntimeError("the Flower run ended without its result (flwr run status 1); its log:\\n"
                       "Exception: The current node timed out during startup.")
deploy.LocalSuperLink.start = lambda self: self
deploy.LocalSuperLink.submit_config = lambda self, *a, **k: None
deploy.LocalSuperLink.wait_files = crashed
return fs.solve("sin1d", method="fedavg", clients=2, rounds=1, engine="flower", problem_options={"n_samples": 10}).final
''', timeout=120)
    # 6. a disk that fills during the final write: the results survive, one line
    A("--json on a disk that fills during the final write", '''
import builtins, errno, glob, json, os, tempfile
import fedsciml.runtime.results as R
from fedsciml.cli import main
real = builtins.open
class Full:
    def __init__(self, f): self.f = f
    def write(self, s): raise OSError(errno.ENOSPC, "No space left on device")
    def __getattr__(self, k): return getattr(self.f, k)
    def __enter__(self): return self
    def __exit__(self, *a): self.f.close()
full, spare = os.path.join(d, "full"), os.path.join(d, "spare")
os.makedirs(full); os.makedirs(spare)
real_fdopen = os.fdopen  # the writers (fedsciml.runtime.files) write through os.fdopen: a write under full fails
def fdopen(fd, mode="r", *a, **k):
    f = real_fdopen(fd, mode, *a, **k)
    return Full(f) if "w" in mode and os.readlink(f"/proc/self/fd/{fd}").startswith(full) else f
os.fdopen = fdopen
R.open = lambda p, mode="r", *a, **k: Full(real(p, mode, *a, **k)) if "w" in mode and str(p).startswith(full) else real(p, mode, *a, **k)
tempfile.gettempdir = lambda: spare
rc = main(["solve", "sin1d", "--clients", "2", "--n-samples", "10", "--rounds", "1", "--quiet", "--json", os.path.join(full, "r.json")])
saved = glob.glob(os.path.join(spare, "fedsciml-r-*.json"))
return {"rc": rc, "saved": len(saved), "valid": bool(saved) and bool(json.load(real(saved[0])))}
''', expect="ok", check=api_value(lambda v: None if v == {"rc": 1, "saved": 1, "valid": True}
                                      else f"results not saved: {v}"))
    # 8. options accepted and ignored
    for extra in (["--method", "fedavg", "--trim", "0.3"], ["--merge", "qr", "--pinv-rtol", "1e-5"],
                  ["--local", "adam", "--adapt-c", "0.1"], ["--method", "fedavg", "--local-damping", "0.1"],
                  ["--json", ""], ["--out", ""]):
        C("solve " + " ".join(extra) + " (no effect)", SOLVE + extra)
    C("solve one-shot --dp-delta without --dp-epsilon", ["solve", "ridge-linear", "--method", "one-shot", "--dp-delta",
                                                         "1e-3", "--quiet"])
    C("solve one-shot --project-sketch without --project", ["solve", "ridge-linear", "--method", "one-shot",
                                                            "--project-sketch", "srht", "--quiet"])
    A("one-shot sigma and cv_sigmas together (Python)",
      'return fs.solve("ridge-linear", "one-shot", clients=3, sigma=0.1, cv_sigmas=[0.01, 1.0]).final')
    # 9. message validation
    A("fedavg: a sample count of 0.5 (rejected by name)", '''
def hook(rnd, cid, msg):
    return {**msg, "n": msg["n"] * 0 + 0.5} if cid == 1 else msg
r = fs.solve("sin1d", method="fedavg", clients=3, rounds=1, local_steps=2, message_hook=hook, problem_options={"n_samples": 20})
return [x["reason"] for x in r.extra["rejections"]]
''', expect="ok", check=api_value(lambda v: None if v and all("whole number" in x for x in v) else f"not rejected: {v}"))
    A("one-shot: one client sends 1e300 (rejected by name, the fusion goes on)", '''
def hook(rnd, cid, msg):
    return {k: (v * 0 + 1e300 if k != "n" else v) for k, v in msg.items()} if cid == 1 else msg
r = fs.solve("ridge-linear", "one-shot", clients=3, message_hook=hook)
return {"mse": r.final["mse"], "rejected": [x["client"] for x in r.extra["rejections"]]}
''', expect="ok", check=api_value(lambda v: None if v["rejected"] == [1] and math.isfinite(v["mse"]) else str(v)))
    A("fedavg: a meta-device tensor (rejected by name)", '''
def hook(rnd, cid, msg):
    return {**msg, "delta": torch.empty_like(msg["delta"], device="meta")} if cid == 1 else msg
r = fs.solve("sin1d", method="fedavg", clients=3, rounds=1, local_steps=2, message_hook=hook, problem_options={"n_samples": 20})
return [x["reason"] for x in r.extra["rejections"]]
''', expect="ok", check=api_value(lambda v: None if v and all("meta" in x for x in v) else f"not rejected: {v}"))
    for kind in ("round-99", "round-neg"):
        C(f"checkpoint forged {kind} with a recomputed checksum", resume, setup=ckpt_setup(kind))
    # 10. a consistent byzantine liar against the robust one-shot / gn screen
    for method in ("one-shot", "gn"):
        A(f"{method} --screen: a consistent liar (fabricated rows x100)", f'''
from fedsciml.core import linalg
def hook(rnd, cid, msg):
    if cid != 2:
        return msg
    if "H" not in msg:
        return {{**msg, "n": 100 * msg["n"]}}
    p = msg["g"].numel()
    H = linalg.unpack_upper(msg["H"], p)
    w = torch.full((p,), 3.0, dtype=H.dtype)
    return {{"H": 100 * msg["H"], "g": -100 * (H @ w), "loss": (50 * (w @ H @ w)).reshape(1), "n": 100 * msg["n"]}}
kw = dict(clients=6, seed=0{", rounds=3" if method == "gn" else ""})
clean = fs.solve("ridge-linear", "{method}", **kw)
r = fs.solve("ridge-linear", "{method}", screen=20.0, message_hook=hook, **kw)
return {{"clean": clean.final["mse"], "mse": r.final["mse"], "rejected": [x["client"] for x in r.extra["rejections"]]}}
''', expect="ok", check=api_value(lambda v: None if v["rejected"] == [2] and v["mse"] < 2 * v["clean"] else str(v)))
    return cases


def _ridge_model(d):
    """A small valid ridge model directory ``d/m`` and ``d/pts.csv`` (written in the parent, before the case)."""
    import torch

    from fedsciml.ridge.model_io import write_model

    write_model(os.path.join(d, "m"), torch.arange(1.0, 4.0, dtype=torch.float64), 0.5)
    write(os.path.join(d, "pts.csv"), "1,2,3\n4,5,6\n")
    return os.path.join(d, "m", "model.safetensors")


def _corrupt_model(change):
    def setup(d, marker):
        import struct

        path = _ridge_model(d)
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
        head.pop("__metadata__", None)

        def join(h, dd=data):
            b = json.dumps(h).encode()
            return struct.pack("<Q", len(b)) + b + dd
        with open(path, "wb") as f:
            f.write(change(raw, head, data, join))
    return setup


def _model_json(change):
    def setup(d, marker):
        _ridge_model(d)
        mp = os.path.join(d, "m", "model.json")
        text = change(json.load(open(mp)))
        with open(mp, "wb") as f:
            f.write(text if isinstance(text, bytes) else text.encode())
    return setup


def _points(content=None, kind=None):
    def setup(d, marker):
        _ridge_model(d)
        p = os.path.join(d, "pts.csv")
        os.remove(p)
        if kind == "fifo":
            os.mkfifo(p)
        elif kind == "zero":
            os.symlink("/dev/zero", p)
        else:
            with open(p, "wb") as f:
                f.write(content)
    return setup


_ASK = """
from fedsciml.engines.flower import apps, codec
from fedsciml.runtime.transport import Failure, Request
def ask(job, node, query="describe"):
    rep = codec.reply_from_content(apps.answer_content(codec.request_content(Request(query), job), node))
    return {"failure": isinstance(rep, Failure), "reason": getattr(rep, "reason", str(getattr(rep, "metrics", "")))}
"""

_SERVE = """
from fedsciml.engines.flower import apps
class Grid:
    def get_node_ids(self):
        raise AssertionError("the run started: its config was not checked first")
apps.serve(Grid(), RC)
"""

_MISMATCH = """
from fedsciml.engines.flower.transport import FlowerTransport
from fedsciml.runtime.transport import Reply
class Grid:
    def get_node_ids(self):
        return [11, 12]
FlowerTransport._describe = lambda self, ids, t: {n: Reply({}, {"partition_id": i, "n": 5, "p": 3, "linear": False,
                                                                "num_partitions": 2}) for i, n in enumerate(ids)}
FlowerTransport(Grid(), {}, 3, connect_timeout_s=20)
"""

_PDE = """
from fedsciml.problems.domain import DomainPDE
from fedsciml.problems.geometry import Box
class Bad(DomainPDE):
    name = "adv-bad-float-eq"
    geometry = Box([0, 0], [1, 1])
    hidden = (4,)
    conditions = CONDS
    def equation(self, u, x):
        return EQ
Bad().client_objectives(1)
return "built"
"""

_CKPT = """
from fedsciml.runtime import checkpoint as ckpt
p = fs.get_problem("sin1d", n_samples=20)
kw = dict(clients=2, seed=0, checkpoint=d + "/ck", **OPTS)
fs.solve(p, METHOD, rounds=2, **kw)
st = ckpt.read(ckpt.path_in(d + "/ck"))
s = st["strategy"]
EDIT
ckpt.save(d + "/ck", st)
r = fs.solve(p, METHOD, rounds=3, resume=True, **kw)
return r.final.get("mse")
"""


def _no_secret(v):
    if not isinstance(v, dict) or not v.get("failure"):
        return f"the node answered the hostile job: {str(v)[:120]}"
    return "the reply carries the file's content" if "root:" in v["reason"] else None


def _refused(v):
    return None if isinstance(v, dict) and v.get("failure") else f"the node built it: {str(v)[:100]}"


def _issue31_cases():
    """Issue 31, by category: a hostile server against a Flower node (site), central DP over SecAgg+ (dp), model
    files (model), the Flower App's run config (runconfig), geometry and the PDE API (geometry), checkpoint fields
    (checkpoint), predict's inputs (predict), idle options (idle)."""
    cases = []

    def C(group, name, argv, expect="error", check=None, **kw):
        cases.append(Case(name, "issue31-" + group, "cli", argv, expect=expect, check=check, **kw))

    def A(group, name, src, expect="error", check=None, **kw):
        cases.append(Case(name, "issue31-" + group, "api", source=src, expect=expect, check=check, **kw))

    # 1. a site decides what it reads: crafted jobs to the ClientApp's handler
    A("site", "server names tables=['/etc/passwd'] (node without data)", _ASK + (
        'return ask({"problem": "table", "options": {"tables": ["/etc/passwd", "/etc/passwd"]}, "clients": 2}, '
        '{"partition-id": 0})'), expect="ok", check=api_value(_no_secret))
    A("site", "node's own data=/etc/passwd: the reply quotes nothing", _ASK + (
        'return ask({"problem": "bratu", "options": {}, "clients": 2}, {"partition-id": 0, "data": "/etc/passwd"})'),
      expect="ok", check=api_value(_no_secret))
    A("site", "server asks poisson n_interior=10**9 (7.45 GiB)", _ASK + (
        'return ask({"problem": "poisson", "options": {"n_interior": 10**9}, "clients": 2}, {"partition-id": 0})'),
      expect="ok", check=api_value(_refused), timeout=60)
    A("site", "server sets the node's threads", _ASK + (
        'before = torch.get_num_threads()\n'
        'ask({"problem": "bratu", "options": {}, "clients": 2, "threads": before + 6}, {"partition-id": 0})\n'
        'return {"before": before, "after": torch.get_num_threads()}'),
      expect="ok", check=api_value(lambda v: None if v["before"] == v["after"] else f"threads set by the job: {v}"))
    A("site", "image job names data_dir=/etc", _ASK + (
        'return ask({"images": {"dataset": "cifar10", "data_dir": "/etc", "clients": 2, "seed": 0, '
        '"model": "linear"}, "clients": 2}, {"partition-id": 0})'),
      expect="ok", check=api_value(lambda v: None if isinstance(v, dict) and "[refused]" in v.get("reason", "")
                                   else f"not refused by the node's own policy: {str(v)[:120]}"))

    # 2. central DP over SecAgg+ with a loose row bound
    dp = ["ridge", "--clients", "3", "--dim", "8", "--n-samples", "50", "--dp-epsilon", "2", "--dp-central", "--engine",
          "flower"]
    C("dp", "--dp-max-rows 1e12 (rounding swamps the model)", dp + ["--dp-max-rows", "1000000000000"], timeout=150)
    C("dp", "--dp-max-rows 10 (below the sites' rows)", dp + ["--dp-max-rows", "10"], timeout=150)

    # 4./5. model files
    pred = ["predict", "{dir}/m", "--points", "{dir}/pts.csv", "--out", "{dir}/u.csv"]

    def retype(name, dt):
        return lambda raw, h, d, j: j({**h, name: {**h[name], "dtype": dt}})

    def values(v):
        import struct
        return lambda raw, h, d, j: j(h, struct.pack("<4d", 1.0, v, 3.0, 0.5))
    corrupt = {
        "truncated (20 bytes)": lambda raw, h, d, j: raw[:20],
        "empty": lambda raw, h, d, j: b"",
        "random bytes": lambda raw, h, d, j: bytes(range(256)) * 4,
        "a pickle": lambda raw, h, d, j: pickle.dumps({"coef": [1.0, 2.0, 3.0]}),
        "header length 0": lambda raw, h, d, j: b"\0" * 8 + raw[8:],
        "header length 2**63": lambda raw, h, d, j: (2 ** 63).to_bytes(8, "little") + raw[8:],
        "header length past EOF": lambda raw, h, d, j: len(raw).to_bytes(8, "little") + raw[8:],
        "header not JSON": lambda raw, h, d, j: (4).to_bytes(8, "little") + b"{{{{" + d,
        "overlapping offsets": lambda raw, h, d, j: j({**h, "intercept": {**h["intercept"], "data_offsets": [0, 8]}}),
        "negative shape": lambda raw, h, d, j: j({**h, "coef": {**h["coef"], "shape": [-3]}}),
        "unknown dtype": retype("coef", "Q99"),
        "int64 coef": retype("coef", "I64"),
        "bool intercept": retype("intercept", "BOOL"),
        "float32 coef": retype("coef", "F32"),
        "float16 coef": retype("coef", "F16"),
        "NaN coef": values(float("nan")),
        "inf coef": values(float("inf")),
        "bytes beyond the tensors": lambda raw, h, d, j: raw + b"\0" * 64,
    }
    for name, change in corrupt.items():
        C("model", f"model.safetensors: {name}", pred, setup=_corrupt_model(change))
    deep = '{"a": ' * 200_000 + "1" + "}" * 200_000
    js = {
        "200,000-deep": lambda m: deep,
        "1e400": lambda m: json.dumps(m).replace('"n_features": 3', '"n_features": 1e400'),
        "n_features a string": lambda m: json.dumps({**m, "n_features": "3"}),
        "n_features disagrees": lambda m: json.dumps({**{k: v for k, v in m.items() if k != "inputs"},
                                                      "n_features": 4}),
        "intercept disagrees": lambda m: json.dumps({**m, "intercept": 0.25}),
        "a list": lambda m: "[1, 2]",
        "not UTF-8": lambda m: b"\xff\xfe" + json.dumps(m).encode("utf-16-le"),
    }
    for name, change in js.items():
        C("model", f"model.json: {name}", pred, setup=_model_json(change))

    # 7. a failed Flower run exits non-zero through `flower run` (flwr run --stream exits 0); tests/test_flower_launch.py
    # runs the failing and the completed run on a local simulation SuperLink (Ray: ~15 s each): here the launcher's
    # own refusals
    C("runconfig", "flower run: APP not a directory", ["flower", "run", "{dir}/nosuch"])
    C("runconfig", "flower run: --timeout -1", ["flower", "run", "app", "--timeout", "-1"])
    C("runconfig", "flower run: --timeout nan", ["flower", "run", "app", "--timeout", "nan"])

    # 7. the Flower App's run config: the ServerApp's serve on a grid that must never be reached
    rcs = {"clients=0": {"clients": 0}, "problem='nosuch'": {"problem": "nosuch"},
           "negative rounds": {"method-options": '{"rounds": -1}'},
           "out='/proc/1/x/r.json'": {"out": "/proc/1/x/r.json"}, "jobs='/etc/passwd'": {"jobs": "/etc/passwd"},
           "jobs='/dev/zero'": {"jobs": "/dev/zero"}, "clients=2.7": {"clients": 2.7},
           "timeout=-1": {"timeout": -1.0}, "timeout=nan": {"timeout": "NAN"}}
    for name, rc in rcs.items():
        text = repr({"problem": "bratu", "clients": 2, **rc}).replace("'NAN'", "float('nan')")
        A("runconfig", f"run config {name}", _SERVE.replace("RC", text), timeout=60)
    A("runconfig", "3 clients on 2 SuperNodes", _MISMATCH, timeout=60)

    # 6. geometry and the PDE API
    geo = {
        "self-intersecting polygon": "G.Polygon([(0, 0), (2, 2), (2, 0), (0, 1)]).area",
        "repeated vertex": "G.Polygon([(0, 0), (1, 0), (1, 0), (0, 1)]).area",
        "NaN vertex": "G.Polygon([(0, 0), (float('nan'), 0), (0, 1)]).area",
        "Disk radius '1'": "G.Disk((0, 0), '1').r",
        "Disk radius 1e-300": "G.Disk((0, 0), 1e-300).r",
        "Box([], [])": "G.Box([], []).dim",
        "Dirichlet n=2.5": "C.Dirichlet('x-', n=2.5).n",
        "Robin alpha=beta=0": "C.Robin('y+', 0.0, 0.0, 1.0).alpha",
        "complex value": "C.Dirichlet('x-', 1 + 2j).on",
        "Data noise=-1": "C.Data(x=[[0.5, 0.5]], y=[0.0], noise=-1.0).noise",
        "split strips:z": "G.make_partition('strips:z', 2, G.Box([0, 0], [1, 1])).axis",
    }
    for name, expr in geo.items():
        A("geometry", name, "from fedsciml.problems import geometry as G, conditions as C\n"
                            f"v = {expr}\nreturn float(v) if isinstance(v, (int, float)) else str(v)")
    A("geometry", "intersection of boxes that only touch", "from fedsciml.problems import geometry as G\n"
      "return repr(G.Box([0, 0], [1, 1]) & G.Box([1, 0], [2, 1]))")
    A("geometry", "strips with a cell outside the domain (box minus its left half)", _PDE.replace(
        "Box([0, 0], [1, 1])", "Box([0, 0], [2, 1]) - Box([0, 0], [1, 1])").replace(
        "CONDS", "[__import__('fedsciml.problems.conditions', fromlist=['x']).Dirichlet('boundary', 0.0)]").replace(
        "EQ", "u.laplacian(x)").replace("Bad().client_objectives(1)", "Bad().client_objectives(2)"))
    # hidden=(10**6,): the memory check counts the gradient's residual graph (48 GB), here against 16 GiB free
    for method, opts in (("fedavg", "rounds=1"), ("centralized", "optimizer='adam'"), ("centralized", "")):
        A("geometry", f"hidden=(10**6,) with {method} {opts} on a 16 GiB machine",
          "from fedsciml.core import forms\nfrom fedsciml.runtime import driver\n"
          "forms.available_memory = driver.available_memory = lambda device=None: 16 * 2**30\n"
          f"return fs.solve('bratu', {method!r}, hidden=(10**6,), {opts}).final", timeout=60)
    A("geometry", "conditions=None", _PDE.replace("CONDS", "None").replace("EQ", "u.laplacian(x)"))
    A("geometry", "an equation returning a float", _PDE.replace(
        "CONDS", "[__import__('fedsciml.problems.conditions', fromlist=['x']).Dirichlet('boundary', 0.0)]")
      .replace("EQ", "1.0"))

    # 8. checkpoint fields
    edits = {
        "gn SPRING phi NaN": ("gn", "dict(momentum=0.5)", "s['phi'] = s['phi'] * float('nan')"),
        "gn SPRING phi short": ("gn", "dict(momentum=0.5)", "s['phi'] = s['phi'][:3]"),
        "gn mu = -1": ("gn", "dict()", "s['mu'] = -1.0"),
        "gn stored loss NaN": ("gn", "dict()", "s['loss'] = float('nan')"),
        "fedadam v < 0": ("fedadam", "dict(local_steps=5)", "s['aggregator']['v'] = -s['aggregator']['v'].abs() - 1"),
        "fedadam m missing": ("fedadam", "dict(local_steps=5)", "s['aggregator'].pop('m')"),
        "fipa beta = -1": ("fipa", "dict(local='gn', safeguard=True)", "s['beta'] = -1.0"),
    }
    for name, (method, opts, edit) in edits.items():
        A("checkpoint", name, _CKPT.replace("METHOD", repr(method)).replace("OPTS", opts).replace("EDIT", edit),
          timeout=150)

    # 9. predict's inputs
    C("predict", "--points a FIFO", pred, setup=_points(kind="fifo"), timeout=30)
    C("predict", "--points a link to /dev/zero", pred, setup=_points(kind="zero"), timeout=30)
    C("predict", "--points a 200,000-character field", pred, setup=_points(b"1,2," + b"3" * 200_000 + b"\n"))
    C("predict", "--points latin-1", pred, setup=_points("1,2,3\n# caf\xe9\n".encode("latin-1")))
    C("predict", "--points binary", pred, setup=_points(bytes(range(256))))
    C("predict", "--points NaN", pred, setup=_points(b"1,2,3\nnan,1,1\n"))
    # one bounded-regular-file check and one atomic write for --points/--out, model files and checkpoints
    C("predict", "--points a directory", ["predict", "{dir}/m", "--points", "{dir}", "--out", "{dir}/u.csv"],
      setup=_points(b"1,2,3\n"))
    C("predict", "--out an existing directory (nothing written)",
      ["predict", "{dir}/m", "--points", "{dir}/pts.csv", "--out", "{dir}/m"], setup=_points(b"1,2,3\n"))
    C("predict", "--points inf", pred, setup=_points(b"1,2,3\n1,inf,1\n"))

    # also: FusionServer names the client at fault instead of blaming the pooled Gram
    fusion = (
        "from fedsciml.core import linalg\n"
        "from fedsciml.ridge import FusionServer, client_message, fuse\n"
        "g = torch.Generator().manual_seed(0)\n"
        "msgs = {c: client_message(torch.randn(20, 5, generator=g, dtype=torch.float64), "
        "torch.randn(20, generator=g, dtype=torch.float64)) for c in range(3)}\n")
    huge = "msgs[1] = {k: (v * 0 + 1e300 if k != 'n' else v) for k, v in msgs[1].items()}\n"
    A("fusion", "FusionServer: one client's statistics all 1e300 (rejected by name, the others fused)",
      fusion + huge + "s = FusionServer(5)\nok, bad = s.receive_all(msgs)\n"
      "return {'ok': ok, 'bad': bad, 'w': s.solve(1e-3).tolist()}", expect="ok",
      check=api_value(lambda v: None if v["ok"] == [0, 2] and list(v["bad"]) == ["1"] and "field 'G'" in v["bad"]["1"]
                      and all(math.isfinite(x) for x in v["w"]) else f"not named: {v}"))
    A("fusion", "fuse(): one client's statistics all 1e300 (the run refused, the client named)",
      fusion + huge + "return fuse(msgs, 1e-3).tolist()")
    A("fusion", "FusionServer: a G with |G_01| > sqrt(G_00 G_11) (named when the solve fails)",
      fusion + "G = linalg.unpack_upper(msgs[2]['G'], 5).clone()\nG[0, 1] = G[1, 0] = 1e3\n"
      "msgs[2] = {**msgs[2], 'G': linalg.pack_upper(G)}\ns = FusionServer(5)\ns.receive_all(msgs)\n"
      "return s.solve(1e-3).tolist()")

    # also: the image methods' byzantine defence (a client sending its update x 1e6)
    C("images", "--robust median with only the one-shot model merges (refused)",
      IMAGES[:5] + ["fishermerge,regmean"] + IMAGES[6:] + ["--robust", "median"])
    liar = ("from fedsciml.images import data as imdata, methods as M\n"
            "fed = imdata.federate(imdata.load('digits', None), 5, None, 0, 'balanced')\n"
            "hook = lambda rnd, cid, msg: {**msg, 'delta': msg['delta'] * 1e6} if cid == 1 else msg\n")
    for meth in ("fedavg", "fipa", "fedfish"):
        A("images", f"{meth} rounds, a client sending its update x 1e6, --robust median", liar + (
            f"cfg = M.TrainConfig(epochs=1, lr=0.05, robust='median', rank=4, server_opt='avg' if {meth!r} == "
            f"'fedfish' else 'default')\nreturn M.run_rounds(fed, 'linear', [{meth!r}], 0, cfg, 3, "
            f"message_hook=hook)[{meth!r}].accuracy"), expect="ok",
          check=api_value(lambda v: None if v > 0.8 else f"accuracy {v} under attack with the median"))

    # 10. idle options
    gn = ["solve", "sin1d", "--clients", "2", "--n-samples", "20", "--method", "gn", "--quiet", "--rounds", "1"]
    C("idle", "--nystrom-rank with --form normal", gn + ["--form", "normal", "--nystrom-rank", "5"])
    C("idle", "--nystrom-rank 1e12 with --form matfree (capped)",
      gn + ["--form", "matfree", "--nystrom-rank", "1000000000000"], expect="ok", timeout=120)
    return cases


_STOPPER = """
import math, os, signal, sys, torch
import fedsciml as fs

_calls = [0]

@fs.register
class StoppingWave(fs.PDE):
    name = "plugin-stopping-wave"
    def exact(self, x):
        return torch.sin(math.pi * x[..., 0])
    def equation(self, u, x):
        _calls[0] += 1
        if len(sys.argv) == 3 and sys.argv[0] == "-c" and sys.argv[-1] == "1" and _calls[0] == 4:
            os.kill(os.getpid(), signal.SIGSTOP)  # client 1's process stops itself in round 1
        return -u.laplacian(x) - math.pi ** 2 * torch.sin(math.pi * x[..., 0])
"""


def _says(text, where="stderr"):
    """A check: the run's stdout/stderr holds ``text``."""
    def check(outcome):
        return None if text in outcome[where] else f"{where} lacks {text!r}: {outcome[where].strip()[-160:]!r}"
    return check


def _issue38b_cases():
    """Issue 38, findings 4, 5, 8 (not the checkpoint fields) and 10: planned allocations checked up front (the
    battery's 3000 MiB address-space cap is the machine here), the processes engine's limits, raw errors left,
    ``--clock cpu`` on an engine."""
    cases = []

    def C(name, argv, expect="error", check=None, **kw):
        cases.append(Case(name, "issue38b", "cli", argv, expect=expect, check=check, **kw))

    def A(name, src, expect="error", check=None, **kw):
        cases.append(Case(name, "issue38b", "api", source=src, expect=expect, check=check, **kw))

    sin = ["solve", "sin1d", "--quiet"]
    gn2 = ["--method", "gn", "--clients", "2", "--rounds", "1"]
    # 4. memory
    # it fits (p = 900,001, the matrix-free form): the check is that it stops at its budget, the first step's
    # sketch included, and writes its result — not the run's length (no budget: hundreds of slow steps)
    C("centralized --hidden 300000 --budget 5", sin + ["--method", "centralized", "--hidden", "300000", "--budget",
                                                       "5"], expect="ok", timeout=150)
    C("--lm-solve kernel on 100k rows", sin + ["--method", "centralized", "--lm-solve", "kernel", "--n-samples",
                                               "100000"])
    C("gn --hidden 1000000 --form normal", sin + gn2 + ["--hidden", "1000000", "--form", "normal"])
    C("gn --hidden 1000000 --engine processes", sin + gn2 + ["--hidden", "1000000", "--engine", "processes"])
    C("fedavg --hidden 10000,10000", sin + ["--method", "fedavg", "--clients", "2", "--rounds", "1", "--hidden",
                                           "10000,10000"])
    grow = ["solve", "bratu", "--quiet", "--clients", "2", "--rounds", "5", "--resample", "1", "--grow-every", "1"]
    C("--grow 1000 without --grow-cap", grow + ["--method", "gn", "--grow", "1000"])
    C("--grow 1e6 without --grow-cap (fedavg)", grow + ["--method", "fedavg", "--grow", "1e6"])
    C("--grow 1e308", grow + ["--method", "gn", "--grow", "1e308"])
    C("--grow 2 with only a budget", ["solve", "bratu", "--quiet", "--clients", "2", "--method", "gn", "--budget",
                                      "5", "--resample", "1", "--grow", "2"])
    C("--grow 1e308 --grow-cap 100 (capped: runs)", grow[:5] + ["--rounds", "2", "--resample", "1", "--grow-every",
                                                               "1", "--method", "gn", "--grow", "1e308",
                                                               "--grow-cap", "100", "--n-interior", "20"],
      expect="ok", timeout=120)
    # 5. processes engine
    C("--clients 500 --engine processes", ["solve", "bratu", "--quiet", "--clients", "500", "--rounds", "1",
                                           "--engine", "processes"])
    C("a binary table on client 1 (processes)", ["solve", "table", "--tables", "{dir}/a.csv,{dir}/b.csv", "--method",
                                                 "gn", "--rounds", "1", "--engine", "processes", "--quiet"],
      check=None, setup=lambda d, m: (write(os.path.join(d, "a.csv"), "x,y\n1,2\n2,3\n3,5\n"),
                                      write(os.path.join(d, "b.csv"), b"\xff\xfe\x00binary")), timeout=180)
    C("a stopped client (SIGSTOP) with gn: bounded wait, then the run ends naming it",
      ["-q", "--plugin", "{dir}/stopper.py", "solve", "plugin-stopping-wave", "--clients", "2", "--method", "gn",
       "--rounds", "4", "--n-interior", "20", "--engine", "processes", "--quiet"], check=None,
      setup=lambda d, m: write(os.path.join(d, "stopper.py"), _STOPPER), env={"FEDSCIML_PROCESSES_TIMEOUT": "60"},
      timeout=400)
    C("a stopped client (SIGSTOP) with fipa: a dropout, the run goes on",
      ["--plugin", "{dir}/stopper.py", "solve", "plugin-stopping-wave", "--clients", "2", "--method", "fipa",
       "--rounds", "3", "--n-interior", "20", "--engine", "processes"], expect="ok",
      check=_says("no answer within 60 s"),
      setup=lambda d, m: write(os.path.join(d, "stopper.py"), _STOPPER), env={"FEDSCIML_PROCESSES_TIMEOUT": "60"},
      timeout=400)
    C("FEDSCIML_PROCESSES_TIMEOUT=soon", ["solve", "bratu", "--quiet", "--clients", "2", "--rounds", "1", "--engine",
                                          "processes"], env={"FEDSCIML_PROCESSES_TIMEOUT": "soon"}, timeout=120)
    # 8. left from before
    C("solve table on a binary CSV", ["solve", "table", "--tables", "{dir}/b.csv", "--quiet"],
      setup=lambda d, m: write(os.path.join(d, "b.csv"), bytes(range(128, 256))))
    C("ridge --clients 1000000", ["ridge", "--clients", "1000000", "--dim", "5", "--n-samples", "20"])
    C("fipa --rank 100000 --sketch matfree (capped)", ["solve", "bratu", "--quiet", "--clients", "2", "--rounds", "1",
                                                       "--rank", "100000", "--sketch", "matfree"])
    C("--lm-solve kernel with --optimizer adam", sin + ["--method", "centralized", "--optimizer", "adam",
                                                        "--lm-solve", "kernel"])
    C("gn --form matfree --momentum 0.5 (honoured)", sin + gn2 + ["--form", "matfree", "--momentum", "0.5",
                                                                 "--n-samples", "20", "--json", "{dir}/r.json"],
      expect="ok", check=honored("momentum", 0.5), timeout=120)
    C("flower run --federation-config num-supernodes=", ["flower", "run", "app", "--federation-config",
                                                         "num-supernodes="])
    dom = ("from fedsciml.problems.geometry import Interval\n"
           "from fedsciml.problems.conditions import Dirichlet\n"
           "def mk(**a):\n"
           "    base = dict(name='adv-dom', geometry=Interval(0.0, 1.0), conditions=[Dirichlet('x-', 0.0), "
           "Dirichlet('x+', 0.0)], equation=lambda self, u, x: -u.laplacian(x) - 1.0)\n"
           "    base.update(a)\n"
           "    return type('P', (fs.DomainPDE,), base)(n_interior=10, n_boundary=4)\n")
    for name, attrs in (
            ("DomainPDE: exact of the wrong width", "exact=lambda self, x: torch.zeros(x.shape[0], 3)"),
            ("DomainPDE: T='abc'", "T='abc'"),
            ("DomainPDE: a condition's value function raises", "conditions=[Dirichlet('x-', lambda x: 1 / 0)]"),
            ("DomainPDE: equation indexes a scalar", "equation=lambda self, u, x: (u(x)[0], u(x)[0])"),
            ("DomainPDE: reference() of the wrong shapes",
             "reference=lambda self: (torch.rand(4, 1), torch.rand(7))")):
        A(name, dom + f"return fs.solve(mk({attrs}), method='gn', clients=2, rounds=1).error")
    # 10. clock cpu
    C("--clock cpu --engine processes (the clients' CPU counts; header says cpu)",
      ["solve", "bratu", "--clients", "2", "--method", "gn", "--rounds", "1", "--n-interior", "20", "--engine",
       "processes", "--clock", "cpu"], expect="ok", check=_says("cpu s", "stdout"), timeout=180)
    C("--clock cpu --engine flower", ["solve", "bratu", "--quiet", "--clients", "2", "--rounds", "1", "--engine",
                                      "flower", "--clock", "cpu"], timeout=120)
    return cases


def _chardev(path):
    """A private character device (the same device as /dev/null, made with mknod): what a bad writer turns into
    a regular file is then the case's own node, never the machine's /dev/null."""
    import stat as _stat
    os.mknod(path, _stat.S_IFCHR | 0o666, os.makedev(1, 3))


def _still(kind, rel, then=None):
    """Check of a case that wrote to ``{dir}/rel``: the path is still a ``kind`` (chardev | link), and ``then``."""
    def check(outcome):
        import stat as _stat
        p = os.path.join(outcome["dir"], rel)
        st = os.lstat(p)
        ok = _stat.S_ISCHR(st.st_mode) if kind == "chardev" else _stat.S_ISLNK(st.st_mode)
        if not ok:
            return f"{rel} is no longer a {kind} (replaced)"
        return then(outcome) if then else None
    return check


_INTERRUPT = """
import json, os, signal, subprocess, sys
args = ARGS
p = subprocess.Popen([sys.executable, "-m", "fedsciml", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                     text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"})
for ln in p.stderr:
    if "[    3]" in ln:
        p.send_signal(SIG)
        break
try:
    out, err = p.communicate(timeout=120)
except subprocess.TimeoutExpired:
    p.kill(); p.wait()
    return {"rc": "hang"}
res = json.load(open(RESULT)) if os.path.exists(RESULT) else {}
return {"rc": p.returncode, "stop": (res.get("extra") or {}).get("stop_reason"),
        "steps": len(res.get("history") or []), "model": os.path.exists(MODEL), "last": err.strip().splitlines()[-1:]}
"""

_CRAFTED = """
import json
from fedsciml.problems.saved import save_model
from fedsciml.runtime.results import Result
p = fs.get_problem("sin1d"); th = p.init_params(0)
save_model(Result(problem="sin1d", method="gn", options={}, seed=0, device="cpu", dtype="float64",
                  n_params=int(th.numel()), clients=1, final={}, history=[], extra={}, theta=th), p, d + "/m")
m = json.load(open(d + "/m/model.json")); m.update(ansatz=True, problem="table", options={"tables": ["/etc/passwd"]})
json.dump(m, open(d + "/m/model.json", "w"))
try:
    fs.load_model(d + "/m")
except Exception as e:
    return {"refused": type(e).__name__, "leak": "root:" in str(e)}
return {"refused": None}
"""

_FORGED = """
from fedsciml.runtime import checkpoint as ckpt
p = fs.get_problem("sin1d", n_samples=20)
kw = dict(clients=2, seed=0, checkpoint=d + "/ck"OPTS)
fs.solve(p, "gn", rounds=2, **kw)
st = ckpt.read(ckpt.path_in(d + "/ck"))
EDIT
ckpt.save(d + "/ck", st)
return fs.solve(p, "gn", rounds=3, resume=True, **kw).final.get("mse")
"""

_DEAD = """
from fedsciml.runtime.loop import RoundFailed
def hook(rnd, cid, msg):
    return {k: v * float("nan") if isinstance(v, torch.Tensor) else v for k, v in msg.items()} if rnd >= 3 else msg
try:
    fs.solve("sin1d", "gn", clients=2, rounds=10, problem_options={"n_samples": 20}, message_hook=hook)
except RoundFailed as e:
    r = e.result
    return {"stop": r.extra.get("stop_reason"), "rounds": r.extra.get("rounds"), "theta": r.theta is not None}
return "not stopped"
"""

_BEST_DEV = """
import os, stat
_p = d + "/null"
os.mknod(_p, stat.S_IFCHR | 0o666, os.makedev(1, 3))
fs.solve("sin1d", "gn", clients=2, rounds=2, problem_options={"n_samples": 10},
         callbacks=[fs.BestModelCheckpoint(path=_p)])
return stat.S_ISCHR(os.lstat(_p).st_mode)
"""

_REUSED = """
es = fs.EarlyStopping(patience=3, rel_delta=0.5)
return [len(fs.solve("sin1d", "centralized", optimizer="adam", lr=1e-3, max_iters=100,
                     problem_options={"n_samples": 20}, callbacks=[es]).history) for _ in range(2)]
"""

_MANY = """
r = fs.solve("sin1d", "gn", clients=2, rounds=1, problem_options={"n_samples": 20})
fs.save_model(r, fs.get_problem("sin1d", n_samples=20), d + "/m")
u = fs.load_model(d + "/m")
return list(u(torch.rand(10**7, 1, dtype=torch.float64)).shape)
"""


def _field_model(d):
    """A small field model directory ``d/m`` (sin1d's θ₀) and ``d/pts.csv``."""
    from fedsciml.problems import get_problem
    from fedsciml.problems.saved import save_model
    from fedsciml.runtime.results import Result

    p = get_problem("sin1d")
    th = p.init_params(0)
    save_model(Result(problem=p.name, method="gn", options={}, seed=0, device="cpu", dtype="float64",
                      n_params=int(th.numel()), clients=1, solver_seconds=0.0, final={}, history=[], extra={},
                      theta=th), p, os.path.join(d, "m"))
    write(os.path.join(d, "pts.csv"), "0.5\n")


def _issue38_cases():
    """Issue 38 (findings 1, 3, 6, 7 and 8's checkpoint items): output paths that must stay what they are,
    interrupts that keep the finished rounds, callbacks, model directories that name nothing outside
    themselves, forged checkpoints."""
    cases = []

    def C(group, name, argv, expect="error", check=None, **kw):
        cases.append(Case(name, "issue38-" + group, "cli", argv, expect=expect, check=check, **kw))

    def A(group, name, src, expect="error", check=None, **kw):
        cases.append(Case(name, "issue38-" + group, "api", source=src, expect=expect, check=check, **kw))

    # 1. output paths
    pred = ["predict", "{dir}/m", "--points", "{dir}/pts.csv", "--out"]

    def with_model(extra):
        def setup(d, m):
            _ridge_model(d)
            extra(d)
        return setup

    def linked(d):
        write(os.path.join(d, "t.csv"), "old\n")
        os.symlink(os.path.join(d, "t.csv"), os.path.join(d, "link.csv"))
    C("outputs", "predict --out a character device (written through)", pred + ["{dir}/null"], expect="ok",
      setup=with_model(lambda d: _chardev(os.path.join(d, "null"))), check=_still("chardev", "null"))
    C("outputs", "predict --out a link to a file (the target written, the link kept)", pred + ["{dir}/link.csv"],
      expect="ok", setup=with_model(linked),
      check=_still("link", "link.csv", lambda o: None if open(os.path.join(o["dir"], "t.csv")).read().startswith(
          "x0,") else "the link's target was not written"))
    for name, target in (("the model's model.safetensors", "{dir}/m/model.safetensors"),
                         ("the model's model.json", "{dir}/m/model.json"), ("its own --points file", "{dir}/pts.csv")):
        C("outputs", f"predict --out onto {name} (an input)", pred + [target], setup=with_model(lambda d: None))
    C("outputs", "predict --out a FIFO", pred + ["{dir}/fifo"],
      setup=with_model(lambda d: os.mkfifo(os.path.join(d, "fifo"))), timeout=30)
    C("outputs", "solve --json a character device", SOLVE + ["--json", "{dir}/null"], expect="ok",
      setup=lambda d, m: _chardev(os.path.join(d, "null")), check=_still("chardev", "null"))
    C("outputs", "solve --json - (standard output)", SOLVE + ["--json", "-"], expect="ok",
      check=lambda o: None if o["stdout"].lstrip().startswith("{") and json.loads(o["stdout"]).get("method")
      and not os.path.exists(os.path.join(o["dir"], "-")) else "stdout is not the JSON")

    def out_link(d, m):
        os.makedirs(os.path.join(d, "o"))
        write(os.path.join(d, "r.json"), "{}")
        os.symlink(os.path.join(d, "r.json"), os.path.join(d, "o", "result.json"))
    C("outputs", "solve --out DIR whose result.json is a link", SOLVE + ["--out", "{dir}/o"], expect="ok",
      setup=out_link, check=_still("link", "o/result.json"))
    C("outputs", "solve --json onto its --config file",
      ["solve", "sin1d", "--config", "{dir}/c.toml", "--quiet", "--json", "{dir}/c.toml"],
      setup=lambda d, m: write(os.path.join(d, "c.toml"), 'clients = 2\nrounds = 1\nn_samples = 10\n'))
    C("outputs", "ridge --json a character device", RIDGE + ["--json", "{dir}/null"], expect="ok",
      setup=lambda d, m: _chardev(os.path.join(d, "null")), check=_still("chardev", "null"))

    def fifo_history(d, m):
        os.makedirs(os.path.join(d, "o"))
        os.mkfifo(os.path.join(d, "o", "history.csv"))
    C("outputs", "solve --out DIR whose history.csv is a FIFO", SOLVE + ["--out", "{dir}/o"], setup=fifo_history,
      output_case=True, timeout=60)
    A("outputs", "BestModelCheckpoint(path=a character device)", _BEST_DEV, expect="ok",
      check=api_value(lambda v: None if v is True else "replaced"))

    # 3. interrupts
    gn_args = ["solve", "sin1d", "--method", "gn", "--clients", "2", "--n-samples", "20", "--rounds", "100000",
               "--every", "1", "--out", "OUT", "--checkpoint", "CK"]
    for sig, status in (("SIGINT", 130), ("SIGTERM", 143)):
        src = (_INTERRUPT.replace("ARGS", repr(gn_args).replace("'OUT'", 'd + "/out"').replace("'CK'", 'd + "/ck"'))
               .replace("(SIG)", f"(signal.{sig})").replace("RESULT", 'd + "/out/result.json"')
               .replace("MODEL", 'd + "/out/model.safetensors"'))
        A("interrupt", f"gn run sent {sig} after round 3 (result, model, checkpoint kept)", src, expect="ok",
          timeout=180, check=api_value(lambda v, status=status: None if v.get("rc") == status and v.get(
              "stop") == "interrupted" and v.get("steps", 0) >= 3 and v.get("model") else f"kept nothing: {v}"))
    cargs = ["solve", "sin1d", "--n-samples", "20", "--optimizer", "adam", "--max-iters", "1000000", "--every", "1",
             "--json", "J"]
    A("interrupt", "centralized adam sent SIGINT after step 3", _INTERRUPT.replace(
        "ARGS", repr(cargs).replace("'J'", 'd + "/r.json"')).replace("(SIG)", "(signal.SIGINT)").replace(
        "RESULT", 'd + "/r.json"').replace("MODEL", 'd + "/r.json"'), expect="ok", timeout=180,
      check=api_value(lambda v: None if v.get("rc") == 130 and v.get("stop") == "interrupted" else f"{v}"))
    A("interrupt", "every site dead from round 3: the partial result is kept", _DEAD, expect="ok",
      check=api_value(lambda v: None if v == {"stop": "failed", "rounds": 2, "theta": True} else str(v)))

    # 6. callbacks
    cb = 'fs.solve("sin1d", "centralized", max_iters=20, problem_options={"n_samples": 20}, callbacks=[CB])'
    A("callbacks", "a callback returning np.True_ at step 2", "r = " + cb.replace(
        "CB", "lambda v: np.True_ if v.step == 2 else None") + "\nreturn r.history[-1]['step']", expect="ok",
      check=api_value(lambda v: None if v == 2 else f"ran to step {v}"))
    A("callbacks", "a callback returning torch.tensor(True) at step 2", "r = " + cb.replace(
        "CB", "lambda v: torch.tensor(v.step == 2)") + "\nreturn r.history[-1]['step']", expect="ok",
      check=api_value(lambda v: None if v == 2 else f"ran to step {v}"))
    A("callbacks", "an EarlyStopping reused for a second run", _REUSED, expect="ok",
      check=api_value(lambda v: None if v[0] == v[1] else f"rows per run {v}"))
    A("callbacks", "EarlyStopping(monitor='rel_l3') (misspelt)",
      cb.replace("CB", "fs.EarlyStopping(monitor='rel_l3')"))
    A("callbacks", "a loaded model's u(x) on 10^7 points within the memory cap", _MANY, expect="ok", timeout=180,
      check=api_value(lambda v: None if v == [10 ** 7] else str(v)))

    # 7. model directories
    A("model", "model.json: ansatz problem 'table' naming /etc/passwd (nothing opened, nothing shown)", _CRAFTED,
      expect="ok", check=api_value(lambda v: None if v.get("refused") == "ModelFileError" and not v.get("leak")
                                   else f"read the named file: {v}"))
    for name, dest, fname in (("/proc/self/mem", "/proc/self/mem", "model.safetensors"),
                              ("/etc/passwd (as model.json)", "/etc/passwd", "model.json")):
        def setup(d, m, dest=dest, fname=fname):
            _field_model(d)
            f = os.path.join(d, "m", fname)
            os.remove(f)
            os.symlink(dest, f)
        C("model", f"a model file linked to {name}", ["predict", "{dir}/m", "--points", "{dir}/pts.csv", "--out",
                                                      "{dir}/u.csv"], setup=setup)

    # 8. forged checkpoints (re-hashed)
    for name, edit, opts in (("rng a string", "st['rng'] = {'bit_generator': 'PCG64', 'state': 'x'}", ""),
                             ("rng another generator", "st['rng'] = {'bit_generator': 'MT19937'}", ""),
                             ("gn banned ['x']", "st['strategy']['banned'] = ['x']", ""),
                             ("SPRING phi = 1e300", "st['strategy']['phi'] = st['strategy']['phi'] * 0 + 1e300",
                              ", momentum=0.5"),
                             ("theta x 1e6", "st['strategy']['theta'] = st['strategy']['theta'] * 1e6", "")):
        A("checkpoint", f"checkpoint re-hashed with {name}", _FORGED.replace("EDIT", edit).replace("OPTS", opts),
          timeout=150)
    return cases


# ------------------------------------------------------------------ issue 38 done-when: every input surface

def _parser_of(*path):
    """The argparse parser of ``python -m fedsciml PATH…`` (subcommands built as on first use)."""
    import argparse
    import importlib

    p = importlib.import_module("fedsciml.cli.main").build_parser()
    for name in path:
        p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return p


#: options declared ``finite=False`` (∞ documented: no time limit, no DP noise, no outlier screen)
INF_ALLOWED = ("--budget", "--dp-epsilon", "--outlier-ratio")
PATHLIKE = ("FILE", "DIR", "PATH", "TABLE", "CSV", ".csv", "KEEP", "CHECKPOINT", "CONFIG", "PINNACLE_DIR", "OUT",
            "JSON", "POINTS")


def _value_options(path):
    """``(flag, pathlike)`` of every option of a subcommand that takes a value (help and flags without one skipped)."""
    import argparse

    out = []
    for a in _parser_of(*path)._actions:
        if not a.option_strings or a.nargs == 0 or isinstance(a, argparse._HelpAction):
            continue
        flag = max(a.option_strings, key=len)
        label = f"{a.metavar or ''} {a.dest.upper()}"
        out.append((flag, any(w in label for w in PATHLIKE)))
    return out


_FULL_DISK = """
import os, resource, subprocess, sys
def limit():
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_CAP, FSIZE_CAP))
for f, content in OLD.items():
    os.makedirs(os.path.dirname(d + "/" + f), exist_ok=True)
    open(d + "/" + f, "w").write(content)
if SETUP:
    subprocess.run([sys.executable, "-m", "fedsciml", *SETUP], cwd=d, capture_output=True, timeout=120, check=True)
p = subprocess.run([sys.executable, "-m", "fedsciml", *ARGS], cwd=d, capture_output=True, text=True, timeout=120,
                   preexec_fn=limit)
lines = [ln for ln in p.stderr.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith("  warn")]
kept = {f: os.path.exists(d + "/" + f) and open(d + "/" + f).read() == c for f, c in OLD.items()}
return {"rc": p.returncode, "lines": lines[-3:], "n": len(lines), "traceback": "Traceback" in p.stderr,
        "kept": kept}
"""


def _full_disk_ok(v):
    """A write that hit the file-size limit (RLIMIT_FSIZE: EFBIG): exit non-zero, one ``error:`` line naming the
    path, and every file that was there before left as it was (no truncated or replaced output)."""
    if v.get("traceback"):
        return f"traceback: {v['lines']}"
    if v.get("rc") == 0:
        return f"exit 0 although the write failed: {v['lines']}"
    if v.get("n") != 1 or not v["lines"][-1].startswith("error:"):
        return f"{v.get('n')} stderr lines: {v['lines']}"
    lost = [f for f, ok in v["kept"].items() if not ok]
    return f"replaced or truncated: {lost}" if lost else None


_SIGNAL_RUN = """
import json, os, signal, subprocess, sys
p = subprocess.Popen([sys.executable, "-m", "fedsciml", *ARGS], cwd=d, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
for ln in p.stderr:
    if AFTER in ln:
        p.send_signal(signal.SIG)
        break
try:
    out, err = p.communicate(timeout=120)
except subprocess.TimeoutExpired:
    p.kill(); p.wait()
    return {"rc": "hang"}
res = json.load(open(d + "/out/result.json")) if os.path.exists(d + "/out/result.json") else {}
return {"rc": p.returncode, "stop": (res.get("extra") or {}).get("stop_reason"),
        "model": os.path.exists(d + "/out/model.safetensors"), "ckpt": os.path.isdir(d + "/ck") and bool(os.listdir(d + "/ck")),
        "traceback": "Traceback" in err, "last": err.strip().splitlines()[-1:]}
"""


def _battery_cases():
    """Issue 38's done-when battery: every value-taking option of every subcommand (solve, solve table,
    solve pinnacle, ridge, predict, flower deploy, flower run) given values it must refuse, keyword arguments of
    ``fs.solve``/``fs.load_model``/``fs.ReferenceData``, hostile files (pinnacle dir, tables, config), signals on
    more methods, and a full disk (``RLIMIT_FSIZE``: a write past the limit fails with EFBIG) on every writer."""
    cases = []

    def C(group, name, argv, expect="error", check=None, **kw):
        cases.append(Case(name, "battery-" + group, "cli", argv, expect=expect, check=check, **kw))

    def A(group, name, src, expect="error", check=None, **kw):
        cases.append(Case(name, "battery-" + group, "api", source=src, expect=expect, check=check, **kw))

    def bad_paths(d, m):
        os.makedirs(os.path.join(d, "adir"), exist_ok=True)
        write(os.path.join(d, "afile"), "x\n")
        if not os.path.exists(os.path.join(d, "fifo")):
            os.mkfifo(os.path.join(d, "fifo"))

    # 1. every option of every subcommand: values that are not values, and paths that are not what is asked
    words = ("abc", "nan", "1e400")
    paths = ("", "/dev/zero", "{dir}/fifo", "{dir}/missing/x")
    bases = {
        ("solve",): (["solve", "sin1d", "--clients", "2", "--rounds", "1", "--n-samples", "20", "--quiet"], ()),
        ("solve", "table"): (["solve", "table", "--tables", "{dir}/a.csv,{dir}/b.csv", "--rounds", "1", "--quiet"],
                             ("--tables", "--target", "--test-table")),
        ("solve", "pinnacle"): (["solve", "pinnacle", "--case", "burgers1d-c", "--pinnacle-dir", "/work/pinnacle",
                                 "--clients", "2", "--rounds", "1", "--n-interior", "20", "--quiet"],
                                ("--case", "--pinnacle-dir", "--pinv-source", "--n-eval")),
        ("ridge",): (["ridge", "--clients", "3", "--dim", "5", "--n-samples", "20"], ()),
        ("predict",): (["predict", "{dir}/m", "--points", "{dir}/pts.csv", "--out", "{dir}/u.csv"], ()),
        ("flower", "deploy"): (["flower", "deploy", "sin1d", "--clients", "2", "--rounds", "1", "-q"], ()),
        ("flower", "run"): (["flower", "run", "app"], ()),
    }

    def tables(d, m):
        bad_paths(d, m)
        write(os.path.join(d, "a.csv"), "x,y\n1,2\n2,3\n3,5\n4,4\n")
        write(os.path.join(d, "b.csv"), "x,y\n1,1\n2,2\n3,4\n5,6\n")
        _field_model(d)

    for path, (base, only) in bases.items():
        opts = _value_options(("solve",) if path[0] == "solve" else path)
        if only:
            opts = [(f, p) for f, p in opts if f in only]
        label = " ".join(path)
        file_out = ("--json", "--out") if path == ("predict",) else ("--json",)
        dir_out = () if path == ("predict",) else ("--out", "--checkpoint", "--keep")
        for flag, pathlike in opts:
            for v in (paths if pathlike else words):
                argv = list(base)
                if flag in argv:  # replace the base's own value
                    i = argv.index(flag)
                    argv = argv[:i] + argv[i + 2:]
                expect, check = "error", None
                if v == "1e400" and flag in INF_ALLOWED:
                    expect = "any"  # declared finite=False: ∞ is a documented value (no limit / no noise / no screen)
                created = v == "{dir}/missing/x" and flag in file_out + dir_out
                if (created or v == "/dev/zero" and flag in file_out) and path[0] == "flower":
                    continue  # a valid output path starts a deployment: the end-to-end Flower tests run those
                if created:  # a new path: made with its parents, like mkdir -p
                    expect, check = "ok", lambda o: None if os.path.exists(os.path.join(o["dir"], "missing", "x")) \
                        else "nothing written at missing/x"
                elif v == "/dev/zero" and flag in file_out:  # a character device: written through, stays a device
                    expect = "ok"
                C("cli-options", f"{label} {flag} {v!r}", argv + [flag, v], setup=tables, expect=expect, check=check,
                  timeout=90 if path[0] == "flower" else 60)
        if path[0] != "flower":
            C("cli-options", f"{label} --no-such-flag", base + ["--no-such-flag"], setup=tables)
            C("cli-options", f"{label} flag without its value", base + [opts[-1][0]] if opts else base + ["--x"],
              setup=tables)

    # 2. fs.* keyword arguments: a wrong type or a value out of range, one line
    for call in ('fs.solve("sin1d", "gn", clients="2", rounds=1)', 'fs.solve("sin1d", "gn", clients=2, rounds=-1)',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, seed="x")',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, engine="nope")',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, device="tpu")',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, problem_options=[1])',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, callbacks=3)',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, checkpoint=3)',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, budget=float("nan"))',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, message_hook=5)',
                 'fs.solve("sin1d", "gn", clients=2, rounds=1, no_such_keyword=1)',
                 'fs.solve(None, "gn")', 'fs.solve("sin1d", None)', 'fs.solve("sin1d", "gn", clients=10**12)',
                 'fs.load_model(3)', 'fs.load_model("/dev/zero")', 'fs.load_model(d)',
                 'fs.ReferenceData.from_file("/dev/zero", inputs=1, outputs=1)',
                 'fs.ReferenceData.from_file(d, inputs=1, outputs=1)',
                 'fs.get_problem("sin1d", n_samples=-5)', 'fs.get_problem("sin1d", hidden="x")',
                 'fs.get_problem("nosuch")', 'fs.EarlyStopping(patience=-1)',
                 'fs.BestModelCheckpoint(path=3)'):
        A("fs-kwargs", call, "return repr(" + call + ")")

    # 3. files: a PINNacle dir that is not one, hostile tables
    for name, setup in (("an empty folder", lambda d, m: os.makedirs(os.path.join(d, "p", "ref"))),
                        ("a file", lambda d, m: write(os.path.join(d, "p"), "x")),
                        ("reference data of binary bytes", lambda d, m: (
                            os.makedirs(os.path.join(d, "p", "ref")),
                            write(os.path.join(d, "p", "ref", "burgers1d.dat"), bytes(range(256)) * 10))),
                        ("reference data of the wrong width", lambda d, m: (
                            os.makedirs(os.path.join(d, "p", "ref")),
                            write(os.path.join(d, "p", "ref", "burgers1d.dat"), "1 2\n3 4\n"))),
                        ("reference data that is a FIFO", lambda d, m: (
                            os.makedirs(os.path.join(d, "p", "ref")),
                            os.mkfifo(os.path.join(d, "p", "ref", "burgers1d.dat")))),
                        ("reference data linked to /dev/zero", lambda d, m: (
                            os.makedirs(os.path.join(d, "p", "ref")),
                            os.symlink("/dev/zero", os.path.join(d, "p", "ref", "burgers1d.dat"))))):
        missing = name == "an empty folder"  # a clone without its large files: trained with a warning (documented)
        C("files", f"--pinnacle-dir {name}", ["solve", "pinnacle", "--case", "burgers1d-c", "--pinnacle-dir",
                                              "{dir}/p", "--clients", "2", "--rounds", "1", "--n-interior", "20",
                                              *([] if missing else ["--quiet"])], setup=setup, timeout=60,
          expect="ok" if missing else "error", check=_says("training without a test error") if missing else None)
    for name, content in (("header only", "x,y\n"), ("a NaN target", "x,y\n1,nan\n2,3\n3,4\n"),
                          ("ragged rows", "x,y\n1,2,3\n2\n"), ("no target column", "x,z\n1,2\n2,3\n"),
                          ("1e400 in a cell", "x,y\n1,1e400\n2,3\n3,4\n"), ("binary", b"\x00\xff" * 100),
                          ("a 5000-deep quoted field", 'x,y\n"' + "[" * 5000 + '",1\n')):
        C("files", f"solve table: a table with {name}", ["solve", "table", "--tables", "{dir}/a.csv,{dir}/t.csv",
                                                         "--rounds", "1", "--quiet"],
          setup=lambda d, m, content=content: (tables(d, m), write(os.path.join(d, "t.csv"), content)))

    # 4. signals: more methods (gn and centralized are group issue38-interrupt's)
    for method, extra in (("fipa", []), ("fedavg", ["--local-steps", "2"])):
        for sig, status in (("SIGINT", 130), ("SIGTERM", 143)):
            args = ["solve", "sin1d", "--method", method, "--clients", "2", "--n-samples", "20", "--rounds",
                    "100000", "--every", "1", "--out", "out", "--checkpoint", "ck", *extra]
            src = (_SIGNAL_RUN.replace("ARGS", repr(args)).replace("AFTER", repr("[    3]"))
                   .replace("signal.SIG", f"signal.{sig}"))
            A("signals", f"{method} sent {sig} after round 3 (result marked interrupted, model, checkpoint)", src,
              expect="ok", timeout=180, check=api_value(lambda v, status=status: None if v.get("rc") == status and v.get(
                  "stop") == "interrupted" and v.get("model") and v.get("ckpt") and not v.get("traceback")
                  else f"kept nothing or wrong exit: {v}"))

    # 5. a full disk: RLIMIT_FSIZE (a write past the limit fails with EFBIG; no root needed for a tmpfs)
    solve = ["solve", "sin1d", "--clients", "2", "--rounds", "1", "--n-samples", "20", "--quiet", "--method", "gn"]
    disk = (("solve --json over an existing file", solve + ["--json", "r.json"], {"r.json": "OLD" * 10}, None, 40),
            ("solve --out DIR with an old result", solve + ["--out", "o"], {"o/result.json": "{}" * 5}, None, 40),
            ("solve --checkpoint", solve + ["--checkpoint", "ck"], {}, None, 200),
            ("ridge --json over an existing file", ["ridge", "--clients", "3", "--dim", "5", "--n-samples", "20",
                                                    "--json", "r.json"], {"r.json": "OLD" * 10}, None, 40),
            ("predict --out over an existing file", ["predict", "m", "--points", "pts.csv", "--out", "u.csv"],
             {"u.csv": "OLD\n" * 10, "pts.csv": "0.5\n" * 2000}, solve + ["--out", "m"], 4000))
    for name, args, old, setup, limit in disk:
        src = (_FULL_DISK.replace("FSIZE_CAP", str(limit)).replace("OLD", repr(old)).replace("SETUP", repr(setup))
               .replace("ARGS", repr(args)))
        A("full-disk", f"{name} (RLIMIT_FSIZE {limit} bytes)", src, expect="ok", timeout=180,
          check=api_value(_full_disk_ok))
    return cases


def all_cases():
    return (_cli_cases() + _api_cases() + _table_cases() + _issue23_cases() + _dialect_cases()
            + _issue31_cases() + _issue38_cases() + _issue38b_cases() + _battery_cases())


# ------------------------------------------------------------------------------------- execution

def _env(extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env["MPLBACKEND"] = "Agg"
    env.update(extra)
    return env


def _subst(argv, d, marker):
    return [a.replace("{dir}", d).replace("{marker}", marker) for a in argv]


API_RUNNER = r'''
import json, sys, traceback
def _clear(e):
    tb = traceback.extract_tb(e.__traceback__)
    last = tb[-1] if tb else None
    ours = type(e).__module__.split(".")[0] in ("fedsciml", "problems")
    explicit = bool(last and last.filename.startswith(ROOT) and (last.line or "").lstrip().startswith("raise"))
    msg = str(e).strip()
    return (ours or (explicit and isinstance(e, (ValueError, TypeError, KeyError)))) and msg != "" and "\n" not in msg, last
def main(source):
    ns = {}
    exec(compile(PRELUDE + "def case(d, marker):\n" + "\n".join("    " + l for l in source.splitlines()), "<case>", "exec"), ns)
    try:
        value = ns["case"](CASE_DIR, MARKER)
    except BaseException as e:
        clear, last = _clear(e)
        if not clear:
            traceback.print_exc()
        out = {"status": "raised", "type": type(e).__name__, "message": str(e)[:400], "clear": clear,
               "where": f"{last.filename}:{last.lineno}" if last else ""}
    else:
        out = {"status": "ok", "value": value}
    with open(RESULT, "w") as f:
        json.dump(out, f, default=str)
'''


def _child(case: Case, d: str, marker: str, mem_mb: int):
    """Runs in the forked child: the case, with stdout/stderr to files; exits with the status."""
    os.chdir(d)
    out = os.open(os.path.join(d, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(os.path.join(d, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(err, 2)
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
    try:
        vm = int(next(ln.split()[1] for ln in open("/proc/self/status") if ln.startswith("VmSize:"))) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (vm + mem_mb * 2**20, vm + mem_mb * 2**20))
    except (OSError, ValueError, StopIteration):
        pass
    os.environ.update(case.env)
    code = 0
    try:
        import runpy

        if case.kind == "cli":
            sys.argv = ["fedsciml", *_subst(case.argv, d, marker)]
            runpy.run_module("fedsciml", run_name="__main__", alter_sys=True)
        elif case.kind == "example":
            sys.argv = [EXAMPLE, *_subst(case.argv, d, marker)]
            runpy.run_path(EXAMPLE, run_name="__main__")
        else:
            ns = {"__name__": "adv_api"}
            exec(API_RUNNER, ns)
            ns.update(ROOT=ROOT, RESULT=os.path.join(d, "result.json"), MARKER=marker, CASE_DIR=d, PRELUDE=API_PRELUDE)
            ns["main"](case.source)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # what the interpreter would print
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _subprocess_cmd(case, d, marker):
    if case.kind == "cli":
        return [sys.executable, "-m", "fedsciml", *_subst(case.argv, d, marker)]
    if case.kind == "example":
        return [sys.executable, EXAMPLE, *_subst(case.argv, d, marker)]
    runner = os.path.join(d, "api_runner.py")
    with open(runner, "w") as f:
        f.write("import sys\nROOT, RESULT, MARKER, CASE_DIR = sys.argv[1:5]\n" + API_RUNNER
                + f"\nPRELUDE = {API_PRELUDE!r}\nmain({case.source!r})\n")
    return [sys.executable, runner, ROOT, os.path.join(d, "result.json"), marker, d]


class Running:
    def __init__(self, case, d, marker, proc=None, pid=None):
        self.case, self.d, self.marker, self.proc, self.pid = case, d, marker, proc, pid
        self.t0 = time.perf_counter()


def start(case: Case, workdir: str, idx: int, args) -> Running:
    d = os.path.join(workdir, f"{idx:03d}")
    os.makedirs(d)
    marker = os.path.join(workdir, f"{idx:03d}.MARKER")
    if case.setup is not None:
        case.setup(d, marker)
    if args.subprocess:
        proc = subprocess.Popen(_subprocess_cmd(case, d, marker), cwd=d, env=_env(case.env),
                                stdout=open(os.path.join(d, "stdout"), "w"), stderr=open(os.path.join(d, "stderr"), "w"),
                                start_new_session=True)
        return Running(case, d, marker, proc=proc)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            _child(case, d, marker, args.mem_mb)
        finally:
            os._exit(99)
    return Running(case, d, marker, pid=pid)


def poll(r: Running):
    """The exit status, or None while running."""
    if r.proc is not None:
        return r.proc.poll()
    pid, status = os.waitpid(r.pid, os.WNOHANG)
    if pid == 0:
        return None
    return os.waitstatus_to_exitcode(status)


def kill(r: Running):
    pid = r.proc.pid if r.proc is not None else r.pid
    try:
        os.killpg(pid, signal.SIGKILL)  # the case's own session: it and anything it started
    except ProcessLookupError:
        pass
    if r.proc is not None:
        r.proc.wait()
    else:
        os.waitpid(r.pid, 0)


def _stderr_lines(text):
    return [ln for ln in text.splitlines() if ln.strip() and "Warning" not in ln and not ln.startswith("  warnings.")]


def classify(case: Case, o: dict) -> tuple[str, str]:
    """``(category, reason)`` for one finished case."""
    if os.path.exists(o["marker"]):
        return "code_executed", "the hostile file's marker exists"
    if o["timed_out"]:
        return "hang", f"still running after {o['wall_s']:.0f} s"
    err, out = o["stderr"], o["stdout"]
    failed_after_work = case.output_case and out.strip() != "" and o["rc"] != 0
    if case.kind == "api":
        res = o.get("result")
        if res is None:
            if "Traceback" in err:
                return "traceback", err.strip().splitlines()[-1][:200]
            return "unclear_exit", f"no result (exit {o['rc']})"
        if res["status"] == "raised":
            if not res["clear"]:
                return "traceback", f"{res['type']}: {res['message'][:160]} at {res['where']}"
            if case.expect == "ok":
                return "unclear_exit", f"refused a valid call: {res['type']}: {res['message'][:160]}"
            return "clear_error", f"{res['type']}: {res['message'][:200]}"
        o["value"] = res.get("value")
        return _success(case, o)
    if "Traceback (most recent call last)" in err:
        if failed_after_work:
            return "lost_outputs", "traceback after the results were printed: " + err.strip().splitlines()[-1][:160]
        return "traceback", err.strip().splitlines()[-1][:200]
    if o["rc"] == 0:
        return _success(case, o)
    if failed_after_work:
        return "lost_outputs", f"exit {o['rc']} after the results were printed: {err.strip()[-160:]}"
    lines = _stderr_lines(err)
    argparse_style = bool(lines) and lines[0].startswith("usage:") and ": error: " in lines[-1]  # usage, then 1 line
    # exit 2: refused input; exit 1 with one "error:" line: a run that started and could not go on (e.g. diverged)
    if (o["rc"] == 2 and lines and "error" in lines[-1] and (len(lines) == 1 or argparse_style)) or (
            o["rc"] == 1 and len(lines) == 1 and lines[0].startswith("error:")):
        if case.expect == "ok":
            return "unclear_exit", f"refused valid input: {lines[-1][:200]}"
        return "clear_error", lines[-1][:200]
    if o["rc"] < 0:
        return "unclear_exit", f"killed by signal {-o['rc']} ({err.strip()[-120:]})"
    return "unclear_exit", f"exit {o['rc']}, {len(lines)} stderr line(s): {' | '.join(lines[-3:])[:200]}"


def _success(case, o):
    if case.expect == "error":
        why = None
        if case.check is not None:
            why = case.check(o)
        return "silent_wrong", "accepted: " + (why or "exit 0 / returned normally although the input is invalid")
    if case.check is not None:
        why = case.check(o)
        if why:
            return "silent_wrong", why
    return "handled", "ok"


def finish(r: Running, rc, timed_out) -> dict:
    o = {"dir": r.d, "marker": r.marker, "rc": rc, "timed_out": timed_out,
         "wall_s": time.perf_counter() - r.t0}
    for k in ("stdout", "stderr"):
        p = os.path.join(r.d, k)
        o[k] = open(p, errors="replace").read() if os.path.exists(p) else ""
    rp = os.path.join(r.d, "result.json")
    if os.path.exists(rp):
        try:
            o["result"] = json.load(open(rp))
        except ValueError:
            o["result"] = None
    cat, why = classify(r.case, o)
    if os.path.exists(r.marker):  # remove the proof (a directory) after counting it
        shutil.rmtree(r.marker, ignore_errors=True)
    return {"name": r.case.name, "group": r.case.group, "kind": r.case.kind, "expect": r.case.expect,
            "category": cat, "reason": why, "exit": rc, "seconds": round(o["wall_s"], 2),
            "stderr_tail": o["stderr"][-600:]}


def preload():
    """Import what the cases use once, so that forked cases start warm (no torch ops: fork-safe)."""
    import numpy  # noqa: F401
    import torch

    torch.set_num_threads(1)
    import fedsciml  # noqa: F401
    import fedsciml.cli  # noqa: F401
    import fedsciml.methods  # noqa: F401
    import fedsciml.cli.images  # noqa: F401
    import fedsciml.cli.ridge  # noqa: F401
    import sklearn.datasets  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401
    # the first Jacobian imports torch._dynamo (seconds): pay it once here, single-threaded
    from torch.func import jacrev, vmap

    vmap(jacrev(lambda t, x: (t * x).sum()), in_dims=(None, 0))(torch.ones(2), torch.ones(3, 2))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    ap.add_argument("--mem-mb", type=int, default=3000, help="address-space cap per case beyond its start (MiB)")
    ap.add_argument("--json", default="adversarial.json", help="write every case's outcome here")
    ap.add_argument("--only", default=None, help="run only cases whose group or name contains this text")
    ap.add_argument("--groups", default=None, help="run only these groups (exact names, comma-separated)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--subprocess", action="store_true", help="a fresh interpreter per case (slower)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args(argv)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started as a background job (`cmd &`): SIGINT ignored,
        signal.signal(signal.SIGINT, signal.default_int_handler)  # inherited by every run, so the SIGINT cases hung
    if args.jobs < 1 or not args.timeout > 0:
        ap.error("--jobs must be ≥ 1 and --timeout > 0")
    sys.path.insert(0, ROOT)
    os.environ.update({k: v for k, v in _env({}).items() if k in ("PYTHONPATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                                     "MPLBACKEND")})
    cases = all_cases()
    if args.only:
        cases = [c for c in cases if args.only in c.group or args.only in c.name]
    if args.groups:
        wanted = {g.strip() for g in args.groups.split(",") if g.strip()}
        unknown = sorted(wanted - {c.group for c in cases})
        if unknown:
            ap.error(f"--groups: no case in group(s) {', '.join(unknown)}")
        cases = [c for c in cases if c.group in wanted]
    if args.list:
        for c in cases:
            print(f"{c.group:20s} {c.kind:8s} {c.expect:6s} {c.name}")
        print(f"{len(cases)} cases")
        return 0
    if not args.subprocess:
        preload()
    workdir = tempfile.mkdtemp(prefix="fedsciml-adversarial-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the cleanup below kills running cases
    results, queue, running = [None] * len(cases), list(enumerate(cases)), []
    t0 = time.perf_counter()
    try:
        while queue or running:
            while queue and len(running) < args.jobs:
                i, c = queue.pop(0)
                try:
                    r = start(c, workdir, i, args)
                except Exception as e:  # noqa: BLE001 - a broken setup is reported, not fatal
                    results[i] = {"name": c.name, "group": c.group, "kind": c.kind, "expect": c.expect,
                                  "category": "unclear_exit", "reason": f"setup failed: {type(e).__name__}: {e}",
                                  "exit": None, "seconds": 0.0, "stderr_tail": ""}
                    continue
                r.index = i
                running.append(r)
            time.sleep(0.05)
            for r in list(running):
                rc = poll(r)
                timed_out = rc is None and time.perf_counter() - r.t0 > (r.case.timeout or args.timeout)
                if timed_out:
                    kill(r)
                if rc is not None or timed_out:
                    running.remove(r)
                    results[r.index] = finish(r, rc, timed_out)
                    res = results[r.index]
                    print(f"[{sum(x is not None for x in results):3d}/{len(cases)}] {res['category']:13s} "
                          f"{res['seconds']:5.1f}s  {res['group']}: {res['name']}", file=sys.stderr, flush=True)
    finally:
        for r in running:
            kill(r)
        if not args.keep:
            for root, dirs, _files in os.walk(workdir):  # read-only dirs written by cases
                for x in dirs:
                    try:
                        os.chmod(os.path.join(root, x), 0o700)
                    except OSError:
                        pass
            shutil.rmtree(workdir, ignore_errors=True)
    report(results, time.perf_counter() - t0, args)
    return 0


def report(results, seconds, args):
    groups = sorted({r["group"] for r in results})
    counts = {g: {c: 0 for c in CATEGORIES} for g in groups}
    total = {c: 0 for c in CATEGORIES}
    for r in results:
        counts[r["group"]][r["category"]] += 1
        total[r["category"]] += 1
    short = {"clear_error": "clear", "handled": "handled", "traceback": "trace", "hang": "hang",
             "silent_wrong": "silent", "lost_outputs": "lost", "code_executed": "code", "unclear_exit": "unclear"}
    print(f"\nadversarial battery: {len(results)} cases in {seconds:.0f} s "
          f"({'subprocess' if args.subprocess else 'forked'} runs, timeout {args.timeout:.0f} s)\n")
    head = f"{'group':20s} {'cases':>5s} " + " ".join(f"{short[c]:>7s}" for c in CATEGORIES)
    print(head)
    print("-" * len(head))
    for g in groups:
        n = sum(counts[g].values())
        print(f"{g:20s} {n:5d} " + " ".join(f"{counts[g][c]:7d}" for c in CATEGORIES))
    print("-" * len(head))
    print(f"{'total':20s} {len(results):5d} " + " ".join(f"{total[c]:7d}" for c in CATEGORIES))
    bad = [r for r in results if r["category"] not in ("clear_error", "handled")]
    if bad:
        print(f"\nnot clear / not handled ({len(bad)}):")
        for r in sorted(bad, key=lambda r: (r["category"], r["group"], r["name"])):
            print(f"  {r['category']:13s} {r['group']:18s} {r['name']}: {r['reason']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": seconds, "counts": total, "by_group": counts, "cases": results}, f, indent=1)
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    sys.exit(main())
