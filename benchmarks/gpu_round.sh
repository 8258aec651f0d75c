#!/usr/bin/env bash
# One device call for this session's work: the GPU tests (in SHARDS parallel pytest processes, files dealt round
# robin: compiling is most of their time and the GPU machine has 16 cores), then the example kernels against torch
# unless KERNELS=0. Short table last.
# Usage (on the GPU machine, from the repo root): [SHARDS=3] [KERNELS=0] bash benchmarks/gpu_round.sh [test files...]
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/tiledsl-out}; mkdir -p "$OUT"
export TILEDSL_CACHE_DIR=$(mktemp -d)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
SHARDS=${SHARDS:-1}; rm -f "$OUT"/shard_*.txt
if [ $# -eq 0 ]; then set -- tests; fi
files=$(for a in "$@"; do if [ -d "$a" ]; then ls "$a"/test_*.py "$a"/*/test_*.py 2>/dev/null; else echo "$a"; fi; done)
i=0
for f in $files; do echo "$f" >> "$OUT/shard_$((i % SHARDS)).txt"; i=$((i + 1)); done
for s in $(seq 0 $((SHARDS - 1))); do
  timeout ${PYTEST_TIMEOUT:-540} python3 -m pytest -m gpu -q -p no:cacheprovider --tb=short -rfE \
    $(cat "$OUT/shard_$s.txt") >"$OUT/pytest_gpu_$s.log" 2>&1 &
done
wait
for s in $(seq 0 $((SHARDS - 1))); do
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu_$s.log" | head -20
  tail -n 1 "$OUT/pytest_gpu_$s.log"
done
if [ "${KERNELS:-1}" != 0 ]; then
  timeout ${BENCH_TIMEOUT:-200} python3 benchmarks/kernels.py ${KERNELS_ARGS:-} >"$OUT/kernels.log" 2>&1
  echo "kernels rc=$?"
  grep -E "Error|assert" "$OUT/kernels.log" | head -10
  tail -n 16 "$OUT/kernels.log"
fi
