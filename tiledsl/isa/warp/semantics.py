"""The warp collectives on the interpreter, written from the PTX ISA.

The interpreter runs every thread of a batch in lockstep, so one call sees every lane that executes the
instruction together (the active set). Each lane supplies its own membermask; the ISA makes it undefined for a lane
to execute outside its own mask and requires every lane a mask names to execute the same instruction with the same
mask, so each of those is a KernelFault naming the line and the lanes (a lane that does not exist in a partial
warp of the block did not arrive either). Within a consistent mask:

- shfl.sync: the source lane j follows the ISA's pseudo-code (b[4:0] the lane or offset, c[4:0] the clamp,
  c[12:8] the segment mask); out of range (p false) a lane reads its own `a`. Reading a lane outside the mask is
  undefined: the destination is poisoned (a NaN pattern for float registers, 0xDEADBEEF for integer ones).
- vote.sync: all/any/uni of the members' predicates; ballot sets bit l for each member l whose predicate holds.
- redux.sync: the members' add (mod 2^32), min/max (unsigned or signed), and/or/xor; for .f32 min/max -0.0 < +0.0,
  .abs takes |a| first, NaNs are ignored unless .NaN (then any NaN gives the canonical NaN 0x7FFFFFFF), and all-NaN
  inputs give the canonical NaN.
- match.sync: any: the mask of members whose `a` equals this lane's; all: membermask if every member's `a` is
  equal (p true), else 0 (p false).
- activemask: the mask of the lanes of the warp executing it together.
"""
from __future__ import annotations

import numpy as np

from ...interpreter.machine import poison_bits
from ...interpreter.operands import RegOp, native_error, operand
from ...ir import nodes as ir
from .pattern import Form

LANES = np.arange(32, dtype=np.int64)
CANONICAL_NAN = np.uint32(0x7FFFFFFF)


class Warp:
    """The active threads of one call grouped by warp: `w` (each thread's warp row), `lane`, and per warp the
    lanes that are active and that exist at all (a block of 48 threads has a 16-lane last warp)."""

    def __init__(self, m, idx):
        self.flat = m.all if idx is None else idx
        self.n = len(self.flat)
        self.lane = (m.lin[self.flat] % 32).astype(np.int64)
        keys, self.w = np.unique(self.flat - self.lane, return_inverse=True)
        self.active = np.zeros((len(keys), 32), bool)
        self.active[self.w, self.lane] = True
        self.exists = (m.lin[keys][:, None] + LANES[None, :]) < m.T

    def table(self, values, fill=0):
        """(warps, 32) of each active lane's value, `fill` elsewhere."""
        t = np.full((len(self.active), 32), fill, dtype=np.asarray(values).dtype)
        t[self.w, self.lane] = values
        return t

    def row(self, values, fill=0):
        """(threads, 32): for each thread, the values of the 32 lanes of its warp."""
        return self.table(values, fill)[self.w]


def pack(bits):
    """(threads, 32) bools -> (threads,) uint32 lane masks."""
    return (bits.astype(np.uint64) << LANES.astype(np.uint64)).sum(axis=1).astype(np.uint32)


def _lanes(ls) -> str:
    ls = [int(v) for v in ls]
    return ", ".join(map(str, ls[:8])) + (", ..." if len(ls) > 8 else "")


def members(m, n: ir.Native, W: Warp, mask):
    """(threads, 32) bools of each thread's membermask, after checking that the mask holds the thread itself and
    that every lane it names executes this instruction now, with the same mask."""
    mask = np.broadcast_to(np.asarray(mask).astype(np.uint32), (W.n,))
    bits = ((mask[:, None].astype(np.int64) >> LANES[None, :]) & 1).astype(bool)
    own = bits[np.arange(W.n), W.lane]
    if not own.all():
        k = int(np.flatnonzero(~own)[0])
        raise m.fault(n.loc, f"{n.opcode}: lane {int(W.lane[k])} executes it but is not in its own membermask "
                             f"0x{int(mask[k]):08x} (undefined in PTX)", int(W.flat[k]))
    same = W.active[W.w] & (W.row(mask) == mask[:, None])
    missing = bits & ~same
    if missing.any():
        k = int(np.flatnonzero(missing.any(axis=1))[0])
        miss = LANES[missing[k]]
        ex, act = W.exists[W.w[k]], W.active[W.w[k]]
        absent = [l for l in miss if not ex[l]]
        idle = [l for l in miss if ex[l] and not act[l]]
        other = [l for l in miss if ex[l] and act[l]]
        why = []
        if idle:
            why.append(f"lane(s) {_lanes(idle)} did not arrive (inactive here: divergent control flow)")
        if absent:
            why.append(f"lane(s) {_lanes(absent)} do not exist (the block has {m.T} threads)")
        if other:
            why.append(f"lane(s) {_lanes(other)} arrived with a different membermask")
        raise m.fault(n.loc, f"{n.opcode}: membermask 0x{int(mask[k]):08x} names lanes that must execute it "
                             f"together, but {'; '.join(why)}", int(W.flat[k]))
    return bits


