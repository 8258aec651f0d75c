"""Illegal tile-pattern calls: each is a CompilationError at the user's line that names the culprit.

Every kernel below differs from a legal one in one thing. The offending line carries the comment `# ILLEGAL`;
the test finds it with inspect and compares it with the error's line, and checks that the message names the
operand (or parameter, or opcode) to blame. Ownership failures must show a concrete counterexample: a lane, a
register and a coordinate.
"""
import inspect

import numpy as np
import pytest

import tiledsl
from test_patterns_layouts import mma_layouts
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, warpid

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
MMA8 = "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32"
_L = mma_layouts(16, 1, 1, 1)
SA, LA = _L["A"][0], _L["A"][1]                      # (1, 1, 16, 8), 4 registers
SB, LB = _L["B"][0], _L["B"][1]                      # (1, 1, 8, 8), 2 registers
SD, LD = _L["D"][0], _L["D"][1]                      # (1, 1, 16, 8), 4 registers
_W = mma_layouts(16, 1, 1, 1, group=4)
WA, WLA, WB, WLB, WD, WLD = _W["A"][0], _W["A"][1], _W["B"][0], _W["B"][1], _W["D"][0], _W["D"][1]
# A's lane map with the two lane factors swapped: lane 1 would hold what lane 4 must
LA_SWAPPED = TileLayout(S[(1, 1, 2, 8, 2, 4) : (4, 4, 1, 1 @ laneid, 2, 8 @ laneid)])
# D for N_repeat = 2 where both repeats write the same four registers
LD_SHARED = TileLayout(S[(1, 2, 2, 8, 4, 2) : (4, 0, 2, 4 @ laneid, 1 @ laneid, 1)])
# A for warpgroup scope whose group axis is not bound to the warp: every warp claims warp 0's registers
WLA_NO_WARP = TileLayout(S[(4, 1, 1, 2, 8, 2, 4) : (0, 4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
LANE1 = TileLayout(S[(32, 2, 1) : (1 @ laneid, 1, 1)])         # warp scope, lane-owned, two repeats
NO_LANE = TileLayout(S[(32, 2, 1) : (0, 1, 1)])                # the group axis is not bound to the lane
SAME_REG = TileLayout(S[(4, 1) : (0, 1)])                       # four repeats, one register
FRAG4 = TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
FRAG2 = TileLayout(S[(2, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
FRAG4_T = TileLayout(S[(4, 8, 4) : (1, 1 @ laneid, 8 @ laneid)])        # lanes transposed
FRAG_G4 = TileLayout(S[(4, 1, 4, 8, 4) : (1 @ warpid, 4, 1, 4 @ laneid, 1 @ laneid)])
LB_N2 = TileLayout(S[(2, 1, 8, 2, 4) : (2, 2, 4 @ laneid, 1, 1 @ laneid)])    # B for N_repeat = 2
LA_M2 = TileLayout(S[(2, 1, 2, 8, 2, 4) : (4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])  # A for M_repeat = 2
LB8 = mma_layouts(8, 1, 1, 1)["B"][1]
PAIRS_APART = TileLayout(S[(4, 2) : (1, 4)])                    # the two words of a v2 four elements apart


# ------------------------------------------------------------------ mma.sync

def k_mma_d_in_shared():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    ds = T.alloc_shared(SD, "float32")
    T.cuda.tile.apply(T.ptx[MMA], ds, ar.view(SA, layout=LA), br.view(SB, layout=LB), 0.0, scope="warp")  # ILLEGAL


def k_mma_a_half_elements():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((1, 1, 16, 16), "float16")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), ar, br.view(SB, layout=LB), 0.0, scope="warp")  # ILLEGAL


def k_mma_b_atom_of_k8():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((1, 1, 8, 4), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), ar.view(SA, layout=LA), br, 0.0, scope="warp")  # ILLEGAL


def k_mma_k_repeats_disagree():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((1, 2, 8, 8), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), ar.view(SA, layout=LA), br, 0.0, scope="warp")  # ILLEGAL


def k_mma_c_shape():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    cr = T.alloc_local((16, 8), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), ar.view(SA, layout=LA), br.view(SB, layout=LB), cr, scope="warp")  # ILLEGAL


def k_mma_c_half_scalar():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), ar.view(SA, layout=LA), br.view(SB, layout=LB), T.float16(0), scope="warp")  # ILLEGAL


