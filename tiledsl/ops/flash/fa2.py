"""FlashAttention forward, FA2 style, written only in the kernel language (mma.sync + ldmatrix + cp.async).

make_attention builds the kernel that forward.py's attention(q, k, v, causal=False, scale=None, path="fa2") runs:
(O, LSE) for (B, H, N, D) tensors, f16 or bf16, D in {64, 128, 256},
any N, grouped-query attention (k and v with H_kv heads, H_kv dividing H). LSE is float32, natural log, the
log-sum-exp of each query row's scaled scores (FlashAttention's softmax_lse).

One block owns BM = 16 * warps * mi query rows of one (batch, head); each warp owns 16 * mi of them (the
configuration (warps, mi, qreg): CONFIGS per head dim, CANDIDATES for the benchmark to compare):
  * Q's tile is copied to shared memory once and its mma A fragments (ldmatrix.x4) are held in registers for
    the whole loop (qreg = 1) or reloaded at every k16 step (qreg = 0, where registers are short);
  * the key/value tiles (BN = 64 rows) stream through two shared stages each by cp.async: K[j+1] is in flight
    while S = Q K[j]^T and its softmax run, V[j+1] while P V[j] runs (two barriers per tile);
  * S = Q K^T with mma.sync m16n8k16 (K fragments by ldmatrix.x4), the online softmax in registers: a running
    row max (reduced over the 4 lanes of a row with shfl.sync.bfly) and a per-lane partial row sum (reduced once,
    in the epilogue), exponentials ex2.approx of s * scale * log2(e) - m * scale * log2(e) in one fma;
  * P is packed to f16x2/bf16x2 in registers: the m16n8 accumulator of two adjacent n8 tiles is exactly the
    m16k16 A fragment, so P V needs no shared memory; V's fragments come from ldmatrix.x4.trans;
  * causal (top-left aligned, key j <= query i): tiles wholly above the diagonal are never visited, the tiles
    that cross it and the ragged last tile are masked to -inf, and a warp whose rows all come before a tile's
    first key skips that tile's arithmetic (it would add exact zeros; the block's copies and barriers still run);
    rows >= N are computed on clamped loads and not stored.
The epilogue divides O by the row sum and writes LSE = (m * scale * log2(e) + log2(l)) * ln(2).
"""
import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

from .common import LN2, LOG2E, NEG, key_tiles, online_softmax
from .forward_tile import tile_parts

BN = 64                 # key/value rows per tile
# the FA2 kernel's default for lazy (make_attention): on, as the FA3 defaults' config[8]. Side by side on the H200
# (session 29, D = 128, (4, 2, 0) compiled for sm_80, f16 then bf16, N = 4096 / 16384, non-causal then causal),
# TFLOP/s lazy against eager: 349 / 346, 304 / 300, 346 / 342, 329 / 321, 355 / 347, 307 / 301, 361 / 353,
# 329 / 324 (ahead in 8 of 8)
LAZY = True


