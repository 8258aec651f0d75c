"""Expressions compiled once into closures `f(machine, idx) -> per-thread values`.

A closure returns a numpy array over the active threads, or a numpy scalar when the value is the same for all of
them (constants, uniform loads); consumers broadcast. Constant subtrees are folded at compile time.

Semantics (the tile IR's, which the GPU code generator also implements):
  - integers wrap at their width; `//` and `%` floor like Python on signed types; shifts by >= the width give 0
    (or the sign for an arithmetic right shift); integer division by zero is a KernelFault;
  - floats are IEEE with round-to-nearest-even; min/max ignore a NaN operand (minnum/maxnum);
    `!=` is unordered (true on NaN), the other comparisons ordered;
  - bfloat16 values are uint16 bits; arithmetic happens exactly in float64 and rounds once to bfloat16;
  - casts: float -> int truncates toward zero and saturates, NaN -> 0 (PTX cvt.rzi); int -> int wraps or extends
    by the source's signedness; narrowing float conversions and int -> float round to nearest even, once.
"""
from __future__ import annotations

import numpy as np

from ..core import dtypes as dt
from ..ir import nodes as ir
from . import rounding as R
from .dim_checks import compile_checks
from .machine import InterpreterError, mem_np, val_np


def const_value(value, d: dt.DType):
    """A Python constant as the numpy scalar the interpreter computes with."""
    if d.kind == "bool":
        return np.bool_(bool(value))
    if d.name == "bfloat16":
        return np.uint16(dt.bf16_bits(value))     # constants: the one host rounder, as codegen uses
    if d.is_float:
        return val_np(d).type(value)
    bits = d.bits
    u = np.array(int(value) & ((1 << bits) - 1), dtype=np.dtype(f"u{bits // 8}"))
    return u.view(val_np(d))[()]


# ---------------------------------------------------------------- conversions

def _f64(x, d: dt.DType):
    """Values of float dtype `d` as float64 (exact)."""
    if d.name == "bfloat16":
        return R.decode(R.BF16, x)
    return np.asarray(x).astype(np.float64)


def convert(x, src: dt.DType, dst: dt.DType):
    """T.cast semantics, vectorised."""
    if src == dst:
        return x
    xn = np.asarray(x)
    scalar = xn.ndim == 0
    out = _convert(xn.reshape(-1) if scalar else xn, src, dst)
    return out.reshape(())[()] if scalar else out


def _convert(x, src, dst):
    if dst.kind == "bool":
        if src.name == "bfloat16":
            return (x & np.uint16(0x7FFF)) != 0
        return x != 0
    if src.kind == "bool":
        if dst.name == "bfloat16":
            return np.where(x, np.uint16(0x3F80), np.uint16(0))
        return x.astype(val_np(dst))
    if src.name == "bfloat16":
        return _convert(R.bf16_bits_to_f32(x), dt.float32, dst)
    if dst.name == "bfloat16":
        if src.is_float:
            return R.f64_to_bf16_bits(x.astype(np.float64))
        s, e = R.int_to_f64_pair(x)
        return R.encode(R.BF16, R.round_to(R.BF16, s, e))
    if src.is_int and dst.is_int:
        return x.astype(val_np(dst))
    if src.is_float and dst.is_float:
        return x.astype(val_np(dst))           # f64->f32, f32->f16, f64->f16: one IEEE rounding; widening exact
    if src.is_int and dst.is_float:
        if dst.bits == 64:
            return x.astype(np.float64)
        s, e = R.int_to_f64_pair(x)
        fmt = R.F32 if dst.bits == 32 else R.F16
        return R.round_to(fmt, s, e).astype(val_np(dst))
    # float -> int: toward zero, saturating, NaN -> 0
    return float_to_int(x.astype(np.float64), dst, "rzi")


def float_to_int(f, dst: dt.DType, mode="rzi", saturate=True):
    f = np.asarray(f, np.float64)
    nan = np.isnan(f)
    f = np.where(nan, 0.0, f)
    t = {"rzi": np.trunc, "rni": np.rint, "rmi": np.floor, "rpi": np.ceil}[mode](f)
    bits = dst.bits
    if dst.is_signed:
        hi_f, lo_f = float(2 ** (bits - 1)), -float(2 ** (bits - 1))
        hi_i, lo_i = 2 ** (bits - 1) - 1, -2 ** (bits - 1)
    else:
        hi_f, lo_f = float(2 ** bits), 0.0
        hi_i, lo_i = 2 ** bits - 1, 0
    big, small = t >= hi_f, t < lo_f
    npd = val_np(dst)
    safe = np.where(big | small, 0.0, t).astype(npd)
    return np.where(big, npd.type(hi_i), np.where(small, npd.type(lo_i), safe)).astype(npd)


# ---------------------------------------------------------------- operators

