"""tiledsl.ops: the tuned kernels and their host code, written in the kernel language like any user's kernel.

    import tiledsl.ops as ops
    y = ops.linear(x, w, b, activation="gelu")  # torch.ops.tiledsl.linear: F.linear's semantics, differentiable
    c = ops.matmul(a, b)                      # a (M, K), b (N, K): a @ b.T (torch.ops.tiledsl.matmul)
    o, lse = ops.attention(q, k, v, causal=True)

The public names below are loaded on first use (importing tiledsl.ops imports no kernel module, and torch only where
the process has imported it already; the host functions import torch when called on torch tensors, and the make_*
builders need no torch at all). The torch ops (library/: `linear`, `matmul`, `matmul_fp8`, ...) register every
`torch.ops.tiledsl.<name>` when imported: at `import tiledsl.ops` in a process that has imported torch (so
`torch.ops.tiledsl.linear` works right after it), else when one of them is first touched. They run CUDA tensors on
the GPU and CPU tensors on the interpreter.

- GEMM (library/gemm.py: the ops `linear`, `matmul`, `matmul_fp8`; their host code in gemm/): `plan_of`, `route`,
  `fp8_plan_of`; the kernels `make_gemm` (mma.sync),
  `make_hopper_gemm`, `make_hopper_gemm_fp8`, `hopper_matmul`, `hopper_matmul_fp8` (TMA + wgmma, sm_90a).
- FlashAttention (flash/): `attention` (forward, (O, LSE)), `attention_backward`, `flash_attention`
  (differentiable); the kernels `make_attention` (FA2), `make_attention_hopper` / `attention_hopper` (FA3),
  `make_attention_fp8` / `attention_fp8`, `make_attention_backward` (FA2), `make_attention_backward_hopper` (FA3).
- MoE and block-scaled FP8 (gemm/grouped.py, gemm/quantize.py; docs/moe.md): `grouped_mm`, `grouped_mm_backward`,
  `grouped_mm_weight_grad`, `grouped_mm_masked`,
  `grouped_linear` (autograd), `matmul_fp8_blockwise`, `grouped_mm_fp8_blockwise`, `quantize_fp8_blockwise`,
  `quantize_fp8`.
- Ragged attention (flash/varlen.py, flash/decode.py): `attention_varlen` (packed sequences; `attention_jagged` on
  torch nested jagged tensors), its
  `attention_varlen_backward` and differentiable `flash_attention_varlen`, `attention_decode` (new queries against
  a contiguous or paged KV cache, split-KV).
- Row-wise (rowwise/): `make_softmax`, `make_layernorm` (and their host calls in rowwise.softmax / rowwise.layernorm).
- Torch ops (library/, importing torch): `softmax`, `layer_norm`, `rms_norm`, `add_rms_norm` (library/rowwise.py);
  `silu_mul`, `qkv_rope`, `qkv_rope_paged`, `rope_tables` (library/elementwise.py: a Llama block's elementwise
  fusions, kernels in elementwise/); `torch.ops.tiledsl.attention_decode` (library/decode.py).

device.py holds what they ask of the device (SM count, per-stream buffers). Module state a user may set lives in
the module that reads it: gemm.hopper_plan.STREAM_K, flash.fa2.LAZY, flash.fa3_backward.TAIL_SPLIT / TMA_KV.
Device helpers for kernels of your own (reductions, the Hopper producer's pieces) are in tiledsl.lib.
"""
import importlib
import sys

_HOMES = {
    "linear": "library.gemm", "matmul": "library.gemm", "matmul_fp8": "library.gemm",
    "plan_of": "gemm.matmul", "route": "gemm.matmul", "fp8_plan_of": "gemm.fp8",
    "make_gemm": "gemm.mma",
    "make_hopper_gemm": "gemm.hopper", "make_hopper_gemm_fp8": "gemm.hopper", "hopper_matmul": "gemm.hopper",
    "hopper_matmul_fp8": "gemm.hopper",
    "attention": "flash.forward",
    "attention_backward": "flash.backward", "flash_attention": "flash.backward",
    "make_attention": "flash.fa2",
    "make_attention_hopper": "flash.fa3", "attention_hopper": "flash.fa3",
    "make_attention_fp8": "flash.fp8", "attention_fp8": "flash.fp8",
    "make_attention_backward": "flash.fa2_backward",
    "make_attention_backward_hopper": "flash.fa3_backward",
    "attention_varlen": "flash.varlen", "attention_decode": "flash.decode", "attention_jagged": "flash.varlen",
    "attention_varlen_backward": "flash.varlen_backward", "flash_attention_varlen": "flash.varlen_backward",
    "make_softmax": "rowwise.softmax",
    "make_layernorm": "rowwise.layernorm",
    "scaled_dot_product_attention": "library.attention",
    "softmax": "library.rowwise", "layer_norm": "library.rowwise", "rms_norm": "library.rowwise",
    "add_rms_norm": "library.rowwise",
    "silu_mul": "library.elementwise", "qkv_rope": "library.elementwise", "qkv_rope_paged": "library.elementwise",
    "rope_tables": "library.elementwise",
    "grouped_mm": "gemm.grouped", "grouped_mm_backward": "gemm.grouped", "grouped_linear": "gemm.grouped",
    "grouped_mm_weight_grad": "gemm.grouped", "grouped_mm_masked": "gemm.grouped",
    "matmul_fp8_blockwise": "gemm.grouped", "grouped_mm_fp8_blockwise": "gemm.grouped",
    "quantize_fp8_blockwise": "gemm.quantize", "quantize_fp8": "gemm.quantize",
}
__all__ = sorted(_HOMES)


def __getattr__(name):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value             # found once; later lookups are plain attribute reads
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOMES))


if "torch" in sys.modules:
    # torch.ops.tiledsl.<name> exists once the ops are registered, and torch has no hook to load them on that lookup:
    # a process that has torch already pays the registration (~50 ms, no kernel module) here, so `import torch;
    # import tiledsl.ops; torch.ops.tiledsl.linear(...)` works; without torch, the first torch op touched does it
    from . import library  # noqa: E402,F401
