"""What every tile pattern checks about its operands, and how operands turn into native registers/addresses.

An operand of `apply` is read as `(*group, *repeat, *atom)`. Group axes bind execution ids (lane, warp) and are
not repeats. Register operands must be owned by the issuing lane, proven for every lane; memory operands become
addresses. Every failure is a `CompilationError` at the user's line naming the operand.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from math import prod

from ..core import dtypes as dt
from ..ir import nodes as ir
from ..core.errors import CompilationError
from ..core.target import Target
from ..lang.views import View
from ..layout import owner_of
from ..ir.eval import PINS, evaluate_pinned as evaluate, located, static_offsets

THREAD, WARP = "thread", "warp"          # the instruction's own width


@dataclass
class Operand:
    name: str
    value: object                        # View | Expr | Python number
    loc: object

    @property
    def is_view(self) -> bool:
        return isinstance(self.value, View)

    @property
    def view(self) -> View:
        return self.value


class Ctx:
    """One apply call being expanded: its scope, the launch's block, the target, where it was written, and the
    family and form the registry parsed its opcode into."""

    def __init__(self, apply: ir.Apply, block, target: Target, family=None, form=None, lanes: int = 32,
                 guard=None, *, proofs: dict | None = None, launch=None):
        self.apply, self.block, self.target, self.sm = apply, block, target, target.sm
        self.launch = launch                 # the kernel's LaunchConfig (cluster, register cap), when known
        # proofs that succeeded in this kernel, under keys that decide them (View.static_key/pinned_key): an
        # unrolled k loop asks the same ownership and contiguity questions of every step's views
        self.proofs = {} if proofs is None else proofs
        self.scope = apply.scope
        self.loc = apply.loc
        self.opcode = apply.opcode
        self.family, self.form = family, form
        # the lanes of each warp that reach this apply: 32, or fewer under a guard `lane < K` (or in a block of
        # fewer than 32 threads); a thread instruction's lane axis then spans exactly those lanes
        self.lanes = min(lanes, 32, self.nthreads)
        self.guard = guard                   # the guard's text, for messages

    def proven(self, key, prove):
        """`prove()` (which raises when the proof fails), or what it returned the last time under `key` in this
        kernel; a key of None is never remembered."""
        if key is None or None in key:
            return prove()
        key = (self.lanes,) + tuple(key)     # a proof under a lane guard is a different question
        hit = self.proofs.get(key)
        if hit is None:
            hit = self.proofs[key] = prove()
        return hit

    def native(self, groups: list, pred=None, preserve: bool = False, effect: str = "pure", origin: str = "",
               braces: tuple = (), frags: tuple = ()) -> ir.Native:
        """One native instruction of this apply: its opcode, location, form and family come from the apply;
        `frags`: what its register groups hold (passes/register_provenance.py)."""
        return ir.Native(self.loc, self.opcode, groups, pred, preserve, effect, origin, braces,
                         form=self.form, family=self.family, frags=frags)

    @property
    def nthreads(self) -> int:
        b = self.block
        return b[0] * b[1] * b[2]

    def thread_only(self, how: str):
        """Refuse a scope other than `thread` for an instruction every executing thread issues; `how` says how
        to write it instead (shown in parentheses)."""
        if self.scope != "thread":
            raise self.error(f"is a thread instruction: apply it with scope='thread' ({how}), not '{self.scope}'")

    def error(self, msg, operand: Operand | None = None) -> CompilationError:
        if operand is not None:
            return CompilationError(f"{self.opcode}: operand {operand.name}: {msg}", operand.loc or self.loc)
        return CompilationError(f"{self.opcode}: {msg}", self.loc)

    def operands(self, names, min_count=None) -> list:
        ops = self.apply.operands
        lo = len(names) if min_count is None else min_count
        if not lo <= len(ops) <= len(names):
            want = f"{len(names)}" if lo == len(names) else f"{lo} to {len(names)}"
            raise self.error(f"takes {want} operands ({', '.join(names)}), got {len(ops)}")
        return [Operand(n, v, loc) for n, v, loc in zip(names, ops, self.apply.operand_locs)]

    def params(self, allowed) -> dict:
        out = {}
        for k, (v, loc) in self.apply.params.items():
            if k not in allowed:
                ok = ", ".join(sorted(allowed)) or "none"
                raise CompilationError(f"{self.opcode}: unknown parameter '{k}' (allowed: {ok})", loc)
            out[k] = (v, loc)
        return out

    # -- scopes and group axes
    def group_axes(self, width: str) -> list:
        """Names of the group axes for this scope, outermost first."""
        s = self.scope
        if s == "cluster":
            raise self.error("scope 'cluster' is not supported for this instruction")
        if width == WARP:
            if s == "thread":
                raise self.error("is a warp instruction; it needs scope='warp' (or warpgroup/cta), not 'thread'")
            return {"warp": [], "warpgroup": ["warp"], "cta": ["warp"]}[s]
        return {"thread": [], "warp": ["lane"], "warpgroup": ["warp", "lane"], "cta": ["warp", "lane"]}[s]

    def group_extents(self, axes) -> list:
        nwarps = max(1, self.nthreads // 32)
        out = []
        for a in axes:
            if a == "lane":
                out.append(self.lanes)
            elif self.scope == "warpgroup":
                out.append(4)
            else:
                out.append(nwarps)
        return out

    def check_block_for_scope(self, width):
        n = self.nthreads
        if width == WARP and self.lanes < 32:
            why = f"it sits under the guard `{self.guard}`" if self.guard else f"the block has {n} threads"
            raise self.error(f"is a warp instruction: all 32 lanes of a warp must execute it, but {why}")
        if self.scope != "thread" and n % 32 and not (width != WARP and n < 32):
            raise self.error(f"scope '{self.scope}' needs whole warps, but the block has {n} threads")
        if width == WARP and n % 32:
            raise self.error(f"scope '{self.scope}' needs whole warps, but the block has {n} threads")
        if self.scope == "warpgroup" and n % 128:
            raise self.error(f"scope 'warpgroup' needs whole warpgroups (128 threads), but the block has {n}")

    def group_ids(self, axes) -> list:
        """Run-time values of the group coordinates for the executing thread."""
        out = []
        for a in axes:
            if a == "lane":
                out.append(ir.Special(dt.int32, self.loc, "laneid"))
            elif self.scope == "warpgroup":
                out.append(ir.Binary(dt.int32, self.loc, "mod", ir.Special(dt.int32, self.loc, "warpid"),
                                     ir.Const(dt.int32, self.loc, 4)))
            else:
                out.append(ir.Special(dt.int32, self.loc, "warpid"))
        return out


# One apply becomes one native per repeat; past this a kernel takes minutes to expand and LLVM and ptxas far longer,
# so the mistake (usually an extent meant for a run-time loop) is refused at the apply instead.
MAX_APPLY_REPEATS = 65536


def split_shape(ctx: Ctx, op: Operand, ngroup: int, atom: tuple, group_extents) -> tuple:
    """Check `(*group, *repeat, *atom)` and return the repeat shape."""
    shape = tuple(op.view.shape)
    for s in shape:
        if not isinstance(s, int):
            raise ctx.error(f"extents must be static, but {op.view.describe()} has a run-time extent", op)
    if len(shape) < ngroup + len(atom):
        raise ctx.error(f"has shape {shape}; expected (*group{ngroup}, *repeat, *atom{atom})", op)
    g = shape[:ngroup]
    if list(g) != list(group_extents):
        raise ctx.error(f"group axes for scope '{ctx.scope}' must be {tuple(group_extents)}, got {g} "
                        f"(shape {shape})", op)
    tail = shape[len(shape) - len(atom):] if atom else ()
    if tuple(tail) != tuple(atom):
        raise ctx.error(f"atom (last {len(atom)} extents) must be {tuple(atom)}, got {tuple(tail)} (shape {shape})",
                        op)
    rep = shape[ngroup:len(shape) - len(atom)]
    for r in rep:
        if r <= 0:
            raise ctx.error(f"repeat extents must be positive, got {rep}", op)
    n = prod(rep)
    if n > MAX_APPLY_REPEATS:
        raise ctx.error(f"repeats {n} times; one tile.apply expands to at most {MAX_APPLY_REPEATS} instructions "
                        f"(write a run-time loop around a smaller apply)", op)
    return tuple(rep)


def check_scope(ctx: Ctx, op: Operand, scopes, what="") -> None:
    if not op.is_view:
        raise ctx.error(f"must be a buffer view{what}, got a scalar", op)
    sc = op.view.storage.scope
    if sc not in scopes:
        names = {"local": "registers (T.alloc_local)", "shared": "shared memory", "global": "global memory"}
        raise ctx.error(f"must be in {' or '.join(names[s] for s in scopes)}, but {op.view.describe()} is in "
                        f"{names[sc]}", op)


def check_bits(ctx: Ctx, op: Operand, bits: int, what="element") -> None:
    d = op.view.dtype if op.is_view else None
    if d is not None and d.bits != bits:
        raise ctx.error(f"{what} width must be {bits} bits, but {op.view.describe()} has {d.bits}-bit "
                        f"{d.name} (reinterpret explicitly with .view(dtype=...))", op)


_FLOAT_SLOTS = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64"}


def slot_accepts(ptx_type: str, d: dt.DType) -> str | None:
    """Why a register of dtype `d` cannot fill a slot of PTX register type `ptx_type` of the same width (None: it
    can). The opcode's type decides how the bits are read, so a register may be the slot's own type or its plain
    bits (docs/patterns/register.md, "Data representation"):
      .bN            any element of the width (pure bits: mov.b32, ld/st.b32);
      .uN .sN        an integer of the width, either signedness (the opcode says which);
      .f16 .bf16 .f32 .f64   that float type, or the unsigned integer holding its bits (uint16 for bf16 ...);
      .f16x2 .bf16x2 .f32x2  the unsigned integer holding the packed halves (uint32; uint64 for f32x2).
    Refused: a float register in an integer slot, a signed integer or another float format in a float slot."""
    t = ptx_type
    if t[0] == "b" and t[1:].isdigit():
        return None
    if t[0] in "us":
        return None if d.is_int else f"an integer of {d.bits} bits (int{d.bits} or uint{d.bits})"
    bits_of = f"uint{d.bits}"
    if t in _FLOAT_SLOTS:
        own = _FLOAT_SLOTS[t]
        return None if d.name in (own, bits_of) else f"{own} (or its bits as {bits_of})"
    if t.endswith("x2"):
        return None if d.name == bits_of else f"the packed pair's bits as {bits_of}"
    return None


def check_slot_type(ctx: Ctx, op: Operand, ptx_type: str, opcode: str) -> None:
    """Refuse a register view whose element type does not fit the instruction's `ptx_type` slot (same width
    assumed, checked before): an int32 buffer in an .f32 slot, a float32 buffer in a .u32 slot, ..."""
    d = op.view.dtype
    want = slot_accepts(ptx_type, d)
    if want is not None:
        raise ctx.error(f"{op.view.describe()} holds {d.name}, but the .{ptx_type} slot of {opcode} takes {want} "
                        f"(reinterpret the bits explicitly with .view(dtype=...) if that is meant)", op)


def scalar_value(ctx: Ctx, op: Operand, dtype: dt.DType) -> ir.Expr:
    """A scalar operand as an expression of exactly the slot's width."""
    from ..ir import ops
    v = op.value
    if ops.is_number(v):
        if dtype.is_float or not isinstance(v, float):
            return ops.const_of(v, dtype, op.loc)
        raise ctx.error(f"{v!r} is not a valid {dtype.name} constant", op)
    if v.dtype.bits != dtype.bits:
        raise ctx.error(f"scalar is {v.dtype.name} ({v.dtype.bits} bits); the slot takes {dtype.bits}-bit "
                        f"{dtype.name}", op)
    if v.dtype.is_float != dtype.is_float and not (dtype.kind == "uint" or v.dtype.kind == "uint"):
        raise ctx.error(f"scalar is {v.dtype.name} but the slot takes {dtype.name}", op)
    return v


