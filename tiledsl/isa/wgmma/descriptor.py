"""wgmma's 64-bit shared-memory matrix descriptor, derived from a shared view's TileLayout and proven against it.

The descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 start address >> 4, 16-29 leading-dimension byte
offset (LBO) >> 4, 32-45 stride-dimension byte offset (SBO) >> 4, 49-51 base offset, 62-63 swizzle mode
(0 none, 1 128B, 2 64B, 3 32B). The hardware reads an operand tile (rows = M or N, k = K) as core matrices of
8 rows x 16 bytes; with a swizzle of W bytes, rows are W bytes apart and the 16-byte chunks of each 8-row pattern
are XORed with the row (address bits [4, 4+log2(W/16)) ^= bits [7, ...)). The canonical byte offset of (row, k)
from the start address, before the swizzle (T = 16 / element bytes):

    K-major  none:    (row%8)*16 + (row//8)*SBO + (k%T)*e + (k//T)*LBO
    K-major  W bytes: (row%8)*W  + (row//8)*SBO + k*e                      (LBO unused: one K step fits a row)
    MN-major none:    (row%T)*e  + (row//T)*SBO + (k%8)*16 + (k//8)*LBO
    MN-major W bytes: (row%(W/e))*e + (row//(W/e))*LBO + (k%8)*W + (k//8)*SBO

`derive` reads the fields off the view's own offsets (the swizzle mode from its TileLayout's swizzle) and then
checks every element of the tile: where the descriptor would read an element at another byte than the view
places it, the layout is refused with that element as the counterexample. The base offset stays 0: a start that
is not on a swizzle pattern's row boundary is refused, so the hardware's swizzle phase is the view's.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import nodes as ir

WIDTH = {1: 128, 2: 64, 3: 32}               # swizzle width in bytes per mode code
MODE_OF_WIDTH = {128: 1, 64: 2, 32: 3}
NAMES = {0: "no swizzle", 1: "128B swizzle", 2: "64B swizzle", 3: "32B swizzle"}
FIELD_MAX = (1 << 14) - 1                    # LBO, SBO, start: 14 bits of 16-byte units


@dataclass(frozen=True)
class Fields:
    mode: int
    lbo: int                                 # bytes
    sbo: int                                 # bytes

    def static_bits(self) -> int:
        """The descriptor without its start address (or-ed in at run time from the shared address)."""
        return ((self.lbo >> 4) & FIELD_MAX) << 16 | ((self.sbo >> 4) & FIELD_MAX) << 32 | self.mode << 62

    def describe(self) -> str:
        return f"{NAMES[self.mode]}, LBO {self.lbo} bytes, SBO {self.sbo} bytes"


@dataclass(eq=False)
class DescImm(ir.Imm):
    """The static bits of one operand's descriptor (`text` is their hex), with the elements the tile spans from
    its start address (for the debug pass's bounds checks)."""
    span: int = 1


def swizzle(mode: int, addr: int) -> int:
    """The byte address the hardware reads for un-swizzled address `addr` (an involution: it changes bits below
    those it reads)."""
    if mode == 0:
        return addr
    return addr ^ (((addr >> 7) & (WIDTH[mode] // 16 - 1)) << 4)


def canonical(f: Fields, k_major: bool, e: int, row: int, k: int) -> int:
    """The canonical byte offset of (row, k) from the start address, before the swizzle (table above)."""
    t = 16 // e
    if k_major:
        if f.mode == 0:
            return (row % 8) * 16 + (row // 8) * f.sbo + (k % t) * e + (k // t) * f.lbo
        return (row % 8) * WIDTH[f.mode] + (row // 8) * f.sbo + k * e
    if f.mode == 0:
        return (row % t) * e + (row // t) * f.sbo + (k % 8) * 16 + (k // 8) * f.lbo
    per = WIDTH[f.mode] // e
    return (row % per) * e + (row // per) * f.lbo + (k % 8) * WIDTH[f.mode] + (k // 8) * f.sbo


def mode_of(layout_swizzle, e: int):
    """The descriptor's swizzle mode for a TileLayout swizzle (bits, base, shift) in elements of e bytes, or a
    string saying why none matches."""
    if not layout_swizzle or not layout_swizzle[0]:
        return 0
    bits, base, shift = layout_swizzle
    t = 16 // e
    if (1 << base) != t or (1 << (base + shift)) * e != 128 or bits not in (1, 2, 3):
        want = ", ".join(f"({b}, {t.bit_length() - 1}, {(128 // e).bit_length() - 1 - (t.bit_length() - 1)}) for "
                         f"{NAMES[MODE_OF_WIDTH[16 << b]]}" for b in (1, 2, 3))
        return (f"its swizzle {tuple(layout_swizzle)} is no wgmma swizzle mode; for {e}-byte elements the modes are "
                f"{want}")
    return MODE_OF_WIDTH[16 << bits]


def derive(byte_of, rows: int, kext: int, e: int, k_major: bool, mode: int):
    """(Fields, None) for a tile whose element (row, k) sits at byte `byte_of(row, k)` (storage-relative, start
    already checked aligned), or (None, why) with a counterexample. `byte_of` may instead be a (rows, kext) integer
    array of those bytes: the check of every element then runs on whole arrays (a wgmma B tile of m64n256k16 has
    4096 elements, and the Hopper GEMM proves 16 such tiles per compile)."""
    import numpy as np
    at = np.asarray(byte_of if not callable(byte_of) else
                    [[byte_of(r, k) for k in range(kext)] for r in range(rows)], dtype=np.int64)
    start = int(at[0, 0])

    def u(r, k):                             # un-swizzled distance from the start
        return swizzle(mode, int(at[r, k])) - start

    t = 16 // e
    unused = 16
    if k_major:
        sbo = u(8, 0) if rows > 8 else unused
        lbo = (u(0, t) if kext > t else unused) if mode == 0 else unused
    elif mode == 0:
        sbo = u(t, 0) if rows > t else unused
        lbo = u(0, 8) if kext > 8 else unused
    else:
        per = WIDTH[mode] // e
        lbo = u(per, 0) if rows > per else unused
        sbo = u(0, 8) if kext > 8 else unused
    for name, v in (("leading-dimension byte offset", lbo), ("stride-dimension byte offset", sbo)):
        if v < 0 or v % 16 or (v >> 4) > FIELD_MAX:
            return None, (f"its {name} would be {v} bytes; the descriptor holds a multiple of 16 in 0.."
                          f"{FIELD_MAX * 16}")
    f = Fields(mode, lbo, sbo)
    # canonical() and swizzle() are integer arithmetic (floor division and modulo as Python's), so they apply to
    # the whole grid of (row, k) at once
    hw = swizzle(mode, start + canonical(f, k_major, e, np.arange(rows)[:, None], np.arange(kext)[None, :]))
    bad = np.flatnonzero(hw != at)
    if bad.size:
        r, k = divmod(int(bad[0]), kext)     # the first wrong element in row-major order, as a loop would find
        got = int(hw[r, k])
        same = np.flatnonzero(at == got)
        there = (f"where the view holds element {divmod(int(same[0]), kext)}" if same.size else
                 "which holds no element of the tile")
        return None, (f"the descriptor ({f.describe()}, {'K' if k_major else 'MN'}-major) would read "
                      f"element {(r, k)} at byte {got - start} from the tile's start, {there}; the view "
                      f"places it at byte {int(at[r, k]) - start}")
    return f, None
