"""The TMA-store epilogue's staging, shared by the Hopper GEMM (hopper_kernel.py) and the grouped GEMM
(grouped_kernel.py): a consumer warpgroup's f16/bf16 tile packed to half2 words, written by stmatrix into a
128-byte-swizzled buffer of 64 x 64 boxes, and sent out by one thread's TMA store, so the warpgroup goes on to its
next tile while the TMA unit writes whole lines (the register stores of a wgmma fragment write 16 bytes of a row
per lane group: two L2 requests per 32-byte sector).

Per consumer c, two mbarriers: `done` (128 arrivals: the warpgroup's threads wrote the staged part; syncthreads
would wait for the producer, which has left) and `free` (1 arrival: thread 0's previous store has read the buffer).
The u-th use of a consumer's buffer waits for `free` phase u - 1 (claim), then meets on `done` phase u (publish).
"""
import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

STMX4 = "stmatrix.sync.aligned.m8n8.x4.shared.b16"


def stm_layouts(cons: int, epi: int, eh: int, nw: int, sw) -> dict:
    """The staging buffer of `cons` consumers' parts of `epi` columns (a multiple of 64), as the TMA unit reads it and
    as stmatrix writes it, and the packed words (eh parts of nw words a thread); sw: the 128-byte swizzle in 16-bit
    elements."""
    return dict(
        # (consumer, box, 64 rows, 64 halves): the boxes of one part side by side, each as the TMA unit swizzles it
        epi=TileLayout(S[(cons, epi // 64, 64, 64) : (64 * epi, 4096, 64, 1)], swizzle=sw),
        # the same with a unit axis, for a 3-D map's (1, 64, 64) boxes: (consumer, box, 1, 64 rows, 64 halves)
        epi3=TileLayout(S[(cons, epi // 64, 1, 64, 64) : (64 * epi, 4096, 4096, 64, 1)], swizzle=sw),
        # the same bytes as b32 words, as stmatrix.x4 of warp w sees them: (consumer, warp, n16 block b, matrix i,
        # row j, word x) -> row 16w + 8(i % 2) + j, word 8b + 4(i // 2) + x of the part's rows (32 words per box
        # row; block b in box b // 4), XOR-swizzled as above in word units
        epiw=TileLayout(S[(cons, 4, epi // 64, 4, 2, 2, 8, 4) :
                          (32 * epi, 512, 2048, 8, 4, 256, 32, 1)], swizzle=(3, 2, 3)),
        # the packed words: word 4b + i of lane 4r + x, the pair (acc[8b + 2i], acc[8b + 2i + 1]) (n8 block
        # 2b + i // 2, row 8(i % 2) + r, columns 2x, 2x + 1), is stmatrix register i of n16 block b
        pk=TileLayout(S[(epi // 16, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)]),
        # the same for every part of a tile at once (a deferred epilogue's words: part h from word h * nw)
        pkh=TileLayout(S[(eh, epi // 16, 4, 8, 4) : (nw, 4, 1, 4 @ laneid, 1 @ laneid)]))


def make_staged_store(store: str, boxes: bool):
    """Three inline helpers around one staging buffer per consumer: claim(free, c, tid, u) before the u-th part is
    written, publish(C, epi, done, c, tid, u, row0, col) after it (a 2-D map: the consumer's 64 rows from row0 +
    64 c, columns col..; boxes: the part's 64-column boxes side by side), publish3(C, epi, done, c, tid, u, g, row0,
    col) the same into matrix g of a 3-D (G, rows, columns) map, whose rows end at each matrix's edge (boxes there:
    a part of more than one box). store: the TMA store instruction (2-D or 3-D)."""

    @tiledsl.inline
    def claim(free, c, tid, u):
        """Consumer c's staging buffer before its u-th part: thread 0's previous store has read it."""
        if u > 0:
            if tid % 128 == 0:
                T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)
                T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], free[c:c + 1])
            T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], free[c:c + 1], (u - 1) % 2)

    @tiledsl.inline
    def staged(done, c, u):
        """The part's generic-proxy writes made visible to the TMA unit, and the warpgroup met on `done`."""
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
        T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], done[c:c + 1])
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], done[c:c + 1], u % 2)

    @tiledsl.inline
    def publish(C, epi, done, c, tid, u, row0, col):
        """Consumer c's u-th staged part, C's columns col.., out through thread 0's TMA store."""
        staged(done, c, u)
        if tid % 128 == 0:
            if boxes:
                # the part's boxes, 64 columns apart
                T.cuda.tile.apply(T.ptx[store], C, epi[c], coords=(row0 + 64 * c, col), coord_steps=((0, 64),))
            else:
                T.cuda.tile.apply(T.ptx[store], C, epi[c], coords=(row0 + 64 * c, col))
            T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])

    @tiledsl.inline
    def publish3(C, epi, done, c, tid, u, g, row0, col):
        """publish into matrix g of a 3-D map (boxes: a part of several 64-column boxes, 64 columns apart; a part
        of one box is the map's box itself)."""
        staged(done, c, u)
        if tid % 128 == 0:
            if boxes:
                T.cuda.tile.apply(T.ptx[store], C, epi[c], coords=(g, row0 + 64 * c, col), coord_steps=((0, 0, 64),))
            else:
                T.cuda.tile.apply(T.ptx[store], C, epi[c], coords=(g, row0 + 64 * c, col))
            T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])

    return claim, publish, publish3
