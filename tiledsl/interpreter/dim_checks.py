"""The per-dimension bounds of an element access (ir.DimCheck, made by frontend/dim_checks.py), for exprs.py and
program.py: `X[r, 64]` in a 64-wide row is a KernelFault naming the index, its value and the dimension, instead of
a read of the next row that the whole-buffer check would let pass.

Checked before the access, for the active threads only (a thread a branch left out reads nothing). One unsigned
comparison covers both sides of `0 <= i < extent` on an array of indices.
"""
from __future__ import annotations

import numpy as np

from ..ir import nodes as ir


def compile_checks(checks, cx, storage, what: str, loc):
    """A function `(m, idx)` raising KernelFault for the first active thread whose index leaves its dimension,
    or None when the access has no checks."""
    if not checks:
        return None
    parts = [(cx.expr(c.index), cx.expr(c.extent) if isinstance(c.extent, ir.Expr) else int(c.extent), c)
             for c in checks]

    def check(m, idx):
        for fi, fe, c in parts:
            v = fi(m, idx)
            ext = fe if isinstance(fe, int) else fe(m, idx)
            if np.ndim(v) == 0 and np.ndim(ext) == 0:
                if (c.low and v < 0) or (c.high and v >= ext):
                    raise _fault(m, idx, None, v, ext, c, storage, what, loc)
                continue
            v = np.asarray(v)
            if c.low and c.high and np.ndim(ext) == 0 and v.dtype.kind == "i":
                bad = v.view(v.dtype.str.replace("i", "u")) >= ext    # negatives wrap to huge unsigned values
            else:
                bad = (v < 0) if c.low else np.zeros(v.shape, bool)
                if c.high:
                    bad = bad | (v >= ext)
            if bad.any():
                raise _fault(m, idx, bad, v, ext, c, storage, what, loc)
    return check


def _fault(m, idx, bad, v, ext, c, storage, what, loc):
    flat = m.first(idx, bad)
    pos = 0 if bad is None else int(np.flatnonzero(np.broadcast_to(bad, (m.n(idx),)))[0])
    value = int(np.broadcast_to(v, (m.n(idx),))[pos])
    extent = int(np.broadcast_to(ext, (m.n(idx),))[pos])
    return m.fault(loc, f"out-of-bounds {what} of '{storage.name}': index {c.text} is {value}, outside dimension "
                        f"{c.dim} of {c.view} (extent {extent})", flat)
