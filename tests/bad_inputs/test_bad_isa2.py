"""Round two of wrong tile instructions: register operands whose element type does not fit the instruction's slot
(same width, wrong kind: an int32 buffer in an .f32 slot, a float32 buffer in a .u32 slot, another float format),
and immediates that ptxas would reject or silently change (wait_group counts, mbarrier counts, bulk copy sizes).
Each is a CompilationError at the apply's (or operand's) line naming the operand and what the slot accepts."""
import pytest

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid
from badcase import Case, run

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
la = TileLayout(S[(1, 2, 2, 8, 2, 4) : (8, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
lb = TileLayout(S[(1, 2, 8, 2, 4) : (4, 2, 4 @ laneid, 1, 1 @ laneid)])
ld = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
COPY = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"


def _reg(op, d_dtype, a_dtype, n=3):
    """A kernel applying `op` to a 4-register buffer of d_dtype and n-1 sources of a_dtype."""
    def k():
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        d = T.alloc_local((4, 1), d_dtype)
        a = T.alloc_local((4, 1), a_dtype)
        if n == 4:
            T.cuda.tile.apply(T.ptx[op], d, a, a, a)
        elif n == 3:
            T.cuda.tile.apply(T.ptx[op], d, a, a)
        else:
            T.cuda.tile.apply(T.ptx[op], d, a)
    k.__name__ = f"k_{op.replace('.', '_')}_{d_dtype}_{a_dtype}"
    return k


def k_fma_f32_int32_dst():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "int32")
    a = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], d, a, a, a)


def k_fma_f32_int32_source():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float32")
    a = T.alloc_local((4, 1), "float32")
    bad = T.alloc_local((4, 1), "int32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], d, a,
                      bad,
                      a)


def k_add_u32_float32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "uint32")
    x = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.u32"], d, d,
                      x)


def k_add_s32_float32_dst():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float32")
    a = T.alloc_local((4, 1), "int32")
    T.cuda.tile.apply(T.ptx["add.s32"], d, a, a)


def k_mul_lo_u32_float():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["mul.lo.u32"], d, d, d)


def k_mul_wide_float64_dst():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float64")
    a = T.alloc_local((4, 1), "int32")
    T.cuda.tile.apply(T.ptx["mul.wide.s32"], d, a, a)


def k_add_f64_int64():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "int64")
    T.cuda.tile.apply(T.ptx["add.f64"], d, d, d)


def k_fma_f16_bfloat16():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "bfloat16")
    T.cuda.tile.apply(T.ptx["fma.rn.f16"], d, d, d, d)


def k_fma_bf16_float16():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float16")
    T.cuda.tile.apply(T.ptx["fma.rn.bf16"], d, d, d, d)


def k_fma_f16x2_float32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f16x2"], d, d, d, d)


def k_fma_f16x2_int32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "uint32")
    s = T.alloc_local((4, 1), "int32")
    T.cuda.tile.apply(T.ptx["fma.rn.f16x2"], d, d, s, d)


def k_min_s32_float():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["min.s32"], d, d, d)


def k_neg_f32_int32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "int32")
    T.cuda.tile.apply(T.ptx["neg.f32"], d, d)


def k_sqrt_f32_int_dst():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "int32")
    a = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["sqrt.rn.f32"], d, a)


def k_cvt_source_float_in_s32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float32")
    a = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["cvt.rn.f32.s32"], d, a)


def k_cvt_dst_float_in_s32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float32")
    a = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["cvt.rzi.s32.f32"], d, a)


def k_cvt_f16_dst_uint32():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "int16")
    a = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["cvt.rn.f16.f32"], d, a)


def k_u64_in_u32_slot():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "uint32")
    w = T.alloc_local((4, 1), "uint64")
    T.cuda.tile.apply(T.ptx["add.u32"], d, d, w)


def k_f16_in_f32_slot():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "float32")
    h = T.alloc_local((4, 1), "float16")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], d, h, d, d)


def k_ld_f32_into_int32(X: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "int32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, X)


def k_st_u32_from_float(X: T.Tensor((4, 1), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["st.global.u32"], X, r)


def k_ld_s64_into_float64(X: T.Tensor((4, 1), "int64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float64")
    T.cuda.tile.apply(T.ptx["ld.global.s64"], r, X)


def k_mma_int32_d():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((8,), "uint32")
    b = T.alloc_local((4,), "uint32")
    d = T.alloc_local((4,), "int32")
    T.cuda.tile.apply(T.ptx[MMA], d.view(1, 1, 16, 8, layout=ld), a.view(1, 2, 16, 8, layout=la),
                      b.view(1, 2, 8, 8, layout=lb), 0.0, scope="warp")


def k_mma_float32_a():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((8,), "float32")
    b = T.alloc_local((4,), "uint32")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], d.view(1, 1, 16, 8, layout=ld),
                      a.view(1, 2, 16, 8, layout=la),
                      b.view(1, 2, 8, 8, layout=lb), 0.0, scope="warp")


def k_mma_int32_b():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((8,), "uint32")
    b = T.alloc_local((4,), "int32")
    d = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], d.view(1, 1, 16, 8, layout=ld), a.view(1, 2, 16, 8, layout=la),
                      b.view(1, 2, 8, 8, layout=lb),
                      0.0, scope="warp")


