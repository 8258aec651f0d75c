"""What the mma.sync forward kernels share beyond the online softmax (common.py): fa2.py's kernel (B, H, N, D tensors)
and ragged.py's (packed sequences, decode) hold the same fragments in the same registers, stage Q, K and V through
the same shared tiles, and run the same S = Q K^T and O += P V steps and the same final row sums; they differ in
where rows live, in the masks and in what the epilogue stores. Read fa2.py's module docstring for the schedule and
the layouts named here.

tile_parts(...) builds the `@tiledsl.inline` helpers for one kernel's sizes; the kernels call them by name. Both
emit the code they emitted when each wrote these lines.
"""
from typing import NamedTuple

import tiledsl
from tiledsl import T
from tiledsl.lang.inline import InlineFunction

from .common import NEG


class TileParts(NamedTuple):
    shared: InlineFunction
    registers: InlineFunction
    q_fragments: InlineFunction
    qk_tile: InlineFunction
    pv_tile: InlineFunction
    row_sums: InlineFunction


def tile_parts(dtype, D, BN, config, LY, q_pending=1):
    """The helpers of a forward kernel for `dtype` ("float16"/"bfloat16"), head dim D, key tiles of BN rows,
    config = (warps, mi, qreg) and fa2.layouts(D, warps, mi) as LY. q_pending: the cp.async groups committed after
    the one that holds Q (q_fragments waits until at most that many are pending)."""
    warps, MI, QREG = config
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    MMA = f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"
    LDM = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
    LDMT = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
    BM = 16 * MI * warps            # query rows a block
    W, CPR = D // 2, D // 8
    KD, NI, KT, DN = D // 16, BN // 8, BN // 16, D // 8
    # the layouts by name (a kernel reads layouts from its closure, not from a dict)
    L_CP_KV, L_CP_Q, L_LD_K, L_LD_Q, L_LD_V = LY["cp_kv"], LY["cp_q"], LY["ld_k"], LY["ld_q"], LY["ld_v"]
    L_R_Q, L_R_Q1, L_R_K, L_R_V = LY["r_q"], LY["r_q1"], LY["r_k"], LY["r_v"]
    L_M_Q, L_M_Q1, L_M_P, L_M_K, L_M_V, L_M_S2, L_M_O2 = (LY[n] for n in ("m_q", "m_q1", "m_p", "m_k", "m_v", "m_s2",
                                                                        "m_o2"))

    @tiledsl.inline
    def shared():
        """Q (BM rows) and two stages each of K and V (BN rows), with the views the copies and the ldmatrix
        loads read: (cp_q, cp_k, cp_v, ld_q, ld_k, ld_v)."""
        sq = T.alloc_shared((BM * W,), "uint32")
        sk = T.alloc_shared((2 * BN * W,), "uint32")
        sv = T.alloc_shared((2 * BN * W,), "uint32")
        cp_q = sq.view(BM, CPR, 4, layout=L_CP_Q)
        cp_k = sk.view(2, BN, CPR, 4, layout=L_CP_KV)
        cp_v = sv.view(2, BN, CPR, 4, layout=L_CP_KV)
        ld_q = sq.view(warps, MI, KD, 4, 8, 4, layout=L_LD_Q)
        ld_k = sk.view(2, NI // 2, KD, 4, 8, 4, layout=L_LD_K)
        ld_v = sv.view(2, KT, DN // 2, 4, 8, 4, layout=L_LD_V)
        return (cp_q, cp_k, cp_v, ld_q, ld_k, ld_v)

    @tiledsl.inline
    def registers():
        """A thread's fragments: K's and V's B words, S (then P, packed), O, and per row this lane holds (m tile mi,
        row half r: index 2 * mi + r) the running max of the raw scores, a shuffle scratch, the rescale factor and
        the partial row sum; O zeroed, the maxima -inf, the sums 0. Returned as (s, pk, o, m, sh, al, lsum,
        rk_ld, rk_mma, rv_ld, rv_mma, s_v, p_mma, o_v)."""
        rk = T.alloc_local((4,), "uint32")
        rv = T.alloc_local((4,), "uint32")
        s = T.alloc_local((MI * NI * 4,), "float32")
        pk = T.alloc_local((MI * NI * 2, 1), "uint32")
        o = T.alloc_local((MI * DN * 4,), "float32")
        m = T.alloc_local((MI * 2, 1), "float32")     # running row max of the raw scores
        sh = T.alloc_local((MI * 2, 1), "float32")    # shuffle scratch
        al = T.alloc_local((MI * 2, 1), "float32")    # rescale factor of the old O and row sum
        lsum = T.alloc_local((MI * 2, 1), "float32")  # this lane's partial row sums
        rk_ld = rk.view(4, 8, 4, layout=L_R_K)
        rk_mma = rk.view(2, 1, 8, 8, layout=L_M_K)
        rv_ld = rv.view(4, 8, 4, layout=L_R_V)
        rv_mma = rv.view(2, 1, 8, 8, layout=L_M_V)
        s_v = s.view(NI // 2, MI, 2, 16, 8, layout=L_M_S2)
        p_mma = pk.view(KT, MI, 1, 16, 8, layout=L_M_P)
        o_v = o.view(DN // 2, MI, 2, 16, 8, layout=L_M_O2)
        for i in T.unroll(MI * DN * 4):
            o[i] = 0.0
        for r in T.unroll(MI * 2):
            m[r, 0] = NEG
            lsum[r, 0] = 0.0
        return (s, pk, o, m, sh, al, lsum, rk_ld, rk_mma, rv_ld, rv_mma, s_v, p_mma, o_v)

    @tiledsl.inline
    def q_fragments(ld_q, warp):
        """Once Q has landed (the prologue's first group): the warp's Q fragments, all of them in registers
        (QREG) or one k16 step's staging words reloaded per step; qk_tile's `q`."""
        T.cuda.tile.apply(T.ptx["cp.async.wait_group"], q_pending)
        T.cuda.syncthreads()
        if QREG:
            rq = T.alloc_local((MI * KD * 4,), "uint32")
            T.cuda.tile.apply(T.ptx[LDM], rq.view(MI, KD, 4, 8, 4, layout=L_R_Q), ld_q[warp], scope="warp")
            qfr = (rq.view(KD, MI, 1, 16, 8, layout=L_M_Q), None, None, None)
        else:
            rq = T.alloc_local((MI * 4,), "uint32")
            qfr = (None, rq.view(MI, 4, 8, 4, layout=L_R_Q1), rq.view(MI, 1, 16, 8, layout=L_M_Q1), ld_q[warp])
        return qfr

    @tiledsl.inline
    def qk_tile(s_v, q, rk, rk_mma, ld_k, st):
        """S = Q K^T for the tile in stage `st`: per k16 step, Q's fragments (held, or loaded now), then per
        pair of n8 tiles their K fragments (one ldmatrix.x4) and MI x 2 mmas."""
        q_mma, rq1, rq1_mma, ld_qw = q
        for kd in T.unroll(KD):
            if QREG:
                a = q_mma[kd]
            else:
                T.cuda.tile.apply(T.ptx[LDM], rq1, ld_qw[:, kd], scope="warp")
                a = rq1_mma
            for np_ in T.unroll(NI // 2):
                T.cuda.tile.apply(T.ptx[LDM], rk, ld_k[st, np_, kd], scope="warp")
                if kd == 0:
                    T.cuda.tile.apply(T.ptx[MMA], s_v[np_], a, rk_mma, 0.0, scope="warp")
                else:
                    T.cuda.tile.apply(T.ptx[MMA], s_v[np_], a, rk_mma, s_v[np_], scope="warp")

    @tiledsl.inline
    def pv_tile(o_v, p_mma, rv_ld, rv_mma, ld_v, st):
        """O += P V for the tile in stage `st` (V through ldmatrix .trans)."""
        for kt in T.unroll(KT):
            for dp in T.unroll(DN // 2):
                T.cuda.tile.apply(T.ptx[LDMT], rv_ld, ld_v[st, kt, dp], scope="warp")
                T.cuda.tile.apply(T.ptx[MMA], o_v[dp], p_mma[kt], rv_mma, o_v[dp], scope="warp")

    @tiledsl.inline
    def row_sums(o, sh, al, lsum, empty_rows):
        """The epilogue's start: the full row sums (over the row's 4 lanes), al = log2 of them, O / l (0 for a row
        with no key where `empty_rows` may occur)."""
        for k in T.unroll(2):
            T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], sh, lsum, 1 << k, 0x1F, 0xFFFFFFFF)
            for x in T.unroll(MI * 2):
                lsum[x, 0] = lsum[x, 0] + sh[x, 0]
        T.cuda.tile.apply(T.ptx["lg2.approx.f32"], al, lsum)
        for x in T.unroll(MI * 2):
            mi, r = x // 2, x % 2
            if empty_rows:
                inv = 1.0 / lsum[x, 0] if lsum[x, 0] > 0.0 else 0.0
            else:
                inv = 1.0 / lsum[x, 0]
            for n in T.unroll(DN):
                for e in T.unroll(2):
                    i = (mi * DN + n) * 4 + 2 * r + e
                    o[i] = o[i] * inv

    return TileParts(shared, registers, q_fragments, qk_tile, pv_tile, row_sums)
