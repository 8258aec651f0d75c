"""FlashAttention backward, FA2 style, written only in the kernel language (mma.sync + ldmatrix + cp.async).

The kernels backward.py's attention_backward(q, k, v, o, lse, do, causal=False, scale=None, path="fa2") runs for
the (B, H, N, D) tensors of attention() (f16/bf16, D in {64, 128}, any N, grouped-query attention), LSE the
forward's float32 natural-log log-sum-exp; path="fa3" runs fa3_backward.py's FA3-style main kernel (TMA + wgmma,
warp-specialised) after the same preprocessing, and that module's cast of its tiled dQ accumulator. Four kernels:
  * preprocessing: delta = rowsum(dO * O) and LSE * log2(e), float32, per head padded with zeros to whole query
    tiles (16-byte loads, each row's chunks summed over their lanes by shfl.sync.bfly);
  * the main kernel, one block of 8 warps per (batch, head, BK = 128 key rows), each warp owning 16 key rows.
    K_j and V_j stay in shared memory (their A fragments reloaded per k16 step: the dK and dV accumulators,
    2 x 16 x D floats per warp, already take D registers a thread); the query tiles (BQ = 64 rows of Q and dO at
    D = 64, 32 at D = 128, with their LSE and delta) stream through two shared stages by cp.async, tile i + 1 in
    flight while tile i is computed. Per tile, transposed so every product has the warp's key rows as its M
    dimension:
        S^T  = K_j Q_i^T                        (B = Q_i by ldmatrix.x4)
        P^T  = ex2(S^T * scale * log2e - LSE_i * log2e)   (ex2.approx; masked scores are -inf, so P is 0)
        dV_j += P^T dO_i                        (P^T packed to f16x2/bf16x2 in registers is the A fragment;
                                                 B = dO_i by ldmatrix.x4.trans)
        dP^T = V_j dO_i^T
        dS^T = P^T * (dP^T - delta_i) * scale   (scale folded here once for dK and dQ)
        dK_j += dS^T Q_i                        (B = Q_i by ldmatrix.x4.trans)
        dQ_i += dS K_j                          (dS^T through shared memory, read back by ldmatrix.x4.trans as
                                                 A; each warp adds its share of the tile with red.global.add.f32)
    dQ by atomics (FA2's choice) rather than a second pass over the key tiles per query tile: that pass would
    recompute S, P and dP (three more GEMMs beside the main kernel's five, 1.4x the tensor work) to save one
    float32 red per dQ element per key block, which L2 absorbs;
  * dK, dV: without GQA stored in q's dtype at the end of the block; with GQA (H_kv < H) every query head's
    block adds its float32 dK_j, dV_j into (B, H_kv, N_kv, D) buffers with red.global.add.f32;
  * a cast kernel writes dq (and, with GQA, dk, dv) in q's dtype from the float32 accumulators.
Causal (top-left aligned, key j <= query i): query tiles wholly above the diagonal are never visited, the tiles
crossing it run in a loop of their own with the causal mask, the rest unmasked; ragged query tails (rows >= N,
loaded clamped) and ragged key tails (rows >= N_kv) are masked to -inf, so their P and dS are exactly 0.
D = 256 is not supported: its dK and dV accumulators alone would be 256 registers a thread.
"""
import tiledsl
from tiledsl import T

from .backward_tile import tile_parts
from .common import LOG2E, cast_row8

# query rows per tile, per head dim: at D = 128 the dK and dV accumulators take 128 registers a thread, and a
# 64-row tile's S^T and dP^T (64 more) spill (ptxas -v sm_90: 104 bytes); 32 rows fit
QTILE = {64: 64, 128: 32}
# warps per block of the main kernel (each owns 16 key rows: BK = 16 * warps key rows a block), 4 or 8. 8 is FA2's
# choice (128 key rows: half the dQ atomics and half the Q/dO reads of 64) at the same 8 warps an SM as two
# 4-warp blocks (~250 registers a thread); not yet measured against 4 (benchmarks/attention.py --backward
# --bwd-warps 4,8 compares them)
WARPS = 8
DELTA_THREADS = 128

