"""Row softmax of a float16 matrix (tiledsl/ops/rowwise/softmax.py: one block per row held in registers, the max and
the sum reduced across the block with shfl.sync.bfly; rows of 32768 pipelined with cp.async), run once.

    python examples/softmax.py         # on the GPU: 8192 rows of 4096 against torch.softmax
    (no GPU: runs a small case on the CPU interpreter)
"""
import argparse
import sys

import numpy as np

from tiledsl.ops.rowwise.softmax import reference, softmax


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=4096)
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        x = (np.random.default_rng(0).standard_normal((4, 512)) * 4).astype(np.float16)
        y = softmax(x)
        err = np.abs(y.astype(np.float64) - reference(x)).max()
        assert err < 2e-3, err
        print(f"softmax: no GPU found; ran 4 rows of 512 on the CPU interpreter: max error {err:.1e}")
        return
    import torch
    x = torch.randn(opts.rows, opts.cols, device="cuda", dtype=torch.float16) * 4
    y = softmax(x)
    torch.testing.assert_close(y, torch.softmax(x.float(), dim=1).half(), rtol=2e-3, atol=2e-4)
    print(f"softmax: OK on the GPU ({opts.rows} rows of {opts.cols} halves)")


if __name__ == "__main__":
    sys.exit(main())
