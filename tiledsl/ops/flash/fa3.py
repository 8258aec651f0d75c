"""FlashAttention forward, FA3 style, on Hopper (sm_90a), written only in the kernel language: TMA + wgmma +
an mbarrier ring + warp specialisation (the idioms of tiledsl/ops/gemm/hopper.py).

attention_hopper(q, k, v, causal=False, scale=None) -> (O, LSE), the contract of forward.py's
`attention`: (B, H, N, D) tensors, f16 or bf16, D in {64, 128, 256}, any N (ragged tails masked), grouped-query
attention (k and v with H_kv heads, H_kv dividing H), causal top-left aligned, LSE float32 in natural log.

One block owns BM = 64 * CONSUMERS query rows of one (batch, head), with 1 + CONSUMERS warpgroups:

  * warpgroup 0 is the producer: it gives registers back (`setmaxnreg.dec`) and one thread of its first warp
    (`elect.sync`) loads Q once, then the key and value tiles (BN rows) through the TMA unit into a STAGES-deep
    ring. Each stage has a "full" mbarrier for K and another for V (so S = Q K^T starts before V lands) and one
    "empty" mbarrier the consumers release once P V of the stage is done. The tensors are 3-d tensor maps
    (B * H, N, D) (the launcher passes q.reshape(B * H, N, D)): a box never crosses into the next head, so the
    rows past N arrive as the unit's zero fill.
    A row of 128 bytes is the widest the 128-byte swizzle takes, so D is loaded as D / 64 boxes of 64 columns;
  * warpgroups 1..CONSUMERS are consumers (`setmaxnreg.inc`), 64 query rows each:
      - S = Q K^T: wgmma m64nBNk16 with Q and K both from shared memory, both K-major (D / 64 calls of 4 K steps,
        one per 64-column box), f32 accumulators in registers;
      - the online softmax on the accumulator layout (register i of a thread holds row 16w + l//4 + 8((i//2)%2),
        column 8(i//4) + 2(l%4) + i%2): the row max over the thread's registers and the 4 lanes of the row
        (shfl.sync.bfly), exponentials ex2.approx of s * scale * log2(e) - m * scale * log2(e) in one fma; with
        poly (config[5] > 0) that many of a thread's exponentials per tile are a polynomial on the FMA pipe
        instead (tiledsl/lib/exp2_fma.py), so MUFU and the FMA units share them;
      - P converted to f16x2/bf16x2 in registers: the pairs of S's accumulators are, in order, the words of
        wgmma's A fragment (the "rs" form), so O += P V needs no shared memory for P;
      - O += P V: wgmma m64nDk16 with V from shared memory as B. V's tile is (BN keys, D) row-major: MN-major
        for B, which the transpose bit (trans_b) reads directly;
      - with overlap (config[3] = 1, the default) the loop runs, for tile j: issue S_{j+1} = Q K_{j+1}^T, rescale
        O, issue O += P_j V_j, wait for S_{j+1} only (wgmma.wait_group 1: groups retire in order) and run its
        softmax while P_j V_j is on the tensor cores, then wait for P_j V_j and convert P_{j+1}; without it every
        wgmma group is waited for at once;
      - with ping-pong (config[4] = 1; FA3's schedule between warpgroups) the consumers take turns on the tensor
        cores: a turn is the wgmma groups of one step (S_0; then S_{j+1} and P_j V_j; then the last P V), and
        consumer c issues its turn only after `bar.sync 1 + c, 256` and hands over with `bar.arrive` on the next
        consumer's barrier, so one consumer's softmax runs while the other's groups are on the tensor cores (the
        last consumer arrives once on barrier 1 at the start, and not after its last turn: every phase is a
        sync of 128 threads and an arrive of 128). Without overlap each turn issues S_{j+1} and P_j V_j together
        and waits for both;
  * causal: tiles above the diagonal are never loaded, the crossing tiles masked; ragged N_kv: the zero-filled
    keys are masked to -inf; rows past N are computed on zeros and not stored;
  * lazy rescale (config[8] = 1, the defaults; FA4's): a row's running max moves only when a tile's scores pass it
    by more than 2^8 (LAZY_BITS in the log2 domain), so on most tiles al is exactly 1 for every row of a thread
    and its O rescale (D / 2 multiplies) is branched over; P is then up to 2^8, and O and the row sums, which share
    the stale max, divide out as before;
  * the epilogue divides O by the row sum, stores O (st.global of f16x2/bf16x2 words) and LSE; with tma_o
    (config[10] = 1) each consumer instead writes O by stmatrix into its own 64 rows of Q's buffer (its last S has
    read them; no other warpgroup reads them), meets its warps on a named barrier (1 + CONSUMERS + c, after a
    proxy fence) and one thread stores the D / 64 boxes through the TMA unit, which writes whole rows and drops
    those past N: 4 stmatrix.x4 and one TMA store a warp per 64 columns where st.global takes 16 instructions of 8
    rows x 16 bytes each;
  * align (config[9] = 1): query block qb starts at row qb * BM - (NQB * BM - N), so the last block ends at row N
    and the ragged one is the first (its rows below 0 arrive as zeros and are not stored). Causal, a block walks
    the key tiles up to its last row: the ragged block is then a head's cheapest instead of its dearest (D = 64,
    BM = 192, N = 4096: 363 key tiles a head instead of 384). A row sees the same tiles on the same numbers either
    way (the extra ones are fully masked), so O and LSE are the same to the bit. With tma_o too, N must be a
    multiple of 64: a consumer's box wholly below row 0 is skipped, and one straddling it would have to be stored
    from below 0, which the TMA unit faults on (measured, H200);
  * persistent (config[6] = 1; FA3's persistent tile scheduler): a grid of min(SMs, work items) blocks, each
    walking its (batch * head, query block) items in a static order (fa3_parts.work_item says which
    and why), so a block's start (launch, barrier set-up, setmaxnreg) is paid once and an item's epilogue overlaps
    the next item's loads. The ring's stage and phase follow a running count of the block's tiles (no re-init);
    Q's barrier alternates its phase per item, and the producer loads the next Q only once every consumer warp
    has arrived on a "Q free" barrier after its item's last S = Q K^T retired; the ping-pong turns run on from
    item to item. With config[6] = 2 the blocks draw their items from a counter in global memory instead (FA3's
    dynamic scheduler), in the one-block-per-item grid's order; the producer publishes each item's number in
    shared memory with Q's barrier.

On the interpreter the producer and the consumers run as fibers (interpreter/fibers.py) that hand over at their
mbarrier waits, so the ring turns there as on the GPU; with ping-pong each consumer warpgroup is its own fiber, so
their turns alternate there too.
"""
import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, wid_in_wg

