"""Divergent branches that wait for each other: a warp-specialised kernel's producer and consumer.

The interpreter runs threads in masked lockstep, so an `if`/`else` runs its `then` part to the end before its
`else` part starts. That is wrong for a kernel whose two parts hand data to each other through mbarriers (a
producer warpgroup filling a ring of stages, a consumer emptying it): on the GPU the warps run independently, and
the producer's wait for an empty stage completes only when the consumer has arrived. So an `if` with both parts
written and a wait inside (`blocking` below says which) runs its `else` part as a *fiber*: it starts only when the
`then` part waits for something that has not happened yet, and each part resumes when the other has moved. A part
that syncs on a named barrier (`bar.sync`) runs one fiber per warpgroup: warpgroups running the same code may take
turns through named barriers (each waiting for the other's later arrival), which no lockstep order can give.

A fiber is a Python thread that runs only while it holds the baton: exactly one runs at any moment and the order
is fixed (the waiting fiber hands the baton to the next in creation order), so a run is as deterministic as
lockstep. A wait that no fiber can satisfy any more (every live fiber is waiting and nothing moved since) is the
deadlock the GPU would hang on: the wait reports it as a KernelFault, as it always did.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from ..ir import nodes as ir

# opcodes whose semantics may wait for another thread's progress (the mbarrier waits, named-barrier syncs, and
# setmaxnreg.inc, which waits for registers another warpgroup's dec frees)
WAITS = ("mbarrier.try_wait", "mbarrier.test_wait", "bar.sync", "bar.cta.sync", "barrier.sync", "barrier.cta.sync",
         "setmaxnreg.inc")
# the named-barrier syncs among them: warps running the same code may take turns through these
TURNS = ("bar.sync", "bar.cta.sync", "barrier.sync", "barrier.cta.sync")
WARPGROUP = 128             # threads of a warpgroup: the unit a part is split into when its warps take turns
_STACK = 256 << 20          # a fiber runs the same deep closures as the main thread (depth.py raises its limit)


def blocking(stmts, waits=WAITS) -> bool:
    """Whether a statement list contains a wait (one of `waits`) that another thread's progress completes."""
    for s in stmts:
        if isinstance(s, ir.Native) and s.opcode.startswith(waits):
            return True
        for sub in (getattr(s, "body", None), getattr(s, "then", None), getattr(s, "orelse", None)):
            if isinstance(sub, list) and blocking(sub, waits):
                return True
    return False


