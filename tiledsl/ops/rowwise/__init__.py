"""Row-wise kernels: one block per row held in registers, reductions across the block (tiledsl.lib.reductions).

- softmax.py: `make_softmax`, `softmax` (float16 rows; rows of 32768 use a pipelined kernel that copies the next
  row with cp.async), `reference`.
- layernorm.py: `make_layernorm`, `layer_norm`, `reference`.
- rows.py: rows of any length (the vector width, the threads, the masked tail) and the load/store helpers of:
- softmax_rows.py: `make_softmax_forward`, `make_softmax_backward` (float16/bfloat16, any row length).
- norms.py: `make_layer_norm_forward` / `_backward`, `make_rms_norm_forward` (fused_add=True: x + residual first) /
  `make_rms_norm_backward` (add_grad=True: plus the sum output's gradient).
The torch ops over them are in tiledsl.ops.library.rowwise.

Importing this package imports none of the modules."""
