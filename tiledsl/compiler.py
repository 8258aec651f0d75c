"""The stages, in order: parse -> tile IR -> expand patterns -> LLVM IR -> PTX -> cubin. Every output is kept.

The `Target` chosen by the caller travels to every stage that asks a hardware question (the front end's limits,
the pattern families' minimum SM, codegen's dynamic-shared threshold, LLVM's CPU, the assembler's -arch).
"""
from __future__ import annotations

import functools
import gc
import os
import time

from .lower import ptx as backend
from .core import knobs
from .ir import nodes as ir
from .passes.expand import expand_kernel
from .passes.register_budget import check_local_sizes
from .isa.registry import arch_target
from .frontend.parser import Parser
from .abi.signature import KernelSignature
from .compiled import CompiledKernel, StageDict  # noqa: F401 - re-exported
from .ir.printer import kernel_str
from .core.options import Options
from .core.target import Target


def front(fn, constexprs: dict, block=None, grid=None, target: Target | None = None) -> tuple[ir.Kernel, Parser]:
    """The tile IR of `fn` specialised on `constexprs` (and the Parser, which knows what the body read)."""
    p = Parser(fn, constexprs, block_override=block, grid_override=grid, target=Target.parse(target))
    k = p.parse()
    return k, p


def _gc_paused(f):
    """Run `f` with the cyclic garbage collector off: a GEMM's compile allocates a few hundred thousand IR and
    llvmlite objects, which set off some 200 collections (about 15% of its time) that find almost nothing; what
    is garbage is collected at the next collection after it. Left on when another thread turned it off."""
    @functools.wraps(f)
    def run(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return f(*args, **kwargs)
        finally:
            if was:
                gc.enable()
    return run


def expand(fn, constexprs: dict, target: Target, options: Options, block=None, grid=None):
    """The stages before codegen: (tile IR, expanded IR, the target as the patterns chose it, debug sites).
    Also what `explain()` runs again for a kernel that came from the disk cache, which keeps only text."""
    k, _ = front(fn, constexprs, block, grid, target)
    check_local_sizes(k, target, options.allow_spills)     # before ptxas spends minutes spilling it
    ek = expand_kernel(k, target)
    target = arch_target(ek.body, target)         # a chosen sm_90 becomes sm_90a for wgmma (isa/registry.py)
    sites = []
    if options.debug:
        from .passes.bounds_checks import insert_bounds_checks
        ek, sites = insert_bounds_checks(ek)
    return k, ek, target, sites


class _Assemble:
    """`backend.ptx_to_cubin(...)` on a thread of its own: it mostly waits for ptxas, so the caller's Python runs
    meanwhile; `result()` joins and raises what it raised."""

    def __init__(self, *args):
        import threading
        self._out = self._err = None
        self._thread = threading.Thread(target=self._run, args=args, daemon=True)
        self._thread.start()

    def _run(self, *args):
        try:
            self._out = backend.ptx_to_cubin(*args)
        except BaseException as e:           # handed to the caller's thread by result()
            self._err = e

    def result(self):
        self._thread.join()
        if self._err is not None:
            raise self._err
        return self._out


@_gc_paused
def compile_kernel(fn, constexprs: dict, target: Target, options: Options, block=None, grid=None,
                   want_cubin=True) -> CompiledKernel:
    """Compile `fn` for `target`: every stage's output in `.asm`, the assembler's report in `.metadata`."""
    t0 = time.perf_counter()
    k, ek, target, sites = expand(fn, constexprs, target, options, block, grid)
    from .lower.llvm import generate_llvm
    raw, dynamic_shared = generate_llvm(ek, target, debug_buffer=bool(sites))
    opt_ir, ptx = backend.llvm_to_ptx(raw, target, lazy_text=True)
    t1 = time.perf_counter()
    # the assembler (a subprocess) runs while this thread writes the stages' text, which PTX does not need
    assembling = _Assemble(ptx, target, k.name) if want_cubin else None
    asm = {"tile": kernel_str(k), "expanded": kernel_str(ek), "llvm": opt_ir(), "ptx": ptx}
    metadata = {"compile_ms_to_ptx": round((t1 - t0) * 1e3, 2), "dynamic_shared": dynamic_shared}
    cubin = None
    if assembling is not None:
        cubin, info, tool = assembling.result()
        metadata.update(info)
        metadata["assembler"] = tool
    asm = StageDict(asm, cubin)                   # "sass" is disassembled on first use (or says why it cannot be)
    metadata.setdefault("shared_bytes", sum(st.size * st.dtype.nbytes for st in k.allocs if st.scope == "shared"))
    if sites:
        metadata["debug_sites"] = sites
    ck = CompiledKernel(k.name, target.sm, asm, metadata, KernelSignature.from_kernel(k, debug_buffer=bool(sites)),
                        cubin)
    ck.target = target
    ck.expanded_ir = ek
    dump = knobs.dump_dir()
    if dump:
        os.makedirs(dump, exist_ok=True)
        for stage, text in asm.items():
            with open(os.path.join(dump, f"{k.name}.{stage}"), "w") as f:
                f.write(text)
    return ck

