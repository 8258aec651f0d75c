"""Warp instructions: mma.sync, ldmatrix, stmatrix. Fragment maps written from the PTX ISA's tables.

All 32 lanes of a warp must execute a warp instruction together; the active set must be whole warps (other warps
may be inactive, e.g. behind a warp-uniform branch). Work is vectorised over the active warps and their lanes.

mma.sync.aligned.m16n8k{8,16}.row.col.f32.{f16,bf16}.{f16,bf16}.f32, per lane l (groupID g = l >> 2,
threadID_in_group t = l % 4), element i of a fragment, each b32 register holding elements 2r (low half) and
2r + 1 (high half):
    A (16 x k):  row g + 8 * ((i >> 1) & 1),  col 2t + (i & 1) + 8 * (i >> 2)
    B (k x 8):   row 2t + (i & 1) + 8 * (i >> 1),  col g
    C/D (16 x 8, one f32 per register i): row g + 8 * (i >> 1),  col 2t + (i & 1)
D = A * B + C is computed in float64 and rounded once to float32 (the tensor core's internal accumulation
order is unspecified, so results agree with hardware to about 1e-6 relative, not bit for bit).

ldmatrix/stmatrix .m8n8 .x{1,2,4} [.trans] .b16: lane 8i + j gives the 16-byte row address of row j of matrix i;
register i of lane l holds row l >> 2, b16 elements 2(l % 4) and 2(l % 4) + 1 of matrix i (low half first), or
with .trans the same positions of the transposed matrix.
"""
from __future__ import annotations

import re

import numpy as np

from ..ir import nodes as ir
from . import rounding as R
from .machine import InterpreterError
from .natives import AddrOp, RegOp, operand

LANE = np.arange(32)
G, TIG = LANE // 4, LANE % 4

MMA = re.compile(r"^mma\.sync\.aligned\.m16n8k(8|16)\.row\.col\.f32\.(f16|bf16)\.(f16|bf16)\.f32$")


def a_map(k):
    """[(rows, cols)] per A element i: arrays over lanes."""
    return [(G + 8 * ((i >> 1) & 1), 2 * TIG + (i & 1) + 8 * (i >> 2)) for i in range(k // 2)]


def b_map(k):
    return [(2 * TIG + (i & 1) + 8 * (i >> 1), G) for i in range(k // 4)]


def cd_map():
    return [(G + 8 * (i >> 1), 2 * TIG + (i & 1)) for i in range(4)]


def _err(n, msg):
    return InterpreterError(f"{n.loc}: {n.opcode}: {msg}" if n.loc is not None else f"{n.opcode}: {msg}")


def warps(m, idx, n):
    """The active flat thread ids as (warps, 32), after checking that the active set is whole warps."""
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


def compile_warp(n: ir.Native, parts, cx):
    if n.pred is not None:
        raise _err(n, "a warp instruction cannot be predicated per thread")
    if parts[0] == "mma":
        return _mma(n, cx)
    return _matrix(n, parts, cx)


# ---------------------------------------------------------------- mma.sync

def _mma(n, cx):
    mt = MMA.match(n.opcode)
    if mt is None:
        raise _err(n, "the interpreter models mma.sync.aligned.m16n8k{8,16}.row.col.f32.{f16,bf16}.{f16,bf16}.f32")
    k = int(mt.group(1))
    if mt.group(2) != mt.group(3):
        raise _err(n, "A and B must have the same type")
    fmt = R.F16 if mt.group(2) == "f16" else R.BF16
    if len(n.groups) != 4:
        raise _err(n, "takes D, A, B, C")
    D, A, B, C = ([operand(a, cx) for a in g] for g in n.groups)
    for name, g, cnt in (("D", D, 4), ("A", A, k // 4), ("B", B, k // 8), ("C", C, 4)):
        if len(g) != cnt:
            raise _err(n, f"operand {name} has {len(g)} registers; the form takes {cnt}")
        if any(o.bits != 32 for o in g):
            raise _err(n, f"operand {name} must be 32-bit registers")
    if not all(isinstance(d, RegOp) for d in D):
        raise _err(n, "D must be registers")
    amap, bmap, cmap = a_map(k), b_map(k), cd_map()

    def core(m, idx):
        w = warps(m, idx, n)
        W = w.shape[0]

        def halves(ops):
            out = []
            for o in ops:
                bits = o.read(m, idx).astype(np.uint32).reshape(W, 32)
                out.append(R.decode(fmt, bits & np.uint32(0xFFFF)))
                out.append(R.decode(fmt, bits >> np.uint32(16)))
            return out
        a_el, b_el = halves(A), halves(B)
        am = np.zeros((W, 16, k))
        for (r, c), v in zip(amap, a_el):
            am[:, r, c] = v
        bm = np.zeros((W, k, 8))
        for (r, c), v in zip(bmap, b_el):
            bm[:, r, c] = v
        cm = np.zeros((W, 16, 8))
        for (r, c), o in zip(cmap, C):
            cm[:, r, c] = R.decode(R.F32, o.read(m, idx).astype(np.uint32).reshape(W, 32))
        with np.errstate(all="ignore"):
            dm = np.matmul(am, bm) + cm
        d32 = dm.astype(np.float32)
        for (r, c), o in zip(cmap, D):
            o.store(m, idx, d32[:, r, c].reshape(-1).view(np.uint32))
    return core


# ---------------------------------------------------------------- ldmatrix / stmatrix

def _matrix(n, parts, cx):
    op = parts[0]
    if "m8n8" not in parts or parts[-1] != "b16":
        raise _err(n, "the interpreter models ldmatrix/stmatrix .m8n8 with .b16 only")
    count = next((int(p[1]) for p in parts if p in ("x1", "x2", "x4")), None)
    if count is None:
        raise _err(n, "needs .x1, .x2 or .x4")
    trans = "trans" in parts
    if not any(p in ("shared", "shared::cta") for p in parts):
        raise _err(n, "needs the .shared state space")
    regs_g, addr_g = (n.groups[0], n.groups[1]) if op == "ldmatrix" else (n.groups[1], n.groups[0])
    if len(addr_g) != 1 or not isinstance(addr_g[0], ir.Addr):
        raise _err(n, "the address operand must be one address")
    addr = AddrOp(addr_g[0], cx)
    if addr.st.scope != "shared":
        raise _err(n, f"the address is in {addr.st.scope} memory, not shared")
    regs = [operand(a, cx) for a in regs_g]
    if len(regs) != count or any(r.bits != 32 for r in regs):
        raise _err(n, f"takes {count} 32-bit registers")
    if op == "ldmatrix" and not all(isinstance(r, RegOp) for r in regs):
        raise _err(n, "destinations must be registers")
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
