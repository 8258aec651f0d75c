"""Machine state for one batch of blocks run in lockstep: threads, variables, memories, faults.

Threads of every block in the batch sit on one flat axis: flat id = batch_block * threads_per_block + linear tid.
Every per-thread value is a numpy array over that axis. Code runs on an *active set* `idx`: None for all threads,
or a sorted int64 array of flat ids (divergent control flow narrows it).

Memory is raw bytes so a load/store of any dtype reads/writes the bits in place:
  global  - the user's array itself (1-D byte view sharing its memory),
  shared  - (blocks in batch, bytes): one copy per block,
  local   - (threads in batch, bytes): one copy per thread.
Fresh shared and local memory is filled with 0xFF bytes (NaN / -1) so reliance on uninitialised data shows.
"""
from __future__ import annotations

import numpy as np

from ..core import dtypes as dt
from ..core.errors import KernelFault, TiledslError
from .coords import tuple3 as _tuple3
from .races import Races


class InterpreterError(TiledslError):
    """The interpreter cannot model something in this kernel (an opcode without semantics, ...)."""


POISON_BYTE = 0xFF


def mem_np(d: dt.DType):
    """numpy dtype of one element of `d` as it sits in memory (bool as a byte, bfloat16 as uint16 bits)."""
    if d.kind == "bool":
        return np.dtype(np.uint8)
    return np.dtype(dt.numpy_types()[d.name])


def val_np(d: dt.DType):
    """numpy dtype of a per-thread value of `d`."""
    return np.dtype(np.bool_) if d.kind == "bool" else np.dtype(dt.numpy_types()[d.name])


