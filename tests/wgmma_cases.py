"""wgmma test kernels and their host side, shared by tests/test_wgmma.py (compile, ptxas, interpreter) and
tests/test_gpu_wgmma.py (the H200): one warpgroup computes a 64 x N tile D = A @ B^T over KR K steps, A in
registers or shared memory, B in shared memory, with any descriptor swizzle and (f16/bf16) either major order."""
import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid, warpid

SWIZZLE_BITS = {0: 0, 32: 1, 64: 2, 128: 3}


def shared_layout(rows, kr, ktile, esize, swizzle, mn_major):
    """A TileLayout for a shared tile viewed as (1, KR, rows, ktile) elements in the canonical form the
    descriptor reads: K-major (rows of `swizzle` bytes, or 8x16-byte core matrices) or MN-major."""
    t = 16 // esize
    if not mn_major:
        if swizzle == 0:
            # core matrices of 8 rows x 16 bytes; the two K halves LBO = 8 rows apart, row groups SBO apart
            return TileLayout(S[(1, kr, rows // 8, 8, ktile // t, t) :
                                (1, rows * ktile, 8 * t * (ktile // t), t, 8 * t, 1)])
        per = swizzle // esize                    # elements per swizzled row
        steps = per // ktile                      # K steps side by side in one row
        bits = SWIZZLE_BITS[swizzle]
        sw = (bits, t.bit_length() - 1, 3)
        if kr <= steps:
            return TileLayout(S[(1, kr, rows, ktile) : (1, ktile, per, 1)], swizzle=sw)
        return TileLayout(S[(1, kr // steps, steps, rows, ktile) : (1, rows * per, ktile, per, 1)], swizzle=sw)
    if swizzle == 0:
        return TileLayout(S[(1, kr, rows // t, t, ktile // 8, 8) :
                            (1, rows * ktile, 8 * t, 1, rows * 8, t)])
    per = swizzle // esize
    bits = SWIZZLE_BITS[swizzle]
    sw = (bits, t.bit_length() - 1, 3)
    if rows >= per:
        return TileLayout(S[(1, kr, rows // per, per, ktile // 8, 8) :
                            (1, rows * ktile, ktile * per, 1, 8 * per, per)], swizzle=sw)
    return TileLayout(S[(1, kr, rows, ktile // 8, 8) : (1, 16 * per * ((ktile + 15) // 16), 1, 8 * per, per)],
                      swizzle=sw)


def d_layout(n):
    """The f32 accumulator fragment of m64nN as a (1, 1, 64, N) register view."""
    return TileLayout(S[(1, 1, 4, 2, 8, n // 8, 4, 2) : (1, 1, 1 @ warpid, 2, 4 @ laneid, 4, 1 @ laneid, 1)])


def a_regs_layout(kr):
    """A's uint32 words as (1, KR, 64, 8): register 4*kk + r holds row 16w + l//4 + 8(r%2), word 4(r//2) + l%4."""
    return TileLayout(S[(1, kr, 4, 2, 8, 2, 4) : (1, 4, 1 @ warpid, 1, 4 @ laneid, 2, 1 @ laneid)])


def make_kernel(n, ab="f16", a_regs=False, swizzle=128, trans_a=0, trans_b=0, kr=2, scale_d=0):
    """The kernel and its (A, B, Out) shapes: A (64, 16 KR) and B (N, 16 KR) as uint16 bits, Out (64, N) f32."""
    K = 16 * kr
    opcode = f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}"
    la = shared_layout(64, kr, 16, 2, swizzle, bool(trans_a))
    lb = shared_layout(n, kr, 16, 2, swizzle, bool(trans_b))
    ld = d_layout(n)
    lar = a_regs_layout(kr)
    a_size = la.storage_span((1, kr, 64, 16))
    b_size = lb.storage_span((1, kr, n, 16))

    @tiledsl.jit
    def wgmma_tile(A: T.Tensor((64, K), "uint16"), B: T.Tensor((n, K), "uint16"),
                   Out: T.Tensor((64, n), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
        tid = T.cuda.thread_id()
        lane = tid % 32
        w = tid // 32
        sa = T.alloc_shared((a_size,), "uint16")
        sb = T.alloc_shared((b_size,), "uint16")
        av = sa.view(1, kr, 64, 16, layout=la)
        bv = sb.view(1, kr, n, 16, layout=lb)
        for it in range(64 * K // 128):
            i = it * 128 + tid
            av[0, (i % K) // 16, i // K, i % 16] = A[i // K, i % K]
        for it in range((n * K + 127) // 128):
            i = it * 128 + tid
            if i < n * K:
                bv[0, (i % K) // 16, i // K, i % 16] = B[i // K, i % K]
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
        T.cuda.syncthreads()
        d = T.alloc_local((n // 2,), "float32")
        ar = T.alloc_local((4 * kr,), "uint32")
        dv = d.view(1, 1, 64, n, layout=ld)
        if a_regs:
            for kk in T.unroll(kr):
                for r in T.unroll(4):
                    row = 16 * w + lane // 4 + 8 * (r % 2)
                    col = 16 * kk + 2 * (lane % 4) + 8 * (r // 2)
                    ar[4 * kk + r] = T.uint32(A[row, col]) | (T.uint32(A[row, col + 1]) << 16)
            T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, ar.view(1, kr, 64, 8, layout=lar),
                              scope="warpgroup")
            T.cuda.tile.apply(T.ptx[opcode], dv, ar.view(1, kr, 64, 8, layout=lar), bv, scope="warpgroup",
                              scale_d=scale_d, trans_b=trans_b)
        else:
            T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
            T.cuda.tile.apply(T.ptx[opcode], dv, av, bv, scope="warpgroup", scale_d=scale_d, trans_a=trans_a,
                              trans_b=trans_b)
        T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
        T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
        for i in T.unroll(n // 2):
            row = 16 * w + lane // 4 + 8 * ((i // 2) % 2)
            col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
            Out[row, col] = d[i]
    return wgmma_tile, (64, K), (n, K), (64, n)


def inputs(n, ab, kr, seed=0):
    """A, B as uint16 bits of small exact values, and the float64 reference A @ B^T."""
    rng = np.random.default_rng(seed)
    K = 16 * kr
    a = (rng.integers(-8, 9, (64, K)) / 8).astype(np.float32)
    b = (rng.integers(-8, 9, (n, K)) / 8).astype(np.float32)
    if ab == "f16":
        ab_bits = a.astype(np.float16).view(np.uint16), b.astype(np.float16).view(np.uint16)
    else:
        ab_bits = ((a.view(np.uint32) >> 16).astype(np.uint16), (b.view(np.uint32) >> 16).astype(np.uint16))
    return ab_bits[0], ab_bits[1], a.astype(np.float64) @ b.astype(np.float64).T
