"""Named CTA barriers: bar.sync / bar.arrive and their barrier.* spellings (PTX ISA "bar, barrier").

    bar{.cta}.sync                 a{, b}      wait until b threads (all of the CTA without b) reached barrier a
    bar{.cta}.arrive               a, b        count this warp's arrival at barrier a and go on
    barrier{.cta}.sync{.aligned}   a{, b}      (sm_70: barrier.sync without .aligned may sit in divergent code)
    barrier{.cta}.arrive{.aligned} a, b

Spelled in the kernel language as every thread instruction of a family with immediate operands:

    T.cuda.tile.apply(T.ptx["bar.sync"], 1, 256)        # barrier 1, 256 threads (8 warps) take part
    T.cuda.tile.apply(T.ptx["bar.arrive"], 2, 256)
    T.cuda.tile.apply(T.ptx["bar.sync"], 0)             # every thread of the CTA (what syncthreads is)

`a` (the barrier id) is a compile-time int 0..15 or a run-time integer; `b` (the thread count) is a compile-time
positive multiple of 32 no larger than the block (its warps), or a run-time integer. The ISA counts arrivals per
warp: every thread of a warp takes part together, and all arrivals of one phase name the same count. A
compile-time operand is emitted as an immediate, a run-time one as a u32 register. `bar.red` / `barrier.red` (the
reductions) are not supported.

Every executing thread issues it (scope 'thread', the default); guard it with `if` for a subset of warps.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import dtypes as dt
from ...core.target import PTX_VERSION
from ...ir import nodes as ir
from ...ir import ops
from ..family import Refusal
from ..operands import Ctx, Operand

NBARRIERS = 16                    # each CTA has barriers 0..15
WARP = 32                         # a thread count is a multiple of the warp size
SUPPORTED = ("supported: bar{.cta}.sync a{, b}, bar{.cta}.arrive a, b, barrier{.cta}.sync{.aligned} a{, b}, "
             "barrier{.cta}.arrive{.aligned} a, b")


@dataclass(frozen=True)
class Form:
    opcode: str
    kind: str                    # sync | arrive
    spelling: str                # bar | barrier (barrier.* is PTX ISA 6.0, sm_70)
    aligned: bool = False        # every thread of the warp executes this same instruction (bar.* always is)
    cta: bool = False            # written .cta (PTX ISA 7.8)


def match(opcode: str):
    parts = opcode.split(".")
    if parts[0] not in ("bar", "barrier") or len(parts) < 2:
        return None
    if parts[0] == "barrier" and parts[1] == "cluster":
        return None                                       # the cluster family's barrier.cluster.arrive/wait
    quals = parts[1:]
    cta = quals[0] == "cta"
    if cta:
        quals = quals[1:]
    if quals and quals[0] in ("gpu", "sys", "cluster"):
        return Refusal(f"a named barrier synchronises the threads of one CTA: the only scope is .cta (or none), "
                       f"not .{quals[0]}; {SUPPORTED}")
    if not quals or quals[0] not in ("sync", "arrive", "red"):
        return Refusal(f"has no explicit tile pattern; {SUPPORTED}")
    if quals[0] == "red":
        return Refusal(f"the barrier reductions (bar.red, barrier.red) have no explicit tile pattern; {SUPPORTED}")
    kind, rest = quals[0], quals[1:]
    aligned = rest == ["aligned"]
    if rest and not (aligned and parts[0] == "barrier"):
        what = "takes no qualifier after" if parts[0] == "bar" else "takes only .aligned after"
        return Refusal(f"{parts[0]}{'.cta' if cta else ''}.{kind} {what} .{kind}, got "
                       f"{''.join('.' + q for q in rest)}; {SUPPORTED}")
    # bar.sync is barrier.sync.aligned (PTX ISA): every thread of the warp executes it together
    return Form(opcode, kind, parts[0], aligned=aligned or parts[0] == "bar", cta=cta)


SM_CTA = min(sm for sm, ptx in PTX_VERSION.items() if ptx >= 78)     # .cta needs PTX ISA 7.8


def min_sm(form: Form) -> int:
    """bar.sync/bar.arrive with a count: sm_20; the barrier.* spellings: sm_70 (PTX ISA 6.0)."""
    return 70 if form.spelling == "barrier" else 20


def requires(form: Form) -> list:
    if form.cta:
        return [(SM_CTA, f".cta needs PTX ISA 7.8, which tiledsl emits for sm_{SM_CTA} or newer")]
    return []


# ------------------------------------------------------------------ expansion

def expand(form: Form, ctx: Ctx) -> list:
    ctx.thread_only("the default: every thread that executes it takes part; guard it with `if` for some warps")
    ctx.params(set())
    if form.kind == "arrive":
        if len(ctx.apply.operands) == 1:
            raise ctx.error("takes 2 operands (a, b): an arrive needs the thread count b (the PTX ISA requires a "
                            "non-zero count for arrive)")
        ops_ = ctx.operands(["a", "b"])
    else:
        ops_ = ctx.operands(["a", "b"], min_count=1)
    groups = [[_barrier_id(ctx, ops_[0])]]
    if len(ops_) == 2:
        groups.append([_count(ctx, ops_[1])])
    return [ctx.native(groups, effect="sync")]


def _int_operand(ctx: Ctx, op: Operand, what: str):
    v = op.value
    if isinstance(v, bool) or op.is_view or not (isinstance(v, int) or (isinstance(v, ir.Expr) and v.dtype.is_int)):
        raise ctx.error(f"must be an integer ({what}), compile-time or run-time, got {ops.describe(v)}", op)
    return v


def _runtime(op: Operand, v: ir.Expr) -> ir.Val:
    return ir.Val(v if v.dtype == dt.uint32 else ir.Cast(dt.uint32, op.loc, v))


def _barrier_id(ctx: Ctx, op: Operand):
    v = _int_operand(ctx, op, f"the barrier id, 0..{NBARRIERS - 1}")
    if isinstance(v, int):
        if not 0 <= v < NBARRIERS:
            raise ctx.error(f"{v} is not a barrier id: a CTA has the named barriers 0..{NBARRIERS - 1}", op)
        return ir.Imm(str(v))
    return _runtime(op, v)


def _count(ctx: Ctx, op: Operand):
    v = _int_operand(ctx, op, "the thread count, a positive multiple of 32")
    if isinstance(v, int):
        most = -(-ctx.nthreads // WARP) * WARP
        if v <= 0 or v % WARP:
            raise ctx.error(f"{v} is not a thread count a barrier takes: a positive multiple of the warp size "
                            f"({WARP})", op)
        if v > most:
            raise ctx.error(f"{v} threads can never arrive: the block has {ctx.nthreads} threads", op)
        return ir.Imm(str(v))
    return _runtime(op, v)
