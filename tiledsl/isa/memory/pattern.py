"""ld / st: one memory instruction per repeat, between registers and global/shared/local memory.

Operands: `ld dst, src` and `st dst, src`; each reads as (*group, *repeat, words) with words = N for `.vN`.
The memory words of one instruction are consecutive and aligned to words*bits/8 bytes; register slots may sit
anywhere the issuing thread owns. Width, space and cache policy come from the opcode, never from the layout.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import dtypes as dt
from ...ir import nodes as ir
from ..family import Refusal
from ..operands import THREAD, Ctx, cache_policy, check_slot_type, check_contiguous, check_no_overlap, check_scope, memory_addr, repeat_coords, sample_groups, scalar_value, split_shape, thread_slots
from ..register.pattern import TYPES, predicate

SPACES = {"global": "global", "shared": "shared", "shared::cta": "shared", "local": "local"}
CACHE = {"ld": {"ca", "cg", "cs", "lu", "cv"}, "st": {"wb", "cg", "cs", "wt"}}
MEM_TYPES = {"b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f32", "f64"}


PREFETCH = {"L2::64B", "L2::128B", "L2::256B"}


@dataclass(frozen=True)
class Form:
    opcode: str
    op: str                      # ld | st
    space: str                   # global | shared | local
    words: int
    type: str
    hint: bool                   # .L2::cache_hint: needs cache_policy
    min_sm: int = 50


def match(opcode: str):
    """ld{.weak|.volatile}.space{.cop}{.nc}{.L2::cache_hint}{.L2::64B|128B|256B}{.v2|.v4}.type and the st forms,
    with the combinations ptxas accepts (checked by the compile-only tests)."""
    parts = opcode.split(".")
    if parts[0] not in ("ld", "st") or len(parts) < 3:
        return None
    op, rest = parts[0], parts[1:]
    ty = rest[-1]
    if ty not in MEM_TYPES:
        return Refusal(f"'{ty}' is not a supported {op} type (supported: {', '.join(sorted(MEM_TYPES))})")
    rest = rest[:-1]
    words = 1
    if rest and rest[-1] in ("v2", "v4"):
        words = int(rest[-1][1])
        rest = rest[:-1]
    space, sem, cop, nc, hint, prefetch = None, None, None, False, False, None
    for q in rest:
        if q in ("volatile", "weak") and sem is None:
            sem = q
        elif q in SPACES and space is None:
            space = q
        elif q in CACHE[op] and cop is None:
            cop = q
        elif q == "nc" and op == "ld" and not nc:
            nc = True
        elif q == "L2::cache_hint" and not hint:
            hint = True
        elif q in PREFETCH and op == "ld" and prefetch is None:
            prefetch = q
        else:
            return Refusal(f"qualifier .{q} is not supported for {op} (or is repeated)")
    if space is None:
        return Refusal(f"{op} needs a state space (.global, .shared or .local) in the opcode")
    if TYPES[ty][0] * words > 128:
        return Refusal(f".v{words}.{ty} moves more than 16 bytes")
    if SPACES[space] != "global":
        for q, on in (("nc", nc), ("L2::cache_hint", hint), (prefetch, prefetch)):
            if on:
                return Refusal(f".{q} applies to .global only, not .{space}")
    if nc and (sem or cop not in (None, "ca", "cg", "cs")):
        return Refusal(f".nc cannot be combined with .{sem or cop}")
    if sem == "volatile" and (cop or hint or space == "local"):
        return Refusal(f".volatile cannot be combined with .{cop or ('L2::cache_hint' if hint else space)}")
    # .L2::cache_hint needs sm_80; .L2::<size>B (PTX 7.4) and .shared::cta (PTX 7.8) need the PTX that tiledsl
    # emits from sm_80 on
    sm = 80 if hint or prefetch or space == "shared::cta" else 50
    return Form(opcode, op, SPACES[space], words, ty, hint, sm)


def min_sm(form: Form) -> int:
    return form.min_sm


def expand(form: Form, ctx: Ctx) -> list:
    params = ctx.params({"pred", "preserve_dst", "cache_policy"})
    policy = cache_policy(ctx, params, form.hint)
    dst, src = ctx.operands(["dst", "src"])
    mem, regop = (src, dst) if form.op == "ld" else (dst, src)
    pred, preserve = predicate(ctx, params, writes=form.op == "ld")
    gaxes = ctx.group_axes(THREAD)
    ctx.check_block_for_scope(THREAD)
    gext = ctx.group_extents(gaxes)
    bits = TYPES[form.type][0]
    space_scope = "local" if form.space == "local" else form.space
    check_scope(ctx, mem, (space_scope,), f" in {form.space} memory")
    if mem.view.dtype.bits != bits:
        raise ctx.error(f"element width must be {bits} bits for {form.opcode}, but {mem.view.describe()} has "
                        f"{mem.view.dtype.bits}-bit {mem.view.dtype.name}", mem)
    rep = split_shape(ctx, mem, len(gaxes), (form.words,), gext)
    if regop.is_view:
        check_scope(ctx, regop, ("local",))
        if regop.view.dtype.bits != bits:
            raise ctx.error(f"element width must be {bits} bits for {form.opcode}, but {regop.view.describe()} "
                            f"has {regop.view.dtype.bits}-bit {regop.view.dtype.name}", regop)
        check_slot_type(ctx, regop, form.type, form.opcode)
        r2 = split_shape(ctx, regop, len(gaxes), (form.words,), gext)
        if tuple(r2) != tuple(rep):
            raise ctx.error(f"repeat shape {r2} does not match {mem.name}'s {rep}", regop)
        scalar = None
    else:
        if form.op == "ld":
            raise ctx.error("the destination must be a register buffer", regop)
        if form.words != 1:
            raise ctx.error("a scalar source can only feed a single-word store", regop)
        scalar = scalar_value(ctx, regop, TYPES[form.type][1] if not form.type.startswith("b") else
                              dt.BITS[bits])
    gids = ctx.group_ids(gaxes)
    out, written = [], []
    align = form.words * bits // 8
    for coord in repeat_coords(rep):
        offs = [memory_addr(ctx, mem, gids, list(coord) + [w]) for w in range(form.words)]
        _check_words(ctx, mem, gaxes, gext, coord, form.words, align)
        addr = ir.Addr(mem.view.storage, offs[0], mem.view.dtype)
        if scalar is not None:
            regs = [ir.Val(scalar)]
        else:
            regs = [ir.Reg(regop.view.storage, thread_slots(ctx, regop, gaxes, list(coord) + [w]),
                           regop.view.dtype, form.op == "ld") for w in range(form.words)]
            if form.op == "ld":
                written += regs
        groups = [regs, [addr]] if form.op == "ld" else [[addr], regs]
        if policy is not None:
            groups.append([ir.Val(policy)])
        out.append(ctx.native(groups, pred, preserve, "load" if form.op == "ld" else "store", f"rep{coord}"))
    if form.op == "ld":
        check_no_overlap(ctx, regop, written)
    return out


def access_spans(n: ir.Native) -> list:
    """The one address of an ld/st moves the form's words (.v2/.v4) of its type."""
    return [n.form.words]


def _check_words(ctx, mem, gaxes, gext, coord, words, align):
    """Consecutive, aligned memory words, checked on the static part of a few threads' addresses."""
    for g in sample_groups(gaxes, gext):
        check_contiguous(ctx, mem, [g + list(coord) + [w] for w in range(words)], align,
                         f"the {words} word(s) of one instruction")
