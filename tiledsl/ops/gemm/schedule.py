"""The Hopper GEMM's walk: which tiles and K steps each block runs, and which block waits for which.

Written once, as `@tiledsl.inline` helpers that the kernel (hopper_kernel.py) calls and that the
schedule model (schedule_model.py) runs on the host with Python integers, so the model checks the
very arithmetic the GPU executes. Every name below is a pure function of its arguments: `T.min` / `T.max` and `//`
(which floors, in the kernel as in Python) are all it uses.

The persistent walk: a grid of G blocks, block b taking tiles b, b + G, ... in grouped order (tile_origin).

Stream-K (a persistent grid whose tiles end in a partial wave): the whole waves run as above (ndp tiles a block);
the K steps of the partial wave's tiles (skt of them; with SKW = 2 also the last whole wave's, so that a partial wave
of a few tiles is not cut into many short shares: each share then spans one to two tiles and a split tile has at
most two contributors) are split into `units` contiguous shares, share b = K steps
lo .. hi - 1 of block b (units <= G; each share at least MIN_SHARE K steps, so a split tile's fix-up never costs
more than the K steps it saves, and no block between two contributors of a tile is left without work). A tile
split between blocks is finished by the block that runs its LAST K step: the blocks before it publish their
partial sums (a workspace row and a flag), it waits for each flag and adds them. So every wait points from a block
to lower-numbered blocks; the kernel numbers its blocks by a ticket taken at start (an atomic increment in
dispatch order), so every block waited for has already started and is resident: no residency, no SM count and no
dispatch order can make the wait starve. A block runs its share's pieces last tile first: the piece it publishes
(the head of the last tile it touches) goes first, the piece it finishes (the tail of its first tile) last, so the
partial sums it waits for were published at the start of its lower neighbours' shares.
"""
import tiledsl
from tiledsl import T

MIN_SHARE = 4       # K steps: a stream-K share shorter than this costs more in fix-up traffic than it saves


@tiledsl.inline
def tile_origin(tile, ntm, ntn, GM, MC, mrank, BM, BNT):
    """The first row and column of C of a walk's tile index: group_m (GM) tile rows at a time, column by column
    within the group (the blocks running together share A's rows and B's columns in L2); with multicast (MC = 2)
    the pair's rank mrank takes tile row 2p + mrank."""
    first = tile // (GM * ntn) * GM
    rows = T.min(ntm - first, GM)
    row0 = ((first + tile % (GM * ntn) % rows) * MC + mrank) * BM
    col0 = tile % (GM * ntn) // rows * BNT
    return row0, col0


