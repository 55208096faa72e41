"""Provenance and table writing for the committed reproduction tables (``reproductions/``).

Every table is written as ``<name>.csv`` and ``<name>.md``; both start with the
command that produced them and the commit it ran on (``+dirty`` when the
code in the working tree had uncommitted changes, followed by the changed files and a
hash of their diff; when HEAD moved while the script ran, both commits are named), so a README figure can be
traced back and rerun.
"""
from __future__ import annotations

import csv
import os
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "reproductions")
CODE = ("fedsciml", "problems", "scripts", "pyproject.toml")  # what can change a number (README edits cannot)


def commit() -> str:
    try:
        h = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout
        if not dirty.strip():
            return h
        # say what was uncommitted: the files, and a hash of their diff (``git diff HEAD -- FILES | sha256sum``)
        files = [line[3:] for line in dirty.splitlines() if line.strip()]  # 'XY path'
        diff = subprocess.run(["git", "diff", "HEAD", "--", *files], cwd=ROOT, capture_output=True,
                              check=True).stdout
        import hashlib

        return f"{h}+dirty ({', '.join(files)}; diff sha256 {hashlib.sha256(diff).hexdigest()[:12]})"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


_START = commit()  # the code the run started on (a later commit while it ran is named beside it)


def _commit_line() -> str:
    now = commit()
    return now if now == _START else f"{now} when written; {_START} when the script started"


def command() -> str:
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])


def write(name: str, columns: list[str], rows: list[dict], note: str = "", out: str = OUT) -> tuple[str, str]:
    """Write ``rows`` (dicts keyed by ``columns``) to ``out/name.csv`` and ``out/name.md``; returns the paths."""
    os.makedirs(out, exist_ok=True)
    head = [f"command: {command()}", f"commit: {_commit_line()}"] + ([note] if note else [])
    csv_path, md_path = os.path.join(out, name + ".csv"), os.path.join(out, name + ".md")
    with open(csv_path, "w", newline="") as f:
        for line in head:
            f.write(f"# {line}\n")
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    with open(md_path, "w") as f:
        f.write(f"Command: `{head[0][9:]}`  \nCommit: `{head[1][8:]}`\n" + ("\n" + note + "\n" if note else "") + "\n")
        f.write("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n")
        for r in rows:
            f.write("| " + " | ".join(_cell(r.get(c, "")) for c in columns) + " |\n")
    return csv_path, md_path


def _cell(v) -> str:
    if isinstance(v, float) and v == float("inf"):
        return "non-finite"
    if isinstance(v, float):
        return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 or v == 0 else f"{v:.2e}"
    return str(v)
