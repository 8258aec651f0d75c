"""FlashAttention backward, FA2 style, written only in the kernel language (mma.sync + ldmatrix + cp.async), and a
torch.autograd.Function that trains through examples/attention.py's forward.

attention_backward(q, k, v, o, lse, do, causal=False, scale=None) -> (dq, dk, dv) for the (B, H, N, D) tensors of
attention() (f16/bf16, D in {64, 128}, any N, grouped-query attention), LSE the forward's float32 natural-log
log-sum-exp. path="fa3" (the default for CUDA tensors on an sm_90 device at D = 128) runs the FA3-style main kernel
of examples/attention_backward_hopper.py (TMA + wgmma, warp-specialised) after the same preprocessing, and that
module's cast of its tiled dQ accumulator; path="fa2" (the default elsewhere) runs this module's. Four kernels:
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

    python examples/attention_backward.py   # on the GPU: against torch autograd; without one: a small case on
                                            # the interpreter against a float64 reference
"""
import argparse
import math
import sys

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

from attention import LOG2E, NEG, _check, attention, layouts
from sm_count import sm_count

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


def _bwd_layouts(D, bq, warps):
    """Layouts for `warps` warps of one m16 tile of key rows each and query tiles of `bq` rows: the forward's register
    forms, and the backward's shared ones. Shared rows are padded by 16 bytes (WP = D / 2 + 4 words) instead of
    the forward's XOR swizzle: ldmatrix's 8 rows still fall in 8 different bank groups, and every fragment's
    address is one per-lane base plus a compile-time offset (swizzled addresses are per-lane values for each k
    step, and with ~100 of them hoisted out of the query loop the D = 128 kernel ran out of registers)."""
    L = layouts(D, warps, 1)
    BK = 16 * warps
    WP = D // 2 + 4
    CPR = D // 8
    KD, NI, KTQ, KTK, DN = D // 16, bq // 8, bq // 16, BK // 16, D // 8
    WS = bq // 2 + 4                # words per dS^T row, padded alike
    lane4 = (4 @ laneid, 1 @ laneid)
    # K and V (BK rows, one stage): copies, and as A operands (warp, m tile, k step, matrix = (k half, row half))
    L["cp_kv1"] = TileLayout(S[(BK, CPR, 4) : (WP, 4, 1)])
    L["ld_a"] = TileLayout(S[(warps, 1, KD, 2, 2, 8, 4) : (16 * WP, 16 * WP, 8, 4, 8 * WP, WP, 1)])
    # K as B through .trans for dQ = dS K (K x N rows): (k step, d-tile pair, matrix = (d tile, key half))
    L["ld_kt"] = TileLayout(S[(KTK, DN // 2, 2, 2, 8, 4) : (16 * WP, 8, 4, 8 * WP, WP, 1)])
    # Q and dO: two stages of bq rows; as B (N x K rows: S^T = K Q^T, dP^T = V dO^T; matrix = (n tile, k half))
    # and as B through .trans (K x N rows: dK += dS^T Q, dV += P^T dO; matrix = (d tile, k half))
    L["cp_qo"] = TileLayout(S[(2, bq, CPR, 4) : (bq * WP, WP, 4, 1)])
    L["ld_b"] = TileLayout(S[(2, NI // 2, KD, 2, 2, 8, 4) : (bq * WP, 16 * WP, 8, 8 * WP, 4, WP, 1)])
    L["ld_bt"] = TileLayout(S[(2, KTQ, DN // 2, 2, 2, 8, 4) : (bq * WP, 16 * WP, 8, 4, 8 * WP, WP, 1)])
    # dS (queries x keys) as A from dS^T (key rows): (query m tile, key k step, matrix = (k half, row half), row, word)
    L["ld_ds"] = TileLayout(S[(bq // 16, KTK, 2, 2, 8, 4) : (8, 16 * WS, 8 * WS, 4, WS, 1)])
    L["st_ds"] = TileLayout(S[(BK, bq // 2) : (WS, 1)])
    L["r_ds"] = TileLayout(S[(KTK, 4, 8, 4) : (4, 1, *lane4)])
    L["m_ds"] = TileLayout(S[(KTK, 1, 1, 2, 8, 2, 4) : (4, KTK * 4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    # S^T and dP^T (16 key rows x bq) by n-tile pairs; P^T/dS^T packed as the A fragments of bq / 16 k16 steps
    L["m_s2"] = TileLayout(S[(NI // 2, 1, 2, 2, 8, 4, 2) : (8, NI * 4, 4, 2, *lane4, 1)])
    L["m_p"] = TileLayout(S[(KTQ, 1, 1, 2, 8, 2, 4) : (4, NI * 2, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    # one 16 x 16 block of dQ (two n8 tiles) as the mma's accumulator
    L["m_dq"] = TileLayout(S[(1, 1, 2, 2, 8, 4, 2) : (8, 8, 4, 2, *lane4, 1)])
    return L, WP, WS


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


@tiledsl.inline
def cast_row8(X, src, Y, i, dtype):
    """Y's row i (8 values of `dtype`, round to nearest even) from X's row src (8 float32): two 16-byte loads and
    one 16-byte store a thread. The gradient casts here and examples/attention_backward_hopper.py's dQ cast differ
    only in which row they read."""
    f = T.alloc_local((2, 4), "uint32")
    ff = f.view(dtype="float32")
    Xw = X.view(dtype="uint32")
    T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], f[0], Xw[src, 0:4])
    T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], f[1], Xw[src, 4:8])
    r = T.alloc_local((1, 4), "uint32")
    h = r.view(dtype=dtype)
    for j in T.unroll(8):
        h[0, j] = T.cast(ff[j // 4, j % 4], dtype)
    T.cuda.tile.apply(T.ptx["st.global.v4.b32"], Y.view(dtype="uint32")[i, 0:4], r[0])


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
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    MMA = f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"
    LDM = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
    LDMT = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
    COPY = "cp.async.cg.shared.global"
    CVT = f"cvt.rn.{t}x2.f32"
    RED = "red.global.add.f32"
    W, CPR = D // 2, D // 8
    BQ = QTILE[D]
    BK, THREADS = 16 * warps, 32 * warps   # key rows, threads a block
    KD, NI, KT, KTK, DN = D // 16, BQ // 8, BQ // 16, BK // 16, D // 8   # KT, KTK: k16 steps of a tile, a block
    MQ = BQ // 16                   # m16 tiles of dQ per query tile
    DPW = (DN // 2) * MQ // warps   # d-tile pairs of dQ per warp
    NKB = -(-NK // BK)              # key blocks per head
    NQT = -(-N // BQ)               # query tiles
    NP = NQT * BQ                   # LSE2 and Delta rows a head (padded)
    C = float(scale) * LOG2E
    SC = float(scale)
    LY, WP, WS = _bwd_layouts(D, BQ, warps)
    L_CP1, L_CP2, L_LDA, L_LDB, L_LDBT, L_LDKT = (LY[n] for n in ("cp_kv1", "cp_qo", "ld_a", "ld_b", "ld_bt", "ld_kt"))
    L_LDDS, L_STDS, L_RDS, L_MDS, L_MDQ = (LY[n] for n in ("ld_ds", "st_ds", "r_ds", "m_ds", "m_dq"))
    L_R_A1, L_M_A1, L_R_B, L_M_B, L_R_BT, L_M_BT = (LY[n] for n in ("r_q1", "m_q1", "r_k", "m_k", "r_v", "m_v"))
    L_M_S2, L_M_P, L_M_O2 = LY["m_s2"], LY["m_p"], LY["m_o2"]
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

    @tiledsl.inline
    def gemm_t(acc, lda, ldb, st, ra, ra_mma, rb, rb_mma):
        """acc (16 key rows x BQ queries) = A (this warp's 16 rows of K or V) times B^T (Q or dO in stage st):
        per k16 step the A fragment (one ldmatrix.x4), then per pair of n8 tiles one ldmatrix.x4 and 2 mmas."""
        for kd in T.unroll(KD):
            T.cuda.tile.apply(T.ptx[LDM], ra, lda[:, kd], scope="warp")
            for np_ in T.unroll(NI // 2):
                T.cuda.tile.apply(T.ptx[LDM], rb, ldb[st, np_, kd], scope="warp")
                if kd == 0:
                    T.cuda.tile.apply(T.ptx[MMA], acc[np_], ra_mma, rb_mma, 0.0, scope="warp")
                else:
                    T.cuda.tile.apply(T.ptx[MMA], acc[np_], ra_mma, rb_mma, acc[np_], scope="warp")

    @tiledsl.inline
    def gemm_acc(acc, a_mma, ldbt, st, rb, rb_mma):
        """acc (16 key rows x D) += A (16 x BQ, packed in registers) times B (Q or dO of stage st, via .trans)."""
        for kt in T.unroll(KT):
            for dp in T.unroll(DN // 2):
                T.cuda.tile.apply(T.ptx[LDMT], rb, ldbt[st, kt, dp], scope="warp")
                T.cuda.tile.apply(T.ptx[MMA], acc[dp], a_mma[kt], rb_mma, acc[dp], scope="warp")

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

        sk = T.alloc_shared((BK * WP,), "uint32")
        sv = T.alloc_shared((BK * WP,), "uint32")
        sq = T.alloc_shared((2 * BQ * WP,), "uint32")
        so = T.alloc_shared((2 * BQ * WP,), "uint32")
        sds = T.alloc_shared((BK * WS,), "uint32")
        # the query tile's LSE * log2e and delta (two stages), by cp.async with Q and dO and read where used:
        # per-lane global addresses of them would be hoisted out of the loop, 2 registers each
        sl = T.alloc_shared((2, 2, BQ // 4, 4), "uint32")
        sl_f = sl.view(dtype="float32").view(2, 2, BQ)
        gL = LSE2.view(dtype="uint32").view(B * H, NP // 4, 4)
        gD = Delta.view(dtype="uint32").view(B * H, NP // 4, 4)
        cp_k = sk.view(BK, CPR, 4, layout=L_CP1)
        cp_v = sv.view(BK, CPR, 4, layout=L_CP1)
        cp_q = sq.view(2, BQ, CPR, 4, layout=L_CP2)
        cp_o = so.view(2, BQ, CPR, 4, layout=L_CP2)
        lda_k = sk.view(warps, 1, KD, 4, 8, 4, layout=L_LDA)
        lda_v = sv.view(warps, 1, KD, 4, 8, 4, layout=L_LDA)
        ldbt_k = sk.view(KTK, DN // 2, 4, 8, 4, layout=L_LDKT)
        ldb_q = sq.view(2, NI // 2, KD, 4, 8, 4, layout=L_LDB)
        ldb_o = so.view(2, NI // 2, KD, 4, 8, 4, layout=L_LDB)
        ldbt_q = sq.view(2, KT, DN // 2, 4, 8, 4, layout=L_LDBT)
        ldbt_o = so.view(2, KT, DN // 2, 4, 8, 4, layout=L_LDBT)
        st_ds = sds.view(BK, BQ // 2, layout=L_STDS)
        ld_ds = sds.view(MQ, KTK, 4, 8, 4, layout=L_LDDS)

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

        ra = T.alloc_local((4,), "uint32")
        rb = T.alloc_local((4,), "uint32")
        s = T.alloc_local((NI * 4,), "float32")       # S^T, then P^T
        dp_ = T.alloc_local((NI * 4,), "float32")     # dP^T, then dS^T
        pk = T.alloc_local((NI * 2, 1), "uint32")     # P^T, then dS^T, packed
        dk = T.alloc_local((DN * 4,), "float32")
        dv = T.alloc_local((DN * 4,), "float32")
        rds = T.alloc_local((KTK * 4,), "uint32")
        dq = T.alloc_local((8,), "float32")
        ra_ld = ra.view(1, 4, 8, 4, layout=L_R_A1)
        ra_mma = ra.view(1, 1, 16, 8, layout=L_M_A1)
        rb_ld = rb.view(4, 8, 4, layout=L_R_B)
        rb_mma = rb.view(2, 1, 8, 8, layout=L_M_B)
        rbt_ld = rb.view(4, 8, 4, layout=L_R_BT)
        rbt_mma = rb.view(2, 1, 8, 8, layout=L_M_BT)
        s_v = s.view(NI // 2, 1, 2, 16, 8, layout=L_M_S2)
        dp_v = dp_.view(NI // 2, 1, 2, 16, 8, layout=L_M_S2)
        p_mma = pk.view(KT, 1, 1, 16, 8, layout=L_M_P)
        dk_v = dk.view(DN // 2, 1, 2, 16, 8, layout=L_M_O2)
        dv_v = dv.view(DN // 2, 1, 2, 16, 8, layout=L_M_O2)
        rds_ld = rds.view(KTK, 4, 8, 4, layout=L_RDS)
        rds_mma = rds.view(KTK, 1, 1, 16, 8, layout=L_MDS)
        dq_v = dq.view(1, 1, 2, 16, 8, layout=L_MDQ)
        for i in T.unroll(DN * 4):
            dk[i] = 0.0
            dv[i] = 0.0

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
                # this lane's query columns: qt * BQ + 8 n + 2 (lane % 4) + e (element i: n = i // 4, e = i % 2)
                col0 = qt * BQ + 2 * (lane % 4)
                # mask ragged query columns, ragged key rows and (causal) keys after the query
                # element i sits at column col0 + off, key row key0 + 8 rh: three lane-wide bounds, then one
                # compile-time offset against each (fewer live values than per-element indices)
                cn = N - col0
                kn = NK - key0
                kd_ = key0 - col0
                if causal and ph == 0:
                    for i in T.unroll(NI * 4):
                        off = (i // 4) * 8 + i % 2
                        rh8 = 8 * ((i % 4) // 2)
                        s[i] = NEG if (off >= cn or rh8 >= kn or off - rh8 < kd_) else s[i]
                elif (qt + 1) * BQ > N or (kb + 1) * BK > NK:
                    for i in T.unroll(NI * 4):
                        off = (i // 4) * 8 + i % 2
                        rh8 = 8 * ((i % 4) // 2)
                        s[i] = NEG if (off >= cn or rh8 >= kn) else s[i]
                for i in T.unroll(NI * 4):
                    s[i] = s[i] * C - sl_f[st, 0, 2 * (lane % 4) + (i // 4) * 8 + i % 2]
                T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], s.view(NI * 4, 1), s.view(NI * 4, 1))
                pairs = s.view(NI * 2, 2)
                T.cuda.tile.apply(T.ptx[CVT], pk, pairs[:, 1:2], pairs[:, 0:1])
                gemm_acc(dv_v, p_mma, ldbt_o, st, rbt_ld, rbt_mma)

                gemm_t(dp_v, lda_v[warp], ldb_o, st, ra_ld, ra_mma, rb_ld, rb_mma)
                for i in T.unroll(NI * 4):
                    dp_[i] = s[i] * (dp_[i] - sl_f[st, 1, 2 * (lane % 4) + (i // 4) * 8 + i % 2]) * SC
                dpairs = dp_.view(NI * 2, 2)
                T.cuda.tile.apply(T.ptx[CVT], pk, dpairs[:, 1:2], dpairs[:, 0:1])
                gemm_acc(dk_v, p_mma, ldbt_q, st, rbt_ld, rbt_mma)

                # dS^T to shared memory (word (n, row half) of pk: key row 16 warp + lane / 4 + 8 half,
                # word 4 n + lane % 4)
                for x in T.unroll(NI * 2):
                    st_ds[warp * 16 + lane // 4 + 8 * (x % 2), 4 * (x // 2) + lane % 4] = pk[x, 0]
                T.cuda.syncthreads()
                # dQ[16 rows of m tile mq, d pairs dp0 ..] = dS K_j, added to the float32 accumulator
                T.cuda.tile.apply(T.ptx[LDMT], rds_ld, ld_ds[mq], scope="warp")
                qrow = qt * BQ + mq * 16 + lane // 4
                for d in T.unroll(DPW):
                    for kt in T.unroll(KTK):
                        T.cuda.tile.apply(T.ptx[LDMT], rbt_ld, ldbt_k[kt, dp0 + d], scope="warp")
                        if kt == 0:
                            T.cuda.tile.apply(T.ptx[MMA], dq_v[0], rds_mma[kt], rbt_mma, 0.0, scope="warp")
                        else:
                            T.cuda.tile.apply(T.ptx[MMA], dq_v[0], rds_mma[kt], rbt_mma, dq_v[0], scope="warp")
                    for i in T.unroll(8):
                        row = qrow + 8 * ((i % 4) // 2)
                        dcol = (dp0 + d) * 16 + (i // 4) * 8 + 2 * (lane % 4) + i % 2
                        T.cuda.tile.apply(T.ptx[RED], dQ[qbase + T.min(row, nq - 1), dcol:dcol + 1], dq[i],
                                          pred=row < nq)

        # epilogue: this warp's 16 key rows of dK and dV
        for r in T.unroll(2):
            krow = key0 + 8 * r
            if krow < NK:
                if GROUP == 1:
                    kw = T.alloc_local((DN, 1), "uint32")
                    vw = T.alloc_local((DN, 1), "uint32")
                    kp = dk.view(DN, 2, 2)[:, r]
                    vp = dv.view(DN, 2, 2)[:, r]
                    T.cuda.tile.apply(T.ptx[CVT], kw, kp[:, 1:2], kp[:, 0:1])
                    T.cuda.tile.apply(T.ptx[CVT], vw, vp[:, 1:2], vp[:, 0:1])
                    gdk = dK.view(dtype="uint32").view(B * HK * NK, W)
                    gdv = dV.view(dtype="uint32").view(B * HK * NK, W)
                    for n in T.unroll(DN):
                        gdk[kvrow + krow, n * 4 + lane % 4] = kw[n, 0]
                        gdv[kvrow + krow, n * 4 + lane % 4] = vw[n, 0]
                else:
                    for n in T.unroll(DN):
                        for e in T.unroll(2):
                            dcol = n * 8 + 2 * (lane % 4) + e
                            T.cuda.tile.apply(T.ptx[RED], dK[kvrow + krow, dcol:dcol + 1], dk[n * 4 + 2 * r + e])
                            T.cuda.tile.apply(T.ptx[RED], dV[kvrow + krow, dcol:dcol + 1], dv[n * 4 + 2 * r + e])

    _KERNELS[key] = attention_bwd
    return attention_bwd


def _check_grads(q, k, v, o, lse, do):
    dt, shape, D = _check(q, k, v)
    B, H, HK, N, NK = shape
    if tuple(o.shape) != tuple(q.shape) or tuple(do.shape) != tuple(q.shape):
        raise tiledsl.LaunchError(f"o {tuple(o.shape)} and do {tuple(do.shape)} must have q's shape {tuple(q.shape)}")
    if o.dtype != q.dtype or do.dtype != q.dtype:
        raise tiledsl.LaunchError(f"o and do must have q's dtype {q.dtype}; got {o.dtype}, {do.dtype}")
    if tuple(lse.shape) != (B, H, N) or "float32" not in str(lse.dtype):
        raise tiledsl.LaunchError(f"lse must be float32 (B, H, N) = {(B, H, N)}; got {lse.dtype} "
                                  f"{tuple(lse.shape)}")
    if D not in (64, 128):
        raise tiledsl.LaunchError(f"attention_backward supports head dims 64 and 128, got {D}")
    return dt, shape, D


def _fa3_backward_fits(q, D) -> bool:
    """Whether path=None takes the FA3 backward: CUDA tensors on an sm_90 device and a head dim it supports."""
    if isinstance(q, np.ndarray) or not getattr(q, "is_cuda", False):
        return False
    import torch
    from attention_backward_hopper import SUPPORTED_D
    return torch.cuda.get_device_capability(q.device) == (9, 0) and D in SUPPORTED_D


def attention_backward(q, k, v, o, lse, do, causal=False, scale=None, warps=None, path=None, tail_split=None,
                       sms=None, tma_kv=None):
    """(dq, dk, dv) of attention(q, k, v, causal, scale) = (o, lse) for the output gradient do.

    torch CUDA tensors run on the GPU; numpy float16 arrays run the same kernels on the CPU interpreter. dq has
    q's shape, dk and dv k's (GQA: the gradients of a k/v head summed over its query heads), all in q's dtype.
    path: "fa2" (this module's mma.sync kernel), "fa3" (examples/attention_backward_hopper.py: TMA + wgmma, sm_90a,
    D = 128) or None: fa3 for CUDA tensors on an sm_90 device with a head dim it supports, else fa2.
    warps: the fa2 kernel's warps a block, 4 or 8 (default WARPS). tail_split (fa3): spread the query tiles of the
    items past the whole waves of `sms` blocks (default: the device's SMs; 132 on the interpreter) over every
    block (make_attention_backward_hopper); None: where attention_backward_hopper's TAIL_SPLIT (off: measured
    slower) and tail_split_helps say so. tma_kv (fa3, without grouped-query heads or the tail split): dK and dV
    leave through shared memory and the TMA store; None: attention_backward_hopper's TMA_KV (off: not yet
    measured)."""
    dt, shape, D = _check_grads(q, k, v, o, lse, do)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if not scale > 0 or math.isinf(scale):
        raise tiledsl.LaunchError(f"attention_backward needs a positive finite scale, got {scale}")
    if path is None:
        path = "fa3" if warps is None and _fa3_backward_fits(q, D) else "fa2"
    if path not in ("fa2", "fa3"):
        raise tiledsl.LaunchError(f"path must be 'fa2', 'fa3' or None, got {path!r}")
    if path == "fa3" and warps is not None:
        raise tiledsl.LaunchError("warps= configures the fa2 backward; the fa3 backward has none")
    if path == "fa2" and (tail_split or sms is not None or tma_kv):
        raise tiledsl.LaunchError("tail_split=, sms= and tma_kv= configure the fa3 backward; the fa2 backward has "
                                  "none")
    B, H, HK, N, NK = shape
    if path == "fa3":
        import attention_backward_hopper as ABH
        if sms is None:
            sms = sm_count(q)
        if tail_split is None:
            tail_split = ABH.TAIL_SPLIT and ABH.tail_split_helps(causal, shape, sms)
        if tma_kv is None:
            tma_kv = ABH.TMA_KV and not tail_split and H == HK
        main = ABH.make_attention_backward_hopper(dt, D, causal, shape, scale, tail_split=tail_split, sms=sms,
                                                  tma_kv=tma_kv)
        NP = -(-N // ABH.BM) * ABH.BM
        # the fa3 kernel's dQ accumulator is tiled (B * H, NP query rows: one block per tile and consumer), which
        # its own cast reads; fa2's is (B * H * N, D) row-major
        dq_rows = B * H * NP
        cast_q = ABH.make_cast_dq(dt, B * H, N, D)
    else:
        main = make_attention_backward(dt, D, causal, shape, scale, warps)
        NP = -(-N // QTILE[D]) * QTILE[D]
        dq_rows = B * H * N
        cast_q = make_cast(dt, B * H * N * D // 8)
    def operands(q, k, v, do):
        # the fa3 kernel reads Q, K, V and dO through 3-d tensor maps, (B * H, N, D) views; the fa2 kernel takes
        # the 4-d tensors and N at run time (after the accumulators)
        if path == "fa3":
            return tuple(x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3]) for x in (q, k, v, do)), ()
        return (q, k, v, do), (N,)
    delta_k = make_delta(dt, D, B * H, N, NP)
    cast_kv = make_cast(dt, B * HK * NK * D // 8)
    gqa = H != HK
    if isinstance(q, np.ndarray):
        run = lambda kern, *a: tiledsl.jit(kern.fn, interpret=True)(*a)  # noqa: E731
        q, k, v, o, do = (np.ascontiguousarray(x) for x in (q, k, v, o, do))
        lse = np.ascontiguousarray(lse, np.float32)
        delta, lse2 = (np.zeros((B * H, NP), np.float32) for _ in range(2))
        run(delta_k, o.reshape(-1, D), do.reshape(-1, D), lse.reshape(-1), delta.reshape(-1), lse2.reshape(-1))
        dqa = np.zeros((dq_rows, D), np.float32)
        if gqa:
            dka, dva = (np.zeros((B * HK * NK, D), np.float32) for _ in range(2))
        else:
            dka, dva = np.zeros_like(k), np.zeros_like(k)
        ins, tail = operands(q, k, v, do)
        if getattr(main, "slots", None):
            # the tail split's workspace: slots that every piece writes before any reads, counters at zero
            tail = (np.full(main.slots, np.nan, np.float32), np.zeros(main.counters, np.int32))
        run(main, *ins, lse2, delta, dqa, *kv_args(main, dka, dva), *tail)
        dq = np.zeros_like(q)
        run(cast_q, dqa.reshape(-1, 8), dq.reshape(-1, 8))
        if not gqa:
            return dq, dka, dva
        dk, dv = np.zeros_like(k), np.zeros_like(k)
        run(cast_kv, dka.reshape(-1, 8), dk.reshape(-1, 8))
        run(cast_kv, dva.reshape(-1, 8), dv.reshape(-1, 8))
        return dq, dk, dv
    import torch
    q, k, v, o, do, lse = (x.contiguous() for x in (q, k, v, o, do, lse))
    delta, lse2 = (torch.empty((B * H, NP), dtype=torch.float32, device=q.device) for _ in range(2))
    delta_k(o.view(-1, D), do.view(-1, D), lse.view(-1), delta.view(-1), lse2.view(-1))
    dqa = torch.zeros((dq_rows, D), dtype=torch.float32, device=q.device)
    if gqa:
        dka, dva = (torch.zeros((B * HK * NK, D), dtype=torch.float32, device=q.device) for _ in range(2))
    else:
        dka, dva = torch.empty_like(k), torch.empty_like(k)
    ins, tail = operands(q, k, v, do)
    if getattr(main, "slots", None):
        tail = ABH.workspace(main, q)
    main(*ins, lse2, delta, dqa, *kv_args(main, dka, dva), *tail)
    dq = torch.empty_like(q)
    cast_q(dqa.view(-1, 8), dq.view(-1, 8))
    if not gqa:
        return dq, dka, dva
    dk, dv = torch.empty_like(k), torch.empty_like(k)
    cast_kv(dka.view(-1, 8), dk.view(-1, 8))
    cast_kv(dva.view(-1, 8), dv.view(-1, 8))
    return dq, dk, dv


def kv_args(main, dka, dva):
    """dK's and dV's outputs as the main kernel takes them (the fa3 kernel with tma_kv: (B * H_kv, N_kv, D) views)."""
    if getattr(main, "tma_kv", False):
        from attention_backward_hopper import kv_arg
        return kv_arg(dka, main), kv_arg(dva, main)
    return dka, dva


def reference_backward(q, k, v, do, causal=False, scale=None):
    """float64 numpy (dq, dk, dv) of softmax(scale q k^T [causal]) v for numpy inputs (GQA summed per k/v head)."""
    q, k, v, do = (np.asarray(x, np.float64) for x in (q, k, v, do))
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    HK = k.shape[1]
    g = q.shape[1] // HK
    ke, ve = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhnd,bhmd->bhnm", q, ke) * scale
    if causal:
        n, mm = s.shape[-2:]
        s = np.where(np.arange(mm)[None, :] > np.arange(n)[:, None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = np.einsum("bhnm,bhnd->bhmd", p, do)
    dp = np.einsum("bhnd,bhmd->bhnm", do, ve)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    dq = np.einsum("bhnm,bhmd->bhnd", ds, ke)
    dk = np.einsum("bhnm,bhnd->bhmd", ds, q)
    B, H, N, _ = q.shape
    fold = lambda x: x.reshape(B, HK, g, *x.shape[2:]).sum(2)  # noqa: E731
    return dq, fold(dk), fold(dv)


def _function():
    import torch

    class FlashAttention(torch.autograd.Function):
        """O = softmax(scale q k^T [causal]) v with examples/attention.py's forward (saving O and LSE) and
        attention_backward as its backward."""

        @staticmethod
        def forward(ctx, q, k, v, causal=False, scale=None):
            o, lse = attention(q, k, v, causal=causal, scale=scale)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.scale = causal, scale
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = attention_backward(q, k, v, o, lse, do.contiguous(), causal=ctx.causal, scale=ctx.scale)
            return dq, dk, dv, None, None

    return FlashAttention


def __getattr__(name):
    # the autograd Function is built on first use: importing this module does not import torch
    if name == "FlashAttention":
        fn = _function()
        globals()["FlashAttention"] = fn
        return fn
    raise AttributeError(name)


def flash_attention(q, k, v, causal=False, scale=None):
    """softmax(scale q k^T [causal mask]) v for torch CUDA tensors, differentiable in q, k and v (FlashAttention)."""
    fn = globals().get("FlashAttention") or __getattr__("FlashAttention")
    return fn.apply(q, k, v, causal, scale)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        rng = np.random.default_rng(0)
        q, k, v, do = (rng.standard_normal((1, 2, 40, 64)).astype(np.float16) for _ in range(4))
        o, lse = attention(q, k, v, causal=opts.causal, config=(4, 1, 1))
        got = attention_backward(q, k, v, o, lse, do, causal=opts.causal)
        ref = reference_backward(q, k, v, do, causal=opts.causal)
        err = [np.linalg.norm(g.astype(np.float64) - r) / np.linalg.norm(r) for g, r in zip(got, ref)]
        print("attention_backward: no GPU found; ran 1x2x40x64 on the interpreter: relative error dq %.1e, "
              "dk %.1e, dv %.1e" % tuple(err))
        return
    import torch
    B, H = max(1, 16384 // opts.n), 2048 // opts.d
    q, k, v, do = (torch.randn(B, H, opts.n, opts.d, device="cuda", dtype=torch.float16) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    o = flash_attention(q, k, v, causal=opts.causal)
    got = torch.autograd.grad(o, (q, k, v), do)
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    of = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=opts.causal)
    ref = torch.autograd.grad(of, (qf, kf, vf), do.float())
    err = [((g.float() - r).norm() / r.norm()).item() for g, r in zip(got, ref)]
    print(f"attention_backward {B}x{H}x{opts.n}x{opts.d}: relative error dq {err[0]:.1e}, dk {err[1]:.1e}, "
          f"dv {err[2]:.1e}")


if __name__ == "__main__":
    sys.exit(main())
