"""Softmax over rows of any length, forward and backward, float16 or bfloat16 in and out, float32 inside: one block
per row holds the row in registers (rows.py splits it), reduces across the block (tiledsl.lib.reductions).

- forward: y = exp(x - max) / sum(exp(x - max)); the exponential is ex2.approx.ftz.f32 of (x - max) * log2(e),
  the sum and the division exact float32 (as softmax.py's tuned float16 kernel).
- backward: dx = y * (dy - sum(dy * y)).

The torch op (tiledsl.ops.library.rowwise) moves the softmax axis last and makes the rows contiguous.
"""
import math

import tiledsl
from tiledsl import T

from ...lib.reductions import block_allreduce
from .rows import from_float, load_row, pack_opcode, plan, store_row, to_float, words

LOG2E = 1.4426950408889634
_KERNELS = {}


def make_softmax_forward(n, dtype, threads=None):
    """The forward kernel for rows of n `dtype` ("float16" or "bfloat16") values: (X, Y), both (R, n)."""
    p = tuple(plan(n, threads))
    key = ("fwd", n, dtype, p)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, V = p[0], p[1], p[2]
    word, W, ldop, stop = words(VEC)
    cvt = pack_opcode(dtype)

    @tiledsl.jit
    def softmax_forward(X: T.Tensor(("R", n), dtype), Y: T.Tensor(("R", n), dtype)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
        r = T.alloc_local((V, W), word)
        h = r.view(dtype=dtype)
        f = T.alloc_local((V * VEC,), "float32")
        red = T.alloc_shared((2, threads // 32), "float32")
        tid = T.cuda.thread_id()
        row = T.cuda.block_id()
        load_row(X.view(dtype=word), row, r, tid, p, ldop, W)
        to_float(h, f, p)
        if not p[4]:
            # the tail slot may lie past the row: -inf there takes no part in the max and exponentiates to 0
            ok = (V - 1) * threads + tid < p[3]
            for j in T.unroll(VEC):
                f[(V - 1) * VEC + j] = f[(V - 1) * VEC + j] if ok else T.float32(-math.inf)
        m = T.float32(-math.inf)
        for j in T.unroll(V * VEC):
            m = T.max(m, f[j])
        m = block_allreduce(m, red[0], "max", threads)
        s = T.float32(0)
        for j in T.unroll(V * VEC):
            f[j] = T.exp2((f[j] - m) * LOG2E, approx=True, ftz=True)
            s = s + f[j]
        inv = 1.0 / block_allreduce(s, red[1], "add", threads)
        for j in T.unroll(V * VEC):
            f[j] = f[j] * inv
        from_float(f, r, h, p, dtype, cvt)
        store_row(Y.view(dtype=word), row, r, tid, p, stop, W)

    _KERNELS[key] = softmax_forward
    return softmax_forward


def make_softmax_backward(n, dtype, threads=None):
    """The backward kernel for rows of n values: (Y, DY, DX), all (R, n) `dtype`; dx = y * (dy - sum(dy * y))."""
    p = tuple(plan(n, threads))
    key = ("bwd", n, dtype, p)
    if key in _KERNELS:
        return _KERNELS[key]
    threads, VEC, V = p[0], p[1], p[2]
    word, W, ldop, stop = words(VEC)
    cvt = pack_opcode(dtype)

    @tiledsl.jit
    def softmax_backward(Y: T.Tensor(("R", n), dtype), DY: T.Tensor(("R", n), dtype), DX: T.Tensor(("R", n), dtype)):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
        ry = T.alloc_local((V, W), word)
        rg = T.alloc_local((V, W), word)
        hy = ry.view(dtype=dtype)
        hg = rg.view(dtype=dtype)
        fy = T.alloc_local((V * VEC,), "float32")
        fg = T.alloc_local((V * VEC,), "float32")
        red = T.alloc_shared((threads // 32,), "float32")
        tid = T.cuda.thread_id()
        row = T.cuda.block_id()
        load_row(Y.view(dtype=word), row, ry, tid, p, ldop, W)
        load_row(DY.view(dtype=word), row, rg, tid, p, ldop, W)
        to_float(hy, fy, p)
        to_float(hg, fg, p)
        s = T.float32(0)
        for j in T.unroll(V * VEC):
            s = s + fy[j] * fg[j]            # masked slots hold zeros
        dot = block_allreduce(s, red, "add", threads)
        for j in T.unroll(V * VEC):
            hg[j // VEC, j % VEC] = T.cast(fy[j] * (fg[j] - dot), dtype)
        store_row(DX.view(dtype=word), row, rg, tid, p, stop, W)

    _KERNELS[key] = softmax_backward
    return softmax_backward