def k_mma_a_lane_map():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), ar.view(SA, layout=LA_SWAPPED), br.view(SB, layout=LB), 0.0, scope="warp")  # ILLEGAL


def k_mma_d_overlap():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    bv = br.view(2, 1, 8, 8, layout=LB_N2)
    T.cuda.tile.apply(T.ptx[MMA], dr.view(1, 2, 16, 8, layout=LD_SHARED), ar.view(SA, layout=LA), bv, 0.0, scope="warp")  # ILLEGAL


def k_mma_warpgroup_without_warp_axis():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(WD, layout=WLD), ar.view(WA, layout=WLA_NO_WARP), br.view(WB, layout=WLB), 0.0, scope="warpgroup")  # ILLEGAL


def k_mma_warpgroup_group_extent():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), ar.view(WA, layout=WLA), br.view(WB, layout=WLB), 0.0, scope="warpgroup")  # ILLEGAL


def k_mma_runtime_register_index(n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((8,), "uint32")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    av = ar.view(2, 1, 16, 8, layout=LA_M2)
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), av[n:n + 1, 0:1, 0:16, 0:8], br.view(SB, layout=LB), 0.0, scope="warp")  # ILLEGAL


def k_mma_b_scalar():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA], dr.view(SD, layout=LD), ar.view(SA, layout=LA), T.uint32(0), 0.0, scope="warp")  # ILLEGAL


def k_mma_k8_a_with_k16_atom():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((1,), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx[MMA8], dr.view(SD, layout=LD), ar.view(SA, layout=LA), br.view(1, 1, 8, 4, layout=LB8), 0.0, scope="warp")  # ILLEGAL


# ------------------------------------------------------------------ register family

def k_fma_scalar_destination():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], T.float32(0), r, r, r)  # ILLEGAL


def k_fma_operand_in_global(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, A, 2.0, r)  # ILLEGAL


def k_fma_packed_float_constant():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "uint32")
    T.cuda.tile.apply(T.ptx["fma.rn.f16x2"], r, r, 1.5, r)  # ILLEGAL


def k_fma_width_mismatch():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    h = T.alloc_local((4, 1), "float16")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, r, h)  # ILLEGAL


def k_fma_repeat_mismatch():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    q = T.alloc_local((2, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, q, r)  # ILLEGAL


def k_fma_warp_scope_not_lane_owned():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((2,), "float32")
    q = T.alloc_local((2,), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r.view(32, 2, 1, layout=NO_LANE), q.view(32, 2, 1, layout=LANE1), 2.0, 1.0, scope="warp")  # ILLEGAL


def k_add_destination_overlap():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4,), "float32")
    q = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["add.rn.f32"], r.view(4, 1, layout=SAME_REG), q, q)  # ILLEGAL


def k_cvt_pack_from_half():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((2, 1), "uint32")
    a = T.alloc_local((2, 1), "float16")
    b = T.alloc_local((2, 1), "float32")
    T.cuda.tile.apply(T.ptx["cvt.rn.f16x2.f32"], d, a, b)  # ILLEGAL


def k_fma_double_scalar():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, r, T.float64(1))  # ILLEGAL


def k_fma_preserve_without_pred():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, r, r, preserve_dst=True)  # ILLEGAL


def k_fma_runtime_preserve(f: T.bool):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, r, r, pred=f, preserve_dst=f)  # ILLEGAL


def k_fma_int_pred(n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, r, r, pred=n)  # ILLEGAL


def k_fma_warp_group_extent():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((2,), "float32")
    q = T.alloc_local((16, 2, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r.view(32, 2, 1, layout=LANE1), q, 2.0, 1.0, scope="warp")  # ILLEGAL


def k_fma_f32x2_on_sm90():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "uint64")
    T.cuda.tile.apply(T.ptx["fma.rn.f32x2"], r, r, r, r)  # ILLEGAL


