"""Tensors that may hold 2^31 elements are indexed with 64-bit offsets (passes/wide_offsets.py); small ones keep
their 32-bit arithmetic. The element counts here are too large for the interpreter's memory, so the checks read
the expanded IR and the PTX; a `gpu` test writes and reads back bytes beyond 2^31 of a real tensor."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.core import dtypes as dt
from tiledsl.ir import nodes as ir
from tiledsl.passes.wide_offsets import widen_offsets


def _meta(shape, dtype):
    torch = pytest.importorskip("torch")
    return torch.empty(shape, dtype=getattr(torch, dtype), device="meta")


def k_2d(A: T.Tensor((65536, 65536), "uint8"), i: T.int32, j: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    A[i, j] = A[i, j] + 1


def k_flat(A: T.Tensor((2**31 + 16,), "float32"), i: T.int32, j: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    A[i * 65536 + j] = 1.0


def k_named(A: T.Tensor(("M", "N"), "float32"), i: T.int32, j: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    A[i, j] = 2.0


def k_small(A: T.Tensor((16384, 4096), "float32"), i: T.int32, j: T.int32):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    A[i, j] = 2.0


def _ptx_body(ck):
    return ck.asm["ptx"].split("{", 1)[1]


@pytest.mark.parametrize("fn, arr", [(k_2d, ((65536, 65536), "uint8")), (k_flat, ((2**31 + 16,), "float32")),
                                     (k_named, ((4, 4), "float32"))])
def test_huge_tensor_offsets_are_64_bit(fn, arr):
    ck = tiledsl.jit(fn).compile(_meta(*arr), 1, 1, target="sm_90")
    assert "int64(" in ck.asm["expanded"]
    body = _ptx_body(ck)
    # the row product is formed in 64 bits (mul.wide) and no 32-bit product of the indices is sign-extended
    assert "mul.wide.s32" in body or "mul.lo.s64" in body, body
    assert "mul.lo.s32" not in body, body


def test_small_tensor_keeps_32_bit_offsets():
    ck = tiledsl.jit(k_small).compile(_meta((16384, 4096), "float32"), 1, 1, target="sm_90")
    assert "int64(" not in ck.asm["expanded"]
    assert "mul.lo.s32" in _ptx_body(ck) or "shl.b32" in _ptx_body(ck)


def test_widened_offset_is_the_mathematical_index():
    """The rewritten offset of A[i, j] on a 65536 x 65536 tensor, evaluated by the interpreter's expression
    compiler at i = 40000 (past 2^31 / 65536), is i * 65536 + j; the 32-bit one wraps negative."""
    from tiledsl.interpreter.exprs import ExprCompiler
    tiledsl.jit(k_2d).compile(_meta((65536, 65536), "uint8"), 1, 1, target="sm_90")
    i, j = ir.Var(dt.int32, None, "i"), ir.Var(dt.int32, None, "j")
    st = ir.Storage("A", "global", dt.uint8, None)
    p = ir.Param("A", "tensor", dt.uint8, (65536, 65536), storage=st)
    off = ir.add(ir.mul(i, 65536), j)
    k = ir.Kernel("k", [p], [ir.Store(None, st, dt.uint8, off, ir.Const(dt.uint8, None, 1))], None)

    class M:
        vars = {i: np.int32(40000), j: np.int32(7)}
    wide = widen_offsets(k).body[0].offset
    assert wide.dtype == dt.int64
    assert int(ExprCompiler().expr(wide)(M, None)) == 40000 * 65536 + 7
    assert int(ExprCompiler().expr(off)(M, None)) < 0            # what the 32-bit arithmetic computed before
    assert widen_offsets(ir.Kernel("k", [ir.Param("A", "tensor", dt.uint8, (4096,), storage=st)], k.body,
                                   None)).body[0].offset is off   # small tensors: untouched


@pytest.mark.gpu
def test_write_and_read_back_beyond_2_31_bytes():
    """A uint8 tensor of 2^31 + 4096 bytes: the kernel writes bytes 2^31 + 100 + t, then reads them back into a
    small output; exactly those bytes change."""
    torch = pytest.importorskip("torch")
    n = 2**31 + 4096

    @tiledsl.jit
    def poke(A: T.Tensor((2**31 + 4096,), "uint8"), Out: T.Tensor((256,), "uint8")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
        t = T.cuda.thread_id()
        base = T.int64(2**31 + 100)          # (an int32 thread id plus 2^31 would not fit in int32: refused)
        A[base + t] = T.cast(t % 251 + 1, "uint8")
        T.cuda.syncthreads()
        Out[t] = A[base + 255 - t]

    a = torch.zeros(n, dtype=torch.uint8, device="cuda")
    out = torch.zeros(256, dtype=torch.uint8, device="cuda")
    poke(a, out)
    torch.cuda.synchronize()
    want = (torch.arange(256, device="cuda") % 251 + 1).to(torch.uint8)
    assert torch.equal(a[2**31 + 100: 2**31 + 356], want)
    assert torch.equal(out, want.flip(0))
    assert int(a[: 2**31 + 100].count_nonzero()) == 0 and int(a[2**31 + 356:].count_nonzero()) == 0
    low = 2**31 + 100 - 2**32                                # where a wrapped 32-bit offset would have pointed
    assert low < 0
    del a
    torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("named", [False, True])
def test_2d_tensor_beyond_2_31_elements_on_the_gpu(named):
    """A[i, j] with a run-time row i on a (32768, 65600) uint8 tensor (static or named sizes): row 32767 starts
    past byte 2^31, where the 32-bit i * 65600 wrapped negative before."""
    torch = pytest.importorskip("torch")
    shape = ("R", "C") if named else (32768, 65600)

    @tiledsl.jit
    def poke(A: T.Tensor(shape, "uint8"), Out: T.Tensor((256,), "uint8"), i: T.int32):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
        t = T.cuda.thread_id()
        A[i, 65600 - 256 + t] = T.cast(t % 13 + 1, "uint8")
        T.cuda.syncthreads()
        Out[t] = A[i, 65600 - 1 - t]

    a = torch.zeros((32768, 65600), dtype=torch.uint8, device="cuda")
    out = torch.zeros(256, dtype=torch.uint8, device="cuda")
    poke(a, out, 32767)
    torch.cuda.synchronize()
    want = (torch.arange(256, device="cuda") % 13 + 1).to(torch.uint8)
    assert torch.equal(a[32767, -256:], want)
    assert torch.equal(out, want.flip(0))
    assert int(a.count_nonzero()) == 256
    del a
    torch.cuda.empty_cache()


def test_an_int64_index_is_not_narrowed_for_a_huge_tensor():
    """A[base + t] with an int64 base on a > 2^31-byte tensor: the front end's int32 view of the index is looked
    through (it wrapped the address: an illegal access on the H200 before)."""
    from helpers import FakeCudaArray

    @tiledsl.jit
    def poke64(A: T.Tensor((2**31 + 4096,), "uint8")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=256))
        t = T.cuda.thread_id()
        base = T.int64(2**31 + 100)
        A[base + t] = T.cast(t % 251 + 1, "uint8")

    ck = poke64.compile(FakeCudaArray((2**31 + 4096,), "uint8"), target="sm_90")
    assert "int32(" not in ck.asm["expanded"].split("A<uint8>[", 1)[1].split("]", 1)[0]
