"""The interpreter's race detector (tiledsl/interpreter/races.py, docs/races.md) stays silent on correct kernels:
the racy kernels of tests/bad_inputs/test_bad_races.py with their synchronisation put back run clean and give the
right results. (The false-positive check at scale is every interpreter test of the suite, run with the detector on
by default.)"""
import os
import sys

import numpy as np

import tiledsl
from tiledsl import T

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_inputs"))
import test_bad_races as R  # noqa: E402

LC = T.cuda.LaunchConfig
MAP, BOX, LT, TX = R.MAP, R.BOX, R.LT, R.TX
INIT, ARRIVE, EXPECT, WAIT = R.INIT, R.ARRIVE, R.EXPECT, R.WAIT
TMA_LOAD, TMA_STORE = R.TMA_LOAD, R.TMA_STORE


def run(fn, *args):
    tiledsl.jit(fn, interpret=True)(*args)
    return args


def k_tree(X: T.Tensor((128,), "float32"), Out: T.Tensor((128,), "float32")):
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
    Out[t] = X[t] - sm[0]


def k_transpose(X: T.Tensor((32, 32), "float32"), Out: T.Tensor((32, 32), "float32")):
    T.device_entry(launch=LC(grid=1, block=(32, 4)))
    tx = T.cuda.thread_id(0)
    ty = T.cuda.thread_id(1)
    tile = T.alloc_shared((32, 33), "float32")
    for r in range(8):
        tile[ty * 8 + r, tx] = X[ty * 8 + r, tx]
    T.cuda.syncthreads()
    for r in range(8):
        Out[ty * 8 + r, tx] = tile[tx, ty * 8 + r]


