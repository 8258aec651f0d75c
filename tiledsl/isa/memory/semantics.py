"""ld / st on the interpreter: raw-byte loads and stores of 1, 2 or 4 words, faults on misaligned or
out-of-bounds addresses. Cache qualifiers, .nc, .volatile and the L2 hints change no result and are ignored."""
from __future__ import annotations

import numpy as np

from ...interpreter.machine import UINT
from ...interpreter.operands import BITS, INT_T, PACKED_T, AddrOp, RegOp, native_error, operand, predicated
from ...ir import nodes as ir
from .pattern import Form


def semantics(n: ir.Native, cx):
    form: Form = n.form
    op, ty, words, space = form.op, form.type, form.words, form.space
    if ty not in BITS or ty in PACKED_T:
        raise native_error(n, f"type .{ty} is not supported by the interpreter")
    bits = BITS[ty]
    size = bits // 8
    u = UINT[bits]
    if op == "ld":
        regs, addr_g = n.groups[0], n.groups[1]
    else:
        addr_g, regs = n.groups[0], n.groups[1]
    if len(addr_g) != 1 or not isinstance(addr_g[0], ir.Addr):
        raise native_error(n, "the memory operand must be one address")
    addr = AddrOp(addr_g[0], cx)
    if addr.st.scope != space:
        raise native_error(n, f"the address is in {addr.st.scope} memory but the opcode says .{space}")
    ops = [operand(a, cx) for a in regs]
    if len(ops) != words:
        raise native_error(n, f"expects {words} register(s), got {len(ops)}")
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
                raise native_error(n, "ld destinations must be registers")

        def core(m, idx):
            mem, el = address(m, idx)
            m.check(mem, u, el, idx, loc, "read")
            if words > 1:
                m.check(mem, u, el + (words - 1), idx, loc, "read")
            vals = [m.read(mem, u, el + w, idx, loc, plain=False) for w in range(words)]
            for r, v in zip(ops, vals):
                v = np.asarray(v)
                if r.bits > bits:                     # a narrow load into a wider register extends
                    v = v.view(INT_T["s" + str(bits)]).astype(np.int64) if signed else v.astype(np.uint64)
                r.store(m, idx, np.broadcast_to(v, (m.n(idx),)).astype(np.uint64).astype(r.u))
        return predicated(core, n, cx, ops, ty)

    def core(m, idx):
        mem, el = address(m, idx)
        m.check(mem, u, el, idx, loc, "write")
        if words > 1:
            m.check(mem, u, el + (words - 1), idx, loc, "write")
        for w, r in enumerate(ops):
            v = r.read(m, idx).astype(np.uint64) & np.uint64((1 << bits) - 1)
            m.write(mem, u, el + w, v.astype(u), idx, loc, plain=False)
    return predicated(core, n, cx, [], ty)
