#!/usr/bin/env bash
# Build a virtual environment with every dependency of pyproject.toml (and the test and flower extras) at its
# declared lower bound, check that each one really is at that bound, and run the test suite there.
# Record of a run: reproductions/lower_bounds.md.
#
# NOT part of .ci/run: from PyPI, torch's lower bound is the CUDA build and pulls ~5 GB of nvidia packages (the
# venv is ~5.5 GB; the tests still run on the CPU).
#
#   scripts/tools/lower_bounds.sh                      # rebuild the venv, then the whole suite
#   scripts/tools/lower_bounds.sh tests/test_ridge.py  # rebuild, then only these pytest arguments
#   LOWER_BOUNDS_REUSE=1 scripts/tools/lower_bounds.sh tests/test_lm.py   # keep an existing venv
#
# Environment: LOWER_BOUNDS_VENV (default /tmp/fedsciml-lower-bounds-venv), LOWER_BOUNDS_PYTHON (default
# python3.11), LOWER_BOUNDS_REUSE=1 (do not rebuild). The suite runs from this checkout (PYTHONPATH), one thread,
# under nice.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${LOWER_BOUNDS_VENV:-/tmp/fedsciml-lower-bounds-venv}
py=${LOWER_BOUNDS_PYTHON:-python3.11}

if [[ "${LOWER_BOUNDS_REUSE:-0}" != 1 || ! -x "$venv/bin/python" ]]; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip install -q uv
    # lowest-direct: each requirement named in pyproject.toml at its lowest allowed version, the packages they
    # pull in at their newest (what a user who pins our lower bounds gets)
    "$venv/bin/uv" pip compile -q --resolution lowest-direct --python "$venv/bin/python" \
        pyproject.toml --extra test --extra flower -o "$venv/lower-bounds.txt"
    "$venv/bin/uv" pip install -q --python "$venv/bin/python" -r "$venv/lower-bounds.txt"
fi

# Each requirement must be installed at exactly its lower bound: a resolver forced above one (another
# dependency needs more) means the declared bound is not true, and the run fails here rather than test
# something else.
"$venv/bin/python" - <<'EOF'
import sys
import tomllib
from importlib.metadata import version

from packaging.requirements import Requirement
from packaging.version import Version

with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
reqs = list(project["dependencies"])
for extra in ("test", "flower"):
    reqs += project["optional-dependencies"][extra]
bad = []
for text in reqs:
    req = Requirement(text)
    lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
    if not lows:
        bad.append(f"{req.name}: no lower bound in {text!r}")
        continue
    low, got = max(lows), Version(version(req.name))
    n = max(len(low.release), len(got.release))
    pad = lambda v: v.release + (0,) * (n - len(v.release))  # noqa: E731  2.4 == 2.4.0; 2.4.0+cu121 -> 2.4.0
    line = f"{req.name:14s} lower bound {low!s:8s} installed {got}"
    print(line)
    if pad(got) != pad(low):
        bad.append(line)
if bad:
    sys.exit("not at the lower bound:\n  " + "\n  ".join(bad))
EOF
"$venv/bin/python" -m pip freeze --all > "$venv/freeze.txt"
echo "pip freeze of $venv: $venv/freeze.txt"

export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 FLWR_TELEMETRY_ENABLED=0 PYTHONPATH="$PWD"
if [[ $# -eq 0 ]]; then set -- -q; fi
exec nice -n 10 "$venv/bin/python" -m pytest "$@"
