"""Which tests the default run leaves to `--runslow` besides those marked `@pytest.mark.slow` in their files.

The README's `python -m pytest -q -n auto` has to finish in about 5 minutes on a fresh 2-core machine (issue 34);
CI's `.ci/run` adds --runslow and runs everything. The entries were chosen from per-test CPU seconds (the process's
and its ptxas children's, measured on a loaded 2-core machine; listed beside each): the heaviest parametrized
families keep one representative in the default run, and a whole test goes to --runslow only where another test of
its family stays.

FAMILIES: "file::test function" -> the parameter ids that stay in the default run (every other id of it is slow);
          every family of more than 1.5 CPU seconds keeps its cheapest member. The comment: ids, the family's seconds.
TESTS:    "file::test function" or a full node id: slow as a whole (unparametrized tests of more than 3 s whose file
          keeps others; the comment: its seconds).
Measured on the default run of issue 34's session: about 22 CPU minutes before these tables, about 4 after.
"""

FAMILIES = {
    "test_atomic.py::test_every_form_compiles_and_assembles_for_sm90": ("red.global.add.u64",),  # 111 ids, 10.5 s
    "test_atomic.py::test_gpu_random_forms_assemble_for_sm90": ("atom.global.add.u64",),  # 24 ids, 2.0 s
    "test_attention.py::test_attention_bf16_and_benchmark_shapes_pass_ptxas": ("True-64",),  # 6 ids, 29.5 s
    "test_attention.py::test_attention_on_the_interpreter": ("True-None-heads1-80-80",),  # 5 ids, 6.0 s
    "test_attention.py::test_attention_passes_ptxas_without_spills": ("sm_80-False-64",),  # 12 ids, 24.6 s
    "test_attention.py::test_causal_rows_do_not_depend_on_the_block_tiling": ("200",),  # 2 ids, 5.0 s
    "test_attention.py::test_every_candidate_configuration_passes_ptxas_without_spills": ("64",),  # 3 ids, 22.6 s
    "test_attention.py::test_lazy_rescale_kernel_passes_ptxas_without_spills": ("sm_90-False",),  # 4 ids, 10.8 s
    "test_attention.py::test_lazy_rescale_on_the_interpreter": ("True-config2-256-256",),  # 3 ids, 7.9 s
    "test_attention_backward.py::test_backward_on_the_interpreter": ("heads0-False",),  # 4 ids, 7.5 s
    "test_attention_backward.py::test_backward_on_the_interpreter_more_tiles":
        ("True-heads3-40-100-64",),  # 4 ids, 10.8 s
    "test_attention_backward.py::test_backward_other_gpu_and_benchmark_shapes_pass_ptxas":
        ("float16-64-False-shape8",),  # 30 ids, 61.1 s
    "test_attention_backward.py::test_backward_passes_ptxas_without_spills":
        ("sm_90-False-128-bfloat16",),  # 14 ids, 67.7 s
    "test_attention_backward.py::test_backward_with_4_warps_on_the_interpreter": ("64",),  # 2 ids, 8.3 s
    "test_attention_backward.py::test_backward_with_4_warps_passes_ptxas_without_spills":
        ("False-64",),  # 4 ids, 17.0 s
    "test_attention_backward_hopper.py::test_benchmark_kernel_compiles_for_sm90a_without_spills":
        ("False-float16",),  # 4 ids, 8.4 s
    "test_attention_backward_hopper.py::test_on_the_interpreter_against_the_reference": ("mha-True",),  # 4 ids, 16.3 s
    # session 45's variants (CPU seconds estimated from single runs on the 2-core dev machine)
    "test_attention_backward_hopper.py::test_head_dim_256_score_split_on_the_interpreter_is_bit_for_bit":
        ("ragged-True",),  # 8 ids, ~20 s
    "test_attention_backward_hopper.py::test_head_dim_256_score_split_own_on_the_interpreter_against_the_reference":
        ("ragged-False",),  # 6 ids, ~8 s
    "test_attention_backward_hopper.py::test_head_dim_64_dq_combine_on_the_interpreter_against_the_reference":
        ("five_tiles-True",),  # 8 ids, ~5 s
    "test_attention_backward_hopper.py::test_head_dim_64_compiles_for_sm90a_without_spills":
        ("False-False-float16", "True-True-bfloat16"),  # 8 ids, ~8 s
    "test_attention_backward_hopper.py::test_head_dim_256_compiles_for_sm90a_without_spills":
        ("False-False-False-float16", "True-True-True-bfloat16", "False-own-False-float16"),  # 24 ids, ~36 s
    "test_attention_backward_hopper.py::test_ring_and_lengths_on_the_interpreter":
        ("False-heads0-64-64",),  # 5 ids, 20.7 s
    "test_attention_backward_hopper.py::test_tail_split_assembles_without_spills":
        ("float16-False-shape2",),  # 4 ids, 11.9 s
    "test_attention_backward_hopper.py::test_tail_split_on_the_interpreter_against_the_reference":
        ("causal",),  # 6 ids, 85.6 s
    "test_attention_backward_hopper.py::test_tma_kv_assembles_without_spills": ("False",),  # 2 ids, 5.1 s
    "test_attention_backward_hopper.py::test_tma_kv_on_the_interpreter_is_bit_for_bit":
        ("True-190-130",),  # 4 ids, 39.1 s
    "test_attention_fp8.py::test_against_the_dequantised_reference": ("False-heads0-130-130-64-None",),  # 6 ids, 12.4 s
    "test_attention_fp8.py::test_compiles_for_sm90a_and_assembles_without_spills": ("True-64",),  # 6 ids, 13.1 s
    "test_attention_fp8.py::test_one_key_tile_matches_p_rounded_to_e4m3": ("64",),  # 2 ids, 2.3 s
    "test_attention_hopper.py::test_align_on_the_interpreter": ("True-heads1-300-420-config1-None",),  # 6 ids, 26.3 s
    "test_attention_hopper.py::test_compiles_for_sm90a_and_assembles_without_spills":
        ("False-64-float16",),  # 12 ids, 32.3 s
    "test_attention_hopper.py::test_dynamic_on_the_interpreter": ("False-heads2-200-300-config2-2",),  # 4 ids, 18.8 s
    "test_attention_hopper.py::test_early_k_on_the_interpreter":
        ("False-heads0-130-520-config0-64-0",),  # 6 ids, 27.7 s
    "test_attention_hopper.py::test_lazy_rescale_on_the_interpreter": ("True-300-300-config1-None",),  # 3 ids, 12.6 s
    "test_attention_hopper.py::test_on_the_interpreter_against_the_reference": ("mha-False",),  # 4 ids, 5.2 s
    "test_attention_hopper.py::test_persistent_on_the_interpreter":
        ("False-heads4-70-70-config4-64-1",),  # 7 ids, 25.2 s
    "test_attention_hopper.py::test_ping_pong_on_the_interpreter": ("False-heads0-130-130-config0-64",),  # 7 ids, 9.2 s
    "test_attention_hopper.py::test_polynomial_exponentials_on_the_interpreter":
        ("True-heads2-200-200-config2-64",),  # 4 ids, 6.5 s
    "test_attention_hopper.py::test_polynomial_lse_is_no_more_sensitive_to_last_bits_than_ex2":
        ("True",),  # 2 ids, 12.9 s
    "test_attention_hopper.py::test_ring_and_configurations_on_the_interpreter":
        ("True-heads4-200-200-config4",),  # 5 ids, 8.2 s
    "test_attention_hopper.py::test_the_dynamic_configuration_assembles": ("False",),  # 2 ids, 10.2 s
    "test_attention_hopper.py::test_the_early_k_configuration_assembles": ("False",),  # 2 ids, 5.8 s
    "test_attention_hopper.py::test_the_persistent_configuration_assembles": ("False",),  # 2 ids, 7.0 s
    "test_attention_hopper.py::test_the_ping_pong_configuration_assembles": ("True-128-config1",),  # 8 ids, 32.1 s
    "test_attention_hopper.py::test_the_polynomial_exponentials_assemble": ("False",),  # 2 ids, 7.1 s
    "test_attention_hopper.py::test_the_tma_o_configuration_assembles": ("64-True",),  # 2 ids, 10.2 s
    "test_cache_damage.py::test_entry_with_wrong_fields_is_discarded_and_recompiled":
        ("file name escapes the entry",),  # 19 ids, 1.6 s
    "test_example_kernels.py::test_softmax_and_layernorm_pass_ptxas_at_benchmark_sizes": ("32768",),  # 4 ids, 3.9 s
    "test_fastmath.py::test_interpreter_gives_the_correctly_rounded_value": ("rcp.approx.ftz.f64",),  # 26 ids, 1.7 s
    "test_gemm_hopper_route.py::test_chosen_configurations_assemble_for_sm90a": ("1024",),  # 2 ids, 2.0 s
    "test_gemm_schedule.py::test_every_configuration_covers_every_tile_once": ("128-2-4-1-1-0",),  # 13 ids, 15.2 s
    "test_hopper_gemm.py::test_compiles_for_sm90a_and_assembles_without_spills":
        ("float16-float16-cfg7-248-248",),  # 18 ids, 22.5 s
    "test_hopper_gemm.py::test_deferred_epilogue_assembles_without_serialising_wgmma":
        ("float16-False",),  # 2 ids, 2.7 s
    "test_hopper_gemm.py::test_fp8_compiles_and_assembles_without_spills":
        ("e5m2-e4m3-float16-persistent=False-bn=128",),  # 9 ids, 17.5 s
    "test_hopper_gemm.py::test_fused_epilogues_compile_and_assemble_without_spills":
        ("float16-float16-persistent=True-bn=256-tma_store=True-activation=relu",),  # 11 ids, 28.4 s
    "test_hopper_gemm.py::test_multicast_clusters_on_the_interpreter": ("256-128-128-False",),  # 2 ids, 1.6 s
    "test_hopper_gemm.py::test_persistent_grid_on_the_fibered_interpreter":
        ("multicast-plain-stores",),  # 8 ids, 14.3 s
    "test_hopper_gemm.py::test_stmatrix_epilogue_on_the_interpreter": ("f16-two-consumers",),  # 4 ids, 4.2 s
    "test_hopper_gemm.py::test_stream_k_assembles_without_spills": ("bfloat16-bfloat16",),  # 3 ids, 5.3 s
    "test_hopper_gemm.py::test_stream_k_on_the_fibered_interpreter": ("fewer-tiles-than-blocks",),  # 4 ids, 17.2 s
    "test_hopper_gemm_layouts.py::test_every_major_assembles_without_spills": ("Amn-Bmn",),  # 4 ids, 6.8 s
    "test_hopper_gemm_layouts.py::test_every_major_on_the_interpreter": ("Amn-Bmn-bfloat16",),  # 8 ids, 8.5 s
    "test_hopper_gemm_layouts.py::test_mn_major_variants_on_the_interpreter": ("one-consumer-bn64",),  # 3 ids, 6.0 s
    "test_hopper_gemm_layouts.py::test_mn_major_walks_assemble_without_spills": ("multicast",),  # 3 ids, 8.1 s
    "test_hopper_gemm_splitk.py::test_split_k_bias_gelu_on_the_interpreter": ("tma-store",),  # 2 ids, 3.2 s
    "test_hopper_gemm_splitk.py::test_split_k_compiles_and_assembles_without_spills":
        ("float16-float16-split_k=2-consumers=1-tma_store=True",),  # 6 ids, 12.1 s
    "test_hopper_gemm_splitk.py::test_split_k_on_the_interpreter_is_exact": ("rank-without-k-tiles",),  # 9 ids, 13.0 s
    "test_interpreter_deep.py::test_chain_at_the_default_limit": ("200",),  # 4 ids, 1.5 s
    "test_patterns_compile.py::test_cp_async_forms_with_commit_and_wait": ("cg16-L2-none",),  # 25 ids, 5.8 s
    "test_patterns_compile.py::test_every_claimed_register_form_assembles": ("sm_80",),  # 2 ids, 24.6 s
    "test_patterns_compile.py::test_ldmatrix_stmatrix_forms": ("stmatrix-x1",),  # 12 ids, 2.0 s
    "test_patterns_compile.py::test_mma_one_instruction_per_repeat":
        ("k16-bf16-tensorC-nobatch-sm_90",),  # 32 ids, 7.0 s
    "test_patterns_docs.py::test_page_example_compiles": ("cluster",),  # 14 ids, 1.8 s
    "test_policy.py::test_policy_feeds_cache_hints":
        ("None-createpolicy.fractional.L2::evict_normal.L2::evict_unchanged.b64",),  # 12 ids, 1.5 s
    "test_scalar_math.py::test_interpreter_agrees_with_numpy": ("max.f32",),  # 74 ids, 3.8 s
    "test_scalar_math.py::test_ptx_holds_the_instruction_and_assembles": ("fma.rp.f32",),  # 74 ids, 7.4 s
    "test_warp.py::test_redux_forms_assemble": ("redux.sync.add.s32",),  # 9 ids, 1.8 s
    "test_wgmma.py::test_fp8_and_f16_acc_compile_and_match_numpy_on_the_interpreter":
        ("n8-f16xf16-f16-ss-sw32",),  # 41 ids, 25.2 s
    "test_wgmma.py::test_matrix_compiles_and_matches_numpy_on_the_interpreter":
        ("n8-bf16-ss-sw0-ta1-tb1",),  # 192 ids, 111.0 s
    # the ops library, its torch ops and the ragged / grouped kernels (issues 32, 35, 37; measured with -n 2)
    "bad_inputs/test_bad_races.py::test_each_racy_kernel_compiles_for_the_gpu":
        ('cp_async_overwrites_what_another_warp_reads',),  # 31 ids, 5.5 s
    "test_attention_decode.py::test_combine_kernel_passes_ptxas": ('64-4-8',),  # 3 ids, 5.5 s
    "test_attention_decode.py::test_decode_contiguous_on_the_interpreter": ('False-1-heads0-lens0-1',),  # 4 ids, 10.6 s
    "test_attention_decode.py::test_decode_fp8_cache_on_the_interpreter": ('True-2',),  # 2 ids, 6.6 s
    "test_attention_decode.py::test_decode_fp8_kernels_pass_ptxas_without_spills": ('64-16-1',),  # 3 ids, 29.5 s
    "test_attention_decode.py::test_decode_kernels_pass_ptxas_without_spills": ('64-False-1-16-8',),  # 7 ids, 57.8 s
    "test_attention_decode.py::test_decode_paged_on_the_interpreter": ('16-False-1-lens1-2',),  # 3 ids, 18.4 s
    "test_attention_varlen.py::test_varlen_backward_kernels_pass_ptxas_without_spills":
        ('heads0-False-64',),  # 8 ids, 100.3 s
    "test_attention_varlen.py::test_varlen_backward_on_the_interpreter": ('True-heads0-lq0-lk0-4',),  # 3 ids, 21.1 s
    "test_attention_varlen.py::test_varlen_kernels_pass_ptxas_without_spills":
        ('bfloat16-sm_80-True-64',),  # 12 ids, 79.6 s
    "test_attention_varlen.py::test_varlen_on_the_interpreter": ('True-heads2-lq2-lk2-config2',),  # 5 ids, 7.6 s
    "test_attention_varlen.py::test_varlen_sm90_config_passes_ptxas_without_spills":
        ('False-bfloat16',),  # 4 ids, 41.8 s
    "test_fp8_blockwise.py::test_blockwise_gemm_assembles_for_sm90a_without_spills":
        ('dense-pipelined',),  # 4 ids, 10.2 s (the gated form's proof stays)
    "test_fp8_blockwise.py::test_dense_blockwise_gemm_on_the_interpreter": ('bn128-exact',),  # 3 ids, 13.9 s
    "test_fp8_blockwise.py::test_grouped_blockwise_gemm_on_the_interpreter": ('pipelined-2-blocks',),  # 3 ids, 5.5 s
    "test_fp8_blockwise.py::test_pipelined_promotion_on_the_interpreter":
        ('2-2',),  # 4 ids, 10.7 s (2-2: 0.1 s above the cheapest, and it runs the even tail and two consumers)
    "test_grouped_gemm.py::test_compiles_for_sm90a_and_assembles_without_spills": ('bf16-f32-out',),  # 3 ids, 34.2 s
    "test_grouped_gemm.py::test_grouped_walk_on_the_fibered_interpreter": ('tiny-odd-n',),  # 3 ids, 5.3 s
    "test_grouped_gemm.py::test_k_grouped_weight_gradient_on_the_interpreter": ('bf16-zero-first',),  # 2 ids, 8.4 s
    "test_grouped_gemm.py::test_masked_decode_form_on_the_interpreter": ('0',),  # 2 ids, 5.6 s
    "test_grouped_gemm.py::test_token_major_weight_gradient_on_the_interpreter":
        ('bn128-two-consumers-zero-first',),  # 2 ids, 6.4 s
    "test_grouped_gemm.py::test_transposed_weights_on_the_interpreter": ('bn64',),  # 2 ids, 8.5 s
    "test_ops_attention.py::test_matches_torch_forward_and_gradients": ('dtype4-128-True-8-8',),  # 5 ids, 41.9 s
    "test_ops_gemm.py::test_matmul_matches_torch": ('128-64-64-dtype2-None',),  # 5 ids, 9.3 s
    "test_ops_rowwise.py::test_compile_fullgraph_no_break_no_recompile": ('aot_eager',),  # 2 ids, 7.4 s
    "test_ops_rowwise.py::test_kernels_pass_ptxas_for_sm_90": ('bfloat16-17',),  # 10 ids, 68.4 s
    "test_ops_rowwise.py::test_layer_norm_matches_torch": ('shape3-True-dtype0',),  # 10 ids, 5.5 s
    "test_ops_rowwise.py::test_long_row_kernels_pass_ptxas_for_sm_90": ('151936',),  # 2 ids, 10.0 s
    "test_ops_rowwise.py::test_long_rows_take_the_multi_pass_kernels": ('1000',),  # 3 ids, 8.3 s
    "test_ops_rowwise.py::test_opcheck": ('11',),  # 14 ids, 28.6 s
    "test_ops_rowwise.py::test_softmax_matches_torch": ('shape4-False-dtype0',),  # 10 ids, 11.0 s
}

