"""mma.sync on the interpreter; the fragment maps are written from the PTX ISA's tables, independently of the
pattern's lane maps (pattern.py), so that the interpreter checks the pattern rather than repeating it.

mma.sync.aligned.m16n8k{8,16}.row.col.f32.{f16,bf16}.{f16,bf16}.f32, per lane l (groupID g = l >> 2,
threadID_in_group t = l % 4), element i of a fragment, each b32 register holding elements 2r (low half) and
2r + 1 (high half):
    A (16 x k):  row g + 8 * ((i >> 1) & 1),  col 2t + (i & 1) + 8 * (i >> 2)
    B (k x 8):   row 2t + (i & 1) + 8 * (i >> 1),  col g
    C/D (16 x 8, one f32 per register i): row g + 8 * (i >> 1),  col 2t + (i & 1)
D = A * B + C is computed in float64 and rounded once to float32 (the tensor core's internal accumulation
order is unspecified, so results agree with hardware to about 1e-6 relative, not bit for bit).
"""
from __future__ import annotations

import numpy as np

from ...interpreter import rounding as R
from ...interpreter.operands import RegOp, native_error, not_predicated, operand, warps
from ...ir import nodes as ir
from .pattern import Form

LANE = np.arange(32)
G, TIG = LANE // 4, LANE % 4


def a_map(k):
    """[(rows, cols)] per A element i: arrays over lanes."""
    return [(G + 8 * ((i >> 1) & 1), 2 * TIG + (i & 1) + 8 * (i >> 2)) for i in range(k // 2)]


def b_map(k):
    return [(2 * TIG + (i & 1) + 8 * (i >> 1), G) for i in range(k // 4)]


def cd_map():
    return [(G + 8 * (i >> 1), 2 * TIG + (i & 1)) for i in range(4)]


def semantics(n: ir.Native, cx):
    not_predicated(n)
    form: Form = n.form
    k = form.k
    fmt = R.F16 if form.ab == "f16" else R.BF16
    if len(n.groups) != 4:
        raise native_error(n, "takes D, A, B, C")
    D, A, B, C = ([operand(a, cx) for a in g] for g in n.groups)
    for name, g, cnt in (("D", D, 4), ("A", A, k // 4), ("B", B, k // 8), ("C", C, 4)):
        if len(g) != cnt:
            raise native_error(n, f"operand {name} has {len(g)} registers; the form takes {cnt}")
        if any(o.bits != 32 for o in g):
            raise native_error(n, f"operand {name} must be 32-bit registers")
    if not all(isinstance(d, RegOp) for d in D):
        raise native_error(n, "D must be registers")
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
