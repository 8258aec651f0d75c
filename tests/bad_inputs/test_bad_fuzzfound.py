"""Mistakes the mutation fuzzer (tests/fuzz/) made on the examples' and docs pages' kernels, each cut down to one
line: numbers changed to 0, -1, huge or beyond Python's int-to-text limit (10**5000), opcode qualifiers, dtypes,
scopes and layout axes swapped, names and strings exchanged. Each must be a located TiledslError (or a LaunchError
naming the argument), never an internal exception, a leaked ptxas/LLVM message or a hang."""
import numpy as np
import pytest

import tiledsl
from tiledsl import LaunchError, T
from tiledsl.core.errors import LayoutError
from tiledsl.layout import S, TileLayout, laneid
from badcase import Case, run
from tests.fuzz.judge import LEAK_RE

HUGE = 10 ** 5000          # beyond sys.get_int_max_str_digits(): str() of it raises ValueError
quads = TileLayout(S[(32, 4, 4) : (1 @ laneid, 4, 1)])
per_lane = TileLayout(S[(32, 4, 1) : (1 @ laneid, 1, 1)])


# --- integers beyond Python's digit limit, at every place a number goes ------------------------------------------

def k_huge_block(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=HUGE))
    A[0] = 1.0


def k_huge_literal_block(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=(10**5000)))
    A[0] = 1.0


def k_huge_max_registers(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1, max_registers=HUGE))
    A[0] = 1.0


