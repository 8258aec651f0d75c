#!/usr/bin/env bash
# The FA3 backward's variants in one device call, each timed side by side with torch's backends and checked against
# a float32 reference: at D = 256 the default and fa3dqo (dq_overlap, session 44), fa3ss / fa3ssown (score_split
# True or "own": each consumer's scores over half the tile's queries, session 45), with dq_overlap too; at D = 64
# the default and fa3dqc (dq_combine: one dQ reduction a tile, session 45). Then the variants' GPU tests; with OPS=1
# the D = 256 training step through tiledsl.ops last. TESTS_K picks the tests (default: the session 45 variants').
# Usage (GPU machine, repo root):
#   [OUT=dir] [T=300] [TB=200] [TB64=120] [TESTS_K=...] [OPS=1 [OPS_DIMS=64,256] [BWD_DEFAULTS=...]] \
#   bash benchmarks/gpu_bwd_variants.sh
set -u
. "$(dirname "$0")/gpu_env.sh"
T=${T:-300}
timeout "${TB:-200}" python3 benchmarks/attention.py --backward --backward-only --dims 256 --ns 1024,4096 \
    --dtypes bfloat16 --bwd-paths fa3,fa3dqo,fa3ss,fa3ssdqo,fa3ssown,fa3ssowndqo >"$OUT/d256_backward.log" 2>&1
echo "d256 backward rc=$?"; grep -E "^\|" "$OUT/d256_backward.log"
timeout "${TB64:-120}" python3 benchmarks/attention.py --backward --backward-only --dims 64 --ns 1024,4096 \
    --dtypes bfloat16 --bwd-paths fa3,fa3dqc >"$OUT/d64_backward.log" 2>&1
echo "d64 backward rc=$?"; grep -E "^\|" "$OUT/d64_backward.log"
gpu_tests variant_tests tests/test_gpu_attention_backward.py -k "${TESTS_K:-d256_score_split or dq_combine}"
if [ "${OPS:-0}" = 1 ]; then
    # BWD_DEFAULTS (e.g. "SCORE_SPLIT=own DQ_COMBINE=True"): the variants the step runs with (ops.py --bwd-default)
    extra=(); for kv in ${BWD_DEFAULTS:-}; do extra+=(--bwd-default "$kv"); done
    timeout "$T" python3 benchmarks/ops.py --only attention --dims "${OPS_DIMS:-256}" --reps 20 "${extra[@]}" \
        >"$OUT/d256_ops.log" 2>&1
    echo "ops rc=$?"; grep -E "^\|" "$OUT/d256_ops.log"
fi
