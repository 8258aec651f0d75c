"""Row softmax of a float16 matrix in one pass: one block per row holds the row in registers (16-byte loads),
reduces its max and its sum of exponentials across the block, and writes the result with 16-byte stores.
The exponential is `ex2.approx.ftz.f32` of (x - max) * log2(e); the sum and the division are exact float32.
(`python examples/softmax.py` runs it.)
"""
import math
import sys

import numpy as np

import tiledsl
from tiledsl import T

from ...lib.reductions import block_allreduce
from ..device import NUM_SMS, sm_count

LOG2E = 1.4426950408889634


# threads per block for a row length, measured on the H200 (benchmarks/kernels.py --sweep); other lengths take
# up to 1024 threads of one 16-byte vector each, then more vectors per thread
TUNED = {4096: 128, 8192: 256, 16384: 256, 32768: 512}
# row length -> resident blocks per SM of the pipelined kernel, where it won (0: the one-row-per-block kernel)
PIPELINED = {4096: 0, 8192: 0, 16384: 0, 32768: 4}


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


@tiledsl.inline
def softmax_in_registers(r, f, red, threads, V):
    """Replace the row held by the block (this thread's share: V vectors of 8 halves in `r`) by its softmax,
    `f` (V * 8 float32) as scratch, `red` (2 x warps float32, shared) for the two block reductions."""
    h = r.view(dtype="float16")
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


def make_softmax(n, threads=None, pipelined=None, sms=NUM_SMS, per_sm=1):
    """The kernel for rows of n float16 values (any number of rows), over `threads` threads a block.

    pipelined: `per_sm` resident blocks per SM walk their rows, copying the next row into shared memory
    (cp.async, 16 bytes per thread and instruction) while it normalizes the current one in registers, so the
    memory system never waits for a block's reductions; the default for rows too long for two blocks per SM."""
    threads, V = plan(n, threads)
    if pipelined is None:
        pipelined = bool(PIPELINED.get(n, V >= 4))
        per_sm = PIPELINED.get(n) or per_sm
    key = (n, threads, pipelined, sms * per_sm if pipelined else None)
    blocks = sms * per_sm
    if key in _KERNELS:
        return _KERNELS[key]

    if not pipelined:
        @tiledsl.jit
        def softmax_rows(X: T.Tensor(("R", n), "float16"), Y: T.Tensor(("R", n), "float16")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=R, block=threads))  # noqa: F821
            r = T.alloc_local((V, 4), "uint32")          # the row's share: V vectors of 8 halves
            f = T.alloc_local((V * 8,), "float32")
            red = T.alloc_shared((2, threads // 32), "float32")   # one value per warp, per reduction
            tid = T.cuda.thread_id()
            row = T.cuda.block_id()
            Xw = X.view(dtype="uint32")
            Yw = Y.view(dtype="uint32")
            for v in T.unroll(V):
                T.cuda.tile.apply(T.ptx["ld.global.v4.b32"], r[v],
                                  Xw[row, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4])
            softmax_in_registers(r, f, red, threads, V)
            for v in T.unroll(V):
                T.cuda.tile.apply(T.ptx["st.global.v4.b32"],
                                  Yw[row, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4], r[v])
    else:
        @tiledsl.jit
        def softmax_rows(X: T.Tensor(("R", n), "float16"), Y: T.Tensor(("R", n), "float16")):
            T.device_entry(launch=T.cuda.LaunchConfig(grid=T.min(R, blocks), block=threads))  # noqa: F821
            G = T.cuda.grid_dim()
            r = T.alloc_local((V, 4), "uint32")
            f = T.alloc_local((V * 8,), "float32")
            red = T.alloc_shared((2, threads // 32), "float32")
            stage = T.alloc_shared((n // 2,), "uint32")    # the next row, as 32-bit words
            tid = T.cuda.thread_id()
            bid = T.cuda.block_id()
            Xw = X.view(dtype="uint32")
            Yw = Y.view(dtype="uint32")
            # every thread copies exactly the 16-byte pieces it reads back later, so its own wait_group is all
            # the synchronisation the staging buffer needs
            for v in T.unroll(V):
                T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], stage[(v * threads + tid) * 4: (v * threads + tid) * 4 + 4],
                                  Xw[bid, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4], chunk_bytes=16)
            T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
            for k in range((R - bid + G - 1) // G):  # noqa: F821
                row = bid + k * G
                T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)
                for v in T.unroll(V):
                    T.cuda.tile.apply(T.ptx["ld.shared.v4.b32"], r[v],
                                      stage[(v * threads + tid) * 4: (v * threads + tid) * 4 + 4])
                if row + G < R:  # noqa: F821
                    for v in T.unroll(V):
                        T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"],
                                          stage[(v * threads + tid) * 4: (v * threads + tid) * 4 + 4],
                                          Xw[row + G, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4],
                                          chunk_bytes=16)
                T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
                softmax_in_registers(r, f, red, threads, V)
                for v in T.unroll(V):
                    T.cuda.tile.apply(T.ptx["st.global.v4.b32"],
                                      Yw[row, (v * threads + tid) * 4: (v * threads + tid) * 4 + 4], r[v])

    _KERNELS[key] = softmax_rows
    return softmax_rows


def softmax(x, out=None):
    """softmax over the last axis of a 2-D float16 array (torch/cupy on the GPU; numpy runs on the interpreter)."""
    if x.ndim != 2:
        raise tiledsl.LaunchError(f"softmax takes a 2-D array, got {x.ndim}-D")
    k = make_softmax(x.shape[1], sms=sm_count(x))
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
