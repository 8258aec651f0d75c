"""ldmatrix / stmatrix: m8n8 .b16 matrices between shared memory and warp registers (.x1/.x2/.x4, .trans).

    ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared{::cta}.b16  dst (registers), src (shared)
    stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared{::cta}.b16  dst (shared), src (registers)

Both operands read as (*group, *repeat, count, 8, 4) of b32 words: matrix i, row j, word w (two b16 values).
Register word (i, r, w) is register i of lane 4*r + w. The shared row (i, j) is 16 contiguous bytes, aligned to
16, whose address lane 8*i + j supplies; for .x1/.x2 the lanes past 8*count repeat valid rows (lane % (8*count)).
`.trans` is the opcode's: the register image is then the transpose of the shared b16 matrix. The pattern never
decides to transpose, never permutes a layout, and inserts no barrier.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from ...core import dtypes as dt
from ...ir import nodes as ir
from ...core.target import PTX_VERSION
from ..family import Refusal, addresses
from ...passes.register_provenance import Written
from ..operands import WARP, Ctx, Owners, check_bits, check_contiguous_rows, check_no_overlap, check_scope, memory_addr, repeat_coords, split_shape

SUPPORTED = "supported forms: {ldmatrix,stmatrix}.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared{::cta}.b16"


@dataclass(frozen=True)
class Form:
    opcode: str
    op: str                      # ldmatrix | stmatrix
    count: int                   # matrices per instruction
    trans: bool
    cta: bool                    # written .shared::cta (PTX ISA 7.8)


def match(opcode: str):
    parts = opcode.split(".")
    if parts[0] not in ("ldmatrix", "stmatrix"):
        return None
    op, rest = parts[0], parts[1:]
    if rest[:2] != ["sync", "aligned"]:
        return Refusal(f"{op} is written {op}.sync.aligned....; {SUPPORTED}")
    rest = rest[2:]
    if not rest or rest[0] != "m8n8":
        shape = rest[0] if rest else "(none)"
        return Refusal(f"shape .{shape} has no pattern (only .m8n8 with .b16); {SUPPORTED}")
    rest = rest[1:]
    if not rest or rest[0] not in ("x1", "x2", "x4"):
        return Refusal(f"the matrix count must be .x1, .x2 or .x4; {SUPPORTED}")
    count = int(rest[0][1])
    rest = rest[1:]
    trans = bool(rest) and rest[0] == "trans"
    rest = rest[1:] if trans else rest
    if not rest or rest[0] not in ("shared", "shared::cta"):
        return Refusal(f"the opcode must name the state space .shared or .shared::cta; {SUPPORTED}")
    cta = rest[0] == "shared::cta"
    rest = rest[1:]
    if rest != ["b16"]:
        what = "." + ".".join(rest) if rest else "no type"
        return Refusal(f"{what} after the state space: only .b16 is supported; {SUPPORTED}")
    return Form(opcode, op, count, trans, cta)


SM = {"ldmatrix": 75, "stmatrix": 90}
SM_CTA = min(sm for sm, ptx in PTX_VERSION.items() if ptx >= 78)     # .shared::cta needs PTX ISA 7.8


def min_sm(form: Form) -> int:
    return SM[form.op]


def requires(form: Form) -> list:
    """(sm, what) beyond min_sm: the .shared::cta spelling needs the PTX ISA version of newer targets."""
    if form.cta:
        return [(SM_CTA, f".shared::cta needs PTX ISA 7.8, which tiledsl emits for sm_{SM_CTA} or newer")]
    return []


def expand(form: Form, ctx: Ctx) -> list:
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
    groups = [list(g) for g in product(*(range(e) for e in gext))]
    lane = ir.Special(dt.int32, ctx.loc, "laneid")
    addr_lane = lane if form.count == 4 else ir.mod(lane, 8 * form.count)   # .x1/.x2: repeat valid rows
    mat, row = ir.floordiv(addr_lane, 8), ir.mod(addr_lane, 8)
    gids = ctx.group_ids(gaxes)
    out, written = [], []
    count = form.count
    reps = repeat_coords(rep)

    def what(k):
        return f"the ldmatrix's matrix {k % count}" + (f" of repeat {reps[k // count]}" if len(reps) > 1 else "")
    for p, coord in enumerate(repeat_coords(rep)):
        coord = list(coord)
        slots = []
        for i in range(form.count):
            def prove(i=i):
                threads = [(4 * r + w, g[0] if ng else None, g + coord + [i, r, w])
                           for g in groups for r in range(8) for w in range(4)]
                return owners.slot(threads, f"{form.op} matrix {i} word of lane {{lane}} (register {i})")
            # an equal register view (another k step's) proven before in this kernel gives the same slot
            slot = ctx.proven(("ldmatrix slot", regs.view.static_key(), tuple(coord), i, tuple(map(tuple, groups))),
                              prove)
            slots.append(ir.Reg(regs.view.storage, slot, regs.view.dtype, form.op == "ldmatrix"))
        if form.op == "ldmatrix":
            written += slots
        rows = [(g, i, j) for g in groups for i, j in product(range(form.count), range(8))]
        check_contiguous_rows(ctx, mem, [[g + coord + [i, j, w] for w in range(4)] for g, i, j in rows], 16,
                              lambda k: f"matrix {rows[k][1]} row {rows[k][2]} (the row address of lane "
                                        f"{8 * rows[k][1] + rows[k][2]})")
        addr = ir.Addr(mem.view.storage, memory_addr(ctx, mem, gids, coord + [mat, row, 0]), mem.view.dtype)
        operands = [slots, [addr]] if form.op == "ldmatrix" else [[addr], slots]
        # matrix i of repeat p is mark p*count + i: a reader takes consecutive matrices as its registers, in order
        frags = (Written(0, ("ldsm", ctx.apply), p * count, what),) if form.op == "ldmatrix" else ()
        out.append(ctx.native(operands, effect="warp-mem", origin=f"rep{tuple(coord)}", braces=(0, 1), frags=frags))
    if written:
        check_no_overlap(ctx, regs, written)
    return out


def access_spans(n: ir.Native) -> list:
    """Each lane's address is one 16-byte row."""
    return [max(1, 16 // a.dtype.nbytes) for a in addresses(n)]
