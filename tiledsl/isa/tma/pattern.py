"""TMA tensor copies: boxes of a tensor map moved between global and shared memory by the TMA unit (sm_90).

    cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes[.multicast::cluster]
                                            [.L2::cache_hint]      dst (shared), tmap, mbar; coords=, coord_steps=,
                                                                   cta_mask= (multicast), cache_policy= (hint)
    cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group[.L2::cache_hint]
                                                                   tmap, src (shared); coords=, coord_steps=, ...
    cp.async.bulk.prefetch.tensor.Nd.L2.global.tile[.L2::cache_hint]   tmap; coords=, cache_policy=
    cp.async.bulk.commit_group                                     no operands
    cp.async.bulk.wait_group[.read] N                              N, a compile-time int 0..63

N is 1..5, the tensor map's rank. The tensor map is a `T.TensorMap` parameter; its box, swizzle and fill are
the map's (lang/tensormap.py). The shared operand reads as `(*repeat, *box)`: one copy per repeat, the
coordinates of repeat r being `coords + sum(r[k] * coord_steps[k])`; the box part must be laid out exactly as
the TMA unit writes it: row-major over the box, XOR-swizzled like the map's swizzle (T.tma_layout builds that
TileLayout), starting on a 128-byte boundary (the swizzle's period with a swizzle: 256, 512, 1024 bytes).
Coordinates are outer-to-inner like the tensor's shape (PTX lists them inner first: the expansion reverses them),
int32 values, compile-time or run-time, and may lie partly or wholly outside the tensor (the box is then filled
with zeros or NaN). A load pays the box's bytes to `mbar` (announce them with mbarrier.arrive.expect_tx); the
mbarrier may also be given by name, `mbar=bar`, the reference system's spelling.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import product

from ...core import dtypes as dt
from ...core.errors import CompilationError
from ...ir import nodes as ir
from ...ir.eval import PINS, evaluate_pinned, located
from ...lang.tensormap import TensorMapArg, TensorMapType, swizzle_of
from ...layout import swizzled
from ..bulk.pattern import _mbarrier
from ..family import Refusal
from ..operands import Ctx, Operand, check_scope, memory_addr, repeat_coords, split_shape, static_offsets_of

LOAD = re.compile(r"cp\.async\.bulk\.tensor\.([1-5])d\.shared::cluster\.global\.tile\."
                  r"mbarrier::complete_tx::bytes(\.multicast::cluster)?(\.L2::cache_hint)?")
STORE = re.compile(r"cp\.async\.bulk\.tensor\.([1-5])d\.global\.shared::cta\.tile\.bulk_group(\.L2::cache_hint)?")
PREFETCH = re.compile(r"cp\.async\.bulk\.prefetch\.tensor\.([1-5])d\.L2\.global\.tile(\.L2::cache_hint)?")
COMMIT = "cp.async.bulk.commit_group"
WAIT = re.compile(r"cp\.async\.bulk\.wait_group(\.read)?")
SUPPORTED = ("supported: cp.async.bulk.tensor.{1..5}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
             "[.multicast::cluster][.L2::cache_hint], cp.async.bulk.tensor.{1..5}d.global.shared::cta.tile."
             "bulk_group[.L2::cache_hint], cp.async.bulk.prefetch.tensor.{1..5}d.L2.global.tile[.L2::cache_hint], "
             "cp.async.bulk.commit_group, cp.async.bulk.wait_group[.read] N")
# the shared-memory alignment of a box: 128 bytes, or the period of the swizzle pattern (8 rows of its span)
ALIGN = {None: 128, 32: 256, 64: 512, 128: 1024}
MAX_WAIT = 63


@dataclass(frozen=True)
class Form:
    opcode: str
    kind: str                       # load | store | prefetch | commit | wait
    rank: int = 0
    multicast: bool = False
    cache_hint: bool = False
    read: bool = False              # wait_group.read
    # per native (set by the expansion): the map, its dimensions (ints or size Vars) and the shared storage with
    # the alignment the box needs there (codegen aligns that allocation; the interpreter reads the map from here)
    tmap: TensorMapType | None = None
    dims: tuple = field(default=(), compare=False)
    smem: object = field(default=None, compare=False)
    smem_align: int = 0


def match(opcode: str):
    m = LOAD.fullmatch(opcode)
    if m:
        return Form(opcode, "load", int(m.group(1)), bool(m.group(2)), bool(m.group(3)))
    m = STORE.fullmatch(opcode)
    if m:
        return Form(opcode, "store", int(m.group(1)), False, bool(m.group(2)))
    m = PREFETCH.fullmatch(opcode)
    if m:
        return Form(opcode, "prefetch", int(m.group(1)), False, bool(m.group(2)))
    if opcode == COMMIT:
        return Form(opcode, "commit")
    m = WAIT.fullmatch(opcode)
    if m:
        return Form(opcode, "wait", read=bool(m.group(1)))
    if opcode.startswith("cp.async.bulk.tensor") or opcode.startswith("cp.async.bulk.prefetch.tensor") or \
            opcode.startswith("cp.async.bulk.commit_group") or opcode.startswith("cp.async.bulk.wait_group"):
        return Refusal(f"{opcode} has no explicit tile pattern; {SUPPORTED}")
    return None


MIN_SM = 90


def expand(form: Form, ctx: Ctx) -> list:
    ctx.thread_only("guard it with `if` for a single issuer")
    if form.kind == "commit":
        ctx.params(set())
        ctx.operands([])
        return [ctx.native([], effect="sync")]
    if form.kind == "wait":
        ctx.params(set())
        (n,) = ctx.operands(["n"])
        if isinstance(n.value, bool) or not isinstance(n.value, int):
            raise ctx.error("must be a compile-time int: the number of bulk groups that may stay pending", n)
        if not 0 <= n.value <= MAX_WAIT:
            raise ctx.error(f"{n.value} is out of range: 0..{MAX_WAIT} bulk groups may stay pending", n)
        return [ctx.native([[ir.Imm(str(n.value))]], effect="sync")]
    allowed = {"coords", "coord_steps"}
    if form.kind == "load":
        allowed.add("mbar")              # the reference system's spelling: the mbarrier by name (API.md)
    if form.multicast:
        allowed.add("cta_mask")
    if form.cache_hint:
        allowed.add("cache_policy")
    params = ctx.params(allowed)
    for need, why in (("coords", "the box's coordinates in the tensor, outer-to-inner"),
                      ("cta_mask", "the CTAs of the cluster that receive the box (.multicast::cluster)"),
                      ("cache_policy", "the 64-bit L2 cache policy (.L2::cache_hint)")):
        if need in allowed and need not in params:
            raise ctx.error(f"{need}= is required: {why}")
    names = {"load": ["dst", "tmap", "mbar"], "store": ["tmap", "src"], "prefetch": ["tmap"]}[form.kind]
    if "mbar" in params:
        if len(ctx.apply.operands) == 3:
            raise ctx.error("the mbarrier is given twice: as the third operand and as mbar=")
        ops = dict(zip(names[:2], ctx.operands(names[:2])))
        ops["mbar"] = Operand("mbar", *params["mbar"])
    else:
        ops = dict(zip(names, ctx.operands(names)))
    tm = _tensor_map(ctx, ops["tmap"], form)
    ann = tm.ann
    smem = ops.get("dst") or ops.get("src")
    coords = _coords(ctx, params["coords"], form.rank)
    if smem is None:
        rep = ()
    else:
        check_scope(ctx, smem, ("shared",), " in shared memory")
        if smem.view.dtype.bits != ann.dtype.bits:
            raise ctx.error(f"{smem.view.describe()} holds {smem.view.dtype.name} but the tensor map "
                            f"{tm.name} moves {ann.dtype.name}: the element widths must match", smem)
        rep = _repeats(ctx, smem, ann)
    steps = _steps(ctx, params.get("coord_steps"), rep, form.rank)
    if smem is not None:
        _check_box_layout(ctx, smem, ann, rep)
    extra = []
    if form.multicast:
        extra.append([ir.Val(_value(ctx, params["cta_mask"], dt.uint16, "cta_mask", 16))])
    if form.cache_hint:
        extra.append([ir.Val(_value(ctx, params["cache_policy"], dt.uint64, "cache_policy", 64))])
    mbar = _mbarrier(ctx, ops["mbar"]) if form.kind == "load" else None
    out = []
    native_form = Form(form.opcode, form.kind, form.rank, form.multicast, form.cache_hint, tmap=ann, dims=tm.dims,
                       smem=smem.view.storage if smem is not None else None, smem_align=ALIGN[ann.swizzle])
    tmap_addr = ir.Addr(tm.storage, ir.Const(dt.int64, ctx.loc, 0), dt.uint8)
    for r in repeat_coords(rep):
        c = [ir.add(coords[k], sum(r[j] * steps[j][k] for j in range(len(rep)))) for k in range(form.rank)]
        cvals = [ir.Val(ir.as_expr(x, dt.int32, ctx.loc)) for x in reversed(c)]     # PTX: innermost first
        groups = [[tmap_addr], cvals]
        if smem is not None:
            a = ir.Addr(smem.view.storage, memory_addr(ctx, smem, [], list(r) + [0] * form.rank), smem.view.dtype)
            groups = [[a]] + groups + [[mbar]] if form.kind == "load" else groups + [[a]]
        effect = {"load": "store", "store": "store", "prefetch": "sync"}[form.kind]
        out.append(ir.Native(ctx.loc, ctx.opcode, groups + extra, None, False, effect, f"rep{r}", (2,)
                             if form.kind == "load" else (1,), form=native_form, family=ctx.family))
    return out


def _tensor_map(ctx: Ctx, op: Operand, form: Form) -> TensorMapArg:
    if not isinstance(op.value, TensorMapArg):
        raise ctx.error(f"must be a tensor-map parameter (annotated T.TensorMap(shape, dtype, box=...)), got "
                        f"{_what(op.value)}", op)
    tm = op.value
    if tm.ann.rank != form.rank:
        raise ctx.error(f"the opcode is .{form.rank}d but tensor map {tm.name} has {tm.ann.rank} dimensions "
                        f"(write .{tm.ann.rank}d)", op)
    return tm


def _what(v) -> str:
    if hasattr(v, "describe"):
        return v.describe()
    return f"the scalar {v!r}" if isinstance(v, (int, float)) else type(v).__name__


def _coords(ctx: Ctx, given, rank: int) -> list:
    value, loc = given
    vals = list(value) if isinstance(value, (tuple, list)) else [value]
    if len(vals) != rank:
        raise CompilationError(f"{ctx.opcode}: coords has {len(vals)} entries but the copy is {rank}-d: one int32 "
                               f"coordinate per dimension, outer-to-inner", loc)
    out = []
    for k, v in enumerate(vals):
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, ir.Expr) and v.dtype.is_int)):
            raise CompilationError(f"{ctx.opcode}: coords[{k}] must be an integer (compile-time or run-time), got "
                                   f"{_what(v)}", loc)
        if isinstance(v, int) and not -2**31 <= v < 2**31:
            raise CompilationError(f"{ctx.opcode}: coords[{k}] = {v} does not fit in int32", loc)
        if isinstance(v, ir.Expr) and v.dtype != dt.int32:
            v = ir.Cast(dt.int32, loc, v)
        out.append(v)
    return out


def _repeats(ctx: Ctx, op: Operand, ann: TensorMapType) -> tuple:
    shape = tuple(op.view.shape)
    if len(shape) < ann.rank or tuple(shape[len(shape) - ann.rank:]) != ann.box:
        raise ctx.error(f"box/layout mismatch: {op.view.describe()} must read as (*repeat, *box) with box "
                        f"{ann.box} (the tensor map's), but its shape is {shape}", op)
    return split_shape(ctx, op, 0, ann.box, [])


def _steps(ctx: Ctx, given, rep: tuple, rank: int) -> list:
    if given is None:
        if rep:
            raise ctx.error(f"the shared operand repeats {rep}: coord_steps= must give one coordinate step "
                            f"(a {rank}-tuple) per repeat axis")
        return []
    value, loc = given
    steps = list(value) if isinstance(value, (tuple, list)) else [value]
    if len(steps) != len(rep):
        raise CompilationError(f"{ctx.opcode}: coord_steps has {len(steps)} entries for {len(rep)} repeat axes "
                               f"(repeats {rep})", loc)
    out = []
    for s in steps:
        s = tuple(s) if isinstance(s, (tuple, list)) else (s,)
        if len(s) != rank or not all(isinstance(x, int) and not isinstance(x, bool) for x in s):
            raise CompilationError(f"{ctx.opcode}: each coord_steps entry is a tuple of {rank} compile-time ints, "
                                   f"got {s!r}", loc)
        out.append(s)
    return out


def _value(ctx: Ctx, given, d: dt.DType, what: str, bits: int) -> ir.Expr:
    v, loc = given
    if isinstance(v, bool):
        raise CompilationError(f"{ctx.opcode}: {what} must be an integer, got a bool", loc)
    if isinstance(v, int):
        if not 0 <= v < 2**bits:
            raise CompilationError(f"{ctx.opcode}: {what} = {v} does not fit in {bits} bits", loc)
        return ir.Const(d, loc, v)
    if isinstance(v, ir.Expr) and v.dtype.is_int:
        return v if v.dtype == d else ir.Cast(d, loc, v)
    raise CompilationError(f"{ctx.opcode}: {what} must be an integer (compile-time or run-time)", loc)


def box_offsets(box: tuple, swizzle: int | None, d: dt.DType, coords) -> list:
    """Where the TMA unit puts box coordinate `c` in shared memory, in elements from the box's start: row-major
    over the box, XOR-swizzled (the interpreter's copy uses the same function on every element)."""
    sw = swizzle_of(swizzle, d)
    out = []
    for c in coords:
        off = 0
        for x, b in zip(c, box):
            off = off * b + x
        out.append(swizzled(off, *sw) if sw else off)
    return out


def _sample(ext: int, full: bool) -> list:
    if full or ext <= 64:
        return list(range(ext))
    vals = {0, ext - 1} | set(range(16))
    k = 1
    while k < ext:
        vals |= {k - 1, k, min(k + 1, ext - 1)}
        k *= 2
    return sorted(v for v in vals if v < ext)


def box_sample(box: tuple) -> list:
    """Box coordinates a layout check visits: every one for boxes up to 4096 elements, else every power-of-two
    neighbour along the last two dimensions (where rows and the swizzle's 16-byte chunks are) and the edges of the
    outer ones."""
    n = 1
    for b in box:
        n *= b
    full = n <= 4096
    axes = []
    for k, b in enumerate(box):
        if full or k >= len(box) - 2:
            axes.append(_sample(b, full))
        else:
            axes.append(sorted({0, 1 % b, b - 1}))
    return list(product(*axes))


_EXPECTED = {}


def _box_expectation(box: tuple, swizzle, d: dt.DType) -> tuple:
    """(box_sample(box), box_offsets of it as an int64 array, the sample as a (len, rank) int64 array), made once
    per box, swizzle and dtype: a kernel checks every TMA apply against it (FA3: a dozen boxes of up to 16384
    elements)."""
    key = (tuple(box), swizzle, d.name)
    hit = _EXPECTED.get(key)
    if hit is None:
        import numpy as np
        sample = box_sample(box)
        hit = _EXPECTED[key] = (sample, np.array(box_offsets(box, swizzle, d, sample), dtype=np.int64),
                                np.array(sample, dtype=np.int64).reshape(len(sample), len(box)))
    return hit


def _check_box_layout(ctx: Ctx, op: Operand, ann: TensorMapType, rep: tuple) -> None:
    """The shared view must hold each box exactly where the TMA unit writes it (box_offsets), aligned."""
    import numpy as np
    view = op.view
    sample, want, cells = _box_expectation(ann.box, ann.swizzle, ann.dtype)
    nbytes = view.dtype.bits // 8
    align = ALIGN[ann.swizzle]
    sw = f"swizzle={ann.swizzle}" if ann.swizzle else "no swizzle"
    for r in (repeat_coords(rep)[:1] + repeat_coords(rep)[-1:]) if rep else [()]:
        if all(type(x) is int for x in r):
            coords = np.empty((len(sample), len(r) + len(ann.box)), np.int64)
            coords[:, :len(r)] = r
            coords[:, len(r):] = cells
        else:
            coords = [list(r) + list(c) for c in sample]
        try:
            got = static_offsets_of(view, coords)
        except ValueError:
            got = None
        if got is None:
            raise ctx.error(f"cannot prove where {view.describe()} holds the box (its offsets depend on run-time "
                            f"values other than a whole-box stage offset)", op)
        try:
            wrong = np.flatnonzero((np.asarray(got, dtype=np.int64) - got[0]) != want)
        except OverflowError:
            wrong = [k for k, g in enumerate(got) if g - got[0] != want[k]]
        if len(wrong):          # the first coordinate (in sample order) the view holds elsewhere
            k = int(wrong[0])
            c, w, g = sample[k], int(want[k]), int(got[k] - got[0])
            raise ctx.error(f"box/layout mismatch: the TMA unit writes box coordinate {c} ({sw}) at element "
                            f"{w} from the box's start, but {view.describe()} holds it at {g} (allocate "
                            f"it with layout=T.tma_layout(box, dtype, swizzle={ann.swizzle}))", op)
        start = located(view, [list(r) + list(sample[0])])[0]
        for pin in PINS:
            b = evaluate_pinned(start, pin)
            if b is not None and (b * nbytes) % align:
                why = "" if pin == PINS[0] else f" when a run-time index is {pin}"
                raise ctx.error(f"the box must start on a {align}-byte boundary of shared memory ({sw}), but "
                                f"{view.describe()} starts it at byte {b * nbytes}{why}", op)


def access_spans(n: ir.Native) -> list:
    """The debug pass checks shared boxes whole; the tensor map's global side is bounded by the TMA unit itself
    (out-of-bounds boxes are filled, not faulted), so its address counts one byte; the mbarrier is one element."""
    f: Form = n.form
    out = []
    for g in n.groups:
        for a in g:
            if isinstance(a, ir.Addr):
                if f.smem is not None and a.storage is f.smem:
                    out.append(f.tmap.box_bytes // max(1, a.dtype.nbytes))
                else:
                    out.append(1)
    return out


def asm(n: ir.Native, operands: list) -> str | None:
    """The tensor operand is written `[tmap, {c_inner, ..., c_outer}]`: the map's address and its coordinates."""
    f: Form = n.form
    if f.kind not in ("load", "store", "prefetch"):
        return None
    ops = list(operands)
    i = 1 if f.kind == "load" else 0
    tensor = f"[{ops[i][1:-1]}, {ops[i + 1]}]"
    ops[i:i + 2] = [tensor]
    return f"{n.opcode} {', '.join(ops)};"
