"""A local tile larger than a thread's registers is refused at its line before ptxas runs, unless
`tiledsl.jit(allow_spills=True)` (passes/register_budget.py; issue 34)."""
import inspect

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.compiler import compile_kernel
from tiledsl.core.options import Options
from tiledsl.core.target import Target


def make(n, dtype="float32"):
    def big_local(A: T.Tensor((4, 1), "float32"), Out: T.Tensor((4, 1), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
        r = T.alloc_local((n, 1), dtype)                      # the culprit
        T.cuda.tile.apply(T.ptx["ld.global.f32"], r[0:4, 0:1], A)
        T.cuda.tile.apply(T.ptx["st.global.f32"], Out, r[0:4, 0:1])
    return big_local


def culprit_line(fn):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, text in enumerate(lines) if "the culprit" in text)


X = np.zeros((4, 1), np.float32)


def test_a_typo_sized_local_is_refused_at_its_line():
    fn = make(4096)
    with pytest.raises(tiledsl.CompilationError) as ei:
        tiledsl.jit(fn).compile(X, X, target="sm_90")
    e = ei.value
    assert e.loc.line == culprit_line(fn) and e.loc.file == __file__
    assert ("this local tile holds 4096 float32 per thread (16384 bytes, 4096 32-bit registers); a thread has at "
            "most 255 registers (1020 bytes)") in str(e)
    assert "allow_spills=True" in str(e) and "T.alloc_local((n, 1), dtype)" in str(e)


def test_the_limit_is_255_registers():
    ck = compile_kernel(make(255), {}, Target(90), Options(), want_cubin=False)
    assert "ptx" in ck.asm
    with pytest.raises(tiledsl.CompilationError, match="256 float32 per thread"):
        compile_kernel(make(256), {}, Target(90), Options(), want_cubin=False)
    with pytest.raises(tiledsl.CompilationError, match=r"128 float64 per thread \(1024 bytes, 256 32-bit"):
        compile_kernel(make(128, "float64"), {}, Target(90), Options(), want_cubin=False)


def test_allow_spills_insists():
    ck = compile_kernel(make(300), {}, Target(90), Options(allow_spills=True), want_cubin=False)
    assert ".local" in ck.asm["ptx"] or "ld.global.f32" in ck.asm["ptx"]
    k = tiledsl.jit(make(300), allow_spills=True)
    assert k.options.allow_spills and "allow_spills=True" in k.options.key()
    with pytest.raises(tiledsl.TiledslError, match="allow_spills="):
        tiledsl.jit(make(4), allow_spill=True)


def test_the_interpreter_runs_it_anyway():
    """The interpreter has no register file: the check is codegen's, and a kernel under development still runs."""
    a = np.arange(4, dtype=np.float32).reshape(4, 1)
    out = np.zeros_like(a)
    tiledsl.jit(make(512), interpret=True)(a, out)
    assert (out == a).all()
