"""The stages, in order: parse -> tile IR -> expand patterns -> LLVM IR -> PTX -> cubin. Every output is kept."""
from __future__ import annotations

import os
import time

from .lower import ptx as backend
from .core import knobs as config
from .ir import nodes as ir
from .passes.expand import expand_kernel
from .frontend.parser import Parser
from .compiled import CompiledKernel, StageDict  # noqa: F401 - re-exported
from .ir.printer import kernel_str
from .core.options import Options
from .core.target import Target


def front(fn, constexprs, block=None, grid=None):
    p = Parser(fn, constexprs, block_override=block, grid_override=grid)
    k = p.parse()
    return k, p


def compile_kernel(fn, constexprs: dict, target: Target, options: Options, block=None, grid=None,
                   want_cubin=True) -> CompiledKernel:
    sm = target.sm
    t0 = time.perf_counter()
    k, parser = front(fn, constexprs, block, grid)
    asm = {"tile": kernel_str(k)}
    ek = expand_kernel(k, target)
    sites = []
    if options.debug:
        from .passes.bounds_checks import insert_bounds_checks
        ek, sites = insert_bounds_checks(ek)
    asm["expanded"] = kernel_str(ek)
    from .lower.llvm import generate_llvm
    _check_shared(k, sm)
    raw, dynamic_shared = generate_llvm(ek, sm, debug_buffer=bool(sites))
    opt_ir, ptx = backend.llvm_to_ptx(raw, sm)
    asm["llvm"] = opt_ir
    asm["ptx"] = ptx
    t1 = time.perf_counter()
    metadata = {"compile_ms_to_ptx": round((t1 - t0) * 1e3, 2), "dynamic_shared": dynamic_shared}
    cubin = None
    if want_cubin:
        cubin, info, tool = backend.ptx_to_cubin(ptx, sm, k.name)
        metadata.update(info)
        metadata["assembler"] = tool
        if cubin is not None:
            asm = StageDict(asm, cubin)           # "sass" is disassembled on first use
    metadata.setdefault("shared_bytes", sum(st.size * st.dtype.nbytes for st in k.allocs if st.scope == "shared"))
    if sites:
        metadata["debug_sites"] = sites
    from .abi.signature import KernelSignature
    ck = CompiledKernel(k.name, sm, asm, metadata, KernelSignature.from_kernel(k, debug_buffer=bool(sites)), cubin)
    ck.expanded_ir = ek
    dump = config.dump_dir()
    if dump:
        os.makedirs(dump, exist_ok=True)
        for stage, text in asm.items():
            with open(os.path.join(dump, f"{k.name}.{stage}"), "w") as f:
                f.write(text)
    return ck


SHARED_LIMIT = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}


def _check_shared(k: ir.Kernel, sm: int) -> None:
    from .core.errors import CompilationError
    limit = SHARED_LIMIT.get(sm) or max(v for s, v in SHARED_LIMIT.items() if s <= sm)
    total = 0
    for st in k.allocs:
        if st.scope == "shared":
            total += st.size * st.dtype.nbytes
            if total > limit:
                raise CompilationError(f"shared memory: {total} bytes exceed the {limit} bytes a block can have on "
                                       f"sm_{sm}", st.loc)