def groups(m, idx, turns: bool) -> list:
    """The active threads `idx` (flat ids) of one part of an if/else, grouped into the fibers that run it, lowest
    first. A part whose warps take turns through named barriers (`turns`) runs one fiber per warpgroup of the block:
    the same code, with the barrier id computed per warpgroup (FA3's ping-pong consumers), has each warpgroup wait
    for the other's later arrival, which no lockstep order can give. Each group keeps every block of the batch
    (the blocks run in lockstep), unless the batch runs a fiber per block (`m.per_block`, Program.run): then the
    groups are split by block too."""
    key = m.lin[idx] // WARPGROUP if turns else None
    if getattr(m, "per_block", False) and m.nb > 1:
        blk = m.blk[idx]
        key = blk if key is None else blk * (m.T // WARPGROUP + 1) + key
    if key is None:
        return [idx]
    return [idx[key == g] for g in np.unique(key)]


class _Fiber:
    __slots__ = ("run", "thread", "done", "error", "stamp", "waiting")

    def __init__(self, run):
        self.run, self.thread, self.done, self.error = run, None, False, None
        self.stamp, self.waiting = -1, False


class Fibers:
    """The fibers of one machine (one batch of blocks). `progress` counts the events a wait may be waiting
    for (an mbarrier update, a fiber ending); a fiber that waits records it, so a full round of waiters with no
    progress is a deadlock."""

    def __init__(self):
        self.cv = threading.Condition()
        self.live: list[_Fiber] = []
        self.main = _Fiber(None)
        self.main.thread = threading.current_thread()      # the interpreter's own thread: already running
        self.current = self.main
        self.progress = 0
        self.failed: list[BaseException] = []     # errors of fibers nobody joined yet
        self.doomed = None                          # a fiber whose next wait_turn reports the deadlock
        self.stuck = False                          # a wait found that no fiber could move any more

    # ---------------------------------------------------------------- the baton
    def _hand_to(self, f: _Fiber):
        """Give the baton to `f` (starting it if new) and sleep until it comes back to the caller."""
        me = self.current
        with self.cv:
            self.current = f
            if f.thread is None:
                f.thread = threading.Thread(target=self._body, args=(f,), daemon=True)
                old = threading.stack_size()
                threading.stack_size(_STACK)
                try:
                    f.thread.start()
                finally:
                    threading.stack_size(old)
            self.cv.notify_all()
            while self.current is not me:
                self.cv.wait()

    def _body(self, f: _Fiber):
        with self.cv:
            while self.current is not f:
                self.cv.wait()
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
        try:
            # numpy's error state is per thread: a fiber's arithmetic is the GPU's as the main thread's is (an
            # inf or NaN quietly, no warning; Program.run ignores them there)
            with np.errstate(all="ignore"):
                f.run()
        except BaseException as e:          # handed to whoever joins this fiber, or to the next waiter
            f.error = e
            self.failed.append(e)
        with self.cv:
            f.done = True
            self.progress += 1
            self.live.remove(f)
            self.current = self._next_after(f) or self.main
            self.cv.notify_all()

    def _next_after(self, f: _Fiber):
        """The fiber after `f` in the fixed order (the main thread first), or None."""
        order = [self.main] + self.live
        if f in order:
            i = order.index(f)
            order = order[i + 1:] + order[:i]
        return order[0] if order else None

    # ---------------------------------------------------------------- the interface
    def spawn(self, run) -> _Fiber:
        """A fiber that will run `run()` when the baton first reaches it."""
        f = _Fiber(run)
        self.live.append(f)
        return f

    def join(self, f: _Fiber, on_deadlock):
        """Return when `f` has ended (running others while it has not), re-raising its error;
        `on_deadlock()` raises when nothing can move any more."""
        while not f.done:
            if not self.wait_turn():
                if f.waiting:       # let the waiting part report its own wait (which barrier, which phase)
                    self.doomed = f
                    self._hand_to(f)
                    if f.done:
                        break
                on_deadlock()
        if f.error is not None:
            if f.error in self.failed:
                self.failed.remove(f.error)
            raise f.error

    def wait_turn(self) -> bool:
        """The calling fiber cannot go on yet: let the others run, and come back. False when no other fiber can
        move (all are waiting and nothing changed since they began to), which is a deadlock."""
        me = self.current
        if self.doomed is me:
            self.doomed = None
            self.stuck = True
            return False
        me.stamp, me.waiting = self.progress, True
        others = [f for f in [self.main] + self.live if f is not me]
        if not others or all(f.waiting and f.stamp == self.progress for f in others):
            me.waiting = False
            self.stuck = True
            return False
        self._hand_to(self._next_after(me))
        me.waiting = False
        if self.failed and me is self.main:     # a fiber failed while this one waited: its error wins
            raise self.failed.pop(0)
        return True

    def moved(self):
        """Something a waiter may wait for has happened."""
        self.progress += 1


def fibers_of(m):
    """The machine's fibers (made on first use)."""
    f = getattr(m, "fibers", None)
    if f is None:
        f = m.fibers = Fibers()
    return f


def wait_turn(m) -> bool:
    """For a wait's semantics: let the machine's other fibers run; False when none can (a deadlock). When a
    setmaxnreg.inc is among the stalled waits, the deadlock is raised as its fault (m.stalled, set by the
    cluster family's semantics): the registers it waits for are the cause the other waits stall behind."""
    f = getattr(m, "fibers", None)
    if f is not None and f.wait_turn():
        return True
    stalled = getattr(m, "stalled", None)
    if stalled is not None:
        raise stalled
    return False


def moved(m):
    f = getattr(m, "fibers", None)
    if f is not None:
        f.moved()