def k_mma_int32_c():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((8,), "uint32")
    b = T.alloc_local((4,), "uint32")
    d = T.alloc_local((4,), "float32")
    c = T.alloc_local((4,), "int32")
    T.cuda.tile.apply(T.ptx[MMA], d.view(1, 1, 16, 8, layout=ld), a.view(1, 2, 16, 8, layout=la),
                      b.view(1, 2, 8, 8, layout=lb),
                      c.view(1, 1, 16, 8, layout=ld), scope="warp")


# ------------------------------------------------------------------ immediates

def k_wait_group_64():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 64)


def k_wait_group_2_31():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 2**31)


def k_wait_group_beyond_64_bits():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 10**30)


def k_wait_group_negative():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], -1)


def k_wait_group_float():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 1.0)


def k_wait_group_bool():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], True)


def _mbar(opcode, value):
    def k():
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        bar = T.alloc_shared((1,), "uint64")
        T.cuda.tile.apply(T.ptx[opcode], bar, value)
    return k


def k_mbar_init_zero():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 0)


def k_mbar_init_2_20():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 2**20)


def k_mbar_init_u32_max():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bar, 2**32 - 1)


def k_expect_tx_2_20():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 2**20)


def k_bulk_copy_1mib(A: T.Tensor((64, 32), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared((64, 32), "uint32")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[COPY], tile, A, bar, copy_bytes=2**20)


def k_bulk_copy_wraps_at_2_32(A: T.Tensor((64, 32), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared((64, 32), "uint32")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[COPY], tile, A, bar, copy_bytes=2**32 + 128)


C = Case
WANT_F32 = "float32 (or its bits as uint32)"
WAIT = 'T.ptx["cp.async.wait_group"]'
CASES = [
    C("fma_f32_int32_destination", k_fma_f32_int32_dst, "fma.rn.f32", ("operand dst", "int32", WANT_F32)),
    C("fma_f32_int32_source", k_fma_f32_int32_source, "bad,", ("operand b", "int32", WANT_F32)),
    C("add_u32_float32_register", k_add_u32_float32, "x)", ("operand b", "float32", "an integer of 32 bits")),
    C("add_s32_float32_destination", k_add_s32_float32_dst, "add.s32", ("operand dst", "float32", ".s32 slot")),
    C("mul_lo_u32_on_floats", k_mul_lo_u32_float, "mul.lo.u32", ("operand dst", "float32")),
    C("mul_wide_into_float64", k_mul_wide_float64_dst, "mul.wide.s32", ("operand dst", "float64", ".s64 slot")),
    C("add_f64_int64_registers", k_add_f64_int64, "add.f64", ("operand dst", "int64", "float64 (or its bits as "
                                                                                   "uint64)")),
    C("fma_f16_bfloat16_registers", k_fma_f16_bfloat16, "fma.rn.f16", ("bfloat16", "float16 (or its bits as "
                                                                                   "uint16)")),
    C("fma_bf16_float16_registers", k_fma_bf16_float16, "fma.rn.bf16", ("float16", "bfloat16 (or its bits")),
    C("fma_f16x2_float32_registers", k_fma_f16x2_float32, "fma.rn.f16x2", ("float32", "packed pair's bits as "
                                                                                      "uint32")),
    C("fma_f16x2_int32_source", k_fma_f16x2_int32, "fma.rn.f16x2", ("operand b", "int32", "uint32")),
    C("min_s32_on_floats", k_min_s32_float, "min.s32", ("operand dst", "float32")),
    C("neg_f32_on_int32", k_neg_f32_int32, "neg.f32", ("operand dst", "int32")),
    C("sqrt_f32_into_int32", k_sqrt_f32_int_dst, "sqrt.rn.f32", ("operand dst", "int32", WANT_F32)),
    C("cvt_s32_source_is_float", k_cvt_source_float_in_s32, "cvt.rn.f32.s32", ("operand a", "float32",
                                                                                ".s32 slot")),
    C("cvt_s32_destination_is_float", k_cvt_dst_float_in_s32, "cvt.rzi.s32.f32", ("operand dst", "float32")),
    C("cvt_f16_into_int16", k_cvt_f16_dst_uint32, "cvt.rn.f16.f32", ("operand dst", "int16", "float16")),
    C("u64_register_in_u32_slot", k_u64_in_u32_slot, "add.u32", ("operand b", "32 bits", "uint64")),
    C("f16_register_in_f32_slot", k_f16_in_f32_slot, "fma.rn.f32", ("operand a", "32 bits", "float16")),
    C("ld_f32_into_int32", k_ld_f32_into_int32, "ld.global.f32", ("operand dst", "int32", WANT_F32)),
    C("st_u32_from_float32", k_st_u32_from_float, "st.global.u32", ("operand src", "float32", "an integer")),
    C("ld_s64_into_float64", k_ld_s64_into_float64, "ld.global.s64", ("operand dst", "float64", ".s64 slot")),
    C("mma_int32_accumulator", k_mma_int32_d, "T.ptx[MMA]", ("operand D", "int32", WANT_F32)),
    C("mma_float32_a_fragment", k_mma_float32_a, "a.view(1, 2, 16, 8, layout=la),", ("operand A", "float32",
                                                                                     ".f16x2 slot")),
    C("mma_int32_b_fragment", k_mma_int32_b, "b.view(1, 2, 8, 8, layout=lb),", ("operand B", "int32", "uint32")),
    C("mma_int32_c", k_mma_int32_c, "c.view(1, 1, 16, 8, layout=ld)", ("operand C", "int32", WANT_F32)),
    C("wait_group_64", k_wait_group_64, WAIT, ("out of range", "0..63")),
    C("wait_group_2_31", k_wait_group_2_31, WAIT, ("2147483648", "0..63")),
    C("wait_group_beyond_64_bits", k_wait_group_beyond_64_bits, WAIT, ("0..63",)),
    C("wait_group_negative", k_wait_group_negative, WAIT, ("compile-time non-negative int",)),
    C("wait_group_float", k_wait_group_float, WAIT, ("compile-time non-negative int",)),
    C("wait_group_bool", k_wait_group_bool, WAIT, ("compile-time non-negative int",)),
    C("mbarrier_init_count_zero", k_mbar_init_zero, "mbarrier.init", ("out of range", "1..1048575")),
    C("mbarrier_init_count_2_20", k_mbar_init_2_20, "mbarrier.init", ("1048576", "arrival count")),
    C("mbarrier_init_count_u32_max", k_mbar_init_u32_max, "mbarrier.init", ("4294967295", "1..1048575")),
    C("expect_tx_2_20_bytes", k_expect_tx_2_20, "T.ptx[\"mbarrier.arrive.expect_tx",
      ("transaction byte count", "0..1048575")),
    C("bulk_copy_of_1_mib", k_bulk_copy_1mib, "copy_bytes=2**20", ("out of range", "1048560")),
    C("bulk_copy_size_wraps_at_2_32", k_bulk_copy_wraps_at_2_32, "copy_bytes=2**32", ("4294967424", "1048560")),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_isa(case):
    run(case)


@pytest.mark.parametrize("op, d, a, n", [
    ("fma.rn.f32", "float32", "uint32", 4),          # an f32 slot takes f32 bits in a uint32 buffer
    ("fma.rn.f16x2", "uint32", "uint32", 4),         # packed halves in uint32 (the seeds' mma operands)
    ("fma.rn.bf16", "uint16", "bfloat16", 4),        # bf16 as its uint16 bits
    ("add.u32", "int32", "uint32", 3),               # either signedness in an integer slot
    ("add.s32", "uint32", "int32", 3),
    ("mov.b32", "float32", "int32", 2),              # .b32 is pure bits
    ("cvt.rn.f32.s32", "float32", "int32", 2),
    ("cvt.rzi.u32.f32", "int32", "float32", 2),
])
def test_bit_compatible_registers_are_kept(op, d, a, n):
    """What the docs allow stays legal: the slot's own type, its unsigned bit container, either signedness."""
    tiledsl.jit(_reg(op, d, a, n)).compile(target="sm_90")


def test_width_and_kind_checks_meet_in_one_message():
    err = run(C("x", k_fma_f32_int32_dst, "fma.rn.f32", ()))
    assert ".view(dtype=...)" in str(err)


def test_wait_group_63_is_the_largest():
    def k():
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 63)
    assert "cp.async.wait_group 63;" in tiledsl.jit(k).compile(target="sm_90").asm["ptx"]


@pytest.mark.parametrize("opcode, value", [("mbarrier.init.shared::cta.b64", 2**20 - 1),
                                           ("mbarrier.arrive.expect_tx.shared::cta.b64", 0),
                                           ("mbarrier.arrive.expect_tx.shared::cta.b64", 2**20 - 1)])
def test_mbarrier_range_ends_compile(opcode, value):
    tiledsl.jit(_mbar(opcode, value)).compile(target="sm_90")