_KERNELS = {}


def make_delta(dtype, D, BH, N, NP):
    """The preprocessing kernel over BH heads of N rows of head dim D: Delta2[bh, n] = sum_d dO * O (float32) and
    LSE2[bh, n] = LSE * log2(e), both padded with zeros to NP rows a head (whole query tiles: the main kernel
    then reads its columns without clamping). 16-byte chunks, CPR lanes a row summed by shfl.sync.bfly."""
    key = ("delta", dtype, D, BH, N, NP)
    if key in _KERNELS:
        return _KERNELS[key]
    CPR = D // 8
    RPB = DELTA_THREADS // CPR
    LOGC = CPR.bit_length() - 1     # shuffle steps that sum a row's CPR lanes
    NB = -(-(BH * NP) // RPB)

    @tiledsl.jit
    def attention_bwd_delta(O: T.Tensor((BH * N, D), dtype), dO: T.Tensor((BH * N, D), dtype),
                            LSE: T.Tensor((BH * N,), "float32"), Delta2: T.Tensor((BH * NP,), "float32"),
                            LSE2: T.Tensor((BH * NP,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=NB, block=DELTA_THREADS))
        tid = T.cuda.thread_id()
        p = T.cuda.block_id() * RPB + tid // CPR      # padded row
        c = tid % CPR
        n = p % NP
        r = (p // NP) * N + T.min(n, N - 1)           # its row of O (clamped: pad rows compute and drop)
        r = T.min(r, BH * N - 1)
        ro = T.alloc_local((1, 4), "uint32")
        rd = T.alloc_local((1, 4), "uint32")
        T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], ro[0], O.view(dtype="uint32")[r, c * 4: c * 4 + 4])
        T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], rd[0], dO.view(dtype="uint32")[r, c * 4: c * 4 + 4])
        ho = ro.view(dtype=dtype)
        hd = rd.view(dtype=dtype)
        acc = T.alloc_local((1, 1), "float32")
        sh = T.alloc_local((1, 1), "float32")
        s = T.float32(0)
        for j in T.unroll(8):
            s = s + T.cast(ho[0, j], "float32") * T.cast(hd[0, j], "float32")
        acc[0, 0] = s
        for k in T.unroll(LOGC):
            T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], sh, acc, 1 << k, 0x1F, 0xFFFFFFFF)
            acc[0, 0] = acc[0, 0] + sh[0, 0]
        if c == 0 and p < BH * NP:
            Delta2[p] = acc[0, 0] if n < N else 0.0
            LSE2[p] = LSE[r] * LOG2E if n < N else 0.0

    _KERNELS[key] = attention_bwd_delta
    return attention_bwd_delta


def make_cast(dtype, n8):
    """Write n8 * 8 float32 values as `dtype` (round to nearest even), 8 a thread (two 16-byte loads, one store)."""
    key = ("cast", dtype, n8)
    if key in _KERNELS:
        return _KERNELS[key]
    NB = -(-n8 // 256)

    @tiledsl.jit
    def attention_bwd_cast(X: T.Tensor((n8, 8), "float32"), Y: T.Tensor((n8, 8), dtype)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=NB, block=256))
        i = T.cuda.block_id() * 256 + T.cuda.thread_id()
        if i < n8:
            cast_row8(X, i, Y, i, dtype)

    _KERNELS[key] = attention_bwd_cast
    return attention_bwd_cast


