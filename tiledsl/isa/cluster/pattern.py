"""Thread block clusters (sm_90): the cluster barrier, distributed shared memory, elect.sync, setmaxnreg (sm_90a).

    barrier.cluster.arrive{.release|.relaxed}{.aligned}     no operands
    barrier.cluster.wait{.acquire}{.aligned}                no operands
    st.shared::cluster.T       dst (shared, one element), src (a scalar)          rank=: the CTA whose memory
    ld.shared::cluster.T       dst (a register, one element), src (shared, one element)   rank=: (as above)
    elect.sync                 d (a 32-bit register: the leader's lane), membermask      p=: a register, 1 in the leader
    setmaxnreg.{inc,dec}.sync.aligned.u32   N (compile-time; a multiple of 8 in 24..256; sm_90a)

T is one of b32 u32 s32 f32 b64 u64 s64 f64. The remote accesses name a variable of the issuing CTA's shared memory
and the `rank` of the CTA in the cluster whose copy of that variable they touch: codegen maps the address with
`mapa.shared::cluster.u32` first (the shared::cluster window keeps each CTA's variables at the same offsets, so
the view's constant offset is added after the mapping). All are thread instructions: every thread that executes
one issues it. The `.aligned` forms and setmaxnreg must be executed by every thread of the warp (setmaxnreg: of
the warpgroup) together; the interpreter checks that.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...core import dtypes as dt
from ...ir import nodes as ir
from ..family import Refusal
from ..operands import Ctx, Operand, check_contiguous, check_scope, check_slot_type, memory_addr, scalar_value, \
    thread_slots

TYPES = {"b32": dt.uint32, "u32": dt.uint32, "s32": dt.int32, "f32": dt.float32,
         "b64": dt.uint64, "u64": dt.uint64, "s64": dt.int64, "f64": dt.float64}
ARRIVE_SEM = ("release", "relaxed")
SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32")
# setmaxnreg's range (PTX ISA): a multiple of 8 from 24 to 256 registers per thread
MAXNREG_LO, MAXNREG_HI = 24, 256
SUPPORTED = ("barrier.cluster.arrive{.release|.relaxed}{.aligned}, barrier.cluster.wait{.acquire}{.aligned}, "
             "{ld,st}.shared::cluster.{b32,u32,s32,f32,b64,u64,s64,f64}, elect.sync, "
             "setmaxnreg.{inc,dec}.sync.aligned.u32")


@dataclass(frozen=True)
class Form:
    opcode: str
    kind: str                    # arrive | wait | st | ld | elect | setmaxnreg
    type: str = ""               # the PTX type of a remote access
    sem: str = ""                # release | relaxed | acquire (barrier.cluster)
    aligned: bool = False        # barrier.cluster: every thread of the warp executes it together
    inc: bool = False            # setmaxnreg.inc (else .dec)


def match(opcode: str):
    parts = opcode.split(".")
    if parts[:2] == ["barrier", "cluster"]:
        return _barrier(opcode, parts[2:])
    if parts[0] in ("ld", "st") and len(parts) >= 2 and parts[1] == "shared::cluster":
        if len(parts) != 3 or parts[2] not in TYPES:
            return Refusal(f"the forms are {parts[0]}.shared::cluster.{{{', '.join(TYPES)}}} (one element per "
                           f"thread, no vector or cache qualifiers)")
        return Form(opcode, parts[0], type=parts[2])
    if parts[0] == "elect":
        if opcode != "elect.sync":
            return Refusal("the form is elect.sync")
        return Form(opcode, "elect")
    if parts[0] == "setmaxnreg":
        m = SETMAXNREG.fullmatch(opcode)
        if not m:
            return Refusal("the forms are setmaxnreg.inc.sync.aligned.u32 and setmaxnreg.dec.sync.aligned.u32")
        return Form(opcode, "setmaxnreg", inc=m.group(1) == "inc")
    if parts[0] == "mapa":
        return Refusal("is not applied on its own: the remote forms {ld,st}.shared::cluster.T and "
                       "mbarrier.arrive.release.cluster.shared::cluster.b64 take rank= and map their address with "
                       "mapa themselves")
    return None


def _barrier(opcode, quals):
    if not quals or quals[0] not in ("arrive", "wait"):
        return Refusal("the forms are barrier.cluster.arrive{.release|.relaxed}{.aligned} and "
                       "barrier.cluster.wait{.acquire}{.aligned}")
    kind, rest = quals[0], quals[1:]
    aligned = bool(rest) and rest[-1] == "aligned"
    if aligned:
        rest = rest[:-1]
    sems = ARRIVE_SEM if kind == "arrive" else ("acquire",)
    if len(rest) > 1 or (rest and rest[0] not in sems):
        return Refusal(f"barrier.cluster.{kind} takes {' or '.join('.' + s for s in sems)} then optionally "
                       f".aligned, got {''.join('.' + q for q in quals[1:])}")
    return Form(opcode, kind, sem=rest[0] if rest else "", aligned=aligned)


MIN_SM = 90


def requires(form: Form) -> list:
    """setmaxnreg exists on the arch-specific sm_90a only (checked in `expand`, which sees whether the target is
    arch-specific); its PTX needs ISA 8.0, as every form here."""
    return []


def arch(form: Form) -> int | None:
    """setmaxnreg needs sm_90a: a chosen sm_90 (no target named) compiles as sm_90a, as for wgmma (registry)."""
    return 90 if form.kind == "setmaxnreg" else None


# ------------------------------------------------------------------ expansion

def expand(form: Form, ctx: Ctx) -> list:
    ctx.thread_only("the default")
    if form.kind in ("arrive", "wait"):
        ctx.params(set())
        ctx.operands([])
        return [ctx.native([], effect="sync")]
    if form.kind == "setmaxnreg":
        return _setmaxnreg(form, ctx)
    if form.kind == "elect":
        return _elect(form, ctx)
    return _remote(form, ctx)


def cluster_size(ctx: Ctx) -> int:
    launch = getattr(ctx, "launch", None)
    c = tuple(getattr(launch, "cluster", (1, 1, 1)) or (1, 1, 1))
    return c[0] * c[1] * c[2]


def rank_value(ctx: Ctx, params: dict) -> ir.Expr:
    """The required `rank=` parameter (the target CTA's %cluster_ctarank): a u32, compile-time or run-time; a
    compile-time rank must lie inside the kernel's cluster."""
    if "rank" not in params:
        raise ctx.error("rank= is required: the rank in the cluster (T.cuda.cluster_ctarank() numbering) of the CTA "
                        "whose shared memory is accessed")
    v, loc = params["rank"]
    op = Operand("rank", v, loc)
    if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, ir.Expr) and v.dtype.is_int)):
        from ...ir import ops
        raise ctx.error(f"must be an integer (compile-time or run-time), got {ops.describe(v)}", op)
    if isinstance(v, int):
        n = cluster_size(ctx)
        if not 0 <= v < n:
            raise ctx.error(f"{v} is not a CTA of the cluster: the kernel's cluster has {n} block(s), ranks 0..{n - 1}"
                            f"{'' if n > 1 else ' (give T.cuda.LaunchConfig(cluster=...))'}", op)
        return ir.Const(dt.uint32, loc, v)
    return v if v.dtype == dt.uint32 else ir.Cast(dt.uint32, loc, v)


