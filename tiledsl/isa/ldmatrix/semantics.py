"""ldmatrix / stmatrix on the interpreter, written from the PTX ISA.

.m8n8 .x{1,2,4} [.trans] .b16: lane 8i + j gives the 16-byte row address of row j of matrix i; register i of lane l
holds row l >> 2, b16 elements 2(l % 4) and 2(l % 4) + 1 of matrix i (low half first), or with .trans the same
positions of the transposed matrix. All 32 lanes of a warp execute it together.
"""
from __future__ import annotations

import numpy as np

from ...interpreter.operands import AddrOp, RegOp, native_error, not_predicated, operand, warps
from ...ir import nodes as ir
from .pattern import Form

LANE = np.arange(32)
G, TIG = LANE // 4, LANE % 4


def semantics(n: ir.Native, cx):
    not_predicated(n)
    form: Form = n.form
    op, count, trans = form.op, form.count, form.trans
    regs_g, addr_g = (n.groups[0], n.groups[1]) if op == "ldmatrix" else (n.groups[1], n.groups[0])
    if len(addr_g) != 1 or not isinstance(addr_g[0], ir.Addr):
        raise native_error(n, "the address operand must be one address")
    addr = AddrOp(addr_g[0], cx)
    if addr.st.scope != "shared":
        raise native_error(n, f"the address is in {addr.st.scope} memory, not shared")
    regs = [operand(a, cx) for a in regs_g]
    if len(regs) != count or any(r.bits != 32 for r in regs):
        raise native_error(n, f"takes {count} 32-bit registers")
    if op == "ldmatrix" and not all(isinstance(r, RegOp) for r in regs):
        raise native_error(n, "destinations must be registers")
    loc = n.loc
    used = 8 * count
    # register i of lane l <-> (row, col) of matrix i for its low (col) and high (col + 1) halves
    if trans:
        lo_rc, hi_rc = (2 * TIG, G), (2 * TIG + 1, G)
    else:
        lo_rc, hi_rc = (G, 2 * TIG), (G, 2 * TIG + 1)

    def rows_of(m, idx, w):
        mem = m.mem[addr.st]
        byte = addr.bytes(m, idx).reshape(w.shape)[:, :used]            # (W, 8*count) row addresses
        flat = w[:, :used]
        mis = byte % 16 != 0
        if np.any(mis):
            pos = np.argwhere(mis)[0]
            raise m.fault(loc, f"{op}: row address (byte offset {int(byte[tuple(pos)])} of '{addr.st.name}') is "
                               f"not 16-byte aligned", int(flat[tuple(pos)]))
        bad = (byte < 0) | (byte + 16 > mem.nbytes)
        if np.any(bad):
            pos = np.argwhere(bad)[0]
            raise m.fault(loc, f"out-of-bounds {op} row of '{addr.st.name}' (shared memory, {mem.nbytes} bytes): "
                               f"byte offset {int(byte[tuple(pos)])}", int(flat[tuple(pos)]))
        if m.race is not None:
            m.race.matrix(mem, w, byte, loc, op == "stmatrix")
        blk = m.blk[w[:, 0]]                                           # (W,)
        el = (byte // 2)[:, :, None] + np.arange(8)[None, None, :]     # (W, 8*count, 8)
        return mem.view(np.uint16), blk[:, None, None], el

    if op == "ldmatrix":
        def core(m, idx):
            w = warps(m, idx, n)
            v16, blk, el = rows_of(m, idx, w)
            mat = v16[blk, el].reshape(w.shape[0], count, 8, 8)          # [warp, matrix, row, col]
            for i, r in enumerate(regs):
                lo = mat[:, i, lo_rc[0], lo_rc[1]].astype(np.uint32)   # (W, 32)
                hi = mat[:, i, hi_rc[0], hi_rc[1]].astype(np.uint32)
                r.store(m, idx, (lo | (hi << np.uint32(16))).reshape(-1))
        return core

    def core(m, idx):
        w = warps(m, idx, n)
        W = w.shape[0]
        mat = np.zeros((W, count, 8, 8), np.uint16)
        for i, r in enumerate(regs):
            bits = r.read(m, idx).astype(np.uint32).reshape(W, 32)
            mat[:, i, lo_rc[0], lo_rc[1]] = (bits & np.uint32(0xFFFF)).astype(np.uint16)
            mat[:, i, hi_rc[0], hi_rc[1]] = (bits >> np.uint32(16)).astype(np.uint16)
        v16, blk, el = rows_of(m, idx, w)
        v16[np.broadcast_to(blk, el.shape), el] = mat.reshape(W, used, 8)
    return core
