"""The cluster family on the interpreter, from the PTX ISA.

The interpreter runs the blocks of a cluster in one batch, next to each other in rank order (program.py), so CTA
`rank` of a thread's cluster is the batch row `m.cluster_rows(idx, rank)`:

- {ld,st}.shared::cluster: mapa then the access: the element at the same offset of the same shared variable, in
  the shared memory of CTA `rank` of the issuing thread's cluster (a rank outside the cluster is a KernelFault).
- barrier.cluster.arrive / wait: each thread counts its arrivals; a wait completes the phase the thread arrived
  in once every thread of every CTA of its cluster has arrived in it (threads that returned count as arrived).
  Threads run in lockstep, so a wait reached before the whole cluster arrived can never complete: a KernelFault
  where the GPU would hang. Arriving twice without a wait, or waiting without an arrival, is undefined in the ISA:
  a KernelFault. The `.aligned` forms need every lane of the warp (checked).
- elect.sync: every executing lane must be in its membermask and every lane of the mask must execute it; the
  leader is the lowest lane of the mask (the ISA promises only a deterministic choice); d = the leader's lane,
  p = 1 in the leader, 0 elsewhere.
- setmaxnreg: whole warpgroups execute it (checked). With the kernel's register cap known (LaunchConfig
  max_registers), each block's warpgroups start at the cap and the block owns warpgroups x 128 x cap registers:
  `.dec` lowers the warpgroup's count at once, `.inc` waits until the raised count fits beside the others' (the
  warpgroups whose threads all returned hold none), as the GPU's does. A warp-specialised kernel's inc runs in a
  fiber (interpreter/fibers.py), so the producer's dec comes first whatever the branch order; an inc that no
  warpgroup's dec or exit will ever pay for is the deadlock the GPU hangs on: a KernelFault naming the line.
"""
from __future__ import annotations

import numpy as np

from ...interpreter import control, fibers
from ...interpreter.machine import UINT
from ...interpreter.operands import AddrOp, RegOp, native_error, operand, warps
from ...ir import nodes as ir
from .pattern import Form


def semantics(n: ir.Native, cx):
    form: Form = n.form
    if form.kind == "arrive":
        return _arrive(n)
    if form.kind == "wait":
        return _wait(n)
    if form.kind in ("st", "ld"):
        return _remote(n, cx)
    if form.kind == "elect":
        return _elect(n, cx)
    if form.kind == "setmaxnreg":
        return _setmaxnreg(n)
    raise native_error(n, "the interpreter has no semantics for this opcode")


def _counts(m):
    st = getattr(m, "cluster_barrier", None)
    if st is None:
        st = m.cluster_barrier = (np.zeros(m.N, np.int64), np.zeros(m.N, np.int64))     # arrivals, waits
    return st


def _flat(m, idx):
    return m.all if idx is None else idx


