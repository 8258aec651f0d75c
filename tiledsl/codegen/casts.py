"""Value conversions, saturating like PTX `cvt` (so GPU and interpreter agree on out-of-range values)."""
from __future__ import annotations

from llvmlite import ir as ll

from .. import dtypes as dt

I1, I16, I32 = ll.IntType(1), ll.IntType(16), ll.IntType(32)


def cast(cg, v, src: dt.DType, dst: dt.DType):
    b = cg.b
    from .llvm import lltype
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
    """bf16 is carried as i16 bits; conversions go through f32 with PTX's cvt.rn (round to nearest even)."""
    b = cg.b
    F32 = ll.FloatType()
    if src.name == "bfloat16":
        f = b.bitcast(b.shl(b.zext(v, I32), ll.Constant(I32, 16)), F32)   # exact widening
        return cast(cg, f, dt.float32, dst) if dst != dt.float32 else f
    f = cast(cg, v, src, dt.float32) if src != dt.float32 else v
    if src.is_float and src.bits == 64:
        # one rounding, straight from f64
        return b.asm(ll.FunctionType(I16, [ll.DoubleType()]), "cvt.rn.bf16.f64 $0, $1;", "=h,d", [v], False)
    return b.asm(ll.FunctionType(I16, [F32]), "cvt.rn.bf16.f32 $0, $1;", "=h,f", [f], False)
