"""The grouped Hopper GEMM's kernel: out[start_e:end_e] = x[start_e:end_e] · w[e]ᵀ for every group e of a
sorted token tensor, one persistent launch (grouped.py has the host API: grouped_mm, matmul_fp8_blockwise).

It is the Hopper GEMM (hopper_kernel.py) with another walk and another epilogue, built from its pieces (the shared
ring's layouts, the register split, the elected producer thread, the grouped tile order of schedule.py):

* the walk (`group_count`, `group_of`): the groups' tiles are numbered expert by expert, each expert's
  ceil(count_e / BM) x ceil(N / BN) tiles in schedule.py's grouped order; block b of G takes tiles b, b + G, ...
  The counts are read on the device from `offsets` (cumulative end rows, torch._grouped_mm's convention): every
  thread that walks first adds up the tiles (one pass over the E offsets), then moves a cursor (expert, its first
  tile, its rows) forward as its tiles increase, so the host never synchronises and an expert of 0 tokens simply
  has no tiles. The offsets are clamped on the device (each end between the previous end and the rows of x), so
  offsets that are not monotone never make a block read or write outside x and out.
* the loads: a tile of expert e loads x's rows start .. start + BM from the packed (T, K) tensor map and w[e]'s
  rows from w viewed as (E * N, K). A tile's rows past the expert's end are the next expert's tokens (or the TMA
  unit's zero fill past T): they are multiplied by w[e] in the tensor cores and never stored. A ragged N reads
  the next expert's weight rows (or zero fill) into columns that are never stored either.
* the epilogue: plain stores, masked to rows start .. end - 1 of the expert and columns below N, two columns a
  thread at a time (one 32-bit store of a half2 word where N is even).
* blockwise FP8 (`scaled`): e4m3 operands whose K tile (128 bytes) is exactly one 128-wide scale block. Each K tile
  runs its wgmma into a temporary accumulator (scale_d = 0), waits for it and adds it to the f32 accumulator times
  scale_a[row, kb] * scale_b[e, column block, kb]: the scales promote every K block in the consumer, not once after
  the loop (DeepSeek-V3's recipe). A dense blockwise GEMM is the same kernel with one group (`grouped=False`: no
  offsets parameter, the group's end is M). With `pipelined` (the gated path "gemm_fp8_blockwise_pipelined" on the
  GPU) the promotion runs one K block behind the tensor cores over two temporaries (`promote_pipelined`): block
  k + 1's wgmma is issued before block k is waited for (wait_group 1), so the promotion's FMAs no longer leave the
  tensor cores idle; same products, same order, so the same bits.

Other forms of the same walk (build's keywords): `masked` (the decode form: E groups of C rows, a count each),
`trans_w` (w (E, K, N) read as stored: the backward's dx), `kgrouped` (the weight gradient dW[e] = dYₑᵀ Xₑ, the
groups splitting the reduction; with trans_w, dY and X read as stored).

Waits: only the ring's (a stage's full / empty mbarriers within a block, as in the Hopper kernel); no block waits for
another. `check_walk` replays the walk on the host (the helpers below on Python integers, as schedule_model.py
does for the Hopper walk) and says whether every tile of every group is computed by exactly one block.
"""
import tiledsl
from tiledsl import T

from ...lib.producer import consumer_registers, elect_one
from tiledsl.layout import S, TileLayout

from .hopper_kernel import (CONSUMER_REGS, FP8, HALF, PRODUCER_REGS, ROW_BYTES, SMEM_LIMIT, SW128,
                            epilogue_columns, k_tile, layouts)
from .schedule import tile_origin
from .staged_store import STMX4, make_staged_store, stm_layouts

GROUP_M = 8               # tile rows of one expert walked together (L2 reuse of w[e]'s columns)
SCALE_BLOCK = 128         # the blockwise FP8 scales' block: 1 x 128 on x, 128 x 128 on w
TOK_ALIGN = 8             # K-grouped, not token-major: a TMA box's first token (innermost) a multiple of 16 bytes


@tiledsl.inline
def group_span(start, end, BM, ntn):
    """The tiles of a group of rows start .. end - 1: ceil(rows / BM) tile rows of ntn tiles."""
    return (end - start + BM - 1) // BM * ntn


@tiledsl.inline
def group_end(offsets, e, start, rows, cap):
    """Group e's end row. Packed groups (cap = 0): offsets[e], clamped to start .. rows (offsets that are not
    monotone or pass x's rows read and write nothing outside x and out). Masked groups (cap > 0: group e owns rows
    e * cap .. e * cap + cap - 1, of which the first offsets[e] are tokens): start + offsets[e], clamped to start ..
    start + cap."""
    v = offsets[e] + (start if cap > 0 else 0)
    hi = T.min(start + cap, rows) if cap > 0 else rows
    return T.min(T.max(v, start), hi)


@tiledsl.inline
def group_start(e, prev_end, cap):
    """Group e's first row: the previous group's end (packed), or e * cap (masked)."""
    return e * cap if cap > 0 else prev_end


@tiledsl.inline
def group_count(offsets, E, rows, BM, ntn, cap):
    """Every group's tiles added up (one pass over the offsets)."""
    n = 0
    end = 0
    for e in range(E):
        start = group_start(e, end, cap)
        end = group_end(offsets, e, start, rows, cap)
        n = n + group_span(start, end, BM, ntn)
    return n


@tiledsl.inline
def group_of(offsets, tile, e0, base0, start0, end0, rows, BM, ntn, cap):
    """The cursor (e, base, start, end) moved forward to the group holding `tile` (tile < group_count): group e
    holds tiles base .. base + its span - 1 and rows start .. end - 1. A block's tiles increase, so its cursor only
    moves forward: E offsets read per block, not per tile."""
    e = e0
    base = base0
    start = start0
    end = end0
    while tile >= base + group_span(start, end, BM, ntn):
        base = base + group_span(start, end, BM, ntn)
        e = e + 1
        start = group_start(e, end, cap)
        end = group_end(offsets, e, start, rows, cap)
    return e, base, start, end


