"""attention_decode's kernel with the key tiles split across the block's warps (make_decode): each of the 4 warps
streams its own 16 keys of every 64-key step through its own cp.async stages, keeps its own online softmax over the
block's 16 query rows, and the warps' (O, LSE) are merged through shared memory at the end.

Why: a decode block has GROUP * Lq query rows (4 for 32 query / 8 kv heads, one new token), one m16 tile. ragged.py's
kernel gives the whole 64-key tile to that tile's one warp, so per tile one warp runs 128 mma.sync in a chain while
three warps only copy: about 3 us a tile on an H100, whatever the bytes, which reads an e4m3 cache (half the bytes
of bf16) at a quarter of the copy bandwidth. Here the four warps take a quarter of the products each, on all four
tensor cores, and need no block barrier inside the loop (a warp waits for its own copies and syncs on its own named
barrier), so a warp is never held up by another's copies.

Arguments and grid as ragged.py's decode mode (Q, K, V, O, LSE, X1 = cache_seqlens, X2 = block table or unused;
kv8: KSC, VSC; split: WO, WL, F, the partials and counters of split_combine.py), with query blocks of 16 rows:
grid (NS * ceil(GROUP * Lq / 16), H_kv, B), 128 threads.
kv8: e4m3 K and V bytes land in per-warp staging stages, from which the mma fragments are made in registers
(KREG, VREG: qk_tile8 and pv_tile8; the contraction over d permuted in Q's fragments, O's columns permuted and
put back at the merge), each byte widened by ragged.py's shifts (the value times 2^-8; the 2^8 and the descales
return in the scores' scale and on O). With KREG or VREG off, that operand is widened into an f16 tile and read
by ldmatrix as f16 / bf16 caches are.
"""
import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout

from .common import (LN2, LOG2E, NEG, bf16_chunk_to_f16, decode_keys, e4m3_halves_to_f16, e4m3x4_to_f16,
                     online_softmax)
from .fa2 import LAZY, layouts
from .forward_tile import tile_parts
from .split_combine import arrived_last, combine_row

WARPS = 4
SUB = 16                 # keys a warp takes of each step
STEP = WARPS * SUB       # keys a step: ragged.BN, so split sizes (multiples of 64 keys) serve both kernels
STAGES = {False: 3, True: 4}       # cp.async stages a warp keeps in flight (kv8: of e4m3 bytes)
# kv8: K's mma fragments made in registers from the e4m3 bytes (one 16-byte shared load per n8 tile and 4 k16 steps,
# widened by shifts), the k16 steps' contraction order permuted to match in Q's fragments; False: K widened into
# an f16 tile and read back by ldmatrix as V still is (two more shared-memory passes over K's bytes, doubled)
KREG = True
# kv8: V's mma fragments too, by ldmatrix .trans of byte pairs straight from the staging (keys 2c, 2c+1 of a
# d pair in one word: one AND and one shift split it into the even and odd d's B words), O's columns permuted to
# match (undone where the merge stores them); with KREG no f16 tile remains
VREG = True
_BIG = 2 ** 31 - 1

_KERNELS = {}


