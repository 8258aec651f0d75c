"""A native instruction as inline asm holding exactly its PTX text.

Registers travel in integer containers of their width ("h" 16, "r" 32, "l" 64 bits) except f32/f64 ("f"/"d").
A predicate is passed as a 32-bit value and tested inside the asm block; `preserve_dst` ties each destination to
its old value so an inactive instruction leaves it unchanged.
"""
from __future__ import annotations

from llvmlite import ir as ll
from llvmlite.ir import instructions as _I

from ...core import dtypes as dt
from ...ir import nodes as ir
from . import fast
from .types import memtype

I1, I8, I16, I32, I64 = ll.IntType(1), ll.IntType(8), ll.IntType(16), ll.IntType(32), ll.IntType(64)
F32, F64 = ll.FloatType(), ll.DoubleType()


_CONTAINERS = {16: (I16, "h"), 32: (I32, "r"), 64: (I64, "l"), 8: (I16, "h"), 1: (I16, "h")}


def container(d: dt.DType):
    if d.name == "float32":
        return F32, "f"
    if d.name == "float64":
        return F64, "d"
    return _CONTAINERS[d.bits]


def _to_container(cg, v, d: dt.DType):
    ty, _ = container(d)
    if v.type == ty:
        return v
    if isinstance(v.type, ll.IntType) and isinstance(ty, ll.IntType):
        return cg.b.zext(v, ty) if v.type.width < ty.width else cg.b.trunc(v, ty)
    return cg.b.bitcast(v, ty)


def _from_container(cg, v, d: dt.DType):
    t = memtype(d)
    if v.type == t:
        return v
    if isinstance(v.type, ll.IntType) and isinstance(t, ll.IntType):
        return cg.b.trunc(v, t) if v.type.width > t.width else cg.b.zext(v, t)
    return cg.b.bitcast(v, t)


def reg_ptr(cg, r: ir.Reg):
    # a register slot's pointer is made once (elem_ptr keeps it in slot_ptrs under this key): a native's every
    # register operand asks for it, so look it up before building the index expression
    if r.storage.scope == "local" and 0 <= r.index < (1 << 31):
        ptr = cg.slot_ptrs.get((id(r.storage), r.dtype.name, r.index))
        if ptr is not None:
            return ptr
    return cg.elem_ptr(r.storage, r.dtype, ir.Const(dt.int32, None, r.index))


def load_reg(cg, r: ir.Reg):
    return cg.load_slot(reg_ptr(cg, r), memtype(r.dtype), id(r.storage), r.dtype.name)


def emit_native(cg, n: ir.Native):
    b = cg.b
    outs, ins = [], []            # outs: (llvm type, constraint, reg); ins: llvm values, in operand order
    shape = []                    # what decides the asm's text, constraints and type (the template's key)
    for group in n.groups:
        parts = []
        for a in group:
            if isinstance(a, ir.Reg) and a.write:
                ty, c = container(a.dtype)
                parts.append(("out", len(outs), c))
                outs.append((ty, c, a))
            elif isinstance(a, ir.Reg):
                ty, c = container(a.dtype)
                parts.append(("in", len(ins), c))
                ins.append(_to_container(cg, load_reg(cg, a), a.dtype))
            elif isinstance(a, ir.Val):
                ty, c = container(a.expr.dtype)
                parts.append(("in", len(ins), c))
                ins.append(_to_container(cg, cg.expr(a.expr), a.expr.dtype))
            elif isinstance(a, ir.Addr):
                parts.append(("addr", len(ins), _address(cg, a, ins)))
            elif isinstance(a, ir.Imm):
                parts.append(("imm", a.text))
        shape.append(tuple(parts))
    tied = []
    if n.preserve:
        for ty, c, r in outs:
            tied.append(_to_container(cg, load_reg(cg, r), r.dtype))
    pred_in = []
    if n.pred is not None:
        pred_in.append(b.zext(cg.expr(n.pred), I32))
    args = ins + tied + pred_in
    hook = getattr(n.family, "asm", None)
    key = None
    if hook is None:
        # natives of one shape (a GEMM's 512 mma.sync) share their text, constraints and types
        key = (n.opcode, tuple(shape), n.braces, n.preserve, n.pred is not None, n.effect,
               tuple([v.type for v in ins if type(v.type) is ll.PointerType]))
        inline = cg.asm_templates.get(key)
        if inline is not None:
            _call(cg, n, inline, args, outs)
            return
    inline = _template(cg, n, shape, outs, args, hook)
    if key is not None:
        cg.asm_templates[key] = inline
    _call(cg, n, inline, args, outs)


