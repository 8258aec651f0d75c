"""The one static evaluator of integer index expressions, with Python's semantics (floor `//` and `%`).

Two callers need the same arithmetic:
- pattern legality (isa/operands.py): an index expression is evaluated with every run-time value *pinned* to a
  small int, to prove that the distance between the words an instruction touches does not depend on them;
- host grid expressions: a grid that depends on run-time sizes or scalars is serialised at compile time to a
  small JSON tree (`serialize`) and evaluated per launch with the bound values (`evaluate`); the launchers that
  generate code for it (runtime/) translate the same trees.

Every operation is written once in `OPS`; an operation that is undefined (division by zero, a negative shift)
gives None, "not static", rather than an exception.
"""
from __future__ import annotations

import operator
from typing import Callable

from . import nodes as ir
from ..core.errors import CompilationError


def _floordiv(a: int, b: int) -> int | None:
    return a // b if b else None


def _mod(a: int, b: int) -> int | None:
    return a % b if b else None


def _shl(a: int, b: int) -> int | None:
    return a << b if b >= 0 else None


def _shr(a: int, b: int) -> int | None:
    return a >> b if b >= 0 else None


OPS: dict[str, Callable[[int, int], int | None]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": _floordiv, "mod": _mod,
    "min": min, "max": max, "shl": _shl, "shr": _shr, "and": operator.and_, "or": operator.or_,
    "xor": operator.xor}

# Python's comparisons by IR name (ir/ops.py folds compile-time comparisons with the same table)
PY_CMP = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
          "ne": operator.ne}

# what a host grid expression may use: the operations every launcher can evaluate (runtime/ generates code for them)
HOST_OPS = ("add", "sub", "mul", "floordiv", "mod", "min", "max", "shl", "shr")


def apply(op: str, a: int | None, b: int | None) -> int | None:
    """`a op b`, or None when either side or the result is not a static int."""
    f = OPS.get(op)
    if a is None or b is None or f is None:
        return None
    try:
        return f(a, b)
    except TypeError:
        return None


# ------------------------------------------------------------------ pinned evaluation (pattern legality)

PINS = (0, 3)


def evaluate_pinned(e, pin: int, memo: dict | None = None) -> int | None:
    """`e` (an IR expression or int) with every run-time value (variables without a single definition, special
    registers, loads) replaced by `pin`; None when some part is not an integer operation. `memo` (id -> value)
    shares the work between expressions that share parts (the words of one access share their base)."""
    if isinstance(e, int):
        return e
    if memo is None:
        memo = {}
    k = id(e)
    if k in memo:
        return memo[k]
    if isinstance(e, ir.Const):
        v = int(e.value)
    elif isinstance(e, ir.Var) and getattr(e, "defn", None) is not None:
        v = evaluate_pinned(e.defn, pin, memo)      # a variable assigned once: its defining expression
    elif isinstance(e, (ir.Var, ir.Special, ir.Load)):
        v = pin
    elif isinstance(e, ir.Cast):
        v = evaluate_pinned(e.a, pin, memo)
    elif isinstance(e, ir.Binary):
        v = apply(e.op, evaluate_pinned(e.a, pin, memo), evaluate_pinned(e.b, pin, memo))
    elif isinstance(e, ir.Compare):
        a, b = evaluate_pinned(e.a, pin, memo), evaluate_pinned(e.b, pin, memo)
        v = None if a is None or b is None else int(PY_CMP[e.op](a, b))
    elif isinstance(e, ir.Select):
        # a run-time choice between integers (a snake walk's `pid if k % 2 == 0 else G - 1 - pid`): the branch
        # its pinned condition takes
        c = evaluate_pinned(e.cond, pin, memo)
        v = None if c is None else evaluate_pinned(e.a if c else e.b, pin, memo)
    else:
        v = None
    memo[k] = v
    return v


def located(view, coords) -> list:
    """The storage-offset expressions of `coords` in `view` (located once, then evaluated per pin)."""
    return [view.locate(list(c))[0] for c in coords]


def static_offsets(offsets, pins=PINS):
    """`offsets` (expressions, from `located`) with every run-time value pinned to `pins[0]`, or None when one
    cannot be evaluated. Raises ValueError when the offsets' differences change with the run-time values."""
    base = None
    for pin in pins:
        memo = {}
        offs = [evaluate_pinned(off, pin, memo) for off in offsets]
        if None in offs:
            return None
        rel = [o - offs[0] for o in offs]
        if base is None:
            base = (offs, rel)
        elif rel != base[1]:
            raise ValueError("the distance between words depends on run-time values")
    return base[0]


# ------------------------------------------------------------------ host grid expressions

def serialize(e):
    """An int, or a nested list ["op", a, b] / ["var", name] that JSON can hold."""
    if isinstance(e, int):
        return e
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        return ["var", e.name]
    if isinstance(e, ir.Binary) and e.op in HOST_OPS:
        return [e.op, serialize(e.a), serialize(e.b)]
    if isinstance(e, ir.Cast):
        return serialize(e.a)
    raise CompilationError("a grid dimension may use ints, size names, scalar parameters and + - * // % min max",
                           getattr(e, "loc", None))


def evaluate(tree, env: dict) -> int | None:
    """A serialised tree with its variables bound by `env`; None when an operation is undefined (a division by
    zero, a negative shift)."""
    if isinstance(tree, int):
        return tree
    if tree[0] == "var":
        return int(env[tree[1]])
    return apply(tree[0], evaluate(tree[1], env), evaluate(tree[2], env))
