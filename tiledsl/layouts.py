"""Ready-made layouts: the register fragments and shared tiles of mma.sync, ldmatrix and wgmma.

Each function returns the `TileLayout` one would otherwise write by hand (the same factors, so the same kernel and
the same PTX), and its docstring names the PTX fragment it describes and the view shape to use it with. Build
layouts outside the kernel (at module level or in a factory) and pass them to `.view(..., layout=L)`:

    from tiledsl import layouts as L
    A_FRAG = L.mma_a(MI, 1)                         # MI m16 tiles, one k16 step: view (MI, 1, 16, 8)
    ar.view(MI, 1, 16, 8, layout=A_FRAG)

Shapes follow the patterns' operand conventions (docs/patterns/): register views are `(*group, *repeat, *atom)`.
`repeat` is any number of leading extents (batch, M/N/K repeats, a double buffer); registers are numbered
row-major over them, each repeat holding the atom's registers together (`mma_a(2, 3)`: register
`(i * 3 + j) * 4 + r` is native register r of repeat (i, j)); `strides=` gives the repeats' register strides
instead (a kernel that numbers its fragments otherwise). `warps=` prepends the group axis of `scope="warpgroup"` /
`"cta"` (extent: the number of warps; `1 @ warpid`). Shared-tile views lead with a stage and a warp axis
(`stages=None` / `warps=None` leave them out). The factor rules are in `help(tiledsl.layout)` and docs/views.md.

Importing this module is light (no torch, no compiler).
"""
from __future__ import annotations

from .core.errors import LayoutError
from .layout import AXES, S, TileLayout, laneid

__all__ = ["mma_a", "mma_b", "mma_c", "mma_d", "ldmatrix_regs", "ldmatrix_a", "ldmatrix_b", "chunk_rows",
           "row_swizzle", "wgmma_acc", "wgmma_a", "wgmma_smem", "tma_tile"]


# ------------------------------------------------------------------ helpers


def _pos(x, what):
    if isinstance(x, bool) or not isinstance(x, int) or x <= 0:
        raise LayoutError(f"{what} must be a positive int, got {x!r}")
    return x


def _lead(repeat, per, given=None):
    """Extents and register strides of the repeat axes: `given`, or row-major when each repeat holds `per`
    registers."""
    repeat = tuple(_pos(e, "a repeat extent") for e in repeat)
    if given is not None:
        given = tuple(given)
        if len(given) != len(repeat) or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in given):
            raise LayoutError(f"strides= gives one non-negative int register stride per repeat extent {repeat}, "
                              f"got {given!r}")
        return repeat, given
    strides, acc = [], per
    for e in reversed(repeat):
        strides.append(acc)
        acc *= e
    return repeat, tuple(reversed(strides))


def _group(warps, axis="warpid"):
    if not warps:
        return (), ()
    if axis not in AXES:
        raise LayoutError(f"warp_axis must be one of {', '.join(AXES)}, got {axis!r}")
    return (_pos(warps, "warps"),), (1 @ AXES[axis],)


def _frag(repeat, per, atom_ext, atom_st, warps, strides=None, warp_axis="warpid"):
    gext, gst = _group(warps, warp_axis)
    ext, st = _lead(repeat, per, strides)
    return TileLayout(S[gext + ext + atom_ext : gst + st + atom_st])


def _k(k, allowed=(8, 16)):
    if k not in allowed:
        raise LayoutError(f"k must be one of {', '.join(map(str, allowed))} (the mma.sync shapes m16n8k8 and "
                          f"m16n8k16), got {k!r}")
    return k


# ------------------------------------------------------------------ mma.sync register fragments


