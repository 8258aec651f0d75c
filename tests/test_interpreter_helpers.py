"""Shared pieces of the interpreter tests: independent exact references and the mma test kernel.

The rounding reference here does not share code with the interpreter: it finds the two representable neighbours
of an exact rational by bisecting over bit patterns (positive floats are ordered like their bits) and picks one.
"""
from fractions import Fraction

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

# ---------------------------------------------------------------- exact reference rounding

FMT_BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
INF_BITS = {"f16": 0x7C00, "bf16": 0x7F80, "f32": 0x7F800000, "f64": 0x7FF0000000000000}
TOP = {"f16": Fraction(2) ** 16, "bf16": Fraction(2) ** 128, "f32": Fraction(2) ** 128, "f64": Fraction(2) ** 1024}


def value_of(fmt, bits):
    """Exact value of a non-negative finite bit pattern."""
    if fmt == "f16":
        return Fraction(float(np.array(bits, np.uint16).view(np.float16)))
    if fmt == "bf16":
        return Fraction(float(np.array(bits << 16, np.uint32).view(np.float32)))
    if fmt == "f64":
        return Fraction(float(np.array(bits, np.uint64).view(np.float64)))
    return Fraction(float(np.array(bits, np.uint32).view(np.float32)))


def ref_round_bits(q: Fraction, fmt: str, mode: str, zero_sign=0) -> int:
    """Bits of the exact rational q rounded once to fmt ('f16', 'bf16', 'f32', 'f64') in mode (rn rz rm rp)."""
    sign = 1 << (FMT_BITS[fmt] - 1)
    if q == 0:
        return sign if zero_sign else 0
    neg = q < 0
    a = -q if neg else q
    lo, hi = 0, INF_BITS[fmt]                  # invariant: value(lo) <= a, value(hi) > a (inf counts as TOP)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if value_of(fmt, mid) <= a:
            lo = mid
        else:
            hi = mid
    vlo = value_of(fmt, lo)
    vhi = TOP[fmt] if hi == INF_BITS[fmt] else value_of(fmt, hi)
    if vlo == a:
        pick = lo
    elif mode == "rz" or (mode == "rm" and not neg) or (mode == "rp" and neg):
        pick = lo
    elif mode in ("rm", "rp"):
        pick = hi
    else:
        d_lo, d_hi = a - vlo, vhi - a
        pick = lo if d_lo < d_hi else hi if d_hi < d_lo else (lo if lo % 2 == 0 else hi)
    return pick | (sign if neg else 0)


def f32_bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


# ---------------------------------------------------------------- mma: layouts and host-side fragment images

def _strides(extents, order):
    """Mixed-radix strides for storage factors `extents`, taken in the order `order` (slowest first)."""
    strides = [0] * len(extents)
    acc = 1
    for i in reversed(order):
        strides[i] = acc
        acc *= extents[i]
    return strides, acc


def layout_a(mr, kr, k, order=None, bad=False):
    """A view (mr, kr, 16, k/2) of b32 words; storage factors (mr, kr, row//8[, word//4]) in `order`."""
    st = [mr, kr, 2] + ([2] if k == 16 else [])
    order = list(range(len(st))) if order is None else list(order)
    s, n = _strides(st, order)
    row_lane, word_lane = (1 @ laneid, 8 @ laneid) if bad else (4 @ laneid, 1 @ laneid)
    ext = (mr, kr, 2, 8) + ((2,) if k == 16 else ()) + (4,)
    strides = (s[0], s[1], s[2], row_lane) + ((s[3],) if k == 16 else ()) + (word_lane,)
    return TileLayout(S[ext: strides]), n


def layout_b(nr, kr, k, order=None, bad=False):
    st = [nr, kr] + ([2] if k == 16 else [])
    order = list(range(len(st))) if order is None else list(order)
    s, n = _strides(st, order)
    row_lane, word_lane = (1 @ laneid, 8 @ laneid) if bad else (4 @ laneid, 1 @ laneid)
    ext = (nr, kr, 8) + ((2,) if k == 16 else ()) + (4,)
    strides = (s[0], s[1], row_lane) + ((s[2],) if k == 16 else ()) + (word_lane,)
    return TileLayout(S[ext: strides]), n


def layout_d(mr, nr, order=None, bad=False):
    st = [mr, nr, 2, 2]
    order = list(range(4)) if order is None else list(order)
    s, n = _strides(st, order)
    row_lane, col_lane = (1 @ laneid, 8 @ laneid) if bad else (4 @ laneid, 1 @ laneid)
    ext = (mr, nr, 2, 8, 4, 2)
    return TileLayout(S[ext: (s[0], s[1], s[2], row_lane, col_lane, s[3])]), n


