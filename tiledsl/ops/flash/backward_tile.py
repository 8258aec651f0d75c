"""The per-query-tile step of the mma.sync backward kernels, written once: fa2_backward.py's main kernel (B, H, N, D
tensors) and varlen_backward.py's (packed sequences) run the same products on the same fragments and differ only in
where rows live (a head's row base against a sequence's offsets read from the device) and in the causal alignment
(top-left against bottom-right). Read fa2_backward.py's module docstring for the schedule and the layouts named here.

tile_parts(...) builds the `@tiledsl.inline` helpers for one kernel's sizes; the kernels call them by name. What
each kernel computes itself (row bases, bounds, offsets) comes in as arguments, so both emit the code they emitted
when each wrote these lines.
"""
from typing import NamedTuple

import tiledsl
from tiledsl import T
from tiledsl.lang.inline import InlineFunction
from tiledsl.layout import S, TileLayout, laneid

from .common import LOG2E, NEG
from .fa2 import layouts


def bwd_layouts(D, bq, warps):
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


class TileParts(NamedTuple):
    shared: InlineFunction
    registers: InlineFunction
    gemm_t: InlineFunction
    gemm_acc: InlineFunction
    key_tile: InlineFunction
    store_kv: InlineFunction


def tile_parts(dtype, D, bq, warps, scale):
    """The helpers of a backward kernel for `dtype` ("float16"/"bfloat16"), head dim D, query tiles of `bq` rows,
    `warps` warps a block (16 key rows each) and softmax scale `scale`."""
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    MMA = f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"
    LDM = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
    LDMT = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
    CVT = f"cvt.rn.{t}x2.f32"
    RED = "red.global.add.f32"
    BQ, BK = bq, 16 * warps
    KD, NI, KT, KTK, DN = D // 16, BQ // 8, BQ // 16, BK // 16, D // 8   # KT, KTK: k16 steps of a tile, a block
    MQ = BQ // 16                   # m16 tiles of dQ per query tile
    DPW = (DN // 2) * MQ // warps   # d-tile pairs of dQ per warp
    C = float(scale) * LOG2E
    SC = float(scale)
    CPR = D // 8
    LY, WP, WS = bwd_layouts(D, BQ, warps)
    # the layouts by name (a kernel reads layouts from its closure, not from a dict)
    L_CP_KV1, L_CP_QO, L_LD_A, L_LD_B, L_LD_BT, L_LD_DS, L_LD_KT = (
        LY[k] for k in ("cp_kv1", "cp_qo", "ld_a", "ld_b", "ld_bt", "ld_ds", "ld_kt"))
    L_M_DQ, L_M_DS, L_M_K, L_M_O2, L_M_P, L_M_Q1, L_M_S2, L_M_V = (
        LY[k] for k in ("m_dq", "m_ds", "m_k", "m_o2", "m_p", "m_q1", "m_s2", "m_v"))
    L_R_DS, L_R_K, L_R_Q1, L_R_V, L_ST_DS = (LY[k] for k in ("r_ds", "r_k", "r_q1", "r_v", "st_ds"))

    @tiledsl.inline
    def shared():
        """The block's shared memory: K and V (BK rows), two stages of Q and dO (BQ rows), dS^T, and two stages of
        the query tile's LSE * log2e and delta (by cp.async with Q and dO, read where used: per-lane global
        addresses of them would be hoisted out of the loop, 2 registers each); returned with the views the copies
        and the products read: (sl, cp_k, cp_v, cp_q, cp_o, lda_k, ldb_q, smem) (smem: key_tile's)."""
        sk = T.alloc_shared((BK * WP,), "uint32")
        sv = T.alloc_shared((BK * WP,), "uint32")
        sq = T.alloc_shared((2 * BQ * WP,), "uint32")
        so = T.alloc_shared((2 * BQ * WP,), "uint32")
        sds = T.alloc_shared((BK * WS,), "uint32")
        sl = T.alloc_shared((2, 2, BQ // 4, 4), "uint32")
        sl_f = sl.view(dtype="float32").view(2, 2, BQ)
        cp_k = sk.view(BK, CPR, 4, layout=L_CP_KV1)
        cp_v = sv.view(BK, CPR, 4, layout=L_CP_KV1)
        cp_q = sq.view(2, BQ, CPR, 4, layout=L_CP_QO)
        cp_o = so.view(2, BQ, CPR, 4, layout=L_CP_QO)
        lda_k = sk.view(warps, 1, KD, 4, 8, 4, layout=L_LD_A)
        lda_v = sv.view(warps, 1, KD, 4, 8, 4, layout=L_LD_A)
        ldbt_k = sk.view(KTK, DN // 2, 4, 8, 4, layout=L_LD_KT)
        ldb_q = sq.view(2, NI // 2, KD, 4, 8, 4, layout=L_LD_B)
        ldb_o = so.view(2, NI // 2, KD, 4, 8, 4, layout=L_LD_B)
        ldbt_q = sq.view(2, KT, DN // 2, 4, 8, 4, layout=L_LD_BT)
        ldbt_o = so.view(2, KT, DN // 2, 4, 8, 4, layout=L_LD_BT)
        st_ds = sds.view(BK, BQ // 2, layout=L_ST_DS)
        ld_ds = sds.view(MQ, KTK, 4, 8, 4, layout=L_LD_DS)
        return (sl, cp_k, cp_v, cp_q, cp_o, lda_k, ldb_q, (lda_v, ldb_o, ldbt_q, ldbt_o, ldbt_k, st_ds, ld_ds, sl_f))

    @tiledsl.inline
    def registers():
        """A thread's fragments: the A and B staging words, S^T (then P^T), dP^T (then dS^T), their packed words,
        the dK and dV accumulators (zeroed), dS's A fragments and a dQ block; returned as (s_v, ra_ld, ra_mma,
        rb_ld, rb_mma, dk, dv, acc, regs) (acc, regs: key_tile's)."""
        ra = T.alloc_local((4,), "uint32")
        rb = T.alloc_local((4,), "uint32")
        s = T.alloc_local((NI * 4,), "float32")       # S^T, then P^T
        dp_ = T.alloc_local((NI * 4,), "float32")     # dP^T, then dS^T
        pk = T.alloc_local((NI * 2, 1), "uint32")     # P^T, then dS^T, packed
        dk = T.alloc_local((DN * 4,), "float32")
        dv = T.alloc_local((DN * 4,), "float32")
        rds = T.alloc_local((KTK * 4,), "uint32")
        dq = T.alloc_local((8,), "float32")
        ra_ld = ra.view(1, 4, 8, 4, layout=L_R_Q1)
        ra_mma = ra.view(1, 1, 16, 8, layout=L_M_Q1)
        rb_ld = rb.view(4, 8, 4, layout=L_R_K)
        rb_mma = rb.view(2, 1, 8, 8, layout=L_M_K)
        rbt_ld = rb.view(4, 8, 4, layout=L_R_V)
        rbt_mma = rb.view(2, 1, 8, 8, layout=L_M_V)
        s_v = s.view(NI // 2, 1, 2, 16, 8, layout=L_M_S2)
        dp_v = dp_.view(NI // 2, 1, 2, 16, 8, layout=L_M_S2)
        p_mma = pk.view(KT, 1, 1, 16, 8, layout=L_M_P)
        dk_v = dk.view(DN // 2, 1, 2, 16, 8, layout=L_M_O2)
        dv_v = dv.view(DN // 2, 1, 2, 16, 8, layout=L_M_O2)
        rds_ld = rds.view(KTK, 4, 8, 4, layout=L_R_DS)
        rds_mma = rds.view(KTK, 1, 1, 16, 8, layout=L_M_DS)
        dq_v = dq.view(1, 1, 2, 16, 8, layout=L_M_DQ)
        for i in T.unroll(DN * 4):
            dk[i] = 0.0
            dv[i] = 0.0
        return (s_v, ra_ld, ra_mma, rb_ld, rb_mma, dk, dv, (s, dp_, pk, s_v, dp_v, p_mma, dk_v, dv_v, dq, dq_v),
                (ra_ld, ra_mma, rb_ld, rb_mma, rbt_ld, rbt_mma, rds_ld, rds_mma))

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

    @tiledsl.inline
    def key_tile(acc, regs, smem, st, qt, kb, warp, lane, key0, mq, dp0, nq, nk, offs, diag, dQ, qbase, qstride, qhead,
                 nr):
        """Query tile qt (stage st) against the block's key rows, after S^T = K Q^T is in acc's s: the mask, P^T,
        dV += P^T dO, dP^T, dS^T, dK += dS^T Q, dS^T through shared memory and dQ += dS K added to global memory.

        Masked: ragged query columns (>= nq), ragged key rows (>= nk) and, where `diag` (the causal tiles crossing
        the diagonal), keys after their query (bottom-right by `offs` keys; None: top-left). dQ: query row r < nr
        (the rows dQ holds, clamped to) adds to dQ row qbase + r (qstride None) or (qbase + r) * qstride + qhead.
        (Run-time values come as parameters, never inside tuples: unpacking one would copy them.)"""
        s, dp_, pk, s_v, dp_v, p_mma, dk_v, dv_v, dq, dq_v = acc
        ra_ld, ra_mma, rb_ld, rb_mma, rbt_ld, rbt_mma, rds_ld, rds_mma = regs
        lda_v, ldb_o, ldbt_q, ldbt_o, ldbt_k, st_ds, ld_ds, sl_f = smem
        # this lane's query columns: qt * BQ + 8 n + 2 (lane % 4) + e (element i: n = i // 4, e = i % 2)
        col0 = qt * BQ + 2 * (lane % 4)
        # mask ragged query columns, ragged key rows and (causal) keys after the query
        # element i sits at column col0 + off, key row key0 + 8 rh: three lane-wide bounds, then one
        # compile-time offset against each (fewer live values than per-element indices)
        cn = nq - col0
        kn = nk - key0
        if offs is None:
            kd_ = key0 - col0
        else:
            kd_ = key0 - col0 - offs
        if diag:
            for i in T.unroll(NI * 4):
                off = (i // 4) * 8 + i % 2
                rh8 = 8 * ((i % 4) // 2)
                s[i] = NEG if (off >= cn or rh8 >= kn or off - rh8 < kd_) else s[i]
        elif (qt + 1) * BQ > nq or (kb + 1) * BK > nk:
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
                if qstride is None:
                    T.cuda.tile.apply(T.ptx[RED], dQ[qbase + T.min(row, nr - 1), dcol:dcol + 1], dq[i],
                                      pred=row < nr)
                else:
                    T.cuda.tile.apply(T.ptx[RED], dQ[(qbase + T.min(row, nr - 1)) * qstride + qhead,
                                                     dcol:dcol + 1], dq[i], pred=row < nr)

    @tiledsl.inline
    def store_kv(dk, dv, r, lane, grow, words, floats):
        """Row half r of this warp's dK and dV (key row `grow` of the outputs): without GQA (words: dK and dV as
        uint32 (rows, D / 2) views) packed to the kernel's dtype and stored; with GQA (words None, floats: the
        float32 (rows, D) accumulators) added with red.global.add.f32."""
        if words is not None:
            gdk, gdv = words
            kw = T.alloc_local((DN, 1), "uint32")
            vw = T.alloc_local((DN, 1), "uint32")
            kp = dk.view(DN, 2, 2)[:, r]
            vp = dv.view(DN, 2, 2)[:, r]
            T.cuda.tile.apply(T.ptx[CVT], kw, kp[:, 1:2], kp[:, 0:1])
            T.cuda.tile.apply(T.ptx[CVT], vw, vp[:, 1:2], vp[:, 0:1])
            for n in T.unroll(DN):
                gdk[grow, n * 4 + lane % 4] = kw[n, 0]
                gdv[grow, n * 4 + lane % 4] = vw[n, 0]
        else:
            gdk, gdv = floats
            for n in T.unroll(DN):
                for e in T.unroll(2):
                    dcol = n * 8 + 2 * (lane % 4) + e
                    T.cuda.tile.apply(T.ptx[RED], gdk[grow, dcol:dcol + 1], dk[n * 4 + 2 * r + e])
                    T.cuda.tile.apply(T.ptx[RED], gdv[grow, dcol:dcol + 1], dv[n * 4 + 2 * r + e])

    return TileParts(shared, registers, gemm_t, gemm_acc, key_tile, store_kv)
