"""Warp- and block-wide reductions for any kernel (tiledsl.ops.rowwise's softmax and layer norm, examples/reduce.py
use them), written as `@tiledsl.inline` helpers (expanded at each call site, so `op` and `threads` are compile-time
values): `from tiledsl.lib.reductions import block_allreduce`.

- `warp_allreduce(v, op)`: every lane of a full warp gets `op` ("add" or "max") over the warp's 32 float32 values:
  five `shfl.sync.bfly.b32` steps (the butterfly leaves the same result in every lane).
- `block_allreduce(v, red, op, threads)`: every thread of a block of `threads` threads (a multiple of 32, at most
  1024) gets `op` over the block: a warp reduction, one value per warp through `red` (a shared float32 buffer of at
  least threads // 32 elements) and one barrier, then a warp reduction of those values. It ends without a barrier:
  a second reduction right after it must use another buffer (or come after a `T.cuda.syncthreads()`).

"max" is `T.max` (max.f32: a NaN operand yields the other value).
"""
import math

import tiledsl
from tiledsl import T

FULL = 0xFFFFFFFF        # every lane of the warp takes part


@tiledsl.inline
def combine(a, b, op):
    """a + b or max(a, b), chosen at compile time by the static string `op`."""
    return a + b if op == "add" else T.max(a, b)


@tiledsl.inline
def warp_allreduce(v, op):
    t = T.alloc_local((1, 1), "float32")
    u = T.alloc_local((1, 1), "float32")
    t[0, 0] = v
    for s in T.unroll(5):
        T.cuda.tile.apply(T.ptx["shfl.sync.bfly.b32"], u, t, 16 >> s, 0x1F, FULL)
        t[0, 0] = combine(t[0, 0], u[0, 0], op)
    return t[0, 0]


@tiledsl.inline
def block_allreduce(v, red, op, threads):
    w = warp_allreduce(v, op)
    if threads > 32:
        lane = T.cuda.lane_id()
        if lane == 0:
            red[T.cuda.warp_id()] = w
        T.cuda.syncthreads()
        x = T.float32(0.0 if op == "add" else -math.inf)
        if lane < threads // 32:
            x = red[lane]
        w = warp_allreduce(x, op)
    return w
