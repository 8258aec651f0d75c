"""atom / red: one atomic read-modify-write of one element of global or shared memory per thread and repeat.

`atom{.sem}{.scope}{.space}.op{.noftz}.type d, [a], b{, c}` returns the old value in d; `red` has no d. The memory
operand reads as (*group, *repeat, 1) like ld/st's single word; its element may sit at a run-time offset
(`hist[b : b + 1]`), since an atomic touches one element and needs no contiguity proof beyond its natural
alignment. The legal op/type/qualifier combinations are the PTX ISA's (checked against ptxas by the tests).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import nodes as ir
from ..family import Refusal
from ..operands import THREAD, Ctx, check_contiguous, check_no_overlap, check_scope, check_slot_type, memory_addr, repeat_coords, sample_groups, scalar_value, split_shape, thread_slots
from ..register.pattern import TYPES, predicate

SEMS = ("relaxed", "acquire", "release", "acq_rel")
RED_SEMS = ("relaxed", "release")           # red has no read side, so nothing to acquire
SCOPES = ("cta", "cluster", "gpu", "sys")
SPACES = {"global": "global", "shared": "shared", "shared::cta": "shared"}
HALF_ADD = ("f16", "f16x2", "bf16", "bf16x2")       # written add.noftz.<type>
# op -> the types PTX has for it (scalar forms; the sm_90 vector forms and .b128 are not supported)
OPS = {
    "add": ("u32", "s32", "u64", "f32", "f64") + HALF_ADD,
    "inc": ("u32",), "dec": ("u32",),
    "min": ("u32", "s32", "u64", "s64"), "max": ("u32", "s32", "u64", "s64"),
    "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64"),
    "exch": ("b32", "b64"),
    "cas": ("b16", "b32", "b64"),
}
RED_OPS = tuple(o for o in OPS if o not in ("exch", "cas"))     # red returns nothing: no exchange, no compare
# the oldest target of each type-dependent form (PTX ISA, "atom": target ISA notes)
TYPE_SM = {("add", "f16"): 70, ("add", "bf16"): 90, ("add", "bf16x2"): 90, ("cas", "b16"): 70}


@dataclass(frozen=True)
class Form:
    opcode: str
    kind: str                    # atom | red
    sem: str | None
    scope: str | None
    space: str                   # global | shared
    op: str
    type: str
    noftz: bool
    min_sm: int

    @property
    def names(self) -> tuple:
        """The operands in PTX order."""
        if self.kind == "red":
            return ("a", "b")
        return ("d", "a", "b", "c") if self.op == "cas" else ("d", "a", "b")


def _supported(kind) -> str:
    sems = RED_SEMS if kind == "red" else SEMS
    ops = RED_OPS if kind == "red" else tuple(OPS)
    lines = ", ".join(f".{o} ({' '.join('.' + t for t in OPS[o])})" for o in ops)
    return (f"supported: {kind}{{.sem}}{{.scope}}.space.op{{.noftz}}.type with .sem {' '.join('.' + s for s in sems)}"
            f"; .scope {' '.join('.' + s for s in SCOPES)}; .space .global .shared .shared::cta; "
            f"op and types {lines}; .noftz exactly with the f16/bf16 adds")


def match(opcode: str):
    """atom{.sem}{.scope}{.space}.op{.noftz}.type and red{.sem}{.scope}{.space}.op{.noftz}.type, in PTX's order."""
    parts = opcode.split(".")
    kind = parts[0]
    if kind not in ("atom", "red"):
        return None
    if len(parts) < 3:
        return Refusal(f"is not a complete {kind} opcode; {_supported(kind)}")
    rest = parts[1:]
    sem = scope = space = None
    while rest and rest[0] in SEMS + SCOPES + tuple(SPACES):
        q = rest.pop(0)
        if q in SEMS and sem is None and scope is None and space is None:
            sem = q
        elif q in SCOPES and scope is None and space is None:
            scope = q
        elif q in SPACES and space is None:
            space = q
        else:
            return Refusal(f"qualifier .{q} is repeated or out of order (write {kind}.sem.scope.space.op.type, "
                           f"e.g. {kind}.relaxed.gpu.global.add.u32)")
    if space is None:
        return Refusal(f"needs a state space (.global, .shared or .shared::cta) after .sem/.scope; {_supported(kind)}")
    if len(rest) not in (2, 3):
        return Refusal(f"expected .op{{.noftz}}.type after .{space}, got {'.'.join(rest) or 'nothing'}; "
                       f"{_supported(kind)}")
    op, ty = rest[0], rest[-1]
    noftz = len(rest) == 3
    if op not in OPS:
        return Refusal(f"unknown operation .{op}; {_supported(kind)}")
    if kind == "red" and op not in RED_OPS:
        return Refusal(f"red has no .{op} (it returns nothing; use atom.{op}); {_supported(kind)}")
    if sem is not None and kind == "red" and sem not in RED_SEMS:
        return Refusal(f"red takes .sem {' or '.join('.' + s for s in RED_SEMS)} only, not .{sem}")
    if noftz and rest[1] != "noftz":
        return Refusal(f"unknown qualifier .{rest[1]}; {_supported(kind)}")
    if ty not in OPS[op]:
        return Refusal(f"'.{ty}' is not a type of {kind}.{op} (types: {' '.join('.' + t for t in OPS[op])})")
    if (op == "add" and ty in HALF_ADD) != noftz:
        return Refusal(f"{kind}.add.{ty} must be written {kind}.add.noftz.{ty}" if not noftz else
                       f".noftz belongs to the f16/bf16 adds only, not {kind}.{op}.{ty}")
    sm = TYPE_SM.get((op, ty), 50)
    if scope == "cluster":
        sm = max(sm, 90)
    if space == "shared::cta":      # PTX 7.8, which tiledsl emits from sm_80 on
        sm = max(sm, 80)
    return Form(opcode, kind, sem, scope, SPACES[space], op, ty, noftz, sm)


