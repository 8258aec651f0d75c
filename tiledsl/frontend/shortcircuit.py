"""`and`, `or`, chained comparisons and `x if c else y` as Python evaluates them (mixed into the Parser).

Python evaluates the right operand of `and` / `or`, the later comparisons of a chain and the chosen side of a
conditional expression only when the value so far asks for it. On a GPU evaluating the other side anyway is not
harmless when it reads memory (`while i < n and X[i] >= 0.0` would read X[n]) or has effects, so an operand that
*could* be skipped at run time is lowered to a branch that runs it only when Python would:

    a and b        t = bool(a); if t: (b's statements); t = bool(b)
    a or b         t = bool(a); if not t: (b's statements); t = bool(b)
    x if c else y  if c: (x's statements); v = x  else: (y's statements); v = y

Operands that are pure arithmetic on values the thread already holds (no memory read, no statement with an effect)
keep the branch-free form they always had (`&`, `|` on predicates, `selp`), so existing kernels keep their code;
what is pure is decided by `speculatable` below. Operands known at compile time fold as before.
"""
from __future__ import annotations

import ast

from ..core import dtypes as dt
from ..ir import nodes as ir
from ..ir import ops
from ..lang.views import View

CMPOPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}


def pure_expr(e) -> bool:
    """Can `e` be evaluated on a path Python would not take, without reading memory or faulting? Register reads
    (a local buffer at a compile-time offset inside it) are not memory reads; every other load is. An integer
    division by a run-time divisor may divide by zero (a KernelFault in the interpreter), so it is not pure:
    `b != 0 and a // b > 2` must not divide when b is 0."""
    stack = [e]
    while stack:
        x = stack.pop()
        if not isinstance(x, ir.Expr) or isinstance(x, (ir.Const, ir.Var, ir.Special)):
            continue
        if isinstance(x, ir.Load):
            off = ir.static_int(x.offset)
            st = x.storage
            if not (st.scope == "local" and off is not None and st.size is not None
                    and 0 <= off < st.size * max(1, st.dtype.nbytes) // max(1, x.dtype.nbytes)):
                return False
        elif isinstance(x, (ir.Binary, ir.Compare)):
            if isinstance(x, ir.Binary) and x.op in ("floordiv", "mod", "div") and not x.dtype.is_float \
                    and ir.static_int(x.b) is None:
                return False
            stack += [x.a, x.b]
        elif isinstance(x, (ir.Unary, ir.Cast)):
            stack.append(x.a)
        elif isinstance(x, ir.Select):
            stack += [x.cond, x.a, x.b]
        else:
            return False                                     # an expression kind this check does not know
    return True


def speculatable(stmts, value, first_serial: int) -> bool:
    """May `stmts` (what evaluating an operand emitted) and `value` run on every path? Only when they compute
    without effects: assignments of pure expressions to variables made while evaluating the operand, and the
    scalar-math instructions (T.exp2, T.sqrt, ... into the kernel's math scratch register)."""
    if not pure_expr(value):
        return False
    for s in stmts:
        if isinstance(s, ir.Assign):
            if getattr(s.var, "serial", -1) <= first_serial or not pure_expr(s.value):
                return False
        elif isinstance(s, ir.Apply):
            for x in s.operands:
                if isinstance(x, View):
                    if not x.storage.name.startswith("math."):    # the scratch: no Python name has a dot
                        return False
                elif not pure_expr(x):
                    return False
        else:
            return False
    return True


class ShortCircuit:
    """expr_BoolOp, expr_Compare and expr_IfExp for the Parser."""

    def captured(self, node, make=None):
        """(value of `node` evaluated by `make` (default: eval), the statements evaluating it emitted, the
        variable serial before it: variables with a larger serial were made while evaluating it)."""
        first = self.var_count
        self.body_stack.append([])
        try:
            v = (make or self.eval)(node)
        finally:
            stmts = self.body_stack.pop()
        return v, stmts, first

    def _and(self, a, b, loc):
        a, b = ops.truth(a, loc), ops.truth(b, loc)
        if isinstance(a, bool):
            return b if a else False
        if isinstance(b, bool):
            return a if b else False
        return ir.Binary(dt.bool_, loc, "and", a, b)

    def _or(self, a, b, loc):
        a, b = ops.truth(a, loc), ops.truth(b, loc)
        if isinstance(a, bool):
            return True if a else b
        if isinstance(b, bool):
            return True if b else a
        return ir.Binary(dt.bool_, loc, "or", a, b)

    def _then(self, result, conj: bool, node, make, loc):
        """`result and <operand>` (conj) or `result or <operand>`: the operand (evaluated by `make(node)`, which
        returns its value) runs on every path when it is pure, and only where Python would evaluate it otherwise.
        `result` is a run-time condition or a compile-time constant."""
        first = ops.truth(result, loc)
        if isinstance(first, bool):                          # decided at compile time
            if first != conj:
                return first                                 # `False and ...`, `True or ...`: never evaluated
            return ops.truth(make(node), loc)                # its statements, if any, are emitted where they are
        v, stmts, serial = self.captured(node, make)
        if speculatable(stmts, v, serial):
            for s in stmts:
                self.emit(s)
            return (self._and if conj else self._or)(first, v, loc)
        t = self.new_var(None, dt.bool_, loc)
        t.defn = None                                        # assigned on two paths
        self.emit(ir.Assign(loc, t, first))
        go = t if conj else ops.unary("not", t, loc)
        self.emit(ir.If(loc, go, stmts + [ir.Assign(loc, t, ops.to_expr(ops.truth(v, loc), loc))], []))
        return t

    def expr_BoolOp(self, node):
        loc = self.loc(node)
        conj = isinstance(node.op, ast.And)
        result = self.eval(node.values[0])
        for v in node.values[1:]:
            result = self._then(result, conj, v, self.eval, loc)
            if isinstance(result, bool) and result != conj:
                return result                                # decided: the rest is never evaluated
        return result

    def expr_Compare(self, node):
        loc = self.loc(node)
        left = self.eval(node.left)
        result = True
        for op, right_node in zip(node.ops, node.comparators):
            if type(op) in (ast.In, ast.NotIn):
                raise self.error("'in' is not supported in a kernel", node)
            box = [None]

            def compare(n, op=op, left=left):
                right = box[0] = self.eval(n)
                if type(op) in (ast.Is, ast.IsNot):
                    return (left is right) if isinstance(op, ast.Is) else (left is not right)
                return ops.compare(CMPOPS[type(op)], left, right, loc)
            if result is True:
                result = compare(right_node)                 # the first comparison always runs
            else:
                # `a < b < c` is `a < b and b < c` (b's value shared): c is evaluated only when a < b holds
                result = self._then(result, True, right_node, compare, loc)
                if result is False:
                    return False
            left = box[0]
        return result

    def expr_IfExp(self, node):
        loc = self.loc(node)
        c = ops.truth(self.eval(node.test), self.loc(node.test))
        if isinstance(c, bool):
            return self.eval(node.body if c else node.orelse)
        a, pre_a, serial = self.captured(node.body)
        b, pre_b, _ = self.captured(node.orelse)
        if speculatable(pre_a, a, serial) and speculatable(pre_b, b, serial):
            for s in pre_a + pre_b:
                self.emit(s)
            return ops.select(c, a, b, loc)
        sel = ops.select(c, a, b, loc)                       # the types and checks of the branch-free form
        v = self.new_var(None, sel.dtype, loc)
        v.defn = None
        self.emit(ir.If(loc, c, pre_a + [ir.Assign(loc, v, sel.a)], pre_b + [ir.Assign(loc, v, sel.b)]))
        return v
