"""C = A · Bᵀ on tensor cores with mma.sync, written only in the kernel language.

A is M×K and B is N×K, both row-major (the `row.col` convention), f16 or bf16; accumulation in f32; C is f16,
bf16 or f32. One block computes a BM×BN tile with 4 warps (2×2, each 64×64):
  * a STAGES-deep cp.async pipeline moves 16-byte chunks of A and B from global to shared memory;
  * shared tiles are XOR-swizzled so the 8 rows one ldmatrix reads fall in 8 different bank groups;
  * ldmatrix.x4 loads the A and B fragments; mma.sync.m16n8k16 accumulates 4×8 tiles per warp;
  * blocks walk the output in column-major groups of GROUP_M rows so neighbouring blocks share A and B in L2.
Sizes must be multiples of the tile (BM, BN, BK); others are refused with a LaunchError naming them.
"""
import argparse
import sys

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

BM, BN, BK = 128, 128, 32            # block tile; BK = 32 halves = 16 words = 64 bytes per shared row
STAGES = 4
WORDS = BK // 2                      # b32 words per shared row
GROUP_M = 8
MI, NI = 4, 8                        # per warp: 4 m16 tiles x 8 n8 tiles = 64 x 64
KS = BK // 16                        # k16 steps per BK

# Shared tiles, in b32 words: [stage][row][word], 16-byte chunks XOR-swizzled by (row >> 1) & 3.
SW = (2, 2, 3)
L_CP = TileLayout(S[(STAGES, BM, 4, 4) : (BM * WORDS, WORDS, 4, 1)], swizzle=SW)
# ldmatrix sources. A: (stage, warp row, m tile, k step, matrix, row, word); matrix i = (k half i//2, row half i%2)
L_LDA = TileLayout(S[(STAGES, 2, MI, KS, 2, 2, 8, 4) :
                     (BM * WORDS, 64 * WORDS, 16 * WORDS, 8, 4, 8 * WORDS, WORDS, 1)], swizzle=SW)
