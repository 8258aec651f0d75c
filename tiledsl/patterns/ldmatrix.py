"""ldmatrix / stmatrix: m8n8 .b16 matrices between shared memory and warp registers (.x1/.x2/.x4, .trans).

Both operands read as (*group, *repeat, count, 8, 4) of b32 words. Register word (matrix i, row r, word w) is
register i of lane 4*r + w; the shared row (matrix i, row j) is 16 contiguous bytes whose address lane 8*i + j
supplies (for .x1/.x2, lanes past 8*count repeat valid rows). `.trans` is the opcode's: the register image is
then the transpose of the shared b16 matrix; the pattern never decides to transpose.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from .. import dtypes as dt
from .. import ir
from .operands import WARP, Ctx, Owners, check_bits, check_no_overlap, check_scope, repeat_coords, split_shape
from .staticeval import static_offsets

FORM = re.compile(r"^(ldmatrix|stmatrix)\.sync\.aligned\.m8n8\.x(1|2|4)(\.trans)?\.shared(::cta)?\.b16$")


@dataclass(frozen=True)
class Form:
    opcode: str
    op: str
    count: int
    trans: bool


def match(opcode: str):
    if not opcode.startswith(("ldmatrix", "stmatrix")):
        return None
    m = FORM.match(opcode)
    if m is None:
        return ("bad", "supported forms: {ldmatrix,stmatrix}.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared{::cta}.b16")
    return Form(opcode, m.group(1), int(m.group(2)), bool(m.group(3)))


def expand(form, ctx: Ctx) -> list:
    if isinstance(form, tuple):
        raise ctx.error(form[1])
    need = 75 if form.op == "ldmatrix" else 90
    if ctx.sm < need:
        raise ctx.error(f"needs sm_{need} or newer; the target is sm_{ctx.sm}")
    ctx.params(set())
    dst, src = ctx.operands(["dst", "src"])
    regs, mem = (dst, src) if form.op == "ldmatrix" else (src, dst)
    ctx.check_block_for_scope(WARP)
    gaxes = ctx.group_axes(WARP)
    gext = ctx.group_extents(gaxes)
    ng = len(gaxes)
    atom = (form.count, 8, 4)
    check_scope(ctx, regs, ("local",))
    check_scope(ctx, mem, ("shared",))
    check_bits(ctx, regs, 32, "register word")
    check_bits(ctx, mem, 32, "shared word (view the b16 matrix as b32 words)")
    rep = split_shape(ctx, regs, ng, atom, gext)
    rep_m = split_shape(ctx, mem, ng, atom, gext)
    if tuple(rep) != tuple(rep_m):
        raise ctx.error(f"repeat shape {rep_m} does not match {regs.name}'s {rep}", mem)
    owners = Owners(ctx, regs)
    groups = list(product(*(range(e) for e in gext)))
    lane = ir.Special(dt.int32, ctx.loc, "laneid")
    mat = ir.mod(ir.floordiv(lane, 8), form.count) if form.count > 1 else 0
    row = ir.mod(lane, 8)
    gids = ctx.group_ids(gaxes)
    out, written = [], []
    for coord in repeat_coords(rep):
        slots = []
        for i in range(form.count):
            threads = []
            for g in groups:
                warp = g[0] if ng else None
                for r in range(8):
                    for w in range(4):
                        threads.append((4 * r + w, warp, list(g) + list(coord) + [i, r, w]))
            slot = owners.slot(threads, f"{form.op} matrix {i} word of lane {{lane}}")
            slots.append(ir.Reg(regs.view.storage, slot, regs.view.dtype, form.op == "ldmatrix"))
        if form.op == "ldmatrix":
            written += slots
        _check_rows(ctx, mem, gext, coord, form.count)
        off, _ = mem.view.locate(list(gids) + list(coord) + [mat, row, 0])
        addr = ir.Addr(mem.view.storage, ir.as_expr(off, dt.int32, ctx.loc), mem.view.dtype)
        groups_ = [slots, [addr]] if form.op == "ldmatrix" else [[addr], slots]
        out.append(ir.Native(ctx.loc, form.opcode, groups_, None, False, "warp-mem", f"rep{coord}",
                             braces=(0, 1)))
    if written:
        check_no_overlap(ctx, regs, written)
    return out


def _check_rows(ctx, mem, gext, coord, count):
    """Each matrix row: 4 consecutive b32 words, 16-byte aligned (checked on the static part of the address)."""
    g = [e - 1 for e in gext]
    for i in range(count):
        for j in (0, 7):
            try:
                offs = static_offsets(mem.view, [g + list(coord) + [i, j, w] for w in range(4)])
            except ValueError as e:
                raise ctx.error(f"cannot prove matrix {i} row {j} contiguous: {e}", mem) from None
            if offs is None:
                continue
            if [o - offs[0] for o in offs] != [0, 1, 2, 3]:
                raise ctx.error(f"matrix {i} row {j} must be 16 contiguous bytes, but its words sit at offsets "
                                f"{offs}", mem)
            if (offs[0] * 4) % 16:
                raise ctx.error(f"matrix {i} row {j} must start 16-byte aligned, but starts at byte {offs[0] * 4}",
                                mem)
