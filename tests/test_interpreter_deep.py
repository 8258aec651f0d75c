"""Long expression chains: whatever compile() accepts, the interpreter runs (interpreter/depth.py), and what the
front end refuses as too deep is refused the same way on both paths."""
import importlib.util
import sys

import numpy as np
import pytest

import tiledsl


def _kernel(tmp_path, terms: int, name: str):
    """A kernel `A[1] = a + a + ... + a` (terms times) and `A[2] = max(max(..., a), a)` in a file of its own."""
    chain = " + ".join(["a"] * terms)
    nested = "a"
    for _ in range(min(terms // 4, 150)):            # Python's parser allows 200 nested parentheses
        nested = f"T.max({nested}, a)"
    src = ("from tiledsl import T\n\n\n"
           "def k(A: T.Tensor((4,), 'float32')):\n"
           "    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))\n"
           "    a = A[0]\n"
           f"    A[1] = {chain}\n"
           f"    A[2] = {nested}\n")
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k


def _agree(k, terms):
    """Both paths refuse alike, or both run and the interpreter computes the chain."""
    a = np.zeros(4, np.float32)
    a[0] = 1.0
    try:
        tiledsl.jit(k).compile(a, target="sm_90")
    except tiledsl.CompilationError as e:
        assert "nested too deeply" in str(e)
        with pytest.raises(tiledsl.CompilationError, match="nested too deeply"):
            tiledsl.jit(k, interpret=True)(a)
        return False
    tiledsl.jit(k, interpret=True)(a)
    assert a[1] == terms and a[2] == 1.0
    return True


@pytest.mark.parametrize("terms", [200, 350, 450, 600])
def test_chain_at_the_default_limit(tmp_path, terms):
    _agree(_kernel(tmp_path, terms, f"chain{terms}"), terms)


def test_chain_under_a_raised_recursion_limit(tmp_path):
    """A user who raised Python's limit gets deeper kernels through the front end: the interpreter follows."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(6000)
    try:
        k = _kernel(tmp_path, 1500, "chain1500")
        assert _agree(k, 1500)
    finally:
        sys.setrecursionlimit(old)
    assert sys.getrecursionlimit() == old


def test_depth_is_measured_without_recursion():
    from tiledsl.core import dtypes as dt
    from tiledsl.interpreter.depth import max_expr_depth
    from tiledsl.ir import nodes as ir
    a = ir.Var(dt.int32, None, "a")
    e = a
    for _ in range(50000):                     # far deeper than any recursive walk could go
        e = ir.Binary(dt.int32, None, "add", e, a)
    assert max_expr_depth([ir.Assign(None, a, e)]) == 50001
