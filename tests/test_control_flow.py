"""while, break, continue and early return (issue 15) on the interpreter against numpy references; each kernel is
also compiled to PTX that ptxas accepts for sm_90 (tests/test_gpu_control.py runs them on the GPU)."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from control_kernels import CASES
from helpers import ptxas


@pytest.mark.parametrize("name,fn,make,ref", CASES, ids=[c[0] for c in CASES])
def test_interpreter_matches_reference(name, fn, make, ref):
    args = make()
    tiledsl.jit(fn, interpret=True)(*args)
    want = ref(*args)
    np.testing.assert_array_equal(args[-1], want[0])


@pytest.mark.parametrize("name,fn,make,ref", CASES, ids=[c[0] for c in CASES])
def test_ptx_passes_ptxas(name, fn, make, ref):
    ck = tiledsl.jit(fn).compile(*make(), target="sm_90")
    r = ptxas(ck.asm["ptx"], "sm_90")
    assert r.returncode == 0, r.stderr


def test_tile_ir_shows_the_new_statements():
    ck = tiledsl.jit(CASES[3][1]).compile(*CASES[3][2](), target="sm_90")
    text = ck.asm["tile"]
    for word in ("while ", "break", "continue", "return"):
        assert word in text, text


def test_existing_loops_keep_their_shape():
    """A loop without continue gets no extra step block (the emitted code of old kernels stays as it was)."""
    def k(A: T.Tensor((32,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        for i in range(4):
            A[T.cuda.thread_id()] += 1.0
    ck = tiledsl.jit(k).compile(np.zeros(32, np.float32), target="sm_90", )
    assert "for.step" not in ck.asm["llvm"] and "vprintf" not in ck.asm["ptx"]


def test_return_in_straight_line_code_is_dead_after():
    def k(A: T.Tensor((32,), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        t = T.cuda.thread_id()
        A[t] = 1
        return
        A[t] = 2  # noqa: F821 - unreachable on purpose
    a = np.zeros(32, np.int32)
    tiledsl.jit(k, interpret=True)(a)
    assert (a == 1).all()


def test_else_branch_binding_survives_a_returning_then_branch():
    def k(A: T.Tensor((32,), "int32"), B: T.Tensor((32,), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        t = T.cuda.thread_id()
        if t >= 20:
            return
        else:
            x = A[t] * 2
        B[t] = x
    a, b = np.arange(32, dtype=np.int32), np.full(32, -7, np.int32)
    tiledsl.jit(k, interpret=True)(a, b)
    assert b[:20].tolist() == [2 * i for i in range(20)] and (b[20:] == -7).all()
    assert ptxas(tiledsl.jit(k).compile(a, b, target="sm_90").asm["ptx"], "sm_90").returncode == 0


def test_while_false_is_folded_and_while_on_constexpr():
    def k(A: T.Tensor((32,), "int32"), K: T.constexpr):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        t = T.cuda.thread_id()
        n = 0
        while n < K:
            n += 1
        while False:
            n += 100
        A[t] = n
    a = np.zeros(32, np.int32)
    tiledsl.jit(k, interpret=True)(a, 5)
    assert (a == 5).all()


def test_barrier_after_a_partial_return_is_the_interpreters_error():
    def k(A: T.Tensor((64,), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
        t = T.cuda.thread_id()
        if t >= 32:
            return
        T.cuda.syncthreads()
        A[t] = 1
    with pytest.raises(tiledsl.KernelFault, match="barrier"):
        tiledsl.jit(k, interpret=True)(np.zeros(64, np.int32))


def test_continue_in_a_grid_loop_goes_to_the_next_point():
    def k(A: T.Tensor((32,), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        t = T.cuda.thread_id()
        s = 0
        for i, j in T.grid(4, 5):
            if (i + j + t) % 2 == 0:
                continue
            s += 1
        A[t] = s
    a = np.zeros(32, np.int32)
    tiledsl.jit(k, interpret=True)(a)
    want = [sum(1 for i in range(4) for j in range(5) if (i + j + t) % 2) for t in range(32)]
    assert a.tolist() == want
    assert ptxas(tiledsl.jit(k).compile(a, target="sm_90").asm["ptx"], "sm_90").returncode == 0


def test_debug_checks_a_while_condition_on_every_iteration():
    def k(A: T.Tensor((8,), "int32"), Out: T.Tensor((1,), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        i = 0
        while A[i] != 0:
            i += 1
        Out[0] = i
    a = np.ones(8, np.int32)
    with pytest.raises(tiledsl.KernelFault, match="out-of-bounds"):
        tiledsl.jit(k, interpret=True, debug=True)(a, np.zeros(1, np.int32))


def test_continue_in_while_and_break_in_a_runtime_loop_inside_unroll():
    def k(A: T.Tensor((64,), "int32"), Out: T.Tensor((64, 2), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
        t = T.cuda.thread_id()
        i = 0
        odd = 0
        while i < t:
            i += 1
            if i % 2 == 0:
                continue
            odd += 1
        Out[t, 0] = odd
        hits = 0
        for u in T.unroll(3):
            for j in range(64):
                if A[j] == t + u:
                    break
                hits += 1
        Out[t, 1] = hits
    a = np.random.default_rng(5).permutation(64).astype(np.int32)
    out = np.zeros((64, 2), np.int32)
    tiledsl.jit(k, interpret=True)(a, out)
    pos = {int(v): p for p, v in enumerate(a)}
    want = [[(t + 1) // 2, sum(pos.get(t + u, 64) for u in range(3))] for t in range(64)]
    assert out.tolist() == want
    assert ptxas(tiledsl.jit(k).compile(a, out, target="sm_90").asm["ptx"], "sm_90").returncode == 0