TESTS = {
    "test_attention_backward_hopper.py::test_tail_split_leaves_its_counters_at_zero_for_the_next_launch",  # 13.7 s
    "test_attention_hopper.py::test_dynamic_counters_are_zeros_after_each_launch",  # 5.0 s
    "test_autotune.py::test_tune_picks_the_fastest_stores_it_and_prints_progress",  # 7.5 s
    "test_compile_speed.py::test_source_reader_matches_inspect_on_a_library",  # 3.7 s
    "test_gemm_hopper_route.py::test_padded_mma_kernel_of_the_ragged_shape_assembles_for_sm90",  # 3.9 s
    "test_gemm_schedule.py::test_heuristic_choices_over_llm_and_ragged_shapes",  # 27.0 s
    "test_gemm_schedule.py::test_stream_k_schedule_over_sm_counts_and_partial_waves",  # 13.8 s
    "test_hopper_gemm.py::test_split_epilogue_one_tile_per_block_on_the_interpreter",  # 3.5 s
    "test_interpreter_deep.py::test_chain_under_a_raised_recursion_limit",  # 3.6 s
}


def is_slow(nodeid: str) -> bool:
    """Whether the default run skips `nodeid` (a pytest node id relative to the repository, `tests/...`)."""
    path = nodeid.split("tests/", 1)[-1]
    base, _, param = path.partition("[")
    if path in TESTS or base in TESTS:
        return True
    keep = FAMILIES.get(base)
    return keep is not None and param.rstrip("]") not in keep
