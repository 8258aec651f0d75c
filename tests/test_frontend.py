"""Front end: Python source -> tile IR (checked through the printed IR and through ptxas)."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.ir import nodes as ir
from tiledsl.compiler import front
from tiledsl.ir import printer as tiledsl_printer
from tiledsl.layout import S, TileLayout, laneid
from helpers import ptxas

SCALE = 3
LAY = TileLayout(S[(2, 4):(1, 2)])


@tiledsl.jit
def saxpy(X: T.Tensor(("N",), "float32"), Y: T.Tensor(("N",), "float32"), a: T.float32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=(N + 127) // 128, block=128))  # noqa: F821
    i = T.cuda.block_id() * 128 + T.cuda.thread_id()
    if i < N:  # noqa: F821
        Y[i] = a * X[i] + Y[i]


@tiledsl.jit
def loops(A: T.Tensor((8, 8), "int32"), n: T.int32, K: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    acc = 0
    for i in range(n):
        for j in T.unroll(K):
            acc += A[i % 8, j] * SCALE
    if acc > 10:
        acc = acc - 1
    elif acc < -10:
        acc = -acc
    else:
        acc = T.max(acc, 0)
    A[0, 0] = acc if n > 2 else 7


def kernel_ir(jf, *cargs, **kw):
    k, p = front(jf.fn, kw)
    return k, p


def test_tile_ir_keeps_locations():
    k, _ = kernel_ir(saxpy)
    stmts = list(ir.walk_stmts(k.body))
    assert all(s.loc is not None and s.loc.line > 0 for s in stmts)
    store = [s for s in stmts if isinstance(s, ir.Store)][0]
    assert "Y[i] = a * X[i] + Y[i]" in store.loc.text


def test_named_sizes_become_runtime_parameters_and_grid_expression():
    ck = saxpy.compile(np.zeros(1000, np.float32), np.zeros(1000, np.float32), 2.0, target="sm_90")
    assert [s.name for s in ck.signature.slots] == ["X", "Y", "a", "N"]
    assert ck.signature.grid[0] == ("floordiv", ("add", ("var", "N"), 127), 128)
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0
    # no contraction: a * x + y stays a multiply and an add
    assert "fma" not in ck.asm["ptx"] and "mul.rn.f32" in ck.asm["ptx"].replace("mul.f32", "mul.rn.f32")


def test_constexpr_unroll_runtime_loop_and_branches():
    A = np.zeros((8, 8), np.int32)
    ck = loops.compile(A, 3, 4, target="sm_90")
    text = ck.asm["tile"]
    assert text.count("for ") == 1                      # T.unroll(K) unrolled at compile time
    assert text.count("A<int32>[") >= 4
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0
    ck2 = loops.compile(A, 3, 2, target="sm_90")
    assert ck2 is not ck and ck2.asm["tile"].count("A<int32>[") < text.count("A<int32>[")


def test_globals_are_constants_and_layouts_resolve():
    k, p = kernel_ir(loops, K=2)
    assert "SCALE" in p.globals_read
    assert "3" in tiledsl_printer.kernel_str(k)


def test_python_floor_semantics_for_signed_division():
    @tiledsl.jit
    def divs(A: T.Tensor((4,), "int32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        x = A[0]
        A[1] = x // 3
        A[2] = x % 3
        A[3] = -7 // 2
    ck = divs.compile(np.zeros(4, np.int32), target="sm_90")
    assert "-4" in ck.asm["tile"]                      # constant folding uses Python's floor division


def test_views_and_layout_storage():
    @tiledsl.jit
    def views(Out: T.Tensor((8,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        buf = T.alloc_local((8,), "float32")
        v = buf.view(2, 4, layout=LAY)
        for i in range(8):
            buf[i] = T.cast(i, "float32")
        bits = buf.view(dtype="uint32")
        Out[0] = T.cast(bits[1], "float32")
        Out[1] = v[1, 3]
    ck = views.compile(np.zeros(8, np.float32), target="sm_90")
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0


def test_layout_locate_matches_seed_a_map():
    la = TileLayout(S[(1, 2, 2, 8, 2, 4) : (8, 4, 1, 4 @ laneid, 2, 1 @ laneid)])
    for kk in range(2):
        for row in range(16):
            for col in range(8):
                reg, ax = la.locate((0, kk, row, col), (1, 2, 16, 8))
                assert reg == 4 * kk + row // 8 + 2 * (col // 4)
                assert ax["laneid"] == 4 * (row % 8) + col % 4


MODE = ""


@tiledsl.jit
def not_of_constants(A: T.Tensor((4,), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = 1 if not MODE else 2          # a str global: Python's truthiness, as `if MODE:` gives
    A[1] = 1 if not (1, 2) else 2
    A[2] = 1 if not None else 2
    A[3] = 1 if SCALE == "three" else 0    # a number and a str compare as in Python


def test_not_of_compile_time_constants_follows_python():
    a = np.zeros(4, np.int32)
    tiledsl.jit(not_of_constants.fn, interpret=True)(a)
    assert a.tolist() == [1, 2, 1, 0]
