"""Deep expressions: the interpreter compiles and evaluates an expression tree recursively (one closure per node),
so `a + a + ... + a` with hundreds of terms needs a few Python frames per term. Whatever the front end accepted
must run, so the interpreter measures the deepest expression of a kernel once (without recursion) and raises
Python's recursion limit by what that depth needs while it compiles and runs (never lowering it). Python frames
calling Python frames do not grow the C stack (3.11+), so the higher limit is safe.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager

from ..ir import nodes as ir

FRAMES_PER_LEVEL = 4            # ExprCompiler.expr -> e_Binary -> _operand -> expr, and the closures at run time
MARGIN = 400                    # the interpreter's own frames around the expressions


def _children(e) -> list:
    if isinstance(e, ir.Load):
        return [e.offset]
    if isinstance(e, (ir.Binary, ir.Compare)):
        return [e.a, e.b]
    if isinstance(e, (ir.Unary, ir.Cast)):
        return [e.a]
    if isinstance(e, ir.Select):
        return [e.cond, e.a, e.b]
    return []


def _stmt_exprs(s) -> list:
    if isinstance(s, ir.Assign):
        return [s.value]
    if isinstance(s, ir.Store):
        return [s.offset, s.value]
    if isinstance(s, ir.For):
        return [s.start, s.stop, s.step]
    if isinstance(s, ir.If):
        return [s.cond]
    if isinstance(s, ir.While):
        return [s.cond]
    if isinstance(s, ir.Print):
        return list(s.values)
    if isinstance(s, ir.Trap):
        return [s.cond]
    if isinstance(s, ir.Native):
        out = [s.pred] if s.pred is not None else []
        for g in s.groups:
            for a in g:
                if isinstance(a, ir.Val):
                    out.append(a.expr)
                elif isinstance(a, ir.Addr):
                    out.append(a.offset)
        return out
    return []


def _stmt_bodies(s) -> list:
    if isinstance(s, (ir.For, ir.While)):
        return [s.body]
    if isinstance(s, ir.If):
        return [s.then, s.orelse]
    return []


def max_expr_depth(body) -> int:
    """The height of the tallest expression tree in `body` (statements, nested), measured without recursion."""
    depth = {}                      # id(expr) -> (expr, height)
    best = 0
    stmts = list(body)
    while stmts:
        s = stmts.pop()
        for b in _stmt_bodies(s):
            stmts.extend(b)
        for root in _stmt_exprs(s):
            if not isinstance(root, ir.Expr):
                continue
            stack = [(root, False)]
            while stack:
                e, done = stack.pop()
                hit = depth.get(id(e))
                if hit is not None and hit[0] is e:
                    continue
                kids = [c for c in _children(e) if isinstance(c, ir.Expr)]
                if not done and kids:
                    stack.append((e, True))
                    stack.extend((c, False) for c in kids)
                    continue
                depth[id(e)] = (e, 1 + max((depth[id(c)][1] for c in kids), default=0))
            best = max(best, depth[id(root)][1])
    return best


@contextmanager
def headroom(levels: int):
    """Python's recursion limit raised, for the duration, so that `levels` nested expression levels fit above the
    frames already in use."""
    old = sys.getrecursionlimit()
    need = _frames_in_use() + levels * FRAMES_PER_LEVEL + MARGIN
    if need > old:
        sys.setrecursionlimit(need)
    try:
        yield
    finally:
        if need > old:
            sys.setrecursionlimit(old)


def _frames_in_use() -> int:
    n, f = 0, sys._getframe()
    while f is not None:
        n, f = n + 1, f.f_back
    return n