from ...lib.producer import consumer_registers, warpgroup_index
from ...lib.staging import staging_layouts
from ..device import NUM_SMS, sm_count
from .common import check_qkv, key_tiles, softmax_scale
from .fa3_parts import forward_parts

LOG2E = 1.4426950408889634
SW128 = (3, 3, 3)           # 16-byte chunk c of 128-byte row r at chunk c ^ (r % 8), in 16-bit elements
PRODUCER_REGS, CONSUMER_REGS = 24, 240
SMEM_LIMIT = 232448         # bytes of shared memory one block may use on sm_90 (227 KB)

# (consumers, BN, stages, overlap[, pingpong]) per head dim: BM = 64 * consumers query rows per block
# measured on the H200 (benchmarks/attention.py --configs fa3all --quick, f16, N = 4096, 2026-12-01, assembled by
# ptxas): ping-pong between the two consumers wins at D = 128 (3 stages, serial within a warpgroup: 616 TFLOP/s
# non-causal, 493 causal, against 526 / 462 without ping-pong) and at D = 64 (4 stages with overlap: 422 / 379
# against 386 / 341); at D = 256 the serial schedule without ping-pong (540 / 468; BN = 80 reaches 577 / 498 but
# spills 12 bytes non-causal)
# D = 128 since 2026-12-01 (session 25): (2, 128, 3, 1, 1), overlap and ping-pong, against (2, 128, 3, 0, 1),
# side by side with cuDNN (f16 / bf16; N = 4096 non-causal, causal, N = 16384 non-causal, causal): 569 / 497 /
# 583 / 584 against 558 / 489 / 572 / 568 (f16), 582 / 503 / 613 / 603 against 571 / 509 / 602 / 577 (bf16)
# Since session 26 (2026-12-01) the default depends on causal too (default_config). H200, f16, side by side with
# cuDNN (benchmarks/attention.py --rounds 5; N = 4096 non-causal, causal, N = 16384 non-causal, causal):
#   D = 64: three consumers (BM = 192) with a 4-deep ring, 463 / 380 / 491 / 462 TFLOP/s against 411 / 362 / 423 /
#     416 for (2, 128, 4, 1, 1) (cuDNN 423 / 392 / 434 / 406): a third warpgroup's GEMMs run under the others'
#     softmax, whose exponentials (MUFU) cost about as much as the GEMMs at this head dim;
#   D = 128: the persistent grid non-causal (550 / 569 against 543 / 562; 577 / 593 against 549 / 578 in another
#     run: at N = 4096 the 2048 blocks are 15.5 waves, the last half empty), one block per item causal (483 / 573
#     against 443 / 535 persistent; why the causal walk is slower is open: its model balances the waves to 1.004);
#   D = 256: BN = 80 with ping-pong, K freed by its S (572 / 499 / 598 / 594 against 557 / 484 / 593 / 595 for
#     (2, 80, 2, 1, 0, 0, 0, 1) in the same run; (2, 64, 2, 0), the earlier default, made 524-536 / 462-470 / 553
#     / 536 in this session's other runs).
# Since session 27 (2026-12-01) every default takes the lazy rescale (config[8] = 1, FA4's: a row's max moves only
# by more than 2^8, so O's D / 2 multiplies a thread and tile run only on the tiles where one of its rows moved).
# H200, f16, side by side, two runs (--rounds 3 and 5), lazy against eager, the same order of shapes:
#   D = 64: 463 / 399 / 503 / 466 against 458 / 388 / 499 / 464; 473 / 399 / 518 / 477 against 470 / 389 / 511 / 459;
#   D = 128 (causal, one block per item): 506 / 593 against 468 / 573; 520 / 600 against 503 / 597;
#   D = 128 (non-causal, persistent): 592 / 625 against 638 / 589; 591 / 610 against 569 / 592;
#   D = 256: 603 / 521 / 649 / 641 against 632 / 532 / 638 / 603; 599 / 522 / 638 / 642 against 587 / 508 / 637 / 627
# (19 of 24 comparisons ahead, about 2% on average). The price: a stale max leaves a row's largest probability
# inexact in f16 / bf16 (2^-11 / 2^-9 relative) where the eager rescale makes it exactly 1, so a peaked softmax (O
# about one row of V) errs by up to that much more (tests/test_gpu_attention_hopper.py::test_fa3_lazy_rescale);
# config[8] = 0 keeps the eager rescale. FA3 with poly (the FMA-pipe exponentials) at three consumers: slower
# (446 / 379 / 481 / 448 with poly 8, 423 / 359 / 452 / 426 with 16, against 470 / 389 / 511 / 459).
# tma_o (O through the TMA store) and, causal at D = 64, align (the ragged query block first), side by side with
# the st.global epilogue (fa3epi, H200, session 29, f16 / bf16 at N = 4096 / 16384): tma_o ahead at D = 128 and
# 256 in 14 of 16 rows (D = 256 bf16 non-causal N = 4096 668 against 626, causal 584 / 555), mixed at D = 64
# non-causal (480-506 against 485-529: kept off); D = 64 causal align 404 / 466 / 409 / 488 and tma_o 400 / 466 /
# 412 / 477 against 395 / 462 / 404 / 483, so both (N a multiple of 64: default_config)
CONFIGS = {64: (3, 128, 4, 1, 1, 0, 0, 0, 1), 128: (2, 128, 3, 1, 1, 0, 1, 0, 1, 0, 1),
           256: (2, 80, 2, 0, 1, 0, 0, 1, 1, 0, 1)}
CAUSAL_CONFIGS = {64: (3, 128, 4, 1, 1, 0, 0, 0, 1, 1, 1), 128: (2, 128, 3, 1, 1, 0, 0, 0, 1, 0, 1),
                  256: (2, 80, 2, 0, 1, 0, 0, 1, 1, 0, 1)}
SUPPORTED_D = tuple(CONFIGS)


