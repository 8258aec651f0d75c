#!/usr/bin/env bash
# The D = 256 attention backward (fa3_backward's column split) in one device call: the backward side by side with
# torch's backends for the default and each variant (fa3; fa3dqo: dq_overlap, session 44; fa3ss / fa3ssown: each
# consumer's scores over half the tile's queries, score_split True or "own", session 45; with dq_overlap too), each
# checked against a float32 reference; then the GPU tests of the variants; with OPS=1 the training step through
# tiledsl.ops last. TESTS_K picks the tests (default: the score_split ones; "fa3 and 256" for all of D = 256).
# Usage (GPU machine, repo root): [OUT=dir] [T=300] [OPS=1] bash benchmarks/gpu_d256.sh
set -u
. "$(dirname "$0")/gpu_env.sh"
T=${T:-300}
timeout 240 python3 benchmarks/attention.py --backward --backward-only --dims 256 --ns 1024,4096 \
    --dtypes bfloat16 --bwd-paths fa3,fa3dqo,fa3ss,fa3ssdqo,fa3ssown,fa3ssowndqo >"$OUT/d256_backward.log" 2>&1
echo "backward rc=$?"; grep -E "^\|" "$OUT/d256_backward.log"
gpu_tests d256_tests tests/test_gpu_attention_backward.py -k "${TESTS_K:-d256_score_split}"
if [ "${OPS:-0}" = 1 ]; then
    timeout "$T" python3 benchmarks/ops.py --only attention --dims 256 --reps 20 >"$OUT/d256_ops.log" 2>&1
    echo "ops rc=$?"; grep -E "^\|" "$OUT/d256_ops.log"
fi