def owners(layout, shape):
    """{coord: (lane, slot)} for every coordinate of a register view."""
    out = {}
    for coord, slot, ax in layout.owners(shape):
        out[coord] = (ax.get("laneid", 0), slot)
    return out


def half_bits(x, ab):
    x = np.asarray(x, np.float64)
    if ab == "f16":
        return x.astype(np.float16).view(np.uint16)
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)   # values chosen exact in bf16


@tiledsl.jit(interpret=True)
def mma_kernel(Ar: T.Tensor((32, "na"), "uint32"), Br: T.Tensor((32, "nb"), "uint32"),
               Cr: T.Tensor((32, "nd"), "float32"), Dr: T.Tensor((32, "nd"), "float32"),
               OPC: T.constexpr, NA: T.constexpr, NB: T.constexpr, ND: T.constexpr,
               SA: T.constexpr, SB: T.constexpr, SD: T.constexpr,
               LA: T.constexpr, LB: T.constexpr, LD: T.constexpr, TENSOR_C: T.constexpr, CVAL: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    ar = T.alloc_local((NA,), "uint32")
    br = T.alloc_local((NB,), "uint32")
    cr = T.alloc_local((ND,), "float32")
    dr = T.alloc_local((ND,), "float32")
    for s in range(NA):
        ar[s] = Ar[lane, s]
    for s in range(NB):
        br[s] = Br[lane, s]
    for s in range(ND):
        cr[s] = Cr[lane, s]
    av = ar.view(SA, layout=LA)
    bv = br.view(SB, layout=LB)
    cv = cr.view(SD, layout=LD)
    dv = dr.view(SD, layout=LD)
    if TENSOR_C:
        T.cuda.tile.apply(T.ptx[OPC], dv, av, bv, cv, scope="warp")
    else:
        T.cuda.tile.apply(T.ptx[OPC], dv, av, bv, T.float32(CVAL), scope="warp")
    for s in range(ND):
        Dr[lane, s] = dr[s]


def run_mma(mr, nr, kr, k, ab, a, b, c=None, cval=0.0, orders=(None, None, None), bad=(False, False, False),
            d_layout=None):
    """Run mma_kernel: a (16*mr, k*kr), b (8*nr, k*kr) values exact in `ab`, c (16*mr, 8*nr) or a scalar cval.
    Returns the (16*mr, 8*nr) float32 result. `d_layout`: (layout, slots) replacing D's (and C's) layout."""
    la, na = layout_a(mr, kr, k, orders[0], bad[0])
    lb, nb = layout_b(nr, kr, k, orders[1], bad[1])
    ld, nd = d_layout or layout_d(mr, nr, orders[2], bad[2])
    sa, sb, sd = (mr, kr, 16, k // 2), (nr, kr, 8, k // 2), (mr, nr, 16, 8)
    ah, bh = half_bits(a, ab).astype(np.uint32), half_bits(b, ab).astype(np.uint32)
    Ar = np.zeros((32, na), np.uint32)
    for (mi, ki, row, w), (lane, slot) in owners(la, sa).items():
        col = ki * k + 2 * w
        Ar[lane, slot] = ah[mi * 16 + row, col] | (ah[mi * 16 + row, col + 1] << 16)
    Br = np.zeros((32, nb), np.uint32)
    for (ni, ki, row, w), (lane, slot) in owners(lb, sb).items():
        col = ki * k + 2 * w
        Br[lane, slot] = bh[ni * 8 + row, col] | (bh[ni * 8 + row, col + 1] << 16)
    dmap = owners(ld, sd)
    Cr = np.zeros((32, nd), np.float32)
    if c is not None:
        for (mi, ni, row, col), (lane, slot) in dmap.items():
            Cr[lane, slot] = c[mi * 16 + row, ni * 8 + col]
    Dr = np.full((32, nd), np.nan, np.float32)
    opc = f"mma.sync.aligned.m16n8k{k}.row.col.f32.{ab}.{ab}.f32"
    mma_kernel(Ar, Br, Cr, Dr, opc, na, nb, nd, sa, sb, sd, la, lb, ld, c is not None, float(cval))
    out = np.zeros((16 * mr, 8 * nr), np.float32)
    for (mi, ni, row, col), (lane, slot) in dmap.items():
        out[mi * 16 + row, ni * 8 + col] = Dr[lane, slot]
    return out


def exact_in(ab, rng, shape, lo=-8, hi=9, scale=8):
    """Random values exactly representable in f16 and bf16 (small multiples of 1/scale)."""
    return rng.integers(lo, hi, shape) / scale