def stores_straddle_row_0(config, N: int) -> bool:
    """Whether the full `config` has align and tma_o and N is not a multiple of 64: then a consumer's 64-row O box
    of the first query block straddles row 0, and the TMA unit faults on a store from below 0 (measured, H200)."""
    return config[9:11] == (1, 1) and N % 64 != 0


# Short sequences: (up to N queries, configuration), the first that holds N wins, else CONFIGS / CAUSAL_CONFIGS.
# An item (a head's query block) of N <= 2048 walks at most 16 key tiles, so what a block pays once per item (Q's
# load, the first S before any P V, the epilogue) weighs up to 8x what it does at 16384; and causal items of
# 1-16 tiles leave the one-block grid's last waves ragged. So: a walk over the items (the dynamic one: it takes
# the next item as a block frees), and two Q buffers (double_q), so the next item's Q loads while this one runs
# instead of after its last S. H100, bf16, benchmarks/attention.py --quick --configs fa3short, every candidate side
# by side with cuDNN in one process (TFLOP/s at N = 512 / 1024 / 1536 / 2048, session 42):
#   D = 64, non-causal: dynamic + double_q, 2 consumers 355 / 407 / 415 / 456, 3 consumers 349 / 413 / 476 / 476;
#     the persistent walk (one Q buffer) 341 / 385 / 445 / 443; one block an item, align + tma_o 488 at 2048
#     (cuDNN 362 / 408 / 414 / 422);
#   D = 64, causal (align + tma_o): dynamic + double_q, 2 consumers (BM = 128: no ragged block at these N, and a
#     block's diagonal crosses one key tile, not two) 252 / 329 / 351 / 379, 3 consumers 235 / 323 / 364 / 395;
#     one Q buffer 211-225 / 285-293 / 333-348 / 358-359 (cuDNN 245 / 314 / 348 / 368);
#   D = 128, causal, N <= 512: dynamic + double_q (2 stages: two Q buffers and 3 stages exceed shared memory) 314
#     against 286-298 for the 3-stage walks (cuDNN 297-308); the H200 agrees (bf16 / f16: 316 / 304 against 294 /
#     285 for the 3-stage dynamic walk). Non-causal it loses on the H200 (448 / 434 against 496 / 476 for the
#     3-stage walks), and from N = 1024 the 3-stage defaults lead (double_q at 2 stages 5-20% behind).
SHORT_CONFIGS = {(64, False): ((512, (2, 128, 4, 1, 1, 0, 2, 0, 1, 0, 0, 1)),
                               (1536, (3, 128, 4, 1, 1, 0, 2, 0, 1, 0, 0, 1)),
                               (2048, (3, 128, 4, 1, 1, 0, 0, 0, 1, 1, 1))),
                 (64, True): ((1024, (2, 128, 4, 1, 1, 0, 2, 0, 1, 1, 1, 1)),
                              (2048, (3, 128, 4, 1, 1, 0, 2, 0, 1, 1, 1, 1))),
                 (128, True): ((512, (2, 128, 2, 1, 1, 0, 2, 0, 1, 0, 1, 1)),)}


def default_config(D: int, causal: bool, N: int | None = None) -> tuple:
    """The configuration attention_hopper runs with when none is given: for N queries the first of
    SHORT_CONFIGS[D, causal] that holds N, else CONFIGS[D], or CAUSAL_CONFIGS[D] causal; where its align and tma_o
    would store from below row 0 for N queries (stores_straddle_row_0), align only."""
    config = (CAUSAL_CONFIGS if causal else CONFIGS)[D]
    if N is not None:
        config = next((c for most, c in SHORT_CONFIGS.get((D, bool(causal)), ()) if N <= most), config)
    if N is not None and stores_straddle_row_0(config, N):
        config = config[:10] + (0,) + config[11:]
    return config


# what a benchmark may compare (each passes ptxas -arch=sm_90a without spills, tests/test_attention_hopper.py): 3
# consumers (BM = 192) fit D = 64's registers only (D = 128 spills at 160 per thread); BN = 176 / 192 at D = 128 and
# 80 at D = 256 are FA3's published tile shapes (here 170-200 TFLOP/s at D = 128: slower); overlap = 0 is the serial
# schedule. (BN = 80 at D = 256 spills 12 bytes non-causal; the slow test assembles these causal only.)
CANDIDATES = {64: [(2, 128, 4, 1), (2, 128, 2, 1), (3, 128, 2, 1), (2, 176, 2, 1), (2, 128, 2, 0), (2, 128, 4, 0)],
              128: [(2, 128, 2, 0), (2, 128, 2, 1), (2, 176, 2, 1), (2, 192, 2, 1), (2, 128, 3, 1), (2, 128, 3, 0)],
              256: [(2, 64, 2, 0), (2, 64, 2, 1), (2, 80, 2, 1), (2, 80, 2, 0)]}
# the ping-pong configurations a benchmark may compare (5th entry 1), each with 0 spills causal and not. FA3's
# BN = 176 at D = 128 with ping-pong and overlap, side by side (f16, 2026-12-01): 486 / 415 / 532 / 498 TFLOP/s
# against the default's 543 / 483 / 562 / 573 (BN = 144 / 160 / 192: 483-520 non-causal)
PINGPONG_CANDIDATES = {
    64: [(2, 128, 4, 1, 1), (2, 128, 2, 1, 1), (2, 128, 4, 0, 1), (2, 128, 2, 0, 1), (3, 128, 2, 1, 1),
         (3, 128, 4, 1, 1), (3, 128, 3, 1, 1), (3, 128, 6, 1, 1)],
    128: [(2, 128, 2, 1, 1), (2, 128, 2, 0, 1), (2, 128, 3, 1, 1), (2, 128, 3, 0, 1), (2, 176, 2, 1, 1),
          (2, 176, 2, 0, 1)],
    256: [(2, 64, 2, 1, 1), (2, 64, 2, 0, 1)]}

