"""The warp-specialised Hopper GEMM (tiledsl/ops/gemm/hopper.py: TMA loads into an mbarrier ring, wgmma consumers,
setmaxnreg, a TMA-store epilogue, persistent / multicast / split-K / stream-K variants), run once.

    python examples/hopper_gemm.py [--size 1024] [--dtype float16]   # sm_90 GPU: against torch; else: compile
"""
import argparse
import sys

import numpy as np

from tiledsl.ops import hopper_matmul, make_hopper_gemm


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    n = opts.size
    if not gpu_available():
        k = make_hopper_gemm(opts.dtype)
        a = np.zeros((n, n), np.float16)
        ck = k.compile(a, a, a, target="sm_90a")
        print(ck.metadata)
        print("hopper gemm: no GPU found; compiled for sm_90a (metadata above)")
        return
    import torch
    dt = getattr(torch, opts.dtype)
    a = torch.randn(n, n, device="cuda", dtype=dt)
    b = torch.randn(n, n, device="cuda", dtype=dt)
    c = hopper_matmul(a, b)
    ref = a.float() @ b.float().T
    err = ((c.float() - ref).norm() / ref.norm()).item()
    print(f"hopper gemm {n}^3 {opts.dtype}: relative error {err:.2e}")
    assert err < 1e-2


if __name__ == "__main__":
    sys.exit(main())
