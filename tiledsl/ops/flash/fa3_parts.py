"""The consumer-side pieces the two FA3-style forwards share: fa3.py (f16/bf16) and fp8.py (e4m3). Both run the same
producer/consumer schedule on the same f32 accumulator layout, so the mbarrier set-up, the wgmma issue of
S = Q K^T and O += P V, the online softmax, the consumers' main loop (ping-pong or not) and the epilogue are one
code; what differs between the two comes in as parameters (the wgmma forms, whether V is read through the transpose
bit, how P becomes wgmma's A words, the softmax's log2-domain scale: a constant for f16, read at run time for fp8
so new descales do not recompile).

forward_parts(...) builds the @tiledsl.inline helpers for one kernel's sizes; the kernels call them by name.
Read fa3.py's module docstring for the schedule and the register layouts named here.
"""
import math
from typing import NamedTuple

import tiledsl
from tiledsl import T
from tiledsl.lang.inline import InlineFunction
from tiledsl.layout import S, TileLayout, laneid, wid_in_wg

from ...lib.exp2_fma import exp2_fma
from ...lib.producer import FULL_MASK, elect_one
from ...lib.staging import packed_words
from .common import key_tiles, lazy_max

NEG = -math.inf
LN2 = 0.6931471805599453
WAIT = "mbarrier.try_wait.parity.shared::cta.b64"
EXPECT = "mbarrier.arrive.expect_tx.shared::cta.b64"
ARRIVE = "mbarrier.arrive.shared::cta.b64"
LOAD = "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
STORE = "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
STMX4 = "stmatrix.sync.aligned.m8n8.x4.shared.b16"