def k_loop_two_barriers(X: T.Tensor((4, 128), "float32"), Out: T.Tensor((128,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((128,), "float32")
    acc = 0.0
    for i in range(4):
        sm[t] = X[i, t]
        T.cuda.syncthreads()
        acc += sm[(t + 32) % 128]
        T.cuda.syncthreads()
    Out[t] = acc


def k_histogram(X: T.Tensor((128,), "int32"), Out: T.Tensor((8,), "int32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    hist = T.alloc_shared((8,), "uint32")
    if t < 8:
        hist[t] = 0
    T.cuda.syncthreads()
    b = X[t] % 8
    T.cuda.tile.apply(T.ptx["red.shared.add.u32"], hist[b : b + 1], 1)
    T.cuda.syncthreads()
    if t < 8:
        Out[t] = T.cast(hist[t], "int32")


def k_arrive_sync(X: T.Tensor((64,), "float32"), Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((32,), "float32")
    if t < 32:
        sm[t] = X[t] * 3.0
        T.cuda.tile.apply(T.ptx["bar.arrive"], 1, 64)
    else:
        T.cuda.tile.apply(T.ptx["bar.sync"], 1, 64)
        Out[t - 32] = sm[t - 32]


def k_mbar(X: T.Tensor((64,), "float32"), Out: T.Tensor((32,), "float32")):
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
        T.cuda.tile.apply(T.ptx[WAIT], bar, 0)
        Out[t - 32] = sm[t - 32]


def k_cp_async(A: T.Tensor((64, 4), "uint32"), Out: T.Tensor((64,), "uint32")):
    T.device_entry(launch=LC(grid=1, block=64))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((64, 4), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sm[t, 0:4], A[t, 0:4], chunk_bytes=16)
    T.cuda.tile.apply(T.ptx["cp.async.wait_all"])
    T.cuda.syncthreads()
    Out[t] = sm[63 - t, 1]


def k_tma_load_store(A: MAP, B: MAP, Out: T.Tensor((64,), "float16")):
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
    T.cuda.tile.apply(T.ptx[WAIT], bar, 0)
    Out[t] = tile[t % 16, t // 16]
    T.cuda.syncthreads()
    for e in range(t, 512, 64):
        tile[e // 32, e % 32] = tile[e // 32, e % 32] * T.float16(2.0)
    T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
    T.cuda.syncthreads()
    if t == 0:
        T.cuda.tile.apply(T.ptx[TMA_STORE], B, tile, coords=(0, 0))
        T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
        T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group.read"], 0)


def k_tma_ring(A: MAP, Out: T.Tensor((2, 32), "float16")):
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
            Out[k, t - 32] = tile[3, t - 32]
            T.cuda.tile.apply(T.ptx[ARRIVE], bars[1:2])


def test_fixed_plain_kernels_run_clean():
    x = np.arange(128, dtype=np.float32)
    _, out = run(k_tree, x, np.zeros(128, np.float32))
    np.testing.assert_array_equal(out, x - x.sum())
    a = np.arange(1024, dtype=np.float32).reshape(32, 32)
    _, out = run(k_transpose, a, np.zeros((32, 32), np.float32))
    np.testing.assert_array_equal(out, a.T)
    xs = np.arange(512, dtype=np.float32).reshape(4, 128)
    _, out = run(k_loop_two_barriers, xs, np.zeros(128, np.float32))
    np.testing.assert_array_equal(out, xs[:, (np.arange(128) + 32) % 128].sum(axis=0))
    h = np.arange(128, dtype=np.int32)
    _, out = run(k_histogram, h, np.zeros(8, np.int32))
    np.testing.assert_array_equal(out, np.full(8, 16))


def test_fixed_barrier_kernels_run_clean():
    x = np.arange(64, dtype=np.float32)
    _, out = run(k_arrive_sync, x, np.zeros(32, np.float32))
    np.testing.assert_array_equal(out, x[:32] * 3)
    _, out = run(k_mbar, x, np.zeros(32, np.float32))
    np.testing.assert_array_equal(out, x[:32] + 2)


def test_fixed_async_kernels_run_clean():
    a = np.arange(256, dtype=np.uint32).reshape(64, 4)
    _, out = run(k_cp_async, a, np.zeros(64, np.uint32))
    np.testing.assert_array_equal(out, a[::-1, 1])
    m = R.F16MAP()
    b = np.zeros_like(m)
    _, b, out = run(k_tma_load_store, m, b, np.zeros(64, np.float16))
    np.testing.assert_array_equal(out, m[np.arange(64) % 16, np.arange(64) // 16])
    np.testing.assert_array_equal(b, m * 2)
    _, out = run(k_tma_ring, m, np.zeros((2, 32), np.float16))
    np.testing.assert_array_equal(out, np.stack([m[3], m[3]]))


# ---------------------------------------------------------------- global memory (tests/bad_inputs/test_bad_global_races.py)

def k_global_partials(X: T.Tensor((128,), "float32"), Ws: T.Tensor((4,), "float32"), Out: T.Tensor((1,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    t = T.cuda.thread_id()
    if t % 32 == 0:
        Ws[t // 32] = X[t] * 4.0
    T.cuda.syncthreads()
    if t == 0:
        Out[0] = Ws[0] + Ws[1] + Ws[2] + Ws[3]


def k_blocks_share_an_element(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((2,), "float32")):
    """Every block writes Out[0] and reads it back in another warp after a barrier: the blocks race with each
    other (the grid's business, never reported), each block's own accesses are ordered."""
    T.device_entry(launch=LC(grid=4, block=64))
    t = T.cuda.thread_id()
    if t == 0:
        Out[0] = X[T.cuda.block_id(), 0]
    T.cuda.syncthreads()
    if t == 40:
        Out[1] = Out[0] * 0.0 + 1.0


def test_fixed_global_kernels_run_clean():
    x = np.arange(128, dtype=np.float32)
    _, ws, out = run(k_global_partials, x, np.zeros(4, np.float32), np.zeros(1, np.float32))
    np.testing.assert_array_equal(ws, x[::32] * 4)
    assert out[0] == ws.sum()
    _, out = run(k_blocks_share_an_element, np.arange(256, dtype=np.float32).reshape(4, 64), np.zeros(2, np.float32))
    assert out[1] == 1.0
