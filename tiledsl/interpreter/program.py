"""Statements compiled once into closures `f(machine, idx)`, and the Program that runs them block batch by batch.

Control flow is masked lockstep execution:
  - `If` with a per-thread condition runs `then` on the threads where it holds and `orelse` on the rest;
  - `For` keeps iterating while any active thread is still inside its own bounds (bounds may differ per thread);
    constant bounds take a fast path that runs the Python range directly;
  - `Barrier` is a no-op in lockstep, but reaching it with only part of a block active is an error
    (on the GPU that is undefined behaviour / a hang);
  - `Trap` raises KernelFault for the first active thread whose condition holds;
  - `While` re-evaluates its condition per thread and keeps iterating while any active thread's holds;
  - `Break`, `Continue` and `Return` mark the thread in `m.exit` (control.py); the statement list it is in stops
    running it at once, the loop it leaves settles it (continue: back for the next iteration, break: out of the
    loop), and a returned thread stays out of every enclosing list until the kernel ends;
  - `Print` writes each active thread's text, in flat thread order, prefixed with its block and thread.
"""
from __future__ import annotations

import numpy as np

from ..ir import nodes as ir
from ..core import knobs
from ..core.errors import TiledslError
from .depth import headroom, max_expr_depth
from .dim_checks import compile_checks
from .exprs import ExprCompiler, is_const
from .machine import InterpreterError, Machine, mem_np, sub, val_np
from .operands import native_error
from .warp_order import WarpOrder, shuffled
from . import control, fibers


