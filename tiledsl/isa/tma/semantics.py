"""TMA tensor copies (pattern.py) on the interpreter, read from the PTX ISA and the CUDA driver API's description
of a tiled tensor map, independently of the pattern's layout proof.

A load moves the box at the thread's coordinates (innermost first, as the instruction lists them): every element
whose coordinate lies inside the tensor is read from global memory (row-major over the tensor's dimensions), every
other one is the map's fill (zero, or the canonical NaN of the element type); the box lands in shared memory
row-major, each 16-byte chunk moved by the swizzle's XOR of its byte address (chunk ^= row of 128 bytes mod 2, 4, 8
for 32, 64, 128 B), and the load pays the whole box's bytes to the mbarrier (the bulk family's barrier state).
An innermost coordinate that is not a multiple of 16 bytes is a KernelFault (the TMA unit needs the box's first
global address 16-byte aligned; the GPU stops such a copy with an illegal instruction).
A store writes the in-bounds elements of the box back from shared memory, read through the same swizzle.
Copies land when they are issued (the barrier or the bulk group orders them on the GPU); a prefetch, commit_group
and wait_group change nothing the interpreter can observe. A `.multicast::cluster` load lands at the same shared
offset in every CTA of the issuing thread's cluster that `cta_mask` names (the blocks of a cluster run together,
machine.cluster_rows) and pays the box's bytes to the mbarrier at the same offset in each of them; a mask bit at or
beyond the cluster's size is a KernelFault.
"""
from __future__ import annotations

import numpy as np

from ...interpreter.operands import AddrOp, native_error, operand
from ...ir import nodes as ir
from ..bulk.semantics import _keys, _states, _update
from .pattern import ALIGN, Form

UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
NAN_BITS = {"float16": 0x7FFF, "bfloat16": 0x7FFF, "float32": 0x7FFFFFFF, "float64": 0x7FFFFFFFFFFFFFFF}
SWIZZLE_BITS = {None: 0, 32: 1, 64: 2, 128: 3}


def swizzle_bytes(byte_off: np.ndarray, swizzle: int | None) -> np.ndarray:
    """The TMA unit's shared-memory swizzle of byte offsets: bits 4.. of the offset XOR bits 7.. (1, 2 or 3 bits)."""
    bits = SWIZZLE_BITS[swizzle]
    if not bits:
        return byte_off
    return byte_off ^ (((byte_off >> 7) & ((1 << bits) - 1)) << 4)


