"""SwiGLU's elementwise half: y = silu(gate) * up, and its backward, over rows whose first n values are the gate
and last n the up projection (the output of one GEMM over the concatenated [W_gate; W_up] weight).

The host views the (R, 2n) input as (2R, n): row 2r is row r's gate, row 2r + 1 its up. Each thread owns one vector
of VEC elements (VEC the widest of 8, 4, 2, 1 dividing n: 16-, 8-, 4- or 2-byte loads) of one row; the grid is
(R, ceil(n / (VEC * THREADS))) (rows on x, whose limit is 2^31 - 1, not y's 65535), so a decode step's few rows
still spread over many blocks. Math in float32, one
rounding at the store (torch's bf16 `F.silu(g) * u` rounds twice); sigmoid as 1 / (1 + exp(-g)) with exp by
ex2.approx and an exact division.

backward: d_gate = dy * up * s * (1 + gate * (1 - s)), d_up = dy * gate * s, s = sigmoid(gate), written as the
(2R, n) view of the (R, 2n) gradient.
"""
import tiledsl
from tiledsl import T

from ..rowwise.rows import pack_opcode, words

THREADS = 128
_KERNELS = {}


def vector_width(n):
    return next(w for w in (8, 4, 2, 1) if n % w == 0)


def grid(n, rows):
    return (rows, -(-n // (vector_width(n) * THREADS)))


@tiledsl.inline
def to_f32(h, f, VEC):
    for j in T.unroll(VEC):
        f[j] = T.cast(h[0, j], "float32")


@tiledsl.inline
def from_f32(f, r, h, VEC, dtype, cvt):
    if VEC == 1:
        h[0, 0] = T.cast(f[0], dtype)
    else:
        for w in T.unroll(VEC // 2):
            T.cuda.tile.apply(T.ptx[cvt], r[0, w:w + 1], f[2 * w + 1:2 * w + 2], f[2 * w:2 * w + 1])


def make_silu_mul(n, dtype, backward=False):
    """Forward: (GU (2R, n), Y (R, n)). Backward: (GU (2R, n), DY (R, n), DGU (2R, n)). Launch: grid(n, R),
    THREADS threads."""
    key = (n, dtype, backward)
    if key in _KERNELS:
        return _KERNELS[key]
    VEC = vector_width(n)
    word, W, ldop, stop = words(VEC)
    chunks = n // VEC
    cvt = pack_opcode(dtype)

    if not backward:
        @tiledsl.jit
        def silu_mul(GU: T.Tensor(("R2", n), dtype), Y: T.Tensor(("R", n), dtype)):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=(R, 1), block=THREADS))  # noqa: F821
            c = T.cuda.block_id(1) * THREADS + T.cuda.thread_id()
            row = T.cuda.block_id(0)
            if c >= chunks:
                return
            rg = T.alloc_local((1, W), word)
            ru = T.alloc_local((1, W), word)
            fg = T.alloc_local((VEC,), "float32")
            fu = T.alloc_local((VEC,), "float32")
            GUw = GU.view(dtype=word)
            T.cuda.tile.apply(T.ptx[ldop], rg[0], GUw[2 * row, c * W: c * W + W])
            T.cuda.tile.apply(T.ptx[ldop], ru[0], GUw[2 * row + 1, c * W: c * W + W])
            to_f32(rg.view(dtype=dtype), fg, VEC)
            to_f32(ru.view(dtype=dtype), fu, VEC)
            for j in T.unroll(VEC):
                g = fg[j]
                fg[j] = g / (1.0 + T.exp(-g, approx=True)) * fu[j]
            from_f32(fg, rg, rg.view(dtype=dtype), VEC, dtype, cvt)
            T.cuda.tile.apply(T.ptx[stop], Y.view(dtype=word)[row, c * W: c * W + W], rg[0])

        _KERNELS[key] = silu_mul
        return silu_mul

    @tiledsl.jit
    def silu_mul_backward(GU: T.Tensor(("R2", n), dtype), DY: T.Tensor(("R", n), dtype),
                          DGU: T.Tensor(("R2", n), dtype)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=(R, 1), block=THREADS))  # noqa: F821
        c = T.cuda.block_id(1) * THREADS + T.cuda.thread_id()
        row = T.cuda.block_id(0)
        if c >= chunks:
            return
        rg = T.alloc_local((1, W), word)
        ru = T.alloc_local((1, W), word)
        rd = T.alloc_local((1, W), word)
        fg = T.alloc_local((VEC,), "float32")
        fu = T.alloc_local((VEC,), "float32")
        fd = T.alloc_local((VEC,), "float32")
        GUw = GU.view(dtype=word)
        T.cuda.tile.apply(T.ptx[ldop], rg[0], GUw[2 * row, c * W: c * W + W])
        T.cuda.tile.apply(T.ptx[ldop], ru[0], GUw[2 * row + 1, c * W: c * W + W])
        T.cuda.tile.apply(T.ptx[ldop], rd[0], DY.view(dtype=word)[row, c * W: c * W + W])
        to_f32(rg.view(dtype=dtype), fg, VEC)
        to_f32(ru.view(dtype=dtype), fu, VEC)
        to_f32(rd.view(dtype=dtype), fd, VEC)
        for j in T.unroll(VEC):
            g = fg[j]
            s = 1.0 / (1.0 + T.exp(-g, approx=True))
            fg[j] = fd[j] * fu[j] * s * (1.0 + g * (1.0 - s))
            fu[j] = fd[j] * g * s
        from_f32(fg, rg, rg.view(dtype=dtype), VEC, dtype, cvt)
        from_f32(fu, ru, ru.view(dtype=dtype), VEC, dtype, cvt)
        DGw = DGU.view(dtype=word)
        T.cuda.tile.apply(T.ptx[stop], DGw[2 * row, c * W: c * W + W], rg[0])
        T.cuda.tile.apply(T.ptx[stop], DGw[2 * row + 1, c * W: c * W + W], ru[0])

    _KERNELS[key] = silu_mul_backward
    return silu_mul_backward
