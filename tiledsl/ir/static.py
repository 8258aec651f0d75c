"""Evaluate index expressions with unknown run-time values pinned, for static legality checks."""
from __future__ import annotations

import operator

from . import nodes as ir


PINS = (0, 3)


def located(view, coords) -> list:
    """The storage-offset expressions of `coords` in `view` (located once, then evaluated per pin)."""
    return [view.locate(list(c))[0] for c in coords]


def static_offsets(offsets, pins=PINS):
    """`offsets` (expressions, from `located`) with every run-time value pinned to `pins[0]`, or None when one
    cannot be evaluated. Raises ValueError when the offsets' differences change with the run-time values."""
    base = None
    for pin in pins:
        offs = [evaluate(off, pin) for off in offsets]
        if None in offs:
            return None
        rel = [o - offs[0] for o in offs]
        if base is None:
            base = (offs, rel)
        elif rel != base[1]:
            raise ValueError("the distance between words depends on run-time values")
    return base[0]


def _floordiv(a, b):
    return a // b if b else None


def _mod(a, b):
    return a % b if b else None


def _shl(a, b):
    return a << b if b >= 0 else None


def _shr(a, b):
    return a >> b if b >= 0 else None


_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": _floordiv, "mod": _mod,
        "min": min, "max": max, "shl": _shl, "shr": _shr, "and": operator.and_, "or": operator.or_,
        "xor": operator.xor}


def evaluate(e, pin):
    if isinstance(e, int):
        return e
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var) and getattr(e, "defn", None) is not None:
        return evaluate(e.defn, pin)              # a variable assigned once: its defining expression
    if isinstance(e, (ir.Var, ir.Special, ir.Load)):
        return pin
    if isinstance(e, ir.Cast):
        return evaluate(e.a, pin)
    if isinstance(e, ir.Binary):
        a, b = evaluate(e.a, pin), evaluate(e.b, pin)
        op = _OPS.get(e.op)
        if a is None or b is None or op is None:
            return None
        try:
            return op(a, b)
        except TypeError:
            return None
    return None
