"""C = A · Bᵀ on tensor cores with mma.sync, written only in the kernel language.

A is M×K and B is N×K, both row-major (the `row.col` convention), f16 or bf16; accumulation in f32; C is f16,
bf16 or f32. One block computes a BM×BN tile with WM×WN warps, each a (BM/WM)×(BN/WN) warp tile:
  * a STAGES-deep cp.async pipeline moves 16-byte chunks of A and B from global to shared memory;
  * shared tiles are XOR-swizzled so the 8 rows one ldmatrix reads fall in 8 different bank groups;
  * ldmatrix.x4 loads the A and B fragments; mma.sync.m16n8k16 accumulates 4×8 tiles per warp;
  * blocks walk the output in column-major groups of GROUP_M rows so neighbouring blocks share A and B in L2.
make_gemm's kernels need sizes that are multiples of the block tile (BM, BN, BK). `matmul` (matmul.py) routes
(route()): on an sm_90 GPU to the warp-specialised TMA + wgmma kernel of hopper.py (any M, N; K % 8 == 0),
elsewhere to this kernel, padding operands no configuration tiles; `matmul_fp8` (fp8.py) runs the Hopper FP8 form.
examples/gemm.py walks through this kernel and runs it (`python examples/gemm.py`).
"""
import tiledsl
from tiledsl import T
from tiledsl import layouts as layouts_lib

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
    """Shared and register layouts of one configuration (shared ones in b32 words), from tiledsl.layouts.

    padded: rows of bk/2 + 4 words and no swizzle (bulk copies write rows as they are; the 16-byte pad puts
    the 8 rows one ldmatrix reads in 8 different bank groups instead)."""
    tm, tn = bm // wm, bn // wn      # the warp tile
    MI, NI = tm // 16, tn // 8       # m16 and n8 mma tiles per warp
    words = bk // 2 + (4 if padded else 0)   # b32 words per shared row
    # XOR the 16-byte chunk index with row bits so the 8 rows one ldmatrix reads hit 8 different bank groups
    # (rows of 16 chunks keep the XOR at 3 bits: 8 rows share a bank group only every 8 chunks)
    sw = None if padded else layouts_lib.row_swizzle(2 * bk)
    tile = dict(stages=stages, row_words=words, swizzle=sw)
    L = {}
    # the shared stages as 16-byte chunks (the cp.async view): (stage, row, chunk, word)
    L["cp_a"] = layouts_lib.chunk_rows(bm, bk, **tile)
    L["cp_b"] = layouts_lib.chunk_rows(bn, bk, **tile)
    # the same stages as ldmatrix.x4 reads them: (stage, warp, m16 tile | n8-tile pair, k16 step, matrix, row, word)
    L["ld_a"] = layouts_lib.ldmatrix_a(bm, bk, warps=wm, **tile)
    L["ld_b"] = layouts_lib.ldmatrix_b(bn, bk, warps=wn, **tile)
    # registers: ldmatrix matrix i -> register i of each group of 4; the same registers as mma.sync operands
    L["r_a"] = layouts_lib.ldmatrix_regs(MI)
    L["r_b"] = layouts_lib.ldmatrix_regs(NI // 2)
    L["m_a"] = layouts_lib.mma_a(MI, 1)
    L["m_b"] = layouts_lib.mma_b(NI, 1)
    L["m_d"] = layouts_lib.mma_c(MI, NI)
    # the same register layouts over two fragment buffers (software pipelining: load k+1 while k multiplies)
    L["r_a2"] = layouts_lib.ldmatrix_regs(2, MI)
    L["r_b2"] = layouts_lib.ldmatrix_regs(2, NI // 2)
    L["m_a2"] = layouts_lib.mma_a(2, MI, 1)
    L["m_b2"] = layouts_lib.mma_b(2, NI, 1)
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
