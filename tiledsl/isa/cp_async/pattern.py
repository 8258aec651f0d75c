"""cp.async (global -> shared) and its group instructions, commit_group / wait_group N / wait_all.

    cp.async.{ca,cg}.shared{::cta}.global{.L2::cache_hint}{.L2::{64B,128B,256B}}  dst (shared), src (global)
    cp.async.commit_group          no operands
    cp.async.wait_group            one operand: N, a compile-time int in 0..63
    cp.async.wait_all              no operands

A copy's operands read as (*group, *repeat, atom) where the atom is exactly `chunk_bytes` of storage (so
chunk_bytes / element-size elements), contiguous and aligned to chunk_bytes. `chunk_bytes` is required: 4, 8 or
16 for .ca, 16 for .cg. `src_size` (run-time or static byte count; the rest of the chunk is zero-filled) and
`ignore_src` (run-time bool; true reads nothing and zero-fills the chunk, emitted as src-size 0) exclude each
other; `pred` skips the copy; `cache_policy` (a uint64 policy, from createpolicy) is required exactly with
.L2::cache_hint. The copies become visible after the wait that covers their group; the pattern
inserts no commit, wait or barrier. Thread instruction, sm_80 or newer.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import dtypes as dt
from ...ir import nodes as ir
from ...core.errors import CompilationError
from ..family import Refusal
from ..operands import THREAD, Ctx, cache_policy, check_scope, copy_repeats, memory_addr, repeat_coords
from ..register.pattern import predicate

SUPPORTED = ("supported: cp.async.{ca,cg}.shared{::cta}.global{.L2::cache_hint}{.L2::64B,.L2::128B,.L2::256B}, "
             "cp.async.commit_group, cp.async.wait_group, cp.async.wait_all")
GROUP_OPS = {"commit_group": "commit", "wait_group": "wait", "wait_all": "wait_all"}
PREFETCH = {"L2::64B", "L2::128B", "L2::256B"}
# wait_group's N: PTX names no range, but ptxas (CUDA 13, sm_80 and sm_90) assembles every N >= 63 (and -1) to the
# same code as 63: the dependency counter holds 0..63. A larger N would wait for less than it says nowhere.
MAX_WAIT_GROUP = 63


@dataclass(frozen=True)
class Form:
    opcode: str
    kind: str                    # copy | commit | wait | wait_all
    cache: str = ""              # ca | cg for a copy
    hint: bool = False           # .L2::cache_hint: the copy takes a cache_policy operand


def match(opcode: str):
    parts = opcode.split(".")
    if parts[:2] != ["cp", "async"]:
        return None
    rest = parts[2:]
    if len(rest) == 1 and rest[0] in GROUP_OPS:
        return Form(opcode, GROUP_OPS[rest[0]])
    if not rest or rest[0] not in ("ca", "cg"):
        return Refusal(f"{opcode} has no explicit tile pattern; {SUPPORTED}")
    cache, rest = rest[0], rest[1:]
    if rest[:2] not in (["shared", "global"], ["shared::cta", "global"]):
        return Refusal(f"cp.async copies global -> shared: write cp.async.{cache}.shared.global; {SUPPORTED}")
    rest = rest[2:]
    hint = bool(rest) and rest[0] == "L2::cache_hint"
    rest = rest[1:] if hint else rest
    if len(rest) > 1 or (rest and rest[0] not in PREFETCH):
        return Refusal(f"qualifier(s) .{'.'.join(rest)} are not supported after .global; {SUPPORTED}")
    return Form(opcode, "copy", cache, hint)


MIN_SM = 80


def expand(form: Form, ctx: Ctx) -> list:
    ctx.group_axes(THREAD)                       # refuses scope='cluster'
    ctx.check_block_for_scope(THREAD)
    if form.kind in ("commit", "wait_all"):
        ctx.params(set())
        ctx.operands([])
        return [ctx.native([], effect="sync")]
    if form.kind == "wait":
        ctx.params(set())
        (n,) = ctx.operands(["N"])
        if isinstance(n.value, bool) or not isinstance(n.value, int) or n.value < 0:
            raise ctx.error("wait_group takes a compile-time non-negative int: how many most recent groups may "
                            "stay pending", n)
        if n.value > MAX_WAIT_GROUP:
            raise ctx.error(f"wait_group {n.value} is out of range: N must be 0..{MAX_WAIT_GROUP} (the hardware's "
                            f"pending-group count; the assembler silently turns a larger N into {MAX_WAIT_GROUP})", n)
        return [ctx.native([[ir.Imm(str(n.value))]], effect="sync")]
    return _copy(form, ctx)


def _copy(form, ctx: Ctx) -> list:
    params = ctx.params({"chunk_bytes", "src_size", "ignore_src", "pred", "cache_policy"})
    policy = cache_policy(ctx, params, form.hint)
    chunk = _chunk_bytes(form, ctx, params)
    src_size = _src_size(ctx, params, chunk)
    pred, _ = predicate(ctx, {k: v for k, v in params.items() if k == "pred"}, writes=False)
    dst, src = ctx.operands(["dst", "src"])
    check_scope(ctx, dst, ("shared",))
    check_scope(ctx, src, ("global",))
    gaxes = ctx.group_axes(THREAD)
    gext = ctx.group_extents(gaxes)
    rep = copy_repeats(ctx, dst, src, chunk, gaxes, gext, chunk, f"the {chunk}-byte chunk of one copy")
    gids = ctx.group_ids(gaxes)
    out = []
    for coord in repeat_coords(rep):
        d = ir.Addr(dst.view.storage, memory_addr(ctx, dst, gids, list(coord) + [0]), dst.view.dtype)
        s = ir.Addr(src.view.storage, memory_addr(ctx, src, gids, list(coord) + [0]), src.view.dtype)
        groups = [[d], [s], [ir.Imm(str(chunk))]]
        if src_size is not None:
            groups.append([ir.Val(src_size)])
        if policy is not None:
            groups.append([ir.Val(policy)])
        out.append(ctx.native(groups, pred, effect="store", origin=f"rep{coord}"))
    return out


def access_spans(n: ir.Native) -> list:
    """A copy writes and reads its chunk (the cp-size immediate) at dst and src; group instructions touch none."""
    if n.form.kind != "copy":
        return []
    (dst,), (src,), (size,) = n.groups[:3]
    chunk = int(size.text)
    return [max(1, chunk // dst.dtype.nbytes), max(1, chunk // src.dtype.nbytes)]


def _chunk_bytes(form, ctx, params) -> int:
    if "chunk_bytes" not in params:
        raise ctx.error("chunk_bytes= is required (4, 8 or 16 for .ca; 16 for .cg)")
    chunk, loc = params["chunk_bytes"]
    allowed = (16,) if form.cache == "cg" else (4, 8, 16)
    if isinstance(chunk, bool) or chunk not in allowed:
        shown = "a run-time value" if isinstance(chunk, ir.Expr) else repr(chunk)
        raise CompilationError(f"{ctx.opcode}: chunk_bytes must be one of {allowed} for .{form.cache}, got "
                               f"{shown}", loc)
    return chunk


def _src_size(ctx, params, chunk):
    """The src-size operand (u32) for `src_size` or `ignore_src`, or None for a full copy."""
    from ...ir import ops
    if "src_size" in params and "ignore_src" in params:
        raise CompilationError(f"{ctx.opcode}: src_size and ignore_src are mutually exclusive",
                               params["ignore_src"][1])
    if "src_size" in params:
        v, loc = params["src_size"]
        if isinstance(v, int) and not isinstance(v, bool):
            if not 0 <= v <= chunk:
                raise CompilationError(f"{ctx.opcode}: src_size {v} is outside 0..{chunk}", loc)
            return ir.Const(dt.uint32, loc, v)
        if isinstance(v, ir.Expr) and v.dtype.is_int:
            return v if v.dtype == dt.uint32 else ir.Cast(dt.uint32, loc, v)
        raise CompilationError(f"{ctx.opcode}: src_size must be an integer number of bytes, got "
                               f"{ops.describe(v)}", loc)
    if "ignore_src" in params:
        v, loc = params["ignore_src"]
        if isinstance(v, bool):
            return ir.Const(dt.uint32, loc, 0) if v else None
        if isinstance(v, ir.Expr) and v.dtype.kind == "bool":
            return ops.select(v, ir.Const(dt.uint32, loc, 0), ir.Const(dt.uint32, loc, chunk), loc)
        raise CompilationError(f"{ctx.opcode}: ignore_src must be a bool, got {ops.describe(v)}", loc)
    return None