def make_decode(dtype, D, causal, H, HK, scale, lq=1, page=0, splits=1, kps=0, lazy=None, kv8=False):
    """The warp-split decode kernel (module docstring); make_ragged's decode arguments."""
    if D not in (64, 128):
        raise tiledsl.LaunchError(f"the warp-split decode kernel takes head dims 64 and 128, got {D}")
    lazy = LAZY if lazy is None else bool(lazy)
    kv8 = bool(kv8)
    kreg = kv8 and KREG
    vreg = kv8 and VREG
    key = (dtype, D, bool(causal), H, HK, float(scale), lq, page, splits, kps, lazy, kv8, STAGES[kv8], kreg, vreg)
    if key in _KERNELS:
        return _KERNELS[key]
    MDT = "float16" if kv8 else dtype
    t = {"float16": "f16", "bfloat16": "bf16"}[MDT]
    COPY = "cp.async.cg.shared.global"
    CVT = f"cvt.rn.{t}x2.f32"
    QCONV = kv8 and dtype == "bfloat16"
    NST = STAGES[kv8]
    FST = 1 if kv8 else NST                  # f16 tiles: kv8 widens into one per warp, else the stages themselves
    W, CPR, DN = D // 2, D // 8, D // 8
    GROUP = H // HK
    NROWS = GROUP * lq
    NQB = -(-NROWS // 16)
    C = float(scale) * LOG2E * (256.0 if kv8 else 1.0)
    KDT = "uint8" if kv8 else dtype
    KCPR = D // 16 if kv8 else CPR           # 16-byte chunks of a K/V row in memory
    CPL = SUB * KCPR // 32                   # chunks a lane copies of a sub-tile
    CPT_Q = 16 * CPR // (32 * WARPS)
    COLS = D // 8                            # columns a thread merges (16 rows x 8 threads)
    paged = page > 0
    split = splits > 1
    ROWQ = _BIG // (CPR * 4)
    ROWK = 2 ** 40 // (KCPR * 4)
    ROWF = _BIG // D
    QS = ("B", lq, H, D)
    KS = ("NP", page, HK, D) if paged else ("B", "S", HK, D)
    X2S = ("B", "MP") if paged else ("B",)
    OS, LS = ("B", lq, H, D), ("B", lq, H)
    WOS, WLS = (splits, "B", lq, H, D), (splits, "B", lq, H)      # split: the float32 partials
    # fa2's layouts for one warp's m16 tile against 16-key tiles, the K and V tiles' stage axis over (stage, warp):
    # FST * WARPS sub-tiles of 16 rows, stacked as fa2's 64-row tiles are
    LY = layouts(D, 1, 1, bn=SUB, stages=FST * WARPS)
    L_CP_Q, L_CP_KV, L_LD_Q, L_LD_K, L_LD_V = (LY[n] for n in ("cp_q", "cp_kv", "ld_q", "ld_k", "ld_v"))
    _, registers, q_fragments, qk_tile, pv_tile, row_sums = tile_parts(MDT, D, SUB, (1, 1, 1), LY, NST - 1)
    L_M_Q, L_M_K, L_R_V, L_M_V = LY["m_q"], LY["m_k"], LY["r_v"], LY["m_v"]
    LDMT = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"
    # vreg: the e4m3 staging (K's stages then V's, rows of KCPR 16-byte chunks, staged()'s swizzle) as ldmatrix
    # reads it: (stage, chunk pair, matrix = (chunk, key half), row, word)
    L_LD_V8 = TileLayout(S[(2 * NST * WARPS, KCPR // 2, 2, 2, 8, 4) : (SUB * KCPR * 4, 8, 4, 8 * KCPR * 4,
                                                                          KCPR * 4, 1)],
                         swizzle=(3, 2, 3) if KCPR == 8 else (2, 2, 3))
    KD = D // 16
    MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"

    @tiledsl.inline
    def qrow(r, b, kvh):
        """The (B * Lq * H) row of Q and O of the block's query row r (query r // GROUP, head kvh * GROUP + ...)."""
        return (b * lq + r // GROUP) * H + kvh * GROUP + r % GROUP

    @tiledsl.inline
    def chunk_of(lane, j):
        """(row, chunk) of the sub-tile a lane copies (and, kv8, widens) as its j-th 16-byte chunk: each quarter
        warp takes one chunk column of 8 rows, so its 16-byte shared accesses fall in 8 different bank groups
        (the f16 tiles' swizzle, and kv8's staging swizzle below, move a row's chunks by its low row bits)."""
        return lane % 8 + 8 * (j % 2), lane // 8 + 4 * (j // 2)

    @tiledsl.inline
    def staged(row, fc, kfr):
        """kv8: where chunk fc of row `row` sits in an e4m3 staging stage (unit = row * KCPR + this; the XOR
        spreads 8 rows' same chunk over the 8 bank groups). kfr (K read into fragments, D = 128): also rows 2q and
        2q + 1 on opposite halves (XOR 4 on odd rows), since a quarter warp's fragment loads read chunks 4j..4j+3
        of both (at D = 64 two rows fill the 32 banks and never collide)."""
        return fc ^ ((row % 8) ^ (4 * (row % 2)) if kfr else row % 8) if KCPR == 8 else fc ^ ((row // 2) % 4)

    @tiledsl.inline
    def q_fragments8(cp_q):
        """kv8 with K in registers: Q's A fragments with the contraction permuted as k_fragments reads K: k16
        step kd, lane quad c, k half h take d = 64 (kd // 4) + 16 c + 4 (kd % 4) + 2 h (and + 1), so that a
        lane's 4 e4m3 bytes of a key for step kd are one word of its 16-byte chunk 4 (kd // 4) + c. The sum over d
        is the same. After the prologue's Q group has landed (and, bf16 q, been made f16)."""
        T.cuda.tile.apply(T.ptx["cp.async.wait_group"], NST - 1)
        T.cuda.syncthreads()
        lane = T.cuda.lane_id()
        rq = T.alloc_local((KD * 4,), "uint32")
        for kd in T.unroll(KD):
            for x in T.unroll(4):
                d = 64 * (kd // 4) + 16 * (lane % 4) + 4 * (kd % 4) + 2 * (x // 2)
                rq[4 * kd + x] = cp_q[lane // 4 + 8 * (x % 2), d // 8, (d % 8) // 2]
        return rq.view(KD, 1, 1, 16, 8, layout=L_M_Q)

    @tiledsl.inline
    def qk_tile8(s_v, q_mma, c8, s, warp, lane):
        """kv8 with K in registers: S = Q K^T over this warp's 16 keys in staging stage s. Lane (n, c) loads
        chunk 4 j + c of key rows n and 8 + n (one 16-byte load each) and widens word kk into K's B fragment of
        k16 step 4 j + kk (q_fragments8's order)."""
        rk = T.alloc_local((4,), "uint32")
        rk_mma = rk.view(2, 1, 8, 8, layout=L_M_K)
        for j in T.unroll(KD // 4):
            w = T.alloc_local((2, 4), "uint32")
            for t in T.unroll(2):
                r = 8 * t + lane // 4
                T.cuda.tile.apply(T.ptx["ld.shared.v4.b32"], w[t], c8[s * WARPS + warp, r,
                                                                     staged(r, 4 * j + lane % 4, True)])
            for kk in T.unroll(4):
                for t in T.unroll(2):
                    lo, hi = e4m3x4_to_f16(w[t, kk])
                    rk[2 * t] = lo
                    rk[2 * t + 1] = hi
                if j == 0 and kk == 0:
                    T.cuda.tile.apply(T.ptx[MMA], s_v[0], q_mma[0], rk_mma, 0.0, scope="warp")
                else:
                    T.cuda.tile.apply(T.ptx[MMA], s_v[0], q_mma[4 * j + kk], rk_mma, s_v[0], scope="warp")

    @tiledsl.inline
    def pv_tile8(o_v, p_mma, ld_v8, s, warp):
        """kv8 with V in registers: O += P V over this warp's 16 keys in staging stage s. Per pair of 16-byte
        chunks one ldmatrix .trans (b16: d pairs) gives each lane, per (chunk, key half), a word of keys 2c, 2c+1
        (+ 8) at d = 2n, 2n + 1 (n = lane // 4): bytes 0 and 2 are the B word of d 2n, bytes 1 and 3 of 2n + 1.
        O's n8 tile 2 X holds chunk X's even d's, tile 2 X + 1 its odd ones."""
        rv = T.alloc_local((4,), "uint32")
        rv_ld = rv.view(4, 8, 4, layout=L_R_V)
        rb = T.alloc_local((4,), "uint32")
        rb_mma = rb.view(2, 1, 8, 8, layout=L_M_V)
        for cp in T.unroll(KCPR // 2):
            T.cuda.tile.apply(T.ptx[LDMT], rv_ld, ld_v8[NST * WARPS + s * WARPS + warp, cp], scope="warp")
            for ci in T.unroll(2):
                for kh in T.unroll(2):
                    w = rv[2 * ci + kh]
                    t0 = w & T.uint32(0x00FF00FF)
                    t1 = (w >> 8) & T.uint32(0x00FF00FF)
                    rb[kh] = e4m3_halves_to_f16(t0)
                    rb[2 + kh] = e4m3_halves_to_f16(t1)
                T.cuda.tile.apply(T.ptx[MMA], o_v[2 * cp + ci], p_mma[0], rb_mma, o_v[2 * cp + ci], scope="warp")

    @tiledsl.inline
    def copy_sub(cp, g, s, step, warp, lane, kb, k_lo, k_hi, b, kvh, X2, last_page, kfr):
        """cp.async of this warp's 16 keys of step `step` (keys clamped to k_hi - 1) into its stage s."""
        for j in T.unroll(CPL):
            r, fc = chunk_of(lane, j)
            key = T.min(k_lo + step * STEP + warp * SUB + r, k_hi - 1)
            if paged:
                row = (T.min(X2[b, key // page], last_page) * page + key % page) * HK + kvh
            else:
                row = (kb + key) * HK + kvh
            dst = staged(r, fc, kfr) if kv8 else fc
            T.cuda.tile.apply(T.ptx[COPY], cp[s * WARPS + warp, r, dst], g[T.cast(row, "int64"), fc, :],
                              chunk_bytes=16)

    @tiledsl.inline
    def widen(cf, c8, s, warp, lane):
        """kv8: the e4m3 chunks this lane copied into stage s as f16 (times 2^-8) in the warp's f16 tile."""
        for j in T.unroll(CPL):
            r, fc = chunk_of(lane, j)
            src = T.alloc_local((4,), "uint32")
            T.cuda.tile.apply(T.ptx["ld.shared.v4.b32"], src, c8[s * WARPS + warp, r, staged(r, fc, False)])
            dst = T.alloc_local((2, 4), "uint32")
            for i in T.unroll(4):
                lo, hi = e4m3x4_to_f16(src[i])
                dst[i // 2, 2 * (i % 2)] = lo
                dst[i // 2, 2 * (i % 2) + 1] = hi
            for h in T.unroll(2):             # one 16-byte store a chunk of the f16 tile
                T.cuda.tile.apply(T.ptx["st.shared.v4.b32"], cf[warp, r, 2 * fc + h], dst[h])

    @tiledsl.inline
    def body(Q, K, V, O, LSE, X1, X2, KSC, VSC, WO, WL, F):
        """The kernel (KSC, VSC: kv8's descales, else None; WO, WL, F: a split's partials and counters, else None)."""
        tid = T.cuda.thread_id()
        warp = T.cuda.warp_id()
        lane = T.cuda.lane_id()
        sp = T.cuda.block_id(0) // NQB
        qb = T.cuda.block_id(0) % NQB
        kvh = T.cuda.block_id(1)
        b = T.cuda.block_id(2)
        seqlen = X1[b]
        off = seqlen - lq                    # bottom-right causal: row r sees keys <= r // GROUP + off
        kb, last_page, k_lo, k_hi = decode_keys(K, b, sp, seqlen, paged, split, kps)
        if kv8:
            cs = C * KSC[kvh]
        else:
            cs = C
        kmax = k_hi
        if causal:
            kmax = T.min(k_hi, (T.min(qb * 16 + 16, NROWS) - 1) // GROUP + off + 1)
        nsteps = (T.max(kmax - k_lo, 0) + STEP - 1) // STEP

        gQ = Q.view(dtype="uint32").view(ROWQ, CPR, 4)
        gK = K.view(dtype="uint32").view(ROWK, KCPR, 4)
        gV = V.view(dtype="uint32").view(ROWK, KCPR, 4)
        sq = T.alloc_shared((16 * W,), "uint32")
        cp_q = sq.view(16, CPR, 4, layout=L_CP_Q)
        ld_q = sq.view(1, 1, D // 16, 4, 8, 4, layout=L_LD_Q)
        if kreg:                             # K's fragments come from the e4m3 staging: no f16 tile for K
            sk = None
            cp_k = None
            ld_k = None
        else:
            sk = T.alloc_shared((FST * WARPS * SUB * W,), "uint32")
            cp_k = sk.view(FST * WARPS, SUB, CPR, 4, layout=L_CP_KV)
            ld_k = sk.view(FST * WARPS, 1, D // 16, 4, 8, 4, layout=L_LD_K)
        if vreg:                             # V's fragments come from the e4m3 staging too
            cp_v = None
            ld_v = None
        else:
            sv = T.alloc_shared((FST * WARPS * SUB * W,), "uint32")
            cp_v = sv.view(FST * WARPS, SUB, CPR, 4, layout=L_CP_KV)
            ld_v = sv.view(FST * WARPS, 1, DN // 2, 4, 8, 4, layout=L_LD_V)
        if kv8:
            s8 = T.alloc_shared((2 * NST * WARPS * SUB * KCPR * 4,), "uint32")     # K's stages, then V's
            c8 = s8.view(2, NST * WARPS, SUB, KCPR, 4)
            ld_v8 = s8.view(2 * NST * WARPS, KCPR // 2, 4, 8, 4, layout=L_LD_V8)
            ck = c8[0]
            cv = c8[1]
        else:
            ck = cp_k
            cv = cp_v
        sl = T.alloc_shared((WARPS * 16,), "float32")

        # prologue: Q with the first step's K and V in one group, then the next NST - 1 steps a group each
        for j in T.unroll(CPT_Q):
            c = tid + 32 * WARPS * j
            r = T.min(qb * 16 + c // CPR, NROWS - 1)
            T.cuda.tile.apply(T.ptx[COPY], cp_q[c // CPR, c % CPR], gQ[qrow(r, b, kvh), c % CPR, :], chunk_bytes=16)
        for s in T.unroll(NST):
            if s < nsteps:
                copy_sub(ck, gK, s, s, warp, lane, kb, k_lo, k_hi, b, kvh, X2, last_page, kreg)
                copy_sub(cv, gV, s, s, warp, lane, kb, k_lo, k_hi, b, kvh, X2, last_page, False)
            T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
        if QCONV:
            T.cuda.tile.apply(T.ptx["cp.async.wait_group"], NST - 1)
            for j in T.unroll(CPT_Q):
                c = tid + 32 * WARPS * j
                bf16_chunk_to_f16(cp_q, c // CPR, c % CPR)
        s_, pk, o, m, sh, al, lsum, rk_ld, rk_mma, rv_ld, rv_mma, s_v, p_mma, o_v = registers()
        if kreg:
            qfr = q_fragments8(cp_q)
        else:
            qfr = q_fragments(ld_q, 0)

        row0 = qb * 16 + lane // 4           # this lane's rows: row0 and row0 + 8
        for i in range(nsteps):
            st = i % NST
            T.cuda.tile.apply(T.ptx["cp.async.wait_group"], NST - 1)
            if kv8:
                if not kreg:
                    widen(cp_k, ck, st, warp, lane)
                if not vreg:
                    widen(cp_v, cv, st, warp, lane)
                fs = warp
            else:
                fs = st * WARPS + warp
            T.cuda.tile.apply(T.ptx["bar.sync"], 1 + warp, 32)     # the warp's lanes see each other's tile
            kt0 = k_lo + i * STEP + warp * SUB                      # this warp's first key of the step
            act = kt0 < kmax
            if causal:
                act = act and kt0 <= (T.min(qb * 16 + 15, NROWS - 1)) // GROUP + off
            if act:
                if kreg:
                    qk_tile8(s_v, qfr, ck, st, warp, lane)
                else:
                    qk_tile(s_v, qfr, rk_ld, rk_mma, ld_k, fs)
                col0 = kt0 + 2 * (lane % 4)
                need = kt0 + SUB > k_hi
                if causal:
                    need = need or kt0 + SUB - 1 > (qb * 16) // GROUP + off
                if need:
                    for x in T.unroll(8):
                        col = col0 + (x // 4) * 8 + x % 2
                        if causal:
                            row = row0 + 8 * ((x % 4) // 2)
                            s_[x] = NEG if (col >= k_hi or col > row // GROUP + off) else s_[x]
                        else:
                            s_[x] = NEG if col >= k_hi else s_[x]
                online_softmax(s_, m, sh, al, lsum, o, pk, 1, 2, DN, cs, lazy, CVT)
                if vreg:
                    pv_tile8(o_v, p_mma, ld_v8, st, warp)
                else:
                    pv_tile(o_v, p_mma, rv_ld, rv_mma, ld_v, fs)
            T.cuda.tile.apply(T.ptx["bar.sync"], 1 + warp, 32)     # done reading the stage: refill it
            if i + NST < nsteps:
                copy_sub(ck, gK, st, i + NST, warp, lane, kb, k_lo, k_hi, b, kvh, X2, last_page, kreg)
                copy_sub(cv, gV, st, i + NST, warp, lane, kb, k_lo, k_hi, b, kvh, X2, last_page, False)
            T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

        # merge the warps: each its normalised O and log2-domain LSE into shared memory (over K's tiles), then a
        # thread per (row, 1/8 of the columns) weighs them by 2^(LSE_w - max)
        row_sums(o, sh, al, lsum, True)
        T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)
        T.cuda.syncthreads()
        so = (s8 if kv8 else sk).view(WARPS, 16, D, dtype="float32")      # the copies are over: their stages
        for x in T.unroll(2):
            for n in T.unroll(DN):
                for e in T.unroll(2):
                    # vreg: O's tile n holds the even (n even) or odd d's of chunk n // 2
                    col = (16 * (n // 2) + 2 * (2 * (lane % 4) + e) + n % 2) if vreg else n * 8 + 2 * (lane % 4) + e
                    so[warp, lane // 4 + 8 * x, col] = o[n * 4 + 2 * x + e]
            if lane % 4 == 0:
                sl[warp * 16 + lane // 4 + 8 * x] = m[x, 0] * cs + al[x, 0] if lsum[x, 0] > 0.0 else NEG
        T.cuda.syncthreads()
        r = tid // 8
        c0 = (tid % 8) * COLS
        mx = sl[r]
        for w in T.unroll(1, WARPS):
            mx = T.max(mx, sl[w * 16 + r])
        acc = T.alloc_local((COLS,), "float32")
        for e in T.unroll(COLS):
            acc[e] = 0.0
        den = 0.0
        for w in T.unroll(WARPS):
            lw = sl[w * 16 + r]
            wt = T.exp2(lw - mx, approx=True) if lw != NEG else 0.0
            den = den + wt
            for e in T.unroll(COLS):
                acc[e] = acc[e] + wt * so[w, r, c0 + e]
        inv = 1.0 / den if den > 0.0 else 0.0
        if kv8:
            inv = inv * VSC[kvh] * 256.0     # O in V's units: the widening's 2^-8 and this kv head's v_scale
        if qb * 16 + r < NROWS:
            orow = qrow(qb * 16 + r, b, kvh)
            lse = (mx + T.log2(den, approx=True)) * LN2 if den > 0.0 else NEG
            if split:
                prow = sp * (Q.shape[0] * lq * H)
                gOf = WO.view(ROWF, D)
                for e in T.unroll(COLS):
                    gOf[prow + orow, c0 + e] = acc[e] * inv
                if tid % 8 == 0:
                    WL.view(_BIG)[prow + orow] = lse
            else:
                gO = O.view(ROWF, D)
                for e in T.unroll(COLS):
                    gO[orow, c0 + e] = T.cast(acc[e] * inv, dtype)
                if tid % 8 == 0:
                    LSE.view(_BIG)[orow] = lse
        if split:
            # the group's last arriving split combines the NS partials of the block's 16 rows, a warp a row
            flag = T.alloc_shared((1,), "int32")
            if arrived_last(F, (b * HK + kvh) * NQB + qb, splits, tid, flag) == 1:
                for j in range(16 // WARPS):
                    row = qb * 16 + j * WARPS + warp
                    if row < NROWS:
                        combine_row(WO, WL, O, LSE, qrow(row, b, kvh), Q.shape[0] * lq * H, splits, lane, D, dtype)

    # the grid in the entries is a placeholder: the host sizes it (kernel[grid, threads])
    if kv8 and split:
        @tiledsl.jit
        def decode_fwd(Q: T.Tensor(QS, dtype), K: T.Tensor(KS, KDT), V: T.Tensor(KS, KDT), O: T.Tensor(OS, dtype),
                       LSE: T.Tensor(LS, "float32"), X1: T.Tensor(("B",), "int32"), X2: T.Tensor(X2S, "int32"),
                       KSC: T.Tensor((HK,), "float32"), VSC: T.Tensor((HK,), "float32"),
                       WO: T.Tensor(WOS, "float32"), WL: T.Tensor(WLS, "float32"), F: T.Tensor(("NC",), "int32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32 * WARPS))
            body(Q, K, V, O, LSE, X1, X2, KSC, VSC, WO, WL, F)
    elif kv8:
        @tiledsl.jit
        def decode_fwd(Q: T.Tensor(QS, dtype), K: T.Tensor(KS, KDT), V: T.Tensor(KS, KDT), O: T.Tensor(OS, dtype),
                       LSE: T.Tensor(LS, "float32"), X1: T.Tensor(("B",), "int32"), X2: T.Tensor(X2S, "int32"),
                       KSC: T.Tensor((HK,), "float32"), VSC: T.Tensor((HK,), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32 * WARPS))
            body(Q, K, V, O, LSE, X1, X2, KSC, VSC, None, None, None)
    elif split:
        @tiledsl.jit
        def decode_fwd(Q: T.Tensor(QS, dtype), K: T.Tensor(KS, KDT), V: T.Tensor(KS, KDT), O: T.Tensor(OS, dtype),
                       LSE: T.Tensor(LS, "float32"), X1: T.Tensor(("B",), "int32"), X2: T.Tensor(X2S, "int32"),
                       WO: T.Tensor(WOS, "float32"), WL: T.Tensor(WLS, "float32"), F: T.Tensor(("NC",), "int32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32 * WARPS))
            body(Q, K, V, O, LSE, X1, X2, None, None, WO, WL, F)
    else:
        @tiledsl.jit
        def decode_fwd(Q: T.Tensor(QS, dtype), K: T.Tensor(KS, KDT), V: T.Tensor(KS, KDT), O: T.Tensor(OS, dtype),
                       LSE: T.Tensor(LS, "float32"), X1: T.Tensor(("B",), "int32"), X2: T.Tensor(X2S, "int32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32 * WARPS))
            body(Q, K, V, O, LSE, X1, X2, None, None, None, None, None)

    decode_fwd.threads = 32 * WARPS
    decode_fwd.nqb = NQB
    smem = 16 * D * 2 + (2 - kreg - vreg) * FST * STEP * D * 2 + (2 * NST * STEP * D if kv8 else 0) + WARPS * 64
    decode_fwd.per_sm = max(1, min(4, 228 * 1024 // (smem + 1024)))
    _KERNELS[key] = decode_fwd
    return decode_fwd