def _arrive(n):
    loc, aligned = n.loc, n.form.aligned

    def f(m, idx):
        if aligned:
            warps(m, idx, n)
        arrived, waited = _counts(m)
        t = _flat(m, idx)
        twice = arrived[t] > waited[t]
        if twice.any():
            raise m.fault(loc, "barrier.cluster.arrive again before barrier.cluster.wait (undefined in the PTX ISA)",
                          int(t[np.flatnonzero(twice)[0]]))
        arrived[t] += 1
        if m.race is not None:
            rows = np.unique(m.race.row[t])
            for b in np.unique(rows // m.race.W):
                m.race.release(("cluster", int(b)), rows[rows // m.race.W == b])
    return f


def _wait(n):
    loc, aligned = n.loc, n.form.aligned

    def f(m, idx):
        if aligned:
            warps(m, idx, n)
        arrived, waited = _counts(m)
        t = _flat(m, idx)
        lone = arrived[t] == waited[t]
        if lone.any():
            raise m.fault(loc, "barrier.cluster.wait without a barrier.cluster.arrive before it",
                          int(t[np.flatnonzero(lone)[0]]))
        have = arrived.copy()
        ex = getattr(m, "exit", None)
        if ex is not None:
            have[ex == control.RETURN] = np.iinfo(np.int64).max      # returned threads do not hold the barrier
        per = m.csize * m.T
        least = have.reshape(-1, per).min(axis=1)                     # per cluster of the batch
        short = least[t // per] < arrived[t]
        if short.any():
            k = int(t[np.flatnonzero(short)[0]])
            c = k // per
            missing = c * per + int(np.flatnonzero(have[c * per:(c + 1) * per] < arrived[k])[0])
            raise m.fault(loc, f"barrier.cluster.wait can never complete: {m.where(missing)} of the cluster has not "
                               f"arrived (divergent control flow, or a thread that never arrives; on the GPU this "
                               f"hangs)", k)
        waited[t] = arrived[t]
        if m.race is not None:
            rows = np.unique(m.race.row[t])
            for b in np.unique(rows // m.race.W):
                key = ("cluster", int(b))
                m.race.complete(key)
                m.race.acquire(key, rows[rows // m.race.W == b])
    return f


def _remote(n, cx):
    form, loc, g = n.form, n.loc, n.groups
    if form.kind == "st":
        addr, rank, val = AddrOp(g[0][0], cx), operand(g[1][0], cx), operand(g[2][0], cx)
    else:
        dst, addr, rank = RegOp(g[0][0]), AddrOp(g[1][0], cx), operand(g[2][0], cx)
    what = "write" if form.kind == "st" else "read"

    def f(m, idx):
        r = np.broadcast_to(np.asarray(rank.value(m, idx)).astype(np.int64), (m.n(idx),))
        bad = (r < 0) | (r >= m.csize)
        if bad.any():
            raise m.fault(loc, f"mapa to CTA rank {int(r[np.flatnonzero(bad)[0]])}, outside the cluster of "
                               f"{m.csize} block(s)", m.first(idx, bad))
        mem = m.mem[addr.st]
        u = UINT[addr.size * 8]
        off = addr.bytes(m, idx) // addr.size
        m.check(mem, u, off, idx, loc, f"remote {what}")
        rows = m.cluster_rows(idx, r)
        words = mem.view(u)
        if form.kind == "st" and m.race is not None:     # another block's write: not ordered here, forgotten
            m.race.forget(mem, rows, np.broadcast_to(off * addr.size, rows.shape), addr.size)
        if form.kind == "st":
            words[rows, off] = np.asarray(val.read(m, idx)).astype(u, copy=False)
        else:
            dst.store(m, idx, words[rows, off])
    return f


def _elect(n, cx):
    loc, g = n.loc, n.groups
    d = RegOp(g[0][0])
    p = RegOp(g[1][0]) if len(g) == 3 else None
    mask = operand(g[-1][0], cx)

    def f(m, idx):
        t = _flat(m, idx)
        mk = np.broadcast_to(np.asarray(mask.read(m, idx)).astype(np.int64), (len(t),))
        lane = m.lin[t] % 32
        warp = t - lane
        out = ~(mk >> lane) & 1
        if out.any():
            k = int(np.flatnonzero(out)[0])
            raise m.fault(loc, f"elect.sync executed by lane {int(lane[k])}, which its membermask "
                               f"{int(mk[k]):#010x} does not name (undefined in the PTX ISA)", int(t[k]))
        leader = np.zeros(len(t), np.int64)
        for w in np.unique(warp):
            sel = warp == w
            here = np.zeros(32, bool)
            here[lane[sel]] = True
            for mv in np.unique(mk[sel]):
                want = ((int(mv) >> np.arange(32)) & 1).astype(bool)
                if (want & ~here).any():
                    gone = int(np.flatnonzero(want & ~here)[0])
                    raise m.fault(loc, f"elect.sync with membermask {int(mv):#010x}: lane {gone} of the warp does "
                                       f"not execute it with the others (every lane of the mask must)",
                                  int(t[np.flatnonzero(sel)[0]]))
                leader[sel & (mk == mv)] = int(np.flatnonzero(want)[0])
        d.store(m, idx, leader.astype(np.uint32))
        if p is not None:
            p.store(m, idx, (lane == leader).astype(np.uint32))
    return f


def _setmaxnreg(n):
    loc = n.loc
    inc = n.form.inc
    want = int(n.groups[0][0].text)

    def f(m, idx):
        t = _flat(m, idx)
        group = t // m.T * (m.T // 128 + 1) + m.lin[t] // 128
        _, counts = np.unique(group, return_counts=True)
        if (counts != 128).any() or m.T % 128:
            raise m.fault(loc, f"{n.opcode} must be executed by all 128 threads of a warpgroup together (.sync."
                               f"aligned); here part of a warpgroup is inactive", m.first(idx))
        cap = getattr(m.prog.kernel.launch, "max_registers", None)
        if not cap:
            return                  # ptxas chooses the registers: the block's pool is not known here
        held = _registers(m, cap)
        W = m.T // 128
        pairs = np.unique(m.blk[t] * W + m.lin[t] // 128)      # the executing (block, warpgroup) pairs
        blk, wg = pairs // W, pairs % W
        if not inc:
            held[blk, wg] = want
            fibers.moved(m)
            return
        while True:
            ask = held.copy()
            ask[blk, wg] = want
            total = (ask * _live(m)).sum(axis=1)            # per block of the batch
            if (total[blk] <= W * cap).all():
                held[blk, wg] = want
                m.stalled = None
                fibers.moved(m)
                return
            b = int(blk[np.argmax(total[blk] > W * cap)])
            each = ", ".join(str(int(x)) for x in ask[b])
            # the fault this wait is if nothing frees registers (any wait that finds the deadlock raises it)
            m.stalled = m.fault(loc, f"{n.opcode} {want} waits for registers no warpgroup will free: the block "
                                     f"was launched with {m.T} threads x {cap} registers (max_registers) = "
                                     f"{m.T * cap}, and its warpgroups would hold 128 x ({each}) = "
                                     f"{128 * int(total[b])} (the GPU hangs here)", m.first(idx))
            if not fibers.wait_turn(m):
                raise m.stalled
    return f


def _registers(m, cap):
    """Per block of the batch and warpgroup: the registers a thread holds (setmaxnreg), from the launch's cap."""
    held = getattr(m, "setmaxnreg", None)
    if held is None:
        held = m.setmaxnreg = np.full((m.nb, m.T // 128), cap, np.int64)
    return held


def _live(m):
    """Per block and warpgroup: 1 while some thread of it has not returned (an exited warp frees its registers)."""
    ex = getattr(m, "exit", None)
    if ex is None:
        return 1
    gone = (ex == control.RETURN).reshape(m.nb, m.T // 128, 128).all(axis=2)
    return (~gone).astype(np.int64)
