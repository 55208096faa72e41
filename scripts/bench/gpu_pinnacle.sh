#!/usr/bin/env bash
# One lease of a 16-core GPU machine for PINNacle (issue 36): the CPU benchmark (scripts/bench/pinnacle.py: the CLI
# path, one thread and one CPU-seconds budget per run, JOBS runs at once) on the CPU cores and, beside it, their
# standard 5×100 network on the GPU for a few cases (wall-clock budget GPU_BUDGET each, one after the other).
# Run from the repository root with OUT set and these carried (git-ignored):
#   .whl/       the opacus, pydoe and opt-einsum wheels (the rest is on the machine's image)
#   .pinnacle/  ref/*.dat of a PINNacle checkout (their reference files; never committed)
# Everything under OUT comes back as one session.tgz (per-run logs and JSON included).
set -u
ROOT=$(pwd); OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
BUDGET=${BUDGET:-150}; GPU_BUDGET=${GPU_BUDGET:-90}; JOBS=${JOBS:-13}; METHODS=${METHODS:-centralized,gn,fipa}
CASES=${CASES:-burgers1d-c,poisson2d-c,poissonnd,heat2d-ms,ns2d-c,heat2d-lt,pinv,hinv}
GPU_CASES=${GPU_CASES:-burgers1d-c,poisson2d-c,ns2d-c}
SITE=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl \
  >"$OUT/install.log" 2>&1 || { echo "install failed"; tail -5 "$OUT/install.log"; exit 1; }
export PYTHONPATH="$SITE" PYTHONUNBUFFERED=1 MPLBACKEND=Agg FEDSCIML_PINNACLE="$ROOT/.pinnacle"
nproc; uptime; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
python3 -c "import torch, numpy, scipy; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
python3 scripts/bench/pinnacle.py --cases "$CASES" --methods "$METHODS" --budget "$BUDGET" --jobs "$JOBS" \
  --python python3 --out "$OUT/cpu" >"$OUT/cpu.log" 2>&1 &
for c in ${GPU_CASES//,/ }; do
  OMP_NUM_THREADS=2 timeout $((GPU_BUDGET + 150)) python3 -m fedsciml solve pinnacle --case "$c" \
    --hidden 100,100,100,100,100 --device cuda --threads 2 --budget "$GPU_BUDGET" --json "$OUT/gpu_$c.json" \
    >"$OUT/gpu_$c.out" 2>"$OUT/gpu_$c.err"
  echo "gpu $c rc=$?"; tail -3 "$OUT/gpu_$c.out"; tail -2 "$OUT/gpu_$c.err"
done
wait
echo "== cpu"; tail -5 "$OUT/cpu.log"; cat "$OUT/cpu/pinnacle.md" 2>/dev/null
(cd "$OUT" && tar czf /tmp/session.tgz . && find . -mindepth 1 -delete && mv /tmp/session.tgz session.tgz)
exit 0
