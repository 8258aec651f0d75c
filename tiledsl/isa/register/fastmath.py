"""The fast-math (.approx) instructions on the interpreter: ex2 lg2 rcp rsqrt sqrt sin cos tanh.

The GPU computes these with approximations whose error the PTX ISA bounds (ERROR_BOUNDS, quoted from PTX ISA 9.1,
sections 9.7.3.13-22 and 9.7.4.9-10); the interpreter instead gives the CORRECTLY ROUNDED value of the exact
function: the function is evaluated in float64 (numpy, error far below a float32 ulp) and rounded once to the
destination format with interpreter/rounding.py. A float64 intermediate can only mislead that rounding when it lies
within one float64 ulp of a rounding boundary of the destination, which a float32 or narrower result practically
never does. So interpreter and GPU agree within the stated bound, not bit for bit; special values (inf, NaN, +-0,
subnormals with and without .ftz) follow the ISA's tables exactly and agree bit for bit (NaN is canonical).

Two f64 forms are different: rsqrt.approx.f64 is correctly rounded with exact integer arithmetic, and the "gross"
rcp.approx.ftz.f64 / rsqrt.approx.ftz.f64 follow the ISA's own recipe: only the upper 32 bits of the input are
read (1.11.20 format), the result is rounded to 1.11.20 and its low 32 bits are zero, NaN is 0x7fffffff00000000.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ...interpreter import rounding as R

# What the ISA promises for each .approx form, in its own words (PTX ISA 9.1). The GPU tests check these.
ERROR_BOUNDS = {
    "ex2.f32": "max 2 ulp from the correctly rounded result, full range",
    "ex2.f16": "max relative error 2^-9.9",
    "ex2.bf16": "max relative error 2^-7",
    "lg2.f32": "max absolute error 2^-22 for inputs in (0.5, 2); max relative error 2^-22 elsewhere",
    "rcp.f32": "max 1 ulp, full range",
    "rcp.f64": "gross: 1.11.20 input and result; no bound stated",
    "rsqrt.f32": "max relative error 2^-22.9 over the positive finite range",
    "rsqrt.f64": "no bound stated (emulated in software); .ftz: gross, 1.11.20 input and result",
    "sqrt.f32": "max relative error 2^-23 over the positive finite range",
    "sin.f32": "max absolute error 2^-20.5 in [-2pi, 2pi], 2^-14.7 in [-100pi, 100pi], none outside",
    "cos.f32": "max absolute error 2^-20.5 in [-2pi, 2pi], 2^-14.7 in [-100pi, 100pi], none outside",
    "tanh.f32": "max relative error 2^-11, full range",
    "tanh.f16": "max absolute error 2^-10.987",
    "tanh.bf16": "max absolute error 2^-8",
}

# The exact functions, on float64 (numpy gives the ISA's special values: exp2(-inf) = +0, log2(+-0) = -inf,
# log2(<0) = NaN, 1/sqrt(-0) = -inf, sin(+-inf) = NaN, sin(-0) = -0, tanh(+-inf) = +-1).
_EXACT = {
    "ex2": np.exp2,
    "lg2": np.log2,
    "rcp": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
}


def approx(op: str, fmt: R.Fmt, x) -> np.ndarray:
    """The correctly rounded `op(x)` in `fmt` (f16, bf16 or f32), as float64 values (inputs already flushed for
    .ftz; the caller flushes the result)."""
    with np.errstate(all="ignore"):
        return R.round_to(fmt, _EXACT[op](np.asarray(x, np.float64)), None, "rn")


# ---------------------------------------------------------------- f64 forms

GROSS = R.Fmt("1.11.20", 21, -1022, 1023, 64, 0x7FFFFFFF00000000)   # the upper word of an f64
_HIGH = np.uint64(0xFFFFFFFF00000000)
GROSS_NAN = np.uint64(0x7FFFFFFF00000000)


def gross_f64(op: str, bits) -> np.ndarray:
    """rcp.approx.ftz.f64 / rsqrt.approx.ftz.f64 on f64 bit patterns: tmp = a[63:32] (subnormal -> signed zero),
    d[63:32] = op(tmp) rounded to 1.11.20 (subnormal -> signed zero), d[31:0] = 0, NaN -> 0x7fffffff00000000."""
    hi = np.asarray(bits).astype(np.uint64) & _HIGH
    v = R.ftz(R.F64, hi.view(np.float64))
    with np.errstate(all="ignore"):
        r = R.ftz(R.F64, R.round_to(GROSS, _EXACT[op](v), None, "rn"))
    out = r.view(np.uint64) & _HIGH
    return np.where(np.isnan(r), GROSS_NAN, out).astype(np.uint64)


def rsqrt_f64(x) -> np.ndarray:
    """rsqrt.approx.f64 correctly rounded (round to nearest even), one element at a time with exact integers."""
    x = np.asarray(x, np.float64)
    flat = x.reshape(-1)
    out = np.empty(flat.shape, np.float64)
    for i, v in enumerate(flat.tolist()):
        if not math.isfinite(v) or v <= 0:
            with np.errstate(all="ignore"):
                out[i] = 1.0 / np.sqrt(np.float64(v))        # specials: -0 -> -inf, +0 -> +inf, <0 -> NaN
        else:
            out[i] = sqrt_fraction(1 / Fraction(v), R.F64, "rn")
    return out.reshape(x.shape)


def sqrt_fraction(q: Fraction, fmt: R.Fmt, mode: str) -> float:
    """sqrt(q) of a positive rational, rounded once to `fmt`: isqrt of q scaled by 4**k, with enough k that the
    integer root carries more bits than the format plus a guard, and a sticky bit for an inexact root."""
    e = q.numerator.bit_length() - q.denominator.bit_length()       # about log2(q)
    k = max(0, (2 * fmt.P + 8 - e) // 2 + 1)
    n = q * Fraction(4) ** k
    ni = n.numerator // n.denominator
    r = math.isqrt(ni)
    sticky = 0 if (n.denominator == 1 and r * r == ni) else 1
    return R.round_fraction(Fraction(r, 2 ** k), fmt, mode, sticky)
