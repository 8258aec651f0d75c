"""64-bit element offsets for tensors that can hold 2^31 elements or more.

The front end builds an access's element offset from the index expression and the view's strides in the index's
own type, int32; codegen sign-extends the finished offset to 64 bits and scales it to bytes in 64 bits (a GEP).
The scaling is safe; the sum of products before it is not: `A[i * 65536 + j]` on a 2^32-element tensor wraps at
2^31 and reads the wrong element. For every access whose storage may hold 2^31 elements of the access's dtype,
this pass rebuilds the offset in int64 (each int32 leaf extended once, then add/sub/mul/neg/floordiv/mod/shift
by a constant in 64 bits), so the offset is the mathematical index. Both backends run the rewritten IR.

Whether a tensor may be that large is decided at compile time from its annotation: static extents are known; a
named size is bound at launch to at most 2^31 - 1 (it travels as int32), so a tensor with a named size and any
other extent (or a narrower view of its bits) may exceed 2^31 elements and is rewritten. Kernels are not
specialised on the bound sizes: one compiled kernel serves every call, and the launchers stay as they are.
Tensors that provably stay below 2^31 elements (every static shape under it, and one-named-size tensors read at
their own width) keep their 32-bit arithmetic and emit the same PTX as before. An index the kernel computed into
an int32 variable before the access is already 32-bit: hold it in a T.int64 variable for such tensors.
"""
from __future__ import annotations

from ..core import dtypes as dt
from ..core.target import Target
from ..ir import nodes as ir

LIMIT = 2 ** 31                 # element offsets at or above this do not fit int32


def max_bytes(p: ir.Param) -> int:
    """The most bytes tensor parameter `p` can have (named sizes at their int32 maximum)."""
    n = p.dtype.nbytes if p.dtype.kind != "bool" else 1
    for s in p.shape:
        n *= Target.max_named_size if isinstance(s, str) else int(s)
    return n


def widen_offsets(k: ir.Kernel) -> ir.Kernel:
    """`k` with the offsets of accesses to possibly huge tensors in int64 (`k` itself when there are none)."""
    big = {id(p.storage): max_bytes(p) for p in k.params if p.kind == "tensor" and max_bytes(p) >= LIMIT}
    if not big:
        return k
    w = _Widener(big)
    body = w.stmts(k.body)
    return ir.Kernel(k.name, k.params, body, k.launch, k.allocs, k.sizes, k.loc)


