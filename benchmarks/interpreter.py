"""How fast the CPU interpreter runs: the two seed examples and mma GEMMs (4 warps per block, m16n8k16 f16).

    python benchmarks/interpreter.py

"first" is the first call of a fresh kernel object: parse + pattern expansion + closure compilation + the run.
"warm" is the median of later calls (the expanded program is cached per specialization): the run alone.
Targets: each seed <= 0.5 s, the 64x64x64 GEMM with 128 threads <= 5 s.
The race detector (docs/races.md) is on by default; `TILEDSL_RACECHECK=0 python benchmarks/interpreter.py` times
the same runs without it (target: at most 2x faster). The shared-memory rows exercise it: a tree reduction through
shared memory with a syncthreads per level, and an ldmatrix GEMM whose tiles are staged through shared memory.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import tiledsl  # noqa: E402
from tiledsl import T  # noqa: E402
from tiledsl.layout import S, TileLayout, laneid  # noqa: E402

# one warp computes a 16 x 64 strip: M_repeat 1, N_repeat 8, K_repeat 4 (K = 64)
LA = TileLayout(S[(1, 4, 2, 8, 2, 4): (16, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
LB = TileLayout(S[(8, 4, 8, 2, 4): (8, 2, 4 @ laneid, 1, 1 @ laneid)])
LD = TileLayout(S[(1, 8, 2, 8, 4, 2): (32, 4, 2, 4 @ laneid, 1 @ laneid, 1)])


@tiledsl.jit(interpret=True)
def gemm(A: T.Tensor(("M", 32), "uint32"), B: T.Tensor(("N", 32), "uint32"), C: T.Tensor(("M", "N"), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(N // 64, M // 64), block=128))
    warp = T.cuda.warp_id()
    lane = T.cuda.lane_id()
    m0 = T.cuda.block_id(1) * 64 + warp * 16
    n0 = T.cuda.block_id(0) * 64
    ar = T.alloc_local((16,), "uint32")
    br = T.alloc_local((64,), "uint32")
    dr = T.alloc_local((32,), "float32")
    for kk, r in T.grid(4, 4):
        ar[kk * 4 + r] = A[m0 + lane // 4 + 8 * (r % 2), kk * 8 + lane % 4 + 4 * (r // 2)]
    for nn, kk, r in T.grid(8, 4, 2):
        br[(nn * 4 + kk) * 2 + r] = B[n0 + nn * 8 + lane // 4, kk * 8 + lane % 4 + 4 * r]
    T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"],
                      dr.view(1, 8, 16, 8, layout=LD), ar.view(1, 4, 16, 8, layout=LA),
                      br.view(8, 4, 8, 8, layout=LB), T.float32(0), scope="warp")
    for nn, r in T.grid(8, 4):
        C[m0 + lane // 4 + 8 * (r // 2), n0 + nn * 8 + 2 * (lane % 4) + r % 2] = dr[nn * 4 + r]


def timed(fn, reps=7):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    warm = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        warm.append(time.perf_counter() - t0)
    return first, statistics.median(warm)


def bench_seed_mma():
    import seed_mma
    a, b, ap, bp = seed_mma.inputs()
    k = tiledsl.jit(seed_mma.warp_mma.fn, interpret=True)
    out = np.zeros((16, 8), np.float32)
    r = timed(lambda: k(ap, bp, out))
    np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32).T, rtol=2e-4, atol=2e-4)
    return r


def bench_seed_fma():
    import seed_fma
    k = tiledsl.jit(seed_fma.affine_fma.fn, interpret=True)
    a = np.arange(-2, 2, dtype=np.float32).reshape(4, 1)
    out = np.zeros_like(a)
    r = timed(lambda: k(a, out))
    np.testing.assert_array_equal(out, 2 * a + 1)
    return r


def bench_gemm(m, n):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, 64)).astype(np.float16)
    b = rng.standard_normal((n, 64)).astype(np.float16)
    ap, bp = a.view(np.uint32), b.view(np.uint32)            # (rows, 32) words, low half = lower K index
    c = np.zeros((m, n), np.float32)
    k = tiledsl.jit(gemm.fn, interpret=True)
    r = timed(lambda: k(ap, bp, c), reps=3)
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
    return r


@tiledsl.jit(interpret=True)
def block_sums(X: T.Tensor(("B", 256), "float32"), Out: T.Tensor(("B",), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=B, block=256))  # noqa: F821
    t = T.cuda.thread_id()
    sm = T.alloc_shared((256,), "float32")
    sm[t] = X[T.cuda.block_id(), t]
    T.cuda.syncthreads()
    s = 128
    while s > 0:
        if t < s:
            sm[t] = sm[t] + sm[t + s]
        T.cuda.syncthreads()
        s = s // 2
    if t == 0:
        Out[T.cuda.block_id()] = sm[0]


def bench_shared_reduce(nblocks):
    x = np.random.default_rng(1).standard_normal((nblocks, 256)).astype(np.float32)
    out = np.zeros(nblocks, np.float32)
    k = tiledsl.jit(block_sums.fn, interpret=True)
    r = timed(lambda: k(x, out), reps=3)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-4, atol=1e-4)
    return r


def main():
    rows = [
        ("seed_mma (1 warp, 2 mma issues)", bench_seed_mma(), 0.5),
        ("seed_fma (1 thread, 12 natives)", bench_seed_fma(), 0.5),
        ("mma GEMM 64x64x64, 1 block x 128 threads", bench_gemm(64, 64), 5.0),
        ("mma GEMM 256x256x64, 16 blocks x 128 threads", bench_gemm(256, 256), None),
        ("shared-memory tree reduction, 64 blocks x 256 threads", bench_shared_reduce(64), None),
    ]
    print("| kernel | first call (ms) | warm call (ms) | target |")
    print("|---|---:|---:|---|")
    ok = True
    for name, (first, warm), target in rows:
        tgt = f"<= {target * 1e3:.0f} ms" if target else ""
        if target and first > target:
            ok = False
            tgt += " MISSED"
        print(f"| {name} | {first * 1e3:.1f} | {warm * 1e3:.1f} | {tgt} |")
    print("\nfirst = parse + expand + compile closures + run; warm = run only (results checked against numpy)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
