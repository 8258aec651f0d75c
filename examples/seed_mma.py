"""The mma.sync seed page's kernel and host code: a 16x8 result from two K16 issues.

Runs on the GPU when there is one (torch by default, --cupy for cupy); otherwise compiles and prints the PTX.
"""
import argparse
import sys

import numpy as np

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

la = TileLayout(S[(1, 2, 2, 8, 2, 4) : (8, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
lb = TileLayout(S[(1, 2, 8, 2, 4) : (4, 2, 4 @ laneid, 1, 1 @ laneid)])
ld = TileLayout(S[(1, 1, 2, 8, 4, 2) : (4, 4, 2, 4 @ laneid, 1 @ laneid, 1)])


@tiledsl.jit
def warp_mma(
    A: T.Tensor((1, 2, 16, 8), "uint32"),
    B: T.Tensor((1, 2, 8, 8), "uint32"),
    Out: T.Tensor((16, 8), "float32"),
):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    ar = T.alloc_local((8,), "uint32", layout="default")
    br = T.alloc_local((4,), "uint32", layout="default")
    dr = T.alloc_local((4,), "float32", layout="default")
    av = ar.view(1, 2, 16, 8, layout=la)
    bv = br.view(1, 2, 8, 8, layout=lb)
    dv = dr.view(1, 1, 16, 8, layout=ld)
    for kk, r in T.grid(2, 4):
        ar[kk * 4 + r] = A[0, kk, lane // 4 + 8 * (r % 2), lane % 4 + 4 * (r // 2)]
    for kk, r in T.grid(2, 2):
        br[kk * 2 + r] = B[0, kk, lane // 4, lane % 4 + 4 * r]
    T.cuda.tile.apply(
        T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"],
        dv,
        av,
        bv,
        T.float32(0),
        scope="warp",
    )
    for r in range(4):
        Out[lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2] = dr[r]


def inputs():
    rng = np.random.default_rng(0)
    a = (rng.integers(-4, 5, (16, 32)) / 4).astype("float16")
    b = (rng.integers(-4, 5, (8, 32)) / 4).astype("float16")
    ap = np.ascontiguousarray(a.reshape(1, 16, 2, 16).transpose(0, 2, 1, 3)).view("uint32")
    bp = np.ascontiguousarray(b.reshape(1, 8, 2, 16).transpose(0, 2, 1, 3)).view("uint32")
    return a, b, ap, bp


def main(argv=None):
    ap_ = argparse.ArgumentParser(description=__doc__)
    ap_.add_argument("--cupy", action="store_true", help="use cupy arrays instead of torch tensors")
    opts = ap_.parse_args(argv)
    a, b, ap, bp = inputs()
    ref = a.astype("float32") @ b.astype("float32").T
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        return run_without_gpu(ap, bp, ref)
    if opts.cupy:
        import cupy as xp
        dev = lambda x: xp.asarray(x)  # noqa: E731
        host = xp.asnumpy
    else:
        import torch
        dev = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
        host = lambda t: t.cpu().numpy()  # noqa: E731
    out = dev(np.zeros((16, 8), dtype="float32"))
    warp_mma(dev(ap), dev(bp), out)
    np.testing.assert_allclose(host(out), ref, rtol=2e-4, atol=2e-4)
    print(f"seed_mma: OK on the GPU ({'cupy' if opts.cupy else 'torch'}); max |err| = "
          f"{np.abs(host(out) - ref).max():.3g}")


def run_without_gpu(ap, bp, ref):
    try:
        from tiledsl.interpreter import available
    except ImportError:
        available = False
    if available:
        out = np.zeros((16, 8), dtype="float32")
        tiledsl.jit(warp_mma.fn, interpret=True)(ap, bp, out)
        np.testing.assert_allclose(out, ref, rtol=2e-4, atol=2e-4)
        print("seed_mma: no GPU found; ran on the CPU interpreter: OK")
        return
    ck = warp_mma.compile(ap, bp, np.zeros((16, 8), dtype="float32"), target="sm_90")
    print(ck.asm["ptx"])
    print("seed_mma: no GPU found (and no interpreter yet); printed the PTX for sm_90 above.")


if __name__ == "__main__":
    sys.exit(main())
