"""Bulk copies and mbarriers: the refusals, the interpreter's hang detection, and assembly for sm_90."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.interpreter import run_ir
from tiledsl.ir import nodes as ir

COPY = "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
INIT, EXPECT = "mbarrier.init.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64"
WAIT, ARRIVE = "mbarrier.try_wait.parity.shared::cta.b64", "mbarrier.arrive.shared::cta.b64"


def make(tx=64 * 128, copy_bytes=128, count=1, parity=0, bar_dtype="uint64", scope="thread", rows=64):
    @tiledsl.jit
    def rows_kernel(A: T.Tensor((64, 32), "uint32"), Out: T.Tensor((64, 32), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
        tid = T.cuda.thread_id()
        tile = T.alloc_shared((64, 36), "uint32")
        bar = T.alloc_shared((1,), bar_dtype)
        if tid == 0:
            T.cuda.tile.apply(T.ptx[INIT], bar, count)
            T.cuda.tile.apply(T.ptx["fence.mbarrier_init.release.cluster"])
        T.cuda.syncthreads()
        if tid < rows:
            T.cuda.tile.apply(T.ptx[COPY], tile[tid, 0:copy_bytes // 4], A[tid, 0:copy_bytes // 4], bar,
                              copy_bytes=copy_bytes, scope=scope)
        if tid == 0:
            T.cuda.tile.apply(T.ptx[EXPECT], bar, tx)
        T.cuda.tile.apply(T.ptx[WAIT], bar, parity)
        for j in range(copy_bytes // 4):
            Out[tid, j] = tile[tid, j]
    return rows_kernel


A = np.arange(64 * 32, dtype=np.uint32).reshape(64, 32)


def test_assembles_for_sm90_and_is_refused_before():
    ck = make().compile(A, np.zeros_like(A), target="sm_90")
    assert ck.metadata["registers"] > 0
    with pytest.raises(tiledsl.CompilationError, match="needs sm_90"):
        make().compile(A, np.zeros_like(A), target="sm_80")


def test_interpreter_copies_and_counts_bytes():
    out = np.zeros_like(A)
    tiledsl.jit(make().fn, interpret=True)(A, out)
    np.testing.assert_array_equal(out, A)


@pytest.mark.parametrize("kw,what", [
    (dict(tx=64 * 128 + 16), "can never complete"),         # a byte announced but never copied
    (dict(count=2), "can never complete"),                  # one arrival of two
    (dict(parity=1), "can never complete"),                 # phase 1 has not even begun
    (dict(rows=32), "can never complete"),                  # half the rows never copied
])
def test_interpreter_reports_a_wait_that_would_hang(kw, what):
    with pytest.raises(tiledsl.KernelFault, match=what):
        tiledsl.jit(make(**kw).fn, interpret=True)(A, np.zeros_like(A))


@pytest.mark.parametrize("kw,what", [
    (dict(copy_bytes=120), "multiple of 16"),
    (dict(bar_dtype="uint32"), "8-byte element"),
    (dict(scope="warp"), "thread instruction"),
    (dict(parity=2), "0 or 1"),
    (dict(count=-1), "u32"),
])
def test_refusals_name_the_problem(kw, what):
    with pytest.raises(tiledsl.CompilationError, match=what):
        make(**kw).compile(A, np.zeros_like(A), target="sm_90")


def test_unknown_forms_are_refused_with_the_list():
    @tiledsl.jit
    def k(A: T.Tensor((64, 32), "uint32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        bar = T.alloc_shared((1,), "uint64")
        T.cuda.tile.apply(T.ptx["mbarrier.test_wait.parity.shared::cta.b64"], bar, 0)
    with pytest.raises(tiledsl.CompilationError, match="supported: cp.async.bulk"):
        k.compile(A, target="sm_90")


@pytest.mark.gpu
def test_rows_on_the_gpu():
    torch = pytest.importorskip("torch")
    out = torch.from_numpy(np.zeros_like(A)).cuda()
    make()(torch.from_numpy(A.copy()).cuda(), out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), A)


def _traps(body):
    for s in body:
        if isinstance(s, ir.Trap):
            yield s
        for sub in (getattr(s, "body", None), getattr(s, "then", None), getattr(s, "orelse", None)):
            if sub:
                yield from _traps(sub)


def _always(cond):
    """A check is the `or` of one condition per access: is one of them constantly true?"""
    if isinstance(cond, ir.Binary) and cond.op == "or":
        return _always(cond.a) or _always(cond.b)
    return isinstance(cond, ir.Const) and bool(cond.value)


def test_debug_mode_checks_the_mbarrier_as_one_element():
    """debug=True gave a bulk copy's 8-byte mbarrier operand the copy's size, so every bulk copy trapped; the
    bulk family now states its spans: dst and src copy_bytes, the mbarrier one element."""
    ck = tiledsl.jit(make().fn, debug=True).compile(A, np.zeros_like(A), target="sm_90")
    traps = list(_traps(ck.expanded_ir.body))
    assert traps, "debug=True inserts checks"
    assert not any(_always(t.cond) for t in traps), "a check that always traps"
    out = np.zeros_like(A)
    run_ir(ck.expanded_ir, {"A": A, "Out": out})          # the interpreter runs the checks (a Trap is a fault)
    np.testing.assert_array_equal(out, A)


@pytest.mark.gpu
def test_debug_mode_rows_on_the_gpu():
    torch = pytest.importorskip("torch")
    out = torch.from_numpy(np.zeros_like(A)).cuda()
    tiledsl.jit(make().fn, debug=True)(torch.from_numpy(A.copy()).cuda(), out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), A)
