"""The front end's loops beyond `for`, their early exits, and `T.device_print` (mixed into the Parser).

- `while cond:` is a run-time loop; its condition is read before every iteration, per thread. A condition known
  at compile time is folded: false skips the loop, true needs a `break` or `return` in the body.
- `break` and `continue` belong to the innermost loop, which must be a run-time one (`range`, `T.grid`, `while`).
  In compile-time loops (`T.unroll`, `T.static_range`, loops over tuples) they are refused: those loops are
  expanded while compiling, so there is no loop left to leave. In a `T.grid` loop `continue` goes to the next
  point, and `break` is refused (it would leave the innermost dimension only).
- `else:` clauses on loops are refused.
- Names first bound inside a loop that may end an iteration early are unbound after the loop (reading one is an
  error, as for a loop that may run zero times); a branch ending in break/continue/return does not reach the code
  after its `if`, so what the other branch binds stays bound there.
"""
from __future__ import annotations

import ast

from ..core import printf
from ..ir import nodes as ir
from ..ir import ops
from ..lang.views import View

_STATIC_LOOP = ("a compile-time loop (T.unroll, T.static_range or a loop over a tuple), which is expanded while "
                "compiling; use range(...) for a run-time loop")


def terminates(stmts) -> bool:
    """Does this statement list certainly end in break, continue or return (so what follows it is not reached)?"""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Break, ast.Continue, ast.Return)):
        return True
    return isinstance(last, ast.If) and terminates(last.body) and terminates(last.orelse)


def leaves_early(body) -> bool:
    """Can a loop with this body end an iteration early: a break/continue of its own, or a return anywhere?"""
    def walk(stmts, own):
        for st in stmts:
            if isinstance(st, ast.Return) or (own and isinstance(st, (ast.Break, ast.Continue))):
                return True
            nested = isinstance(st, (ast.For, ast.While))
            for field in ("body", "orelse"):
                if walk(getattr(st, field, None) or [], own and not nested):
                    return True
        return False
    return walk(body, True)


def _breaks(body) -> bool:
    """Does the loop body hold a break of its own or a return (a way out of `while True`)?"""
    def walk(stmts, own):
        for st in stmts:
            if isinstance(st, ast.Return) or (own and isinstance(st, ast.Break)):
                return True
            nested = isinstance(st, (ast.For, ast.While))
            for field in ("body", "orelse"):
                if walk(getattr(st, field, None) or [], own and not nested):
                    return True
        return False
    return walk(body, True)


class ControlFlow:
    """`while`, `break`, `continue` and `T.device_print` for the Parser."""

    def stmt_While(self, node):
        if node.orelse:
            raise self.error("while/else is not supported; set a flag before 'break' and test it after the loop",
                             node.orelse[0])
        loc = self.loc(node)
        # names the body assigns become variables first, so the condition reads the loop-carried value
        self.demote(self.assigned_names(node.body), node)
        # the condition may emit statements of its own (an @tiledsl.inline helper's body): they belong to every
        # test, not once before the loop, so they are caught here and the loop re-runs them (below)
        self.body_stack.append([])
        try:
            test = self.eval(node.test)
        finally:
            pre = self.body_stack.pop()
        if isinstance(test, View) or isinstance(test, tuple):
            raise self.error(f"a while condition must be a scalar, not {ops.describe(test)}", node.test)
        cond = ops.truth(test, self.loc(node.test))
        if cond is False:
            for st in pre:                                  # the one test still runs
                self.emit(st)
            return                                          # never runs
        if cond is True and not _breaks(node.body):
            raise self.error("this while loop never ends: its condition is always true and its body has no "
                             "'break' or 'return'", node)
        before = dict(self.scope)
        saved = self.enter_runtime()
        self.loop_kinds.append("runtime")
        try:
            body = self.sub_block(node.body)
        finally:
            self.loop_kinds.pop()
        self.unassign_fresh(before, f"it is assigned only inside the while loop at line {loc.line}, which may "
                                    f"run zero times or be left early")
        self.leave_runtime(saved, before)
        if pre:
            # `while True: <the condition's statements>; if not cond: break; <body>` (a `continue` in the body
            # comes back to the test, statements included)
            tloc = self.loc(node.test)
            stop = [] if cond is True else [ir.If(tloc, ops.unary("not", cond, tloc), [ir.Break(tloc)], [])]
            self.emit(ir.While(loc, ops.to_expr(True, loc), pre + stop + body))
            return
        self.emit(ir.While(loc, ops.to_expr(cond, loc), body))

    def _loop_exit(self, node, word):
        kinds = self.loop_kinds
        if not kinds:
            raise self.error(f"'{word}' outside a loop", node)
        if kinds[-1] == "static":
            raise self.error(f"'{word}' in {_STATIC_LOOP}", node)
        if kinds[-1] == "grid" and word == "break":
            raise self.error("'break' in a loop over several dimensions (T.grid) is not supported: it would leave "
                             "only the innermost dimension; loop with nested range(...) loops instead", node)

    def stmt_Break(self, node):
        self._loop_exit(node, "break")
        self.emit(ir.Break(self.loc(node)))

    def stmt_Continue(self, node):
        self._loop_exit(node, "continue")
        self.emit(ir.Continue(self.loc(node)))

    def b_device_print(self, node):
        if node.keywords:
            raise self.error("T.device_print takes no keyword arguments", node.keywords[0].value)
        if not node.args:
            raise self.error("T.device_print(fmt, *values) needs a format string", node)
        fnode, vnodes = node.args[0], node.args[1:]
        if not (isinstance(fnode, ast.Constant) and isinstance(fnode.value, str)):
            raise self.error("T.device_print's format must be a literal string, e.g. \"i=%d x=%f\\n\"", fnode)
        fmt = fnode.value
        if "\0" in fmt:
            raise self.error("the format contains a NUL character", fnode)
        try:
            _, convs = printf.parse(fmt)
        except ValueError as e:
            raise self.error(f"bad format: {e}", fnode) from None
        if len(convs) != len(vnodes):
            raise self.error(f"the format has {len(convs)} conversion{'s' if len(convs) != 1 else ''} but "
                             f"{len(vnodes)} value{'s were' if len(vnodes) != 1 else ' was'} given", node)
        values = []
        for c, vn in zip(convs, vnodes):
            v = self.eval(vn)
            if not (ops.is_number(v) or isinstance(v, ir.Expr)):
                raise self.error(f"T.device_print prints scalar numbers, not {ops.describe(v)}", vn)
            e = ops.to_expr(v, self.loc(vn))
            problem = printf.mismatch(c, e.dtype)
            if problem is not None:
                raise self.error(problem, vn)
            values.append(e)
        self.emit(ir.Print(self.loc(node), fmt, values))
