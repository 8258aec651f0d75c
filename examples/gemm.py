"""C = A · Bᵀ on tensor cores with mma.sync, written only in the kernel language.

A is M×K and B is N×K, both row-major (the `row.col` convention), f16 or bf16; accumulation in f32; C is f16,
bf16 or f32. One block computes a BM×BN tile with WM×WN warps, each a (BM/WM)×(BN/WN) warp tile:
  * a STAGES-deep cp.async pipeline moves 16-byte chunks of A and B from global to shared memory;
  * shared tiles are XOR-swizzled so the 8 rows one ldmatrix reads fall in 8 different bank groups;
  * ldmatrix.x4 loads the A and B fragments; mma.sync.m16n8k16 accumulates 4×8 tiles per warp;
  * blocks walk the output in column-major groups of GROUP_M rows so neighbouring blocks share A and B in L2.
make_gemm's kernels need sizes that are multiples of the block tile (BM, BN, BK). `matmul` routes (route()):
on an sm_90 GPU to the warp-specialised TMA + wgmma kernel of examples/hopper_gemm.py (any M, N; K % 8 == 0),
elsewhere to this kernel, padding operands no configuration tiles; `matmul_fp8` runs the Hopper FP8 form.
"""
import argparse
import sys

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

from sm_count import NUM_SMS, sm_count

GROUP_M = 8
# matmul()'s choice: the first configuration whose block tile divides the shape (fastest first; measured on
# the H200 at 4096^3 f16, one sweep: 411, 390 and 394 TFLOP/s)
# matmul's choices, best first (measured on the H200, benchmarks/gemm.py --sweep --power): every configuration
# there runs into the board's 700 W cap, so the bigger block tile wins by moving fewer bytes per FLOP through L2.
# The smaller tiles serve sizes whose big-tile grid would leave SMs idle.
PREFERRED = [(256, 128, 64, 4, 2, 4, 1, 0, 1, 0, 1), (256, 128, 64, 4, 2, 3, 1, 0, 1, 0, 1), (256, 128, 64, 4, 2, 4, 1),
             (128, 128, 64, 2, 2, 3, 1, 0, 1, 0, 1), (128, 128, 64, 2, 2, 3, 1), (128, 64, 64, 2, 2, 4, 1, 0, 1, 0, 1),
             (128, 64, 64, 2, 2, 4, 1), (128, 128, 32, 2, 2, 4, 1)]
# without shape specialisation the strides live in registers and BK=64 with double-buffered fragments spills
DYNAMIC_PREFERRED = [(128, 128, 32, 2, 2, 4, 1)]
# (BM, BN, BK, warps along M, warps along N, stages, double-buffered fragments, copies spread over k steps,
#  k loop unrolled by stages, bulk copies, shared-memory epilogue)
CONFIGS = [(256, 128, 64, 4, 2, 4, 1, 0, 1, 0, 1), (256, 128, 64, 4, 2, 3, 1, 0, 1, 0, 1), (256, 128, 64, 4, 2, 4, 1),
           (256, 128, 64, 4, 2, 3, 1), (128, 256, 64, 2, 4, 4, 1), (128, 128, 64, 2, 2, 3, 1, 0, 1, 0, 1),
           (128, 128, 64, 2, 2, 3, 1), (128, 128, 64, 2, 2, 3, 0), (128, 128, 32, 2, 2, 4, 1),
           (128, 64, 64, 2, 2, 4, 1, 0, 1, 0, 1),
           (256, 128, 32, 4, 2, 6, 1, 1, 1, 0, 1), (128, 128, 64, 2, 2, 3, 1, 1),
           # bulk row copies: exact, but bound by the TMA unit's rate of 128-byte requests (about 195 TFLOP/s)
           (128, 128, 64, 2, 2, 3, 1, 0, 1, 1), (256, 128, 64, 4, 2, 4, 1, 0, 1, 1, 1)]


def usable(config, out):
    """Whether matmul may pick `config` for output dtype `out` (the shared-memory epilogue packs f16/bf16 pairs)."""
    return not (len(config) > 10 and config[10] and out == "float32")


