"""A mutation fuzzer over the seed examples, the mma.sync GEMM of tiledsl/ops/gemm/mma.py and docs/patterns/.

Each mutant (lines and tokens swapped, dropped or duplicated; numbers, dtypes, opcode qualifiers, scopes and layout
axes changed) is written to a module file, imported and compiled for sm_90 in a worker process with a per-case
timeout. The allowed outcomes are "compiled", a located TiledslError, or "not a kernel" (the mutant is not Python,
or fails in its own code before tiledsl is involved). Anything else -- an internal exception escaping tiledsl,
a message that leaks compiler internals, an unlocated CompilationError, a hang or a dead worker -- is a failure,
saved with its source.

    python -m tests.fuzz --seconds 600 --seed 1          # from the repository root; --help for the options
"""
