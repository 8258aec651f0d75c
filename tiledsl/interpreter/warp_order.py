"""Warps in a shuffled order between barriers: `TILEDSL_INTERPRET_ORDER=random` (issue 33).

The interpreter runs a block's threads in lockstep: every statement runs for all warps before the next starts, so
a kernel whose result depends on the order of its warps (a race: a read that a missing barrier leaves unordered
after another warp's write) always gets the writer-first answer. In the random order each warp of the block runs
on its own (one warp of every block of the batch together: blocks never wait for each other) from one block-wide
barrier to the next, the warps in an order drawn from `TILEDSL_INTERPRET_SEED` (default 0), drawn again after
every barrier. A correct kernel gives the same result under every seed; a racy one may not.

A warp runs as a Python thread that holds a baton (exactly one runs at a time, so a seed gives one order, run
after run). A warp that reaches `syncthreads` hands the baton on; when every warp still running has reached it the
barrier completes and the next phase starts in a new order (a barrier that a warp which left the kernel never
reaches is a fault, as in lockstep). Kernels that wait on anything else (mbarriers, named barriers, setmaxnreg; interpreter/fibers.py runs
those) and cluster launches keep the lockstep order.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

from ..core import knobs
from .fibers import WAITS, blocking

_STACK = 256 << 20          # a warp runs the same deep closures as the main thread (depth.py raises its limit)


class _Abort(BaseException):
    """Another warp failed: this one stops where it waits."""


def shuffled(kernel, block, cluster) -> np.random.Generator | None:
    """The generator of this launch's warp orders, or None to run in lockstep."""
    if knobs.interpret_order() != "random":
        return None
    if block[0] * block[1] * block[2] <= 32 or tuple(cluster) != (1, 1, 1) or blocking(kernel.body, WAITS):
        return None
    return np.random.default_rng(knobs.interpret_seed())


class WarpOrder:
    """The warps of one machine (batch of blocks), run one at a time in a shuffled order between barriers."""

    def __init__(self, m, rng: np.random.Generator):
        self.m, self.rng = m, rng
        warp = m.lin // 32
        self.groups = [np.flatnonzero(warp == w) for w in range(int(warp.max()) + 1)]
        self.cv = threading.Condition()
        self.turn = None                   # the warp holding the baton
        self.queue = []                    # the warps still to run in this phase, in order
        self.waiting = []                  # the warps at the barrier
        self.done = 0
        self.finished = 0                  # warps that left the kernel (not by a failure)
        self.loc = None                    # where the open barrier is
        self.error = None
        self.abort = False
        self.me = {}                       # thread ident -> warp

    def run(self, body):
        n = len(self.groups)
        self.queue = [int(w) for w in self.rng.permutation(n)]
        threads = [threading.Thread(target=self._warp, args=(w, body), daemon=True) for w in range(n)]
        old = threading.stack_size()
        threading.stack_size(_STACK)
        try:
            for t in threads:
                t.start()
        finally:
            threading.stack_size(old)
        with self.cv:
            self.turn = self.queue.pop(0)
            self.cv.notify_all()
            while self.done < n:
                self.cv.wait()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error

    def _warp(self, w, body):
        with self.cv:
            while self.turn != w and not self.abort:
                self.cv.wait()
        self.me[threading.get_ident()] = w
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
        try:
            if not self.abort:
                with np.errstate(all="ignore"):
                    body(self.m, self.groups[w])
                self.finished += 1
        except _Abort:
            pass
        except BaseException as e:         # the first failure is the launch's; the other warps stop
            if self.error is None:
                self.error = e
            self.abort = True
        with self.cv:
            self.done += 1
            self._advance()
            self.cv.notify_all()

    def _advance(self):
        """Pass the baton (the condition held): the next warp of this phase, else a new phase when every warp
        still running waits at the barrier."""
        if self.abort:
            self.turn = None
        elif self.queue:
            self.turn = self.queue.pop(0)
        elif self.waiting and self.finished:
            # as in lockstep (program.py's _whole_blocks): every thread of the block must reach a syncthreads
            self.error = self.m.fault(self.loc, f"barrier (syncthreads) reached by {len(self.waiting)} of the "
                                                f"block's {len(self.groups)} warps: the others left the kernel; every "
                                                f"thread of the block must reach it", int(self.groups[self.waiting[0]][0]))
            self.abort = True
            self.turn = None
        elif self.waiting:
            if self.m.race is not None:
                self.m.race.block_barrier(None)
            self.queue = [int(w) for w in self.rng.permutation(self.waiting)]
            self.waiting = []
            self.turn = self.queue.pop(0)
        else:
            self.turn = None

    def barrier(self, idx, loc):
        """The calling warp (its active threads `idx`) reached syncthreads at `loc`: run the others, return when
        the barrier completes."""
        w = self.me[threading.get_ident()]
        # each block of the batch that reaches it (blocks may leave a loop at different times) brings its whole warp
        per = len(self.groups[w]) // self.m.nb
        counts = np.bincount(self.m.blk[idx], minlength=self.m.nb)
        if np.any((counts != 0) & (counts != per)):
            raise self.m.fault(loc, "barrier (syncthreads) reached by part of a warp under divergent control flow; "
                                    "every thread of the block must reach it", int(idx[0]) if len(idx) else None)
        self.loc = loc
        with self.cv:
            self.waiting.append(w)
            self._advance()
            self.cv.notify_all()
            while self.turn != w and not self.abort:
                self.cv.wait()
            if self.abort:
                raise _Abort()
