"""tiledsl's lane-exact CPU interpreter (README).

`tiledsl.jit(fn, interpret=True)` or `TILEDSL_INTERPRET=1` runs kernels here instead of on a GPU: on numpy arrays
and CPU torch tensors, written in place. It executes the EXPANDED tile IR (every `tile.apply` already turned into
native PTX instructions by the pattern rules), so it checks the same program the GPU would run.

What is modelled
----------------
- Execution: every thread of a block runs in lockstep, vectorised with numpy over threads (and over several
  blocks at once: a batch of blocks shares one flat thread axis). Divergent `if` and loops whose bounds differ per
  thread run under masks. Shared memory is per block, local memory and variables per thread.
- Ids: tid/ntid/ctaid/nctaid per axis; laneid = linear tid % 32, warpid = linear tid // 32 (linear tid =
  x + bx * (y + by * z)).
- Expressions (see exprs.py): integers wrap at their width, `//` and `%` floor like Python on signed types,
  IEEE floats with round-to-nearest-even, saturating float -> int casts (NaN -> 0), bfloat16 as uint16 bits with
  round-to-nearest-even conversions.
- Memory: loads/stores of any dtype on raw bytes (a storage may be viewed with another dtype). Any out-of-bounds
  element of global, shared or local memory raises `tiledsl.KernelFault` naming the source line, the block and
  the thread. Misaligned vector accesses fault too. Fresh shared/local memory holds 0xFF bytes (NaN, -1).
- Native instructions, from the PTX ISA (natives.py, warp.py):
    register family fma/add/sub/mul/div/min/max/neg/abs/mov/cvt/sqrt/rcp/ex2/lg2 on f16, bf16, f16x2, bf16x2,
    f32, f64 and the integer types, with .rn/.rz/.rm/.rp, .ftz, .sat, .relu, .NaN, mul.lo/.hi;
    ld/st (.global/.shared/.local, .v2/.v4, cache qualifiers ignored); mma.sync m16n8k8/k16 f16/bf16 -> f32;
    ldmatrix/stmatrix m8n8 .x1/.x2/.x4 [.trans] .b16; cp.async.{ca,cg} with src-size zero fill, commit_group,
    wait_group, wait_all (copies become visible at the wait that covers them; a per-thread queue of groups);
    cp.async.bulk with mbarrier init / arrive / expect_tx / try_wait.parity (bulk.py: copies land at once and pay
    their bytes; a wait that could never complete is a KernelFault).
- Predication: a false `pred` skips the instruction for that thread; a written register of a skipped thread is
  kept with `preserve_dst`, and is otherwise UNDEFINED: the interpreter poisons it (NaN for float registers,
  0xDEADBEEF-like bits for integer ones).
- Errors: warp instructions with an incomplete warp, barriers under divergent control flow, integer division by
  zero, trap: KernelFault. An opcode without semantics here: InterpreterError (a TiledslError), before running.

The promise
-----------
Bit-exact wherever PTX defines the result exactly: integer arithmetic, conversions, loads/stores/copies and every
correctly rounded float operation in every rounding mode (fma is ONE rounding of the exact a*b+c, never a rounded
multiply followed by a rounded add). mma.sync agrees to within 1e-6 relative: D = A*B + C is accumulated in float64
and rounded once to float32, while the tensor core's internal accumulation order is unspecified.
Not bit-exact by nature: the .approx forms (ex2, lg2, rcp/sqrt/div .approx are computed correctly rounded),
NaN payloads (f16/bf16/f32 NaN results are canonical, f64 NaN payloads follow the host). With .ftz a result is
flushed when it is subnormal after rounding.
How exactness is reached (rounding.py): products of f16/bf16/f32 values are exact in float64 and an error-free
two_sum keeps a sum exact as a pair, so each result is rounded once, in its mode, straight to the target format.
fma.f64 and float64 forms in directed modes use exact fractions (slower, one element at a time).
Not modelled: memory races between threads (lockstep hides them), atomics, warp shuffles/votes, clusters.

Layout of the package
---------------------
__init__.py  run_kernel (the jit entry: specialise, cache the expanded program on the JITFunction, check
             arguments like the GPU path, evaluate the grid) and run_ir (run a hand-built expanded ir.Kernel)
program.py   statements -> closures; masked control flow; the batch-of-blocks loop
machine.py   per-batch state: thread ids, variables, raw-byte memories, bounds checks and fault messages
exprs.py     expressions -> closures; integer/float/bfloat16 semantics and casts
operands.py  what every family's semantics shares: operands, predication and poisoning, whole warps, PTX types
             (each instruction family's semantics is tiledsl/isa/<family>/semantics.py, reached through the
             family that ir.Native carries)
rounding.py  IEEE formats, exact one-step rounding in rn/rz/rm/rp, ftz/saturate helpers
"""
from __future__ import annotations

import numpy as np

from ..core import dtypes as dt
from ..core.errors import CompilationError, LaunchError
from .machine import InterpreterError, Memory
from .program import Program

available = True

