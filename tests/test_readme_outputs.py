"""Every printed output block in README.md, and docs/guide/flower.md's table (the one printed output in docs/guide
that no other test checked), is what the command it shows prints now (issue 40.2).

Each test runs the README's command once, in process (``fedsciml.cli.main``), and compares its stdout with the
README block:

- structure exactly: the header line(s), the column names, the method names, the number of rows, every text
  cell (settings, stop reason) and every integer cell (rounds, exchanges, floats sent — counts, the same on any
  machine);
- decimal numbers (loss, val_loss, rel_l2, test MSE, floats/round) to a relative 2e-3: the README prints four
  significant digits (rounding error ≤ 5e-4), and another CPU or thread count sums the same products in another
  order (relative differences ~1e-15 per operation) which the tens of Gauss–Newton/LM steps of a converged run
  amplify to at most ~1e-4 on this problem's well-conditioned merged systems (the Python example's test in
  tests/test_api.py uses the same bound);
- a value at round-off (< 1e-12, e.g. one-shot's relative model error against centralized ridge) only as being at
  round-off: its digits are the BLAS's summation order;
- the time column (``seconds``, ``wall s``, ``cpu s``) not at all (machine and load), only its presence in the header.

Cost at one thread: the main job 25 CPU s, gn 10 rounds 13 CPU s, ridge 1 CPU s. The Flower line of the Flower block
is not run here (a Flower simulation takes about a minute to start); its numbers must equal the in-process
line's, which is checked, and tests/test_flower*.py check the two engines against each other.
"""
import pathlib
import re

import pytest

from fedsciml.cli import main

README = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
ROUNDOFF = 1e-12
REL = 2e-3
_INT = re.compile(r"^\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$")


def _section(title: str) -> str:
    start = README.index(title)
    nxt = README.find("\n## ", start + 1)
    return README[start: nxt if nxt > 0 else len(README)]


def _blocks(text: str) -> list[str]:
    return re.findall(r"```\n(.*?)```", text, re.S)


def _seconds_span(header: str) -> tuple[int, int]:
    m = re.search(r"\b(seconds|wall s|cpu s)\b", header)  # ridge's "seconds"; solve's names its clock
    assert m, f"no time column in {header!r}"
    return m.span()


def _compare_rows(got: list[str], want: list[str]) -> None:
    """Header lines exactly (whitespace-normalized); table rows cell by cell as the module docstring says."""
    assert len(got) == len(want), (got, want)
    header = None
    for g, w in zip(got, want):
        if re.match(r"^method\s", w):
            assert g.split() == w.split(), (g, w)
            header = w
            continue
        g_tok, w_tok = g.split(), w.split()
        assert len(g_tok) == len(w_tok), (g, w)
        skip = None
        if header is not None and not w.startswith("final "):
            lo, hi = _seconds_span(header)
            spans = [m.span() for m in re.finditer(r"\S+", w)]
            skip = next(i for i, (a, b) in enumerate(spans) if a < hi and b > lo)  # the token under "seconds"
        for i, (a, b) in enumerate(zip(g_tok, w_tok)):
            if i == skip:
                assert _FLOAT.match(a), (a, g)
            elif _INT.match(b):
                assert a == b, (a, b, w)
            elif _FLOAT.match(b):
                if abs(float(b)) < ROUNDOFF:
                    assert abs(float(a)) < ROUNDOFF, (a, b, w)
                else:
                    assert float(a) == pytest.approx(float(b), rel=REL), (a, b, w)
            else:
                assert a == b, (a, b, w)


def _cells(header: str, row: str) -> dict[str, str]:
    """The right-aligned cells of a table row by column name (method first; up to the left-aligned stop reason)."""
    words = [(m.group(), m.end()) for m in re.finditer(r"\S+", header)]
    stop = header.index("stopped")
    toks = [(m.group(), m.end()) for m in re.finditer(r"\S+", row)]
    cells, prev = {"method": toks[0][0]}, max(toks[0][1], words[0][1])
    for tok, end in toks[1:]:
        if end > stop:
            break
        cells[" ".join(w for w, e in words if prev < e <= end)] = tok
        prev = end
    return cells


def _run(argv: list[str], capsys) -> list[str]:
    capsys.readouterr()
    assert main(argv) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


