"""The FA2 forward (fa2.py's body: mma.sync + ldmatrix + cp.async, the online softmax in registers) over ragged
batches, whose lengths the kernel reads from the device: packed variable-length sequences (varlen.py's
attention_varlen) and new queries against a KV cache, contiguous or paged, split across blocks (decode.py's
attention_decode).

make_ragged builds one kernel per (mode, dtype, D, causal, heads, scale, configuration, ...). Its seven arguments are
Q, K, V, O, LSE and two int32 tensors X1, X2 (kv8 adds KSC, VSC; a split decode adds WO, WL, F after them):

  mode      Q            K, V                         O                 LSE            X1              X2
  "varlen"  (Tq, H, D)   (Tk, H_kv, D)                (Tq, H, D)        (H, Tq)        cu_seqlens_q    cu_seqlens_k
  "decode"  (B, Lq, H, D) (B, S, H_kv, D) contiguous  (B, Lq, H, D)     (B, Lq, H)     cache_seqlens   (B,) unused
                          (pages, P, H_kv, D) paged                                                    block_table
  splits>1  WO (NS, B, Lq, H, D), WL (NS, B, Lq, H): float32 partials per split; F: int32 (B * H_kv * query blocks)
            arrival counters, zero before the launch and after it (split_combine.py: the last split combines)

The grid is sized on the host from shapes and max_seqlen only (no read of the lengths):
  varlen: (query blocks of max_seqlen_q, H, B); a block past its sequence's length returns at once.
  decode: (NS * query blocks, H_kv, B); one block serves all GROUP * Lq query rows of one kv head (row
          r = query i * GROUP + head g): the GROUP query heads share every K/V tile it reads. Split s reads the keys
          [s * KPS, (s + 1) * KPS) of its sequence (KPS a multiple of the 64-key tile).

Causal is bottom-right aligned, as FlashAttention's varlen and kvcache functions: query i of a sequence with
len_q queries and len_k keys sees key j iff j <= i + len_k - len_q (decode: len_q = Lq, len_k = cache_seqlens[b]).
A row that sees no key (len_k = 0, or causal with len_q > len_k) gets O = 0 and LSE = -inf.
"""
import tiledsl
from tiledsl import T

from .common import LN2, LOG2E, NEG, bf16_chunk_to_f16, decode_keys, e4m3x4_to_f16, online_softmax
from .fa2 import CONFIGS, LAZY, layouts
from .forward_tile import tile_parts
from .split_combine import arrived_last, combine_row

BN = 64                 # key/value rows per tile (fa2.py's)
KV8_STAGES = 2          # kv8: staging stages of e4m3 tiles per block (112 KiB at D = 128: two blocks an SM; six
                        # stages, one block an SM, ran at half the speed on an H100: the block's one computing warp,
                        # not the bytes in flight, bounds it; decode_kernel.py splits that work over 4 warps)
# Tensors whose extents are read at call time are viewed with this static row count: element offsets of Q, O and
# LSE are int32 (up to 2^31 32-bit words, 8 GiB, each), so any row of a real tensor is within it; K and V rows are
# taken to 64 bits (a KV cache may be larger)
_BIG = 2 ** 31 - 1

_KERNELS = {}


def decode_config(D):
    """The decode kernel's (warps, mi, qreg): 4 warps whatever the rows (the idle ones skip the arithmetic but share
    the copies: 128 threads keep the cp.async queue full), Q's fragments reloaded at D = 256 as in fa2.py."""
    return (4, 1, 0 if D == 256 else 1)


