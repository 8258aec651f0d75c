"""C = A · Bᵀ with cp.async, ldmatrix and mma.sync, every layout from tiledsl.layouts (no hand-written factors).

One block computes a BM x BN tile of C with WM x WN warps. Per k tile: each thread copies 16-byte chunks of A and B
into swizzled shared tiles (cp.async), then each warp loads its fragments with ldmatrix.x4 and multiplies them
with mma.sync.m16n8k16, k16 step by k16 step. The tuned form of this kernel (a multi-stage pipeline, double-buffered
fragments, grouped block order) is tiledsl/ops/gemm/mma.py, walked through in examples/gemm.py.

    python examples/mma_gemm.py        # on the GPU: 512^3 against numpy; else 64 x 64 x 64 on the CPU interpreter
"""
import argparse
import sys

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl import layouts as L


def make_gemm(M, N, K, BM=64, BN=64, BK=32, WM=2, WN=2, interpret=False):
    """The kernel for float16 A (M, K), B (N, K) and float32 C (M, N); sizes multiples of the block tile."""
    THREADS = 32 * WM * WN
    MI, NI, KS = BM // WM // 16, BN // WN // 8, BK // 16     # m16 tiles, n8 tiles per warp; k16 steps per k tile
    CPR = BK // 8                                            # 16-byte chunks per tile row
    SW = L.row_swizzle(2 * BK)                               # rows of 2*BK bytes: ldmatrix's 8 rows, 8 bank groups
    CP_A, CP_B = L.chunk_rows(BM, BK, swizzle=SW), L.chunk_rows(BN, BK, swizzle=SW)
    LD_A, LD_B = L.ldmatrix_a(BM, BK, warps=WM, swizzle=SW), L.ldmatrix_b(BN, BK, warps=WN, swizzle=SW)
    R_A, R_B = L.ldmatrix_regs(MI), L.ldmatrix_regs(NI // 2)
    F_A, F_B, F_C = L.mma_a(MI, 1), L.mma_b(NI, 1), L.mma_c(MI, NI)

    @tiledsl.jit(interpret=interpret)
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"), C: T.Tensor((M, N), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=(M // BM, N // BN), block=THREADS))
        tid = T.cuda.thread_id()
        lane = T.cuda.lane_id()
        wm = T.cuda.warp_id() // WN
        wn = T.cuda.warp_id() % WN
        bm = T.cuda.block_id(axis=0) * BM
        bn = T.cuda.block_id(axis=1) * BN
        gA = A.view(dtype="uint32").view(M, K // 8, 4)       # rows of 16-byte chunks
        gB = B.view(dtype="uint32").view(N, K // 8, 4)
        sa = T.alloc_shared((BM * BK // 2,), "uint32")
        sb = T.alloc_shared((BN * BK // 2,), "uint32")
        cp_a, cp_b = sa.view(1, BM, CPR, 4, layout=CP_A), sb.view(1, BN, CPR, 4, layout=CP_B)
        ld_a, ld_b = sa.view(1, WM, MI, KS, 4, 8, 4, layout=LD_A), sb.view(1, WN, NI // 2, KS, 4, 8, 4, layout=LD_B)
        ra = T.alloc_local((MI * 4,), "uint32")
        rb = T.alloc_local((NI * 2,), "uint32")
        acc = T.alloc_local((MI * NI * 4,), "float32")
        for i in T.unroll(MI * NI * 4):
            acc[i] = 0.0
        for kt in range(K // BK):
            for j in T.unroll(BM * CPR // THREADS):
                c = tid + THREADS * j
                T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], cp_a[0, c // CPR, c % CPR],
                                  gA[bm + c // CPR, kt * CPR + c % CPR, :], chunk_bytes=16)
            for j in T.unroll(BN * CPR // THREADS):
                c = tid + THREADS * j
                T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], cp_b[0, c // CPR, c % CPR],
                                  gB[bn + c // CPR, kt * CPR + c % CPR, :], chunk_bytes=16)
            T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
            T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)
            T.cuda.syncthreads()
            for ks in T.unroll(KS):
                T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], ra.view(MI, 4, 8, 4, layout=R_A),
                                  ld_a[0, wm, :, ks], scope="warp")
                T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"],
                                  rb.view(NI // 2, 4, 8, 4, layout=R_B), ld_b[0, wn, :, ks], scope="warp")
                T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"],
                                  acc.view(MI, NI, 16, 8, layout=F_C), ra.view(MI, 1, 16, 8, layout=F_A),
                                  rb.view(NI, 1, 8, 8, layout=F_B), acc.view(MI, NI, 16, 8, layout=F_C), scope="warp")
            T.cuda.syncthreads()                             # every warp is done with the tiles before the next copy
        for m, n, r in T.grid(MI, NI, 4):                    # C's lane map: row l//4 + 8(r//2), column 2(l%4) + r%2
            C[bm + wm * (BM // WM) + 16 * m + lane // 4 + 8 * (r // 2),
              bn + wn * (BN // WN) + 8 * n + 2 * (lane % 4) + r % 2] = acc[(m * NI + n) * 4 + r]

    return gemm


def inputs(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.integers(-8, 9, (M, K)) / 8).astype(np.float16)      # exact in f16, and their sums exact in f32
    b = (rng.integers(-8, 9, (N, K)) / 8).astype(np.float16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64).T


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=512)
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        a, b, ref = inputs(64, 64, 64)
        c = np.zeros((64, 64), np.float32)
        make_gemm(64, 64, 64, interpret=True)(a, b, c)
        np.testing.assert_array_equal(c, ref)
        print("mma_gemm: no GPU found; ran 64 x 64 x 64 on the CPU interpreter: exact")
        return
    import torch
    n = opts.size
    a, b, ref = inputs(n, n, n)
    c = torch.zeros((n, n), dtype=torch.float32, device="cuda")
    make_gemm(n, n, n)(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c)
    np.testing.assert_array_equal(c.cpu().numpy(), ref)
    print(f"mma_gemm: {n}^3 on the GPU: exact")


if __name__ == "__main__":
    sys.exit(main())
