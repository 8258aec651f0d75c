"""debug=True: a bounds check before every global/shared/local element access and tile memory operand, and
before every element access a check of each run-time index against its own dimension (ir.DimCheck).

Each check is an `ir.Trap(cond, code)`; `code` indexes `sites`, the user's source locations. On the GPU a
violating thread records (site, block, thread) in a small device buffer and exits; the host reads the buffer
after the launch and raises `KernelFault` naming the line, block and thread. How many elements a native
instruction touches from each address is its family's answer (`access_spans`), never a guess from the opcode.
"""
from __future__ import annotations

from ..core import dtypes as dt
from ..core.errors import CompilationError
from ..ir import nodes as ir


# the end of a per-dimension site: the host appends the index value the trap recorded (runtime/launchers/reference.py)
INDEX_TAIL = "; the index is"


def insert_bounds_checks(k: ir.Kernel):
    """A new kernel with checks inserted, and the list of sites (one description per check code)."""
    numel = {}
    for p in k.params:
        if p.kind == "tensor":
            n = 1
            for s in p.shape:
                n = ir.mul(n, k.sizes[s] if isinstance(s, str) else s)
            numel[id(p.storage)] = n
    for st in k.allocs:
        numel[id(st)] = st.size
    sites = []
    body = _body(k.body, numel, sites)
    return ir.Kernel(k.name, k.params, body, k.launch, k.allocs, k.sizes, k.loc), sites


def _body(stmts, numel, sites):
    out = []
    for s in stmts:
        accesses = []
        if isinstance(s, ir.Assign):
            _loads(s.value, accesses)
        elif isinstance(s, ir.Store):
            _loads(s.value, accesses)
            _loads(s.offset, accesses)
            accesses.append((s.storage, s.offset, s.dtype, 1))
            accesses += [(s.storage, c) for c in s.checks]
        elif isinstance(s, ir.If):
            _loads(s.cond, accesses)
        elif isinstance(s, ir.Print):
            for v in s.values:
                _loads(v, accesses)
        elif isinstance(s, ir.While):
            _loads(s.cond, accesses)
        elif isinstance(s, ir.For):
            for e in (s.start, s.stop, s.step):
                _loads(e, accesses)
        elif isinstance(s, ir.Native):
            spans = iter(_spans(s))
            for g in s.groups:
                for a in g:
                    if isinstance(a, ir.Val):
                        _loads(a.expr, accesses)
                    elif isinstance(a, ir.Addr):
                        _loads(a.offset, accesses)
                        accesses.append((a.storage, a.offset, a.dtype, next(spans)))
        traps = _dim_traps(s, [a for a in accesses if len(a) == 2], sites)
        cond = None
        for st, off, d, span in (a for a in accesses if len(a) == 4):
            c = _out_of_range(st, off, d, span, numel)
            if c is not None:
                cond = c if cond is None else ir.Binary(dt.bool_, s.loc, "or", cond, c)
        if cond is not None:
            sites.append(f"{s.loc}: out-of-bounds access in `{s.loc.text.strip()}`" if s.loc else "out of bounds")
            traps.append(ir.Trap(s.loc, cond, len(sites)))
        out += traps
        if isinstance(s, ir.For):
            s = ir.For(s.loc, s.var, s.start, s.stop, s.step, _body(s.body, numel, sites), s.unroll)
        elif isinstance(s, ir.If):
            s = ir.If(s.loc, s.cond, _body(s.then, numel, sites), _body(s.orelse, numel, sites))
        elif isinstance(s, ir.While):
            # the condition is read again after every iteration: the same check ends the body (an iteration
            # left by `continue` skips it, like For's stop, which is checked before the loop only)
            again = [ir.Trap(t.loc, t.cond, t.code, t.value) for t in traps]
            s = ir.While(s.loc, s.cond, _body(s.body, numel, sites) + again)
        out.append(s)
    return out


