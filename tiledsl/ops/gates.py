"""Kernel paths built in a session without a GPU: off for CUDA tensors until a GPU session has run their tests.

A path checked only on the CPU interpreter and by ptxas can still fault or race on the device, so the planners ask
`enabled(name)` before they choose it for a CUDA tensor (CPU tensors, which run on the interpreter, always may).
It is on where `TILEDSL_ENABLE=name[,name...]` (or `all`) is set (core.knobs), or where `name` is in `VERIFIED`:
the GPU session that runs the path's `gpu` tests moves it there, quoting the run in its commit. A plan's
`describe` says when a gated path was passed over, so nothing is chosen silently.
"""
from ..core import knobs

# the gated paths, each with the tests a GPU session runs before moving it to VERIFIED
GATED = {
    "gemm_mn_major": "tests/test_gpu_gemm_layouts.py",  # hopper GEMM reading transposed operands as stored
    "gemm_skinny": "tests/test_gpu_gemm_skinny.py",      # the swap-AB split-K GEMM at M <= 64 (gemm/skinny.py)
    "gemm_fp8_blockwise_pipelined": "tests/test_gpu_moe.py",  # blockwise FP8 promotion one K block behind wgmma
    "gemm_fp8_blockwise_halves": "tests/test_gpu_moe.py",     # blockwise FP8 128 x 256 tiles, a half promoted at a time
    "grouped_dw_tma_store": "tests/test_gpu_moe.py",          # the MoE weight gradient's TMA-store epilogue
    "grouped_tma_store": "tests/test_gpu_moe.py",             # the grouped forward's and dx's TMA-store epilogue
    "blockwise_tma_store": "tests/test_gpu_moe.py",           # the blockwise FP8 GEMMs' TMA-store epilogue
    "decode_warp_split": "tests/test_gpu_attention_varlen_decode.py",  # decode's key tiles split over 4 warps
    "gemm_stream_k_last_wave": "tests/test_gpu_hopper_gemm.py",  # stream_k=2 tuning candidates (the last wave shared)
}
# Session 34 (2026-12-05), on an H100 (sm_90; no H200 could be started), `OUT=dir bash benchmarks/gpu_verify_gates.sh`:
# tests/test_gpu_gemm_layouts.py 52 passed, tests/test_gpu_gemm_skinny.py 178 passed, tests/test_gpu_moe.py 37 passed
# (beside them test_gpu_hopper_gemm 297, test_gpu_ops_gemm 58, test_gpu_ops_attention 25, test_gpu_llama_block 5).
# Session 36 (2026-12-06), on an H200: tests/test_gpu_moe.py 42 passed (the halved promotion's tests with it), and
# benchmarks/fp8_blockwise_sweep.py: 128 x 256 halved 1018-1020 TFLOP/s against the pipelined 128 x 128's 940-951.
# Session 37 (2026-12-06), on an H100: tests/test_gpu_moe.py -k weight_gradient 8 passed (the TMA-store weight
# gradient's 5 cases bit-exact), benchmarks/moe_sweep.py: 290-296 TFLOP/s against the register stores' 98-100 at
# 256 experts x 128 tokens; then TILEDSL_ENABLE=grouped_tma_store tests/test_gpu_moe.py 55 passed (the forward's
# and dx's TMA store: 8 cases exact, out's poison past the last offset intact), benchmarks/moe.py --only grouped
# --gates grouped_tma_store,grouped_dw_tma_store: forward / dx 593-650 -> 620-678 TFLOP/s Mixtral-like.
# Then TILEDSL_ENABLE=blockwise_tma_store tests/test_gpu_moe.py -k "blockwise or halved or pipelined" 19 passed (the
# dense blockwise TMA store bit-equal to the register stores), benchmarks/fp8_blockwise_sweep.py at 128 x 256: 4096^3
# 739 -> 875 TFLOP/s, 8192^3 955 -> 1052, 4096 x 14336 x 4096 887 -> 1035 (torch blockwise 783 / 1068 / 1017).
# Session 38 (2026-12-06), on an H100: TILEDSL_ENABLE=decode_warp_split tests/test_gpu_attention_varlen_decode.py -k
# "decode or interpreter" 63 passed (both decode kernels on every case, the e4m3 cache with 4 and 2 staging stages);
# benchmarks/attention.py --decode: e4m3 cache 0.44-0.78 of the copy bandwidth against ragged.py's 0.20-0.26.
# Session 44 (2026-12-07), on an H100: tests/test_gpu_hopper_gemm.py -k "stream_k_against or hung" 90 passed (stream_k
# 1 and 2, f16 / bf16 / FP8), so gemm_stream_k_last_wave is correct; it stays closed because it is slower:
# benchmarks/gemm_stream_k.py, TFLOP/s f16 / bf16, 1536 x 1536 x 4104: 128 x 128 stream_k=2 327 / 322 against
# stream_k=1 306 / 300, 128 x 192 plain 367 / 364 and matmul's tuned pick 411 / 415; 4000^3: 128 x 160 stream_k=2
# 619 / 613, 128 x 256 stream_k=2 604 / 626, 128 x 256 plain 696 / 726; 4096 x 14336 x 4096: 658 / 736 against
# stream_k=1 663 / 748 (cuBLAS 662 / 744)
VERIFIED = frozenset({"gemm_mn_major", "gemm_skinny", "gemm_fp8_blockwise_pipelined", "gemm_fp8_blockwise_halves",
                      "grouped_dw_tma_store", "grouped_tma_store", "blockwise_tma_store", "decode_warp_split"})


def why_off(name):
    """What keeps `name` off, for a plan's describe."""
    return "TILEDSL_DISABLE" if name in VERIFIED else f"TILEDSL_ENABLE={name} to open it"


def enabled(name):
    """Whether the gated path `name` may run on a CUDA device in this process: not where TILEDSL_DISABLE names it
    (or says all), else where it is VERIFIED or TILEDSL_ENABLE names it (or says all). Read when a plan is made: a
    planner keeps its plan per shape, so set these before the first call of a shape."""
    if name not in GATED:
        raise KeyError(f"unknown gated path {name!r}; known: {sorted(GATED)}")
    off = knobs.disabled_paths()
    if "all" in off or name in off:
        return False
    if name in VERIFIED:
        return True
    wanted = knobs.enabled_paths()
    return "all" in wanted or name in wanted


def allows(name, tensor):
    """Whether a planner may choose the gated path `name` for `tensor`: always for a host tensor (it runs on the
    interpreter), for a CUDA tensor where `enabled(name)`."""
    return not getattr(tensor, "is_cuda", False) or enabled(name)


if __name__ == "__main__":
    # the GPU test files a session runs before moving paths to VERIFIED, for benchmarks/gpu_session.sh's TESTS:
    #   TILEDSL_ENABLE=all TESTS="$(python -m tiledsl.ops.gates)" bash benchmarks/gpu_session.sh
    print(" ".join(sorted(set(GATED.values()))))
