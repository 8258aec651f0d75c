"""Threads that leave control flow early (break, continue, return) and `T.device_print`, for program.py.

In masked lockstep a thread that breaks, continues or returns cannot jump: it is marked in `m.exit` (one int8
per thread of the batch, present when the kernel has such statements) and drops out of the active set:
  - the statement list it is in runs the rest of its statements without it (`still_running`);
  - the loop whose body it left settles it after the body (`settle`): CONTINUE is running again for the next
    iteration, BREAK is running again but out of the loop, RETURN stays marked until the kernel ends, so every
    enclosing list and loop leaves it out.
"""
from __future__ import annotations

import sys

import numpy as np

from ..core import printf
from ..ir import nodes as ir

RUNNING, CONTINUE, BREAK, RETURN = 0, 1, 2, 3


def has_exits(body) -> bool:
    """Does the kernel hold any break, continue or return?"""
    return any(isinstance(s, (ir.Break, ir.Continue, ir.Return)) for s in ir.walk_stmts(body))


def leaves(s) -> bool:
    """Can running `s` leave some threads marked (so the rest of its statement list must skip them)?"""
    if isinstance(s, (ir.Break, ir.Continue, ir.Return)):
        return True
    if isinstance(s, ir.If):
        return any(leaves(x) for x in s.then + s.orelse)
    if isinstance(s, (ir.For, ir.While)):          # only a return gets out of a loop
        return any(isinstance(x, ir.Return) for x in ir.walk_stmts(s.body))
    return False


def loop_exits(body) -> bool:
    """Can a thread leave this loop body early (a break/continue of this loop, or a return anywhere in it)?"""
    return any(leaves(s) for s in body)


def mark(state):
    def f(m, idx):
        if idx is None:
            m.exit[...] = state
        else:
            m.exit[idx] = state
    return f


def still_running(m, idx):
    """The active set without the threads that have left."""
    st = m.exit if idx is None else m.exit[idx]
    going = st == RUNNING
    if going.all():
        return idx
    return np.flatnonzero(going) if idx is None else idx[going]


def settle(m, idx):
    """After a loop body: threads that continued run the next iteration, those that broke are out of the loop
    (and running again after it), those that returned stay out."""
    st = m.exit if idx is None else m.exit[idx]
    if not st.any():
        return idx
    rows = np.arange(m.N) if idx is None else idx
    stay = (st == RUNNING) | (st == CONTINUE)          # before the reset below (st may view m.exit)
    m.exit[rows[(st == CONTINUE) | (st == BREAK)]] = RUNNING
    return rows[stay]


def _host_values(v, d, n):
    """One Python number per thread, as C varargs promote `d` (bf16 bits become floats)."""
    a = np.broadcast_to(np.asarray(v), (n,))
    if d.name == "bfloat16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    if d.is_float:
        return [float(x) for x in a.astype(np.float64)]
    return [int(x) for x in a]


def printer(s: ir.Print, cx):
    """`T.device_print` in the interpreter: each active thread, in flat thread order (blocks of the batch in
    order, then linear thread id), writes `(block x,y,z thread x,y,z) ` and its formatted text to stdout."""
    pieces, convs = printf.parse(s.fmt)
    vfs = [(cx.expr(v), v.dtype) for v in s.values]

    def f(m, idx):
        n = m.n(idx)
        flat = m.all if idx is None else idx
        cols = [_host_values(vf(m, idx), d, n) for vf, d in vfs]
        out = []
        for k in range(n):
            t = int(flat[k])
            b, lin = int(m.blocks[t // m.T]), t % m.T
            bx, by = m.grid[0], m.grid[1]
            tx, ty = m.block[0], m.block[1]
            where = (f"(block {b % bx},{b // bx % by},{b // (bx * by)} "
                     f"thread {lin % tx},{lin // tx % ty},{lin // (tx * ty)}) ")
            out.append(where + printf.host_text(pieces, convs, [c[k] for c in cols]))
        sys.stdout.write("".join(out))
    return f
