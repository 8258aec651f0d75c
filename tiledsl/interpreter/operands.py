"""What every family's interpreter semantics share: operands, predication and poisoning, the PTX type tables.

A family's semantics (tiledsl/isa/<family>/semantics.py) compiles one `ir.Native` into a closure `f(machine, idx)`,
reading the instruction from the native's parsed form, never from its opcode text. Register operands are read and
written as raw bits of their width; the form's type decides how the bits are interpreted (so an `fma.rn.f32` on a
uint32-typed view works on the same bits the GPU would).

Predication: a false `pred` skips the instruction for that thread. A written register of a skipped thread keeps
its value with `preserve`, and is otherwise undefined: the interpreter poisons it (a NaN for float registers,
0xDEADBEEF-like bits for integer ones) so code that relies on it shows up.
"""
from __future__ import annotations

import numpy as np

from ..core import dtypes as dt
from ..ir import nodes as ir
from . import rounding as R
from .machine import UINT, InterpreterError, mem_np, poison_bits, sub


# ---------------------------------------------------------------- PTX types

FLOAT_T = {"f16": R.F16, "bf16": R.BF16, "f32": R.F32, "f64": R.F64}
PACKED_T = {"f16x2": R.F16, "bf16x2": R.BF16, "f32x2": R.F32}
INT_T = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64,
         "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
         "b8": np.uint8, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64}
BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "f16x2": 32, "bf16x2": 32, "f32x2": 64,
        **{k: int(k[1:]) for k in INT_T}}


# ---------------------------------------------------------------- operands

class RegOp:
    """A register: a static slot of the thread's local storage, read/written as raw bits."""

    write = False

    def __init__(self, r: ir.Reg):
        self.st, self.index, self.dtype = r.storage, r.index, r.dtype
        self.bits = r.dtype.bits
        self.u = UINT[self.bits]
        self.write = bool(r.write)

    def read(self, m, idx):
        return m.reg_read(self.st, self.index, self.u, idx)

    def store(self, m, idx, bits):
        m.reg_write(self.st, self.index, self.u, np.asarray(bits).astype(self.u, copy=False), idx)

    def poison(self, m, idx):
        bits = getattr(self, "poison_value", None)
        if bits is None:
            bits = poison_bits(self.dtype)
        m.reg_write(self.st, self.index, self.u, self.u(bits), idx)


class ValOp:
    """A value operand (an expression): its bits, broadcast over the active threads."""

    write = False

    def __init__(self, v: ir.Val, cx):
        self.f = cx.expr(v.expr)
        self.dtype = v.expr.dtype if isinstance(v.expr, ir.Expr) else dt.int32
        self.bits = self.dtype.bits if self.dtype.kind != "bool" else 8
        self.u = UINT[self.bits]
        self.mem = mem_np(self.dtype)

    def read(self, m, idx):
        x = np.asarray(self.f(m, idx)).astype(self.mem, copy=False).view(self.u)
        return np.broadcast_to(x, (m.n(idx),))

    def value(self, m, idx):
        return self.f(m, idx)


def operand(a, cx):
    if isinstance(a, ir.Reg):
        return RegOp(a)
    if isinstance(a, ir.Val):
        return ValOp(a, cx)
    raise InterpreterError(f"unexpected operand {type(a).__name__}")


class AddrOp:
    """A memory address: storage plus an element offset in units of the address's dtype -> byte offsets."""

    def __init__(self, a: ir.Addr, cx):
        self.st, self.dtype = a.storage, a.dtype
        self.size = max(1, a.dtype.bits // 8)
        self.f = cx.expr(a.offset)

    def bytes(self, m, idx):
        off = np.asarray(self.f(m, idx)).astype(np.int64)
        return np.broadcast_to(off * self.size, (m.n(idx),))


def native_error(n: ir.Native, msg) -> InterpreterError:
    """An InterpreterError at the native's line, naming its opcode."""
    return InterpreterError(f"{n.loc}: {n.opcode}: {msg}" if n.loc is not None else f"{n.opcode}: {msg}")


# ---------------------------------------------------------------- predication

def predicated(core, n: ir.Native, cx, dsts, ty: str = ""):
    """Wrap `core(m, idx)` with the native's predicate and the undefined/preserved destination rule; `ty` is the
    PTX type of the destinations (a float type poisons them with a NaN of that format)."""
    if n.pred is None:
        return core
    for d in dsts:                                   # undefined float results read as NaN, whatever the view
        if ty in PACKED_T:
            d.poison_value = {"f16x2": 0x7EAD7EAD, "bf16x2": 0x7FAD7FAD, "f32x2": 0x7FFFDEAD7FFFDEAD}[ty]
        elif ty in FLOAT_T:
            d.poison_value = poison_bits({16: dt.float16 if ty == "f16" else dt.bfloat16, 32: dt.float32,
                                          64: dt.float64}[d.bits]) if d.bits == BITS[ty] else None
    pf = cx.expr(n.pred)
    preserve = n.preserve

    def f(m, idx):
        p = pf(m, idx)
        if np.ndim(p) == 0:
            if p:
                core(m, idx)
            elif not preserve:
                for d in dsts:
                    d.poison(m, idx)
            return
        p = np.asarray(p, bool)
        if p.all():
            core(m, idx)
            return
        on = sub(idx, p)
        if len(on):
            core(m, on)
        if not preserve:
            off = sub(idx, ~p)
            for d in dsts:
                d.poison(m, off)
    return f


# ---------------------------------------------------------------- warps

def warps(m, idx, n: ir.Native):
    """The active flat thread ids as (warps, 32), after checking that the active set is whole warps: all 32 lanes
    of a warp execute a warp instruction together (other warps may be inactive, e.g. behind a warp-uniform branch)."""
    if m.T % 32:
        raise m.fault(n.loc, f"{n.opcode} is a warp instruction but the block has {m.T} threads (not whole warps)",
                      m.first(idx))
    if idx is None:
        return m.all.reshape(-1, 32)
    ok = len(idx) % 32 == 0
    if ok and len(idx):
        w = idx.reshape(-1, 32)
        ok = bool(np.all(w[:, 0] % 32 == 0) and np.all(w[:, 31] - w[:, 0] == 31))
    if not ok:
        full = np.unique(idx // 32)
        for wid in full:
            lanes = idx[idx // 32 == wid] % 32
            if len(lanes) != 32:
                missing = sorted(set(range(32)) - set(lanes.tolist()))
                raise m.fault(n.loc, f"{n.opcode} needs all 32 lanes of the warp, but lanes {missing[:8]}"
                                     f"{'...' if len(missing) > 8 else ''} are inactive here (divergent control "
                                     f"flow or predication)", int(wid * 32 + lanes[0]))
    return idx.reshape(-1, 32)


def not_predicated(n: ir.Native):
    """A warp instruction runs on whole warps: a per-thread predicate has no meaning for it."""
    if n.pred is not None:
        raise native_error(n, "a warp instruction cannot be predicated per thread")
