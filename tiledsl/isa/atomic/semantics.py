"""atom / red on the interpreter: each thread's read-modify-write applied one at a time, in a fixed order.

The order: an apply's repeats are separate instructions run in program order; within one instruction the active
threads of the lockstep batch apply in ascending flat thread id (blocks of the batch in order, then linear thread
id), and batches of blocks run one after another. Each thread reads the value left by the previous one, so `atom`
returns distinct old values to threads that add to one counter, exactly as one legal ordering on the GPU would.

Written from the PTX ISA: integer ops wrap; inc gives (old >= b) ? 0 : old + 1 and dec
(old == 0 || old > b) ? b : old - 1 (unsigned); cas stores c where old == b; float adds round to nearest even once
per operation; add.f32 on global memory flushes subnormal inputs and results to zero of their sign, as the ISA
states for the current implementation (on shared memory, and for the .noftz f16/bf16 forms, it does not).
"""
from __future__ import annotations

import numpy as np

from ...interpreter import rounding as R
from ...interpreter.machine import UINT
from ...interpreter.operands import INT_T, AddrOp, RegOp, native_error, operand, predicated
from ...ir import nodes as ir
from ..register.pattern import TYPES
from ..register.semantics import float_op
from .pattern import Form

_FLOAT = {"f16": R.F16, "bf16": R.BF16, "f32": R.F32, "f64": R.F64, "f16x2": R.F16, "bf16x2": R.BF16}


def semantics(n: ir.Native, cx):
    form: Form = n.form
    groups = n.groups
    if form.kind == "atom":
        dst, addr_g, srcs = groups[0], groups[1], groups[2:]
    else:
        dst, addr_g, srcs = None, groups[0], groups[1:]
    if len(addr_g) != 1 or not isinstance(addr_g[0], ir.Addr):
        raise native_error(n, "the memory operand must be one address")
    if addr_g[0].storage.scope != form.space:
        raise native_error(n, f"the address is in {addr_g[0].storage.scope} memory but the opcode says "
                              f".{form.space}")
    addr = AddrOp(addr_g[0], cx)
    bits = TYPES[form.type][0]
    u = UINT[bits]
    size = bits // 8
    d = None
    if dst is not None:
        d = operand(dst[0], cx)
        if not isinstance(d, RegOp):
            raise native_error(n, "the destination must be a register")
    vals = [operand(g[0], cx) for g in srcs]
    fn = rmw(form)
    loc = n.loc

    def core(m, idx):
        mem = m.mem[addr.st]
        byte = addr.bytes(m, idx)
        mis = byte % size != 0
        if np.any(mis):
            raise m.fault(loc, f"misaligned address: {form.kind}.{form.space} of {size} bytes at byte offset "
                               f"{int(byte[np.flatnonzero(mis)[0]])} of '{addr.st.name}'", m.first(idx, mis))
        el = np.asarray(byte // size, np.int64)
        m.check(mem, u, el, idx, loc, "atomic access")
        ops = [np.broadcast_to(v.read(m, idx), el.shape).astype(u) for v in vals]
        a = mem.view(u)
        if m.race is not None and mem.scope == "shared":
            m.race.atomic(mem, size, el, idx, loc)
        if mem.scope == "shared":
            row = np.asarray(m.rows(mem, idx), np.int64)
            key = row * a.shape[-1] + el
        else:
            row, key = None, el
        old = np.empty(el.shape, u)
        for sel in _rounds(key):               # each round: threads at distinct addresses, in thread order
            at = (row[sel], el[sel]) if row is not None else el[sel]
            cur = a[at].copy()
            a[at] = fn(cur, *[o[sel] for o in ops])
            old[sel] = cur
        if d is not None:
            d.store(m, idx, old)
    return predicated(core, n, cx, [d] if d is not None else [], form.type)


def _rounds(key):
    """Positions grouped so that round r holds, for every address, the r-th thread (in thread order) that
    touches it: applying the rounds in order applies each address's threads in ascending thread id."""
    n = len(key)
    order = np.argsort(key, kind="stable")
    k = key[order]
    start = np.r_[True, k[1:] != k[:-1]] if n else np.zeros(0, bool)
    first = np.maximum.accumulate(np.where(start, np.arange(n), 0))
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - first
    return [rank == r for r in range(int(rank.max()) + 1 if n else 0)]


def rmw(form: Form):
    """(old bits, b bits[, c bits]) -> new bits, elementwise, for the form's operation and type."""
    op, ty = form.op, form.type
    bits = TYPES[ty][0]
    u = UINT[bits]
    if op == "cas":
        return lambda old, b, c: np.where(old == b, c, old).astype(u)
    if op == "exch":
        return lambda old, b: b.copy()
    if op == "and":
        return lambda old, b: old & b
    if op == "or":
        return lambda old, b: old | b
    if op == "xor":
        return lambda old, b: old ^ b
    if op == "inc":
        return lambda old, b: np.where(old >= b, u(0), old + u(1)).astype(u)
    if op == "dec":
        return lambda old, b: np.where((old == 0) | (old > b), b, old - u(1)).astype(u)
    if op in ("min", "max"):
        s = INT_T[ty]
        pick = np.minimum if op == "min" else np.maximum
        return lambda old, b: pick(old.view(s), b.view(s)).view(u)
    if ty in _FLOAT:
        return _float_add(form)
    return lambda old, b: old + b                 # add.u32/s32/u64: two's complement wraps alike


def _float_add(form: Form):
    ty = form.type
    fmt = _FLOAT[ty]
    flush = ty == "f32" and form.space == "global"

    def one(x, y):
        return float_op("add", fmt, "rn", [R.decode(fmt, x), R.decode(fmt, y)], ftz=flush)
    if not ty.endswith("x2"):
        u = UINT[fmt.bits]
        return lambda old, b: np.asarray(one(old, b)).astype(u)
    hu = UINT[fmt.bits]
    m16 = np.uint32(0xFFFF)

    def packed(old, b):
        lo = one((old & m16).astype(hu), (b & m16).astype(hu)).astype(np.uint32)
        hi = one((old >> np.uint32(16)).astype(hu), (b >> np.uint32(16)).astype(hu)).astype(np.uint32)
        return lo | (hi << np.uint32(16))
    return packed
