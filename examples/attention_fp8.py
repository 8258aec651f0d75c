"""The FP8 (e4m3) FlashAttention forward (tiledsl/ops/flash/fp8.py: FA3 style, both products on e4m3 wgmma, per-tensor
descales), run once.

    python examples/attention_fp8.py   # sm_90 GPU: against an fp32 reference; else: a small case on the interpreter
"""
import sys

import numpy as np

from tiledsl.ops import attention_fp8
from tiledsl.ops.flash.forward import reference
from tiledsl.ops.flash.fp8 import dequantize_e4m3, quantize_e4m3


def main(argv=None):
    """On an sm_90 GPU: attention_fp8 against an fp32 reference of the dequantised inputs; else a small case on
    the interpreter."""
    rng = np.random.default_rng(0)
    try:
        import torch
        gpu = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    except ImportError:
        gpu = False
    if gpu:
        B, H, N, D = 2, 8, 4096, 128
        x = [torch.randn(B, H, N, D, device="cuda") for _ in range(3)]
        amax = [t.abs().max() for t in x]
        f8 = [(t * 448.0 / a).to(torch.float8_e4m3fn) for t, a in zip(x, amax)]
        ds = [a / 448.0 for a in amax]
        o, lse = attention_fp8(*f8, *ds)
        real = [t.float() * d for t, d in zip(f8, ds)]
        ro = torch.nn.functional.scaled_dot_product_attention(*real)
        print(f"attention_fp8 B={B} H={H} N={N} D={D}: max |O - ref| = {(o.float() - ro).abs().max().item():.3e}")
        return 0
    q8, dq = quantize_e4m3(rng.standard_normal((1, 2, 130, 64)))
    k8, dk = quantize_e4m3(rng.standard_normal((1, 1, 130, 64)))
    v8, dv = quantize_e4m3(rng.standard_normal((1, 1, 130, 64)))
    o, lse = attention_fp8(q8, k8, v8, dq, dk, dv, causal=True)
    ro, rl = reference(*(dequantize_e4m3(x, d) for x, d in ((q8, dq), (k8, dk), (v8, dv))), causal=True)
    print(f"attention_fp8 on the interpreter (1, 2, 130, 64), causal, GQA: max |O - ref| = "
          f"{np.abs(o.astype(np.float64) - ro).max():.3e}, max |LSE - ref| = {np.abs(lse - rl).max():.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