def _spans(n: ir.Native) -> list:
    """Elements accessed from each Addr operand of `n`, in operand order, as its family states them."""
    if n.family is None:
        raise CompilationError(f"{n.opcode}: debug=True needs the instruction's family to check its addresses, but "
                               f"this native was built without one", n.loc)
    spans = list(n.family.access_spans(n))
    naddr = sum(isinstance(a, ir.Addr) for g in n.groups for a in g)
    if len(spans) != naddr:
        raise CompilationError(f"{n.opcode}: family {n.family.name} gives {len(spans)} access spans for {naddr} "
                               f"addresses", n.loc)
    return spans


def _dim_traps(s, checks, sites) -> list:
    """One trap per per-dimension check of the statement's accesses (ir.DimCheck), each its own site naming the
    index, the dimension and the view; the trap records the index's value, which the host adds to the message."""
    out = []
    for st, c in checks:
        loc = getattr(c.index, "loc", None) or s.loc
        parts = []
        idx = c.index if c.index.dtype == dt.int32 else ir.Cast(dt.int32, loc, c.index)
        if c.low:
            parts.append(ir.Compare(dt.bool_, loc, "lt", idx, ir.Const(dt.int32, loc, 0)))
        if c.high:
            parts.append(ir.Compare(dt.bool_, loc, "ge", idx, ir.as_expr(c.extent, dt.int32, loc)))
        cond = parts[0] if len(parts) == 1 else ir.Binary(dt.bool_, loc, "or", parts[0], parts[1])
        where = f"{s.loc}: " if s.loc else ""
        text = f" in `{s.loc.text.strip()}`" if s.loc and s.loc.text else ""
        sites.append(f"{where}out-of-bounds access of '{st.name}'{text}: index {c.text} outside dimension {c.dim} "
                     f"of {c.view} (extent {_show(c.extent)}){INDEX_TAIL}")
        out.append(ir.Trap(s.loc, cond, len(sites), idx))
    return out


def _show(x) -> str:
    if isinstance(x, int):
        return str(x)
    return getattr(x, "name", "a run-time extent")


def _loads(e, acc):
    if isinstance(e, ir.Load):
        _loads(e.offset, acc)
        acc.append((e.storage, e.offset, e.dtype, 1))
        acc += [(e.storage, c) for c in e.checks]
    elif isinstance(e, (ir.Binary, ir.Compare)):
        _loads(e.a, acc)
        _loads(e.b, acc)
    elif isinstance(e, (ir.Unary, ir.Cast)):
        _loads(e.a, acc)
    elif isinstance(e, ir.Select):
        _loads(e.cond, acc)
        _loads(e.a, acc)
        _loads(e.b, acc)


def _out_of_range(st, off, d, span, numel):
    n = numel.get(id(st))
    if n is None:
        return None
    loc = getattr(off, "loc", None)
    # compare in bytes, in 64-bit, so reinterpreting views and huge tensors are checked exactly
    first = ir.mul(_i64(off), d.nbytes)
    limit = ir.mul(_i64(n), st.dtype.nbytes)
    last = ir.add(first, span * d.nbytes)
    if isinstance(first, int) and isinstance(limit, int):
        return None if 0 <= first and last <= limit else ir.Const(dt.bool_, loc, True)
    lo = ir.Compare(dt.bool_, loc, "lt", ir.as_expr(first, dt.int64), ir.Const(dt.int64, loc, 0))
    hi = ir.Compare(dt.bool_, loc, "gt", ir.as_expr(last, dt.int64), ir.as_expr(limit, dt.int64))
    return ir.Binary(dt.bool_, loc, "or", lo, hi)


def _i64(x):
    if isinstance(x, int):
        return x
    if isinstance(x, ir.Const):
        return int(x.value)
    return x if x.dtype == dt.int64 else ir.Cast(dt.int64, getattr(x, "loc", None), x)
