"""Named barriers (pattern.py) on the interpreter, from the PTX ISA ("bar, barrier").

Each block has barriers 0..15. A barrier counts arrivals per *phase*, warp by warp (the ISA marks a warp's
arrival: every thread of the warp takes part, so the interpreter requires whole warps and counts 32 per warp).
The phase's expected count is the instruction's `b` (all threads of the CTA, rounded up to whole warps, when no
`b` is given); every arrival of one phase must name the same count. When the arrivals reach it the phase
completes and the barrier starts the next phase at zero. `bar.arrive` counts and goes on; `bar.sync` counts and
then waits for the phase it arrived in to complete.

Threads run in masked lockstep. A wait that is still open once every thread reached it can only be completed by
the other part of a warp-specialised if/else (interpreter/fibers.py lists these waits so such an if/else runs its
parts as fibers); when none can move, the wait is a KernelFault naming the barrier, its phase and its arrivals,
where the GPU would hang. One lockstep statement is executed by its warps in warp order, so warps past a full
phase start the next one.
"""
from __future__ import annotations

import numpy as np

from ...interpreter.fibers import moved, wait_turn
from ...interpreter.operands import native_error, operand, warps
from ...ir import nodes as ir
from .pattern import NBARRIERS, WARP, Form


def semantics(n: ir.Native, cx):
    form: Form = n.form
    g = n.groups
    if len(g) not in (1, 2) or (form.kind == "arrive" and len(g) != 2):
        raise native_error(n, "operands are a{, b}")
    bar_id = _reader(g[0][0], cx)
    count = _reader(g[1][0], cx) if len(g) == 2 else None
    loc, sync, name = n.loc, form.kind == "sync", n.opcode

    def f(m, idx):
        w = warps(m, idx, n)                             # (warps, 32) flat ids; faults on a partial warp
        first = w[:, 0]
        ids = _per_warp(m, loc, w, bar_id(m, idx), "barrier id a")
        most = -(-m.T // WARP)
        if count is None:
            want = np.full(len(first), most, np.int64)
        else:
            c = _per_warp(m, loc, w, count(m, idx), "thread count b")
            bad = (c <= 0) | (c % WARP != 0) | (c > most * WARP)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise m.fault(loc, f"{name} with thread count {int(c[k])}: the count must be a positive multiple "
                                   f"of {WARP} no larger than the block's {m.T} threads", int(first[k]))
            want = c // WARP
        bad = (ids < 0) | (ids >= NBARRIERS)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise m.fault(loc, f"{name} on barrier {int(ids[k])}: a CTA has the barriers 0..{NBARRIERS - 1}",
                          int(first[k]))
        state = _states(m)
        blk = m.blk[first]
        race = m.race
        mine = []                                        # (key, phase arrived in, first thread) per warp
        for k in range(len(first)):
            key = (int(blk[k]), int(ids[k]))
            st = state.setdefault(key, [0, 0, 0])       # [expected warps of the open phase, arrived warps, phase]
            if st[1] and st[0] != want[k]:
                raise m.fault(loc, f"{name} on barrier {key[1]} with {int(want[k]) * WARP} threads while its open "
                                   f"phase counts to {st[0] * WARP} (every arrival of a phase must name the same "
                                   f"count; undefined in the PTX ISA)", int(first[k]))
            st[0] = int(want[k])
            st[1] += 1
            mine.append((key, st[2], int(first[k])))
            if race is not None:                         # the warp's clock goes into the phase (races.py)
                race.release(("bar",) + key, race.row[first[k]])
            if st[1] == st[0]:                           # the phase completes; the next starts empty
                if race is not None:
                    race.complete(("bar",) + key, st[2])
                    race.rel.pop(("bar",) + key, None)
                st[1] = 0
                st[2] += 1
        moved(m)
        if not sync:
            return
        while True:
            open_ = [(key, ph, t) for key, ph, t in mine if state[key][2] == ph]
            if not open_:
                if race is not None:                     # each warp learns what its phase released
                    for key, ph, t in mine:
                        race.acquire(("bar",) + key, race.row[t], ph)
                return
            key, ph, t = open_[0]
            # the other part of a warp-specialised if/else may still arrive (interpreter/fibers.py)
            if not wait_turn(m):
                st = state[key]
                raise m.fault(loc, f"{name} on barrier {key[1]} can never complete: phase {ph} has {st[1] * WARP} "
                                   f"of the {st[0] * WARP} threads it waits for (too few warps reach barrier "
                                   f"{key[1]}; on the GPU this hangs)", t)
    return f


def _reader(a, cx):
    """A closure (m, idx) -> int64 values of an operand: an immediate, or a run-time value per thread."""
    if isinstance(a, ir.Imm):
        v = int(a.text, 0)
        return lambda m, idx: np.int64(v)
    op = operand(a, cx)
    return lambda m, idx: np.asarray(op.value(m, idx)).astype(np.int64)


def _per_warp(m, loc, w, values, what: str):
    """One value per warp of `w`, after checking that each warp's threads agree (the ISA's warp-wide operands)."""
    v = np.asarray(values, np.int64)
    if v.ndim == 0:
        return np.full(len(w), int(v), np.int64)
    v = v.reshape(len(w), WARP)
    split = (v != v[:, :1]).any(axis=1)
    if split.any():
        k = int(np.flatnonzero(split)[0])
        raise m.fault(loc, f"the threads of one warp give different values of the {what} "
                            f"({sorted(set(v[k].tolist()))[:4]}): a warp arrives as a whole", int(w[k, 0]))
    return v[:, 0].copy()


def _states(m) -> dict:
    st = getattr(m, "named_barriers", None)
    if st is None:
        st = m.named_barriers = {}
    return st