def _cmd_blocks(block: str) -> list[tuple[list[str], list[str]]]:
    """`$ python -m fedsciml …` lines and the output lines that follow each."""
    out: list[tuple[list[str], list[str]]] = []
    for line in block.strip().splitlines():
        if line.startswith("$ python -m fedsciml "):
            out.append((line.split()[4:], []))
        else:
            out[-1][1].append(line)
    return out


def test_readme_main_job_block(capsys):
    sec = _section("## The main job")
    cmd = re.search(r"`python -m fedsciml (solve bratu --clients 4)`", sec).group(1).split()
    (block,) = _blocks(sec)
    _compare_rows(_run(cmd, capsys), block.strip().splitlines())


def test_readme_ridge_block(capsys):
    sec = _section("**Ridge regression.**")
    [(argv, want)] = _cmd_blocks(_blocks(sec)[0])
    assert argv == ["ridge"]
    _compare_rows(_run(argv, capsys), want)


def test_readme_flower_block(capsys):
    sec = _section("**Flower.**")
    runs = _cmd_blocks(_blocks(sec)[0])
    assert len(runs) == 2
    (flower_argv, flower_out), (local_argv, local_out) = runs
    assert flower_argv == local_argv + ["--engine", "flower"]  # the same run, another engine
    _compare_rows(_run(local_argv, capsys), local_out)
    # the Flower engine's numbers are the in-process run's: the same run header and closing line, and each
    # column both tables have (the Flower table has no val_loss column) holds the same cell, seconds aside
    assert flower_out[0] == local_out[0] and flower_out[-1] == local_out[-1]
    f_head, l_head = flower_out[1], local_out[1]
    f_cells, l_cells = _cells(f_head, flower_out[2]), _cells(l_head, local_out[2])
    shared = set(f_cells) & set(l_cells) - {"seconds", "wall s", "cpu s"}
    assert {"method", "rounds", "loss", "rel_l2", "exchanges", "floats sent", "floats/round"} <= shared
    assert {k: f_cells[k] for k in shared} == {k: l_cells[k] for k in shared}
    assert flower_out[2].split()[-5:] == local_out[2].split()[-5:]  # stop reason and settings
    # a showcase that converges: the error falls by orders of magnitude from the start's (rel L2 ~1.8)
    assert float(l_cells["rel_l2"]) < 1e-2


def test_docs_flower_guide_ridge_sites_block(capsys, monkeypatch):
    """docs/guide/flower.md's printed table (examples/flower_ridge_sites.py), run on the in-process engine, which
    the page says prints the same numbers (Flower's engine needs a minute to start): the header with "engine
    local" for "engine flower", the column names and the ε of each row exactly, σ, intercept, test MSE to the
    relative REL, floats sent exactly, the non-private row's distance to sklearn at round-off, and the last column
    of the DP rows as the page says the in-process engine prints it."""
    import importlib.util
    import sys

    doc = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "guide" / "flower.md").read_text(encoding="utf-8")
    block = re.search(r"```\n(diabetes:.*?)```", doc, re.S).group(1)
    want = block.strip().splitlines()
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "flower_ridge_sites.py"
    spec = importlib.util.spec_from_file_location("flower_ridge_sites_doc", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "flower_ridge_sites_doc", mod)
    spec.loader.exec_module(mod)
    capsys.readouterr()
    mod.main(["--engine", "local"])
    got = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    got = got[got.index(next(g for g in got if g.startswith("diabetes:"))):]
    assert got[0] == want[0].replace("engine flower", "engine local")
    assert got[1].split() == want[1].split()
    assert len(got) == len(want)
    for g, w in zip(got[2:-1], want[2:-1]):
        gt, wt = g.split(), w.split()
        assert gt[0] == wt[0]                                          # ε
        for a, b in zip(gt[1:4], wt[1:4]):                             # σ, intercept, test MSE
            assert float(a) == pytest.approx(float(b), rel=REL), (g, w)
        assert gt[4] == wt[4]                                          # floats sent
        if wt[0] == "inf":
            assert " ".join(gt[5:-1]) == " ".join(wt[5:-1]) and float(gt[-1]) < ROUNDOFF and float(wt[-1]) < ROUNDOFF
        else:
            assert " ".join(gt[5:]) == "none (in process: trusts the server)"
    assert got[-1].split()[:2] == want[-1].split()[:2] == ["(3", "fusions,"]
