"""mma.sync.aligned.m16n8k{8,16}.row.col.f32.{f16,bf16}.{f16,bf16}.f32 at warp scope and above.

Operands D, A, B, C read as (*group, *batch, M|N, N|K, atom). Lane maps (lane l, native register r):
    A: (l//4 + 8*(r%2), l%4 + 4*(r//2))   k/4 registers of packed pairs
    B: (l//4, l%4 + 4*r)                  k/8 registers
    D/C: (l//4 + 8*(r//2), 2*(l%4) + r%2) 4 registers of f32
Repeats run batch..., M, N, K with K innermost; C feeds only the K == 0 issue, D the rest.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from ...core import dtypes as dt
from ...ir import nodes as ir
from ..family import Refusal
from ...passes.register_provenance import Read, Written
from ..operands import WARP, Ctx, Owners, check_bits, check_slot_type, check_no_overlap, check_scope, reg, repeat_coords, scalar_value, split_shape

FORM = re.compile(r"^mma\.sync\.aligned\.m16n8k(8|16)\.row\.col\.f32\.(f16|bf16)\.(f16|bf16)\.f32$")


@dataclass(frozen=True)
class Form:
    opcode: str
    k: int
    ab: str


def match(opcode: str):
    if not opcode.startswith("mma."):
        return None
    m = FORM.match(opcode)
    if m is None:
        return Refusal("no explicit tile pattern for this mma form; supported: "
                       "mma.sync.aligned.m16n8k{8,16}.row.col.f32.{f16,bf16}.{f16,bf16}.f32")
    if m.group(2) != m.group(3):
        return Refusal("A and B must have the same element type (both f16 or both bf16)")
    return Form(opcode, int(m.group(1)), m.group(2))


def lane_a(l, r):
    return (l // 4 + 8 * (r % 2), l % 4 + 4 * (r // 2))


def lane_b(l, r):
    return (l // 4, l % 4 + 4 * r)


def lane_d(l, r):
    return (l // 4 + 8 * (r // 2), 2 * (l % 4) + r % 2)


def min_sm(form) -> int:
    return 80 if form.ab == "bf16" or form.k == 16 else 75


def expand(form: Form, ctx: Ctx) -> list:
    ctx.params(set())
    D, A, B, C = ctx.operands(["D", "A", "B", "C"])
    ctx.check_block_for_scope(WARP)
    gaxes = ctx.group_axes(WARP)
    gext = ctx.group_extents(gaxes)
    ng = len(gaxes)
    k = form.k
    for op, ty in ((D, "f32"), (A, form.ab + "x2"), (B, form.ab + "x2")):
        check_scope(ctx, op, ("local",))
        check_bits(ctx, op, 32)
        check_slot_type(ctx, op, ty, form.opcode)
    if C.is_view:
        check_scope(ctx, C, ("local",))
        check_bits(ctx, C, 32)
        check_slot_type(ctx, C, "f32", form.opcode)
    rd = split_shape(ctx, D, ng, (16, 8), gext)
    ra = split_shape(ctx, A, ng, (16, k // 2), gext)
    rb = split_shape(ctx, B, ng, (8, k // 2), gext)
    if len(rd) < 2:
        raise ctx.error(f"needs (*batch, M_repeat, N_repeat, 16, 8) after the group axes, got {D.view.shape}", D)
    batch, (mr, nr) = rd[:-2], rd[-2:]
    if len(ra) != len(rd) or tuple(ra[:-2]) != tuple(batch) or ra[-2] != mr:
        raise ctx.error(f"must be (*batch, M_repeat={mr}, K_repeat, 16, {k // 2}) to match D's {rd}; got "
                        f"{A.view.shape}", A)
    kr = ra[-1]
    if len(rb) != len(rd) or tuple(rb[:-2]) != tuple(batch) or rb[-2] != nr or rb[-1] != kr:
        raise ctx.error(f"must be (*batch, N_repeat={nr}, K_repeat={kr}, 8, {k // 2}) to match D and A; got "
                        f"{B.view.shape}", B)
    if C.is_view:
        rc = split_shape(ctx, C, ng, (16, 8), gext)
        if tuple(rc) != tuple(rd):
            raise ctx.error(f"a tensor C must have D's shape {D.view.shape}, got {C.view.shape}", C)
        c_scalar = None
    else:
        c_scalar = scalar_value(ctx, C, dt.float32)

    own = {op.name: Owners(ctx, op) for op in (D, A, B, C) if op.is_view}
    groups = list(product(*(range(e) for e in gext)))

    # an A fragment serves every n tile, B every m tile, and C is often D's own view: prove each once
    proven = {}

    def slots(op, lanefn, nregs, rep_coord):
        key = (id(op.view), lanefn, nregs, tuple(rep_coord))
        if key not in proven:
            # the same fragment of an equal view (another k step's) was proven before in this kernel: its slots
            idx = ctx.proven(("mma slots", op.view.static_key(), lanefn, nregs, tuple(rep_coord), tuple(groups)),
                             lambda: tuple(x.index for x in _slots(op, lanefn, nregs, rep_coord)))
            proven[key] = [reg(op.view, i) for i in idx]
        return list(proven[key])

    def _slots(op, lanefn, nregs, rep_coord):
        out = []
        for r in range(nregs):
            threads = []
            for g in groups:
                warp = g[0] if ng else None
                for lane in range(32):
                    threads.append((lane, warp, list(g) + list(rep_coord) + list(lanefn(lane, r))))
            slot = own[op.name].slot(threads, f"{form.opcode.split('.')[0]}.{op.name} lane {{lane}} register {r}")
            out.append(reg(op.view, slot))
        return out

    out, written = [], []
    for b in repeat_coords(batch):
        for m, n in product(range(mr), range(nr)):
            d_regs = [ir.Reg(x.storage, x.index, x.dtype, True) for x in slots(D, lane_d, 4, b + (m, n))]
            written += d_regs
            c_regs = slots(C, lane_d, 4, b + (m, n)) if C.is_view else None
            for kk in range(kr):
                a_regs = slots(A, lane_a, k // 4, b + (m, kk))
                b_regs = slots(B, lane_b, k // 8, b + (n, kk))
                if kk == 0:
                    c_in = c_regs if c_regs is not None else [ir.Val(c_scalar)] * 4
                else:
                    c_in = [reg(D.view, x.index) for x in d_regs]
                # A and B hold consecutive ldmatrix matrices in order; C (or D, from the second k issue) one
                # issue's D registers in their native order; D's registers are marked with this issue
                frags = (Read(1, "ldsm", lane_a, "A", A.loc), Read(2, "ldsm", lane_b, "B", B.loc),
                         Read(3, "acc.mma", lane_d, "C", C.loc, from_zero=True),
                         Written(0, ("acc.mma", ctx.apply, b + (m, n)), 0,
                                 lambda r, key=b + (m, n): f"the mma.sync D of issue {key} (register {r})"))
                out.append(ctx.native([d_regs, a_regs, b_regs, c_in], effect="warp",
                                      origin=f"b{b} m{m} n{n} k{kk}", braces=(0, 1, 2, 3), frags=frags))
    check_no_overlap(ctx, D, written)
    return out
