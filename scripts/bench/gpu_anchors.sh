#!/usr/bin/env bash
# One lease of a 16-core GPU machine for issue 37 (federated at research scale), used twice at once:
#   GPU lane  fedsciml's centralized LM and gn with 4 clients, experiment by experiment (exp28, exp19, exp21, exp16)
#             as the presets run them, on the GPU (`scripts/bench/anchors.py --device cuda`: `--clock wall`, GPU_BUDGET wall
#             seconds each), one run after another until GPU_SECONDS after the start; a run that no longer fits is
#             skipped with a line.  The authors' GPU figures are their logged best runs (best_runs/*_history.csv
#             of their checkout, RTX 6000), set beside these afterwards with `anchors.py --render ... --authors-logs`.
#   CPU lane  FIPA beside lm and gn on the same four experiments (`anchors.py`, one thread and CPU_BUDGET solver
#             CPU seconds each, CPU_JOBS at once) on the machine's CPU cores.
# Run from the repository root with OUT set and .whl/ carried (git-ignored: the opacus, pydoe and opt-einsum
# wheels; the rest is on the machine's image).  A dry run on a CPU: DEVICE=cpu with small budgets, e.g.
#   OUT=/tmp/gq DEVICE=cpu GPU_BUDGET=8 GPU_MIN=3 GPU_SECONDS=75 GPU_CK=4,8 CPU_BUDGET=8 CPU_CK=4,8 CPU_JOBS=2 \
#   EXPS=exp16,heat4d-medium bash scripts/bench/gpu_anchors.sh
# Everything under OUT comes back as one session.tgz, the two records beside it.
set -u
ROOT=$(pwd); OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
DEVICE=${DEVICE:-cuda}
GPU_BUDGET=${GPU_BUDGET:-60}; GPU_SECONDS=${GPU_SECONDS:-490}; GPU_CK=${GPU_CK:-30,60}; GPU_MIN=${GPU_MIN:-20}
CPU_BUDGET=${CPU_BUDGET:-300}; CPU_CK=${CPU_CK:-30,60,120,300}; CPU_JOBS=${CPU_JOBS:-12}
CPU_TIMEOUT=${CPU_TIMEOUT:-500}
EXPS=${EXPS:-heat4d-medium,exp19,exp21,exp16}
T0=$(date +%s)
SITE=$(mktemp -d)
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl \
    >"$OUT/install.log" 2>&1 || { echo "install failed"; tail -5 "$OUT/install.log"; exit 1; }
  export PYTHONPATH="$SITE"
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nproc; uptime; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
python3 -c "import torch, numpy, scipy, fedsciml; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'numpy', numpy.__version__, 'scipy', scipy.__version__)" \
  || { echo "fedsciml does not import"; exit 1; }
git rev-parse --short=12 HEAD 2>/dev/null; git status --porcelain --untracked-files=no 2>/dev/null | head -5
A="python3 scripts/bench/anchors.py --python python3"
$A --exps "$EXPS" --runs fedsciml:lm,fedsciml:gn,fedsciml:fipa --budget "$CPU_BUDGET" --checkpoints "$CPU_CK" \
  --jobs "$CPU_JOBS" --timeout "$CPU_TIMEOUT" --out "$OUT/cpu" --csv "$OUT/cpu.csv" --md "$OUT/cpu.md" \
  >"$OUT/cpu.log" 2>&1 &
CPU_PID=$!
mkdir -p "$OUT/gpu"
for e in ${EXPS//,/ }; do
  for run in lm gn; do
    left=$((T0 + GPU_SECONDS - $(date +%s)))
    b=$((left - 30 < GPU_BUDGET ? left - 30 : GPU_BUDGET))
    if [ "$b" -lt "$GPU_MIN" ]; then echo "gpu $e $run: skipped, $left s of the GPU lane left"; continue; fi
    $A --device "$DEVICE" --exps "$e" --runs "fedsciml:$run" --budget "$b" --checkpoints "$GPU_CK" --jobs 1 \
      --timeout $((b + 60)) --out "$OUT/gpu/$e-$run" --csv "$OUT/gpu/$e-$run.csv" --md "$OUT/gpu/$e-$run.md" \
      >"$OUT/gpu/$e-$run.log" 2>&1
    echo "gpu $e $run: budget $b s, exit $?, $(( $(date +%s) - T0 )) s since the start"
    grep "^| $e" "$OUT/gpu/$e-$run.md" 2>/dev/null | cut -c1-240
  done
done
nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null
wait "$CPU_PID"; echo "cpu lane exit $?, $(( $(date +%s) - T0 )) s since the start"
grep "^| " "$OUT/cpu.md" 2>/dev/null | cut -c1-260
# the GPU rows in one CSV (each run wrote its own, same header)
first=1; for f in "$OUT"/gpu/*.csv; do [ -f "$f" ] || continue
  if [ $first = 1 ]; then cat "$f"; first=0; else tail -n +2 "$f"; fi; done >"$OUT/gpu.csv"
cp "$OUT/cpu.md" "$OUT/cpu_record.md" 2>/dev/null
(cd "$OUT" && tar czf /tmp/session.tgz --exclude=session.tgz . && find . -mindepth 1 -maxdepth 1 \
  ! -name gpu.csv ! -name cpu.csv ! -name cpu_record.md -exec rm -rf {} + && mv /tmp/session.tgz session.tgz)
ls -la "$OUT"
exit 0
