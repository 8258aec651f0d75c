"""The skinny GEMM kernel (M <= 64, and up to 256 as a tuner candidate): C = A · Bᵀ computed as Cᵀ = B · Aᵀ.

At a decode-sized M the product is a read of the weight B (N x K): the work is how fast B streams, not the tensor
cores. So the roles swap (swap-AB): B's rows, the large N, are wgmma's M (64 rows a consumer warpgroup), and A's
few rows are wgmma's N (MP: the smallest multiple of 8 covering M, `m64nMPk16`). B streams through a deep ring of
TMA stages (each stage one BM x 128-byte box of B and the MP x 128-byte box of A beside it: A's box is a few KB, read
from L2), and the K loop is split S ways so that N / BM tiles x S splits give every SM a block (skinny.py chooses S
from the shape and the SM count).

Split-K without waits (the last-arriver pattern; schedule.py's `skinny_block`, `skinny_slot`, `skinny_is_last`):
block (tile t, split s) runs its K tiles, writes its f32 partial sums to workspace slot t * S + s, and one thread
increments the tile's counter with `atom.acq_rel.gpu.global.inc.u32` of limit S - 1 (release: the block's partial
sums, ordered before it by the consumers' named barrier, are visible to whoever acquires the counter after it). The
block that reads S - 1 back arrived last: every other split's partial sums are out, so it adds the S partials in
split order (a fixed order: bit-reproducible whichever block is last) and writes C. `inc` wraps the counter to 0 in
that same atomic, so the next launch (a CUDA graph replay included) starts from zeros with no memset. No block ever
waits for another: a block that is not last simply leaves. With S = 1 there is no workspace and no counter.

C is written from the Cᵀ fragment: register i of consumer c's thread (warp w, lane l) holds row n = 64c + 16w + l//4
+ 8((i//2)%2) of the tile, column m = 8(i//4) + 2(l%4) + i%2, stored as C[m, n] inside M x N. A bias (one value per
column of C: per accumulator row here) and an activation (epilogue.py's math) are fused there, four registers at a
time; FP8's scales multiply the sum once.
"""
import tiledsl
from tiledsl import T

from ...lib.producer import elect_one
from .epilogue import make_epilogue
from .hopper_kernel import FP8, HALF, ROW_BYTES, SMEM_LIMIT, k_tile, layouts
from .schedule import skinny_block, skinny_is_last, skinny_limit, skinny_slot

LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
ARRIVE = "atom.acq_rel.gpu.global.inc.u32"


def ring_bytes(bm: int, mp: int, stages: int) -> int:
    """The shared ring: `stages` x (BM rows of B + MP rows of A) x 128 bytes."""
    return stages * (bm + mp) * ROW_BYTES


