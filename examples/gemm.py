"""C = A · Bᵀ on tensor cores with mma.sync: a walk through tiledsl/ops/gemm/mma.py, then a run.

The kernel is the one `tiledsl.ops.matmul` takes on GPUs other than sm_90 (and for shapes the Hopper kernel does not
serve); it is written only in the kernel language, and read best in this order:

  1. `layouts(bm, bn, bk, wm, wn, stages)`: every shared and register layout of one configuration, each one call
     of `tiledsl.layouts` (no factor list written by hand): the shared stages as 16-byte cp.async chunks
     (`chunk_rows`) and as ldmatrix.x4 reads them (`ldmatrix_a`, `ldmatrix_b`: stage, warp, m16 tile or n8-tile
     pair, k16 step, matrix, row, word), XOR-swizzled (`row_swizzle`) so the 8 rows one ldmatrix reads fall in 8
     bank groups; the registers as ldmatrix fills them (`ldmatrix_regs`) and as mma.sync reads them (`mma_a`,
     `mma_b`, `mma_c`: the seed page's lane maps, examples/seed_mma.py, repeated over the warp tile).
     docs/views.md explains views and layouts; examples/mma_gemm.py is the same kernel without the pipeline, in
     seventy lines.
  2. `make_gemm(ab, out, config, shape)`: the configuration tuple (BM, BN, BK, warps along M and N, stages, ...)
     becomes closure constants, then three `@tiledsl.inline` helpers:
       * `copy_tile`: one k tile of A and B into a shared stage by cp.async, 16 bytes a thread at a time;
       * `bulk_tile`: the same by bulk copies of whole rows, counted by an mbarrier (sm_90);
       * `k_tile`: the pipelined loop body: ldmatrix.x4 of the next k16 step's fragments while mma.sync
         m16n8k16 multiplies this one's, the stage consumed last refilled, one barrier per k tile.
  3. the `@tiledsl.jit` kernel `gemm`: grouped block order (GROUP_M block rows share B's tiles in L2), the
     prologue filling STAGES - 1 stages, the k loop (unrolled by STAGES with a static shape, so every stage index
     is a constant), and the epilogue: cvt to f16x2/bf16x2 pairs, stored from registers or through shared memory
     as whole 16-byte pieces of rows.

`ck = make_gemm(...).compile(a, b, c, target="sm_90")` shows each stage (`ck.asm["tile"]`, `["expanded"]`,
`["ptx"]`) and `ck.metadata` the registers and spills. tiledsl/ops/gemm/matmul.py routes and tunes (`route`,
`plan_of`); tiledsl/ops/gemm/hopper.py is the sm_90 kernel (TMA, wgmma, warp specialisation).

    python examples/gemm.py [--size 1024] [--dtype float16]   # GPU: matmul against torch; else: compile for sm_90
"""
import argparse
import sys

import numpy as np

from tiledsl.ops import make_gemm, matmul


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    n = opts.size
    if not gpu_available():
        k = make_gemm(opts.dtype, opts.dtype)
        n = max(n, 256)
        a = np.zeros((n, n), np.float16)
        ck = k.compile(a, a, a, target="sm_90")
        print(ck.metadata)
        print("gemm: no GPU found; compiled for sm_90 (metadata above)")
        return
    import torch
    dt = getattr(torch, opts.dtype)
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    c = matmul(a, b)
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).norm() / ref.norm()).item()
    print(f"gemm {n}^3 {opts.dtype}: relative error {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    sys.exit(main())