# the FMA-pipe exponentials (config[5] = poly, tiledsl/lib/exp2_fma.py): MUFU computes 16 exponentials a clock per SM,
# so at D = 64 a tile's 16384 of them take about as long as its two GEMMs; poly of a thread's BN / 2 go through
# the polynomial instead. POLY_UNIT registers (4n .. 4n + 3) are one 8-column block of S. Each candidate assembles
# without spills, causal and not (tests/test_attention_hopper.py); not yet measured on the H200
POLY_UNIT = 4
POLY_CANDIDATES = {
    64: [(2, 128, 4, 1, 1, 16), (2, 128, 4, 1, 1, 32), (2, 128, 4, 0, 1, 16), (2, 128, 4, 0, 1, 32),
         (2, 128, 4, 1, 1, 8), (2, 128, 4, 1, 1, 24)],
    128: [(2, 128, 3, 0, 1, 8), (2, 128, 3, 0, 1, 16)],
    256: []}

# the persistent twins (config[6] = 1: a grid of one block per SM walking the work items, parts.work_item) of the
# defaults and of the fastest candidates, for the benchmark to compare with the one-block-per-item grid; each
# assembles without spills, causal and not (tests/test_attention_hopper.py). H200, f16, side by side with cuDNN,
# with a head's query blocks side by side in the walk: +1-7% at N = 4096 and D = 256, 437 against 564 TFLOP/s at
# D = 128 causal N = 16384; with the causal walk's qb-major order (2026-12-01) still 443 / 535 against 483 / 573 at
# D = 128 causal N = 4096 / 16384. Config[6] = 2 (the last of each list) draws the items in the one-block-per-item
# grid's order from a counter instead (FA3's dynamic scheduler): the balance of the hardware's block scheduler and
# that grid's L2 locality (a head's query blocks side by side; the static causal walk has every head's in flight
# at once, so K and V stream from memory). H200, f16, N = 4096, D = 64, side by side: 472 / 398 TFLOP/s against
# 473 / 391 for one block per item (non-causal / causal); D = 128 (2, 128, 3, 1, 1, 0, 2): 561 / 494 / 580 / 564
# against 554 (persistent) / 500 / 582 (persistent) / 573 for the defaults (N = 4096 non-causal, causal, N = 16384
# non-causal, causal); D = 256 (2, 80, 2, 0, 1, 0, 2, 1): 572 / 471 / 616 / 596 against 609 / 503 / 614 / 600
# (2026-12-01, session 27: the first run after its register split was mended, tiledsl.lib.producer.consumer_registers)
PERSISTENT_CANDIDATES = {
    64: [(2, 128, 4, 1, 1, 0, 1), (2, 128, 4, 1, 0, 0, 1), (2, 128, 4, 1, 1, 16, 1), (3, 128, 4, 1, 1, 0, 1),
         (3, 128, 4, 1, 1, 0, 2)],
    128: [(2, 128, 3, 0, 1, 0, 1), (2, 128, 3, 1, 1, 0, 1), (2, 128, 3, 1, 1, 0, 2)],
    256: [(2, 64, 2, 0, 0, 0, 1), (2, 80, 2, 0, 0, 0, 1), (2, 80, 2, 0, 1, 0, 1, 1), (2, 80, 2, 0, 1, 0, 2, 1)]}

# config[7] = early_k (a stage's K released once the S that read it has retired, not with V after P V), the twins
# of the defaults and of the persistent candidates; each assembles without spills or serialised wgmma, causal and
# not (tests/test_attention_hopper.py); not yet measured on the H200
EARLY_K_CANDIDATES = {
    64: [(2, 128, 4, 1, 1, 0, 0, 1), (2, 128, 4, 1, 1, 0, 1, 1), (3, 128, 4, 1, 1, 0, 0, 1)],
    128: [(2, 128, 3, 1, 1, 0, 0, 1), (2, 128, 3, 0, 1, 0, 0, 1), (2, 128, 3, 1, 1, 0, 1, 1),
          (2, 128, 2, 1, 1, 0, 0, 1)],
    256: [(2, 64, 2, 0, 0, 0, 0, 1), (2, 80, 2, 0, 0, 0, 0, 1), (2, 80, 2, 0, 0, 0, 1, 1), (2, 80, 2, 1, 0, 0, 0, 1),
          (2, 80, 2, 0, 1, 0, 0, 1), (2, 80, 2, 1, 1, 0, 0, 1)]}

_KERNELS = {}


def layouts(D: int, bm: int, bn: int, stages: int, consumers: int, dtype: str, qbufs: int = 1) -> dict:
    """Shared memory as the TMA unit writes it and as wgmma reads it (the same bytes), and the register
    fragments (S's and O's accumulators: fa3_parts.acc_layout). Q is (D/64 boxes, BM rows, 64 columns); K
    and V are (stage, D/64 boxes, BN rows, 64 columns). qbufs = 2: two Q buffers, one after the other, each view
    of Q's (tma_q, wg_q and the O staging views) with a leading buffer index."""
    dh, kr = D // 64, bn // 16
    L = {}
    L["tma_q"] = T.tma_layout((dh, 1, bm, 64), dtype, 128) if qbufs == 1 else \
        T.tma_layout((qbufs, dh, 1, bm, 64), dtype, 128)
    L["tma_kv"] = T.tma_layout((stages, dh, 1, bn, 64), dtype, 128)
    # Q as A (ss, K-major): (box, consumer, M rep, K step, 64 rows, 16 k)
    wg_q = ((dh, consumers, 1, 4, 64, 16), (bm * 64, 64 * 64, 1, 16, 64, 1))
    if qbufs > 1:
        wg_q = ((qbufs,) + wg_q[0], (dh * bm * 64,) + wg_q[1])
    L["wg_q"] = TileLayout(S[wg_q[0] : wg_q[1]], swizzle=SW128)
    # K as B (K-major): (stage, box, N rep, K step, BN keys, 16 k)
    L["wg_k"] = TileLayout(S[(stages, dh, 1, 4, bn, 16) : (dh * bn * 64, bn * 64, 1, 16, 64, 1)], swizzle=SW128)
    # V as B (MN-major, trans_b): (stage, N rep, key step, D = (box, 64 columns), 16 keys)
    L["wg_v"] = TileLayout(S[(stages, 1, kr, dh, 64, 16) : (dh * bn * 64, 1, 16 * 64, bn * 64, 1, 64)],
                           swizzle=SW128)
    # P as A (rs): word 4 kk + r -> row 16w + l//4 + 8(r%2), word column 4(r//2) + l%4 of key step kk; this is
    # S's register pair (2p, 2p + 1) for p = 4 kk + r
    L["p"] = TileLayout(S[(1, kr, 4, 2, 8, 2, 4) : (1, 4, 1 @ wid_in_wg, 1, 4 @ laneid, 2, 1 @ laneid)])
    # O staged in Q's buffer (tma_o), consumer c in rows 64c.. of every box (tiledsl/lib/staging.py)
    L["o_words"], L["o_boxes"] = staging_layouts(consumers, dh, bm, qbufs)
    return L


