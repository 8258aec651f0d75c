"""The warp collectives: shfl.sync, vote.sync, redux.sync, match.sync and activemask, thread instructions.

Each lane supplies its own operands, so these are thread instructions (group axes as for `mov`: scope thread none,
warp `(lane,)`, warpgroup/cta `(warp, lane)`), but every lane named in `membermask` must execute the same
instruction converged; the interpreter checks that at run time (semantics.py). Operands are written in PTX order:

    shfl.sync.{up,down,bfly,idx}.b32        d, a, b, c, membermask      (p=: the optional `d|p` predicate)
    vote.sync.{all,any,uni}.pred            d, a, membermask            (d, a: bool)
    vote.sync.ballot.b32                    d, a, membermask            (a: bool)
    redux.sync.{add,min,max}.{u32,s32}      d, a, membermask
    redux.sync.{and,or,xor}.b32             d, a, membermask
    redux.sync.{min,max}{.abs}{.NaN}.f32    d, a, membermask            (sm_100a)
    match.any.sync.{b32,b64}                d, a, membermask
    match.all.sync.{b32,b64}                d, a, membermask            (p=: the optional `d|p` predicate)
    activemask.b32                          d

Register operands read as (*group, *repeat, 1); scalar expressions may fill any read slot and broadcast over the
repeats. Predicates (`.pred` operands and `p=`) are integer registers holding 0 or 1 (read: nonzero is true) or,
when read, run-time bools; inline asm cannot pass PTX predicates, so `asm` converts them to and from the register
inside the instruction's block (setp.ne / selp of the register's width).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import dtypes as dt
from ...ir import nodes as ir
from ..family import Refusal
from ..operands import THREAD, Ctx, Operand, check_no_overlap, check_scope, check_slot_type, repeat_coords, \
    scalar_value, split_shape, thread_slots

SHFL_MODES = ("up", "down", "bfly", "idx")
VOTE_MODES = ("all", "any", "uni", "ballot")
REDUX_INT = ("add", "min", "max")
REDUX_BIT = ("and", "or", "xor")
BITS = {"b32": 32, "u32": 32, "s32": 32, "f32": 32, "b64": 64, "pred": 1}


@dataclass(frozen=True)
class Form:
    """One parsed warp collective: `kind` shfl|vote|redux|match|activemask, its `mode` (shfl's up/down/bfly/idx,
    vote's all/any/uni/ballot, redux's operation, match's any/all), the PTX `type` of `a` (and of d except for
    ballot, match and shfl, whose d is .b32), redux's `.abs`/`.NaN`, and the operand names in PTX order."""
    opcode: str
    kind: str
    mode: str
    type: str
    abs: bool = False
    nan: bool = False
    names: tuple = ()
    has_p: bool = False          # the form may write the optional `d|p` predicate


def _listing(*xs) -> str:
    return ", ".join(xs)


def match(opcode: str):
    """A Form, a Refusal for a malformed warp-collective opcode, or None when the opcode is not one."""
    parts = opcode.split(".")
    head = parts[0]
    if head == "activemask":
        if parts[1:] != ["b32"]:
            return Refusal("the only form is activemask.b32")
        return Form(opcode, "activemask", "", "b32", names=("d",))
    if head == "shfl":
        if len(parts) != 4 or parts[1] != "sync" or parts[2] not in SHFL_MODES or parts[3] != "b32":
            return Refusal(f"the forms are shfl.sync.{{{_listing(*SHFL_MODES)}}}.b32 (the shfl without .sync is "
                           f"not supported by sm_70 and newer)")
        return Form(opcode, "shfl", parts[2], "b32", names=("d", "a", "b", "c", "membermask"), has_p=True)
    if head == "vote":
        if len(parts) != 4 or parts[1] != "sync" or parts[2] not in VOTE_MODES:
            return Refusal("the forms are vote.sync.{all,any,uni}.pred and vote.sync.ballot.b32")
        want = "b32" if parts[2] == "ballot" else "pred"
        if parts[3] != want:
            return Refusal(f"vote.sync.{parts[2]} takes .{want}, not .{parts[3]}")
        return Form(opcode, "vote", parts[2], "pred", names=("d", "a", "membermask"))
    if head == "redux":
        return _match_redux(opcode, parts)
    if head == "match":
        if len(parts) != 4 or parts[1] not in ("any", "all") or parts[2] != "sync" or parts[3] not in ("b32", "b64"):
            return Refusal("the forms are match.{any,all}.sync.{b32,b64}")
        return Form(opcode, "match", parts[1], parts[3], names=("d", "a", "membermask"), has_p=parts[1] == "all")
    return None


