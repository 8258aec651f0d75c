"""Per-dimension bounds (issue 33): `X[r, 64]` in a 64-wide row is a KernelFault naming the line, block, thread,
index and dimension on the interpreter, and a trap with its own site under debug=True, instead of a read of the
next row that the whole-buffer check lets pass. Indices whose range the front end proves get no check."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from helpers import ptxas

LC = T.cuda.LaunchConfig


def row_sum(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4,), "float32"), w: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    r = T.cuda.thread_id()
    acc = 0.0
    for c in range(w):
        acc += X[r, c]
    Out[r] = acc


def row_write(X: T.Tensor(("M", "N"), "float32"), c: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    X[T.cuda.thread_id(), c] = 1.0


def shifted(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4, 64), "float32"), s: T.int32):
    T.device_entry(launch=LC(grid=1, block=64))
    j = T.cuda.thread_id()
    for r in range(4):
        Out[r, j] = X[r, j - s]


def through_views(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4,), "float32"), s: T.int32, j: T.int32):
    T.device_entry(launch=LC(grid=1, block=4))
    r = T.cuda.thread_id()
    row = X[r, :]
    part = X[r, s : s + 8]
    Out[r] = row[j] + part[j - 56]


def shared_tile(X: T.Tensor((8, 32), "float32"), k: T.int32):
    T.device_entry(launch=LC(grid=1, block=32))
    t = T.cuda.thread_id()
    sm = T.alloc_shared((8, 32), "float32")
    for r in range(8):
        sm[r, t] = X[r, t]
    T.cuda.syncthreads()
    X[0, t] = sm[1, t + k]


def run(fn, *args):
    tiledsl.jit(fn, interpret=True)(*args)


def fault(fn, *args) -> str:
    with pytest.raises(tiledsl.KernelFault) as ei:
        run(fn, *args)
    return str(ei.value)


def test_index_past_a_row_is_a_fault_naming_index_and_dimension():
    x = np.ones((4, 64), np.float32)
    out = np.zeros(4, np.float32)
    run(row_sum, x, out, 64)
    assert out.tolist() == [64.0] * 4
    msg = fault(row_sum, x, out, 65)
    assert f"{__file__}:" in msg and "acc += X[r, c]" in msg
    assert "index c is 64, outside dimension 1 of X[4, 64]" in msg and "(extent 64)" in msg
    assert "block (0, 0, 0), thread (0, 0, 0)" in msg          # the first thread, not only the last row's


def test_store_and_named_extent():
    x = np.zeros((4, 16), np.float32)
    run(row_write, x, 15)
    assert x[:, 15].tolist() == [1.0] * 4
    msg = fault(row_write, x, 16)
    assert "out-of-bounds write of 'X'" in msg and "index c is 16, outside dimension 1" in msg
    assert "(extent 16)" in msg


def test_negative_index_reads_the_row_before():
    x = np.ones((4, 64), np.float32)
    out = np.zeros((4, 64), np.float32)
    run(shifted, x, out, 0)
    msg = fault(shifted, x, out, 1)
    assert "index j - s is -1, outside dimension 1" in msg and "thread (0, 0, 0)" in msg


def test_views_check_each_level():
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    out = np.zeros(4, np.float32)
    run(through_views, x, out, 56, 63)
    assert out.tolist() == [x[r, 63] + x[r, 63] for r in range(4)]
    msg = fault(through_views, x, out, 56, 64)                  # row[64]: the row view's own dimension
    assert "index j is 64, outside dimension 0 of X[4, 64]:float32[r.1, 0:+64]" in msg
    msg = fault(through_views, x, out, 60, 63)                  # part[7] is X[r, 67]: the parent's dimension
    assert "outside dimension 1 of X[4, 64]" in msg and "is 67" in msg


def test_shared_memory_rows():
    x = np.ones((8, 32), np.float32)
    run(shared_tile, x, 0)
    msg = fault(shared_tile, x, 1)
    assert "out-of-bounds read of 'sm'" in msg and "index t + k is 32, outside dimension 1 of sm[8, 32]" in msg
    assert "thread (31, 0, 0)" in msg


def checks_of(fn, *args):
    from tiledsl.ir import nodes as ir
    ck = tiledsl.jit(fn).compile(*args, target="sm_90")
    found = []

    def walk(e):
        if isinstance(e, ir.Load):
            found.extend(e.checks)
            walk(e.offset)
        for f in ("a", "b", "cond"):
            if isinstance(getattr(e, f, None), ir.Expr):
                walk(getattr(e, f))
    for s in ir.walk_stmts(ck.expanded_ir.body):
        if isinstance(s, ir.Store):
            found.extend(s.checks)
            walk(s.value)
        elif isinstance(s, ir.Assign):
            walk(s.value)
    return found


def proved(A: T.Tensor(("M", 32), "float32"), C: T.Tensor(("M", "N"), "float32")):
    T.device_entry(launch=LC(grid=1, block=128))
    lane = T.cuda.lane_id()
    r = T.alloc_local((16,), "float32")
    for kk, q in T.grid(4, 4):
        r[kk * 4 + q] = A[T.cuda.warp_id() * 16 + lane // 4, kk * 8 + lane % 4 + 4 * (q // 2)]
    for q in range(4):
        C[lane, T.cuda.block_id(0) * 64 + q] = r[q]


def test_proved_indices_carry_no_check():
    """The benchmark GEMM's reads (T.grid indices, lane arithmetic) are proved in range: no run-time cost; the
    store's column, which depends on the block id and a run-time extent, keeps its check."""
    checks = checks_of(proved, np.zeros((64, 32), np.float32), np.zeros((64, 64), np.float32))
    assert [(c.text, c.dim, c.low, c.high) for c in checks] == [("T.cuda.block_id(0) * 64 + q", 1, True, True)]


