"""Register-slot forwarding: within one basic block, a load of a slot (a variable's alloca, or a local buffer's
element at a constant index) whose value codegen already holds is answered with that SSA value instead of a new
load instruction.

A GEMM's expanded IR reads every register operand from its slot before each native and writes every result back;
LLVM's SROA/mem2reg turns all of that into SSA values anyway, but only after parsing and optimising it (~5500 of
the GEMM's ~14000 instructions were such loads). Forwarding here is what mem2reg does inside a block, so the
optimised IR is the same. A store is dropped only when a later store in the same block writes the same slot with
no read of the buffer's memory between them (a later block, a dynamically indexed read or an asm that was given
the buffer's address reads memory, so the last store of a block stays). What keeps it exact:

- a value is known only in the block it was stored or loaded in, and in blocks that block dominates where codegen
  says so (an if's branches and its join, less the slots the branches may write: `snapshot` / `resume`); any
  other change of the builder's block forgets all; a store is dropped only for a later store in its own block;
- slots of one buffer accessed as different types overlap (bit views): a store through one type forgets the
  buffer's slots of every other type; a store at a run-time index forgets the whole buffer;
- a buffer whose address is handed to an asm (an `Addr` of local scope: the asm may write it) is never forwarded.
"""
from __future__ import annotations

from ...ir import nodes as ir


class SlotValues:
    def __init__(self, kernel):
        self.block = None
        self.vals = {}               # id(pointer) -> (pointer, its current value)
        self.groups = {}             # group (a buffer's id, or a variable's slot id) -> {type name: {id(pointer)}}
        self.pending = {}            # group -> {id(pointer): its last store in this block, not read since}
        self.dead = {}               # id(store) -> store: overwritten before anything read it
        self.escaped = _escaped_buffers(kernel.body)

    def _at(self, block):
        if block is not self.block:
            self.vals.clear()
            self.groups.clear()
            self.pending.clear()
            self.block = block

    def get(self, block, ptr, typ):
        """The value `ptr` holds in `block`, if known and of type `typ`; else None."""
        self._at(block)
        hit = self.vals.get(id(ptr))
        if hit is None:
            return None
        v = hit[1]
        return v if v.type is typ or v.type == typ else None

    def put(self, block, ptr, value, group, tname, store=None):
        """`ptr` (of `group`, read or written as type `tname`) holds `value` in `block`: loaded by a load, or
        written by the instruction `store`. A store first forgets the group's slots of other types, which may
        overlap it, and makes an earlier store to `ptr` in this block that nothing read dead."""
        if group in self.escaped:
            return
        self._at(block)
        if store is None:
            self.pending.pop(group, None)        # a load read the buffer's memory: its stores so far are needed
        else:
            waiting = self.pending.get(group)
            if waiting is None:
                waiting = self.pending[group] = {}
            old = waiting.get(id(ptr))
            if old is not None:
                self.dead[id(old)] = old
            waiting[id(ptr)] = store
        by_type = self.groups.get(group)
        if by_type is None:
            by_type = self.groups[group] = {}
        if store is not None and (len(by_type) > 1 or (by_type and tname not in by_type)):
            for t in [t for t in by_type if t != tname]:
                for pid in by_type.pop(t):
                    self.vals.pop(pid, None)
        pids = by_type.get(tname)
        if pids is None:
            pids = by_type[tname] = set()
        pids.add(id(ptr))
        self.vals[id(ptr)] = (ptr, value)

    def snapshot(self, block):
        """What is known at the end of `block` so far."""
        self._at(block)
        return dict(self.vals), {g: {t: set(p) for t, p in by.items()} for g, by in self.groups.items()}

    def resume(self, block, known, written=()):
        """Start `block`, which the block of `known` dominates, with what was known there, less the groups in
        `written` (stored to on some path between them). Stores before it are all kept."""
        vals, groups = known
        self.block = block
        self.pending = {}
        self.vals = dict(vals)
        self.groups = {g: {t: set(p) for t, p in by.items()} for g, by in groups.items()}
        for g in written:
            self.forget(g)

    def read(self, group):
        """A load at a run-time index from a buffer: every store to it so far is needed."""
        self.pending.pop(group, None)

    def sweep(self, fn):
        """Remove the dead stores from `fn`'s blocks (nothing uses a store, so nothing else changes)."""
        if not self.dead:
            return
        for blk in fn.blocks:
            blk.instructions[:] = [i for i in blk.instructions if id(i) not in self.dead]

    def forget(self, group):
        """A store at a run-time index into a buffer: any of its slots may have changed."""
        for pids in self.groups.pop(group, {}).values():
            for pid in pids:
                self.vals.pop(pid, None)


def written_slots(body) -> set:
    """The groups (ids of variables and local buffers) that `body` may store to, nested statements included."""
    out = set()
    for s in ir.walk_stmts(body):
        if isinstance(s, (ir.Assign, ir.For)):
            out.add(id(s.var))
        elif isinstance(s, ir.Store) and s.storage.scope == "local":
            out.add(id(s.storage))
        elif isinstance(s, ir.Native):
            for group in s.groups:
                for a in group:
                    if isinstance(a, (ir.Reg, ir.Addr)) and a.storage.scope == "local":
                        out.add(id(a.storage))
    return out


def _escaped_buffers(body) -> set:
    """ids of local buffers whose address an asm receives."""
    out = set()
    for s in ir.walk_stmts(body):
        if isinstance(s, ir.Native):
            for group in s.groups:
                for a in group:
                    if isinstance(a, ir.Addr) and a.storage.scope == "local":
                        out.add(id(a.storage))
    return out
