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

from .common import LOG2E, NEG


class TileParts(NamedTuple):
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

    return TileParts(gemm_t, gemm_acc, key_tile, store_kv)