def make_ragged(mode, dtype, D, causal, H, HK, scale, config=None, lq=1, page=0, splits=1, kps=0, lazy=None,
                kv8=False):
    """The ragged forward kernel (module docstring). mode "varlen" or "decode"; for decode lq query tokens per
    sequence, page the page size (0: a contiguous cache), splits the number of KV splits NS and kps the keys each
    reads (a multiple of 64; splits > 1 writes float32 partials, and a group's last split combines them).

    kv8 (decode): K and V are uint8 e4m3 bytes, and the kernel takes two more arguments, KSC and VSC: float32 (H_kv,)
    descales (the cache holds K / k_scale, V / v_scale). The products run in f16 whatever q's dtype: bfloat16 Q is
    made f16 in shared memory by the threads that copied it (|q| <= 65504). Each thread's cp.async brings its 16-byte
    chunks of a tile into a staging buffer, and after its cp.async.wait_group (its own copies complete and visible to it) it
    widens them into the f16 tile before the barrier that publishes the tile (no barrier added): e4m3 s.eeee.mmm to
    f16 bits s.0eeee.mmm0000000 by shifts and masks, which is the value times 2^-8 for normal and subnormal e4m3
    alike (f16's bias 15 against e4m3's 7; the e4m3fn NaN bytes become finite). The 2^8 and k_scale[kv head] return
    in the scores' scale (one scalar a block: a block serves one kv head), 2^8 and v_scale[kv head] in O's epilogue
    (before the float32 partials of a split: the combine is linear), so the host adds no elementwise pass."""
    if D not in (64, 128, 256):
        raise tiledsl.LaunchError(f"attention supports head dims 64, 128 and 256, got {D}")
    if dtype not in ("float16", "bfloat16"):
        raise tiledsl.LaunchError(f"attention supports float16 and bfloat16, not {dtype}")
    if kv8 and (mode != "decode" or D == 256):
        # D = 256: the staging stages take shared memory to 224 KiB and the widening spills (ptxas -v sm_90)
        raise tiledsl.LaunchError(f"an e4m3 KV cache is a decode cache of head dim 64 or 128 (got {mode}, D={D})")
    if H % HK:
        raise tiledsl.LaunchError(f"k/v have {HK} heads, which does not divide q's {H}")
    varlen = mode == "varlen"
    if not varlen and mode != "decode":
        raise tiledsl.LaunchError(f"mode must be 'varlen' or 'decode', got {mode!r}")
    config = tuple(config or (CONFIGS[D] if varlen else decode_config(D)))
    lazy = LAZY if lazy is None else bool(lazy)
    kv8 = bool(kv8)
    key = (mode, dtype, D, bool(causal), H, HK, float(scale), config, lq, page, splits, kps, lazy, kv8)
    if key in _KERNELS:
        return _KERNELS[key]
    warps, MI, QREG = config
    MDT = "float16" if kv8 else dtype         # the products' type (kv8: the cache widens to f16)
    t = {"float16": "f16", "bfloat16": "bf16"}[MDT]
    COPY = "cp.async.cg.shared.global"
    CVT = f"cvt.rn.{t}x2.f32"                 # P's words
    OCVT = f"cvt.rn.{'bf16' if dtype == 'bfloat16' else 'f16'}x2.f32"      # O's words, in q's dtype
    QCONV = kv8 and dtype == "bfloat16"
    THREADS = 32 * warps
    WR = 16 * MI
    BM = WR * warps
    W, CPR = D // 2, D // 8
    NI, DN = BN // 8, D // 8
    GROUP = H // HK
    C = float(scale) * LOG2E * (256.0 if kv8 else 1.0)        # kv8: the widened K is its value times 2^-8
    KDT = "uint8" if kv8 else dtype
    KCPR = D // 16 if kv8 else CPR            # 16-byte chunks of a K/V row in memory
    CPT_Q = BM * CPR // THREADS
    CPT_KV = BN * KCPR // THREADS
    NST8 = KV8_STAGES if kv8 else 2           # staging stages (kv8)
    PEND = 2 * NST8 - 1 if kv8 else 1         # cp.async groups left pending when a tile is waited for
    if warps not in (1, 2, 4, 8, 16) or MI not in (1, 2) or QREG not in (0, 1) or (BN * CPR) % THREADS:
        raise tiledsl.LaunchError(f"attention configuration {config}: warps in 1..16 (a power of two), mi 1 or 2, "
                                  f"qreg 0 or 1")
    paged = page > 0
    split = splits > 1
    if paged and (page & (page - 1) or page < 16):
        raise tiledsl.LaunchError(f"the page size must be a power of two of at least 16, got {page}")
    if split and (kps <= 0 or kps % BN):
        raise tiledsl.LaunchError(f"keys per split must be a positive multiple of {BN}, got {kps}")
    QDIV = 1 if varlen else GROUP            # a row's query position is row // QDIV
    NQBD = -(-GROUP * lq // BM)              # decode: query blocks per (sequence, kv head)
    NROWS_D = GROUP * lq
    ROWQ = _BIG // (CPR * 4)                 # rows of the (rows, CPR, 4) word views
    ROWK = 2 ** 40 // (CPR * 4)              # K and V: row offsets in 64 bits
    ROWW = _BIG // W
    ROWF = _BIG // D
    if varlen:
        QS, KS, OS, LS, X1S, X2S, ODT = ("TQ", H, D), ("TK", HK, D), ("TQ", H, D), (H, "TQ"), ("B1",), ("B1",), dtype
    else:
        QS = ("B", lq, H, D)
        KS = ("NP", page, HK, D) if paged else ("B", "S", HK, D)
        X1S, X2S = ("B",), (("B", "MP") if paged else ("B",))      # contiguous: X2 unused (cache_seqlens again)
        OS, LS, ODT = ("B", lq, H, D), ("B", lq, H), dtype
        WOS, WLS = (splits, "B", lq, H, D), (splits, "B", lq, H)      # split: the float32 partials
    shared, registers, q_fragments, qk_tile, pv_tile, row_sums = tile_parts(MDT, D, BN, config,
                                                                        layouts(D, warps, MI), PEND)

    @tiledsl.inline
    def qrow(r, q0, h, b, kvh):
        """The row of Q (and O), as a (tokens * H) row index, of the block's sequence-local row r."""
        return ((q0 + r) * H + h) if varlen else ((b * lq + r // GROUP) * H + kvh * GROUP + r % GROUP)

    @tiledsl.inline
    def copy_kv(cp, g, stage, tile, kb, k_lo, k_hi, b, kvh, X2, last_page, tid):
        """cp.async of the key/value tile `tile` of the block's range (keys k_lo + 64 tile ..., clamped to
        k_hi - 1) into `stage`: kb is the sequence's first key row (varlen, contiguous cache), X2 the block table
        (paged: a key's row is its page's, the page index clamped to the cache)."""
        for j in T.unroll(CPT_KV):
            c = tid + THREADS * j
            key = T.min(k_lo + tile * BN + c // KCPR, k_hi - 1)
            if paged:
                row = (T.min(X2[b, key // page], last_page) * page + key % page) * HK + kvh
            else:
                row = (kb + key) * HK + kvh
            # 64-bit offsets: a KV cache may pass 2^31 32-bit words (B = 64 x 32k keys x 8 heads x D = 128 is 2^30)
            T.cuda.tile.apply(T.ptx[COPY], cp[stage, c // KCPR, c % KCPR], g[T.cast(row, "int64"), c % KCPR, :],
                              chunk_bytes=16)

    @tiledsl.inline
    def widen(cp, c8, stage, s8, tid):
        """kv8: the e4m3 chunks this thread copied into staging stage `s8` as f16 (times 2^-8) in the tile's
        stage `stage`: a word of 4 bytes becomes 2 f16x2 words (byte 0, the first element, in the low half)."""
        for j in T.unroll(CPT_KV):
            c = tid + THREADS * j
            r = c // KCPR
            fc = c % KCPR
            for i in T.unroll(4):
                lo, hi = e4m3x4_to_f16(c8[s8, r, fc, i])
                cp[stage, r, 2 * fc + i // 2, 2 * (i % 2)] = lo
                cp[stage, r, 2 * fc + i // 2, 2 * (i % 2) + 1] = hi

    @tiledsl.inline
    def land(cp, c, g, jt, st, ntiles, kb, k_lo, k_hi, b, kvh, X2, last_page, tid):
        """Tile jt of K (or V) into the f16 tile's stage st for the whole block (kv8: widened from staging stage
        jt % NST8, which then takes tile jt + NST8), and the copy of the tile after it in flight."""
        T.cuda.tile.apply(T.ptx["cp.async.wait_group"], PEND)
        if kv8:
            widen(cp, c, st, jt % NST8, tid)
            T.cuda.syncthreads()
            if jt + NST8 < ntiles:
                copy_kv(c, g, jt % NST8, jt + NST8, kb, k_lo, k_hi, b, kvh, X2, last_page, tid)
        else:
            T.cuda.syncthreads()
            if jt + 1 < ntiles:
                copy_kv(c, g, 1 - st, jt + 1, kb, k_lo, k_hi, b, kvh, X2, last_page, tid)
        T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

    @tiledsl.inline
    def body(Q, K, V, O, LSE, X1, X2, KSC, VSC, WO, WL, F):
        """The kernel (KSC, VSC: kv8's float32 (H_kv,) descales, else None; WO, WL, F: a split's float32 partials
        and the groups' arrival counters, else None)."""
        tid = T.cuda.thread_id()
        warp = T.cuda.warp_id()
        lane = T.cuda.lane_id()
        if varlen:
            qb = T.cuda.block_id(0)
            if causal:                       # heaviest blocks first
                qb = T.cuda.grid_dim(0) - 1 - qb
            h = T.cuda.block_id(1)
            b = T.cuda.block_id(2)
            kvh = h // GROUP
            q0 = X1[b]
            nrows = X1[b + 1] - q0           # the entry returned for a block past its sequence
            kb = X2[b]
            k_lo = 0
            k_hi = X2[b + 1] - kb
            off = k_hi - nrows               # bottom-right causal: row r sees keys <= r + off
            sp = 0
            last_page = 0
        else:
            sp = T.cuda.block_id(0) // NQBD
            qb = T.cuda.block_id(0) % NQBD
            kvh = T.cuda.block_id(1)
            b = T.cuda.block_id(2)
            h = 0
            q0 = 0
            nrows = NROWS_D
            seqlen = X1[b]
            off = seqlen - lq
            kb, last_page, k_lo, k_hi = decode_keys(K, b, sp, seqlen, paged, split, kps)
        if kv8:
            cs = C * KSC[kvh]                # the scores' log2-domain scale: this block's kv head's k_scale in it
        else:
            cs = C
        gQ = Q.view(dtype="uint32").view(ROWQ, CPR, 4)
        gK = K.view(dtype="uint32").view(ROWK, KCPR, 4)
        gV = V.view(dtype="uint32").view(ROWK, KCPR, 4)

        cp_q, cp_k, cp_v, ld_q, ld_k, ld_v = shared()
        if kv8:                              # the e4m3 tiles' staging stages: copies land here, widen() reads them
            sk8 = T.alloc_shared((NST8 * BN * KCPR * 4,), "uint32")
            sv8 = T.alloc_shared((NST8 * BN * KCPR * 4,), "uint32")
            ck = sk8.view(NST8, BN, KCPR, 4)
            cv = sv8.view(NST8, BN, KCPR, 4)
        else:
            ck = cp_k
            cv = cp_v

        # the keys this block visits: [k_lo, kmax), causal stopping at its last row's diagonal
        kmax = k_hi
        if causal:
            kmax = T.min(k_hi, (T.min(qb * BM + BM, nrows) - 1) // QDIV + off + 1)
        ntiles = (T.max(kmax - k_lo, 0) + BN - 1) // BN

        # prologue: Q and K[0] in one group, V[0] in the next (no key copies when the block has no key)
        for j in T.unroll(CPT_Q):
            c = tid + THREADS * j
            r = T.min(qb * BM + c // CPR, nrows - 1)
            T.cuda.tile.apply(T.ptx[COPY], cp_q[c // CPR, c % CPR], gQ[qrow(r, q0, h, b, kvh), c % CPR, :],
                              chunk_bytes=16)
        if ntiles > 0:
            copy_kv(ck, gK, 0, 0, kb, k_lo, k_hi, b, kvh, X2, last_page, tid)
        T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
        if ntiles > 0:
            copy_kv(cv, gV, 0, 0, kb, k_lo, k_hi, b, kvh, X2, last_page, tid)
        T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
        if kv8:                              # tiles 1 .. NST8 - 1 in flight too, a group each for K and V
            for s8 in T.unroll(1, NST8):
                if s8 < ntiles:
                    copy_kv(ck, gK, s8, s8, kb, k_lo, k_hi, b, kvh, X2, last_page, tid)
                T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
                if s8 < ntiles:
                    copy_kv(cv, gV, s8, s8, kb, k_lo, k_hi, b, kvh, X2, last_page, tid)
                T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

        if QCONV:                            # bfloat16 Q: each thread makes the chunks it copied f16 in place
            T.cuda.tile.apply(T.ptx["cp.async.wait_group"], PEND)
            for j in T.unroll(CPT_Q):
                c = tid + THREADS * j
                bf16_chunk_to_f16(cp_q, c // CPR, c % CPR)
        s, pk, o, m, sh, al, lsum, rk_ld, rk_mma, rv_ld, rv_mma, s_v, p_mma, o_v = registers()

        qfr = q_fragments(ld_q, warp)

        wfirst = qb * BM + warp * WR             # this warp's first sequence-local row
        row0 = wfirst + lane // 4                # this lane's first row; row (mi, r) is row0 + 16 mi + 8 r
        for jt in range(ntiles):
            st = jt % 2
            kt0 = k_lo + jt * BN                 # the tile's first key
            land(cp_k, ck, gK, jt, st, ntiles, kb, k_lo, k_hi, b, kvh, X2, last_page, tid)

            # a warp whose rows all lie past the sequence (or, causal, before the tile's first key) skips the
            # arithmetic: its rows are not stored, or the tile would add exact zeros to them
            act = wfirst < nrows
            if causal:
                act = act and kt0 <= (wfirst + WR - 1) // QDIV + off
            if act:
                qk_tile(s_v, qfr, rk_ld, rk_mma, ld_k, st)

                # mask the keys past the range and (causal) past each row's diagonal
                col0 = kt0 + 2 * (lane % 4)
                need = kt0 + BN > k_hi
                if causal:
                    need = need or kt0 + BN - 1 > wfirst // QDIV + off
                if need:
                    for i in T.unroll(MI * NI * 4):
                        col = col0 + ((i // 4) % NI) * 8 + i % 2
                        if causal:
                            row = row0 + 16 * (i // (NI * 4)) + 8 * ((i % 4) // 2)
                            s[i] = NEG if (col >= k_hi or col > row // QDIV + off) else s[i]
                        else:
                            s[i] = NEG if col >= k_hi else s[i]

                online_softmax(s, m, sh, al, lsum, o, pk, MI, NI, DN, cs, lazy, CVT)

            land(cp_v, cv, gV, jt, st, ntiles, kb, k_lo, k_hi, b, kvh, X2, last_page, tid)
            if act:
                pv_tile(o_v, p_mma, rv_ld, rv_mma, ld_v, st)

        # epilogue: the full row sums, O / l (0 for a row with no key), LSE (-inf for one)
        row_sums(o, sh, al, lsum, True)
        if kv8:                              # O in V's units: the widening's 2^-8 and this kv head's v_scale
            vsc = VSC[kvh] * 256.0
            for i in T.unroll(MI * DN * 4):
                o[i] = o[i] * vsc
        if split:
            # float32 partials: split sp's rows follow the (B, Lq, H) rows of the splits before it
            gOf = WO.view(ROWF, D)
            gLf = WL.view(_BIG)
            R = Q.shape[0] * lq * H
            prow = sp * R
            flag = T.alloc_shared((1,), "int32")
            for x in T.unroll(MI * 2):
                mi, r = x // 2, x % 2
                row = row0 + 16 * mi + 8 * r
                if row < nrows:
                    orow = prow + qrow(row, q0, h, b, kvh)
                    for n in T.unroll(DN):
                        for e in T.unroll(2):
                            gOf[orow, n * 8 + 2 * (lane % 4) + e] = o[(mi * DN + n) * 4 + 2 * r + e]
                    if lane % 4 == 0:
                        gLf[orow] = (m[x, 0] * cs + al[x, 0]) * LN2 if lsum[x, 0] > 0.0 else NEG
            # the group's last arriving split combines the NS partials of the block's rows, a warp a row
            if arrived_last(F, (b * HK + kvh) * NQBD + qb, splits, tid, flag) == 1:
                for j in range(BM // warps):
                    row = qb * BM + j * warps + warp
                    if row < nrows:
                        combine_row(WO, WL, O, LSE, qrow(row, q0, h, b, kvh), R, splits, lane, D, dtype)
        else:
            gO = O.view(dtype="uint32").view(ROWW, W)
            ow = T.alloc_local((MI * DN * 2, 1), "uint32")
            T.cuda.tile.apply(T.ptx[OCVT], ow, o.view(MI * DN * 2, 2)[:, 1:2], o.view(MI * DN * 2, 2)[:, 0:1])
            for x in T.unroll(MI * 2):
                mi, r = x // 2, x % 2
                row = row0 + 16 * mi + 8 * r
                if row < nrows:
                    orow = qrow(row, q0, h, b, kvh)
                    for n in T.unroll(DN):
                        gO[orow, n * 4 + lane % 4] = ow[(mi * DN + n) * 2 + r, 0]
                    if lane % 4 == 0:
                        lse = (m[x, 0] * cs + al[x, 0]) * LN2 if lsum[x, 0] > 0.0 else NEG
                        if varlen:
                            LSE[h, q0 + row] = lse
                        else:
                            LSE.view(_BIG)[orow] = lse

    # the grid in the entries is a placeholder: the host sizes it from max_seqlen / the splits (kernel[grid, threads])
    if kv8 and split:
        @tiledsl.jit
        def ragged_fwd(Q: T.Tensor(QS, dtype), K: T.Tensor(KS, KDT), V: T.Tensor(KS, KDT), O: T.Tensor(OS, ODT),
                       LSE: T.Tensor(LS, "float32"), X1: T.Tensor(X1S, "int32"), X2: T.Tensor(X2S, "int32"),
                       KSC: T.Tensor((HK,), "float32"), VSC: T.Tensor((HK,), "float32"),
                       WO: T.Tensor(WOS, "float32"), WL: T.Tensor(WLS, "float32"), F: T.Tensor(("NC",), "int32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=THREADS))
            body(Q, K, V, O, LSE, X1, X2, KSC, VSC, WO, WL, F)
    elif kv8:
        @tiledsl.jit
        def ragged_fwd(Q: T.Tensor(QS, dtype), K: T.Tensor(KS, KDT), V: T.Tensor(KS, KDT), O: T.Tensor(OS, ODT),
                       LSE: T.Tensor(LS, "float32"), X1: T.Tensor(X1S, "int32"), X2: T.Tensor(X2S, "int32"),
                       KSC: T.Tensor((HK,), "float32"), VSC: T.Tensor((HK,), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=THREADS))
            body(Q, K, V, O, LSE, X1, X2, KSC, VSC, None, None, None)
    elif split:
        @tiledsl.jit
        def ragged_fwd(Q: T.Tensor(QS, dtype), K: T.Tensor(KS, KDT), V: T.Tensor(KS, KDT), O: T.Tensor(OS, ODT),
                       LSE: T.Tensor(LS, "float32"), X1: T.Tensor(X1S, "int32"), X2: T.Tensor(X2S, "int32"),
                       WO: T.Tensor(WOS, "float32"), WL: T.Tensor(WLS, "float32"), F: T.Tensor(("NC",), "int32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=THREADS))
            body(Q, K, V, O, LSE, X1, X2, None, None, WO, WL, F)
    else:
        @tiledsl.jit
        def ragged_fwd(Q: T.Tensor(QS, dtype), K: T.Tensor(KS, KDT), V: T.Tensor(KS, KDT), O: T.Tensor(OS, ODT),
                       LSE: T.Tensor(LS, "float32"), X1: T.Tensor(X1S, "int32"), X2: T.Tensor(X2S, "int32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=THREADS))
            if varlen:                   # a block past its sequence's length (a helper returns at its end only)
                qb = T.cuda.block_id(0)
                if causal:
                    qb = T.cuda.grid_dim(0) - 1 - qb
                b = T.cuda.block_id(2)
                if qb * BM >= X1[b + 1] - X1[b]:
                    return
            body(Q, K, V, O, LSE, X1, X2, None, None, None, None, None)

    ragged_fwd.threads = THREADS
    # blocks an SM holds (shared memory: Q, two K and V stages, kv8's staging; the registers allow two)
    smem = (BM + 4 * BN) * D * 2 + (2 * NST8 * BN * D if kv8 else 0)
    ragged_fwd.per_sm = 2 if 2 * (smem + 1024) <= 228 * 1024 else 1
    ragged_fwd.bm = BM
    ragged_fwd.nqb = NQBD
    _KERNELS[key] = ragged_fwd
    return ragged_fwd