@tiledsl.inline
def stream_k_walk(bid, G, ntiles, nk, SKW, MINK):
    """The walk's numbers for block bid of G over ntiles tiles of nk K steps: (mine, ndp, tdp, skt, units, lo, hi,
    l_t). mine: the pieces the block runs; ndp: its tiles of the whole waves; tdp: the tiles of the whole waves;
    skt: the partial wave's K steps; units: the blocks sharing them; lo .. hi - 1: this block's share (empty for
    bid >= units); l_t: the partial wave's tile (from tdp) holding the share's last K step. SKW = 2: the last whole
    wave's tiles are shared too (tdp one wave less). Without stream-K (SKW = 0) only mine counts: the tiles bid,
    bid + G, ... below ntiles."""
    if SKW:
        tdp = ntiles // G * G
        if SKW == 2:
            tdp = T.max(tdp - G, 0)         # the last whole wave joins the stream-K part
        ndp = tdp // G
        skt = (ntiles - tdp) * nk
        units = T.max(T.min(G, skt // MINK), 1)
        lo = T.min(bid * skt // units, skt)
        hi = T.min((bid + 1) * skt // units, skt)
        l_t = (hi - 1) // nk
        mine = ndp + (l_t - lo // nk + 1 if hi > lo else 0)
    else:
        tdp = 0
        ndp = 0
        skt = 0
        units = 1
        lo = 0
        hi = 0
        l_t = 0
        mine = (ntiles - bid + G - 1) // G
    return mine, ndp, tdp, skt, units, lo, hi, l_t


@tiledsl.inline
def piece(ti, bid, G, nk, ndp, lo, hi, SKW):
    """The ti-th piece of a block's walk: (tile, klo, khi), its tile and K steps klo .. khi - 1. The whole waves'
    tiles first (every K step of tile bid + ti * G), then with stream-K the share's pieces, its last tile first.
    (The whole waves' tiles, ndp * G, and the share's last tile are recomputed here rather than kept live through
    the walk.)"""
    if SKW:
        t = (hi - 1) // nk - (ti - ndp)
        sk = ti >= ndp
        tile = ndp * G + t if sk else bid + ti * G
        klo = T.max(lo - t * nk, 0) if sk else 0
        khi = T.min(hi - t * nk, nk) if sk else nk
    else:
        tile = bid + ti * G
        klo = 0
        khi = nk
    return tile, klo, khi


@tiledsl.inline
def exchange(tile, klo, khi, nk, ntiles, G, MINK, bid, SKW):
    """A piece's part in its tile's fix-up: (pub, fin, store, jlo, jhi). pub = 1: it publishes its partial sums (a
    later block runs the tile's last K step); fin = 1: it finishes a split tile, adding the partial sums of blocks
    jlo .. jhi - 1 first; store = 1: it runs the tile's epilogue. jlo is the lowest block whose share holds the
    tile's first K step t * nk (t: the tile's index in the partial wave): the smallest b with (b + 1) * skt //
    units > t * nk; every block from there to this one's predecessor holds a piece of the tile (no share is empty
    below units). skt and units are stream_k_walk's (SKW its stream-K form), recomputed (fewer registers live
    through the walk)."""
    pub = 1 if khi < nk else 0
    fin = 1 if klo > 0 and khi == nk else 0
    store = 1 if khi == nk else 0
    tdp = ntiles // G * G
    if SKW == 2:
        tdp = T.max(tdp - G, 0)
    skt = (ntiles - tdp) * nk
    units = T.max(T.min(G, skt // MINK), 1)
    jlo = (((tile - tdp) * nk + 1) * units + skt - 1) // T.max(skt, 1) - 1    # (skt = 0: no split tile, unused)
    return pub, fin, store, jlo, bid


@tiledsl.inline
def split_k_share(rank, ktiles, SK):
    """Split-K: rank's K tiles k0 .. k0 + nk - 1 of a tile's ktiles, ceil(ktiles / SK) a rank (a rank past the end
    has none and contributes zeros): (k0, nk)."""
    kh = (ktiles + SK - 1) // SK
    k0 = rank * kh
    nk = T.max(T.min(kh, ktiles - k0), 0)
    return k0, nk


# ---------------------------------------------------------------------------------------------- the skinny walk
# skinny_kernel.py: block bid of a grid of tiles x S computes split bid % S of tile bid // S (its K tiles as
# split_k_share gives a rank), writes its f32 partial sums to workspace slot skinny_slot(tile, split), and arrives on
# the tile's counter with atom.inc of limit skinny_limit(S) (the counter wraps to 0 at the S-th arrival). The block
# that reads S - 1 back (skinny_is_last) sums slots skinny_slot(tile, 0 .. S - 1) in that order and writes C. No block
# waits for another: the last arriver finds every other partial already out, the others leave.

@tiledsl.inline
def skinny_block(bid, S, ktiles):
    """Block bid's part of the skinny walk: (tile, split, k0, nk), its K tiles k0 .. k0 + nk - 1 (ceil(ktiles / S)
    a split, as split_k_share; a split past the end has none)."""
    tile = bid // S
    split = bid % S
    kh = (ktiles + S - 1) // S
    k0 = split * kh
    nk = T.max(T.min(kh, ktiles - k0), 0)
    return tile, split, k0, nk


@tiledsl.inline
def skinny_slot(tile, split, S):
    """The workspace slot of a tile's split: written by that split's block, read by the tile's last arriver."""
    return tile * S + split


@tiledsl.inline
def skinny_limit(S):
    """atom.inc's limit on a tile's counter: it counts 0 .. S - 1 and the S-th arrival wraps it back to 0."""
    return S - 1


@tiledsl.inline
def skinny_is_last(old, S):
    """1 for the block whose atom.inc read back S - 1: the tile's S-th arrival, every other split already out."""
    return 1 if old == S - 1 else 0
