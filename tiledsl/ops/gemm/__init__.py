"""The GEMMs: C = A · Bᵀ (+ bias, activation) on tensor cores, f16 / bf16 / FP8.

- matmul.py: `matmul`, `plan_of`, `route` (which kernel serves a shape and device) and the mma.sync path's tuning;
  plan.py: the `Plan` it keeps per key and the torch epilogue.
- mma.py: the mma.sync kernel (`make_gemm`: a cp.async pipeline, swizzled shared tiles, ldmatrix), any sm_80+ GPU.
- hopper.py: the warp-specialised TMA + wgmma kernel's host API (`make_hopper_gemm`, `make_hopper_gemm_fp8`,
  `hopper_matmul`, `hopper_matmul_fp8`); hopper_kernel.py builds it, epilogue.py is its fused epilogue,
  schedule.py its walk over tiles (persistent, split-K, stream-K).
- hopper_plan.py: the Hopper configurations and the heuristic and tuning that pick one (tuning.py: the second
  stage and FP8's), each checked by the schedule model (schedule_model.py) before launch.
- skinny.py: the skinny GEMM for M <= 64 (`skinny_matmul`, `skinny_matmul_fp8`, `choose_skinny`): swap-AB wgmma,
  a deep TMA ring over the weight, split-K over every SM with a last-arriver sum (skinny_kernel.py builds it; its
  walk is schedule.py's skinny_* helpers); gated as `gemm_skinny` (ops/gates.py).
- fp8.py: `matmul_fp8`, `fp8_plan_of`.
- grouped.py: `grouped_mm` (MoE: tokens sorted by expert, one persistent launch), its backward, and the block-scaled
  FP8 GEMMs `matmul_fp8_blockwise`, `grouped_mm_fp8_blockwise`; grouped_kernel.py builds their kernel (docs/moe.md);
  quantize.py: `quantize_fp8_blockwise`, `quantize_fp8`.

The public names are tiledsl.ops's; importing this package imports none of the modules. The torch ops over this
host code (`tiledsl::linear`, `tiledsl::matmul`, `tiledsl::matmul_fp8`) are in tiledsl/ops/library/gemm.py."""