class Program:
    """An expanded kernel compiled to closures; `run` executes a grid."""

    def __init__(self, kernel: ir.Kernel):
        self.kernel = kernel
        self.allocs = list(kernel.allocs)
        # the global tensors the kernel stores to by indexing: the only ones the race detector watches (a tensor
        # nothing writes has no race; the st/atom/TMA natives' writes are not watched)
        self.stored_globals = {s.storage for s in ir.walk_stmts(kernel.body)
                               if isinstance(s, ir.Store) and s.storage.scope == "global"}
        self.cx = ExprCompiler()
        # the closures of a deep expression recurse once per level, when compiled and when run (depth.py)
        self.depth = max_expr_depth(kernel.body)
        self.exits = control.has_exits(kernel.body)     # only then do threads leave statement lists early
        self.fibered = False            # an if/else whose parts wait for each other (set by s_If, fibers.py)
        with headroom(self.depth):
            self.body = self.block(kernel.body)

    # -------------------------------------------------------------- compile
    def block(self, stmts):
        fs = [self.stmt(s) for s in stmts]
        locs = [s.loc for s in stmts]
        leaves = [control.leaves(s) for s in stmts]
        if any(leaves):
            return self._leaving_block(fs, locs, leaves)

        def run(m, idx):
            i = 0
            try:
                for i, f in enumerate(fs):
                    f(m, idx)
            except Exception as e:
                _relocate(e, locs[i])
        return run

    @staticmethod
    def _leaving_block(fs, locs, leaves):
        """A statement list some threads may leave part-way (break, continue, return): after each statement that
        can do so, the threads it marked drop out of the rest of the list."""
        def run(m, idx):
            i = 0
            try:
                for i, f in enumerate(fs):
                    f(m, idx)
                    if leaves[i]:
                        idx = control.still_running(m, idx)
                        if idx is not None and len(idx) == 0:
                            return
            except Exception as e:
                _relocate(e, locs[i])
        return run

    def stmt(self, s):
        meth = getattr(self, "s_" + type(s).__name__, None)
        if meth is None:
            raise InterpreterError(f"{s.loc}: the interpreter cannot execute {type(s).__name__} statements")
        try:
            return meth(s)
        except TiledslError as e:
            if s.loc is not None and str(s.loc) not in str(e):
                raise InterpreterError(f"{s.loc}: {e}") from None
            raise

    def s_Assign(self, s: ir.Assign):
        var = s.var
        vf = self.cx.expr(s.value)
        npd = val_np(var.dtype)

        def f(m, idx):
            v = vf(m, idx)
            arr = m.vars.get(var)
            if arr is None:
                arr = m.vars[var] = np.zeros(m.N, npd)
            if idx is None:
                arr[...] = v
            else:
                arr[idx] = v
        return f

    def s_Store(self, s: ir.Store):
        st, loc = s.storage, s.loc
        npd = mem_np(s.dtype)
        of, vf = self.cx.expr(s.offset), self.cx.expr(s.value)
        dims = compile_checks(s.checks, self.cx, st, "write", loc)

        def f(m, idx):
            if dims is not None:
                dims(m, idx)
            off = of(m, idx)
            v = vf(m, idx)
            v = np.asarray(v).astype(npd, copy=False)
            m.write(m.mem[st], npd, off, v, idx, loc)
        return f

    def s_For(self, s: ir.For):
        var = s.var
        npd = val_np(var.dtype)
        f0, f1, fs = self.cx.expr(s.start), self.cx.expr(s.stop), self.cx.expr(s.step)
        body = self.block(s.body)
        static = is_const(f1) and is_const(fs) and int(fs.const) > 0
        settles = control.loop_exits(s.body)          # a break/continue/return leaves this loop's body early
        if settles:
            static = False                            # the active set shrinks: the general loop handles it

        def general(m, idx, arr):
            active = idx
            while True:
                cur = arr if active is None else arr[active]
                active = _stay(active, cur < f1(m, active))
                if active is _NONE_LEFT:
                    return
                body(m, active)
                if settles:
                    active = _settled(m, active)
                    if active is _NONE_LEFT:
                        return
                st = fs(m, active)
                # the codegen's rule (lower/llvm/stmts.py s_For): a step that would wrap past the type's largest
                # value ends the loop there (Python's next index is past stop); a step of 1 cannot wrap
                wraps = None
                if not (is_const(fs) and int(fs.const) == 1):
                    last = np.asarray(np.iinfo(npd).max, npd) - np.asarray(st).astype(npd)
                    wraps = (arr if active is None else arr[active]) > last
                if active is None:
                    arr += st
                else:
                    arr[active] += st
                if wraps is not None and np.any(wraps):
                    active = _stay(active, ~wraps)
                    if active is _NONE_LEFT:
                        return

        def f(m, idx):
            arr = m.vars.get(var)
            if arr is None:
                arr = m.vars[var] = np.zeros(m.N, npd)
            start = f0(m, idx)
            if static and np.ndim(start) == 0:
                stop, step = int(f1.const), int(fs.const)
                i = int(start)
                for i in range(int(start), stop, step):
                    if idx is None:
                        arr.fill(i)
                    else:
                        arr[idx] = i
                    body(m, idx)
                last = max(int(start), i + step) if int(start) < stop else int(start)
                if idx is None:
                    arr.fill(last)
                else:
                    arr[idx] = last
                return
            if idx is None:
                arr[...] = start
            else:
                arr[idx] = start
            general(m, idx, arr)
        return f

    def s_If(self, s: ir.If):
        cf = self.cx.expr(s.cond)
        then, orelse = self.block(s.then), self.block(s.orelse)
        has_else = bool(s.orelse)
        if is_const(cf):
            return then if bool(cf.const) else orelse
        if has_else and (fibers.blocking(s.then) or fibers.blocking(s.orelse)):
            self.fibered = True
            divergent = _fibered(then, orelse, s.loc, fibers.blocking(s.then, fibers.TURNS),
                                 fibers.blocking(s.orelse, fibers.TURNS))
        else:
            def divergent(m, idx, c):
                then(m, sub(idx, c))
                if has_else:
                    orelse(m, sub(idx, ~c))

        def f(m, idx):
            c = cf(m, idx)
            if np.ndim(c) == 0:
                (then if c else orelse)(m, idx)
                return
            c = np.asarray(c, bool)
            if c.all():
                then(m, idx)
                return
            if not c.any():
                if has_else:
                    orelse(m, idx)
                return
            divergent(m, idx, c)
        return f

    def s_While(self, s: ir.While):
        cf = self.cx.expr(s.cond)
        body = self.block(s.body)
        settles = control.loop_exits(s.body)

        def f(m, idx):
            active = idx
            while True:
                active = _stay(active, cf(m, active))
                if active is _NONE_LEFT:
                    return
                body(m, active)
                if settles:
                    active = _settled(m, active)
                    if active is _NONE_LEFT:
                        return
        return f

    def s_Break(self, s: ir.Break):
        return control.mark(control.BREAK)

    def s_Continue(self, s: ir.Continue):
        return control.mark(control.CONTINUE)

    def s_Return(self, s: ir.Return):
        return control.mark(control.RETURN)

    def s_Print(self, s: ir.Print):
        return control.printer(s, self.cx)

    def s_Barrier(self, s: ir.Barrier):
        loc = s.loc

        def f(m, idx):
            order = getattr(m, "order", None)
            if order is not None:
                order.barrier(idx, loc)  # warps in a shuffled order: the others run until all are here
                return
            if idx is not None:
                _whole_blocks(m, idx, loc)
            if m.race is not None:
                m.race.block_barrier(idx)
        return f

    def s_Trap(self, s: ir.Trap):
        cf, code, loc = self.cx.expr(s.cond), s.code, s.loc

        def f(m, idx):
            c = cf(m, idx)
            c = np.broadcast_to(np.asarray(c, bool), (m.n(idx),))
            if c.any():
                raise m.fault(loc, f"kernel trap (code {code})", m.first(idx, c))
        return f

    def s_Native(self, s: ir.Native):
        # the instruction's family (tiledsl.isa) parsed its opcode and holds its semantics
        semantics = getattr(s.family, "semantics", None)
        if semantics is None:
            raise native_error(s, "the interpreter has no semantics for this opcode")
        f = semantics(s, self.cx)
        if not any(isinstance(a, ir.Reg) for g in s.groups for a in g):
            return f
        loc = s.loc

        def located(m, idx):
            if m.pending:                 # registers in flight (wgmma): a fault on one names this line
                m.native_loc = loc
            return f(m, idx)
        return located

    def s_Apply(self, s):
        raise InterpreterError(f"{s.loc}: tile.apply reached the interpreter unexpanded")

    # -------------------------------------------------------------- run
    def run(self, grid, block, globals_, scalars, batch_threads=16384):
        """Run every block of `grid`. `globals_`: {Storage: Memory}; `scalars`: {Var: numpy scalar}."""
        T = block[0] * block[1] * block[2]
        nblocks = grid[0] * grid[1] * grid[2]
        cluster = tuple(getattr(self.kernel.launch, "cluster", (1, 1, 1)) or (1, 1, 1))
        order, csize = cluster_order(grid, cluster)
        # a cluster is one unit: a batch holds whole clusters (their blocks run together, sharing memory)
        per = max(1, min(nblocks, batch_threads // T) // csize) * csize
        # the race detector watches shared memory and the global memory each block reads and writes
        # (one warp alone races only with asynchronous copies into shared memory)
        self.racecheck = knobs.racecheck() and (any(st.scope == "shared" for st in self.allocs) or
                                                (T > 32 and bool(self.stored_globals)))
        rng = shuffled(self.kernel, block, cluster)        # TILEDSL_INTERPRET_ORDER=random (warp_order.py)
        with np.errstate(all="ignore"), headroom(self.depth):
            for b0 in range(0, nblocks, per):
                nb = min(per, nblocks - b0)
                blocks = None if order is None else order[b0:b0 + nb]
                # the batch's global memory, kept while a lockstep deadlock may still send it round again
                saved = [(mem.raw, mem.raw.copy()) for mem in globals_.values()] \
                    if self.fibered and nb > 1 else None
                try:
                    self._batch(grid, block, b0, nb, globals_, blocks, cluster, scalars, rng, False)
                except Exception as e:
                    if saved is None or not getattr(e, "lockstep_deadlock", False):
                        raise
                    # Blocks that run their warp-specialised parts in lockstep wait for each other, which the
                    # GPU's independent blocks never do (a dynamic walk: one block draws more items than
                    # another). The batch runs again from its start with a fiber per block and part: only a
                    # deadlock there is the kernel's.
                    for raw, copy in saved:
                        raw[...] = copy
                    self._batch(grid, block, b0, nb, globals_, blocks, cluster, scalars, rng, True)

    def _batch(self, grid, block, b0, nb, globals_, blocks, cluster, scalars, rng, per_block):
        m = Machine(self, grid, block, b0, nb, globals_, blocks, cluster)
        m.per_block = per_block
        if self.exits:
            m.exit = np.zeros(m.N, np.int8)      # per thread: running, or how it left (control.py)
        for var, value in scalars.items():
            m.vars[var] = np.full(m.N, value, val_np(var.dtype))
        try:
            if rng is None:
                self.body(m, None)
            else:
                m.order = WarpOrder(m, rng)
                m.order.run(self.body)
        except Exception as e:
            # a wait no fiber could complete, among blocks in lockstep (fibers.Fibers.stuck)
            fb = getattr(m, "fibers", None)
            if fb is not None and fb.stuck and not per_block and nb > 1:
                e.lockstep_deadlock = True
            raise


def _fibered(then, orelse, loc, split_then=False, split_else=False):
    """The divergent case of an if/else whose parts may wait for each other (fibers.py): `else` runs as a fiber
    that starts when `then` first waits, and the statement ends when both parts have. A part with a named-barrier
    sync (split_then / split_else) runs one fiber per warpgroup (fibers.groups): its warpgroups may take turns;
    in a batch run again with a fiber per block (Program.run), one per block and warpgroup. The first group of
    `then` stays on the calling thread."""
    def divergent(m, idx, c):
        t_idx, e_idx = sub(idx, c), sub(idx, ~c)
        t_groups = fibers.groups(m, t_idx, split_then)
        e_groups = fibers.groups(m, e_idx, split_else)
        fb = fibers.fibers_of(m)
        others = [fb.spawn(lambda g=g: then(m, g)) for g in t_groups[1:]]
        others += [fb.spawn(lambda g=g: orelse(m, g)) for g in e_groups]
        then(m, t_groups[0])

        def deadlock():
            if getattr(m, "stalled", None) is not None:     # a setmaxnreg.inc nobody pays for: the cause
                raise m.stalled
            raise m.fault(loc, "the two parts of this if/else wait for each other and neither can go on "
                               "(on the GPU this hangs)", m.first(idx))
        for other in others:
            fb.join(other, deadlock)
    return divergent


_NONE_LEFT = object()        # a loop's active set became empty (None already means "every thread")


def _stay(active, keep):
    """`active` narrowed to the threads whose loop condition `keep` (one bool, or one per active thread) holds,
    or _NONE_LEFT."""
    if np.ndim(keep) == 0:
        return active if keep else _NONE_LEFT
    keep = np.asarray(keep, bool)
    if keep.all():
        return active
    active = sub(active, keep)
    return active if len(active) else _NONE_LEFT


def _settled(m, active):
    """`active` after the iteration's break/continue/return settled (control.settle), or _NONE_LEFT."""
    active = control.settle(m, active)
    return _NONE_LEFT if active is not None and len(active) == 0 else active


def cluster_order(grid, cluster):
    """(linear block ids cluster by cluster, each cluster's in rank order; blocks per cluster), or (None, 1)
    without clusters (the plain linear order)."""
    csize = cluster[0] * cluster[1] * cluster[2]
    if csize == 1:
        return None, 1
    if any(g % c for g, c in zip(grid, cluster)):
        raise InterpreterError(f"grid {tuple(grid)} is not a whole number of clusters {tuple(cluster)}")
    nc = [g // c for g, c in zip(grid, cluster)]
    cz, cy, cx, rz, ry, rx = np.meshgrid(np.arange(nc[2]), np.arange(nc[1]), np.arange(nc[0]), np.arange(cluster[2]),
                                         np.arange(cluster[1]), np.arange(cluster[0]), indexing="ij")
    x, y, z = cx * cluster[0] + rx, cy * cluster[1] + ry, cz * cluster[2] + rz
    return (x + grid[0] * (y + grid[1] * z)).reshape(-1).astype(np.int64), csize


def _whole_blocks(m, idx, loc):
    """A syncthreads reached by part of a block under divergent control flow is a fault (a hang or undefined
    behaviour on the GPU)."""
    counts = np.bincount(m.blk[idx], minlength=m.nb)
    bad = (counts != 0) & (counts != m.T)
    if np.any(bad):
        b = int(np.flatnonzero(bad)[0])
        inactive = np.setdiff1d(np.arange(b * m.T, (b + 1) * m.T), idx)
        raise m.fault(loc, f"barrier (syncthreads) reached by {int(counts[b])} of the block's {m.T} threads "
                           f"under divergent control flow; every thread of the block must reach it "
                           f"(first one missing: {m.where(int(inactive[0]))})", m.first(idx))


def _relocate(e: Exception, loc):
    """Re-raise an error from a statement at `loc`: interpreter errors gain the location once, tiledsl errors pass
    unchanged, anything else is an interpreter error at that line."""
    if isinstance(e, InterpreterError):
        if loc is not None and not getattr(e, "located", False) and not str(e).startswith(str(loc)):
            e = InterpreterError(f"{loc}: {e}")
        e.located = True
        raise e from None
    if isinstance(e, TiledslError):
        raise e
    pre = f"{loc}: " if loc is not None else ""
    err = InterpreterError(f"{pre}interpreter error ({type(e).__name__}: {e})")
    err.located = True
    raise err from e
