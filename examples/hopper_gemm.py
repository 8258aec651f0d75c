"""C = A · Bᵀ on Hopper (sm_90a) with TMA, wgmma and warp specialisation, written only in the kernel language.

The seed of issue 17's Hopper path: a small, clear, correct kernel, not yet tuned. A is M×K and B is N×K, both
row-major f16 or bf16; accumulation in f32; C is M×N in the input type (or another of f16/bf16/f32). One block
computes a BM×BN tile (BM = 64 × CONSUMERS) with 1 + CONSUMERS warpgroups:

  * warpgroup 0 is the producer: it gives registers back (`setmaxnreg.dec`), and one thread of its first warp,
    chosen by `elect.sync`, issues the TMA loads of A's and B's K tiles (boxes BM×BK and BN×BK, the 128-byte
    swizzle, K-major) into a STAGES-deep shared ring. Each stage has a "full" mbarrier (the producer arrives with
    `expect_tx` of the stage's bytes; the TMA unit pays them) and an "empty" mbarrier (every consumer thread
    arrives once it is done with the stage; the producer waits on it before refilling the stage);
  * warpgroups 1..CONSUMERS are consumers: they take registers (`setmaxnreg.inc`), wait for a stage's "full"
    phase, run BK/16 `wgmma.mma_async m64nBNk16` on their 64 rows of A and all BN rows of B straight from shared
    memory (the matrix descriptors come from the views' layouts) and commit them as one group; with that group in
    flight they wait for the previous K tile's group (`wait_group 1`) and release its stage;
  * the epilogue converts the f32 accumulators and either stores them with plain stores, or (tma_store) writes
    each consumer's tile to shared memory, meets at an mbarrier, and one thread stores it with a TMA tensor store;
  * optionally (multicast) the blocks run in 2-CTA clusters along M that load half of their common B tile each
    and multicast it to both (the stage's release then crosses the cluster: remote mbarrier arrives).

The persistent variant (persistent=True, _make_tiled) launches min(SMs, tiles) blocks that walk their tiles in
grouped order; its producer's ring runs on across tiles, so the next tile's loads overlap this tile's epilogue, and
its consumers restart the accumulators with scale_d = 0 and release a stage with one arrive per warp; with
multicast, 2-CTA clusters walk tile pairs and share B. A TMA-store epilogue whose staging buffer does not fit
beside the ring (BN = 256 with 4 stages: 192 KB of ring) stages C in parts of BN / 2 (epilogue_columns).

Ragged shapes are handled, not refused: the TMA unit fills the parts of a box outside A or B with zeros (they add
nothing to the products) and the epilogue stores only the elements inside C. K must be a multiple of 8 (the TMA
unit needs 16-byte row strides; else a LaunchError names K).

On the interpreter the producer's and the consumers' branches run as fibers that hand over at their mbarrier waits
(interpreter/fibers.py), so the ring turns there as on the GPU; an interpreter without fibers runs the producer's
branch to its end first, and a kernel with more K tiles than STAGES faults there at the producer's first wait for
a released stage.
"""
import argparse
import sys

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, wid_in_wg

BN, BK = 128, 64          # block tile columns and K tile (BK f16/bf16 = 128 bytes: one 128-byte swizzle row)
CONSUMERS = 2             # consumer warpgroups, 64 rows of the block tile each
STAGES = 4                # the depth of the shared ring
NUM_SMS = 132             # the persistent grid's default width (an H100/H200 SXM); hopper_matmul asks the device
GROUP_M = 8               # tile rows walked together by the persistent grid (L2 reuse of B's columns)
PRODUCER_REGS, CONSUMER_REGS = 40, 232
SW128 = (3, 3, 3)         # 16-byte chunk c of 128-byte row r at chunk c ^ (r % 8), in 16-bit elements
FULL_MASK = 0xFFFFFFFF

_KERNELS = {}


