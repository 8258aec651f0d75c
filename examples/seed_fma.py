"""The fma seed page's kernel: four fused multiply-adds, Out = 2*A + 1.

Runs on the GPU when there is one (torch by default, --cupy for cupy); otherwise compiles and prints the PTX.
"""
import argparse
import sys

import numpy as np

import tiledsl
from tiledsl import T


@tiledsl.jit
def affine_fma(A: T.Tensor((4, 1), "float32"), Out: T.Tensor((4, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32", layout="default")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r, A)
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], r, r, T.float32(2), T.float32(1))
    T.cuda.tile.apply(T.ptx["st.global.f32"], Out, r)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--cupy", action="store_true", help="use cupy arrays instead of torch tensors")
    opts = p.parse_args(argv)
    a = np.arange(-2, 2, dtype="float32").reshape(4, 1)
    ref = 2 * a + 1
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        try:
            from tiledsl.interpreter import available
        except ImportError:
            available = False
        if available:
            out = np.zeros((4, 1), dtype="float32")
            tiledsl.jit(affine_fma.fn, interpret=True)(a, out)
            np.testing.assert_array_equal(out, ref)
            print("seed_fma: no GPU found; ran on the CPU interpreter: OK")
            return
        print(affine_fma.compile(a, np.zeros_like(a), target="sm_90").asm["ptx"])
        print("seed_fma: no GPU found (and no interpreter yet); printed the PTX for sm_90 above.")
        return
    if opts.cupy:
        import cupy as xp
        dev, host = xp.asarray, xp.asnumpy
    else:
        import torch
        dev = lambda x: torch.from_numpy(np.ascontiguousarray(x)).cuda()  # noqa: E731
        host = lambda t: t.cpu().numpy()  # noqa: E731
    out = dev(np.zeros((4, 1), dtype="float32"))
    affine_fma(dev(a), out)
    np.testing.assert_array_equal(host(out), ref)
    print(f"seed_fma: OK on the GPU ({'cupy' if opts.cupy else 'torch'}); out = {host(out).ravel().tolist()}")


if __name__ == "__main__":
    sys.exit(main())
