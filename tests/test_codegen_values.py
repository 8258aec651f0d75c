"""Codegen's value numbering (lower/llvm/cse.py) and its division by constants: repeated address arithmetic is
built once, a variable changed by a loop or a branch is never stood for by an older value, and Python's floor
semantics hold for negative operands (checked against the interpreter on the GPU)."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.lower.llvm.cse import ValueTable, assigned_vars
from tiledsl.ir import nodes as ir
from tiledsl.core import dtypes as dt


@tiledsl.jit
def lanes(Out: T.Tensor((32, 4), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    Out[lane, 0] = (lane // 8) * 3 + lane % 8
    Out[lane, 1] = (lane // 8) * 3 + lane % 8 + 1
    Out[lane, 2] = (lane // 8) * 3 + lane % 8 + 2
    Out[lane, 3] = (lane // 8) * 3 + lane % 8 + 3


def test_repeated_arithmetic_is_built_once():
    from tiledsl.lower.llvm import generate_llvm
    ck = lanes.compile(np.zeros((32, 4), np.int32), target="sm_90")
    raw, _ = generate_llvm(ck.expanded_ir, ck.target)          # before LLVM's own optimizations
    assert raw.count("call i32 @\"llvm.nvvm.read.ptx.sreg.laneid\"") == 1
    assert raw.count("ashr") == 1 and "sdiv" not in raw      # lane // 8, once, as a shift


@tiledsl.jit
def carried(Out: T.Tensor(("N",), "int32"), a: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=1))
    x = a
    before = x * 3 + 1
    for i in range(N):  # noqa: F821
        Out[i] = x * 3 + 1 + before * 0
        if i % 2 == 0:
            x = x + 1
    Out[0] = Out[0] + (x * 3 + 1) * 0


@tiledsl.jit
def floors(X: T.Tensor((64,), "int32"), Out: T.Tensor((64, 6), "int32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    t = T.cuda.thread_id()
    v = X[t]
    Out[t, 0] = v // 4
    Out[t, 1] = v % 4
    Out[t, 2] = v // 3
    Out[t, 3] = v % 3
    Out[t, 4] = v // -4
    Out[t, 5] = v % -3


def test_value_table_versions_and_regions():
    vt = ValueTable()
    x = ir.Var(dt.int32, None, "x")
    e = ir.Binary(dt.int32, None, "mul", x, ir.Const(dt.int32, None, 3))
    k0 = vt.key(e)
    vt.put(k0, "v0")
    assert vt.get(vt.key(e)) == "v0"
    vt.assigned(x)
    assert vt.get(vt.key(e)) is None                  # x changed: the old product no longer stands for it
    with vt.region():
        vt.put(vt.key(e), "v1")
        assert vt.get(vt.key(e)) == "v1"
    assert vt.get(vt.key(e)) is None                  # built inside a branch: does not dominate what follows
    assert vt.key(ir.Special(dt.int32, None, "tid", 0)) == vt.key(ir.Special(dt.int32, None, "tid", 0))


def test_assigned_vars_walks_nested_bodies():
    x, y, i = (ir.Var(dt.int32, None, n) for n in "xyi")
    one = ir.Const(dt.int32, None, 1)
    inner = ir.If(None, ir.Compare(dt.bool_, None, "lt", x, one), [ir.Assign(None, y, one)], [])
    loop = ir.For(None, i, one, one, one, [inner, ir.Assign(None, x, one)])
    assert {v.name for v in assigned_vars([loop])} == {"x", "y", "i"}


@pytest.mark.gpu
def test_loop_carried_and_floor_division_agree_with_the_interpreter():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    out = torch.zeros(9, dtype=torch.int32, device="cuda")
    carried(out, 5)
    ref = np.zeros(9, np.int32)
    tiledsl.jit(carried.fn, interpret=True)(ref, 5)
    assert out.cpu().numpy().tolist() == ref.tolist()
    x = np.arange(-32, 32, dtype=np.int32) * 7 + 1
    got = torch.zeros((64, 6), dtype=torch.int32, device="cuda")
    floors(torch.from_numpy(x).cuda(), got)
    want = np.stack([x // 4, x % 4, x // 3, x % 3, x // -4, x % -3], axis=1)
    assert (got.cpu().numpy() == want).all()
