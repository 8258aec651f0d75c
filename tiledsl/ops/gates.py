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
}
VERIFIED = frozenset()


def enabled(name):
    """Whether the gated path `name` may run on a CUDA device in this process."""
    if name in VERIFIED:
        return True
    if name not in GATED:
        raise KeyError(f"unknown gated path {name!r}; known: {sorted(GATED)}")
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
