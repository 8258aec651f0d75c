"""Binary arithmetic with the front end's semantics: Python floor `//` and `%` on signed integers."""
from __future__ import annotations

from llvmlite import ir as ll

from ...core.errors import CompilationError


def binary(cg, e, a, c):
    b, d, op = cg.b, e.dtype, e.op
    if d.name == "bfloat16":
        # In f32 then rounded once to bf16: exact inputs and 24 >= 2*8+2 bits make this the correctly rounded
        # bf16 result for + - * / (double rounding is innocuous at that precision), and min/max are exact.
        from .casts import cast, f32_to_bf16
        from ...core import dtypes as dt
        fa, fc = cast(cg, a, d, dt.float32), cast(cg, c, d, dt.float32)
        e32 = type(e)(dt.float32, e.loc, e.op, e.a, e.b)
        return f32_to_bf16(cg, binary(cg, e32, fa, fc))
    if d.kind == "bool":
        if op in ("and", "min"):
            return b.and_(a, c)
        if op in ("or", "max"):
            return b.or_(a, c)
        if op == "xor":
            return b.xor(a, c)
        raise CompilationError(f"'{op}' on bool values", e.loc)
    if d.is_float:
        f = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv}.get(op)
        if f is not None:
            return f(a, c)
        if op in ("min", "max"):
            name = f"llvm.{'minnum' if op == 'min' else 'maxnum'}.f{d.bits}"
            return b.call(cg.intrinsic(name, a.type, [a.type, a.type]), [a, c])
        raise CompilationError(f"'{op}' on {d.name} values", e.loc)
    signed = d.is_signed
    if op == "add":
        return b.add(a, c)
    if op == "sub":
        return b.sub(a, c)
    if op == "mul":
        return b.mul(a, c)
    if op == "and":
        return b.and_(a, c)
    if op == "or":
        return b.or_(a, c)
    if op == "xor":
        return b.xor(a, c)
    if op in ("shl", "shr"):
        return _shift(b, op, signed, a, c)
    if op in ("min", "max"):
        pre = ("s" if signed else "u") + op
        return b.call(cg.intrinsic(f"llvm.{pre}.i{d.bits}", a.type, [a.type, a.type]), [a, c])
    if op in ("floordiv", "mod"):
        if not signed:
            return b.udiv(a, c) if op == "floordiv" else b.urem(a, c)
        zero = ll.Constant(a.type, 0)
        k = None
        if isinstance(c, ll.Constant) and isinstance(c.constant, int):
            bits = c.type.width               # constants are built as unsigned bit patterns: read them signed
            k = c.constant - ((c.constant >> (bits - 1)) & 1) * (1 << bits)
        if k is not None and k > 0 and k & (k - 1) == 0:
            # by a positive power of two, Python's floor division is an arithmetic shift and its modulo a mask
            return b.ashr(a, ll.Constant(a.type, k.bit_length() - 1)) if op == "floordiv" else \
                b.and_(a, ll.Constant(a.type, k - 1))
        q, r = b.sdiv(a, c), b.srem(a, c)
        if k is not None and k > 0:
            # a positive divisor: step down exactly when the remainder is negative
            neg = b.icmp_signed("<", r, zero)
            if op == "floordiv":
                return b.sub(q, b.zext(neg, a.type))
            return b.add(r, b.select(neg, c, zero))
        # Python floors: when the remainder is non-zero and its sign differs from the divisor's, step down.
        adjust = b.and_(b.icmp_signed("!=", r, zero), b.icmp_signed("!=", b.icmp_signed("<", r, zero),
                                                                    b.icmp_signed("<", c, zero)))
        if op == "floordiv":
            return b.sub(q, b.zext(adjust, a.type))
        return b.add(r, b.select(adjust, c, zero))
    raise CompilationError(f"unknown operator '{op}'", e.loc)


def _shift(b, op, signed, a, c):
    """a << c, a >> c with the documented result for an amount of at least the width (read unsigned, as PTX's
    shift amount is): 0, or the sign for a signed >>, as PTX clamps it. LLVM's shifts make such an amount poison,
    and its passes delete what depends on it, so an amount not known to be in range is clamped here: a constant
    one at compile time (a shift by an in-range constant is the plain instruction), a run-time one by a select."""
    width = a.type.width
    shift = b.shl if op == "shl" else b.ashr if signed else b.lshr
    if isinstance(c, ll.Constant) and isinstance(c.constant, int):
        amount = c.constant % (1 << width)            # the bit pattern, unsigned
        if amount < width:
            return shift(a, c)
        if op == "shr" and signed:
            return b.ashr(a, ll.Constant(a.type, width - 1))
        return ll.Constant(a.type, 0)
    over = b.icmp_unsigned(">=", c, ll.Constant(c.type, width))
    if op == "shr" and signed:
        return b.ashr(a, b.select(over, ll.Constant(c.type, width - 1), c))
    return b.select(over, ll.Constant(a.type, 0), shift(a, c))
