import sys, os
sys.path.insert(0, "benchmarks")
import torch
from gemm import side_by_side
import tiledsl.ops as ops
from tiledsl.ops.flash.forward import attention
from tiledsl.ops.flash import fa3
from torch.nn.attention import SDPBackend, sdpa_kernel
F = torch.nn.functional
for causal in (False, True):
    B, H, N, D = 4, 16, 4096, 128
    mk = lambda: torch.randn(B, H, N, D, device="cuda", dtype=torch.float16)
    sets = [(mk(), mk(), mk()) for _ in range(2)]
    def cud(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    fns = {"attention()": lambda q, k, v: attention(q, k, v, causal=causal),
           "ops.sdpa": lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, is_causal=causal),
           "torch.ops.tiledsl": lambda q, k, v: torch.ops.tiledsl.scaled_dot_product_attention(q, k, v, causal),
           "hopper cfg": lambda q, k, v: fa3.attention_hopper(q, k, v, causal=causal, config=fa3.default_config(D, causal, N)),
           "cudnn": cud}
    ms = side_by_side(list(fns.values()), torch, sets)
    fl = 4 * B * H * N * N * D / (2 if causal else 1)
    print("causal", causal, {k: round(fl / m / 1e9) for k, m in zip(fns, ms)}, flush=True)