class Owners:
    """Resolve register coordinates to static slots, proving the owner lane (and warp) for every thread."""

    def __init__(self, ctx: Ctx, op: Operand):
        self.ctx, self.op, self.view = ctx, op, op.view
        self.cache = {}

    def slot(self, coords_by_thread, required) -> int:
        """`coords_by_thread`: [(lane, warp_or_None, coord)]; all must land in one static slot owned by them.

        `required` describes the fragment position for messages, e.g. "lane {lane} register 2 of mma.sync".
        """
        fast = self._slot_array(coords_by_thread)
        if fast is not None:
            return self.in_storage(fast)
        slot = None
        first = None
        view = self.view
        for lane, warp, coord in coords_by_thread:
            o = view.owner_static(coord) if all(type(c) is int for c in coord) else None
            if o is not None:
                s, own_lane, own_warp = o
            else:
                s, ax = self._locate(coord)
                if not isinstance(s, int):
                    raise self.ctx.error(f"register slot of coordinate {coord} is not a compile-time constant "
                                         f"(index register operands with compile-time values, e.g. T.unroll)",
                                         self.op)
                own = owner_of(s, ax)
                own_lane, own_warp = own.lane, own.warp
            want_warp = warp if warp is not None else 0
            if own_lane != lane or own_warp != want_warp:
                who = f"lane {own_lane}" + (f", warp {own_warp}" if own_warp or warp is not None else "")
                need = f"lane {lane}" + (f", warp {want_warp}" if warp is not None else "")
                raise self.ctx.error(
                    f"ownership: coordinate {tuple(coord)} of {self.view.describe()} is held by {who} in register "
                    f"{s}, but {required.format(lane=lane)} must be held by {need}", self.op)
            if slot is None:
                slot, first = s, (lane, coord)
            elif s != slot:
                raise self.ctx.error(
                    f"ownership: {required.format(lane=lane)} is register {s} on lane {lane} (coordinate "
                    f"{tuple(coord)}) but register {slot} on lane {first[0]} (coordinate {tuple(first[1])}); one "
                    f"native register must sit in the same slot on every lane", self.op)
        return self.in_storage(slot)

    def _slot_array(self, threads):
        """The common slot when every thread's coordinate is owned by that thread and all share one slot, proven on
        numpy arrays of all the threads at once (View.owners_array); None when that does not hold or cannot be
        evaluated so: the per-thread proof then runs and words the error."""
        if len(threads) < 16:
            return None
        coords = [t[2] for t in threads]
        ndim = len(coords[0])
        if not all(len(c) == ndim and all(type(x) is int for x in c) for c in coords):
            return None
        import numpy as np
        from itertools import chain
        # ints only, every row ndim long (checked above): fromiter reads them without np.array's shape discovery
        arr = np.fromiter(chain.from_iterable(coords), np.int64, len(coords) * ndim).reshape(len(coords), ndim)
        if ndim and int(np.abs(arr).max()) >= 1 << 24:
            return None
        got = self.view.owners_array(arr)
        if got is None:
            return None
        slot, lane, warp = got
        want_lane = np.array([t[0] for t in threads], dtype=np.int64)
        want_warp = np.array([0 if t[1] is None else t[1] for t in threads], dtype=np.int64)
        if (lane == want_lane).all() and (warp == want_warp).all() and (slot == slot[0]).all():
            return int(slot[0])
        return None

    def slots_array(self, coords, lanes, warps):
        """The common slot of each row of `coords` (an (R, T, ndim) int64 array: R fragment registers, each at T
        threads, thread t being lane lanes[t] of warp warps[t]), proven for all R x T at once as `_slot_array`
        proves one register; None when one register fails that proof (the caller then proves them one at a time,
        which words the error). A wgmma m64n256 accumulator is 128 registers of 256 threads each."""
        import numpy as np
        n_regs, n_threads, ndim = coords.shape
        if not ndim or int(np.abs(coords).max()) >= 1 << 24:
            return None
        got = self.view.owners_array(coords.reshape(n_regs * n_threads, ndim))
        if got is None:
            return None
        slot, lane, warp = (a.reshape(n_regs, n_threads) for a in got)
        if not ((lane == lanes).all() and (warp == warps).all() and (slot == slot[:, :1]).all()):
            return None
        return [self.in_storage(int(s)) for s in slot[:, 0]]

    def in_storage(self, slot: int) -> int:
        size = self.view.storage.size
        if slot < 0 or (size is not None and slot * self.view.dtype.bits >= size * self.view.storage.dtype.bits):
            raise self.ctx.error(f"register slot {slot} is outside {self.view.storage.name} "
                                 f"({size} x {self.view.storage.dtype.name})", self.op)
        return slot

    def _locate(self, coord):
        key = tuple(coord)
        r = self.cache.get(key)
        if r is None:
            r = self.view.locate(list(coord))
            self.cache[key] = r
        return r