def _shift(op, a, b, d: dt.DType):
    npd = val_np(d)
    a = np.asarray(a, npd)
    amt = np.asarray(b).astype(np.uint64)
    big = amt >= d.bits
    safe = np.where(big, 0, amt).astype(npd)
    if op == "shl":
        return np.where(big, npd.type(0), a << safe).astype(npd)
    if d.is_signed:
        return np.where(big, np.where(a < 0, npd.type(-1), npd.type(0)), a >> safe).astype(npd)
    return np.where(big, npd.type(0), a >> safe).astype(npd)


def _float_minmax(op, a, b):
    """minnum/maxnum: a NaN operand is ignored; -0 < +0."""
    if op == "min":
        r = np.fmin(a, b)
        z = (a == 0) & (b == 0)
        if np.any(z):
            r = np.where(z & (np.signbit(a) | np.signbit(b)), -np.zeros_like(r), r)
    else:
        r = np.fmax(a, b)
        z = (a == 0) & (b == 0)
        if np.any(z):
            r = np.where(z & ~(np.signbit(a) & np.signbit(b)), np.zeros_like(r), r)
    return r


FLOAT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
INT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and, "or": np.bitwise_or,
           "xor": np.bitwise_xor, "min": np.minimum, "max": np.maximum}


def binary_values(op, d: dt.DType, a, b, fault=None):
    """`a op b` for values of dtype `d`. `fault(mask, msg)` reports an integer division by zero."""
    if d.kind == "bool":
        f = {"and": np.logical_and, "min": np.logical_and, "or": np.logical_or, "max": np.logical_or,
             "xor": np.logical_xor}.get(op)
        if f is None:
            raise InterpreterError(f"operator '{op}' on bool values")
        return f(a, b)
    if d.name == "bfloat16":
        fa, fb = R.decode(R.BF16, a), R.decode(R.BF16, b)
        if op in ("min", "max"):
            r = _float_minmax(op, fa, fb)
            return R.encode(R.BF16, r)
        f = FLOAT_OPS.get(op)
        if f is None:
            raise InterpreterError(f"operator '{op}' on bfloat16 values")
        return R.f64_to_bf16_bits(f(fa, fb))       # exact-in-f64 or innocuous double rounding (53 >= 2*8+2)
    if d.is_float:
        if op in ("min", "max"):
            return _float_minmax(op, a, b)
        f = FLOAT_OPS.get(op)
        if f is None:
            raise InterpreterError(f"operator '{op}' on {d.name} values")
        return f(a, b)
    f = INT_OPS.get(op)
    if f is not None:
        return f(a, b)
    if op in ("shl", "shr"):
        return _shift(op, a, b, d)
    if op in ("floordiv", "mod", "div"):
        zero = np.asarray(b) == 0
        if np.any(zero):
            if fault is not None:
                fault(zero, "integer division by zero")
            raise InterpreterError("integer division by zero")
        return np.floor_divide(a, b) if op in ("floordiv", "div") else np.remainder(a, b)
    raise InterpreterError(f"unknown operator '{op}'")


CMP = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
       "ne": np.not_equal}


def compare_values(op, d: dt.DType, a, b):
    if d.name == "bfloat16":
        a, b = R.decode(R.BF16, a), R.decode(R.BF16, b)
    return CMP[op](a, b)


def unary_values(op, d: dt.DType, a):
    if op == "not" or (op == "invert" and d.kind == "bool"):
        return np.logical_not(a)
    if d.name == "bfloat16":
        if op == "neg":
            return np.asarray(a, np.uint16) ^ np.uint16(0x8000)
        if op == "abs":
            return np.asarray(a, np.uint16) & np.uint16(0x7FFF)
    if op == "neg":
        return np.negative(a)
    if op == "invert":
        return np.invert(a)
    if op == "abs":
        return a if d.kind == "uint" else np.abs(a)
    raise InterpreterError(f"unknown unary operator '{op}'")


def _direct(op, d: dt.DType, fb):
    """The numpy function `binary_values(op, d, a, b)` calls for integer `d`, when nothing else is decided per
    call (no division by a run-time or zero divisor, no shift): else None."""
    if not d.is_int:
        return None
    f = INT_OPS.get(op)
    if f is not None:
        return f
    if op in ("floordiv", "mod", "div") and is_const(fb) and fb.const != 0:
        return np.remainder if op == "mod" else np.floor_divide
    return None


# ---------------------------------------------------------------- the compiler

def _const_fn(v):
    def f(m, idx):
        return v
    f.const = v
    return f


def is_const(f) -> bool:
    return hasattr(f, "const")


