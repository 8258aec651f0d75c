"""Layer norm over the last axis of a float16 matrix (tiledsl/ops/rowwise/layernorm.py: one block per row held in
registers, two exact float32 passes reduced across the block, rsqrt.approx), run once.

    python examples/layernorm.py       # on the GPU: 8192 x 4096 against torch.nn.functional.layer_norm
    (no GPU: runs a small case on the CPU interpreter)
"""
import argparse
import sys

import numpy as np

from tiledsl.ops.rowwise.layernorm import layer_norm, reference


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=4096)
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        rng = np.random.default_rng(0)
        x = (rng.standard_normal((4, 512)) * 3 + 1).astype(np.float16)
        w, b = rng.standard_normal(512).astype(np.float16), rng.standard_normal(512).astype(np.float16)
        y = layer_norm(x, w, b)
        err = np.abs(y.astype(np.float64) - reference(x, w, b, 1e-5)).max()
        assert err < 1e-2, err
        print(f"layernorm: no GPU found; ran 4 rows of 512 on the CPU interpreter: max error {err:.1e}")
        return
    import torch
    x = torch.randn(opts.rows, opts.cols, device="cuda", dtype=torch.float16) * 3 + 1
    w = torch.randn(opts.cols, device="cuda", dtype=torch.float16)
    b = torch.randn(opts.cols, device="cuda", dtype=torch.float16)
    y = layer_norm(x, w, b)
    ref = torch.nn.functional.layer_norm(x.float(), (opts.cols,), w.float(), b.float(), 1e-5).half()
    torch.testing.assert_close(y, ref, rtol=1e-2, atol=1e-2)
    print(f"layernorm: OK on the GPU ({opts.rows} x {opts.cols})")


if __name__ == "__main__":
    sys.exit(main())