def layouts(D, warps, mi, bn=BN, stages=2):
    """Shared (b32 words, XOR-swizzled 16-byte chunks) and register layouts for head dim D, `warps` warps and
    `mi` m16 tiles (16 query rows each) per warp, key tiles of `bn` rows in `stages` stages."""
    W = D // 2                      # words per shared row
    KD = D // 16                    # k16 steps of Q K^T
    NI = bn // 8                    # n8 tiles of S
    KT = bn // 16                   # k16 steps of P V
    DN = D // 8                     # n8 tiles of O
    cpr = D // 8                    # 16-byte chunks per row
    # chunk index XOR row bits: the 8 rows one ldmatrix reads land in 8 different bank groups
    sw = {8: (3, 2, 3), 16: (3, 2, 4), 32: (3, 2, 5)}[cpr]
    bm = 16 * mi * warps
    lane4 = (4 @ laneid, 1 @ laneid)
    L = {}
    L["cp_q"] = TileLayout(S[(bm, cpr, 4) : (W, 4, 1)], swizzle=sw)
    L["cp_kv"] = TileLayout(S[(stages, bn, cpr, 4) : (bn * W, W, 4, 1)], swizzle=sw)
    # Q as A: (warp, m tile, k step, matrix = (k half, row half), row, word)
    L["ld_q"] = TileLayout(S[(warps, mi, KD, 2, 2, 8, 4) : (16 * mi * W, 16 * W, 8, 4, 8 * W, W, 1)], swizzle=sw)
    # K as B (N x K rows): (stage, n-tile pair, k step, matrix = (n tile, k half), row, word)
    L["ld_k"] = TileLayout(S[(stages, NI // 2, KD, 2, 2, 8, 4) : (bn * W, 16 * W, 8, 8 * W, 4, W, 1)], swizzle=sw)
    # V as B through .trans (K x N rows): (stage, k step, d-tile pair, matrix = (d tile, key half), row, word)
    L["ld_v"] = TileLayout(S[(stages, KT, DN // 2, 2, 2, 8, 4) : (bn * W, 16 * W, 8, 4, 8 * W, W, 1)], swizzle=sw)
    # registers: ldmatrix matrix i -> register i of each group of 4
    L["r_q"] = TileLayout(S[(mi, KD, 4, 8, 4) : (KD * 4, 4, 1, *lane4)])        # all of Q's fragments
    L["r_q1"] = TileLayout(S[(mi, 4, 8, 4) : (4, 1, *lane4)])                  # one k step's
    L["r_k"] = TileLayout(S[(4, 8, 4) : (1, *lane4)])                          # one n-tile pair's
    L["r_v"] = TileLayout(S[(4, 8, 4) : (1, *lane4)])                          # one d-tile pair's
    # mma operands: A (step, M, K, 16, 8) with register r = row half + 2 * k half; B (tile, K, 8, 8); D (M, N, 16, 8)
    L["m_q"] = TileLayout(S[(KD, mi, 1, 2, 8, 2, 4) : (4, KD * 4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    L["m_q1"] = TileLayout(S[(mi, 1, 2, 8, 2, 4) : (4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    L["m_p"] = TileLayout(S[(KT, mi, 1, 2, 8, 2, 4) : (4, NI * 2, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    L["m_k"] = TileLayout(S[(2, 1, 8, 2, 4) : (2, 2, 4 @ laneid, 1, 1 @ laneid)])
    L["m_v"] = TileLayout(S[(2, 1, 8, 2, 4) : (2, 2, 4 @ laneid, 1, 1 @ laneid)])
    # S by n-tile pairs (a batch axis first): the Q K^T mmas of one pair of K fragments
    L["m_s2"] = TileLayout(S[(NI // 2, mi, 2, 2, 8, 4, 2) : (8, NI * 4, 4, 2, *lane4, 1)])
    L["m_o"] = TileLayout(S[(mi, DN, 2, 8, 4, 2) : (DN * 4, 4, 2, *lane4, 1)])
    # O by d-tile pairs (a batch axis first): the P V mmas of one pair of V fragments
    L["m_o2"] = TileLayout(S[(DN // 2, mi, 2, 2, 8, 4, 2) : (8, DN * 4, 4, 2, *lane4, 1)])
    return L


_KERNELS = {}


# (warps, m16 tiles per warp, Q fragments held in registers): BM = 16 * warps * mi query rows per block
CONFIGS = {64: (8, 1, 1), 128: (8, 1, 1), 256: (4, 1, 0)}
# where N and N_kv are whole tiles, a faster configuration serves: on the H200 at D = 128, N = 4096, f16, compiled
# for sm_80 and run through the driver's PTX compile (benchmarks/attention.py --configs all --fa2-target sm_80,
# 2026-12-01), (4, 2, 0) reaches 350 TFLOP/s against (8, 1, 1)'s 273 non-causal (torch's flash backend 336) and
# 299 against 243 causal (flash 298). It sits at 255 registers: ptxas -v shows no local memory at sm_90 for whole
# tiles (the stack frame an earlier session saw was nvJitLink's relocatable compile), but ragged tails and causal
# sm_80 spill 8-12 bytes, so ragged shapes keep CONFIGS
WHOLE_TILES: dict = {128: (4, 2, 0)}
# what benchmarks/attention.py --configs all compares (none spills at sm_90: ptxas -v, 2026-12-01; the choice above
# is not yet measured): two m16 tiles per warp halve the shared-memory bytes read per mma, at up to 255 registers
CANDIDATES = {64: [(8, 1, 1), (4, 1, 1), (4, 2, 1), (8, 2, 1)], 128: [(8, 1, 1), (4, 1, 1), (8, 2, 0), (4, 2, 0)],
              256: [(4, 1, 0), (8, 1, 0)]}
# D = 256: Q is reloaded from shared memory (its 64 fragment registers would spill); 4 warps keep the shared
# memory at 160 KiB (Q 32 + K 64 + V 64), within an A100's 163 KiB; 8 warps need 192 KiB (sm_90 only)


def default_config(D, shape):
    """CONFIGS[D], or WHOLE_TILES[D] when the shape (B, H, H_kv, N, N_kv) has no ragged tile."""
    whole = WHOLE_TILES.get(D)
    if whole is not None:
        N, N_kv = shape[3], shape[4]
        if N % (16 * whole[0] * whole[1]) == 0 and N_kv % BN == 0:
            return whole
    return CONFIGS[D]


def make_attention(dtype, D, causal, shape, scale, config=None, lazy=None):
    """The forward kernel for element type `dtype` ("float16"/"bfloat16"), head dim D, causal or not,
    shape = (B, H, H_kv, N, N_kv) (every stride an immediate) and softmax scale `scale`.

    config = (warps, mi, qreg): `warps` warps of `mi` m16 tiles each (BM = 16 * warps * mi query rows per block);
    qreg: Q's fragments live in registers for the whole loop (1) or are reloaded from shared memory at every
    k16 step (0: fewer registers, which mi = 2 needs at D = 128). Default: CONFIGS[D]. lazy: a row's running max
    moves only when a tile passes it by more than 2^8 (LAZY_BITS, log2 domain; FA4's conditional rescale, as the FA3
    kernel's config[8]), so O's 4 * mi * D / 8 multiplies a thread and tile run only on the tiles where one of its
    rows moved; P is then up to 2^8 and a row's largest probability inexact by up to f16's / bf16's rounding of it.
    None: LAZY. Arguments: Q (B, H, N, D), K and V (B, H_kv, N_kv, D), O like Q, LSE (B, H, N) float32."""
    if D not in (64, 128, 256):
        raise tiledsl.LaunchError(f"attention supports head dims 64, 128 and 256, got {D}")
    config = tuple(config or default_config(D, shape))
    if lazy is None:
        lazy = LAZY
    if lazy not in (False, True, 0, 1):
        raise tiledsl.LaunchError(f"attention's lazy must be True or False, got {lazy!r}")
    lazy = bool(lazy)
    key = (dtype, D, bool(causal), tuple(shape), float(scale), config, lazy)
    if key in _KERNELS:
        return _KERNELS[key]
    if dtype not in ("float16", "bfloat16"):
        raise tiledsl.LaunchError(f"attention supports float16 and bfloat16, not {dtype}")
    warps, MI, QREG = config
    B, H, HK, N, NK = shape
    if H % HK:
        raise tiledsl.LaunchError(f"k/v have {HK} heads, which does not divide q's {H}")
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    COPY = "cp.async.cg.shared.global"
    CVT = f"cvt.rn.{t}x2.f32"
    THREADS = 32 * warps
    WR = 16 * MI                    # query rows per warp
    BM = WR * warps
    W, CPR = D // 2, D // 8
    NI, DN = BN // 8, D // 8
    NQB = -(-N // BM)               # query blocks per head
    NKT = -(-NK // BN)              # key tiles
    GROUP = H // HK
    C = float(scale) * LOG2E        # scores to the log2 domain
    CPT_Q = BM * CPR // THREADS     # 16-byte chunks each thread copies
    CPT_KV = BN * CPR // THREADS
    if warps not in (1, 2, 4, 8, 16) or MI not in (1, 2) or QREG not in (0, 1) or (BN * CPR) % THREADS:
        raise tiledsl.LaunchError(f"attention configuration {config}: warps in 1..16 (a power of two, whose "
                                  f"threads split a {BN} x {D} tile into 16-byte copies), mi 1 or 2, qreg 0 or 1")
    shared, registers, q_fragments, qk_tile, pv_tile, row_sums = tile_parts(dtype, D, BN, config,
                                                                        layouts(D, warps, MI))

    @tiledsl.inline
    def copy_kv(cp, g, stage, tile, base, tid):
        """cp.async of key/value tile `tile` (rows clamped to NK - 1) of head row `base` into `stage`."""
        for j in T.unroll(CPT_KV):
            c = tid + THREADS * j
            r = T.min(tile * BN + c // CPR, NK - 1)
            T.cuda.tile.apply(T.ptx[COPY], cp[stage, c // CPR, c % CPR], g[base + r, c % CPR, :], chunk_bytes=16)

    @tiledsl.jit
    def attention_fwd(Q: T.Tensor((B, H, N, D), dtype), K: T.Tensor((B, HK, NK, D), dtype),
                      V: T.Tensor((B, HK, NK, D), dtype), O: T.Tensor((B, H, N, D), dtype),
                      LSE: T.Tensor((B, H, N), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=NQB * B * H, block=THREADS))
        tid = T.cuda.thread_id()
        warp = T.cuda.warp_id()
        lane = T.cuda.lane_id()
        pid = T.cuda.block_id()
        # the query blocks of one head are neighbours (its K and V stay in L2); causal: heaviest first
        bh = pid // NQB
        qb = pid % NQB
        if causal:
            qb = NQB - 1 - qb
        b = bh // H
        h = bh % H
        qbase = bh * N                           # row of Q/O (as (B*H*N) rows) where this head starts
        kvbase = (b * HK + h // GROUP) * NK
        gQ = Q.view(dtype="uint32").view(B * H * N, CPR, 4)
        gK = K.view(dtype="uint32").view(B * HK * NK, CPR, 4)
        gV = V.view(dtype="uint32").view(B * HK * NK, CPR, 4)
        gO = O.view(dtype="uint32").view(B * H * N, W)

        cp_q, cp_k, cp_v, ld_q, ld_k, ld_v = shared()

        ntiles = key_tiles(qb, NKT, BM, BN, causal)

        # prologue: Q and K[0] in one group, V[0] in the next
        for j in T.unroll(CPT_Q):
            c = tid + THREADS * j
            r = T.min(qb * BM + c // CPR, N - 1)
            T.cuda.tile.apply(T.ptx[COPY], cp_q[c // CPR, c % CPR], gQ[qbase + r, c % CPR, :], chunk_bytes=16)
        copy_kv(cp_k, gK, 0, 0, kvbase, tid)
        T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
        copy_kv(cp_v, gV, 0, 0, kvbase, tid)
        T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

        s, pk, o, m, sh, al, lsum, rk_ld, rk_mma, rv_ld, rv_mma, s_v, p_mma, o_v = registers()

        qfr = q_fragments(ld_q, warp)

        row0 = qb * BM + warp * WR + lane // 4   # this lane's first query row; row (mi, r) is row0 + 16 mi + 8 r
        for jt in range(ntiles):
            st = jt % 2
            # K[jt] has landed and every warp is done with tile jt - 1: refill the other K stage
            T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 1)
            T.cuda.syncthreads()
            if jt + 1 < ntiles:
                copy_kv(cp_k, gK, 1 - st, jt + 1, kvbase, tid)
            T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

            # causal: a warp whose rows all come before the tile's first key skips its arithmetic (every score
            # masked: P = 0, the max and so O and the row sums unchanged, to the bit); the copies and barriers
            # are the block's and run as before. The other warps' work fills the issue slots it leaves
            if (jt * BN <= qb * BM + warp * WR + WR - 1) if causal else True:
                qk_tile(s_v, qfr, rk_ld, rk_mma, ld_k, st)

                # mask the ragged last tile and (causal) the tiles crossing the diagonal
                col0 = jt * BN + 2 * (lane % 4)
                need = (jt + 1) * BN > NK
                if causal:
                    need = need or (jt + 1) * BN - 1 > qb * BM
                if need:
                    for i in T.unroll(MI * NI * 4):
                        col = col0 + ((i // 4) % NI) * 8 + i % 2
                        if causal:
                            row = row0 + 16 * (i // (NI * 4)) + 8 * ((i % 4) // 2)
                            s[i] = NEG if (col >= NK or col > row) else s[i]
                        else:
                            s[i] = NEG if col >= NK else s[i]

                online_softmax(s, m, sh, al, lsum, o, pk, MI, NI, DN, C, lazy, CVT)

            # V[jt] has landed and every warp is done with V[jt - 1]: refill the other V stage
            T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 1)
            T.cuda.syncthreads()
            if jt + 1 < ntiles:
                copy_kv(cp_v, gV, 1 - st, jt + 1, kvbase, tid)
            T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
            if (jt * BN <= qb * BM + warp * WR + WR - 1) if causal else True:
                pv_tile(o_v, p_mma, rv_ld, rv_mma, ld_v, st)

        # epilogue: the full row sums, O / l, LSE
        row_sums(o, sh, al, lsum, False)
        ow = T.alloc_local((MI * DN * 2, 1), "uint32")
        T.cuda.tile.apply(T.ptx[CVT], ow, o.view(MI * DN * 2, 2)[:, 1:2], o.view(MI * DN * 2, 2)[:, 0:1])
        for x in T.unroll(MI * 2):
            mi, r = x // 2, x % 2
            row = row0 + 16 * mi + 8 * r
            if row < N:
                for n in T.unroll(DN):
                    gO[qbase + row, n * 4 + lane % 4] = ow[(mi * DN + n) * 2 + r, 0]
                if lane % 4 == 0:
                    LSE[b, h, row] = (m[x, 0] * C + al[x, 0]) * LN2

    _KERNELS[key] = attention_fwd
    return attention_fwd
