"""Wrong TMA tensor copies (tiledsl/isa/tma/): a CompilationError at the apply's line (or its operand) naming the
box, layout, swizzle, rank, coordinates or operand that is wrong."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout
from badcase import Case, run

LD2 = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
LD3 = "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
ST2 = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
MC2 = LD2 + ".multicast::cluster"
BOX = (8, 32)
M16 = T.TensorMap((64, 64), "float16", box=BOX)
M16S = T.TensorMap((64, 64), "float16", box=BOX, swizzle=64)
PLAIN = T.tma_layout(BOX, "float16")
SW64 = T.tma_layout(BOX, "float16", 64)
SW32 = T.tma_layout((8, 16), "float16", 32)
PADDED = TileLayout(S[(8, 32) : (40, 1)])
WRONG_SW = TileLayout(S[(8, 32) : (32, 1)], swizzle=(1, 3, 3))     # the 32-byte pattern
ARGS = (np.zeros((64, 64), np.float16),)


def k_box_shape(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared((16, 32), "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0))


def k_swizzle_missing(A: M16S):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16", layout=PLAIN)
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0))


def k_swizzle_wrong(A: M16S):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16", layout=WRONG_SW)
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0))


def k_swizzle_unwanted(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16", layout=SW64)
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0))


def k_padded(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16", layout=PADDED)
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0))


def k_misaligned(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    buf = T.alloc_shared((9, 32), "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], buf[1:9, :], A, bar, coords=(0, 0))


def k_coords_count(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0, 0))


def k_coords_missing(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar)


def k_coords_float(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 1.5))


def k_rank(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD3], tile, A, bar, coords=(0, 0, 0))


def k_not_a_map(A: T.Tensor((64, 64), "float16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0))


def k_dst_global(A: M16, G: T.Tensor((8, 32), "float16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], G, A, bar, coords=(0, 0))


def k_width(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float32")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0))


def k_repeat_no_steps(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tiles = T.alloc_shared((2, 8, 32), "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tiles, A, bar, coords=(0, 0))


def k_steps_count(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tiles = T.alloc_shared((2, 8, 32), "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tiles, A, bar, coords=(0, 0), coord_steps=((8, 0), (16, 0)))


def k_multicast_no_mask(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[MC2], tile, A, bar, coords=(0, 0))


def k_mask_too_wide(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[MC2], tile, A, bar, coords=(0, 0), cta_mask=0x10000)


def k_store_swizzle(A: M16S):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    T.cuda.tile.apply(T.ptx[ST2], A, tile, coords=(0, 0))


def k_wait_range(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 64)


def k_wait_runtime(A: M16, n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group"], n)


def k_im2col(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx["cp.async.bulk.tensor.2d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"],
                      tile, A, bar, coords=(0, 0))


def k_warp_scope(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0), scope="warp")


def k_sm80(A: M16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    tile = T.alloc_shared(BOX, "float16")
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[LD2], tile, A, bar, coords=(0, 0))


def k_index_a_map(A: M16, Out: T.Tensor((1,), "float16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    Out[0] = A[0, 0]


APPLY = "T.cuda.tile.apply("
CASES = [
    Case("box-shape", k_box_shape, APPLY, ("box/layout mismatch", "(8, 32)", "(16, 32)")),
    Case("swizzle-missing", k_swizzle_missing, APPLY, ("box/layout mismatch", "swizzle=64", "T.tma_layout")),
    Case("swizzle-wrong", k_swizzle_wrong, APPLY, ("box/layout mismatch", "swizzle=64")),
    Case("swizzle-unwanted", k_swizzle_unwanted, APPLY, ("box/layout mismatch", "no swizzle")),
    Case("padded-rows", k_padded, APPLY, ("box/layout mismatch", "(1, 0)")),
    Case("misaligned-box", k_misaligned, APPLY, ("128-byte boundary", "byte 64")),
    Case("coords-count", k_coords_count, APPLY, ("coords has 3 entries", "2-d")),
    Case("coords-missing", k_coords_missing, APPLY, ("coords= is required",)),
    Case("coords-float", k_coords_float, APPLY, ("coords[1] must be an integer",)),
    Case("rank-mismatch", k_rank, APPLY, (".3d", "2 dimensions", "write .2d")),
    Case("not-a-map", k_not_a_map, APPLY, ("operand tmap", "T.TensorMap")),
    Case("dst-global", k_dst_global, APPLY, ("operand dst", "shared memory")),
    Case("width", k_width, APPLY, ("float32", "float16", "element widths")),
    Case("repeat-no-steps", k_repeat_no_steps, APPLY, ("coord_steps= must give",)),
    Case("steps-count", k_steps_count, APPLY, ("coord_steps has 2 entries for 1 repeat",)),
    Case("multicast-no-mask", k_multicast_no_mask, APPLY, ("cta_mask= is required",)),
    Case("mask-too-wide", k_mask_too_wide, APPLY, ("cta_mask = 65536 does not fit in 16 bits",)),
    Case("store-swizzle", k_store_swizzle, APPLY, ("box/layout mismatch", "swizzle=64")),
    Case("wait-range", k_wait_range, APPLY, ("64 is out of range", "0..63")),
    Case("wait-runtime", k_wait_runtime, APPLY, ("compile-time int",), args=ARGS + (1,)),
    Case("im2col", k_im2col, APPLY, ("no explicit tile pattern", "supported:")),
    Case("warp-scope", k_warp_scope, APPLY, ("thread instruction", "'warp'")),
    Case("sm80", k_sm80, APPLY, ("needs sm_90", "sm_80"), target="sm_80"),
    Case("index-a-map", k_index_a_map, "Out[0] = A[0, 0]", ()),
]
for c in CASES:
    if c.args is None:
        extra = (np.zeros((8, 32), np.float16),) if c.fn is k_dst_global else \
            (np.zeros((1,), np.float16),) if c.fn is k_index_a_map else ()
        c.args = ARGS + extra


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_tma(case):
    run(case)


@pytest.mark.parametrize("kw,words", [
    (dict(box=(8, 300)), "box extents are ints 1..256"),
    (dict(box=(8, 4)), "multiple of 16 bytes"),
    (dict(box=(8,)), "box=(8,) has 1 extents"),
    (dict(box=(8, 128), swizzle=64), "at most 64 bytes"),
    (dict(box=(8, 32), swizzle=16), "swizzle must be None, 32, 64 or 128"),
    (dict(box=(8, 32), oob_fill="one"), "oob_fill must be 'zero' or 'nan'"),
])
def test_bad_annotations(kw, words):
    with pytest.raises(tiledsl.TiledslError, match=words.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")):
        T.TensorMap((64, 64), "float16", **kw)


def test_nan_fill_needs_floats_and_strides_need_16_bytes():
    with pytest.raises(tiledsl.TiledslError, match="needs floating-point"):
        T.TensorMap((64, 64), "int32", box=(8, 4), oob_fill="nan")
    with pytest.raises(tiledsl.TiledslError, match="stride is 20 bytes"):
        T.TensorMap((64, 10), "float16", box=(8, 8))
