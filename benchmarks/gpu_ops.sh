#!/usr/bin/env bash
# Issue 32's GPU checks in one device call: the torch ops' GPU tests (GEMM, row-wise, attention, the compiled
# layer), the install test and the stream-K GEMM tests, as parallel processes each under a timeout (logs in $OUT),
# then, unless NO_BENCH=1, benchmarks/ops.py and launch.py's op rows. Usage (GPU machine, repo root):
#   [OUT=dir] [T=420] [BENCH_T=420] [NO_BENCH=1] [ONLY="files"] bash benchmarks/gpu_ops.sh
set -u
. "$(dirname "$0")/gpu_env.sh"
T=${T:-420}
run() {  # name, pytest args...
  local name=$1; shift
  timeout "$T" python3 -m pytest -q -p no:cacheprovider --tb=short -rfE "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? $(tail -n 1 "$OUT/$name.log")"
}
if [ -n "${ONLY:-}" ]; then
  run only $ONLY
else
  run ops_gemm tests/test_gpu_ops_gemm.py &
  run ops_rowwise tests/test_gpu_ops_rowwise.py &
  run ops_attention tests/test_gpu_ops_attention.py &
  run ops_model -m gpu tests/test_ops_model.py &
  run ops_install --runslow tests/test_ops_install.py &
  run stream_k -m gpu tests/test_gpu_hopper_gemm.py -k "stream_k" &
  [ -n "${MOE:-}" ] && run moe -m gpu tests/test_gpu_moe.py &
  [ -n "${RAGGED:-}" ] && run ragged -m gpu tests/test_gpu_attention_varlen_decode.py &
  wait
fi
for f in "$OUT"/*.log; do grep -E "^(FAILED|ERROR)" "$f" | head -8; done
if [ -z "${NO_BENCH:-}" ]; then
  timeout "${BENCH_T:-420}" python3 benchmarks/ops.py ${BENCH_ARGS:-} --json "$OUT/ops.json" >"$OUT/bench_ops.log" 2>&1
  echo "bench ops rc=$?"; grep -E "^\|" "$OUT/bench_ops.log"
  timeout 120 python3 benchmarks/launch.py >"$OUT/launch.log" 2>&1; echo "launch rc=$?"; grep -iE "linear|\|" "$OUT/launch.log" | head -30
fi