def semantics(n: ir.Native, cx):
    form: Form = n.form
    ops = [operand(g[0], cx) for g in n.groups]
    if any(len(g) != 1 for g in n.groups) or len(ops) < len(form.names):
        raise native_error(n, f"expects {len(form.names)} single-register operands")
    named = dict(zip(form.names, ops))
    d = named["d"]
    p = ops[len(form.names)] if len(ops) > len(form.names) else None
    for r in (d, p):
        if r is not None and not isinstance(r, RegOp):
            raise native_error(n, "a destination must be a register")
    run = {"shfl": _shfl, "vote": _vote, "redux": _redux, "match": _match, "activemask": _activemask}[form.kind]
    return run(n, form, named, d, p)


def _activemask(n, form, named, d, p):
    def core(m, idx):
        W = Warp(m, idx)
        d.store(m, idx, pack(W.active[W.w]))
    return core


def _shfl(n, form, named, d, p):
    a, b, c, mk = named["a"], named["b"], named["c"], named["membermask"]
    poison = np.uint32(poison_bits(d.dtype))
    mode = form.mode

    def core(m, idx):
        W = Warp(m, idx)
        bits = members(m, n, W, mk.read(m, idx))
        av = a.read(m, idx).astype(np.uint32)
        bv = b.read(m, idx).astype(np.int64) & 31
        cv = c.read(m, idx).astype(np.int64)
        lane = W.lane
        seg = (cv >> 8) & 31
        max_lane = (lane & seg) | (cv & 31 & ~seg)
        if mode == "up":
            j = lane - bv
            ok = j >= max_lane
        elif mode == "down":
            j = lane + bv
            ok = j <= max_lane
        elif mode == "bfly":
            j = lane ^ bv
            ok = j <= max_lane
        else:
            j = (lane & seg) | (bv & ~seg)
            ok = j <= max_lane
        j = np.where(ok, j, lane)
        rows = np.arange(W.n)
        got = W.table(av)[W.w, j]
        d.store(m, idx, np.where(bits[rows, j], got, poison))
        if p is not None:
            p.store(m, idx, ok.astype(np.uint8))
    return core


def _vote(n, form, named, d, p):
    a, mk = named["a"], named["membermask"]
    mode = form.mode

    def core(m, idx):
        W = Warp(m, idx)
        bits = members(m, n, W, mk.read(m, idx))
        yes = W.row(a.read(m, idx) != 0, False) & bits
        if mode == "ballot":
            d.store(m, idx, pack(yes))
            return
        if mode == "all":
            r = ~(bits & ~yes).any(axis=1)
        elif mode == "any":
            r = yes.any(axis=1)
        else:
            r = ~(bits & ~yes).any(axis=1) | ~yes.any(axis=1)
        d.store(m, idx, r.astype(np.uint8))
    return core


def _redux(n, form, named, d, p):
    a, mk = named["a"], named["membermask"]
    op, ty = form.mode, form.type

    def core(m, idx):
        W = Warp(m, idx)
        bits = members(m, n, W, mk.read(m, idx))
        v = W.row(a.read(m, idx).astype(np.uint32))                      # (threads, 32) uint32 bits
        if ty == "f32":
            d.store(m, idx, _float_minmax(v, bits, op == "min", form.abs, form.nan))
            return
        if op == "add":
            r = np.where(bits, v.astype(np.uint64), 0).sum(axis=1) & 0xFFFFFFFF
        elif op in ("and", "or", "xor"):
            fill = np.uint32(0xFFFFFFFF if op == "and" else 0)
            f = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
            r = f.reduce(np.where(bits, v, fill), axis=1)
        else:
            x = v.view(np.int32).astype(np.int64) if ty == "s32" else v.astype(np.int64)
            if op == "min":
                r = np.where(bits, x, np.iinfo(np.int64).max).min(axis=1)
            else:
                r = np.where(bits, x, np.iinfo(np.int64).min).max(axis=1)
        d.store(m, idx, np.asarray(r).astype(np.int64).astype(np.uint32))
    return core


def _float_minmax(v, bits, is_min, absolute, nan):
    """min/max of f32 bit patterns over the members, ordering -0.0 below +0.0."""
    if absolute:
        v = v & np.uint32(0x7FFFFFFF)
    mag = (v & np.uint32(0x7FFFFFFF)).astype(np.int64)
    isnan = mag > 0x7F800000
    key = np.where(v >> np.uint32(31) != 0, -mag - 1, mag)              # a total order of the non-NaN values
    use = bits & ~isnan
    if is_min:
        k = np.where(use, key, np.iinfo(np.int64).max).min(axis=1)
    else:
        k = np.where(use, key, np.iinfo(np.int64).min).max(axis=1)
    out = np.where(k >= 0, k, (-k - 1) | 0x80000000).astype(np.int64)
    nan_out = ~use.any(axis=1)
    if nan:
        nan_out |= (bits & isnan).any(axis=1)
    return np.where(nan_out, np.int64(CANONICAL_NAN), out).astype(np.uint32)


def _match(n, form, named, d, p):
    a, mk = named["a"], named["membermask"]
    mode = form.mode

    def core(m, idx):
        W = Warp(m, idx)
        mask = mk.read(m, idx)
        bits = members(m, n, W, mask)
        av = a.read(m, idx)
        eq = (W.row(av) == np.asarray(av)[:, None]) & bits
        if mode == "any":
            d.store(m, idx, pack(eq))
            return
        same = ~(bits & ~eq).any(axis=1)
        d.store(m, idx, np.where(same, np.broadcast_to(mask, (W.n,)).astype(np.uint32), np.uint32(0)))
        if p is not None:
            p.store(m, idx, same.astype(np.uint8))
    return core