def min_sm(form: Form) -> int:
    return form.min_sm


def expand(form: Form, ctx: Ctx) -> list:
    allowed = {"pred", "preserve_dst"} if form.kind == "atom" else {"pred"}
    params = ctx.params(allowed)
    ops = dict((o.name, o) for o in ctx.operands(list(form.names)))
    mem = ops["a"]
    dst = ops.get("d")
    pred, preserve = predicate(ctx, params, writes=dst is not None)
    gaxes = ctx.group_axes(THREAD)
    ctx.check_block_for_scope(THREAD)
    gext = ctx.group_extents(gaxes)
    bits, carrier = TYPES[form.type]
    check_scope(ctx, mem, (form.space,), f" in {form.space} memory (the opcode says .{form.space})")
    _check_width(ctx, mem, bits, form)
    check_slot_type(ctx, mem, form.type, form.opcode)
    rep = split_shape(ctx, mem, len(gaxes), (1,), gext)
    regs = {}
    for name in form.names:
        if name == "a":
            continue
        op = ops[name]
        if op.is_view:
            check_scope(ctx, op, ("local",))
            _check_width(ctx, op, bits, form)
            check_slot_type(ctx, op, form.type, form.opcode)
            r = split_shape(ctx, op, len(gaxes), (1,), gext)
            if tuple(r) != tuple(rep):
                raise ctx.error(f"repeat shape {r} does not match operand a's {rep}", op)
        elif name == "d":
            raise ctx.error("the destination must be a register buffer (T.alloc_local), not a scalar", op)
        else:
            if form.type.endswith("x2") and isinstance(op.value, float):
                raise ctx.error(f"a packed {form.type} constant must encode both halves: give its bits as an "
                                f"integer, e.g. T.uint32(0x3C003C00)", op)
            regs[name] = ir.Val(scalar_value(ctx, op, carrier))
    for g in sample_groups(gaxes, gext):
        for coord in repeat_coords(rep):
            check_contiguous(ctx, mem, [g + list(coord) + [0]], bits // 8, "the element of one atomic")
    gids = ctx.group_ids(gaxes)
    out, written = [], []
    for coord in repeat_coords(rep):
        tail = list(coord) + [0]
        groups = []
        for name in form.names:
            op = ops[name]
            if name == "a":
                groups.append([ir.Addr(mem.view.storage, memory_addr(ctx, mem, gids, tail), mem.view.dtype)])
            elif name in regs:
                groups.append([regs[name]])
            else:
                r = ir.Reg(op.view.storage, thread_slots(ctx, op, gaxes, tail), op.view.dtype, name == "d")
                if name == "d":
                    written.append(r)
                groups.append([r])
        out.append(ctx.native(groups, pred, preserve, "store", f"rep{coord}"))
    if dst is not None:
        check_no_overlap(ctx, dst, written)
    return out


def _check_width(ctx, op, bits, form):
    d = op.view.dtype
    if d.bits != bits:
        raise ctx.error(f"element width must be {bits} bits for {form.opcode}, but {op.view.describe()} has "
                        f"{d.bits}-bit {d.name} (reinterpret explicitly with .view(dtype=...))", op)


def access_spans(n: ir.Native) -> list:
    """An atomic touches exactly one element at its one address."""
    return [1]


__all__ = ["Form", "match", "expand", "min_sm", "access_spans"]
