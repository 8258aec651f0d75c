"""Racy kernels (issue 33): each runs on the interpreter, whose race detector stops it with a KernelFault naming
both source lines (the access that races, at `needle`, and the earlier one it races with, at `other`), both
threads and the shared element. Every kernel here is wrong on a GPU although lockstep execution hides it; the same
kernel with its missing synchronisation put back runs clean (test_the_fixed_kernels_run_clean).

benchmarks/racecheck_sample.py runs a few of them on the GPU for `compute-sanitizer --tool racecheck`."""
import inspect

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.lang.tensormap import tma_layout
from tiledsl.layout import S, TileLayout, laneid
from badcase import Case, line_of, raw, run
from wgmma_cases import d_layout, shared_layout

LC = T.cuda.LaunchConfig
KF = tiledsl.KernelFault
RACE = ("data race on shared memory",)

INIT = "mbarrier.init.shared::cta.b64"
ARRIVE = "mbarrier.arrive.shared::cta.b64"
EXPECT = "mbarrier.arrive.expect_tx.shared::cta.b64"
WAIT = "mbarrier.try_wait.parity.shared::cta.b64"
LDM = "ldmatrix.sync.aligned.m8n8.x4.shared.b16"
TMA_LOAD = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
BULK = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
frag = TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])           # word (i, r, w): register i of lane 4r+w

# ---------------------------------------------------------------- plain shared memory, missing barriers


