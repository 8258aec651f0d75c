"""Bad input, round two (issue 14): arrays that are not what they look like, scalars out of their parameter's
range, grids beyond CUDA's limits on every path, and targets that are not targets."""
import numpy as np
import pytest

import tiledsl
from tiledsl import LaunchError, T
from tiledsl.core.target import Target
from badcase import Case, run

CE = tiledsl.CompilationError


def k_copy(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=4))
    t = T.cuda.thread_id()
    Y[t] = X[t]


def k_int(X: T.Tensor((4,), "int32"), Y: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=4))
    t = T.cuda.thread_id()
    Y[t] = X[t]


def k_store_in_branch(X: T.Tensor((4,), "float32"), Y: T.Tensor((4,), "float32"), flag: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=4))
    t = T.cuda.thread_id()
    for i in range(1):
        if flag > 0:
            Y[t] = X[t] + T.float32(i)


def k_scalars(Out: T.Tensor((1,), "float32"), f32: T.float32, f64: T.float64, n: T.int32, b: T.bool):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    Out[0] = f32


def k_f16(Out: T.Tensor((1,), "float16"), h: T.float16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    Out[0] = h


def k_bf16(Out: T.Tensor((1,), "bfloat16"), h: T.bfloat16):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    Out[0] = h


def k_grid_y_70000(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(1, 70000), block=32))
    A[0] = 1.0


def k_grid_x_2_31(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=2**31, block=32))
    A[0] = 1.0


def k_grid_z_65536(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(1, 1, 65536), block=(8, 8, 1)))
    A[0] = 1.0


def k_grid_mixed(A: T.Tensor(("n",), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(n, 65536), block=32))  # noqa: F821 - the named size
    A[0] = 1.0


def k_small(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=4))
    A[0] = 1.0


def f32(n=4):
    return np.zeros(n, np.float32)


def record_field(aligned: bool):
    rec = np.zeros(4, np.dtype([("a", "i2"), ("b", "f4")], align=aligned))
    return rec["b"]


def readonly(a):
    a.flags.writeable = False
    return a


def interp(fn):
    return tiledsl.jit(fn, interpret=True)


def call(fn, *args):
    return lambda: interp(fn)(*args)


def compile_with(fn, *args, **kw):
    return lambda: tiledsl.jit(fn).compile(*args, **kw)


def scalars(f32v=1.0, f64v=1.0, n=1, b=True):
    return call(k_scalars, f32(1), f32v, f64v, n, b)


def L(id, action, *words):
    return Case(id, action=action, err=LaunchError, words=words)


def TC(id, action, *words):
    return Case(id, action=action, err=CE, words=words)


