"""Kernels that read or write where they did not mean to (issue 33), each stopped with the user's line named:
an index past its own dimension (which lands inside the buffer, in the next row), a guard written after the read
it should guard, a tensor map whose base the TMA unit cannot take, and wgmma/setmaxnreg for a target without them.
The run-time cases are KernelFaults on the interpreter naming the line, block, thread, index and dimension."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from badcase import Case, run

LC = T.cuda.LaunchConfig
KF = tiledsl.KernelFault


def k_row_past_end(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4,), "float32"), c: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    Out[T.cuda.thread_id()] = X[T.cuda.thread_id(), c]


def k_row_before_start(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4,), "float32"), c: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    r = T.cuda.thread_id() + 1
    Out[r - 1] = X[r, c - 1]


def k_store_past_row(X: T.Tensor(("M", "N"), "float32"), c: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    X[T.cuda.thread_id(), c] = 0.0


def k_three_dims(X: T.Tensor((2, 4, 8), "int32"), Out: T.Tensor((1,), "int32"), j: T.int32):
    T.device_entry(launch=LC(grid=1, block=1))
    Out[0] = X[1, j, 0]


def k_row_view(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4,), "float32"), j: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    row = X[T.cuda.thread_id(), :]
    Out[T.cuda.thread_id()] = row[j]


def k_window_past_row(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4,), "float32"), s: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    win = X[T.cuda.thread_id(), s : s + 8]
    Out[T.cuda.thread_id()] = win[7]


def k_shared_row(X: T.Tensor((4, 32), "float32"), k: T.int32):
    T.device_entry(launch=LC(grid=1, block=32))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((4, 32), "float32")
    sm[0, t] = 1.0
    sm[1, t] = 2.0
    T.cuda.syncthreads()
    X[0, t] = sm[0, t + k]


def k_bits_view(X: T.Tensor((4, 8), "uint32"), Out: T.Tensor((4,), "uint32"), j: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    h = X.view(dtype="uint16")
    Out[T.cuda.thread_id()] = T.cast(h[T.cuda.thread_id(), j], "uint32")


def k_guard_after_read(X: T.Tensor((32,), "float32"), Out: T.Tensor((1,), "int32"), n: T.int32):
    T.device_entry(launch=LC(grid=1, block=1))
    i = 0
    while X[i] >= 0.0 and i < n:
        i += 1
    Out[0] = i


def k_select_reads_both(X: T.Tensor((4, 8), "float32"), Out: T.Tensor((4,), "float32"), j: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    r = T.cuda.thread_id()
    Out[r] = X[r, j] if j >= 0 else X[r, j + 8]


def interpreted(fn, *args):
    return lambda: tiledsl.jit(fn, interpret=True)(*args)


def zeros(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def _misaligned_map():
    """A T.TensorMap argument 2 bytes past a 16-byte boundary: the GPU's encoder refuses it; so does the
    interpreter, through the same checker."""
    ann = T.TensorMap((64, 64), "float16", box=(8, 8))

    def k_map(A: ann, Out: T.Tensor((4,), "float32")):
        T.device_entry(launch=LC(grid=1, block=32))
        Out[0] = 1.0
    buf = np.zeros(64 * 64 + 16, np.float16)
    start = (-buf.ctypes.data % 16) // 2 + 1                   # 2 bytes past an aligned address
    a = buf[start:start + 64 * 64].reshape(64, 64)
    assert a.ctypes.data % 16 == 2
    tiledsl.jit(k_map, interpret=True)(a, zeros(4))


def k_wgmma_fence(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], scope="warpgroup")


def k_setmaxnreg(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    T.cuda.tile.apply(T.ptx["setmaxnreg.inc.sync.aligned.u32"], 232, scope="warpgroup")


ROW = ("out-of-bounds read of 'X'",)
CASES = [
    Case("row_past_end", k_row_past_end, "Out[T.cuda.thread_id()] = X[T.cuda.thread_id(), c]",
         ROW + ("index c is 64", "dimension 1 of X[4, 64]", "(extent 64)", "thread (0, 0, 0)"), err=KF,
         action=interpreted(k_row_past_end, zeros(4, 64), zeros(4), 64)),
    Case("row_before_start", k_row_before_start, "Out[r - 1] = X[r, c - 1]",
         ROW + ("index c - 1 is -1", "dimension 1"), err=KF,
         action=interpreted(k_row_before_start, zeros(4, 64), zeros(4), 0)),
    Case("store_past_row", k_store_past_row, "X[T.cuda.thread_id(), c] = 0.0",
         ("out-of-bounds write of 'X'", "index c is 16", "(extent 16)"), err=KF,
         action=interpreted(k_store_past_row, zeros(4, 16), 16)),
    Case("middle_dimension", k_three_dims, "Out[0] = X[1, j, 0]",
         ROW + ("index j is 4", "dimension 1 of X[2, 4, 8]"), err=KF,
         action=interpreted(k_three_dims, zeros(2, 4, 8, dtype=np.int32), zeros(1, dtype=np.int32), 4)),
    Case("row_view", k_row_view, "Out[T.cuda.thread_id()] = row[j]",
         ROW + ("index j is 64", "dimension 0 of X[4, 64]:float32[", ":+64]"), err=KF,
         action=interpreted(k_row_view, zeros(4, 64), zeros(4), 64)),
    Case("window_past_row", k_window_past_row, "Out[T.cuda.thread_id()] = win[7]",
         ROW + ("is 64", "dimension 1 of X[4, 64]"), err=KF,
         action=interpreted(k_window_past_row, zeros(4, 64), zeros(4), 57)),
    Case("shared_row", k_shared_row, "X[0, t] = sm[0, t + k]",
         ("out-of-bounds read of 'sm'", "index t + k is 32", "dimension 1 of sm[4, 32]", "thread (31, 0, 0)"),
         err=KF, action=interpreted(k_shared_row, zeros(4, 32), 1)),
    Case("bits_view", k_bits_view, "Out[T.cuda.thread_id()] = T.cast(h[T.cuda.thread_id(), j], \"uint32\")",
         ROW + ("index j is 16", "dimension 1 of X[4, 8]:uint32.view(uint16)"), err=KF,
         action=interpreted(k_bits_view, zeros(4, 8, dtype=np.uint32), zeros(4, dtype=np.uint32), 16)),
    Case("guard_after_read", k_guard_after_read, "while X[i] >= 0.0 and i < n:",
         ROW + ("element offset 32",), err=KF,
         action=interpreted(k_guard_after_read, np.ones(32, np.float32), zeros(1, dtype=np.int32), 32)),
    Case("select_reads_skipped_side", k_select_reads_both, "Out[r] = X[r, j] if j >= 0 else X[r, j + 8]",
         ROW + ("index j is 8", "dimension 1 of X[4, 8]"), err=KF,
         action=interpreted(k_select_reads_both, zeros(4, 8), zeros(4), 8)),
    Case("tensor_map_misaligned", action=_misaligned_map, err=tiledsl.LaunchError,
         words=("argument 'A'", "not 16-byte aligned", "tensor map")),
    Case("wgmma_sm80", k_wgmma_fence, 'T.cuda.tile.apply(T.ptx["wgmma.fence.sync.aligned"], scope="warpgroup")',
         ("needs the arch-specific target sm_90a", "the target is sm_80"), target="sm_80"),
    Case("setmaxnreg_sm80", k_setmaxnreg, "T.cuda.tile.apply(T.ptx[\"setmaxnreg",
         ("needs the arch-specific target sm_90a", "the target is sm_80"), target="sm_80"),
]


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_bad_misreads(case):
    run(case)


def test_the_same_kernels_run_in_bounds():
    """Each faulting kernel above is a correct kernel given in-bounds values: the checks refuse only the misread."""
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    out = zeros(4)
    interpreted(k_row_past_end, x, out, 63)()
    assert out.tolist() == x[:, 63].tolist()
    interpreted(k_window_past_row, x, out, 56)()
    assert out.tolist() == x[:, 63].tolist()
    interpreted(k_select_reads_both, x[:, :8].copy(), out, -3)()
    assert out.tolist() == x[:, 5].tolist()
