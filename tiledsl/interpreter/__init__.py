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
  the thread, and so does an element access whose run-time index leaves its own dimension (`X[r, 64]` in a 64-wide
  row, which lands inside the buffer), naming the index, its value and the dimension. Misaligned vector accesses
  fault too. Fresh shared/local memory holds 0xFF bytes (NaN, -1).
- Native instructions, from the PTX ISA (each family's semantics.py under tiledsl/isa/):
    register family fma/add/sub/mul/div/min/max/neg/abs/mov/cvt/sqrt/rcp/ex2/lg2 on f16, bf16, f16x2, bf16x2,
    f32, f64 and the integer types, with .rn/.rz/.rm/.rp, .ftz, .sat, .relu, .NaN, mul.lo/.hi;
    ld/st (.global/.shared/.local, .v2/.v4, cache qualifiers ignored); mma.sync m16n8k8/k16 f16/bf16 -> f32;
    ldmatrix/stmatrix m8n8 .x1/.x2/.x4 [.trans] .b16; cp.async.{ca,cg} with src-size zero fill, commit_group,
    wait_group, wait_all (copies become visible at the wait that covers them; a per-thread queue of groups);
    cp.async.bulk with mbarrier init / arrive / expect_tx / try_wait.parity (copies land at once and pay
    their bytes; a wait that could never complete is a KernelFault); clusters (isa/cluster/): the blocks of a
    cluster run together in one batch, {ld,st}.shared::cluster and the remote mbarrier arrive reach the shared
    memory of another block of the batch, barrier.cluster, elect.sync, the cluster special registers.
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
Races: lockstep hides them, so the race detector (races.py, docs/races.md; off with TILEDSL_RACECHECK=0) checks
every shared-memory access against the granule's last writer and reader with per-warp vector clocks, and a pair
that no barrier, mbarrier phase, cp.async wait or proxy fence orders is a KernelFault naming both lines.
Not modelled: register allocation beyond setmaxnreg's
accounting (each block's warpgroups share the launch's cap x threads; an inc nobody pays for is a KernelFault).

Layout of the package
---------------------
__init__.py  run (an expanded kernel on checked host arguments; the jit's launcher for it, with the argument checks
             every launch path shares, is runtime/launchers/interpret.py) and run_ir (a hand-built expanded
             ir.Kernel)
program.py   statements -> closures; masked control flow; the batch-of-blocks loop
machine.py   per-batch state: thread ids, variables, raw-byte memories, bounds checks and fault messages
exprs.py     expressions -> closures; integer/float/bfloat16 semantics and casts
races.py     the race detector: per-warp vector clocks, the last writer and reader of every shared granule
dim_checks.py  each run-time index of an element access against its dimension (ir.DimCheck)
operands.py  what every family's semantics shares: operands, predication and poisoning, whole warps, PTX types
             (each instruction family's semantics is tiledsl/isa/<family>/semantics.py, reached through the
             family that ir.Native carries)
rounding.py  IEEE formats, exact one-step rounding in rn/rz/rm/rp, ftz/saturate helpers
"""
from __future__ import annotations

import numpy as np

from ..core import dtypes as dt
from ..core.errors import LaunchError
from .machine import InterpreterError, Memory
from .program import Program

available = True

__all__ = ["available", "run", "run_ir", "Program", "InterpreterError"]


def run(kernel, arrays: dict, scalars: dict, grid, block) -> None:
    """Run an expanded kernel (an `ir.Kernel`, or its `Program` to reuse the translation) on checked host
    arguments: `arrays` {tensor name: contiguous numpy array, written in place}, `scalars` {scalar or size
    name: numpy scalar of its dtype}, three-int `grid` and `block`."""
    prog = kernel if isinstance(kernel, Program) else Program(kernel)
    ek = prog.kernel
    memories, values = {}, {}
    for p in ek.params:
        if p.kind in ("tensor", "tensormap"):
            memories[p.storage] = Memory(p.storage, arrays[p.name].reshape(-1).view(np.uint8))
        elif p.kind == "scalar":
            values[p.var] = scalars[p.name]
    for name, var in ek.sizes.items():
        values[var] = scalars[name]
    prog.run(tuple(grid), tuple(block), memories, values)


def run_ir(kernel, args, grid=(1, 1, 1), block=None):
    """Run an already expanded `ir.Kernel` directly (tests build IR by hand for instructions that have no tile
    pattern yet). `args`: {param name: numpy array or scalar}."""
    block = tuple(block or kernel.launch.block)
    grid = tuple(grid) + (1,) * (3 - len(tuple(grid)))
    arrays, scalars = {}, {}
    for p in kernel.params:
        if p.kind == "tensor":
            if not args[p.name].flags.c_contiguous:
                raise LaunchError(f"argument '{p.name}' is not contiguous")
            arrays[p.name] = np.ascontiguousarray(args[p.name])
        elif p.kind == "scalar":
            scalars[p.name] = np.asarray(args[p.name]).astype(dt.numpy_types()[p.dtype.name])[()]
    for name in kernel.sizes:
        scalars[name] = np.int32(args[name])
    run(kernel, arrays, scalars, grid, block)
