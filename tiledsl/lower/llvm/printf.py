"""`T.device_print` on the GPU: the CUDA runtime's `vprintf(format, args)`.

The format is a constant string in global memory; the values are promoted as C varargs promote them (floats to
double, narrower ints to 32 bits, core/printf.py) and packed into a per-thread stack buffer with each value at its
natural alignment, which is the layout vprintf reads.
"""
from __future__ import annotations

from llvmlite import ir as ll

from ...core.printf import promoted
from .casts import cast
from .types import GLOBAL, I8, I32, lltype


def emit_print(cg, s) -> None:
    b, m = cg.b, cg.module
    vprintf = m.globals.get("vprintf")
    if vprintf is None:
        vprintf = ll.Function(m, ll.FunctionType(I32, [ll.PointerType(), ll.PointerType()]), "vprintf")
    data = bytearray(s.fmt.encode("utf-8") + b"\0")
    name = f"tiledsl_fmt_{sum(1 for g in m.globals if g.startswith('tiledsl_fmt_'))}"
    g = ll.GlobalVariable(m, ll.ArrayType(I8, len(data)), name, addrspace=GLOBAL)
    g.global_constant = True
    g.linkage = "internal"
    g.initializer = ll.Constant(g.value_type, data)
    fmt = b.addrspacecast(g, ll.PointerType())
    if not s.values:
        b.call(vprintf, [fmt, ll.Constant(ll.PointerType(), None)])
        return
    vals = [cast(cg, cg.expr(v), v.dtype, promoted(v.dtype)) for v in s.values]
    sty = ll.LiteralStructType([lltype(promoted(v.dtype)) for v in s.values])   # natural alignment, as C packs
    buf = cg.entry_builder.alloca(sty, name="printf.args")
    buf.align = 8
    buf.type = ll.PointerType()                     # opaque, as codegen's other pointers (stmts.base_ptr)
    for k, v in enumerate(vals):
        b.store(v, b.gep(buf, [I32(0), I32(k)], inbounds=True, source_etype=sty))
    b.call(vprintf, [fmt, buf])