def host_helpers() -> dict:
    """The walk's helpers as host functions on Python integers, calling one another (schedule_model.host's way,
    with every helper in one namespace, so a helper's call of another runs the host one)."""
    import types

    from .schedule_model import _HostT
    g = dict(globals(), T=_HostT)
    names = ("group_span", "group_end", "group_start", "group_count", "group_of", "tile_origin")
    for name in names:
        fn = globals()[name].fn
        g[name] = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    return {name: g[name] for name in names}


def walk(offsets, rows, N, BM, BNT, GM, G, cap=0):
    """The grouped walk on the host (the kernel's helpers on Python integers): {block: [(e, row0, col0, end)]}.
    cap > 0: the masked form (group e: rows e * cap .., offsets[e] of them tokens)."""
    h = host_helpers()
    count, find, origin, end_of = h["group_count"], h["group_of"], h["tile_origin"], h["group_end"]
    ntn = (N + BNT - 1) // BNT
    total = count(offsets, len(offsets), rows, BM, ntn, cap)
    out = {}
    for bid in range(G):
        e, base, start = 0, 0, 0
        end = end_of(offsets, 0, 0, rows, cap) if len(offsets) else 0
        mine = []
        for ti in range((total - bid + G - 1) // G):
            tile = bid + ti * G
            e, base, start, end = find(offsets, tile, e, base, start, end, rows, BM, ntn, cap)
            r0, col0 = origin(tile - base, (end - start + BM - 1) // BM, ntn, GM, 1, 0, BM, BNT)
            mine.append((e, start + r0, col0, end))
        out[bid] = mine
    return out


def check_walk(offsets, rows, N, BM, BNT, GM, G, cap=0):
    """None when the walk computes every (row tile, column tile) of every group exactly once and only those, else a
    sentence naming what is wrong (offsets: monotone ends, the last one `rows`; or with cap, the masked form's
    counts, each at most cap)."""
    seen = {}
    for bid, tiles in walk(offsets, rows, N, BM, BNT, GM, G, cap).items():
        for e, row0, col0, end in tiles:
            key = (e, row0, col0)
            if key in seen:
                return f"tile {key} of group {e} computed by blocks {seen[key]} and {bid}"
            seen[key] = bid
    start = 0
    for e, end in enumerate(offsets):
        if cap:
            start, end = e * cap, e * cap + end
        for row0 in range(start, end, BM):
            for col0 in range(0, N, BNT):
                if seen.pop((e, row0, col0), None) is None:
                    return f"tile rows {row0}.., columns {col0}.. of group {e} never computed"
        start = end
    if seen:
        return f"tiles outside every group computed: {sorted(seen)[:4]}"
    return None


def build(ab: str, out: str, stages: int, consumers: int, bn: int, num_sms: int, group_m: int, grouped: bool,
          scaled: bool, kgrouped: bool = False, max_groups: int = 0, masked: bool = False,
          trans_w: bool = False, pipelined: bool = False, halves: bool = False, tma_store: bool = False):
    """The kernel for x and w of type `ab` (float16 / bfloat16, or e4m3 with `scaled`: blockwise scales), out of
    type `out`. grouped: called as kernel(X, W, C, offsets[, SA, SB]) with X (T, K), W (E * N, K), C (T, N),
    offsets (E,) int32; else (one group, the dense blockwise GEMM) kernel(X, W, C, SA, SB). SA (T, ceil(K / 128))
    and SB (E, ceil(N / 128), ceil(K / 128)) float32 (E = 1 when not grouped).

    kgrouped (f16/bf16, the weight gradient dW[e] = dYₑᵀ Xₑ): the groups split the reduction, not the rows. Called
    as kernel(A, B, C, offsets) with A (M, T) = dYᵀ, B (N, T) = Xᵀ (K-major, tokens along the rows), C (E * M, N)
    = dW; E x ceil(M / BM) x ceil(N / BN) tiles (known on the host), tile of group e reducing over the tokens
    start_e .. end_e - 1. The tokens are the tensor maps' innermost dimension here, and the TMA unit needs a box's
    first global address 16-byte aligned (an unaligned innermost coordinate stops the kernel with an illegal
    instruction on the H200, poisoning the context): the boxes start at start_e rounded down to a multiple of 8
    tokens (TOK_ALIGN), so the first K tile of a group may begin with up to 7 of the previous group's tokens, and
    its last K tile reaches into the next group's: each consumer zeroes those columns of its 64 rows of A in the
    stage (generic stores, then fence.proxy.async and the warpgroup's named barrier before its wgmma reads them),
    so they add nothing. A group of 0 tokens stores zeros.

    masked (grouped, not kgrouped): the decode form. X is (E * C, K) (E groups of C rows: a (E, C, K) tensor
    flattened) and offsets are counts: group e's tokens are rows e * C .. e * C + offsets[e] - 1 (clamped to 0 .. C);
    C's rows past a group's count are not written. C = M / E on the device.

    trans_w (f16/bf16, grouped, the input gradient dx = dy · w[e] without transposing w): W is (E * K, N), each
    expert's (K, N) block read as stored, N-major: the B tile is BN / 64 TMA boxes of K tile rows x 64 columns and
    wgmma reads it transposed (trans_b). K must be a multiple of the K tile (64): a ragged last K tile would read
    the next expert's rows (the host checks). With kgrouped, trans_w takes both operands token-major as stored:
    A = dY (T, M) and B = X (T, N), each tile BM / 64 (BN / 64) boxes of K tile token rows x 64 columns (consumer
    c's 64 rows of the product are A's box c), wgmma reading both transposed; the next group's tokens are then
    rows of A's boxes, zeroed the same way. No transposed copies, and T needs no padding.

    max_groups > 0: the block first copies offsets into shared memory (max_groups int32, at least E: the host
    checks), so the walk's reads of them (E per thread to count the tiles, E per block along the walk) cost shared
    memory latency, not global (256 experts: about 256 dependent L2 reads a thread otherwise).

    pipelined (scaled only): the promotion software-pipelined over two temporary accumulators, so the tensor cores
    run K block k + 1 while the consumer scales block k into the accumulator (`promote_pipelined`); without it, each
    K block's wgmma is waited for (wait_group 0) before its promotion.

    halves (scaled, BN = 256, not pipelined): the 128 x 256 tile with one temporary of half its columns: each K
    block runs as two m64n128 products, one per 128-column scale block, each waited for and promoted into its half
    of the accumulator (fma: one rounding, one instruction a register; the other forms multiply, then add) before
    the next is issued. 128 + 64 accumulator registers, as the pipelined form's 64 + 2 x 64 at BN = 128, for half
    the tiles (each A tile loaded once per 256 columns); the tensor cores stay busy on the other consumer's products
    while one consumer promotes. (With a multiply and an add, ptxas spilled 8 bytes, at 232 registers and at 240.)

    tma_store (f16/bf16 out, BN a multiple of 64; not the grouped blockwise form, which spills with it): the
    TMA-store epilogue (staged_store.py). The row-grouped and dense blockwise forms take out twice, as C and as a
    (M, N) map CM (kernel(X, W, C[, offsets][, SA, SB], CM)): a consumer's
    64 rows wholly inside the tile's group go out through the TMA store, a part crossing the group's end through the
    masked register stores. K-grouped: C is a 3-D (E, M, N) tensor map,
    each consumer's 64 x BN part packed by stmatrix into a swizzled staging buffer and written by one thread's TMA
    store, which clips the rows at M (each expert's matrix) and the columns at N. The weight gradient's tiles
    reduce over one expert's tokens only (a few K tiles each: 128 tokens an expert in DeepSeek-V3-like routing), so
    their stores are half of the kernel's traffic: from registers, a warp writes 16 bytes of each of 8 rows per
    instruction (two L2 requests per 32-byte sector), and the warpgroup waits for its stores to issue before its
    next tile; the TMA unit writes whole lines while the warpgroup runs on (ncu, H100, 256 experts x 128 tokens,
    7168 -> 2048: L2 78% busy, 469 M store sectors for 235 M sectors of dW)."""
    if pipelined and not scaled:
        raise tiledsl.LaunchError("grouped gemm: the pipelined promotion is a form of the blockwise scaled kernel")
    if scaled and ab != "e4m3":
        raise tiledsl.LaunchError(f"grouped gemm: blockwise scales take e4m3 operands, not {ab}")
    if halves and (not scaled or bn != 2 * SCALE_BLOCK or pipelined):
        raise tiledsl.LaunchError(f"grouped gemm: the halved promotion is a form of the blockwise scaled kernel at "
                                  f"BN = {2 * SCALE_BLOCK}, not pipelined (got BN = {bn})")
    if scaled and bn % SCALE_BLOCK:
        raise tiledsl.LaunchError(f"grouped gemm: blockwise scales need BN a multiple of {SCALE_BLOCK}, got {bn}")
    if masked and (kgrouped or not grouped):
        raise tiledsl.LaunchError("grouped gemm: the masked form is a row-grouped form (grouped=True, not kgrouped)")
    if trans_w and (scaled or not grouped or bn % 64):
        raise tiledsl.LaunchError("grouped gemm: trans_w takes f16/bf16 groups and BN a multiple of 64")
    TOKM = bool(kgrouped and trans_w)
    TMA_ST = bool(tma_store)
    if TMA_ST and not (out in HALF and bn % 64 == 0 and not (scaled and grouped)):
        # (the grouped blockwise forms with it spill 12-24 bytes: their walk's cursor beside the promotion's
        # temporaries and both stores' registers)
        raise tiledsl.LaunchError(f"grouped gemm: tma_store takes a float16/bfloat16 out, BN a multiple of 64 and "
                                  f"not the grouped blockwise form (got {out}, BN = {bn}"
                                  f"{', grouped blockwise' if scaled and grouped else ''})")
    if kgrouped and (scaled or not grouped):
        raise tiledsl.LaunchError("grouped gemm: the K-grouped form takes f16/bf16 groups (grouped=True, unscaled)")
    if not scaled and ab not in HALF:
        raise tiledsl.LaunchError(f"grouped gemm takes float16/bfloat16 operands (or e4m3 with blockwise scales), "
                                  f"not {ab}")
    if bn % 8 or not 8 <= bn <= 256 or consumers not in (1, 2) or stages < 2:
        raise tiledsl.LaunchError(f"grouped gemm: BN={bn} (a multiple of 8 up to 256), {consumers} consumer "
                                  f"warpgroup(s) (1 or 2) and {stages} stage(s) (at least 2) do not tile")
    IS_FP8 = ab in FP8
    if IS_FP8:
        MMA = f"wgmma.mma_async.sync.aligned.m64n{bn}k32.f32.{ab}.{ab}"
        ELEM = "uint8"
    else:
        MMA = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{HALF[ab]}.{HALF[ab]}"
        ELEM = ab
    LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    STORE2 = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
    STORE3 = "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
    BM, BNT, STG, CONS = 64 * consumers, bn, stages, consumers
    KT = k_tile(ab)
    KSTEPS = KT // (32 if IS_FP8 else 16)
    THREADS = 128 * (1 + consumers)
    CAP = min((65536 // THREADS) // 8 * 8, 248)
    CREGS = consumer_registers(THREADS, CAP, consumers, PRODUCER_REGS, CONSUMER_REGS)
    TX = (BM + BNT) * ROW_BYTES
    NACC = BNT // 2
    GMAX = int(max_groups) if grouped else 0
    if STG * (BM + BNT) * ROW_BYTES + 4 * GMAX + 1024 > SMEM_LIMIT:
        raise tiledsl.LaunchError(f"grouped gemm: {stages} stages of {BM} + {bn} rows exceed the shared memory")
    if TMA_ST:
        # the staging buffer: all BN columns where it fits beside the ring and the staged offsets, else parts of
        # BN / 2, BN / 4, ... (stmatrix and the TMA boxes take whole 64-column boxes)
        EPI = epilogue_columns(BM, BNT, STG, CONS, ab, out, reserved=4 * GMAX)
        if EPI % 64:
            raise tiledsl.LaunchError(f"grouped gemm: {stages} stages of {BM} + {bn} rows leave no room for the "
                                      f"TMA-store epilogue's staging buffer; use fewer stages")
        EH = BNT // EPI                 # parts of a consumer's 64 x BN tile
        NW = NACC // EH // 2            # half2 words of one part per thread
        EPL = stm_layouts(CONS, EPI, EH, NW, SW128)
        L_EPI, L_EPI3, L_EPIW, L_PK = EPL["epi"], EPL["epi3"], EPL["epiw"], EPL["pk"]
        claim, publish, publish3 = make_staged_store(STORE3 if kgrouped else STORE2, EPI > 64 or not kgrouped)
    L = layouts(BM, BNT, KT, STG, CONS, ab)
    L_TA, L_WA, L_WB, L_ACC = L["tma_a"], L["wg_a"], L["wg_b"], L["acc"]
    HB = SCALE_BLOCK                            # halves: the columns of one product (one scale block)
    if halves:
        MMA_H = f"wgmma.mma_async.sync.aligned.m64n{HB}k32.f32.{ab}.{ab}"
        L_ACC_H = layouts(BM, HB, KT, STG, CONS, ab)["acc"]
    L_TB = T.tma_layout((STG, 1, BNT, KT), ELEM, 128)
    if trans_w:
        # B as stored (K tile rows x BN columns) in BN / 64 boxes of 64 columns (128 bytes: the swizzle span), and
        # as wgmma reads it MN-major: (stage, N rep, K step of 16 rows, (box, 64 columns), 16 rows)
        L_TB = T.tma_layout((STG, BNT // 64, KT, 64), ELEM, 128)
        L_WB = TileLayout(S[(STG, 1, KT // 16, BNT // 64, 64, 16) : (BNT * KT, 1, 16 * 64, KT * 64, 1, 64)],
                          swizzle=SW128)
    if TOKM:
        # A as stored, token-major: box c holds consumer c's 64 columns of A (rows of the product); wgmma reads
        # it MN-major: (stage, consumer, M rep, K step of 16 tokens, 64 columns, 16 tokens)
        L_TA = T.tma_layout((STG, BM // 64, KT, 64), ELEM, 128)
        L_WA = TileLayout(S[(STG, CONS, 1, KT // 16, 64, 16) : (BM * KT, KT * 64, 1, 16 * 64, 1, 64)],
                          swizzle=SW128)
    SMS = max(int(num_sms), 1)
    GM = int(group_m)
    HALF_OUT = out in HALF
    CVT = f"cvt.rn.{HALF[out]}x2.f32" if HALF_OUT else None
    X_ANN = T.TensorMap(("M", "K"), ELEM, box=(BM, KT), swizzle=128)
    W_ANN = T.TensorMap(("EN", "K"), ELEM, box=(BNT, KT), swizzle=128)
    if trans_w:
        W_ANN = T.TensorMap(("EK", "N"), ELEM, box=(KT, 64), swizzle=128)
    C_ANN = T.Tensor(("M", "N"), out)
    SA_ANN = T.Tensor(("M", "KB"), "float32")
    SB_ANN = T.Tensor(("E", "NB", "KB"), "float32")
    OFF_ANN = T.Tensor(("E",), "int32")
    BK_ANN = T.TensorMap(("N", "K"), ELEM, box=(BNT, KT), swizzle=128)     # K-grouped: B = Xᵀ (N, T)
    CK_ANN = T.Tensor(("EM", "N"), out)                                     # K-grouped: dW as (E * M, N)
    if TMA_ST:
        CK_ANN = T.TensorMap(("E", "M", "N"), out, box=(1, 64, 64), swizzle=128)    # dW (E, M, N), boxes of 64 x 64
        CM_ANN = T.TensorMap(("M", "N"), out, box=(64, 64), swizzle=128)            # out (T, N) as a map as well
    if TOKM:
        X_ANN = T.TensorMap(("K", "M"), ELEM, box=(KT, 64), swizzle=128)    # dY (T, M) as stored
        BK_ANN = T.TensorMap(("K", "N"), ELEM, box=(KT, 64), swizzle=128)   # X (T, N) as stored

    @tiledsl.inline
    def cursor_start(offsets, M, cap):
        """The walk's cursor at group 0 (base tile 0, rows 0 .. end_0)."""
        end = M
        if grouped:
            end = group_end(offsets, 0, 0, M, cap)
        return 0, 0, 0, end

    @tiledsl.inline
    def locate(offsets, tile, e, base, start, end, M, ntn, cap):
        """The group holding `tile` and the tile's first row and column of out."""
        if grouped:
            e, base, start, end = group_of(offsets, tile, e, base, start, end, M, BM, ntn, cap)
        r0, col0 = tile_origin(tile - base, (end - start + BM - 1) // BM, ntn, GM, 1, 0, BM, BNT)
        return e, base, start, end, start + r0, col0

    @tiledsl.inline
    def tile_of(offsets, tile, e, base, start, end, M, N, K, ntn, nk, cap):
        """Everything a tile needs: the cursor (e, base, start, end), the tile's first row and column, the first
        K coordinate, B's first row, its K tiles, the row offset of C and the end of the rows stored."""
        if kgrouped:
            ntm = (M + BM - 1) // BM
            e = tile // (ntm * ntn)
            row0, col0 = tile_origin(tile % (ntm * ntn), ntm, ntn, GM, 1, 0, BM, BNT)
            start = 0
            if e > 0:
                start = T.min(T.max(offsets[e - 1], 0), K)
            end = group_end(offsets, e, start, K, 0)
            kstart = start
            if not TOKM:
                # the tokens are the maps' innermost dimension: the TMA box must start 16 bytes aligned (an
                # unaligned start is an illegal instruction on the GPU), so the K tiles start at the aligned token
                # at or below start, and the consumers zero the previous group's tokens at its head
                kstart = start // TOK_ALIGN * TOK_ALIGN
            wrow = col0
            nkt = (end - kstart + KT - 1) // KT
            if end <= start:
                nkt = 0
            crow = e * M
            cend = M
        else:
            e, base, start, end, row0, col0 = locate(offsets, tile, e, base, start, end, M, ntn, cap)
            kstart = 0
            wrow = e * N + col0
            nkt = nk
            crow = 0
            cend = end
        return e, base, start, end, row0, col0, kstart, wrow, nkt, crow, cend

    @tiledsl.inline
    def store(C, acc, row0, end, col0, crow, live, c, w, lane, N):
        """The tile's rows below the group's end and columns below N: a thread's column pairs (2(l % 4), + 1) as
        one half2 word where N is even (the pair's address is then 4-byte aligned), else element by element. live =
        0: zeros (a K-grouped group of no tokens; selected here rather than written to the accumulators, which only
        wgmma may define without serialising it)."""
        rbase = row0 + 64 * c + 16 * w + lane // 4
        cbase = col0 + 2 * (lane % 4)
        if HALF_OUT:
            pk = T.alloc_local((NACC // 2, 1), "uint32")
            pairs = acc.view(NACC // 2, 2)
            T.cuda.tile.apply(T.ptx[CVT], pk, pairs[:, 1:2], pairs[:, 0:1])
            if N % 2 == 0:
                Cw = C.view(dtype="uint32")
                for j in T.unroll(NACC // 2):
                    row = rbase + 8 * (j % 2)
                    col = cbase + 8 * (j // 2)
                    if row < end and col < N:
                        Cw[crow + row, col // 2] = pk[j, 0] if live else T.uint32(0)
            else:
                for i in T.unroll(NACC):
                    row = rbase + 8 * ((i // 2) % 2)
                    col = cbase + 8 * (i // 4) + i % 2
                    if row < end and col < N:
                        C[crow + row, col] = T.cast(acc[i] if live else 0.0, out)
        else:
            for i in T.unroll(NACC):
                row = rbase + 8 * ((i // 2) % 2)
                col = cbase + 8 * (i // 4) + i % 2
                if row < end and col < N:
                    C[crow + row, col] = acc[i] if live else 0.0

    @tiledsl.inline
    def put_staged(CM, acc, epi, epw, free, done, c, w, tid, nst, e, row0, col0, live):
        """The tile's 64 x BN part of consumer c (its nst-th staged tile) through the staging buffer and the TMA
        store, EPI columns at a time: packed to half2 words, written by stmatrix, stored by thread 0 (into matrix e
        of dW's 3-D map, K-grouped; else into out's rows row0 + 64 c ..). live = 0: zeros (a K-grouped group of no
        tokens; the accumulators hold the previous tile's sums)."""
        for h in T.unroll(EH):
            claim(free, c, tid, nst * EH + h)
            pk = T.alloc_local((NW, 1), "uint32")
            pairs = acc.view(NACC // 2, 2)
            T.cuda.tile.apply(T.ptx[CVT], pk, pairs[h * NW:(h + 1) * NW, 1:2], pairs[h * NW:(h + 1) * NW, 0:1])
            if not live:
                for j in T.unroll(NW):
                    pk[j, 0] = T.uint32(0)
            T.cuda.tile.apply(T.ptx[STMX4], epw[c, w], pk.view(EPI // 16, 4, 8, 4, layout=L_PK), scope="warp")
            if kgrouped:
                publish3(CM, epi, done, c, tid, nst * EH + h, e, row0, col0 + h * EPI)
            else:
                publish(CM, epi, done, c, tid, nst * EH + h, row0, col0 + h * EPI)

    @tiledsl.inline
    def block_scales(sc, SA, SB, ra, rb, e, col0, kk, NB):
        """K block kk's scales for this thread: its two rows' (sc[0], sc[1]) and the tile's column blocks'."""
        sc[0] = SA[ra, kk]
        sc[1] = SA[rb, kk]
        for q in T.unroll(BNT // SCALE_BLOCK):
            sc[2 + q] = SB[e, T.min(col0 // SCALE_BLOCK + q, NB - 1), kk]

    @tiledsl.inline
    def issue_block(tv, wa, wb, full, it, c):
        """The K block in ring slot `it`: wait for its stage, then its products alone (scale_d = 0) into tv, one
        commit group."""
        s = it % STG
        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[s:s + 1], (it // STG) % 2)
        T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], tv, scope="warpgroup")
        T.cuda.tile.apply(T.ptx[MMA], tv, wa[s, c], wb[s], scope="warpgroup", scale_d=False)
        T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], tv, scope="warpgroup")

    @tiledsl.inline
    def promote(acc, tmp, sc, empty, it, lane):
        """The K block in ring slot `it`, its wgmma retired by the caller's wait_group: its stage back to the
        producer (nothing reads it any more), its products times their scales added to the accumulator."""
        if lane == 0:
            s = it % STG
            T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[s:s + 1])
        for q in T.unroll(BNT // SCALE_BLOCK):
            fa = sc[0] * sc[2 + q]
            fb = sc[1] * sc[2 + q]
            for i in T.unroll(q * (NACC // (BNT // SCALE_BLOCK)), (q + 1) * (NACC // (BNT // SCALE_BLOCK))):
                acc[i] = acc[i] + tmp[i] * (fb if (i // 2) % 2 else fa)

    @tiledsl.inline
    def promote_pipelined(acc, tmp, tv, tmp2, tv2, sc, sc2, wa, wb, full, empty, SA, SB, ra, rb, e, col0, it0,
                          nkt, NB, c, lane):
        """A tile's nkt >= 1 K blocks with the promotion one block behind the tensor cores: blocks alternate
        between the temporaries tmp (even) and tmp2 (odd), the loop unrolled by two so both stay statically
        indexed. Block k + 1 is issued before block k is waited for (wait_group 1: k retired, k + 1 in flight), so
        its wgmma runs while block k is promoted; the last block is drained with wait_group 0. A block's stage goes
        back to the producer in its promotion, after the wait that retired its wgmma; its scales are loaded before
        its stage is waited for, a block ahead of their use. Every issue is unconditional inside the loop and the
        tail retires everything in both of its branches: no accumulator in flight meets another definition of
        itself at a branch's join (the compiler would copy it there, and ptxas serialise the wgmma to allow it)."""
        block_scales(sc, SA, SB, ra, rb, e, col0, 0, NB)
        issue_block(tv, wa, wb, full, it0, c)
        for kh in range((nkt - 1) // 2):
            # block k0 in flight in tmp; k0 + 1 and k0 + 2 exist
            k0 = 2 * kh
            block_scales(sc2, SA, SB, ra, rb, e, col0, k0 + 1, NB)
            issue_block(tv2, wa, wb, full, it0 + k0 + 1, c)
            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, tv, scope="warpgroup")
            promote(acc, tmp, sc, empty, it0 + k0, lane)
            block_scales(sc, SA, SB, ra, rb, e, col0, k0 + 2, NB)
            issue_block(tv, wa, wb, full, it0 + k0 + 2, c)
            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, tv2, scope="warpgroup")
            promote(acc, tmp2, sc2, empty, it0 + k0 + 1, lane)
        if nkt % 2 == 0:
            # an even count: block nkt - 2 in flight in tmp, nkt - 1 still to issue
            block_scales(sc2, SA, SB, ra, rb, e, col0, nkt - 1, NB)
            issue_block(tv2, wa, wb, full, it0 + nkt - 1, c)
            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, tv, scope="warpgroup")
            promote(acc, tmp, sc, empty, it0 + nkt - 2, lane)
            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, tv2, scope="warpgroup")
            promote(acc, tmp2, sc2, empty, it0 + nkt - 1, lane)
        else:
            # an odd count: the last block in flight in tmp
            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, tv, scope="warpgroup")
            promote(acc, tmp, sc, empty, it0 + nkt - 1, lane)

    @tiledsl.inline
    def body(X, W, C, offsets, SA, SB, M, N, K, E, KB, NB, CM):
        tid = T.cuda.thread_id()
        wg = tid // 128
        sa = T.alloc_shared((STG * BM * KT,), ELEM)
        sb = T.alloc_shared((STG * BNT * KT,), ELEM)
        if TMA_ST:
            stg = T.alloc_shared((CONS * 64 * EPI,), out)
            if EPI > 64 and kgrouped:
                epi = stg.view(CONS, EPI // 64, 1, 64, 64, layout=L_EPI3)     # parts of several (1, 64, 64) boxes
            else:
                epi = stg.view(CONS, EPI // 64, 64, 64, layout=L_EPI)
            epw = stg.view(dtype="uint32").view(CONS, 4, EPI // 16, 4, 8, 4, layout=L_EPIW)
            done = T.alloc_shared((CONS,), "uint64")    # the warpgroup's 128 threads wrote the staged part
            free = T.alloc_shared((CONS,), "uint64")    # thread 0's previous store has read the buffer
        full = T.alloc_shared((STG,), "uint64")
        empty = T.alloc_shared((STG,), "uint64")
        if TOKM:
            ta = sa.view(STG, BM // 64, KT, 64, layout=L_TA)
            wa = sa.view(STG, CONS, 1, KT // 16, 64, 16, layout=L_WA)
        else:
            ta = sa.view(STG, BM, KT, layout=L_TA)
            wa = sa.view(STG, CONS, 1, KSTEPS, 64, KT // KSTEPS, layout=L_WA)
        if trans_w:
            tb = sb.view(STG, BNT // 64, KT, 64, layout=L_TB)
            wb = sb.view(STG, 1, KT // 16, BNT, 16, layout=L_WB)
        else:
            tb = sb.view(STG, 1, BNT, KT, layout=L_TB)
            wb = sb.view(STG, 1, KSTEPS, BNT, KT // KSTEPS, layout=L_WB)
        if tid == 0:
            for s in T.unroll(STG):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], 4 * CONS)
            if TMA_ST:
                for q in T.unroll(CONS):
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], done[q:q + 1], 128)
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], free[q:q + 1], 1)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        offs = offsets
        if GMAX > 0:
            staged = T.alloc_shared((GMAX,), "int32")
            for i in range(tid, E, THREADS):
                staged[i] = offsets[i]
            offs = staged
        T.cuda.syncthreads()
        cap = 0
        if masked:
            cap = M // E                    # the rows of one group (x: (E, C, K) flattened)
        ntn = (N + BNT - 1) // BNT
        nk = (K + KT - 1) // KT            # a ragged last K tile is zero-filled by the TMA unit
        total = (M + BM - 1) // BM * ntn
        if kgrouped:
            total = E * ((M + BM - 1) // BM) * ntn
        elif grouped:
            total = group_count(offs, E, M, BM, ntn, cap)
        G = T.cuda.grid_dim(0)
        bid = T.cuda.block_id(0)
        mine = (total - bid + G - 1) // G
        if wg == 0:
            T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], PRODUCER_REGS)
            if T.cuda.warp_id() == 0:
                if elect_one() == 1:
                    e, base, start, end = cursor_start(offs, M, cap)
                    it0 = 0
                    for ti in range(mine):
                        e, base, start, end, row0, col0, kstart, wrow, nkt, crow, cend = tile_of(
                            offs, bid + ti * G, e, base, start, end, M, N, K, ntn, nk, cap)
                        for kk in range(nkt):
                            it = it0 + kk                   # the ring runs on across tiles and groups
                            s = it % STG
                            if it >= STG:
                                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"],
                                                  empty[s:s + 1], (it // STG + 1) % 2)
                            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], full[s:s + 1], TX)
                            if TOKM:
                                # tokens kstart + kk * KT .. of dY's columns row0 .. and of X's columns col0 ..
                                T.cuda.tile.apply(T.ptx[LOAD], ta[s], X, full[s:s + 1],
                                                  coords=(kstart + kk * KT, row0), coord_steps=((0, 64),))
                                T.cuda.tile.apply(T.ptx[LOAD], tb[s], W, full[s:s + 1],
                                                  coords=(kstart + kk * KT, col0), coord_steps=((0, 64),))
                            else:
                                T.cuda.tile.apply(T.ptx[LOAD], ta[s], X, full[s:s + 1],
                                                  coords=(row0, kstart + kk * KT))
                            if TOKM:
                                pass
                            elif trans_w:
                                # w[e]'s rows kk * KT .. of K, columns col0 .. in BN / 64 boxes
                                T.cuda.tile.apply(T.ptx[LOAD], tb[s], W, full[s:s + 1],
                                                  coords=(e * K + kk * KT, col0), coord_steps=((0, 64),))
                            else:
                                T.cuda.tile.apply(T.ptx[LOAD], tb[s, 0], W, full[s:s + 1],
                                                  coords=(wrow, kstart + kk * KT))
                        it0 = it0 + nkt
        else:
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            acc = T.alloc_local((NACC,), "float32")
            dv = acc.view(1, 1, 64, BNT, layout=L_ACC)
            if halves:
                tmp = T.alloc_local((NACC // 2,), "float32")    # one K block's products of one half, unscaled
                tv = tmp.view(1, 1, 64, HB, layout=L_ACC_H)
            elif scaled:
                tmp = T.alloc_local((NACC,), "float32")     # one K block's products, before its scales
                tv = tmp.view(1, 1, 64, BNT, layout=L_ACC)
                if pipelined:
                    tmp2 = T.alloc_local((NACC,), "float32")    # the next K block's, in flight meanwhile
                    tv2 = tmp2.view(1, 1, 64, BNT, layout=L_ACC)
                    sc = T.alloc_local((2 + BNT // SCALE_BLOCK,), "float32")
                    sc2 = T.alloc_local((2 + BNT // SCALE_BLOCK,), "float32")
            e, base, start, end = cursor_start(offs, M, cap)
            it0 = 0
            if TMA_ST:
                nst = 0                             # tiles stored through the staging buffer
            for ti in range(mine):
                e, base, start, end, row0, col0, kstart, wrow, nkt, crow, cend = tile_of(
                    offs, bid + ti * G, e, base, start, end, M, N, K, ntn, nk, cap)
                if scaled:
                    for i in T.unroll(NACC):
                        acc[i] = 0.0
                    # this thread's two rows (clamped: rows past M hold zero fill and are never stored) and the
                    # tile's scale column blocks
                    ra = T.min(row0 + 64 * c + 16 * w + lane // 4, M - 1)
                    rb = T.min(ra + 8, M - 1)
                if pipelined:
                    promote_pipelined(acc, tmp, tv, tmp2, tv2, sc, sc2, wa, wb, full, empty, SA, SB, ra, rb, e,
                                      col0, it0, nkt, NB, c, lane)
                else:
                    for kk in range(nkt):
                        it = it0 + kk
                        s = it % STG
                        if scaled:
                            # the K block's scales, loaded before the waits (their latency hides behind the ring's
                            # wait and the wgmma): this thread's two rows' and the tile's column blocks'
                            xa = SA[ra, kk]
                            xb = SA[rb, kk]
                            wsc = T.alloc_local((BNT // SCALE_BLOCK,), "float32")
                            for q in T.unroll(BNT // SCALE_BLOCK):
                                wsc[q] = SB[e, T.min(col0 // SCALE_BLOCK + q, NB - 1), kk]
                        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[s:s + 1],
                                          (it // STG) % 2)
                        if kgrouped:
                            rem = end - kstart - kk * KT        # the K tile's columns before the group's end
                            lead = start - kstart               # the previous group's tokens heading the first K tile
                            if kk > 0:
                                lead = 0
                            if rem < KT or lead > 0:
                                # the columns past rem are the next group's tokens and those below lead the previous
                                # group's: zero them in this consumer's rows of A (thread t takes column t % KT of rows
                                # 2j + t // KT). lead is 0 with TOKM (tokens are rows there: no alignment to keep)
                                t = tid % 128
                                if TOKM:
                                    # token rows rem .. of this consumer's box (thread t: column t % 64 of rows
                                    # 2j + t // 64)
                                    for j in T.unroll(KT // 2):
                                        if 2 * j + t // 64 >= rem:
                                            ta[s, c, 2 * j + t // 64, t % 64] = T.cast(0.0, ELEM)
                                elif t % KT >= rem or t % KT < lead:
                                    for j in T.unroll(64 * KT // 128):
                                        ta[s, 64 * c + (128 // KT) * j + t // KT, t % KT] = T.cast(0.0, ELEM)
                                T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
                                T.cuda.tile.apply(T.ptx["bar.sync"], 1 + c, 128)
                        if halves:
                            # each half's products alone (B's stage rows h * HB ..: its 128 columns of the tile),
                            # waited for, then promoted into its columns of acc (register h * NACC / 2 + i of acc is
                            # register i of the half's m64n128 fragment)
                            for h in T.unroll(2):
                                T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], tv, scope="warpgroup")
                                T.cuda.tile.apply(T.ptx[MMA_H], tv, wa[s, c], wb[s, :, :, h * HB:(h + 1) * HB],
                                                  scope="warpgroup", scale_d=False)
                                T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], tv, scope="warpgroup")
                                T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, tv, scope="warpgroup")
                                if h == 1 and lane == 0:
                                    T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[s:s + 1])
                                fa = xa * wsc[h]
                                fb = xb * wsc[h]
                                for i in T.unroll(NACC // 2):
                                    acc[h * (NACC // 2) + i] = T.fma(tmp[i], fb if (i // 2) % 2 else fa,
                                                                     acc[h * (NACC // 2) + i])
                        elif scaled:
                            # the K block's products alone, waited for, then promoted with its scales
                            T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], tv, scope="warpgroup")
                            T.cuda.tile.apply(T.ptx[MMA], tv, wa[s, c], wb[s], scope="warpgroup", scale_d=False)
                            T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], tv, scope="warpgroup")
                            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, tv, scope="warpgroup")
                            if lane == 0:
                                T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[s:s + 1])
                            for q in T.unroll(BNT // SCALE_BLOCK):
                                fa = xa * wsc[q]
                                fb = xb * wsc[q]
                                for i in T.unroll(q * (NACC // (BNT // SCALE_BLOCK)),
                                                  (q + 1) * (NACC // (BNT // SCALE_BLOCK))):
                                    acc[i] = acc[i] + tmp[i] * (fb if (i // 2) % 2 else fa)
                        else:
                            T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
                            if TOKM:
                                T.cuda.tile.apply(T.ptx[MMA], dv, wa[s, c], wb[s], scope="warpgroup", scale_d=kk > 0,
                                                  trans_a=1, trans_b=1)
                            elif trans_w:
                                T.cuda.tile.apply(T.ptx[MMA], dv, wa[s, c], wb[s], scope="warpgroup", scale_d=kk > 0,
                                                  trans_b=1)
                            else:
                                T.cuda.tile.apply(T.ptx[MMA], dv, wa[s, c], wb[s], scope="warpgroup", scale_d=kk > 0)
                            T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
                            # one group stays in flight; the previous K tile's is done: release its stage
                            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, dv, scope="warpgroup")
                            if kk > 0 and lane == 0:
                                prev = (it + STG - 1) % STG
                                T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[prev:prev + 1])
                if not scaled:
                    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
                    if lane == 0 and nkt > 0:
                        last = (it0 + nkt - 1) % STG
                        T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[last:last + 1])
                it0 = it0 + nkt
                if TMA_ST:
                    # (nested, not one condition: the K-grouped C is a tensor map, which the register stores below
                    # cannot take, so their branch must not exist there)
                    if kgrouped:
                        put_staged(CM, acc, epi, epw, free, done, c, w, tid, nst, e, row0, col0, nkt > 0)
                        nst = nst + 1
                    elif row0 + 64 * (c + 1) <= cend:
                        # this consumer's 64 rows lie in the tile's group: staged and stored by the TMA unit; a part
                        # that crosses the group's end keeps the masked register stores (the TMA store would write
                        # the next group's rows, which another tile owns)
                        put_staged(CM, acc, epi, epw, free, done, c, w, tid, nst, e, row0, col0, nkt > 0)
                        nst = nst + 1
                    else:
                        store(C, acc, row0, cend, col0, crow, nkt > 0, c, w, lane, N)
                else:
                    store(C, acc, row0, cend, col0, crow, nkt > 0, c, w, lane, N)
            if TMA_ST:
                if tid % 128 == 0:
                    T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)    # the last part stays until read

    # the entry points (M: x's rows; the grid: every SM, or the tiles' upper bound (T / BM + E) x column tiles)
    if kgrouped:
        @tiledsl.jit
        def grouped_gemm_k(A: X_ANN, B: BK_ANN, C: CK_ANN, offsets: OFF_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, E * ((M + BM - 1) // BM) * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP))
            body(A, B, C, offsets, None, None, M, N, K, E, 1, 1, C)  # noqa: F821
        kernel = grouped_gemm_k
    elif grouped and scaled:
        @tiledsl.jit
        def grouped_gemm_fp8_blockwise(X: X_ANN, W: W_ANN, C: C_ANN, offsets: OFF_ANN,
                                       SA: SA_ANN, SB: SB_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, ((M + BM - 1) // BM + E) * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP))
            body(X, W, C, offsets, SA, SB, M, N, K, E, KB, NB, None)  # noqa: F821
        kernel = grouped_gemm_fp8_blockwise
    elif grouped and TMA_ST:
        @tiledsl.jit
        def grouped_gemm_tma(X: X_ANN, W: W_ANN, C: C_ANN, offsets: OFF_ANN, CM: CM_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, ((M + BM - 1) // BM + E) * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP))
            body(X, W, C, offsets, None, None, M, N, K, E, 1, 1, CM)  # noqa: F821
        kernel = grouped_gemm_tma
    elif grouped:
        @tiledsl.jit
        def grouped_gemm(X: X_ANN, W: W_ANN, C: C_ANN, offsets: OFF_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, ((M + BM - 1) // BM + E) * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP))
            body(X, W, C, offsets, None, None, M, N, K, E, 1, 1, None)  # noqa: F821
        kernel = grouped_gemm
    elif TMA_ST:
        @tiledsl.jit
        def gemm_fp8_blockwise_tma(X: X_ANN, W: W_ANN, C: C_ANN, SA: SA_ANN, SB: SB_ANN, CM: CM_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, (M + BM - 1) // BM * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP))
            body(X, W, C, None, SA, SB, M, N, K, 1, KB, NB, CM)  # noqa: F821
        kernel = gemm_fp8_blockwise_tma
    else:
        @tiledsl.jit
        def gemm_fp8_blockwise(X: X_ANN, W: W_ANN, C: C_ANN, SA: SA_ANN, SB: SB_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, (M + BM - 1) // BM * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP))
            body(X, W, C, None, SA, SB, M, N, K, 1, KB, NB, None)  # noqa: F821
        kernel = gemm_fp8_blockwise
    kernel.tile = (BM, BNT, KT)
    kernel.walk = dict(SMS=SMS, BM=BM, BNT=BNT, GM=GM)
    return kernel