def reg(view: View, slot: int, write=False) -> ir.Reg:
    return ir.Reg(view.storage, slot, view.dtype, write)


def check_no_overlap(ctx: Ctx, op: Operand, regs) -> None:
    seen = {}
    for r in regs:
        key = (r.storage.name, r.index * r.dtype.bits)
        if key in seen:
            raise ctx.error(f"destination registers overlap: register {r.index} of {r.storage.name} would be "
                            f"written by two different coordinates of {op.view.describe()}; every written "
                            f"coordinate needs its own register", op)
        seen[key] = r.index


def repeat_coords(rep) -> list:
    return list(product(*(range(r) for r in rep)))


def thread_slots(ctx: Ctx, op: Operand, group_axes, coord_tail) -> int:
    """Slot of a register operand of a thread instruction: group coordinates bind the lane (and warp)."""
    owners = getattr(op, "_owners", None)
    if owners is None:
        owners = op._owners = Owners(ctx, op)
    if not group_axes:
        return owners.slot([(0, None, list(coord_tail))], "every thread's register")
    exts = ctx.group_extents(group_axes)
    fast = _separable_slot(ctx, op.view, group_axes, exts, coord_tail)
    if fast is not None:
        return owners.in_storage(fast)
    threads = []
    for g in product(*(range(e) for e in exts)):
        lane = g[group_axes.index("lane")] if "lane" in group_axes else 0
        warp = g[group_axes.index("warp")] if "warp" in group_axes else None
        threads.append((lane, warp, list(g) + list(coord_tail)))
    return owners.slot(threads, "the register of the issuing lane {lane}")


