"""`and`, `or`, chained comparisons and `x if c else y` evaluate their operands as Python does (issue 33): an operand
that reads memory or has effects runs only when Python would run it. Each kernel here read past its buffer before
(a KernelFault on the interpreter); now it runs, and its PTX reaches the guarded load only through a branch.
Pure operands keep their branch-free code (`and.pred`, `selp`)."""
import re

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from helpers import ptxas

LC = T.cuda.LaunchConfig


def scan_while(X: T.Tensor((32,), "float32"), Out: T.Tensor((1,), "int32"), n: T.int32):
    T.device_entry(launch=LC(grid=1, block=1))
    i = 0
    while i < n and X[i] >= 0.0:
        i += 1
    Out[0] = i


def next_or_zero(X: T.Tensor((32,), "float32"), Out: T.Tensor((32,), "float32")):
    T.device_entry(launch=LC(grid=1, block=32))
    i = T.cuda.thread_id()
    Out[i] = X[i + 1] if i + 1 < 32 else 0.0


def or_guard(X: T.Tensor((32,), "int32"), Out: T.Tensor((32,), "int32")):
    T.device_entry(launch=LC(grid=1, block=32))
    i = T.cuda.thread_id()
    Out[i] = 1 if i >= 16 or X[i + 16] > 0 else 0


def chained(X: T.Tensor((32,), "int32"), Out: T.Tensor((32,), "int32")):
    T.device_entry(launch=LC(grid=1, block=32))
    i = T.cuda.thread_id()
    Out[i] = 1 if 0 <= i - 16 < X[i - 16] else 0


def divide_guard(A: T.Tensor((32,), "int32"), B: T.Tensor((32,), "int32"), Out: T.Tensor((32,), "int32")):
    T.device_entry(launch=LC(grid=1, block=32))
    i = T.cuda.thread_id()
    a, b = A[i], B[i]
    Out[i] = 1 if b != 0 and a // b > 2 else 0


def three_way(X: T.Tensor((32,), "float32"), Out: T.Tensor((32,), "float32"), n: T.int32):
    T.device_entry(launch=LC(grid=1, block=32))
    i = T.cuda.thread_id()
    Out[i] = X[i] if i < n and i % 2 == 0 and X[i] > 1.0 else -1.0


def interpreted(fn, *args):
    tiledsl.jit(fn, interpret=True)(*args)
    return args


def test_while_condition_stops_before_the_read():
    x = np.ones(32, np.float32)
    out = np.zeros(1, np.int32)
    interpreted(scan_while, x, out, 32)
    assert out[0] == 32
    x[5] = -1.0
    interpreted(scan_while, x, out, 32)
    assert out[0] == 5


def test_conditional_expression_reads_only_the_chosen_side():
    x = np.arange(32, dtype=np.float32)
    out = np.zeros(32, np.float32)
    interpreted(next_or_zero, x, out)
    np.testing.assert_array_equal(out, np.append(x[1:], 0.0))


def test_or_and_chained_comparisons():
    x = np.arange(32, dtype=np.int32) % 3
    out = np.zeros(32, np.int32)
    interpreted(or_guard, x, out)
    np.testing.assert_array_equal(out, [int(i >= 16 or x[i + 16] > 0) for i in range(32)])
    interpreted(chained, x, out)
    np.testing.assert_array_equal(out, [int(i >= 16 and i - 16 < x[i - 16]) for i in range(32)])