def mma_a(*repeat: int, k: int = 16, warps: int = 0, strides: tuple | None = None) -> TileLayout:
    """The A fragment of `mma.sync.aligned.m16n8k{k}.row.col.f32.{f16,bf16}`: view `(*group, *repeat, 16, k/2)` of
    uint32 registers, each word two adjacent K values (even one low).

    Lane l, native register r holds row `l//4 + 8*(r%2)`, word `l%4 + 4*(r//2)` (k/4 registers per issue):
    k=16 `(2, 8, 2, 4) : (1, 4@laneid, 2, 1@laneid)`, k=8 `(2, 8, 4) : (1, 4@laneid, 1@laneid)`. The same
    word image is the PTX ISA's A fragment of tf32 m16n8k8 and int8/fp8 m16n8k32 (k=16) or of tf32 m16n8k4 and
    int8 m16n8k16 (k=8); the mma pattern takes the f16/bf16 forms (docs/patterns/mma.md). `ldmatrix.x4` (k=16) or
    `.x2` (k=8) of the tile `ldmatrix_a` describes fills it."""
    if _k(k) == 16:
        return _frag(repeat, 4, (2, 8, 2, 4), (1, 4 @ laneid, 2, 1 @ laneid), warps, strides)
    return _frag(repeat, 2, (2, 8, 4), (1, 4 @ laneid, 1 @ laneid), warps, strides)


def mma_b(*repeat: int, k: int = 16, warps: int = 0, strides: tuple | None = None) -> TileLayout:
    """The B fragment of `mma.sync.aligned.m16n8k{k}.row.col`: view `(*group, *repeat, 8, k/2)` of uint32
    registers; B's atom is (N, K/2): D = A @ B^T.

    Lane l, native register r holds row (n) `l//4`, word `l%4 + 4*r` (k/8 registers per issue): k=16
    `(8, 2, 4) : (4@laneid, 1, 1@laneid)`, k=8 `(8, 4) : (4@laneid, 1@laneid)`. `ldmatrix.x2` (or `.x4` for two
    n8 tiles) of an N x K tile, or `.trans` of a K x N tile, fills it (`ldmatrix_b`). As words, the same image as
    the B fragment of tf32 m16n8k8 and int8 m16n8k32 (k=16) or tf32 m16n8k4 and int8 m16n8k16 (k=8)."""
    if _k(k) == 16:
        return _frag(repeat, 2, (8, 2, 4), (4 @ laneid, 1, 1 @ laneid), warps, strides)
    return _frag(repeat, 1, (8, 4), (4 @ laneid, 1 @ laneid), warps, strides)


def mma_c(*repeat: int, warps: int = 0, strides: tuple | None = None) -> TileLayout:
    """The C / D accumulator of `mma.sync.aligned.m16n8k{8,16}....f32`: view `(*group, *repeat, 16, 8)` of float32
    (any 32-bit) registers.

    Lane l, native register r holds row `l//4 + 8*(r//2)`, column `2*(l%4) + r%2` (4 registers per issue):
    `(2, 8, 4, 2) : (2, 4@laneid, 1@laneid, 1)`."""
    return _frag(repeat, 4, (2, 8, 4, 2), (2, 4 @ laneid, 1 @ laneid, 1), warps, strides)


mma_d = mma_c


# ------------------------------------------------------------------ ldmatrix


def ldmatrix_regs(*repeat: int, count: int = 4, warps: int = 0, strides: tuple | None = None) -> TileLayout:
    """The registers of `ldmatrix.sync.aligned.m8n8.x{count}{.trans}.shared.b16` (and `stmatrix`): view
    `(*group, *repeat, count, 8, 4)` of uint32; word (i, r, w) is register i of lane 4r + w:
    `(count, 8, 4) : (1, 4@laneid, 1@laneid)`, `count` registers per repeat.

    The same registers viewed with `mma_a` (`.x4`, k=16; `.x2`, k=8) or `mma_b` are the mma operands: register i of
    an x4 is A's native register i (matrix i = row half i%2, k half i//2 of `ldmatrix_a`)."""
    if count not in (1, 2, 4):
        raise LayoutError(f"count must be 1, 2 or 4 (ldmatrix .x1, .x2, .x4), got {count!r}")
    return _frag(repeat, count, (count, 8, 4), (1, 4 @ laneid, 1 @ laneid), warps, strides)


def _words(k, row_words):
    if k % 8:
        raise LayoutError(f"k must be a multiple of 8 b16 elements (16-byte rows), got {k!r}")
    words = k // 2 if row_words is None else _pos(row_words, "row_words")
    if words < k // 2:
        raise LayoutError(f"row_words ({words}) must hold k/2 = {k // 2} words")
    return words


