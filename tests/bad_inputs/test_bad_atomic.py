"""Wrong atom / red calls: a CompilationError at the apply's line naming the operand, parameter or qualifier."""
import pytest

import tiledsl
from tiledsl import T
from badcase import Case, run


def k_ok_baseline(M: T.Tensor((64,), "uint32"), X: T.Tensor((64,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    d = T.alloc_local((1,), "uint32")
    sh = T.alloc_shared((64,), "uint32")
    b = X[t]
    T.cuda.tile.apply(T.ptx["atom.global.add.u32"], d, M[b : b + 1], 1)
    T.cuda.tile.apply(T.ptx["red.shared.add.u32"], sh[b : b + 1], d[0], pred=t < 32)


def k_mem_in_registers(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    d = T.alloc_local((1,), "uint32")
    r = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["atom.global.add.u32"], d, r, 1)


def k_space_mismatch(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.shared.add.u32"], M[0:1], 1)


def k_width_mismatch(M: T.Tensor((64,), "uint64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], M[0:1], 1)


def k_float_memory_int_op(M: T.Tensor((64,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.max.u32"], M[0:1], 1)


def k_int_memory_float_add(M: T.Tensor((64,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.f32"], M[0:1], 1.0)


def k_scalar_destination(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["atom.global.exch.b32"], 3, M[0:1], 1)


def k_shared_destination(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    sh = T.alloc_shared((1,), "uint32")
    T.cuda.tile.apply(T.ptx["atom.global.exch.b32"], sh, M[0:1], 1)


def k_destination_width(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    d = T.alloc_local((1,), "uint64")
    T.cuda.tile.apply(T.ptx["atom.global.or.b32"], d, M[0:1], 1)


def k_float_destination_int_op(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    d = T.alloc_local((1,), "float32")
    T.cuda.tile.apply(T.ptx["atom.global.inc.u32"], d, M[0:1], 5)


def k_cas_missing_operand(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["atom.global.cas.b32"], d, M[0:1], 1)


def k_red_with_destination(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], d, M[0:1], 1)


def k_red_preserve(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], M[0:1], 1, pred=t < 3, preserve_dst=True)


def k_cache_policy(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], M[0:1], 1, cache_policy=T.uint64(0))


def k_pred_not_bool(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], M[0:1], 1, pred=t)


def k_preserve_without_pred(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    d = T.alloc_local((1,), "uint32")
    T.cuda.tile.apply(T.ptx["atom.global.add.u32"], d, M[0:1], 1, preserve_dst=True)


def k_two_elements(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], M[0:2], 1)


def k_repeat_mismatch(M: T.Tensor((64, 4, 1), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    d = T.alloc_local((2, 1), "uint32")
    T.cuda.tile.apply(T.ptx["atom.global.add.u32"], d, M[0], 1)


def k_packed_float_constant(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.noftz.f16x2"], M[0:1], 1.5)


def k_scalar_wrong_width(M: T.Tensor((64,), "uint32"), X: T.Tensor((64,), "int64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], M[0:1], X[0])


def k_float_constant_int_op(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], M[0:1], 1.5)


def k_bf16_add_on_sm80(M: T.Tensor((64,), "uint16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.noftz.bf16"], M[0:1], T.uint16(0x3F80))


def k_red_cas(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.cas.b32"], M[0:1], 1)


def k_out_of_order(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.relaxed.add.u32"], M[0:1], 1)


def k_red_acquire(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.acquire.gpu.global.add.u32"], M[0:1], 1)


def k_f32_min(M: T.Tensor((64,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.min.f32"], M[0:1], 1.0)


def k_warp_scope_group_extent(M: T.Tensor((16, 1), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], M, 1, scope="warp")


def k_cluster_on_sm80(M: T.Tensor((64,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    T.cuda.tile.apply(T.ptx["red.relaxed.cluster.global.add.u32"], M[0:1], 1)


C = Case
CASES = [
    C("mem_in_registers", k_mem_in_registers, "atom.global.add.u32", ("operand a", "global memory", "registers")),
    C("space_mismatch", k_space_mismatch, "red.shared.add", ("operand a", "must be in shared memory", "global memory")),
    C("width_mismatch", k_width_mismatch, "red.global.add.u32", ("operand a", "must be 32 bits", "uint64")),
    C("float_memory_int_op", k_float_memory_int_op, "red.global.max", ("operand a", "holds float32", ".u32 slot")),
    C("int_memory_float_add", k_int_memory_float_add, "red.global.add.f32", ("operand a", "holds int32")),
    C("scalar_destination", k_scalar_destination, "atom.global.exch", ("operand d", "must be a register buffer")),
    C("shared_destination", k_shared_destination, "atom.global.exch", ("operand d", "registers (T.alloc_local)")),
    C("destination_width", k_destination_width, "atom.global.or", ("operand d", "must be 32 bits", "uint64")),
    C("float_destination_int_op", k_float_destination_int_op, "atom.global.inc", ("operand d", "holds float32")),
    C("cas_missing_operand", k_cas_missing_operand, "atom.global.cas", ("takes 4 operands", "d, a, b, c", "got 3")),
    C("red_with_destination", k_red_with_destination, "red.global.add", ("takes 2 operands", "a, b")),
    C("red_preserve", k_red_preserve, "preserve_dst=True", ("unknown parameter 'preserve_dst'",)),
    C("cache_policy", k_cache_policy, "cache_policy=", ("unknown parameter 'cache_policy'",)),
    C("pred_not_bool", k_pred_not_bool, "pred=t)", ("pred must be a run-time bool",)),
    C("preserve_without_pred", k_preserve_without_pred, "preserve_dst=True", ("needs pred",)),
    C("two_elements", k_two_elements, "M[0:2]", ("operand a", "must be (1,)")),
    C("repeat_mismatch", k_repeat_mismatch, "M[0], 1", ("operand d", "repeat shape (2,)", "(4,)")),
    C("packed_float_constant", k_packed_float_constant, "1.5)", ("operand b", "packed f16x2 constant")),
    C("scalar_wrong_width", k_scalar_wrong_width, "X[0])", ("operand b", "int64", "32-bit")),
    C("float_constant_int_op", k_float_constant_int_op, "1.5)", ("operand b", "not a valid uint32 constant")),
    C("bf16_add_on_sm80", k_bf16_add_on_sm80, "noftz.bf16", ("needs sm_90", "sm_80"), target="sm_80"),
    C("red_cas", k_red_cas, "red.global.cas", ("red has no .cas", "supported:")),
    C("qualifiers_out_of_order", k_out_of_order, "red.global.relaxed", ("out of order",)),
    C("red_acquire", k_red_acquire, "red.acquire", ("red takes .sem .relaxed or .release only",)),
    C("f32_min", k_f32_min, "red.global.min.f32", ("'.f32' is not a type of red.min", ".u32 .s32 .u64 .s64")),
    C("warp_scope_group_extent", k_warp_scope_group_extent, "scope=\"warp\"", ("group axes", "(32,)")),
    C("cluster_on_sm80", k_cluster_on_sm80, "red.relaxed.cluster", ("needs sm_90", "sm_80"), target="sm_80"),
]


def test_baseline_compiles():
    """The corpus' kernels differ from this valid one in one thing each."""
    from badcase import default_args
    ptx = tiledsl.jit(k_ok_baseline).compile(*default_args(k_ok_baseline), target="sm_90").asm["ptx"]
    assert "atom.global.add.u32" in ptx and "red.shared.add.u32" in ptx


def test_at_least_twenty_distinct_cases():
    assert len({c.id for c in CASES}) == len(CASES) >= 20


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_atomic(case):
    run(case)
