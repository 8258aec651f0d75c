"""Row softmax of a float16 matrix in one pass: one block per row holds the row in registers (16-byte loads),
reduces its max and its sum of exponentials across the block, and writes the result with 16-byte stores.
The exponential is `ex2.approx.ftz.f32` of (x - max) * log2(e); the sum and the division are exact float32.

    python examples/softmax.py         # on the GPU: 8192 rows of 4096 against torch.softmax
    (no GPU: runs a small case on the CPU interpreter)
"""
import argparse
import math
import sys

import numpy as np

import tiledsl
from tiledsl import T
from reductions import block_allreduce

LOG2E = 1.4426950408889634


# threads per block for a row length, measured on the H200 (benchmarks/kernels.py --sweep); other lengths take
# up to 1024 threads of one 16-byte vector each, then more vectors per thread
TUNED = {}


def plan(n, threads=None):
    """(threads, vectors per thread) for rows of n halves: 16-byte vectors, up to 1024 threads a block."""
    if n % 256 or not 256 <= n <= 65536:
        raise tiledsl.LaunchError(f"softmax supports rows of 256..65536 halves in multiples of 256, got {n}")
    threads = threads or TUNED.get(n) or n // (8 * max(1, n // (8 * 1024)))
    if threads % 32 or not 32 <= threads <= 1024 or n % (8 * threads):
        raise tiledsl.LaunchError(f"rows of {n} halves cannot be split over {threads} threads of whole 16-byte "
                                  f"vectors (a multiple of 32, at most 1024, dividing {n // 8})")
    return threads, n // (8 * threads)


_KERNELS = {}


def make_softmax(n, threads=None):
    """The kernel for rows of n float16 values (any number of rows), over `threads` threads a block."""
    threads, V = plan(n, threads)
    if (n, threads) in _KERNELS:
        return _KERNELS[(n, threads)]

    @tiledsl.jit
    def softmax_rows(X: T.Tensor(("R", n), "float16"), Y: T.Tensor(("R", n), "float16")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
        r = T.alloc_local((V, 4), "uint32")          # the row's share: V vectors of 8 halves
        h = r.view(dtype="float16")
        f = T.alloc_local((V * 8,), "float32")
        red = T.alloc_shared((2, threads // 32), "float32")   # one value per warp, per reduction
        tid = T.cuda.thread_id()
        row = T.cuda.block_id()
        Xw = X.view(dtype="uint32")
        for v in T.unroll(V):
            T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], r[v],
                              Xw[row, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4])
        m = T.float32(-math.inf)
        for j in T.unroll(V * 8):
            f[j] = T.cast(h[j // 8, j % 8], "float32")
            m = T.max(m, f[j])
        m = block_allreduce(m, red[0], "max", threads)
        for j in T.unroll(V * 8):
            f[j] = (f[j] - m) * LOG2E
        T.cuda.tile.apply(T.ptx["ex2.approx.ftz.f32"], f.view(V * 8, 1), f.view(V * 8, 1))
        s = T.float32(0)
        for j in T.unroll(V * 8):
            s = s + f[j]
        inv = 1.0 / block_allreduce(s, red[1], "add", threads)
        for j in T.unroll(V * 8):
            h[j // 8, j % 8] = T.cast(f[j] * inv, "float16")
        Yw = Y.view(dtype="uint32")
        for v in T.unroll(V):
            T.cuda.tile.apply(T.ptx["st.global.v4.b32"], Yw[row, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4],
                              r[v])

    _KERNELS[(n, threads)] = softmax_rows
    return softmax_rows


def softmax(x, out=None):
    """softmax over the last axis of a 2-D float16 array (torch/cupy on the GPU; numpy runs on the interpreter)."""
    if x.ndim != 2:
        raise tiledsl.LaunchError(f"softmax takes a 2-D array, got {x.ndim}-D")
    k = make_softmax(x.shape[1])
    if out is None:
        out = sys.modules[type(x).__module__.split(".")[0]].empty_like(x)      # numpy, cupy or torch
    if isinstance(x, np.ndarray):
        k = tiledsl.jit(k.fn, interpret=True)
    k(x, out)
    return out


def reference(x):
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=4096)
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        x = (np.random.default_rng(0).standard_normal((4, 512)) * 4).astype(np.float16)
        y = softmax(x)
        err = np.abs(y.astype(np.float64) - reference(x)).max()
        assert err < 2e-3, err
        print(f"softmax: no GPU found; ran 4 rows of 512 on the CPU interpreter: max error {err:.1e}")
        return
    import torch
    x = torch.randn(opts.rows, opts.cols, device="cuda", dtype=torch.float16) * 4
    y = softmax(x)
    torch.testing.assert_close(y, torch.softmax(x.float(), dim=1).half(), rtol=2e-3, atol=2e-4)
    print(f"softmax: OK on the GPU ({opts.rows} rows of {opts.cols} halves)")


if __name__ == "__main__":
    sys.exit(main())