def layouts(bm, bn, bk, wm, wn, stages, padded=False):
    """Shared and register layouts of one configuration (shared ones in b32 words).

    padded: rows of bk/2 + 4 words and no swizzle (bulk copies write rows as they are; the 16-byte pad puts
    the 8 rows one ldmatrix reads in 8 different bank groups instead)."""
    tm, tn = bm // wm, bn // wn      # the warp tile
    MI, NI = tm // 16, tn // 8       # m16 and n8 mma tiles per warp
    cpr = bk // 8                    # 16-byte chunks per row
    words = bk // 2 + (4 if padded else 0)   # b32 words per shared row
    ks = bk // 16                    # k16 steps per k tile
    # XOR the 16-byte chunk index with row bits so the 8 rows one ldmatrix reads hit 8 different bank groups
    # (rows of 16 chunks keep the XOR at 3 bits: 8 rows share a bank group only every 8 chunks)
    sw = None if padded else {2: (1, 2, 3), 4: (2, 2, 3), 8: (3, 2, 3), 16: (3, 2, 4)}[cpr]
    L = {}
    L["cp_a"] = TileLayout(S[(stages, bm, cpr, 4) : (bm * words, words, 4, 1)], swizzle=sw)
    L["cp_b"] = TileLayout(S[(stages, bn, cpr, 4) : (bn * words, words, 4, 1)], swizzle=sw)
    # A: (stage, warp row, m tile, k step, matrix, row, word); matrix i = (k half i//2, row half i%2)
    L["ld_a"] = TileLayout(S[(stages, wm, MI, ks, 2, 2, 8, 4) :
                             (bm * words, tm * words, 16 * words, 8, 4, 8 * words, words, 1)], swizzle=sw)
    # B: (stage, warp col, n-tile pair, k step, matrix, row, word); matrix i = (n tile i//2, k half i%2)
    L["ld_b"] = TileLayout(S[(stages, wn, NI // 2, ks, 2, 2, 8, 4) :
                             (bn * words, tn * words, 16 * words, 8, 8 * words, 4, words, 1)], swizzle=sw)
    # registers: ldmatrix matrix i -> register i of each group of 4; mma operands use the seed lane maps
    L["r_a"] = TileLayout(S[(MI, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)])
    L["r_b"] = TileLayout(S[(NI // 2, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)])
    L["m_a"] = TileLayout(S[(MI, 1, 2, 8, 2, 4) : (4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    L["m_b"] = TileLayout(S[(NI, 1, 8, 2, 4) : (2, 2, 4 @ laneid, 1, 1 @ laneid)])
    L["m_d"] = TileLayout(S[(MI, NI, 2, 8, 4, 2) : (NI * 4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])
    # the same register layouts over two fragment buffers (software pipelining: load k+1 while k multiplies)
    L["r_a2"] = TileLayout(S[(2, MI, 4, 8, 4) : (MI * 4, 4, 1, 4 @ laneid, 1 @ laneid)])
    L["r_b2"] = TileLayout(S[(2, NI // 2, 4, 8, 4) : (NI * 2, 4, 1, 4 @ laneid, 1 @ laneid)])
    L["m_a2"] = TileLayout(S[(2, MI, 1, 2, 8, 2, 4) : (MI * 4, 4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    L["m_b2"] = TileLayout(S[(2, NI, 1, 8, 2, 4) : (NI * 2, 2, 2, 4 @ laneid, 1, 1 @ laneid)])
    return L


_KERNELS = {}


def make_gemm(ab="float16", out="float16", config=None, shape=None):
    """The GEMM kernel for one input type (float16/bfloat16), output type (float16/bfloat16/float32) and
    configuration (BM, BN, BK, warps along M, warps along N, stages, double-buffered fragments).

    shape=(M, N, K) specialises the kernel to those sizes (every stride becomes an immediate, fewer registers);
    without it the sizes are read from the arguments at each launch."""
    shape = tuple(shape) if shape else None
    config = tuple(config or next(c for c in (PREFERRED if shape else DYNAMIC_PREFERRED) if usable(c, out)))
    if (ab, out, config, shape) in _KERNELS:
        return _KERNELS[(ab, out, config, shape)]
    if shape:
        M, N, K = shape       # closure constants: the kernel's sizes (else named sizes bound from the arguments)
    SA, SB, SC = ((M, K), (N, K), (M, N)) if shape else (("M", "K"), ("N", "K"), ("M", "N"))
    STATIC = shape is not None
    if ab not in ("float16", "bfloat16") or out not in ("float16", "bfloat16", "float32"):
        raise tiledsl.LaunchError(f"gemm supports float16/bfloat16 inputs and float16/bfloat16/float32 outputs, "
                                  f"not {ab} -> {out}")
    t = {"float16": "f16", "bfloat16": "bf16"}[ab]
    MMA = f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"
    LDM = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
    COPY = "cp.async.cg.shared.global"
    BULK_COPY = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
    CVT = f"cvt.rn.{ {'float16': 'f16', 'bfloat16': 'bf16'}.get(out, 'f16') }x2.f32"
    TBM, TBN, TBK, WM, WN, STAGES = config[:6]
    PIPE = config[6] if len(config) > 6 else 1        # double-buffered fragments (1) or not (0)
    # with PIPE: spread each k tile's copies over its k16 steps (1), or issue them all at the first (0)
    SPREAD = config[7] if len(config) > 7 else 0
    # with a static shape: unroll the k loop by STAGES so stage indices are constants (1), or not (0)
    UNROLL = config[8] if len(config) > 8 else 1
    # copies: cp.async, 16 bytes per thread (0), or bulk copies of whole rows by the TMA unit, counted by an
    # mbarrier per stage, into padded rows (1; sm_90, with double-buffered fragments)
    BULK = config[9] if len(config) > 9 else 0
    # epilogue (f16/bf16 out): 4-byte pairs straight from the registers (0), or through shared memory as
    # 16-byte pieces of rows (1)
    EPI = config[10] if len(config) > 10 else 0
    CW = TBN // 2 + 4                       # words per row of the epilogue's shared tile
    if BULK and (not PIPE or SPREAD):
        raise tiledsl.LaunchError(f"gemm configuration {config}: bulk copies need double-buffered fragments and "
                                  f"unspread copies")
    THREADS = 32 * WM * WN
    WORDS = TBK // 2
    CPR = WORDS // 4
    KS = TBK // 16
    CPT_A = TBM * CPR // THREADS      # 16-byte chunks each thread copies per k tile
    CPT_B = TBN * CPR // THREADS
    TM, TN = TBM // WM, TBN // WN     # warp tile
    MI, NI = TM // 16, TN // 8
    if TBK not in (16, 32, 64, 128):
        raise tiledsl.LaunchError(f"gemm configuration {config}: BK must be 16, 32, 64 or 128")
    if TM % 16 or TN % 16 or (TBM * CPR) % THREADS or (TBN * CPR) % THREADS:
        raise tiledsl.LaunchError(f"gemm configuration {config} does not tile: warp tiles must be multiples of "
                                  f"16 x 16 and the copies must divide among {THREADS} threads")
    if EPI and (out == "float32" or TBN // 2 + 4 > STAGES * (TBK // 2 + (4 if BULK else 0)) or
                (TBM * TBN // 8) % THREADS):
        raise tiledsl.LaunchError(f"gemm configuration {config}: the shared-memory epilogue needs an f16/bf16 "
                                  f"output, a {TBM} x {TBN // 2 + 4}-word tile within the pipeline's buffers and "
                                  f"16-byte pieces that divide among the threads")
    LY = layouts(TBM, TBN, TBK, WM, WN, STAGES, padded=bool(BULK))
    PW = WORDS + 4 if BULK else WORDS       # words per shared row
    BULK_ROWS = -(-(TBM + TBN) // THREADS)  # rows of A and B each thread copies per k tile
    L_CPA, L_CPB, L_LDA, L_LDB = LY["cp_a"], LY["cp_b"], LY["ld_a"], LY["ld_b"]
    L_RA, L_RB, L_MA, L_MB, L_MD = LY["r_a"], LY["r_b"], LY["m_a"], LY["m_b"], LY["m_d"]
    L_RA2, L_RB2, L_MA2, L_MB2 = LY["r_a2"], LY["r_b2"], LY["m_a2"], LY["m_b2"]

    @tiledsl.inline
    def copy_tile(tiles, stage, ktile, tid, part=0, parts=1):
        """cp.async of k tile `ktile` of A and B into shared stage `stage`: 16-byte chunks, THREADS at a time
        (only part `part` of `parts` of each thread's chunks)."""
        for cp, g, row0, cpt in tiles:
            for j in T.unroll(part * cpt // parts, (part + 1) * cpt // parts):
                # chunk tid + THREADS*j, written out rather than held in a variable: the index expressions
                # then keep j's share as a constant, which goes into the copy's [reg+imm] addresses
                if STATIC:
                    src = g[row0 + (tid + THREADS * j) // CPR, ktile * CPR + (tid + THREADS * j) % CPR, :]
                else:
                    w0 = ktile * WORDS + ((tid + THREADS * j) % CPR) * 4
                    src = g[row0 + (tid + THREADS * j) // CPR, w0: w0 + 4]
                T.cuda.tile.apply(T.ptx[COPY], cp[stage, (tid + THREADS * j) // CPR, (tid + THREADS * j) % CPR], src,
                                  chunk_bytes=16)

    @tiledsl.inline
    def bulk_tile(bufs, bars, stage, ktile, tid, row_a, row_b):
        """Bulk copies of k tile `ktile` into stage `stage`: each thread copies whole rows of A and B; thread 0
        tells the stage's mbarrier how many bytes to expect."""
        sa_rows, sb_rows, gA, gB = bufs
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])   # after the barrier: reads before writes
        for j in T.unroll(BULK_ROWS):
            r = tid + THREADS * j
            if r < TBM:
                T.cuda.tile.apply(T.ptx[BULK_COPY], sa_rows[stage, r, 0:WORDS],
                                  gA[row_a + r, ktile * WORDS: ktile * WORDS + WORDS], bars[stage:stage + 1],
                                  copy_bytes=TBK * 2)
            elif r < TBM + TBN:
                T.cuda.tile.apply(T.ptx[BULK_COPY], sb_rows[stage, r - TBM, 0:WORDS],
                                  gB[row_b + r - TBM, ktile * WORDS: ktile * WORDS + WORDS], bars[stage:stage + 1],
                                  copy_bytes=TBK * 2)
        if tid == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], bars[stage:stage + 1],
                              (TBM + TBN) * TBK * 2)

    @tiledsl.inline
    def k_tile(kt, st, tiles, frags, ld_a, ld_b, acc_v, tid, wm, wn, ktiles, bulk):
        """One k tile of the pipelined loop: its k16 steps multiply fragments loaded one step ahead, the stage
        consumed last tile is refilled, and the next tile's first fragments are loaded behind the barrier."""
        ra_ld, rb_ld, ra_mma, rb_mma = frags
        for ks in T.unroll(KS):
            nk = kt + STAGES - 1
            if SPREAD:
                # a share of the refill at every k16 step keeps the copies from queueing in front of
                # the fragment loads; the group is committed before the wait below counts it
                if nk < ktiles:
                    copy_tile(tiles, (st + STAGES - 1) % STAGES, nk, tid, ks, KS)
                if ks == KS - 1:
                    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
            elif ks == 0:
                # refill the stage every warp finished reading before the last barrier
                if BULK:
                    if nk < ktiles:
                        bulk_tile(bulk[0], bulk[1], (st + STAGES - 1) % STAGES, nk, tid, bulk[2], bulk[3])
                else:
                    if nk < ktiles:
                        copy_tile(tiles, (st + STAGES - 1) % STAGES, nk, tid)
                    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
            if ks == KS - 1:
                # the next tile must have landed, and every warp be done with the stage refilled next
                if BULK:
                    if kt + 1 < ktiles:     # its stage's barrier completes once per use: wait for that parity
                        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"],
                                          bulk[1][(st + 1) % STAGES:(st + 1) % STAGES + 1],
                                          ((kt + 1) // STAGES) % 2)
                else:
                    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], STAGES - 2)
                T.cuda.syncthreads()
                nst = (st + 1) % STAGES
                T.cuda.tile.apply(T.ptx[LDM], ra_ld[(ks + 1) % 2], ld_a[nst, wm, :, 0], scope="warp")
                T.cuda.tile.apply(T.ptx[LDM], rb_ld[(ks + 1) % 2], ld_b[nst, wn, :, 0], scope="warp")
            else:
                T.cuda.tile.apply(T.ptx[LDM], ra_ld[(ks + 1) % 2], ld_a[st, wm, :, ks + 1], scope="warp")
                T.cuda.tile.apply(T.ptx[LDM], rb_ld[(ks + 1) % 2], ld_b[st, wn, :, ks + 1], scope="warp")
            T.cuda.tile.apply(T.ptx[MMA], acc_v, ra_mma[ks % 2], rb_mma[ks % 2], acc_v, scope="warp")

    @tiledsl.jit
    def gemm(A: T.Tensor(SA, ab), B: T.Tensor(SB, ab), C: T.Tensor(SC, out)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=(M // TBM) * (N // TBN), block=THREADS))  # noqa: F821
        tid = T.cuda.thread_id()
        warp = T.cuda.warp_id()
        lane = T.cuda.lane_id()
        wm = warp // WN
        wn = warp % WN
        # grouped block order: GROUP_M block-rows share each block-column's B tile in L2
        pid = T.cuda.block_id()
        nbm = M // TBM  # noqa: F821
        nbn = N // TBN  # noqa: F821
        group = pid // (GROUP_M * nbn)
        first = group * GROUP_M
        rows = T.min(nbm - first, GROUP_M)
        bm = first + pid % rows
        bn = (pid % (GROUP_M * nbn)) // rows

        sa = T.alloc_shared((STAGES * TBM * PW,), "uint32")
        sb = T.alloc_shared((STAGES * TBN * PW,), "uint32")
        ld_a = sa.view(STAGES, WM, MI, KS, 4, 8, 4, layout=L_LDA)
        ld_b = sb.view(STAGES, WN, NI // 2, KS, 4, 8, 4, layout=L_LDB)
        gA = A.view(dtype="uint32")
        gB = B.view(dtype="uint32")
        bulk = None
        if BULK:
            bars = T.alloc_shared((STAGES,), "uint64")      # one mbarrier per stage: its tile has landed
            if tid == 0:
                for s in T.unroll(STAGES):
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], bars[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
            T.cuda.syncthreads()
            bulk = ((sa.view(STAGES, TBM, PW), sb.view(STAGES, TBN, PW), gA, gB), bars, bm * TBM, bn * TBN)
        else:
            cp_a = sa.view(STAGES, TBM, CPR, 4, layout=L_CPA)
            cp_b = sb.view(STAGES, TBN, CPR, 4, layout=L_CPB)
        if STATIC and not BULK:
            # rows as 16-byte chunks of 4 words: each copy's source is one chunk, aligned by construction
            gA = gA.view(M, K // 8, 4)  # noqa: F821
            gB = gB.view(N, K // 8, 4)  # noqa: F821

        acc = T.alloc_local((MI * NI * 4,), "float32")
        acc_v = acc.view(MI, NI, 16, 8, layout=L_MD)
        for i in T.unroll(MI * NI * 4):
            acc[i] = 0.0

        ktiles = K // TBK  # noqa: F821
        tiles = None
        if BULK:
            for s in T.unroll(STAGES - 1):
                if s < ktiles:
                    bulk_tile(bulk[0], bars, s, s, tid, bm * TBM, bn * TBN)
        else:
            # the copies of one k tile: each thread moves CPT_A chunks of A's rows and CPT_B of B's
            tiles = ((cp_a, gA, bm * TBM, CPT_A), (cp_b, gB, bn * TBN, CPT_B))
            for s in T.unroll(STAGES - 1):
                if s < ktiles:
                    copy_tile(tiles, s, s, tid)
                T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

        if PIPE:
            ra = T.alloc_local((2 * MI * 4,), "uint32")
            rb = T.alloc_local((2 * NI * 2,), "uint32")
            ra_ld = ra.view(2, MI, 4, 8, 4, layout=L_RA2)
            rb_ld = rb.view(2, NI // 2, 4, 8, 4, layout=L_RB2)
            ra_mma = ra.view(2, MI, 1, 16, 8, layout=L_MA2)
            rb_mma = rb.view(2, NI, 1, 8, 8, layout=L_MB2)
            if BULK:
                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], bars[0:1], 0)
            else:
                T.cuda.tile.apply(T.ptx["cp.async.wait_group"], STAGES - 2)
            T.cuda.syncthreads()
            T.cuda.tile.apply(T.ptx[LDM], ra_ld[0], ld_a[0, wm, :, 0], scope="warp")
            T.cuda.tile.apply(T.ptx[LDM], rb_ld[0], ld_b[0, wn, :, 0], scope="warp")
            frags = (ra_ld, rb_ld, ra_mma, rb_mma)
            if STATIC and UNROLL:
                # the k loop unrolled by STAGES: every stage index is a constant, so fragment and copy addresses
                # are a per-thread register plus an immediate
                for kt0 in range(0, ktiles, STAGES):
                    for s in T.unroll(STAGES):
                        if ktiles % STAGES == 0 or kt0 + s < ktiles:
                            k_tile(kt0 + s, s, tiles, frags, ld_a, ld_b, acc_v, tid, wm, wn, ktiles, bulk)
            else:
                for kt in range(ktiles):
                    k_tile(kt, kt % STAGES, tiles, frags, ld_a, ld_b, acc_v, tid, wm, wn, ktiles, bulk)
        else:
            ra = T.alloc_local((MI * 4,), "uint32")
            rb = T.alloc_local((NI * 2,), "uint32")
            ra_ld = ra.view(MI, 4, 8, 4, layout=L_RA)
            rb_ld = rb.view(NI // 2, 4, 8, 4, layout=L_RB)
            ra_mma = ra.view(MI, 1, 16, 8, layout=L_MA)
            rb_mma = rb.view(NI, 1, 8, 8, layout=L_MB)
            for kt in range(ktiles):
                T.cuda.tile.apply(T.ptx["cp.async.wait_group"], STAGES - 2)
                T.cuda.syncthreads()
                # refill the stage that was consumed last iteration
                nk = kt + STAGES - 1
                if nk < ktiles:
                    copy_tile(tiles, nk % STAGES, nk, tid)
                T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
                st = kt % STAGES
                for ks in T.unroll(KS):
                    T.cuda.tile.apply(T.ptx[LDM], ra_ld, ld_a[st, wm, :, ks], scope="warp")
                    T.cuda.tile.apply(T.ptx[LDM], rb_ld, ld_b[st, wn, :, ks], scope="warp")
                    T.cuda.tile.apply(T.ptx[MMA], acc_v, ra_mma, rb_mma, acc_v, scope="warp")

        # epilogue: each lane holds pairs of adjacent columns (registers 2h, 2h+1 of a tile)
        if out == "float32":
            for mi in T.unroll(MI):
                for ni in T.unroll(NI):
                    for h in T.unroll(2):
                        row = bm * TBM + wm * TM + mi * 16 + h * 8 + lane // 4
                        col = bn * TBN + wn * TN + ni * 8 + 2 * (lane % 4)
                        base = (mi * NI + ni) * 4 + h * 2
                        C[row, col] = acc[base]
                        C[row, col + 1] = acc[base + 1]
        else:
            # one cvt packs two f32 into f16x2/bf16x2 (the first source goes to the upper half)
            pk = T.alloc_local((MI * NI * 2, 1), "uint32")
            pairs = acc.view(MI * NI * 2, 2)
            T.cuda.tile.apply(T.ptx[CVT], pk, pairs[:, 1:2], pairs[:, 0:1])
            gC = C.view(dtype="uint32")
            if EPI:
                # through shared memory: the warps write their pairs into the block's tile (rows padded by 16
                # bytes, so a warp's 8 rows x 4 words hit 32 banks), then every thread stores whole 16-byte
                # pieces of rows, so each global store covers full sectors
                T.cuda.tile.apply(T.ptx["cp.async.wait_all"])
                T.cuda.syncthreads()
                cs = sa.view(TBM, CW)
                for mi in T.unroll(MI):
                    for ni in T.unroll(NI):
                        for h in T.unroll(2):
                            r = wm * TM + mi * 16 + h * 8 + lane // 4
                            cs[r, (wn * TN + ni * 8) // 2 + lane % 4] = pk[(mi * NI + ni) * 2 + h, 0]
                T.cuda.syncthreads()
                piece = T.alloc_local((4,), "uint32")
                for j in T.unroll(TBM * TBN // 8 // THREADS):
                    q = tid + THREADS * j
                    r = q // (TBN // 8)
                    c4 = (q % (TBN // 8)) * 4
                    T.cuda.tile.apply(T.ptx["ld.shared.v4.b32"], piece, cs[r, c4:c4 + 4])
                    T.cuda.tile.apply(T.ptx["st.global.v4.b32"], gC[bm * TBM + r, (bn * TBN) // 2 + c4:
                                                                     (bn * TBN) // 2 + c4 + 4], piece)
            else:
                for mi in T.unroll(MI):
                    for ni in T.unroll(NI):
                        for h in T.unroll(2):
                            row = bm * TBM + wm * TM + mi * 16 + h * 8 + lane // 4
                            colw = (bn * TBN + wn * TN + ni * 8) // 2 + lane % 4
                            gC[row, colw] = pk[(mi * NI + ni) * 2 + h, 0]

    _KERNELS[(ab, out, config, shape)] = gemm
    return gemm


DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32"}


def matmul(a, b, bias=None, activation=None, out_dtype=None, *, out=None, config=None, static=True, tune=True):
    """C = a @ b.T (+ bias, then activation) for torch CUDA tensors a (M, K) and b (N, K).

    On an sm_90 GPU (H100/H200) the product runs on the warp-specialised TMA + wgmma kernel of
    examples/hopper_gemm.py (any M and N; K a multiple of 8), elsewhere, and for shapes that kernel cannot take, on
    the mma.sync kernel above; `route()` is the decision. Shapes that no mma.sync block tile divides are padded with
    zeros to one (never refused); config= naming an mma.sync tuple keeps that kernel and refuses sizes it does not
    tile.

    The configuration is autotuned per (M, N, K, dtypes) by `tiledsl.autotune` (Hopper: over HOPPER_CONFIGS,
    pruned by shape; mma.sync: over TUNE_CONFIGS), the winner kept on disk (a later process reuses it);
    tune=False takes the heuristic (`choose_hopper()` / `choose()`) instead, and config= names one (a Hopper
    configuration as a dict of hopper_matmul's keywords or a HOPPER_CONFIGS tuple; an mma.sync one as a tuple of
    CONFIGS' form). static: compile one mma.sync kernel per (M, N, K) (the default), or one that reads the sizes at
    launch (not tuned; static=False also keeps the mma.sync path). `plan_of(a, b, out)` names the choice.
    bias (N,) and activation ("relu", "gelu", "silu" or a callable on the output) are fused into the Hopper
    kernel's epilogue where examples/hopper_gemm.py has one, else applied by torch after the kernel, in place."""
    import torch
    M, K = a.shape
    N, K2 = b.shape
    if K2 != K or a.dtype != b.dtype:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: need (M, K) "
                                  f"and (N, K) of one dtype")
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    if config is not None:
        config = tuple(sorted(config.items())) if isinstance(config, dict) else tuple(config)
    key = (M, N, K, a.dtype, out.dtype, a.device, config, static, tune)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _make_plan(a, b, out, config, static, tune)
    plan.run(a, b, out, bias, activation)
    return out


def plan_of(a, b, out=None, *, config=None, static=True, tune=True):
    """The `Plan` matmul(a, b, out=out, ...) runs (made, and tuned, on the first call of its key); `.describe`
    names the path and configuration (the benchmark prints it)."""
    import torch
    if out is None:
        out = torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device=a.device)
    if config is not None:
        config = tuple(sorted(config.items())) if isinstance(config, dict) else tuple(config)
    key = (a.shape[0], b.shape[0], a.shape[1], a.dtype, out.dtype, a.device, config, static, tune)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _make_plan(a, b, out, config, static, tune)
    return plan


class Plan:
    """What matmul runs for one key: `run(a, b, out, bias, activation)`, and `describe` (path and configuration)."""
    __slots__ = ("run", "describe", "path", "config")

    def __init__(self, run, describe, path, config):
        self.run, self.describe, self.path, self.config = run, describe, path, config

    def __repr__(self) -> str:
        return f"<matmul plan: {self.describe}>"


def _capability(t):
    """(major, minor) of tensor t's CUDA device, None for a host tensor."""
    if not getattr(t, "is_cuda", False):
        return None
    import torch
    return tuple(torch.cuda.get_device_capability(t.device))


def route(capability, M: int, N: int, K: int, ab: str, out: str) -> str:
    """Which kernel serves C (M x N, dtype `out`) = A (M x K) B^T (N x K), inputs of dtype `ab`, on a device of
    compute capability `capability` ((major, minor), None for no GPU): "hopper" (examples/hopper_gemm.py: sm_90,
    f16/bf16 in, f16/bf16/f32 out, K a multiple of 8 for the TMA unit's 16-byte rows), "mma" (the mma.sync kernel:
    some configuration tiles the shape) or "mma-padded" (the mma.sync kernel on operands padded with zeros to a
    tile multiple, the result copied back). A pure function of its arguments."""
    if (capability is not None and tuple(capability) == (9, 0) and ab in ("float16", "bfloat16")
            and out in ("float16", "bfloat16", "float32") and K % 8 == 0 and min(M, N, K) > 0):
        return "hopper"
    if any(_serves(c, M, N, K, out) for c in PREFERRED):
        return "mma"
    return "mma-padded"


def _make_plan(a, b, out, config, static, tune) -> Plan:
    """The plan of one matmul key: the route, then the configuration (given, tuned or the heuristic's)."""
    M, K = a.shape
    N = b.shape[0]
    ab, od = (DTYPES.get(str(t), str(t)) for t in (a.dtype, out.dtype))
    hopper_cfg = config is not None and _is_hopper_config(config)
    if config is not None and not hopper_cfg or not static:
        path = "mma"                       # an mma.sync configuration (sizes it must tile), or sizes read at launch
    else:
        path = route(_capability(a), M, N, K, ab, od)
    if hopper_cfg and path != "hopper":
        shown = dict(config) if isinstance(config[0], tuple) else config
        raise tiledsl.LaunchError(f"config={shown} is a Hopper configuration, but these operands take the mma.sync "
                                  f"path (route(): an sm_90 GPU, f16/bf16 inputs, K a multiple of 8; static=True)")
    sms = sm_count(a)
    if path == "hopper":
        return _hopper_plan(a, b, out, config, tune, sms)
    if path == "mma-padded":
        return _padded_plan(M, N, K, ab, od, sms)
    tunable = any(_serves(c, M, N, K, od) for c in TUNE_CONFIGS)
    if tune and static and config is None and a.is_cuda and tunable:
        launch, cfg = tuned_gemm.pick(a, b, out)
        cfg = cfg.constexprs["config"]
    else:
        cfg = config or choose(M, N, K, od, static, sms)
        launch = _plan(M, N, K, ab, od, cfg, static, sms)

    def run(a, b, out, bias, activation):
        launch(a, b, out)
        _epilogue(out, bias, activation)
    return Plan(run, f"mma.sync {cfg}{'' if static else ' dynamic'}", "mma", cfg)


def _epilogue(out, bias, activation):
    if bias is not None:
        out += bias
    if activation is not None:
        _activate(out, activation)


def _padded_plan(M, N, K, ab, od, sms) -> Plan:
    """The mma.sync kernel on zero-padded operands: A and B padded to multiples of 128 rows and 64 columns (zeros
    add nothing to the products), C computed in a padded buffer and its M x N corner copied into out."""
    import torch
    Mp, Np, Kp = -(-M // 128) * 128, -(-N // 128) * 128, -(-K // 64) * 64
    cfg = choose(Mp, Np, Kp, od, True, sms)
    kernel = _plan(Mp, Np, Kp, ab, od, cfg, True, sms)

    def run(a, b, out, bias, activation):
        ap = a.new_zeros((Mp, Kp))
        ap[:M, :K] = a
        bp = b.new_zeros((Np, Kp))
        bp[:N, :K] = b
        cp = torch.empty((Mp, Np), dtype=out.dtype, device=out.device)
        kernel(ap, bp, cp)
        out.copy_(cp[:M, :N])
        _epilogue(out, bias, activation)
    return Plan(run, f"mma.sync {cfg} on operands padded to {Mp}x{Np}x{Kp}", "mma-padded", cfg)


def _activate(out, activation):
    import torch
    fns = {"relu": torch.relu_, "gelu": lambda t: t.copy_(torch.nn.functional.gelu(t)),
           "silu": lambda t: torch.nn.functional.silu(t, inplace=True)}
    f = fns.get(activation) if isinstance(activation, str) else activation if callable(activation) else None
    if f is None:
        raise tiledsl.LaunchError(f"activation is one of {sorted(fns)} or a callable, got {activation!r}")
    r = f(out)
    if r is not None and r is not out:
        out.copy_(r)


# what matmul tunes over (>= 8 candidates): the preferred tiles, and two more shapes of block tile
TUNE_CONFIGS = PREFERRED + [(128, 256, 64, 2, 4, 4, 1), (256, 128, 32, 4, 2, 6, 1, 1, 1, 0, 1)]


def _gemm_for(A, B, C, config):
    """The kernel factory matmul tunes: the shape-specialised kernel of `config` for these arrays (a LaunchError,
    so the tuner skips the config, when it cannot serve them)."""
    ab, out = (DTYPES.get(str(t.dtype), str(t.dtype)) for t in (A, C))
    if not usable(config, out):
        raise tiledsl.LaunchError(f"gemm configuration {config}: its shared-memory epilogue needs an f16/bf16 output")
    (M, K), N = A.shape, B.shape[0]
    return _plan(M, N, K, ab, out, config, True)


def _serves(config, M, N, K, out) -> bool:
    return usable(config, out) and not (M % config[0] or N % config[1] or K % config[2])


def _prune(configs, args):
    """The configs that tile these arrays and suit the output dtype (matmul never tunes when none does)."""
    (M, K), N = args["A"].shape, args["B"].shape[0]
    out = DTYPES.get(str(args["C"].dtype), str(args["C"].dtype))
    return [c for c in configs if _serves(c.constexprs["config"], M, N, K, out)]


tuned_gemm = tiledsl.autotune(configs=[tiledsl.Config({"config": c}) for c in TUNE_CONFIGS],
                              key=["A", "B", "C"], prune=_prune)(_gemm_for)


def choose(M, N, K, out, static=True, sms=NUM_SMS):
    """The first preferred configuration that tiles the shape with at least 90% of a wave of blocks (one per
    SM); when none does, the one that tiles it with the most blocks."""
    prefs = [c for c in (PREFERRED if static else DYNAMIC_PREFERRED) if usable(c, out)]
    fits = [c for c in prefs if M % c[0] == 0 and N % c[1] == 0 and K % c[2] == 0]
    if not fits:
        return prefs[-1]        # refused by the size check, which names the sizes it needs
    blocks = lambda c: (M // c[0]) * (N // c[1])  # noqa: E731
    return next((c for c in fits if blocks(c) >= 0.9 * sms), max(fits, key=blocks))


_PLANS = {}     # matmul's choice per (sizes, dtypes, config, static): the steady call is one dict lookup


def _plan(M, N, K, ab, out, config, static, sms=NUM_SMS):
    if config is None:
        config = choose(M, N, K, out, static, sms)
    bm, bn, bk = config[:3]
    if M % bm or N % bn or K % bk:
        raise tiledsl.LaunchError(f"gemm supports M and N that are multiples of {bm} and {bn} and K a multiple of "
                                  f"{bk}; got M={M}, N={N}, K={K}")
    return make_gemm(ab, out, config, (M, N, K) if static else None)


# ---------------------------------------------------------------- the Hopper path (examples/hopper_gemm.py)
# A Hopper configuration: (BN, consumer warpgroups (BM = 64 each), stages, persistent, TMA-store epilogue where C's
# rows allow it, 2-CTA multicast of B[, split_k]); split_k, the blocks of a cluster sharing one tile's K loop, may
# be left out (1). The first is the big shapes' (659 TFLOP/s at 4096^3 f16 on the H200, 0.94x cuBLAS); the smaller
# tiles give the small shapes enough blocks for 132 SMs (1024^3 has 32 tiles of 128 x 256), and split-K gives
# them 128 x 128 tiles with two consumers in every block (1024^3: 64 tiles, 128 blocks).
HOPPER_FIELDS = ("bn", "consumers", "stages", "persistent", "tma_store", "multicast", "split_k", "stream_k")
HOPPER_CONFIGS = [(256, 2, 4, 1, 1, 0),     # persistent, 128 x 256 tiles
                  (256, 2, 4, 1, 1, 1),     # the same in 2-CTA clusters sharing B tiles
                  (128, 2, 6, 1, 1, 0),     # persistent, 128 x 128 tiles, a deeper ring (fits beside the epilogue)
                  (128, 2, 4, 1, 1, 0),     # persistent, 128 x 128 tiles
                  (128, 2, 4, 0, 1, 0),     # one 128 x 128 tile per block
                  (64, 2, 4, 0, 1, 0),      # 128 x 64 tiles: 4x the blocks of 128 x 256
                  (128, 1, 4, 0, 1, 0),     # 64 x 128 tiles, one consumer warpgroup
                  (128, 1, 8, 0, 1, 0),     # the same with an 8-deep ring (1024^3: 0.98x cuBLAS against 4 deep's 0.8x)
                  (64, 2, 8, 0, 1, 0),      # 128 x 64 tiles, 8 deep (1024^3: 0.85x against 4 deep's 0.73x)
                  (128, 2, 4, 0, 1, 0, 2),  # 128 x 128 tiles, K split between the 2 blocks of a cluster
                  (128, 2, 6, 0, 1, 0, 2),  # the same, a deeper ring (a rank's K loop is short: more in flight)
                  (128, 2, 4, 0, 1, 0, 4),  # the same over 4 blocks (512^3: 16 tiles, 64 blocks)
                  (192, 2, 4, 1, 1, 0)]     # persistent, 128 x 192 tiles: the waves of shapes 256 fits badly
                                            # (3072^3: 384 tiles, 2.9 waves, against 288 of 128 x 256, 2.2)
# stream-K on the persistent configurations where the tiles end in a short partial wave (stream_k_helps)
STREAM_K = True
# choose_hopper's order: the first that gives at least 90% of a wave of tiles wins
HOPPER_PREFERRED = [(256, 2, 4, 1, 1, 0), (128, 2, 4, 1, 1, 0), (128, 1, 8, 0, 1, 0)]


def _hopper_module():
    """examples/hopper_gemm.py (beside this file), imported once."""
    try:
        import hopper_gemm
    except ImportError:
        import os
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import hopper_gemm
    return hopper_gemm


def _is_hopper_config(config) -> bool:
    """A matmul config= that names the Hopper kernel: a dict of hopper_matmul keywords (as sorted items) or a
    HOPPER_CONFIGS tuple of 6 fields, 7 with split_k or 8 with stream_k (mma.sync tuples have 7 or more fields:
    theirs has its BN, at least 32, where a Hopper one has its consumer warpgroups, at most 4)."""
    if not config:
        return False
    if isinstance(config[0], tuple) or len(config) == 6:
        return True
    return len(config) in (7, 8) and config[1] <= 4


def hopper_tiles(config, M: int, N: int) -> int:
    """Output tiles of a Hopper configuration over an M x N product (ragged edges count as tiles)."""
    bn, cons = config[0], config[1]
    return -(-M // (64 * cons)) * -(-N // bn)


def hopper_split(config) -> int:
    """The split_k of a HOPPER_CONFIGS tuple (1 where the tuple leaves it out)."""
    return config[6] if len(config) > 6 else 1


def choose_hopper(M: int, N: int, K: int, out: str = "float16", sms: int = NUM_SMS) -> tuple:
    """The Hopper configuration matmul takes without tuning: the first of HOPPER_PREFERRED (biggest tile first)
    whose tiles fill at least 90% of a wave of `sms` blocks, else the one with the most tiles; where that leaves
    more than half the SMs idle at M <= 64, the stream-K 64 x 128 configuration over every SM. The TMA-store
    field stays 1: hopper_kwargs turns it off where C's rows are not multiples of 16 bytes."""
    best = next((c for c in HOPPER_PREFERRED if hopper_tiles(c, M, N) >= 0.9 * sms), None)
    best = best or max(HOPPER_PREFERRED, key=lambda c: hopper_tiles(c, M, N))
    if hopper_tiles(best, M, N) < 0.5 * sms and M <= 64:
        # a decode-sized M whose tiles leave most SMs idle: every SM's block shares their K steps (stream-K; H200:
        # 1 x 4096 x 14336 f16 0.90x cuBLAS against 0.68x for 32 blocks of 64 x 128)
        _hopper_module()                    # (examples/ on the path)
        import hopper_gemm_tuning
        return hopper_gemm_tuning.SMALL_M_STREAM_K[0]
    return best


def hopper_kwargs(config, N: int, out_size: int) -> dict:
    """hopper_matmul's keywords for a configuration (tuple or dict items): the TMA-store epilogue only where C's
    rows are multiples of 16 bytes (the tensor map's stride)."""
    kw = dict(config) if isinstance(config[0], tuple) else dict(zip(HOPPER_FIELDS, config))
    unknown = sorted(set(kw) - set(HOPPER_FIELDS) - {"group_m"})
    if unknown:
        raise tiledsl.LaunchError(f"a Hopper configuration takes {', '.join(HOPPER_FIELDS)} and group_m, not "
                                  f"{', '.join(unknown)}")
    for f in ("persistent", "tma_store", "multicast", "stream_k"):
        if f in kw:
            kw[f] = bool(kw[f])
    if kw.get("split_k", 1) == 1:
        kw.pop("split_k", None)             # the default: the keywords (and plan descriptions) of before
    if not kw.get("stream_k", False):
        kw.pop("stream_k", None)
    if kw.get("tma_store", True) and (N * out_size) % 16:
        kw["tma_store"] = False
    return kw


def describe_hopper(kw: dict) -> str:
    H = _hopper_module()
    bn, cons = kw.get("bn", H.BN), kw.get("consumers", H.CONSUMERS)
    parts = [f"hopper {64 * cons}x{bn} tiles", f"{kw.get('stages', H.STAGES)} stages"]
    parts += [name for f, name in (("persistent", "persistent"), ("tma_store", "TMA store"),
                                   ("multicast", "2-CTA multicast")) if kw.get(f)]
    if kw.get("split_k", 1) > 1:
        parts.append(f"split-K over {kw['split_k']} blocks")
    if kw.get("stream_k"):
        parts.append("stream-K")
    return ", ".join(parts)


def stream_k_helps(config, M: int, N: int, sms: int = NUM_SMS) -> bool:
    """Whether matmul adds stream-K to a configuration: persistent, no multicast or split-K, at least two whole
    waves of tiles and a partial one of at most 3/4 of a wave, whose K steps stream-K spreads over every block
    instead of leaving the other blocks idle. H200, 128 x 256 tiles, side by side with and without: 4096 x 14336
    x 4096 (13.6 waves) +0.9 / +1.0% (f16 / bf16), 8192^3 and 16384 x 4096 x 4096 (15.5 waves) +1.5 to +3.7%, and
    4096^3 (3.9 waves) -5%: there nearly every tile of the last wave is split, and the fix-ups cost more than
    the idle blocks did."""
    if not STREAM_K or len(config) < 6 or isinstance(config[0], tuple):
        return False
    tiles = hopper_tiles(config, M, N)
    return bool(config[3]) and not config[5] and hopper_split(config) == 1 and tiles > 2 * sms and \
        0 < tiles % sms <= 0.75 * sms


def _size_of(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def _hopper_for(A, B, C, hconfig):
    """The kernel factory the Hopper path tunes: make_hopper_gemm for these arrays and configuration."""
    ab, out = (DTYPES.get(str(t.dtype), str(t.dtype)) for t in (A, C))
    kw = hopper_kwargs(hconfig, B.shape[0], _size_of(out))
    return _hopper_module().make_hopper_gemm(ab, out, num_sms=sm_count(A), **kw)


def prune_hopper(configs, M: int, N: int, sms: int = NUM_SMS) -> list:
    """The Hopper candidates worth timing for an M x N output: those with at least half a wave of blocks (or half
    the most tiles any candidate has; a split-K tile counts as its split_k blocks), split-K only where its tiles
    unsplit make less than a wave, multicast only with at least 4 tile rows to pair, and where even the biggest
    tile makes 3 waves, only the persistent ones and one non-persistent 128 x 128 (the small tiles lose there)."""
    def cfg(c):
        return c.constexprs["hconfig"] if hasattr(c, "constexprs") else c
    most = max(hopper_tiles(cfg(c), M, N) for c in configs)
    big = hopper_tiles(HOPPER_CONFIGS[0], M, N) >= 3 * sms
    keep = []
    for c in configs:
        bn, cons, _, persistent, _, multicast = cfg(c)[:6]
        split = hopper_split(cfg(c))
        if hopper_tiles(cfg(c), M, N) * split < 0.5 * min(sms, most):
            continue
        if split > 1 and hopper_tiles(cfg(c), M, N) >= sms:
            continue
        if multicast and -(-M // (64 * cons)) < 4:
            continue
        if big and not persistent and (bn, cons) != (128, 2):
            continue
        keep.append(c)
    return keep


def _prune_hopper_args(configs, args):
    return prune_hopper(configs, args["A"].shape[0], args["B"].shape[0], sm_count(args["A"]))


tuned_hopper = tiledsl.autotune(configs=[tiledsl.Config({"hconfig": c}) for c in HOPPER_CONFIGS],
                                key=["A", "B", "C"], prune=_prune_hopper_args)(_hopper_for)


def _fused_epilogue() -> bool:
    """Whether hopper_matmul fuses bias and activation into its epilogue (examples/hopper_gemm.py's newer API)."""
    import inspect
    params = inspect.signature(_hopper_module().hopper_matmul).parameters
    return "bias" in params and "activation" in params


def _hopper_plan(a, b, out, config, tune, sms) -> Plan:
    """The Hopper kernel for one key: config= as given, else tuned (tune and a CUDA tensor), else choose_hopper."""
    import warnings
    H = _hopper_module()
    M, K = a.shape
    N = b.shape[0]
    ab, od = (DTYPES.get(str(t), str(t)) for t in (a.dtype, out.dtype))
    how = "given"
    if config is None and tune and a.is_cuda:
        try:
            config = tuned_hopper.pick(a, b, out)[1].constexprs["hconfig"]
            how = "tuned"
        except tiledsl.TiledslError as e:   # tuning failed: the heuristic's choice still serves the call
            warnings.warn(f"matmul: tuning the Hopper GEMM for {M}x{N}x{K} failed ({e}); using choose_hopper",
                          stacklevel=4)
    if config is None:
        config, how = choose_hopper(M, N, K, od, sms), "heuristic"
    if how == "heuristic" and stream_k_helps(config, M, N, sms):
        config = tuple(config[:6]) + (1, 1)
    if how == "tuned":
        config = _stream_k_stage(H, a, b, out, config, sms, ab, od)
    kw = hopper_kwargs(config, N, _size_of(od))
    kernel = H.make_hopper_gemm(ab, od, num_sms=sms, **kw)
    kernel, kw, how = _schedule_checked(H, kernel, kw, how, ab, od, M, N, K, sms)
    fused = _fused_epilogue()
    plain = {k: v for k, v in kw.items() if k != "stream_k"}   # the fused epilogues run without stream-K

    def run(a, b, out, bias, activation):
        if bias is None and activation is None:
            extra = H.workspace(kernel, a) if kw.get("stream_k") else ()
            kernel(a.contiguous(), b.contiguous(), out, *extra)
        elif fused and (activation is None or activation in ("relu", "gelu", "silu")):
            H.hopper_matmul(a, b, out=out, bias=bias, activation=activation, **plain)
        else:
            H.hopper_matmul(a, b, out=out, **kw)
            _epilogue(out, bias, activation)
    return Plan(run, f"{describe_hopper(kw)} ({how})", "hopper", kw)


def _stream_k_stage(H, a, b, out, config, sms, ab, od):
    """The tuned winner against its stream-K twin and, where its blocks leave SMs idle, the stream-K
    configurations every SM shares (hopper_gemm_tuning: timed here, where the workspace can be passed; the
    schedule model checks each first)."""
    import gemm_schedule_model as SM
    import hopper_gemm_tuning as HT
    import torch
    M, K = a.shape
    N = b.shape[0]

    def kernel_of(c):
        kw = hopper_kwargs(c, N, _size_of(od))
        return H.make_hopper_gemm(ab, od, num_sms=sms, **kw), kw
    cands = [c for c in HT.stream_k_candidates(sys.modules[__name__], config, M, N, sms)
             if SM.check(kernel_of(c)[0], M, N, K) is None] or [tuple(config)]
    A, B = a.contiguous(), b.contiguous()

    def run_of(c):
        k, kw = kernel_of(c)
        extra = H.workspace(k, a) if kw.get("stream_k") else ()
        return lambda: k(A, B, out, *extra)
    key = {"M": str(M), "N": str(N), "K": str(K), "ab": ab, "out": od, "sms": str(sms),
           "device": torch.cuda.get_device_name(a.device)}
    return HT.pick(cands, run_of, key)[0]


def _schedule_checked(H, kernel, kw, how, ab, od, M, N, K, sms):
    """The kernel matmul may launch: `kernel` where the schedule model (gemm_schedule_model.check) finds its walk
    sound over this shape, else the same configuration without stream-K, else one 128 x 128 tile per block (no
    waits between blocks); `how` then names what was refused. Nothing the model refuses is launched."""
    import gemm_schedule_model as SM
    why = SM.check(kernel, M, N, K)
    if why is None:
        return kernel, kw, how
    for fallback in ({k: v for k, v in kw.items() if k != "stream_k"}, hopper_kwargs(HOPPER_CONFIGS[4], N,
                                                                                       _size_of(od))):
        k2 = H.make_hopper_gemm(ab, od, num_sms=sms, **fallback)
        if SM.check(k2, M, N, K) is None:
            return k2, fallback, f"{how}; the schedule model refused {describe_hopper(kw)}: {why}"
    raise tiledsl.LaunchError(f"matmul {M}x{N}x{K}: the schedule model refuses every fallback ({why})")


_FP8_PLANS = {}     # matmul_fp8's keywords per (sizes, dtypes, device, config)


def matmul_fp8(a, b, scale_a, scale_b, out_dtype=None, bias=None, *, out=None, config=None, tune=True):
    """C = (scale_a * scale_b) * (a @ b.T) (+ bias) for FP8 torch CUDA tensors a (M, K) and b (N, K) (e4m3 or
    e5m2), per-tensor scales as one-element float32 tensors; C of `out_dtype` (default bfloat16). Runs the
    Hopper kernel's FP8 form (hopper_matmul_fp8 of examples/hopper_gemm.py) on an sm_90 GPU; elsewhere, or where
    that form is missing, a LaunchError says so. config= is a dict of its keywords; by default the configuration
    is tuned per shape on the first call (hopper_gemm_tuning.FP8_CONFIGS, kept on disk), or with tune=False
    choose_hopper's."""
    import torch
    out_dtype = out_dtype or torch.bfloat16
    cap = _capability(a)
    if cap != (9, 0):
        where = f"sm_{cap[0]}{cap[1]}" if cap else "the host"
        raise tiledsl.LaunchError(f"matmul_fp8 needs an sm_90 GPU (H100/H200: wgmma's e4m3/e5m2 forms); a is on "
                                  f"{where}")
    fp8 = getattr(_hopper_module(), "hopper_matmul_fp8", None)
    if fp8 is None:
        raise tiledsl.LaunchError("matmul_fp8: examples/hopper_gemm.py has no hopper_matmul_fp8 (the FP8 kernel)")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or "float8" not in str(a.dtype) + str(b.dtype):
        raise tiledsl.LaunchError(f"matmul_fp8: a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: "
                                  f"need FP8 (M, K) and (N, K)")
    M, K = a.shape
    N = b.shape[0]
    cfg_key = tuple(sorted(config.items())) if isinstance(config, dict) else None
    key = (M, N, K, a.dtype, b.dtype, out_dtype, a.device, cfg_key, bool(tune), bias is None)
    kw = _FP8_PLANS.get(key)
    if kw is None:
        import inspect
        params = inspect.signature(fp8).parameters
        if config is not None:
            kw = dict(config)
        elif tune and a.is_cuda:
            kw = _tuned_fp8(fp8, a, b, scale_a, scale_b, out_dtype, bias, params)
        else:
            kw = hopper_kwargs(choose_hopper(M, N, K, "bfloat16", sm_count(a)), N,
                               torch.empty((), dtype=out_dtype).element_size())
            kw = {k: v for k, v in kw.items() if k in params}
            try:        # the FP8 form's own limits may refuse a configuration the f16 one takes: its defaults then
                c = fp8(a, b, scale_a, scale_b, out_dtype, out=out, bias=bias, **kw)
            except tiledsl.TiledslError:
                kw = {}
                c = fp8(a, b, scale_a, scale_b, out_dtype, out=out, bias=bias)
            _FP8_PLANS[key] = kw
            return c
        _FP8_PLANS[key] = kw
    return fp8(a, b, scale_a, scale_b, out_dtype, out=out, bias=bias, **kw)


def fp8_plan_of(a, b, out_dtype=None, *, config=None, tune=True, bias=None) -> str:
    """What matmul_fp8(a, b, ..., out_dtype, bias) runs for these operands (after its first call of the key), in
    describe_hopper's words; None before that first call."""
    import torch
    cfg_key = tuple(sorted(config.items())) if isinstance(config, dict) else None
    key = (a.shape[0], b.shape[0], a.shape[1], a.dtype, b.dtype, out_dtype or torch.bfloat16, a.device, cfg_key,
           bool(tune), bias is None)
    kw = _FP8_PLANS.get(key)
    if kw is None:
        return None
    return "fp8 " + (describe_hopper(kw) if kw else "hopper_matmul_fp8's defaults")


def _tuned_fp8(fp8, a, b, scale_a, scale_b, out_dtype, bias, params) -> dict:
    """matmul_fp8's keywords for these operands: the fastest of hopper_gemm_tuning.fp8_candidates the schedule
    model finds sound, timed here."""
    import gemm_schedule_model as SM
    import hopper_gemm_tuning as HT
    import torch
    M, K = a.shape
    N = b.shape[0]
    sms = sm_count(a)
    size = torch.empty((), dtype=out_dtype).element_size()
    o = torch.empty((M, N), dtype=out_dtype, device=a.device)

    def kw_of(c):
        kw = hopper_kwargs(c, N, size)
        return {k: v for k, v in kw.items() if k in params}

    def run_of(c):
        kw = kw_of(c)
        H = _hopper_module()
        k = H.make_hopper_gemm_fp8(H.DTYPES[str(a.dtype)], H.DTYPES[str(b.dtype)], H.DTYPES[str(out_dtype)],
                                   num_sms=sms, **kw)
        why = SM.check(k, M, N, K)
        if why:
            raise tiledsl.LaunchError(f"the schedule model refuses it: {why}")       # never launched
        fp8(a, b, scale_a, scale_b, out_dtype, out=o, bias=bias, **kw)      # builds it, or refuses the config
        return lambda: fp8(a, b, scale_a, scale_b, out_dtype, out=o, bias=bias, **kw)
    key = {"M": str(M), "N": str(N), "K": str(K), "a": str(a.dtype), "b": str(b.dtype), "out": str(out_dtype),
           "bias": str(None if bias is None else bias.dtype), "sms": str(sms),
           "device": torch.cuda.get_device_name(a.device)}
    return kw_of(HT.pick(HT.fp8_candidates(sys.modules[__name__], M, N, sms), run_of, key)[0])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    n = opts.size
    if not gpu_available():
        k = make_gemm(opts.dtype, opts.dtype)
        n = max(n, 256)
        a = np.zeros((n, n), np.float16)
        ck = k.compile(a, a, a, target="sm_90")
        print(ck.metadata)
        print("gemm: no GPU found; compiled for sm_90 (metadata above)")
        return
    import torch
    dt = getattr(torch, opts.dtype)
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    c = matmul(a, b)
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).norm() / ref.norm()).item()
    print(f"gemm {n}^3 {opts.dtype}: relative error {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    sys.exit(main())