def semantics(n: ir.Native, cx):
    form: Form = n.form
    if form.kind in ("commit", "wait", "prefetch"):
        return lambda m, idx: None
    g = n.groups
    loc = n.loc
    if form.kind == "load":
        smem_op, tmap_op, coord_g, bar = g[0][0], g[1][0], g[2], g[3][0]
        extra = g[4:]
    else:
        tmap_op, coord_g, smem_op = g[0][0], g[1], g[2][0]
        extra = g[3:]
    if not isinstance(tmap_op, ir.Addr) or len(coord_g) != form.rank or form.tmap is None:
        raise native_error(n, "operands are [tmap, {coords}] and a shared box")
    smem, gst = AddrOp(smem_op, cx), tmap_op.storage
    coords = [operand(c, cx) for c in coord_g]                    # innermost first
    dims = [cx.expr(ir.as_expr(d)) if not isinstance(d, int) else d for d in form.dims]
    bar_op = AddrOp(bar, cx) if form.kind == "load" else None
    mask_op = operand(extra[0][0], cx) if form.multicast else None
    ann = form.tmap
    esize = ann.dtype.nbytes
    u = UINT[esize]
    box = ann.box                                                  # outer-to-inner
    grid = np.indices(box).reshape(len(box), -1)                   # box coordinates, row-major order
    nelem = grid.shape[1]
    sbytes = swizzle_bytes(np.arange(nelem, dtype=np.int64) * esize, ann.swizzle)
    align = ALIGN[ann.swizzle]

    def run(m, idx):
        cs = [np.broadcast_to(np.asarray(c.value(m, idx)).astype(np.int64), (m.n(idx),)) for c in coords]
        ds = [np.broadcast_to(np.asarray(d if isinstance(d, int) else d(m, idx)).astype(np.int64), (m.n(idx),))
              for d in dims]
        base = smem.bytes(m, idx)
        dmem, gmem = m.mem[smem.st], m.mem[gst]
        rows = m.rows(dmem, idx)
        gview = gmem.view(u)
        if mask_op is not None:
            masks = np.broadcast_to(np.asarray(mask_op.value(m, idx)).astype(np.int64), (m.n(idx),))
        for pos in range(m.n(idx)):
            flat = pos if idx is None else int(idx[pos])
            if base[pos] % align:
                raise m.fault(loc, f"the shared box starts at byte {int(base[pos])}, which is not a multiple of "
                                   f"{align} (the TMA unit's alignment for this swizzle)", flat)
            targets = [rows[pos]]
            if mask_op is not None:
                csize = getattr(m, "csize", 1)
                mk = int(masks[pos]) & 0xFFFF
                if mk >> csize:
                    raise m.fault(loc, f"cta_mask {mk:#x} names CTA ranks outside the cluster of {csize} "
                                       f"block(s)", flat)
                ranks = [r for r in range(csize) if mk >> r & 1]
                targets = [int(m.cluster_rows(np.array([flat]), r)[0]) for r in ranks]
            start = [int(cs[form.rank - 1 - k][pos]) for k in range(form.rank)]      # outer-to-inner
            if start[-1] * esize % 16:
                # the box's first global address must be 16-byte aligned: on the H200 an innermost coordinate
                # that is not (a K-grouped kernel's token start, for instance) stops the kernel with an illegal
                # instruction, which poisons the context, rather than failing the copy
                raise m.fault(loc, f"the TMA {form.kind}'s innermost coordinate is {start[-1]} ({start[-1] * esize} "
                                   f"bytes), not a multiple of 16 bytes ({16 // esize} {ann.dtype.name} "
                                   f"elements): the TMA unit needs the box's innermost start 16-byte aligned (an "
                                   f"illegal instruction on the GPU)", flat)
            shape = [int(ds[k][pos]) for k in range(form.rank)]
            gc = grid + np.asarray(start, np.int64)[:, None]
            inside = np.all((gc >= 0) & (gc < np.asarray(shape, np.int64)[:, None]), axis=0)
            lin = np.zeros(nelem, np.int64)
            for k in range(form.rank):
                lin = lin * shape[k] + np.where(inside, gc[k], 0)
            sb = int(base[pos]) + sbytes
            m.check(dmem, np.uint8, sb.min(), None if idx is None else idx[pos:pos + 1], loc,
                    "write" if form.kind == "load" else "read")
            m.check(dmem, np.uint8, sb.max() + esize - 1, None if idx is None else idx[pos:pos + 1], loc,
                    "write" if form.kind == "load" else "read")
            byte_cols = sb[:, None] + np.arange(esize)[None, :]
            race = m.race
            if race is not None:
                gr = race.granules(dmem, sbytes, esize)
                if form.kind == "store":
                    race.async_read(dmem, rows[pos], gr, base[pos], flat, loc, "TMA store")
                else:
                    state = _states(m)
                    for row in targets:
                        key = _keys(m, np.array([flat]), bar_op, rows=np.array([row]))[0]
                        if key in state:
                            race.async_write(dmem, row, gr, base[pos], flat, loc, key, state[key],
                                             issuer_checks=row == rows[pos])
            if form.kind == "load":
                fill = NAN_BITS[ann.dtype.name] if ann.oob_fill == "nan" else 0
                vals = np.full(nelem, fill, dtype=u)
                vals[inside] = gview[lin[inside]]
                for row in targets:                        # this CTA, or each CTA the multicast mask names
                    dmem.raw[row, byte_cols] = vals.view(np.uint8).reshape(nelem, esize)
                    _update(m, np.array([flat]), bar_op, loc, tx=-ann.box_bytes, rows=np.array([row]))
            else:
                vals = dmem.raw[rows[pos], byte_cols].reshape(-1).copy().view(u)
                gview[lin[inside]] = vals[inside]
    return run