def _match_redux(opcode, parts):
    forms = ("redux.sync.{add,min,max}.{u32,s32}, redux.sync.{and,or,xor}.b32, "
             "redux.sync.{min,max}{.abs}{.NaN}.f32")
    if len(parts) < 4 or parts[1] != "sync":
        return Refusal(f"the forms are {forms}")
    op, quals, ty = parts[2], parts[3:-1], parts[-1]
    names = ("d", "a", "membermask")
    if ty == "f32":
        if op not in ("min", "max"):
            return Refusal(f"redux.sync.{op} has no .f32 form (only min and max)")
        if len(set(quals)) != len(quals) or any(q not in ("abs", "NaN") for q in quals):
            return Refusal(f"redux.sync.{op}.f32 takes the qualifiers .abs and .NaN, got "
                           f"{', '.join('.' + q for q in quals)}")
        if quals == ["NaN", "abs"]:
            return Refusal(f"write the qualifiers in PTX order: redux.sync.{op}.abs.NaN.f32")
        return Form(opcode, "redux", op, "f32", "abs" in quals, "NaN" in quals, names)
    if quals:
        return Refusal(f"qualifier(s) {', '.join('.' + q for q in quals)} exist only for redux.sync.{{min,max}}.f32")
    if op in REDUX_INT and ty in ("u32", "s32"):
        return Form(opcode, "redux", op, ty, names=names)
    if op in REDUX_BIT and ty == "b32":
        return Form(opcode, "redux", op, ty, names=names)
    if op in REDUX_INT + REDUX_BIT:
        want = ".u32 or .s32" if op in REDUX_INT else ".b32"
        return Refusal(f"redux.sync.{op} takes {want}, not .{ty}")
    return Refusal(f"unknown operation .{op}; the forms are {forms}")


def min_sm(form: Form) -> int:
    """shfl.sync, vote.sync, activemask: sm_30 (older than every target); match.sync sm_70; redux.sync sm_80,
    its .f32 forms sm_100 (and the arch-specific target, checked by `expand`)."""
    if form.kind == "match":
        return 70
    if form.kind == "redux":
        return 100 if form.type == "f32" else 80
    return 30


# ------------------------------------------------------------------ expansion

def _slot(form: Form, name: str) -> str:
    """The PTX register type of one operand slot."""
    if name in ("b", "c", "membermask"):
        return "b32"
    if name == "d":
        if form.kind == "vote":
            return "b32" if form.mode == "ballot" else "pred"
        if form.kind == "redux":
            return form.type
        return "b32"
    return form.type                              # a


def expand(form: Form, ctx: Ctx) -> list:
    if form.kind == "redux" and form.type == "f32" and not ctx.target.arch_specific:
        raise ctx.error(f"the .f32 forms of redux.sync exist only on the arch-specific sm_100a target; the target "
                        f"is sm_{ctx.sm} (compile with target='sm_100a')")
    params = ctx.params({"p"} if form.has_p else set())
    ops = ctx.operands(list(form.names))
    gaxes = ctx.group_axes(THREAD)
    ctx.check_block_for_scope(THREAD)
    gext = ctx.group_extents(gaxes)
    p = None
    if "p" in params:
        v, loc = params["p"]
        if v is not None:
            p = Operand("p", v, loc)
            ops = ops + [p]
    dst = ops[0]
    rep = None
    for op in ops:
        slot = "pred" if op is p else _slot(form, op.name)
        writes = op is dst or op is p
        if op.is_view:
            check_scope(ctx, op, ("local",))
            _check_type(ctx, op, slot, form)
            r = split_shape(ctx, op, len(gaxes), (1,), gext)
            if rep is None:
                rep = r
            elif tuple(r) != tuple(rep):
                raise ctx.error(f"repeat shape {r} does not match the other operands' {rep}", op)
        elif writes:
            what = "an integer register buffer (0 or 1)" if slot == "pred" else "a register buffer"
            raise ctx.error(f"the destination must be {what}, not a scalar", op)
    rep = rep or ()
    scal = {op.name: _scalar(ctx, op, _slot(form, op.name)) for op in ops if not op.is_view}

    out, written = [], []
    for coord in repeat_coords(rep):
        groups = []
        for op in ops:
            if not op.is_view:
                groups.append([ir.Val(scal[op.name])])
                continue
            slot = thread_slots(ctx, op, gaxes, list(coord) + [0])
            r = ir.Reg(op.view.storage, slot, op.view.dtype, op is dst or op is p)
            if r.write:
                written.append(r)
            groups.append([r])
        out.append(ctx.native(groups, effect="warp", origin=f"rep{coord}"))
    check_no_overlap(ctx, dst, written)
    return out


