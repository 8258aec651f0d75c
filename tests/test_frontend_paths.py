"""Issue 14, front end: what must keep compiling (names bound on every path, loops that certainly run, explicit
infinity), where a caret points on a line with non-ASCII text, and how fast an exploding unroll is refused."""
import time

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.core.errors import CompilationError, Loc
from tiledsl.layout import S, TileLayout, laneid


@tiledsl.jit
def both_branches(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        x = A[0]
    else:
        x = A[1] * 2.0
    A[2] = x


@tiledsl.jit
def before_the_if(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    x = 0.0
    if n > 0:
        x = A[0]
    A[2] = x


@tiledsl.jit
def nested_every_path(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        if n > 2:
            z = A[0]
        else:
            z = A[1]
    else:
        z = 5.0
    A[2] = z


@tiledsl.jit
def loop_that_runs(A: T.Tensor((4,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    for i in range(4):
        last = A[i]
    A[0] = last


@tiledsl.jit
def rebound_after(A: T.Tensor((4,), "float32"), n: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    if n > 0:
        t = A[0]
        A[3] = t
    t = A[1]
    A[2] = t


@pytest.mark.parametrize("n, want", [(1, 1.0), (0, 4.0)])
def test_assigned_on_every_path_runs_right(n, want):
    a = np.array([1.0, 2.0, 0.0, 0.0], np.float32)
    tiledsl.jit(both_branches.fn, interpret=True)(a, n)
    assert a[2] == want


@pytest.mark.parametrize("jf, n, want", [(before_the_if, 0, 0.0), (before_the_if, 1, 1.0),
                                         (nested_every_path, 3, 1.0), (nested_every_path, 1, 2.0),
                                         (nested_every_path, 0, 5.0), (loop_that_runs, None, 4.0),
                                         (rebound_after, 1, 2.0)])
def test_correct_kernels_keep_compiling(jf, n, want):
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    args = (a,) if n is None else (a, n)
    tiledsl.jit(jf.fn, interpret=True)(*args)
    assert a[0 if jf is loop_that_runs else 2] == want
    assert "ld.global" in jf.compile(*args, target="sm_90").asm["ptx"]


def test_caret_counts_characters_not_utf8_bytes():
    def k(A: T.Tensor((4,), "float32")):
        größe = 1.0; A[0] = größe + nope  # noqa: E702, F821
    with pytest.raises(CompilationError) as e:
        tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_90")
    err = e.value
    line = err.loc.text
    assert line[err.loc.col:err.loc.end_col] == "nope"             # was 2 characters to the right ("ß", "ö")
    text, caret = str(err).splitlines()[1:3]
    assert caret.index("^") == text.index("nope") and caret.count("^") == 4
    assert f":{err.loc.col + 1}:" in str(err).splitlines()[0]


def test_caret_under_a_string_of_wide_characters():
    def k(A: T.Tensor((4,), "float32")):
        T.static_assert(True, "日本語"); A[0] = nope  # noqa: E702, F821
    with pytest.raises(CompilationError) as e:
        tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_90")
    err = e.value
    assert err.loc.text[err.loc.col:err.loc.end_col] == "nope"
    text, caret = str(err).splitlines()[1:3]
    # three wide characters take two columns each on a terminal: the caret is padded to match
    assert caret.index("^") == text.index("nope") + 3


def test_caret_keeps_tabs():
    loc = Loc("f.py", 3, 2, 6, "\t\tnope = 1\n")
    assert str(CompilationError("x", loc)).splitlines()[2] == "    \t\t^^^^"


def test_exploding_unroll_is_refused_before_expanding():
    def k(A: T.Tensor((4,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        for i in T.unroll(4096):
            for j in T.unroll(4096):
                for m in T.unroll(4096):
                    A[0] = 1.0
    t = time.perf_counter()
    with pytest.raises(CompilationError, match="limit of 1,000,000") as e:
        tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_90")
    assert time.perf_counter() - t < 5
    assert e.value.loc.text.strip() == "for j in T.unroll(4096):"


def test_unroll_budget_is_documented():
    assert "1,000,000" in T.unroll.__doc__


def test_unroll_within_budget_compiles():
    def k(A: T.Tensor((4,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        for i in T.unroll(64):
            for j in T.unroll(64):
                A[(i + j) % 4] = 1.0
    tiledsl.jit(k).compile(np.zeros(4, np.float32), target="sm_90")


def test_explicit_infinity_and_nan_constants_compile():
    def k(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float16")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        A[0] = float("inf")
        A[1] = T.float32(float("-inf"))
        A[2] = float("nan")
        B[0] = T.cast(float("inf"), "float16")
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float16)
    tiledsl.jit(k, interpret=True)(a, b)
    assert a[0] == np.inf and a[1] == -np.inf and np.isnan(a[2]) and b[0] == np.inf


def test_layout_accepts_numpy_ints_as_ints():
    a = TileLayout(S[(np.int64(2), 16) : (np.int32(1), 2 @ laneid)])
    b = TileLayout(S[(2, 16) : (1, 2 @ laneid)])
    assert a == b and hash(a) == hash(b) and type(a.shape.extents[0]) is int


def test_size_named_like_a_parameter_was_ambiguous():
    # before: the size and the scalar both named 'n'; the kernel read the scalar, the launch bound the size
    def k(A: T.Tensor(("n",), "float32"), n: T.int32):
        A[0] = T.cast(n, "float32")
    with pytest.raises(CompilationError, match="size name 'n' is also the name of parameter 'n'"):
        tiledsl.jit(k).compile(np.zeros(4, np.float32), 7, target="sm_90")