def registers(threads: int, mp: int) -> int:
    """The register cap at launch: two blocks an SM where MP <= 64 (the accumulators are MP / 2 registers a
    thread), else what one block may take."""
    per = 65536 // threads // (2 if mp <= 64 else 1)
    return min(per // 8 * 8, 248)


def build(ab: str, out: str, mp: int, consumers: int, stages: int, splits: int, bt: str | None = None,
          bias: str | None = None, activation: str | None = None):
    """The kernel for A (M, K) of `ab` and B (N, K) of `bt` (default ab): both float16 or both bfloat16, or each
    e4m3/e5m2 (then with the per-tensor scales), C (M, N) of `out`, M <= mp (a multiple of 8, at most 256), BM =
    64 x consumers rows of B a block, a `stages`-deep ring, the K loop split `splits` ways (checked by skinny.py).
    Called as kernel(A, B, C[, scale_a, scale_b]), or with splits > 1 kernel(A, B, C[, scale_a, scale_b], W, F):
    W the f32 workspace (kernel.slots(N) floats), F the tiles' int32 counters (kernel.counters(N), zeros before
    the first launch; every launch leaves them at zero). FP8: wgmma k32 over 128-byte K tiles (both operands
    K-major, as wgmma's fp8 forms need), the sum scaled by scale_a * scale_b once, where C is written.

    bias (a dtype: C's or float32; half inputs only) adds a (N,) bias parameter after C: bias[n] is added to the
    finished sums of C's column n, then `activation` (None, relu, gelu, silu: epilogue.py's math) applies, four
    registers at a time, where C is written (the last arriver's, with split-K): kernel(A, B, C, bias[, W, F])."""
    bt = bt or ab
    IS_FP8 = ab in FP8
    if IS_FP8:
        # wgmma's A is B's rows (type bt), its B is A's rows (type ab)
        MMA = f"wgmma.mma_async.sync.aligned.m64n{mp}k32.f32.{bt}.{ab}"
        ELEM, KK = "uint8", 32
    else:
        MMA = f"wgmma.mma_async.sync.aligned.m64n{mp}k16.f32.{HALF[ab]}.{HALF[ab]}"
        ELEM, KK = ab, 16
    CONS, MP, STG, SPL = int(consumers), int(mp), int(stages), int(splits)
    BM = 64 * CONS
    KT = k_tile(ab)
    THREADS = 128 * (1 + CONS)
    CAP = registers(THREADS, MP)
    TX = (BM + MP) * ROW_BYTES                  # the bytes one stage's two boxes pay to its "full" barrier
    NACC = MP // 2                              # f32 accumulators per consumer thread
    # the last arriver's sum: chunks of at most 16 registers, whole groups of 4 (the epilogue's unit)
    NCH = -(-NACC // 16)
    while (NACC // 4) % NCH:
        NCH += 1
    CH = NACC // NCH
    if IS_FP8 and bias is not None:
        raise tiledsl.LaunchError("skinny gemm: the FP8 form takes no bias (matmul_fp8 runs the Hopper kernel then)")
    HAS_BIAS = bias is not None
    FUSED = HAS_BIAS or activation is not None
    _, act4 = make_epilogue(False, False, activation)      # the activation alone, on four finished values
    BIAS_ANN = T.Tensor(("N",), bias or "float32")
    # the hopper kernel's layouts with B's rows as wgmma's A operand (BM rows) and A's as its B operand (MP rows)
    L = layouts(BM, MP, KT, STG, CONS, ab)
    L_TB, L_WB, L_WA, L_ACC = L["tma_a"], L["wg_b"], L["wg_a"], L["acc"]
    L_TA = T.tma_layout((STG, 1, MP, KT), ELEM, 128)
    KSTEPS = KT // KK
    SCALE_ANN = T.Tensor((1,), "float32")
    A_ANN = T.TensorMap(("M", "K"), ELEM, box=(MP, KT), swizzle=128)
    B_ANN = T.TensorMap(("N", "K"), ELEM, box=(BM, KT), swizzle=128)
    C_ANN = T.Tensor(("M", "N"), out)
    W_ANN = T.Tensor(("WS",), "float32")
    F_ANN = T.Tensor(("NT",), "int32")

    @tiledsl.inline
    def put(C, v, i, n0, lane, sc, M, N):
        """Register i's value v (scaled by sc where FP8) into C inside M x N: row n0 + 8((i//2)%2) of the tile is
        C's column, 8(i//4) + 2(lane%4) + i%2 its row."""
        n = n0 + 8 * ((i // 2) % 2)
        m = 8 * (i // 4) + 2 * (lane % 4) + i % 2
        if m < M and n < N:
            if IS_FP8:
                C[m, n] = T.cast(v * sc, out)
            else:
                C[m, n] = T.cast(v, out)

    @tiledsl.inline
    def put4(C, acc, fin, raw, i0, n0, lane, sc, bias_t, M, N):
        """Registers i0 .. i0 + 3 (i0 a multiple of 4: rows n0 and n0 + 8 of the tile, two each) finished: scaled
        (FP8), plus the bias of their column of C, then the activation, into fin; and written to C."""
        for q in T.unroll(4):
            raw[q] = acc[i0 + q]
            if IS_FP8:
                raw[q] = raw[q] * sc
            if HAS_BIAS:
                raw[q] = raw[q] + T.cast(bias_t[T.min(n0 + 8 * (q // 2), N - 1)], "float32")
        act4(raw, fin, 0, None, 1.0, 0, lane, N)
        for q in T.unroll(4):
            put(C, fin[q], i0 + q, n0, lane, 1.0, M, N)

    @tiledsl.inline
    def finish(C, acc, i0, i1, n0, lane, sc, bias_t, M, N):
        """Registers i0 .. i1 - 1 into C: through put4 where fused, else one at a time."""
        if FUSED:
            fin = T.alloc_local((4,), "float32")
            raw = T.alloc_local((4,), "float32")
            for g in T.unroll(i0 // 4, i1 // 4):
                put4(C, acc, fin, raw, 4 * g, n0, lane, sc, bias_t, M, N)
        else:
            for i in T.unroll(i0, i1):
                put(C, acc[i], i, n0, lane, sc, M, N)

    @tiledsl.inline
    def skinny_tiles(A, B, C, bias_t, SA, SB, W, F, M, N, K):
        """The body: the producer warp's TMA ring, the consumers' wgmma over this block's K tiles, then (split-K)
        the partial sums out and the last arriver's sum, or the direct store of C."""
        tid = T.cuda.thread_id()
        wg = tid // 128
        sb = T.alloc_shared((STG * BM * KT,), ELEM)     # B's rows: wgmma's A operand
        sa = T.alloc_shared((STG * MP * KT,), ELEM)     # A's rows: wgmma's B operand
        full = T.alloc_shared((STG,), "uint64")         # stage s holds its K tile (phase u: the u-th fill)
        empty = T.alloc_shared((STG,), "uint64")        # stage s was read by every consumer warp
        tb = sb.view(STG, BM, KT, layout=L_TB)
        ta = sa.view(STG, 1, MP, KT, layout=L_TA)
        wb = sb.view(STG, CONS, 1, KSTEPS, 64, KK, layout=L_WA)
        wa = sa.view(STG, 1, KSTEPS, MP, KK, layout=L_WB)
        if SPL > 1:
            last = T.alloc_shared((1,), "int32")        # this block arrived last on its tile's counter
        if tid == 0:
            for s in T.unroll(STG):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], 4 * CONS)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        T.cuda.syncthreads()
        ktiles = (K + KT - 1) // KT                     # a ragged last K tile is zero-filled by the TMA unit
        bid = T.cuda.block_id(0)
        tile, split, k0, nk = skinny_block(bid, SPL, ktiles)
        row0 = tile * BM                                # the tile's first row of B (column of C)
        if wg == 0:
            # the producer: one elected thread issues every copy
            if T.cuda.warp_id() == 0:
                if elect_one() == 1:
                    for kk in range(nk):
                        s = kk % STG
                        if kk >= STG:
                            # the (kk // STG)-th refill of stage s waits for the consumers' previous use of it
                            T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], empty[s:s + 1],
                                              (kk // STG + 1) % 2)
                        T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], full[s:s + 1], TX)
                        T.cuda.tile.apply(T.ptx[LOAD], tb[s], B, full[s:s + 1], coords=(row0, (k0 + kk) * KT))
                        # A's MP rows: those past M are zero-filled (and add nothing)
                        T.cuda.tile.apply(T.ptx[LOAD], ta[s, 0], A, full[s:s + 1], coords=(0, (k0 + kk) * KT))
        else:
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            acc = T.alloc_local((NACC,), "float32")
            dv = acc.view(1, 1, 64, MP, layout=L_ACC)
            sc = 1.0
            if IS_FP8:
                sc = SA[0] * SB[0]
            for kk in range(nk):
                s = kk % STG
                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[s:s + 1], (kk // STG) % 2)
                T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
                # the first K step overwrites the accumulators (scale_d = 0)
                T.cuda.tile.apply(T.ptx[MMA], dv, wb[s, c], wa[s], scope="warpgroup", scale_d=kk > 0)
                T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
                # one group stays in flight; once the previous K tile's group is done its stage is read: release it
                T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, dv, scope="warpgroup")
                if kk > 0 and lane == 0:
                    T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[(kk + STG - 1) % STG:
                                                                                     (kk + STG - 1) % STG + 1])
            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
            if nk == 0:
                # a split past the last K tile (skinny.py never chooses one) contributes zeros
                for i in T.unroll(NACC):
                    acc[i] = 0.0
            n0 = row0 + 64 * c + 16 * w + lane // 4     # this thread's first row of B (column of C)
            if SPL > 1:
                # the partial sums out: register i of consumer thread t at (i * CONS + c) * 128 + t of the slot
                # (each warp's stores contiguous)
                wrow = skinny_slot(tile, split, SPL) * (BM * MP) + c * 128 + tid % 128
                for i in T.unroll(NACC):
                    W[wrow + i * (CONS * 128)] = acc[i]
                # every consumer thread has written before thread 128 arrives (its release covers them)
                T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128 * CONS)
                if tid == 128:
                    old = T.alloc_local((1,), "uint32")
                    fu = F.view(dtype="uint32")
                    T.cuda.tile.apply(T.ptx[ARRIVE], old, fu[tile:tile + 1], skinny_limit(SPL))
                    last[0] = skinny_is_last(T.cast(old[0], "int32"), SPL)
                # every consumer thread reads after thread 128's acquire
                T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128 * CONS)
                if last[0] == 1:
                    # the S partial sums in split order (the same order whichever block arrived last), CH registers
                    # at a time (the partials this block wrote are in the workspace too: its accumulators are free,
                    # and a chunk's loads in flight together cost CH more registers, not NACC)
                    for h in T.unroll(NCH):
                        rrow = skinny_slot(tile, 0, SPL) * (BM * MP) + c * 128 + tid % 128
                        for i in T.unroll(h * CH, (h + 1) * CH):
                            acc[i] = W[rrow + i * (CONS * 128)]
                        for j in range(1, SPL):
                            rrow = skinny_slot(tile, j, SPL) * (BM * MP) + c * 128 + tid % 128
                            for i in T.unroll(h * CH, (h + 1) * CH):
                                acc[i] = acc[i] + W[rrow + i * (CONS * 128)]
                        finish(C, acc, h * CH, (h + 1) * CH, n0, lane, sc, bias_t, M, N)
            else:
                finish(C, acc, 0, NACC, n0, lane, sc, bias_t, M, N)

    # the entries: the same body, the parameters this variant uses (one block per (tile, split): SPL x tiles)
    if IS_FP8 and SPL > 1:
        @tiledsl.jit
        def skinny_gemm_fp8_split(A: A_ANN, B: B_ANN, C: C_ANN, scale_a: SCALE_ANN, scale_b: SCALE_ANN, W: W_ANN,
                                  F: F_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=SPL * ((N + BM - 1) // BM),  # noqa: F821
                                                      block=THREADS, max_registers=CAP))
            skinny_tiles(A, B, C, None, scale_a, scale_b, W, F, M, N, K)  # noqa: F821
        kernel = skinny_gemm_fp8_split
    elif IS_FP8:
        @tiledsl.jit
        def skinny_gemm_fp8(A: A_ANN, B: B_ANN, C: C_ANN, scale_a: SCALE_ANN, scale_b: SCALE_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=(N + BM - 1) // BM,  # noqa: F821
                                                      block=THREADS, max_registers=CAP))
            skinny_tiles(A, B, C, None, scale_a, scale_b, None, None, M, N, K)  # noqa: F821
        kernel = skinny_gemm_fp8
    elif HAS_BIAS and SPL > 1:
        @tiledsl.jit
        def skinny_gemm_bias_split(A: A_ANN, B: B_ANN, C: C_ANN, bias: BIAS_ANN, W: W_ANN, F: F_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=SPL * ((N + BM - 1) // BM),  # noqa: F821
                                                      block=THREADS, max_registers=CAP))
            skinny_tiles(A, B, C, bias, None, None, W, F, M, N, K)  # noqa: F821
        kernel = skinny_gemm_bias_split
    elif HAS_BIAS:
        @tiledsl.jit
        def skinny_gemm_bias(A: A_ANN, B: B_ANN, C: C_ANN, bias: BIAS_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=(N + BM - 1) // BM,  # noqa: F821
                                                      block=THREADS, max_registers=CAP))
            skinny_tiles(A, B, C, bias, None, None, None, None, M, N, K)  # noqa: F821
        kernel = skinny_gemm_bias
    elif SPL > 1:
        @tiledsl.jit
        def skinny_gemm_split(A: A_ANN, B: B_ANN, C: C_ANN, W: W_ANN, F: F_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=SPL * ((N + BM - 1) // BM),  # noqa: F821
                                                      block=THREADS, max_registers=CAP))
            skinny_tiles(A, B, C, None, None, None, W, F, M, N, K)  # noqa: F821
        kernel = skinny_gemm_split
    else:
        @tiledsl.jit
        def skinny_gemm(A: A_ANN, B: B_ANN, C: C_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=(N + BM - 1) // BM,  # noqa: F821
                                                      block=THREADS, max_registers=CAP))
            skinny_tiles(A, B, C, None, None, None, None, None, M, N, K)  # noqa: F821
        kernel = skinny_gemm
    kernel.tile = (BM, MP, KT)
    kernel.splits = SPL
    kernel.slots = lambda N: max(-(-N // BM) * SPL * BM * MP, 1)     # W's floats for an N
    kernel.counters = lambda N: max(-(-N // BM), 1)                  # F's counters for an N
    # what the schedule model (schedule_model.check) needs to replay this kernel's walk
    kernel.walk = dict(kind="skinny", BM=BM, MP=MP, KT=KT, S=SPL, STG=STG)
    assert ring_bytes(BM, MP, STG) + 1024 <= SMEM_LIMIT
    return kernel
