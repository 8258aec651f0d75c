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


# ------------------------------------------------------------------ fp8 operands (k32) and f16 accumulators

FP8_TYPES = ("e4m3", "e5m2")


def decode_fp8(bits, kind):
    """Exact float64 values of e4m3 (the ISA's e4m3, torch's float8_e4m3fn: bias 7, no infinity, S.1111.111 NaN)
    or e5m2 (bias 15, IEEE-like: exponent 31 is inf with mantissa 0, NaN otherwise) bytes; a reading of the format
    tables written for the tests, independent of the interpreter's decoder."""
    b = np.asarray(bits, np.int64) & 0xFF
    mbits, bias = (3, 7) if kind == "e4m3" else (2, 15)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> mbits) & ((1 << (7 - mbits)) - 1)
    man = (b & ((1 << mbits) - 1)).astype(np.float64)
    sub = man * 2.0 ** (1 - bias - mbits)
    norm = (1 + man / (1 << mbits)) * 2.0 ** (exp - bias)
    val = sign * np.where(exp == 0, sub, norm)
    top = (1 << (7 - mbits)) - 1
    if kind == "e4m3":
        return np.where((exp == top) & (man == 7), np.nan, val)
    return np.where(exp == top, np.where(man == 0, sign * np.inf, np.nan), val)


def fp8_codes(kind, hi=3.0, step=0.5):
    """The bytes of `kind` whose values are multiples of `step` up to `hi` in magnitude (0 included). With the
    defaults, products are multiples of 1/4 below 9 and a K = 64 sum needs at most 12 significant bits: exact in
    f32 and within the tensor cores' reduced fp8 accumulation precision (about 14 bits after aligning products),
    so GPU, torch and interpreter agree bit for bit."""
    v = np.nan_to_num(decode_fp8(np.arange(256), kind), nan=0.5 * step, posinf=0.5 * step, neginf=0.5 * step)
    ok = (np.abs(v) <= hi) & (v / step == np.round(v / step))
    ok[0x80] = False                               # -0: a sum of only -0 would differ in sign bits, not in value
    return np.arange(256, dtype=np.uint8)[ok]


