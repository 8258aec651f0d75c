#!/usr/bin/env bash
# Issue 35's short sequences in one device call: the forward's GPU tests of the walks the short defaults take
# (persistent, dynamic, double_q bit for bit), then the fa3short candidates side by side with cuDNN at N = 512-2048
# (benchmarks/attention.py --configs fa3short: what fa3.SHORT_CONFIGS is chosen from), then the defaults alone.
# Usage (GPU machine, repo root):
#   [OUT=dir] [T=240] [NS=512,1024,1536,2048] [DTYPES=bfloat16] bash benchmarks/gpu_short.sh
set -u
. "$(dirname "$0")/gpu_env.sh"
T=${T:-240}; NS=${NS:-512,1024,1536,2048}; DTYPES=${DTYPES:-bfloat16}
gpu_tests short_tests tests/test_gpu_attention_hopper.py -k "double_q or persistent or dynamic"
for D in 64 128; do
  timeout "$T" python3 benchmarks/attention.py --quick --ns "$NS" --dims $D --dtypes "$DTYPES" --configs fa3short \
      >"$OUT/short_sweep_$D.log" 2>&1
  echo "sweep D=$D rc=$?"; grep -E "^\| " "$OUT/short_sweep_$D.log" | sort -u
done
timeout "$T" python3 benchmarks/attention.py --quick --ns "$NS" --dims 64,128 --dtypes bfloat16,float16 --configs fa3 \
    >"$OUT/short_default.log" 2>&1
echo "defaults rc=$?"; grep -E "^\| " "$OUT/short_default.log" | sort -u
