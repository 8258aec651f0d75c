"""cp.async (global -> shared) and its group instructions, commit_group / wait_group N / wait_all.

`cp.async.{ca,cg}.shared{::cta}.global [dst], [src], chunk_bytes{, src_size}`: operands dst (shared) and src
(global), each read as (*group, *repeat, atom) where the atom is exactly chunk_bytes of storage, contiguous and
aligned to it. `chunk_bytes` is required (4, 8 or 16 for .ca; 16 for .cg). `src_size` (zero-fill the tail) and
`ignore_src` are mutually exclusive; `pred` is allowed. The copies become visible after the matching
wait_group, which the caller writes: the pattern inserts no commit, wait or barrier.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .. import dtypes as dt
from .. import ir
from ..errors import CompilationError
from .operands import THREAD, Ctx, check_scope, memory_addr, repeat_coords, split_shape
from .register import predicate
from .staticeval import static_offsets

COPY = re.compile(r"^cp\.async\.(ca|cg)\.shared(::cta)?\.global(\.L2::(64B|128B|256B))?$")


@dataclass(frozen=True)
class Form:
    opcode: str
    kind: str                    # copy | commit | wait | wait_all
    cache: str = ""


def match(opcode: str):
    if not opcode.startswith("cp.async"):
        return None
    if opcode == "cp.async.commit_group":
        return Form(opcode, "commit")
    if opcode == "cp.async.wait_group":
        return Form(opcode, "wait")
    if opcode == "cp.async.wait_all":
        return Form(opcode, "wait_all")
    m = COPY.match(opcode)
    if m is None:
        return ("bad", "supported: cp.async.{ca,cg}.shared{::cta}.global{.L2::128B}, cp.async.commit_group, "
                       "cp.async.wait_group, cp.async.wait_all")
    return Form(opcode, "copy", m.group(1))


def expand(form, ctx: Ctx) -> list:
    if isinstance(form, tuple):
        raise ctx.error(form[1])
    if ctx.sm < 80:
        raise ctx.error(f"needs sm_80 or newer; the target is sm_{ctx.sm}")
    if form.kind == "commit" or form.kind == "wait_all":
        ctx.params(set())
        ctx.operands([])
        return [ir.Native(ctx.loc, form.opcode, [], None, False, "sync")]
    if form.kind == "wait":
        ctx.params(set())
        (n,) = ctx.operands(["N"])
        if isinstance(n.value, bool) or not isinstance(n.value, int) or n.value < 0:
            raise ctx.error("wait_group takes a compile-time non-negative int: how many most recent groups may "
                            "stay pending", n)
        return [ir.Native(ctx.loc, form.opcode, [[ir.Imm(str(n.value))]], None, False, "sync")]
    return _copy(form, ctx)


def _copy(form, ctx: Ctx) -> list:
    params = ctx.params({"chunk_bytes", "src_size", "ignore_src", "pred"})
    if "chunk_bytes" not in params:
        raise ctx.error("chunk_bytes= is required (4, 8 or 16 for .ca; 16 for .cg)")
    chunk, cloc = params["chunk_bytes"]
    allowed = (16,) if form.cache == "cg" else (4, 8, 16)
    if isinstance(chunk, bool) or chunk not in allowed:
        raise CompilationError(f"{ctx.opcode}: chunk_bytes must be one of {allowed} for .{form.cache}, got "
                               f"{chunk!r}", cloc)
    if "src_size" in params and "ignore_src" in params:
        raise CompilationError(f"{ctx.opcode}: src_size and ignore_src are mutually exclusive",
                               params["ignore_src"][1])
    extra = None
    if "src_size" in params:
        v, loc = params["src_size"]
        if not (isinstance(v, int) and not isinstance(v, bool)) and not (isinstance(v, ir.Expr) and v.dtype.is_int):
            raise CompilationError(f"{ctx.opcode}: src_size must be an integer number of bytes", loc)
        if isinstance(v, int) and not 0 <= v <= chunk:
            raise CompilationError(f"{ctx.opcode}: src_size {v} is outside 0..{chunk}", loc)
        extra = ir.as_expr(v, dt.uint32, loc) if isinstance(v, int) else ir.Cast(dt.uint32, loc, v)
    if "ignore_src" in params:
        v, loc = params["ignore_src"]
        if isinstance(v, bool):
            extra = ir.Const(dt.uint32, loc, 0 if v else chunk)
        elif isinstance(v, ir.Expr):
            from ..frontend import ops
            extra = ops.select(ops.truth(v, loc), ir.Const(dt.uint32, loc, 0), ir.Const(dt.uint32, loc, chunk), loc)
        else:
            raise CompilationError(f"{ctx.opcode}: ignore_src must be a bool", loc)
    pred, _ = predicate(ctx, {k: v for k, v in params.items() if k == "pred"}, writes=False)
    dst, src = ctx.operands(["dst", "src"])
    check_scope(ctx, dst, ("shared",))
    check_scope(ctx, src, ("global",))
    gaxes = ctx.group_axes(THREAD)
    ctx.check_block_for_scope(THREAD)
    gext = ctx.group_extents(gaxes)
    reps = []
    for op in (dst, src):
        nbytes = op.view.dtype.nbytes
        if chunk % nbytes:
            raise ctx.error(f"{chunk} bytes is not a whole number of {op.view.dtype.name} elements", op)
        atom = (chunk // nbytes,)
        reps.append(split_shape(ctx, op, len(gaxes), atom, gext))
        _check_chunk(ctx, op, gaxes, gext, reps[-1], atom[0], chunk)
    if tuple(reps[0]) != tuple(reps[1]):
        raise ctx.error(f"repeat shape {reps[1]} does not match dst's {reps[0]}", src)
    gids = ctx.group_ids(gaxes)
    out = []
    for coord in repeat_coords(reps[0]):
        d = ir.Addr(dst.view.storage, memory_addr(ctx, dst, gids, list(coord) + [0]), dst.view.dtype)
        s = ir.Addr(src.view.storage, memory_addr(ctx, src, gids, list(coord) + [0]), src.view.dtype)
        groups = [[d], [s], [ir.Imm(str(chunk))]]
        if extra is not None:
            groups.append([ir.Val(extra)])
        out.append(ir.Native(ctx.loc, form.opcode, groups, pred, False, "store", f"rep{coord}"))
    return out


def _check_chunk(ctx, op, gaxes, gext, rep, n, chunk):
    g = [e - 1 for e in gext]
    for coord in ([0] * len(rep), [r - 1 for r in rep]):
        try:
            offs = static_offsets(op.view, [g + list(coord) + [w] for w in range(n)])
        except ValueError as e:
            raise ctx.error(f"cannot prove the {chunk}-byte chunk contiguous: {e}", op) from None
        if offs is None:
            continue
        if [o - offs[0] for o in offs] != list(range(n)):
            raise ctx.error(f"the {chunk} bytes of one copy must be contiguous, but sit at element offsets {offs}",
                            op)
        if (offs[0] * op.view.dtype.nbytes) % chunk:
            raise ctx.error(f"the chunk must be aligned to {chunk} bytes, but starts at byte "
                            f"{offs[0] * op.view.dtype.nbytes}", op)
