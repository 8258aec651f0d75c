"""Pattern expansion: every `Apply` in the tile IR becomes the native instructions its family rules produce."""
from __future__ import annotations

from ..ir import nodes as ir
from ..isa.registry import lookup
from ..isa.operands import Ctx


def expand_kernel(k: ir.Kernel, sm: int) -> ir.Kernel:
    block = k.launch.block
    body = _expand(k.body, block, sm)
    return ir.Kernel(k.name, k.params, body, k.launch, k.allocs, k.sizes, k.loc)


def _expand(body, block, sm):
    out = []
    for s in body:
        if isinstance(s, ir.Apply):
            fam, form = lookup(s.opcode, s.loc)
            out.extend(fam.expand(form, Ctx(s, block, sm)))
        elif isinstance(s, ir.For):
            out.append(ir.For(s.loc, s.var, s.start, s.stop, s.step, _expand(s.body, block, sm), s.unroll))
        elif isinstance(s, ir.If):
            out.append(ir.If(s.loc, s.cond, _expand(s.then, block, sm), _expand(s.orelse, block, sm)))
        else:
            out.append(s)
    return out
