#!/usr/bin/env bash
# One lease of a 16-core GPU machine, used twice at once (issue 28): the GPU checks of gpu_check.sh on the GPU, and
# the anchors' benchmarks (scripts/bench/anchors.py) on the CPU cores, each run at one thread at equal solver CPU
# seconds, 13 runs in parallel.  Run from the repository root with OUT set and these carried (git-ignored):
#   .whl/      fedsciml's wheel (`pip wheel --no-deps . -w .whl` from a clean export) + the opacus and pydoe wheels
#   .anchors/  kfac-pinns-experiments.tar.gz (the authors' checkout, never committed) + whl/ (their dependencies:
#              backpack-for-pytorch, unfoldNd, tueplots, hessianfree)
# BUDGET (default 300) solver CPU seconds per anchors run (anchors.py runs both sides on the CPU only);
# GPU_LANE=check (default: gpu_check.sh, then exp19 on the GPU) or pisin (Π sin d = 5 on the GPU for 120 s with the
# exp16 recipe: [5,64,64,48,48,1], 3000 interior points drawn afresh every step); QUICK=1: a dry run on a CPU.
set -u
ROOT=$(pwd); OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
BUDGET=${BUDGET:-300}; CK=${CK:-30,120,300}; QUICK=${QUICK:-0}; DEVICE=${DEVICE:-cuda}
SITE=$(mktemp -d); A=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl .anchors/whl/backpack*.whl \
  .anchors/whl/unfold*.whl .anchors/whl/tueplots*.whl .anchors/whl/hessianfree*.whl >"$OUT/install.log" 2>&1 \
  || { echo "install failed"; tail -5 "$OUT/install.log"; exit 1; }
tar xzf .anchors/kfac-pinns-experiments.tar.gz -C "$A"
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nproc; uptime; nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null
anchors() { # tag exps runs jobs
  python3 "$ROOT/scripts/bench/anchors.py" --anchors-dir "$A/kfac-pinns-experiments" --exps "$2" --runs "$3" \
    --budget "$BUDGET" --checkpoints "$CK" --jobs "$4" --timeout "$((BUDGET + ${SLACK:-160}))" --python python3 --out "$OUT/anchors_$1" \
    --csv "$OUT/anchors_$1.csv" --md "$OUT/anchors_$1.md" >"$OUT/anchors_$1.log" 2>&1
}
anchors a exp10 "fedsciml:lm,fedsciml:gn,authors:KFAC*,authors:ENGD" 4 &
anchors b exp16,exp21 "fedsciml:lm,fedsciml:gn,authors:KFAC*" 6 &
anchors c heat4d-medium "fedsciml:lm,authors:KFAC*" 2 &
anchors d exp19 "fedsciml:kfac" 1 &
mkdir -p "$OUT/gpu/json"
if [ "${GPU_LANE:-check}" = pisin ]; then
  TB=$([ "$QUICK" = 1 ] && echo 3 || echo 120)
  (cd "$A" && timeout $((TB + 60)) python3 -m fedsciml solve poisson --dim 5 --hidden 64,64,48,48 --resample 1 \
    --n-interior 3000 --budget "$TB" --device "$DEVICE" --json "$OUT/gpu/json/pisin.json" --quiet \
    >"$OUT/gpu/pisin.out" 2>"$OUT/gpu/pisin.err"); echo "pisin rc=$?"; tail -3 "$OUT/gpu/pisin.out"; tail -3 "$OUT/gpu/pisin.err"
  wait; for t in a b c d; do echo "== anchors $t"; tail -22 "$OUT/anchors_$t.md" 2>/dev/null || tail -5 "$OUT/anchors_$t.log"; done
  (cd "$OUT" && tar czf /tmp/session.tgz . && find . -mindepth 1 -delete && mv /tmp/session.tgz session.tgz); exit 0
fi
if [ "$QUICK" = 1 ]; then QUICK=1 OUT="$OUT/gpu" bash scripts/bench/gpu_check.sh --device "$DEVICE"
else OUT="$OUT/gpu" bash scripts/bench/gpu_check.sh --device "$DEVICE"; fi
# exp19 (p = 117,345) on the GPU, automatic form (the dense kernel form fits an H100; on this machine's CPU at
# one thread the anchors lane runs it matrix-free with the K-FAC preconditioner)
GB=$([ "$QUICK" = 1 ] && echo 3 || echo 60)
(cd "$A" && timeout $((GB + 90)) python3 -m fedsciml solve poisson --preset exp19 --budget "$GB" --device "$DEVICE" \
  --json "$OUT/gpu/json/exp19_gpu.json" --quiet >"$OUT/gpu/exp19_gpu.out" 2>"$OUT/gpu/exp19_gpu.err"); echo "exp19 gpu rc=$?"
tail -3 "$OUT/gpu/exp19_gpu.out"; tail -3 "$OUT/gpu/exp19_gpu.err"
wait
for t in a b c d; do echo "== anchors $t"; tail -25 "$OUT/anchors_$t.md" 2>/dev/null || tail -5 "$OUT/anchors_$t.log"; done
cat "$OUT/gpu/summary.txt" 2>/dev/null
# everything in one archive (the device tool brings back at most 8 files), the summaries beside it
(cd "$OUT" && tar czf /tmp/session.tgz . && find . -mindepth 1 -delete && mv /tmp/session.tgz session.tgz)
