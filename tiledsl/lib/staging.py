"""A consumer warpgroup's m64nD f32 accumulator leaving through shared memory (stmatrix, then the TMA store), as the
FA3-style kernels of tiledsl.ops write O (flash/fa3.py, tma_o) and dK / dV (flash/fa3_backward.py, tma_kv).

The staging buffer is one the kernel already has, loaded by the TMA unit as (D / 64 boxes, R rows, 64 columns) of
16-bit elements with the 128-byte swizzle, consumer c owning rows 64c .. 64c + 63 of every box: the same bytes the
TMA store then reads back as (D / 64, 1, 64, 64) boxes from row 64c. The accumulator packs to half2 words in the
order cvt gives them, word 2n + r of a thread holding row half r's columns 8n + 2(l % 4), + 1 (n: its n8 block),
which is, four words at a time, stmatrix.x4's registers for one 16 x 16 block (tiledsl/ops/gemm/hopper_kernel.py
stages C the same way)."""
from tiledsl.layout import S, TileLayout, laneid

SW128 = (3, 3, 3)           # 16-byte chunk c of 128-byte row r at chunk c ^ (r % 8), in 16-bit elements
SW128_WORDS = (3, 2, 3)     # the same swizzle in 32-bit words (4-word chunks)


def packed_words(D: int) -> TileLayout:
    """A thread's D / 2 packed words as stmatrix.x4 operands, (16-column block b, register i, 8, 4): word 4b + i of
    lane 4r + x is the pair of row 8(i % 2) + r, columns 16b + 8(i // 2) + 2x, + 1."""
    return TileLayout(S[(D // 16, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)])


def staging_layouts(consumers: int, boxes: int, rows: int, buffers: int = 1) -> tuple:
    """(words, boxes) views of a (boxes, rows, 64) swizzled buffer of 16-bit elements, consumer c in rows 64c..:
    words, viewed (consumers, 4 warps, 64 * boxes / 16, 4, 8, 4), is where stmatrix.x4 of warp w writes its
    16-column blocks (row 16w + 8(i % 2) + j, word 8b + 4(i // 2) + x of the box's 32-word rows); boxes, viewed
    (consumers, boxes, 1, 64, 64), is what the TMA store of consumer c reads (a 3-d tensor map's (1, 64, 64) box
    each). buffers > 1: that many such buffers one after another, each view with a leading buffer index."""
    shape_w, stride_w = (consumers, 4, boxes, 4, 2, 2, 8, 4), (2048, 512, rows * 32, 8, 4, 256, 32, 1)
    shape_t, stride_t = (consumers, boxes, 1, 64, 64), (64 * 64, rows * 64, 64 * 64, 64, 1)
    if buffers > 1:
        shape_w, stride_w = (buffers,) + shape_w, (boxes * rows * 32,) + stride_w
        shape_t, stride_t = (buffers,) + shape_t, (boxes * rows * 64,) + stride_t
    words = TileLayout(S[shape_w : stride_w], swizzle=SW128_WORDS)
    tma = TileLayout(S[shape_t : stride_t], swizzle=SW128)
    return words, tma