def shared_element(ctx: Ctx, op: Operand, what: str) -> ir.Addr:
    """The address of a view of one element of the CTA's shared memory (what mapa maps)."""
    if not op.is_view:
        raise ctx.error(f"must be a view of one shared-memory element ({what}; mapa maps shared::cta addresses), "
                        f"got a scalar", op)
    if op.view.storage.scope != "shared":
        raise ctx.error(f"must be in shared memory ({what}): mapa maps only shared::cta addresses, but "
                        f"{op.view.describe()} is in {op.view.storage.scope} memory", op)
    _one_element(ctx, op)
    v = op.view
    zero = [0] * len(v.shape)
    check_contiguous(ctx, op, [zero], max(1, v.dtype.bits // 8), what)
    return ir.Addr(v.storage, memory_addr(ctx, op, [], zero), v.dtype)


def _one_element(ctx: Ctx, op: Operand) -> None:
    n = 1
    for s in op.view.shape:
        n *= s
    if n != 1:
        raise ctx.error(f"must be one element (one access per thread), got shape {tuple(op.view.shape)}", op)


def _register(ctx: Ctx, op: Operand, bits: int, what: str, write: bool) -> ir.Reg:
    check_scope(ctx, op, ("local",), f" ({what})")
    _one_element(ctx, op)
    if op.view.dtype.bits != bits:
        raise ctx.error(f"must hold {bits}-bit elements ({what}), but {op.view.describe()} has "
                        f"{op.view.dtype.bits}-bit {op.view.dtype.name}", op)
    slot = thread_slots(ctx, op, [], [0] * len(op.view.shape))
    return ir.Reg(op.view.storage, slot, op.view.dtype, write)


def _remote(form: Form, ctx: Ctx) -> list:
    rank = rank_value(ctx, ctx.params({"rank"}))
    dst, src = ctx.operands(["dst", "src"])
    bits = TYPES[form.type].bits
    if form.kind == "st":
        addr = shared_element(ctx, dst, "the remote destination")
        _width(ctx, dst, bits, form)
        check_slot_type(ctx, dst, form.type, form.opcode)
        if src.is_view:
            reg = _register(ctx, src, bits, "the value stored", False)
            check_slot_type(ctx, src, form.type, form.opcode)
            return [ctx.native([[addr], [ir.Val(rank)], [reg]], effect="store")]
        value = scalar_value(ctx, src, TYPES[form.type])
        return [ctx.native([[addr], [ir.Val(rank)], [ir.Val(value)]], effect="store")]
    reg = _register(ctx, dst, bits, "the loaded value", True)
    check_slot_type(ctx, dst, form.type, form.opcode)
    addr = shared_element(ctx, src, "the remote source")
    _width(ctx, src, bits, form)
    check_slot_type(ctx, src, form.type, form.opcode)
    return [ctx.native([[reg], [addr], [ir.Val(rank)]], effect="load")]


def _width(ctx: Ctx, op: Operand, bits: int, form: Form) -> None:
    if op.view.dtype.bits != bits:
        raise ctx.error(f"element width must be {bits} bits for {form.opcode}, but {op.view.describe()} has "
                        f"{op.view.dtype.bits}-bit {op.view.dtype.name}", op)


def _elect(form: Form, ctx: Ctx) -> list:
    params = ctx.params({"p"})
    d, mask = ctx.operands(["d", "membermask"])
    groups = [[_register(ctx, d, 32, "the elected lane", True)]]
    if "p" in params and params["p"][0] is not None:
        p = Operand("p", *params["p"])
        if not p.is_view or not p.view.dtype.is_int:
            raise ctx.error("must be an integer register buffer (it is set to 1 in the leader, 0 elsewhere)", p)
        groups.append([_register(ctx, p, 32, "the leader predicate", True)])
    if mask.is_view:
        raise ctx.error("must be a 32-bit integer value (the lanes taking part), not a buffer", mask)
    mv = mask.value
    if isinstance(mv, int) and not isinstance(mv, bool) and mv < 0:
        mv = mv & 0xFFFFFFFF                     # -1: every lane
    if isinstance(mv, bool) or not (isinstance(mv, int) or (isinstance(mv, ir.Expr) and mv.dtype.is_int)):
        raise ctx.error("must be a 32-bit integer value (the lanes taking part)", mask)
    groups.append([ir.Val(scalar_value(ctx, Operand("membermask", mv, mask.loc), dt.uint32))])
    return [ctx.native(groups, effect="warp")]


def _setmaxnreg(form: Form, ctx: Ctx) -> list:
    if not ctx.target.admits_arch_specific(90):
        raise ctx.error(f"setmaxnreg needs the arch-specific target sm_90a; the target is {ctx.target.name} "
                        f"(compile with target='sm_90a')")
    ctx.params(set())
    (n_op,) = ctx.operands(["N"])
    n = n_op.value
    if isinstance(n, bool) or not isinstance(n, int):
        raise ctx.error("must be a compile-time int (the register count per thread)", n_op)
    if not MAXNREG_LO <= n <= MAXNREG_HI or n % 8:
        raise ctx.error(f"{n} is not a register count setmaxnreg takes: a multiple of 8 from {MAXNREG_LO} to "
                        f"{MAXNREG_HI}", n_op)
    if ctx.nthreads % 128:
        raise ctx.error(f"is executed by whole warpgroups (128 threads), but the block has {ctx.nthreads} threads")
    cap = getattr(getattr(ctx, "launch", None), "max_registers", None)
    if cap:
        # inc may only raise the count a warp runs with, dec only lower it (PTX ISA); both start from the cap
        if form.inc and n < cap:
            raise ctx.error(f"setmaxnreg.inc to {n} registers is below the kernel's register cap "
                            f"(LaunchConfig max_registers={cap}): .inc may only raise the count", n_op)
        if not form.inc and n > cap:
            raise ctx.error(f"setmaxnreg.dec to {n} registers is above the kernel's register cap "
                            f"(LaunchConfig max_registers={cap}): .dec may only lower the count", n_op)
    return [ctx.native([[ir.Imm(str(n))]], effect="sync")]


# ------------------------------------------------------------------ codegen

def access_spans(n: ir.Native) -> list:
    """A remote access touches one element of the named variable (checked against the issuing CTA's copy:
    every CTA of the cluster has the same shared variables)."""
    return [1] * sum(isinstance(a, ir.Addr) for g in n.groups for a in g)


_ADDR = re.compile(r"\[(\$\d+)(?:\+(-?\d+))?\]")


def mapped(addr: str, rank: str) -> tuple:
    """(mapa instruction, remote address text) for a rendered shared address `[$i]` / `[$i+c]` and a rank: the
    base register is mapped and the constant offset kept (each CTA's window holds its variables at the same
    offsets)."""
    m = _ADDR.fullmatch(addr)
    off = f"+{m.group(2)}" if m.group(2) else ""
    return f"mapa.shared::cluster.u32 %cr, {m.group(1)}, {rank};", f"[%cr{off}]"


def asm(n: ir.Native, ops: list) -> str | None:
    form: Form = n.form
    if form.kind == "st":
        mapa, remote = mapped(ops[0], ops[1])
        return f"{{ .reg .b32 %cr; {mapa} {form.opcode} {remote}, {ops[2]}; }}"
    if form.kind == "ld":
        mapa, remote = mapped(ops[1], ops[2])
        return f"{{ .reg .b32 %cr; {mapa} {form.opcode} {ops[0]}, {remote}; }}"
    if form.kind == "elect":
        if len(ops) == 3:
            return f"{{ .reg .pred %ep; elect.sync {ops[0]}|%ep, {ops[2]}; selp.b32 {ops[1]}, 1, 0, %ep; }}"
        return f"{{ .reg .pred %ep; elect.sync {ops[0]}|%ep, {ops[1]}; }}"
    return None