UINT = {1: np.uint8, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def poison_bits(d: dt.DType):
    """An undefined register value: a NaN for float registers, a 0xDEADBEEF pattern for integer ones."""
    if d.is_float:
        return {16: 0x7EAD if d.name == "float16" else 0x7FAD, 32: 0x7FFFDEAD, 64: 0x7FF8DEADBEEFDEAD}[d.bits]
    return {8: 0xAD, 16: 0xDEAD, 32: 0xDEADBEEF, 64: 0xDEADBEEFDEADBEEF}.get(d.bits, 0)


class Memory:
    """One storage's bytes and cached typed views of them."""

    __slots__ = ("storage", "scope", "raw", "views", "nbytes")

    def __init__(self, storage, raw):
        self.storage = storage
        self.scope = storage.scope
        self.raw = raw
        self.nbytes = raw.shape[-1]
        self.views = {}

    def view(self, npdt) -> np.ndarray:
        v = self.views.get(npdt)
        if v is None:
            size = np.dtype(npdt).itemsize
            n = self.nbytes // size
            v = self.raw[..., :n * size].view(npdt)
            self.views[npdt] = v
        return v


class Machine:
    """One batch of `nb` blocks (global linear block ids block0 .. block0+nb-1, or the ids `blocks` lists) of `T`
    threads each. With a `cluster` other than (1, 1, 1) the batch holds whole clusters, each one's blocks next to
    each other in rank order, so the shared memory of rank r of a thread's cluster is batch row
    `cluster_base + r` (distributed shared memory, `cluster_rows`)."""

    def __init__(self, prog, grid, block, block0, nb, globals_, blocks=None, cluster=(1, 1, 1)):
        self.prog = prog
        self.grid, self.block = grid, block
        self.T = block[0] * block[1] * block[2]
        self.block0, self.nb = block0, nb
        self.blocks = np.arange(block0, block0 + nb, dtype=np.int64) if blocks is None else np.asarray(blocks)
        self.cluster = tuple(cluster)
        self.csize = cluster[0] * cluster[1] * cluster[2]
        self.N = N = self.T * nb
        flat = np.arange(N, dtype=np.int64)
        self.all = flat
        self.lin = (flat % self.T)                          # linear tid inside the block
        self.blk = flat // self.T                           # block inside the batch
        gblk = self.blocks[self.blk]
        self.special = {}
        tx, ty, tz = _tuple3(self.lin, block)
        bx, by, bz = _tuple3(gblk, grid)
        i32 = np.int32
        for ax, (t, b) in enumerate(zip((tx, ty, tz), (bx, by, bz))):
            self.special[("tid", ax)] = t.astype(i32)
            self.special[("ctaid", ax)] = b.astype(i32)
            self.special[("ntid", ax)] = np.full(N, block[ax], i32)
            self.special[("nctaid", ax)] = np.full(N, grid[ax], i32)
        c = self.cluster
        cid = [b % n for b, n in zip((bx, by, bz), c)]
        for ax in range(3):
            self.special[("cluster.ctaid", ax)] = cid[ax].astype(i32)
            self.special[("clusterid", ax)] = ((bx, by, bz)[ax] // c[ax]).astype(i32)
        self.special[("cluster.ctarank", 0)] = (cid[0] + c[0] * (cid[1] + c[1] * cid[2])).astype(i32)
        self.special[("cluster.nctarank", 0)] = np.full(N, self.csize, i32)
        self.special[("laneid", 0)] = (self.lin % 32).astype(i32)
        self.special[("warpid", 0)] = (self.lin // 32).astype(i32)
        self.vars = {}
        self.mem = dict(globals_)
        for st in prog.allocs:
            nbytes = st.size * max(1, st.dtype.bits // 8)
            rows = nb if st.scope == "shared" else N
            self.mem[st] = Memory(st, np.full((rows, nbytes), POISON_BYTE, np.uint8))
        # registers an asynchronous instruction (wgmma) has yet to write: (storage, 4-byte word) -> (thread mask,
        # what wrote it); touching one before the wait that completes it is a KernelFault (see hold/release)
        self.pending = {}
        self.cp_records = []                                # cp.async copies not yet visible
        self.cp_open = np.zeros(N, np.int64)                # per thread: id of the group being filled
        # the race detector (races.py), unless TILEDSL_RACECHECK=0
        self.race = Races(self) if getattr(prog, "racecheck", False) else None

    # -------------------------------------------------------------- helpers
    def n(self, idx) -> int:
        return self.N if idx is None else len(idx)

    def rows(self, mem: Memory, idx):
        if mem.scope == "shared":
            return self.blk if idx is None else self.blk[idx]
        return self.all if idx is None else idx

    def cluster_rows(self, idx, rank) -> np.ndarray:
        """The batch rows (blocks) of CTA `rank` of each active thread's cluster (mapa's target)."""
        blk = self.blk if idx is None else self.blk[idx]
        return blk - blk % self.csize + np.asarray(rank, np.int64)

    def where(self, flat: int) -> str:
        b = int(self.blocks[flat // self.T])
        t = flat % self.T
        bi = tuple(int(v) for v in _tuple3(b, self.grid))
        ti = tuple(int(v) for v in _tuple3(t, self.block))
        return f"block {bi}, thread {ti}"

    def fault(self, loc, msg, flat: int | None = None):
        where = f" ({self.where(flat)})" if flat is not None else ""
        pre = f"{loc}: " if loc is not None else ""
        line = ""
        if loc is not None and getattr(loc, "text", None):
            line = f"\n    {loc.text.strip()}"
        return KernelFault(f"{pre}{msg}{where}{line}")

    def first(self, idx, mask=None) -> int:
        """Flat id of the first active thread (where `mask` holds, if given)."""
        pos = 0 if mask is None else int(np.flatnonzero(np.broadcast_to(mask, (self.n(idx),)))[0])
        return pos if idx is None else int(idx[pos])

    # -------------------------------------------------------------- memory access
    def check(self, mem: Memory, npdt, off, idx, loc, what):
        size = np.dtype(npdt).itemsize
        if self.pending and mem.scope == "local":
            self.check_pending(mem.storage, off, size, idx, loc, what)
        n_el = mem.nbytes // size
        if np.ndim(off) == 0:
            o = int(off)
            if 0 <= o < n_el:
                return
            bad = None
        else:
            badm = (off < 0) | (off >= n_el)
            if not badm.any():
                return
            bad = badm
            o = int(np.asarray(off)[np.flatnonzero(badm)[0]])
        flat = self.first(idx, bad)
        st = mem.storage
        raise self.fault(loc, f"out-of-bounds {what} of '{st.name}' ({st.scope} memory, {n_el} elements of "
                              f"{np.dtype(npdt).name}): element offset {o}", flat)

    def read(self, mem: Memory, npdt, off, idx, loc, plain=True):
        # plain: an indexing load (X[i]); the ld natives (isa/memory) may carry .acquire/.volatile and are not
        # checked against global memory
        self.check(mem, npdt, off, idx, loc, "read")
        if self.race is not None and mem.scope != "local":
            if mem.scope == "shared":
                self.race.access(mem, npdt, off, idx, loc, False)
            elif plain:
                self.race.global_access(mem, npdt, off, idx, loc, False)
        a = mem.view(npdt)
        if mem.scope == "global":
            return a[off]
        if np.ndim(off) == 0 and idx is None and mem.scope == "local":
            return a[:, int(off)].copy()
        return a[self.rows(mem, idx), off]

    def write(self, mem: Memory, npdt, off, val, idx, loc, plain=True):
        self.check(mem, npdt, off, idx, loc, "write")
        if self.race is not None and mem.scope != "local":
            if mem.scope == "shared":
                self.race.access(mem, npdt, off, idx, loc, True)
            elif plain:
                self.race.global_access(mem, npdt, off, idx, loc, True)
        a = mem.view(npdt)
        if mem.scope == "global":
            if np.ndim(off) == 0:
                v = np.asarray(val)
                a[int(off)] = v if v.ndim == 0 else v[-1]      # many threads, one word: the last one wins
            else:
                a[off] = val
            return
        if np.ndim(off) == 0 and idx is None and mem.scope == "local":
            a[:, int(off)] = val
            return
        a[self.rows(mem, idx), off] = val

    # -------------------------------------------------------------- registers an async instruction will write
    def hold(self, st, word: int, flat, what: str):
        """Register word `word` (4 bytes) of local storage `st` is written asynchronously for threads `flat`."""
        key = (st, word)
        cur = self.pending.get(key)
        mask = cur[0] if cur is not None else np.zeros(self.N, bool)
        mask[flat] = True
        self.pending[key] = (mask, what)

    def release(self, st, word: int, flat):
        """The asynchronous write of `word` has completed for threads `flat`."""
        cur = self.pending.get((st, word))
        if cur is not None:
            cur[0][flat] = False
            if not cur[0].any():
                del self.pending[(st, word)]

    def check_pending(self, st, off, size, idx, loc, what, held=False):
        """A fault if the active threads touch a pending register word of `st` (element offset(s) `off`)."""
        offs = np.unique(np.asarray(off)) if np.ndim(off) else [off]
        for o in offs:
            lo, hi = int(o) * size // 4, (int(o) * size + size - 1) // 4
            for word in range(lo, hi + 1):
                cur = self.pending.get((st, word))
                if cur is None:
                    continue
                mask = cur[0] if idx is None else cur[0][idx]
                if np.ndim(off):
                    mask = mask & (np.asarray(off) == o)
                if mask.any():
                    raise self.fault(loc, f"{what} of register {st.name}[{int(o)}] while {cur[1]} has not "
                                          f"completed: its accumulators are undefined until the matching "
                                          f"wgmma.wait_group", self.first(idx, mask))

    # -------------------------------------------------------------- registers (local storage, static index)
    def reg_read(self, st, index, npdt, idx):
        if self.pending:
            self.check_pending(st, index, np.dtype(npdt).itemsize, idx, getattr(self, "native_loc", None), "read")
        a = self.mem[st].view(npdt)
        return a[:, index].copy() if idx is None else a[idx, index]

    def reg_write(self, st, index, npdt, val, idx):
        if self.pending:
            self.check_pending(st, index, np.dtype(npdt).itemsize, idx, getattr(self, "native_loc", None), "write")
        a = self.mem[st].view(npdt)
        if idx is None:
            a[:, index] = val
        else:
            a[idx, index] = val

    def var_array(self, var):
        arr = self.vars.get(var)
        if arr is None:
            arr = self.vars[var] = np.zeros(self.N, val_np(var.dtype))
        return arr


def sub(idx, mask):
    """The active set narrowed to where `mask` holds."""
    if idx is None:
        return np.flatnonzero(mask)
    return idx[mask]
