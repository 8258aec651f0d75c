"""wgmma on the interpreter, read from the PTX ISA independently of the pattern's layouts.

An mma_async runs when it is issued, per aligned warpgroup: it builds the two 64-bit matrix descriptors from the
shared addresses and the static bits exactly as the hardware receives them, decodes them FROM THEIR BITS (start
address bits 0-13 << 4, LBO bits 16-29 << 4, SBO bits 32-45 << 4, swizzle bits 62-63) and reads shared memory
through them (core matrices of 8 rows x 16 bytes; swizzled rows of 32/64/128 bytes whose 16-byte chunks are XORed
with address bits 7..9), so a wrong descriptor gives wrong numbers here as it would on the GPU. Each shared
buffer is modelled at an address aligned to 1024 bytes (codegen aligns swizzled buffers so).

Accumulator fragment (PTX ISA "Register fragments", matrix D of m64nNk*): thread t of the warpgroup, warp
w = t / 32, groupID g = (t % 32) / 4, threadID_in_group q = t % 4; f32 register i holds
    row 16w + g + 8 * ((i % 4) >= 2),   column 8 * (i / 4) + 2q + (i % 2)
f16 accumulators pack the pairs (i, i+1) into one register. A in registers (rs form) is the m16n8k16 fragment of
each warp's 16 rows: register j holds row 16w + g + 8 * (j % 2), elements 2q.. (f16) or 4q.. (fp8) of K columns
8 * (j / 2) (f16) or 16 * (j / 2) (fp8).

The results are written at issue but the registers are held (Machine.hold) until the wgmma.wait_group that retires
their commit group: any other instruction or load touching them before that is a KernelFault at its line.
D = (scale_a A) (scale_b B)^T + (scale_d ? D : 0) is computed in float64 and rounded once to the accumulator type.
"""
from __future__ import annotations

import numpy as np

from ...interpreter import rounding as R
from ...interpreter.operands import AddrOp, RegOp, ValOp, native_error
from ...ir import nodes as ir
from .pattern import FP8, Form

SWIZZLE_BYTES = {0: 0, 1: 128, 2: 64, 3: 32}


def semantics(n: ir.Native, cx):
    form: Form = n.form
    if n.pred is not None:
        raise native_error(n, "a warpgroup instruction cannot be predicated per thread")
    if form.kind == "mma":
        return _mma(n, form, cx)
    keep = int(n.groups[0][0].text) if form.kind == "wait" else 0

    def sync(m, idx):
        wgs = _warpgroups(m, idx, n)
        st = _state(m)
        for wg in wgs:
            key = int(wg[0]) // 128
            if form.kind == "commit":
                st["done"].setdefault(key, []).append(st["open"].pop(key, []))
            elif form.kind == "wait":
                done = st["done"].get(key, [])
                retire, st["done"][key] = (done[:len(done) - keep], done[len(done) - keep:]) if keep else (done, [])
                for group in retire:
                    for storage, words, flat in group:
                        for w in words:
                            m.release(storage, w, flat)
    return sync


def _state(m):
    s = getattr(m, "wgmma", None)
    if s is None:
        s = m.wgmma = {"open": {}, "done": {}}        # per warpgroup: the uncommitted ops, the committed groups
    return s


def _warpgroups(m, idx, n):
    """The active threads as (warpgroups, 128) flat ids; every active warpgroup must be whole."""
    if m.T % 128:
        raise m.fault(n.loc, f"{n.opcode} needs whole warpgroups but the block has {m.T} threads", m.first(idx))
    flat = m.all if idx is None else idx
    wg = flat // 128
    keys, counts = np.unique(wg, return_counts=True)
    bad = keys[counts != 128]
    if len(bad):
        lanes = flat[wg == bad[0]] % 128
        missing = sorted(set(range(128)) - set(lanes.tolist()))
        raise m.fault(n.loc, f"{n.opcode} needs all 128 threads of an aligned warpgroup, but threads "
                             f"{missing[:8]}{'...' if len(missing) > 8 else ''} of warpgroup {int(bad[0]) % (m.T // 128)}"
                             f" are inactive here (divergent control flow)", int(lanes[0] + bad[0] * 128))
    return flat.reshape(-1, 128)


def _decode_elems(raw, kind):
    if kind in FP8:
        return R.decode(R.FP8_FMTS[kind], raw)
    return R.decode(R.F16 if kind == "f16" else R.BF16, raw)