def _address(cg, a: ir.Addr, ins: list) -> tuple:
    """Append the address operand `a` to `ins`: (its constraint, its constant byte displacement)."""
    b = cg.b
    nbytes = max(1, a.dtype.bits // 8)
    if a.storage.scope == "shared":
        # shared addresses are 32-bit: keep the arithmetic in 32 bits (no 64-bit adds, no cvt)
        # The offset's constant addend goes into the instruction as [reg+imm]: accesses that differ
        # only by a static offset (an unrolled tile index) share one address register.
        base = b.ptrtoint(cg.base_ptr(a.storage), I32)
        rest, const = ir.split_const(a.offset)
        addr = base
        if not (isinstance(rest, int) and rest == 0):
            off = cg.expr(ir.as_expr(rest))
            off = b.trunc(off, I32) if off.type.width > 32 else \
                (b.sext(off, I32) if off.type.width < 32 else off)
            addr = b.add(base, b.mul(off, I32(nbytes)) if nbytes > 1 else off)
        ins.append(addr)
        return "r", const * nbytes
    rest, const = (ir.split_const(a.offset) if a.storage.scope == "global" else (a.offset, 0))
    if not -(1 << 31) <= const * nbytes < (1 << 31):     # no 32-bit displacement: keep it whole
        rest, const = a.offset, 0
    # a global address's constant addend goes into the instruction as well ([reg+imm]): the
    # unrolled copies of a tile then share one 64-bit base instead of a register pair each
    ptr = cg.elem_ptr(a.storage, a.dtype, rest)
    if a.storage.scope == "local":
        ins.append(b.ptrtoint(b.addrspacecast(ptr, ll.PointerType(addrspace=5)), I64))
    else:
        ins.append(ptr)
    return "l", const * nbytes


def _template(cg, n: ir.Native, shape, outs, args, hook):
    """The inline asm (text, constraints, function type) of a native of this shape."""
    nout = len(outs)

    def num(kind, i):
        return f"${i}" if kind == "out" else f"${nout + i}"

    ops = []
    for gi, parts in enumerate(shape):
        rendered = []
        for part in parts:
            kind = part[0]
            if kind == "imm":
                rendered.append(part[1])
            elif kind == "addr":
                c = part[2][1]
                # PTX writes a negative displacement as [reg+-n]
                rendered.append(f"[{num('in', part[1])}+{c}]" if c else f"[{num('in', part[1])}]")
            else:
                rendered.append(num(kind, part[1]))
        if len(rendered) == 1 and parts[0][0] == "addr":
            ops.append(rendered[0])
        elif len(rendered) == 1 and gi not in n.braces:
            ops.append(rendered[0])
        else:
            ops.append("{" + ", ".join(rendered) + "}")
    body = f"{n.opcode} {', '.join(ops)};" if ops else f"{n.opcode};"
    if hook is not None:
        # a family may emit an instruction as more than its own text (the bulk family's blocking try_wait loop)
        body = hook(n, ops) or body
    if n.pred is not None:
        pidx = nout + len(args) - 1
        body = f"{{ .reg .pred %tp; setp.ne.b32 %tp, ${pidx}, 0; @%tp {body} }}"
    in_cons = [part[2] if part[0] == "in" else part[2][0] for parts in shape for part in parts
               if part[0] in ("in", "addr")]
    cons = [f"={c}" for _, c, _ in outs] + in_cons + ([str(i) for i in range(nout)] if n.preserve else []) + \
        (["r"] if n.pred is not None else [])
    if n.effect in ("load", "store", "sync", "warp-mem"):
        cons.append("~{memory}")
    if not outs:
        ret = ll.VoidType()
    elif len(outs) == 1:
        ret = outs[0][0]
    else:
        ret = _result_type(cg, [t for t, _, _ in outs])
    fty = ll.FunctionType(ret, [v.type for v in args])
    return _I.InlineAsm(fty, body, ",".join(cons), n.effect != "pure")


def _call(cg, n: ir.Native, inline, args, outs):
    call = fast.asm_call(cg.b, inline, args)
    if n.effect in ("warp", "sync", "warp-mem"):
        call.attributes.add("convergent")
    for i, (ty, c, r) in enumerate(outs):
        v = call if len(outs) == 1 else fast.extract(cg.b, call, i)
        cg.store_slot(reg_ptr(cg, r), _from_container(cg, v, r.dtype), id(r.storage), r.dtype.name)


def _result_type(cg, types: list):
    """The struct an asm with several outputs returns, as a named type (one per list of element types): a wgmma
    m64n256 call returns 128 floats, and every extractvalue of a literal struct spells out all 128; the Hopper
    GEMM's IR was 1.2 MB with them and is 0.28 MB without, text llvmlite writes and LLVM parses. The PTX is
    the same either way."""
    key = tuple(str(t) for t in types)
    ty = cg.asm_types.get(key)
    if ty is None:
        ty = cg.module.context.get_identified_type(f"asm.ret{len(cg.asm_types)}")
        ty.set_body(*types)
        cg.asm_types[key] = ty
    return ty