def test_a_division_on_the_skipped_side_does_not_divide_by_zero():
    a, b = np.arange(32, dtype=np.int32), np.arange(32, dtype=np.int32) % 4
    out = np.zeros(32, np.int32)
    interpreted(divide_guard, a, b, out)
    np.testing.assert_array_equal(out, [int(b[i] != 0 and a[i] // b[i] > 2) for i in range(32)])


def test_longer_chains():
    x = np.linspace(0, 3, 32).astype(np.float32)
    out = np.zeros(32, np.float32)
    interpreted(three_way, x, out, 20)
    np.testing.assert_array_equal(out, [x[i] if i < 20 and i % 2 == 0 and x[i] > 1 else -1 for i in range(32)])


def loads_only_behind_branches(ptx: str) -> bool:
    """Every ld.global is predicated, or follows a conditional branch to a label after it (so the path that
    skips it exists): the load is not unconditional."""
    lines = [ln.strip() for ln in ptx.splitlines()]
    for k, ln in enumerate(lines):
        if not re.match(r"(@%p\d+ )?ld\.global", ln) or ln.startswith("@"):
            continue
        targets = [m.group(1) for m in (re.match(r"@!?%p\d+ bra(?:\.uni)?\s+(\S+);", x) for x in lines[:k]) if m]
        if not any(f"{t}:" in lines[k + 1:] for t in targets):
            return False
    return True


@pytest.mark.parametrize("fn,args", [
    (scan_while, (np.ones(32, np.float32), np.zeros(1, np.int32), 32)),
    (next_or_zero, (np.ones(32, np.float32), np.zeros(32, np.float32))),
    (or_guard, (np.ones(32, np.int32), np.zeros(32, np.int32))),
    (chained, (np.ones(32, np.int32), np.zeros(32, np.int32))),
], ids=["while", "if-else", "or", "chain"])
def test_ptx_reaches_the_guarded_load_through_a_branch(fn, args):
    ck = tiledsl.jit(fn).compile(*args, target="sm_90")
    ptx = ck.asm["ptx"]
    assert "ld.global" in ptx
    assert loads_only_behind_branches(ptx), ptx
    assert ptxas(ptx, "sm_90").returncode == 0
    assert re.search(r"^\s+if ", ck.asm["tile"], re.M), ck.asm["tile"]


def test_the_unguarded_form_is_seen_as_unconditional():
    """The check above fails on a load outside any branch (it would have passed the old code otherwise)."""
    def plain(X: T.Tensor((32,), "float32"), Out: T.Tensor((32,), "float32")):
        T.device_entry(launch=LC(grid=1, block=32))
        i = T.cuda.thread_id()
        Out[i] = X[i] + 1.0
    ptx = tiledsl.jit(plain).compile(np.ones(32, np.float32), np.ones(32, np.float32), target="sm_90").asm["ptx"]
    assert not loads_only_behind_branches(ptx)


def pure(X: T.Tensor((32,), "float32"), Out: T.Tensor((32,), "float32"), n: T.int32):
    T.device_entry(launch=LC(grid=1, block=32))
    i = T.cuda.thread_id()
    x = X[i]
    r = T.alloc_local((2,), "float32")
    r[0] = x
    r[1] = x * 2.0
    big = x > 1.0 and i < n
    y = T.exp2(x, approx=True) if big or i == 3 else r[1]
    Out[i] = y if i < 16 else x * 3.0


def test_pure_operands_stay_branch_free():
    """Arithmetic on values the thread holds, register reads and scalar math are evaluated on every path, so the
    code is what it was before issue 33: no branch in the tile IR, a selp in the PTX."""
    ck = tiledsl.jit(pure).compile(np.ones(32, np.float32), np.ones(32, np.float32), 8, target="sm_90")
    assert not re.search(r"^\s+if ", ck.asm["tile"], re.M), ck.asm["tile"]
    assert "selp" in ck.asm["ptx"] and "bra" not in ck.asm["ptx"]
    x = np.linspace(0, 2, 32).astype(np.float32)
    out = np.zeros(32, np.float32)
    interpreted(pure, x, out, 8)
    i = np.arange(32)
    y = np.where(((x > 1) & (i < 8)) | (i == 3), np.exp2(x), x * 2)
    np.testing.assert_allclose(out, np.where(i < 16, y, x * 3), rtol=1e-6)


@tiledsl.inline
def bump(C):
    T.cuda.tile.apply(T.ptx["red.global.add.u32"], C[0:1], T.uint32(1))
    return True


def counted(C: T.Tensor((1,), "uint32"), Out: T.Tensor((32,), "int32")):
    T.device_entry(launch=LC(grid=1, block=32))
    i = T.cuda.thread_id()
    Out[i] = 1 if i < 8 and bump(C) else 0


def test_an_operand_with_effects_runs_only_when_python_would():
    c, out = np.zeros(1, np.uint32), np.zeros(32, np.int32)
    interpreted(counted, c, out)
    assert c[0] == 8
    np.testing.assert_array_equal(out, (np.arange(32) < 8).astype(np.int32))


@pytest.mark.gpu
def test_on_the_gpu_with_debug_checks():
    """debug=True traps an out-of-bounds read: the guarded reads run clean and give Python's results."""
    torch = pytest.importorskip("torch")
    x = torch.ones(32, device="cuda")
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    tiledsl.jit(scan_while, debug=True)(x, out, 32)
    assert int(out[0]) == 32
    y = torch.arange(32, dtype=torch.float32, device="cuda")
    o = torch.zeros(32, device="cuda")
    tiledsl.jit(next_or_zero, debug=True)(y, o)
    assert o.tolist() == list(range(1, 32)) + [0]
