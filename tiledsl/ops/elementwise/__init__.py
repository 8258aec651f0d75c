"""Elementwise kernels of a transformer block that sit between its GEMMs (the torch ops are in
tiledsl/ops/library/elementwise.py):

- swiglu.py: silu(gate) * up over a gate/up GEMM's output, and its backward;
- rope.py: the fused QKV split + rotary embedding (into the layouts the attention kernels read, or straight into a
  paged KV cache), and its backward.
"""