CASES = [
    # arrays that are not what they look like
    L("big_endian_float32", call(k_copy, f32().astype(">f4"), f32()), "argument 'X' has non-native byte order"),
    L("big_endian_int32_compile", compile_with(k_int, np.zeros(4, ">i4"), np.zeros(4, np.int32)),
      "argument 'X' has non-native byte order (dtype >i4)"),
    L("big_endian_output", call(k_copy, f32(), f32().astype(">f4")), "argument 'Y' has non-native byte order"),
    L("structured_array", call(k_copy, np.zeros(4, [("a", "f4"), ("b", "f4")]), f32()),
      "argument 'X' has a structured dtype"),
    L("packed_record_field", call(k_copy, record_field(False), f32()),
      "argument 'X' has byte strides (6,) that are not multiples of its 4-byte element"),
    L("aligned_record_field", call(k_copy, record_field(True), f32()), "argument 'X' is not contiguous (strides (2,))"),
    L("object_dtype", call(k_copy, f32().astype(object), f32()),
      "argument 'X' has dtype object (an unsupported dtype), but the kernel declares float32"),
    L("datetime_dtype", call(k_copy, np.zeros(4, "M8[ns]"), f32()),
      "dtype datetime64[ns] (an unsupported dtype)"),
    L("timedelta_dtype", compile_with(k_copy, np.zeros(4, "m8[s]"), f32()),
      "dtype timedelta64[s] (an unsupported dtype)"),
    L("complex_dtype", call(k_copy, np.zeros(4, np.complex64), f32()),
      "dtype complex64 (an unsupported dtype)"),
    L("unicode_dtype", call(k_copy, np.array(["a", "b", "c", "d"]), f32()),
      "dtype <U1 (an unsupported dtype)"),
    L("read_only_output", call(k_copy, f32(), readonly(f32())),
      "argument 'Y' is read-only (numpy array with its writeable flag off), but the kernel stores to it"),
    L("read_only_output_stored_in_a_branch", call(k_store_in_branch, f32(), readonly(f32()), 1),
      "argument 'Y' is read-only"),
    L("output_over_a_bytes_buffer", call(k_copy, f32(), np.frombuffer(bytes(16), np.float32)),
      "argument 'Y' is read-only"),
    # scalars
    L("numpy_bool_for_int", scalars(n=np.True_), "argument 'n' is a bool (numpy.bool), but the kernel declares int32"),
    L("numpy_bool_for_float", scalars(f32v=np.False_), "argument 'f32' is a bool (numpy.bool)"),
    L("string_for_bool", scalars(b="True"), "argument 'b' must be a bool, got str"),
    L("numpy_float_for_bool", scalars(b=np.float64(1.0)), "argument 'b' must be a bool, got numpy.float64"),
    L("float32_given_1e300", scalars(f32v=1e300), "argument 'f32' = 1e+300 is out of range for float32"),
    L("float32_given_minus_3_5e38", scalars(f32v=-3.5e38), "'f32' = -3.5e+38 is out of range for float32"),
    L("float32_given_numpy_float64_1e39", scalars(f32v=np.float64(1e39)), "out of range for float32"),
    L("float64_given_huge_int", scalars(f64v=10**400), "'f64' = an int of 1329 bits is out of range for float64"),
    L("int32_given_int_past_digit_limit", scalars(n=10**5000), "'n' = an int of 16610 bits does not fit in int32"),
    L("float16_given_70000", call(k_f16, np.zeros(1, np.float16), 70000.0),
      "'h' = 70000.0 is out of range for float16"),
    L("bfloat16_given_1e39", call(k_bf16, np.zeros(1, np.uint16), 1e39), "out of range for bfloat16"),
    L("float32_compile_given_1e300", compile_with(k_scalars, f32(1), 1e300, 1.0, 1, True), "out of range for float32"),
    # grids and blocks beyond CUDA's limits, the same words on every path
    Case("device_entry_grid_y_70000", k_grid_y_70000, "grid=(1, 70000)",
         ("grid (1, 70000, 1) exceeds the device's limits (2^31-1, 65535, 65535)",)),
    Case("device_entry_grid_x_2_31", k_grid_x_2_31, "grid=2**31", ("grid (2147483648, 1, 1) exceeds",)),
    Case("device_entry_grid_z_65536", k_grid_z_65536, "grid=(1, 1, 65536)", ("grid (1, 1, 65536) exceeds",)),
    Case("device_entry_grid_mixed_y_65536", k_grid_mixed, "grid=(n, 65536)",
         ("grid dimension 1 is 65536; CUDA allows at most 65535",)),
    Case("device_entry_grid_y_on_interpreter", action=call(k_grid_y_70000, f32()), needle="grid=(1, 70000)",
         fn=k_grid_y_70000, words=("grid (1, 70000, 1) exceeds the device's limits",)),
    L("interpreter_call_grid_y_70000", lambda: interp(k_small)[(1, 70000), 4](f32()),
      "grid (1, 70000, 1) exceeds the device's limits (2^31-1, 65535, 65535)"),
    L("interpreter_callable_grid_too_big", lambda: interp(k_small)[lambda a: (1, 1, 70000), 4](f32()),
      "grid (1, 1, 70000) exceeds the device's limits"),
    L("interpreter_numpy_int_grid_too_big", lambda: interp(k_small)[np.int64(2**31), 4](f32()),
      "grid (2147483648, 1, 1) exceeds"),
    L("compile_grid_override_too_big", compile_with(k_small, f32(), grid=(1, 70000)), "grid (1, 70000, 1) exceeds"),
    L("interpreter_block_2048", lambda: interp(k_small)[1, (2048, 1)](f32()), "block (2048, 1, 1) has 2048 threads"),
    # targets that are not targets
    TC("jit_target_true", lambda: tiledsl.jit(target=True)(k_small), "unknown target True (bool)"),
    TC("jit_target_float", lambda: tiledsl.jit(target=9.0)(k_small), "unknown target 9.0 (float)"),
    TC("jit_target_sm_9x", lambda: tiledsl.jit(target="sm_9x")(k_small), "unknown target 'sm_9x'"),
    TC("jit_target_69", lambda: tiledsl.jit(target=69)(k_small), "target sm_69 is not supported (sm_70 or newer)"),
    TC("compile_target_1000", compile_with(k_small, f32(), target=1000), "unknown target sm_1000; tiledsl knows"),
    TC("compile_target_sm_999", compile_with(k_small, f32(), target="sm_999"), "unknown target sm_999"),
    TC("compile_target_sm_80a", compile_with(k_small, f32(), target="sm_80a"), "sm_80a does not exist"),
    TC("compile_target_list", compile_with(k_small, f32(), target=[90]), "unknown target [90] (list)"),
    TC("compile_target_bytes", compile_with(k_small, f32(), target=b"sm_90"), "unknown target b'sm_90' (bytes)"),
    TC("compile_target_huge_int", compile_with(k_small, f32(), target=10**5000), "unknown target"),
    TC("compile_target_arabic_digits", compile_with(k_small, f32(), target="sm_\u0669\u0660"), "unknown target"),
    TC("target_from_a_string_sm", lambda: Target("90"), "a target's SM is an int"),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_arrays_scalars_grids_targets(case):
    run(case)


def test_the_good_neighbours_still_work():
    """What these cases border on stays accepted: a read-only input, numpy bools, a native-order '=f4' array,
    the largest grid, a numpy-int grid, and a target spelled with numpy's int."""
    x, y = readonly(np.arange(4, dtype="=f4")), f32()
    interp(k_copy)(x, y)
    assert list(y) == [0, 1, 2, 3]
    out = f32(1)
    interp(k_scalars)(out, np.float32(3.5), 1.0, np.int32(2), np.True_)
    assert out[0] == 3.5
    interp(k_small)[(1, 65535, 1), (1, 1, 1)]
    interp(k_small)[np.int64(1), np.int32(4)](f32())
    assert tiledsl.jit(target=np.int64(80))(k_small).compile(f32()).sm == 80
