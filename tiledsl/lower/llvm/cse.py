"""Value numbering while building LLVM IR: an expression that was already built in a block that dominates the
current one is reused instead of built again.

The expanded IR repeats its address arithmetic per native instruction (every unrolled ldmatrix recomputes
`%laneid // 8`, the warp's row base, the swizzle); LLVM would merge the copies, but only after parsing and
optimizing them, which was most of a GEMM's compile time. Reuse is exact, not heuristic:

- only pure expressions are numbered: constants, special registers (fixed for a thread), variables, and
  arithmetic, comparisons, selects and casts of those; a `Load` from memory is never reused;
- a variable's key carries its *version*, bumped by every assignment to it, and, on entering a loop, by every
  assignment anywhere in that loop (a value from before the loop must not stand for one from a later iteration);
- a value built inside a region (a loop body, a branch) is forgotten when the region ends: it does not dominate
  what follows.
"""
from __future__ import annotations

from contextlib import contextmanager

from ...ir import nodes as ir


class ValueTable:
    def __init__(self):
        self.scopes = [{}]
        self.versions = {}         # id(var) -> assignment count

    # ---------------------------------------------------------------- keys
    def key(self, e):
        """A structural key for a pure expression, or None when `e` (or a part of it) must be built afresh."""
        t = type(e)
        if t is ir.Var:
            return ("v", id(e), self.versions.get(id(e), 0))
        if t is ir.Const:
            v = e.value
            return ("c", e.dtype.name, repr(v) if isinstance(v, float) else v)
        if t is ir.Special:
            return ("s", e.name, e.axis)
        if t is ir.Binary or t is ir.Compare:
            a = self.key(e.a)
            if a is None:
                return None
            b = self.key(e.b)
            return None if b is None else (t.__name__, e.op, e.dtype.name, a, b)
        if t is ir.Unary:
            a = self.key(e.a)
            return None if a is None else ("u", e.op, e.dtype.name, a)
        if t is ir.Cast:
            a = self.key(e.a)
            return None if a is None else ("cast", e.dtype.name, a)
        if t is ir.Select:
            parts = (self.key(e.cond), self.key(e.a), self.key(e.b))
            return None if None in parts else ("sel", e.dtype.name, *parts)
        return None

    def get(self, key):
        for scope in reversed(self.scopes):
            v = scope.get(key)
            if v is not None:
                return v
        return None

    def put(self, key, value):
        self.scopes[-1][key] = value

    # ---------------------------------------------------------------- invalidation
    def assigned(self, var):
        self.versions[id(var)] = self.versions.get(id(var), 0) + 1

    @contextmanager
    def region(self):
        """Code that does not dominate what follows it (a loop body, a branch of an if)."""
        self.scopes.append({})
        try:
            yield
        finally:
            self.scopes.pop()

    def entering_loop(self, var, body):
        """Before a loop's header: every variable the loop assigns (and its induction variable) changes."""
        if var is not None:
            self.assigned(var)
        for v in assigned_vars(body):
            self.assigned(v)


def assigned_vars(stmts) -> list:
    """Every variable assigned anywhere in `stmts` (nested loops and branches included)."""
    out, stack = [], list(stmts)
    while stack:
        s = stack.pop()
        if isinstance(s, ir.Assign):
            out.append(s.var)
        elif isinstance(s, ir.For):
            out.append(s.var)
        for name in ("body", "then", "orelse"):
            sub = getattr(s, name, None)
            if isinstance(sub, list):
                stack.extend(sub)
    return out
