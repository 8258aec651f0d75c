"""PTX instruction semantics for `ir.Native`, written from the PTX ISA.

Each native compiles once into a closure `f(machine, idx)`. Register operands are read and written as raw bits of
their width; the opcode's type decides how the bits are interpreted (so an `fma.rn.f32` on a uint32-typed view
works on the same bits the GPU would). Families here: the register instructions (fma add sub mul div min max neg
abs mov cvt sqrt rcp ex2 lg2), ld/st, and cp.async with commit/wait. The warp instructions (mma, ldmatrix,
stmatrix) live in warp.py.

Predication: a false `pred` skips the instruction for that thread. A written register of a skipped thread keeps
its value with `preserve`, and is otherwise undefined: the interpreter poisons it (a NaN for float registers,
0xDEADBEEF-like bits for integer ones) so code that relies on it shows up.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..core import dtypes as dt
from ..ir import nodes as ir
from . import rounding as R
from .machine import UINT, InterpreterError, mem_np, poison_bits, sub

# ---------------------------------------------------------------- PTX types

FLOAT_T = {"f16": R.F16, "bf16": R.BF16, "f32": R.F32, "f64": R.F64}
PACKED_T = {"f16x2": R.F16, "bf16x2": R.BF16, "f32x2": R.F32}
CVT_PACKED = {"f16x2": R.F16, "bf16x2": R.BF16}
INT_T = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
         "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
         "b8": np.uint8, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64}
BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "f16x2": 32, "bf16x2": 32, "f32x2": 64,
        **{k: int(k[1:]) for k in INT_T}}
RND = ("rn", "rz", "rm", "rp")
IRND = ("rni", "rzi", "rmi", "rpi")
DT_OF = {"s8": dt.int8, "s16": dt.int16, "s32": dt.int32, "s64": dt.int64, "u8": dt.uint8, "u16": dt.uint16,
         "u32": dt.uint32, "u64": dt.uint64, "b8": dt.uint8, "b16": dt.uint16, "b32": dt.uint32,
         "b64": dt.uint64}


# ---------------------------------------------------------------- operands

class RegOp:
    """A register: a static slot of the thread's local storage, read/written as raw bits."""

    write = False

    def __init__(self, r: ir.Reg):
        self.st, self.index, self.dtype = r.storage, r.index, r.dtype
        self.bits = r.dtype.bits
        self.u = UINT[self.bits]
        self.write = bool(r.write)

    def read(self, m, idx):
        return m.reg_read(self.st, self.index, self.u, idx)

    def store(self, m, idx, bits):
        m.reg_write(self.st, self.index, self.u, np.asarray(bits).astype(self.u, copy=False), idx)

    def poison(self, m, idx):
        bits = getattr(self, "poison_value", None)
        if bits is None:
            bits = poison_bits(self.dtype)
        m.reg_write(self.st, self.index, self.u, self.u(bits), idx)


class ValOp:
    """A value operand (an expression): its bits, broadcast over the active threads."""

    write = False

    def __init__(self, v: ir.Val, cx):
        self.f = cx.expr(v.expr)
        self.dtype = v.expr.dtype if isinstance(v.expr, ir.Expr) else dt.int32
        self.bits = self.dtype.bits if self.dtype.kind != "bool" else 8
        self.u = UINT[self.bits]
        self.mem = mem_np(self.dtype)

    def read(self, m, idx):
        x = np.asarray(self.f(m, idx)).astype(self.mem, copy=False).view(self.u)
        return np.broadcast_to(x, (m.n(idx),))

    def value(self, m, idx):
        return self.f(m, idx)


def operand(a, cx):
    if isinstance(a, ir.Reg):
        return RegOp(a)
    if isinstance(a, ir.Val):
        return ValOp(a, cx)
    raise InterpreterError(f"unexpected operand {type(a).__name__}")


