"""Evaluate index expressions with unknown run-time values pinned, for static legality checks."""
from __future__ import annotations

from .. import ir


PINS = (0, 3)


def static_offsets(view, coords, pins=PINS):
    """Storage offsets of `coords` with every run-time value pinned to `pins[0]`, or None when an offset
    cannot be evaluated. Raises ValueError when the offsets' differences change with the run-time values."""
    base = None
    for pin in pins:
        offs = []
        for c in coords:
            off, _ = view.locate(list(c))
            offs.append(evaluate(off, pin))
        if None in offs:
            return None
        rel = [o - offs[0] for o in offs]
        if base is None:
            base = (offs, rel)
        elif rel != base[1]:
            raise ValueError("the distance between words depends on run-time values")
    return base[0]


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
        if a is None or b is None:
            return None
        try:
            return {"add": a + b, "sub": a - b, "mul": a * b,
                    "floordiv": a // b if b else None, "mod": a % b if b else None,
                    "min": min(a, b), "max": max(a, b), "shl": a << b if b >= 0 else None,
                    "shr": a >> b if b >= 0 else None, "and": a & b, "or": a | b, "xor": a ^ b}.get(e.op)
        except TypeError:
            return None
    return None