# Lane and warp axes whose offsets add up to the owner linearly (owner_of: lane = laneid, warp = warpid +
# wid_in_wg); a layout on another axis (tx, tid_in_wg: split mod 32) takes the per-lane proof.
_LINEAR_AXES = ("laneid", "warpid", "wid_in_wg")


def _separable_slot(ctx: Ctx, view: View, group_axes, exts, tail):
    """The slot of `tail` proven for every lane and warp of the group at the cost of one locate, or None when the
    shortcut does not apply or does not prove it (then the per-lane proof runs and words any error).

    A plain view (a buffer, or one TileLayout without swizzle) locates a coordinate as a sum of one term per
    dimension (each dimension's digits times its strides), so locate(g, tail) = locate(g, 0) + locate(0, tail)
    exactly, on the storage offset and on every axis. The group part is measured once per view and group shape
    (and shared by the apply's operands): every thread g must see the same storage offset s_g = s0 and an owner
    lane that differs from its own by the same dl (and warp by dw); then coordinate (g, tail) sits in slot
    s0 + s_tail on lane(g) for every g exactly when lane_tail = -dl and warp_tail = -dw. A 4096-register warp
    tile proves in 4096 locates instead of 131072."""
    layout = getattr(view, "layout", "none")
    if type(view).__name__ != "RootView" or (layout is not None and getattr(layout, "swizzle", None)):
        return None
    if not all(type(c) is int for c in tail):
        return None
    cache = ctx.__dict__.setdefault("_group_probes", {})
    key = (id(view), tuple(group_axes), tuple(exts), len(tail))
    probe = cache.get(key, False)
    if probe is False:
        probe = cache[key] = _group_probe(view, group_axes, exts, len(tail))
    if probe is None:
        return None
    s0, dl, dw = probe
    st, ax = view.locate([0] * len(group_axes) + list(tail))
    lin = _linear_owner(st, ax)
    if lin is None or lin[0] != -dl or lin[1] != -dw:
        return None
    return s0 + st


