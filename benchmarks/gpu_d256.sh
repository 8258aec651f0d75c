#!/usr/bin/env bash
# The D = 256 attention backward (fa3_backward's column split, session 44) in one device call: its GPU tests with
# dq_overlap (built without a GPU: the second dQ block issued while the first runs), the backward side by side with
# torch's backends for the default and dq_overlap (fa3 / fa3dqo), then the training step through tiledsl.ops.
# Usage (GPU machine, repo root): [OUT=dir] [T=200] bash benchmarks/gpu_d256.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/tiledsl-out}; mkdir -p "$OUT"
export TILEDSL_CACHE_DIR=${TILEDSL_CACHE_DIR:-$(mktemp -d)}
T=${T:-200}
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout "$T" python3 -m pytest -q -p no:cacheprovider --tb=short -rfE -m gpu tests/test_gpu_attention_backward.py \
    -k "fa3 and 256" >"$OUT/d256_tests.log" 2>&1
echo "tests rc=$? $(tail -n 1 "$OUT/d256_tests.log")"; grep -E "^(FAILED|ERROR)" "$OUT/d256_tests.log" | head -8
timeout "$T" python3 benchmarks/attention.py --backward --backward-only --dims 256 --ns 1024,4096,16384 \
    --dtypes bfloat16 --bwd-paths fa3,fa3dqo >"$OUT/d256_backward.log" 2>&1
echo "backward rc=$?"; grep -E "^\|" "$OUT/d256_backward.log"
timeout "$T" python3 benchmarks/ops.py --only attention --dims 256 --reps 20 >"$OUT/d256_ops.log" 2>&1
echo "ops rc=$?"; grep -E "^\|" "$OUT/d256_ops.log"
