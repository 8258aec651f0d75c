"""A per-thread local tile that cannot live in registers is refused before ptxas runs (issue 34).

A thread has at most 255 32-bit registers (`Target.max_registers_per_thread`). A single `T.alloc_local` larger than
that can only be spilled to local memory: ptxas then takes minutes over it (a local of 4096 float32, a typo away
from 4, took 67 s and spilled 38 KB) and the kernel runs from local memory. One allocation alone is the test: what
else is live beside it is ptxas's business, and every kernel of examples/ and tiledsl.ops stays well under it.
`tiledsl.jit(allow_spills=True)` compiles such a kernel anyway.
"""
from __future__ import annotations

from ..core.errors import CompilationError
from ..core.target import Target
from ..ir import nodes as ir


def check_local_sizes(k: ir.Kernel, target: Target, allow_spills: bool) -> None:
    """Raise CompilationError at the first local allocation of `k` larger than the register file of a thread."""
    if allow_spills:
        return
    limit = target.max_registers_per_thread * 4
    for st in k.allocs:
        if st.scope != "local" or st.size is None:
            continue
        nbytes = st.size * st.dtype.nbytes
        if nbytes > limit:
            regs = -(-nbytes // 4)
            raise CompilationError(
                f"this local tile holds {st.size} {st.dtype.name} per thread ({nbytes} bytes, {regs} 32-bit "
                f"registers); a thread has at most {target.max_registers_per_thread} registers "
                f"({limit} bytes), so the assembler would spill all of it to local memory (minutes to compile, "
                f"slow to run). Make it smaller (is an extent mistyped?), or compile with tiledsl.jit(allow_spills=True)",
                st.loc)