FIELDS = ("consumers", "BN", "stages", "overlap", "pingpong", "poly", "persistent", "early_k", "lazy", "align",
          "tma_o", "double_q")
FORM = ("(consumers, BN, stages, overlap[, pingpong[, poly[, persistent[, early_k[, lazy[, align[, tma_o[, "
        "double_q]]]]]]]]])")
# the on / off fields and what 0 and 1 mean (make_attention_hopper's errors say so)
SWITCHES = {"early_k": ("a stage's K released with its V", "once the S that read it has retired"),
            "lazy": ("O rescaled on every tile", "only when a row's max moves by more than 2^8"),
            "align": ("the first query block starts at row 0", "the last one ends at row N"),
            "tma_o": ("O stored from registers", "through shared memory and the TMA store"),
            "double_q": ("one Q buffer", "two, the next item's Q loaded while this one runs (persistent 1 or 2)")}


def full_config(config) -> tuple:
    """config with the fields it leaves out (the earlier, shorter forms: at least the first 4) as 0: no ping-pong,
    every exponential by ex2.approx, one block per work item, K released with V, O rescaled on every tile, the
    query blocks starting at row 0, O stored from registers."""
    config = tuple(config)
    return config + (0,) * (len(FIELDS) - len(config)) if 4 <= len(config) < len(FIELDS) else config


def smem_bytes(D: int, consumers: int, bn: int, stages: int, qbufs: int = 1) -> int:
    """Shared memory of the Q tile(s) and the K/V ring (the barriers and alignment add under 2 KB)."""
    return 2 * (qbufs * 64 * consumers * D + 2 * stages * bn * D)


