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
# Environment: LOWER_BOUNDS_VENV (default /tmp/fedsciml-lower-bounds-venv), LOWER_BOUNDS_PYTHON (default: the
# lowest Python that pyproject.toml's requires-python allows, found as pythonX.Y on PATH, else by pyenv or uv),
# LOWER_BOUNDS_REUSE=1 (do not rebuild). The suite runs from this checkout (PYTHONPATH), one thread, under nice.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${LOWER_BOUNDS_VENV:-/tmp/fedsciml-lower-bounds-venv}
# the lowest declared Python: requires-python = ">=3.10" -> 3.10 (the bottom of that range is tested too)
lowest=$(sed -n 's/^requires-python *= *">= *\([0-9]*\.[0-9]*\)".*/\1/p' pyproject.toml)
if [[ -z "$lowest" ]]; then
    echo "lower_bounds.sh: no requires-python = \">=X.Y\" in pyproject.toml" >&2
    exit 2
fi
find_python() {  # pythonX.Y on PATH, else pyenv's or uv's installed X.Y (nothing is downloaded here)
    local v=$1 p
    for p in "python$v" "$(pyenv prefix "$v" 2>/dev/null)/bin/python$v" "$(uv python find "$v" 2>/dev/null)"; do
        if [[ -n "$p" ]] && "$p" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$v'.split('.'))))" \
                2>/dev/null; then
            command -v "$p"
            return 0
        fi
    done
    return 1
}
py=${LOWER_BOUNDS_PYTHON:-$(find_python "$lowest" || true)}
if [[ -z "$py" ]]; then
    echo "lower_bounds.sh: no Python $lowest found (pyproject.toml requires-python >= $lowest): install it (pyenv" \
         "install $lowest, uv python install $lowest) or set LOWER_BOUNDS_PYTHON" >&2
    exit 2
fi
echo "Python: $py ($("$py" -c 'import sys; print(sys.version.split()[0])'); the lowest requires-python allows: $lowest)"

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
from importlib.metadata import version

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, a dependency there (pyproject.toml)
    import tomli as tomllib

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
    if req.marker is not None and not req.marker.evaluate():
        continue  # for another Python (tomli: below 3.11 only)
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
