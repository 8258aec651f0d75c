#!/usr/bin/env bash
# The first device call of a GPU session after paths were built without one: every gated path's GPU tests, the TMA
# swizzle agreement one process per case (a fault poisons the process it happens in), and the benchmarks that time
# each gated path against its peer. Usage (GPU machine, repo root):
#   OUT=dir bash benchmarks/gpu_verify_gates.sh
# Then move the paths whose tests passed to tiledsl/ops/gates.py's VERIFIED, quoting this run in the commit.
set -u
# (no TILEDSL_ENABLE here: the GPU tests open their gates themselves and check the closed default too)
# (the cases' loop is a script of its own: PAR splits its commands at ';')
tma_cases='bash benchmarks/tma_swizzle_cases.sh'
TESTS="$(python3 -m tiledsl.ops.gates) ${EXTRA_TESTS:-}" \
PAR="$tma_cases" \
BENCH="${BENCH:-gemm_skinny.py --quick;gemm_layouts.py --quick;moe.py --only fp8 --gates gemm_fp8_blockwise_pipelined}" \
  bash "$(dirname "$0")/gpu_session.sh"
