"""The torch face of tiledsl.ops: each public op a `torch.library.custom_op` in the `tiledsl` namespace
(`torch.ops.tiledsl.<name>`), with a fake (meta) implementation for tracing and, where a gradient exists, autograd.

Importing this package imports torch and registers every op; it imports no kernel module (each op's implementation
imports its kernels on its first call). CUDA tensors run the GPU kernels; CPU tensors run the same kernels on the
interpreter (small sizes), so the ops are testable end to end without a GPU.

- gemm.py: `linear`, `matmul`, `matmul_fp8`
- rowwise.py: `softmax`, `layer_norm`, `rms_norm`, `add_rms_norm`
- attention.py: `scaled_dot_product_attention`
- elementwise.py: `silu_mul` (SwiGLU), `qkv_rope` (the fused QKV split + RoPE) and its paged-cache form `qkv_rope_paged`
- decode.py: `torch.ops.tiledsl.attention_decode` (the KV-cache decode attention as an op, for graphs)
- common.py: what they share (the namespace, refusals that name the argument, the CPU route).
"""
from . import attention, decode, elementwise, gemm, rowwise  # noqa: F401  (registration is the import's effect)