def layouts(bm: int, bn: int, bk: int, stages: int, consumers: int, ab: str) -> dict:
    """The shared ring as the TMA unit writes it and as wgmma reads it (the same bytes), and the accumulators."""
    ks = bk // 16
    L = {}
    # TMA: stage s holds the box row-major, swizzled (T.tma_layout of the staged box)
    L["tma_a"] = T.tma_layout((stages, bm, bk), ab, 128)
    # wgmma: (stage, consumer, M repeat, K step, 64 rows, 16 k) over the same elements: rows of bk elements
    # (128 bytes), each K step 16 elements further along the row; the descriptor (128B swizzle, SBO = 8 rows =
    # 1024 bytes) is derived from this layout and proven against it by the wgmma pattern
    L["wg_a"] = TileLayout(S[(stages, consumers, 1, ks, 64, 16) : (bm * bk, 64 * bk, 1, 16, bk, 1)], swizzle=SW128)
    L["wg_b"] = TileLayout(S[(stages, 1, ks, bn, 16) : (bn * bk, 1, 16, bk, 1)], swizzle=SW128)
    # the m64nBN f32 accumulator fragment of one warpgroup, (1, 1, 64, BN): register i of thread (warp w, lane l)
    # holds row 16w + l//4 + 8((i//2)%2), column 8(i//4) + 2(l%4) + i%2
    L["acc"] = TileLayout(S[(1, 1, 4, 2, 8, bn // 8, 4, 2) :
                            (1, 1, 1 @ wid_in_wg, 2, 4 @ laneid, 4, 1 @ laneid, 1)])
    return L


def make_hopper_gemm(ab: str = "float16", out: str | None = None, stages: int = STAGES,
                     consumers: int = CONSUMERS, bn: int = BN, tma_store: bool = False, multicast: bool = False,
                     persistent: bool = False, num_sms: int = NUM_SMS, group_m: int = GROUP_M):
    """The warp-specialised GEMM kernel for input dtype `ab` (float16/bfloat16) and output dtype `out`
    (float16/bfloat16/float32; default: `ab`); called as kernel(A, B, C) with A (M, K), B (N, K), C (M, N).

    tma_store: the epilogue writes each consumer's tile to shared memory and one thread stores it with a TMA
    tensor store (C a tensor map: its rows must be multiples of 16 bytes; the unit drops the ragged edge), instead
    of every thread storing its elements.

    multicast: blocks run in 2-CTA clusters along M (the grid's block rows rounded up to pairs); the two blocks of
    a cluster need the same B tile, so each loads half of it and multicasts the half to both (cta_mask 0b11). A
    stage is then written into both blocks' shared memory, so every consumer releases it in both blocks (a remote
    mbarrier arrive, by lane 0 of each consumer warp) and each producer waits for both blocks' consumers before
    refilling it.

    persistent: a grid of min(num_sms, tiles) blocks, each walking its tiles in grouped order (group_m tile rows
    at a time) with the ring running on across tiles, so the next tile's loads overlap this tile's epilogue
    (_make_tiled; with multicast, 2-CTA clusters walking pairs of tile rows). Where the TMA-store epilogue's staging buffer does not fit beside the ring (BN = 256 with 4
    stages), it stages C in parts of BN / 2 (epilogue_columns) through the same kernel, one tile per block."""
    out = out or ab
    key = (ab, out, stages, consumers, bn, bool(tma_store), bool(multicast))
    if persistent:
        key += ("persistent", int(num_sms), int(group_m))
    if key in _KERNELS:
        return _KERNELS[key]
    if ab not in ("float16", "bfloat16") or out not in ("float16", "bfloat16", "float32"):
        raise tiledsl.LaunchError(f"hopper gemm supports float16/bfloat16 inputs and float16/bfloat16/float32 "
                                  f"outputs, not {ab} -> {out}")
    # at least two stages: a consumer releases a stage only after it issued the next K tile's wgmma (one group
    # stays in flight), so with one stage the producer and the consumers would wait for each other forever
    if bn % 8 or not 8 <= bn <= 256 or consumers < 1 or 64 * consumers > 256 or stages < 2:
        raise tiledsl.LaunchError(f"hopper gemm: BN={bn} (a multiple of 8 up to 256), {consumers} consumer "
                                  f"warpgroup(s) (BM = 64 each, at most 256) and {stages} stage(s) (at least 2) "
                                  f"do not tile")
    split = tma_store and epilogue_columns(64 * consumers, bn, stages, consumers, ab, out) < bn
    if persistent or split:
        if persistent and (int(num_sms) < 1 or int(group_m) < 1):
            raise tiledsl.LaunchError(f"hopper gemm: num_sms={num_sms} and group_m={group_m} must be positive")
        _KERNELS[key] = _make_tiled(ab, out, stages, consumers, bn, tma_store, persistent, num_sms, group_m,
                                    multicast)
        return _KERNELS[key]
    t = {"float16": "f16", "bfloat16": "bf16"}[ab]
    MMA = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{t}.{t}"
    LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    BM, BNT, STG, CONS = 64 * consumers, bn, stages, consumers
    THREADS = 128 * (1 + consumers)
    # the register budget at launch: 64K registers over the block, a multiple of 8 per thread; setmaxnreg then
    # moves them from the producer to the consumers within that budget
    # (setmaxnreg counts are multiples of 8; .inc may not go below the launch's count, nor the total above 64K)
    CAP = min((65536 // THREADS) // 8 * 8, 248)
    CREGS = max(CAP, min(CONSUMER_REGS, (65536 - 128 * PRODUCER_REGS) // (128 * consumers) // 8 * 8))
    TX = (BM + BNT) * BK * 2                    # the bytes one stage's two boxes pay to its "full" barrier
    NACC = BNT // 2                             # f32 accumulators per consumer thread
    L = layouts(BM, BNT, BK, STG, CONS, ab)
    L_TA, L_WA, L_WB, L_ACC = L["tma_a"], L["wg_a"], L["wg_b"], L["acc"]
    TMA_STORE = bool(tma_store)
    STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
    # C: a tensor map whose box is one consumer's 64 x BN tile (unswizzled), or a plain tensor
    C_ANN = T.TensorMap(("M", "N"), out, box=(64, BNT)) if TMA_STORE else T.Tensor(("M", "N"), out)
    L_EPI = T.tma_layout((CONS, 64, BNT), out)
    CL = 2 if multicast else 1                  # blocks per cluster (along M) sharing each B tile
    CLUSTER = (1, CL, 1) if CL > 1 else None
    LOAD_MC = LOAD + ".multicast::cluster"
    # B's stages as CL slices of BN / CL rows, the part each block of the cluster loads (the same bytes as one box)
    L_TB = T.tma_layout((STG, CL, BNT // CL, BK), ab, 128)
    if BNT % (8 * CL):
        raise tiledsl.LaunchError(f"hopper gemm: BN={bn} does not split into {CL} multicast slices of 8-row groups")
    ARRIVE_C, WAIT_C = "barrier.cluster.arrive.release", "barrier.cluster.wait.acquire"
    RELEASERS = 4 if CL > 1 else 128            # arrivals per consumer warpgroup on a stage's empty barrier

    @tiledsl.jit
    def hopper_gemm(A: T.TensorMap(("M", "K"), ab, box=(BM, BK), swizzle=128),
                    B: T.TensorMap(("N", "K"), ab, box=(BNT // CL, BK), swizzle=128),
                    C: C_ANN):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=((N + BNT - 1) // BNT,  # noqa: F821
                                                        ((M + BM - 1) // BM + CL - 1) // CL * CL),  # noqa: F821
                                                  block=THREADS, max_registers=CAP, cluster=CLUSTER))
        tid = T.cuda.thread_id()
        wg = tid // 128
        sa = T.alloc_shared((STG * BM * BK,), ab)
        sb = T.alloc_shared((STG * BNT * BK,), ab)
        full = T.alloc_shared((STG,), "uint64")       # stage s holds its K tile (phase u: the u-th fill)
        empty = T.alloc_shared((STG,), "uint64")      # stage s was read by every consumer (phase u: u-th use)
        ta = sa.view(STG, BM, BK, layout=L_TA)
        tb = sb.view(STG, CL, BNT // CL, BK, layout=L_TB)
        wa = sa.view(STG, CONS, 1, BK // 16, 64, 16, layout=L_WA)
        wb = sb.view(STG, 1, BK // 16, BNT, 16, layout=L_WB)
        if TMA_STORE:
            epi = T.alloc_shared((CONS, 64, BNT), out, layout=L_EPI)     # each consumer's C tile
            done = T.alloc_shared((CONS,), "uint64")    # a consumer warpgroup's 128 threads wrote their part
        if tid == 0:
            for s in T.unroll(STG):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], RELEASERS * CONS * CL)
            if TMA_STORE:
                for q in T.unroll(CONS):
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], done[q:q + 1], 128)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        if CL > 1:
            # both blocks' barriers are initialised before either block's multicast or remote arrive reaches them
            T.cuda.tile.apply(T.ptx[ARRIVE_C])
            T.cuda.tile.apply(T.ptx[WAIT_C])
            rank = T.cuda.cluster_ctarank()
        else:
            T.cuda.syncthreads()
        row0 = T.cuda.block_id(1) * BM
        col0 = T.cuda.block_id(0) * BNT
        ktiles = (K + BK - 1) // BK      # noqa: F821 - a ragged last K tile is zero-filled by the TMA unit
        if wg == 0:
            # the producer: few registers, one elected thread issues every copy
            T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], PRODUCER_REGS)
            if T.cuda.warp_id() == 0:
                leader = T.alloc_local((1,), "uint32")
                elected = T.alloc_local((1,), "uint32")
                T.cuda.tile.apply(T.ptx["elect.sync"], leader, FULL_MASK, p=elected)
                if elected[0] == 1:
                    for kt in range(ktiles):
                        s = kt % STG
                        if kt >= STG:
                            # the (kt // STG)-th refill of stage s waits for the consumers' previous use of it
                            # (with multicast: the consumers of both blocks, which arrive at cluster scope)
                            if CL > 1:
                                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"],
                                                  empty[s:s + 1], (kt // STG + 1) % 2)
                            else:
                                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], empty[s:s + 1],
                                                  (kt // STG + 1) % 2)
                        T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], full[s:s + 1], TX)
                        T.cuda.tile.apply(T.ptx[LOAD], ta[s], A, full[s:s + 1], coords=(row0, kt * BK))
                        if CL > 1:
                            # this block's slice of B lands in both blocks; the peer's slice pays this barrier too
                            T.cuda.tile.apply(T.ptx[LOAD_MC], tb[s, rank], B, full[s:s + 1],
                                              coords=(col0 + rank * (BNT // CL), kt * BK), cta_mask=(1 << CL) - 1)
                        else:
                            T.cuda.tile.apply(T.ptx[LOAD], tb[s, 0], B, full[s:s + 1], coords=(col0, kt * BK))
        else:
            # a consumer: 64 rows of the block tile, accumulated over every K tile
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            acc = T.alloc_local((NACC,), "float32")
            dv = acc.view(1, 1, 64, BNT, layout=L_ACC)
            for i in T.unroll(NACC):
                acc[i] = 0.0
            for kt in range(ktiles):
                s = kt % STG
                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[s:s + 1], (kt // STG) % 2)
                T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
                T.cuda.tile.apply(T.ptx[MMA], dv, wa[s, c], wb[s], scope="warpgroup")
                T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
                # keep this K tile's group in flight (the next one accumulates into the same registers, which
                # the ISA orders); once the previous K tile's group is done its stage is read: release it
                T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, dv, scope="warpgroup")
                if kt > 0:
                    if CL > 1:
                        # the stage was written into every block of the cluster: release it in each, one arrive
                        # per warp (lane 0, after the warp's wait_group: its part of the group has read the
                        # stage), not 128 remote arrives per warpgroup
                        if tid % 32 == 0:
                            for r in T.unroll(CL):
                                T.cuda.tile.apply(T.ptx["mbarrier.arrive.release.cluster.shared::cluster.b64"],
                                                  empty[(kt + STG - 1) % STG:(kt + STG - 1) % STG + 1], rank=r)
                    else:
                        T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[(kt + STG - 1) % STG:
                                                                                         (kt + STG - 1) % STG + 1])
            T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
            # epilogue: register i holds row 16w + l//4 + 8((i//2)%2), column 8(i//4) + 2(l%4) + i%2
            lane = tid % 32
            w = (tid % 128) // 32
            if TMA_STORE:
                for i in T.unroll(NACC):
                    epi[c, 16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2] = \
                        T.cast(acc[i], out)
                # the tile's generic-proxy writes become visible to the TMA unit; an mbarrier is the warpgroup's
                # barrier (syncthreads would wait for the producer, which has left)
                T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
                T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], done[c:c + 1])
                T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], done[c:c + 1], 0)
                if tid % 128 == 0:
                    T.cuda.tile.apply(T.ptx[STORE], C, epi[c], coords=(row0 + 64 * c, col0))
                    T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
                    T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)    # the tile stays until read
            else:
                for i in T.unroll(NACC):
                    row = row0 + 64 * c + 16 * w + lane // 4 + 8 * ((i // 2) % 2)
                    col = col0 + 8 * (i // 4) + 2 * (lane % 4) + i % 2
                    if row < M and col < N:  # noqa: F821 - the ragged edge of C
                        C[row, col] = T.cast(acc[i], out)
        if CL > 1:
            # no block leaves while its peer may still multicast into it or arrive on its barriers
            T.cuda.tile.apply(T.ptx[ARRIVE_C])
            T.cuda.tile.apply(T.ptx[WAIT_C])

    hopper_gemm.tile = (BM, BNT, BK)
    _KERNELS[key] = hopper_gemm
    return hopper_gemm


SMEM_LIMIT = 232448       # bytes of shared memory one block may use on sm_90 (227 KB)


def epilogue_columns(bm: int, bn: int, stages: int, consumers: int, ab: str, out: str) -> int:
    """The columns of C that the TMA-store epilogue stages at a time: all BN where the staging buffer fits beside
    the ring, else BN halved until it does (BN = 256 with 4 stages stages 128 columns twice), at least 8."""
    ring = stages * (bm + bn) * BK * 2
    size = {"float16": 2, "bfloat16": 2, "float32": 4}[out]
    cols = bn
    while ring + consumers * 64 * cols * size + 1024 > SMEM_LIMIT and cols % 16 == 0 and cols > 8:
        cols //= 2
    return cols


def _make_tiled(ab: str, out: str, stages: int, consumers: int, bn: int, tma_store: bool, persistent: bool,
                num_sms: int, group_m: int, multicast: bool = False):
    """The kernel that walks tiles: a persistent grid (min(num_sms, tiles) blocks, block b taking tiles b, b +
    gridDim.x, ... in grouped order: group_m tile rows at a time, column by column within the group, so the blocks
    running together share A's rows and B's columns in L2), or one tile per block (grid = tiles) where only the
    split TMA-store epilogue is wanted.

    The producer's ring index and phase run on across tiles (iteration it = (local tile) x ktiles + kt), so it
    fills the stages of the next tile while the consumers run this tile's epilogue. The consumers restart their
    accumulators with scale_d = 0 on each tile's first K step and release a stage by one arrive per warp (lane 0,
    after the warp's wgmma.wait_group: the warp's part of the group has read the stage; the empty barrier counts
    4 x CONSUMERS arrivals, not 128 x CONSUMERS). The TMA-store epilogue stages EPI columns at a time
    (epilogue_columns) in one buffer per consumer: a 'done' mbarrier meets the warpgroup's writes before thread 0
    stores, a 'free' mbarrier tells the warpgroup that thread 0's previous store has read the buffer.

    multicast: 2-CTA clusters along x whose two blocks walk the same tile pairs (two tile rows of one tile column,
    rank r taking row 2p + r): each loads half of the common B tile and multicasts it to both, releases stages in
    both blocks (lane 0 of each consumer warp, remote arrives) and waits for both blocks' releases."""
    t = {"float16": "f16", "bfloat16": "bf16"}[ab]
    MMA = f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{t}.{t}"
    LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
    BM, BNT, STG, CONS = 64 * consumers, bn, stages, consumers
    THREADS = 128 * (1 + consumers)
    CAP = min((65536 // THREADS) // 8 * 8, 248)
    CREGS = max(CAP, min(CONSUMER_REGS, (65536 - 128 * PRODUCER_REGS) // (128 * consumers) // 8 * 8))
    TX = (BM + BNT) * BK * 2
    NACC = BNT // 2
    L = layouts(BM, BNT, BK, STG, CONS, ab)
    L_TA, L_WA, L_WB, L_ACC = L["tma_a"], L["wg_a"], L["wg_b"], L["acc"]
    CL = 2 if multicast else 1
    CLUSTER = (CL, 1, 1) if CL > 1 else None
    if BNT % (8 * CL):
        raise tiledsl.LaunchError(f"hopper gemm: BN={bn} does not split into {CL} multicast slices of 8-row groups")
    L_TB = T.tma_layout((STG, CL, BNT // CL, BK), ab, 128)
    LOAD_MC = LOAD + ".multicast::cluster"
    ARRIVE_C, WAIT_C = "barrier.cluster.arrive.release", "barrier.cluster.wait.acquire"
    TMA_STORE = bool(tma_store)
    EPI = epilogue_columns(BM, BNT, STG, CONS, ab, out) if TMA_STORE else BNT
    EH = BNT // EPI                             # staged parts of a consumer's 64 x BN tile
    C_ANN = T.TensorMap(("M", "N"), out, box=(64, EPI)) if TMA_STORE else T.Tensor(("M", "N"), out)
    L_EPI = T.tma_layout((CONS, 64, EPI), out)
    SMS = max(int(num_sms) // CL, 1) * CL if persistent else 1 << 30
    GM = int(group_m)

    @tiledsl.jit
    def hopper_gemm_tiles(A: T.TensorMap(("M", "K"), ab, box=(BM, BK), swizzle=128),
                          B: T.TensorMap(("N", "K"), ab, box=(BNT // CL, BK), swizzle=128),
                          C: C_ANN):
        T.device_entry(launch=T.cuda.LaunchConfig(
            grid=T.min(SMS, CL * ((M + CL * BM - 1) // (CL * BM)) * ((N + BNT - 1) // BNT)),  # noqa: F821
            block=THREADS, max_registers=CAP, cluster=CLUSTER))
        tid = T.cuda.thread_id()
        wg = tid // 128
        sa = T.alloc_shared((STG * BM * BK,), ab)
        sb = T.alloc_shared((STG * BNT * BK,), ab)
        full = T.alloc_shared((STG,), "uint64")
        empty = T.alloc_shared((STG,), "uint64")
        ta = sa.view(STG, BM, BK, layout=L_TA)
        tb = sb.view(STG, CL, BNT // CL, BK, layout=L_TB)
        wa = sa.view(STG, CONS, 1, BK // 16, 64, 16, layout=L_WA)
        wb = sb.view(STG, 1, BK // 16, BNT, 16, layout=L_WB)
        if TMA_STORE:
            epi = T.alloc_shared((CONS, 64, EPI), out, layout=L_EPI)
            done = T.alloc_shared((CONS,), "uint64")    # the warpgroup's 128 threads wrote the staged part
            free = T.alloc_shared((CONS,), "uint64")    # thread 0's previous store has read the buffer
        if tid == 0:
            for s in T.unroll(STG):
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], full[s:s + 1], 1)
                T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], empty[s:s + 1], 4 * CONS * CL)
            if TMA_STORE:
                for q in T.unroll(CONS):
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], done[q:q + 1], 128)
                    T.cuda.tile.apply(T.ptx["mbarrier.init.shared::cta.b64"], free[q:q + 1], 1)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        if CL > 1:
            # both blocks' barriers are initialised before either block's multicast or remote arrive reaches them
            T.cuda.tile.apply(T.ptx[ARRIVE_C])
            T.cuda.tile.apply(T.ptx[WAIT_C])
            rank = T.cuda.cluster_ctarank()
        else:
            T.cuda.syncthreads()
            rank = 0
        ntm = (M + CL * BM - 1) // (CL * BM)    # noqa: F821 - rows of tile pairs with multicast
        ntn = (N + BNT - 1) // BNT          # noqa: F821
        ktiles = (K + BK - 1) // BK         # noqa: F821
        G = T.cuda.grid_dim(0) // CL
        bid = T.cuda.block_id(0) // CL
        mine = (ntm * ntn - bid + G - 1) // G       # the tiles bid, bid + G, ... below ntm * ntn
        if wg == 0:
            T.cuda.tile.apply(T.ptx["setmaxnreg.dec.sync.aligned.u32"], PRODUCER_REGS)
            if T.cuda.warp_id() == 0:
                leader = T.alloc_local((1,), "uint32")
                elected = T.alloc_local((1,), "uint32")
                T.cuda.tile.apply(T.ptx["elect.sync"], leader, FULL_MASK, p=elected)
                if elected[0] == 1:
                    for ti in range(mine):
                        tile = bid + ti * G
                        first = tile // (GM * ntn) * GM
                        rows = T.min(ntm - first, GM)
                        row0 = ((first + tile % (GM * ntn) % rows) * CL + rank) * BM
                        col0 = tile % (GM * ntn) // rows * BNT
                        for kt in range(ktiles):
                            it = ti * ktiles + kt          # the ring runs on across tiles
                            s = it % STG
                            if it >= STG:
                                if CL > 1:
                                    T.cuda.tile.apply(
                                        T.ptx["mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64"],
                                        empty[s:s + 1], (it // STG + 1) % 2)
                                else:
                                    T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"],
                                                      empty[s:s + 1], (it // STG + 1) % 2)
                            T.cuda.tile.apply(T.ptx["mbarrier.arrive.expect_tx.shared::cta.b64"], full[s:s + 1], TX)
                            T.cuda.tile.apply(T.ptx[LOAD], ta[s], A, full[s:s + 1], coords=(row0, kt * BK))
                            if CL > 1:
                                T.cuda.tile.apply(T.ptx[LOAD_MC], tb[s, rank], B, full[s:s + 1],
                                                  coords=(col0 + rank * (BNT // CL), kt * BK), cta_mask=(1 << CL) - 1)
                            else:
                                T.cuda.tile.apply(T.ptx[LOAD], tb[s, 0], B, full[s:s + 1], coords=(col0, kt * BK))
        else:
            T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], CREGS)
            c = wg - 1
            lane = tid % 32
            w = (tid % 128) // 32
            acc = T.alloc_local((NACC,), "float32")
            dv = acc.view(1, 1, 64, BNT, layout=L_ACC)
            for ti in range(mine):
                tile = bid + ti * G
                first = tile // (GM * ntn) * GM
                rows = T.min(ntm - first, GM)
                row0 = ((first + tile % (GM * ntn) % rows) * CL + rank) * BM
                col0 = tile % (GM * ntn) // rows * BNT
                for kt in range(ktiles):
                    it = ti * ktiles + kt
                    s = it % STG
                    T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], full[s:s + 1],
                                      (it // STG) % 2)
                    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
                    # the tile's first K step overwrites the accumulators (scale_d = 0): no zeroing between tiles
                    T.cuda.tile.apply(T.ptx[MMA], dv, wa[s, c], wb[s], scope="warpgroup", scale_d=kt > 0)
                    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
                    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 1, dv, scope="warpgroup")
                    if kt > 0 and lane == 0:
                        prev = (it + STG - 1) % STG
                        if CL > 1:
                            for r in T.unroll(CL):
                                T.cuda.tile.apply(T.ptx["mbarrier.arrive.release.cluster.shared::cluster.b64"],
                                                  empty[prev:prev + 1], rank=r)
                        else:
                            T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[prev:prev + 1])
                T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
                # the tile's last stage is read: the producer may refill it while this epilogue runs
                if lane == 0:
                    last = (ti * ktiles + ktiles - 1) % STG
                    if CL > 1:
                        for r in T.unroll(CL):
                            T.cuda.tile.apply(T.ptx["mbarrier.arrive.release.cluster.shared::cluster.b64"],
                                              empty[last:last + 1], rank=r)
                    else:
                        T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], empty[last:last + 1])
                if TMA_STORE:
                    for h in T.unroll(EH):
                        u = ti * EH + h              # the staging buffer's use count
                        if u > 0:
                            # thread 0's previous store read the buffer before anyone writes it again
                            if tid % 128 == 0:
                                T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)
                                T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], free[c:c + 1])
                            T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], free[c:c + 1],
                                              (u - 1) % 2)
                        for j in T.unroll(NACC // EH):
                            i = h * (NACC // EH) + j
                            epi[c, 16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (j // 4) + 2 * (lane % 4) + i % 2] = \
                                T.cast(acc[i], out)
                        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
                        T.cuda.tile.apply(T.ptx["mbarrier.arrive.shared::cta.b64"], done[c:c + 1])
                        T.cuda.tile.apply(T.ptx["mbarrier.try_wait.parity.shared::cta.b64"], done[c:c + 1], u % 2)
                        if tid % 128 == 0:
                            T.cuda.tile.apply(T.ptx[STORE], C, epi[c], coords=(row0 + 64 * c, col0 + h * EPI))
                            T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
                else:
                    for i in T.unroll(NACC):
                        row = row0 + 64 * c + 16 * w + lane // 4 + 8 * ((i // 2) % 2)
                        col = col0 + 8 * (i // 4) + 2 * (lane % 4) + i % 2
                        if row < M and col < N:  # noqa: F821 - the ragged edge of C
                            C[row, col] = T.cast(acc[i], out)
            if TMA_STORE:
                if tid % 128 == 0:
                    T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)    # the last part stays until read
        if CL > 1:
            # no block leaves while its peer may still multicast into it or arrive on its barriers
            T.cuda.tile.apply(T.ptx[ARRIVE_C])
            T.cuda.tile.apply(T.ptx[WAIT_C])

    hopper_gemm_tiles.tile = (BM, BNT, BK)
    return hopper_gemm_tiles


DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32"}


def hopper_matmul(a, b, out_dtype=None, *, out=None, stages: int = STAGES, consumers: int = CONSUMERS,
                  bn: int = BN, tma_store: bool | None = None, multicast: bool = False, persistent: bool = False,
                  group_m: int = GROUP_M):
    """C = a @ b.T for torch CUDA tensors a (M, K) and b (N, K), both float16 or both bfloat16, on an sm_90 GPU;
    any M and N, K a multiple of 8 (16-byte rows for the TMA unit). Returns C (M, N) of `out_dtype` (default: a's
    dtype), or writes `out`. tma_store (default: where C's rows are multiples of 16 bytes) picks the TMA-store
    epilogue, multicast the 2-CTA clusters that share B tiles, persistent a grid of one block per SM of a's device
    walking tiles in grouped order (make_hopper_gemm)."""
    import torch
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1] or a.dtype != b.dtype:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: need (M, K) "
                                  f"and (N, K) of one dtype")
    M, K = a.shape
    N = b.shape[0]
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    ab, od = (DTYPES.get(str(x.dtype), str(x.dtype)) for x in (a, out))
    if tma_store is None:
        tma_store = (N * out.element_size()) % 16 == 0
    sms = NUM_SMS
    if persistent and a.is_cuda:
        sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    kernel = make_hopper_gemm(ab, od, stages, consumers, bn, tma_store, multicast, persistent, sms, group_m)
    if K % 8:
        raise tiledsl.LaunchError(f"hopper gemm needs K a multiple of 8 (the TMA unit reads rows of 16-byte "
                                  f"multiples); got M={M}, N={N}, K={K}")
    kernel(a.contiguous(), b.contiguous(), out)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    n = opts.size
    if not gpu_available():
        k = make_hopper_gemm(opts.dtype)
        a = np.zeros((n, n), np.float16)
        ck = k.compile(a, a, a, target="sm_90a")
        print(ck.metadata)
        print("hopper gemm: no GPU found; compiled for sm_90a (metadata above)")
        return
    import torch
    dt = getattr(torch, opts.dtype)
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    c = hopper_matmul(a, b)
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).norm() / ref.norm()).item()
    print(f"hopper gemm {n}^3 {opts.dtype}: relative error {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    sys.exit(main())
