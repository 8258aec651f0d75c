"""@tiledsl.inline helpers: expanded at the call site, their own names and lines, recompiled when edited."""
import importlib.util
import inspect
import textwrap

import numpy as np
import pytest

import tiledsl
from tiledsl import T

SCALE = 3.0


@tiledsl.inline
def axpy(a, x, y):
    """a * x + y, with the helper's own global."""
    return a * x + y * SCALE


@tiledsl.inline
def copy_row(dst, src, row, n: int = 4):
    for j in T.unroll(n):
        dst[row, j] = src[row, j]


@tiledsl.jit(interpret=True)
def uses_helpers(A: T.Tensor((2, 4), "float32"), B: T.Tensor((2, 4), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=2))
    t = T.cuda.thread_id()
    copy_row(B, A, t)
    B[t, 0] = axpy(T.float32(2), A[t, 1], B[t, 0])
    copy_row(B, A, t, n=0)


def test_helpers_expand_inline_and_compute():
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.zeros_like(a)
    uses_helpers(a, b)
    want = a.copy()
    want[:, 0] = 2 * a[:, 1] + a[:, 0] * SCALE
    np.testing.assert_array_equal(b, want)
    ck = tiledsl.jit(uses_helpers.fn).compile(a, b, target="sm_90")
    assert "call" not in ck.asm["ptx"]


@tiledsl.inline
def recurse(x):
    return recurse(x)


def test_recursion_is_refused_at_the_call():
    def k(A: T.Tensor((4,), "float32")):
        A[0] = recurse(A[1])
    with pytest.raises(tiledsl.CompilationError, match="calls itself"):
        tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_90")


@tiledsl.inline
def bad_helper(x):
    y = undefined_here + x  # noqa: F821
    return y


def test_errors_point_at_the_helpers_line():
    def k(A: T.Tensor((4,), "float32")):
        A[0] = bad_helper(A[1])
    with pytest.raises(tiledsl.CompilationError) as ei:
        tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_90")
    lines, start = inspect.getsourcelines(bad_helper.fn)
    assert ei.value.loc.line == start + 2 and "undefined_here" in str(ei.value)   # decorator, def, body


def test_calling_a_helper_outside_a_kernel_is_an_error():
    with pytest.raises(tiledsl.TiledslError, match="inside a kernel"):
        axpy(1, 2, 3)


SRC = """
import tiledsl
from tiledsl import T

@tiledsl.inline
def plus(x):
    return x + {c}

@tiledsl.jit
def k(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    A[0] = plus(A[1])
"""


def test_editing_a_helper_recompiles(tmp_path):
    outs = []
    for i, c in enumerate(("1.0", "7.0")):
        path = tmp_path / f"m{i}.py"
        path.write_text(textwrap.dedent(SRC.format(c=c)))
        spec = importlib.util.spec_from_file_location(f"inl_mod{i}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        outs.append(mod.k.compile(np.zeros(4, np.float32), target="sm_90").asm["tile"])
    assert "1.0" in outs[0] and "7.0" in outs[1]
