"""FP8 (e4m3) quantisers with the scales matmul_fp8_blockwise and matmul_fp8 take, as tiledsl kernels:

    q, s = quantize_fp8_blockwise(x)                   # 1 x 128 blocks: s (M, K / 128) float32
    q, s = quantize_fp8(x, granularity="row")          # s (M, 1)
    q, s = quantize_fp8(x, granularity="tensor")       # s (1,)

x (M, K) of float16, bfloat16 or float32; q (M, K) torch.float8_e4m3fn, x ≈ q * s (s broadcast over its block).
Each block's scale is s = amax / 448 (amax: the largest |x| of the block, 448: e4m3's largest value; a block of
zeros gets s = 1) and q = e4m3(x * (448 / amax)): the product rounded once to f32, then to e4m3 by
cvt.rn.satfinite.e4m3x2.f32 (nearest even, saturating at ±448). `reference` does the same arithmetic in numpy, so
the interpreter tests compare bit for bit.

The blockwise kernel reads x once: each thread loads 8 elements (16 bytes of f16/bf16), a half-warp holds one
1 x 128 block and reduces its amax with four shfl.sync.bfly steps, every thread converts and stores its 8 bytes,
and the half-warp's first lane stores the scale. The row form runs one block of threads per row (its amax
reduced over the block, then the row read again from L2); the tensor form first reduces the tensor's amax on the
device (an atomic max of the non-negative floats' bits), then quantises every row with it: no host
synchronisation in either.
"""
import numpy as np

import tiledsl
from tiledsl import T

from ...lib.reductions import block_allreduce

E4M3_MAX = 448.0
BLOCK = 128
EPT = 8                     # elements a thread loads and converts
THREADS = 256
CVT = "cvt.rn.satfinite.e4m3x2.f32"
FULL = 0xFFFFFFFF
DTYPES = ("float16", "bfloat16", "float32")
_KERNELS = {}


@tiledsl.inline
def load8(Xw, row, ch, v, dt):
    """Elements 8 ch .. 8 ch + 7 of row `row` as float32 in v (16 bytes a load: one of f16/bf16, two of f32). The
    tensors are viewed as (M, K / 8, 8), so every chunk is provably 16-byte aligned."""
    if dt == "float32":
        r = T.alloc_local((2, 4), "uint32")
        for h in T.unroll(2):
            T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], r[h], Xw[row, ch, 4 * h: 4 * h + 4])
        f = r.view(dtype="float32")
        for j in T.unroll(EPT):
            v[j] = f[j // 4, j % 4]
    else:
        r = T.alloc_local((1, 4), "uint32")
        T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], r[0], Xw[row, ch, 0:4])
        h = r.view(dtype=dt)
        for j in T.unroll(EPT):
            v[j] = T.cast(h[0, j], "float32")


@tiledsl.inline
def amax8(v):
    m = T.float32(0.0)
    for j in T.unroll(EPT):
        m = T.max(m, T.abs(v[j]))
    return m