def make_attention_hopper(dtype, D, causal, shape, scale, config=None, num_sms=NUM_SMS):
    """The FA3-style forward kernel for `dtype` ("float16"/"bfloat16"), head dim D, causal or not, shape =
    (B, H, H_kv, N, N_kv) and softmax scale `scale`; sm_90a only (wgmma, setmaxnreg).

    config = (consumers, BN, stages, overlap[, pingpong[, poly[, persistent[, early_k[, lazy[, align[, tma_o[,
    double_q]]]]]]]]): consumer warpgroups (BM = 64 each), key/value rows per tile, ring depth, whether S of the
    next tile is issued before the softmax of this one, whether the consumers take turns on the tensor cores (0 when
    left out; 1 takes 2 or 3 consumers), how many of a thread's BN / 2 exponentials per tile the FMA-pipe polynomial
    computes instead of MUFU's ex2.approx (tiledsl/lib/exp2_fma.py; a multiple of POLY_UNIT, 0 when left out), and
    whether a grid of min(num_sms, work items) blocks walks the (batch * head, query block) items (1) or one block
    runs each (0 when left out): the persistent walk pays a block's start (launch, barrier set-up, setmaxnreg) once,
    and overlaps an item's epilogue with the next item's Q and K/V loads; and whether a stage's K is released as
    soon as the S that read it has retired (1; its own mbarrier) rather than with V once P V has (0 when left out),
    so the producer refills K a tile sooner; and whether a row's running max moves only when a tile passes it by
    more than 2^8 (1: O is rescaled only on the tiles where one of a thread's rows moved; common.LAZY_BITS) or on
    every tile (0 when left out); and whether the last query block ends at row N, the ragged one being the first (1:
    its rows below 0 are zeros, computed and not stored; causal, the ragged block is then a head's cheapest, with
    the fewest key tiles, where at 0 it is the dearest, every key tile for its few rows) or the first starts at row
    0 (0 when left out); and whether O leaves through shared memory (1: each consumer writes its rows by stmatrix
    into its own 64 rows of Q, which its last S has finished reading, and one thread's TMA store writes them out
    whole; the block may end as soon as the unit has read them) or by st.global from registers (0 when left out; 8
    rows of 16 bytes an instruction); align with tma_o needs N a multiple of 64; and whether Q has two buffers on
    the persistent walks (double_q 1: item k's Q in buffer k % 2, each with its own Q and Q-free barriers, so the
    producer loads the next item's Q while this one runs; 0 when left out: the next Q waits for this item's last S,
    and with tma_o for its O store, to leave the one buffer). Default: default_config(D, causal, N).
    Arguments: Q (B * H, N, D), K and V (B * H_kv, N_kv, D) (tensor maps: the (B, H, N, D) tensors reshaped), O
    (B, H, N, D) (with tma_o a tensor map of its (B * H, N, D) view: o_arg), LSE (B, H, N) float32."""
    if D not in SUPPORTED_D:
        raise tiledsl.LaunchError(f"attention_hopper supports head dims {', '.join(map(str, SUPPORTED_D))}, got {D}")
    config = full_config(config or default_config(D, causal, shape[3]))
    # the persistent grid's width shapes the walk: part of the key (only there)
    key = (dtype, D, bool(causal), tuple(shape), float(scale), num_sms if config[6:7] in ((1,), (2,)) else None,
           config)
    if key in _KERNELS:
        return _KERNELS[key]
    if dtype not in ("float16", "bfloat16"):
        raise tiledsl.LaunchError(f"attention_hopper supports float16 and bfloat16, not {dtype}")
    if len(config) != len(FIELDS):
        raise tiledsl.LaunchError(f"attention_hopper configuration {config}: {FORM}")
    CONS, BN, STG, OVERLAP, PINGPONG, POLY, PERSIST, EARLY_K, LAZY, ALIGN, TMA_O, DOUBLE_Q = config
    B, H, HK, N, NK = shape
    if H % HK:
        raise tiledsl.LaunchError(f"k/v have {HK} heads, which does not divide q's {H}")
    if CONS not in (1, 2, 3) or BN % 16 or not 16 <= BN <= 256 or STG < 2 or OVERLAP not in (0, 1) or \
            PINGPONG not in (0, 1) or (PINGPONG and CONS < 2) or \
            smem_bytes(D, CONS, BN, STG, 1 + (DOUBLE_Q == 1)) + 2048 > SMEM_LIMIT:
        raise tiledsl.LaunchError(f"attention_hopper configuration {config}: 1 to 3 consumers, BN a multiple of "
                                  f"16 up to 256, at least 2 stages, overlap 0 or 1, pingpong 0 or 1 (1 takes at "
                                  f"least 2 consumers), within {SMEM_LIMIT} bytes of shared memory (Q's tile twice "
                                  f"with double_q)")
    if not isinstance(POLY, int) or POLY < 0 or POLY > BN // 2 or POLY % POLY_UNIT:
        raise tiledsl.LaunchError(f"attention_hopper configuration {config}: poly = {POLY!r} (the exponentials of "
                                  f"a thread's BN / 2 = {BN // 2} per tile computed by the FMA-pipe polynomial) "
                                  f"must be a multiple of {POLY_UNIT} from 0 to {BN // 2}")
    if PERSIST not in (0, 1, 2) or not isinstance(num_sms, int) or num_sms < 1:
        raise tiledsl.LaunchError(f"attention_hopper configuration {config}: persistent = {PERSIST!r} must be 0 "
                                  f"(one block per work item), 1 (a grid of at most num_sms = {num_sms!r} blocks "
                                  f"walking the items in a static order) or 2 (... drawing them from a counter); "
                                  f"num_sms a positive int")
    for name, (zero, one) in SWITCHES.items():
        if config[FIELDS.index(name)] not in (0, 1):
            raise tiledsl.LaunchError(f"attention_hopper configuration {config}: {name} = "
                                      f"{config[FIELDS.index(name)]!r} must be 0 ({zero}) or 1 ({one})")
    if DOUBLE_Q and not PERSIST:
        raise tiledsl.LaunchError(f"attention_hopper configuration {config}: double_q takes the persistent walk "
                                  f"(persistent 1 or 2): one block per item loads one Q")
    QBUFS = 2 if DOUBLE_Q else 1
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    MMA_S = f"wgmma.mma_async.sync.aligned.m64n{BN}k16.f32.{t}.{t}"
    MMA_O = f"wgmma.mma_async.sync.aligned.m64n{D}k16.f32.{t}.{t}"
    CVT = f"cvt.rn.{t}x2.f32"
    BM = 64 * CONS
    THREADS = 128 * (1 + CONS)
    DH, KR = D // 64, BN // 16
    NS = BN // 2                        # f32 accumulators of S per consumer thread
    NQB = -(-N // BM)                   # query blocks per head
    QOFF = (NQB * BM - N) * ALIGN       # align: the first block's rows below 0
    if stores_straddle_row_0(config, N):
        # with N a multiple of 64 each consumer's 64-row box of align's first block lies wholly below row 0 (not
        # stored) or wholly from it; loads from below 0 are zero-filled, stores are not clipped
        raise tiledsl.LaunchError(f"attention_hopper configuration {config}: align and tma_o together need N a "
                                  f"multiple of 64; N = {N} puts row 0 inside a consumer's 64-row box of the first "
                                  f"query block, which the TMA unit cannot store from below row 0: take one of the two")
    NKT = -(-NK // BN)                  # key tiles
    ITEMS = NQB * B * H                 # work items: (batch * head, query block)
    GRID = min(num_sms, ITEMS) if PERSIST else 0            # the persistent grid: no more blocks than items
    GROUP = H // HK
    C = float(scale) * LOG2E            # scores to the log2 domain
    TXQ, TXKV = BM * D * 2, BN * D * 2  # bytes the boxes pay to their barriers
    CAP = min((65536 // THREADS) // 8 * 8, 248)
    # the dynamic walk's producer keeps its item's number and the drawn count besides the static walk's state: 32
    # registers, which leaves two consumers 232 (240 with 24; three consumers 160 either way)
    PREGS = 32 if PERSIST == 2 else PRODUCER_REGS
    CREGS = consumer_registers(THREADS, CAP, CONS, PREGS, CONSUMER_REGS)
    LY = layouts(D, BM, BN, STG, CONS, dtype, QBUFS)
    L_TQ, L_TKV, L_WQ, L_WK, L_WV = LY["tma_q"], LY["tma_kv"], LY["wg_q"], LY["wg_k"], LY["wg_v"]
    L_P, L_OW, L_OB = LY["p"], LY["o_words"], LY["o_boxes"]
    STEP = ((0, 0, 64),)                # the D / 64 boxes of a tile: 64 columns apart

    @tiledsl.inline
    def p_regs():
        """P's registers: S's accumulator pairs as f16x2/bf16x2 words, viewed as wgmma's A fragment (no scratch)."""
        pk = T.alloc_local((NS // 2, 1), "uint32")
        return pk, None, pk.view(1, KR, 64, 8, layout=L_P)

    @tiledsl.inline
    def to_p(pk, hp, sacc):
        """P as wgmma's A words: S's accumulator pairs, in order, as f16x2/bf16x2 (no scratch: hp is unused)."""
        T.cuda.tile.apply(T.ptx[CVT], pk, sacc.view(NS // 2, 2)[:, 1:2], sacc.view(NS // 2, 2)[:, 0:1])

    parts = forward_parts(shape=shape, D=D, BN=BN, STG=STG, CONS=CONS, boxes=DH, step=STEP, tx_q=TXQ, tx_kv=TXKV,
                          causal=causal, mma_s=MMA_S, mma_o=MMA_O, trans_v=True, cvt_o=CVT, overlap=OVERLAP,
                          pingpong=PINGPONG, p_regs=p_regs, to_p=to_p,
                          producer_regs=PREGS, poly=POLY, grid=GRID, early_k=EARLY_K,
                          dynamic=int(PERSIST == 2), lazy=LAZY, qoff=QOFF, tma_o=TMA_O, qbufs=QBUFS)
    ring_barriers, produce, consume, store = parts.ring_barriers, parts.produce, parts.consume, parts.store
    work_item, walk_length, produce_walk = parts.work_item, parts.walk_length, parts.produce_walk
    turns_open, turns_close = parts.turns_open, parts.turns_close
    dynamic_item, produce_dynamic, block_row = parts.dynamic_item, parts.produce_dynamic, parts.block_row
    q_slot, q_view, q_phase = parts.q_slot, parts.q_view, parts.q_phase
    # O: the (B, H, N, D) tensor st.global writes, or with tma_o a tensor map of its (B * H, N, D) view whose
    # boxes are a consumer's 64 rows by 64 columns
    O_ANN = T.TensorMap((B * H, N, D), dtype, box=(1, 64, 64), swizzle=128) if TMA_O else T.Tensor((B, H, N, D),
                                                                                                      dtype)

    @tiledsl.inline
    def epilogue(O, LSE, oacc, lsum, m, al, row0, c, w, lane, tid, bh, b, h, qb, osw, oso, qfree=None, k=0):
        """O / l and LSE of consumer c's rows: through shared memory and the TMA store (tma_o: osw, oso are the
        staging views tiles() returns; persistent, the walk's k-th item stages in its own Q buffer and releases its
        own Q-free barrier), else by st.global."""
        if TMA_O:
            store(O, LSE, oacc, lsum, m, al, 1.0, C, row0, lane, bh, b, h, block_row(qb) + 64 * c, c, w, tid,
                  q_view(osw, k), q_view(oso, k), q_slot(qfree, k))
        else:
            store(O, LSE, oacc, lsum, m, al, 1.0, C, row0, lane, bh, b, h)

    @tiledsl.inline
    def tiles():
        """Q, and the ring's K and V stages, in shared memory (allocated before the barriers): as the TMA unit
        writes them (tq, tk, tv) and as wgmma reads them (wq, wk, wv)."""
        sq = T.alloc_shared((QBUFS * DH * BM * 64,), dtype)
        sk = T.alloc_shared((STG * DH * BN * 64,), dtype)
        sv_ = T.alloc_shared((STG * DH * BN * 64,), dtype)
        tq = sq.view(DH, 1, BM, 64, layout=L_TQ) if QBUFS == 1 else sq.view(QBUFS, DH, 1, BM, 64, layout=L_TQ)
        tk = sk.view(STG, DH, 1, BN, 64, layout=L_TKV)
        tv = sv_.view(STG, DH, 1, BN, 64, layout=L_TKV)
        wq = sq.view(DH, CONS, 1, 4, 64, 16, layout=L_WQ) if QBUFS == 1 else \
            sq.view(QBUFS, DH, CONS, 1, 4, 64, 16, layout=L_WQ)
        wk = sk.view(STG, DH, 1, 4, BN, 16, layout=L_WK)
        wv = sv_.view(STG, 1, KR, D, 16, layout=L_WV)
        # Q's buffer as the consumers' O staging (tma_o): b32 words as stmatrix.x4 writes them, and each
        # consumer's (D / 64 boxes, 1, 64 rows, 64 columns) as the TMA unit reads them
        osw = None
        oso = None
        if TMA_O:
            if QBUFS == 1:
                osw = sq.view(dtype="uint32").view(CONS, 4, D // 16, 4, 8, 4, layout=L_OW)
                oso = sq.view(CONS, DH, 1, 64, 64, layout=L_OB)
            else:
                osw = sq.view(dtype="uint32").view(QBUFS, CONS, 4, D // 16, 4, 8, 4, layout=L_OW)
                oso = sq.view(QBUFS, CONS, DH, 1, 64, 64, layout=L_OB)
        return tq, tk, tv, wq, wk, wv, osw, oso

    @tiledsl.jit
    def attention_fa3(Q: T.TensorMap((B * H, N, D), dtype, box=(1, BM, 64), swizzle=128),
                      K: T.TensorMap((B * HK, NK, D), dtype, box=(1, BN, 64), swizzle=128),
                      V: T.TensorMap((B * HK, NK, D), dtype, box=(1, BN, 64), swizzle=128),
                      O: O_ANN, LSE: T.Tensor((B, H, N), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=NQB * B * H, block=THREADS, max_registers=CAP))
        tid = T.cuda.thread_id()
        wg = warpgroup_index(tid)
        pid = T.cuda.block_id()
        # the query blocks of one head are neighbours (its K and V stay in L2); causal: heaviest first
        bh = pid // NQB
        qb = pid % NQB
        if causal:
            qb = NQB - 1 - qb
        b = bh // H
        h = bh % H
        hk = h // GROUP
        tq, tk, tv, wq, wk, wv, osw, oso = tiles()
        qbar, fullk, fullv, empty = ring_barriers(tid)
        ntiles = key_tiles(qb, NKT, BM, BN, causal, QOFF)
        if wg == 0:
            produce(Q, K, V, tq, tk, tv, qbar, fullk, fullv, empty, bh, qb, b, hk, ntiles)
        else:
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            row0 = block_row(qb) + 64 * c + 16 * w + lane // 4   # this lane's first row; the other is row0 + 8
            oacc, lsum, m, al = consume(c, lane, row0, qb, ntiles, wq, wk, wv, qbar, fullk, fullv, empty, C)
            # epilogue: O / l, LSE
            epilogue(O, LSE, oacc, lsum, m, al, row0, c, w, lane, tid, bh, b, h, qb, osw, oso)

    @tiledsl.jit
    def attention_fa3_persistent(Q: T.TensorMap((B * H, N, D), dtype, box=(1, BM, 64), swizzle=128),
                                 K: T.TensorMap((B * HK, NK, D), dtype, box=(1, BN, 64), swizzle=128),
                                 V: T.TensorMap((B * HK, NK, D), dtype, box=(1, BN, 64), swizzle=128),
                                 O: O_ANN, LSE: T.Tensor((B, H, N), "float32")):
        # attention_fa3 with the persistent grid: each block walks its work items (parts.work_item says in which
        # order); the ring, Q's barriers and the ping-pong turns run on from item to item
        T.device_entry(launch=T.cuda.LaunchConfig(grid=GRID, block=THREADS, max_registers=CAP))
        tid = T.cuda.thread_id()
        wg = warpgroup_index(tid)
        pid = T.cuda.block_id()
        tq, tk, tv, wq, wk, wv, osw, oso = tiles()
        qbar, fullk, fullv, empty, qfree = ring_barriers(tid)
        if wg == 0:
            produce_walk(Q, K, V, tq, tk, tv, qbar, qfree, fullk, fullv, empty, pid)
        else:
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            turns_open(c)
            tb = 0                                           # key tiles of the walk's earlier items
            for k in range(walk_length(pid)):
                bh, qb, b, h, hk, ntiles = work_item(pid, k)
                row0 = block_row(qb) + 64 * c + 16 * w + lane // 4
                oacc, lsum, m, al = consume(c, lane, row0, qb, ntiles, wq, wk, wv, qbar, fullk, fullv, empty, C,
                                            tb, k, qfree)
                # the epilogue runs while the producer loads the next item's Q and first tiles
                epilogue(O, LSE, oacc, lsum, m, al, row0, c, w, lane, tid, bh, b, h, qb, osw, oso, qfree, k)
                tb = tb + ntiles
            turns_close(c)

    @tiledsl.jit
    def attention_fa3_dynamic(Q: T.TensorMap((B * H, N, D), dtype, box=(1, BM, 64), swizzle=128),
                              K: T.TensorMap((B * HK, NK, D), dtype, box=(1, BN, 64), swizzle=128),
                              V: T.TensorMap((B * HK, NK, D), dtype, box=(1, BN, 64), swizzle=128),
                              O: O_ANN, LSE: T.Tensor((B, H, N), "float32"),
                              CTR: T.Tensor((2,), "int32")):
        # the persistent grid drawing its items from CTR (zeros at launch; the last block leaves them so): the
        # producer publishes each item's number in nxt with its Q, and ITEMS there once the items are gone
        T.device_entry(launch=T.cuda.LaunchConfig(grid=GRID, block=THREADS, max_registers=CAP))
        tid = T.cuda.thread_id()
        wg = warpgroup_index(tid)
        pid = T.cuda.block_id()
        tq, tk, tv, wq, wk, wv, osw, oso = tiles()
        qbar, fullk, fullv, empty, qfree = ring_barriers(tid)
        nxt = T.alloc_shared((QBUFS,), "int32")
        if wg == 0:
            produce_dynamic(Q, K, V, tq, tk, tv, qbar, qfree, fullk, fullv, empty, pid, nxt, CTR)
        else:
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            turns_open(c)
            tb = 0
            k = 0
            while True:
                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], q_slot(qbar, k), q_phase(k))
                slot = q_slot(nxt, k)
                item = slot[0]
                if item >= ITEMS:
                    break
                bh, qb, b, h, hk, ntiles = dynamic_item(item)
                row0 = block_row(qb) + 64 * c + 16 * w + lane // 4
                oacc, lsum, m, al = consume(c, lane, row0, qb, ntiles, wq, wk, wv, qbar, fullk, fullv, empty, C,
                                            tb, k, qfree)
                epilogue(O, LSE, oacc, lsum, m, al, row0, c, w, lane, tid, bh, b, h, qb, osw, oso, qfree, k)
                tb = tb + ntiles
                k = k + 1
            turns_close(c)

    kernel = {0: attention_fa3, 1: attention_fa3_persistent, 2: attention_fa3_dynamic}[PERSIST]
    kernel.tile = (BM, BN)
    kernel.counters = PERSIST == 2
    kernel.tma_o = bool(TMA_O)
    _KERNELS[key] = kernel
    return kernel


def attention_hopper(q, k, v, causal=False, scale=None, config=None, num_sms=None):
    """(O, LSE) of softmax(scale * q k^T [causal mask]) v for q (B, H, N, D) and k, v (B, H_kv, N_kv, D) on an
    sm_90 GPU (torch CUDA tensors), or, for numpy float16 arrays, the same kernel on the CPU interpreter.

    scale defaults to 1/sqrt(D); causal masks key j > query i (top-left aligned, as torch's is_causal). O has q's
    dtype and shape, LSE is float32 (B, H, N) in natural log. D must be one of SUPPORTED_D. num_sms: the persistent
    grid's width (config[6] = 1); default the device's SM count (NUM_SMS on the interpreter); tests give a small
    one so each block walks several items."""
    dt, shape, D = check_qkv(q, k, v)
    if D not in SUPPORTED_D:
        raise tiledsl.LaunchError(f"attention_hopper supports head dims {', '.join(map(str, SUPPORTED_D))}, got {D}")
    scale = softmax_scale(scale, D)
    if num_sms is None:
        num_sms = sm_count(q)
    kern = make_attention_hopper(dt, D, causal, shape, scale, config, num_sms)
    B, H, _, N, _ = shape
    if isinstance(q, np.ndarray):
        q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
        o = np.zeros_like(q)
        lse = np.zeros((B, H, N), np.float32)
        more = (np.zeros(2, np.int32),) if kern.counters else ()
        tiledsl.jit(kern.fn, interpret=True)(*_flat(q, k, v), o_arg(o, kern), lse, *more)
        return o, lse
    import torch
    q, k, v = (x.contiguous() for x in (q, k, v))
    o = torch.empty_like(q)
    lse = torch.empty((B, H, N), dtype=torch.float32, device=q.device)
    kern(*_flat(q, k, v), o_arg(o, kern), lse, *((counters(q),) if kern.counters else ()))
    return o, lse


def counters(q):
    """The dynamic walk's two int32 counters, zeros at launch, for torch tensor q's device and current stream. The
    kernel's last block leaves them at zero, so one pair kept per stream serves every launch on it
    (device.stream_buffers: no zero fill per launch); under CUDA-graph capture the pair is made afresh in the graph's
    pool and its zero fill captured, so every replay starts from zeros."""
    from ..device import stream_buffers
    return stream_buffers(q, "fa3-counters", _zero_counters)


def _zero_counters(torch, device):
    return torch.zeros(2, dtype=torch.int32, device=device)


def o_arg(o, kern):
    """O as the kernel takes it: the (B, H, N, D) tensor, or with tma_o its (B * H, N, D) view (a tensor map's)."""
    return o.reshape(o.shape[0] * o.shape[1], o.shape[2], o.shape[3]) if kern.tma_o else o


def _flat(q, k, v):
    """q, k, v as the kernel's 3-d tensor maps take them: (B * H, N, D) (a view of the contiguous tensors)."""
    return tuple(x.reshape(x.shape[0] * x.shape[1], x.shape[2], x.shape[3]) for x in (q, k, v))
