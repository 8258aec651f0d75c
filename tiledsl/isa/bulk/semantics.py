"""Bulk copies and mbarriers (pattern.py) on the interpreter.

An mbarrier's state lives beside shared memory, keyed by (block, storage, byte offset): the expected arrival count,
the arrivals still pending in the current phase, the transaction bytes still owed, and the phase number. A bulk
copy lands at once and pays its bytes (a bulk reduction adds its float32 values into global memory at once, one
issuing thread after another in thread order: the sum does not depend on the order but for float32 rounding); a phase completes when no arrival is pending and no byte is owed. Threads
run in lockstep, so a wait whose phase has not completed by the time every thread reaches it can never complete
(unless the other part of a warp-specialised if/else is still to run: interpreter/fibers.py): that is reported as
a KernelFault naming the barrier's state, where the GPU would hang.
"""
from __future__ import annotations

import numpy as np

from ...interpreter.fibers import moved, wait_turn
from ...interpreter.operands import AddrOp, native_error, operand, predicated
from ...ir import nodes as ir
from .pattern import Form


def semantics(n: ir.Native, cx):
    form: Form = n.form
    g = n.groups
    loc = n.loc
    if form.kind == "fence":
        if form.opcode.startswith("fence.proxy.async"):
            def fence(m, idx):
                if m.race is not None:
                    m.race.fence(idx)
            return fence
        return lambda m, idx: None
    if form.kind == "copy":                           # cp.async.bulk ... [dst], [src], bytes, [mbar]
        if len(g) != 4 or not isinstance(g[2][0], ir.Imm):
            raise native_error(n, "operands are [dst], [src], size, [mbar]")
        dst, src, bar = AddrOp(g[0][0], cx), AddrOp(g[1][0], cx), AddrOp(g[3][0], cx)
        size = int(g[2][0].text, 0)

        def copy(m, idx):
            db, sb, smem, dmem = _checked_spans(m, idx, loc, dst, src, size, "bulk copy")
            rows = m.rows(dmem, idx)
            if m.race is not None:
                _race_copy(m, idx, loc, bar, db, sb, smem, dmem, size)
            k = np.arange(size)
            dmem.raw[rows[:, None], db[:, None] + k[None, :]] = smem.raw[sb[:, None] + k[None, :]]
            _update(m, idx, bar, loc, tx=-size)
        return predicated(copy, n, cx, [])
    if form.kind == "reduce":                         # cp.reduce.async.bulk ... .add.f32 [dst], [src], bytes
        if len(g) != 3 or not isinstance(g[2][0], ir.Imm):
            raise native_error(n, "operands are [dst], [src], size")
        dst, src = AddrOp(g[0][0], cx), AddrOp(g[1][0], cx)
        size = int(g[2][0].text, 0)

        def reduce(m, idx):
            db, sb, smem, dmem = _checked_spans(m, idx, loc, dst, src, size, "bulk reduction")
            srows = m.rows(smem, idx)
            if m.race is not None and smem.scope == "shared":
                flat = m.all if idx is None else idx
                gr = m.race.granules(smem, np.arange(size), 1)
                for pos in range(m.n(idx)):
                    m.race.async_read(smem, srows[pos], gr, sb[pos], int(flat[pos]), loc, "bulk reduction")
            sf, df = smem.view(np.float32), dmem.view(np.float32)
            k = np.arange(size // 4)
            for pos in range(m.n(idx)):              # one thread after another: blocks may overlap
                df[db[pos] // 4 + k] += sf[srows[pos], sb[pos] // 4 + k]
        return predicated(reduce, n, cx, [])
    if form.kind == "init":
        bar, count = AddrOp(g[0][0], cx), operand(g[1][0], cx)

        def init(m, idx):
            c = np.broadcast_to(np.asarray(count.value(m, idx)).astype(np.int64), (m.n(idx),))
            state = _states(m)
            for key, cnt in zip(_keys(m, idx, bar), c):
                if cnt < 1:
                    raise m.fault(loc, f"mbarrier.init with count {int(cnt)}: the count must be at least 1")
                if m.race is not None:
                    m.race.mbar_init(key, state.get(key))
                state[key] = [int(cnt), int(cnt), 0, 0]
        return init
    if form.kind == "expect_tx":
        bar, tx = AddrOp(g[1][0], cx), operand(g[2][0], cx)

        def expect(m, idx):
            t = np.broadcast_to(np.asarray(tx.value(m, idx)).astype(np.int64), (m.n(idx),))
            _update(m, idx, bar, loc, tx=t, arrive=True)
        return expect
    if form.kind == "arrive":
        bar = AddrOp(g[1][0], cx)
        return lambda m, idx: _update(m, idx, bar, loc, arrive=True)
    if form.kind == "remote_arrive":                 # mapa to CTA `rank` of the cluster, then arrive there
        bar, rank = AddrOp(g[1][0], cx), operand(g[2][0], cx)

        def remote(m, idx):
            r = np.broadcast_to(np.asarray(rank.value(m, idx)).astype(np.int64), (m.n(idx),))
            bad = (r < 0) | (r >= getattr(m, "csize", 1))
            if bad.any():
                raise m.fault(loc, f"mapa to CTA rank {int(r[np.flatnonzero(bad)[0]])}, outside the cluster of "
                                   f"{getattr(m, 'csize', 1)} block(s)", m.first(idx, bad))
            _update(m, idx, bar, loc, arrive=True, rows=m.cluster_rows(idx, r))
        return remote
    if form.kind == "wait":
        bar, parity = AddrOp(g[0][0], cx), operand(g[1][0], cx)

        def wait(m, idx):
            p = np.broadcast_to(np.asarray(parity.value(m, idx)).astype(np.int64), (m.n(idx),))
            state = _states(m)
            keys = _keys(m, idx, bar)
            while True:
                for pos, (key, want) in enumerate(zip(keys, p)):
                    st = state.get(key)
                    if st is None:
                        raise m.fault(loc, "mbarrier wait on a barrier that was never initialised",
                                      _flat(idx, pos))
                    if st[3] % 2 == want % 2:
                        break
                else:
                    if m.race is not None:               # the waiters learn what the completed phase released
                        rows = m.race.row[m.all if idx is None else idx]
                        for key in set(keys):
                            m.race.acquire(key, np.unique(rows[[k == key for k in keys]]))
                    return
                # the other part of a warp-specialised if/else may still arrive (interpreter/fibers.py)
                if not wait_turn(m):
                    raise m.fault(loc, f"mbarrier wait for phase parity {int(want)} can never complete: phase "
                                       f"{st[3]} still expects {st[1]} arrival(s) and {st[2]} transaction bytes "
                                       f"(on the GPU this hangs)", _flat(idx, pos))
        return wait
    raise native_error(n, "the interpreter has no semantics for this opcode")


def _race_copy(m, idx, loc, bar, db, sb, smem, dmem, size):
    """The race detector's view of a bulk copy (races.py): into shared memory, the bytes are written by the
    mbarrier's agent in the phase they complete; out of shared memory, they are read through the async proxy."""
    race = m.race
    flat = m.all if idx is None else idx
    if dmem.scope == "shared":
        gr = race.granules(dmem, np.arange(size), 1)
        keys = _keys(m, idx, bar)
        rows = m.rows(dmem, idx)
        state = _states(m)
        for pos, key in enumerate(keys):
            st = state.get(key)
            if st is not None:
                race.async_write(dmem, rows[pos], gr, db[pos], int(flat[pos]), loc, key, st)
    if smem.scope == "shared":
        gr = race.granules(smem, np.arange(size), 1)
        srows = m.rows(smem, idx)
        for pos in range(m.n(idx)):
            race.async_read(smem, srows[pos], gr, sb[pos], int(flat[pos]), loc, "bulk copy from shared memory")


def _checked_spans(m, idx, loc, dst: AddrOp, src: AddrOp, size: int, what: str):
    """(destination byte offsets, source byte offsets, source memory, destination memory) of the issuing threads, once
    both spans of `size` bytes are 16-byte aligned and lie inside their memories: a bulk copy and a bulk reduction
    owe the same checks before they move a byte (a fault names `what`, the user's line and the first bad thread)."""
    db, sb = dst.bytes(m, idx), src.bytes(m, idx)
    _aligned(m, idx, loc, db, sb, what)
    smem, dmem = m.mem[src.st], m.mem[dst.st]
    # the first and the last byte of each span: the spans are contiguous, so these bound every byte between
    m.check(smem, np.uint8, sb, idx, loc, "read")
    m.check(smem, np.uint8, sb + size - 1, idx, loc, "read")
    m.check(dmem, np.uint8, db, idx, loc, "write")
    m.check(dmem, np.uint8, db + size - 1, idx, loc, "write")
    return db, sb, smem, dmem


def _aligned(m, idx, loc, db, sb, what: str):
    for side, b in (("destination", db), ("source", sb)):
        if np.any(b % 16):
            bad = b % 16 != 0
            raise m.fault(loc, f"misaligned {what} {side}: byte offset {int(b[bad][0])} is not a multiple of 16",
                          m.first(idx, bad))


def _states(m) -> dict:
    st = getattr(m, "mbarriers", None)
    if st is None:
        st = m.mbarriers = {}
    return st


def _keys(m, idx, bar: AddrOp, rows=None):
    b = bar.bytes(m, idx)
    blk = rows if rows is not None else m.blk if idx is None else m.blk[idx]
    return [(int(k), bar.st.name, int(o)) for k, o in zip(blk, b)]


def _update(m, idx, bar: AddrOp, loc, tx=0, arrive=False, rows=None):
    """Each executing thread pays `tx` bytes (negative: a copy landed; positive: expect_tx) and may arrive; `rows`:
    the batch blocks whose barriers they reach (another CTA's, through mapa), else their own."""
    state = _states(m)
    txs = np.broadcast_to(np.asarray(tx, np.int64), (m.n(idx),))
    race = m.race
    for pos, (key, t) in enumerate(zip(_keys(m, idx, bar, rows), txs)):
        st = state.get(key)
        if st is None:
            raise m.fault(loc, "mbarrier used before mbarrier.init", _flat(idx, pos))
        st[2] += int(t)
        if arrive:
            if st[1] == 0:
                raise m.fault(loc, "more arrivals than the mbarrier's count in one phase",
                              _flat(idx, pos))
            st[1] -= 1
            if race is not None:                      # the arriving warp's clock goes into the phase (an
                race.release(key, race.row[_flat(idx, pos)])   # arrival from another CTA only adds knowledge)
        if st[1] == 0 and st[2] == 0:                 # the phase completes; the next expects `count` again
            if race is not None:
                race.mbar_complete(key, st)
            st[3] += 1
            st[1] = st[0]
    moved(m)


def _flat(idx, pos: int) -> int:
    """Flat thread id of the pos-th executing thread."""
    return pos if idx is None else int(idx[pos])
