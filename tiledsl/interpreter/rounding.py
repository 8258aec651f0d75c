"""Floating-point formats and exact rounding, vectorised with numpy.

The one primitive is `round_to(fmt, s, e, mode)`: the exact value `s + e` (two float64 arrays, `e` the residual of
an error-free transformation, |e| at most half the float64 gap at `s`) rounded ONCE to `fmt` in `mode`. Because the
f16/bf16/f32 grids (points and midpoints) are subsets of the float64 grid, `s` decides everything except when it
sits exactly on a target point or midpoint; then the sign of `e` breaks the tie. No double rounding anywhere.

Products of two f32 (or narrower) values are exact in float64, and `two_sum` makes their sum with a third value
exact as a pair, so fma/add/sub/mul of f16, bf16 and f32 get one correctly directed rounding. float64 operations
in a directed mode and fma.f64 fall back to `fractions.Fraction`, one element at a time (rare in kernels).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

MODES = ("rn", "rz", "rm", "rp")


class Fmt:
    """An IEEE binary format: precision P (with the hidden bit), exponent range, width, canonical NaN."""

    def __init__(self, name, P, emin, emax, bits, nan):
        self.name, self.P, self.emin, self.emax, self.bits, self.nan = name, P, emin, emax, bits, nan
        self.qmin = emin - (P - 1)                       # exponent of the smallest subnormal
        self.maxval = (2.0 - 2.0 ** (1 - P)) * 2.0 ** emax
        self.minnormal = 2.0 ** emin
        self.uint = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]

    def __repr__(self):
        return self.name


F16 = Fmt("f16", 11, -14, 15, 16, 0x7FFF)
BF16 = Fmt("bf16", 8, -126, 127, 16, 0x7FFF)
F32 = Fmt("f32", 24, -126, 127, 32, 0x7FFFFFFF)
F64 = Fmt("f64", 53, -1022, 1023, 64, 0x7FFFFFFFFFFFFFFF)
FMTS = {"f16": F16, "bf16": BF16, "f32": F32, "f64": F64}
# the 8-bit formats of cvt.{e4m3x2,e5m2x2}.f32 (sm_89) and of fp8 wgmma: e5m2 is IEEE-like (inf, NaNs); e4m3 (the
# "fn" variant) has no infinity and spends only S.1111.111 on NaN, so its largest value is 1.75 * 2**8 = 448, not
# the IEEE formula's 480; round_to then overflows past 448 (to inf, which .satfinite clamps back to 448)
E4M3 = Fmt("e4m3", 4, -6, 8, 8, 0x7F)
E4M3.maxval = 448.0
E5M2 = Fmt("e5m2", 3, -14, 15, 8, 0x7F)
FP8_FMTS = {"e4m3": E4M3, "e5m2": E5M2}


# ---------------------------------------------------------------- bits <-> values

def decode(fmt: Fmt, bits) -> np.ndarray:
    """Bit patterns (any unsigned/signed integer array of the format's width) -> float64 values (exact)."""
    bits = np.asarray(bits)
    if fmt in (E4M3, E5M2):
        return _decode_fp8(fmt, bits)
    if fmt is F16:
        return bits.astype(np.uint16).view(np.float16).astype(np.float64)
    if fmt is BF16:
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if fmt is F32:
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    return bits.astype(np.uint64).view(np.float64).copy()


def encode(fmt: Fmt, vals, canonical_nan=True) -> np.ndarray:
    """float64 values already representable in `fmt` (or inf/NaN) -> bit patterns; NaN becomes canonical."""
    vals = np.asarray(vals, np.float64)
    if fmt in (E4M3, E5M2):
        return _encode_fp8(fmt, vals)
    if fmt is F16:
        out = vals.astype(np.float16).view(np.uint16)
    elif fmt is BF16:
        out = (vals.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    elif fmt is F32:
        out = vals.astype(np.float32).view(np.uint32)
    else:
        out = vals.view(np.uint64).copy()
    if canonical_nan and fmt is not F64:
        nan = np.isnan(vals)
        if nan.any():
            out = np.where(nan, fmt.uint(fmt.nan), out).astype(fmt.uint)
    return out


def _encode_fp8(fmt: Fmt, vals) -> np.ndarray:
    """float64 values representable in e4m3/e5m2 (or +-inf for e5m2, NaN) -> bytes (numpy has no 8-bit floats):
    sign, biased exponent (0 for subnormals), P - 1 mantissa bits; NaN is the canonical 0x7F."""
    a = np.abs(vals)
    sign = np.signbit(vals).astype(np.uint8) << np.uint8(7)
    _, ex = np.frexp(np.where(np.isfinite(a) & (a > 0), a, 1.0))
    e = np.maximum(ex - 1, fmt.emin)                      # unbiased exponent; subnormals sit at emin
    normal = a >= fmt.minnormal
    man = np.where(normal, a / np.ldexp(1.0, e) - 1.0, a / fmt.minnormal) * 2.0 ** (fmt.P - 1)
    efield = np.where(normal, e - fmt.emin + 1, 0)
    bits = (efield.astype(np.int64) << (fmt.P - 1)) | np.where(np.isfinite(man), man, 0).astype(np.int64)
    out = sign | bits.astype(np.uint8)
    out = np.where(np.isinf(vals), sign | np.uint8(0x7C), out)       # e5m2 only (e4m3 has no infinity)
    return np.where(np.isnan(vals), np.uint8(fmt.nan), out).astype(np.uint8)


def _decode_fp8(fmt: Fmt, bits) -> np.ndarray:
    """Bytes of e4m3/e5m2 -> float64 values (exact); an e5m2 NaN keeps its sign, as the f16 it is the top of."""
    b = np.asarray(bits).astype(np.int64) & 0xFF
    m = fmt.P - 1
    e = (b >> m) & ((1 << (7 - m)) - 1)
    f = (b & ((1 << m) - 1)).astype(np.float64) / (1 << m)
    v = np.where(e == 0, f * fmt.minnormal, (1.0 + f) * np.ldexp(1.0, e + fmt.emin - 1))
    v = np.where(b >> 7, -v, v)
    top = (1 << (7 - m)) - 1                              # the all-ones exponent
    if fmt is E4M3:
        return np.where((e == top) & ((b & 7) == 7), np.nan, v)
    return np.where(e == top, np.where(b & 3, np.where(b >> 7, -np.nan, np.nan),
                                       np.where(b >> 7, -np.inf, np.inf)), v)


# ---------------------------------------------------------------- error-free transformations

def two_sum(a, b):
    """s = fl(a + b) and e with a + b == s + e exactly (finite, non-overflowing inputs). An infinite s gives a NaN
    e, which round_to ignores (infinities pass through it): numpy's warning about it is silenced."""
    s = a + b
    with np.errstate(invalid="ignore"):
        bb = s - a
        e = (a - (s - bb)) + (b - bb)
    return s, e


# ---------------------------------------------------------------- the rounding primitive

def round_to(fmt: Fmt, s, e=None, mode="rn") -> np.ndarray:
    """Round the exact value s + e to `fmt` in `mode` (rn: nearest even, rz, rm: toward -inf, rp: toward +inf).

    Returns float64 values exactly representable in `fmt` (or +-inf). Zeros, infinities and NaN in `s` pass through.
    """
    s = np.asarray(s, np.float64)
    shape = s.shape
    s = s.reshape(-1)
    out = s.copy()
    fin = np.isfinite(s) & (s != 0)
    if not fin.any():
        return out.reshape(shape)
    sf = s[fin]
    _, ex = np.frexp(sf)
    q = np.maximum(ex - fmt.P, fmt.qmin)
    neg = sf < 0
    x = np.ldexp(np.abs(sf), -q)                 # exact: a power-of-two scaling, |x| < 2**P
    fl = np.floor(x)
    frac = x - fl
    if e is None:
        em = np.zeros_like(sf)
    else:
        ef = np.broadcast_to(np.asarray(e, np.float64), shape).reshape(-1)[fin]
        em = np.where(neg, -ef, ef)               # residual in the direction of growing magnitude
    if mode == "rn":
        odd = np.fmod(fl, 2.0) == 1.0
        up = (frac > 0.5) | ((frac == 0.5) & ((em > 0) | ((em == 0) & odd)))
        r = fl + up
        dirup = None
    else:
        if mode == "rz":
            dirup = np.zeros(sf.shape, bool)
        elif mode == "rp":
            dirup = ~neg
        elif mode == "rm":
            dirup = neg
        else:
            raise ValueError(f"unknown rounding mode {mode!r}")
        r_up = fl + ((frac > 0) | (em > 0))
        below = (frac == 0) & (em < 0)           # exactly on a point, the true value a hair below it
        r_dn = fl - below
        # stepping down from the binade's first significand lands in the binade below, whose spacing is half
        edge = below & ~dirup & (fl == 2.0 ** (fmt.P - 1)) & (q > fmt.qmin)
        if edge.any():
            r_dn = np.where(edge, 2.0 ** fmt.P - 1, r_dn)
            q = np.where(edge, q - 1, q)
        r = np.where(dirup, r_up, r_dn)
    mag = np.ldexp(r, q)
    over = mag > fmt.maxval
    if over.any():
        if dirup is None:
            mag[over] = np.inf
        else:
            mag[over] = np.where(dirup[over], np.inf, fmt.maxval)
    out[fin] = np.where(neg, -mag, mag)
    return out.reshape(shape)


def overflow_result(fmt: Fmt, positive, mode) -> np.ndarray:
    """What an overflowing exact result rounds to."""
    positive = np.asarray(positive, bool)
    if mode == "rn":
        return np.where(positive, np.inf, -np.inf)
    if mode == "rz":
        return np.where(positive, fmt.maxval, -fmt.maxval)
    if mode == "rp":
        return np.where(positive, np.inf, -fmt.maxval)
    return np.where(positive, fmt.maxval, -np.inf)


def sum_zero_sign(s, a, b, mode):
    """IEEE sign of an exact zero sum a + b: +0 except in rm (-0), and x + x keeps the sign of x."""
    if mode != "rm":
        return s
    z = s == 0
    if not np.any(z):
        return s
    both_pos = (a == 0) & (b == 0) & ~np.signbit(a) & ~np.signbit(b)
    return np.where(z, np.where(both_pos, 0.0, -0.0), s)


# ---------------------------------------------------------------- flush / saturate

def ftz(fmt: Fmt, x):
    """Subnormal values -> zero of the same sign."""
    x = np.asarray(x, np.float64)
    sub = (x != 0) & (np.abs(x) < fmt.minnormal)
    if np.any(sub):
        x = np.where(sub, np.copysign(0.0, x), x)
    return x


def saturate(x):
    """Clamp to [0, 1]; NaN -> +0; -0 -> +0."""
    x = np.asarray(x, np.float64)
    x = np.where(np.isnan(x), 0.0, x)
    return np.where(x <= 0, 0.0, np.where(x > 1.0, 1.0, x))


# ---------------------------------------------------------------- exact scalar fallback (Fraction)

def round_fraction(q: Fraction, fmt: Fmt, mode: str, sticky: int = 0) -> float:
    """Round an exact rational (plus an infinitesimal of sign `sticky`) once to `fmt`. Zero gives +0.0."""
    if q == 0 and sticky == 0:
        return 0.0
    neg = q < 0 or (q == 0 and sticky < 0)
    a = -q if q < 0 else q
    st = -sticky if q < 0 else sticky
    if a == 0:                       # an infinitesimal: rounds to zero or to the smallest subnormal
        a, st = Fraction(0), 1
    if a > 0:
        E = a.numerator.bit_length() - a.denominator.bit_length()
        if _pow2(E) > a:
            E -= 1
        elif _pow2(E + 1) <= a:
            E += 1
        qe = max(E - (fmt.P - 1), fmt.qmin)
    else:
        qe = fmt.qmin
    x = a / _pow2(qe)
    fl = x.numerator // x.denominator
    frac = x - fl
    dirup = {"rz": False, "rp": not neg, "rm": neg}.get(mode)
    if mode == "rn":
        half = Fraction(1, 2)
        up = frac > half or (frac == half and (st > 0 or (st == 0 and fl % 2 == 1)))
        r = fl + up
    elif dirup:
        r = fl + (frac > 0 or st > 0)
    else:
        r = fl - (frac == 0 and st < 0)
    mag = math.ldexp(float(r), qe) if r < 2 ** 60 else float(Fraction(r) * _pow2(qe))
    if mag > fmt.maxval:
        if mode == "rn" or dirup:
            mag = math.inf
        else:
            mag = fmt.maxval
    return -mag if neg else mag


def _pow2(e):
    return Fraction(2) ** e


def to_fraction(x: float) -> Fraction:
    return Fraction(x)


# ---------------------------------------------------------------- conversions used by expressions

def f64_to_bf16_bits(x) -> np.ndarray:
    """Round-to-nearest-even float64 -> bfloat16 bits (one rounding)."""
    return encode(BF16, round_to(BF16, np.asarray(x, np.float64)))


def bf16_bits_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << np.uint32(16)).view(np.float32)


def int_to_f64_pair(x):
    """An integer array as float64 s + e exactly (int64/uint64 values beyond 2**53 need the residual)."""
    x = np.asarray(x)
    if x.dtype.itemsize < 8:
        return x.astype(np.float64), None
    if x.dtype == np.int64:
        hi = (x >> np.int64(32)).astype(np.float64) * 4294967296.0
        lo = (x & np.int64(0xFFFFFFFF)).astype(np.float64)
    else:
        hi = (x >> np.uint64(32)).astype(np.float64) * 4294967296.0
        lo = (x & np.uint64(0xFFFFFFFF)).astype(np.float64)
    return two_sum(hi, lo)
