"""cp.async on the interpreter: each thread keeps a queue of copy groups; a copy becomes visible at the
wait_group / wait_all that covers its group (never before), with src-size zero fill. The L2 qualifiers and the
cache policy are hints and change no result."""
from __future__ import annotations

import numpy as np

from ...interpreter.operands import AddrOp, native_error, operand, predicated
from ...ir import nodes as ir
from .pattern import Form


def semantics(n: ir.Native, cx):
    form: Form = n.form
    loc = n.loc
    if form.kind == "commit":
        def commit(m, idx):
            rows = m.all if idx is None else idx
            m.cp_open[rows] += 1
        return predicated(commit, n, cx, [])
    if form.kind in ("wait", "wait_all"):
        if form.kind == "wait":
            if len(n.groups) != 1 or not isinstance(n.groups[0][0], ir.Imm):
                raise native_error(n, "wait_group takes one immediate")
            keep = int(n.groups[0][0].text, 0)
        else:
            keep = 0

        def wait(m, idx):
            rows = m.all if idx is None else idx
            if form.kind == "wait_all":
                m.cp_open[rows] += 1
            limit = np.full(m.N, -1, np.int64)
            limit[rows] = m.cp_open[rows] - keep
            cp_complete(m, limit)
        return wait
    g = n.groups
    if len(g) < 3 or not isinstance(g[0][0], ir.Addr) or not isinstance(g[1][0], ir.Addr) or \
            not isinstance(g[2][0], ir.Imm):
        raise native_error(n, "operands are [dst], [src], cp-size{, src-size}{, cache-policy}")
    dst, src = AddrOp(g[0][0], cx), AddrOp(g[1][0], cx)
    if dst.st.scope != "shared" or src.st.scope != "global":
        raise native_error(n, "copies global memory to shared memory")
    N = int(g[2][0].text, 0)
    if N not in (4, 8, 16) or (form.cache == "cg" and N != 16):
        raise native_error(n, f"cp-size {N} is not valid for cp.async.{form.cache}")
    # .L2::cache_hint appends the cache policy, a hint only: the copy means the same without it
    nsize = len(g) - 3 - form.hint
    size_op = operand(g[3][0], cx) if nsize > 0 else None

    def core(m, idx):
        rows = m.all if idx is None else idx
        db, sb = dst.bytes(m, idx), src.bytes(m, idx)
        for what, b, st in (("destination", db, dst.st), ("source", sb, src.st)):
            mis = b % N != 0
            if np.any(mis):
                raise m.fault(loc, f"misaligned cp.async {what}: byte offset {int(b[np.flatnonzero(mis)[0]])} of "
                                   f"'{st.name}' is not a multiple of {N}", m.first(idx, mis))
        if size_op is not None:
            ss = np.asarray(size_op.value(m, idx)).astype(np.int64)
            ss = np.broadcast_to(ss, rows.shape)
            if np.any((ss < 0) | (ss > N)):
                bad = (ss < 0) | (ss > N)
                raise m.fault(loc, f"cp.async src-size {int(ss[np.flatnonzero(bad)[0]])} is outside 0..{N}",
                              m.first(idx, bad))
        else:
            ss = np.full(rows.shape, N, np.int64)
        smem, dmem = m.mem[src.st], m.mem[dst.st]
        m.check(dmem, np.uint8, db, idx, loc, "write")
        m.check(dmem, np.uint8, db + (N - 1), idx, loc, "write")
        reads = ss > 0
        if np.any(reads):
            m.check(smem, np.uint8, np.where(reads, sb, 0), idx, loc, "read")
            m.check(smem, np.uint8, np.where(reads, sb + ss - 1, 0), idx, loc, "read")
        k = np.arange(N)
        take = k[None, :] < ss[:, None]
        offs = np.where(take, sb[:, None] + k[None, :], 0)
        data = np.where(take, smem.raw[offs], np.uint8(0)).astype(np.uint8)
        if m.race is not None:                   # pending until the wait that covers it (races.py)
            m.race.cp_issue(dmem, rows, db, N, loc)
        m.cp_records.append([rows.copy(), db.copy(), data, m.cp_open[rows].copy(), dst.st])
    return predicated(core, n, cx, [])


def cp_complete(m, limit):
    """Make visible every pending copy of thread t whose group id is below limit[t]."""
    keep = []
    for rec in m.cp_records:
        rows, db, data, gid, st = rec
        done = gid < limit[rows]
        if np.any(done):
            mem = m.mem[st]
            r, b, dd = rows[done], db[done], data[done]
            k = np.arange(dd.shape[1])
            mem.raw[m.blk[r][:, None], b[:, None] + k[None, :]] = dd
            if m.race is not None:
                m.race.cp_land(mem, r, b, dd.shape[1])
            if not np.all(done):
                keep.append([rows[~done], db[~done], data[~done], gid[~done], st])
        else:
            keep.append(rec)
    m.cp_records = keep