def acc_layout(n):
    """The packed f16 accumulator of m64nN as a (1, 1, 64, N/2) register view of uint32 words: word r holds row
    16w + l//4 + 8(r%2), word column 4(r//2) + l%4 (columns 8(r//2) + 2(l%4) and +1, the even one low)."""
    return TileLayout(S[(1, 1, 4, 2, 8, n // 8, 4) : (1, 1, 1 @ warpid, 1, 4 @ laneid, 2, 1 @ laneid)])


def opcode_of(n, atype, btype=None, acc="f32"):
    btype = btype or atype
    k = 32 if atype in FP8_TYPES else 16
    return f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{acc}.{atype}.{btype}"


def make_typed_kernel(n, atype, btype=None, acc="f32", a_regs=False, swizzle=128, kr=2):
    """Like make_kernel, for fp8 operands (k32 steps, K-major: A (64, 32 KR), B (N, 32 KR) as uint8 bytes) and/or
    f16 accumulators (Out (64, N/2) uint32 words of packed halves, the accumulator's own words); f32 accumulators
    give Out (64, N) float32. Returns the kernel and its (A, B, Out) shapes and dtypes."""
    btype = btype or atype
    fp8 = atype in FP8_TYPES
    e = 1 if fp8 else 2
    kt = 32 if fp8 else 16                         # K of one wgmma
    K = kt * kr
    edt = "uint8" if fp8 else "uint16"
    per = 4 // e                                   # elements per A word
    opcode = opcode_of(n, atype, btype, acc)
    la = shared_layout(64, kr, kt, e, swizzle, False)
    lb = shared_layout(n, kr, kt, e, swizzle, False)
    lar = a_regs_layout(kr)
    f32 = acc == "f32"
    ld = d_layout(n) if f32 else acc_layout(n)
    nd = n // 2 if f32 else n // 4                 # accumulator registers per thread
    dcols = n if f32 else n // 2
    a_size = la.storage_span((1, kr, 64, kt))
    b_size = lb.storage_span((1, kr, n, kt))
    out_dt = "float32" if f32 else "uint32"

    @tiledsl.jit
    def wgmma_typed(A: T.Tensor((64, K), edt), B: T.Tensor((n, K), edt), Out: T.Tensor((64, dcols), out_dt)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=128))
        tid = T.cuda.thread_id()
        lane = tid % 32
        w = tid // 32
        sa = T.alloc_shared((a_size,), edt)
        sb = T.alloc_shared((b_size,), edt)
        av = sa.view(1, kr, 64, kt, layout=la)
        bv = sb.view(1, kr, n, kt, layout=lb)
        for it in range(64 * K // 128):
            i = it * 128 + tid
            av[0, (i % K) // kt, i // K, i % kt] = A[i // K, i % K]
        for it in range((n * K + 127) // 128):
            i = it * 128 + tid
            if i < n * K:
                bv[0, (i % K) // kt, i // K, i % kt] = B[i // K, i % K]
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
        T.cuda.syncthreads()
        d = T.alloc_local((nd,), out_dt)
        ar = T.alloc_local((4 * kr,), "uint32")
        dv = d.view(1, 1, 64, dcols, layout=ld)
        if a_regs:
            for kk in T.unroll(kr):
                for r in T.unroll(4):
                    row = 16 * w + lane // 4 + 8 * (r % 2)
                    col = kt * kk + per * (lane % 4) + (kt // 2) * (r // 2)
                    word = T.uint32(0)
                    for h in T.unroll(per):
                        word = word | (T.uint32(A[row, col + h]) << (8 * e * h))
                    ar[4 * kk + r] = word
            T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, ar.view(1, kr, 64, 8, layout=lar),
                              scope="warpgroup")
            T.cuda.tile.apply(T.ptx[opcode], dv, ar.view(1, kr, 64, 8, layout=lar), bv, scope="warpgroup",
                              scale_d=0)
        else:
            T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], dv, scope="warpgroup")
            T.cuda.tile.apply(T.ptx[opcode], dv, av, bv, scope="warpgroup", scale_d=0)
        T.cuda.tile.apply(T.ptx["wgmma.commit_group.sync.aligned"], dv, scope="warpgroup")
        T.cuda.tile.apply(T.ptx["wgmma.wait_group.sync.aligned"], 0, dv, scope="warpgroup")
        for i in T.unroll(nd):
            if f32:
                Out[16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2] = d[i]
            else:
                Out[16 * w + lane // 4 + 8 * (i % 2), 4 * (i // 2) + lane % 4] = d[i]
    np_e = np.uint8 if fp8 else np.uint16
    return wgmma_typed, ((64, K), np_e), ((n, K), np_e), ((64, dcols), np.float32 if f32 else np.uint32)


def typed_inputs(n, atype, btype=None, acc="f32", kr=2, seed=0):
    """A, B as bits (uint8 fp8 bytes or uint16 f16 bits) of exactly representable small values, and the float64
    reference A @ B^T, exact in the accumulator type: fp8 from fp8_codes (halves up to 3; integers up to 4 for f16
    accumulators), f16 inputs halves up to 2 times integers up to 2, whose K-long sums are exact in f16."""
    btype = btype or atype
    rng = np.random.default_rng(seed)
    if atype in FP8_TYPES:
        K = 32 * kr
        # f16 accumulators: integers up to 4 (K = 64 sums of products stay integers below 2^11)
        pick = (lambda kind: fp8_codes(kind, 4.0, 1.0)) if acc == "f16" else fp8_codes
        a = rng.choice(pick(atype), (64, K))
        b = rng.choice(pick(btype), (n, K))
        ref = decode_fp8(a, atype) @ decode_fp8(b, btype).T
        return a.astype(np.uint8), b.astype(np.uint8), ref
    K = 16 * kr
    a = (rng.integers(-4, 5, (64, K)) / 2).astype(np.float16)      # |sum| <= 32 K multiples of 1/2: exact f16
    b = rng.integers(-2, 3, (n, K)).astype(np.float16)
    return a.view(np.uint16), b.view(np.uint16), a.astype(np.float64) @ b.astype(np.float64).T


def result_of(out, acc):
    """The (64, N) float64 result a kernel wrote: f32 as is, packed f16 words unpacked (even column low)."""
    if acc == "f32":
        return np.asarray(out, np.float64)
    return np.ascontiguousarray(out).view(np.float16).astype(np.float64)