# B: (stage, warp col, n-tile pair, k step, matrix, row, word); matrix i = (n tile i//2, k half i%2)
L_LDB = TileLayout(S[(STAGES, 2, NI // 2, KS, 2, 2, 8, 4) :
                     (BN * WORDS, 64 * WORDS, 16 * WORDS, 8, 8 * WORDS, 4, WORDS, 1)], swizzle=SW)
# Registers. ldmatrix destinations: matrix i -> register i of each group of 4.
L_RA = TileLayout(S[(MI, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)])
L_RB = TileLayout(S[(NI // 2, 4, 8, 4) : (4, 1, 4 @ laneid, 1 @ laneid)])
# mma operands (the seed page's lane maps, repeated over m/n tiles)
L_MA = TileLayout(S[(MI, 1, 2, 8, 2, 4) : (4, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
L_MB = TileLayout(S[(NI, 1, 8, 2, 4) : (2, 2, 4 @ laneid, 1, 1 @ laneid)])
L_MD = TileLayout(S[(MI, NI, 2, 8, 4, 2) : (NI * 4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])


_KERNELS = {}


def make_gemm(ab="float16", out="float16"):
    """The GEMM kernel for one input type (float16/bfloat16) and output type (float16/bfloat16/float32)."""
    if (ab, out) in _KERNELS:
        return _KERNELS[(ab, out)]
    if ab not in ("float16", "bfloat16") or out not in ("float16", "bfloat16", "float32"):
        raise tiledsl.LaunchError(f"gemm supports float16/bfloat16 inputs and float16/bfloat16/float32 outputs, "
                                  f"not {ab} -> {out}")
    t = {"float16": "f16", "bfloat16": "bf16"}[ab]
    MMA = f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32"
    CVT = f"cvt.rn.{ {'float16': 'f16', 'bfloat16': 'bf16'}.get(out, 'f16') }x2.f32"

    @tiledsl.jit
    def gemm(A: T.Tensor(("M", "K"), ab), B: T.Tensor(("N", "K"), ab), C: T.Tensor(("M", "N"), out)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=(M // BM) * (N // BN), block=128))  # noqa: F821
        tid = T.cuda.thread_id()
        warp = T.cuda.warp_id()
        lane = T.cuda.lane_id()
        wm = warp // 2
        wn = warp % 2
        # grouped block order: GROUP_M block-rows share each block-column's B tile in L2
        pid = T.cuda.block_id()
        nbm = M // BM  # noqa: F821
        nbn = N // BN  # noqa: F821
        group = pid // (GROUP_M * nbn)
        first = group * GROUP_M
        rows = T.min(nbm - first, GROUP_M)
        bm = first + pid % rows
        bn = (pid % (GROUP_M * nbn)) // rows

        sa = T.alloc_shared((STAGES * BM * WORDS,), "uint32")
        sb = T.alloc_shared((STAGES * BN * WORDS,), "uint32")
        cp_a = sa.view(STAGES, BM, 4, 4, layout=L_CP)
        cp_b = sb.view(STAGES, BN, 4, 4, layout=L_CP)
        ld_a = sa.view(STAGES, 2, MI, KS, 4, 8, 4, layout=L_LDA)
        ld_b = sb.view(STAGES, 2, NI // 2, KS, 4, 8, 4, layout=L_LDB)
        gA = A.view(dtype="uint32")
        gB = B.view(dtype="uint32")

        ra = T.alloc_local((MI * 4,), "uint32")
        rb = T.alloc_local((NI * 2,), "uint32")
        acc = T.alloc_local((MI * NI * 4,), "float32")
        ra_ld = ra.view(MI, 4, 8, 4, layout=L_RA)
        rb_ld = rb.view(NI // 2, 4, 8, 4, layout=L_RB)
        ra_mma = ra.view(MI, 1, 16, 8, layout=L_MA)
        rb_mma = rb.view(NI, 1, 8, 8, layout=L_MB)
        acc_v = acc.view(MI, NI, 16, 8, layout=L_MD)
        for i in T.unroll(MI * NI * 4):
            acc[i] = 0.0

        ktiles = K // BK  # noqa: F821
        # each thread moves 4 chunks of A and 4 of B per stage: rows tid // 4 + 32 * j, chunk tid % 4
        crow = tid // 4
        cchunk = tid % 4
        for s in T.unroll(STAGES - 1):
            if s < ktiles:
                for j in T.unroll(4):
                    r = crow + 32 * j
                    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], cp_a[s, r, cchunk],
                                      gA[bm * BM + r, s * WORDS + cchunk * 4: s * WORDS + cchunk * 4 + 4], chunk_bytes=16)
                    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], cp_b[s, r, cchunk],
                                      gB[bn * BN + r, s * WORDS + cchunk * 4: s * WORDS + cchunk * 4 + 4], chunk_bytes=16)
            T.cuda.tile.apply(T.ptx["cp.async.commit_group"])

        for kt in range(ktiles):
            T.cuda.tile.apply(T.ptx["cp.async.wait_group"], STAGES - 2)
            T.cuda.syncthreads()
            # refill the stage that was consumed last iteration
            nk = kt + STAGES - 1
            if nk < ktiles:
                ns = nk % STAGES
                for j in T.unroll(4):
                    r = crow + 32 * j
                    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], cp_a[ns, r, cchunk],
                                      gA[bm * BM + r, nk * WORDS + cchunk * 4: nk * WORDS + cchunk * 4 + 4],
                                      chunk_bytes=16)
                    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], cp_b[ns, r, cchunk],
                                      gB[bn * BN + r, nk * WORDS + cchunk * 4: nk * WORDS + cchunk * 4 + 4],
                                      chunk_bytes=16)
            T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
            st = kt % STAGES
            for ks in T.unroll(KS):
                T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], ra_ld, ld_a[st, wm, :, ks],
                                  scope="warp")
                T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], rb_ld, ld_b[st, wn, :, ks],
                                  scope="warp")
                T.cuda.tile.apply(T.ptx[MMA], acc_v, ra_mma, rb_mma, acc_v, scope="warp")

        # epilogue: each lane holds pairs of adjacent columns (registers 2h, 2h+1 of a tile)
        if out == "float32":
            for mi in T.unroll(MI):
                for ni in T.unroll(NI):
                    for h in T.unroll(2):
                        row = bm * BM + wm * 64 + mi * 16 + h * 8 + lane // 4
                        col = bn * BN + wn * 64 + ni * 8 + 2 * (lane % 4)
                        base = (mi * NI + ni) * 4 + h * 2
                        C[row, col] = acc[base]
                        C[row, col + 1] = acc[base + 1]
        else:
            # one cvt packs two f32 into f16x2/bf16x2 (the first source goes to the upper half)
            pk = T.alloc_local((MI * NI * 2, 1), "uint32")
            pairs = acc.view(MI * NI * 2, 2)
            T.cuda.tile.apply(T.ptx[CVT], pk, pairs[:, 1:2], pairs[:, 0:1])
            gC = C.view(dtype="uint32")
            for mi in T.unroll(MI):
                for ni in T.unroll(NI):
                    for h in T.unroll(2):
                        row = bm * BM + wm * 64 + mi * 16 + h * 8 + lane // 4
                        colw = (bn * BN + wn * 64 + ni * 8) // 2 + lane % 4
                        gC[row, colw] = pk[(mi * NI + ni) * 2 + h, 0]

    _KERNELS[(ab, out)] = gemm
    return gemm


DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32"}


def matmul(a, b, out=None, out_dtype=None):
    """C = a @ b.T for torch CUDA tensors a (M, K) and b (N, K)."""
    import torch
    M, K = a.shape
    N, K2 = b.shape
    if K2 != K or a.dtype != b.dtype:
        raise tiledsl.LaunchError(f"a is {tuple(a.shape)} {a.dtype}, b is {tuple(b.shape)} {b.dtype}: need (M, K) "
                                  f"and (N, K) of one dtype")
    if M % BM or N % BN or K % BK:
        raise tiledsl.LaunchError(f"gemm supports M and N that are multiples of {BM} and {BN} and K a multiple of "
                                  f"{BK}; got M={M}, N={N}, K={K}")
    if out is None:
        out = torch.empty((M, N), dtype=out_dtype or a.dtype, device=a.device)
    make_gemm(DTYPES[str(a.dtype)], DTYPES[str(out.dtype)])(a, b, out)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    n = opts.size
    if not gpu_available():
        k = make_gemm(opts.dtype, opts.dtype)
        a = np.zeros((n, n), np.float16)
        ck = k.compile(a, a, a, target="sm_90")
        print(ck.metadata)
        print("gemm: no GPU found; compiled for sm_90 (metadata above)")
        return
    import torch
    dt = getattr(torch, opts.dtype)
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    c = matmul(a, b)
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).norm() / ref.norm()).item()
    print(f"gemm {n}^3 {opts.dtype}: relative error {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    sys.exit(main())