def _linear_owner(s, ax):
    if type(s) is not int or any(k not in _LINEAR_AXES or type(v) is not int for k, v in ax.items()):
        return None
    return ax.get("laneid", 0), ax.get("warpid", 0) + ax.get("wid_in_wg", 0)


def _group_probe(view, group_axes, exts, ntail):
    """(s0, dl, dw) of the group part of `view` (see _separable_slot), or None where it is not uniform."""
    found = None
    for g in product(*(range(e) for e in exts)):
        s, ax = view.locate(list(g) + [0] * ntail)
        lin = _linear_owner(s, ax)
        if lin is None:
            return None
        lane = g[group_axes.index("lane")] if "lane" in group_axes else 0
        warp = g[group_axes.index("warp")] if "warp" in group_axes else 0
        here = (s, lin[0] - lane, lin[1] - warp)
        if found is None:
            found = here
        elif here != found:
            return None
    return found


def sample_groups(gaxes, gext) -> list:
    """Group coordinates of a few threads (lanes 0, 1, 5 and the last of the first and last warp) for static
    checks."""
    if "lane" in gaxes:
        n = gext[gaxes.index("lane")]
        lanes = sorted({lane for lane in (0, 1, 5) if lane < n} | {n - 1})
    else:
        lanes = [0]
    warps = sorted({0, gext[gaxes.index("warp")] - 1}) if "warp" in gaxes else [0]
    out = []
    for w in warps:
        for lane in lanes:
            out.append([lane if a == "lane" else w for a in gaxes])
    return out


