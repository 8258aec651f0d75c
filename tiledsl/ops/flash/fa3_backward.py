"""FlashAttention backward, FA3 style, on Hopper (sm_90a), written only in the kernel language: TMA + wgmma + an
mbarrier ring + warp specialisation (the idioms of tiledsl/ops/flash/fa3.py's forward).

make_attention_backward_hopper(...) builds the main kernel of backward.py's attention_backward contract on this
path (attention_backward(..., path="fa3") runs it after that module's preprocessing, Delta = rowsum(dO * O) and
LSE * log2 e, then make_cast_dq, this module's float32 -> q-dtype cast of the tiled dQ accumulator). D = 128
(two consumer warpgroups split dQ's columns in two 64-column halves, one per 128-byte swizzle box), D = 64 (each
consumer's dQ a partial sum over its own 64 keys, both added into the tile's one 64-column block) or D = 256 (the
consumers split the columns of dK, dV and dQ instead of the keys: COLUMN_SPLIT_D), f16 and bf16, causal or not, any
N, grouped-query attention.

One block owns BK = 128 key rows of one (batch, head), with 3 warpgroups:

  * warpgroup 0 is the producer (`setmaxnreg.dec`; one `elect.sync` thread issues every copy): K and V of the
    block once, then the query tiles (BM = 64 rows of Q and dO, by 3-d tensor maps (B * H, N, D) whose boxes never
    cross into the next head: rows past N arrive as zeros) with their LSE * log2 e and Delta slices (bulk copies
    of the per-head zero-padded rows) through a STAGES-deep ring of "full" and "empty" mbarriers;
  * warpgroups 1 and 2 are consumers (`setmaxnreg.inc`), 64 key rows each. Every product has their key rows as
    its M dimension, so P and dS never leave registers on their way to dV and dK:
        S^T  = K_c Q^T               wgmma ss, A = K rows, B = Q tile, both K-major over D
        dP^T = V_c dO^T              (issued right after S^T: it runs while P^T is computed)
        P^T  = ex2(S^T * scale * log2 e - LSE * log2 e)   masked scores are -inf: P = 0
        dV  += P^T dO                wgmma rs: P^T's f16x2 words are A's fragment, B = dO MN-major (trans_b)
        dS^T = P^T (dP^T - Delta) * scale   (scale folded here once for dK and dQ)
        dK  += dS^T Q                wgmma rs, B = Q MN-major (trans_b)
        dQ[:, 64c..64c+63] = dS K[:, 64c..]   dS^T of both consumers stored (128-byte swizzle) to shared memory,
                                     a named barrier between the two consumer warpgroups, then wgmma ss with A read
                                     transposed from it (trans_a) and B = K MN-major (trans_b): each consumer owns
                                     half of dQ's columns over all 128 keys, stages it in shared memory and one
                                     thread adds the 16 KB into the float32 dQ accumulator with one bulk reduction
                                     (cp.reduce.async.bulk ... .add.f32: the TMA unit adds it in L2). D = 64:
                                     dQ = dS[:, 64c..] K[64c.., :] after the consumer's own barrier (it reads only
                                     the dS^T rows its warpgroup wrote), both consumers' reductions to one block
    dS^T has two shared buffers (tile j's and tile j + 1's): a consumer writing tile j + 2's has passed tile
    j + 1's barrier, so the other has finished reading tile j's. Each consumer has one dQ staging buffer, written
    in fragment order (register pair (2p, 2p + 1) of warpgroup thread t at floats 2 (128 p + t): a warp's
    st.shared.v2 covers 256 contiguous bytes, no bank conflict); the thread that issued the reduction waits until
    the TMA unit has read it (cp.async.bulk.wait_group.read) before the consumers' named barrier of the next tile,
    after which the buffer is written again. The accumulator therefore holds dQ tiled: the 16 KB block of (b, h,
    query tile, consumer) is that fragment order (make_cast_dq reads it and writes dq (B, H, N, D));
  * ragged query rows are zeros (Q, dO, Delta and LSE * log2 e are zero there), so their P^T * dO and dS^T are 0;
    ragged key rows (zeros too) are masked to -inf all the same (their P would be ex2(-LSE), which need not be
    finite) and are not stored; causal: query tiles wholly above the diagonal are never visited, the tiles
    crossing it masked;
  * the epilogue stores dK, dV in q's dtype (without GQA) or adds their float32 values into (B * H_kv * N_kv, D)
    accumulators (GQA: every query head's block adds its share). With tma_kv (not GQA, not split) they leave
    through shared memory instead: once both consumers have met after their last dQ (which read every key row of
    K), each writes dK by stmatrix into its own 64 rows of K's buffer and dV into its own rows of V's (only it
    read those), and one thread a consumer stores the four 64 x 64 boxes through the TMA unit, which drops the
    key rows past N_kv (tiledsl/lib/staging.py).

Tail split (tail_split=True; off by default: TAIL_SPLIT, measured slower on the H200): 2048 items (a key block
of a head) on 132 SMs are 15.52 waves, the last half idle. The split grid runs the items of the whole waves one a
block as above, then spreads the remaining items' query tiles evenly over `sms` more blocks (tail_plan), each
walking a contiguous run of (item, query tile) that may start and end inside items: a piece per item, K and V
loaded for each (a "K and V free" mbarrier tells the producer the consumers are done with the last piece's). A
split item's pieces (not GQA, whose pieces add into the float32 accumulators anyway) write float32 partial dK and
dV to workspace slots and count themselves on the item's counter; the last adds all slots in piece order (no block
ever waits for another: the grid is not persistent). The plain kernel's code is unchanged without it.

On the interpreter the producer and the consumers run as fibers that hand over at their mbarrier waits and at the
named barrier.
"""
import heapq
import math

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, wid_in_wg

from ...lib.producer import consumer_registers, elect_one, warpgroup_index
from ...lib.staging import packed_words, staging_layouts
from ..device import NUM_SMS   # NUM_SMS: the tail split's blocks (attention_backward asks the device)
from .common import cast_row8

LOG2E = 1.4426950408889634
NEG = -math.inf
SW128 = (3, 3, 3)           # 16-byte chunk c of 128-byte row r at chunk c ^ (r % 8), in 16-bit elements
PRODUCER_REGS, CONSUMER_REGS = 24, 240
SMEM_LIMIT = 232448         # bytes of shared memory one block may use on sm_90 (227 KB)
CONS = 2                    # consumer warpgroups: 64 key rows each
BK = 64 * CONS              # key rows a block
BM = 64                     # query rows a tile: one 128-byte swizzle row of dS^T
# the query ring's depth per head dim: D = 64 measured 4 ahead of 2 by 4-7% (bf16 backward, H100, session 40:
# 4 x 32 x 4096 388 / 405, causal 378 / 394; 1 x 32 x 16384 415 / 444, causal 426 / 450 TFLOP/s); D = 128's
# third stage does not fit beside the dQ staging
STAGES = {64: 4, 128: 2, 256: 2}
SUPPORTED_D = (64, 128, 256)
# D = 256: a consumer's dK and dV over all 256 columns would be 256 registers a thread, so the consumers split the
# columns instead of the keys. A block owns 64 key rows; both consumers compute the same S^T and dP^T over them (the
# 64 x 64 scores cost a quarter of a tile's products: 7 units of tensor work for 5 useful), and consumer c
# accumulates dK and dV over columns 128c .. 128c + 127 and computes dQ's columns 128c .. 128c + 127 (two 64-column
# blocks, in the registers S^T and dP^T held). Shared memory has no room for dQ staging buffers beside two 64 KB
# query stages, so consumer c stages its two dQ blocks in the stage's own Q and dO columns 128c .. (only its dV and
# dK read those after the scores, and both consumers' scores are done at the dS^T barrier) and releases the stage
# one tile later, once the TMA unit has read them
COLUMN_SPLIT_D = (256,)
# the column split's dq_overlap default: off. On, the second dQ block is issued once dV and dK are done, while the
# first still runs (built in session 44, correct on the interpreter; not yet timed or run on a GPU)
DQ_OVERLAP = False
# the column split's score_split default: off. On, consumer c computes S^T and dP^T for the tile's queries
# 32c .. 32c + 31 only (m64n32: 5 units of tensor work a tile instead of 7) and both read P^T and dS^T from shared
# memory for dV and dK (built in session 45, correct on the interpreter; not yet timed on a GPU)
SCORE_SPLIT = False
# D = 64's dq_combine default: off. On, consumer 1 adds consumer 0's partial dQ to its own in shared memory and one
# bulk reduction a tile adds the sum (16 KB of float32 into L2 a tile, not 32: D = 64 and 256 add twice D = 128's
# per unit of work); built in session 45, not yet run on a GPU
DQ_COMBINE = False
DQ_BAR = 1                  # the named barrier of the consumer warpgroups (0 is syncthreads')
STAGED_BAR = 2              # + c: consumer c's warpgroup has staged its dQ block (named barriers 2 and 3)
# dq_combine (D = 64): consumer 0's partial dQ staged for consumer 1 / read by it (named barriers 4 and 5)
COMBINE_FULL_BAR, COMBINE_EMPTY_BAR = 4, 5

_KERNELS = {}


def block_keys(D: int) -> int:
    """Key rows a block owns: 64 a consumer, or 64 shared by both where they split the columns (COLUMN_SPLIT_D)."""
    return 64 if D in COLUMN_SPLIT_D else BK


