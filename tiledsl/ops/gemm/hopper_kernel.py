"""The one builder of the Hopper GEMM kernel (hopper.py has the overview and the host API).

`build` makes every variant: a persistent grid (min(SMs, tiles) blocks walking tiles in grouped order) or one tile
per block (the same walk with a grid of one block per tile), plain or TMA-store epilogue, 2-CTA clusters with B
multicast, f16/bf16 or fp8 (e4m3/e5m2) operands, and the fused epilogue (fp8 scales, bias, activation:
epilogue.py). The kernel body is one `@tiledsl.inline` helper; the entry points differ only
in their parameters (A, B, C, then bias, then scale_a and scale_b where used), so a kernel without bias or scales
has exactly the parameters, and the code, it had before they existed.
"""
import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, wid_in_wg

from ...lib.producer import FULL_MASK, consumer_registers, elect_one  # noqa: F401 (FULL_MASK: hopper.py's)
from ..device import NUM_SMS   # the persistent grid's default width; hopper_matmul asks the device
from .epilogue import make_epilogue
from .staged_store import STMX4, make_staged_store, stm_layouts
from .schedule import MIN_SHARE, exchange, piece, split_k_share, stream_k_walk, tile_origin

BN, BK = 128, 64          # block tile columns and K tile (BK f16/bf16 = 128 bytes: one 128-byte swizzle row)
CONSUMERS = 2             # consumer warpgroups, 64 rows of the block tile each
STAGES = 4                # the depth of the shared ring
GROUP_M = 8               # tile rows walked together by the persistent grid (L2 reuse of B's columns)
PRODUCER_REGS, CONSUMER_REGS = 40, 232
SW128 = (3, 3, 3)         # 16-byte chunk c of 128-byte row r at chunk c ^ (r % 8), in 16-bit elements
SW128_FP8 = (3, 4, 3)     # the same bytes in 8-bit elements
ROW_BYTES = 128           # bytes of one K tile row, every element type (BK = 128 // element bytes)
SMEM_LIMIT = 232448       # bytes of shared memory one block may use on sm_90 (227 KB)
HALF = {"float16": "f16", "bfloat16": "bf16"}
FP8 = ("e4m3", "e5m2")


def k_tile(ab: str) -> int:
    """The K tile in elements: 128 bytes (64 f16/bf16, 128 fp8), one 128-byte swizzle row."""
    return ROW_BYTES if ab in FP8 else ROW_BYTES // 2


