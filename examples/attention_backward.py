"""The FlashAttention backward (tiledsl/ops/flash/: fa2_backward.py's FA2-style kernels; on sm_90, fa3_backward.py's
FA3-style main kernel) through tiledsl.ops.flash_attention, the differentiable forward, run once.

    python examples/attention_backward.py [--n 4096] [--d 128] [--causal]   # GPU: against torch autograd; else: a
                                                                            # small case on the interpreter against
                                                                            # a float64 reference
"""
import argparse
import sys

import numpy as np

from tiledsl.ops import attention, attention_backward, flash_attention
from tiledsl.ops.flash.backward import reference_backward


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    opts = p.parse_args(argv)
    from tiledsl.runtime.driver import gpu_available
    if not gpu_available():
        rng = np.random.default_rng(0)
        q, k, v, do = (rng.standard_normal((1, 2, 40, 64)).astype(np.float16) for _ in range(4))
        o, lse = attention(q, k, v, causal=opts.causal, config=(4, 1, 1))
        got = attention_backward(q, k, v, o, lse, do, causal=opts.causal)
        ref = reference_backward(q, k, v, do, causal=opts.causal)
        err = [np.linalg.norm(g.astype(np.float64) - r) / np.linalg.norm(r) for g, r in zip(got, ref)]
        print("attention_backward: no GPU found; ran 1x2x40x64 on the interpreter: relative error dq %.1e, "
              "dk %.1e, dv %.1e" % tuple(err))
        return
    import torch
    B, H = max(1, 16384 // opts.n), 2048 // opts.d
    q, k, v, do = (torch.randn(B, H, opts.n, opts.d, device="cuda", dtype=torch.float16) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    o = flash_attention(q, k, v, causal=opts.causal)
    got = torch.autograd.grad(o, (q, k, v), do)
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    of = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=opts.causal)
    ref = torch.autograd.grad(of, (qf, kf, vf), do.float())
    err = [((g.float() - r).norm() / r.norm()).item() for g, r in zip(got, ref)]
    print(f"attention_backward {B}x{H}x{opts.n}x{opts.d}: relative error dq {err[0]:.1e}, dk {err[1]:.1e}, "
          f"dv {err[2]:.1e}")


if __name__ == "__main__":
    sys.exit(main())
