"""Layer norm forward over the last axis of a float16 matrix, y = (x - mean) / sqrt(var + eps) * w + b: one
block per row holds the row in registers (16-byte loads), reduces the sum and then the sum of squared deviations
across the block (two exact float32 passes over registers, no second read of memory), and writes float16.
1/sqrt is `rsqrt.approx.ftz.f32`, as CUDA's rsqrtf. (`python examples/layernorm.py` runs it.)
"""
import sys

import numpy as np

import tiledsl
from tiledsl import T

from ...lib.reductions import block_allreduce
from .softmax import plan

_KERNELS = {}


# threads per block for a row length, measured on the H200 (benchmarks/kernels.py --sweep)
TUNED = {4096: 128, 8192: 128, 16384: 256}


def make_layernorm(n, threads=None):
    """The kernel for rows of n float16 values (any number of rows), over `threads` threads a block."""
    threads, V = plan(n, threads or TUNED.get(n))
    if (n, threads) in _KERNELS:
        return _KERNELS[(n, threads)]

    @tiledsl.jit
    def layernorm(X: T.Tensor(("R", n), "float16"), W: T.Tensor((n,), "float16"), B: T.Tensor((n,), "float16"),
                  Y: T.Tensor(("R", n), "float16"), eps: T.float32):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
        r = T.alloc_local((V, 4), "uint32")
        h = r.view(dtype="float16")
        f = T.alloc_local((V * 8,), "float32")
        red = T.alloc_shared((2, threads // 32), "float32")   # one value per warp, per reduction
        tid = T.cuda.thread_id()
        row = T.cuda.block_id()
        Xw = X.view(dtype="uint32")
        for v in T.unroll(V):
            T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], r[v],
                              Xw[row, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4])
        s = T.float32(0)
        for j in T.unroll(V * 8):
            f[j] = T.cast(h[j // 8, j % 8], "float32")
            s = s + f[j]
        mean = block_allreduce(s, red[0], "add", threads) * (1.0 / n)
        q = T.float32(0)
        for j in T.unroll(V * 8):
            f[j] = f[j] - mean
            q = q + f[j] * f[j]
        rs = T.alloc_local((1, 1), "float32")
        rs[0, 0] = block_allreduce(q, red[1], "add", threads) * (1.0 / n) + eps
        T.cuda.tile.apply(T.ptx["rsqrt.approx.ftz.f32"], rs, rs)
        wr = T.alloc_local((V, 4), "uint32")       # the weight and bias of this thread's columns (L2-resident)
        br = T.alloc_local((V, 4), "uint32")
        wh = wr.view(dtype="float16")
        bh = br.view(dtype="float16")
        Ww = W.view(dtype="uint32")
        Bw = B.view(dtype="uint32")
        for v in T.unroll(V):
            T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], wr[v], Ww[(v * threads + tid) * 4: (v * threads + tid) * 4 + 4])
            T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], br[v], Bw[(v * threads + tid) * 4: (v * threads + tid) * 4 + 4])
        for j in T.unroll(V * 8):
            y = f[j] * rs[0, 0] * T.cast(wh[j // 8, j % 8], "float32") + T.cast(bh[j // 8, j % 8], "float32")
            h[j // 8, j % 8] = T.cast(y, "float16")
        Yw = Y.view(dtype="uint32")
        for v in T.unroll(V):
            T.cuda.tile.apply(T.ptx["st.global.v4.b32"], Yw[row, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4],
                              r[v])

    _KERNELS[(n, threads)] = layernorm
    return layernorm


def layer_norm(x, weight, bias, eps=1e-5, out=None):
    """Layer norm over the last axis of a 2-D float16 array with float16 weight and bias (torch/cupy on the GPU;
    numpy runs on the interpreter)."""
    if x.ndim != 2:
        raise tiledsl.LaunchError(f"layer_norm takes a 2-D array, got {x.ndim}-D")
    k = make_layernorm(x.shape[1])
    if out is None:
        out = sys.modules[type(x).__module__.split(".")[0]].empty_like(x)      # numpy, cupy or torch
    if isinstance(x, np.ndarray):
        k = tiledsl.jit(k.fn, interpret=True)
    k(x, weight, bias, out, float(eps))
    return out


def reference(x, w, b, eps):
    xf = x.astype(np.float64)
    mu = xf.mean(axis=1, keepdims=True)
    return (xf - mu) / np.sqrt(xf.var(axis=1, keepdims=True) + eps) * w.astype(np.float64) + b.astype(np.float64)