def _desc_read(m, loc, n, addr: AddrOp, bits_static: int, wg, rows, kext, e, k_major, kind):
    """The (rows, kext) tile the descriptor built from `addr` and `bits_static` addresses, as float64."""
    start_b = addr.bytes(m, wg)                       # one value per thread; the warpgroup's first decides
    b0 = int(start_b[0])
    if np.any(start_b != b0):
        raise m.fault(loc, f"{n.opcode}: the threads of a warpgroup give different shared addresses", int(wg[0]))
    desc = ((b0 >> 4) & 0x3FFF) | bits_static          # what the hardware receives
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    width = SWIZZLE_BYTES[(desc >> 62) & 3]
    r = np.arange(rows)[:, None]
    k = np.arange(kext)[None, :]
    t = 16 // e
    if k_major:                                       # rows of the tile are M (or N); K runs along 16-byte chunks
        if width == 0:
            a = start + (r // 8) * sbo + (k // t) * lbo + (r % 8) * 16 + (k % t) * e
        else:
            a = start + (r // 8) * sbo + (r % 8) * width + k * e
    else:                                             # MN-major: M (or N) runs along the 16-byte chunks
        if width == 0:
            a = start + (r // t) * sbo + (k // 8) * lbo + (k % 8) * 16 + (r % t) * e
        else:
            per = width // e
            a = start + (r // per) * lbo + (k // 8) * sbo + (k % 8) * width + (r % per) * e
    if width:
        a = a ^ (((a >> 7) & (width // 16 - 1)) << 4)
    mem = m.mem[addr.st]
    bad = (a < 0) | (a + e > mem.nbytes)
    if bad.any():
        r0, k0 = (int(x[0]) for x in np.nonzero(bad))
        raise m.fault(loc, f"{n.opcode}: the matrix descriptor reads element ({r0}, {k0}) at byte {int(a[r0, k0])}, "
                           f"outside '{addr.st.name}' ({mem.nbytes} bytes of shared memory)", int(wg[0]))
    blk = int(m.blk[wg[0]])
    if m.race is not None:                            # read through the async proxy by the warpgroup (races.py)
        m.race.async_read(mem, blk, m.race.granules(mem, a, e), 0, int(wg[0]), loc, "wgmma", wg=wg)
    raw = mem.raw[blk]
    vals = raw[a] if e == 1 else (raw[a].astype(np.uint16) | (raw[a + 1].astype(np.uint16) << 8))
    return _decode_elems(vals, kind)


def _mma(n: ir.Native, form: Form, cx):
    g = n.groups
    D = [RegOp(a) for a in g[0]]
    i = 1
    if isinstance(g[1][0], ir.Reg):
        A = ("regs", [RegOp(a) for a in g[1]])
        i = 2
    else:
        A = ("desc", AddrOp(g[1][0], cx), int(g[2][0].text, 16))
        i = 3
    B = (AddrOp(g[i][0], cx), int(g[i + 1][0].text, 16))
    i += 2
    scale_d = ValOp(g[i][0], cx)
    imms = [int(x[0].text) for x in g[i + 1:]]
    sa, sb = imms[0], imms[1]
    fp8 = form.atype in FP8
    if fp8:
        ta = tb = 0
    elif A[0] == "regs":
        ta, tb = 0, imms[2]
    else:
        ta, tb = imms[2], imms[3]
    N, K, e = form.n, form.k, form.esize
    f32 = form.dtype == "f32"
    if len(D) != (N // 2 if f32 else N // 4):
        raise native_error(n, f"D has {len(D)} registers; m64n{N} takes {N // 2 if f32 else N // 4}")
    t = np.arange(128)
    w, gid, q = t // 32, (t % 32) // 4, t % 4
    loc = n.loc
    what = f"the wgmma.mma_async at {loc}" if loc is not None else "a wgmma.mma_async"

    def run(m, idx):
        wgs = _warpgroups(m, idx, n)
        st = _state(m)
        for wg in wgs:
            if A[0] == "regs":
                am = np.zeros((64, K))
                per = 2 if e == 2 else 4
                for j, op in enumerate(A[1]):
                    word = m.mem[op.st].view(np.uint32)[wg, op.index]
                    row = 16 * w + gid + 8 * (j % 2)
                    for h in range(per):
                        col = (K // 2) * (j // 2) + per * q + h
                        am[row, col] = _decode_elems((word >> np.uint32(8 * e * h)) & np.uint32((1 << 8 * e) - 1),
                                                     form.atype)
            else:
                am = _desc_read(m, loc, n, A[1], A[2], wg, 64, K, e, not ta, form.atype)
            bm = _desc_read(m, loc, n, B[0], B[1], wg, N, K, e, not tb, form.btype)
            cm = np.zeros((64, N))
            sd = np.asarray(scale_d.read(m, wg))
            if np.any(sd != sd[0]):
                raise m.fault(loc, f"{n.opcode}: scale-d differs between the threads of a warpgroup", int(wg[0]))
            words = {}
            for j, op in enumerate(D):
                bits = m.mem[op.st].view(np.uint32)[wg, op.index]
                words[j] = (op, bits)
            if sd[0]:
                for j, (op, bits) in words.items():
                    if f32:
                        row, col = 16 * w + gid + 8 * ((j % 4) >= 2), 8 * (j // 4) + 2 * q + j % 2
                        cm[row, col] = R.decode(R.F32, bits)
                    else:
                        row, col = 16 * w + gid + 8 * (j % 2), 8 * (j // 2) + 2 * q
                        cm[row, col] = R.decode(R.F16, bits & np.uint32(0xFFFF))
                        cm[row, col + 1] = R.decode(R.F16, bits >> np.uint32(16))
            with np.errstate(all="ignore"):
                dm = (sa * am) @ (sb * bm).T + cm
            key = int(wg[0]) // 128
            held = []
            for j, (op, _) in words.items():
                if f32:
                    row, col = 16 * w + gid + 8 * ((j % 4) >= 2), 8 * (j // 4) + 2 * q + j % 2
                    out = R.encode(R.F32, dm[row, col].astype(np.float32).astype(np.float64))
                else:
                    row, col = 16 * w + gid + 8 * (j % 2), 8 * (j // 2) + 2 * q
                    lo = R.encode(R.F16, dm[row, col].astype(np.float16).astype(np.float64)).astype(np.uint32)
                    hi = R.encode(R.F16, dm[row, col + 1].astype(np.float16).astype(np.float64)).astype(np.uint32)
                    out = lo | (hi << np.uint32(16))
                m.mem[op.st].view(np.uint32)[wg, op.index] = out
                m.hold(op.st, op.index, wg, what)
                held.append(op.index)
            st["open"].setdefault(key, []).append((D[0].st, held, wg))
    return run