class AddrOp:
    """A memory address: storage plus an element offset in units of the address's dtype -> byte offsets."""

    def __init__(self, a: ir.Addr, cx):
        self.st, self.dtype = a.storage, a.dtype
        self.size = max(1, a.dtype.bits // 8)
        self.f = cx.expr(a.offset)

    def bytes(self, m, idx):
        off = np.asarray(self.f(m, idx)).astype(np.int64)
        return np.broadcast_to(off * self.size, (m.n(idx),))


def _err(n: ir.Native, msg):
    return InterpreterError(f"{n.loc}: {n.opcode}: {msg}" if n.loc is not None else f"{n.opcode}: {msg}")


# ---------------------------------------------------------------- predication

def predicated(core, n: ir.Native, cx, dsts):
    """Wrap `core(m, idx)` with the native's predicate and the undefined/preserved destination rule."""
    if n.pred is None:
        return core
    parts = n.opcode.split(".")
    ty = parts[-2] if parts[0] == "cvt" else parts[-1]
    for d in dsts:                                   # undefined float results read as NaN, whatever the view
        if ty in PACKED_T:
            d.poison_value = {"f16x2": 0x7EAD7EAD, "bf16x2": 0x7FAD7FAD, "f32x2": 0x7FFFDEAD7FFFDEAD}[ty]
        elif ty in FLOAT_T:
            d.poison_value = poison_bits({16: dt.float16 if ty == "f16" else dt.bfloat16, 32: dt.float32,
                                          64: dt.float64}[d.bits]) if d.bits == BITS[ty] else None
    pf = cx.expr(n.pred)
    preserve = n.preserve

    def f(m, idx):
        p = pf(m, idx)
        if np.ndim(p) == 0:
            if p:
                core(m, idx)
            elif not preserve:
                for d in dsts:
                    d.poison(m, idx)
            return
        p = np.asarray(p, bool)
        if p.all():
            core(m, idx)
            return
        on = sub(idx, p)
        if len(on):
            core(m, on)
        if not preserve:
            off = sub(idx, ~p)
            for d in dsts:
                d.poison(m, off)
    return f


# ---------------------------------------------------------------- entry point

def compile_native(n: ir.Native, cx):
    parts = n.opcode.split(".")
    head = parts[0]
    if head in ("mma", "ldmatrix", "stmatrix"):
        from . import warp
        return warp.compile_warp(n, parts, cx)
    if head in ("mbarrier", "fence") or parts[:3] == ["cp", "async", "bulk"]:
        from .bulk import compile_bulk
        return compile_bulk(n, parts, cx)
    if head == "cp" and len(parts) > 1 and parts[1] == "async":
        return _cp_async(n, parts, cx)
    if head in ("ld", "st"):
        return _ldst(n, parts, cx)
    if head == "createpolicy":
        return _createpolicy(n, parts, cx)
    if head in REGISTER_OPS:
        return _register(n, parts, cx)
    raise _err(n, "the interpreter has no semantics for this opcode")


# ================================================================ register instructions

REGISTER_OPS = {"fma", "add", "sub", "mul", "div", "min", "max", "neg", "abs", "mov", "cvt", "sqrt", "rcp", "ex2",
                "lg2"}
ARITY = {"fma": 3, "add": 2, "sub": 2, "mul": 2, "div": 2, "min": 2, "max": 2, "neg": 1, "abs": 1, "sqrt": 1,
         "rcp": 1, "ex2": 1, "lg2": 1}


def _register(n: ir.Native, parts, cx):
    op = parts[0]
    groups = [[operand(a, cx) for a in g] for g in n.groups]
    if op == "mov":
        core, dsts = _mov(n, parts, groups)
    elif op == "cvt":
        core, dsts = _cvt(n, parts, groups)
    else:
        ty = parts[-1]
        quals = set(parts[1:-1])
        if len(groups) != ARITY[op] + 1 or any(len(g) != 1 for g in groups):
            raise _err(n, f"expects {ARITY[op] + 1} single-register operands")
        dst, srcs = groups[0][0], [g[0] for g in groups[1:]]
        if not isinstance(dst, RegOp):
            raise _err(n, "the destination must be a register")
        wide = op == "mul" and "wide" in quals           # mul.wide: the destination is twice as wide
        for o in [dst] + srcs:
            want = BITS.get(ty)
            if want is not None and wide and o is dst:
                want *= 2
            if want is not None and o.bits != want:
                raise _err(n, f"operand is {o.bits} bits, the .{ty} form takes {want}")
        fn = _mul_wide(ty) if wide else _arith(n, op, ty, quals)
        dsts = [dst]

        def core(m, idx):
            dst.store(m, idx, fn([s.read(m, idx) for s in srcs]))
    return predicated(core, n, cx, dsts)


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
        if op in ("neg", "abs"):
            def one(bits):
                return _neg_abs(op, fmt, bits, ftz)
        else:
            def one(*xs):
                return float_op(op, fmt, mode, [R.decode(fmt, x) for x in xs], ftz=ftz, sat=sat, relu=relu,
                                nan_mode=nanq)
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
    raise _err(n, f"type .{ty} is not supported by the interpreter for {op}")


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


def float_op(op, fmt, mode, xs, ftz=False, sat=False, relu=False, nan_mode=False):
    """One float instruction on float64-held inputs of `fmt`, rounded once; returns the result bits."""
    if ftz:
        xs = [R.ftz(fmt, x) for x in xs]
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
    if op == "ex2":      # .approx: not bit-exact on the GPU either
        return R.round_to(fmt, np.exp2(xs[0]), None, "rn")
    if op == "lg2":
        return R.round_to(fmt, np.log2(xs[0]), None, "rn")
    if op in ("min", "max"):
        a, b = xs
        from .exprs import _float_minmax
        r = _float_minmax(op, a, b)
        if nan_mode:
            r = np.where(np.isnan(a) | np.isnan(b), np.nan, r)
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
        q = Fraction(a)
        k = 80                                         # sqrt(q) = sqrt(q * 4**k) / 2**k
        N = q * Fraction(4) ** k
        Ni = N.numerator // N.denominator
        exact_int = N.denominator == 1
        r = math.isqrt(Ni)
        sticky = 0 if (exact_int and r * r == Ni) else 1
        return R.round_fraction(Fraction(r, 2 ** k), R.F64, mode, sticky)
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
    raise _err(n, f"no integer semantics for {op}.{ty}")


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

def _mov(n, parts, groups):
    if len(groups) != 2:
        raise _err(n, "mov takes a destination and a source")
    dsts, srcs = groups
    if not all(isinstance(d, RegOp) for d in dsts):
        raise _err(n, "the destination must be registers")
    if len(dsts) == 1 and len(srcs) == 1:
        d, s = dsts[0], srcs[0]

        def core(m, idx):
            d.store(m, idx, s.read(m, idx))
        return core, dsts
    if len(dsts) == 1:                                  # pack {a, b, ...} -> d, first source in the low bits
        d = dsts[0]
        w = d.bits // len(srcs)
        if any(s.bits != w for s in srcs):
            raise _err(n, f"pack sources must be {w} bits each")

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
            raise _err(n, f"unpack destinations must be {w} bits each")

        def core(m, idx):
            v = s.read(m, idx).astype(np.uint64)
            for k, d in enumerate(dsts):
                d.store(m, idx, (v >> np.uint64(k * w)) & np.uint64(mask))
        return core, dsts
    raise _err(n, "mov forms are d, a / d, {a, b} / {a, b}, d")


# ---------------------------------------------------------------- cvt

def _cvt(n, parts, groups):
    dty, sty = parts[-2], parts[-1]
    quals = set(parts[1:-2])
    dsts = groups[0]
    if len(dsts) != 1 or not isinstance(dsts[0], RegOp):
        raise _err(n, "the destination must be one register")
    d = dsts[0]
    rmode = next((q for q in RND if q in quals), None)
    imode = next((q for q in IRND if q in quals), None)
    ftz, sat, relu, satfinite = "ftz" in quals, "sat" in quals, "relu" in quals, "satfinite" in quals

    if dty in CVT_PACKED:                                # cvt.rn.f16x2.f32 d, a, b: a -> upper half, b -> lower
        if len(groups) != 3:
            raise _err(n, "packed cvt takes d, a, b")
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
        raise _err(n, "cvt takes d, a")
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
                from .exprs import float_to_int
                v = R.decode(sfmt, bits)
                if ftz and sty == "f32":
                    v = R.ftz(R.F32, v)
                return float_to_int(v, ddt, imode or "rzi").view(UINT[ddt.bits])
        else:
            raise _err(n, f"cvt to .{dty} is not supported by the interpreter")
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
            raise _err(n, f"cvt to .{dty} is not supported by the interpreter")
    else:
        raise _err(n, f"cvt from .{sty} is not supported by the interpreter")

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


# ================================================================ ld / st

SPACES = {"global": "global", "shared": "shared", "shared::cta": "shared", "local": "local"}


def _space(n, parts):
    for p in parts:
        if p in SPACES:
            return SPACES[p]
    if "shared::cluster" in parts:
        raise _err(n, "shared::cluster is not modelled by the interpreter")
    raise _err(n, "no state space (.global, .shared, .local) in the opcode")


def _ldst(n: ir.Native, parts, cx):
    op, ty = parts[0], parts[-1]
    if ty not in BITS or ty in PACKED_T:
        raise _err(n, f"type .{ty} is not supported by the interpreter")
    words = 4 if "v4" in parts else 2 if "v2" in parts else 1
    space = _space(n, parts)
    bits = BITS[ty]
    size = bits // 8
    u = UINT[bits]
    if op == "ld":
        regs, addr_g = n.groups[0], n.groups[1]
    else:
        addr_g, regs = n.groups[0], n.groups[1]
    if len(addr_g) != 1 or not isinstance(addr_g[0], ir.Addr):
        raise _err(n, "the memory operand must be one address")
    addr = AddrOp(addr_g[0], cx)
    if addr.st.scope != space:
        raise _err(n, f"the address is in {addr.st.scope} memory but the opcode says .{space}")
    ops = [operand(a, cx) for a in regs]
    if len(ops) != words:
        raise _err(n, f"expects {words} register(s), got {len(ops)}")
    signed = ty.startswith("s")
    loc = n.loc
    align = words * size

    def address(m, idx):
        mem = m.mem[addr.st]
        byte = addr.bytes(m, idx)
        mis = byte % align != 0
        if np.any(mis):
            raise m.fault(loc, f"misaligned address: {op}.{space} of {align} bytes at byte offset "
                               f"{int(byte[np.flatnonzero(mis)[0]])} of '{addr.st.name}'", m.first(idx, mis))
        return mem, byte // size

    if op == "ld":
        for r in ops:
            if not isinstance(r, RegOp):
                raise _err(n, "ld destinations must be registers")

        def core(m, idx):
            mem, el = address(m, idx)
            m.check(mem, u, el, idx, loc, "read")
            if words > 1:
                m.check(mem, u, el + (words - 1), idx, loc, "read")
            vals = [m.read(mem, u, el + w, idx, loc) for w in range(words)]
            for r, v in zip(ops, vals):
                v = np.asarray(v)
                if r.bits > bits:                     # a narrow load into a wider register extends
                    v = v.view(INT_T["s" + str(bits)]).astype(np.int64) if signed else v.astype(np.uint64)
                r.store(m, idx, np.broadcast_to(v, (m.n(idx),)).astype(np.uint64).astype(r.u))
        return predicated(core, n, cx, ops)

    def core(m, idx):
        mem, el = address(m, idx)
        m.check(mem, u, el, idx, loc, "write")
        if words > 1:
            m.check(mem, u, el + (words - 1), idx, loc, "write")
        for w, r in enumerate(ops):
            v = r.read(m, idx).astype(np.uint64) & np.uint64((1 << bits) - 1)
            m.write(mem, u, el + w, v.astype(u), idx, loc)
    return predicated(core, n, cx, [])


# ================================================================ createpolicy

def _createpolicy(n: ir.Native, parts, cx):
    """The policy's bits are the hardware's secret; the interpreter writes a tag of its own (priorities in the top
    byte, the fraction's f32 bits below). Only cache hints read a policy, and hints change no result."""
    if len(n.groups) not in (1, 2) or not isinstance(n.groups[0][0], ir.Reg):
        raise _err(n, "operands are a 64-bit destination{, fraction}")
    from ..isa.policy.pattern import PRIMARY, SECONDARY
    d = operand(n.groups[0][0], cx)
    levels = [p.split("::")[-1] for p in parts[2:-1]]
    top = (PRIMARY.index(levels[0]) << 4) | (1 + SECONDARY.index(levels[1]) if len(levels) > 1 else 0)
    frac = n.groups[1][0] if len(n.groups) > 1 else None
    fop, fixed = None, 0x3F800000                  # PTX's default fraction, 1.0
    if isinstance(frac, ir.Imm):
        fixed = int(frac.text[2:], 16)             # 0fXXXXXXXX
    elif frac is not None:
        fop = operand(frac, cx)

    def core(m, idx):
        bits = np.full(m.n(idx), fixed, np.uint64) if fop is None else fop.read(m, idx).astype(np.uint64)
        d.store(m, idx, (np.uint64(top) << np.uint64(56)) | bits)
    return predicated(core, n, cx, [d])


# ================================================================ cp.async

def _cp_async(n: ir.Native, parts, cx):
    rest = parts[2:]
    loc = n.loc
    if rest and rest[0] == "commit_group":
        def commit(m, idx):
            rows = m.all if idx is None else idx
            m.cp_open[rows] += 1
        return predicated(commit, n, cx, [])
    if rest and rest[0] in ("wait_group", "wait_all"):
        if rest[0] == "wait_group":
            if len(n.groups) != 1 or not isinstance(n.groups[0][0], ir.Imm):
                raise _err(n, "wait_group takes one immediate")
            keep = int(n.groups[0][0].text, 0)
        else:
            keep = 0

        def wait(m, idx):
            rows = m.all if idx is None else idx
            if rest[0] == "wait_all":
                m.cp_open[rows] += 1
            limit = np.full(m.N, -1, np.int64)
            limit[rows] = m.cp_open[rows] - keep
            cp_complete(m, limit)
        return wait
    if not rest or rest[0] not in ("ca", "cg"):
        raise _err(n, "the interpreter knows cp.async.{ca,cg}.shared.global, commit_group, wait_group, wait_all")
    g = n.groups
    if len(g) < 3 or not isinstance(g[0][0], ir.Addr) or not isinstance(g[1][0], ir.Addr) or \
            not isinstance(g[2][0], ir.Imm):
        raise _err(n, "operands are [dst], [src], cp-size{, src-size}{, cache-policy}")
    dst, src = AddrOp(g[0][0], cx), AddrOp(g[1][0], cx)
    if dst.st.scope != "shared" or src.st.scope != "global":
        raise _err(n, "copies global memory to shared memory")
    N = int(g[2][0].text, 0)
    if N not in (4, 8, 16) or (rest[0] == "cg" and N != 16):
        raise _err(n, f"cp-size {N} is not valid for cp.async.{rest[0]}")
    # .L2::cache_hint appends the cache policy, a hint only: the copy means the same without it
    nsize = len(g) - 3 - ("L2::cache_hint" in rest)
    size_op = operand(g[3][0], cx) if nsize > 0 else None

    def core(m, idx):
        rows = m.all if idx is None else idx
        db, sb = dst.bytes(m, idx), src.bytes(m, idx)
        for what, b, st in (("destination", db, dst.st), ("source", sb, src.st)):
            mis = b % N != 0
            if np.any(mis):
                raise m.fault(loc, f"misaligned cp.async {what}: byte offset {int(b[np.flatnonzero(mis)[0]])} of "
                                   f"'{st.name}' is not a multiple of {N}", m.first(idx, mis))
        if size_op is not None:
            ss = np.asarray(size_op.value(m, idx)).astype(np.int64)
            ss = np.broadcast_to(ss, rows.shape)
            if np.any((ss < 0) | (ss > N)):
                bad = (ss < 0) | (ss > N)
                raise m.fault(loc, f"cp.async src-size {int(ss[np.flatnonzero(bad)[0]])} is outside 0..{N}",
                              m.first(idx, bad))
        else:
            ss = np.full(rows.shape, N, np.int64)
        smem, dmem = m.mem[src.st], m.mem[dst.st]
        m.check(dmem, np.uint8, db, idx, loc, "write")
        m.check(dmem, np.uint8, db + (N - 1), idx, loc, "write")
        reads = ss > 0
        if np.any(reads):
            m.check(smem, np.uint8, np.where(reads, sb, 0), idx, loc, "read")
            m.check(smem, np.uint8, np.where(reads, sb + ss - 1, 0), idx, loc, "read")
        k = np.arange(N)
        take = k[None, :] < ss[:, None]
        offs = np.where(take, sb[:, None] + k[None, :], 0)
        data = np.where(take, smem.raw[offs], np.uint8(0)).astype(np.uint8)
        m.cp_records.append([rows.copy(), db.copy(), data, m.cp_open[rows].copy(), dst.st])
    return predicated(core, n, cx, [])


def cp_complete(m, limit):
    """Make visible every pending copy of thread t whose group id is below limit[t]."""
    keep = []
    for rec in m.cp_records:
        rows, db, data, gid, st = rec
        done = gid < limit[rows]
        if np.any(done):
            mem = m.mem[st]
            r, b, dd = rows[done], db[done], data[done]
            k = np.arange(dd.shape[1])
            mem.raw[m.blk[r][:, None], b[:, None] + k[None, :]] = dd
            if not np.all(done):
                keep.append([rows[~done], db[~done], data[~done], gid[~done], st])
        else:
            keep.append(rec)
    m.cp_records = keep
