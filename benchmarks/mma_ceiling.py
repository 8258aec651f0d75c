"""The mma.sync ceiling: register-only m16n8k16 loops, by warps per SM and independent accumulators per warp.

    python benchmarks/mma_ceiling.py            # needs a GPU; --no-gpu only compiles

One block per SM (grid = SM count) of W warps; every warp keeps MI x NI independent accumulator tiles (the
shape of a GEMM warp tile of 16*MI x 8*NI) and issues MI*NI mma per iteration on operands that never leave
registers. It says how many warps and how much independent work one SM needs to reach the tensor pipe's
rate with mma.sync; a GEMM cannot beat the figure for its own warps and warp tile.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tiledsl  # noqa: E402
from tiledsl import T  # noqa: E402
from tiledsl.ops.gemm.mma import layouts  # noqa: E402

MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
_K = {}


def make(warps: int, mi: int, ni: int, iters: int):
    key = (warps, mi, ni, iters)
    if key in _K:
        return _K[key]
    L = layouts(16 * mi, 8 * ni if ni % 2 == 0 else 16, 16, 1, 1, 1)
    LA, LB, LD = L["m_a"], L["m_b"], L["m_d"]
    THREADS = 32 * warps

    @tiledsl.jit
    def ceiling(Out: T.Tensor(("G", THREADS), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=G, block=THREADS))  # noqa: F821
        tid = T.cuda.thread_id()
        ra = T.alloc_local((mi * 4,), "uint32")
        rb = T.alloc_local((ni * 2,), "uint32")
        acc = T.alloc_local((mi * ni * 4,), "float32")
        for i in T.unroll(mi * 4):
            ra[i] = T.cast((tid * 40503 + i * 7919) & 0x3BFF3BFF, 'uint32')      # finite f16 pairs, different per lane
        for i in T.unroll(ni * 2):
            rb[i] = T.cast((tid * 9973 + i * 31337) & 0x3BFF3BFF, 'uint32')
        for i in T.unroll(mi * ni * 4):
            acc[i] = 0.0
        av = ra.view(mi, 1, 16, 8, layout=LA)
        bv = rb.view(ni, 1, 8, 8, layout=LB)
        dv = acc.view(mi, ni, 16, 8, layout=LD)
        for it in range(iters):
            T.cuda.tile.apply(T.ptx[MMA], dv, av, bv, dv, scope="warp")
        s = acc[0]
        for i in T.unroll(1, mi * ni * 4):
            s = s + acc[i]
        Out[T.cuda.block_id(), tid] = s

    _K[key] = ceiling
    return ceiling


# (16 warps cannot hold 4x8 accumulators: 128 registers per thread at most, and it spills)
CASES = [(w, mi, ni) for w in (4, 8, 12, 16) for (mi, ni) in ((2, 4), (4, 4), (4, 8)) if (w, mi, ni) != (16, 4, 8)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=4096)
    p.add_argument("--no-gpu", action="store_true")
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if opts.no_gpu or not gpu_available():
        import numpy as np
        for w, mi, ni in CASES:
            ck = make(w, mi, ni, opts.iters).compile(np.zeros((132, 32 * w), np.float32), target="sm_90")
            md = ck.metadata           # (spill counts come from the assembler: absent where ptxas did not run)
            print(f"warps {w:2d} acc {mi}x{ni}: {md.get('registers', '?')} registers, spill stores "
                  f"{md.get('spill_stores', '?')} B, spill loads {md.get('spill_loads', '?')} B")
        return 0
    import torch
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"mma.sync ceiling, {torch.cuda.get_device_name(0)}, {sms} blocks, {opts.iters} iterations\n")
    print("| warps/SM | accumulators/warp | TFLOP/s |\n| ---: | ---: | ---: |")
    for w, mi, ni in CASES:
        k = make(w, mi, ni, opts.iters)
        out = torch.zeros((sms, 32 * w), dtype=torch.float32, device="cuda")
        for _ in range(3):
            k(out)
        torch.cuda.synchronize()
        ts = []
        for _ in range(10):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            k(out)
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) * 1e-3)
        ts.sort()
        flops = 2 * 16 * 8 * 16 * mi * ni * opts.iters * w * sms
        assert torch.isfinite(out).all()
        print(f"| {w} | {mi}x{ni} = {mi * ni} | {flops / ts[len(ts) // 2] / 1e12:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
