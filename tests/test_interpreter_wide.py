"""Interpreter: forms gated to newer targets run when the kernel's target allows them (fma.rn.f32x2 on sm_100),
and mul.wide keeps the full product."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T


def f32x2_kernel(A: T.Tensor((4, 1), "uint64"), B: T.Tensor((4, 1), "uint64"), C: T.Tensor((4, 1), "uint64"),
                 D: T.Tensor((4, 1), "uint64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    a = T.alloc_local((4, 1), "uint64")
    b = T.alloc_local((4, 1), "uint64")
    c = T.alloc_local((4, 1), "uint64")
    T.cuda.tile.apply(T.ptx["ld.global.b64"], a, A)
    T.cuda.tile.apply(T.ptx["ld.global.b64"], b, B)
    T.cuda.tile.apply(T.ptx["ld.global.b64"], c, C)
    T.cuda.tile.apply(T.ptx["fma.rn.f32x2"], a, a, b, c)
    T.cuda.tile.apply(T.ptx["st.global.b64"], D, a)


def test_f32x2_fma_runs_for_sm100_and_is_refused_for_sm90():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    y = np.full((4, 2), 2, np.float32)
    z = np.ones((4, 2), np.float32)
    d = np.zeros((4, 1), np.uint64)
    tiledsl.jit(f32x2_kernel, interpret=True, target="sm_100")(x.view(np.uint64), y.view(np.uint64),
                                                                z.view(np.uint64), d)
    np.testing.assert_array_equal(d.view(np.float32).reshape(4, 2), x * 2 + 1)
    with pytest.raises(tiledsl.CompilationError, match="sm_100"):
        tiledsl.jit(f32x2_kernel, interpret=True)(x.view(np.uint64), y.view(np.uint64), z.view(np.uint64), d)


def mul_wide_kernel(A: T.Tensor((4, 1), "int32"), B: T.Tensor((4, 1), "int64")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    a = T.alloc_local((4, 1), "int32")
    d = T.alloc_local((4, 1), "int64")
    T.cuda.tile.apply(T.ptx["ld.global.s32"], a, A)
    T.cuda.tile.apply(T.ptx["mul.wide.s32"], d, a, a)
    T.cuda.tile.apply(T.ptx["st.global.s64"], B, d)


def test_mul_wide_keeps_the_full_product():
    a = np.array([[1], [-70000], [3], [2**31 - 1]], np.int32)
    b = np.zeros((4, 1), np.int64)
    tiledsl.jit(mul_wide_kernel, interpret=True)(a, b)
    np.testing.assert_array_equal(b, a.astype(np.int64) ** 2)