def _axes(stages, warps, rest_ext, rest_st, stage_stride, warp_stride):
    """The leading (stage, warp) factors, each left out when given as None, then the rest."""
    ext, st = [], []
    if stages is not None:
        ext.append(_pos(stages, "stages"))
        st.append(stage_stride)
    if warps is not None:
        ext.append(warps)
        st.append(warp_stride)
    return tuple(ext) + rest_ext, tuple(st) + rest_st


def _split(total, warps, tile, what):
    _pos(total, what)
    warps = 1 if warps is None else _pos(warps, "warps")
    if total % (warps * tile):
        raise LayoutError(f"{what} ({total}) must be a multiple of warps * {tile} = {warps * tile}")
    return total // warps


def ldmatrix_a(m: int, k: int, *, warps: int = 1, stages: int = 1, row_words: int | None = None,
               swizzle: tuple | None = None, count: int = 4) -> TileLayout:
    """The shared A tile that `ldmatrix.sync.aligned.m8n8.x4.shared.b16` (count=4: m16n8k16's A) or `.x2`
    (count=2: m16n8k8's A) reads, one fragment per issue: view `(stages, warps, m/warps/16, k/(4*count), count,
    8, 4)` of uint32 words.

    The tile is `stages` row-major M x K blocks of b16 elements, `row_words` uint32 words per row (k/2, or more
    for padding), `swizzle` the XOR swizzle of the word offsets (`row_swizzle`). `warps` warps split M, each
    reading m/warps/16 m16 tiles; matrix i of an issue is rows 8*(i%2).., k half i//2. Index it
    `[stage, warp_m, :, k_step]` for the `(m/warps/16, count, 8, 4)` view ldmatrix takes. `stages=None` or
    `warps=None` leaves that axis out of the view (one block, one warp's rows)."""
    words = _words(k, row_words)
    tm = _split(m, warps, 16, "m")
    if count == 4:
        mat_e, mat_s = (2, 2), (4, 8 * words)
    elif count == 2:
        mat_e, mat_s = (2,), (8 * words,)
    else:
        raise LayoutError(f"ldmatrix_a: count is 4 (m16n8k16) or 2 (m16n8k8), got {count!r}")
    kstep = 4 * count // 2             # words per k step: 8 (k16) or 4 (k8)
    ext, st = _axes(stages, warps, (tm // 16, k // (2 * kstep)) + mat_e + (8, 4),
                    (16 * words, kstep) + mat_s + (words, 1), m * words, tm * words)
    return TileLayout(S[ext : st], swizzle=swizzle)


def ldmatrix_b(n: int, k: int, *, warps: int = 1, stages: int = 1, row_words: int | None = None,
               swizzle: tuple | None = None, count: int = 4, trans: bool = False) -> TileLayout:
    """The shared B tile that `ldmatrix.sync.aligned.m8n8.x{count}{.trans}.shared.b16` reads as mma.sync B
    fragments: `.x4` two n8 tiles of m16n8k16's B per issue, `.x2` one, `.x1` one n8 tile of m16n8k8's B; view
    `(stages, warps, n/warps/(8*tiles), k/kstep, count, 8, 4)` of uint32 words (tiles = 2, 1, 1 n8 tiles per
    issue; kstep = 16, 16, 8). Register i of an issue is native B register i%2 (k half) of n8 tile i//2.

    trans=False: B is stored N x K (rows n, `row_words` words of K each; the `row.col` convention).
    trans=True: B is stored K x N (rows k, `row_words` words of N each) and read with `.trans`.
    `stages` such blocks one after another; `warps` warps split N; `swizzle` as in `ldmatrix_a`; `stages=None` or
    `warps=None` leaves that axis out."""
    if count not in (1, 2, 4):
        raise LayoutError(f"ldmatrix_b: count is 4 (two n8 tiles, k16), 2 (one, k16) or 1 (one, k8), got {count!r}")
    nt, kstep = {4: (2, 16), 2: (1, 16), 1: (1, 8)}[count]
    if k % kstep:
        raise LayoutError(f"ldmatrix_b: k must be a multiple of {kstep}, got {k!r}")
    tn = _split(n, warps, 8 * nt, "n")
    lead = (tn // (8 * nt), k // kstep)
    if not trans:
        words = _words(k, row_words)
        # rows are n: an n8 tile is 8 rows, a k half 4 words along the row
        mat = {4: ((2, 2), (8 * words, 4)), 2: ((2,), (4,)), 1: ((1,), (4,))}[count]
        ext, st = _axes(stages, warps, lead + mat[0] + (8, 4), (8 * nt * words, kstep // 2) + mat[1] + (words, 1),
                        n * words, tn * words)
        return TileLayout(S[ext : st], swizzle=swizzle)
    words = _words(n, row_words)
    # rows are k: an n8 tile is 4 words along the row, a k half 8 rows
    mat = {4: ((2, 2), (4, 8 * words)), 2: ((2,), (8 * words,)), 1: ((1,), (8 * words,))}[count]
    ext, st = _axes(stages, warps, lead + mat[0] + (8, 4), (4 * nt, kstep * words) + mat[1] + (words, 1),
                    k * words, tn // 2)
    return TileLayout(S[ext : st], swizzle=swizzle)


def chunk_rows(rows: int, k: int, *, stages: int = 1, row_words: int | None = None,
               swizzle: tuple | None = None) -> TileLayout:
    """The same shared tiles as `ldmatrix_a` / `ldmatrix_b` (stages x rows x k b16 elements) as 16-byte chunks, the
    unit of `cp.async.cg.shared.global` with `chunk_bytes=16`: view `(stages, rows, k/8, 4)` of uint32 words,
    `(stage, row, chunk, word)`; `stages=None` leaves the stage axis out."""
    words = _words(k, row_words)
    ext, st = _axes(stages, None, (_pos(rows, "rows"), k // 8, 4), (words, 4, 1), rows * words, 0)
    return TileLayout(S[ext : st], swizzle=swizzle)


def row_swizzle(row_bytes: int, dtype: str = "uint32") -> tuple:
    """The XOR swizzle `(bits, base, shift)` (in `dtype` elements) of rows of `row_bytes` bytes read 8 rows at a
    time by ldmatrix: the 16-byte chunk index is XORed with row bits so the 8 rows of one 8x8 matrix fall in 8
    different bank groups. 32/64/128-byte rows: the TMA unit's 32B/64B/128B swizzles (`T.tma_layout`'s; chunk c of
    row r at `c ^ (r % 2^bits)`); longer rows (256, 512, ... bytes): 3 bits of chunk XOR 3 bits of the row taken
    above the 128-byte span (`shift` = 3 + log2(row_bytes / 128))."""
    from .core import dtypes as _dt
    from .lang.tensormap import swizzle_of
    d = _dt.lookup(dtype)
    if d is None:
        raise LayoutError(_dt.unknown_message(dtype))
    if row_bytes in (32, 64, 128):
        return swizzle_of(row_bytes, d)
    if isinstance(row_bytes, int) and not isinstance(row_bytes, bool) and row_bytes > 128 and \
            row_bytes & (row_bytes - 1) == 0:
        bits, base, _ = swizzle_of(128, d)
        return (bits, base, 3 + (row_bytes // 128).bit_length() - 1)
    raise LayoutError(f"row_bytes must be 32, 64, 128 or a larger power of two, got {row_bytes!r}")


# ------------------------------------------------------------------ wgmma


def wgmma_acc(n: int, *, dtype: str = "float32", warp_axis: str = "warpid") -> TileLayout:
    """The D accumulator of one warpgroup's `wgmma.mma_async.sync.aligned.m64n{n}k16.f32` (dtype float32): view
    `(1, 1, 64, n)` of float32 registers; register i of warp w, lane l holds row `16w + l//4 + 8*((i//2)%2)`,
    column `8*(i//4) + 2*(l%4) + i%2` (n/2 registers): `(1, 1, 4, 2, 8, n/8, 4, 2) : (1, 1, 1@warp, 2,
    4@laneid, 4, 1@laneid, 1)`.

    dtype float16: the `.f16` accumulator, view `(1, 1, 64, n/2)` of uint32 words, word r the column pair
    `4*(r//2) + l%4` of row `16w + l//4 + 8*(r%2)`. `warp_axis` names the warp axis: `warpid` (one warpgroup, or
    the pattern's warp within it) or `wid_in_wg`."""
    if isinstance(n, bool) or not isinstance(n, int) or n % 8 or not 8 <= n <= 256:
        raise LayoutError(f"n must be a multiple of 8 from 8 to 256, got {n!r}")
    w = 1 @ AXES[_axis(warp_axis)]
    if dtype in ("float32", "f32"):
        return TileLayout(S[(1, 1, 4, 2, 8, n // 8, 4, 2) : (1, 1, w, 2, 4 @ laneid, 4, 1 @ laneid, 1)])
    if dtype in ("float16", "f16"):
        return TileLayout(S[(1, 1, 4, 2, 8, n // 8, 4) : (1, 1, w, 1, 4 @ laneid, 2, 1 @ laneid)])
    raise LayoutError(f"wgmma_acc: dtype is float32 or float16, got {dtype!r}")


def _axis(name):
    if name not in AXES:
        raise LayoutError(f"warp_axis must be one of {', '.join(AXES)}, got {name!r}")
    return name


def wgmma_a(k_repeat: int = 1, *, warp_axis: str = "warpid") -> TileLayout:
    """The register A operand of `wgmma.mma_async.sync.aligned.m64nNk16` ("rs" form): view `(1, k_repeat, 64, 8)`
    of uint32 words; word r of K step kk is register 4*kk + r, row `16w + l//4 + 8*(r%2)`, word `4*(r//2) + l%4`."""
    w = 1 @ AXES[_axis(warp_axis)]
    return TileLayout(S[(1, _pos(k_repeat, "k_repeat"), 4, 2, 8, 2, 4) : (1, 4, w, 1, 4 @ laneid, 2, 1 @ laneid)])


def wgmma_smem(rows: int, k: int, dtype: str, *, stages: int = 1, groups: int | None = None,
               k_step: int | None = None) -> TileLayout:
    """A K-major, 128-byte-swizzled shared operand of `wgmma.mma_async` as the TMA unit writes it (`tma_tile((stages,
    rows, k), dtype, 128)`, one row of k elements = 128 bytes), viewed for wgmma's K steps of `k_step` elements
    (16 for 16-bit types, 32 for 8-bit):

    groups=None (a B operand): view `(stages, 1, k/k_step, rows, k_step)`;
    groups=g (A split among g consumer warpgroups): view `(stages, g, 1, k/k_step, rows/g, k_step)`.
    The descriptor (128B swizzle, SBO = 8 rows) is derived from it by the wgmma pattern."""
    from .core import dtypes as _dt
    from .lang.tensormap import swizzle_of
    d = _dt.lookup(dtype)
    if d is None:
        raise LayoutError(_dt.unknown_message(dtype))
    if k * d.nbytes != 128:
        raise LayoutError(f"wgmma_smem: a row of k elements must be 128 bytes (the swizzle row), got {k} x "
                          f"{d.nbytes} bytes")
    kk = k_step or (32 if d.nbytes == 1 else 16)
    sw = swizzle_of(128, d)
    if groups is None:
        return TileLayout(S[(stages, 1, k // kk, rows, kk) : (rows * k, 1, kk, k, 1)], swizzle=sw)
    per = _split(rows, groups, 1, "rows")
    return TileLayout(S[(stages, groups, 1, k // kk, per, kk) : (rows * k, per * k, 1, kk, k, 1)], swizzle=sw)


def tma_tile(box, dtype, swizzle=None) -> TileLayout:
    """The shared tile a TMA box lands in: row-major over `box`, XOR-swizzled as the TMA unit's 32/64/128-byte
    `swizzle` places the bytes. This is `T.tma_layout(box, dtype, swizzle)` (one implementation)."""
    from .lang.tensormap import tma_layout
    return tma_layout(box, dtype, swizzle)
