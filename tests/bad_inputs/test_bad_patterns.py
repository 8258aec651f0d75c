"""Wrong tile.apply calls: operand counts and kinds, dtypes and bit widths, shapes, overlap, lane ownership,
opcodes without a pattern and qualifiers the target lacks. Each is a CompilationError at the apply's line
(or the culprit operand's line) that names the operand where one is to blame."""
import pytest

from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid
from badcase import Case, run

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
la = TileLayout(S[(1, 2, 2, 8, 2, 4) : (8, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
lb = TileLayout(S[(1, 2, 8, 2, 4) : (4, 2, 4 @ laneid, 1, 1 @ laneid)])
ld = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
# D's layout with lane stride 2 where the mma lane map needs 1: coordinates land on lanes that do not own them
ld_wrong_lane = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 2 @ laneid, 1)])
# A with M_repeat = 2 (16 registers)
la_m2 = TileLayout(S[(2, 2, 2, 8, 2, 4) : (8, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
# D with N_repeat = 2 whose two repeats share the same four registers
ld_n2_overlap = TileLayout(S[(1, 2, 2, 8, 4, 2) : (4, 0, 2, 4 @ laneid, 1 @ laneid, 1)])
# B with N_repeat = 2, and a C of the wrong rank
lb_n2 = TileLayout(S[(2, 2, 8, 2, 4) : (4, 2, 4 @ laneid, 1, 1 @ laneid)])
lc_2 = TileLayout(S[(2, 2, 8, 4, 2) : (4, 2, 4 @ laneid, 1 @ laneid, 1)])
# two words per row, four storage elements apart
strided_pairs = TileLayout(S[(2, 2) : (1, 4)])
# four repeats of a one-register slot, all in register 0
overlap4 = TileLayout(S[(4, 1) : (0, 1)])


def k_mma_three_operands():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, scope="warp")


def k_mma_scalar_destination():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    T.cuda.tile.apply(T.ptx[MMA], T.float32(0), av, bv, T.float32(0), scope="warp")


def k_mma_shared_operand():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ash = T.alloc_shared((1, 2, 16, 8), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, ash, bv, T.float32(0), scope="warp")


def k_mma_global_operand(A: T.Tensor((1, 2, 16, 8), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, A, bv, T.float32(0), scope="warp")


def k_mma_thread_scope():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0))


def k_mma_f16_words():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "float32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(dtype="float16").view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warp")


def k_mma_fp64_accumulator():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float64")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warp")


def k_mma_repeat_mismatch():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((16,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(2, 2, 16, 8, layout=la_m2)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warp")


def k_mma_atom_mismatch():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32"], dv, av, bv, T.float32(0),
                      scope="warp")


def k_mma_wrong_lane_stride():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld_wrong_lane)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warp")


def k_mma_unlaid_registers():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((128,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warp")


def k_mma_overlapping_d():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((8,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(2, 2, 8, 8, layout=lb_n2)
    dv = dr.view(1, 2, 16, 8, layout=ld_n2_overlap)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warp")


def k_mma_mixed_types():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.bf16.f32"], dv, av, bv, T.float32(0),
                      scope="warp")


def k_mma_unsupported_shape():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"], dr, dr, dr, dr, scope="warp")


def k_mma_bf16_on_sm75():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"], dv, av, bv, T.float32(0),
                      scope="warp")


def k_mma_keyword():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warp", alpha=2.0)


def k_mma_c_shape():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    cr = T.alloc_local((8,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    cv = cr.view(2, 16, 8, layout=lc_2)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, cv, scope="warp")


def k_mma_int_scalar_c():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.int64(0), scope="warp")


def k_mma_cluster_scope():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="cluster")


def k_mma_warpgroup_in_64():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, T.float32(0), scope="warpgroup")


def k_fma_scalar_destination(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], T.float32(0), r, r, r)


def k_fma_three_operands(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, r)


def k_fma_global_operand(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, A, T.float32(2), T.float32(1))


