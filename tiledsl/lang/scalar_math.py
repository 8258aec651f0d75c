"""`T.sqrt`, `T.rsqrt`, `T.exp2`, `T.log2`, `T.exp`, `T.log`, `T.sin`, `T.cos`, `T.tanh`, `T.abs`, `T.fma`: scalar math,
each the PTX instruction its docstring names (frontend/scalar_math.py builds it; docs/semantics.md has the table).

The rule the keywords follow: nothing is picked behind the caller's back. A function whose every PTX form is
approximate (rsqrt, ex2, lg2, sin, cos, tanh, and exp/log built on ex2/lg2) is that form, with nothing else to
pick: `approx=True` may be written to show it, `approx=False` (a correctly rounded result PTX does not have) is an
error; `T.sqrt` and `T.fma` default to the correctly rounded `.rn` form (what `/` is too: div.rn); `ftz=False`
everywhere unless written, except bfloat16's ex2, whose one form is ex2.approx.ftz.bf16.
"""
from __future__ import annotations

from .builtin import Builtin

sqrt = Builtin("sqrt", """T.sqrt(x, *, approx=False, ftz=False, rnd="rn"): the square root of a float32 or float64
value, one instruction: sqrt.rn.f32 by default (correctly rounded, as CUDA's sqrtf without fast math).

rnd="rz"/"rm"/"rp" picks sqrt.rz/rm/rp.f32; approx=True picks sqrt.approx.f32 (relative error at most 2^-23; it
has no rounding mode, so rnd= with it is an error); ftz=True adds .ftz (float32 only: subnormal inputs and results
become zeros of their sign). float64: sqrt.rn.f64 (or .rz/.rm/.rp; no approx, no ftz).
float16 and bfloat16 have no sqrt instruction: write T.sqrt(T.cast(x, "float32")).""")

rsqrt = Builtin("rsqrt", """T.rsqrt(x, *, approx=True, ftz=False): 1/sqrt(x) by rsqrt.approx.f32 (relative error
at most 2^-22.9) or rsqrt.approx.f64: PTX has only the approximate form, so it is the default (approx=True may be
written to show it; approx=False is an error).

ftz=True: rsqrt.approx.ftz.f32, or for float64 the coarse rsqrt.approx.ftz.f64 (only the input's upper 32 bits are
read and the result has 20 fraction bits). Without an approximation, write 1.0 / T.sqrt(x): sqrt.rn then div.rn,
each correctly rounded.""")

exp2 = Builtin("exp2", """T.exp2(x, *, approx=True, ftz=False): 2**x by ex2.approx.f32 (within 2 ulp of the
correctly rounded result): PTX has only the approximate form, so it is the default (approx=False is an error).

float16: ex2.approx.f16 (relative error 2^-9.9, sm_75; no .ftz form). bfloat16: ex2.approx.ftz.bf16 (relative
error 2^-7, sm_90), whose only form flushes subnormals: ftz=True is its default and ftz=False an error. ftz=True on
float32: ex2.approx.ftz.f32.""")

log2 = Builtin("log2", """T.log2(x, *, approx=True, ftz=False): log2(x) of a float32 by lg2.approx.f32 (absolute
error at most 2^-22 for x in (0.5, 2), relative 2^-22 elsewhere): PTX has only the approximate form, so it is the
default (approx=False is an error). ftz=True: lg2.approx.ftz.f32.""")

exp = Builtin("exp", """T.exp(x, *, approx=True, ftz=False): the exponential e**x of a float32 as CUDA's __expf
computes it, two instructions: mul.rn.f32 t, x, 0f3FB8AA3B (log2(e) rounded to float32), then ex2.approx.f32 of t.

Approximate only (approx=False is an error). The rounding of the product adds to ex2's 2 ulp an error that grows
with |x| (CUDA states 2 + floor(|1.173 x|) ulp for __expf); near the ends of the range, or where that matters,
scale explicitly and call T.exp2. ftz=True puts .ftz on both instructions.""")

log = Builtin("log", """T.log(x, *, approx=True, ftz=False): the natural logarithm of a float32 as CUDA's __logf
computes it, two instructions: lg2.approx.f32 t, x, then mul.rn.f32 t, t, 0f3F317218 (ln 2 rounded to float32).

Approximate only (approx=False is an error). The error is lg2's (absolute 2^-22 for x in (0.5, 2), relative 2^-22
elsewhere) scaled by ln 2, plus the product's rounding. ftz=True puts .ftz on both instructions.""")

sin = Builtin("sin", """T.sin(x, *, approx=True, ftz=False): sin(x), x in radians, of a float32 by sin.approx.f32
(absolute error at most 2^-20.5 for x in [-2pi, 2pi], 2^-14.7 in [-100pi, 100pi], no bound outside): PTX has only
the approximate form, so it is the default (approx=False is an error). ftz=True: sin.approx.ftz.f32.""")

cos = Builtin("cos", """T.cos(x, *, approx=True, ftz=False): cos(x), x in radians, of a float32 by cos.approx.f32
(absolute error at most 2^-20.5 for x in [-2pi, 2pi], 2^-14.7 in [-100pi, 100pi], no bound outside): PTX has only
the approximate form, so it is the default (approx=False is an error). ftz=True: cos.approx.ftz.f32.""")

tanh = Builtin("tanh", """T.tanh(x, *, approx=True): tanh(x) by tanh.approx.f32 (relative error at most 2^-11,
sm_75), tanh.approx.f16 (absolute 2^-10.987, sm_75) or tanh.approx.bf16 (absolute 2^-8, sm_90): PTX has only the
approximate form, so it is the default (approx=False is an error). It has no .ftz form.""")

abs = Builtin("abs", """T.abs(x, *, ftz=False): |x|, one instruction: abs.f32, abs.f64, abs.f16 (sm_53), abs.bf16
(sm_80) clear the sign bit (exact; a NaN stays a NaN); abs.s16, abs.s32, abs.s64 (the most negative value is its
own absolute value, as PTX wraps).

ftz=True: abs.ftz.f32 / abs.ftz.f16 (a subnormal input gives a zero). Unsigned and 8-bit integers have no abs
instruction (an unsigned value is its own absolute value; widen an int8 with T.cast).""")  # noqa: A001

fma = Builtin("fma", """T.fma(a, b, c, *, rnd="rn", ftz=False): the fused multiply-add a*b + c, rounded once:
fma.rn.f32 by default (rnd="rz"/"rm"/"rp" for the other roundings), fma.rn.f64 (likewise), fma.rn.f16 (sm_53),
fma.rn.bf16 (sm_80).

float16 and bfloat16 have only .rn. ftz=True: fma.rn.ftz.f32 / fma.rn.ftz.f16. The three values must have one
float dtype (Python numbers take it); convert others with T.cast. Plain a * b + c is never fused: it is mul.rn
then add.rn, two roundings.""")

NAMES = ("sqrt", "rsqrt", "exp2", "log2", "exp", "log", "sin", "cos", "tanh", "abs", "fma")
