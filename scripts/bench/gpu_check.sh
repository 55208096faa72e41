#!/usr/bin/env bash
# GPU check of fedsciml (issue 28, items 4–6), one prepared script of at most ~6 minutes, run from the repository
# root on a machine with a CUDA GPU and OUT set:
#   1. install the wheels carried in .whl/ (fedsciml built by `pip wheel --no-deps . -w .whl`, with the opacus and
#      pydoe wheels beside it) into a scratch folder put on PYTHONPATH;
#   2. `pytest -m gpu` (tests/test_gpu.py: gn = centralized LM, fusion = ridge, model round trip, chunked = one-shot);
#   3. the device-aware form choice: what `auto` picks for the research sizes and why, and steps/s of `auto` against
#      each forced form on Poisson d = 5 with 20 000 points (scripts/bench/gpu_forms.py);
#   4. the target "Π sin d = 5 ≤ 1e-4 within 120 s on a GPU" with the collocation schedule of docs/guide/scale.md.
# Each step has its own timeout and writes under $OUT; a failing step does not stop the others.
# Dry run on a CPU:  QUICK=1 scripts/bench/gpu_check.sh --device cpu   (tiny budgets; no wheel needed with QUICK=1)
set -u
ROOT=$(pwd)
DEVICE=cuda
while [ $# -gt 0 ]; do case $1 in --device) DEVICE=$2; shift 2;; *) echo "unknown argument $1 (allowed: --device cpu|cuda)"; exit 2;; esac; done
QUICK=${QUICK:-0}
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT/json"; SITE=${SITE:-$(mktemp -d)}; WORK=$(mktemp -d)
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
LOG="$OUT/log.txt"; : >"$LOG"
say() { echo "== $(date +%T) $*" | tee -a "$LOG"; }
S=python3
if ls .whl/fedsciml-*.whl >/dev/null 2>&1; then
  $S -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl >>"$LOG" 2>&1 \
    || { say "install failed"; tail -5 "$LOG"; exit 1; }
  export PYTHONPATH="$SITE"
  say "installed $(ls .whl/*.whl | xargs -n1 basename | tr '\n' ' ')"
elif [ "$QUICK" = 1 ]; then
  export PYTHONPATH="$ROOT"; say "QUICK: no wheel in .whl/, running the source checkout"
else
  say "no .whl/fedsciml-*.whl: build it with 'pip wheel --no-deps . -w .whl' (opacus and pydoe wheels beside it)"; exit 1
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv >>"$LOG" 2>&1
# run from a scratch folder, so that `import fedsciml` is the installed wheel, not the checkout
(cd "$WORK" && $S -c "import torch,fedsciml,numpy,scipy,sklearn;print('fedsciml',fedsciml.__file__,'torch',torch.__version__,'cuda',torch.cuda.is_available(),'numpy',numpy.__version__,'scipy',scipy.__version__,'sklearn',sklearn.__version__)") 2>&1 | tee -a "$LOG"
run() { # name timeout cmd...
  local name=$1 to=$2; shift 2
  say "$name (timeout ${to}s): $*"
  local t0=$(date +%s.%N)
  (cd "$WORK" && timeout "$to" "$@") >"$OUT/$name.out" 2>"$OUT/$name.err"; local rc=$?
  local t1=$(date +%s.%N)
  echo "$name rc=$rc wall=$($S -c "print(round($t1-$t0,1))")" | tee -a "$LOG"
  tail -4 "$OUT/$name.out" >>"$LOG"; [ $rc -ne 0 ] && tail -5 "$OUT/$name.err" >>"$LOG"
  return 0
}
if [ "$QUICK" = 1 ]; then
  # the dry run checks the script, not the speed: generous timeouts (a loaded CPU imports torch slowly)
  BUDGET=1; NI=400; NB=50; TB=4; TARGET_NI=${TARGET_NI:-200}; CAP=${CAP:-2000}; KEXPR="device_is_the_one or chunked or form_choice or fusion"
  T1=900; T2=900; T3=900
else
  BUDGET=12; NI=20000; NB=200; TB=120; TARGET_NI=${TARGET_NI:-4000}; CAP=${CAP:-400000}; KEXPR=""
  T1=110; T2=150; T3=170  # main's (the lead's) per-step timeouts
fi
GPU_TEST_ENV=""; [ "$DEVICE" = cpu ] && GPU_TEST_ENV="FEDSCIML_GPU_TEST_DEVICE=cpu"
# 1. the exact invariants on the device
run pytest_gpu $T1 env $GPU_TEST_ENV $S -m pytest -q -m gpu -p no:cacheprovider --rootdir "$ROOT" "$ROOT/tests/test_gpu.py" ${KEXPR:+-k "$KEXPR"} --junitxml "$OUT/json/pytest_gpu.xml"
# 2. the form choice: auto's picks and why; steps/s of auto and of each forced form (BUDGET s each)
run forms $T2 $S "$ROOT/scripts/bench/gpu_forms.py" --device "$DEVICE" --budget $BUDGET --n-interior $NI --n-boundary $NB --out "$OUT/json/forms.json"
# 3. Π sin d = 5 ≤ 1e-4 within 120 s: centralized LM, points drawn afresh every step and growing (docs/guide/scale.md)
TARGET_ARGS=${TARGET_ARGS:-"--resample 1 --grow 1.5 --grow-every 20 --grow-cap $CAP --n-interior $TARGET_NI"}
run target $T3 $S -m fedsciml solve poisson --dim 5 $TARGET_ARGS --budget $TB --device "$DEVICE" --json "$OUT/json/target.json" --quiet
say done
$S - "$OUT/json" <<'PY' 2>&1 | tee "$OUT/summary.txt"
import json, os, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
try:
    t = ET.parse(os.path.join(d, "pytest_gpu.xml")).getroot()
    t = t if t.tag == "testsuite" else t[0]
    print(f"pytest -m gpu: {t.get('tests')} tests, {t.get('failures')} failed, {t.get('errors')} errors, {t.get('skipped')} skipped")
except Exception as e:
    print("pytest -m gpu: no report", e)
try:
    f = json.load(open(os.path.join(d, "forms.json")))
    print("device", f.get("device"), f.get("gpu", ""), "free GB", round((f.get("free_bytes") or 0) / 1e9, 1))
    for c in f["choices"]:
        print(f"  auto {c['label']}: {c['form']} ({c['reason']})")
    for r in f["runs"]:
        print("  ", {k: r.get(k) for k in ("lm_solve", "ran", "steps", "steps_per_s", "rel_l2", "error") if k in r})
    print("  target auto ≥ ½ best steps/s:", f.get("target"))
except Exception as e:
    print("forms: no result", e)
try:
    j = json.load(open(os.path.join(d, "target.json")))
    h = j.get("history", [])
    fin = j.get("final", {})
    best = min((r.get("rel_l2") for r in h if isinstance(r.get("rel_l2"), (int, float))), default=None)
    print(f"target Π sin d=5: final rel_l2 {fin.get('rel_l2')} (best along the run {best}), steps {len(h) - 1}, "
          f"solver s {j.get('extra', {}).get('solver_time_s')}, form {j.get('extra', {}).get('lm_solve')}, "
          f"≤ 1e-4: {'met' if (fin.get('rel_l2') or 1) <= 1e-4 else 'MISSED'}")
except Exception as e:
    print("target: no result", e)
PY
