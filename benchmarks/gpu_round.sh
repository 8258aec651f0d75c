#!/usr/bin/env bash
# One device call for this session's work: the GPU tests, then the example kernels against torch. Short table last.
# Usage (on the GPU machine, from the repo root): bash benchmarks/gpu_round.sh [pytest args...]
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/tiledsl-out}; mkdir -p "$OUT"
export TILEDSL_CACHE_DIR=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
timeout ${PYTEST_TIMEOUT:-330} python3 -m pytest -m gpu -q -p no:cacheprovider --tb=short -rfE "${@:-tests}" \
  >"$OUT/pytest_gpu.log" 2>&1
echo "pytest rc=$?"
grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -40
tail -n 3 "$OUT/pytest_gpu.log"
timeout ${BENCH_TIMEOUT:-200} python3 benchmarks/kernels.py ${KERNELS_ARGS:-} >"$OUT/kernels.log" 2>&1
echo "kernels rc=$?"
grep -E "Error|assert" "$OUT/kernels.log" | head -10
tail -n 16 "$OUT/kernels.log"
