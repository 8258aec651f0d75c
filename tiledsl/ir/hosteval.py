"""Grid sizes that depend on run-time sizes or scalars: kept as small expression trees, evaluated on the host."""
from __future__ import annotations

from . import nodes as ir
from ..core.errors import CompilationError

OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "min": min, "max": max,
       "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b}


def serialize(e):
    """An int, or a nested list ["op", a, b] / ["var", name] that JSON can hold."""
    if isinstance(e, int):
        return e
    if isinstance(e, ir.Const):
        return int(e.value)
    if isinstance(e, ir.Var):
        return ["var", e.name]
    if isinstance(e, ir.Binary) and e.op in OPS:
        return [e.op, serialize(e.a), serialize(e.b)]
    if isinstance(e, ir.Cast):
        return serialize(e.a)
    raise CompilationError("a grid dimension may use ints, size names, scalar parameters and + - * // % min max",
                           getattr(e, "loc", None))


def evaluate(tree, env: dict) -> int:
    if isinstance(tree, int):
        return tree
    if tree[0] == "var":
        return int(env[tree[1]])
    return OPS[tree[0]](evaluate(tree[1], env), evaluate(tree[2], env))