def k_fma_qualifier_order():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.sat.rn.f32"], r, r, r, r)  # ILLEGAL


def k_fma_needs_rounding():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["fma.f32"], r, r, r, r)  # ILLEGAL


def k_cvt_missing_rounding():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    d = T.alloc_local((4, 1), "int32")
    a = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["cvt.s32.f32"], d, a)  # ILLEGAL


# ------------------------------------------------------------------ ld / st

def k_ld_v4_misaligned(A: T.Tensor((4, 8), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 4), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.f32"], r, A[0:4, 2:6])  # ILLEGAL


def k_ld_v4_runtime_alignment(A: T.Tensor((4, 16), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 4), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.f32"], r, A[0:4, n:n + 4])  # ILLEGAL


def k_ld_v2_words_apart(A: T.Tensor((8,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 2), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v2.f32"], r, A.view(4, 2, layout=PAIRS_APART))  # ILLEGAL


def k_st_shared_into_global(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["st.shared.f32"], A, r)  # ILLEGAL


def k_ld_into_shared(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    s = T.alloc_shared((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], s, A)  # ILLEGAL


def k_ld_v4_atom(A: T.Tensor((4, 2), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 2), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.f32"], r, A)  # ILLEGAL


def k_ld_cache_hint_without_policy(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.L2::cache_hint.f32"], r, A)  # ILLEGAL


# ------------------------------------------------------------------ ldmatrix / stmatrix

def k_ldmatrix_from_global(A: T.Tensor((4, 8, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], r.view(4, 8, 4, layout=FRAG4), A, scope="warp")  # ILLEGAL


def k_ldmatrix_lanes_transposed():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"], r.view(4, 8, 4, layout=FRAG4_T), sm, scope="warp")  # ILLEGAL


def k_ldmatrix_row_misaligned():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 6), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], r.view(4, 8, 4, layout=FRAG4), sm[0:4, 0:8, 2:6], scope="warp")  # ILLEGAL


def k_ldmatrix_x2_with_four_matrices():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x2.shared.b16"], r.view(4, 8, 4, layout=FRAG4), sm, scope="warp")  # ILLEGAL


def k_stmatrix_into_registers():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((2,), "uint32")
    q = T.alloc_local((2,), "uint32")
    T.cuda.tile.apply(T.ptx["stmatrix.sync.aligned.m8n8.x2.shared.b16"], q.view(2, 8, 4, layout=FRAG2), r.view(2, 8, 4, layout=FRAG2), scope="warp")  # ILLEGAL


def k_ldmatrix_half_shared():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "float16")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], r.view(4, 8, 4, layout=FRAG4), sm, scope="warp")  # ILLEGAL


def k_ldmatrix_cta_group_extent():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    sm = T.alloc_shared((4, 1, 4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], r.view(4, 1, 4, 8, 4, layout=FRAG_G4), sm, scope="cta")  # ILLEGAL


def k_ldmatrix_b8():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b8"], r.view(4, 8, 4, layout=FRAG4), sm, scope="warp")  # ILLEGAL


def k_ldmatrix_shared_cta_on_sm75():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((4, 8, 4), "uint32")
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared::cta.b16"], r.view(4, 8, 4, layout=FRAG4), sm, scope="warp")  # ILLEGAL


# ------------------------------------------------------------------ cp.async

def k_cp_async_dst_in_global(A: T.Tensor((32, 4), "uint32"), B: T.Tensor((32, 4), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], B, A, chunk_bytes=16, scope="warp")  # ILLEGAL


def k_cp_async_src_in_shared():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    sn = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, sn, chunk_bytes=16, scope="warp")  # ILLEGAL


def k_cp_async_src_misaligned(A: T.Tensor((32, 6), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, A[0:32, 2:6], chunk_bytes=16, scope="warp")  # ILLEGAL


def k_cp_async_atom_of_doubles(A: T.Tensor((32, 4), "float64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "float64")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm, A, chunk_bytes=16, scope="warp")  # ILLEGAL


def k_cp_async_chunk_12(A: T.Tensor((32, 3), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 3), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.ca.shared.global"], sm, A, chunk_bytes=12, scope="warp")  # ILLEGAL


def k_cp_async_two_tails(A: T.Tensor((32, 4), "uint32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.ca.shared.global"], sm, A, chunk_bytes=16, src_size=n, ignore_src=n > 0, scope="warp")  # ILLEGAL


def k_cp_async_repeats_disagree(A: T.Tensor((32, 8), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.ca.shared.global"], sm.view(32, 1, 4), A.view(32, 2, 4), chunk_bytes=16, scope="warp")  # ILLEGAL


def k_cp_async_wait_negative():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], -1)  # ILLEGAL


def k_cp_async_float_src_size(A: T.Tensor((32, 4), "uint32"), x: T.float32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.ca.shared.global"], sm, A, chunk_bytes=16, src_size=x, scope="warp")  # ILLEGAL


def k_no_pattern():
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["copysign.f32"], r, r, r)  # ILLEGAL


# ------------------------------------------------------------------ the table: (kernel, words, target)

OWNERSHIP = ("ownership", "lane", "register", "coordinate")
CASES = [
    (k_mma_d_in_shared, ("operand D", "registers", "shared memory")),
    (k_mma_a_half_elements, ("operand A", "32 bits", "float16")),
    (k_mma_b_atom_of_k8, ("operand B", "(8, 8)")),
    (k_mma_k_repeats_disagree, ("operand B", "K_repeat=1")),
    (k_mma_c_shape, ("operand C", "D's shape")),
    (k_mma_c_half_scalar, ("operand C", "float16", "32-bit")),
    (k_mma_a_lane_map, ("operand A",) + OWNERSHIP),
    (k_mma_d_overlap, ("operand D", "overlap")),
    (k_mma_warpgroup_without_warp_axis, ("operand A", "warp 1") + OWNERSHIP),
    (k_mma_warpgroup_group_extent, ("operand D", "group axes", "(4,)")),
    (k_mma_runtime_register_index, ("operand A", "compile-time constant")),
    (k_mma_b_scalar, ("operand B", "scalar")),
    (k_mma_k8_a_with_k16_atom, ("operand A", "(16, 4)")),
    (k_fma_scalar_destination, ("operand dst", "destination")),
    (k_fma_operand_in_global, ("operand a", "registers", "global memory")),
    (k_fma_packed_float_constant, ("operand b", "packed f16x2", "both values")),
    (k_fma_width_mismatch, ("operand c", "32 bits", "float16")),
    (k_fma_repeat_mismatch, ("operand b", "repeat shape")),
    (k_fma_warp_scope_not_lane_owned, ("operand dst",) + OWNERSHIP),
    (k_add_destination_overlap, ("operand dst", "overlap")),
    (k_cvt_pack_from_half, ("operand a", "32 bits", "float16")),
    (k_fma_double_scalar, ("operand c", "float64", "32-bit")),
    (k_fma_preserve_without_pred, ("preserve_dst", "needs pred")),
    (k_fma_runtime_preserve, ("preserve_dst", "compile-time bool")),
    (k_fma_int_pred, ("pred must be a run-time bool", "int32")),
    (k_fma_warp_group_extent, ("operand a", "group axes", "(32,)")),
    (k_fma_f32x2_on_sm90, ("fma.rn.f32x2", "needs sm_100", "sm_90")),
    (k_fma_qualifier_order, ("fma.sat.rn.f32:", "PTX order: fma.rn.sat.f32")),
    (k_fma_needs_rounding, ("fma.f32", ".rn")),
    (k_cvt_missing_rounding, ("cvt.s32.f32", "rounding", ".rni")),
    (k_ld_v4_misaligned, ("operand src", "aligned to 16 bytes", "byte offset 8")),
    (k_ld_v4_runtime_alignment, ("operand src", "aligned to 16 bytes", "run-time index")),
    (k_ld_v2_words_apart, ("operand src", "8 contiguous bytes", "consecutive")),
    (k_st_shared_into_global, ("operand dst", "shared memory", "global memory")),
    (k_ld_into_shared, ("operand dst", "registers", "shared memory")),
    (k_ld_v4_atom, ("operand src", "(4,)")),
    (k_ld_cache_hint_without_policy, ("cache_policy",)),
    (k_ldmatrix_from_global, ("operand src", "shared memory", "global memory")),
    (k_ldmatrix_lanes_transposed, ("operand dst",) + OWNERSHIP),
    (k_ldmatrix_row_misaligned, ("operand src", "aligned to 16 bytes", "matrix 0 row 0")),
    (k_ldmatrix_x2_with_four_matrices, ("operand dst", "(2, 8, 4)")),
    (k_stmatrix_into_registers, ("operand dst", "shared memory", "registers")),
    (k_ldmatrix_half_shared, ("operand src", "32 bits", "float16")),
    (k_ldmatrix_cta_group_extent, ("operand dst", "group axes", "(2,)")),
    (k_ldmatrix_b8, ("ldmatrix", ".b8", "supported forms")),
    (k_ldmatrix_shared_cta_on_sm75, (".shared::cta", "PTX ISA 7.8", "sm_75")),
    (k_cp_async_dst_in_global, ("operand dst", "shared memory", "global memory")),
    (k_cp_async_src_in_shared, ("operand src", "global memory", "shared memory")),
    (k_cp_async_src_misaligned, ("operand src", "aligned to 16 bytes")),
    (k_cp_async_atom_of_doubles, ("operand dst", "(2,)")),
    (k_cp_async_chunk_12, ("chunk_bytes", "(4, 8, 16)")),
    (k_cp_async_two_tails, ("src_size", "ignore_src", "mutually exclusive")),
    (k_cp_async_repeats_disagree, ("operand src", "repeat shape")),
    (k_cp_async_wait_negative, ("operand N", "non-negative")),
    (k_cp_async_float_src_size, ("src_size", "integer")),
    (k_no_pattern, ("no explicit tile pattern for copysign.f32",)),
]
TARGETS = {k_fma_f32x2_on_sm90: "sm_90", k_ldmatrix_shared_cta_on_sm75: "sm_75"}


def offending_line(fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    hits = [start + i for i, text in enumerate(lines) if text.rstrip().endswith("# ILLEGAL")]
    assert len(hits) == 1, f"{fn.__name__} must mark exactly one line with '# ILLEGAL'"
    return hits[0]


def stand_ins(fn) -> list:
    """Arrays and scalars standing for the kernel's parameters."""
    from tiledsl.lang import language as L
    out = []
    for p in inspect.signature(fn).parameters.values():
        ann = p.annotation
        if isinstance(ann, L.TensorType):
            out.append(np.zeros(ann.shape, ann.dtype.np))
        else:
            out.append(1.0 if getattr(ann, "is_float", False) else (True if ann is T.bool else 1))
    return out


def test_there_are_at_least_thirty_distinct_illegal_kernels():
    assert len({fn for fn, _ in CASES}) == len(CASES) >= 30


@pytest.mark.parametrize("fn, words", CASES, ids=[fn.__name__[2:] for fn, _ in CASES])
def test_illegal_pattern(fn, words):
    with pytest.raises(tiledsl.CompilationError) as info:
        tiledsl.jit(fn).compile(*stand_ins(fn), target=TARGETS.get(fn, "sm_90"))
    err = info.value
    msg = str(err)
    assert "internal" not in msg, msg
    for w in words:
        assert w in msg, f"{w!r} is not in the message:\n{msg}"
    assert err.loc is not None and err.loc.line == offending_line(fn), msg
    assert err.loc.file == inspect.getsourcefile(fn)
    assert msg.splitlines()[0].startswith(f"{err.loc.file}:{err.loc.line}:")


def test_ownership_counterexample_names_the_lane_register_and_coordinate():
    with pytest.raises(tiledsl.CompilationError) as info:
        tiledsl.jit(k_mma_a_lane_map).compile(target="sm_90")
    msg = str(info.value)
    # A's native register 0 of lane 1 is coordinate (0, 1); the swapped layout gives that coordinate to lane 8
    assert "coordinate (0, 0, 0, 1)" in msg and "held by lane 8 in register 0" in msg, msg
    assert "lane 1 register 0 must be held by lane 1" in msg, msg
