"""Bad input for issue 15's control flow and T.device_print: each refusal is a CompilationError at the user's line
(and the missing launch is a LaunchError naming both ways to give one)."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from badcase import Case, run

LC = T.cuda.LaunchConfig
CE = tiledsl.CompilationError


def k_break_in_unroll(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i in T.unroll(4):
        if A[i] > 0:
            break


def k_continue_in_tuple_loop(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i in (0, 1, 2):
        continue


def k_break_in_grid(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i, j in T.grid(2, 2):
        if A[i] == j:
            break



@tiledsl.inline
def helper_loop_break(A, i):
    for j in T.unroll(2):
        break


def k_helper_static_break(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i in range(4):
        helper_loop_break(A, i)


@tiledsl.inline
def helper_return_early(A, i):
    if A[i] > 0:
        return
    A[i] = 1


def k_helper_early_return(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    helper_return_early(A, 0)


def k_return_value_in_loop(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i in range(4):
        return 1


def k_while_else(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    i = 0
    while i < 4:
        i += 1
    else:
        A[0] = i


def k_for_else(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i in range(4):
        A[i] = 0
    else:
        A[0] = 1


def k_while_true_forever(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    while True:
        A[0] = 1


def k_while_on_tensor(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    while A:
        A[0] = 0


def k_while_on_layout_tuple(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    while A.shape:
        A[0] = 0


def k_read_after_while(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    i = 0
    while i < 4:
        last = A[i]
        i += 1
    A[0] = last


def k_read_after_break_loop(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i in range(4):
        if A[i] == 0:
            break
        seen = A[i]
    A[0] = seen


def k_read_after_continue_loop(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i in range(4):
        if A[i] == 0:
            continue
        seen = A[i]
    A[1] = seen


def k_read_after_if_break(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    for i in range(4):
        if A[i] == 0:
            got = i
            break
        A[2] = got


def k_while_type_change(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    x = 0
    while x < 10:
        x = 1.5


def k_print_nonliteral_fmt(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    fmt = "%d\n"
    T.device_print(fmt, A[0])


def k_print_value_as_fmt(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print(A[0])


def k_print_no_args(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print()


def k_print_too_few(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%d %d\n", A[0])


def k_print_too_many(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%d\n", A[0], A[1])


def k_print_d_float(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%d\n", A[0])


def k_print_f_int(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%f\n", A[0])


def k_print_d_int64(A: T.Tensor((4,), "int64")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%d\n", A[0])


def k_print_ld_int32(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%ld\n", A[0])


def k_print_s(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%s\n", A[0])


def k_print_star(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%*d\n", 4, A[0])


def k_print_lone_percent(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("100%")


def k_print_tensor(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%d\n", A)


def k_print_keyword(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%d\n", A[0], end="")


def k_print_c_int64(A: T.Tensor((4,), "int64")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%c", A[0])


def k_print_hd(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=4))
    T.device_print("%hd", A[0])


def k_no_launch(A: T.Tensor((4,), "int32")):
    A[T.cuda.thread_id()] = 1


def _no_launch_interpreted():
    tiledsl.jit(k_no_launch, interpret=True)(np.zeros(4, np.int32))


def _no_launch_gpu_call():
    # a kernel with no launch is refused before any device is looked for
    from tiledsl.abi.check import launch_dims, check_call
    from tiledsl.abi.signature import KernelSignature
    sig = tiledsl.jit(k_no_launch).compile(np.zeros(4, np.int32), target="sm_90").signature
    values = [np.zeros(4, np.int32)]
    launch_dims(sig, check_call(sig, values, gpu=False), None, ["A"], values)


CASES = [
    Case("break_in_unroll", k_break_in_unroll, "break", ("'break' in a compile-time loop", "range(...)")),
    Case("continue_in_tuple_loop", k_continue_in_tuple_loop, "continue", ("'continue' in a compile-time loop",)),
    Case("break_in_grid", k_break_in_grid, "break", ("several dimensions (T.grid)",)),
    Case("helper_static_break", k_helper_static_break, None, ("'break' in a compile-time loop",)),
    Case("helper_early_return", k_helper_early_return, None, ("a helper may only return as its last",)),
    Case("return_value_in_loop", k_return_value_in_loop, "return 1", ("cannot return a value",)),
    Case("while_else", k_while_else, "A[0] = i", ("while/else is not supported",)),
    Case("for_else", k_for_else, "for i in range(4):", ("for/else is not supported",)),
    Case("while_true_forever", k_while_true_forever, "while True:", ("never ends", "'break' or 'return'")),
    Case("while_on_tensor", k_while_on_tensor, "while A:", ("a while condition must be a scalar",)),
    Case("while_on_shape_tuple", k_while_on_layout_tuple, "while A.shape:", ("must be a scalar",)),
    Case("read_after_while", k_read_after_while, "A[0] = last", ("'last' may be unassigned", "while loop")),
    Case("read_after_break_loop", k_read_after_break_loop, "A[0] = seen", ("'seen' may be unassigned",
                                                                           "left early")),
    Case("read_after_continue_loop", k_read_after_continue_loop, "A[1] = seen", ("'seen' may be unassigned",)),
    Case("read_after_if_break", k_read_after_if_break, "A[2] = got", ("'got' may be unassigned",)),
    Case("while_type_change", k_while_type_change, "x = 1.5", ("1.5 is not an integer", "int32")),
    Case("print_nonliteral_fmt", k_print_nonliteral_fmt, "T.device_print(fmt, A[0])", ("must be a literal string",)),
    Case("print_value_as_fmt", k_print_value_as_fmt, "T.device_print(A[0])", ("must be a literal string",)),
    Case("print_no_args", k_print_no_args, "T.device_print()", ("needs a format string",)),
    Case("print_too_few", k_print_too_few, 'T.device_print("%d %d', ("2 conversions but 1 value was given",)),
    Case("print_too_many", k_print_too_many, "T.device_print(", ("1 conversion but 2 values were given",)),
    Case("print_d_float", k_print_d_float, "T.device_print(", ("'%d' needs an integer value, got float32",)),
    Case("print_f_int", k_print_f_int, "T.device_print(", ("'%f' needs a float value, got int32",)),
    Case("print_d_int64", k_print_d_int64, "T.device_print(", ("'%ld'", "int64")),
    Case("print_ld_int32", k_print_ld_int32, "T.device_print(", ("prints a 64-bit int but the value is int32",)),
    Case("print_s", k_print_s, "T.device_print(", ("%s needs a string",)),
    Case("print_star", k_print_star, "T.device_print(", ("'*' are not supported",)),
    Case("print_lone_percent", k_print_lone_percent, "T.device_print(", ("lone '%'",)),
    Case("print_tensor", k_print_tensor, "T.device_print(", ("prints scalar numbers", "buffer view")),
    Case("print_keyword", k_print_keyword, "T.device_print(", ("no keyword arguments",)),
    Case("print_c_int64", k_print_c_int64, "T.device_print(", ("at most 32 bits",)),
    Case("print_hd", k_print_hd, "T.device_print(", ("length modifier 'h'",)),
    Case("no_launch_interpreted", action=_no_launch_interpreted, err=tiledsl.LaunchError,
         words=("has no launch configuration", "kernel[grid, block]", "T.device_entry(launch=")),
    Case("no_launch_checker", action=_no_launch_gpu_call, err=tiledsl.LaunchError,
         words=("kernel 'k_no_launch' has no launch configuration",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_control(case):
    run(case)
