"""createpolicy: an L2 eviction policy for the .L2::cache_hint forms of ld, st and cp.async (sm_80).

    createpolicy.fractional.L2::<primary>{.L2::<secondary>}.b64   dst{, fraction}
        primary: evict_last, evict_normal, evict_first, evict_unchanged; secondary: evict_first, evict_unchanged

`dst` is a 64-bit register view read as (*group, *repeat, 1); each repeat gets one policy. `fraction` (the share
of the accessed lines the primary priority applies to, the rest get the secondary one) is an f32 in (0, 1]: a
compile-time constant is checked here, a run-time value must be an f32 expression; PTX's default is 1.0. The
policy's bits are the hardware's own: treat it as opaque and pass it as `cache_policy=`. Thread instruction.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import dtypes as dt
from ...ir import nodes as ir
from ...core.errors import CompilationError
from ..family import Refusal
from ..operands import THREAD, Ctx, check_no_overlap, check_scope, repeat_coords, split_shape, thread_slots

PRIMARY = ("evict_last", "evict_normal", "evict_first", "evict_unchanged")
SECONDARY = ("evict_first", "evict_unchanged")
SUPPORTED = ("supported: createpolicy.fractional.L2::{evict_last,evict_normal,evict_first,evict_unchanged}"
             "{.L2::evict_first,.L2::evict_unchanged}.b64")


@dataclass(frozen=True)
class Form:
    opcode: str
    primary: str
    secondary: str | None


def match(opcode: str):
    parts = opcode.split(".")
    if parts[0] != "createpolicy":
        return None
    if len(parts) not in (4, 5) or parts[1] != "fractional" or parts[-1] != "b64":
        return Refusal(f"{opcode} has no explicit tile pattern; {SUPPORTED}")
    levels = [p.split("::") for p in parts[2:-1]]
    if any(len(x) != 2 or x[0] != "L2" for x in levels) or levels[0][1] not in PRIMARY or \
            (len(levels) == 2 and levels[1][1] not in SECONDARY):
        return Refusal(f"{opcode}: unknown eviction priority; {SUPPORTED}")
    return Form(opcode, levels[0][1], levels[1][1] if len(levels) == 2 else None)


MIN_SM = 80


def expand(form: Form, ctx: Ctx) -> list:
    ctx.params(set())
    ops = ctx.operands(["dst", "fraction"], min_count=1)
    dst = ops[0]
    check_scope(ctx, dst, ("local",))
    if dst.view.dtype.bits != 64 or dst.view.dtype.is_float:
        raise ctx.error(f"the policy is a 64-bit integer register, but {dst.view.describe()} holds "
                        f"{dst.view.dtype.name} (use a uint64 buffer)", dst)
    fraction = _fraction(ctx, ops[1]) if len(ops) > 1 else None
    gaxes = ctx.group_axes(THREAD)
    ctx.check_block_for_scope(THREAD)
    rep = split_shape(ctx, dst, len(gaxes), (1,), ctx.group_extents(gaxes))
    out, written = [], []
    for coord in repeat_coords(rep):
        reg = ir.Reg(dst.view.storage, thread_slots(ctx, dst, gaxes, list(coord) + [0]), dst.view.dtype, True)
        written.append(reg)
        groups = [[reg]] + ([[fraction]] if fraction is not None else [])
        out.append(ctx.native(groups, origin=f"rep{coord}"))
    check_no_overlap(ctx, dst, written)
    return out


def _fraction(ctx, op):
    v = op.value
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if not 0.0 < float(v) <= 1.0:
            raise CompilationError(f"{ctx.opcode}: fraction {v!r} is outside (0, 1]", op.loc)
        return ir.Imm(f"0f{_f32_bits(float(v)):08X}")
    if isinstance(v, ir.Expr) and v.dtype == dt.float32:
        return ir.Val(v)
    raise CompilationError(f"{ctx.opcode}: fraction must be an f32 in (0, 1], got "
                           f"{getattr(v, 'dtype', type(v).__name__)}", op.loc)


def _f32_bits(x: float) -> int:
    import struct
    return struct.unpack("<I", struct.pack("<f", x))[0]
