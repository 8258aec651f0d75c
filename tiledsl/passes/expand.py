"""Pattern expansion: every `Apply` in the tile IR becomes the native instructions its family rules produce."""
from __future__ import annotations

from ..ir import nodes as ir
from ..isa.registry import lookup
from ..isa.operands import Ctx
from ..core.target import Target
from .wide_offsets import widen_offsets


def expand_kernel(k: ir.Kernel, target: Target) -> ir.Kernel:
    block = k.launch.block
    body = _expand(k.body, block, target, k.launch)
    # offsets into tensors that may hold 2^31 elements become 64-bit here, for both backends
    return widen_offsets(ir.Kernel(k.name, k.params, body, k.launch, k.allocs, k.sizes, k.loc))


def _expand(body, block, target, launch=None):
    out = []
    for s in body:
        if isinstance(s, ir.Apply):
            fam, form = lookup(s.opcode, s.loc, target)
            ctx = Ctx(s, block, target, fam, form)
            ctx.launch = launch             # the cluster and the register cap (the cluster family's checks)
            out.extend(fam.expand(form, ctx))
        elif isinstance(s, ir.For):
            out.append(ir.For(s.loc, s.var, s.start, s.stop, s.step, _expand(s.body, block, target, launch), s.unroll))
        elif isinstance(s, ir.If):
            out.append(ir.If(s.loc, s.cond, _expand(s.then, block, target, launch),
                             _expand(s.orelse, block, target, launch)))
        elif isinstance(s, ir.While):
            out.append(ir.While(s.loc, s.cond, _expand(s.body, block, target, launch)))
        else:
            out.append(s)
    return out
