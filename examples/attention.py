"""FlashAttention forward (tiledsl/ops/flash/: fa2.py's FA2-style kernel with mma.sync, ldmatrix and cp.async; on
sm_90, fa3.py's FA3-style one with TMA, wgmma and warp specialisation), run once through tiledsl.ops.attention.

    python examples/attention.py [--n 4096] [--d 128] [--causal]   # GPU: against torch SDPA; else: a small case
                                                                   # on the interpreter against a float64 reference
"""
import argparse
import sys

import numpy as np

from tiledsl.ops import attention
from tiledsl.ops.flash.forward import reference


def main(argv=None, path=None):
    """Run one attention on the GPU against SDPA in fp32, or without a GPU a small case on the interpreter
    (path: "fa2", "fa3" or None as attention() takes it; examples/attention_hopper.py's main passes "fa3")."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    opts = p.parse_args(argv)
    name = "attention_hopper" if path == "fa3" else "attention"
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        rng = np.random.default_rng(0)
        shape = (1, 1, 130, 64) if path == "fa3" else (1, 2, 80, 64)
        q, k, v = (rng.standard_normal(shape).astype(np.float16) for _ in range(3))
        o, lse = attention(q, k, v, causal=opts.causal, config=None if path == "fa3" else (4, 1, 1), path=path)
        ro, rl = reference(q, k, v, causal=opts.causal)
        print(f"{name}: no GPU found; ran {'x'.join(map(str, shape))} on the interpreter: max error O "
              f"{np.abs(o - ro).max():.1e}, LSE {np.abs(lse - rl).max():.1e}")
        return
    import torch
    B, H = max(1, 16384 // opts.n), 2048 // opts.d
    q, k, v = (torch.randn(B, H, opts.n, opts.d, device="cuda", dtype=torch.float16) for _ in range(3))
    o, lse = attention(q, k, v, causal=opts.causal, path=path)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=opts.causal)
    print(f"{name} {B}x{H}x{opts.n}x{opts.d}: max abs error {(o.float() - ref).abs().max().item():.1e}")


if __name__ == "__main__":
    sys.exit(main())
