"""Row-wise kernels: one block per row held in registers, reductions across the block (tiledsl.lib.reductions).

- softmax.py: `make_softmax`, `softmax` (float16 rows; rows of 32768 use a pipelined kernel that copies the next
  row with cp.async), `reference`.
- layernorm.py: `make_layernorm`, `layer_norm`, `reference`.

Importing this package imports none of the modules."""
