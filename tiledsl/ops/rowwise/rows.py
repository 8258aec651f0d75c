"""Rows of any length for the row-wise kernels (softmax_rows.py, norms.py): how a row of n values is split over a
block's threads, and the `@tiledsl.inline` helpers that move a thread's share between memory and registers.

A row of n float16/bfloat16 values is read in vectors of VEC elements, VEC the largest of 8, 4, 2, 1 dividing n
(16, 8, 4 or 2 bytes: ld.global.v4.b32, .v2.b32, .b32, .b16), so a row of any length is whole vectors and each
vector's alignment follows from n (the host makes the rows contiguous and their base 16-byte aligned). Vector c of
a row (c < n // VEC) belongs to thread c % threads, in its register slot c // threads: V = ceil(chunks / threads)
slots. When threads does not divide the chunks the last slot is a masked tail: its load is predicated (the
registers keep zeros), its store is predicated, and the kernels mask it out of their max reductions.
"""
import math

import tiledsl
from tiledsl import T

# a thread holds at most this many elements of a row in registers (V * VEC): 1024 threads x 128 = rows of 131072
MAX_PER_THREAD = 128
MAX_ROW = 1024 * MAX_PER_THREAD


class RowPlan(tuple):
    """(threads, VEC, V, chunks, full): threads a block, elements a vector, vectors a thread, vectors a row, and
    whether every slot is a whole vector of the row (no masked tail)."""
    __slots__ = ()

    def __new__(cls, threads, vec, v, chunks):
        return super().__new__(cls, (threads, vec, v, chunks, chunks % threads == 0))

    threads = property(lambda s: s[0])
    vec = property(lambda s: s[1])
    v = property(lambda s: s[2])
    chunks = property(lambda s: s[3])
    full = property(lambda s: s[4])


def plan(n, threads=None, per_thread=32):
    """The split of a row of n elements (1 <= n <= MAX_ROW): vectors of the widest width dividing n, threads a
    multiple of 32 (at most 1024) chosen so that a thread holds about `per_thread` elements."""
    if not 1 <= n <= MAX_ROW:
        raise tiledsl.LaunchError(f"row-wise kernels take rows of 1..{MAX_ROW} elements, got {n}")
    vec = next(w for w in (8, 4, 2, 1) if n % w == 0)
    chunks = n // vec
    if threads is None:
        want = math.ceil(chunks / max(1, per_thread // vec))
        threads = min(1024, max(32, -(-want // 32) * 32))
    if threads % 32 or not 32 <= threads <= 1024:
        raise tiledsl.LaunchError(f"threads must be a multiple of 32 in 32..1024, got {threads}")
    v = -(-chunks // threads)
    return RowPlan(threads, vec, v, chunks)


def words(vec):
    """(word dtype, words a vector, load opcode, store opcode) for vectors of vec 16-bit elements."""
    if vec == 1:
        return "uint16", 1, "ld.global.b16", "st.global.b16"
    w = vec // 2
    suffix = f".v{w}.b32" if w > 1 else ".b32"
    return "uint32", w, "ld.global" + suffix, "st.global" + suffix


@tiledsl.inline
def load_row(Xw, row, r, tid, p, ldop, W):
    """This thread's share of row `row` of Xw (the tensor viewed as words) into r (V x W words); a masked tail slot
    reads nothing and keeps zeros."""
    for v in T.unroll(p[2]):
        c = v * p[0] + tid
        if p[4] or v < p[2] - 1:
            T.cuda.tile.apply(T.ptx[ldop], r[v], Xw[row, c * W: c * W + W])
        else:
            for w in T.unroll(W):
                r[v, w] = 0
            T.cuda.tile.apply(T.ptx[ldop], r[v], Xw[row, c * W: c * W + W], pred=c < p[3], preserve_dst=True)


@tiledsl.inline
def load_vec(Ww, r, tid, p, ldop, W):
    """This thread's share of a vector of n elements (a weight) into r, as load_row."""
    for v in T.unroll(p[2]):
        c = v * p[0] + tid
        if p[4] or v < p[2] - 1:
            T.cuda.tile.apply(T.ptx[ldop], r[v], Ww[c * W: c * W + W])
        else:
            for w in T.unroll(W):
                r[v, w] = 0
            T.cuda.tile.apply(T.ptx[ldop], r[v], Ww[c * W: c * W + W], pred=c < p[3], preserve_dst=True)


@tiledsl.inline
def store_row(Yw, row, r, tid, p, stop, W):
    """r (this thread's share) into row `row` of Yw; a masked tail slot writes nothing."""
    for v in T.unroll(p[2]):
        c = v * p[0] + tid
        if p[4] or v < p[2] - 1:
            T.cuda.tile.apply(T.ptx[stop], Yw[row, c * W: c * W + W], r[v])
        else:
            T.cuda.tile.apply(T.ptx[stop], Yw[row, c * W: c * W + W], r[v], pred=c < p[3])


@tiledsl.inline
def to_float(h, f, p):
    """f[j] = float32 of this thread's element j (h: the loaded words viewed as the 16-bit float type)."""
    for j in T.unroll(p[2] * p[1]):
        f[j] = T.cast(h[j // p[1], j % p[1]], "float32")


def pack_opcode(dtype):
    """The instruction that rounds two float32 values to a word of two 16-bit `dtype` values."""
    return {"float16": "cvt.rn.f16x2.f32", "bfloat16": "cvt.rn.bf16x2.f32"}[dtype]


@tiledsl.inline
def from_float(f, r, h, p, dtype, cvt):
    """This thread's elements f (float32) rounded to `dtype` into its words r (h: r viewed as `dtype`): one
    cvt.rn.{f16x2,bf16x2}.f32 per pair of elements where the words hold pairs (T.cast's software bfloat16 rounding
    costs about seven integer instructions an element), T.cast where they hold one element (VEC = 1)."""
    if p[1] == 1:
        for j in T.unroll(p[2]):
            h[j, 0] = T.cast(f[j], dtype)
    else:
        for v in T.unroll(p[2]):
            for w in T.unroll(p[1] // 2):
                j = v * p[1] + 2 * w
                T.cuda.tile.apply(T.ptx[cvt], r[v, w:w + 1], f[j + 1:j + 2], f[j:j + 1])
