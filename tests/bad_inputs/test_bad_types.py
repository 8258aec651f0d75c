"""Unknown names, wrong types and dtypes, and constant indices out of range: CompilationError at the user's line."""
import math

import numpy as np
import pytest

from tiledsl import LaunchError, T
from tiledsl.layout import S, TileLayout
from badcase import Case, run

TABLE = {"a": 1}
WEIGHTS = np.ones(4, np.float32)
NAME = "x"
SMALL_LAYOUT = TileLayout(S[(2, 2) : (1, 2)])


def k_unknown_name(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = no_such_value * 2.0  # noqa: F821


def k_unknown_T_attr(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.sqrtt(A[1])


def k_unknown_cuda_attr(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cast(T.cuda.lane_idx(), "float32")


def k_global_dict(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = TABLE["a"]


def k_global_array(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = WEIGHTS[0]


def k_python_call(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = math.sqrt(A[1])


def k_loop_var_after_loop(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in range(n):
        A[0] = 1.0
    A[i] = 2.0


def k_assign_loop_var(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in range(n):
        i = 3


def k_buffer_bound_in_branch(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        buf = T.alloc_local((4,), "float32")
    buf[0] = 1.0


def k_store_f32_into_f16(A: T.Tensor((4,), "float16"), B: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = B[0]


def k_int_into_float_var_in_loop(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    acc = 0.0
    for i in range(n):
        acc = i
    A[0] = acc


def k_compare_buffer(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if A < 1.0:
        A[0] = 1.0


def k_buffer_condition(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    x = 1.0 if A else 2.0
    A[0] = x


def k_buffer_arith(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A + 1.0


def k_store_buffer_in_element(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4,), "float32")
    A[0] = r


def k_float_index(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[1.5] = 1.0


def k_runtime_float_index(A: T.Tensor((4,), "float32"), x: T.float32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[x] = 1.0


def k_bitand_floats(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] & A[2]


def k_float_floordiv(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] // 2.0


def k_negate_unsigned(A: T.Tensor((4,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = -A[1]


def k_invert_float(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = ~A[1]


def k_constant_overflow(A: T.Tensor((4,), "uint8")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 300


def k_typed_constant_overflow(A: T.Tensor((4,), "uint32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.uint32(-1)


def k_fraction_into_int(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 2.5


def k_runtime_pow(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] ** A[2]


def k_const_div_zero(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 7 // 0


def k_runtime_div_zero(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] % 0


def k_annotated_mismatch(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    h: T.float16 = A[0]
    A[1] = T.cast(h, "float32")


def k_int16_scalar_param(A: T.Tensor((4,), "float32"), n: T.int16):
    A[0] = 1.0


def k_unknown_alloc_dtype(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4,), "float8")


def k_bool_view(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4,), "bool")
    v = r.view(dtype="uint8")


def k_zero_extent_alloc(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 0), "float32")


def k_runtime_extent_alloc(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((n,), "float32")


def k_cast_unknown_dtype(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cast(A[1], "float128")


def k_view_bad_pack(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((3,), "float16")
    w = r.view(dtype="uint32")


def k_view_too_big(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4,), "float32")
    v = r.view(2, 4)


def k_view_bad_layout(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((8,), "float32")
    v = r.view(8, layout=SMALL_LAYOUT)


def k_index_out_of_range(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[4] = 1.0


def k_negative_index(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[-1] = 1.0


def k_local_index_out_of_range(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 2), "float32")
    A[0] = r[1, 2]


def k_unrolled_index_out_of_range(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in T.unroll(5):
        A[i] = 0.0


def k_too_many_indices(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0, 0] = 1.0


def k_slice_out_of_range(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r[2:6], A.view(4, 1))


def k_slice_step(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    r = T.alloc_local((4, 1), "float32")
    x = r[0:4:2]


def k_store_into_slice(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0:2] = 1.0


def k_tuple_index_out_of_range(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    s = A.shape[3]


def k_tuple_unpack_mismatch(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    a, b = 1, 2, 3


def k_rebind_scalar_param(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    n = T.alloc_local((4,), "float32")


def k_iterate_buffer(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for x in A:
        pass


def k_float_range(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in range(2.0):
        A[0] = 1.0


def k_range_bad_step(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in range(0, 4, n):
        A[0] = 1.0


def k_unroll_runtime(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in T.unroll(n):
        A[0] = 1.0


def k_bad_axis(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cast(T.cuda.thread_id(axis=3), "float32")


def k_constexpr_missing(A: T.Tensor((4,), "float32"), N: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = N


def k_unroll_zero_step(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in T.unroll(0, 4, 0):
        A[0] = 1.0


def k_unroll_huge(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in T.unroll(18446744073709551616):
        A[0] = 1.0


def k_invert_float_constant(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = ~1e300


def k_annotated_tuple(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    v: T.int32 = A.shape
    A[0] = 1.0


def k_runtime_select_tuple(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 1.0 if A[1] > 0.0 else A.shape


def k_runtime_select_string(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.max(1.5, "x" if A[1] > 1.0 else 1)


def k_string_annotation_unknown_dtype(A: "T.Tensor((4,), 'float8')"):
    A[0] = 1.0


def k_abs_of_string(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = abs(NAME)


def k_f16_literal_overflow(A: T.Tensor((4,), "float16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] * 70000.0


def k_f32_literal_overflow(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 1e300


C = Case
CASES = [
    C("unknown_name", k_unknown_name, "no_such_value", ("name 'no_such_value' is not defined",)),
    C("unknown_T_attribute", k_unknown_T_attr, "T.sqrtt", ("has no attribute 'sqrtt'",)),
    C("unknown_cuda_attribute", k_unknown_cuda_attr, "lane_idx", ("T.cuda has no attribute 'lane_idx'",)),
    C("global_dict", k_global_dict, "TABLE[", ("global 'TABLE' is a dict",)),
    C("global_numpy_array", k_global_array, "WEIGHTS[0]", ("global 'WEIGHTS' is a ndarray",)),
    C("python_function_call", k_python_call, "math.sqrt",
      ("math.sqrt runs on the host, not in a kernel: write T.sqrt(x)",)),
    C("loop_var_after_loop", k_loop_var_after_loop, "A[i] = 2.0", ("'i' was bound inside a run-time loop",)),
    C("assign_loop_var", k_assign_loop_var, "i = 3", ("cannot assign to the loop variable 'i'",)),
    C("buffer_bound_in_branch", k_buffer_bound_in_branch, "buf[0] = 1.0",
      ("'buf' was bound inside a run-time loop or branch",)),
    C("store_float32_into_float16", k_store_f32_into_f16, "A[0] = B[0]",
      ("storing a float32 value into a float16 element", "T.cast")),
    C("int_into_float_var_in_loop", k_int_into_float_var_in_loop, "acc = i",
      ("'acc' holds float32 but this assigns int32",)),
    C("compare_buffer", k_compare_buffer, "if A < 1.0", ("cannot compare the buffer view A[4]:float32",)),
    C("buffer_as_condition", k_buffer_condition, "1.0 if A else", ("cannot be used as a condition",)),
    C("buffer_arithmetic", k_buffer_arith, "A[0] = A + 1.0", ("unsupported operand for 'add'",)),
    C("store_buffer_into_element", k_store_buffer_in_element, "A[0] = r", ("cannot store the buffer view",)),
    C("float_constant_index", k_float_index, "A[1.5]", ("index must be an int, got 1.5",)),
    C("float_runtime_index", k_runtime_float_index, "A[x]", ("index must be an integer, got float32",)),
    C("bitand_on_floats", k_bitand_floats, "A[1] & A[2]", ("'and' needs integer operands, got float32",)),
    C("float_floordiv", k_float_floordiv, "A[1] // 2.0", ("'//' on floats is not supported",)),
    C("negate_unsigned", k_negate_unsigned, "-A[1]", ("negating an unsigned uint32 value",)),
    C("invert_float", k_invert_float, "~A[1]", ("'~' needs an integer operand",)),
    C("constant_overflow_uint8", k_constant_overflow, "A[0] = 300", ("300 does not fit in uint8",)),
    C("typed_constant_overflow", k_typed_constant_overflow, "T.uint32(-1)", ("-1 does not fit in uint32",)),
    C("fraction_into_int", k_fraction_into_int, "A[0] = 2.5", ("2.5 is not an integer",)),
    C("runtime_pow", k_runtime_pow, "A[1] ** A[2]", ("'**' needs a compile-time integer exponent", "T.exp2(")),
    C("constant_division_by_zero", k_const_div_zero, "7 // 0", ("constant expression fails",)),
    C("runtime_modulo_by_zero", k_runtime_div_zero, "A[1] % 0", ("integer division by zero",)),
    C("annotation_mismatch", k_annotated_mismatch, "h: T.float16", ("float32 but the annotation says float16",)),
    C("int16_scalar_parameter", k_int16_scalar_param, "def k_int16", ("scalar parameters of type int16",)),
    C("unknown_alloc_dtype", k_unknown_alloc_dtype, "float8", ("unknown dtype 'float8'; the dtypes are bool, int8",
                                                               "f16/fp16/half = float16")),
    C("bool_view", k_bool_view, "r.view(dtype=\"uint8\")", ("view(dtype=...) between bool and uint8",
                                                              "allocate uint8 and compare")),
    C("zero_extent_alloc", k_zero_extent_alloc, "(4, 0)", ("allocation extents must be positive",)),
    C("runtime_extent_alloc", k_runtime_extent_alloc, "alloc_local((n,)",
      ("allocation extents must be a compile-time int",)),
    C("cast_unknown_dtype", k_cast_unknown_dtype, "float128", ("unknown dtype 'float128'",)),
    C("view_dtype_does_not_pack", k_view_bad_pack, "r.view(dtype", ("does not pack into uint32",)),
    C("view_larger_than_storage", k_view_too_big, "r.view(2, 4)", ("needs 8 elements of storage",)),
    C("view_layout_shape_mismatch", k_view_bad_layout, "v = r.view", ("do not multiply out",)),
    C("index_out_of_range", k_index_out_of_range, "A[4]", ("index 4 is out of range for dimension 0",)),
    C("negative_index", k_negative_index, "A[-1]", ("index -1 is out of range",)),
    C("local_index_out_of_range", k_local_index_out_of_range, "r[1, 2]",
      ("index 2 is out of range for dimension 1",)),
    C("unrolled_index_out_of_range", k_unrolled_index_out_of_range, "A[i] = 0.0", ("index 4 is out of range",)),
    C("too_many_indices", k_too_many_indices, "A[0, 0]", ("2 indices for A[4]:float32, which has 1 dimensions",)),
    C("slice_out_of_range", k_slice_out_of_range, "r[2:6]", ("slice 2:6 is out of range",)),
    C("slice_with_step", k_slice_step, "r[0:4:2]", ("slices with a step are not supported",)),
    C("store_into_slice", k_store_into_slice, "A[0:2]", ("assign to single elements",)),
    C("tuple_index_out_of_range", k_tuple_index_out_of_range, "A.shape[3]", ("bad tuple index",)),
    C("tuple_unpack_mismatch", k_tuple_unpack_mismatch, "a, b = 1, 2, 3", ("same length",)),
    C("rebind_scalar_parameter", k_rebind_scalar_param, "n = T.alloc", ("cannot rebind parameter 'n'",)),
    C("iterate_buffer", k_iterate_buffer, "for x in A", ("cannot iterate over the buffer view",)),
    C("float_range", k_float_range, "range(2.0)", ("range bounds must be integers",)),
    C("runtime_range_step", k_range_bad_step, "range(0, 4, n)", ("range step must be a compile-time int (positive, or negative for a loop that counts down)",)),
    C("unroll_runtime_bound", k_unroll_runtime, "T.unroll(n)", ("T.unroll bounds must be a compile-time int",)),
    C("bad_axis", k_bad_axis, "axis=3", ("axis must be 0, 1 or 2",)),
    # found by tests/test_fuzz_frontend.py: each used to be an "internal compiler error"
    C("unroll_zero_step", k_unroll_zero_step, "T.unroll(0, 4, 0)", ("step must not be zero",)),
    C("unroll_over_2_63", k_unroll_huge, "18446744073709551616", ("more than 2**63 iterations",)),
    C("invert_float_constant", k_invert_float_constant, "~1e300", ("'~' needs an integer operand",)),
    C("annotated_tuple", k_annotated_tuple, "v: T.int32", ("cannot assign a tuple to an int32 variable",)),
    C("runtime_select_tuple", k_runtime_select_tuple, "else A.shape", ("needs scalar values on both sides",)),
    C("runtime_select_string", k_runtime_select_string, "\"x\" if", ("needs scalar values on both sides",)),
    C("string_annotation_unknown_dtype", k_string_annotation_unknown_dtype, "def k_string_annotation",
      ("unknown dtype 'float8'",)),
    C("abs_of_string", k_abs_of_string, "abs(NAME)", ("abs() of str 'x'",)),
    C("float16_literal_out_of_range", k_f16_literal_overflow, "70000.0",
      ("70000.0 is out of range for float16", "65504")),
    C("float32_literal_out_of_range", k_f32_literal_overflow, "1e300", ("out of range for float32",)),
    C("constexpr_not_given", k_constexpr_missing, None, ("missing argument 'N'",), err=LaunchError,
      args=(np.zeros(4, np.float32),)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_types_and_names(case):
    run(case)
