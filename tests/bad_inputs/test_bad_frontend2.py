"""Issue 14, front end: names bound on some paths only, whole-buffer comparisons, views and sizes that are not what
they look like, layouts and annotations built wrongly at module level, constants at the extremes, compile-time
unrolling that would explode. Each case used to compile to wrong code, hang, or escape as an internal exception."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T, TiledslError
from tiledsl.core.errors import LayoutError
from tiledsl.layout import S, Axis, AxisStride, Shape, TileLayout, laneid
from badcase import Case, run

LANES = TileLayout(S[(32,) : (1 @ laneid,)])
ROWS = tuple(range(1000))


# ---------------------------------------------------------------- 1. bound on some paths only

def k_one_branch(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        x = A[0]
    A[1] = x


def k_one_branch_constant(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        x = 1.0
    A[1] = x * 2.0


def k_else_only(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        A[0] = 0.0
    else:
        y = A[2]
    A[1] = y


def k_read_other_branch(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        x = A[0]
    else:
        A[1] = x


def k_zero_trip_loop(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in range(n):
        last = A[i % 4]
    A[0] = last


def k_nested_if(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        if n > 2:
            z = A[0]
        else:
            z = A[1]
    A[2] = z


def k_augassign_after_branch(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        s = A[0]
    s += 1.0
    A[1] = s


def k_annotated_in_branch(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        w: T.float32 = 1.0
    A[1] = w


def k_branch_inside_loop(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in range(n):
        if i > 1:
            v = A[i % 4]
        A[0] = v


# ---------------------------------------------------------------- 2. whole buffers compared

def k_eq_const(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if A == 0.0:
        A[0] = 1.0


def k_ne_buffers(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 1.0 if A != B else 2.0


def k_int_lt_buffer(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if 1 < A:
        A[0] = 1


def k_local_buffers_eq(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    buf = T.alloc_local((4,), "float32")
    buf2 = T.alloc_local((4,), "float32")
    if buf == buf2:
        A[0] = 1.0


def k_subview_eq(A: T.Tensor((4, 4), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if A[0:2, 0] == 0.0:
        A[0, 0] = 1.0


def k_static_assert_buffers(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    T.static_assert(A == B, "same")


# ---------------------------------------------------------------- 3. views, sizes, layouts, local memory

def k_global_view_too_big(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    v = A.view(2, 4)
    v[1, 3] = 1.0


def k_global_dtype_view_too_big(A: T.Tensor((4,), "float16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    w = A.view(4, dtype="float32")
    w[3] = 1.0


def k_size_named_like_scalar(A: T.Tensor(("n",), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 1.0


def k_size_named_like_tensor(A: T.Tensor(("B",), "float32"), B: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = B[0]


def k_size_named_like_constexpr(A: T.Tensor(("K",), "float32"), K: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 1.0


def k_size_hides_T(A: T.Tensor(("T",), "float32")):
    A[0] = 1.0


def k_size_named_range(A: T.Tensor(("range",), "float32")):
    A[0] = 1.0


def k_shared_layout_on_lanes(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    s = T.alloc_shared((32,), "float32", layout=LANES)


def k_shared_view_on_lanes(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    s = T.alloc_shared((32,), "float32")
    v = s.view(32, layout=LANES)


def k_local_over_limit(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    big = T.alloc_local((1024, 1024), "float32")
    big[0, 0] = 1.0


def k_local_sum_over_limit(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    a = T.alloc_local((65536,), "float32")
    b = T.alloc_local((65537,), "float32")


def k_string_annotation_align(A: "T.Tensor((4,), 'float32', align=16)"):
    A[0] = 1.0


# ---------------------------------------------------------------- 5. constants at the extremes

def k_nan_to_int(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cast(float('nan'), 'int32')


def k_inf_to_int(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.int32(float('inf'))


def k_nan_stored_in_int(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = float("nan")


def k_int_of_nan(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[int(float("nan"))] = 1


def k_float_of_text(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = float("one")


def k_int64_beyond(A: T.Tensor((4,), "int64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.int64(2**70)


def k_add_2_200(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] + 2**200


def k_5000_digits(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = A[1] + 10**5000


def k_index_5000_digits(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[10**5000] = 1


def k_pow_explodes(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 2 ** 1000000000


def k_shift_explodes(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 1 << 1000000000000


def k_float16_1e10(A: T.Tensor((4,), "float16")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.float16(1e10)


def k_float32_1e300(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.float32(1e300)


def k_cast_huge_int_to_float(A: T.Tensor((4,), "float64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cast(2**2000, "float64")


def k_axis_fraction(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cuda.thread_id(axis=1.5)


def k_axis_letter(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cuda.block_id(axis="x")


def k_axis_bool(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cuda.grid_dim(axis=True)


def k_axis_float_one(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = T.cuda.block_dim(axis=1.0)


# ---------------------------------------------------------------- 7. compile-time explosions

def k_nested_unroll(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in T.unroll(4096):
        for j in T.unroll(4096):
            A[0] = 1.0


def k_unroll_times_tuple(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in T.unroll(2048):
        for c in ROWS:
            A[0] = 1.0


C = Case
ONE_BRANCH = "may be unassigned here"
CASES = [
    C("one_branch_read_after", k_one_branch, "A[1] = x", (ONE_BRANCH, "only in one branch of the if at line")),
    C("one_branch_constant", k_one_branch_constant, "A[1] = x * 2.0", (ONE_BRANCH,)),
    C("else_branch_only", k_else_only, "A[1] = y", (ONE_BRANCH, "'y'")),
    C("read_other_branch", k_read_other_branch, "A[1] = x", (ONE_BRANCH, "only in the other branch")),
    C("zero_trip_loop", k_zero_trip_loop, "A[0] = last", (ONE_BRANCH, "may run zero times")),
    C("nested_if_outer_branch", k_nested_if, "A[2] = z", (ONE_BRANCH,)),
    C("augassign_after_branch", k_augassign_after_branch, "s += 1.0", (ONE_BRANCH, "'s'")),
    C("annotated_in_branch", k_annotated_in_branch, "A[1] = w", (ONE_BRANCH,)),
    C("branch_inside_loop", k_branch_inside_loop, "A[0] = v", (ONE_BRANCH,)),
    C("eq_whole_buffer", k_eq_const, "if A == 0.0", ("compares the buffer A itself", "A[i] == 0.0")),
    C("ne_two_buffers", k_ne_buffers, "A != B", ("compares the buffer A itself", "A[i] != B[i]")),
    C("int_lt_buffer", k_int_lt_buffer, "if 1 < A", ("compares the buffer A itself", "1 < A[i]")),
    C("local_buffers_eq", k_local_buffers_eq, "if buf == buf2", ("compares the buffer buf itself",)),
    C("subview_eq", k_subview_eq, "A[0:2, 0] == 0.0", ("compares the buffer A itself",)),
    C("static_assert_buffers", k_static_assert_buffers, "T.static_assert(A == B", ("compares the buffer A",)),
    C("global_view_too_big", k_global_view_too_big, "v = A.view(2, 4)", ("needs 8 elements of storage but A has 4",)),
    C("global_dtype_view_too_big", k_global_dtype_view_too_big, "w = A.view(4, dtype",
      ("needs 4 elements of storage but A has 2",)),
    C("size_named_like_scalar", k_size_named_like_scalar, "def k_size_named_like_scalar",
      ("size name 'n' is also the name of parameter 'n'",), args=(np.zeros(4, np.float32), 4)),
    C("size_named_like_tensor", k_size_named_like_tensor, "def k_size_named_like_tensor",
      ("size name 'B' is also the name of parameter 'B'",)),
    C("size_named_like_constexpr", k_size_named_like_constexpr, "def k_size_named_like_constexpr",
      ("size name 'K'",), args=(np.zeros(4, np.float32), 4)),
    C("size_hides_T", k_size_hides_T, "def k_size_hides_T", ("would hide the kernel language module 'T'",)),
    C("size_named_range", k_size_named_range, "def k_size_named_range", ("keyword or builtin",)),
    C("shared_layout_on_lanes", k_shared_layout_on_lanes, "s = T.alloc_shared",
      ("shared-memory layout", "laneid", "register layouts")),
    C("shared_view_on_lanes", k_shared_view_on_lanes, "v = s.view", ("execution axes",)),
    C("local_over_512KB", k_local_over_limit, "big = T.alloc_local",
      ("local memory", "4194304 bytes", "at most 524288 bytes (512 KB)")),
    C("local_sum_over_512KB", k_local_sum_over_limit, "b = T.alloc_local", ("262144 bytes before it",)),
    C("string_annotation_align", k_string_annotation_align, "def k_string_annotation_align", ("'align'",)),
    C("nan_cast_to_int", k_nan_to_int, "T.cast(float('nan')", ("float('nan') has no int32 value",)),
    C("inf_to_int32", k_inf_to_int, "T.int32(float('inf'))", ("float('inf') has no int32 value",)),
    C("nan_stored_in_int", k_nan_stored_in_int, "A[0] = float(\"nan\")", ("float('nan') has no int32 value",)),
    C("int_of_nan", k_int_of_nan, "int(float(\"nan\"))", ("has no integer value",)),
    C("float_of_text", k_float_of_text, "float(\"one\")", ("float('one'): not a number",)),
    C("int64_beyond", k_int64_beyond, "T.int64(2**70)", ("does not fit in int64",)),
    C("add_2_pow_200", k_add_2_200, "2**200", ("an integer of 201 bits", "does not fit in int32")),
    C("5000_digit_constant", k_5000_digits, "10**5000", ("does not fit in int32", "bits")),
    C("5000_digit_index", k_index_5000_digits, "A[10**5000]", ("out of range for dimension 0",)),
    C("pow_explodes", k_pow_explodes, "2 ** 1000000000", ("too large", "65536 bits")),
    C("shift_explodes", k_shift_explodes, "1 << 1000000000000", ("too large",)),
    C("float16_1e10", k_float16_1e10, "T.float16(1e10)", ("out of range for float16", "float('inf')")),
    C("float32_1e300", k_float32_1e300, "T.float32(1e300)", ("out of range for float32",)),
    C("huge_int_to_float64", k_cast_huge_int_to_float, "2**2000", ("out of range for float64",)),
    C("axis_fraction", k_axis_fraction, "axis=1.5", ("axis must be 0, 1 or 2, got 1.5",)),
    C("axis_letter", k_axis_letter, "axis=\"x\"", ("axis must be 0, 1 or 2, got 'x'",)),
    C("axis_bool", k_axis_bool, "axis=True", ("axis must be 0, 1 or 2, got True",)),
    C("axis_float_one", k_axis_float_one, "axis=1.0", ("got 1.0",)),
    C("nested_unroll_explodes", k_nested_unroll, "for j in T.unroll(4096)", ("limit of 1,000,000", "16,777,216")),
    C("unroll_times_tuple_explodes", k_unroll_times_tuple, "for c in ROWS", ("limit of 1,000,000", "2,048,000")),
]

# 4. module-level construction: the error comes from the line that builds the layout or annotation
MODULE = [
    ("layout_zero_extent", lambda: S[(0, 4) : (4, 1)], LayoutError, "positive ints, got 0"),
    ("layout_negative_extent", lambda: S[(-2,) : (1,)], LayoutError, "got -2"),
    ("layout_float_extent", lambda: S[(2.5,) : (1,)], LayoutError, "got 2.5"),
    ("layout_negative_stride", lambda: S[(2, 2) : (-1, 2)], LayoutError, "must not be negative"),
    ("layout_float_stride", lambda: S[(2,) : (0.5,)], LayoutError, "ints or `value @ axis`"),
    ("layout_length_mismatch", lambda: S[(2, 2, 2) : (1, 2)], LayoutError, "3 extents but 2 strides"),
    ("layout_unknown_axis", lambda: S[(32,) : (1 @ Axis("lane"),)], LayoutError, "unknown execution axis 'lane'"),
    ("layout_axis_without_value", lambda: S[(32,) : (laneid,)], LayoutError, "`1 @ laneid`"),
    ("layout_float_axis_stride", lambda: S[(32,) : (0.5 @ laneid,)], LayoutError, "must be an int"),
    ("layout_missing_strides", lambda: S[(4,):], LayoutError, "with both sides"),
    ("layout_shape_built_directly", lambda: Shape((4, 0), (1, 4)), LayoutError, "got 0"),
    ("layout_axisstride_built_directly", lambda: AxisStride(1, "laneid"), LayoutError, "axis must be one of"),
    ("layout_view_dims_not_ints", lambda: TileLayout(S[(8,) : (1,)]).storage_span(["8"]), LayoutError,
     "static int extents"),
    ("tensor_align_keyword", lambda: T.Tensor((4,), "float32", align=16), TiledslError, "unknown keyword argument 'align'"),
    ("tensor_three_positional", lambda: T.Tensor((4,), "float32", 16), TiledslError, "takes 2 arguments, got 3"),
    ("tensor_shape_is_a_set", lambda: T.Tensor({4, 8}, "float32"), TiledslError, "must be a tuple"),
    ("tensor_negative_extent", lambda: T.Tensor((4, -1), "float32"), TiledslError, "got -1"),
    ("tensor_unknown_dtype", lambda: T.Tensor((4,), "float8"), TiledslError, "unknown dtype 'float8'"),
    ("tensor_bad_size_name", lambda: T.Tensor(("n m",), "float32"), TiledslError, "not a valid name"),
    ("tensor_missing_dtype", lambda: T.Tensor((4,)), TiledslError, "missing its dtype"),
    ("constexpr_called", lambda: T.constexpr(4), TiledslError, "without arguments"),
]
CASES += [C(name, action=fn, err=err, words=(words,)) for name, fn, err, words in MODULE]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_frontend2(case):
    run(case)