def check_contiguous(ctx: Ctx, op: Operand, coords, align: int, what: str) -> None:
    """The elements at `coords` (full coordinates, in order) must sit at consecutive storage offsets, the first
    aligned to `align` bytes. Proven on the static part of the offsets; run-time values are pinned to two values
    so that a distance or an alignment that depends on them is refused rather than assumed."""
    check_contiguous_rows(ctx, op, [coords], align, lambda k: what)


def check_contiguous_rows(ctx: Ctx, op: Operand, rows, align: int, what_of) -> None:
    """`check_contiguous(ctx, op, rows[k], align, what_of(k))` for every k, in order (the first failure raises),
    with the offsets of all rows evaluated in one pass. A row proven before in this kernel under a key that decides
    it (the view's `pinned_key`, the coordinates, the alignment) is not proven again."""
    view = op.view
    static = all(type(c) is int for coords in rows for coord in coords for c in coord)
    pk = view.pinned_key() if static else None
    keys = [("contiguous", pk, tuple(map(tuple, coords)), align) if pk is not None else None for coords in rows]
    todo = [k for k in range(len(rows)) if keys[k] is None or keys[k] not in ctx.proofs]
    if not todo:
        return
    by_pin = pinned_offsets(view, [c for k in todo for c in rows[k]], arrays=True) if static else None
    if by_pin is not None and _rows_contiguous(by_pin, [len(rows[k]) for k in todo], view.dtype.bits // 8, align):
        for k in todo:
            if keys[k] is not None:
                ctx.proofs[keys[k]] = True
        return
    if by_pin is not None:
        by_pin = [offs.tolist() if type(offs) is not list else offs for offs in by_pin]
    pos = 0
    for k in todo:
        n = len(rows[k])
        _check_contiguous(ctx, op, rows[k], align, what_of(k),
                          None if by_pin is None else [offs[pos:pos + n] for offs in by_pin])
        pos += n
        if keys[k] is not None:
            ctx.proofs[keys[k]] = True


def _rows_contiguous(by_pin, lengths, nbytes: int, align: int) -> bool:
    """Whether every row (consecutive runs of `lengths` in each pin's offsets) passes `_check_contiguous`, decided
    on all rows at once; False also when that cannot be decided so (rows of unequal length, few rows), and then the
    per-row proof runs and words the error. Equal to it: each row's offsets minus its first are 0, 1, 2, ... at
    every pin (so the distances do not depend on the pin) and each row's first byte is aligned at every pin."""
    n = lengths[0]
    if len(lengths) < 4 or any(m != n for m in lengths) or not n:
        return False
    import numpy as np
    step = np.arange(n, dtype=np.int64)
    for offs in by_pin:
        a = np.asarray(offs, dtype=np.int64).reshape(len(lengths), n)
        if not ((a - a[:, :1]) == step).all() or ((a[:, 0] * nbytes) % align).any():
            return False
    return True


def _check_contiguous(ctx: Ctx, op: Operand, coords, align: int, what: str, by_pin) -> None:
    """One row, from its offsets per pin (`pinned_offsets`), or None: then from the offset expressions."""
    view = op.view
    shown = tuple(coords[0])
    if by_pin is None:
        # a part the direct evaluation cannot read: build the offset expressions and evaluate them (the
        # expression builders may fold that part away, e.g. times a zero stride)
        exprs = located(view, coords)
        try:
            offs = static_offsets(exprs)
        except ValueError as e:
            raise ctx.error(f"cannot prove {what} consecutive: {e}", op) from None
        if offs is None:
            return
        starts = [evaluate(exprs[0], pin) for pin in PINS]
    else:
        offs = by_pin[0]
        rel = [o - offs[0] for o in offs]
        for other in by_pin[1:]:
            if [o - other[0] for o in other] != rel:
                raise ctx.error(f"cannot prove {what} consecutive: the distance between words depends on run-time "
                                f"values", op)
        starts = [o[0] for o in by_pin]
    nbytes = view.dtype.bits // 8
    for k in range(1, len(offs)):
        if offs[k] - offs[0] != k:
            raise ctx.error(f"{what} must be {len(offs) * nbytes} contiguous bytes (consecutive elements), but from "
                            f"coordinate {shown} its {len(offs)} elements sit at offsets {offs} of "
                            f"{view.storage.name}", op)
    for pin, start in zip(PINS, starts):
        start *= nbytes
        if start % align:
            why = "" if pin == PINS[0] else f" when a run-time index is {pin} (alignment must not depend on it)"
            raise ctx.error(f"{what} must be aligned to {align} bytes, but coordinate {shown} starts at byte "
                            f"offset {start}{why}", op)


def pinned_offsets(view: View, coords, arrays: bool = False):
    """The storage offsets of `coords` for each pin in PINS (ints), or None when a run-time part of the view cannot
    be evaluated directly. The same values as evaluating `located(view, coords)` per pin (View.storage_pinned),
    without building the expression trees: ldmatrix alone proves some 36 thousand rows in the GEMM kernel. With
    `arrays`, a pin evaluated on numpy stays an int64 array (the others are lists)."""
    arr = None
    if type(coords) is not list:      # an (n, ndim) int64 array already (wgmma's descriptor proof)
        arr = coords if coords.shape[1] and int(abs(coords).max()) < 1 << 24 else None
        if arr is None:
            coords = coords.tolist()
    elif len(coords) >= _ARRAY_BATCH and coords[0]:
        import numpy as np
        try:        # ints only make an int64 array (an expression makes an object array, ragged rows fail)
            arr = np.array(coords)
        except ValueError:
            arr = None
        if arr is None or arr.dtype != np.int64 or arr.ndim != 2:
            arr = None
        elif int(np.abs(arr).max()) >= 1 << 24:
            arr = None
    if arr is None and not all(type(c) is int for coord in coords for c in coord):
        return None
    out = []
    for pin in PINS:
        offs = None
        if arr is not None:
            a = view.storages_array(arr, pin, {})
            offs = None if a is None else a if arrays else a.tolist()
        if offs is None:
            if type(coords) is not list:
                coords = coords.tolist()
            offs = view.storages_pinned(coords, pin, {})
        if offs is None:
            return None
        out.append(offs)
    return out


def static_offsets_of(view: View, coords):
    """`ir.eval.static_offsets(located(view, coords))` (the offsets at the first pin; None when a part cannot be
    evaluated; ValueError when their differences change with run-time values), through `pinned_offsets` where it
    can, so no expression tree is built. `coords`: a list of coordinates or an (n, ndim) int64 array; the offsets
    are an int64 array where they were evaluated on numpy, else a list."""
    by_pin = pinned_offsets(view, coords, arrays=True)
    if by_pin is None:
        return static_offsets(located(view, coords if type(coords) is list else coords.tolist()))
    import numpy as np
    first = by_pin[0]
    try:
        rel = np.asarray(first, dtype=np.int64)
        rel = rel - rel[0]
        for other in by_pin[1:]:
            o = np.asarray(other, dtype=np.int64)
            if not np.array_equal(o - o[0], rel):
                raise ValueError("the distance between words depends on run-time values")
    except OverflowError:              # offsets beyond 64 bits: compare them as Python ints
        rel = [o - first[0] for o in first]
        for other in by_pin[1:]:
            if [o - other[0] for o in other] != rel:
                raise ValueError("the distance between words depends on run-time values") from None
    return first


# from this many coordinates on, pinned_offsets evaluates them as numpy arrays (an ldmatrix repeat of a
# 256-thread block proves 1024 words at once)
_ARRAY_BATCH = 64


def memory_addr(ctx: Ctx, op: Operand, group_ids, coord_tail):
    off, axes = op.view.locate(list(group_ids) + list(coord_tail))
    if axes and any(not (isinstance(v, int) and v == 0) for v in axes.values()):
        raise ctx.error("memory views map coordinates to storage only", op)
    return ir.as_expr(off, dt.int32, ctx.loc)


def copy_repeats(ctx: Ctx, dst: Operand, src: Operand, nbytes: int, gaxes, gext, align: int, what: str) -> tuple:
    """The repeat shape of a copy whose operands read as (*group, *repeat, nbytes of elements): each block is
    checked contiguous and aligned to `align` on both sides, and both sides must repeat alike."""
    reps = []
    for op in (dst, src):
        esize = op.view.dtype.nbytes
        if nbytes % esize:
            raise ctx.error(f"{nbytes} bytes is not a whole number of {op.view.dtype.name} elements", op)
        n = nbytes // esize
        rep = split_shape(ctx, op, len(gaxes), (n,), gext)
        for g in sample_groups(gaxes, gext):
            for coord in repeat_coords(rep):
                check_contiguous(ctx, op, [g + list(coord) + [e] for e in range(n)], align, what)
        reps.append(rep)
    if tuple(reps[0]) != tuple(reps[1]):
        raise ctx.error(f"repeat shape {reps[1]} does not match dst's {reps[0]}", src)
    return reps[0]


def cache_policy(ctx: Ctx, params: dict, hint: bool):
    """The `cache_policy=` operand (a uint64 expression) of an opcode with .L2::cache_hint, or None without it;
    the keyword is required exactly when the opcode carries the qualifier (ld, st, cp.async)."""
    if "cache_policy" in params and not hint:
        raise ctx.error("cache_policy is only allowed when the opcode carries .L2::cache_hint")
    if not hint:
        return None
    if "cache_policy" not in params:
        raise ctx.error("the opcode carries .L2::cache_hint, so cache_policy= (a uint64 policy) is required")
    v, loc = params["cache_policy"]
    if not (isinstance(v, ir.Expr) and v.dtype.bits == 64 and v.dtype.is_int) and \
            not (isinstance(v, int) and not isinstance(v, bool)):
        raise CompilationError(f"{ctx.opcode}: cache_policy must be a 64-bit integer value", loc)
    return ir.as_expr(v, dt.uint64, loc) if isinstance(v, int) else v
