#!/usr/bin/env bash
# The stream_k=2 path (gate gemm_stream_k_last_wave, session 43: built without a GPU) in one device call: its GPU
# tests (every stream-K case with sk 1 and 2, FP8 too), the candidates side by side with cuBLAS and matmul's pick
# (benchmarks/gemm_stream_k.py), then issue 31's shape sweep with the gate open (the tuner times the new forms).
# Usage (GPU machine, repo root): [OUT=dir] [T=240] bash benchmarks/gpu_stream_k.sh
set -u
. "$(dirname "$0")/gpu_env.sh"
T=${T:-240}
gpu_tests stream_k_tests tests/test_gpu_hopper_gemm.py -k "stream_k_against or hung"
timeout "$T" python3 benchmarks/gemm_stream_k.py >"$OUT/stream_k_side_by_side.log" 2>&1
echo "side by side rc=$?"; grep -E "^\||picks" "$OUT/stream_k_side_by_side.log"
TILEDSL_ENABLE=gemm_stream_k_last_wave timeout "$T" python3 benchmarks/gemm.py --sweep-shapes --quick \
    --json "$OUT/sweep_last_wave.json" >"$OUT/sweep_last_wave.log" 2>&1
echo "sweep (gate open) rc=$?"; tail -n 12 "$OUT/sweep_last_wave.log"