def moving_column(X: T.Tensor((4, 64), "float32"), Out: T.Tensor((4,), "float32")):
    T.device_entry(launch=LC(grid=1, block=4))
    r = T.cuda.thread_id()
    c = T.cuda.thread_id()
    acc = 0.0
    for k in range(2):
        acc += X[r, c]
        c = c + 62
    Out[r] = acc


def test_a_variable_assigned_again_later_is_not_trusted():
    """`c` is the thread id when the read is parsed, but the loop adds 62 after it: its range is proved only from
    what holds on every iteration, so the second iteration's X[2, 64] is caught."""
    msg = fault(moving_column, np.ones((4, 64), np.float32), np.zeros(4, np.float32))
    assert "index c is 64, outside dimension 1" in msg and "thread (2, 0, 0)" in msg


def test_one_dimensional_buffers_keep_the_whole_buffer_check_only():
    def k(A: T.Tensor((32,), "float32"), i: T.int32):
        T.device_entry(launch=LC(grid=1, block=32))
        A[i + T.cuda.thread_id()] = A[i]
    assert checks_of(k, np.zeros(32, np.float32), 0) == []


def test_debug_mode_traps_per_dimension():
    ck = tiledsl.jit(row_sum, debug=True).compile(np.ones((4, 64), np.float32), np.zeros(4, np.float32), 64,
                                                  target="sm_90")
    sites = ck.metadata["debug_sites"]
    dim = [s for s in sites if "dimension" in s]
    assert len(dim) == 1 and dim[0].startswith(f"{__file__}:")
    assert "index c outside dimension 1 of X[4, 64]" in dim[0] and dim[0].endswith("the index is")
    assert "st.global.b32 [%rd" in ck.asm["ptx"] and "+12]" in ck.asm["ptx"]      # the index value recorded
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0
    plain = tiledsl.jit(row_sum).compile(np.ones((4, 64), np.float32), np.zeros(4, np.float32), 64, target="sm_90")
    assert "trap" not in plain.asm["expanded"]


@pytest.mark.gpu
def test_debug_mode_on_the_gpu():
    torch = pytest.importorskip("torch")
    x = torch.ones((4, 64), device="cuda")
    out = torch.zeros(4, device="cuda")
    k = tiledsl.jit(row_sum, debug=True)
    k(x, out, 64)
    torch.cuda.synchronize()
    with pytest.raises(tiledsl.KernelFault) as ei:
        k(x, out, 65)
    msg = str(ei.value)
    assert "index c outside dimension 1" in msg and "the index is 64" in msg and "thread " in msg