def k_tree_no_sync(X: T.Tensor((128,), "float32"), Out: T.Tensor((1,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((128,), "float32")
    sm[t] = X[t]
    T.cuda.syncthreads()
    s = 64
    while s > 0:
        if t < s:
            sm[t] = sm[t] + sm[t + s]
        s = s // 2
    if t == 0:
        Out[0] = sm[0]


def k_tree_no_first_sync(X: T.Tensor((128,), "float32"), Out: T.Tensor((1,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((128,), "float32")
    sm[t] = X[t] * 2.0
    s = 64
    while s > 0:
        if t < s:
            sm[t] = sm[t] + sm[t + s]
        T.cuda.syncthreads()
        s = s // 2
    if t == 0:
        Out[0] = sm[0]


def k_result_read_no_sync(X: T.Tensor((128,), "float32"), Out: T.Tensor((128,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((128,), "float32")
    sm[t] = X[t]
    T.cuda.syncthreads()
    s = 64
    while s > 0:
        if t < s:
            sm[t] = sm[t] + sm[t + s]
        T.cuda.syncthreads()
        s = s // 2
    if t == 0:
        sm[0] = 1.0 / sm[0]
    Out[t] = X[t] * sm[0]


def k_neighbour(X: T.Tensor((128,), "float32"), Out: T.Tensor((128,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((128,), "float32")
    sm[t] = X[t] + 1.0
    Out[t] = sm[(t + 32) % 128]


def k_broadcast(X: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((1,), "float32")
    if t == 0:
        sm[0] = X[0]
    Out[t] = X[t] - sm[0]


def k_transpose(X: T.Tensor((32, 32), "float32"), Out: T.Tensor((32, 32), "float32")):
    T.device_entry(launch=LC(grid=1, block=(32, 4)))
    tx = T.cuda.thread_id(0)
    ty = T.cuda.thread_id(1)
    tile = T.alloc_shared((32, 33), "float32")
    for r in range(8):
        tile[ty * 8 + r, tx] = X[ty * 8 + r, tx]
    for r in range(8):
        Out[ty * 8 + r, tx] = tile[tx, ty * 8 + r]


def k_write_write(X: T.Tensor((64,), "float32"), Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((32,), "float32")
    if t < 32:
        sm[t] = X[t]
    if t >= 32:
        sm[t - 32] = X[t] * 0.5
    T.cuda.syncthreads()
    if t < 32:
        Out[t] = sm[t]


def k_histogram_plain(X: T.Tensor((128,), "int32"), Out: T.Tensor((8,), "int32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    hist = T.alloc_shared((8,), "int32")
    if t < 8:
        hist[t] = 0
    T.cuda.syncthreads()
    b = X[t] % 8
    hist[b] = hist[b] + 1
    T.cuda.syncthreads()
    if t < 8:
        Out[t] = hist[t]


def k_war_next_iteration(X: T.Tensor((4, 128), "float32"), Out: T.Tensor((128,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((128,), "float32")
    acc = 0.0
    for i in range(4):
        sm[t] = X[i, t]
        T.cuda.syncthreads()
        acc += sm[(t + 32) % 128]
    Out[t] = acc


def k_double_buffer_same_stage(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((64,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    buf = T.alloc_shared((2, 64), "float32")
    acc = 0.0
    buf[0, t] = X[0, t]
    T.cuda.syncthreads()
    for i in range(1, 4):
        buf[0, t] = X[i, t]
        acc += buf[0, 63 - t]
        T.cuda.syncthreads()
    Out[t] = acc


def k_scan_step(X: T.Tensor((64,), "int32"), Out: T.Tensor((64,), "int32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((64,), "int32")
    sm[t] = X[t]
    T.cuda.syncthreads()
    d = 1
    while d < 64:
        v = sm[t]
        if t >= d:
            v = v + sm[t - d]
        sm[t] = v
        T.cuda.syncthreads()
        d = d * 2
    Out[t] = sm[t]


def k_branch_exchange(X: T.Tensor((64,), "float32"), Out: T.Tensor((64,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((32,), "float32")
    if t >= 32:
        sm[t - 32] = X[t]
    else:
        Out[t] = sm[t]
    T.cuda.syncthreads()


def k_late_init(X: T.Tensor((64,), "int32"), Out: T.Tensor((1,), "int32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    cnt = T.alloc_shared((1,), "uint32")
    if t == 0:
        cnt[0] = 0
    T.cuda.tile.apply(T.ptx["red.shared.add.u32"], cnt[0:1], 1, pred=X[t] > 0)
    T.cuda.syncthreads()
    if t == 0:
        Out[0] = T.cast(cnt[0], "int32")


def k_atomic_then_plain(X: T.Tensor((64,), "int32"), Out: T.Tensor((64,), "int32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    cnt = T.alloc_shared((1,), "uint32")
    if t == 0:
        cnt[0] = 0
    T.cuda.syncthreads()
    if t < 32:
        T.cuda.tile.apply(T.ptx["red.shared.add.u32"], cnt[0:1], 1)
    if t >= 32:
        Out[t] = T.cast(cnt[0], "int32")


# ---------------------------------------------------------------- named barriers


def k_named_subset(X: T.Tensor((96,), "float32"), Out: T.Tensor((96,), "float32")):
    T.device_entry(launch=LC(grid=1, block=96))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((96,), "float32")
    sm[t] = X[t]
    if t < 64:
        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 64)
    Out[t] = sm[(t + 32) % 96]


def k_write_after_arrive(X: T.Tensor((64,), "float32"), Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((32,), "float32")
    if t < 32:
        T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 64)
        sm[t] = X[t] * 3.0
    else:
        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 64)
        Out[t - 32] = sm[t - 32]


# ---------------------------------------------------------------- mbarriers


def k_mbar_no_wait(X: T.Tensor((64,), "float32"), Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((32,), "float32")
    bar = T.alloc_shared((1,), "uint64")
    if t == 0:
        T.cuda.tile.apply(T.ptx[INIT], bar, 32)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
    T.cuda.syncthreads()
    if t < 32:
        sm[t] = X[t] + 2.0
        T.cuda.tile.apply(T.ptx[ARRIVE], bar)
    else:
        Out[t - 32] = sm[t - 32]


def k_mbar_arrive_first(X: T.Tensor((64,), "float32"), Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((32,), "float32")
    bar = T.alloc_shared((1,), "uint64")
    if t == 0:
        T.cuda.tile.apply(T.ptx[INIT], bar, 32)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
    T.cuda.syncthreads()
    if t < 32:
        T.cuda.tile.apply(T.ptx[ARRIVE], bar)
        sm[t] = X[t] + 4.0
    else:
        T.cuda.tile.apply(T.ptx[WAIT], bar, 0)
        Out[t - 32] = sm[t - 32]


def k_mbar_other_barrier(X: T.Tensor((64,), "float32"), Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((32,), "float32")
    bars = T.alloc_shared((2,), "uint64")
    if t == 0:
        T.cuda.tile.apply(T.ptx[INIT], bars[0:1], 32)
        T.cuda.tile.apply(T.ptx[INIT], bars[1:2], 1)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
    T.cuda.syncthreads()
    if t < 32:
        sm[t] = X[t] - 1.0
        T.cuda.tile.apply(T.ptx[ARRIVE], bars[0:1])
    else:
        if t == 32:
            T.cuda.tile.apply(T.ptx[ARRIVE], bars[1:2])
        T.cuda.tile.apply(T.ptx[WAIT], bars[1:2], 0)
        Out[t - 32] = sm[t - 32]


# ---------------------------------------------------------------- ldmatrix


def k_ldmatrix_no_sync(X: T.Tensor((128,), "uint32"), Out: T.Tensor((64, 4), "uint32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((4, 8, 4), "uint32")
    w = 2 * t
    sm[w // 32, (w // 4) % 8, w % 4] = X[w]
    sm[w // 32, (w // 4) % 8, w % 4 + 1] = X[w + 1]
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), sm, scope="warp")
    for i in range(4):
        Out[t, i] = r[i]


# ---------------------------------------------------------------- cp.async


def k_cp_read_before_wait(A: T.Tensor((32, 4), "uint32"), Out: T.Tensor((32,), "uint32")):
    T.device_entry(launch=LC(grid=1, block=32))
    lane = T.cuda.lane_id()
    sm = T.alloc_shared((32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm.view(32, 1, 4), A.view(32, 1, 4), chunk_bytes=16,
                      scope="warp")
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
    Out[lane] = sm[lane, 0]
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)


def k_cp_no_barrier_after_wait(A: T.Tensor((64, 4), "uint32"), Out: T.Tensor((64,), "uint32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((64, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm[t, 0:4], A[t, 0:4], chunk_bytes=16)
    T.cuda.tile.apply(T.ptx["cp.async.wait_all"])
    Out[t] = sm[63 - t, 1]


def k_cp_wait_group_too_loose(A: T.Tensor((2, 32, 4), "uint32"), Out: T.Tensor((32,), "uint32")):
    T.device_entry(launch=LC(grid=1, block=32))
    lane = T.cuda.lane_id()
    sm = T.alloc_shared((2, 32, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm[0, lane, 0:4], A[0, lane, 0:4], chunk_bytes=16)
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm[1, lane, 0:4], A[1, lane, 0:4], chunk_bytes=16)
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 1)
    Out[lane] = sm[0, lane, 2] + sm[1, lane, 2]
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)


def k_cp_overwrites_unread(A: T.Tensor((64, 4), "uint32"), Out: T.Tensor((64,), "uint32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((64, 4), "uint32")
    sm[t, 0] = T.cast(t, "uint32")
    T.cuda.syncthreads()
    Out[t] = sm[(t + 32) % 64, 0]
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm[t, 0:4], A[t, 0:4], chunk_bytes=16)
    T.cuda.tile.apply(T.ptx["cp.async.wait_all"])


# ---------------------------------------------------------------- bulk copies and TMA

BOX = (16, 32)
TX = 16 * 32 * 2
LT = tma_layout(BOX, "float16", 64)
MAP = T.TensorMap(BOX, "float16", box=BOX, swizzle=64)


def k_bulk_no_wait(A: T.Tensor((64, 32), "uint32"), Out: T.Tensor((64,), "uint32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    tile = T.alloc_shared((64, 32), "uint32")
    bar = T.alloc_shared((1,), "uint64")
    if t == 0:
        T.cuda.tile.apply(T.ptx[INIT], bar, 64)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
    T.cuda.syncthreads()
    T.cuda.tile.apply(T.ptx[BULK], tile[t, 0:32], A[t, 0:32], bar, copy_bytes=128)
    T.cuda.tile.apply(T.ptx[EXPECT], bar, 128)
    Out[t] = tile[63 - t, 5]
    T.cuda.tile.apply(T.ptx[WAIT], bar, 0)


def k_tma_no_wait(A: MAP, Out: T.Tensor((64,), "float16")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    tile = T.alloc_shared(BOX, "float16", layout=LT)
    bar = T.alloc_shared((1,), "uint64")
    if t == 0:
        T.cuda.tile.apply(T.ptx[INIT], bar, 1)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
    T.cuda.syncthreads()
    if t == 0:
        T.cuda.tile.apply(T.ptx[EXPECT], bar, TX)
        T.cuda.tile.apply(T.ptx[TMA_LOAD], tile, A, bar, coords=(0, 0))
    Out[t] = tile[t % 16, t // 16]
    T.cuda.tile.apply(T.ptx[WAIT], bar, 0)


def k_tma_store_no_fence(B: MAP, X: T.Tensor((64,), "float16")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    tile = T.alloc_shared(BOX, "float16", layout=LT)
    for e in range(t, 512, 64):
        tile[e // 32, e % 32] = X[e % 64]
    T.cuda.syncthreads()
    if t == 0:
        T.cuda.tile.apply(T.ptx[TMA_STORE], B, tile, coords=(0, 0))
        T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
        T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)


def k_tma_store_no_sync(B: MAP, X: T.Tensor((64,), "float16")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    tile = T.alloc_shared(BOX, "float16", layout=LT)
    for e in range(t, 512, 64):
        tile[e // 32, e % 32] = X[e % 64]
    T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
    if t == 0:
        T.cuda.tile.apply(T.ptx[TMA_STORE], B, tile, coords=(0, 0))
        T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
        T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)


def k_tma_refill_before_empty(A: MAP, Out: T.Tensor((2, 32), "float16")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    tile = T.alloc_shared(BOX, "float16", layout=LT)
    bars = T.alloc_shared((2,), "uint64")
    if t == 0:
        T.cuda.tile.apply(T.ptx[INIT], bars[0:1], 1)
        T.cuda.tile.apply(T.ptx[INIT], bars[1:2], 32)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
    T.cuda.syncthreads()
    if t < 32:
        if t == 0:
            for k in range(2):
                if k > 0:
                    T.cuda.tile.apply(T.ptx[WAIT], bars[1:2], 0)
                T.cuda.tile.apply(T.ptx[EXPECT], bars[0:1], TX)
                T.cuda.tile.apply(T.ptx[TMA_LOAD], tile, A, bars[0:1], coords=(0, 0))
    else:
        for k in range(2):
            T.cuda.tile.apply(T.ptx[WAIT], bars[0:1], k)
            T.cuda.tile.apply(T.ptx[ARRIVE], bars[1:2])
            Out[k, t - 32] = tile[3, t - 32]


# ---------------------------------------------------------------- wgmma (one warpgroup, m64n8k16, A and B in shared memory)

WG = "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16"
LA, LB, LD = shared_layout(64, 1, 16, 2, 128, False), shared_layout(8, 1, 16, 2, 128, False), d_layout(8)
A_SIZE, B_SIZE = LA.storage_span((1, 1, 64, 16)), LB.storage_span((1, 1, 8, 16))


def k_wgmma_before_full(G: T.Tensor((A_SIZE,), "uint16"), B: T.Tensor((8, 16), "uint16"),
                        Out: T.Tensor((64, 8), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sa = T.alloc_shared((A_SIZE,), "uint16")
    sb = T.alloc_shared((B_SIZE,), "uint16")
    bar = T.alloc_shared((1,), "uint64")
    bv = sb.view(1, 1, 8, 16, layout=LB)
    if t == 0:
        T.cuda.tile.apply(T.ptx[INIT], bar, 128)
        T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
    bv[0, 0, t // 16, t % 16] = B[t // 16, t % 16]
    T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
    T.cuda.syncthreads()
    T.cuda.tile.apply(T.ptx[BULK], sa[8 * t : 8 * t + 8], G[8 * t : 8 * t + 8], bar, copy_bytes=16)
    T.cuda.tile.apply(T.ptx[EXPECT], bar, 16)
    d = T.alloc_local((4,), "float32")
    dv = d.view(1, 1, 64, 8, layout=LD)
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx[WG], dv, sa.view(1, 1, 64, 16, layout=LA), bv, scope="warpgroup", scale_d=0)
    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx[WAIT], bar, 0)
    Out[t // 2, t % 2] = d[0]


def k_wgmma_without_fence(A: T.Tensor((64, 16), "uint16"), B: T.Tensor((8, 16), "uint16"),
                          Out: T.Tensor((64, 8), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sa = T.alloc_shared((A_SIZE,), "uint16")
    sb = T.alloc_shared((B_SIZE,), "uint16")
    av = sa.view(1, 1, 64, 16, layout=LA)
    bv = sb.view(1, 1, 8, 16, layout=LB)
    for it in range(8):
        i = it * 128 + t
        av[0, 0, i // 16, i % 16] = A[i // 16, i % 16]
    bv[0, 0, t // 16, t % 16] = B[t // 16, t % 16]
    T.cuda.syncthreads()
    d = T.alloc_local((4,), "float32")
    dv = d.view(1, 1, 64, 8, layout=LD)
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx[WG], dv, av, bv, scope="warpgroup", scale_d=0)
    T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
    T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
    Out[t // 2, t % 2] = d[0]


def interpreted(fn, *args):
    return lambda: tiledsl.jit(fn, interpret=True)(*args)


def z(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def ar(*shape, dtype=np.float32):
    return np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)


def F16MAP():
    return np.arange(16 * 32).astype(np.float16).reshape(16, 32)


def race(id, fn, needle, other, args, words=()):
    """A racy kernel: the race is reported at `needle`, against the earlier access at `other`."""
    c = Case(id, fn, needle, RACE + tuple(words), err=KF, action=interpreted(fn, *args), args=args)
    c.other = other
    return c


CASES = [
    race("tree_without_syncthreads", k_tree_no_sync, "sm[t] = sm[t] + sm[t + s]", "sm[t] = sm[t] + sm[t + s]",
         (ar(128), z(1)), ("conflicts with the write",)),
    race("tree_without_the_first_syncthreads", k_tree_no_first_sync, "sm[t] = sm[t] + sm[t + s]",
         "sm[t] = X[t] * 2.0", (ar(128), z(1))),
    race("result_read_without_syncthreads", k_result_read_no_sync, "Out[t] = X[t] * sm[0]",
         "sm[0] = 1.0 / sm[0]", (ar(128) + 1, z(128))),
    race("neighbour_without_syncthreads", k_neighbour, "Out[t] = sm[(t + 32) % 128]", "sm[t] = X[t] + 1.0",
         (ar(128), z(128)), ("thread (0, 0, 0)", "thread (32, 0, 0)")),
    race("broadcast_without_syncthreads", k_broadcast, "Out[t] = X[t] - sm[0]", "sm[0] = X[0]",
         (ar(64), z(64)), ("element 0",)),
    race("transpose_without_syncthreads", k_transpose, "Out[ty * 8 + r, tx] = tile[tx, ty * 8 + r]",
         "tile[ty * 8 + r, tx] = X[ty * 8 + r, tx]", (ar(32, 32), z(32, 32))),
    race("write_write", k_write_write, "sm[t - 32] = X[t] * 0.5", "sm[t] = X[t]", (ar(64), z(32)),
         ("write by thread (32, 0, 0)", "conflicts with the write by thread (0, 0, 0)")),
    race("histogram_without_atomics", k_histogram_plain, "hist[b] = hist[b] + 1", "hist[b] = hist[b] + 1",
         (ar(128, dtype=np.int32), z(8, dtype=np.int32)), ("conflicts with the read",)),
    race("war_across_iterations", k_war_next_iteration, "sm[t] = X[i, t]", "acc += sm[(t + 32) % 128]",
         (ar(4, 128), z(128)), ("conflicts with the read",)),
    race("double_buffer_same_stage", k_double_buffer_same_stage, "acc += buf[0, 63 - t]", "buf[0, t] = X[i, t]",
         (ar(4, 64), z(64))),
    race("scan_without_the_read_barrier", k_scan_step, "sm[t] = v", "v = v + sm[t - d]",
         (ar(64, dtype=np.int32), z(64, dtype=np.int32)), ("conflicts with the read",)),
    race("branch_exchange_without_barrier", k_branch_exchange, "Out[t] = sm[t]", "sm[t - 32] = X[t]",
         (ar(64), z(64))),
    race("counter_initialised_without_barrier", k_late_init, 
         'T.cuda.tile.apply(T.ptx["red.shared.add.u32"], cnt[0:1], 1, pred=X[t] > 0)', "cnt[0] = 0",
         (np.ones(64, np.int32), z(1, dtype=np.int32)), ("atomic",)),
    race("plain_read_of_an_atomic_counter", k_atomic_then_plain, 'Out[t] = T.cast(cnt[0], "int32")',
         'T.cuda.tile.apply(T.ptx["red.shared.add.u32"], cnt[0:1], 1)',
         (np.ones(64, np.int32), z(64, dtype=np.int32)), ("atomic write",)),
    race("named_barrier_leaves_a_warp_out", k_named_subset, "Out[t] = sm[(t + 32) % 96]", "sm[t] = X[t]",
         (ar(96), z(96)), ("thread (64, 0, 0)",)),
    race("write_after_bar_arrive", k_write_after_arrive, "Out[t - 32] = sm[t - 32]", "sm[t] = X[t] * 3.0",
         (ar(64), z(32))),
    race("mbarrier_never_waited", k_mbar_no_wait, "Out[t - 32] = sm[t - 32]", "sm[t] = X[t] + 2.0",
         (ar(64), z(32))),
    race("mbarrier_arrive_before_the_write", k_mbar_arrive_first, "Out[t - 32] = sm[t - 32]",
         "sm[t] = X[t] + 4.0", (ar(64), z(32))),
    race("mbarrier_waits_on_the_wrong_barrier", k_mbar_other_barrier, "Out[t - 32] = sm[t - 32]",
         "sm[t] = X[t] - 1.0", (ar(64), z(32))),
    race("ldmatrix_without_syncthreads", k_ldmatrix_no_sync,
         'T.cuda.tile.apply(T.ptx[LDM], r.view(4, 8, 4, layout=frag), sm, scope="warp")',
         "sm[w // 32, (w // 4) % 8, w % 4] = X[w]", (ar(128, dtype=np.uint32), z(64, 4, dtype=np.uint32)),
         ("ldmatrix",) if False else ()),
    race("cp_async_read_before_its_wait", k_cp_read_before_wait, "Out[lane] = sm[lane, 0]",
         'T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm.view(32, 1, 4), A.view(32, 1, 4), chunk_bytes=16,',
         (ar(32, 4, dtype=np.uint32), z(32, dtype=np.uint32)), ("is still copying",)),
    race("cp_async_without_barrier_after_the_wait", k_cp_no_barrier_after_wait, "Out[t] = sm[63 - t, 1]",
         'T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm[t, 0:4], A[t, 0:4], chunk_bytes=16)',
         (ar(64, 4, dtype=np.uint32), z(64, dtype=np.uint32)), ("cp.async write",)),
    race("cp_async_wait_group_leaves_it_pending", k_cp_wait_group_too_loose,
         "Out[lane] = sm[0, lane, 2] + sm[1, lane, 2]",
         'T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm[1, lane, 0:4], A[1, lane, 0:4], chunk_bytes=16)',
         (ar(2, 32, 4, dtype=np.uint32), z(32, dtype=np.uint32)), ("is still copying",)),
    race("cp_async_overwrites_what_another_warp_reads", k_cp_overwrites_unread,
         'T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm[t, 0:4], A[t, 0:4], chunk_bytes=16)',
         "Out[t] = sm[(t + 32) % 64, 0]", (ar(64, 4, dtype=np.uint32), z(64, dtype=np.uint32)),
         ("conflicts with the read",)),
    race("bulk_copy_read_before_its_mbarrier", k_bulk_no_wait, "Out[t] = tile[63 - t, 5]",
         "T.cuda.tile.apply(T.ptx[BULK], tile[t, 0:32], A[t, 0:32], bar, copy_bytes=128)",
         (ar(64, 32, dtype=np.uint32), z(64, dtype=np.uint32)), ("asynchronous write", "mbarrier")),
    race("tma_load_read_before_the_full_barrier", k_tma_no_wait, "Out[t] = tile[t % 16, t // 16]",
         "T.cuda.tile.apply(T.ptx[TMA_LOAD], tile, A, bar, coords=(0, 0))", (F16MAP(), z(64, dtype=np.float16)),
         ("asynchronous write", "wait on that mbarrier")),
    race("tma_store_without_fence_proxy_async", k_tma_store_no_fence,
         "T.cuda.tile.apply(T.ptx[TMA_STORE], B, tile, coords=(0, 0))", "tile[e // 32, e % 32] = X[e % 64]",
         (np.zeros((16, 32), np.float16), ar(64, dtype=np.float16)), ("fence.proxy.async", "TMA store")),
    race("tma_store_without_syncthreads", k_tma_store_no_sync,
         "T.cuda.tile.apply(T.ptx[TMA_STORE], B, tile, coords=(0, 0))", "tile[e // 32, e % 32] = X[e % 64]",
         (np.zeros((16, 32), np.float16), ar(64, dtype=np.float16)), ("TMA store", "thread (32, 0, 0)")),
    race("tma_refills_a_stage_before_its_empty_barrier", k_tma_refill_before_empty,
         "T.cuda.tile.apply(T.ptx[TMA_LOAD], tile, A, bars[0:1], coords=(0, 0))", "Out[k, t - 32] = tile[3, t - 32]",
         (F16MAP(), z(2, 32, dtype=np.float16)), ("conflicts with the read", "empty barrier")),
    race("wgmma_before_the_full_barrier", k_wgmma_before_full,
         "T.cuda.tile.apply(T.ptx[WG], dv, sa.view(1, 1, 64, 16, layout=LA), bv, scope=\"warpgroup\", scale_d=0)",
         "T.cuda.tile.apply(T.ptx[BULK], sa[8 * t : 8 * t + 8], G[8 * t : 8 * t + 8], bar, copy_bytes=16)",
         (np.zeros(A_SIZE, np.uint16), z(8, 16, dtype=np.uint16), z(64, 8)), ("wgmma", "wait on that mbarrier")),
    race("wgmma_without_fence_proxy_async", k_wgmma_without_fence,
         "T.cuda.tile.apply(T.ptx[WG], dv, av, bv, scope=\"warpgroup\", scale_d=0)",
         "av[0, 0, i // 16, i % 16] = A[i // 16, i % 16]",
         (z(64, 16, dtype=np.uint16), z(8, 16, dtype=np.uint16), z(64, 8)), ("wgmma", "fence.proxy.async")),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_races(case):
    err = run(case)
    msg = str(err)
    want = line_of(case.fn, case.other)
    assert f"{inspect.getsourcefile(raw(case.fn))}:{want}:" in msg, f"{case.id}: line {want} not named:\n{msg}"
    assert case.other.strip() in msg, msg


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_each_racy_kernel_compiles_for_the_gpu(case):
    """The races are the GPU's to show too (benchmarks/racecheck_sample.py runs a sample under compute-sanitizer):
    every kernel here is a legal kernel that compiles for sm_90a."""
    tiledsl.jit(raw(case.fn)).compile(*case.args, target="sm_90a")


def test_the_detector_can_be_turned_off(monkeypatch):
    """TILEDSL_RACECHECK=0: the racy kernel runs (and lockstep execution resolves the race in the writer's favour)."""
    monkeypatch.setenv("TILEDSL_RACECHECK", "0")
    out = z(128)
    interpreted(k_neighbour, ar(128), out)()
    np.testing.assert_array_equal(out, (ar(128) + 1.0)[(np.arange(128) + 32) % 128])
