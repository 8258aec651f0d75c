"""The per-dimension bounds of an element access (`X[r, c]`, `row[j]`, `X[s : s + 8][j]`): ir.DimCheck's.

The whole-buffer check (the interpreter's, debug=True's) sees only the flat offset, and `X[r, 64]` in a 64-wide row
is inside the buffer: it reads the next row. So each run-time index is also checked against its own dimension, at
every level of the view it goes through: the view indexed, then each view it was cut from (a slice's run-time start
plus the index must stay inside the parent's extent). Left out, because nothing can go wrong there:
- a compile-time index (refused at compile time when out of range);
- a side of the check the index's range proves (ir/ranges.py: `lane % 4 + 8 * kk` in a `T.grid(4, ...)` loop);
- the first dimension of a whole row-major buffer (`views.RootView.whole`): once the other indices are inside their
  dimensions, a first index outside its own leaves the buffer, which the whole-buffer check reports.
"""
from __future__ import annotations

import ast

from ..ir import nodes as ir
from ..ir.ranges import value_range
from ..lang.views import BitView, RootView, SubView


def dim_checks(view, coords, items) -> tuple:
    """The DimChecks of reading element `coords` of `view`; `items` are the index nodes as written. Which sides
    the index's range proves is decided once the whole kernel is parsed (`prune`)."""
    out, seen = [], set()
    texts = [lambda n=n: ast.unparse(n) for n in items]     # the index as written (made when a check is)

    def add(c, extent, k, v, text):
        if isinstance(c, int) or isinstance(c, ir.Const):
            return                                       # compile-time: checked while compiling
        key = (id(c), extent if isinstance(extent, int) else id(extent))
        if key not in seen:
            seen.add(key)
            out.append(ir.DimCheck(c, extent, k, v.describe(), text()))

    v, cs, ts = view, list(coords), texts
    while True:
        if isinstance(v, SubView):
            for k, (c, t) in enumerate(zip(cs, ts)):
                add(c, v.shape[k], k, v, t)
            it = iter(zip(cs, ts))
            pcs, pts = [], []
            for p in v.picks:
                if p[0] == "fix":
                    pcs.append(p[1])
                    pts.append(lambda o=p[1]: _show(o))
                else:
                    c, t = next(it)
                    pcs.append(ir.add(p[1], c))
                    at_zero = isinstance(p[1], int) and p[1] == 0
                    pts.append(t if at_zero else lambda o=p[1], t=t: f"{_show(o)} + {t()}")
            v, cs, ts = v.parent, pcs, pts
        elif isinstance(v, BitView):
            for k, (c, t) in enumerate(zip(cs, ts)):
                add(c, v.shape[k], k, v, t)
            last, t = cs[-1], ts[-1]
            if v.ratio_down > 1:
                cs = cs[:-1] + [ir.floordiv(last, v.ratio_down)]
                ts = ts[:-1] + [lambda t=t, r=v.ratio_down: f"({t()}) // {r}"]
            else:
                cs = cs[:-1] + [ir.mul(last, v.ratio_up)]
                ts = ts[:-1] + [lambda t=t, r=v.ratio_up: f"({t()}) * {r}"]
            v = v.parent
        else:
            if isinstance(v, RootView):
                for k, (c, t) in enumerate(zip(cs, ts)):
                    if k or not v.whole:
                        add(c, v.shape[k], k, v, t)
            return tuple(out)


def _show(x) -> str:
    if isinstance(x, int):
        return str(x)
    from ..ir.printer import expr_str
    return expr_str(x)


def prune(body, known: dict) -> None:
    """Drop the sides of every access's checks that the index's range proves, in place, after parsing: only then
    is a variable's single definition final (`x = tid` read in a loop that later does `x = x + 64` is assigned
    twice, and its range is its dtype's). `known`: the ranges of loop indices and thread ids (ir/ranges.py)."""
    memo, seen = {}, set()

    def exprs(e):
        stack = [e]
        while stack:
            x = stack.pop()
            if not isinstance(x, ir.Expr) or id(x) in seen:
                continue
            seen.add(id(x))
            if isinstance(x, ir.Load):
                x.checks = _proved(x.checks, known, memo)
                stack += [x.offset] + [c.index for c in x.checks]
            elif isinstance(x, (ir.Binary, ir.Compare)):
                stack += [x.a, x.b]
            elif isinstance(x, (ir.Unary, ir.Cast)):
                stack.append(x.a)
            elif isinstance(x, ir.Select):
                stack += [x.cond, x.a, x.b]

    for s in ir.walk_stmts(body):
        if isinstance(s, ir.Store):
            s.checks = _proved(s.checks, known, memo)
            for e in [s.offset, s.value] + [c.index for c in s.checks]:
                exprs(e)
        elif isinstance(s, ir.Assign):
            exprs(s.value)
        elif isinstance(s, (ir.If, ir.While)):
            exprs(s.cond)
        elif isinstance(s, ir.For):
            for e in (s.start, s.stop, s.step):
                exprs(e)
        elif isinstance(s, ir.Print):
            for e in s.values:
                exprs(e)
        elif isinstance(s, ir.Apply):
            for x in s.operands:
                exprs(x)


def _proved(checks, known, memo) -> tuple:
    out = []
    for c in checks:
        r = value_range(c.index, known, memo)
        c.low = r is None or r[0] < 0
        if isinstance(c.extent, int):
            c.high = r is None or r[1] >= c.extent
        else:
            er = value_range(c.extent, known, memo)
            c.high = r is None or er is None or r[1] >= er[0]
        if c.low or c.high:
            out.append(c)
    return tuple(out)