def k_fma_f16_registers(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float16")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, T.float32(2), T.float32(1))


def k_fma_repeat_mismatch(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    s = T.alloc_local((2, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, s, T.float32(2), T.float32(1))


def k_fma_atom_mismatch(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 2), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, T.float32(2), T.float32(1))


def k_fma_no_rounding(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.f32"], r, r, T.float32(2), T.float32(1))


def k_fma_f32x2_sm90(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "uint64")
    T.cuda.tile.apply(T.ptx["fma.rn.f32x2"], r, r, r, r)


def k_add_bf16_sm80(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "bfloat16")
    T.cuda.tile.apply(T.ptx["add.rn.bf16"], r, r, r)


def k_add_two_roundings(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rn.rz.f32"], r, r, r)


def k_add_bad_type(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.f99"], r, r, r)


def k_mul_int_without_lo(A: T.Tensor((4, 1), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "int32")
    T.cuda.tile.apply(T.ptx["mul.s32"], r, r, r)


def k_mov_ambiguous(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 2), "uint32")
    T.cuda.tile.apply(T.ptx["mov.b32"], r, r)


def k_packed_float_constant(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "uint32")
    T.cuda.tile.apply(T.ptx["add.rn.f16x2"], r, r, 1.0)


def k_scalar_wrong_width(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rn.f32"], r, r, T.float64(1))


def k_pred_buffer(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rn.f32"], r, r, r, pred=r)


def k_preserve_without_pred(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rn.f32"], r, r, r, preserve_dst=True)


def k_preserve_runtime(A: T.Tensor((4, 1), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rn.f32"], r, r, r, pred=n > 0, preserve_dst=n > 1)


def k_unknown_parameter(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rn.f32"], r, r, r, rounding="rn")


def k_overlapping_destination(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((1,), "float32")
    rv = r.view(4, 1, layout=overlap4)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], rv, rv, T.float32(2), T.float32(1))


def k_ld_overlapping_destination(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((1,), "float32")
    rv = r.view(4, 1, layout=overlap4)
    T.cuda.tile.apply(T.ptx["ld.global.f32"], rv, A)


def k_runtime_register_index(A: T.Tensor((4, 1), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r[n:n + 1], A[0:1])


def k_warp_thread_instr_not_owned(A: T.Tensor((32, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((32, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A, scope="warp")


def k_ld_register_in_shared(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    s = T.alloc_shared((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], s, A)


def k_ld_global_from_shared(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    s = T.alloc_shared((4, 1), "float32")
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, s)


def k_ld_vector_atom_mismatch(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v2.f32"], r, A)


def k_ld_vector_misaligned(A: T.Tensor((4, 3), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 2), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v2.f32"], r, A[0:4, 1:3])


def k_ld_vector_not_consecutive(A: T.Tensor((8,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((2, 2), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v2.f32"], r, A.view(2, 2, layout=strided_pairs))


def k_ld_missing_cache_policy(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.L2::cache_hint.f32"], r, A)


def k_ld_unwanted_cache_policy(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A, cache_policy=T.uint64(0))


def k_ld_no_space(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.ca.f32"], r, A)


def k_ld_f16(A: T.Tensor((4, 1), "float16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float16")
    T.cuda.tile.apply(T.ptx["ld.global.f16"], r, A)


def k_ld_scalar_destination(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply(T.ptx["ld.global.f32"], T.float32(0), A)


def k_st_scalar_into_vector(A: T.Tensor((4, 2), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply(T.ptx["st.global.v2.f32"], A, T.float32(0))


def k_st_wrong_width(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["st.global.f64"], A, r)


def k_unknown_opcode(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["frobnicate.f32"], r, A)


def k_opcode_not_string(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply(T.ptx[42], A)


def k_opcode_plain_string(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply("ld.global.f32", r, A)


def k_apply_no_arguments(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply()


def k_tuple_operand(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], (r, r), A)


def k_bad_scope(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A, scope="galaxy")


def k_opcode_with_spaces(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx[" ld.global.f32"], r, A)


C = Case
CASES = [
    C("mma_three_operands", k_mma_three_operands, "dv, av, bv, scope", ("takes 4 operands (D, A, B, C), got 3",)),
    C("mma_scalar_destination", k_mma_scalar_destination, "T.float32(0), av", ("operand D", "buffer view")),
    C("mma_shared_where_local_required", k_mma_shared_operand, "dv, ash, bv",
      ("operand A", "registers (T.alloc_local)", "shared memory")),
    C("mma_global_where_local_required", k_mma_global_operand, "dv, A, bv", ("operand A", "global memory")),
    C("mma_at_thread_scope", k_mma_thread_scope, "T.float32(0))", ("warp instruction", "scope='warp'")),
    C("mma_16bit_operand", k_mma_f16_words, "T.ptx[MMA]", ("operand A", "width must be 32 bits", "float16")),
    C("mma_64bit_accumulator", k_mma_fp64_accumulator, "T.ptx[MMA]", ("operand D", "32 bits", "float64")),
    C("mma_repeat_mismatch", k_mma_repeat_mismatch, "T.ptx[MMA]", ("operand A", "M_repeat=1")),
    C("mma_atom_mismatch_k8", k_mma_atom_mismatch, "m16n8k8", ("operand A", "atom", "(16, 4)")),
    C("mma_wrong_lane_stride", k_mma_wrong_lane_stride, "T.ptx[MMA]", ("operand D", "ownership", "lane")),
    C("mma_registers_without_lane_layout", k_mma_unlaid_registers, "T.ptx[MMA]", ("operand D", "ownership")),
    C("mma_overlapping_d", k_mma_overlapping_d, "T.ptx[MMA]", ("operand D", "overlap")),
    C("mma_mixed_input_types", k_mma_mixed_types, "f16.bf16", ("same element type",)),
    C("mma_unsupported_shape", k_mma_unsupported_shape, "m16n8k32", ("no explicit tile pattern",)),
    C("mma_bf16_on_sm75", k_mma_bf16_on_sm75, "bf16.bf16", ("needs sm_80", "sm_75"), target="sm_75"),
    C("mma_keyword_parameter", k_mma_keyword, "alpha=2.0", ("unknown parameter 'alpha'",)),
    C("mma_c_shape", k_mma_c_shape, "dv, av, bv, cv", ("operand C",)),
    C("mma_64bit_scalar_c", k_mma_int_scalar_c, "T.int64(0)", ("operand C", "int64")),
    C("mma_cluster_scope", k_mma_cluster_scope, "scope=\"cluster\"", ("cluster",)),
    C("mma_warpgroup_in_64_threads", k_mma_warpgroup_in_64, "scope=\"warpgroup\"", ("warpgroup", "128")),
    C("fma_scalar_destination", k_fma_scalar_destination, "T.float32(0), r, r, r",
      ("operand dst", "destination must be a register buffer")),
    C("fma_three_operands", k_fma_three_operands, "T.ptx[\"fma.rn.f32\"], r, r, r)", ("takes 4 operands",)),
    C("fma_global_where_local_required", k_fma_global_operand, "r, A, T.float32", ("operand a", "global memory")),
    C("fma_16bit_registers", k_fma_f16_registers, "fma.rn.f32", ("operand dst", "32 bits", "float16")),
    C("fma_repeat_mismatch", k_fma_repeat_mismatch, "r, s, T.float32", ("operand a", "repeat shape")),
    C("fma_atom_mismatch", k_fma_atom_mismatch, "fma.rn.f32", ("operand dst", "atom", "(1,)")),
    C("fma_without_rounding", k_fma_no_rounding, "fma.f32", ("fma.f32 needs one of", ".rn")),
    C("fma_f32x2_on_sm90", k_fma_f32x2_sm90, "fma.rn.f32x2", ("needs sm_100", "sm_90")),
    C("add_bf16_on_sm80", k_add_bf16_sm80, "add.rn.bf16", ("needs sm_90", "sm_80"), target="sm_80"),
    C("add_two_roundings", k_add_two_roundings, "add.rn.rz.f32", ("qualifier",)),
    C("add_unknown_type", k_add_bad_type, "add.f99", ("'f99' is not a register type of add",)),
    C("mul_int_without_lo_hi", k_mul_int_without_lo, "mul.s32", ("needs one of .hi, .lo",)),
    C("mov_ambiguous_forms", k_mov_ambiguous, "mov.b32", ("exactly one must match",)),
    C("packed_constant_as_float", k_packed_float_constant, "f16x2", ("operand b", "must encode both values")),
    C("scalar_wrong_width", k_scalar_wrong_width, "T.float64(1)", ("operand b", "64 bits", "32-bit")),
    C("pred_is_a_buffer", k_pred_buffer, "pred=r", ("pred must be a run-time bool",)),
    C("preserve_dst_without_pred", k_preserve_without_pred, "preserve_dst=True", ("needs pred",)),
    C("preserve_dst_runtime", k_preserve_runtime, "preserve_dst=n > 1", ("compile-time bool",)),
    C("unknown_parameter", k_unknown_parameter, "rounding=", ("unknown parameter 'rounding'",)),
    C("overlapping_destination", k_overlapping_destination, "rv, rv, T.float32", ("operand dst", "overlap")),
    C("ld_overlapping_destination", k_ld_overlapping_destination, "rv, A)", ("operand dst", "overlap")),
    C("runtime_register_index", k_runtime_register_index, "r[n:n + 1]", ("operand dst", "compile-time")),
    C("thread_instr_lane_not_owner", k_warp_thread_instr_not_owned, "scope=\"warp\"",
      ("operand dst", "ownership", "issuing lane 1")),
    C("ld_register_in_shared", k_ld_register_in_shared, "], s, A)", ("operand dst", "registers", "shared")),
    C("ld_global_from_shared", k_ld_global_from_shared, "], r, s)", ("operand src", "global memory")),
    C("ld_vector_atom_mismatch", k_ld_vector_atom_mismatch, "ld.global.v2.f32", ("operand src", "(2,)")),
    C("ld_vector_misaligned", k_ld_vector_misaligned, "A[0:4, 1:3]", ("operand src", "aligned to 8 bytes")),
    C("ld_vector_not_consecutive", k_ld_vector_not_consecutive, "strided_pairs", ("operand src", "consecutive")),
    C("ld_missing_cache_policy", k_ld_missing_cache_policy, "cache_hint", ("cache_policy", "required")),
    C("ld_unwanted_cache_policy", k_ld_unwanted_cache_policy, "cache_policy=", ("only allowed",)),
    C("ld_without_state_space", k_ld_no_space, "ld.ca.f32", ("state space",)),
    C("ld_f16_type", k_ld_f16, "ld.global.f16", ("'f16' is not a supported ld type",)),
    C("ld_scalar_destination", k_ld_scalar_destination, "T.float32(0), A", ("operand dst",)),
    C("st_scalar_into_vector", k_st_scalar_into_vector, "st.global.v2.f32", ("single-word store",)),
    C("st_wrong_width", k_st_wrong_width, "st.global.f64", ("64 bits", "float32")),
    C("opcode_without_pattern", k_unknown_opcode, "frobnicate", ("no explicit tile pattern for frobnicate.f32",)),
    C("opcode_not_a_string", k_opcode_not_string, "T.ptx[42]", ("takes the opcode as a string",)),
    C("opcode_plain_string", k_opcode_plain_string, "\"ld.global.f32\", r, A", ("must be T.ptx",)),
    C("apply_without_arguments", k_apply_no_arguments, "T.cuda.tile.apply()", ("T.ptx[opcode]",)),
    C("tuple_operand", k_tuple_operand, "(r, r)", ("a tile operand must be a buffer view or a scalar",)),
    C("bad_scope", k_bad_scope, "galaxy", ("scope must be one of",)),
    C("opcode_with_spaces", k_opcode_with_spaces, "\" ld.global", ("no explicit tile pattern",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_tile_patterns(case):
    run(case)