def k_huge_store(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = HUGE


def k_huge_index(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[HUGE] = 1.0


def k_huge_view_extent(A: T.Tensor((32, 16), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    sm = T.alloc_shared((32, 16), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm.view(32, 4, 4), A.view(32, HUGE, 4), chunk_bytes=16,
                      scope="warp")


def k_huge_register_view(A: T.Tensor((32, 16), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((16,), "uint32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], r.view(32, 4, HUGE, layout=quads), A.view(32, 4, 4), scope="warp")


def k_huge_expect_tx(A: T.Tensor((32, 32), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bar, 64 * HUGE)


def k_huge_alloc(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((HUGE,), "float32")
    A[0] = r[0]


def k_huge_unroll(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in T.unroll(HUGE):
        A[0] = 1.0


def k_huge_fma_constant(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32", layout="default")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, T.float32(HUGE), T.float32(1))


def _huge_annotation():
    def k(A: T.Tensor((HUGE, 4), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        A[0, 0] = 1.0
    return tiledsl.jit(k).compile(np.zeros((4, 4), np.float32), target="sm_90")


# --- immediates and sizes the hardware cannot take ----------------------------------------------------------------

def k_wait_group_huge(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 10**30)


def k_wait_group_2_32(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 4294967296)


def k_wait_group_negative(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], -1)


def k_wait_group_float(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0.5)


def k_local_2mb(A: T.Tensor((4,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((524288,), "uint32")
    A[0] = r[0]


def k_local_10_30(A: T.Tensor((4,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((10**30,), "uint32")
    A[0] = r[0]


def k_shared_10_30(A: T.Tensor((4,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    sm = T.alloc_shared((10**30,), "uint32")
    A[0] = sm[0]


def k_power_folds_forever(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(10**4294967296), block=1))
    A[0] = 1.0


def k_mma_65536_k_steps(A: T.Tensor((4,), "float32")):
    # the docs page's mma_tiles with KR = 65536: 131072 mma instructions per thread from one call
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    ar = T.alloc_local((2 * 65536 * 4,), "uint32")
    br = T.alloc_local((2 * 65536 * 2,), "uint32")
    dr = T.alloc_local((16,), "float32")
    T.cuda.tile.apply(
        T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"],
        dr.view(2, 2, 16, 8, layout=LD2),
        ar.view(2, 65536, 16, 8, layout=LA_BIG),
        br.view(2, 65536, 8, 8, layout=LB_BIG),
        T.float32(0), scope="warp")


def k_fma_70000_repeats(A: T.Tensor((4,), "float32")):
    # 70000 fma from one apply (280 KB of registers, under the local-memory limit): the expansion budget refuses it
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((70000,), "float32")
    v = r.view(70000, 1)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], v, v, v, v)
    A[0] = r[0]


LA_BIG = TileLayout(S[(2, 65536, 2, 8, 2, 4) : (65536 * 4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
LB_BIG = TileLayout(S[(2, 65536, 8, 2, 4) : (65536 * 2, 2, 4 @ laneid, 1, 1 @ laneid)])
LD2 = TileLayout(S[(2, 2, 2, 8, 4, 2) : (8, 4, 2, 4 @ laneid, 1 @ laneid, 1)])


# --- mutations the compiler already locates (kept so they stay located) -------------------------------------------

def k_fma_f16_on_f32_registers(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32", layout="default")
    T.cuda.tile.apply(T.ptx["fma.rn.f16"], r, r, T.float32(2), T.float32(1))


def k_fma_without_rounding(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32", layout="default")
    T.cuda.tile.apply(T.ptx["fma.f32"], r, r, T.float32(2), T.float32(1))


def k_fma_qualifier_twice(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32", layout="default")
    T.cuda.tile.apply(T.ptx["fma.rn.rn.f32"], r, r, T.float32(2), T.float32(1))


def k_ld_without_type(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32", layout="default")
    T.cuda.tile.apply(T.ptx["ld.global"], r, A)


def k_scope_grid(X: T.Tensor((32, 4, 1), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ld.global.b32"], r.view(32, 4, 1, layout=per_lane), X, scope="grid")


def k_scope_empty(X: T.Tensor((32, 4, 1), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ld.global.b32"], r.view(32, 4, 1, layout=per_lane), X, scope="")


def k_lane_layout_thread_scope(X: T.Tensor((32, 4, 1), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx["ld.global.b32"], r.view(32, 4, 1, layout=per_lane), X, scope="thread")


def k_alloc_complex(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4,), "complex64")
    A[0] = 1.0


def k_alloc_empty_dtype(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4,), "")
    A[0] = 1.0


def k_block_zero(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=0))
    A[0] = 1.0


def k_block_nan(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=float("nan")))
    A[0] = 1.0


def k_keyword_swapped(A: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32", layout="default")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A, chunk_bytes=16)


def k_view_zero_extent(A: T.Tensor((32, 16), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    r = T.alloc_local((16,), "uint32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], r.view(32, 4, 4, layout=quads), A.view(32, 0, 4), scope="warp")


def k_bulk_copy_2_31_bytes(A: T.Tensor((64, 32), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    tid = T.cuda.thread_id()
    tile = T.alloc_shared((64, 36), "uint32")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx["cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"],
                      tile[tid, 0:32], A[tid, :], bar, copy_bytes=2147483648)


def k_wait_group_none(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], None)


def k_class_indexed(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = TileLayout[0]


C = Case
CASES = [
    # a class indexed inside a kernel: the message named it "<class 'tiledsl.layout.TileLayout'>"
    C("class_indexed", k_class_indexed, "TileLayout[0]", ("the class TileLayout cannot be indexed",)),
    # T.tma_layout with a module as the box, or a float swizzle: TypeError/KeyError escaped from tiledsl
    C("tma_layout_box_not_a_tuple", action=lambda: T.tma_layout(np, "float16", 64), err=tiledsl.TiledslError,
      words=("box is a tuple",)),
    C("tma_layout_float_swizzle", action=lambda: T.tma_layout((16, 32), "float16", 0.0), err=tiledsl.TiledslError,
      words=("swizzle is None, 32, 64 or 128",)),
    # Python's int-to-text limit (ValueError from str(int)) reached inside tiledsl
    C("huge_int_launch_block", k_huge_block, "block=HUGE", ("block dimension must fit in 64 bits", "16610 bits")),
    C("huge_int_literal_launch_block", k_huge_literal_block, "block=(10**5000)",
      ("block dimension must fit in 64 bits",)),
    C("huge_int_max_registers", k_huge_max_registers, "max_registers=HUGE", ("from 24 to", "16610 bits")),
    C("huge_int_stored_constant", k_huge_store, "A[0] = HUGE"),
    C("huge_int_index", k_huge_index, "A[HUGE] = 1.0"),
    C("huge_int_tensor_view_extent", k_huge_view_extent, "A.view(32, HUGE, 4)", ("view extents must fit in 64 bits",)),
    C("huge_int_register_view_extent", k_huge_register_view, "r.view(32, 4, HUGE",
      ("view extents must fit in 64 bits",)),
    C("huge_int_expect_tx_bytes", k_huge_expect_tx, "64 * HUGE", ("tile operand must fit in 64 bits", "16616 bits")),
    C("huge_int_alloc_local_extent", k_huge_alloc, "T.alloc_local((HUGE,)",
      ("allocation extents must fit in 64 bits",)),
    C("huge_int_unroll_count", k_huge_unroll, "T.unroll(HUGE)"),
    C("huge_int_typed_float_constant", k_huge_fma_constant, "T.float32(HUGE)"),
    # refused where they are written (the annotation, the layout), not later when a message prints them
    C("huge_int_annotation_extent", err=tiledsl.TiledslError, action=_huge_annotation,
      words=("integer of 16610 bits",)),
    C("huge_int_layout_extent", err=LayoutError, action=lambda: TileLayout(S[(HUGE, 4, 4) : (1 @ laneid, 4, 1)]),
      words=("integer of 16610 bits",)),
    C("huge_int_layout_stride", err=LayoutError, action=lambda: TileLayout(S[(2, 4) : (HUGE, 1)])),
    C("huge_int_layout_lane_stride", err=LayoutError, action=lambda: TileLayout(S[(2, 4) : (HUGE @ laneid, 1)])),
    # an internal object's repr in a layout message
    C("layout_extent_is_S", err=LayoutError, action=lambda: TileLayout(S[(S, 2) : (1, 2)]),
      words=("extents must be positive ints",)),
    # an array of Python objects (np.zeros_like(laneid)): LaunchError naming the argument, not int('') in dtypes
    C("object_array_argument", err=LaunchError,
      action=lambda: tiledsl.jit(k_huge_store).compile(np.zeros_like(laneid), target="sm_90"),
      words=("argument 'A'",)),
    # cp.async.wait_group counts ptxas rejects ("Constant overflow"): refused by us first
    C("wait_group_10_30", k_wait_group_huge, "10**30"),
    C("wait_group_2_32", k_wait_group_2_32, "4294967296"),
    C("wait_group_negative", k_wait_group_negative, "], -1)"),
    C("wait_group_float", k_wait_group_float, "], 0.5)"),
    C("wait_group_none", k_wait_group_none, "], None)"),
    # compile-time explosions (the fuzzer's worker hung > 20 s on these)
    C("local_memory_2mb_per_thread", k_local_2mb, "T.alloc_local((524288,)"),
    C("local_memory_10_30_elements", k_local_10_30, "T.alloc_local((10**30,)"),
    C("shared_memory_10_30_elements", k_shared_10_30, "T.alloc_shared((10**30,)"),
    # constant folding of 10**(2**32): the front end computes the power (hangs) instead of refusing it
    C("power_with_huge_exponent", k_power_folds_forever, "10**4294967296", marks=(pytest.mark.slow,)),
    # 2 MB of operands per thread: refused at the allocation (before the 131072 mma instructions hung expansion)
    C("mma_131072_instructions", k_mma_65536_k_steps, "T.alloc_local((2 * 65536 * 4,)", words=("512 KB",)),
    # (allow_spills: past the register budget, which refuses the local first: the case below)
    C("fma_70000_repeats", tiledsl.jit(k_fma_70000_repeats, allow_spills=True), "T.ptx[\"fma.rn.f32\"]",
      words=("at most 65536",)),
    C("local_of_70000_registers", k_fma_70000_repeats, "T.alloc_local((70000,)",
      words=("70000 float32 per thread (280000 bytes", "at most 255 registers", "allow_spills=True")),
    # mutations that are located today
    C("fma_f16_on_f32_registers", k_fma_f16_on_f32_registers, "fma.rn.f16"),
    C("fma_without_rounding", k_fma_without_rounding, "fma.f32"),
    C("fma_qualifier_twice", k_fma_qualifier_twice, "fma.rn.rn.f32"),
    C("ld_without_type", k_ld_without_type, "ld.global\"]"),
    C("scope_grid", k_scope_grid, "scope=\"grid\""),
    C("scope_empty", k_scope_empty, "scope=\"\""),
    C("lane_layout_at_thread_scope", k_lane_layout_thread_scope, "scope=\"thread\""),
    C("alloc_local_complex64", k_alloc_complex, "complex64"),
    C("alloc_local_empty_dtype", k_alloc_empty_dtype, "T.alloc_local((4,), \"\")"),
    C("launch_block_zero", k_block_zero, "block=0"),
    C("launch_block_nan", k_block_nan, "block=float(\"nan\")"),
    C("keyword_of_another_family", k_keyword_swapped, "chunk_bytes=16"),
    C("view_zero_extent", k_view_zero_extent, "A.view(32, 0, 4)"),
    # our own range messages named the assembler's internals (a leak to the fuzzer's judge)
    C("bulk_copy_2_31_bytes", k_bulk_copy_2_31_bytes, "copy_bytes=2147483648", ("out of range", "1048560")),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_fuzz_found(case):
    err = run(case)
    assert "object at 0x" not in str(err), f"{case.id}: an internal object's repr in the message:\n{err}"
    leak = LEAK_RE.search(str(err))
    assert leak is None, f"{case.id}: the message names compiler internals ({leak.group()!r}):\n{err}"
