"""wgmma (sm_90a): warpgroup-level asynchronous matrix multiply-accumulate, and its fence, commit and wait.

    wgmma.mma_async.sync.aligned.m64n{N}k16.{f32,f16}.{f16,bf16}.{f16,bf16}   D, A, B   (N = 8, 16, ..., 256)
    wgmma.mma_async.sync.aligned.m64n{N}k32.{f32,f16}.{e4m3,e5m2}.{e4m3,e5m2}  D, A, B
    wgmma.fence.sync.aligned                 [registers...]
    wgmma.commit_group.sync.aligned          [registers...]
    wgmma.wait_group.sync.aligned            N (0..7) [registers...]

Scope "warpgroup" (every aligned warpgroup issues it; no group axis) or "cta" (group axis: the warpgroup,
extent threads / 128). After the group axis:

    D  (*batch, M_rep, N_rep, 64, N)        f32 registers (f16 accumulators: (.., 64, N/2) packed uint32 words)
    A  (*batch, M_rep, K_rep, 64, 8)        uint32 registers (rs form; two f16/bf16 or four fp8 per word)
       (*batch, M_rep, K_rep, 64, K)        or shared memory elements (ss form, through a matrix descriptor)
    B  (*batch, N_rep, K_rep, N, K)         shared memory elements (through a matrix descriptor)

Register fragments (warp w of the warpgroup, lane l; f32 D register i, packed D or A word r):
    D f32:  (16w + l//4 + 8*((i//2)%2), 8*(i//4) + 2*(l%4) + i%2)
    D f16:  (16w + l//4 + 8*(r%2), 4*(r//2) + l%4)
    A:      (16w + l//4 + 8*(r%2), 4*(r//2) + l%4)
Shared operands' descriptors come from their layouts (descriptor.py). Repeats run batch, M, N, then K innermost;
the first K step uses `scale_d` (1 by default: D += A*B), later ones accumulate (scale_d 1), so a K loop needs no
zeroing. The accumulators are written asynchronously: read them only after wgmma.commit_group and the
wgmma.wait_group that retires the group (naming the registers in the fence/commit/wait keeps the compiler from
moving their uses across it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from ...core import dtypes as dt
from ...core.errors import CompilationError
from ...ir import nodes as ir
from ...ir.eval import PINS, evaluate_pinned
from ..family import Refusal
from ...passes.register_provenance import KEEP, Read, Written
from ..operands import Ctx, Operand, Owners, check_bits, check_no_overlap, check_slot_type, pinned_offsets, reg, \
    repeat_coords, split_shape
from . import descriptor as DS

MMA = re.compile(r"^wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(\d+)\.(\w+)\.(\w+)\.(\w+)$")
FENCE, COMMIT, WAIT = ("wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
                       "wgmma.wait_group.sync.aligned")
HALF, FP8 = ("f16", "bf16"), ("e4m3", "e5m2")
SUPPORTED = ("supported: wgmma.mma_async.sync.aligned.m64n{N}k16.{f32,f16}.{f16,bf16}.{f16,bf16}, "
             "wgmma.mma_async.sync.aligned.m64n{N}k32.{f32,f16}.{e4m3,e5m2}.{e4m3,e5m2} (N a multiple of 8 up to "
             f"256), {FENCE}, {COMMIT}, {WAIT}")
MIN_SM = 90
MAX_REGISTERS = 8                    # register views a fence, commit or wait may name


@dataclass(frozen=True)
class Form:
    opcode: str
    kind: str                        # mma | fence | commit | wait
    n: int = 0
    k: int = 0
    dtype: str = ""                  # accumulator: f32 | f16
    atype: str = ""
    btype: str = ""

    @property
    def esize(self) -> int:
        return 1 if self.atype in FP8 else 2


def match(opcode: str):
    if not opcode.startswith("wgmma"):
        return None
    if opcode in (FENCE, COMMIT, WAIT):
        return Form(opcode, {FENCE: "fence", COMMIT: "commit", WAIT: "wait"}[opcode])
    m = MMA.match(opcode)
    if m is None:
        return Refusal(f"no explicit tile pattern for this wgmma form; {SUPPORTED}")
    n, k, d, a, b = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4), m.group(5)
    if n % 8 or not 8 <= n <= 256:
        return Refusal(f"N = {n} is not a wgmma shape: N is a multiple of 8 from 8 to 256")
    if d not in ("f32", "f16"):
        return Refusal(f"accumulator type .{d} is not supported; {SUPPORTED}")
    if a in HALF or b in HALF:
        if a != b or a not in HALF:
            return Refusal(f"A and B must both be f16 or both bf16 (got .{a}.{b})")
        if k != 16:
            return Refusal(f"f16/bf16 operands take K = 16 (m64n{n}k16), not k{k}")
        if a == "bf16" and d == "f16":
            return Refusal("bf16 operands accumulate in f32 only")
    elif a in FP8 and b in FP8:
        if k != 32:
            return Refusal(f"e4m3/e5m2 operands take K = 32 (m64n{n}k32), not k{k}")
    else:
        return Refusal(f"operand types .{a}.{b} are not supported; {SUPPORTED}")
    return Form(opcode, "mma", n, k, d, a, b)


def arch(form: Form) -> int:
    return 90                        # wgmma exists on sm_90a only


def expand(form: Form, ctx: Ctx) -> list:
    if ctx.scope not in ("warpgroup", "cta"):
        raise ctx.error(f"is a warpgroup instruction: apply it with scope='warpgroup' (or 'cta' for several "
                        f"warpgroups), not '{ctx.scope}'")
    if ctx.nthreads % 128:
        raise ctx.error(f"needs whole aligned warpgroups (128 threads each), but the block has {ctx.nthreads} "
                        f"threads")
    if form.kind == "mma":
        return _mma(form, ctx)
    return _sync(form, ctx)


def _group(ctx: Ctx):
    """(group axis extents, [(group coordinate, warp offset of its first warp)])."""
    if ctx.scope == "cta":
        g = ctx.nthreads // 128
        return [g], [((i,), 4 * i) for i in range(g)]
    return [], [((), 0)]


# ------------------------------------------------------------------ fence, commit, wait

def _sync(form: Form, ctx: Ctx) -> list:
    ctx.params(set())
    names = (["N"] if form.kind == "wait" else []) + [f"R{i}" for i in range(MAX_REGISTERS)]
    lo = 1 if form.kind == "wait" else 0
    ops = ctx.operands(names, min_count=lo)
    groups = []
    if form.kind == "wait":
        n = ops[0].value
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 7:
            raise ctx.error(f"N must be a compile-time integer 0..7 (the pending groups allowed to remain), got "
                            f"{n!r}", ops[0])
        groups.append([ir.Imm(str(n))])
        ops = ops[1:]
    regs = []
    for op in ops:
        if not op.is_view or op.view.storage.scope != "local":
            raise ctx.error("must be a register view (the accumulators or fragments this instruction orders)", op)
        regs += _all_slots(ctx, op)
    # the named registers travel as read-and-written operands: codegen then keeps their uses on this side
    groups.append(regs)
    # fence/commit/wait name the accumulators without changing them: their provenance marks stay
    return [ctx.native(groups, preserve=bool(regs), effect="sync", origin=form.kind, frags=(KEEP,))]


def _all_slots(ctx: Ctx, op: Operand) -> list:
    fast = _static_slots(op.view)
    if fast is not None:
        return [ir.Reg(op.view.storage, s, op.view.dtype, True) for s in fast]
    seen, out = set(), []
    coords = [list(c) for c in product(*(range(s) for s in op.view.shape))]
    # a view whose static_key is known has no run-time part: its pinned offsets are its slots
    by_pin = pinned_offsets(op.view, coords) if op.view.static_key() is not None else None
    slots = by_pin[0] if by_pin else None
    for k, coord in enumerate(coords):
        s = slots[k] if slots is not None else op.view.locate(coord)[0]
        if not isinstance(s, int):
            raise ctx.error("register slots must be compile-time constants", op)
        if s not in seen:
            seen.add(s)
            out.append(ir.Reg(op.view.storage, s, op.view.dtype, True))
    return sorted(out, key=lambda r: r.index)


def _static_slots(view):
    """The distinct slots of every coordinate of a view with no run-time part, sorted, from one evaluation of all
    its coordinates as a numpy array (a consumer's accumulators named to wait_group: 32768 coordinates); None
    where the view has no array path (then `_all_slots` walks them)."""
    import numpy as np
    shape = view.shape
    if view.static_key() is None or not shape or not all(type(s) is int and 0 < s < 1 << 24 for s in shape):
        return None
    coords = np.indices(shape, dtype=np.int64).reshape(len(shape), -1).T
    got = view.storages_array(np.ascontiguousarray(coords), PINS[0], {})
    return None if got is None else sorted(set(got.tolist()))


# ------------------------------------------------------------------ mma_async

def lane_d(w, lane, i):
    return (16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2)


def lane_words(w, lane, r):
    """A's words and packed f16 D's words share this map."""
    return (16 * w + lane // 4 + 8 * (r % 2), 4 * (r // 2) + lane % 4)


def _int_param(ctx, params, name, allowed, default):
    if name not in params:
        return default
    v, loc = params[name]
    if isinstance(v, bool) or not isinstance(v, int) or v not in allowed:
        raise CompilationError(f"{ctx.opcode}: {name} must be a compile-time "
                               f"{' or '.join(map(str, allowed))}, got {v!r}", loc)
    return v


def _scale_d(ctx, params):
    if "scale_d" not in params:
        return ir.Const(dt.uint32, ctx.loc, 1)
    v, loc = params["scale_d"]
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        if v not in (0, 1):
            raise CompilationError(f"{ctx.opcode}: scale_d must be 0, 1 or a run-time predicate, got {v}", loc)
        return ir.Const(dt.uint32, loc, v)
    if isinstance(v, ir.Expr) and (v.dtype.kind == "bool" or v.dtype.is_int):
        if v.dtype.kind == "bool":
            return ir.Cast(dt.uint32, loc, v)
        return ir.Cast(dt.uint32, loc, ir.Compare(dt.bool_, loc, "ne", v, ir.Const(v.dtype, loc, 0)))
    raise CompilationError(f"{ctx.opcode}: scale_d must be 0, 1 or a run-time predicate (bool or integer), got "
                           f"{getattr(getattr(v, 'dtype', None), 'name', type(v).__name__)}", loc)


def _mma(form: Form, ctx: Ctx) -> list:
    params = ctx.params({"scale_d", "scale_a", "scale_b", "trans_a", "trans_b"})
    D, A, B = ctx.operands(["D", "A", "B"])
    gext, groups = _group(ctx)
    ng = len(gext)
    fp8 = form.atype in FP8
    scale_a = _int_param(ctx, params, "scale_a", (1, -1), 1)
    scale_b = _int_param(ctx, params, "scale_b", (1, -1), 1)
    trans_a = _int_param(ctx, params, "trans_a", (0, 1), 0)
    trans_b = _int_param(ctx, params, "trans_b", (0, 1), 0)
    scale_d = _scale_d(ctx, params)
    a_regs = A.is_view and A.view.storage.scope == "local"
    for name, t in (("trans_a", trans_a), ("trans_b", trans_b)):
        if t and fp8:
            raise CompilationError(f"{ctx.opcode}: {name}=1: e4m3/e5m2 operands have no transpose (they must be "
                                   f"K-major in shared memory)", params[name][1])
    if trans_a and a_regs:
        raise CompilationError(f"{ctx.opcode}: trans_a=1 applies to A in shared memory only; A in registers has "
                               f"its fixed fragment", params["trans_a"][1])

    # D: registers
    if not D.is_view or D.view.storage.scope != "local":
        raise ctx.error("must be a register view (T.alloc_local) holding the accumulators", D)
    check_bits(ctx, D, 32)
    check_slot_type(ctx, D, "f32" if form.dtype == "f32" else "f16x2", form.opcode)
    dcols = form.n if form.dtype == "f32" else form.n // 2
    rd = split_shape(ctx, D, ng, (64, dcols), gext)
    if len(rd) < 2:
        raise ctx.error(f"needs (*batch, M_repeat, N_repeat, 64, {dcols}) after the group axes, got "
                        f"{D.view.shape}", D)
    batch, (mr, nr) = tuple(rd[:-2]), rd[-2:]

    # A: registers (rs) or shared (ss)
    if not A.is_view:
        raise ctx.error("must be a register view (uint32 fragments) or a shared-memory view", A)
    if a_regs:
        check_bits(ctx, A, 32)
        check_slot_type(ctx, A, "b32" if fp8 else form.atype + "x2", form.opcode)
        ra = split_shape(ctx, A, ng, (64, 8), gext)
    elif A.view.storage.scope == "shared":
        _check_elements(ctx, A, form)
        ra = split_shape(ctx, A, ng, (64, form.k), gext)
    else:
        raise ctx.error(f"must be in registers or shared memory, but {A.view.describe()} is in global memory", A)
    if len(ra) != len(rd) or tuple(ra[:-2]) != batch or ra[-2] != mr:
        raise ctx.error(f"must be (*batch, M_repeat={mr}, K_repeat, 64, {8 if a_regs else form.k}) to match D's "
                        f"repeats {rd}; got {A.view.shape}", A)
    kr = ra[-1]
    if not B.is_view or B.view.storage.scope != "shared":
        raise ctx.error("must be a shared-memory view (B is read through a matrix descriptor)", B)
    _check_elements(ctx, B, form)
    rb = split_shape(ctx, B, ng, (form.n, form.k), gext)
    if len(rb) != len(rd) or tuple(rb[:-2]) != batch or rb[-2] != nr or rb[-1] != kr:
        raise ctx.error(f"must be (*batch, N_repeat={nr}, K_repeat={kr}, {form.n}, {form.k}) to match D and A; "
                        f"got {B.view.shape}", B)

    own = {op.name: Owners(ctx, op) for op in (D, A) if op.view.storage.scope == "local"}
    proven = {}

    def slots(op, lanefn, nregs, rep):
        key = (op.name, tuple(rep))
        if key not in proven:
            out = _slots_at_once(own[op.name], groups, rep, lanefn, nregs)
            if out is not None:
                proven[key] = out
                return out
            out = []
            for r in range(nregs):
                threads = [(lane, w0 + w, list(g) + list(rep) + list(lanefn(w, lane, r)))
                           for g, w0 in groups for w in range(4) for lane in range(32)]
                slot = own[op.name].slot(threads, f"wgmma {op.name} fragment: lane {{lane}} register {r}")
                out.append(slot)
            proven[key] = out
        return proven[key]

    descs = {}

    def desc(op, rep, rows, k_major):
        key = (op.name, tuple(rep))
        if key not in descs:
            descs[key] = _descriptor(ctx, op, form, groups, rep, rows, k_major)
        return descs[key]

    nd = form.n // 2 if form.dtype == "f32" else form.n // 4
    dfn = lane_d if form.dtype == "f32" else lane_words
    out, written = [], []
    for b in repeat_coords(batch):
        for m, n in product(range(mr), range(nr)):
            d_slots = slots(D, dfn, nd, b + (m, n))
            d_regs = [ir.Reg(D.view.storage, s, D.view.dtype, True) for s in d_slots]
            written += d_regs
            for kk in range(kr):
                g = [d_regs]
                if a_regs:
                    g.append([reg(A.view, s) for s in slots(A, lane_words, 4, b + (m, kk))])
                else:
                    g += desc(A, b + (m, kk), 64, not trans_a)
                g += desc(B, b + (n, kk), form.n, not trans_b)
                g.append([ir.Val(scale_d if kk == 0 else ir.Const(dt.uint32, ctx.loc, 1))])
                g += [[ir.Imm(str(scale_a))], [ir.Imm(str(scale_b))]]
                if not fp8:
                    g += ([] if a_regs else [[ir.Imm(str(trans_a))]]) + [[ir.Imm(str(trans_b))]]
                # D accumulates one issue's registers in their native order (unless scale_d is 0: then it only
                # writes them); A in registers holds consecutive ldmatrix matrices in order
                key = b + (m, n)
                frags = (Written(0, ("acc.wgmma", ctx.apply, key), 0,
                                 lambda r, key=key: f"the wgmma D of issue {key} (register {r})"),)
                if not (kk == 0 and isinstance(scale_d, ir.Const) and scale_d.value == 0):
                    frags += (Read(0, "acc.wgmma", lambda l, r: dfn(0, l, r), "D", D.loc, from_zero=True),)
                if a_regs:
                    frags += (Read(1, "ldsm", lambda l, r: lane_words(0, l, r), "A", A.loc),)
                out.append(ctx.native(g, preserve=True, effect="warp-mem", origin=f"b{b} m{m} n{n} k{kk}",
                                      braces=(0, 1) if a_regs else (0,), frags=frags))
    check_no_overlap(ctx, D, written)
    return out


def _slots_at_once(owners: Owners, groups, rep, lanefn, nregs: int):
    """The fragment's slots for registers 0..nregs-1, every (group, warp, lane) proven at once on numpy arrays
    (lanefn is integer arithmetic, so it applies to arrays), or None: then each register is proven on its own,
    which words the error."""
    import numpy as np
    if not all(type(c) is int for g, _ in groups for c in list(g) + list(rep)):
        return None
    warp = np.repeat(np.arange(4), 32)[None, :]
    lane = np.tile(np.arange(32), 4)[None, :]
    r = np.arange(nregs)[:, None]
    rows, cols = (np.broadcast_to(np.asarray(a, dtype=np.int64), (nregs, 128)) for a in lanefn(warp, lane, r))
    parts, lanes, warps = [], [], []
    for g, w0 in groups:
        fixed = [np.full((nregs, 128), c, np.int64) for c in list(g) + list(rep)]
        parts.append(np.stack(fixed + [rows, cols], axis=-1))
        lanes.append(lane[0])
        warps.append(warp[0] + w0)
    return owners.slots_array(np.concatenate(parts, axis=1), np.concatenate(lanes), np.concatenate(warps))


def _check_elements(ctx, op, form):
    want = 8 * form.esize
    if op.view.dtype.bits != want:
        what = f"{form.atype} ({want}-bit)" if form.esize == 2 else f"e4m3/e5m2 bytes (uint8)"
        raise ctx.error(f"elements must be {what}, but {op.view.describe()} has {op.view.dtype.bits}-bit "
                        f"{op.view.dtype.name}", op)


def _descriptor(ctx: Ctx, op: Operand, form: Form, groups, rep, rows: int, k_major: bool) -> list:
    """[[Addr of the tile's start], [DescImm of the static bits]] for operand `op`'s tile at repeat `rep`, proven
    for every group (warpgroup) against the view's layout; run-time parts of the start (a pipeline stage) stay in
    the address and must not move the tile's shape or its alignment."""
    view, e = op.view, form.esize
    kext = form.k
    root = view
    while hasattr(root, "parent"):
        root = root.parent
    mode = DS.mode_of(getattr(getattr(root, "layout", None), "swizzle", None), e)
    if isinstance(mode, str):
        raise ctx.error(f"no matrix descriptor expresses {view.describe()}: {mode}", op)
    width = DS.WIDTH.get(mode, 16)
    import numpy as np
    fields, span = None, 1
    # the tile's (row, k) cells, row-major, as an (rows * kext, 2) array
    cell_arr = np.stack(np.meshgrid(np.arange(rows), np.arange(kext), indexing="ij"), axis=-1).reshape(-1, 2)
    for g, _ in groups:
        head = list(g) + list(rep)
        if all(type(c) is int for c in head):      # the coordinates as one array (pinned_offsets takes it)
            coords = np.empty((len(cell_arr), len(head) + 2), np.int64)
            coords[:, :len(head)] = head
            coords[:, len(head):] = cell_arr
        else:
            coords = [head + [r, k] for r, k in cell_arr.tolist()]
        by_pin = pinned_offsets(view, coords, arrays=True)     # (an array stays one: no list round trip)
        exprs = None if by_pin else [view.locate(list(c))[0] for c in coords]     # no integer path: the expressions
        for p, pin in enumerate(PINS):
            got = by_pin[p] if by_pin else [evaluate_pinned(x, pin, {}) for x in exprs]
            if not by_pin and any(v is None for v in got):      # (pinned offsets are ints)
                raise ctx.error(f"the tile's offsets in {view.describe()} are not integer expressions", op)
            try:
                byte = np.array(got, dtype=np.int64).reshape(rows, kext)    # cells are row-major
            except OverflowError:
                byte = None
            if byte is None or int(np.abs(byte).max()) >= 1 << 48:
                raise ctx.error(f"the tile's offsets in {view.describe()} are beyond shared memory", op)
            byte *= e
            start = int(byte[0, 0])
            shown = f" when a run-time index is {pin}" if pin != PINS[0] else ""
            if start % 16:
                raise ctx.error(f"the tile at repeat {tuple(rep)} starts at byte {start}{shown}; a matrix "
                                f"descriptor's start address is a multiple of 16 bytes", op)
            if mode and (start >> 7) & (width // 16 - 1):
                raise ctx.error(f"the tile at repeat {tuple(rep)} starts at byte {start}{shown}, inside a "
                                f"{width}B swizzle pattern (rows {(start >> 7) & (width // 16 - 1)} of 8 "
                                f"above its boundary); start each tile on an 8-row boundary of the pattern", op)
            f, why = DS.derive(byte, rows, kext, e, k_major, mode)
            if f is None:
                raise ctx.error(f"no matrix descriptor expresses {view.describe()} at repeat {tuple(rep)}: {why}",
                                op)
            if fields is not None and f != fields:
                raise ctx.error(f"the descriptor differs between warpgroups or run-time values ({fields.describe()} "
                                f"vs {f.describe()}); one apply needs one tile shape", op)
            fields = f
            span = max(span, (int(byte.max()) - start) // e + 1)
    # the swizzle pattern repeats every 8 rows of `width` bytes: the buffer must start on that boundary for the
    # hardware's (absolute-address) swizzle to be the view's
    if mode:
        st = view.storage
        st.align = max(getattr(st, "align", None) or 16, 8 * width)
    gid = []
    if ctx.scope == "cta":
        gid = [ir.Binary(dt.int32, ctx.loc, "floordiv", ir.Special(dt.int32, ctx.loc, "warpid"),
                         ir.Const(dt.int32, ctx.loc, 4))]
    off, axes = view.locate(gid + list(rep) + [0, 0])
    if axes and any(not (isinstance(v, int) and v == 0) for v in axes.values()):
        raise ctx.error("shared views map coordinates to storage only", op)
    addr = ir.Addr(view.storage, ir.as_expr(off, dt.int32, ctx.loc), view.dtype)
    return [[addr], [DS.DescImm(f"0x{fields.static_bits():016x}", span)]]


def access_spans(n: ir.Native) -> list:
    """A descriptor's address covers its whole tile (`span` elements from the start); fences touch nothing."""
    out = []
    for g in n.groups:
        for a in g:
            if isinstance(a, ir.Addr):
                out.append(None)
            elif isinstance(a, DS.DescImm) and out and out[-1] is None:
                out[-1] = a.span
    return [1 if s is None else s for s in out]


_ADDR = re.compile(r"^\[(\$\d+)(?:\+(-?\d+))?\]$")


def descriptor_asm(base: str, imm: int, static: int, lo: str, hi: str, name: str) -> str:
    """PTX that sets the 64-bit register `name` to the matrix descriptor of the shared address base + imm:
    ((base + imm) >> 4) & 0x3FFF in bits 0-13, or-ed with `static` (which has none of those bits), with `lo` and
    `hi` as 32-bit scratch registers.

    Written as the base's field plus imm's share, (((base + imm % 16) >> 4) & 0x3FFF | static's low word) +
    imm // 16, and the high word a constant: the same value wherever base + imm < 2^18, which every shared
    address is (227 KB a block on sm_90), but ptxas then computes the base's part once for all the tiles of a view
    (the k steps of one operand differ only in imm) and holds the loop-invariant ones, where it rebuilt every
    descriptor from its address before (in a Hopper attention kernel at D = 64, 39 of a main loop's 665
    instructions a warp and tile)."""
    if static & 0x3FFF:
        raise ValueError(f"a descriptor's static bits 0x{static:016x} overlap its start address field")
    code, src = [], base
    if imm % 16:
        code.append(f"add.u32 {lo}, {base}, {imm % 16};")
        src = lo
    code.append(f"shr.u32 {lo}, {src}, 4; and.b32 {lo}, {lo}, 16383; or.b32 {lo}, {lo}, 0x{static & 0xFFFFFFFF:08x};")
    if imm // 16:
        code.append(f"add.s32 {lo}, {lo}, {imm // 16};")
    code.append(f"mov.b32 {hi}, 0x{static >> 32:08x}; mov.b64 {name}, {{{lo}, {hi}}};")
    return " ".join(code)


def asm(n: ir.Native, ops: list) -> str | None:
    """fence/commit/wait: the instruction alone (named registers are operands only to order the code around it).
    mma_async: the descriptors are built from the shared addresses (start >> 4 in bits 0-13, or-ed with the
    static bits: descriptor_asm), scale-d becomes a predicate, then the instruction as the ISA writes it."""
    form: Form = n.form
    if form.kind == "wait":
        return f"{n.opcode} {n.groups[0][0].text};"
    if form.kind != "mma":
        return f"{n.opcode};"
    pre, args, names = [], [ops[0]], iter(("%wda", "%wdb"))
    i = 1
    while i < len(n.groups):
        g = n.groups[i]
        if g and isinstance(g[0], ir.Addr):
            m = _ADDR.match(ops[i])
            base, imm = m.group(1), int(m.group(2) or 0)
            name = next(names)
            pre.append(descriptor_asm(base, imm, int(ops[i + 1], 16), "%wsa", "%wsh", name))
            args.append(name)
            i += 2
            continue
        if g and isinstance(g[0], ir.Val):
            pre.append(f"setp.ne.b32 %wsp, {ops[i]}, 0;")
            args.append("%wsp")
        else:
            args.append(ops[i])
        i += 1
    return (f"{{ .reg .b32 %wsa, %wsh; .reg .b64 %wda, %wdb; .reg .pred %wsp; {' '.join(pre)} "
            f"{n.opcode} {', '.join(args)}; }}")
