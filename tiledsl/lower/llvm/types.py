"""How tiledsl's dtypes and memory spaces look in LLVM IR: shared by statements, arithmetic, casts and inline asm.

bf16 has no LLVM arithmetic type tiledsl relies on, so it is carried as its i16 bits (casts.py converts); bool is
an i1 in registers and a byte in memory.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ...core import dtypes as dt

I1, I8, I16, I32, I64 = ll.IntType(1), ll.IntType(8), ll.IntType(16), ll.IntType(32), ll.IntType(64)
F16, F32, F64 = ll.HalfType(), ll.FloatType(), ll.DoubleType()
GLOBAL, SHARED, LOCAL = 1, 3, 5          # NVPTX address spaces
DATALAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"


_LLTYPE, _MEMTYPE = {}, {}              # dtype name -> its type (codegen asks ~9000 times for a GEMM)


def lltype(d: dt.DType) -> ll.Type:
    """The LLVM type of a value of `d` in a register."""
    t = _LLTYPE.get(d.name)
    if t is None:
        if d.kind == "bool":
            t = I1
        elif d.is_float:
            t = {16: F16, 32: F32, 64: F64}[d.bits] if d.name != "bfloat16" else I16
        else:
            t = ll.IntType(d.bits)
        _LLTYPE[d.name] = t
    return t


def memtype(d: dt.DType) -> ll.Type:
    """How an element sits in memory (bool as a byte)."""
    t = _MEMTYPE.get(d.name)
    if t is None:
        t = _MEMTYPE[d.name] = I8 if d.kind == "bool" else lltype(d)
    return t


def memtype_bytes(d: dt.DType) -> int:
    """Bytes one element of `d` takes in memory."""
    return 1 if d.kind == "bool" else d.nbytes
