"""Block-wide reductions the example kernels share, written as `@tiledsl.inline` helpers (expanded at each call).

`block_allreduce(v, red, op, threads)`: every thread of a block of `threads` threads gets `op` ("add" or "max")
over the block's `v` (float32). `red` is a shared float32 buffer of at least `threads` elements; the helper ends
with a barrier, so the caller may reuse `red` right after it.
"""
import tiledsl
from tiledsl import T


@tiledsl.inline
def combine(a, b, op):
    """a + b or max(a, b), chosen at compile time by the static string `op`."""
    return a + b if op == "add" else T.max(a, b)


@tiledsl.inline
def block_allreduce(v, red, op, threads):
    tid = T.cuda.thread_id()
    red[tid] = v
    T.cuda.syncthreads()
    for s in T.unroll(10):
        half = threads >> (s + 1)
        if half > 0:
            if tid < half:
                red[tid] = combine(red[tid], red[tid + half], op)
            T.cuda.syncthreads()
    out = red[0]
    T.cuda.syncthreads()
    return out