class ExprCompiler:
    def __init__(self):
        self.cache = {}

    def expr(self, e):
        if isinstance(e, bool):
            return _const_fn(np.bool_(e))
        if isinstance(e, int):
            return _const_fn(const_value(e, dt.int32 if -2**31 <= e < 2**31 else dt.int64))
        if isinstance(e, float):
            return _const_fn(np.float32(e))
        key = id(e)
        hit = self.cache.get(key)
        if hit is not None and hit[0] is e:
            return hit[1]
        meth = getattr(self, "e_" + type(e).__name__, None)
        if meth is None:
            raise InterpreterError(f"the interpreter cannot evaluate {type(e).__name__} expressions")
        f = meth(e)
        self.cache[key] = (e, f)
        return f

    def _fold(self, f):
        try:
            v = f(None, None)
        except Exception:
            return f
        return _const_fn(v)

    def e_Const(self, e: ir.Const):
        return _const_fn(const_value(e.value, e.dtype))

    def e_Var(self, e: ir.Var):
        var, loc = e, e.loc

        def f(m, idx):
            a = m.vars.get(var)
            if a is None:
                raise InterpreterError(f"{loc}: variable '{var.name}' is read before it is assigned")
            return a if idx is None else a[idx]
        return f

    def e_Special(self, e: ir.Special):
        key = (e.name, e.axis if e.name in ("tid", "ntid", "ctaid", "nctaid", "clusterid", "cluster.ctaid") else 0)

        def f(m, idx):
            a = m.special[key]
            return a if idx is None else a[idx]
        return f

    def _operand(self, x, d):
        """Compile `x` and convert it to dtype `d` if its own dtype differs (IR built by index helpers)."""
        f = self.expr(x)
        xd = x.dtype if isinstance(x, ir.Expr) else None
        if xd is not None and xd != d:
            g = f

            def f(m, idx):
                return convert(g(m, idx), xd, d)
            if is_const(g):
                f = self._fold(f)
        return f

    def e_Binary(self, e: ir.Binary):
        d, op, loc = e.dtype, e.op, e.loc
        fa, fb = self._operand(e.a, d), self._operand(e.b, d)
        fast = _direct(op, d, fb)
        if fast is not None and not is_const(fa):
            # integer index arithmetic (and a division by a nonzero constant, which cannot fault) calls numpy
            # directly: the same function binary_values picks, without choosing it again on every evaluation
            if is_const(fb):
                bc = fb.const

                def f(m, idx):
                    return fast(fa(m, idx), bc)
            else:
                def f(m, idx):
                    return fast(fa(m, idx), fb(m, idx))
            return f

        def f(m, idx):
            a, b = fa(m, idx), fb(m, idx)

            def fault(mask, msg):
                if m is not None:
                    raise m.fault(loc, msg, m.first(idx, mask))
            return binary_values(op, d, a, b, fault)
        if is_const(fa) and is_const(fb):
            return self._fold(f)
        return f

    def e_Compare(self, e: ir.Compare):
        da = e.a.dtype if isinstance(e.a, ir.Expr) else None
        db = e.b.dtype if isinstance(e.b, ir.Expr) else None
        d = dt.promote(da, db) if da is not None and db is not None else (da or db or dt.int32)
        op = e.op
        fa, fb = self._operand(e.a, d), self._operand(e.b, d)

        def f(m, idx):
            return compare_values(op, d, fa(m, idx), fb(m, idx))
        if is_const(fa) and is_const(fb):
            return self._fold(f)
        return f

    def e_Unary(self, e: ir.Unary):
        d, op = e.dtype, e.op
        fa = self._operand(e.a, d if op != "not" else dt.bool_)

        def f(m, idx):
            return unary_values(op, d, fa(m, idx))
        if is_const(fa):
            return self._fold(f)
        return f

    def e_Select(self, e: ir.Select):
        d = e.dtype
        fc = self._operand(e.cond, dt.bool_)
        fa, fb = self._operand(e.a, d), self._operand(e.b, d)
        npd = val_np(d)

        def f(m, idx):
            c = fc(m, idx)
            if np.ndim(c) == 0:
                return fa(m, idx) if c else fb(m, idx)
            return np.where(c, fa(m, idx), fb(m, idx)).astype(npd, copy=False)
        if is_const(fc):
            return fa if fc.const else fb
        return f

    def e_Cast(self, e: ir.Cast):
        src = e.a.dtype if isinstance(e.a, ir.Expr) else dt.int32
        dst = e.dtype
        fa = self.expr(e.a)

        def f(m, idx):
            return convert(fa(m, idx), src, dst)
        if is_const(fa):
            return self._fold(f)
        return f

    def e_Load(self, e: ir.Load):
        st, loc = e.storage, e.loc
        npd = mem_np(e.dtype)
        is_bool = e.dtype.kind == "bool"
        fo = self.expr(e.offset)
        dims = compile_checks(e.checks, self, st, "read", loc)

        def f(m, idx):
            if dims is not None:
                dims(m, idx)
            off = fo(m, idx)
            v = m.read(m.mem[st], npd, off, idx, loc)
            return (v & 1).astype(np.bool_) if is_bool else v
        return f
