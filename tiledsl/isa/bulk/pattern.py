"""Bulk copies through the tensor memory accelerator, and the mbarriers that count their bytes (sm_90).

    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes   dst (shared), src (global), mbar
    cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32          dst (global), src (shared), float32
    mbarrier.init.shared::cta.b64                 mbar, count
    mbarrier.arrive.expect_tx.shared::cta.b64     mbar, tx_bytes
    mbarrier.arrive.shared::cta.b64               mbar
    mbarrier.try_wait.parity.shared::cta.b64      mbar, parity      (waits: try_wait in a loop until it succeeds)
    fence.proxy.async.shared::cta                 no operands
    fence.mbarrier_init.release.cluster           no operands

All are thread instructions: every thread that executes one issues it (guard with `if` for one issuer).

A bulk copy's dst and src read as (*repeat, atom), the atom being `copy_bytes` of contiguous storage
(`copy_bytes=` is required, a compile-time multiple of 16), aligned to 16 bytes; each repeat is one copy, and every
copy signals its bytes to `mbar`, a view of one 8-byte shared element. The copy's writes become visible to a
thread once it has waited on the barrier's phase that counted them. `count` and `tx_bytes` are u32 values
(compile-time or run-time; a compile-time count is 1..2^20-1, tx_bytes 0..2^20-1), `parity` is the phase parity
(0 or 1) to wait for. `copy_bytes` is at most 2^20 - 16.

The bulk reduction adds `copy_bytes` of float32 values at src (shared) into dst (global), element by element, in
L2 (atomically with respect to other reductions); its operands read as a copy's, without an mbarrier: it completes
through the bulk async-groups (cp.async.bulk.commit_group, then cp.async.bulk.wait_group.read before src is
written again, cp.async.bulk.wait_group before the sums are read; the TMA family owns those). The shared source is
read by the async proxy: generic stores to it need a fence.proxy.async.shared::cta (and a barrier) first.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import dtypes as dt
from ...ir import nodes as ir
from ...core.errors import CompilationError
from ..family import Refusal, addresses
from ..operands import Ctx, Operand, check_contiguous, check_scope, copy_repeats, memory_addr, repeat_coords

COPY = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
REDUCE = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"
REMOTE_ARRIVE = "mbarrier.arrive.release.cluster.shared::cluster.b64"
# the same arrive with the default semantics (release at CTA scope), for a thread that publishes no writes of its
# own (a consumer that read a stage through wgmma, releasing it to a peer's producer): the cluster-scope release
# assembles to MEMBAR.ALL.CTA + MEMBAR.ALL.GPU before every arrive (H200 SASS), which made the 2-CTA multicast GEMM
# run at 400 TFLOP/s against 740 with this one
REMOTE_ARRIVE_CTA = "mbarrier.arrive.shared::cluster.b64"
MBAR = {"mbarrier.init.shared::cta.b64": ("init", ["mbar", "count"]),
        "mbarrier.arrive.expect_tx.shared::cta.b64": ("expect_tx", ["mbar", "tx_bytes"]),
        "mbarrier.arrive.shared::cta.b64": ("arrive", ["mbar"]),
        "mbarrier.try_wait.parity.shared::cta.b64": ("wait", ["mbar", "parity"]),
        # the same wait, acquiring at cluster scope (what arrivals from other CTAs of the cluster released)
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64": ("wait", ["mbar", "parity"]),
        # an arrive on the mbarrier of another CTA of the cluster (rank=): its address is mapped with mapa
        REMOTE_ARRIVE: ("remote_arrive", ["mbar"]),
        REMOTE_ARRIVE_CTA: ("remote_arrive", ["mbar"])}
FENCES = {"fence.proxy.async", "fence.proxy.async.shared::cta", "fence.mbarrier_init.release.cluster"}
# The PTX ISA's ranges: an mbarrier counts at most 2^20 - 1 arrivals and 2^20 - 1 pending transaction bytes; ptxas
# takes a bulk copy's size immediate in 0..2^20 - 16 (larger ones are rejected, or wrap silently past 2^32).
MAX_COUNT = 2**20 - 1
MAX_COPY_BYTES = 2**20 - 16
SUPPORTED = f"supported: {COPY}, {REDUCE}, {', '.join(MBAR)}, {', '.join(sorted(FENCES))}"


@dataclass(frozen=True)
class Form:
    opcode: str
    kind: str                    # copy | reduce | init | expect_tx | arrive | remote_arrive | wait | fence


def match(opcode: str):
    if opcode == COPY:
        return Form(opcode, "copy")
    if opcode in MBAR:
        return Form(opcode, MBAR[opcode][0])
    if opcode in FENCES:
        return Form(opcode, "fence")
    if opcode == REDUCE:
        return Form(opcode, "reduce")
    if opcode.startswith("cp.reduce.async.bulk"):
        return Refusal(f"{opcode} has no explicit tile pattern; the bulk reduction supported is {REDUCE} "
                       f"(float32 adds from shared into global memory, completed through the bulk async-groups)")
    if opcode.startswith("cp.async.bulk") or opcode.startswith("mbarrier") or opcode.startswith("fence."):
        return Refusal(f"{opcode} has no explicit tile pattern; {SUPPORTED}")
    return None


MIN_SM = 90


def expand(form: Form, ctx: Ctx) -> list:
    ctx.thread_only("guard it with `if` for a single issuer")
    if form.kind == "fence":
        ctx.params(set())
        ctx.operands([])
        return [ctx.native([], effect="sync")]
    if form.kind in ("copy", "reduce"):
        return _copy(form, ctx)
    params = ctx.params({"rank"} if form.kind == "remote_arrive" else set())
    ops = ctx.operands(MBAR[form.opcode][1])
    mbar = _mbarrier(ctx, ops[0])
    if form.kind == "remote_arrive":
        from ..cluster.pattern import rank_value
        return [ctx.native([[ir.Imm("_")], [mbar], [ir.Val(rank_value(ctx, params))]], effect="sync")]
    if form.kind == "arrive":
        return [ctx.native([[ir.Imm("_")], [mbar]], effect="sync")]
    value = _u32(ctx, ops[1])
    lo = 1 if form.kind == "init" else 0
    if form.kind in ("init", "expect_tx") and isinstance(ops[1].value, int) and \
            not lo <= ops[1].value <= MAX_COUNT:
        what = "the expected arrival count" if form.kind == "init" else "the transaction byte count"
        raise ctx.error(f"{ops[1].value} is out of range: {what} of an mbarrier must be {lo}..{MAX_COUNT} "
                        f"(2^20 - 1)", ops[1])
    if form.kind == "init":
        return [ctx.native([[mbar], [ir.Val(value)]], effect="sync")]
    if form.kind == "expect_tx":
        return [ctx.native([[ir.Imm("_")], [mbar], [ir.Val(value)]], effect="sync")]
    if isinstance(ops[1].value, int) and ops[1].value not in (0, 1):
        raise ctx.error(f"parity is the phase's parity, 0 or 1; got {ops[1].value}", ops[1])
    # a blocking wait: codegen emits try_wait in a loop until it reports the phase complete (asm below)
    return [ctx.native([[mbar], [ir.Val(value)]], effect="sync")]


def _mbarrier(ctx: Ctx, op: Operand) -> ir.Addr:
    if not op.is_view:
        raise ctx.error("must be a view of one 8-byte shared element (the mbarrier)", op)
    check_scope(ctx, op, ("shared",))
    v = op.view
    if v.dtype.nbytes != 8 or any(s != 1 for s in v.shape):
        raise ctx.error(f"must be one 8-byte element (uint64 or int64), got shape {tuple(v.shape)} of "
                        f"{v.dtype.name}", op)
    check_contiguous(ctx, op, [[0] * len(v.shape)], 8, "the mbarrier")
    return ir.Addr(v.storage, memory_addr(ctx, op, [], [0] * len(v.shape)), v.dtype)


def _u32(ctx: Ctx, op: Operand) -> ir.Expr:
    v = op.value
    if isinstance(v, bool):
        raise ctx.error("must be an integer, got a bool", op)
    if isinstance(v, int):
        if not 0 <= v < 2**32:
            raise ctx.error(f"{v} does not fit in u32", op)
        return ir.Const(dt.uint32, op.loc, v)
    if isinstance(v, ir.Expr) and v.dtype.is_int:
        return v if v.dtype == dt.uint32 else ir.Cast(dt.uint32, op.loc, v)
    raise ctx.error("must be an integer (compile-time or run-time)", op)


def _copy(form, ctx: Ctx) -> list:
    """A bulk copy (global -> shared, paying an mbarrier) or the bulk reduction (shared -> global, no mbarrier)."""
    params = ctx.params({"copy_bytes"})
    if "copy_bytes" not in params:
        raise ctx.error("copy_bytes= is required: the bytes of one copy, a multiple of 16")
    nbytes, loc = params["copy_bytes"]
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0 or nbytes % 16:
        raise CompilationError(f"{ctx.opcode}: copy_bytes must be a compile-time positive multiple of 16, got "
                               f"{nbytes!r}", loc)
    if nbytes > MAX_COPY_BYTES:
        raise CompilationError(f"{ctx.opcode}: copy_bytes {nbytes} is out of range: one bulk copy moves at most "
                               f"{MAX_COPY_BYTES} bytes (the range of the instruction's size operand)", loc)
    reduce = form.kind == "reduce"
    if reduce:
        dst, src = ctx.operands(["dst", "src"])
        check_scope(ctx, dst, ("global",))
        check_scope(ctx, src, ("shared",))
        for op in (dst, src):
            if op.view.dtype.name != "float32":
                raise ctx.error(f"{op.view.describe()} holds {op.view.dtype.name}; the .add.f32 reduction adds "
                                f"float32 values", op)
        tail = []
    else:
        dst, src, mbar_op = ctx.operands(["dst", "src", "mbar"])
        check_scope(ctx, dst, ("shared",))
        check_scope(ctx, src, ("global",))
        tail = [[_mbarrier(ctx, mbar_op)]]
    what = "bulk reduction" if reduce else "bulk copy"
    rep = copy_repeats(ctx, dst, src, nbytes, [], [], 16, f"the {nbytes}-byte block of one {what}")
    out = []
    for coord in repeat_coords(rep):
        d = ir.Addr(dst.view.storage, memory_addr(ctx, dst, [], list(coord) + [0]), dst.view.dtype)
        s = ir.Addr(src.view.storage, memory_addr(ctx, src, [], list(coord) + [0]), src.view.dtype)
        out.append(ctx.native([[d], [s], [ir.Imm(str(nbytes))]] + tail, effect="store", origin=f"rep{coord}"))
    return out


def access_spans(n: ir.Native) -> list:
    """A copy or reduction reads and writes its copy_bytes at src and dst; every mbarrier operand is one 8-byte
    element."""
    if n.form.kind in ("copy", "reduce"):
        (dst,), (src,), (size,) = n.groups[:3]
        nbytes = int(size.text)
        return [max(1, nbytes // dst.dtype.nbytes), max(1, nbytes // src.dtype.nbytes)] + [1] * (len(n.groups) - 3)
    return [1] * len(addresses(n))


def asm(n: ir.Native, operands: list) -> str | None:
    """The blocking wait: try_wait until it reports the phase complete (one uniquely labelled loop per use); the
    remote arrive maps its barrier's address into the target CTA first."""
    if n.form.kind == "remote_arrive":
        from ..cluster.pattern import mapped
        mapa, remote = mapped(operands[1], operands[2])
        return f"{{ .reg .b32 %cr; {mapa} {n.opcode} _, {remote}; }}"
    if n.form.kind != "wait":
        return None
    return (f"{{ .reg .pred %tw; TDW${{:uid}}: {n.opcode} %tw, {', '.join(operands)}; "
            f"@!%tw bra TDW${{:uid}}; }}")
