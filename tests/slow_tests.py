"""Which tests the default run leaves to `--runslow` besides those marked `@pytest.mark.slow` in their files.

The README's `python -m pytest -q -n auto` has to finish in about 5 minutes on a fresh 2-core machine (issue 34);
CI's `.ci/run` adds --runslow and runs everything. The entries were chosen from per-test CPU seconds (the process's
and its ptxas children's, measured on a loaded 2-core machine; listed beside each): the heaviest parametrized
families keep one representative in the default run, and a whole test goes to --runslow only where another test of
its family stays.

FAMILIES: "file::test function" -> the parameter ids that stay in the default run (every other id of it is slow).
TESTS:    "file::test function" or a full node id: slow as a whole.
"""

FAMILIES = {
    # compile + ptxas sweeps (CPU seconds of the whole family; the one kept)
    "test_atomic.py::test_every_form_compiles_and_assembles_for_sm90": ("atom.global.min.s64",),   # 111 ids, 10.5 s
    "test_attention.py::test_attention_bf16_and_benchmark_shapes_pass_ptxas": ("True-64",),          # 6 ids, 29.9 s
    "test_attention.py::test_attention_passes_ptxas_without_spills": ("sm_80-False-64",),            # 12 ids, 24.9 s
    "test_attention.py::test_every_candidate_configuration_passes_ptxas_without_spills": ("64",),    # 3 ids, 23.9 s
    "test_attention.py::test_lazy_rescale_kernel_passes_ptxas_without_spills": ("sm_90-False",),     # 4 ids, 11.9 s
    "test_attention_backward.py::test_backward_passes_ptxas_without_spills": ("sm_90-False-128-bfloat16",),  # 68.7 s
    "test_example_kernels.py::test_softmax_and_layernorm_pass_ptxas_at_benchmark_sizes": ("32768",),  # 4 ids, 4.1 s
    "test_hopper_gemm.py::test_compiles_for_sm90a_and_assembles_without_spills": (
        "float16-float16-cfg10-168-232",),                                                          # 18 ids, 21.7 s
    "test_hopper_gemm.py::test_fp8_compiles_and_assembles_without_spills": (
        "e5m2-e4m3-float16-persistent=False-bn=128",),                                              # 9 ids, 17.9 s
    "test_hopper_gemm.py::test_fused_epilogues_compile_and_assemble_without_spills": (
        "float16-float16-persistent=True-bn=256-tma_store=True-activation=relu",),                  # 11 ids, 28.7 s
    # the interpreter's sweeps
    "test_attention.py::test_attention_on_the_interpreter": ("True-None-heads1-80-80",),             # 5 ids, 6.1 s
    "test_attention.py::test_causal_rows_do_not_depend_on_the_block_tiling": ("200",),              # 2 ids, 4.7 s
    "test_attention.py::test_lazy_rescale_on_the_interpreter": ("True-config2-256-256",),            # 3 ids, 7.5 s
    "test_hopper_gemm.py::test_persistent_grid_on_the_fibered_interpreter": ("deferred-one-k-tile",),  # 8 ids, 13.9 s
    "test_hopper_gemm.py::test_stmatrix_epilogue_on_the_interpreter": ("f16-two-consumers",),        # 4 ids, 3.7 s
    # the schedule model's grids
    "test_gemm_schedule.py::test_every_configuration_covers_every_tile_once": ("128-2-4-1-1-0",),    # 13 ids, 15.2 s
}

TESTS = {
    # the schedule model's fast grids (their dense versions are marked slow in the file; the hang's proof stays)
    "test_gemm_schedule.py::test_heuristic_choices_over_llm_and_ragged_shapes",                     # 27.0 s
    "test_gemm_schedule.py::test_stream_k_schedule_over_sm_counts_and_partial_waves",               # 13.8 s
}


def is_slow(nodeid: str) -> bool:
    """Whether the default run skips `nodeid` (a pytest node id relative to the repository, `tests/...`)."""
    path = nodeid.split("tests/", 1)[-1]
    base, _, param = path.partition("[")
    if path in TESTS or base in TESTS:
        return True
    keep = FAMILIES.get(base)
    return keep is not None and param.rstrip("]") not in keep