def layouts(bm: int, bn: int, bk: int, stages: int, consumers: int, ab: str) -> dict:
    """The shared ring as the TMA unit writes it and as wgmma reads it (the same bytes), and the accumulators.
    ab: float16/bfloat16 (16-bit elements, k16 steps) or e4m3/e5m2 (bytes, k32 steps)."""
    kk, sw, store = (32, SW128_FP8, "uint8") if ab in FP8 else (16, SW128, ab)
    ks = bk // kk
    L = {}
    # TMA: stage s holds the box row-major, swizzled (T.tma_layout of the staged box)
    L["tma_a"] = T.tma_layout((stages, bm, bk), store, 128)
    # wgmma: (stage, consumer, M repeat, K step, 64 rows, kk) over the same elements: rows of bk elements
    # (128 bytes), each K step kk elements (32 bytes) further along the row; the descriptor (128B swizzle, SBO =
    # 8 rows = 1024 bytes) is derived from this layout and proven against it by the wgmma pattern
    L["wg_a"] = TileLayout(S[(stages, consumers, 1, ks, 64, kk) : (bm * bk, 64 * bk, 1, kk, bk, 1)], swizzle=sw)
    L["wg_b"] = TileLayout(S[(stages, 1, ks, bn, kk) : (bn * bk, 1, kk, bk, 1)], swizzle=sw)
    # the m64nBN f32 accumulator fragment of one warpgroup, (1, 1, 64, BN): register i of thread (warp w, lane l)
    # holds row 16w + l//4 + 8((i//2)%2), column 8(i//4) + 2(l%4) + i%2
    L["acc"] = TileLayout(S[(1, 1, 4, 2, 8, bn // 8, 4, 2) :
                            (1, 1, 1 @ wid_in_wg, 2, 4 @ laneid, 4, 1 @ laneid, 1)])
    return L


def mn_major_layouts(elem: str, stages: int, rows: int, kt: int, reps: int, parts: int = 1) -> tuple:
    """An operand stored MN-major (A as (K, M), B as (K, N) row-major): its stage tile of `rows` M (or N) by kt K
    elements is loaded as rows / 64 TMA boxes of kt K rows by 64 M (N) elements (128 bytes: the swizzle's span),
    box after box. Returns (the TMA view's layout, (stage, parts, boxes / parts, kt, 64): `parts` the multicast
    slices; wgmma's layout, (stage, reps, 1, K step, 64 rows, 16) for A's consumers (reps = consumers) or
    (stage, 1, K step, rows, 16) for B (reps = 0)): the same bytes, which wgmma reads transposed (trans_a /
    trans_b) with the 128-byte swizzle."""
    boxes = rows // 64
    tma = T.tma_layout((stages, parts, boxes // parts, kt, 64), elem, 128)
    if reps:
        wg = TileLayout(S[(stages, reps, 1, kt // 16, 64, 16) : (rows * kt, kt * 64, 1, 16 * 64, 1, 64)],
                        swizzle=SW128)
    else:
        wg = TileLayout(S[(stages, 1, kt // 16, boxes, 64, 16) : (rows * kt, 1, 16 * 64, kt * 64, 1, 64)],
                        swizzle=SW128)
    return tma, wg


def _major(major, name: str) -> int:
    """1 for an MN-major operand, 0 for K-major (a LaunchError for anything else)."""
    if major not in ("k", "mn"):
        raise tiledsl.LaunchError(f"hopper gemm: {name}={major!r}: 'k' (K contiguous) or 'mn' (M / N contiguous)")
    return int(major == "mn")


def epilogue_columns(bm: int, bn: int, stages: int, consumers: int, ab: str, out: str, reserved: int = 0) -> int:
    """The columns of C that the TMA-store epilogue stages at a time: all BN where the staging buffer fits beside
    the ring (and `reserved` bytes of other shared memory), else BN halved until it does (BN = 256 with 4 stages
    stages 128 columns twice), at least 8."""
    ring = stages * (bm + bn) * ROW_BYTES + reserved
    size = {"float16": 2, "bfloat16": 2, "float32": 4}[out]
    cols = bn
    while ring + consumers * 64 * cols * size + 1024 > SMEM_LIMIT and cols % 16 == 0 and cols > 8:
        cols //= 2
    return cols


def split_staging(bm: int, bn: int, stages: int, consumers: int) -> int:
    """With split-K, each rank stages f32 accumulators (the other ranks' columns) in its own ring: register i of
    consumer c's thread t at float (i * consumers + c) * 128 + t, the first `split_staging` registers in A's stages,
    the rest in B's (every warp's store and a peer's remote load of one register touch 32 consecutive floats: no
    bank conflicts). Returns that count (a LaunchError where the ring cannot hold the accumulators)."""
    in_a = stages * bm * ROW_BYTES // 4 // (consumers * 128)
    in_b = stages * bn * ROW_BYTES // 4 // (consumers * 128)
    if in_a + in_b < bn // 2:
        raise tiledsl.LaunchError(f"hopper gemm: split_k stages the {64 * consumers} x {bn} f32 accumulators in the "
                                  f"ring, which {stages} stages of {bm} + {bn} rows cannot hold; use more stages")
    return min(in_a, bn // 2)


def build(ab: str, bt: str, out: str, stages: int, consumers: int, bn: int, tma_store: bool, persistent: bool,
          num_sms: int, group_m: int, multicast: bool, bias: str | None, activation: str | None,
          split_k: int = 1, stream_k: bool = False, defer_epilogue: bool = False, a_major: str = "k",
          b_major: str = "k"):
    """The kernel for A of type `ab` and B of type `bt` (both float16 or both bfloat16; or each of e4m3/e5m2,
    which adds the scale_a, scale_b parameters), C of `out`, bias of dtype `bias` (None: no bias parameter) and
    `activation` (None, relu, gelu, silu). Checked arguments (make_hopper_gemm checks them).

    The walk: a persistent grid (min(num_sms, tiles) blocks, block b taking tiles b, b + gridDim.x, ... in grouped
    order: group_m tile rows at a time, column by column within the group, so the blocks running together share
    A's rows and B's columns in L2), or one tile per block (not persistent: grid = tiles, the same walk once).

    The producer's ring index and phase run on across tiles (iteration it = (local tile) x nk + kj over the block's
    nk K tiles), so it fills the stages of the next tile while the consumers run this tile's epilogue. The consumers
    restart their accumulators with scale_d = 0 on each tile's first K step and release a stage by one arrive per
    warp (lane 0, after the warp's wgmma.wait_group: the warp's part of the group has read the stage; the empty
    barrier counts 4 x CONSUMERS arrivals, not 128 x CONSUMERS). The TMA-store epilogue stages EPI columns at a time
    (epilogue_columns) in one buffer per consumer: a 'done' mbarrier meets the warpgroup's writes before thread 0
    stores, a 'free' mbarrier tells the warpgroup that thread 0's previous store has read the buffer. A half C
    (f16/bf16) is packed to half2 words (cvt.rn.f16x2/bf16x2.f32, or the fused epilogue's four values at a time) and
    written by stmatrix.x4, one 16 x 16 block per instruction, into 64 x 64 boxes swizzled as the TMA unit swizzles
    128-byte rows (each matrix's 8 row addresses in 8 distinct 16-byte bank groups: no bank conflicts); the part
    goes out as EPI / 64 box stores. With defer_epilogue (not split-K) that half C is deferred: the words of the
    whole tile are packed when its K loop ends and part h is written and stored during the next tile's K step h,
    between a wgmma's commit and its wait, so the tensor cores keep running (the last tile's parts after the walk;
    the ptxas check is that no wgmma is serialised: no wgmma may sit under a run-time branch for this). f32 C keeps
    the scalar writes into a row-major buffer.

    multicast: 2-CTA clusters along x whose two blocks walk the same tile pairs (two tile rows of one tile column,
    rank r taking row 2p + r): each loads half of the common B tile and multicasts it to both, releases stages in
    both blocks (lane 0 of each consumer warp, remote arrives) and waits for both blocks' releases.

    split_k > 1 (one tile per block, no multicast: the callers check): clusters of split_k blocks along x compute
    one tile together, rank r running the usual ring over its share of the K tiles (ceil(ktiles / split_k) each; a
    rank left with none contributes zeros). Once its consumers are done with the ring (a named barrier over the
    consumer warpgroups: every wgmma has read it, and every TMA load into it has landed, since each was waited for),
    each rank writes the partial sums of the other ranks' columns into its own ring as f32 (split_staging) and every
    consumer thread arrives on each peer's 'partial' mbarrier (release at cluster scope). Then, a reduce-scatter:
    rank r waits for its barrier (acquire), adds the peers' partial sums of its BN / split_k columns, read from
    their shared memory (ld.shared::cluster, in rank order: deterministic, no atomics), and runs the epilogue on
    those columns alone. The closing cluster barrier keeps every block alive until its peers have read it.

    a_major / b_major: "k" (A given as (M, K), B as (N, K), row-major) or "mn" (A given as (K, M), B as (K, N),
    row-major: a transposed operand read as stored, no copy). An MN-major operand's stage is loaded as 64-column
    boxes (mn_major_layouts) and read by wgmma transposed (trans_a / trans_b); f16/bf16 only (wgmma reads fp8
    K-major only), and B MN-major needs BN / (2 with multicast) a multiple of 64. The ring's bytes, the barriers
    and everything after the K loop are the same."""
    IS_FP8 = ab in FP8
    AMN, BMN = _major(a_major, "a_major"), _major(b_major, "b_major")
    if IS_FP8 and (AMN or BMN):
        raise tiledsl.LaunchError(f"hopper gemm: a_major={a_major!r}, b_major={b_major!r} with {ab} x {bt}: fp8 "
                                  f"wgmma has no transpose, so fp8 operands are K-major only (A (M, K), B (N, K))")
    if IS_FP8:
        MMA = f"wgmma.mma_async.sync.aligned.m64n{bn}k32.f32.{ab}.{bt}"
        ELEM = "uint8"                              # fp8 bytes, as the TMA unit and wgmma's descriptors see them
    else:
        MMA = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{HALF[ab]}.{HALF[ab]}"
        ELEM = ab
    LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
    BM, BNT, STG, CONS = 64 * consumers, bn, stages, consumers
    KT = k_tile(ab)
    KSTEPS = KT // (32 if IS_FP8 else 16)
    THREADS = 128 * (1 + consumers)
    # the register budget at launch: 64K registers over the block, a multiple of 8 per thread; setmaxnreg then
    # moves them from the producer to the consumers within that budget
    # (setmaxnreg counts are multiples of 8; .inc may not go below the launch's count, nor the total above 64K)
    CAP = min((65536 // THREADS) // 8 * 8, 248)
    CREGS = consumer_registers(THREADS, CAP, consumers, PRODUCER_REGS, CONSUMER_REGS)
    TX = (BM + BNT) * ROW_BYTES                 # the bytes one stage's two boxes pay to its "full" barrier
    NACC = BNT // 2                             # f32 accumulators per consumer thread
    L = layouts(BM, BNT, KT, STG, CONS, ab)
    L_TA, L_WA, L_WB, L_ACC = L["tma_a"], L["wg_a"], L["wg_b"], L["acc"]
    MC = 2 if multicast else 1                  # tile rows a cluster walks together (multicast pairs)
    SK = int(split_k)                           # blocks splitting one tile's K loop
    CL = MC * SK                                # blocks per cluster (the callers refuse multicast with split_k)
    CLUSTER = (CL, 1, 1) if CL > 1 else None
    IN_A = split_staging(BM, BNT, STG, CONS) if SK > 1 else 0
    if BNT % (8 * CL):
        # multicast: each block loads BN / 2 rows of B; split-K: each rank finishes BN / split_k columns of C (whole
        # groups of 4 accumulator registers, the fused epilogue's unit)
        raise tiledsl.LaunchError(f"hopper gemm: BN={bn} does not split into {CL} slices of 8-row groups "
                                  f"({'multicast' if MC > 1 else 'split_k'})")
    L_TB = T.tma_layout((STG, MC, BNT // MC, KT), ELEM, 128)
    if AMN:
        L_TA, L_WA = mn_major_layouts(ELEM, STG, BM, KT, CONS)
    if BMN:
        if (BNT // MC) % 64:
            raise tiledsl.LaunchError(f"hopper gemm: b_major='mn' loads B in boxes of 64 columns: BN={bn}"
                                      f"{' / 2 (multicast)' if MC > 1 else ''} must be a multiple of 64")
        L_TB, L_WB = mn_major_layouts(ELEM, STG, BNT, KT, 0, MC)
    LOAD_MC = LOAD + ".multicast::cluster"
    ARRIVE_C, WAIT_C = "barrier.cluster.arrive.release", "barrier.cluster.wait.acquire"
    TMA_STORE = bool(tma_store)
    EPI = epilogue_columns(BM, BNT, STG, CONS, ab, out) if TMA_STORE else BNT
    if TMA_STORE:
        EPI = min(EPI, BNT // SK)               # with split-K, a rank stores its columns: whole parts
    EH = BNT // EPI                             # staged parts of a consumer's 64 x BN tile
    if TMA_STORE and EH % SK:
        raise tiledsl.LaunchError(f"hopper gemm: the TMA-store epilogue stages BN={bn} in {EH} parts of {EPI} "
                                  f"columns, which split_k={SK} ranks cannot share; use a power of two")
    SL = NACC // SK                             # with split-K, the accumulator registers each rank finishes
    # f16/bf16 C through the TMA store: the accumulators packed to half2 words and written by stmatrix into a
    # 128-byte swizzled staging buffer (boxes of 64 x 64 halves, 128-byte rows), which the TMA store un-swizzles;
    # f32 C (and a part that is not whole boxes) keeps the scalar stores into a row-major buffer
    STM = TMA_STORE and out in HALF and EPI % 64 == 0
    if STM:
        C_ANN = T.TensorMap(("M", "N"), out, box=(64, 64), swizzle=128)
    else:
        C_ANN = T.TensorMap(("M", "N"), out, box=(64, EPI)) if TMA_STORE else T.Tensor(("M", "N"), out)
    A_ANN = T.TensorMap(("M", "K"), ELEM, box=(BM, KT), swizzle=128)
    B_ANN = T.TensorMap(("N", "K"), ELEM, box=(BNT // MC, KT), swizzle=128)
    if AMN:
        A_ANN = T.TensorMap(("K", "M"), ELEM, box=(KT, 64), swizzle=128)      # A as (K, M): 64 columns a box
    if BMN:
        B_ANN = T.TensorMap(("K", "N"), ELEM, box=(KT, 64), swizzle=128)      # B as (K, N)
    BIAS_ANN = T.Tensor(("N",), bias or "float32")
    SCALE_ANN = T.Tensor((1,), "float32")
    L_EPI = T.tma_layout((CONS, 64, EPI), out)
    if STM:
        CVT = f"cvt.rn.{HALF[out]}x2.f32"
        NW = NACC // EH // 2                    # half2 words of one staged part per thread
        EPL = stm_layouts(CONS, EPI, EH, NW, SW128)
        L_EPI, L_EPIW, L_PK, L_PKH = EPL["epi"], EPL["epiw"], EPL["pk"], EPL["pkh"]
    SMS = max(int(num_sms) // CL, 1) * CL if persistent else 1 << 30
    GM = int(group_m)
    FUSED = bias is not None or activation is not None or IS_FP8
    if stream_k not in (False, True, 0, 1, 2):
        raise tiledsl.LaunchError(f"hopper gemm: stream_k={stream_k!r}: False, True (the partial wave's K steps "
                                  f"shared) or 2 (and the last whole wave's)")
    SKW = int(stream_k)
    if SKW and (not persistent or CL > 1 or bias is not None or activation is not None):
        # (fp8 scales are fine: the block finishing a split tile scales the summed f32 partials, once)
        raise tiledsl.LaunchError("hopper gemm: stream_k takes the persistent grid without multicast, split_k, "
                                  "bias or activation")
    scale_of, finish = make_epilogue(bias is not None, IS_FP8, activation) if FUSED else (None, None)

    # defer_epilogue, with a half C through stmatrix (not split-K): the consumers pack a finished tile to half2
    # words (NACC / 2 registers) and store its parts during the next tile's first K steps, while its wgmmas run.
    # Off by default: H200, 128 x 256 tiles, +0.3-0.7% at 4096^3 .. 4096 x 14336 x 4096 (the same at K = 8192),
    # for a third more epilogue code: compiling the kernel took 502-527 ms with it against 367-403 without
    DEFER = 1 if defer_epilogue and STM and SK == 1 else 0
    if DEFER and SKW:
        # the deferred tile's words (NACC / 2 registers) beside the stream-K walk's numbers spill (36 bytes at
        # 128 x 256 tiles): a choice between the two, not a silent slowdown
        raise tiledsl.LaunchError("hopper gemm: defer_epilogue does not combine with stream_k (together they spill "
                                  "registers); take one")
    # the consumers' release of a stage in both blocks of a multicast pair: they only read it (through wgmma), so
    # the default release at CTA scope orders enough; the cluster-scope release put MEMBAR.ALL.GPU before each
    # arrive (H200, 4096^3 f16: 419 TFLOP/s against 738)
    RELEASE_MC = "mbarrier.arrive.shared::cluster.b64"

    @tiledsl.inline
    def pack_part(acc, fin, words, h, bias_t, sc, col0, lane, N):
        """Part h of a consumer's C (EPI columns: NW half2 words a thread), finished (the fused epilogue's four
        values at a time, low half the even column) and packed into words."""
        if FUSED:
            for jj in T.unroll(NW // 2):
                finish(acc, fin, h * (NACC // EH) + 4 * jj, bias_t, sc, col0, lane, N)
                fp = fin.view(2, 2)
                T.cuda.tile.apply(T.ptx[CVT], words[2 * jj:2 * jj + 2], fp[:, 1:2], fp[:, 0:1])
        else:
            pairs = acc.view(NACC // 2, 2)
            T.cuda.tile.apply(T.ptx[CVT], words, pairs[h * NW:(h + 1) * NW, 1:2], pairs[h * NW:(h + 1) * NW, 0:1])

    claim, publish, _ = make_staged_store(STORE, STM)

    @tiledsl.inline
    def put_part(C, epi, epw, free, done, parts, c, w, tid, h, u, row0, col0):
        """The deferred epilogue's part h of a consumer's packed tile (its u-th use of the staging buffer): written
        by stmatrix, out through the TMA store."""
        claim(free, c, tid, u)
        T.cuda.tile.apply(T.ptx[STMX4], epw[c, w], parts[h], scope="warp")
        publish(C, epi, done, c, tid, u, row0, col0 + h * EPI)

    @tiledsl.inline
    def gemm_tiles(A, B, C, bias_t, scale_a, scale_b, W, F, M, N, K):
        """The kernel body: the producer warpgroup's TMA ring and the consumers' wgmma, epilogue and store (M, N,
        K: the entry's named sizes, which a helper does not see by name)."""
        tid = T.cuda.thread_id()
        wg = tid // 128
        sa = T.alloc_shared((STG * BM * KT,), ELEM)
        sb = T.alloc_shared((STG * BNT * KT,), ELEM)
        full = T.alloc_shared((STG,), "uint64")       # stage s holds its K tile (phase u: the u-th fill)
        empty = T.alloc_shared((STG,), "uint64")      # stage s was read by every consumer (phase u: u-th use)
        if AMN:
            ta = sa.view(STG, 1, BM // 64, KT, 64, layout=L_TA)
        else:
            ta = sa.view(STG, BM, KT, layout=L_TA)
        if BMN:
            tb = sb.view(STG, MC, BNT // MC // 64, KT, 64, layout=L_TB)
        else:
            tb = sb.view(STG, MC, BNT // MC, KT, layout=L_TB)
        wa = sa.view(STG, CONS, 1, KSTEPS, 64, KT // KSTEPS, layout=L_WA)
        wb = sb.view(STG, 1, KSTEPS, BNT, KT // KSTEPS, layout=L_WB)
        if STM:
            stg = T.alloc_shared((CONS * 64 * EPI,), out)
            epi = stg.view(CONS, EPI // 64, 64, 64, layout=L_EPI)
            epw = stg.view(dtype="uint32").view(CONS, 4, EPI // 16, 4, 8, 4, layout=L_EPIW)
        elif TMA_STORE:
            epi = T.alloc_shared((CONS, 64, EPI), out, layout=L_EPI)
        if TMA_STORE:
            done = T.alloc_shared((CONS,), "uint64")    # the warpgroup's 128 threads wrote the staged part
            free = T.alloc_shared((CONS,), "uint64")    # thread 0's previous store has read the buffer
        if SK > 1:
            partial = T.alloc_shared((1,), "uint64")    # every peer consumer thread staged its partial sums
            xa = sa.view(dtype="float32")               # the ring as f32 (split_staging): A's stages, then B's
            xb = sb.view(dtype="float32")
        if tid == 0:
            for s in T.unroll(STG):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], 4 * CONS * MC)
            if TMA_STORE:
                for q in T.unroll(CONS):
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], done[q:q + 1], 128)
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], free[q:q + 1], 1)
            if SK > 1:
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], partial, (SK - 1) * 128 * CONS)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        if MC > 1:
            # both blocks' barriers are initialised before either block's multicast or remote arrive reaches them
            T.cuda.tile.apply(T.ptx[ARRIVE_C])
            T.cuda.tile.apply(T.ptx[WAIT_C])
            rank = T.cuda.cluster_ctarank()
        elif SK > 1:
            # the peers first touch this block's barriers after their K loops: arrive now (releasing the inits),
            # wait there (the consumers before their remote arrives, the producer once its loads are issued), so
            # the cluster barrier's latency hides behind the K loop; this block's own threads meet here
            T.cuda.syncthreads()
            T.cuda.tile.apply(T.ptx[ARRIVE_C])
            rank = T.cuda.cluster_ctarank()
        else:
            if SKW:
                tkt = T.alloc_shared((1,), "int32")
                if tid == 0:
                    got_t = T.alloc_local((1,), "uint32")
                    ft = F.view(dtype="uint32")
                    T.cuda.tile.apply(T.ptx["atom.global.inc.u32"], got_t, ft[SMS:SMS + 1], T.cuda.grid_dim(0) - 1)
                    tkt[0] = T.cast(got_t[0], "int32")
            T.cuda.syncthreads()
            rank = 0
        ntm = (M + MC * BM - 1) // (MC * BM)    # rows of tile pairs with multicast
        ntn = (N + BNT - 1) // BNT
        ktiles = (K + KT - 1) // KT         # a ragged last K tile is zero-filled by the TMA unit
        if SK > 1:
            # this rank's K tiles: k0 .. k0 + nk - 1
            k0, nk = split_k_share(rank, ktiles, SK)
            mrank = 0
        else:
            k0 = 0
            nk = ktiles
            mrank = rank                    # the tile row of the pair (multicast), else 0
        G = T.cuda.grid_dim(0) // CL
        hw = T.cuda.block_id(0) // CL
        if SKW:
            # stream-K shares go by ticket, taken in dispatch order (schedule.py: a block waits only for
            # blocks of lower tickets, which have started); F[G] counts the tickets and wraps to 0 at the launch's
            # last block, ready for the next launch. The whole waves' tiles, which wait for nothing, go by the
            # hardware index (a special register, rematerialised where the ticket would hold a register)
            bid = tkt[0]
        else:
            bid = hw
        # the block's pieces (schedule.py): its tiles of the whole waves, then with stream-K its share of
        # the partial wave's K steps
        mine, ndp, tdp, skt, units, lo, hi, l_t = stream_k_walk(bid, G, ntm * ntn, nk, SKW, MIN_SHARE)
        if wg == 0:
            # the producer: few registers, one elected thread issues every copy
            T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], PRODUCER_REGS)
            if T.cuda.warp_id() == 0:
                if elect_one() == 1:
                    it0 = 0
                    for ti in range(mine):
                        tile, klo, khi = piece(ti, hw, G, nk, ndp, lo, hi, SKW)
                        row0, col0 = tile_origin(tile, ntm, ntn, GM, MC, mrank, BM, BNT)
                        for kk in range(khi - klo):
                            kt = k0 + klo + kk
                            it = it0 + kk                   # the ring runs on across tiles
                            s = it % STG
                            if it >= STG:
                                # the (it // STG)-th refill of stage s waits for the consumers' previous use of
                                # it (with multicast: the consumers of both blocks, which arrive at cluster scope)
                                if MC > 1:
                                    T.cuda.tile.apply(
                                        T.ptx["mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"],
                                        empty[s:s + 1], (it // STG + 1) % 2)
                                else:
                                    T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"],
                                                      empty[s:s + 1], (it // STG + 1) % 2)
                            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], full[s:s + 1], TX)
                            if AMN:
                                # A's K rows kt * KT .., its columns row0 .. in boxes of 64
                                T.cuda.tile.apply(T.ptx[LOAD], ta[s, 0], A, full[s:s + 1], coords=(kt * KT, row0),
                                                  coord_steps=((0, 64),))
                            else:
                                T.cuda.tile.apply(T.ptx[LOAD], ta[s], A, full[s:s + 1], coords=(row0, kt * KT))
                            if BMN and MC > 1:
                                T.cuda.tile.apply(T.ptx[LOAD_MC], tb[s, rank], B, full[s:s + 1],
                                                  coords=(kt * KT, col0 + rank * (BNT // MC)), coord_steps=((0, 64),),
                                                  cta_mask=(1 << MC) - 1)
                            elif BMN:
                                T.cuda.tile.apply(T.ptx[LOAD], tb[s, 0], B, full[s:s + 1], coords=(kt * KT, col0),
                                                  coord_steps=((0, 64),))
                            elif MC > 1:
                                # this block's slice of B lands in both blocks; the peer's slice pays this barrier
                                T.cuda.tile.apply(T.ptx[LOAD_MC], tb[s, rank], B, full[s:s + 1],
                                                  coords=(col0 + rank * (BNT // MC), kt * KT), cta_mask=(1 << MC) - 1)
                            else:
                                T.cuda.tile.apply(T.ptx[LOAD], tb[s, 0], B, full[s:s + 1], coords=(col0, kt * KT))
                        it0 = it0 + khi - klo
            if SK > 1:
                T.cuda.tile.apply(T.ptx[WAIT_C])    # the start's cluster arrive (every thread alternates)
        else:
            # a consumer: 64 rows of each tile, accumulated over every K tile
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            acc = T.alloc_local((NACC,), "float32")
            dv = acc.view(1, 1, 64, BNT, layout=L_ACC)
            fin = acc                                   # (unused without a fused epilogue)
            sc = 1.0
            if FUSED:
                fin = T.alloc_local((4,), "float32")    # four finished values (scales, bias, activation)
                sc = scale_of(scale_a, scale_b)
            if SK > 1:
                got = T.alloc_local((1,), "float32")    # one partial sum read from a peer
            if SKW:
                flag = T.alloc_local((1,), "int32")     # a peer's 'partial sums published' flag, taken
                # the workspace flat: one base a thread and compile-time offsets (a per-register index would be
                # hoisted out of the walk's loop, a 64-bit register each)
                wf = W.view(SMS * BM * BNT)
            nst = 0                                     # tiles whose epilogue has run (staging buffer uses)
            if DEFER:
                held = T.alloc_local((NACC // 2, 1), "uint32")     # the previous tile's C, packed to half2 words
                parts = held.view(EH, EPI // 16, 4, 8, 4, layout=L_PKH)
                prow0 = 0
                pcol0 = 0
                pend = 0                                # held has a tile still to store
            it0 = 0
            for ti in range(mine):
                tile, klo, khi = piece(ti, hw, G, nk, ndp, lo, hi, SKW)
                row0, col0 = tile_origin(tile, ntm, ntn, GM, MC, mrank, BM, BNT)
                for kk in range(khi - klo):
                    it = it0 + kk
                    s = it % STG
                    T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[s:s + 1],
                                      (it // STG) % 2)
                    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
                    # the piece's first K step overwrites the accumulators (scale_d = 0): no zeroing between tiles
                    T.cuda.tile.apply(T.ptx[MMA], dv, wa[s, c], wb[s], scope="warpgroup", scale_d=kk > 0,
                                      trans_a=AMN, trans_b=BMN)
                    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
                    if DEFER:
                        # the previous tile's part h goes out while this piece's K step h runs on the tensor cores
                        # (the remaining parts at the last step of a short loop)
                        if pend == 1:
                            for h in T.unroll(EH):
                                if kk == T.min(h, khi - klo - 1):
                                    put_part(C, epi, epw, free, done, parts, c, w, tid, h, (nst - 1) * EH + h, prow0,
                                             pcol0)
                    # keep this K tile's group in flight (the next one accumulates into the same registers, which
                    # the ISA orders); once the previous K tile's group is done its stage is read: release it
                    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, dv, scope="warpgroup")
                    if kk > 0 and lane == 0:
                        prev = (it + STG - 1) % STG
                        if MC > 1:
                            for r in T.unroll(MC):
                                T.cuda.tile.apply(T.ptx[RELEASE_MC], empty[prev:prev + 1], rank=r)
                        else:
                            T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[prev:prev + 1])
                T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
                # the tile's last stage is read: the producer may refill it while this epilogue runs (a split-K
                # rank may have had no K tile, hence no stage)
                if DEFER:
                    pend = 0
                if lane == 0 and (SK == 1 or nk > 0):
                    last = (it0 + khi - klo - 1) % STG
                    if MC > 1:
                        for r in T.unroll(MC):
                            T.cuda.tile.apply(T.ptx[RELEASE_MC], empty[last:last + 1], rank=r)
                    else:
                        T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[last:last + 1])
                it0 = it0 + khi - klo
                if SKW:
                    pub, fixup, store, jlo, jhi = exchange(tile, klo, khi, nk, ntm * ntn, G, MIN_SHARE, tkt[0], SKW)
                    if pub == 1:
                        # the head (or a middle) of a split tile: a later block runs its last K step and finishes
                        # it. This block's partial sums go to its workspace row, register i of consumer thread t at
                        # (i * CONS + c) * 128 + t (each warp's stores contiguous), then published by one thread
                        # once every consumer thread has written (release at GPU scope). (This is the block's first
                        # stream-K piece, ti == ndp: the row index written with ti keeps the address in the loop,
                        # one base and compile-time offsets)
                        wrow = (tkt[0] + ti - ndp) * (BM * BNT) + c * 128 + tid % 128
                        # a warp whose 16 rows all lie past M (a decode-sized M in a 64-row tile) holds only the
                        # zeros of TMA's out-of-bounds fill: it neither writes nor (below) reads its partial sums
                        if row0 + 64 * c + 16 * w < M:
                            for i in T.unroll(NACC):
                                wf[wrow + i * (CONS * 128)] = acc[i]
                        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128 * CONS)
                        if tid == 128:
                            T.cuda.tile.apply(T.ptx["red.release.gpu.global.add.s32"], F[tkt[0]:tkt[0] + 1], 1)
                    # (a second `if`, not an `else`: the interpreter would run an else part holding a wait as a fiber
                    # of its own, whose spin below never hands over to the publishing blocks)
                    if fixup == 1:
                        # the tail of a split tile (the block's last piece): add the partial sums of the blocks
                        # that ran the rest of it (first_contributor .. bid - 1: lower tickets, already running),
                        # each taken when its flag is up (the exchange leaves the flag down for the next launch)
                        for j in range(jlo, jhi):
                            if tid == 128:
                                flag[0] = 0
                                while flag[0] == 0:
                                    T.cuda.tile.apply(T.ptx["atom.acquire.gpu.global.exch.b32"], flag, F[j:j + 1], 0)
                            # every consumer thread reads after thread 128's acquire
                            T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128 * CONS)
                            wrow = j * (BM * BNT) + c * 128 + tid % 128
                            if row0 + 64 * c + 16 * w < M:
                                for i in T.unroll(NACC):
                                    acc[i] = acc[i] + wf[wrow + i * (CONS * 128)]
                if SK > 1:
                    # reduce-scatter: rank r finishes registers r * SL .. (r + 1) * SL - 1 (columns r * BN / SK ..
                    # of the tile), adding the other ranks' partial sums of them, read from their rings
                    if nk == 0:
                        for i in T.unroll(NACC):
                            acc[i] = 0.0
                    # every consumer warpgroup of this block is done with the ring before any overwrites it
                    T.cuda.tile.apply(T.ptx["bar.sync"], 1, 128 * CONS)
                    # the peers' 'partial' barriers are initialised (the start's cluster arrive)
                    T.cuda.tile.apply(T.ptx[WAIT_C])
                    for me in T.unroll(SK):
                        if rank == me:
                            for i in T.unroll(NACC):
                                if i // SL != me:
                                    if i < IN_A:
                                        xa[(i * CONS + c) * 128 + tid % 128] = acc[i]
                                    else:
                                        xb[((i - IN_A) * CONS + c) * 128 + tid % 128] = acc[i]
                            # releases this thread's stores at cluster scope: the peers may read them
                            for p in T.unroll(SK):
                                if p != me:
                                    T.cuda.tile.apply(
                                        T.ptx["mbarrier.arrive.release.cluster.shared::cluster.b64"], partial,
                                        rank=p)
                    T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"], partial,
                                      0)
                    for me in T.unroll(SK):
                        if rank == me:
                            for p in T.unroll(SK):
                                if p != me:
                                    for i in T.unroll(me * SL, (me + 1) * SL):
                                        if i < IN_A:
                                            q = (i * CONS + c) * 128 + tid % 128
                                            T.cuda.tile.apply(T.ptx["ld.shared::cluster.f32"], got, xa[q:q + 1],
                                                              rank=p)
                                        else:
                                            q = ((i - IN_A) * CONS + c) * 128 + tid % 128
                                            T.cuda.tile.apply(T.ptx["ld.shared::cluster.f32"], got, xb[q:q + 1],
                                                              rank=p)
                                        acc[i] = acc[i] + got[0]
                # rank r of a split-K cluster finishes its columns (registers r * SL .. (r + 1) * SL - 1)
                for me in T.unroll(SK):
                    if (SK == 1 or rank == me) and (SKW == 0 or store == 1):
                        # epilogue: register i holds row 16w + l//4 + 8((i//2)%2), column 8(i//4) + 2(l%4) + i%2
                        if TMA_STORE:
                            for h in T.unroll(me * (EH // SK), (me + 1) * (EH // SK)):
                                u = nst * (EH // SK) + h - me * (EH // SK)   # the staging buffer's use count
                                if DEFER:
                                    # packed now (the next tile's first wgmma overwrites the accumulators), stored
                                    # during the next tile's K loop (above)
                                    pack_part(acc, fin, held[h * NW:(h + 1) * NW], h, bias_t, sc, col0, lane, N)
                                else:
                                    claim(free, c, tid, u)
                                    if STM:
                                        pk = T.alloc_local((NW, 1), "uint32")
                                        pack_part(acc, fin, pk, h, bias_t, sc, col0, lane, N)
                                        # one stmatrix.x4 per 16 x 16 block: each 8-row matrix's rows in 8 distinct
                                        # bank groups
                                        T.cuda.tile.apply(T.ptx[STMX4], epw[c, w], pk.view(EPI // 16, 4, 8, 4, layout=L_PK),
                                                          scope="warp")
                                    elif FUSED:
                                        # scales, bias and activation on four accumulators at a time, into fin
                                        for jj in T.unroll(NACC // EH // 4):
                                            finish(acc, fin, h * (NACC // EH) + 4 * jj, bias_t, sc, col0, lane, N)
                                            for q in T.unroll(4):
                                                epi[c, 16 * w + lane // 4 + 8 * ((q // 2) % 2),
                                                    8 * jj + 2 * (lane % 4) + q % 2] = T.cast(fin[q], out)
                                    else:
                                        for j in T.unroll(NACC // EH):
                                            i = h * (NACC // EH) + j
                                            epi[c, 16 * w + lane // 4 + 8 * ((i // 2) % 2),
                                                8 * (j // 4) + 2 * (lane % 4) + i % 2] = T.cast(acc[i], out)
                                    publish(C, epi, done, c, tid, u, row0, col0 + h * EPI)
                            if DEFER:
                                prow0 = row0
                                pcol0 = col0
                                pend = 1
                            nst = nst + 1
                        else:
                            if FUSED:
                                for jj in T.unroll(me * (SL // 4), (me + 1) * (SL // 4)):
                                    finish(acc, fin, 4 * jj, bias_t, sc, col0, lane, N)
                                    for q in T.unroll(4):
                                        row = row0 + 64 * c + 16 * w + lane // 4 + 8 * ((q // 2) % 2)
                                        col = col0 + 8 * jj + 2 * (lane % 4) + q % 2
                                        if row < M and col < N:  # the ragged edge of C
                                            C[row, col] = T.cast(fin[q], out)
                            else:
                                for i in T.unroll(me * SL, (me + 1) * SL):
                                    row = row0 + 64 * c + 16 * w + lane // 4 + 8 * ((i // 2) % 2)
                                    col = col0 + 8 * (i // 4) + 2 * (lane % 4) + i % 2
                                    if row < M and col < N:  # the ragged edge of C
                                        C[row, col] = T.cast(acc[i], out)
            if DEFER:
                # the last tile
                if pend == 1:
                    for h in T.unroll(EH):
                        put_part(C, epi, epw, free, done, parts, c, w, tid, h, (nst - 1) * EH + h, prow0, pcol0)
            if TMA_STORE:
                if tid % 128 == 0:
                    T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)    # the last part stays until read
        if CL > 1:
            # no block leaves while its peer may still multicast into it or arrive on its barriers
            T.cuda.tile.apply(T.ptx[ARRIVE_C])
            T.cuda.tile.apply(T.ptx[WAIT_C])

    # the entry points: the same body, the parameters this variant uses (M, N, K bound from A and B)
    if IS_FP8 and bias is not None:
        @tiledsl.jit
        def hopper_gemm_fp8_bias(A: A_ANN, B: B_ANN, C: C_ANN, bias: BIAS_ANN, scale_a: SCALE_ANN,
                                 scale_b: SCALE_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, CL * ((M + MC * BM - 1) // (MC * BM)) * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP, cluster=CLUSTER))
            gemm_tiles(A, B, C, bias, scale_a, scale_b, None, None, M, N, K)  # noqa: F821
        kernel = hopper_gemm_fp8_bias
    elif IS_FP8 and SKW:
        @tiledsl.jit
        def hopper_gemm_fp8_stream_k(A: A_ANN, B: B_ANN, C: C_ANN, scale_a: SCALE_ANN, scale_b: SCALE_ANN,
                                     W: T.Tensor((SMS, BM * BNT), "float32"), F: T.Tensor((SMS + 1,), "int32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=SMS, block=THREADS, max_registers=CAP, cluster=CLUSTER))
            gemm_tiles(A, B, C, None, scale_a, scale_b, W, F, M, N, K)  # noqa: F821
        kernel = hopper_gemm_fp8_stream_k
        kernel.slots = (SMS, BM * BNT)
        kernel.flags = SMS + 1
    elif IS_FP8:
        @tiledsl.jit
        def hopper_gemm_fp8(A: A_ANN, B: B_ANN, C: C_ANN, scale_a: SCALE_ANN, scale_b: SCALE_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, CL * ((M + MC * BM - 1) // (MC * BM)) * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP, cluster=CLUSTER))
            gemm_tiles(A, B, C, None, scale_a, scale_b, None, None, M, N, K)  # noqa: F821
        kernel = hopper_gemm_fp8
    elif bias is not None:
        @tiledsl.jit
        def hopper_gemm_bias(A: A_ANN, B: B_ANN, C: C_ANN, bias: BIAS_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, CL * ((M + MC * BM - 1) // (MC * BM)) * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP, cluster=CLUSTER))
            gemm_tiles(A, B, C, bias, None, None, None, None, M, N, K)  # noqa: F821
        kernel = hopper_gemm_bias
    elif SKW:
        @tiledsl.jit
        def hopper_gemm_stream_k(A: A_ANN, B: B_ANN, C: C_ANN, W: T.Tensor((SMS, BM * BNT), "float32"),
                                 F: T.Tensor((SMS + 1,), "int32")):
            # every SM's block, even with fewer tiles than SMs: their K steps are shared by all (the blocks past
            # the shares' count, stream_k_walk's units, find nothing to do and leave)
            T.device_entry(launch=T.cuda.LaunchConfig(grid=SMS, block=THREADS, max_registers=CAP, cluster=CLUSTER))
            gemm_tiles(A, B, C, None, None, None, W, F, M, N, K)  # noqa: F821
        kernel = hopper_gemm_stream_k
        kernel.slots = (SMS, BM * BNT)
        kernel.flags = SMS + 1                  # a flag a block, then the ticket counter
    else:
        @tiledsl.jit
        def hopper_gemm_tiles(A: A_ANN, B: B_ANN, C: C_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(
                grid=T.min(SMS, CL * ((M + MC * BM - 1) // (MC * BM)) * ((N + BNT - 1) // BNT)),  # noqa: F821
                block=THREADS, max_registers=CAP, cluster=CLUSTER))
            gemm_tiles(A, B, C, None, None, None, None, None, M, N, K)  # noqa: F821
        kernel = hopper_gemm_tiles
    kernel.tile = (BM, BNT, KT)
    kernel.majors = (a_major, b_major)
    # what the schedule model (schedule_model.py) needs to replay this kernel's walk
    kernel.walk = dict(SMS=SMS, CL=CL, MC=MC, SK=SK, BM=BM, BNT=BNT, KT=KT, GM=GM, SKW=SKW, STG=STG,
                       persistent=bool(persistent))
    return kernel
