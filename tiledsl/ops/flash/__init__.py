"""FlashAttention: softmax(scale q kᵀ [causal]) v and its gradients, f16 / bf16 / FP8, any N, grouped-query heads.

- forward.py: `attention(q, k, v) -> (O, LSE)`, routed to fa3.py's kernel (TMA + wgmma, warp-specialised; sm_90a)
  or fa2.py's (mma.sync, any sm_80+ GPU), and `reference` (float64 numpy).
- backward.py: `attention_backward`, `flash_attention` (a torch.autograd.Function of both, built on first use),
  `reference_backward`; its kernels are fa2_backward.py's and fa3_backward.py's.
- fp8.py: `attention_fp8`, the forward on e4m3 inputs with per-tensor descales.
- fa3_parts.py: the consumer-side pieces fa3.py and fp8.py share; common.py: the checks, constants and inline
  helpers every kernel here shares.
- ragged.py: fa2's forward over ragged batches whose lengths the kernel reads from the device; varlen.py:
  `attention_varlen` (packed sequences) and `attention_jagged` (torch nested tensors); varlen_backward.py:
  `attention_varlen_backward`, `flash_attention_varlen`; decode.py: `attention_decode` (contiguous or paged KV cache,
  f16/bf16 or e4m3, split-KV with a combine kernel). docs/attention-ragged.md describes them.

The public names are tiledsl.ops's; importing this package imports none of the modules."""