def make_attention_backward(dtype, D, causal, shape, scale, warps=None):
    """The main backward kernel for `dtype` ("float16"/"bfloat16"), head dim D, causal or not, shape =
    (B, H, H_kv, N, N_kv), softmax scale `scale` and `warps` (4 or 8, default WARPS) warps a block.

    Arguments: Q, dO (B, H, N, D); K, V (B, H_kv, N_kv, D); LSE2 (LSE * log2 e), Delta (B * H, NP) float32
    (NP: N rounded up to whole query tiles, make_delta's); dQacc (B*H*N, D)
    float32, zeroed, which the kernel adds into; dK, dV: (B, H_kv, N_kv, D) in `dtype` without GQA, else float32
    zeroed accumulators (B*H_kv*N_kv, D)."""
    if D not in (64, 128):
        raise tiledsl.LaunchError(f"attention_backward supports head dims 64 and 128, got {D}")
    if dtype not in ("float16", "bfloat16"):
        raise tiledsl.LaunchError(f"attention_backward supports float16 and bfloat16, not {dtype}")
    warps = warps or WARPS
    if warps not in (4, 8):
        raise tiledsl.LaunchError(f"attention_backward runs 4 or 8 warps a block, got {warps}")
    key = ("bwd", dtype, D, bool(causal), tuple(shape), float(scale), warps)
    if key in _KERNELS:
        return _KERNELS[key]
    B, H, HK, N, NK = shape
    if H % HK:
        raise tiledsl.LaunchError(f"k/v have {HK} heads, which does not divide q's {H}")
    GROUP = H // HK
    COPY = "cp.async.cg.shared.global"
    W, CPR = D // 2, D // 8
    BQ = QTILE[D]
    BK, THREADS = 16 * warps, 32 * warps   # key rows, threads a block
    DN = D // 8
    MQ = BQ // 16                   # m16 tiles of dQ per query tile
    DPW = (DN // 2) * MQ // warps   # d-tile pairs of dQ per warp
    NKB = -(-NK // BK)              # key blocks per head
    NQT = -(-N // BQ)               # query tiles
    NP = NQT * BQ                   # LSE2 and Delta rows a head (padded)
    acc_t = dtype if GROUP == 1 else "float32"
    kv_shape = (B, HK, NK, D) if GROUP == 1 else (B * HK * NK, D)

    @tiledsl.inline
    def copy_rows(cp, g, stage, rows, row0, nrows, base, tid):
        """cp.async of `rows` rows from row0 (clamped to nrows - 1) of head row `base` into `stage` (None: the
        single-stage K or V)."""
        for j in T.unroll(rows * CPR // THREADS):
            c = tid + THREADS * j
            r = T.min(row0 + c // CPR, nrows - 1)
            if stage is None:
                T.cuda.tile.apply(T.ptx[COPY], cp[c // CPR, c % CPR], g[base + r, c % CPR, :], chunk_bytes=16)
            else:
                T.cuda.tile.apply(T.ptx[COPY], cp[stage, c // CPR, c % CPR], g[base + r, c % CPR, :],
                                  chunk_bytes=16)

    @tiledsl.inline
    def copy_stats(sl, gL, gD, stage, qt, bh, tid):
        """cp.async of query tile qt's LSE * log2e and delta (BQ floats each) into `stage` (qt clamped: a causal
        key block past the last query has no tile to walk, but its prologue still loads one)."""
        qt = T.min(qt, NQT - 1)
        if tid < BQ // 2:
            c = tid % (BQ // 4)
            if tid < BQ // 4:
                T.cuda.tile.apply(T.ptx[COPY], sl[stage, 0, c], gL[bh, qt * (BQ // 4) + c, :], chunk_bytes=16)
            else:
                T.cuda.tile.apply(T.ptx[COPY], sl[stage, 1, c], gD[bh, qt * (BQ // 4) + c, :], chunk_bytes=16)

    parts = tile_parts(dtype, D, BQ, warps, scale)
    shared, registers, gemm_t, key_tile, store_kv = (parts.shared, parts.registers, parts.gemm_t, parts.key_tile,
                                                     parts.store_kv)

    @tiledsl.jit
    def attention_bwd(Q: T.Tensor((B, H, N, D), dtype), K: T.Tensor((B, HK, NK, D), dtype),
                      V: T.Tensor((B, HK, NK, D), dtype), dO: T.Tensor((B, H, N, D), dtype),
                      LSE2: T.Tensor((B * H, NP), "float32"), Delta: T.Tensor((B * H, NP), "float32"),
                      dQ: T.Tensor((B * H * N, D), "float32"), dK: T.Tensor(kv_shape, acc_t),
                      dV: T.Tensor(kv_shape, acc_t), nq: T.int32):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=NKB * B * H, block=THREADS))
        tid = T.cuda.thread_id()
        warp = T.cuda.warp_id()
        lane = T.cuda.lane_id()
        pid = T.cuda.block_id()
        # the key blocks of one head are neighbours (its Q and dO stay in L2); causal: key block 0, which walks
        # every query tile, first
        bh = pid // NKB
        kb = pid % NKB
        b = bh // H
        h = bh % H
        qbase = bh * N
        kvrow = (b * HK + h // GROUP) * NK
        gQ = Q.view(dtype="uint32").view(B * H * N, CPR, 4)
        gO = dO.view(dtype="uint32").view(B * H * N, CPR, 4)
        gK = K.view(dtype="uint32").view(B * HK * NK, CPR, 4)
        gV = V.view(dtype="uint32").view(B * HK * NK, CPR, 4)

        sl, cp_k, cp_v, cp_q, cp_o, lda_k, ldb_q, smem = shared()
        gL = LSE2.view(dtype="uint32").view(B * H, NP // 4, 4)
        gD = Delta.view(dtype="uint32").view(B * H, NP // 4, 4)

        # causal: the first query tile holding a query >= this block's first key
        qt0 = 0
        if causal:
            qt0 = (kb * BK) // BQ

        copy_rows(cp_k, gK, None, BK, kb * BK, NK, kvrow, tid)
        copy_rows(cp_v, gV, None, BK, kb * BK, NK, kvrow, tid)
        copy_rows(cp_q, gQ, 0, BQ, qt0 * BQ, N, qbase, tid)
        copy_rows(cp_o, gO, 0, BQ, qt0 * BQ, N, qbase, tid)
        copy_stats(sl, gL, gD, 0, qt0, bh, tid)
        T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

        s_v, ra_ld, ra_mma, rb_ld, rb_mma, dk, dv, acc, regs = registers()

        key0 = kb * BK + warp * 16 + lane // 4         # this lane's key rows: key0 and key0 + 8
        mq = warp % MQ                                  # dQ: this warp's m16 tile of the query tile ...
        dp0 = (warp // MQ) * DPW                        # ... and its first d-tile pair
        # causal: the tiles crossing the diagonal (phase 0, always masked) apart from the rest (phase 1, masked
        # only where ragged), so neither loop carries the other's mask code
        qtm = qt0
        if causal:
            qtm = T.min(NQT, (kb * BK + BK - 1 + BQ - 1) // BQ)
        for ph in T.unroll(2 if causal else 1):
            lo = qt0 if ph == 0 else qtm
            hi = qtm if causal and ph == 0 else NQT
            for qt in range(lo, hi):
                st = (qt - qt0) % 2
                # Q/dO[qt] have landed and every warp is done with tile qt - 1 (its stage and dS^T): prefetch qt + 1
                T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)
                T.cuda.syncthreads()
                if qt + 1 < NQT:
                    copy_rows(cp_q, gQ, 1 - st, BQ, (qt + 1) * BQ, N, qbase, tid)
                    copy_rows(cp_o, gO, 1 - st, BQ, (qt + 1) * BQ, N, qbase, tid)
                    copy_stats(sl, gL, gD, 1 - st, qt + 1, bh, tid)
                T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

                gemm_t(s_v, lda_k[warp], ldb_q, st, ra_ld, ra_mma, rb_ld, rb_mma)
                key_tile(acc, regs, smem, st, qt, kb, warp, lane, key0, mq, dp0, N, NK, None, causal and ph == 0,
                         dQ, qbase, None, None, nq)

        # epilogue: this warp's 16 key rows of dK and dV
        for r in T.unroll(2):
            krow = key0 + 8 * r
            if krow < NK:
                if GROUP == 1:
                    store_kv(dk, dv, r, lane, kvrow + krow, (dK.view(dtype="uint32").view(B * HK * NK, W),
                                                             dV.view(dtype="uint32").view(B * HK * NK, W)), None)
                else:
                    store_kv(dk, dv, r, lane, kvrow + krow, None, (dK, dV))

    _KERNELS[key] = attention_bwd
    return attention_bwd
