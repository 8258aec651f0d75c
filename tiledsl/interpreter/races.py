"""The interpreter's race detector: shared- and global-memory accesses that no synchronisation orders (issue 33).

The interpreter runs a block's threads in lockstep, so on it every race is resolved in the writer's favour and a
missing barrier is invisible. This module remembers, for every granule of shared memory (the storage's element,
at most 4 bytes), its last writer and its last reader, and checks every access against them with vector clocks:

- An *agent* is a warp of the block (threads of one warp are never checked against each other: a converged warp's
  lanes and the warp-synchronous idioms the interpreter models stay silent, so intra-warp races are not reported),
  or an mbarrier standing for the asynchronous copies (TMA, cp.async.bulk) that complete on it.
- Each warp has its own epoch, and knows a clock per agent: the latest epoch of that agent ordered before it
  (`vc`, one row per warp of the batch). A release (bar.sync/bar.arrive, syncthreads, mbarrier arrive,
  barrier.cluster.arrive, fence.proxy.async) publishes the warp's clock and starts a new epoch; an acquire
  (the completion of the barrier phase it took part in, an mbarrier wait, barrier.cluster.wait) merges the clocks
  published before the phase completed.
- A read is a race when the granule's last write was made by another agent in an epoch the reader does not know;
  a write also when the last read was. The fault names both source lines, both threads and the element.
- Asynchronous copies: cp.async writes are pending until the wait_group/wait_all that covers them (any access to a
  pending granule, even by the issuing thread, is a race); TMA and bulk copies into shared memory are written by
  their mbarrier's agent, in the phase they complete, so only a thread that waited for that phase may read them;
  TMA stores, bulk stores and wgmma read shared memory through the async proxy, so a generic write they read must
  be followed by a fence.proxy.async of its writer (checked besides the ordering).
- Atomics are ordered among themselves (no race between two atomic writes), not against plain accesses.

Global memory: plain loads and stores of the tensors a kernel stores to are checked the same way between the warps
of one block (GlobalShadow); accesses of different blocks are never checked against each other.

It errs towards silence: whatever it does not model (remote shared memory of a cluster, other blocks' global
accesses, the ld/st/atom natives on global memory) is never reported, and only the last reader of a granule is kept, so some races are missed; a report is always a pair of
accesses that nothing the interpreter models orders. `TILEDSL_RACECHECK=0` turns it off.
"""
from __future__ import annotations

import numpy as np

from ..core.errors import KernelFault
from .coords import tuple3

PLAIN, ATOMIC, PENDING, ASYNC, CP = 0, 1, 2, 3, 4       # how a granule was last written
GLOBAL_BYTES = 64 << 20     # global tensors up to this size are watched (their shadow costs 3x their size)
SLOTS = 64                  # mbarriers per block that can stand for asynchronous writers (more: not tracked)
# A stamp packs one access into an int64 (0: none): bits 0-7 the agent, 8-10 the kind of write, 11-21 the linear
# thread id (blocks have at most 1024 threads), 22-37 the source line's id, 38- the agent's epoch
AGENT = 255
KIND = 8
LIN = 11
LOC = 22
EP = 38