def layouts(D: int, stages: int, dtype: str) -> dict:
    """Shared memory as the TMA unit writes it and as wgmma reads it, and the register fragments. K and V are
    (D/64 boxes, BK rows, 64 columns), Q and dO (stage, D/64 boxes, BM rows, 64 columns), dS^T (buffer, BK key
    rows, BM queries); BK is block_keys(D)."""
    dh = D // 64
    split = D in COLUMN_SPLIT_D
    BK = block_keys(D)
    KROWS = 0 if split else 64            # consumer c's first key row (both read the same rows where split)
    DA = D // CONS if split else D        # dK / dV columns a consumer accumulates
    L = {}
    L["tma_kv"] = T.tma_layout((dh, 1, BK, 64), dtype, 128)
    L["tma_qo"] = T.tma_layout((stages, dh, 1, BM, 64), dtype, 128)
    # K and V as A (ss, K-major): (box, consumer, M rep, K step, 64 key rows, 16 k); stride 0 over the consumers
    # where they split the columns (both read the block's 64 key rows)
    L["a_kv"] = TileLayout(S[(dh, CONS, 1, 4, 64, 16) : (BK * 64, KROWS * 64, 1, 16, 64, 1)], swizzle=SW128)
    # Q and dO as B (K-major over D): (stage, box, N rep, K step, BM query rows, 16 k)
    L["b_qo"] = TileLayout(S[(stages, dh, 1, 4, BM, 16) : (dh * BM * 64, BM * 64, 1, 16, 64, 1)], swizzle=SW128)
    # Q and dO as B over queries (MN-major, trans_b): (stage, N rep, query step, D = (box, 64 columns), 16 queries)
    L["bt_qo"] = TileLayout(S[(stages, 1, BM // 16, dh, 64, 16) : (dh * BM * 64, 1, 16 * 64, BM * 64, 1, 64)],
                            swizzle=SW128)
    if split:
        # consumer c's columns only: (stage, consumer, N rep, query step, its DA columns = (box, 64), 16 queries)
        L["bt_qo"] = TileLayout(S[(stages, CONS, 1, BM // 16, dh // CONS, 64, 16) :
                                  (dh * BM * 64, dh // CONS * BM * 64, 1, 16 * 64, BM * 64, 1, 64)], swizzle=SW128)
    # dS (queries x keys) as A read transposed (trans_a) from dS^T, without a swizzle: 8 keys x 8 queries core
    # matrices of 128 contiguous bytes (k%8 rows of 16 bytes, m%8 within), the 8 query blocks 128 bytes apart, the
    # two 8-key halves of a key step 1 KB apart. Unswizzled, every word a lane stores is its base plus a
    # compile-time offset (a swizzle's XOR made them 16 per-lane addresses, hoisted out of the loop: 16 registers)
    # (buffer, M rep, key step, BM queries = (block, m%8), 16 keys = (half, k%8))
    L["at_ds"] = TileLayout(S[(2, 1, BK // 16, BM // 8, 8, 2, 8) : (BK * BM, 1, 16 * BM, 64, 1, 8 * BM, 8)])
    if dh >= 2:
        # K as B over keys for dQ (MN-major, trans_b): (box = a consumer's 64-column block, N rep, key step, 64
        # columns, 16 keys)
        L["bt_k"] = TileLayout(S[(dh, 1, BK // 16, 64, 16) : (BK * 64, 1, 16 * 64, 1, 64)], swizzle=SW128)
    else:
        # D = 64: each consumer's dQ is over its own 64 keys (a partial sum: both add theirs into the same block), so
        # K and dS are read over its key steps only: K (consumer's key half, N rep, key step, 64 columns, 16 keys),
        # dS (buffer, consumer, M rep, key step, BM queries, 16 keys)
        L["bt_k"] = TileLayout(S[(CONS, 1, 4, 64, 16) : (64 * 64, 1, 16 * 64, 1, 64)], swizzle=SW128)
        L["at_ds"] = TileLayout(S[(2, CONS, 1, 4, BM // 8, 8, 2, 8) :
                                  (BK * BM, 64 * BM, 1, 16 * BM, 64, 1, 8 * BM, 8)])
    if split:
        # score_split: consumer c's query half of Q and dO as B (K-major over D): (stage, box, consumer, N rep, K
        # step, BM / 2 query rows, 16 k); the half starts 32 rows (4 KB, whole swizzle atoms) into the box
        L["b_qh"] = TileLayout(S[(stages, dh, CONS, 1, 4, BM // CONS, 16) :
                                 (dh * BM * 64, BM * 64, BM // CONS * 64, 1, 16, 64, 1)], swizzle=SW128)
        # P^T and dS^T (keys x queries) as A read K-major from their shared copies (the st_ds words below): 8 keys
        # x 8 queries core matrices of 128 contiguous bytes, key blocks 8 BM elements apart, query blocks 64:
        # (buffer, M rep, query step, BK keys = (block, k%8), 16 queries = (block, q%8))
        L["a_pds"] = TileLayout(S[(2, 1, BM // 16, BK // 8, 8, 2, 8) : (BK * BM, 1, 128, 8 * BM, 8, 64, 1)])
    # dS^T as the consumers store it, in words of two queries: (buffer, key row = (step, half, k%8), word =
    # (query block, pair))
    L["st_ds"] = TileLayout(S[(2, BK // 16, 2, 8, BM // 8, 4) : (BK * BM // 2, 8 * BM, 4 * BM, 4, 32, 1)])
    # f32 accumulators of m64nN: register i -> row 16w + l//4 + 8((i//2)%2), column 8(i//4) + 2(l%4) + i%2
    for name, n in (("acc_s", BM), ("acc_d", DA), ("acc_q", 64), ("acc_sh", BM // CONS)):
        L[name] = TileLayout(S[(1, 1, 4, 2, 8, n // 8, 4, 2) :
                               (1, 1, 1 @ wid_in_wg, 2, 4 @ laneid, 4, 1 @ laneid, 1)])
    # P^T / dS^T as A (rs): word 4 kk + r -> row 16w + l//4 + 8(r%2), word column 4(r//2) + l%4 of query step kk;
    # the accumulator pair (2p, 2p + 1), p = 4 kk + r
    L["p"] = TileLayout(S[(1, BM // 16, 4, 2, 8, 2, 4) : (1, 4, 1 @ wid_in_wg, 1, 4 @ laneid, 2, 1 @ laneid)])
    # the same over a consumer's query half (score_split="own")
    L["p_h"] = TileLayout(S[(1, BM // 32, 4, 2, 8, 2, 4) : (1, 4, 1 @ wid_in_wg, 1, 4 @ laneid, 2, 1 @ laneid)])
    return L


def smem_bytes(D: int, stages: int, score_split: bool = False) -> int:
    """K, V, the Q/dO ring, two dS^T buffers, the LSE/Delta ring and the consumers' float32 dQ staging buffers
    (BM x 64 each; none where the consumers split the columns: they stage dQ in the stage; the barriers and
    alignment add under 2 KB). D = 128: 2 stages 197632 bytes, 3 stages 230912 (over the limit with the 2 KB);
    D = 256: 2 stages 214016, with score_split's two P^T buffers 230400."""
    bk = block_keys(D)
    staging = 0 if D in COLUMN_SPLIT_D else CONS * BM * 64 * 4
    pt = 2 * 2 * bk * BM if score_split else 0
    return 2 * (2 * bk * D + 2 * stages * BM * D + 2 * bk * BM) + stages * 2 * BM * 4 + staging + pt


def item_tiles(causal, shape) -> list:
    """The query tiles each item (a block's key block kb of head bh, in launch order: item bh * NKB + kb) walks:
    every one, or causal, those from the tile holding the key block's first key on."""
    B, H, HK, N, NK = shape
    nkb, nqt = -(-NK // BK), -(-N // BM)
    per_head = [nqt - (min(nqt, kb * BK // BM) if causal else 0) for kb in range(nkb)]
    return per_head * (B * H)


def tail_plan(causal, shape, sms=NUM_SMS):
    """The split kernel's schedule, (items run whole, items split, their tiles, split blocks), or None where
    there is nothing to split. The first ni - ni % sms items run one block each, as without the split (ni < sms:
    none); the tiles of the other items, in launch order, are dealt out in even contiguous runs to min(sms,
    tiles) blocks, block s taking tiles s * tiles // blocks .. (s + 1) * tiles // blocks - 1: a run may start and
    end inside an item. Causal shapes with more keys than queries have items that walk no tile (their dK and dV
    are zeros, which only a block of their own stores): not split."""
    if sms < 1:
        raise tiledsl.LaunchError(f"the FA3 backward's tail split needs a positive number of SMs, got {sms}")
    lens = item_tiles(causal, shape)
    rest = len(lens) % sms
    if rest == 0 or min(lens) == 0:
        return None
    tiles = sum(lens[len(lens) - rest:])
    return len(lens) - rest, rest, tiles, min(sms, tiles)


def makespan(blocks, sms) -> float:
    """The time a non-persistent grid takes when each SM runs one block at a time and the next block in launch
    order starts on the SM that frees first; `blocks` the blocks' durations in launch order."""
    free = [0.0] * min(sms, len(blocks))
    heapq.heapify(free)
    for t in blocks:
        heapq.heappush(free, heapq.heappop(free) + t)
    return max(free)


# attention_backward's default takes the tail split only where TAIL_SPLIT and tail_split_helps both say so. Off:
# on the H200 (benchmarks/attention_backward_split.py --rounds 3, interleaved with cuDNN, split / plain TFLOP/s)
# 0.977 / 0.968 (f16 / bf16) at N = 4096 non-causal, 0.976 / 0.957 causal, 1.002 / 1.009 at N = 16384 non-causal:
# reloading K and V a piece and the partial dK / dV slots cost more than the half-idle last wave (3%) did
TAIL_SPLIT = False

# attention_backward's default for tma_kv (dK and dV out through shared memory and the TMA store) where it applies
# (no grouped-query heads, no tail split): on. Side by side on the H200 (session 29, D = 128, f16 then bf16, N =
# 4096 / 16384, non-causal then causal), TFLOP/s with it against st.global: 514 / 500, 452 / 447, 543 / 535,
# 529 / 523, 528 / 514, 462 / 452, 554 / 551, 549 / 544 (ahead in 8 of 8 by 0.5-2.8%)
TMA_KV = True

# A block's fixed costs in query tiles' time, for tail_split_helps' model (estimates, not measurements): loading K
# and V and storing dK and dV about a tile's time; a split piece's partial dK and dV to its workspace slot (128
# KB, to L2) and the last piece's read of each contributor's slot half a tile each
PIECE_COST, SLOT_COST = 1.0, 0.5


def split_durations(causal, shape, sms=NUM_SMS) -> list:
    """The split grid's blocks' durations in launch order (tail_plan's schedule; in query tiles' time, with
    PIECE_COST a piece and SLOT_COST for a piece's slot and, modelling a split item's last piece as its last in
    launch order, each other piece's slot it reads)."""
    lens = item_tiles(causal, shape)
    ndp, _, tiles, nsp = tail_plan(causal, shape, sms)
    out = [n + PIECE_COST for n in lens[:ndp]]
    bounds = [s * tiles // nsp for s in range(nsp + 1)]
    starts = [0]
    for n in lens[ndp:]:
        starts.append(starts[-1] + n)
    for s in range(nsp):
        t = bounds[s + 1] - bounds[s]
        for x in range(len(starts) - 1):
            a, b = max(bounds[s], starts[x]), min(bounds[s + 1], starts[x + 1])
            if a < b:
                t += PIECE_COST
                if b - a < starts[x + 1] - starts[x]:
                    pieces = sum(1 for u in range(nsp) if bounds[u] < starts[x + 1] and bounds[u + 1] > starts[x])
                    t += SLOT_COST * (pieces if b == starts[x + 1] else 1)
        out.append(t)
    return out


def tail_split_helps(causal, shape, sms=NUM_SMS) -> bool:
    """Whether attention_backward's fa3 path splits the last wave (tail_split): where the list-scheduling model
    (makespan of split_durations against the plain grid's items, each a tile count + PIECE_COST) gives the split
    grid a makespan at least 1% under the plain grid's. At the benchmark shapes (2048 items on 132 SMs: 15.52
    waves) non-causal: 15.57 and 15.53 waves against 16 (N = 4096 and 16384: -2.7%, -2.9%); causal, where the
    items differ in length (a head's key blocks walk 64, 62, .. 2 tiles at N = 4096) and the plain grid's short
    last items fill much of its last wave: N = 4096 -3.0%, N = 16384 +0.6% (not split)."""
    if tail_plan(causal, shape, sms) is None:
        return False
    plain = makespan([n + PIECE_COST for n in item_tiles(causal, shape)], sms)
    return makespan(split_durations(causal, shape, sms), sms) <= 0.99 * plain


def workspace(kernel, a):
    """The split kernel's workspace for one launch on torch tensor a's device: W (kernel.slots) float32, two slots
    of a split block's partial dK and dV (its first and its last item's), and F (kernel.counters,) int32 zeros, a
    split item's count of finished pieces (the last piece sets it back to 0). Fresh from torch's caching allocator
    every launch (F's zero fill on the launch's stream; no host synchronisation), not kept per stream: a workspace
    kept from inside a CUDA-graph capture or torch.compile's cudagraph warm-up would be memory of the graph's pool
    that the pool does not know is in use (fa3.counters says the same of the dynamic walk's counters)."""
    import torch
    return (torch.empty(kernel.slots, dtype=torch.float32, device=a.device),
            torch.zeros(kernel.counters, dtype=torch.int32, device=a.device))


def make_attention_backward_hopper(dtype, D, causal, shape, scale, stages=None, tail_split=False,
                                   sms=NUM_SMS, tma_kv=False, dq_overlap=None, score_split=None, dq_combine=None):
    """The FA3-style main backward kernel for `dtype` ("float16"/"bfloat16"), head dim D (128), causal or not,
    shape = (B, H, H_kv, N, N_kv) and softmax scale `scale`; sm_90a only.

    Arguments: Q, dO (B * H, N, D) and K, V (B * H_kv, N_kv, D) as tensor maps (the (B, H, N, D) tensors
    reshaped); LSE2 (LSE * log2 e) and Delta (B * H, NP) float32, NP = N rounded up to whole BM-row tiles, zero
    past N (attention_backward.make_delta's); dQacc (B * H * NP, D) float32, zeroed, which the kernel adds into
    tiled: one 16 KB block per (b * H + h, query tile, consumer) in fragment order (make_cast_dq reads it);
    dK, dV: (B, H_kv, N_kv, D) in `dtype` without GQA, else zeroed float32 accumulators (B * H_kv * N_kv, D); with
    tma_kv (no GQA, no tail split: dK and dV through shared memory and the TMA store) tensor maps of their
    (B * H_kv, N_kv, D) views (kv_arg).

    tail_split: the items (a key block of a head) past the whole waves of `sms` blocks are not left to a last,
    partly idle wave: their query tiles are spread evenly over `sms` blocks (tail_plan; tail_split_helps says
    where that pays). The kernel then takes two more arguments, workspace(kernel, q)'s W (kernel.slots) float32
    and F (kernel.counters,) int32 zeros; where there is nothing to split, tail_split=True builds the plain kernel
    (kernel.slots is None).

    dq_overlap and score_split (D in COLUMN_SPLIT_D; None: DQ_OVERLAP, SCORE_SPLIT): the second dQ block issued
    while the first runs; each consumer's scores over half the tile's queries (see SCORE_SPLIT). dq_combine (D = 64,
    no tail split; None: DQ_COMBINE): consumer 1 adds consumer 0's partial dQ to its own in shared memory, one
    bulk reduction a tile instead of two."""
    if D not in SUPPORTED_D:
        raise tiledsl.LaunchError(f"the FA3 backward supports head dims {', '.join(map(str, SUPPORTED_D))}, got {D}")
    if dtype not in ("float16", "bfloat16"):
        raise tiledsl.LaunchError(f"the FA3 backward supports float16 and bfloat16, not {dtype}")
    for name, v in (("dq_overlap", dq_overlap), ("score_split", score_split)):
        if v not in (None, False, True, 0, 1) and not (name == "score_split" and v == "own"):
            raise tiledsl.LaunchError(f"the FA3 backward's {name} must be True, False or None"
                                      f"{', or own' if name == 'score_split' else ''}, got {v!r}")
        if v and D not in COLUMN_SPLIT_D:
            raise tiledsl.LaunchError(f"the FA3 backward's {name} applies where the consumers split the columns (D "
                                      f"in {COLUMN_SPLIT_D}), not at D = {D}")
    if dq_combine not in (None, False, True, 0, 1):
        raise tiledsl.LaunchError(f"the FA3 backward's dq_combine must be True, False or None, got {dq_combine!r}")
    if dq_combine and (D != 64 or tail_split):
        raise tiledsl.LaunchError(f"the FA3 backward's dq_combine applies at D = 64 without the tail split, not at "
                                  f"D = {D}{' with tail_split' if tail_split else ''}")
    DQC = bool(DQ_COMBINE if dq_combine is None else dq_combine) and D == 64 and not tail_split
    DQO = bool(DQ_OVERLAP if dq_overlap is None else dq_overlap) and D in COLUMN_SPLIT_D
    ss = SCORE_SPLIT if score_split is None else score_split
    SS = bool(ss) and D in COLUMN_SPLIT_D
    SSOWN = SS and ss == "own"          # the own query half of dV and dK from registers, before the barrier
    RS = SSOWN or not SS                # dV's and dK's A (all of it, or the own half) from P^T's and dS^T's registers
    STG = stages or STAGES[D]
    if not 2 <= STG <= 4 or smem_bytes(D, STG, SS) + 2048 > SMEM_LIMIT:
        raise tiledsl.LaunchError(f"the FA3 backward takes 2 to 4 stages within {SMEM_LIMIT} bytes of shared "
                                  f"memory, got {STG} (which needs {smem_bytes(D, STG, SS) + 2048})")
    SPLITD = D in COLUMN_SPLIT_D
    if SPLITD and (tail_split or tma_kv):
        raise tiledsl.LaunchError(f"the FA3 backward at D = {D} (the consumers split the columns) has no tail split "
                                  f"and no tma_kv")
    plan = tail_plan(causal, shape, sms) if tail_split else None
    if tma_kv not in (False, True, 0, 1):
        raise tiledsl.LaunchError(f"the FA3 backward's tma_kv must be True or False, got {tma_kv!r}")
    if tma_kv and (plan is not None or shape[1] != shape[2]):
        raise tiledsl.LaunchError("the FA3 backward's tma_kv stores dK and dV whole in q's dtype: not with the tail "
                                  "split (its pieces add partial sums) nor grouped-query heads (float32 sums added "
                                  "across query heads)")
    key = (dtype, D, bool(causal), tuple(shape), float(scale), STG)
    if D in COLUMN_SPLIT_D:
        key += (DQO, SS, SSOWN)
    if DQC:
        key += ("dq_combine",)
    if plan is not None:
        key += ("tail_split", int(sms))
    if tma_kv:
        key += ("tma_kv",)
    if key in _KERNELS:
        return _KERNELS[key]
    B, H, HK, N, NK = shape
    if H % HK:
        raise tiledsl.LaunchError(f"k/v have {HK} heads, which does not divide q's {H}")
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    QH = BM // CONS if SS else BM      # the queries of a consumer's S^T and dP^T
    MMA_S = f"wgmma.mma_async.sync.aligned.m64n{QH}k16.f32.{t}.{t}"     # S^T, dP^T: 64 keys x QH queries
    BK = block_keys(D)                  # key rows a block
    DA = D // CONS if SPLITD else D     # dK and dV columns a consumer accumulates
    MMA_D = f"wgmma.mma_async.sync.aligned.m64n{DA}k16.f32.{t}.{t}"     # dV, dK: 64 keys x DA
    MMA_Q = f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{t}.{t}"       # dQ: BM queries x 64 columns
    LOAD = "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    BULK = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
    WAIT = "mbarrier.try_wait.parity.shared::cta.b64"
    ARRIVE = "mbarrier.arrive.shared::cta.b64"
    EXPECT = "mbarrier.arrive.expect_tx.shared::cta.b64"
    FENCE, COMMIT, WAITG = "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", \
        "wgmma.wait_group.sync.aligned"
    CVT = f"cvt.rn.{t}x2.f32"
    RED = "red.global.add.f32"
    REDUCE = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"
    DQ_BYTES = BM * 64 * 4              # a consumer's dQ block: BM queries x 64 columns of float32
    THREADS = 128 * (1 + CONS)
    DH = D // 64
    NS, ND, NQ = BM // 2, DA // 2, 32   # f32 accumulators a consumer thread: S^T (and dP^T), dK (and dV), dQ
    NSS = QH // 2                       # of them the scores' (score_split: half)
    NKB = -(-NK // BK)                  # key blocks a head
    NQT = -(-N // BM)                   # query tiles
    NP = NQT * BM
    GROUP = H // HK
    C = float(scale) * LOG2E
    SC = float(scale)
    TXKV = BK * D * 2
    TXQ = 2 * BM * D * 2 + 2 * BM * 4   # Q and dO boxes, LSE * log2 e and Delta
    CAP = (65536 // THREADS) // 8 * 8
    CREGS = consumer_registers(THREADS, CAP, CONS, PRODUCER_REGS, CONSUMER_REGS)
    LY = layouts(D, STG, dtype)
    L_TMAKV, L_TMAQO, L_AKV, L_BQO, L_BTQO, L_BTK = (LY[n] for n in ("tma_kv", "tma_qo", "a_kv", "b_qo", "bt_qo",
                                                                   "bt_k"))
    L_ATDS, L_STDS, L_ACCS, L_ACCD, L_ACCQ, L_P = (LY[n] for n in ("at_ds", "st_ds", "acc_s", "acc_d", "acc_q", "p"))
    if SS:
        L_BQH, L_APDS, L_ACCS, L_P = LY["b_qh"], LY["a_pds"], LY["acc_sh"], LY["p_h"]
    QS = QH // 16                       # query steps of a consumer's scores
    NQS = QS if SSOWN else BM // 16     # query steps of dV's and dK's products with A from the shared copies
    DQB = D // 64                       # dQ's 64-column blocks: a consumer's own at D = 128, both consumers' at 64,
    #                                     two of a consumer's at 256
    KROWS = 0 if SPLITD else 64         # consumer c's first key row in the block: KROWS * c
    # arrivals that release a stage: one a consumer warp once its wgmmas have read it, or where the consumers split
    # the columns one a consumer once the TMA unit has read the dQ blocks staged in it
    EMPTY_ARRIVALS = CONS if SPLITD else 4 * CONS
    STEP = ((0, 0, 64),)                # the D / 64 boxes of a tile: 64 columns apart
    acc_t = dtype if GROUP == 1 else "float32"
    kv_shape = (B, HK, NK, D) if GROUP == 1 else (B * HK * NK, D)
    TMA_KV = bool(tma_kv)
    # dK and dV: tensors st.global (or red.global) writes, or with tma_kv tensor maps whose boxes are a consumer's
    # 64 key rows by 64 columns
    KV_ANN = T.TensorMap((B * HK, NK, D), dtype, box=(1, 64, 64), swizzle=128) if TMA_KV else T.Tensor(kv_shape,
                                                                                                          acc_t)
    if TMA_KV:
        L_PK = packed_words(D)
        L_SW, L_SB = staging_layouts(CONS, DH, BK)
    STORE = "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
    STMX4 = "stmatrix.sync.aligned.m8n8.x4.shared.b16"
    ragged_k = NK % BK != 0

    SPLIT = plan is not None
    if SPLIT:
        NDP, NSPLIT, TT, NSP = plan     # items run whole, items split, their tiles, split blocks
    # a workspace slot: a block's partial dK then dV, register i of consumer thread t (0 .. 255) at float i * 256 + t
    SLOT = 2 * ND * 128 * CONS

    @tiledsl.inline
    def first_tile(kb):
        """The first query tile key block kb visits: causal starts at the one holding its first key."""
        q0 = 0
        if causal:
            q0 = T.min(NQT, (kb * BK) // BM)
        return q0

    @tiledsl.inline
    def split_start(s):
        """Split block s's first tile among the split items' tiles (block NSP: their end)."""
        return s * TT // NSP

    @tiledsl.inline
    def split_owner(t):
        """The split block whose run holds tile t of the split items' tiles."""
        return ((t + 1) * NSP - 1) // TT

    @tiledsl.inline
    def store_kv(dK, dV, dk, dv, key0, bhk, lane, col0):
        """This lane's key rows of dK and dV (accumulator register i: row half (i//2)%2, column col0 + 8(i//4) +
        2(l%4) + i%2; col0 is the consumer's first column where the consumers split the columns, else 0): stored in
        q's dtype, or (GQA) added into the float32 accumulators."""
        kvrow = bhk * NK
        for r in T.unroll(2):
            key = key0 + 8 * r
            if key < NK:
                if GROUP == 1:
                    kw = T.alloc_local((DA // 8, 1), "uint32")
                    vw = T.alloc_local((DA // 8, 1), "uint32")
                    kp = dk.view(DA // 8, 2, 2)[:, r]
                    vp = dv.view(DA // 8, 2, 2)[:, r]
                    T.cuda.tile.apply(T.ptx[CVT], kw, kp[:, 1:2], kp[:, 0:1])
                    T.cuda.tile.apply(T.ptx[CVT], vw, vp[:, 1:2], vp[:, 0:1])
                    gdk = dK.view(dtype="uint32").view(B * HK * NK, D // 2)
                    gdv = dV.view(dtype="uint32").view(B * HK * NK, D // 2)
                    if SPLITD:
                        for n in T.unroll(DA // 8):
                            gdk[kvrow + key, col0 // 2 + 4 * n + lane % 4] = kw[n, 0]
                            gdv[kvrow + key, col0 // 2 + 4 * n + lane % 4] = vw[n, 0]
                    else:
                        for n in T.unroll(D // 8):
                            gdk[kvrow + key, 4 * n + lane % 4] = kw[n, 0]
                            gdv[kvrow + key, 4 * n + lane % 4] = vw[n, 0]
                else:
                    gdk = dK.view(B * HK * NK * D)
                    gdv = dV.view(B * HK * NK * D)
                    kvbase = (kvrow + key) * D + 2 * (lane % 4)
                    if SPLITD:
                        kvbase = kvbase + col0
                    for n in T.unroll(DA // 8):
                        for e in T.unroll(2):
                            at = kvbase + 8 * n + e
                            T.cuda.tile.apply(T.ptx[RED], gdk[at:at + 1], dk[4 * n + 2 * r + e])
                            T.cuda.tile.apply(T.ptx[RED], gdv[at:at + 1], dv[4 * n + 2 * r + e])

    @tiledsl.inline
    def staged(c):
        """Consumer c's writes to shared memory made visible to the TMA unit (generic to async proxy), then its
        warpgroup meets on its own barrier."""
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
        own_barrier(c)

    @tiledsl.inline
    def own_barrier(c):
        """Consumer c's warpgroup meets on its own named barrier (the id a compile-time immediate: a run-time one
        makes ptxas reserve all 16 barriers)."""
        if c == 0:
            T.cuda.tile.apply(T.ptx["bar.sync"], STAGED_BAR, 128)
        else:
            T.cuda.tile.apply(T.ptx["bar.sync"], STAGED_BAR + 1, 128)

    @tiledsl.inline
    def store_kv_staged(dK, dV, dk, dv, sk, sv, c, w, tq, bhk, kb):
        """tma_kv: dK and dV of consumer c's 64 key rows packed to q's dtype, written by stmatrix.x4 into its own rows
        of K's and V's buffers once both consumers have met after their last dQ (the other's read K's rows), then
        one thread's TMA stores (the unit drops key rows past N_kv); the block's last wait_group covers them."""
        T.cuda.tile.apply(T.ptx["bar.sync"], DQ_BAR, 128 * CONS)
        kw = T.alloc_local((ND // 2, 1), "uint32")
        vw = T.alloc_local((ND // 2, 1), "uint32")
        T.cuda.tile.apply(T.ptx[CVT], kw, dk.view(ND // 2, 2)[:, 1:2], dk.view(ND // 2, 2)[:, 0:1])
        T.cuda.tile.apply(T.ptx[CVT], vw, dv.view(ND // 2, 2)[:, 1:2], dv.view(ND // 2, 2)[:, 0:1])
        kwords = sk.view(dtype="uint32").view(CONS, 4, D // 16, 4, 8, 4, layout=L_SW)
        vwords = sv.view(dtype="uint32").view(CONS, 4, D // 16, 4, 8, 4, layout=L_SW)
        T.cuda.tile.apply(T.ptx[STMX4], kwords[c, w], kw.view(D // 16, 4, 8, 4, layout=L_PK), scope="warp")
        T.cuda.tile.apply(T.ptx[STMX4], vwords[c, w], vw.view(D // 16, 4, 8, 4, layout=L_PK), scope="warp")
        staged(c)
        if tq == 0:
            kboxes = sk.view(CONS, DH, 1, 64, 64, layout=L_SB)
            vboxes = sv.view(CONS, DH, 1, 64, 64, layout=L_SB)
            T.cuda.tile.apply(T.ptx[STORE], dK, kboxes[c], coords=(bhk, kb * BK + 64 * c, 0), coord_steps=STEP)
            T.cuda.tile.apply(T.ptx[STORE], dV, vboxes[c], coords=(bhk, kb * BK + 64 * c, 0), coord_steps=STEP)
            T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])

    @tiledsl.inline
    def finish_piece(W, F, dK, dV, dk, dv, key0, bhk, lane, tid, item, xs, kb, pq, qt, later, sflag, got):
        """The end of a piece of `item` (tiles pq .. qt; the split items' tiles from xs on are its own when it is
        one of them; later: 0 for the block's first piece, else 1): dK and dV stored where the piece is the whole
        item (or added, GQA). A piece of a split item (not GQA) writes its partial sums to its slot (2 s + later
        for split block s: only a block's first and last pieces can be parts of items) and counts itself done on
        the item's counter (atom.acq_rel at GPU scope by one thread after the consumers' barrier: the slot's writes
        are released, the other pieces' acquired); the piece that brings the count to the item's number of pieces
        adds every piece's slot, its own too, in the order of the pieces (the same sums whichever piece is last:
        deterministic), stores them, and sets the counter back to 0 for the next launch. No block waits for
        another (the grid is not persistent: a block not yet resident could never arrive)."""
        go = 1
        if GROUP == 1:
            whole = 0
            if pq == first_tile(kb) and qt == NQT - 1:
                whole = 1
            go = whole
            if whole == 0:
                wf = W.view(2 * NSP * SLOT)
                me = tid - 128
                at = (2 * (T.cuda.block_id() - NDP) + later) * SLOT + me
                for i in T.unroll(ND):
                    wf[at + i * 256] = dk[i]
                    wf[at + (ND + i) * 256] = dv[i]
                T.cuda.tile.apply(T.ptx["bar.sync"], DQ_BAR, 128 * CONS)
                xe = xs + NQT - first_tile(kb)
                s0 = split_owner(xs)
                s1 = split_owner(xe - 1)
                if tid == 128:
                    fx = T.max(item - NDP, 0)       # (item >= NDP here: the max says so to the bounds check)
                    T.cuda.tile.apply(T.ptx["atom.acq_rel.gpu.global.add.s32"], got, F[fx:fx + 1], 1)
                    sflag[0] = 0
                    if got[0] == s1 - s0:
                        sflag[0] = 1
                        F[fx] = 0
                T.cuda.tile.apply(T.ptx["bar.sync"], DQ_BAR, 128 * CONS)
                go = sflag[0]
                if go == 1:
                    # every piece's slot (this block's own too, written above) in the order of the pieces
                    for i in T.unroll(ND):
                        dk[i] = 0.0
                        dv[i] = 0.0
                    for u in range(s0, s1 + 1):
                        src = 2 * u * SLOT + me
                        if split_start(u) < xs:
                            src = src + SLOT
                        for i in T.unroll(ND):
                            dk[i] = dk[i] + wf[src + i * 256]
                            dv[i] = dv[i] + wf[src + (ND + i) * 256]
        if go == 1:
            store_kv(dK, dV, dk, dv, key0, bhk, lane, 0)

    @tiledsl.inline
    def bwd(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, W, F):
        tid = T.cuda.thread_id()
        wg = warpgroup_index(tid)
        pid = T.cuda.block_id()
        # the key blocks of one head are neighbours (its Q and dO stay in L2); causal: key block 0, which walks
        # every query tile, first
        bh = pid // NKB
        kb = pid % NKB
        b = bh // H
        h = bh % H
        bhk = b * HK + h // GROUP
        sk = T.alloc_shared((DH * BK * 64,), dtype)
        sv = T.alloc_shared((DH * BK * 64,), dtype)
        sq = T.alloc_shared((STG * DH * BM * 64,), dtype)
        so = T.alloc_shared((STG * DH * BM * 64,), dtype)
        sds = T.alloc_shared((2 * BK * BM,), dtype)
        if SS:
            spt = T.alloc_shared((2 * BK * BM,), dtype)   # P^T's shared copy (two buffers, as dS^T's)
        sl = T.alloc_shared((STG, 2, BM), "float32")  # LSE * log2 e and Delta of the stage's query rows
        if not SPLITD:
            sdq = T.alloc_shared((CONS, BM * 64), "float32")  # each consumer's dQ block, staged for the bulk reduction
        kvbar = T.alloc_shared((1,), "uint64")        # K and V have landed
        full = T.alloc_shared((STG,), "uint64")       # stage s holds its query tile (phase u: the u-th fill)
        empty = T.alloc_shared((STG,), "uint64")      # every consumer warp is done with stage s
        if SPLIT:
            kvfree = T.alloc_shared((1,), "uint64")   # every consumer warp is done with the piece's K and V
            sflag = T.alloc_shared((1,), "int32")     # thread 128 found this piece the item's last
        tk = sk.view(DH, 1, BK, 64, layout=L_TMAKV)
        tv = sv.view(DH, 1, BK, 64, layout=L_TMAKV)
        tq = sq.view(STG, DH, 1, BM, 64, layout=L_TMAQO)
        to = so.view(STG, DH, 1, BM, 64, layout=L_TMAQO)
        ak = sk.view(DH, CONS, 1, 4, 64, 16, layout=L_AKV)
        av = sv.view(DH, CONS, 1, 4, 64, 16, layout=L_AKV)
        if SS:
            bq = sq.view(STG, DH, CONS, 1, 4, QH, 16, layout=L_BQH)
            bo = so.view(STG, DH, CONS, 1, 4, QH, 16, layout=L_BQH)
            apt = spt.view(2, 1, BM // 16, BK, 16, layout=L_APDS)
            adst = sds.view(2, 1, BM // 16, BK, 16, layout=L_APDS)
            stpt = spt.view(dtype="uint32").view(2, BK, BM // 2, layout=L_STDS)
        else:
            bq = sq.view(STG, DH, 1, 4, BM, 16, layout=L_BQO)
            bo = so.view(STG, DH, 1, 4, BM, 16, layout=L_BQO)
        if SPLITD:
            btq = sq.view(STG, CONS, 1, BM // 16, DA, 16, layout=L_BTQO)
            bto = so.view(STG, CONS, 1, BM // 16, DA, 16, layout=L_BTQO)
            # a consumer's two dQ blocks staged in its own columns of the stage's Q and of its dO: (stage, consumer,
            # register pair, warpgroup thread, 2), and as the bulk reduction's sources
            sqp = sq.view(dtype="float32").view(STG, CONS, NQ // 2, 128, 2)
            sop = so.view(dtype="float32").view(STG, CONS, NQ // 2, 128, 2)
            sqb = sq.view(dtype="float32").view(STG, CONS, BM * 64)
            sob = so.view(dtype="float32").view(STG, CONS, BM * 64)
        else:
            btq = sq.view(STG, 1, BM // 16, D, 16, layout=L_BTQO)
            bto = so.view(STG, 1, BM // 16, D, 16, layout=L_BTQO)
        if DQB >= 2:
            btk = sk.view(DH, 1, BK // 16, 64, 16, layout=L_BTK)
            ads = sds.view(2, 1, BK // 16, BM, 16, layout=L_ATDS)
        else:
            btk = sk.view(CONS, 1, 4, 64, 16, layout=L_BTK)
            ads = sds.view(2, CONS, 1, 4, BM, 16, layout=L_ATDS)
        stds = sds.view(dtype="uint32").view(2, BK, BM // 2, layout=L_STDS)
        if tid == 0:
            T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], kvbar, 1)
            for s in T.unroll(STG):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], EMPTY_ARRIVALS)
            if SPLIT:
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], kvfree, 4 * CONS)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        T.cuda.syncthreads()
        if SPLIT:
            # the block's walk: ntiles tiles from tile qt of `item` (items in launch order; the split items' tiles
            # from xs on are its own when it is one of them). A piece is the part of the walk in one item: K and V are
            # loaded for each (the producer waits for kvfree: the consumers are done with the last piece's), and
            # each ends in finish_piece
            item = pid
            xs = 0
            qt = first_tile(kb)
            ntiles = NQT - qt
            if pid >= NDP:
                lo = split_start(pid - NDP)
                item = NDP
                # the item holding the block's first query tile: walk the items' tile counts up to lo
                n = NQT - first_tile(item % NKB)
                while xs + n <= lo:
                    xs = xs + n
                    item = item + 1
                    n = NQT - first_tile(item % NKB)
                qt = first_tile(item % NKB) + lo - xs
                ntiles = split_start(pid - NDP + 1) - lo
        else:
            # the query tiles this block visits: causal starts at the one holding the block's first key
            qt0 = 0
            if causal:
                qt0 = T.min(NQT, (kb * BK) // BM)
            ntiles = NQT - qt0
        if wg == 0:
            # the producer: few registers, one elected thread issues every copy
            T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], PRODUCER_REGS)
            if T.cuda.warp_id() == 0:
                if elect_one() == 1:
                    if SPLIT:
                        npc = 0                 # pieces begun
                        newp = 1
                    else:
                        T.cuda.tile.apply(T.ptx[EXPECT], kvbar, 2 * TXKV)
                        T.cuda.tile.apply(T.ptx[LOAD], tk, K, kvbar, coords=(bhk, kb * BK, 0), coord_steps=STEP)
                        T.cuda.tile.apply(T.ptx[LOAD], tv, V, kvbar, coords=(bhk, kb * BK, 0), coord_steps=STEP)
                    for j in range(ntiles):
                        s = j % STG
                        if SPLIT:
                            if newp == 1:
                                bh = item // NKB
                                kb = item % NKB
                                bhk = (bh // H) * HK + (bh % H) // GROUP
                                if npc > 0:
                                    T.cuda.tile.apply(T.ptx[WAIT], kvfree, (npc - 1) % 2)
                                T.cuda.tile.apply(T.ptx[EXPECT], kvbar, 2 * TXKV)
                                T.cuda.tile.apply(T.ptx[LOAD], tk, K, kvbar, coords=(bhk, kb * BK, 0),
                                                  coord_steps=STEP)
                                T.cuda.tile.apply(T.ptx[LOAD], tv, V, kvbar, coords=(bhk, kb * BK, 0),
                                                  coord_steps=STEP)
                                npc = npc + 1
                        else:
                            qt = qt0 + j
                        if j >= STG:
                            # the (j // STG)-th refill of stage s waits for the consumers' previous use of it
                            T.cuda.tile.apply(T.ptx[WAIT], empty[s:s + 1], (j // STG + 1) % 2)
                        T.cuda.tile.apply(T.ptx[EXPECT], full[s:s + 1], TXQ)
                        T.cuda.tile.apply(T.ptx[LOAD], tq[s], Q, full[s:s + 1], coords=(bh, qt * BM, 0),
                                          coord_steps=STEP)
                        T.cuda.tile.apply(T.ptx[LOAD], to[s], dO, full[s:s + 1], coords=(bh, qt * BM, 0),
                                          coord_steps=STEP)
                        T.cuda.tile.apply(T.ptx[BULK], sl[s, 0], LSE2[bh, qt * BM:qt * BM + BM], full[s:s + 1],
                                          copy_bytes=BM * 4)
                        T.cuda.tile.apply(T.ptx[BULK], sl[s, 1], Delta[bh, qt * BM:qt * BM + BM], full[s:s + 1],
                                          copy_bytes=BM * 4)
                        if SPLIT:
                            qt = qt + 1
                            newp = 0
                            if qt == NQT:
                                item = item + 1
                                qt = first_tile(item % NKB)
                                newp = 1
        else:
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            sacc = T.alloc_local((NS,), "float32")    # S^T, then P^T; then this tile's dQ half
            dpacc = T.alloc_local((NS,), "float32")   # dP^T, then dS^T
            if SS:
                # the scores of the consumer's query half; sacc and dpacc hold the dQ blocks
                scr = T.alloc_local((NSS,), "float32")
                dscr = T.alloc_local((NSS,), "float32")
            else:
                scr = sacc
                dscr = dpacc
            lq = T.alloc_local((NSS // 2,), "float32")  # a thread's query columns' LSE2, then Delta * scale
            dk = T.alloc_local((ND,), "float32")
            dv = T.alloc_local((ND,), "float32")
            pk = T.alloc_local((NSS // 2, 1), "uint32")   # P^T packed: dV's A fragment (score_split: its shared copy)
            dsk = T.alloc_local((NSS // 2, 1), "uint32")  # dS^T packed: dK's A fragment and dS^T's shared copy
            sv_ = scr.view(1, 1, 64, QH, layout=L_ACCS)
            dpv = dscr.view(1, 1, 64, QH, layout=L_ACCS)
            qv = sacc.view(1, 1, 64, 64, layout=L_ACCQ)
            if SPLITD:
                qv1 = dpacc.view(1, 1, 64, 64, layout=L_ACCQ)  # the consumer's second dQ block
            dkv = dk.view(1, 1, 64, DA, layout=L_ACCD)
            dvv = dv.view(1, 1, 64, DA, layout=L_ACCD)
            if RS:
                pv = pk.view(1, QH // 16, 64, 8, layout=L_P)
                dsv = dsk.view(1, QH // 16, 64, 8, layout=L_P)
            for i in T.unroll(ND):
                dk[i] = 0.0
                dv[i] = 0.0
            krow = KROWS * c + 16 * w + lane // 4     # this lane's first key row in the block; the other is + 8
            if SS:
                q0 = QH * c                           # the consumer's first query of a tile in its scores
            key0 = kb * BK + krow
            tq = tid % 128
            gdq = dQ.view(B * H * NQT * DQB, BM * 64)       # the tiled accumulator: a block a (bh, tile, 64 columns)
            if not SPLITD:
                sdqp = sdq.view(CONS, NQ // 2, 128, 2)      # (consumer, register pair, warpgroup thread, 2)
            if DQC:
                part = T.alloc_local((NQ,), "float32")       # consumer 0's partial dQ, read by consumer 1
            if SPLIT:
                got = T.alloc_local((1,), "int32")          # thread 128's count of the item's pieces done before
                npc = 0                                     # pieces done
                newp = 1
                pq = qt                                     # the piece's first tile
            else:
                T.cuda.tile.apply(T.ptx[WAIT], kvbar, 0)
            for j in range(ntiles):
                st = j % STG
                if SPLIT:
                    if newp == 1:
                        bh = item // NKB
                        kb = item % NKB
                        bhk = (bh // H) * HK + (bh % H) // GROUP
                        key0 = kb * BK + krow
                        pq = qt
                        T.cuda.tile.apply(T.ptx[WAIT], kvbar, npc % 2)
                else:
                    qt = qt0 + j
                T.cuda.tile.apply(T.ptx[WAIT], full[st:st + 1], (j // STG) % 2)
                # S^T and dP^T: two groups, dP^T on the tensor cores while P^T is computed
                T.cuda.tile.apply(T.ptx[FENCE], sv_, dpv, scope="warpgroup")
                for d in T.unroll(DH):
                    if SS:
                        T.cuda.tile.apply(T.ptx[MMA_S], sv_, ak[d, c], bq[st, d, c], scope="warpgroup", scale_d=d > 0)
                    else:
                        T.cuda.tile.apply(T.ptx[MMA_S], sv_, ak[d, c], bq[st, d], scope="warpgroup", scale_d=d > 0)
                T.cuda.tile.apply(T.ptx[COMMIT], sv_, scope="warpgroup")
                for d in T.unroll(DH):
                    if SS:
                        T.cuda.tile.apply(T.ptx[MMA_S], dpv, av[d, c], bo[st, d, c], scope="warpgroup", scale_d=d > 0)
                    else:
                        T.cuda.tile.apply(T.ptx[MMA_S], dpv, av[d, c], bo[st, d], scope="warpgroup", scale_d=d > 0)
                T.cuda.tile.apply(T.ptx[COMMIT], dpv, scope="warpgroup")
                T.cuda.tile.apply(T.ptx[WAITG], 1, sv_, scope="warpgroup")
                # mask ragged keys (the last key block) and (causal) keys after the query (the tiles crossing the
                # block's diagonal): element i is key key0 + 8((i//2)%2), query qt * BM + q0 + 8(i//4) + 2(l%4) + i%2
                # (q0: the consumer's first query of the tile, QH c with score_split, else 0).
                # (One loop with a uniform branch, not a loop of masked tiles and one of the others: the
                # interpreter runs its blocks in lockstep, and blocks in different loops would wait on each other)
                need = False
                if ragged_k:
                    need = kb == NKB - 1
                if causal:
                    need = need or qt * BM < kb * BK + BK - 1
                if need:
                    kd = key0 - qt * BM - 2 * (lane % 4)
                    if SS:
                        kd = kd - q0
                    kn = NK - key0
                    for i in T.unroll(NSS):
                        off = 8 * (i // 4) + i % 2
                        rh8 = 8 * ((i // 2) % 2)
                        if causal:
                            scr[i] = NEG if (rh8 >= kn or off - rh8 < kd) else scr[i]
                        else:
                            scr[i] = NEG if rh8 >= kn else scr[i]
                # P^T = ex2(s * C - LSE2[query]): the exponent as one fma (tiledsl never contracts a * b - c itself)
                # (a thread's 16 query columns' LSE2 read first, as pairs: the fma calls in between would split
                # the reads into 32 scalar ones)
                sx = scr.view(NSS, 1)
                for k in T.unroll(NSS // 2):
                    # (q0 enters only score_split's kernels: an offset of 0 renumbered the others' PTX registers)
                    if SS:
                        lq[k] = sl[st, 0, q0 + 8 * (k // 2) + 2 * (lane % 4) + k % 2]
                    else:
                        lq[k] = sl[st, 0, 8 * (k // 2) + 2 * (lane % 4) + k % 2]
                for i in T.unroll(NSS):
                    T.cuda.tile.apply(T.ptx["fma.rn.f32"], sx[i], sx[i], C, -lq[2 * (i // 4) + i % 2])
                T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], scr.view(NSS, 1), scr.view(NSS, 1))
                T.cuda.tile.apply(T.ptx[WAITG], 0, dpv, scope="warpgroup")
                # dS^T = P^T (dP^T - Delta[query]) * scale; then P^T and dS^T packed (dV and dK are issued once
                # both are: P^T's float32 registers and an in-flight P^T fragment are never live at once)
                # as P^T (dP^T * scale - Delta * scale): one fma and one multiply a score (the 16 Delta * scale of a
                # thread's query columns are formed once a tile, not once per score)
                dx = dscr.view(NSS, 1)
                for k in T.unroll(NSS // 2):
                    if SS:
                        lq[k] = sl[st, 1, q0 + 8 * (k // 2) + 2 * (lane % 4) + k % 2] * SC
                    else:
                        lq[k] = sl[st, 1, 8 * (k // 2) + 2 * (lane % 4) + k % 2] * SC
                for i in T.unroll(NSS):
                    T.cuda.tile.apply(T.ptx["fma.rn.f32"], dx[i], dx[i], SC, -lq[2 * (i // 4) + i % 2])
                    dscr[i] = scr[i] * dscr[i]
                T.cuda.tile.apply(T.ptx[CVT], pk, scr.view(NSS // 2, 2)[:, 1:2], scr.view(NSS // 2, 2)[:, 0:1])
                T.cuda.tile.apply(T.ptx[CVT], dsk, dscr.view(NSS // 2, 2)[:, 1:2], dscr.view(NSS // 2, 2)[:, 0:1])
                if SSOWN:
                    # dV += P^T dO and dK += dS^T Q over the consumer's own queries, A from its registers (the other
                    # half after the barrier, from the other consumer's shared copies)
                    T.cuda.tile.apply(T.ptx[FENCE], dvv, pv, dkv, dsv, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx[MMA_D], dvv, pv, bto[st, c, :, QS * c:QS * c + QS], scope="warpgroup",
                                      trans_b=1)
                    T.cuda.tile.apply(T.ptx[MMA_D], dkv, dsv, btq[st, c, :, QS * c:QS * c + QS], scope="warpgroup",
                                      trans_b=1)
                    T.cuda.tile.apply(T.ptx[COMMIT], dvv, pv, dkv, dsv, scope="warpgroup")
                if not SS:
                    # dV += P^T dO
                    T.cuda.tile.apply(T.ptx[FENCE], dvv, pv, scope="warpgroup")
                    if SPLITD:
                        T.cuda.tile.apply(T.ptx[MMA_D], dvv, pv, bto[st, c], scope="warpgroup", trans_b=1)
                    else:
                        T.cuda.tile.apply(T.ptx[MMA_D], dvv, pv, bto[st], scope="warpgroup", trans_b=1)
                    T.cuda.tile.apply(T.ptx[COMMIT], dvv, pv, scope="warpgroup")
                    # dK += dS^T Q
                    T.cuda.tile.apply(T.ptx[FENCE], dkv, dsv, scope="warpgroup")
                    if SPLITD:
                        T.cuda.tile.apply(T.ptx[MMA_D], dkv, dsv, btq[st, c], scope="warpgroup", trans_b=1)
                    else:
                        T.cuda.tile.apply(T.ptx[MMA_D], dkv, dsv, btq[st], scope="warpgroup", trans_b=1)
                    T.cuda.tile.apply(T.ptx[COMMIT], dkv, dsv, scope="warpgroup")
                # dS^T to shared memory: word 4 kk + r of dsk is key row krow + 8(r%2), word 4(2kk + r//2) + l%4
                buf = j % 2
                if SS:
                    # each consumer's query half of dS^T and of P^T (query words QH / 2 c ..): both are read whole
                    # by dV's and dK's wgmmas after the barrier
                    for x in T.unroll(NSS // 2):
                        stds[buf, krow + 8 * (x % 2), q0 // 2 + 4 * (x // 2) + lane % 4] = dsk[x, 0]
                        stpt[buf, krow + 8 * (x % 2), q0 // 2 + 4 * (x // 2) + lane % 4] = pk[x, 0]
                elif SPLITD:
                    # both consumers hold all of dS^T: each stores half its words (queries 32c .. 32c + 31); the
                    # register indices stay compile-time constants
                    if c == 0:
                        for x in T.unroll(NS // 4):
                            stds[buf, krow + 8 * (x % 2), 4 * (x // 2) + lane % 4] = dsk[x, 0]
                    else:
                        for x in T.unroll(NS // 4):
                            stds[buf, krow + 8 * (x % 2), 4 * (x // 2 + NS // 8) + lane % 4] = dsk[x + NS // 4, 0]
                else:
                    for x in T.unroll(NS // 2):
                        stds[buf, krow + 8 * (x % 2), 4 * (x // 2) + lane % 4] = dsk[x, 0]
                # the wgmma (async proxy) reads what these generic stores wrote; both consumers' halves present.
                # The barrier also orders this tile's dQ staging (below) after the TMA unit's read of the previous
                # tile's: the thread that issued that reduction waits for the read first (long done by now)
                T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
                if tq == 0:
                    T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)
                    if SPLITD:
                        # the TMA unit has read the last tile's dQ blocks out of its stage: the stage is free.
                        # (Released earlier, right after this tile's S^T and dP^T are issued, the backward ran
                        # 5-9% slower on the H100, session 44: the read's wait then holds the warpgroup before P^T)
                        if j > 0:
                            T.cuda.tile.apply(T.ptx[ARRIVE], empty[(j + STG - 1) % STG:(j + STG - 1) % STG + 1])
                if SPLITD:
                    T.cuda.tile.apply(T.ptx["bar.sync"], DQ_BAR, 128 * CONS)
                    if SS:
                        # dV += P^T dO and dK += dS^T Q, A from the shared copies: over the tile's 64 queries, or
                        # with "own" over the other consumer's half
                        o = 0
                        if SSOWN:
                            o = QS * (1 - c)
                        T.cuda.tile.apply(T.ptx[FENCE], dvv, dkv, scope="warpgroup")
                        T.cuda.tile.apply(T.ptx[MMA_D], dvv, apt[buf, :, o:o + NQS], bto[st, c, :, o:o + NQS],
                                          scope="warpgroup", trans_b=1)
                        T.cuda.tile.apply(T.ptx[MMA_D], dkv, adst[buf, :, o:o + NQS], btq[st, c, :, o:o + NQS],
                                          scope="warpgroup", trans_b=1)
                        T.cuda.tile.apply(T.ptx[COMMIT], dvv, dkv, scope="warpgroup")
                    # dQ[:, 128c .. 128c + 127] of this tile = dS K[:, 128c ..] over the block's 64 keys, two blocks:
                    # the second is issued once dV and dK are done (P^T's and dS^T's fragments free: both blocks
                    # beside them serialize the wgmmas for want of registers) and runs while the first is staged
                    T.cuda.tile.apply(T.ptx[FENCE], qv, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx[MMA_Q], qv, ads[buf], btk[2 * c], scope="warpgroup", scale_d=0,
                                      trans_a=1, trans_b=1)
                    T.cuda.tile.apply(T.ptx[COMMIT], qv, scope="warpgroup")
                elif DQB == 2:
                    T.cuda.tile.apply(T.ptx["bar.sync"], DQ_BAR, 128 * CONS)
                    # dQ[:, 64c .. 64c + 63] of this tile = dS K[:, 64c ..] over the block's BK keys
                    T.cuda.tile.apply(T.ptx[FENCE], qv, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx[MMA_Q], qv, ads[buf], btk[c], scope="warpgroup", scale_d=0, trans_a=1,
                                      trans_b=1)
                else:
                    # D = 64: this consumer's share of dQ = dS[:, its keys] K[its keys, :], which reads only what its
                    # own warpgroup wrote: its own barrier (the other consumer runs on)
                    own_barrier(c)
                    T.cuda.tile.apply(T.ptx[FENCE], qv, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx[MMA_Q], qv, ads[buf, c], btk[c], scope="warpgroup", scale_d=0, trans_a=1,
                                      trans_b=1)
                if SPLITD:
                    if not RS:
                        if DQO:
                            T.cuda.tile.apply(T.ptx[WAITG], 1, dvv, dkv, scope="warpgroup")
                        else:
                            T.cuda.tile.apply(T.ptx[WAITG], 0, qv, dvv, dkv, scope="warpgroup")
                    elif DQO:
                        # dV and dK done (P^T's and dS^T's fragments free), the first dQ block still running
                        T.cuda.tile.apply(T.ptx[WAITG], 1, dvv, pv, dkv, dsv, scope="warpgroup")
                    else:
                        T.cuda.tile.apply(T.ptx[WAITG], 0, qv, dvv, pv, dkv, dsv, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx[FENCE], qv1, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx[MMA_Q], qv1, ads[buf], btk[2 * c + 1], scope="warpgroup", scale_d=0,
                                      trans_a=1, trans_b=1)
                    T.cuda.tile.apply(T.ptx[COMMIT], qv1, scope="warpgroup")
                else:
                    T.cuda.tile.apply(T.ptx[COMMIT], qv, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx[WAITG], 0, qv, dvv, pv, dkv, dsv, scope="warpgroup")
                    # the warp's wgmmas have read stage st: release it (one arrive per warp)
                    if lane == 0:
                        T.cuda.tile.apply(T.ptx[ARRIVE], empty[st:st + 1])
                # dQ (register pair p of thread tq at floats 2 (128 p + tq)) to the staging buffer, visible to the
                # TMA unit, the warpgroup's 128 threads present; then one thread adds the block into the
                # accumulator. Rows past N come from zero Q and dO rows: zeros, never read back
                if SPLITD:
                    # in the stage's Q and dO columns 128c ..: read by this consumer's dK and dV only since the
                    # barrier above (both consumers' S^T and dP^T were done before it)
                    if DQO:
                        T.cuda.tile.apply(T.ptx[WAITG], 1, qv, scope="warpgroup")
                    if SS:
                        # dV's and dK's wgmmas, issued after the dS^T barrier, read these columns for the whole
                        # warpgroup: a thread's wait_group orders only its own warp after them, the warpgroup's
                        # barrier every warp
                        own_barrier(c)
                    T.cuda.tile.apply(T.ptx["st.shared.v2.f32"], sqp[st, c, :, tq], sacc.view(NQ // 2, 2))
                    T.cuda.tile.apply(T.ptx[WAITG], 0, qv1, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx["st.shared.v2.f32"], sop[st, c, :, tq], dpacc.view(NQ // 2, 2))
                elif DQC:
                    # D = 64, dq_combine: consumer 0 stages its partial dQ for consumer 1 (once consumer 1 has read
                    # the last one), which adds it to its own and stages the sum; one reduction a tile, not two
                    if c == 0:
                        if j > 0:
                            T.cuda.tile.apply(T.ptx["bar.sync"], COMBINE_EMPTY_BAR, 128 * CONS)
                        T.cuda.tile.apply(T.ptx["st.shared.v2.f32"], sdqp[0, :, tq], sacc.view(NQ // 2, 2))
                        T.cuda.tile.apply(T.ptx["bar.arrive"], COMBINE_FULL_BAR, 128 * CONS)
                    else:
                        T.cuda.tile.apply(T.ptx["bar.sync"], COMBINE_FULL_BAR, 128 * CONS)
                        T.cuda.tile.apply(T.ptx["ld.shared.v2.f32"], part.view(NQ // 2, 2), sdqp[0, :, tq])
                        if j < ntiles - 1:
                            T.cuda.tile.apply(T.ptx["bar.arrive"], COMBINE_EMPTY_BAR, 128 * CONS)
                        for i in T.unroll(NQ):
                            sacc[i] = sacc[i] + part[i]
                        T.cuda.tile.apply(T.ptx["st.shared.v2.f32"], sdqp[1, :, tq], sacc.view(NQ // 2, 2))
                        staged(1)
                        if tq == 0:
                            T.cuda.tile.apply(T.ptx[REDUCE], gdq[bh * NQT + qt], sdq[1], copy_bytes=DQ_BYTES)
                            T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
                else:
                    T.cuda.tile.apply(T.ptx["st.shared.v2.f32"], sdqp[c, :, tq], sacc.view(NQ // 2, 2))
                if not DQC:
                    staged(c)
                    if tq == 0:
                        if SPLITD:
                            at = (bh * NQT + qt) * DQB + 2 * c
                            T.cuda.tile.apply(T.ptx[REDUCE], gdq[at], sqb[st, c], copy_bytes=DQ_BYTES)
                            T.cuda.tile.apply(T.ptx[REDUCE], gdq[at + 1], sob[st, c], copy_bytes=DQ_BYTES)
                        elif DQB == 2:
                            T.cuda.tile.apply(T.ptx[REDUCE], gdq[(bh * NQT + qt) * CONS + c], sdq[c],
                                              copy_bytes=DQ_BYTES)
                        else:
                            T.cuda.tile.apply(T.ptx[REDUCE], gdq[bh * NQT + qt], sdq[c], copy_bytes=DQ_BYTES)
                        T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
                if SPLIT:
                    if qt == NQT - 1 or j == ntiles - 1:
                        # the piece's last tile: its K and V are free for the next piece's (the wgmmas that read
                        # them are done)
                        if lane == 0:
                            T.cuda.tile.apply(T.ptx[ARRIVE], kvfree)
                        finish_piece(W, F, dK, dV, dk, dv, key0, bhk, lane, tid, item, xs, kb, pq, qt,
                                     T.min(npc, 1), sflag, got)
                        for i in T.unroll(ND):
                            dk[i] = 0.0
                            dv[i] = 0.0
                        npc = npc + 1
                    qt = qt + 1
                    newp = 0
                    if qt == NQT:
                        xs = xs + NQT - first_tile(kb)
                        item = item + 1
                        qt = first_tile(item % NKB)
                        newp = 1
            if not SPLIT:
                # epilogue
                if TMA_KV:
                    store_kv_staged(dK, dV, dk, dv, sk, sv, c, w, tq, bhk, kb)
                else:
                    if SPLITD:
                        store_kv(dK, dV, dk, dv, key0, bhk, lane, DA * c)
                    else:
                        store_kv(dK, dV, dk, dv, key0, bhk, lane, 0)
            # the last dQ reduction has completed (its writes made) before the kernel ends
            if tq == 0:
                T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group"], 0)

    if SPLIT:
        @tiledsl.jit
        def attention_bwd_fa3_split(Q: T.TensorMap((B * H, N, D), dtype, box=(1, BM, 64), swizzle=128),
                                    K: T.TensorMap((B * HK, NK, D), dtype, box=(1, BK, 64), swizzle=128),
                                    V: T.TensorMap((B * HK, NK, D), dtype, box=(1, BK, 64), swizzle=128),
                                    dO: T.TensorMap((B * H, N, D), dtype, box=(1, BM, 64), swizzle=128),
                                    LSE2: T.Tensor((B * H, NP), "float32"), Delta: T.Tensor((B * H, NP), "float32"),
                                    dQ: T.Tensor((B * H * NP, D), "float32"), dK: T.Tensor(kv_shape, acc_t),
                                    dV: T.Tensor(kv_shape, acc_t), W: T.Tensor((2 * NSP, SLOT), "float32"),
                                    F: T.Tensor((NSPLIT,), "int32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=NDP + NSP, block=THREADS, max_registers=CAP))
            bwd(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, W, F)
        kernel = attention_bwd_fa3_split
        kernel.slots, kernel.counters = (2 * NSP, SLOT), NSPLIT
    else:
        @tiledsl.jit
        def attention_bwd_fa3(Q: T.TensorMap((B * H, N, D), dtype, box=(1, BM, 64), swizzle=128),
                              K: T.TensorMap((B * HK, NK, D), dtype, box=(1, BK, 64), swizzle=128),
                              V: T.TensorMap((B * HK, NK, D), dtype, box=(1, BK, 64), swizzle=128),
                              dO: T.TensorMap((B * H, N, D), dtype, box=(1, BM, 64), swizzle=128),
                              LSE2: T.Tensor((B * H, NP), "float32"), Delta: T.Tensor((B * H, NP), "float32"),
                              dQ: T.Tensor((B * H * NP, D), "float32"), dK: KV_ANN, dV: KV_ANN):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=NKB * B * H, block=THREADS, max_registers=CAP))
            bwd(Q, K, V, dO, LSE2, Delta, dQ, dK, dV, None, None)
        kernel = attention_bwd_fa3
        kernel.slots, kernel.counters = None, 0
    kernel.tma_kv = TMA_KV
    kernel.tile = (BK, BM)
    _KERNELS[key] = kernel
    return kernel


def kv_arg(x, kernel):
    """dK or dV as the kernel takes it: the tensor, or with tma_kv its (B * H_kv, N_kv, D) view (a tensor map's)."""
    return x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3]) if kernel.tma_kv else x


def make_cast_dq(dtype, BH, N, D=128):
    """dq (BH * N, D) in `dtype` (round to nearest even) from the main kernel's tiled float32 accumulator
    (BH * NP, D): the block of (bh, query tile, consumer c) holds register i of warpgroup thread t = 32 w + l
    (query row 16 w + l // 4 + 8 ((i // 2) % 2) of the tile, column 64 c + 8 (i // 4) + 2 (l % 4) + i % 2) at
    float 2 (128 (i // 2) + t) + i % 2. Eight output columns 8 g .. 8 g + 7 of a row are then eight consecutive
    floats (threads t0 .. t0 + 3 of one register pair), so a thread writes 8 outputs (one 16-byte store: a warp's
    are 512 contiguous bytes) from two 16-byte loads."""
    key = ("cast_dq", dtype, BH, N, D)
    if key in _KERNELS:
        return _KERNELS[key]
    NQT = -(-N // BM)
    DQB = D // 64                       # 64-column blocks a tile
    G = D // 8                          # 8-column groups a row
    n8 = BH * N * G
    NB = -(-n8 // 256)

    @tiledsl.jit
    def attention_bwd_cast_dq(X: T.Tensor((BH * NQT * BM * G, 8), "float32"), Y: T.Tensor((n8, 8), dtype)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=NB, block=256))
        i = T.cuda.block_id() * 256 + T.cuda.thread_id()
        if i < n8:
            r = i // G
            g = i % G
            bh = r // N
            n = r % N
            m = n % BM                  # the row in its query tile: warp m // 16, lanes 4 (m % 8) .. + 3
            p = 2 * (g % 8) + (m % 16) // 8
            t0 = 32 * (m // 16) + 4 * (m % 8)
            src = ((bh * NQT + n // BM) * DQB + g // 8) * (BM * 64 // 8) + (128 * p + t0) // 4
            cast_row8(X, src, Y, i, dtype)

    _KERNELS[key] = attention_bwd_cast_dq
    return attention_bwd_cast_dq
