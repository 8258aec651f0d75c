"""The register family on the interpreter: fma add sub mul div min max neg abs mov cvt and the fast-math set.

Written from the PTX ISA. Every correctly rounded float form is exact in every rounding mode: products of f16,
bf16 and f32 values are exact in float64 and two_sum keeps a sum exact, so each result is rounded once, straight to
its format (interpreter/rounding.py); fma.f64 and the directed-rounding f64 forms use exact fractions. The
instruction's operation, qualifiers and types come from its parsed Form (pattern.py), never from the opcode text.

Fast math (`ex2 lg2 rcp rsqrt sqrt sin cos tanh` .approx, fastmath.py): the interpreter gives the CORRECTLY ROUNDED
value of the exact function, while the GPU's result differs from it within the error bound the PTX ISA states for
the form (fastmath.ERROR_BOUNDS; e.g. ex2.approx.f32 within 2 ulp, tanh.approx.f32 relative 2^-11); special values
follow the ISA's tables and agree bit for bit. `.ftz` flushes subnormal inputs and results to signed zero.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ...core import dtypes as dt
from ...interpreter import rounding as R
from ...interpreter.exprs import _float_minmax, float_to_int
from ...interpreter.machine import UINT, InterpreterError
from ...interpreter.operands import BITS, FLOAT_T, INT_T, PACKED_T, RegOp, native_error, operand, predicated
from ...ir import nodes as ir
from . import fastmath as FM
from .pattern import IRND, RND, Form

CVT_PACKED = {"f16x2": R.F16, "bf16x2": R.BF16}
CVT_FP8X2 = {"e4m3x2": R.E4M3, "e5m2x2": R.E5M2}
DT_OF = {"s8": dt.int8, "s16": dt.int16, "s32": dt.int32, "s64": dt.int64, "u8": dt.uint8, "u16": dt.uint16,
         "u32": dt.uint32, "u64": dt.uint64, "b8": dt.uint8, "b16": dt.uint16, "b32": dt.uint32,
         "b64": dt.uint64}


def semantics(n: ir.Native, cx):
    form: Form = n.form
    op = form.op
    groups = [[operand(a, cx) for a in g] for g in n.groups]
    if op == "mov":
        core, dsts = _mov(n, groups)
    elif op == "cvt":
        core, dsts = _cvt(n, form, groups)
    else:
        ty = form.src_type                               # the operation's type (mul.wide: its sources')
        quals = set(form.quals)
        if len(groups) != len(form.names) or any(len(g) != 1 for g in groups):
            raise native_error(n, f"expects {len(form.names)} single-register operands")
        dst, srcs = groups[0][0], [g[0] for g in groups[1:]]
        if not isinstance(dst, RegOp):
            raise native_error(n, "the destination must be a register")
        wide = op == "mul" and "wide" in quals           # mul.wide: the destination is twice as wide
        for o in [dst] + srcs:
            want = BITS.get(ty)
            if want is not None and wide and o is dst:
                want *= 2
            if want is not None and o.bits != want:
                raise native_error(n, f"operand is {o.bits} bits, the .{ty} form takes {want}")
        fn = _mul_wide(ty) if wide else _arith(n, op, ty, quals)
        dsts = [dst]

        def core(m, idx):
            dst.store(m, idx, fn([s.read(m, idx) for s in srcs]))
    return predicated(core, n, cx, dsts, form.type if op == "cvt" else form.src_type)


def _mode(quals, default="rn"):
    for q in RND:
        if q in quals:
            return q
    return default


def _arith(n, op, ty, quals):
    """bits-in -> bits-out function for one arithmetic form."""
    if ty in FLOAT_T or ty in PACKED_T:
        fmt = FLOAT_T.get(ty) or PACKED_T[ty]
        mode = _mode(quals)
        ftz, sat, relu, nanq = "ftz" in quals, "sat" in quals, "relu" in quals, "NaN" in quals
        if fmt is R.F64 and "approx" in quals:          # rcp.approx.ftz.f64, rsqrt.approx{.ftz}.f64
            if ftz:
                return lambda srcs: FM.gross_f64(op, srcs[0])
            return lambda srcs: R.encode(R.F64, FM.rsqrt_f64(R.decode(R.F64, srcs[0])))
        if op in ("neg", "abs"):
            def one(bits):
                return _neg_abs(op, fmt, bits, ftz)
        else:
            def one(*xs):
                return float_op(op, fmt, mode, [R.decode(fmt, x) for x in xs], ftz=ftz, sat=sat, relu=relu,
                                nan_mode=nanq, absq="abs" in quals)
        if ty in PACKED_T:                      # two values in one carrier, the first in the low half
            hb = fmt.bits
            cu, hu = UINT[2 * hb], UINT[hb]
            mask, shift = cu((1 << hb) - 1), cu(hb)

            def fn(srcs):
                lo = [(s.astype(cu) & mask).astype(hu) for s in srcs]
                hi = [(s.astype(cu) >> shift).astype(hu) for s in srcs]
                return one(*lo).astype(cu) | (one(*hi).astype(cu) << shift)
            return fn
        return lambda srcs: one(*srcs)
    if ty in INT_T:
        return _int_op(n, op, ty, quals)
    raise native_error(n, f"type .{ty} is not supported by the interpreter for {op}")


def _neg_abs(op, fmt, bits, ftz):
    """Sign-bit operations; with .ftz a subnormal input first becomes a zero of its sign."""
    u = fmt.uint
    bits = np.asarray(bits).astype(u)
    sign = u(1 << (fmt.bits - 1))
    if ftz:
        v = R.decode(fmt, bits)
        subn = (v != 0) & (np.abs(v) < fmt.minnormal)
        bits = np.where(subn, bits & sign, bits).astype(u)
    if op == "neg":
        return bits ^ sign
    return bits & u(~int(sign) & ((1 << fmt.bits) - 1))


def float_op(op, fmt, mode, xs, ftz=False, sat=False, relu=False, nan_mode=False, absq=False):
    """One float instruction on float64-held inputs of `fmt`, rounded once; returns the result bits."""
    if ftz:
        xs = [R.ftz(fmt, x) for x in xs]
    if absq:                                             # min/max.abs: the magnitudes are compared
        xs = [np.abs(x) for x in xs]
    if fmt is R.F64:
        r = _f64_op(op, mode, xs)
    else:
        r = _narrow_op(op, fmt, mode, xs, nan_mode)
    return _finish(fmt, r, relu, sat, ftz)


def _narrow_op(op, fmt, mode, xs, nan_mode):
    """f16/bf16/f32: products are exact in float64 and two_sum makes sums exact, so one rounding is exact."""
    if op == "fma":
        a, b, c = xs
        p = a * b
        s, e = R.two_sum(p, c)
        s = R.sum_zero_sign(s, p, c, mode)
        return R.round_to(fmt, s, e, mode)
    if op in ("add", "sub"):
        a, b = xs
        if op == "sub":
            b = -b
        s, e = R.two_sum(a, b)
        s = R.sum_zero_sign(s, a, b, mode)
        return R.round_to(fmt, s, e, mode)
    if op == "mul":
        return R.round_to(fmt, xs[0] * xs[1], None, mode)
    if op == "div":      # the f64 quotient is never on a target point or midpoint unless the quotient is
        return R.round_to(fmt, xs[0] / xs[1], None, mode)
    if op == "rcp":
        return R.round_to(fmt, 1.0 / xs[0], None, mode)
    if op == "sqrt":
        return R.round_to(fmt, np.sqrt(xs[0]), None, mode)
    if op in ("ex2", "lg2", "rsqrt", "sin", "cos", "tanh"):   # .approx: correctly rounded here, see fastmath.py
        return FM.approx(op, fmt, xs[0])
    if op in ("min", "max"):             # two inputs, or three: min(min(a, b), c) (PTX ISA 9.7.3.11)
        r = xs[0]
        for b in xs[1:]:
            r = _float_minmax(op, r, b)
        if nan_mode:
            r = np.where(np.any([np.isnan(x) for x in xs], axis=0), np.nan, r)
        return r
    raise InterpreterError(f"no float semantics for {op}")


def _f64_op(op, mode, xs):
    if op in ("add", "sub"):
        a, b = xs
        if op == "sub":
            b = -b
        if mode == "rn":
            return a + b
        s, e = R.two_sum(a, b)
        s = R.sum_zero_sign(s, a, b, mode)
        r = R.round_to(R.F64, s, np.where(np.isfinite(e), e, 0.0), mode)
        over = np.isinf(s) & np.isfinite(a) & np.isfinite(b)
        if np.any(over):
            r = np.where(over, R.overflow_result(R.F64, s > 0, mode), r)
        return r
    if op == "mul" and mode == "rn":
        return xs[0] * xs[1]
    if op in ("div", "rcp", "sqrt") and mode == "rn":
        return xs[0] / xs[1] if op == "div" else (1.0 / xs[0] if op == "rcp" else np.sqrt(xs[0]))
    if op in ("min", "max"):
        return _narrow_op(op, R.F64, mode, xs, False)
    if op in ("fma", "mul", "div", "rcp", "sqrt"):
        return _f64_exact(op, mode, xs)
    raise InterpreterError(f"no f64 semantics for {op}")


def _f64_exact(op, mode, xs):
    """Exact rational arithmetic, one element at a time (fma.f64 and directed-rounding f64 forms)."""
    xs = [np.broadcast_to(np.asarray(x, np.float64), np.broadcast(*xs).shape) for x in xs]
    shape = xs[0].shape
    flat = [x.reshape(-1) for x in xs]
    out = np.empty(flat[0].shape, np.float64)
    for i in range(out.size):
        v = [float(x[i]) for x in flat]
        out[i] = _f64_exact_one(op, mode, v)
    return out.reshape(shape)


def _f64_exact_one(op, mode, v):
    # special values and exact zeros follow float64 arithmetic (their results are exact)
    if op == "fma":
        a, b, c = v
        if not all(map(math.isfinite, v)):
            return a * b + c                           # inf/NaN operands: the float result is exact
        q = Fraction(a) * Fraction(b) + Fraction(c)
        if q == 0:
            p = a * b                                  # exact when the sum cancels to zero
            return float(R.sum_zero_sign(np.float64(p + c), np.float64(p), np.float64(c), mode))
        return R.round_fraction(q, R.F64, mode)
    if op == "mul":
        a, b = v
        if not (math.isfinite(a) and math.isfinite(b)) or a == 0 or b == 0:
            return a * b
        return R.round_fraction(Fraction(a) * Fraction(b), R.F64, mode)
    if op in ("div", "rcp"):
        a, b = (1.0, v[0]) if op == "rcp" else v
        if not (math.isfinite(a) and math.isfinite(b)) or a == 0 or b == 0:
            with np.errstate(all="ignore"):
                return float(np.float64(a) / np.float64(b))
        return R.round_fraction(Fraction(a) / Fraction(b), R.F64, mode)
    if op == "sqrt":
        (a,) = v
        if not math.isfinite(a) or a <= 0:
            return float(np.sqrt(np.float64(a)))
        return FM.sqrt_fraction(Fraction(a), R.F64, mode)   # scaled enough for subnormal inputs too
    raise InterpreterError(f"no exact f64 semantics for {op}")


# ---------------------------------------------------------------- integer forms

def _int_op(n, op, ty, quals):
    npd = INT_T[ty]
    bits = BITS[ty]
    signed = ty.startswith("s")

    def typed(x):
        return np.asarray(x).astype(UINT[bits]).view(npd)

    def out(x):
        return np.asarray(x).astype(npd).view(UINT[bits])

    if op in ("add", "sub"):
        f = np.add if op == "add" else np.subtract
        if "sat" in quals:
            def fn(srcs):
                a, b = (typed(s).astype(np.int64) for s in srcs)
                return out(np.clip(f(a, b), -2**31, 2**31 - 1))
            return fn
        return lambda srcs: out(f(typed(srcs[0]), typed(srcs[1])))
    if op == "mul":
        if "hi" in quals:
            return lambda srcs: out(_mul_hi(typed(srcs[0]), typed(srcs[1]), bits, signed))
        return lambda srcs: out(np.multiply(typed(srcs[0]), typed(srcs[1])))
    if op in ("min", "max"):
        f = np.minimum if op == "min" else np.maximum
        if "relu" in quals:
            return lambda srcs: out(np.maximum(f(typed(srcs[0]), typed(srcs[1])), npd(0)))
        return lambda srcs: out(f(typed(srcs[0]), typed(srcs[1])))
    if op == "neg":
        return lambda srcs: out(np.negative(typed(srcs[0])))
    if op == "abs":
        return lambda srcs: out(np.abs(typed(srcs[0])))
    if op == "div":
        def fn(srcs):
            a, b = typed(srcs[0]), typed(srcs[1])
            zero = b == 0
            bs = np.where(zero, npd(1), b)
            if signed:
                q = np.floor_divide(a, bs)
                q = q + ((np.remainder(a, bs) != 0) & ((a < 0) != (bs < 0))).astype(npd)
            else:
                q = a // bs
            return out(np.where(zero, npd(-1) if signed else np.iinfo(npd).max, q))
        return fn
    raise native_error(n, f"no integer semantics for {op}.{ty}")


def _mul_wide(ty):
    """mul.wide.{s,u}{16,32}: the full product in a destination twice as wide (exact, no wrap)."""
    bits = BITS[ty]
    signed = ty.startswith("s")
    narrow = INT_T[ty]
    wide = np.int64 if signed else np.uint64

    def fn(srcs):
        a, b = (np.asarray(x).astype(UINT[bits]).view(narrow).astype(wide) for x in srcs)
        return (a * b).astype(wide).view(UINT[64]).astype(UINT[2 * bits])
    return fn


def _mul_hi(a, b, bits, signed):
    if bits <= 32:
        wide = np.int64 if signed else np.uint64
        return (a.astype(wide) * b.astype(wide)) >> wide(bits)
    av, bv = a.reshape(-1).tolist(), b.reshape(-1).tolist()
    bv = bv * len(av) if len(bv) == 1 else bv
    av = av * len(bv) if len(av) == 1 else av
    mask = (1 << 64) - 1
    res = [((x * y) >> 64) & mask for x, y in zip(av, bv)]
    return np.array(res, dtype=np.uint64).view(np.int64 if signed else np.uint64)


# ---------------------------------------------------------------- mov

def _mov(n, groups):
    if len(groups) != 2:
        raise native_error(n, "mov takes a destination and a source")
    dsts, srcs = groups
    if not all(isinstance(d, RegOp) for d in dsts):
        raise native_error(n, "the destination must be registers")
    if len(dsts) == 1 and len(srcs) == 1:
        d, s = dsts[0], srcs[0]

        def core(m, idx):
            d.store(m, idx, s.read(m, idx))
        return core, dsts
    if len(dsts) == 1:                                  # pack {a, b, ...} -> d, first source in the low bits
        d = dsts[0]
        w = d.bits // len(srcs)
        if any(s.bits != w for s in srcs):
            raise native_error(n, f"pack sources must be {w} bits each")

        def core(m, idx):
            acc = np.zeros(m.n(idx), d.u)
            for k, s in enumerate(srcs):
                acc |= s.read(m, idx).astype(d.u) << d.u(k * w)
            d.store(m, idx, acc)
        return core, dsts
    if len(srcs) == 1:                                  # unpack d -> {a, b, ...}, first destination the low bits
        s = srcs[0]
        w = s.bits // len(dsts)
        mask = (1 << w) - 1
        if any(d.bits != w for d in dsts):
            raise native_error(n, f"unpack destinations must be {w} bits each")

        def core(m, idx):
            v = s.read(m, idx).astype(np.uint64)
            for k, d in enumerate(dsts):
                d.store(m, idx, (v >> np.uint64(k * w)) & np.uint64(mask))
        return core, dsts
    raise native_error(n, "mov forms are d, a / d, {a, b} / {a, b}, d")


# ---------------------------------------------------------------- cvt

def _cvt(n, form: Form, groups):
    dty, sty = form.type, form.src_type
    quals = set(form.quals)
    dsts = groups[0]
    if len(dsts) != 1 or not isinstance(dsts[0], RegOp):
        raise native_error(n, "the destination must be one register")
    d = dsts[0]
    rmode = next((q for q in RND if q in quals), None)
    imode = next((q for q in IRND if q in quals), None)
    ftz, sat, relu, satfinite = "ftz" in quals, "sat" in quals, "relu" in quals, "satfinite" in quals

    if dty in CVT_FP8X2:                                 # cvt.rn.satfinite.e4m3x2.f32 d, a, b: a -> upper byte
        if len(groups) != 3:
            raise native_error(n, "packed cvt takes d, a, b")
        fmt = CVT_FP8X2[dty]
        a, b = groups[1][0], groups[2][0]

        def byte(bits):
            v = R.decode(R.F32, bits)
            return _to_float(v, None, fmt, "rn", False, False, relu, True).astype(np.uint16)

        def core(m, idx):
            d.store(m, idx, (byte(a.read(m, idx)) << np.uint16(8)) | byte(b.read(m, idx)))
        return core, dsts

    if dty in CVT_PACKED:                                # cvt.rn.f16x2.f32 d, a, b: a -> upper half, b -> lower
        if len(groups) != 3:
            raise native_error(n, "packed cvt takes d, a, b")
        fmt = CVT_PACKED[dty]
        a, b = groups[1][0], groups[2][0]
        sfmt = FLOAT_T[sty]

        def one(bits):
            v = R.decode(sfmt, bits)
            return _to_float(v, None, fmt, rmode or "rn", ftz and sty == "f32", sat, relu, satfinite)

        def core(m, idx):
            hi = one(a.read(m, idx)).astype(np.uint32)
            lo = one(b.read(m, idx)).astype(np.uint32)
            d.store(m, idx, (hi << np.uint32(16)) | lo)
        return core, dsts

    if len(groups) != 2:
        raise native_error(n, "cvt takes d, a")
    a = groups[1][0]
    if sty in FLOAT_T:
        sfmt = FLOAT_T[sty]
        if dty in FLOAT_T:
            dfmt = FLOAT_T[dty]

            def fn(bits):
                v = R.decode(sfmt, bits)
                if ftz and sty == "f32":
                    v = R.ftz(R.F32, v)
                if imode is not None:
                    v = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[imode](v)
                return _to_float(v, None, dfmt, rmode or "rn", ftz and dty == "f32", sat, relu, satfinite)
        elif dty in INT_T:
            ddt = DT_OF[dty]

            def fn(bits):
                v = R.decode(sfmt, bits)
                if ftz and sty == "f32":
                    v = R.ftz(R.F32, v)
                return float_to_int(v, ddt, imode or "rzi").view(UINT[ddt.bits])
        else:
            raise native_error(n, f"cvt to .{dty} is not supported by the interpreter")
    elif sty in INT_T:
        snp = INT_T[sty]
        sbits = BITS[sty]
        if dty in FLOAT_T:
            dfmt = FLOAT_T[dty]

            def fn(bits):
                x = np.asarray(bits).astype(UINT[sbits]).view(snp)
                s, e = R.int_to_f64_pair(x)
                return _to_float(s, e, dfmt, rmode or "rn", ftz and dty == "f32", sat, relu, satfinite)
        elif dty in INT_T:
            dnp, dbits = INT_T[dty], BITS[dty]

            def fn(bits):
                x = np.asarray(bits).astype(UINT[sbits]).view(snp)
                if sat:
                    info = np.iinfo(dnp)
                    vals = [min(max(int(v), info.min), info.max) for v in x.reshape(-1).tolist()]
                    return np.array(vals, dtype=dnp).reshape(x.shape).view(UINT[dbits])
                return x.astype(dnp).view(UINT[dbits])
        else:
            raise native_error(n, f"cvt to .{dty} is not supported by the interpreter")
    else:
        raise native_error(n, f"cvt from .{sty} is not supported by the interpreter")

    def core(m, idx):
        d.store(m, idx, fn(a.read(m, idx)))
    return core, dsts


def _to_float(s, e, fmt, mode, ftz_out, sat, relu, satfinite):
    r = R.round_to(fmt, s, e, mode)
    if satfinite:
        r = np.where(np.isinf(r), np.copysign(fmt.maxval, r), r)
    return _finish(fmt, r, relu, sat, ftz_out)


def _finish(fmt, r, relu, sat, ftz):
    """The result qualifiers in PTX's order (.relu, .sat, .ftz), then the destination's bits."""
    if relu:
        r = np.where(np.isnan(r), r, np.where(np.signbit(r), 0.0, r))
    if sat:
        r = R.saturate(r)
    if ftz:
        r = R.ftz(fmt, r)
    return R.encode(fmt, r)
