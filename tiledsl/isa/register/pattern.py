"""The register family: mov add sub mul fma min max neg abs cvt, div, and the fast-math set (ex2 lg2 rcp rsqrt sqrt
sin cos tanh .approx), thread instructions.

Operands read as (*group, *repeat, count) where count is the slot's PTX register-group count (1 for a scalar
register). Scalar expressions may fill read slots of count 1 and broadcast over repeats. `pred` and
`preserve_dst` follow mov: with `pred` alone the destination is undefined where pred is false.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...core import dtypes as dt
from ...ir import nodes as ir
from ..family import Refusal
from ..operands import THREAD, Ctx, check_no_overlap, check_slot_type, check_scope, memory_addr, reg, repeat_coords, scalar_value, split_shape, thread_slots

# PTX register type -> (bits, carrier dtype used for scalars)
TYPES = {
    "b16": (16, dt.uint16), "b32": (32, dt.uint32), "b64": (64, dt.uint64),
    "u16": (16, dt.uint16), "u32": (32, dt.uint32), "u64": (64, dt.uint64),
    "s16": (16, dt.int16), "s32": (32, dt.int32), "s64": (64, dt.int64),
    "f16": (16, dt.float16), "bf16": (16, dt.bfloat16), "f32": (32, dt.float32), "f64": (64, dt.float64),
    "f16x2": (32, dt.uint32), "bf16x2": (32, dt.uint32), "f32x2": (64, dt.uint64),
    "e4m3x2": (16, dt.uint16), "e5m2x2": (16, dt.uint16),
}
RND = {"rn", "rz", "rm", "rp"}
IRND = {"rni", "rzi", "rmi", "rpi"}
INTS = {"u16", "u32", "u64", "s16", "s32", "s64"}
FLOATS = {"f16", "bf16", "f32", "f64"}
HALF = {"f16", "f16x2", "bf16", "bf16x2"}
FP8X2 = {"e4m3x2", "e5m2x2"}    # cvt destinations only: two fp8 bytes packed in a 16-bit register
# Qualifiers are written in PTX's order; at most one of each exclusive set.
ORDER = ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi", "approx", "full", "hi", "lo", "wide",
         "ftz", "sat", "relu", "NaN", "abs", "satfinite")
EXCLUSIVE = (RND | IRND | {"approx", "full"}, {"hi", "lo", "wide"}, {"sat", "relu"})

# op -> (operand names, {type: (allowed qualifiers, required)}): `required` is None, a set (one of it must be
# written) or a tuple of such sets (each must be met: ex2.approx.ftz.bf16 needs both .approx and .ftz).
_F32 = RND | {"ftz", "sat"}
ARITH2 = {
    "f32": (_F32, None), "f64": (RND, None), "f16": ({"rn", "ftz", "sat"}, None),
    "f16x2": ({"rn", "ftz", "sat"}, None), "bf16": ({"rn"}, None), "bf16x2": ({"rn"}, None),
    "f32x2": (RND | {"ftz"}, None),
}
_APPROX, _APPROX_FTZ = {"approx"}, {"approx", "ftz"}
FASTMATH = {"ex2", "lg2", "rcp", "rsqrt", "sqrt", "sin", "cos", "tanh"}   # the ops with an .approx form
_INT_ADD = {"s32": ({"sat"}, None), **{t: (set(), None) for t in INTS - {"s32"}}}
TABLE = {
    "add": (("dst", "a", "b"), {**ARITH2, **_INT_ADD}),
    "sub": (("dst", "a", "b"), {**ARITH2, **_INT_ADD}),
    "mul": (("dst", "a", "b"), {**ARITH2, **{t: ({"lo", "hi", "wide"} if t[1:] in ("16", "32") else {"lo", "hi"},
                                                 {"lo", "hi", "wide"}) for t in INTS}}),
    "fma": (("dst", "a", "b", "c"), {
        "f32": (_F32, RND), "f64": (RND, RND), "f16": ({"rn", "ftz", "sat", "relu"}, {"rn"}),
        "f16x2": ({"rn", "ftz", "sat", "relu"}, {"rn"}), "bf16": ({"rn", "relu"}, {"rn"}),
        "bf16x2": ({"rn", "relu"}, {"rn"}), "f32x2": (RND | {"ftz"}, RND)}),
    # min/max.f32 also has a three-input form (d, a, b, c; sm_100) whose .abs the two-input form lacks
    "min": (("dst", "a", "b"), {"f32": ({"ftz", "NaN", "abs"}, None), "f64": (set(), None),
                                "f16": ({"ftz", "NaN"}, None), "f16x2": ({"ftz", "NaN"}, None),
                                "bf16": ({"NaN"}, None), "bf16x2": ({"NaN"}, None),
                                "s32": ({"relu"}, None), **{t: (set(), None) for t in INTS - {"s32"}}}),
    "neg": (("dst", "a"), {"f32": ({"ftz"}, None), "f64": (set(), None), "f16": ({"ftz"}, None),
                           "f16x2": ({"ftz"}, None), "bf16": (set(), None), "bf16x2": (set(), None),
                           "s16": (set(), None), "s32": (set(), None), "s64": (set(), None)}),
    "div": (("dst", "a", "b"), {"f32": (RND | {"ftz", "approx", "full"}, RND | {"approx", "full"}),
                                "f64": (RND, RND), **{t: (set(), None) for t in INTS}}),
    "sqrt": (("dst", "a"), {"f32": (RND | {"ftz", "approx"}, RND | {"approx"}), "f64": (RND, RND)}),
    # rcp.f64 is .rnd or the gross rcp.approx.ftz.f64 (its pairing rule is in _pairing)
    "rcp": (("dst", "a"), {"f32": (RND | {"ftz", "approx"}, RND | {"approx"}),
                           "f64": (RND | {"approx", "ftz"}, RND | {"approx"})}),
    **{op: (("dst", "a"), {"f32": (_APPROX_FTZ, _APPROX)}) for op in ("lg2", "sin", "cos")},
    "ex2": (("dst", "a"), {"f32": (_APPROX_FTZ, _APPROX), "f16": (_APPROX, _APPROX), "f16x2": (_APPROX, _APPROX),
                           "bf16": (_APPROX_FTZ, (_APPROX, {"ftz"})), "bf16x2": (_APPROX_FTZ, (_APPROX, {"ftz"}))}),
    "rsqrt": (("dst", "a"), {"f32": (_APPROX_FTZ, _APPROX), "f64": (_APPROX_FTZ, _APPROX)}),
    "tanh": (("dst", "a"), {t: (_APPROX, _APPROX) for t in ("f32", "f16", "f16x2", "bf16", "bf16x2")}),
    "mov": (("dst", "a"), {t: (set(), None) for t in ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32",
                                                       "s64", "f32", "f64")}),
}
TABLE["max"] = TABLE["min"]
TABLE["abs"] = TABLE["neg"]
WIDE = {"u16": "u32", "s16": "s32", "u32": "u64", "s32": "s64"}


@dataclass(frozen=True)
class Form:
    opcode: str
    op: str
    quals: tuple
    type: str                    # destination register type
    src_type: str                # source register type (differs for cvt and mul.wide)
    names: tuple


def _dots(qs) -> str:
    return ", ".join("." + q for q in qs) or "none"


def _check_quals(op, ty, quals):
    """An error message for a badly written qualifier list, or None."""
    if len(set(quals)) != len(quals):
        return f"a qualifier is repeated in {_dots(quals)}"
    unknown = [q for q in quals if q not in ORDER]
    if unknown:
        return f"unknown qualifier(s) {_dots(unknown)} for {op}.{ty}"
    for group in EXCLUSIVE:
        both = [q for q in quals if q in group]
        if len(both) > 1:
            return f"qualifiers {_dots(both)} exclude each other"
    canon = sorted(quals, key=ORDER.index)
    if list(quals) != canon:
        return f"write the qualifiers in PTX order: {'.'.join([op] + canon + [ty])}"
    return None


def match(opcode: str):
    """A Form, a Refusal for a malformed register opcode, or None when it is not a register opcode."""
    parts = opcode.split(".")
    op = parts[0]
    if op == "cvt":
        return _match_cvt(opcode, parts)
    if op not in TABLE or len(parts) < 2:
        return None
    names, types = TABLE[op]
    ty = parts[-1]
    if ty not in types:
        return Refusal(f"'{ty}' is not a register type of {op} (types: {', '.join(sorted(types))})")
    quals = tuple(parts[1:-1])
    err = _check_quals(op, ty, quals)
    if err:
        return Refusal(err)
    allowed, required = types[ty]
    bad = [q for q in quals if q not in allowed]
    if bad:
        return Refusal(f"qualifier(s) {_dots(bad)} not valid for {op}.{ty} (allowed: {_dots(sorted(allowed))})")
    for need in ([required] if isinstance(required, set) else list(required or ())):
        if not set(quals) & need:
            return Refusal(f"{op}.{ty} needs " + (f"one of {_dots(sorted(need))}" if len(need) > 1 else
                                                  f".{next(iter(need))}"))
    err = _pairing(op, ty, set(quals))
    if err:
        return Refusal(err)
    src = ty
    if "wide" in quals:
        ty = WIDE[src]
    if "abs" in quals:                   # min/max.abs exists only with three inputs
        names = ("dst", "a", "b", "c")
    return Form(opcode, op, quals, ty, src, names)


def _pairing(op, ty, q):
    """Qualifiers that exist only together (PTX ISA 9.7.3.13-14): the only approximate f64 reciprocal is
    rcp.approx.ftz.f64, and rcp.rnd.f64 takes no .ftz."""
    if op == "rcp" and ty == "f64":
        if "approx" in q and "ftz" not in q:
            return "rcp.approx.f64 needs .ftz: the approximate f64 reciprocal is rcp.approx.ftz.f64"
        if "ftz" in q and "approx" not in q:
            return "rcp.rnd.f64 takes no .ftz (only rcp.approx.ftz.f64 flushes)"
    return None


def three_input(form: Form) -> Form:
    """The three-input form of min/max.f32 (d, a, b, c): the same opcode with one more source."""
    return replace(form, names=("dst", "a", "b", "c"))


def _match_cvt(opcode, parts):
    """cvt{.rnd}{.ftz}{.sat}{.relu}{.satfinite}.dtype.atype: the forms ptxas accepts (checked by the tests)."""
    if len(parts) < 3:
        return Refusal("cvt needs a destination and a source type, e.g. cvt.rn.f16.f32")
    d, s = parts[-2], parts[-1]
    quals = tuple(parts[1:-2])
    dests = INTS | FLOATS | {"f16x2", "bf16x2"} | FP8X2
    if d not in dests:
        return Refusal(f"cvt: '{d}' is not a destination type (types: {', '.join(sorted(dests))})")
    if s not in INTS | FLOATS:
        return Refusal(f"cvt: '{s}' is not a source type (types: {', '.join(sorted(INTS | FLOATS))})")
    if d.endswith("x2") and s != "f32":
        return Refusal(f"cvt.{d} packs two .f32 sources (cvt.rn.{d}.f32 d, a, b), not .{s}")
    err = _check_quals("cvt", f"{d}.{s}", quals)
    if err:
        return Refusal(err)
    need, optional, extras = _cvt_rule(d, s)
    rnd = [q for q in quals if q in RND | IRND]
    if need and not rnd:
        return Refusal(f"cvt.{d}.{s} needs a rounding qualifier: one of {_dots(sorted(need))}")
    if rnd and rnd[0] not in (need or optional):
        ok = _dots(sorted(need or optional)) if (need or optional) else "none"
        return Refusal(f"cvt.{d}.{s}: rounding .{rnd[0]} is not valid here (allowed: {ok})")
    rest = [q for q in quals if q not in rnd]
    bad = [q for q in rest if q not in extras]
    if bad:
        return Refusal(f"cvt.{d}.{s}: qualifier(s) {_dots(bad)} not valid here (allowed: {_dots(sorted(extras))})")
    if {"relu", "satfinite"} & set(rest):
        if not rnd or rnd[0] not in ("rn", "rz"):
            return Refusal(f"cvt.{d}.{s}: .relu and .satfinite need .rn or .rz")
        if {"ftz", "sat"} & set(rest):
            return Refusal(f"cvt.{d}.{s}: .relu/.satfinite cannot be combined with .ftz or .sat")
    if d in FP8X2 and "satfinite" not in rest:
        return Refusal(f"cvt.rn.{d}.f32 needs .satfinite: PTX has only the saturating fp8 conversion "
                       f"(cvt.rn{{.relu}}.satfinite.{d}.f32)")
    names = ("dst", "a", "b") if d.endswith("x2") else ("dst", "a")
    return Form(opcode, "cvt", quals, d, s, names)


_RANGE = {"u16": (0, 16), "u32": (0, 32), "u64": (0, 64), "s16": (1, 16), "s32": (1, 32), "s64": (1, 64)}


def _int_contains(d, s) -> bool:
    (ds, db), (ss, sb) = _RANGE[d], _RANGE[s]
    if ds == ss:
        return db >= sb
    return bool(ds) and db > sb        # unsigned fits a wider signed type only


def _cvt_rule(d, s):
    """(required rounding set or None, optional rounding set, allowed other qualifiers) for cvt.d.s."""
    bf = "bf16" in (d, s)
    f32 = "f32" in (d, s)
    sat = set() if bf else {"sat"}
    ftz = {"ftz"} if f32 and not (bf and s == "bf16") else set()
    if d in FP8X2:
        return {"rn"}, set(), {"relu", "satfinite"}
    if d.endswith("x2"):
        return {"rn", "rz"}, set(), {"relu", "satfinite"}
    if d in INTS and s in INTS:
        return None, set(), set() if _int_contains(d, s) else {"sat"}
    if d in FLOATS and s in INTS:
        return RND, set(), ({"ftz"} if d == "f32" else set()) | sat
    if d in INTS and s in FLOATS:
        return IRND, set(), ({"ftz"} if s == "f32" else set()) | sat
    if d == s:
        return None, IRND, ftz | sat
    if TYPES[d][0] > TYPES[s][0]:                  # widening: exact, no rounding
        return None, set(), ftz | sat
    extra = {"relu", "satfinite"} if d in ("f16", "bf16") and s == "f32" else set()
    return RND, set(), ftz | sat | extra


def min_sm(form: Form) -> int:
    types = {form.type, form.src_type}
    q = set(form.quals)
    if form.op in ("ex2", "tanh") and (form.op == "tanh" or types & HALF):
        return 90 if types & {"bf16", "bf16x2"} else 75         # PTX ISA 9.7.3.22, 9.7.4.9-10
    if form.op in ("min", "max") and len(form.names) == 4:
        return 100                                               # three inputs: PTX ISA 8.8, sm_100
    sm = 50
    if types & {"f16", "f16x2"}:
        sm = 53
    if form.op == "cvt":
        if form.type in FP8X2:
            return 89                                            # PTX ISA 7.8: cvt to .e4m3x2/.e5m2x2
        if types & {"bf16", "bf16x2"}:
            sm = 80 if "f32" in types and types <= {"bf16", "bf16x2", "f32"} else 90
        if "f16x2" in types or "relu" in q:
            sm = max(sm, 80)
        if "satfinite" in q:
            sm = 100
        return sm
    if form.op in ("min", "max") and types & {"f16", "f16x2"}:
        sm = 80
    if types & {"bf16", "bf16x2"}:
        sm = 90 if form.op in ("add", "sub", "mul") else 80
    if "NaN" in q or "relu" in q:
        sm = max(sm, 90 if form.op in ("min", "max") and "relu" in q else 80)
    if "f32x2" in types:
        sm = 100
    return sm


def _slot_dtype(ty: str, bits_override=None) -> dt.DType:
    return TYPES[ty][1]


def expand(form: Form, ctx: Ctx) -> list:
    form = _operand_form(form, ctx)
    params = ctx.params({"pred", "preserve_dst"})
    ops = ctx.operands(list(form.names))
    gaxes = ctx.group_axes(THREAD)
    ctx.check_block_for_scope(THREAD)
    gext = ctx.group_extents(gaxes)
    dst, srcs = ops[0], ops[1:]
    pred, preserve = predicate(ctx, params)

    # register-group counts: the one form whose counts match the operands
    counts = _counts(ctx, form, ops, len(gaxes))
    rep = None
    for op, cnt in zip(ops, counts):
        slot_ty = form.type if op is dst else form.src_type
        bits = TYPES[slot_ty][0] // (cnt if cnt > 1 and form.op == "mov" else 1)
        if op.is_view:
            check_scope(ctx, op, ("local",))
            if op.view.dtype.bits != bits:
                raise ctx.error(f"element width must be {bits} bits for {form.opcode}, but {op.view.describe()} has "
                                f"{op.view.dtype.bits}-bit {op.view.dtype.name} (reinterpret explicitly with "
                                f".view(dtype=...))", op)
            check_slot_type(ctx, op, slot_ty, form.opcode)
            r = split_shape(ctx, op, len(gaxes), (cnt,), gext)
            if rep is None:
                rep = r
            elif tuple(r) != tuple(rep):
                raise ctx.error(f"repeat shape {r} does not match the other operands' {rep}", op)
        elif op is dst:
            raise ctx.error("the destination must be a register buffer, not a scalar", op)
        elif cnt != 1:
            raise ctx.error(f"a scalar can only fill a single-register slot; this slot takes {cnt} registers", op)
    rep = rep or ()
    scal = {}
    for op in srcs:
        if not op.is_view:
            ty = form.src_type
            if ty in ("f16x2", "bf16x2", "f32x2") and isinstance(op.value, float):
                raise ctx.error(f"a packed {ty} constant must encode both values: give its bits as an integer, "
                                f"e.g. T.uint32(0x3C003C00)", op)
            scal[op.name] = scalar_value(ctx, op, _slot_dtype(ty))

    out, written = [], []
    for coord in repeat_coords(rep):
        groups = []
        for op, cnt in zip(ops, counts):
            if not op.is_view:
                groups.append([ir.Val(scal[op.name])])
                continue
            regs = []
            for w in range(cnt):
                slot = thread_slots(ctx, op, gaxes, list(coord) + [w])
                regs.append(ir.Reg(op.view.storage, slot, op.view.dtype, op is dst))
            if op is dst:
                written += regs
            groups.append(regs)
        out.append(ctx.native(groups, pred, preserve, origin=f"rep{coord}"))
    check_no_overlap(ctx, dst, written)
    return out


def _operand_form(form: Form, ctx: Ctx) -> Form:
    """min/max.f32 has a two- and a three-input form under one opcode: exactly one matches the operand count.
    The three-input one needs sm_100, which the registry cannot see from the opcode, so it is checked here."""
    if form.op not in ("min", "max") or form.type != "f32":
        return form
    n = len(ctx.apply.operands)
    if "abs" in form.quals and n == 3:
        raise ctx.error(f"{form.op}.abs.f32 exists only with three inputs (d, a, b, c); the two-input form "
                        f"writes .xorsign.abs, which is not supported")
    if n != 4 or len(form.names) == 4:
        return form
    form = three_input(form)
    if ctx.sm < 100:
        raise ctx.error(f"the three-input form ({form.opcode} d, a, b, c) needs sm_100 or newer; the target is "
                        f"sm_{ctx.sm}")
    if ctx.target.ptx_version < 88:
        raise ctx.error(f"the three-input form ({form.opcode} d, a, b, c) needs PTX ISA 8.8; tiledsl emits "
                        f"{ctx.target.ptx_version / 10:.1f} for sm_{ctx.sm}")
    ctx.form = form                      # the natives carry the three-input form
    return form


def _counts(ctx, form, ops, ng):
    base = [1] * len(ops)
    if form.op != "mov":
        return base
    dst, a = ops
    last = lambda op: op.view.shape[-1] if op.is_view and len(op.view.shape) > ng else 1  # noqa: E731
    dbits = TYPES[form.type][0]
    cands = [[1, 1]]
    if form.type in ("b32", "b64"):
        cands += [[1, 2], [2, 1]]                 # pack {a, b} -> d, or unpack d -> {a, b}
    if form.type == "b64":
        cands += [[1, 4], [4, 1]]
    fits = []
    for c in cands:
        ok = True
        for op, n in zip(ops, c):
            if op.is_view and (last(op) != n or op.view.dtype.bits != dbits // (n if n > 1 else 1)):
                ok = False
            if not op.is_view and n != 1:
                ok = False
        if ok:
            fits.append(c)
    if len(fits) != 1:
        raise ctx.error(f"the operands' last extents and widths match {len(fits)} forms of {form.opcode}; "
                        f"exactly one must match (d, a), (d, {{a, b}}) or ({{a, b}}, d)")
    return fits[0]


def predicate(ctx: Ctx, params, writes=True):
    """`pred` (run-time bool or None) and `preserve_dst` (static bool), checked the same way for every family."""
    from ...core.errors import CompilationError
    from ...ir import ops as fops
    pred, preserve, given = None, False, False
    if "pred" in params:
        v, loc = params["pred"]
        given = v is not None
        if isinstance(v, bool):
            pred = None if v else ir.Const(dt.bool_, loc, False)
        elif isinstance(v, ir.Expr) and v.dtype.kind == "bool":
            pred = v
        elif v is not None:
            raise CompilationError(f"{ctx.opcode}: pred must be a run-time bool or None (e.g. pred=lane < n), got "
                                   f"{fops.describe(v)}", loc)
    if "preserve_dst" in params:
        v, loc = params["preserve_dst"]
        if not isinstance(v, bool):
            raise CompilationError(f"{ctx.opcode}: preserve_dst must be a compile-time bool", loc)
        if v and not given:
            raise CompilationError(f"{ctx.opcode}: preserve_dst=True needs pred (without pred nothing is "
                                   f"preserved)", loc)
        if v and not writes:
            raise CompilationError(f"{ctx.opcode}: preserve_dst=True needs a written register destination", loc)
        preserve = v and pred is not None
    return pred, preserve


__all__ = ["match", "expand", "predicate", "memory_addr", "reg"]
