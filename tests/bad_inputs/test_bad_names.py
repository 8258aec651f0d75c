"""Names that mean two things (issue 33): a size name the body reads that is also a global, closure variable or
builtin is refused at its annotation; a kernel that changes a module global, or reads a name before the assignment
that makes it local, is refused at that read, as Python's UnboundLocalError would. Each a CompilationError at the
user's line naming both meanings."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from badcase import Case, run

LC = T.cuda.LaunchConfig
n = 4096
G = 3
STEP = 2


def k_size_hides_global(A: T.Tensor(("n", 4), "float32")):
    T.device_entry(launch=LC(grid=1, block=1))
    A[0, 0] = T.cast(n, "float32")


def make_size_hides_closure():
    rows = 8

    def k_size_hides_closure(A: T.Tensor(("rows",), "int32")):
        T.device_entry(launch=LC(grid=1, block=1))
        A[0] = rows
    return k_size_hides_closure


def k_size_hides_builtin(A: T.Tensor(("sum",), "int32")):
    T.device_entry(launch=LC(grid=1, block=1))
    A[0] = sum


def k_augmented_global(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=1))
    G += A[1]
    A[0] = G


def k_read_then_assign_global(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=1))
    A[0] = STEP
    STEP = 5
    A[1] = STEP


def make_augmented_closure():
    count = 1

    def k_augmented_closure(A: T.Tensor((4,), "int32")):
        T.device_entry(launch=LC(grid=1, block=1))
        count += A[0]
        A[1] = count
    return k_augmented_closure


def k_loop_target_shadows_global(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=1))
    A[0] = G
    for G in range(4):
        A[G] = 1


@tiledsl.inline
def helper_bumps_global(A):
    STEP += 1
    A[0] = STEP


def k_helper_bumps_global(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=LC(grid=1, block=1))
    helper_bumps_global(A)


CE = tiledsl.CompilationError
CASES = [
    Case("size_hides_global", k_size_hides_global, 'def k_size_hides_global(A: T.Tensor(("n", 4), "float32")):',
         ("size name 'n'", "module global 'n'", "reads at line")),
    Case("size_hides_closure", make_size_hides_closure(), "def k_size_hides_closure(",
         ("size name 'rows'", "closure variable 'rows'")),
    Case("size_hides_builtin", k_size_hides_builtin, "def k_size_hides_builtin(",
         ("size name 'sum'", "Python builtin 'sum'")),
    Case("augmented_global", k_augmented_global, "G += A[1]",
         ("'G' is read before it is assigned", "UnboundLocalError", "module global 'G'", "cannot change")),
    Case("read_then_assign_global", k_read_then_assign_global, "A[0] = STEP",
         ("'STEP' is read before it is assigned", "assigns 'STEP' at line")),
    Case("augmented_closure", make_augmented_closure(), "count += A[0]",
         ("'count' is read before it is assigned", "UnboundLocalError")),
    Case("loop_target_shadows_global", k_loop_target_shadows_global, "A[0] = G",
         ("'G' is read before it is assigned",)),
    Case("helper_bumps_global", k_helper_bumps_global, None, ("'STEP' is read before it is assigned",)),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_names(case):
    run(case)


def test_helper_case_points_at_the_helper_line():
    err = run(CASES[-1])
    assert "STEP += 1" in str(err)


def test_what_python_allows_still_compiles():
    """A global read and never assigned, a local assigned before it is read (shadowing a global, as Python
    allows), and a size name no global or builtin shares."""
    def k(A: T.Tensor(("rows", 4), "int32")):
        T.device_entry(launch=LC(grid=1, block=1))
        G = 1
        A[0, 0] = G + STEP + rows
    tiledsl.jit(k).compile(np.zeros((2, 4), np.int32), target="sm_90")
