"""Pattern expansion: every `Apply` in the tile IR becomes the native instructions its family rules produce."""
from __future__ import annotations

from ..ir import nodes as ir
from ..isa.registry import lookup
from ..isa.operands import Ctx
from ..core.target import Target
from .wide_offsets import widen_offsets
from .register_provenance import check_register_provenance


def expand_kernel(k: ir.Kernel, target: Target) -> ir.Kernel:
    block = k.launch.block
    body = _expand(k.body, k.launch, target, 32, None, {})
    # two views of one register buffer must agree on what each register holds (issue 33)
    check_register_provenance(body)
    # offsets into tensors that may hold 2^31 elements become 64-bit here, for both backends
    return widen_offsets(ir.Kernel(k.name, k.params, body, k.launch, k.allocs, k.sizes, k.loc))


def _expand(body, launch, target, lanes, guard, proofs):
    block = launch.block
    out = []
    for s in body:
        if isinstance(s, ir.Apply):
            fam, form = lookup(s.opcode, s.loc, target)
            # launch: the cluster and the register cap (the cluster family's checks)
            out.extend(fam.expand(form, Ctx(s, block, target, fam, form, lanes, guard, proofs=proofs, launch=launch)))
        elif isinstance(s, ir.For):
            out.append(ir.For(s.loc, s.var, s.start, s.stop, s.step,
                              _expand(s.body, launch, target, lanes, guard, proofs), s.unroll))
        elif isinstance(s, ir.If):
            k = lane_guard(s.cond, block)
            inner, inner_guard = (k, _guard_text(s)) if k is not None and k < lanes else (lanes, guard)
            out.append(ir.If(s.loc, s.cond, _expand(s.then, launch, target, inner, inner_guard, proofs),
                             _expand(s.orelse, launch, target, lanes, guard, proofs)))
        elif isinstance(s, ir.While):
            out.append(ir.While(s.loc, s.cond, _expand(s.body, launch, target, lanes, guard, proofs)))
        else:
            out.append(s)
    return out


def _is_lane(e, block) -> bool:
    """`e` is the lane id: %laneid, or the thread id of a block of at most one warp, or a variable holding one."""
    while isinstance(e, ir.Var) and getattr(e, "defn", None) is not None:
        e = e.defn
    if isinstance(e, ir.Cast):
        return _is_lane(e.a, block)
    if not isinstance(e, ir.Special):
        return False
    return e.name == "laneid" or (e.name == "tid" and e.axis == 0 and block[0] * block[1] * block[2] <= 32)


def lane_guard(cond, block):
    """K when `cond` holds exactly on lanes 0..K-1 of every warp (`lane < K`, `lane <= K - 1`, `K > lane`, and
    conjunctions of such), else None. Only a guard from lane 0 narrows a warp: the patterns' lane axis counts from 0."""
    if isinstance(cond, ir.Binary) and cond.op == "and":
        a, b = lane_guard(cond.a, block), lane_guard(cond.b, block)
        return None if a is None and b is None else min(k for k in (a, b) if k is not None)
    if not isinstance(cond, ir.Compare):
        return None
    a, op, b = cond.a, cond.op, cond.b
    if isinstance(a, ir.Const) and op in ("gt", "ge"):
        a, b, op = b, a, {"gt": "lt", "ge": "le"}[op]
    if not (_is_lane(a, block) and isinstance(b, ir.Const) and isinstance(b.value, int)):
        return None
    k = int(b.value) + (1 if op == "le" else 0) if op in ("lt", "le") else None
    return k if k is not None and 1 <= k <= 32 else None


def _guard_text(s) -> str:
    text = getattr(s.loc, "text", "") or ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[3:].rstrip(":").strip() if line.startswith("if ") else "lane < K"
