"""Integer ranges of index expressions, so a per-dimension bounds check the front end can prove is never built.

`value_range(e, known)` gives (lo, hi) with lo <= e <= hi for every run of the kernel, or None. `known` maps
id(variable) -> (lo, hi) for what the front end knows (a run-time loop's index over static bounds) and
("tid", axis) -> (lo, hi) for the thread ids of the launch it parsed. Everything else falls back to its dtype's
range. Arithmetic that could wrap at its width gives the dtype's range, so a proof never relies on overflow.
"""
from __future__ import annotations

from . import nodes as ir

# the special registers' ranges on every launch CUDA allows (a block has at most 1024 threads, a warp 32 lanes)
SPECIALS = {"laneid": (0, 31), "warpid": (0, 31), "tid": (0, 1023), "ntid": (1, 1024)}


def dtype_range(d) -> tuple[int, int] | None:
    if d is None or not d.is_int:
        return (0, 1) if d is not None and d.kind == "bool" else None
    if d.is_signed:
        return -(1 << (d.bits - 1)), (1 << (d.bits - 1)) - 1
    return 0, (1 << d.bits) - 1


def value_range(e, known: dict, memo: dict | None = None):
    """(lo, hi) bounding integer expression `e`, or None when nothing is known (a float, an unknown operation)."""
    if isinstance(e, bool):
        return int(e), int(e)
    if isinstance(e, int):
        return e, e
    if memo is None:
        memo = {}
    k = id(e)
    if k in memo:
        return memo[k]
    memo[k] = r = _range(e, known, memo)
    return r


def _range(e, known, memo):
    full = dtype_range(getattr(e, "dtype", None))
    if isinstance(e, ir.Const):
        v = e.value
        return (int(v), int(v)) if isinstance(v, (int, bool)) else None
    if isinstance(e, ir.Var):
        if id(e) in known:
            return known[id(e)]
        defn = getattr(e, "defn", None)
        return _fit(value_range(defn, known, memo), full) if defn is not None else full
    if isinstance(e, ir.Special):
        r = known.get((e.name, e.axis)) or SPECIALS.get(e.name)
        return r if r is not None else full
    if isinstance(e, ir.Cast):
        return _fit(value_range(e.a, known, memo), full)
    if isinstance(e, ir.Select):
        a, b = value_range(e.a, known, memo), value_range(e.b, known, memo)
        return _fit((min(a[0], b[0]), max(a[1], b[1])) if a and b else None, full)
    if isinstance(e, ir.Binary) and full is not None:
        a, b = value_range(e.a, known, memo), value_range(e.b, known, memo)
        return _fit(_binary(e.op, a, b), full) if a and b else full
    return full


def _binary(op, a, b):
    (al, ah), (bl, bh) = a, b
    if op == "add":
        return al + bl, ah + bh
    if op == "sub":
        return al - bh, ah - bl
    if op == "mul":
        ps = (al * bl, al * bh, ah * bl, ah * bh)
        return min(ps), max(ps)
    if op in ("min", "max"):
        f = min if op == "min" else max
        return f(al, bl), f(ah, bh)
    if bl != bh:                                   # the rest: by a constant only
        return None
    c = bl
    if op == "floordiv" and c > 0:
        return al // c, ah // c
    if op == "mod" and c > 0:
        return (al, ah) if 0 <= al and ah < c else (0, c - 1)
    if op == "shl" and 0 <= c < 64:
        return al << c, ah << c
    if op == "shr" and 0 <= c < 64:
        return al >> c, ah >> c
    if op == "and" and c >= 0:
        return 0, c if al < 0 else min(ah, c)
    return None


def _fit(r, full):
    """`r` when its dtype holds it (no wrap-around), else the dtype's whole range."""
    if r is None:
        return full
    if full is not None and (r[0] < full[0] or r[1] > full[1]):
        return full
    return r