@tiledsl.inline
def store8(Qw, row, ch, v, rs):
    """v * rs as 8 e4m3 bytes at Q[row, 8 ch ..] (one 8-byte store)."""
    p = T.alloc_local((EPT // 2, 2), "float32")
    for j in T.unroll(EPT):
        p[j // 2, j % 2] = v[j] * rs
    hp = T.alloc_local((EPT // 2, 1), "uint16")
    T.cuda.tile.apply(T.ptx[CVT], hp, p[:, 1:2], p[:, 0:1])        # the upper byte from the odd element
    pk = T.alloc_local((2, 1), "uint32")
    T.cuda.tile.apply(T.ptx["mov.b32"], pk, hp.view(2, 2))
    T.cuda.tile.apply(T.ptx["st.global.v2.b32"], Qw[row, ch, 0:2], pk.view(2))


@tiledsl.inline
def scales_of(amax):
    """(s, 448 / amax) of a block's amax; a block of zeros gets (1, 1)."""
    s = T.float32(1.0)
    rs = T.float32(1.0)
    if amax > 0.0:
        s = amax / E4M3_MAX
        rs = E4M3_MAX / amax
    return s, rs


def make_quantize_blockwise(dt: str):
    """The 1 x 128 kernel for x of dtype dt: kernel(X (M, K), Q (M, K) uint8, S (M, K / 128) float32), K a
    multiple of 128."""
    key = ("block", dt)
    if key in _KERNELS:
        return _KERNELS[key]
    if dt not in DTYPES:
        raise tiledsl.LaunchError(f"quantize_fp8_blockwise takes float16, bfloat16 or float32, not {dt}")

    @tiledsl.jit
    def quantize_fp8_1x128(X: T.Tensor(("M", "KC", EPT), dt), Q: T.Tensor(("M", "KC", EPT), "uint8"),
                           S: T.Tensor(("M", "KB"), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=(M * KC + THREADS - 1) // THREADS,  # noqa: F821
                                                  block=THREADS))
        g = T.cuda.block_id(0) * THREADS + T.cuda.thread_id()
        per_row = KC  # noqa: F821
        ok = g < M * per_row  # noqa: F821
        row = T.min(g // per_row, M - 1)  # noqa: F821
        ch = g % per_row
        v = T.alloc_local((EPT,), "float32")
        for j in T.unroll(EPT):
            v[j] = 0.0
        Xw = X.view(dtype="uint32")
        Qw = Q.view(dtype="uint32")
        if ok:
            load8(Xw, row, ch, v, dt)
        t = T.alloc_local((1, 1), "float32")
        u = T.alloc_local((1, 1), "float32")
        t[0, 0] = amax8(v)
        # the half-warp's 16 lanes hold one block (K / 8 is a multiple of 16: the half-warps never straddle blocks)
        for s in T.unroll(4):
            T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], u, t, 8 >> s, 0x1F, FULL)
            t[0, 0] = T.max(t[0, 0], u[0, 0])
        sc, rs = scales_of(t[0, 0])
        if ok:
            store8(Qw, row, ch, v, rs)
            if ch % (BLOCK // EPT) == 0:
                S[row, ch // (BLOCK // EPT)] = sc
    _KERNELS[key] = quantize_fp8_1x128
    return quantize_fp8_1x128


def make_quantize_rows(dt: str, per_tensor: bool):
    """One block of THREADS threads per row: kernel(X (M, K), Q (M, K) uint8, S (M,) float32) with each row's
    amax, or with per_tensor kernel(X, Q, S (1,), A (1,) uint32) with the tensor's amax bits in A (make_amax)
    and its scale written to S by row 0's block. K a multiple of 8."""
    key = ("rows", dt, per_tensor)
    if key in _KERNELS:
        return _KERNELS[key]
    if dt not in DTYPES:
        raise tiledsl.LaunchError(f"quantize_fp8 takes float16, bfloat16 or float32, not {dt}")

    @tiledsl.inline
    def rows_body(X, Q, S, A, M, KC):
        row = T.cuda.block_id(0)
        tid = T.cuda.thread_id()
        Xw = X.view(dtype="uint32")
        Qw = Q.view(dtype="uint32")
        v = T.alloc_local((EPT,), "float32")
        if per_tensor:
            Af = A.view(dtype="float32")
            amax = Af[0]
        else:
            red = T.alloc_shared((THREADS // 32,), "float32")
            m = T.float32(0.0)
            for ch in range(tid, KC, THREADS):
                load8(Xw, row, ch, v, dt)
                m = T.max(m, amax8(v))
            amax = block_allreduce(m, red, "max", THREADS)
        sc, rs = scales_of(amax)
        for ch in range(tid, KC, THREADS):
            load8(Xw, row, ch, v, dt)
            store8(Qw, row, ch, v, rs)
        if tid == 0:
            if per_tensor:
                if row == 0:
                    S[0] = sc
            else:
                S[row] = sc

    if per_tensor:
        @tiledsl.jit
        def quantize_fp8_tensor(X: T.Tensor(("M", "KC", EPT), dt), Q: T.Tensor(("M", "KC", EPT), "uint8"),
                                S: T.Tensor((1,), "float32"), A: T.Tensor((1,), "uint32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=M, block=THREADS))  # noqa: F821
            rows_body(X, Q, S, A, M, KC)  # noqa: F821
        kernel = quantize_fp8_tensor
    else:
        @tiledsl.jit
        def quantize_fp8_rows(X: T.Tensor(("M", "KC", EPT), dt), Q: T.Tensor(("M", "KC", EPT), "uint8"),
                              S: T.Tensor(("M",), "float32")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=M, block=THREADS))  # noqa: F821
            rows_body(X, Q, S, None, M, KC)  # noqa: F821
        kernel = quantize_fp8_rows
    _KERNELS[key] = kernel
    return kernel


def make_amax(dt: str, blocks: int = 264):
    """kernel(X (M, K), A (1,) uint32): A = max(A, the bits of max |x|) (zero A first): `blocks` blocks walk the
    rows, each reduces its amax and adds it with one red.global.max.u32 (non-negative floats order as their
    bits)."""
    key = ("amax", dt, blocks)
    if key in _KERNELS:
        return _KERNELS[key]

    @tiledsl.jit
    def amax_fp8(X: T.Tensor(("M", "KC", EPT), dt), A: T.Tensor((1,), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=T.min(M, blocks), block=THREADS))  # noqa: F821
        tid = T.cuda.thread_id()
        Xw = X.view(dtype="uint32")
        v = T.alloc_local((EPT,), "float32")
        red = T.alloc_shared((THREADS // 32,), "float32")
        m = T.float32(0.0)
        G = T.cuda.grid_dim(0)
        for i in range((M - T.cuda.block_id(0) + G - 1) // G):  # noqa: F821
            row = T.cuda.block_id(0) + i * G
            for ch in range(tid, KC, THREADS):  # noqa: F821
                load8(Xw, row, ch, v, dt)
                m = T.max(m, amax8(v))
        m = block_allreduce(m, red, "max", THREADS)
        if tid == 0:
            bits = T.alloc_local((1,), "float32")
            bits[0] = m
            T.cuda.tile.apply(T.ptx["red.global.max.u32"], A, bits.view(dtype="uint32"))
    _KERNELS[key] = amax_fp8
    return amax_fp8


def _prepare(x, what, multiple):
    import torch
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype not in (torch.float16, torch.bfloat16,
                                                                          torch.float32):
        raise tiledsl.LaunchError(f"{what}: x must be a 2-D float16, bfloat16 or float32 torch tensor, got "
                                  f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
    if x.shape[1] % multiple:
        raise tiledsl.LaunchError(f"{what}: K={x.shape[1]} (x's columns) must be a multiple of {multiple}")
    if not x.is_cuda:
        raise tiledsl.LaunchError(f"{what} runs on a CUDA GPU; x is on {x.device} (reference() is the numpy form)")
    return x.contiguous(), str(x.dtype).replace("torch.", "")


def quantize_fp8_blockwise(x):
    """(q, s): x (M, K) as e4m3 with one float32 scale per 1 x 128 block (s (M, K / 128)); K a multiple of 128."""
    import torch
    x, dt = _prepare(x, "quantize_fp8_blockwise", BLOCK)
    M, K = x.shape
    q = torch.empty((M, K), dtype=torch.uint8, device=x.device)
    s = torch.empty((M, K // BLOCK), dtype=torch.float32, device=x.device)
    if M:
        make_quantize_blockwise(dt)(x.view(M, K // EPT, EPT), q.view(M, K // EPT, EPT), s)
    return q.view(torch.float8_e4m3fn), s


def quantize_fp8(x, granularity="tensor"):
    """(q, s): x (M, K) as e4m3 with one float32 scale per row (granularity="row": s (M, 1)) or for the tensor
    ("tensor": s (1,)); K a multiple of 8."""
    import torch
    if granularity not in ("tensor", "row"):
        raise tiledsl.LaunchError(f"quantize_fp8: granularity={granularity!r} is 'tensor' or 'row' (1 x 128 "
                                  f"blocks: quantize_fp8_blockwise)")
    x, dt = _prepare(x, "quantize_fp8", EPT)
    M, K = x.shape
    q = torch.empty((M, K), dtype=torch.uint8, device=x.device)
    if granularity == "row":
        s = torch.empty((M,), dtype=torch.float32, device=x.device)
        if M:
            make_quantize_rows(dt, False)(x.view(M, K // EPT, EPT), q.view(M, K // EPT, EPT), s)
        return q.view(torch.float8_e4m3fn), s.view(M, 1)
    a = torch.zeros((1,), dtype=torch.int32, device=x.device).view(torch.uint32) if hasattr(torch, "uint32") \
        else torch.zeros((1,), dtype=torch.int32, device=x.device)
    s = torch.ones((1,), dtype=torch.float32, device=x.device)
    if M:
        make_amax(dt)(x.view(M, K // EPT, EPT), a)
        make_quantize_rows(dt, True)(x.view(M, K // EPT, EPT), q.view(M, K // EPT, EPT), s, a)
    return q.view(torch.float8_e4m3fn), s


def reference(x, block=BLOCK):
    """numpy: (q bytes, s) of x (M, K) with one scale per 1 x block (block = K: per row; block = None: the
    tensor), the kernels' arithmetic in float32, bit for bit."""
    from tiledsl.interpreter import rounding as R
    x = np.asarray(x, np.float32)
    M, K = x.shape
    if block is None:
        xb = x.reshape(1, M * K)
    else:
        xb = x.reshape(M * (K // block), block)
    amax = np.abs(xb).max(axis=1, keepdims=True).astype(np.float32)
    zero = amax == 0
    s = np.where(zero, np.float32(1), amax / np.float32(E4M3_MAX)).astype(np.float32)
    with np.errstate(divide="ignore"):
        rs = np.where(zero, np.float32(1), np.float32(E4M3_MAX) / amax).astype(np.float32)
    p = (xb * rs).astype(np.float32)
    r = np.clip(R.round_to(R.E4M3, p.astype(np.float64), None, "rn"), -E4M3_MAX, E4M3_MAX)
    q = R.encode(R.E4M3, r).reshape(M, K)
    if block is None:
        return q, s.reshape(1)
    return q, s.reshape(M, K // block)
