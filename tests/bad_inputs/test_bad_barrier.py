"""Wrong named-barrier kernels (bar.sync / bar.arrive / barrier.*): a CompilationError at the offending line naming
the operand, qualifier or target; and the run-time mistakes the interpreter reports as KernelFaults (a barrier
too few warps reach, counts that disagree, a partial warp, a run-time id or count out of range)."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from badcase import Case, run


def k_id_16():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], 16, 128)


def k_id_negative():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], -1)


def k_id_float():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], 1.0, 128)


def k_id_view(A: T.Tensor((4,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], A, 128)


def k_count_48():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], 1, 48)


def k_count_zero():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 0)


def k_count_above_block():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], 1, 288)


def k_count_bool():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], 1, True)


def k_arrive_without_count():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.arrive"], 1)


def k_no_operands():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"])


def k_three_operands():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128, 2)


def k_warp_scope():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128, scope="warp")


def k_param():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128, count=128)


def k_gpu_scope():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.gpu.sync"], 1, 128)


def k_red():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.red.popc.u32"], 1, 128)


def k_bar_aligned():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.sync.aligned"], 1, 128)


def k_barrier_wait():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["barrier.wait"], 1, 128)


def k_cta_sm75():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    T.cuda.tile.apply(T.ptx["bar.cta.sync"], 1, 128)


CASES = [
    Case("id-16", k_id_16, 'T.ptx["bar.sync"], 16, 128', ("operand a", "16 is not a barrier id", "0..15")),
    Case("id-negative", k_id_negative, 'T.ptx["bar.sync"], -1', ("operand a", "-1 is not a barrier id")),
    Case("id-float", k_id_float, "1.0, 128", ("operand a", "must be an integer", "barrier id")),
    Case("id-view", k_id_view, "A, 128", ("operand a", "must be an integer")),
    Case("count-48", k_count_48, "1, 48", ("operand b", "48", "multiple of the warp size")),
    Case("count-zero", k_count_zero, "1, 0", ("operand b", "0 is not a thread count")),
    Case("count-above-block", k_count_above_block, "1, 288", ("operand b", "288 threads can never arrive", "256")),
    Case("count-bool", k_count_bool, "1, True", ("operand b", "must be an integer")),
    Case("arrive-without-count", k_arrive_without_count, 'T.ptx["bar.arrive"], 1', ("needs the thread count b",)),
    Case("no-operands", k_no_operands, 'T.ptx["bar.sync"])', ("takes 1 to 2 operands", "got 0")),
    Case("three-operands", k_three_operands, "1, 128, 2", ("takes 1 to 2 operands", "got 3")),
    Case("warp-scope", k_warp_scope, 'scope="warp"', ("thread instruction", "'warp'")),
    Case("unknown-param", k_param, "count=128", ("unknown parameter 'count'",)),
    Case("gpu-scope", k_gpu_scope, 'T.ptx["bar.gpu.sync"]', ("only scope is .cta", ".gpu")),
    Case("bar-red", k_red, 'T.ptx["bar.red.popc.u32"]', ("reductions", "no explicit tile pattern")),
    Case("bar-sync-aligned", k_bar_aligned, 'T.ptx["bar.sync.aligned"]', ("bar.sync takes no qualifier",)),
    Case("barrier-wait", k_barrier_wait, 'T.ptx["barrier.wait"]', ("no explicit tile pattern", "supported")),
    Case("cta-on-sm75", k_cta_sm75, 'T.ptx["bar.cta.sync"]', (".cta needs PTX ISA 7.8", "sm_75"), target="sm_75"),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_barrier(case):
    run(case)


# ---------------------------------------------------------------- run-time mistakes (the interpreter)

def k_mismatch(Out: T.Tensor((256,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    if tid < 128:
        T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 256)
    else:
        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128)
    Out[tid] = T.cast(tid, "uint32")


def k_partial_warp(Out: T.Tensor((256,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    if tid < 16:
        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 32)
    Out[tid] = T.cast(tid, "uint32")


def k_runtime_id(Out: T.Tensor((256,), "uint32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    T.cuda.tile.apply(T.ptx["bar.sync"], n, 256)
    Out[tid] = T.cast(tid, "uint32")


def k_runtime_count(Out: T.Tensor((256,), "uint32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    T.cuda.tile.apply(T.ptx["bar.sync"], 1, n)
    Out[tid] = T.cast(tid, "uint32")


def k_split_id(Out: T.Tensor((256,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
    tid = T.cuda.thread_id()
    T.cuda.tile.apply(T.ptx["bar.sync"], tid % 2, 256)
    Out[tid] = T.cast(tid, "uint32")


@pytest.mark.parametrize("fn,args,words", [
    (k_mismatch, (), ("barrier 1 with 128 threads", "counts to 256", "same count")),
    (k_partial_warp, (), ("needs all 32 lanes",)),
    (k_runtime_id, (16,), ("barrier 16", "0..15")),
    (k_runtime_count, (96 + 1,), ("thread count 97", "multiple of 32")),
    (k_runtime_count, (512,), ("thread count 512", "256 threads")),
    (k_split_id, (), ("threads of one warp give different values", "barrier id")),
], ids=["count-mismatch", "partial-warp", "runtime-id-16", "runtime-count-97", "runtime-count-512", "split-id"])
def test_run_time_mistakes_are_kernel_faults(fn, args, words):
    k = tiledsl.jit(fn, interpret=True, target="sm_90")
    with pytest.raises(tiledsl.KernelFault) as ei:
        k(np.zeros(256, np.uint32), *args)
    for w in words:
        assert w in str(ei.value), str(ei.value)