class _Widener:
    def __init__(self, big: dict):
        self.big = big
        self.seen = {}              # id(expr) -> (expr, rewritten): shared subtrees stay shared
        self.wide = {}              # id(expr) -> (expr, int64 version)

    def needs(self, st: ir.Storage, d: dt.DType) -> bool:
        b = self.big.get(id(st))
        return b is not None and b // max(1, d.nbytes) >= LIMIT

    def offset(self, st, d, off):
        return self.i64(off) if self.needs(st, d) else self.expr(off)

    # ------------------------------------------------------------ statements
    def stmts(self, body):
        return [self.stmt(s) for s in body]

    def stmt(self, s):
        e = self.expr
        if isinstance(s, ir.Assign):
            return ir.Assign(s.loc, s.var, e(s.value))
        if isinstance(s, ir.Store):
            return ir.Store(s.loc, s.storage, s.dtype, self.offset(s.storage, s.dtype, s.offset), e(s.value),
                            self.checks(s.checks))
        if isinstance(s, ir.For):
            return ir.For(s.loc, s.var, e(s.start), e(s.stop), e(s.step), self.stmts(s.body), s.unroll)
        if isinstance(s, ir.If):
            return ir.If(s.loc, e(s.cond), self.stmts(s.then), self.stmts(s.orelse))
        if isinstance(s, ir.While):
            return ir.While(s.loc, e(s.cond), self.stmts(s.body))
        if isinstance(s, ir.Print):
            return ir.Print(s.loc, s.fmt, [e(v) for v in s.values])
        if isinstance(s, ir.Trap):
            return ir.Trap(s.loc, e(s.cond), s.code, e(s.value) if s.value is not None else None)
        if isinstance(s, ir.Native):
            groups = [[self.operand(a) for a in g] for g in s.groups]
            return ir.Native(s.loc, s.opcode, groups, e(s.pred) if s.pred is not None else None, s.preserve,
                             s.effect, s.origin, s.braces, s.form, s.family)
        return s

    def checks(self, checks):
        """An access's per-dimension checks with their indices rewritten as the rest (a load inside an index)."""
        return tuple(ir.DimCheck(self.expr(c.index), self.expr(c.extent), c.dim, c.view, c.text, c.low, c.high)
                     for c in checks)

    def operand(self, a):
        if isinstance(a, ir.Addr):
            return ir.Addr(a.storage, self.offset(a.storage, a.dtype, a.offset), a.dtype)
        if isinstance(a, ir.Val):
            return ir.Val(self.expr(a.expr))
        return a

    # ------------------------------------------------------------ expressions (only loads change)
    def expr(self, e):
        if not isinstance(e, ir.Expr) or isinstance(e, (ir.Const, ir.Var, ir.Special)):
            return e
        hit = self.seen.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        # iterative post-order walk: index expressions of unrolled code can be thousands of nodes deep
        stack = [(e, False)]
        while stack:
            node, done = stack.pop()
            if id(node) in self.seen and self.seen[id(node)][0] is node:
                continue
            kids = _children(node)
            if not done:
                stack.append((node, True))
                stack.extend((c, False) for c in kids if isinstance(c, ir.Expr))
                continue
            self.seen[id(node)] = (node, self._rebuild(node))
        return self.seen[id(e)][1]

    def _get(self, c):
        if not isinstance(c, ir.Expr):
            return c
        hit = self.seen.get(id(c))
        return hit[1] if hit is not None and hit[0] is c else c

    def _rebuild(self, n):
        g = self._get
        if isinstance(n, ir.Load):
            return ir.Load(n.dtype, n.loc, n.storage, self.offset(n.storage, n.dtype, n.offset),
                           self.checks(n.checks))
        if isinstance(n, ir.Binary):
            a, b = g(n.a), g(n.b)
            return n if a is n.a and b is n.b else ir.Binary(n.dtype, n.loc, n.op, a, b)
        if isinstance(n, ir.Compare):
            a, b = g(n.a), g(n.b)
            return n if a is n.a and b is n.b else ir.Compare(n.dtype, n.loc, n.op, a, b)
        if isinstance(n, ir.Unary):
            a = g(n.a)
            return n if a is n.a else ir.Unary(n.dtype, n.loc, n.op, a)
        if isinstance(n, ir.Cast):
            a = g(n.a)
            return n if a is n.a else ir.Cast(n.dtype, n.loc, a)
        if isinstance(n, ir.Select):
            c, a, b = g(n.cond), g(n.a), g(n.b)
            return n if (c, a, b) == (n.cond, n.a, n.b) else ir.Select(n.dtype, n.loc, c, a, b)
        return n

    # ------------------------------------------------------------ int64 offsets
    def i64(self, off):
        """The int64 expression of index `off` (a Python int or an integer expression), without 32-bit wrap."""
        if isinstance(off, bool) or not isinstance(off, (int, ir.Expr)):
            return off
        if isinstance(off, int):
            return ir.Const(dt.int64, None, off)
        hit = self.wide.get(id(off))
        if hit is not None and hit[0] is off:
            return hit[1]
        stack = [(off, False)]
        while stack:
            node, done = stack.pop()
            if id(node) in self.wide and self.wide[id(node)][0] is node:
                continue
            kids = _wide_children(node)
            if not done and kids:
                stack.append((node, True))
                stack.extend((c, False) for c in kids)
                continue
            self.wide[id(node)] = (node, self._widen(node))
        return self.wide[id(off)][1]

    def _widen(self, n):
        loc = n.loc
        if isinstance(n, ir.Const) and isinstance(n.value, int) and not isinstance(n.value, bool):
            v = int(n.value)
            if n.dtype.is_int and not n.dtype.is_signed:
                v &= (1 << n.dtype.bits) - 1
            elif n.dtype.is_int:
                v = (v + (1 << (n.dtype.bits - 1))) % (1 << n.dtype.bits) - (1 << (n.dtype.bits - 1))
            return ir.Const(dt.int64, loc, v)
        kids = _wide_children(n)
        if kids:
            w = [self.wide[id(c)][1] for c in kids]
            if isinstance(n, ir.Cast):
                return w[0]
            if isinstance(n, ir.Unary):
                return ir.Unary(dt.int64, loc, n.op, w[0])
            if len(w) == 1:              # x << c
                return ir.Binary(dt.int64, loc, n.op, w[0], ir.Const(dt.int64, loc, int(n.b.value)))
            return ir.Binary(dt.int64, loc, n.op, w[0], w[1])
        e = self.expr(n)                 # a leaf of the index: its loads may be offsets of huge tensors too
        if e.dtype.bits >= 64 or not e.dtype.is_int:
            return e
        return ir.Cast(dt.int64, loc, e)


_WIDE_OPS = ("add", "sub", "mul", "floordiv", "mod")


def _wide_children(n) -> list:
    """The subexpressions an int64 rebuild of `n` recurses into (none: `n` is extended as a whole)."""
    if not isinstance(n, ir.Expr) or not n.dtype.is_int or n.dtype.bits > 32:
        return []
    if isinstance(n, ir.Binary) and n.op in _WIDE_OPS:
        return [n.a, n.b]
    if isinstance(n, ir.Binary) and n.op == "shl" and isinstance(n.b, ir.Const) and 0 <= n.b.value < 32:
        return [n.a]                 # x << c is x * 2^c while c is below the 32-bit width
    if isinstance(n, ir.Unary) and n.op == "neg":
        return [n.a]
    if isinstance(n, ir.Cast) and isinstance(n.a, ir.Expr) and n.a.dtype.is_int and n.a.dtype.bits == 64:
        return [n.a]                 # the front end's int32 view of an int64 index: the index itself, unwrapped
    return []


def _children(n) -> list:
    if isinstance(n, ir.Load):
        return [n.offset]
    if isinstance(n, (ir.Binary, ir.Compare)):
        return [n.a, n.b]
    if isinstance(n, (ir.Unary, ir.Cast)):
        return [n.a]
    if isinstance(n, ir.Select):
        return [n.cond, n.a, n.b]
    return []
