"""Value conversions, saturating like PTX `cvt` (so GPU and interpreter agree on out-of-range values)."""
from __future__ import annotations

from llvmlite import ir as ll

from ...core import dtypes as dt
from .types import I16, I32, lltype


def cast(cg, v, src: dt.DType, dst: dt.DType):
    b = cg.b
    if src == dst:
        return v
    if src.name == "bfloat16" or dst.name == "bfloat16":
        return _bf16(cg, v, src, dst)
    t = lltype(dst)
    if dst.kind == "bool":
        if src.is_float:
            return b.fcmp_unordered("!=", v, ll.Constant(v.type, 0.0))
        return b.icmp_unsigned("!=", v, ll.Constant(v.type, 0))
    if src.kind == "bool":
        if dst.is_float:
            return b.uitofp(v, t)
        return b.zext(v, t)
    if src.is_int and dst.is_int:
        if dst.bits < src.bits:
            return b.trunc(v, t)
        if dst.bits > src.bits:
            return b.sext(v, t) if src.is_signed else b.zext(v, t)
        return v
    if src.is_float and dst.is_float:
        return b.fpext(v, t) if dst.bits > src.bits else b.fptrunc(v, t)
    if src.is_int and dst.is_float:
        return b.sitofp(v, t) if src.is_signed else b.uitofp(v, t)
    # float -> int: truncate toward zero, saturate, NaN -> 0 (PTX cvt.rzi semantics)
    name = f"llvm.fpto{'s' if dst.is_signed else 'u'}i.sat.i{dst.bits}.f{src.bits}"
    return b.call(cg.intrinsic(name, t, [v.type]), [v])


def _bf16(cg, v, src, dst):
    """bf16 is carried as i16 bits. Widening is exact; narrowing rounds once to nearest even (NaN -> 0x7FFF),
    in integer arithmetic so every target can do it (cvt.rn.bf16 needs sm_80)."""
    b = cg.b
    F32 = ll.FloatType()
    if src.name == "bfloat16":
        f = b.bitcast(b.shl(b.zext(v, I32), ll.Constant(I32, 16)), F32)   # exact widening
        return cast(cg, f, dt.float32, dst) if dst != dt.float32 else f
    if src.is_float and src.bits == 64:
        f = _f64_to_f32_round_to_odd(cg, v)
    elif src.is_int and src.bits <= 32 or src.kind == "bool":
        f = _f64_to_f32_round_to_odd(cg, cast(cg, v, src, dt.float64))      # ints up to 32 bits are exact in f64
    else:
        f = cast(cg, v, src, dt.float32) if src != dt.float32 else v
    return f32_to_bf16(cg, f)


def f32_to_bf16(cg, f):
    b = cg.b
    bits = b.bitcast(f, I32)
    lsb = b.and_(b.lshr(bits, ll.Constant(I32, 16)), ll.Constant(I32, 1))
    rounded = b.lshr(b.add(bits, b.add(lsb, ll.Constant(I32, 0x7FFF))), ll.Constant(I32, 16))
    nan = b.fcmp_unordered("uno", f, f)
    return b.select(nan, ll.Constant(I16, 0x7FFF), b.trunc(rounded, I16))


def _f64_to_f32_round_to_odd(cg, x):
    """f64 -> f32 rounded to odd, so that a later rounding to bf16 (8 bits) is the single correct rounding."""
    b = cg.b
    F32, F64 = ll.FloatType(), ll.DoubleType()
    f = b.fptrunc(x, F32)
    back = b.fpext(f, F64)
    inexact = b.fcmp_ordered("!=", back, x)
    over = b.fcmp_ordered(">", b.call(cg.intrinsic("llvm.fabs.f64", F64, [F64]), [back]),
                          b.call(cg.intrinsic("llvm.fabs.f64", F64, [F64]), [x]))
    bits = b.bitcast(f, I32)
    toward_zero = b.select(over, b.sub(bits, ll.Constant(I32, 1)), bits)
    odd = b.or_(toward_zero, ll.Constant(I32, 1))
    return b.bitcast(b.select(inexact, odd, bits), F32)