def _check_type(ctx: Ctx, op: Operand, slot: str, form: Form) -> None:
    d = op.view.dtype
    if slot == "pred":
        if not d.is_int:
            raise ctx.error(f"{op.view.describe()} holds {d.name}, but the .pred slot of {form.opcode} takes an "
                            f"integer register holding 0 or 1 (e.g. T.alloc_local((1,), 'uint32'))", op)
        return
    if d.bits != BITS[slot]:
        raise ctx.error(f"element width must be {BITS[slot]} bits for the .{slot} slot of {form.opcode}, but "
                        f"{op.view.describe()} has {d.bits}-bit {d.name} (reinterpret explicitly with "
                        f".view(dtype=...))", op)
    check_slot_type(ctx, op, slot, form.opcode)


def _scalar(ctx: Ctx, op: Operand, slot: str) -> ir.Expr:
    """A scalar read operand as an expression of the slot's width (a bool for a .pred slot)."""
    v = op.value
    if slot == "pred":
        if isinstance(v, bool):
            return ir.Const(dt.bool_, op.loc, v)
        if isinstance(v, ir.Expr) and v.dtype.kind == "bool":
            return v
        from ...ir import ops as fops
        raise ctx.error(f"the .pred slot takes a run-time bool (e.g. x > 0) or an integer register, got "
                        f"{fops.describe(v)}", op)
    if isinstance(v, bool):
        raise ctx.error(f"a bool cannot fill the .{slot} slot (give a {BITS[slot]}-bit integer)", op)
    carrier = {"b32": dt.uint32, "u32": dt.uint32, "s32": dt.int32, "f32": dt.float32, "b64": dt.uint64}[slot]
    if isinstance(v, ir.Expr) and v.dtype.kind == "bool":
        raise ctx.error(f"a bool cannot fill the .{slot} slot (give a {BITS[slot]}-bit value)", op)
    if isinstance(v, int) and slot in ("b32", "u32", "b64") and v < 0:
        v = v & ((1 << BITS[slot]) - 1)           # a mask written as -1 means all ones
        op = Operand(op.name, v, op.loc)
    return scalar_value(ctx, op, carrier)


# ------------------------------------------------------------------ codegen

def asm(n: ir.Native, ops: list) -> str | None:
    """The inline-asm text: the instruction as written, with every predicate operand converted from/to a 16-bit
    0/1 inside a block (inline asm cannot pass PTX predicates), and `d|p` written as PTX spells it."""
    form: Form = n.form
    if form.kind == "activemask":
        return None
    names = list(form.names)
    text = dict(zip(names, ops))
    pre, post, regs = [], [], []
    width = [_width(g[0]) for g in n.groups]
    p_out = ops[len(names)] if len(ops) > len(names) else None
    if form.kind == "vote" and form.mode != "ballot":
        regs += ["%wd"]
        post.append(f"selp.b{width[0]} {text['d']}, 1, 0, %wd;")
        text["d"] = "%wd"
    if form.kind == "vote":
        regs += ["%wa"]
        pre.append(f"setp.ne.b{width[1]} %wa, {text['a']}, 0;")
        text["a"] = "%wa"
    if p_out is not None:
        regs += ["%wp"]
        post.append(f"selp.b{width[-1]} {p_out}, 1, 0, %wp;")
        text["d"] = f"{text['d']}|%wp"
    if not regs:
        return None
    body = f"{form.opcode} {', '.join(text[k] for k in names)};"
    return "{ .reg .pred " + ", ".join(regs) + "; " + " ".join(pre + [body] + post) + " }"


def _width(a) -> int:
    """The bits of the inline-asm register carrying `a` (codegen carries 8- and 1-bit values in 16 bits)."""
    d = a.dtype if isinstance(a, ir.Reg) else a.expr.dtype
    return max(16, d.bits)


def access_spans(n: ir.Native) -> list:
    return []


__all__ = ["Form", "match", "expand", "min_sm", "asm", "access_spans"]