def acc_layout(n: int) -> TileLayout:
    """The f32 accumulators of wgmma m64nN as one consumer warpgroup holds them: register i of lane l in warp w ->
    row 16w + l//4 + 8((i//2)%2), column 8(i//4) + 2(l%4) + i%2."""
    return TileLayout(S[(1, 1, 4, 2, 8, n // 8, 4, 2) : (1, 1, 1 @ wid_in_wg, 2, 4 @ laneid, 4, 1 @ laneid, 1)])


class ForwardParts(NamedTuple):
    ring_barriers: InlineFunction
    init_barriers: InlineFunction
    load_ring: InlineFunction
    produce: InlineFunction
    issue_s: InlineFunction
    issue_pv: InlineFunction
    softmax: InlineFunction
    row_sums: InlineFunction
    store: InlineFunction
    consume: InlineFunction
    work_item: InlineFunction
    walk_length: InlineFunction
    produce_walk: InlineFunction
    turns_open: InlineFunction
    turns_close: InlineFunction
    dynamic_item: InlineFunction
    produce_dynamic: InlineFunction
    block_row: InlineFunction
    q_slot: InlineFunction
    q_view: InlineFunction
    q_phase: InlineFunction
    q_free_phase: InlineFunction


def forward_parts(*, shape, D, BN, STG, CONS, boxes, step, tx_q, tx_kv, causal, mma_s, mma_o, trans_v,
                  cvt_o, overlap, pingpong, p_regs, to_p, producer_regs, poly=0, grid=0, early_k=0,
                  dynamic=0, lazy=0, qoff=0, tma_o=0, qbufs=1) -> ForwardParts:
    """The helpers for a forward kernel of shape (B, H, H_kv, N, N_kv), head dim D, BN keys per tile, STG stages,
    CONS consumer warpgroups, causal or not; boxes: the TMA boxes a row of Q and K is loaded as (one S = Q K^T
    wgmma call each), `step` apart in the TMA coordinates; tx_q, tx_kv: the bytes a Q tile and a K (or V) tile pay
    to their barriers; mma_s / mma_o: the wgmma forms of S = Q K^T and O += P V; trans_v: V is loaded as stored
    and read MN-major through wgmma's transpose bit (f16/bf16), else V^T is loaded and read K-major (fp8); cvt_o:
    the cvt that packs O's f32 pairs into the output's 16-bit pairs; overlap, pingpong: the main loop's schedule
    (fa3.py's docstring); p_regs(): the helper that allocates P's registers, returning (pk: P's A words,
    hp: a scratch for the kernels that need one, pv: pk as wgmma's A fragment); to_p(pk, hp, sacc): the helper that
    turns S's probabilities into P's A words; producer_regs: the registers a producer thread keeps
    (setmaxnreg.dec); poly: how many of a thread's BN / 2 exponentials per tile are computed on the FMA pipe
    (tiledsl/lib/exp2_fma.py) instead of by ex2.approx on MUFU, a multiple of 4 (0: all on MUFU); grid: 0 for one
    block per work item (query block of a head), else the persistent grid's width: each block walks several items
    (work_item, walk_length), the ring's stage and phase follow a running tile count tb across them, Q's barrier
    alternates its phase per item (k: the item's place in the block's walk), a "Q free" barrier tells the producer
    when the next item's Q may overwrite this one's, the last tile's stage is released too, and the ping-pong turns
    run on from item to item (turns_open / turns_close around the walk); early_k: a stage's K is released once
    the S = Q K^T that read it has retired (its own barrier, empty[STG + s]), not with V after P V, so the
    producer refills K about a tile sooner (FA3 runs K and V as two pipelines); dynamic (with grid): the
    persistent blocks take their items in the one-block-per-item grid's order (dynamic_item) from a counter in
    global memory (produce_dynamic) instead of a static walk, so the blocks that drew short items take more, as
    the hardware's block scheduler does for that grid; lazy: a row's running max moves only when a tile's scores
    pass it by more than LAZY_BITS in the log2 domain (FA4's conditional rescale), so O's rescale (D / 2
    multiplies a thread and tile) runs only on the tiles where some row of the thread moved: the exponentials
    of the others are then up to 2^LAZY_BITS, and O and the row sums, which share the stale max, divide out
    exactly as before; qoff: query block qb's first row is qb * BM - qoff (block_row), so with qoff = NQB * BM - N
    the ragged block is the first one (its rows below 0 arrive as the TMA unit's zero fill and are not stored)
    and the last block ends at row N: causal, the ragged block is then the cheapest of a head, not the dearest;
    tma_o: the epilogue (store) writes O through shared memory (stmatrix into the consumer's own rows of Q, which
    its last S has finished reading, then the TMA store), not by st.global from registers; qbufs (with grid): Q's
    buffers (1 or 2). With 2, item k of the walk has buffer k % 2 with its own Q and Q-free barriers (and, dynamic,
    its own slot of the item number), so the producer loads the next item's Q while this one runs, and an item
    starts on a Q already there instead of on a load issued once the last item's S had retired (the short items of
    short sequences pay that wait once each); the helpers take Q's views and barriers of item k by q_view / q_slot."""
    B, H, HK, N, NK = shape
    BM = 64 * CONS
    NS, NO = BN // 2, D // 2            # f32 accumulators per consumer thread: S and O
    NP = min(4, BN // 8)                # independent partial reductions per row in the softmax
    L_S, L_O = acc_layout(BN), acc_layout(D)
    # poly of a thread's NS exponentials go through the polynomial: whole 8-column blocks of S (a thread's
    # registers 4n .. 4n + 3), spread evenly over the tile (block n where (n + 1) * poly / NS passes an integer)
    NB = BN // 8
    POLY_BLOCKS = tuple(int((n + 1) * poly // NS > n * poly // NS) for n in range(NB))
    persistent = grid > 0
    NQB = -(-N // BM)                   # query blocks per head
    NKT = -(-NK // BN)                  # key tiles
    ITEMS = NQB * B * H                 # work items: (batch * head, query block)
    G = max(grid, 1)
    # the persistent walk's waves (G items each; the last may be partial) and which blocks run the last one
    FULL, REM = ITEMS // G, ITEMS % G
    LAST_REVERSED = FULL % 2 == 1
    NE = 2 * STG if early_k else STG    # empty barriers: a stage's V (and K), then with early_k each stage's K
    L_PK = packed_words(D)              # tma_o: O's packed words as stmatrix.x4 operands

    @tiledsl.inline
    def block_row(qb):
        """The first query row of query block qb (below 0 for the first block when qoff > 0)."""
        return qb * BM - qoff if qoff else qb * BM

    @tiledsl.inline
    def q_slot(bar, k):
        """Item k's entry of a per-Q-buffer array (its Q or Q-free barrier, the dynamic walk's item number): its
        buffer's with two Q buffers, else the one."""
        return bar[k % 2:k % 2 + 1] if qbufs == 2 else bar

    @tiledsl.inline
    def q_view(view, k):
        """Item k's Q buffer in a view of Q's buffers (tq, wq, the O staging views): with two, its buffer's."""
        return view[k % 2] if qbufs == 2 else view

    @tiledsl.inline
    def q_phase(k):
        """The parity of item k's phase of its Q barrier (with two buffers a buffer's barriers serve every
        other item)."""
        return (k // 2) % 2 if qbufs == 2 else k % 2

    @tiledsl.inline
    def q_free_phase(k):
        """The parity the producer waits for on item k's Q-free barrier before loading its Q: the phase of the
        item that last used the buffer (k - 1, or k - 2 with two buffers); for the first items parity 1, which
        passes at once (no phase has completed)."""
        return (k // 2 + 1) % 2 if qbufs == 2 else (k + 1) % 2

    @tiledsl.inline
    def init_barriers(tid, qbar, fullk, fullv, empty, qfree=None):
        """Thread 0 sets up the Q barrier(s) and the ring's full (K, V) and empty barriers (4 warps per consumer
        release a stage, and, persistent, Q); the block meets before any thread uses them."""
        if tid == 0:
            for i in T.unroll(qbufs):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], q_slot(qbar, i), 1)
                if persistent:
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], q_slot(qfree, i),
                                      CONS if tma_o else 4 * CONS)
            for s in T.unroll(STG):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], fullk[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], fullv[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], 4 * CONS)
            if early_k:
                for s in T.unroll(STG):
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[STG + s:STG + s + 1], 4 * CONS)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        T.cuda.syncthreads()

    @tiledsl.inline
    def ring_barriers(tid):
        """(qbar, fullk, fullv, empty): the mbarriers in shared memory, set up (init_barriers) before the block
        meets. qbar: Q has landed; fullk[s]: stage s holds K of its tile (phase u: the u-th fill); fullv[s]: ... and
        V (V^T); empty[s]: every consumer warp is done with stage s. Persistent: qbar's phase k is the walk's k-th
        item, and a fifth, qfree: every consumer warp's last S = Q K^T of the k-th item has read Q (phase k)."""
        qbar = T.alloc_shared((qbufs,), "uint64")
        fullk = T.alloc_shared((STG,), "uint64")
        fullv = T.alloc_shared((STG,), "uint64")
        empty = T.alloc_shared((NE,), "uint64")
        qfree = T.alloc_shared((qbufs,), "uint64") if persistent else None
        init_barriers(tid, qbar, fullk, fullv, empty, qfree)
        return (qbar, fullk, fullv, empty, qfree) if persistent else (qbar, fullk, fullv, empty)

    @tiledsl.inline
    def ring(tb, j):
        """Tile j of an item as the ring counts it (stage ring % STG, its fill ring // STG of that stage): with the
        persistent walk, after the tb tiles of the block's earlier items (no re-init between items)."""
        return tb + j if persistent else j

    @tiledsl.inline
    def load_ring(Q, K, V, tq, tk, tv, qbar, fullk, fullv, empty, bh, qb, b, hk, ntiles, tb=0, k=0, qfree=None,
                  nxt=None, item=0):
        """The producer's elected thread: Q once, then K and V of each of the item's ntiles key tiles into the
        ring, each on its own full barrier (so S = Q K^T starts before V lands). Persistent: the k-th item of the
        walk, after tb tiles; its Q waits until the previous item's last S = Q K^T has read the old one. Dynamic:
        the item's number goes to the consumers in nxt, published by Q's barrier (its arrival releases the store)."""
        if persistent:
            # the buffer's last item's phase of qfree (q_free_phase)
            T.cuda.tile.apply(T.ptx[WAIT], q_slot(qfree, k), q_free_phase(k))
            if dynamic:
                slot = q_slot(nxt, k)
                slot[0] = item
        T.cuda.tile.apply(T.ptx[EXPECT], q_slot(qbar, k), tx_q)
        T.cuda.tile.apply(T.ptx[LOAD], q_view(tq, k), Q, q_slot(qbar, k), coords=(bh, block_row(qb), 0),
                          coord_steps=step)
        for j in range(ntiles):
            s = ring(tb, j) % STG
            if ring(tb, j) >= STG:
                # the (ring // STG)-th refill of stage s waits for the consumers' previous use of it (early_k: of
                # its K only, by the S that read it)
                if early_k:
                    T.cuda.tile.apply(T.ptx[WAIT], empty[STG + s:STG + s + 1], (ring(tb, j) // STG + 1) % 2)
                else:
                    T.cuda.tile.apply(T.ptx[WAIT], empty[s:s + 1], (ring(tb, j) // STG + 1) % 2)
            T.cuda.tile.apply(T.ptx[EXPECT], fullk[s:s + 1], tx_kv)
            T.cuda.tile.apply(T.ptx[LOAD], tk[s], K, fullk[s:s + 1], coords=(b * HK + hk, j * BN, 0),
                              coord_steps=step)
            if early_k:
                if ring(tb, j) >= STG:
                    # ... and its V by the P V that read it
                    T.cuda.tile.apply(T.ptx[WAIT], empty[s:s + 1], (ring(tb, j) // STG + 1) % 2)
            T.cuda.tile.apply(T.ptx[EXPECT], fullv[s:s + 1], tx_kv)
            if trans_v:
                # V as stored: (keys, D) rows, D / 64 boxes
                T.cuda.tile.apply(T.ptx[LOAD], tv[s], V, fullv[s:s + 1], coords=(b * HK + hk, j * BN, 0),
                                  coord_steps=step)
            else:
                # V^T: (D, keys) rows, one box of BN keys
                T.cuda.tile.apply(T.ptx[LOAD], tv[s], V, fullv[s:s + 1], coords=(b * HK + hk, 0, j * BN))

    @tiledsl.inline
    def produce(Q, K, V, tq, tk, tv, qbar, fullk, fullv, empty, bh, qb, b, hk, ntiles):
        """The producer warpgroup: few registers (the consumers take the rest), one elected thread of its first
        warp issues every copy (load_ring)."""
        T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], producer_regs)
        if T.cuda.warp_id() == 0:
            if elect_one() == 1:
                load_ring(Q, K, V, tq, tk, tv, qbar, fullk, fullv, empty, bh, qb, b, hk, ntiles)

    @tiledsl.inline
    def walk_length(pid):
        """How many work items block pid walks: every wave's but the last, and the last's where it has one."""
        return (FULL + 1 if pid >= G - REM else FULL) if LAST_REVERSED else (FULL + 1 if pid < REM else FULL)

    @tiledsl.inline
    def work_item(pid, k):
        """(bh, qb, b, h, hk, ntiles) of block pid's k-th item. The items in order are taken G at a time, a wave,
        one per block: a static schedule, no queue in global memory to reset per launch; the odd waves run
        backwards ("snake"). Non-causal, the one-block-per-item grid's order: a head's query blocks side by side,
        so its K and V stay in L2 while the wave runs. Causal, the query blocks by length, heaviest first, every
        head's block qb side by side: a wave's items then walk about as many tiles (a model of the walk, busiest
        block over the mean: 1.000-1.004 at the benchmark's shapes, against 1.03 and, with few heads and many
        query blocks, 1.54 (16 heads x 128 blocks) and 1.80 (8 x 128) for a head's blocks side by side, which
        measured 437 against 564 TFLOP/s one block per item, D = 128, N = 16384), and the ~G / (B H) blocks of one
        head walk its K and V tiles in step, so L2 still serves all but the first of them."""
        i = k * G + ((G - 1 - pid) if k % 2 == 1 else pid)
        if causal:
            qb = NQB - 1 - i // (B * H)
            bh = i % (B * H)
        else:
            bh = i // NQB
            qb = i % NQB
        b = bh // H
        h = bh % H
        hk = h // (H // HK)
        return bh, qb, b, h, hk, key_tiles(qb, NKT, BM, BN, causal, qoff)

    @tiledsl.inline
    def produce_walk(Q, K, V, tq, tk, tv, qbar, qfree, fullk, fullv, empty, pid):
        """The persistent producer: as produce, for each item of block pid's walk in turn; the ring runs on
        (tb counts the tiles loaded so far), so the next item's loads overlap this item's epilogue."""
        T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], producer_regs)
        if T.cuda.warp_id() == 0:
            if elect_one() == 1:
                tb = 0
                for k in range(walk_length(pid)):
                    bh, qb, b, h, hk, ntiles = work_item(pid, k)
                    load_ring(Q, K, V, tq, tk, tv, qbar, fullk, fullv, empty, bh, qb, b, hk, ntiles, tb, k, qfree)
                    tb = tb + ntiles

    @tiledsl.inline
    def dynamic_item(item):
        """(bh, qb, b, h, hk, ntiles) of work item `item` of the dynamic walk: the one-block-per-item grid's order, a
        head's query blocks side by side (its K and V stay in L2 while its blocks run), causal heaviest first."""
        bh = item // NQB
        qb = item % NQB
        if causal:
            qb = NQB - 1 - qb
        b = bh // H
        h = bh % H
        hk = h // (H // HK)
        return bh, qb, b, h, hk, key_tiles(qb, NKT, BM, BN, causal, qoff)

    @tiledsl.inline
    def produce_dynamic(Q, K, V, tq, tk, tv, qbar, qfree, fullk, fullv, empty, pid, nxt, ctr):
        """The dynamic producer: block pid's first item is pid, each next one G + the count it draws from ctr[0]
        (once the item's loads are issued), until the count passes the items; then ITEMS in nxt wakes the
        consumers to stop (a plain arrival on Q's barrier), and the last block to stop sets ctr back to zeros for
        the next launch (ctr[1] counts the stopped blocks: when it reaches G no block draws any more)."""
        T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], producer_regs)
        if T.cuda.warp_id() == 0:
            if elect_one() == 1:
                got = T.alloc_local((1,), "int32")
                item = pid
                tb = 0
                k = 0
                while item < ITEMS:
                    bh, qb, b, h, hk, ntiles = dynamic_item(item)
                    load_ring(Q, K, V, tq, tk, tv, qbar, fullk, fullv, empty, bh, qb, b, hk, ntiles, tb, k, qfree,
                              nxt, item)
                    tb = tb + ntiles
                    k = k + 1
                    # (drawn once the item's loads are issued: the producer then waits for the consumers anyway,
                    # and the count does not stay live through the loads)
                    T.cuda.tile.apply(T.ptx["atom.relaxed.gpu.global.add.s32"], got, ctr[0:1], 1)
                    item = G + got[0]
                T.cuda.tile.apply(T.ptx[WAIT], q_slot(qfree, k), q_free_phase(k))
                slot = q_slot(nxt, k)
                slot[0] = ITEMS
                T.cuda.tile.apply(T.ptx[ARRIVE], q_slot(qbar, k))
                T.cuda.tile.apply(T.ptx["atom.acq_rel.gpu.global.add.s32"], got, ctr[1:2], 1)
                if got[0] == G - 1:
                    ctr[0] = 0
                    ctr[1] = 0

    @tiledsl.inline
    def issue_s(sv, wq, wk, c, st):
        """S = Q K^T of the tile in stage `st` as one commit group (one wgmma call per box of Q's and K's
        columns)."""
        T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], sv, scope="warpgroup")
        for dh in T.unroll(boxes):
            T.cuda.tile.apply(T.ptx[mma_s], sv, wq[dh, c], wk[st, dh], scope="warpgroup", scale_d=dh > 0)
        T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], sv, scope="warpgroup")

    @tiledsl.inline
    def issue_pv(oacc, ov, pv, wv, al, fullv, st, j):
        """O = O * al + P V of tile j (stage st) as one commit group, once V has landed (the previous P V has
        retired, so O may be rescaled in registers first)."""
        if lazy:
            # al is exactly 1 for a row whose max stayed: skip the multiplies unless one of the thread's moved
            if al[0, 0] != 1.0 or al[1, 0] != 1.0:
                for i in T.unroll(NO):
                    oacc[i] = oacc[i] * al[(i // 2) % 2, 0]
        else:
            for i in T.unroll(NO):
                oacc[i] = oacc[i] * al[(i // 2) % 2, 0]
        T.cuda.tile.apply(T.ptx[WAIT], fullv[st:st + 1], (j // STG) % 2)
        T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], ov, pv, scope="warpgroup")
        if trans_v:
            T.cuda.tile.apply(T.ptx[mma_o], ov, pv, wv[st], scope="warpgroup", trans_b=1)
        else:
            T.cuda.tile.apply(T.ptx[mma_o], ov, pv, wv[st], scope="warpgroup")
        T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], ov, pv, scope="warpgroup")

    @tiledsl.inline
    def exponentials(sacc):
        """2^x of S's exponents in place: the blocks POLY_BLOCKS marks by the FMA-pipe polynomial (exp2_fma), the
        others by ex2.approx on MUFU, in column order so the two kinds interleave in the instruction stream."""
        sb = sacc.view(NB, 4, 1)
        for n in T.unroll(NB):
            if POLY_BLOCKS[n]:
                exp2_fma(sb[n], sb[n])
            else:
                T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], sb[n], sb[n])

    @tiledsl.inline
    def softmax(sacc, m, sh, al, lsum, part, j, row0, lane, first_row, cs):
        """The online softmax of S (tile j) in place, cs the log2-domain scale of the raw scores (a constant or a
        run-time value): mask, new row max m, exponentials, the rescale factor al of the old O and row sums, and
        this lane's partial row sums lsum."""
        # mask the ragged last tile and (causal) the tiles crossing this consumer's diagonal
        col0 = j * BN + 2 * (lane % 4)
        need = (j + 1) * BN > NK
        if causal:
            need = need or (j + 1) * BN - 1 > first_row
        if need:
            for i in T.unroll(NS):
                col = col0 + 8 * (i // 4) + i % 2
                if causal:
                    row = row0 + 8 * ((i // 2) % 2)
                    sacc[i] = NEG if (col >= NK or col > row) else sacc[i]
                else:
                    sacc[i] = NEG if col >= NK else sacc[i]
        # the new row max over the tile and the 4 lanes of the row
        # (NP independent chains per row, not one chain of BN / 4 dependent maxima)
        for r in T.unroll(2):
            for n in T.unroll(BN // 8):
                pair = T.max(sacc[4 * n + 2 * r], sacc[4 * n + 2 * r + 1])
                part[r, n % NP] = pair if n < NP else T.max(part[r, n % NP], pair)
            sh[r, 0] = m[r, 0]
            for q in T.unroll(NP):
                sh[r, 0] = T.max(sh[r, 0], part[r, q])
        for k in T.unroll(2):
            T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], al, sh, 1 << k, 0x1F, FULL_MASK)
            for r in T.unroll(2):
                sh[r, 0] = T.max(sh[r, 0], al[r, 0])
        for r in T.unroll(2):
            if lazy:
                lazy_max(m, sh, al, r, cs)
            # a row with no score yet keeps m = -inf: use 0 as its base so no inf - inf appears
            mc = sh[r, 0] * cs if sh[r, 0] != NEG else 0.0
            if not lazy:
                al[r, 0] = m[r, 0] * cs - mc
                m[r, 0] = sh[r, 0]
            # the exponent s * cs - m * cs as one fma per score
            srow = sacc.view(BN // 8, 2, 2, 1)[:, r]
            T.cuda.tile.apply(T.ptx["fma.rn.f32"], srow, srow, cs, -mc)
        if poly:
            exponentials(sacc)
        else:
            T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], sacc.view(NS, 1), sacc.view(NS, 1))
        T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], al, al)
        for r in T.unroll(2):
            for n in T.unroll(BN // 8):
                pair = sacc[4 * n + 2 * r] + sacc[4 * n + 2 * r + 1]
                part[r, n % NP] = pair if n < NP else part[r, n % NP] + pair
            acc = lsum[r, 0] * al[r, 0]
            for q in T.unroll(NP):
                acc = acc + part[r, q]
            lsum[r, 0] = acc

    @tiledsl.inline
    def row_sums(lsum, sh, al):
        """The epilogue's full row sums (over the 4 lanes of a row) in lsum, their log2 in al."""
        for k in T.unroll(2):
            T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], sh, lsum, 1 << k, 0x1F, FULL_MASK)
            for r in T.unroll(2):
                lsum[r, 0] = lsum[r, 0] + sh[r, 0]
        T.cuda.tile.apply(T.ptx["lg2.approx.f32"], al, lsum)

    @tiledsl.inline
    def store(O, LSE, oacc, lsum, m, al, num, cs, row0, lane, bh, b, h, first=0, c=0, w=0, tid=0, ow_smem=None,
              o_smem=None, qfree=None):
        """O * num / l packed to 16-bit pairs and stored (rows past N, and below 0, are not), and LSE = (m * cs +
        log2 l) * ln 2 (num: 1, or fp8's V descale). With tma_o the words go by stmatrix.x4 (one 16 x 16 block an
        instruction) into consumer c's 64 rows of Q's buffer (ow_smem: as b32 words, o_smem: as the TMA unit reads
        them; the consumer's last S has read them and no other warpgroup reads them), then one thread's TMA store
        of the D / 64 boxes from row `first` (the unit drops rows past N; a box below row 0 is skipped), waited for
        until it has read them (before the block may end; persistent, before Q's next load: qfree); w: the warp."""
        for r in T.unroll(2):
            inv = num / lsum[r, 0]
            for n in T.unroll(D // 8):
                for e in T.unroll(2):
                    oacc[4 * n + 2 * r + e] = oacc[4 * n + 2 * r + e] * inv
        # word 2n + r: row half r's columns 8n + 2(l % 4), + 1
        ow = T.alloc_local((NO // 2, 1), "uint32")
        T.cuda.tile.apply(T.ptx[cvt_o], ow, oacc.view(NO // 2, 2)[:, 1:2], oacc.view(NO // 2, 2)[:, 0:1])
        if tma_o:
            T.cuda.tile.apply(T.ptx[STMX4], ow_smem[c, w], ow.view(D // 16, 4, 8, 4, layout=L_PK), scope="warp")
            # the generic-proxy writes become visible to the TMA unit, then the warpgroup meets (its own barrier)
            T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
            T.cuda.tile.apply(T.ptx["bar.sync"], 1 + CONS + c, 128)
            if tid % 128 == 0:
                # align's first block: a box wholly below row 0 is not stored (the TMA unit faults on a store there;
                # N a multiple of 64 keeps every box wholly below or wholly from row 0, attention_hopper checks it)
                if (first >= 0 if qoff else True):
                    T.cuda.tile.apply(T.ptx[STORE], O, o_smem[c], coords=(bh, first, 0), coord_steps=step)
                    T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
                    T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)
                if persistent:
                    T.cuda.tile.apply(T.ptx[ARRIVE], qfree)
        gO = O.view(dtype="uint32").view(B * H * N, D // 2) if not tma_o else None
        for r in T.unroll(2):
            row = row0 + 8 * r
            if row < N and (row >= 0 if qoff else True):
                if not tma_o:
                    for n in T.unroll(D // 8):
                        gO[bh * N + row, 4 * n + lane % 4] = ow[2 * n + r, 0]
                if lane % 4 == 0:
                    LSE[b, h, row] = (m[r, 0] * cs + al[r, 0]) * LN2

    @tiledsl.inline
    def turn_begin(c):
        """Ping-pong: consumer c waits on its barrier (1 + c) until the previous consumer has issued its wgmma
        groups of the turn (its arrival and this sync make the 256 threads of a phase)."""
        if pingpong:
            T.cuda.tile.apply(T.ptx["bar.sync"], 1 + c, 256)

    @tiledsl.inline
    def turn_end(c, last):
        """Ping-pong: consumer c has issued this turn's groups: the next consumer's turn. The last consumer's last
        turn hands to nobody (so every barrier's arrivals match its syncs when the block ends); in the persistent
        walk it hands to the first consumer's next item, and turns_close takes the walk's last hand-over."""
        if pingpong:
            if last and not persistent:
                if c != CONS - 1:
                    T.cuda.tile.apply(T.ptx["bar.arrive"], 1 + (c + 1) % CONS, 256)
            else:
                T.cuda.tile.apply(T.ptx["bar.arrive"], 1 + (c + 1) % CONS, 256)

    @tiledsl.inline
    def turns_open(c):
        """Ping-pong: the last consumer lets the first one take the first turn (once a block: the persistent walk
        hands over from item to item)."""
        if pingpong:
            if c == CONS - 1:
                T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 256)

    @tiledsl.inline
    def turns_close(c):
        """Ping-pong, after the persistent walk: the first consumer takes the last consumer's last hand-over, so
        every barrier's arrivals match its syncs when the block ends."""
        if pingpong:
            if c == 0:
                T.cuda.tile.apply(T.ptx["bar.sync"], 1, 256)

    @tiledsl.inline
    def release_k(empty, lane, r):
        """early_k: the S that read the K of the tile the ring counts r has retired: the warp releases the
        stage's K (one arrive per warp)."""
        if early_k:
            if lane == 0:
                T.cuda.tile.apply(T.ptx[ARRIVE], empty[STG + r % STG:STG + r % STG + 1])

    @tiledsl.inline
    def consume(c, lane, row0, qb, ntiles, wq, wk, wv, qbar, fullk, fullv, empty, cs, tb=0, k=0, qfree=None):
        """Consumer warpgroup c's main loop over the item's ntiles key tiles, up to the full row sums: returns
        (oacc, lsum, m, al) for store(). row0: this lane's first row (the other is row0 + 8); cs: the log2-domain
        scale of the raw scores. Persistent: the k-th item of the walk, after tb tiles (its registers start afresh
        here); once its last S has retired each warp arrives on qfree, and it releases the last tile's stage."""
        wq = q_view(wq, k)
        sacc = T.alloc_local((NS,), "float32")
        oacc = T.alloc_local((NO,), "float32")
        pk, hp, pv = p_regs()
        m = T.alloc_local((2, 1), "float32")      # running row max of the raw scores (row half r)
        sh = T.alloc_local((2, 1), "float32")     # shuffle scratch
        al = T.alloc_local((2, 1), "float32")     # rescale factor of the old O and row sum
        lsum = T.alloc_local((2, 1), "float32")   # this lane's partial row sums
        part = T.alloc_local((2, NP), "float32")  # the softmax's partial row maxima and sums
        sv = sacc.view(1, 1, 64, BN, layout=L_S)
        ov = oacc.view(1, 1, 64, D, layout=L_O)
        for i in T.unroll(NO):
            oacc[i] = 0.0
        for r in T.unroll(2):
            m[r, 0] = NEG
            lsum[r, 0] = 0.0
        if not persistent:
            turns_open(c)
        # prologue: S of tile 0 and its softmax, so the loop always holds P of the tile it multiplies by V
        T.cuda.tile.apply(T.ptx[WAIT], q_slot(qbar, k), q_phase(k) if persistent else 0)
        if persistent:
            s0 = ring(tb, 0) % STG
            T.cuda.tile.apply(T.ptx[WAIT], fullk[s0:s0 + 1], (ring(tb, 0) // STG) % 2)
        else:
            T.cuda.tile.apply(T.ptx[WAIT], fullk[0:1], 0)
        turn_begin(c)
        issue_s(sv, wq, wk, c, ring(tb, 0) % STG if persistent else 0)
        turn_end(c, False)
        T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, sv, scope="warpgroup")
        release_k(empty, lane, ring(tb, 0))
        softmax(sacc, m, sh, al, lsum, part, 0, row0, lane, block_row(qb) + 64 * c, cs)
        to_p(pk, hp, sacc)
        # every tile but the last: its P V and the next tile's S and softmax (the last tile is peeled off so the
        # loop body has no branch between the wgmma groups: ptxas then keeps them asynchronous)
        for j in range(ntiles - 1):
            st = ring(tb, j) % STG
            s1 = ring(tb, j + 1) % STG
            if overlap or pingpong:
                # S of the next tile goes to the tensor cores first (S's registers are free: P holds tile j); with
                # ping-pong both groups are issued in one turn
                T.cuda.tile.apply(T.ptx[WAIT], fullk[s1:s1 + 1], (ring(tb, j + 1) // STG) % 2)
                turn_begin(c)
                issue_s(sv, wq, wk, c, s1)
                issue_pv(oacc, ov, pv, wv, al, fullv, st, ring(tb, j))
                turn_end(c, False)
                if overlap:
                    # groups retire in order: all but the newest (P V) is S of the next tile; its softmax runs
                    # while P V is on the tensor cores
                    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, sv, scope="warpgroup")
                    release_k(empty, lane, ring(tb, j + 1))
                    softmax(sacc, m, sh, al, lsum, part, j + 1, row0, lane, block_row(qb) + 64 * c, cs)
                    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, ov, pv, scope="warpgroup")
                    # the warp's wgmmas have read stage st: release it (one arrive per warp)
                    if lane == 0:
                        T.cuda.tile.apply(T.ptx[ARRIVE], empty[st:st + 1])
                else:
                    # ping-pong without overlap: the other consumer's softmax hides this one's wgmma groups
                    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, sv, ov, pv, scope="warpgroup")
                    if lane == 0:
                        T.cuda.tile.apply(T.ptx[ARRIVE], empty[st:st + 1])
                    release_k(empty, lane, ring(tb, j + 1))
                    softmax(sacc, m, sh, al, lsum, part, j + 1, row0, lane, block_row(qb) + 64 * c, cs)
            else:
                issue_pv(oacc, ov, pv, wv, al, fullv, st, ring(tb, j))
                T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, ov, pv, scope="warpgroup")
                if lane == 0:
                    T.cuda.tile.apply(T.ptx[ARRIVE], empty[st:st + 1])
                T.cuda.tile.apply(T.ptx[WAIT], fullk[s1:s1 + 1], (ring(tb, j + 1) // STG) % 2)
                issue_s(sv, wq, wk, c, s1)
                T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, sv, scope="warpgroup")
                release_k(empty, lane, ring(tb, j + 1))
                softmax(sacc, m, sh, al, lsum, part, j + 1, row0, lane, block_row(qb) + 64 * c, cs)
            # P V has read P: the next tile's P may overwrite it
            to_p(pk, hp, sacc)
        last = ntiles - 1
        if persistent and not tma_o:
            # every S of the item has retired (the loop waited for each): the producer may load the next Q (with
            # tma_o once the epilogue's store has read O from Q's rows: store)
            if lane == 0:
                T.cuda.tile.apply(T.ptx[ARRIVE], q_slot(qfree, k))
        turn_begin(c)
        issue_pv(oacc, ov, pv, wv, al, fullv, ring(tb, last) % STG, ring(tb, last))
        turn_end(c, True)
        T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, ov, pv, scope="warpgroup")
        if persistent:
            # the next item's tiles refill this stage
            if lane == 0:
                T.cuda.tile.apply(T.ptx[ARRIVE], empty[ring(tb, last) % STG:ring(tb, last) % STG + 1])
        # the epilogue's full row sums
        row_sums(lsum, sh, al)
        return oacc, lsum, m, al

    return ForwardParts(ring_barriers, init_barriers, load_ring, produce, issue_s, issue_pv, softmax, row_sums, store,
                        consume, work_item, walk_length, produce_walk, turns_open, turns_close, dynamic_item,
                        produce_dynamic, block_row, q_slot, q_view, q_phase,
                        q_free_phase)