class Shadow:
    """The last write and the last read of every granule of one shared storage, for every block of the batch;
    flat arrays indexed by row * n + granule."""

    __slots__ = ("st", "g", "esize", "n", "w_stamp", "r_stamp", "rowbase", "w_gen", "r_gen", "unsafe")

    def __init__(self, st, rows, nbytes, blk):
        self.st = st
        self.esize = max(1, st.dtype.bits // 8)
        self.g = g = min(self.esize, 4)
        self.n = n = -(-nbytes // g)
        self.w_stamp = np.zeros(rows * n, np.int64)        # 0: never written (epoch 0 is before everything)
        self.r_stamp = np.zeros(rows * n, np.int64)
        self.rowbase = blk * n                              # per flat thread: its block's first cell
        # the count of block-wide barriers of the batch when it was last written / read: accesses made before the
        # last one are known to every warp, so an access then needs no check (unless an asynchronous agent wrote)
        self.w_gen = self.r_gen = -1
        self.unsafe = False

    def cells(self, rows, byte, size):
        """Shadow indices of accesses of `size` bytes at byte offsets `byte` in batch rows `rows`: shape
        byte.shape, or byte.shape + (granules,) for an access wider than a granule."""
        base = np.asarray(rows, np.int64) * self.n + np.asarray(byte, np.int64) // self.g
        if size <= self.g:
            return base
        return base[..., None] + np.arange(size // self.g)


class GlobalShadow(Shadow):
    """The last write and read of every granule of one global tensor, for the blocks of the batch: global memory
    is one array for all of them, so each granule also remembers the batch row (block) of its last writer and
    reader, and only accesses of one block are checked against each other (blocks are not ordered by anything
    this detector models: their accesses to one element are the grid's business, never reported)."""

    __slots__ = ("w_blk", "r_blk")

    def __init__(self, st, nbytes):
        super().__init__(st, 1, nbytes, np.zeros(1, np.int64))
        self.w_blk = np.full(self.n, -1, np.int32)
        self.r_blk = np.full(self.n, -1, np.int32)


class Races:
    """The detector of one Machine (one batch of blocks)."""

    def __init__(self, m):
        self.m = m
        self.W = W = -(-m.T // 32)
        self.A = W + 4                                     # grows with the mbarriers standing for async copies
        self.rows = rows = m.nb * W
        self.bar_gen = 0                                   # block-wide barriers every block of the batch passed
        self.vc = np.zeros((rows + 1, self.A), np.int64)   # the last row: scratch (a warpgroup's merged clock)
        self.vc[np.arange(rows), np.arange(rows) % W] = 1
        self.vcf = self.vc.reshape(-1)
        self.scratch = rows
        self.fenced = np.zeros(rows, np.int64)             # per warp: its writes up to this epoch are fenced
        self.me = (m.lin // 32).astype(np.int64)           # per flat thread: its agent (warp in the block)
        self.row = (m.blk * W + self.me).astype(np.int64)  # per flat thread: its row of vc
        self._offsets()
        self.lin64 = m.lin.astype(np.int64)
        self._stamps = None                                # per flat thread: its warp's current stamp (cache)
        self.shadows = {}
        self.gshadows = {}                                 # global storage -> GlobalShadow (None: too large)
        self.locs, self.loc_ids = [], {}
        self.slots = {}                                    # (mbarrier storage, byte offset) -> agent
        self.rel = {}                                      # barrier key -> clocks released into its open phase
        self.done = {}                                     # (barrier key, tag) -> clocks of its completed phase
        self.base = {}                                     # mbarrier key -> epochs of its agent before its init

    def _offsets(self):
        self.vcf = self.vc.reshape(-1)
        self.rowA = self.row * self.A                      # per flat thread: its row as an offset into vcf
        self.own = self.rowA + self.me                     # ... and its own epoch's
        r = np.arange(self.rows)
        self.diag = r * self.A + r % self.W                # per warp row: its own epoch's offset
        self._stamps = None

    def _grow(self):
        """Room for more asynchronous agents: the clocks gain columns (zero: nothing known of them yet)."""
        old = self.A
        self.A = min(self.W + SLOTS, old + 8)
        vc = np.zeros((self.vc.shape[0], self.A), np.int64)
        vc[:, :old] = self.vc
        self.vc = vc
        self._offsets()
        for d in (self.rel, self.done):
            for k, v in d.items():
                d[k] = np.concatenate([v, np.zeros(self.A - len(v), np.int64)])

    # ------------------------------------------------------------------ bookkeeping
    def shadow(self, mem) -> Shadow:
        sh = self.shadows.get(mem.storage)
        if sh is None:
            sh = self.shadows[mem.storage] = Shadow(mem.storage, self.m.nb, mem.nbytes, self.m.blk)
        return sh

    def loc_id(self, loc) -> int:
        k = id(loc)
        i = self.loc_ids.get(k)
        if i is None:
            i = self.loc_ids[k] = len(self.locs)
            self.locs.append(loc)
        return i

    def flat(self, idx):
        return self.m.all if idx is None else idx

    def bump(self, rows):
        """Warps `rows` start a new epoch."""
        self.vc[rows, rows % self.W] += 1
        self._stamps = None

    def stamps(self):
        """Per flat thread: the stamp its plain access would leave now (its warp's epoch, its thread, its warp)."""
        s = self._stamps
        if s is None:
            s = self._stamps = (self.vcf[self.own] << EP) | (self.lin64 << LIN) | self.me
        return s

    # ------------------------------------------------------------------ the check
    def check(self, sh: Shadow, cell, thr, loc, write, wrow=None, me=None, kind=PLAIN, proxy=None, record=True):
        """Check the accesses of threads `thr` (flat ids, broadcast to `cell`) to shadow cells `cell` against the
        granules' last write (and last read, for a write), then record them. `wrow`/`me`: the accessing warp's vc
        row and agent (default: the thread's own); `kind` of a write; `proxy`: the async-proxy instruction that
        reads (a generic write it reads must have been fenced)."""
        thr = np.broadcast_to(thr, np.shape(cell))
        if wrow is None:
            wrow, me = self.row[thr], self.me[thr]
        else:
            wrow = np.broadcast_to(wrow, np.shape(cell))
            me = np.broadcast_to(me, np.shape(cell))
        base = wrow * self.A
        ws = sh.w_stamp[cell]
        wa = ws & AGENT
        bad = ((ws >> EP) > self.vcf[base + wa]) & (wa != me)
        pend = bool(self.m.cp_records)
        if pend or kind == ATOMIC or proxy is not None:
            wk = (ws >> KIND) & 7
            if kind == ATOMIC:
                bad &= wk != ATOMIC
            if pend:
                bad |= wk == PENDING
        if kind == ATOMIC:
            proxy = "atomic write"
        if bad.any():
            self.report(sh, cell, thr, loc, write, bad, "w", proxy)
        if proxy is not None and kind != ATOMIC:
            wrows = (np.asarray(cell) // sh.n) * self.W + np.minimum(wa, self.W - 1)
            fen = (wk == PLAIN) & (wa < self.W) & (ws != 0) & ((ws >> EP) > self.fenced[wrows])
            if fen.any():
                self.report(sh, cell, thr, loc, write, fen, "fence", proxy)
        if write:
            rs = sh.r_stamp[cell]
            ra = rs & AGENT
            bad = ((rs >> EP) > self.vcf[base + ra]) & (ra != me)
            if bad.any():
                self.report(sh, cell, thr, loc, write, bad, "r", proxy)
        if not record:
            return
        stamp = (self.vcf[base + me] << EP) | (self.lin64[thr] << LIN) | me | self.tag(loc, kind)
        if write:
            sh.w_stamp[cell] = stamp
            sh.w_gen = self.bar_gen
        else:
            sh.r_stamp[cell] = stamp
            sh.r_gen = self.bar_gen

    def record_async(self, sh: Shadow, cell, agent, epoch, thr, loc, kind=ASYNC):
        """Granules `cell` are written by an asynchronous agent in `epoch` (a TMA or bulk copy's mbarrier, the
        phase it completes); `thr` issued it at `loc`."""
        sh.w_stamp[cell] = (int(epoch) << EP) | (int(self.m.lin[thr]) << LIN) | agent | self.tag(loc, kind)
        sh.w_gen, sh.unsafe = self.bar_gen, True

    # ------------------------------------------------------------------ the message
    def tag(self, loc, kind=PLAIN) -> int:
        """The stamp bits of a source line and a kind of write."""
        return (min(self.loc_id(loc), 0xFFFF) << LOC) | (kind << KIND)

    def _thread(self, lin):
        return tuple(int(v) for v in tuple3(lin, self.m.block))

    def report(self, sh: Shadow, cell, thr, loc, write, bad, against, proxy):
        m = self.m
        pos = tuple(int(v[0]) for v in np.nonzero(bad))
        c = int(np.asarray(cell)[pos])
        t = int(np.asarray(thr)[pos])
        row, gr = divmod(c, sh.n)
        space = "shared"
        if isinstance(sh, GlobalShadow):
            row, space = int(m.blk[t]), "global"
        byte = gr * sh.g
        el = byte // sh.esize
        blk = tuple(int(v) for v in _block3(int(m.blocks[row]), m.grid))
        if against == "r":
            stamp, prev = int(sh.r_stamp[c]), "read"
        else:
            stamp = int(sh.w_stamp[c])
            kind = (stamp >> KIND) & 7
            prev = {PLAIN: "write", ATOMIC: "atomic write", PENDING: "cp.async write",
                    ASYNC: "asynchronous write (TMA or bulk copy)", CP: "cp.async write"}[kind]
        ploc, plin = self.locs[(stamp >> LOC) & 0xFFFF], (stamp >> LIN) & 2047
        agent = stamp & AGENT
        me_what = proxy or ("write" if write else "read")
        here = f"thread {self._thread(int(m.lin[t]))}"
        there = f"thread {self._thread(plin)}"
        if against == "fence":
            why = (f"the {me_what} reads shared memory through the async proxy, but that generic write was not "
                   f"followed by a fence.proxy.async (fence.proxy.async.shared::cta) of its thread before the barrier "
                   f"that orders it: the {me_what} may read the old bytes")
        elif against == "w" and (stamp >> KIND) & 7 == PENDING:
            why = ("the cp.async is still copying these bytes: no cp.async.wait_group/wait_all of the issuing thread "
                   "(then a barrier, for another warp) completes that copy first")
        elif agent >= self.W:
            why = (f"the {prev} lands asynchronously and completes on an mbarrier phase this warp never waited for: "
                   f"wait on that mbarrier (the stage's full barrier) before the {me_what}")
        else:
            hint = ("a producer refilling a stage must wait on the consumers' empty barrier, arrived on after "
                    "their reads" if against == "r" else
                    "a bar.sync/syncthreads, or an mbarrier arrive and wait, between them")
            why = (f"nothing orders the {prev} (warp {agent}) before the {me_what} (warp {int(self.me[t])}): no "
                   f"barrier both took part in, no mbarrier phase or cp.async wait between them ({hint})")
        ptext = f"\n    {ploc.text.strip()}" if getattr(ploc, "text", None) else ""
        ltext = f"\n    {loc.text.strip()}" if getattr(loc, "text", None) else ""
        pre = f"{loc}: " if loc is not None else ""
        raise KernelFault(f"{pre}data race on {space} memory '{sh.st.name}' element {el} (byte {byte}) in block "
                          f"{blk}: the {me_what} by {here} at {loc}{ltext}\nconflicts with the {prev} by {there} "
                          f"at {ploc}{ptext}\n{why}")

    # ------------------------------------------------------------------ plain accesses
    def access(self, mem, npdt, off, idx, loc, write):
        """ld/st of one element (or one per thread) of shared memory: Machine.read/write. The common case (one
        granule per thread, no report) is done here with as few numpy passes as possible."""
        sh = self.shadow(mem)
        size = _SIZES.get(npdt)
        if size is None:
            size = _SIZES[npdt] = np.dtype(npdt).itemsize
        if size == sh.g and not self.m.cp_records:
            if idx is None:
                cell = sh.rowbase + off
                rowA, stamp = self.rowA, self.stamps()
            else:
                cell = sh.rowbase[idx] + off
                rowA, stamp = self.rowA[idx], self.stamps()[idx]
            gen = self.bar_gen
            if sh.w_gen < gen and not sh.unsafe and (not write or sh.r_gen < gen):
                bad = None                  # every access before the last block-wide barrier is ordered
            else:
                ws = sh.w_stamp[cell]
                bad = (ws >> EP) > self.vcf[rowA + (ws & AGENT)]
                if write:
                    rs = sh.r_stamp[cell]
                    bad |= (rs >> EP) > self.vcf[rowA + (rs & AGENT)]
            if bad is None or not bad.any():
                if write:
                    sh.w_stamp[cell] = stamp | self.tag(loc)
                    sh.w_gen = gen
                else:
                    sh.r_stamp[cell] = stamp | self.tag(loc)
                    sh.r_gen = gen
                return
        thr = self.flat(idx)
        byte = np.broadcast_to(np.asarray(off, np.int64) * size, thr.shape)
        self.check(sh, sh.cells(self.m.blk[thr], byte, size), thr if size <= sh.g else thr[:, None], loc, write)

    def global_access(self, mem, npdt, off, idx, loc, write):
        """A plain load or store (`X[i]` in the kernel) of global memory: checked like shared memory's, but only
        against earlier accesses of the same block (GlobalShadow)."""
        sh = self.gshadows.get(mem.storage, False)
        if sh is False:
            # a tensor the kernel never stores to has no race; one too large to shadow cheaply is not watched
            # (the detector errs towards silence)
            watched = mem.storage in self.m.prog.stored_globals and mem.nbytes <= GLOBAL_BYTES
            sh = self.gshadows[mem.storage] = GlobalShadow(mem.storage, mem.nbytes) if watched else None
        if sh is None:
            return
        gen = self.bar_gen
        size = _SIZES.get(npdt)
        if size is None:
            size = _SIZES[npdt] = np.dtype(npdt).itemsize
        m = self.m
        if size == sh.g:
            # the common case: one granule per thread, every per-thread array used as it is when all are active
            if idx is None:
                t, blk, rowA, stamp = m.all, m.blk, self.rowA, self.stamps()
            else:
                t, blk, rowA, stamp = idx, m.blk[idx], self.rowA[idx], self.stamps()[idx]
            cell = off if np.ndim(off) else np.full(len(t), int(off), np.int64)
        else:
            thr = self.flat(idx)
            cell = sh.cells(0, np.broadcast_to(np.asarray(off, np.int64) * size, thr.shape), size)
            t = thr if cell.ndim == 1 else thr[:, None]
            blk, rowA, stamp = m.blk[t], self.rowA[t], self.stamps()[t]
        if not (sh.w_gen < gen and (not write or sh.r_gen < gen)):
            # (accesses before the last barrier every block of the batch passed are ordered: nothing to check)
            ws = sh.w_stamp[cell]
            bad = (ws >> EP) > self.vcf[rowA + (ws & AGENT)]
            if bad.any():
                bad &= sh.w_blk[cell] == blk
                if bad.any():
                    self.report(sh, cell, np.broadcast_to(t, np.shape(cell)), loc, write, bad, "w", None)
            if write:
                rs = sh.r_stamp[cell]
                bad = (rs >> EP) > self.vcf[rowA + (rs & AGENT)]
                if bad.any():
                    bad &= sh.r_blk[cell] == blk
                    if bad.any():
                        self.report(sh, cell, np.broadcast_to(t, np.shape(cell)), loc, write, bad, "r", None)
        stamp = stamp | self.tag(loc)
        if write:
            sh.w_stamp[cell] = stamp
            sh.w_blk[cell] = blk
            sh.w_gen = gen
        else:
            sh.r_stamp[cell] = stamp
            sh.r_blk[cell] = blk
            sh.r_gen = gen

    def atomic(self, mem, size, el, idx, loc):
        sh = self.shadow(mem)
        thr = self.flat(idx)
        byte = np.broadcast_to(np.asarray(el, np.int64) * size, thr.shape)
        self.check(sh, sh.cells(self.m.blk[thr], byte, size), thr if size <= sh.g else thr[:, None], loc, True,
                   kind=ATOMIC)

    def matrix(self, mem, w, byte, loc, write):
        """ldmatrix/stmatrix: warps `w` (W, 32) give 16-byte rows at `byte` (W, rows)."""
        sh = self.shadow(mem)
        thr = w[:, :byte.shape[1]]
        cells = sh.cells(self.m.blk[thr], byte, 16)
        self.check(sh, cells, thr[..., None] if cells.ndim == 3 else thr, loc, write)

    # ------------------------------------------------------------------ barriers
    def block_barrier(self, idx):
        """syncthreads: every warp of each block that reaches it."""
        m, W = self.m, self.W
        v = self.vc[:m.nb * W].reshape(m.nb, W, self.A)
        if idx is None:
            v[...] = v.max(axis=1, keepdims=True)
            self.vcf[self.diag] += 1
            self._stamps = None
            self.bar_gen += 1
            return
        blocks = np.unique(m.blk[idx])
        sel = v[blocks]
        v[blocks] = sel.max(axis=1, keepdims=True)
        d = np.arange(W)
        v[blocks[:, None], d[None, :], d[None, :]] += 1
        self._stamps = None
        if len(blocks) == m.nb:
            self.bar_gen += 1

    def release(self, key, rows):
        """Warps `rows` arrive on barrier `key`: their clocks go into its open phase; each starts a new epoch."""
        rows = np.atleast_1d(rows)
        cur = self.vc[rows].max(axis=0)
        acc = self.rel.get(key)
        if acc is None:
            self.rel[key] = cur
        else:
            np.maximum(acc, cur, out=acc)
        self.bump(rows)

    def complete(self, key, tag=None, agent=None, epoch=0):
        """Barrier `key`'s phase completes: whoever acquires it learns what was released into it (and, for an
        mbarrier standing for asynchronous copies, that its agent reached `epoch`)."""
        acc = self.rel.get(key)
        done = np.zeros(self.A, np.int64) if acc is None else acc.copy()
        if agent is not None:
            done[agent] = max(done[agent], epoch)
        self.done[(key, tag)] = done

    def acquire(self, key, rows, tag=None):
        done = self.done.get((key, tag))
        if done is not None:
            rows = np.atleast_1d(rows)
            self.vc[rows] = np.maximum(self.vc[rows], done)

    def fence(self, idx):
        """fence.proxy.async: each executing warp's generic writes so far are visible to the async proxy."""
        rows = np.unique(self.row[self.flat(idx)])
        self.fenced[rows] = self.vc[rows, rows % self.W]
        self.bump(rows)

    # ------------------------------------------------------------------ mbarriers and their async writers
    def slot(self, key):
        """The agent standing for the asynchronous writes that complete on mbarrier `key` (block, name, offset),
        or None when every slot is taken."""
        k = key[1:]
        a = self.slots.get(k)
        if a is None and len(self.slots) < SLOTS:
            a = self.slots[k] = self.W + len(self.slots)
            if a >= self.A:
                self._grow()
        return a

    def mbar_init(self, key, old):
        if old is not None:
            self.base[key] = self.base.get(key, 0) + old[3] + 1
        self.rel.pop(key, None)
        self.done.pop((key, None), None)

    def mbar_epoch(self, key, st):
        """The epoch of an asynchronous write that pays its bytes into the open phase of mbarrier `key`."""
        return self.base.get(key, 0) + st[3] + 1

    def mbar_complete(self, key, st):
        self.complete(key, None, self.slot(key), self.base.get(key, 0) + st[3] + 1)

    def async_write(self, mem, rows, gran_rel, byte0, thr, loc, key, st, issuer_checks=True):
        """A TMA/bulk copy of the thread `thr` writes shared granules (relative granules `gran_rel` from byte
        `byte0`) of batch row `rows`, completing on mbarrier `key` whose state is `st`."""
        sh = self.shadow(mem)
        cells = int(rows) * sh.n + int(byte0) // sh.g + gran_rel
        if issuer_checks:
            self.check(sh, cells, np.int64(thr), loc, True, kind=ASYNC)
        agent = self.slot(key)
        if agent is None:
            sh.w_stamp[cells] = 0
            return
        self.record_async(sh, cells, agent, self.mbar_epoch(key, st), thr, loc)

    def async_read(self, mem, row, gran_rel, byte0, thr, loc, what, wg=None):
        """An async-proxy read (TMA/bulk store, wgmma) of shared granules by thread `thr`'s warp, or by the
        warpgroup `wg` (128 flat ids: ordered when any of its warps is; recorded as a read of its first warp)."""
        sh = self.shadow(mem)
        cells = int(row) * sh.n + int(byte0) // sh.g + gran_rel
        if wg is None:
            self.check(sh, cells, np.int64(thr), loc, False, proxy=what)
            return
        self.check(sh, cells, np.int64(thr), loc, False, wrow=self.warpgroup_clock(wg), me=-1, proxy=what,
                   record=False)
        me = int(self.me[thr])
        sh.r_stamp[cells] = (int(self.vc[self.row[thr], me]) << EP) | (int(self.m.lin[thr]) << LIN) | me | \
            self.tag(loc)
        sh.r_gen = self.bar_gen

    def granules(self, sh_mem, byte_rel, size):
        """Granule offsets (unique, sorted) covered by accesses of `size` bytes at relative byte offsets."""
        g = self.shadow(sh_mem).g
        b = np.asarray(byte_rel, np.int64).reshape(-1)
        return np.unique((b[:, None] + np.arange(size)[None, :]) // g)

    def warpgroup_clock(self, wg):
        """The merged clock of the warps of warpgroup `wg` (128 flat ids) in the scratch row."""
        rows = np.unique(self.row[wg])
        self.vc[self.scratch] = self.vc[rows].max(axis=0)
        return self.scratch

    # ------------------------------------------------------------------ cp.async
    def cp_issue(self, mem, rows_thr, db, size, loc):
        sh = self.shadow(mem)
        cells = sh.cells(self.m.blk[rows_thr], db, size)
        self.check(sh, cells, rows_thr if cells.ndim == 1 else rows_thr[:, None], loc, True, kind=PENDING)

    def cp_land(self, mem, r, b, size):
        """The copies of threads `r` at byte offsets `b` became visible (their wait): written by each issuing
        warp in its current epoch."""
        sh = self.shadow(mem)
        cells = sh.cells(self.m.blk[r], b, size)
        me = self.me[r]
        epoch = self.vcf[self.row[r] * self.A + me] << EP
        if cells.ndim == 2:
            epoch, me = epoch[:, None], me[:, None]
        keep = sh.w_stamp[cells] & (((1 << EP) - 1) & ~((1 << LIN) - 1))     # the issuing thread and line
        sh.w_stamp[cells] = epoch | keep | (CP << KIND) | me
        sh.w_gen = self.bar_gen

    def forget(self, mem, rows, byte, size):
        """A write this detector does not order (another block of the cluster): the granules start afresh."""
        sh = self.shadow(mem)
        cells = sh.cells(rows, byte, size)
        sh.w_stamp[cells] = 0
        sh.r_stamp[cells] = 0


_SIZES = {}


def _block3(b, grid):
    return b % grid[0], (b // grid[0]) % grid[1], b // (grid[0] * grid[1])