__all__ = ["available", "run_kernel", "run_ir", "Program", "InterpreterError"]

_CACHE_ATTR = "_interp_programs"


def _program(jitfn, values, block) -> Program:
    from ..lower.ptx import parse_sm
    from ..compiler import front
    from ..passes.expand import expand_kernel
    # the patterns gate forms by target: interpret for the kernel's target (sm_90 unless jit(target=...) says)
    sm = parse_sm(jitfn.target) if jitfn.target is not None else 90
    constexprs, spec = jitfn.spec(values, block, sm)
    key = f"{jitfn.source_key()}|{spec}"
    cache = jitfn.__dict__.setdefault(_CACHE_ATTR, {})
    prog = cache.get(key)
    if prog is None:
        k, _parser = front(jitfn.fn, constexprs, block, None)
        from ..core.target import Target
        ek = expand_kernel(k, Target(sm))
        prog = Program(ek)
        cache[key] = prog
    return prog


def host_array(name, v, info, want):
    """A writable numpy array sharing memory with the argument."""
    if info.framework == "torch":
        t = v.detach()
        if want.name == "bfloat16":
            import torch
            return t.view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    if isinstance(v, np.ndarray):
        return v
    return np.asarray(v)


def run_kernel(jitfn, values, grid, block):
    """Run `jitfn` on the CPU with bound argument `values` (parameter order); arrays are written in place."""
    from ..runtime.jit import _dims
    from ..abi.arrays import array_info
    from ..runtime.launch import check_block, check_scalar, check_tensor, grid_of

    params = jitfn.params()
    for name, kind, _, _ in params:
        if kind == "missing":
            raise CompilationError(f"parameter '{name}' needs an annotation")
    prog = _program(jitfn, values, block)
    ek = prog.kernel
    sizes, env, arrays, scalars = {}, {}, {}, {}
    kparams = {p.name: p for p in ek.params}
    for (name, kind, ann, _), v in zip(params, values):
        if kind == "tensor":
            info = array_info(v)
            if info is not None and info.dtype is None and ann.dtype.name == "bfloat16" and \
                    getattr(getattr(v, "dtype", None), "name", "") == "bfloat16":
                info.dtype = dt.bfloat16                       # an ml_dtypes bfloat16 numpy array
            if info is not None and info.device is not None:
                raise LaunchError(f"argument '{name}' is a CUDA array; the interpreter runs on host memory "
                                  f"(numpy arrays or CPU torch tensors)")
            check_tensor(name, info, ann.dtype, ann.shape, sizes, gpu=False)
            arr = host_array(name, v, info, ann.dtype)
            if not arr.flags.c_contiguous:
                raise LaunchError(f"argument '{name}' is not contiguous; pass a contiguous array")
            arrays[kparams[name].storage] = arr
        elif kind == "scalar":
            packed = check_scalar(name, v, ann)
            env[name] = v
            scalars[kparams[name].var] = _scalar_value(packed, ann)
        else:
            env[name] = v
    env.update(sizes)
    for sname, var in ek.sizes.items():
        scalars[var] = np.int32(sizes[sname])
    if callable(grid):
        g = _dims(grid(dict(zip([p[0] for p in params], values))))
    elif grid is not None:
        g = _dims(grid)
    else:
        from ..ir.eval import serialize
        g = grid_of([serialize(x) for x in ek.launch.grid], env)
    b = tuple(ek.launch.block)
    check_block(b)
    globals_ = {st: Memory(st, arr.reshape(-1).view(np.uint8)) for st, arr in arrays.items()}
    prog.run(g, b, globals_, scalars)


def _scalar_value(packed, d: dt.DType):
    if d.kind == "bool":
        return np.bool_(bool(packed))
    if d.name == "bfloat16":
        return np.uint16(packed)
    if d.name == "float16":
        return np.uint16(packed).view(np.float16)
    return np.asarray(packed).astype(dt.numpy_types()[d.name])[()]


def run_ir(kernel, args, grid=(1, 1, 1), block=None):
    """Run an already expanded `ir.Kernel` directly (tests build IR by hand for instructions that have no tile
    pattern yet). `args`: {param name: numpy array or scalar}."""
    prog = Program(kernel)
    block = tuple(block or kernel.launch.block)
    grid = tuple(grid) + (1,) * (3 - len(tuple(grid)))
    arrays, scalars = {}, {}
    for p in kernel.params:
        if p.kind == "tensor":
            arrays[p.storage] = Memory(p.storage, np.ascontiguousarray(args[p.name]).reshape(-1).view(np.uint8)) \
                if args[p.name].flags.c_contiguous else None
            if arrays[p.storage] is None:
                raise LaunchError(f"argument '{p.name}' is not contiguous")
        elif p.kind == "scalar":
            scalars[p.var] = np.asarray(args[p.name]).astype(dt.numpy_types()[p.dtype.name])[()]
    for name, var in kernel.sizes.items():
        scalars[var] = np.int32(args[name])
    prog.run(grid, block, arrays, scalars)
