"""The bulk reduction cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 (tiledsl/isa/bulk): two blocks
stage float32 values in shared memory and one thread of each adds them into the same global array through the TMA
unit; the interpreter's result is the sum, the PTX holds the instruction as written and ptxas assembles it for
sm_90a; bad operands are CompilationErrors at the user's line. tests/test_gpu_bulk_reduce.py runs make() on the
GPU."""
import inspect

import numpy as np
import pytest

import tiledsl
from tiledsl import T
from helpers import ptxas

REDUCE = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"
N = 256                     # float32 values a block stages (64 threads, 4 each): 1 KB


def make(parts=1):
    """Block b stages A[b] in shared memory; thread 0 adds it into Out in `parts` bulk reductions (the operands
    read as (parts, N / parts): one instruction per repeat), then waits for its bulk group."""
    nb = N * 4 // parts

    @tiledsl.jit
    def bulk_add(A: T.Tensor((2, N), "float32"), Out: T.Tensor((N,), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=2, block=64))
        tid = T.cuda.thread_id()
        b = T.cuda.block_id()
        stage = T.alloc_shared((N,), "float32")
        for j in T.unroll(4):
            stage[4 * tid + j] = A[b, 4 * tid + j]
        # the TMA unit (async proxy) reads what the generic stores wrote: fence, then every thread's part present
        T.cuda.tile.apply(T.ptx["fence.proxy.async.shared::cta"])
        T.cuda.syncthreads()
        if tid == 0:
            T.cuda.tile.apply(T.ptx[REDUCE], Out.view(parts, N // parts), stage.view(parts, N // parts),
                              copy_bytes=nb)
            T.cuda.tile.apply(T.ptx["cp.async.bulk.commit_group"])
            T.cuda.tile.apply(T.ptx["cp.async.bulk.wait_group"], 0)
    return bulk_add


def data(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-64, 64, (2, N)).astype(np.float32) / 4        # exact sums in any order
    out = rng.integers(-64, 64, N).astype(np.float32) / 4
    return a, out


@pytest.mark.parametrize("parts", [1, 4])
def test_interpreter_adds_both_blocks(parts):
    a, out = data(parts)
    want = out + a[0] + a[1]
    tiledsl.jit(make(parts).fn, interpret=True)(a, out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("parts", [1, 4])
def test_ptx_holds_the_instruction_and_assembles_for_sm90a(parts):
    a, out = data()
    ptx = make(parts).compile(a, out, target="sm_90a").asm["ptx"]
    lines = [ln.strip() for ln in ptx.splitlines() if REDUCE in ln]
    assert len(lines) == parts, lines
    assert all(ln.endswith(f", {N * 4 // parts};") for ln in lines), lines
    assert "cp.async.bulk.commit_group;" in ptx and "cp.async.bulk.wait_group 0;" in ptx
    r = ptxas(ptx, "sm_90a")
    assert r.returncode == 0, r.stderr


def test_needs_sm90():
    a, out = data()
    with pytest.raises(tiledsl.CompilationError, match="needs sm_90"):
        make().compile(a, out, target="sm_80")


@tiledsl.inline
def one_warp_and_a_stage():
    """The launch (one warp) and the float32 stage in shared memory of the bad-operand kernels below, so that each
    is its one wrong line (marked BAD: the test checks the error names that line)."""
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    return T.alloc_shared((N,), "float32")


def k_not_16(A: T.Tensor((2, N), "float32"), Out: T.Tensor((N,), "float32")):
    stage = one_warp_and_a_stage()
    T.cuda.tile.apply(T.ptx[REDUCE], Out[0:6], stage[0:6], copy_bytes=24)  # BAD


def k_scopes_swapped(A: T.Tensor((2, N), "float32"), Out: T.Tensor((N,), "float32")):
    stage = one_warp_and_a_stage()
    T.cuda.tile.apply(T.ptx[REDUCE], stage, Out, copy_bytes=N * 4)  # BAD


def k_both_global(A: T.Tensor((2, N), "float32"), Out: T.Tensor((N,), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    T.cuda.tile.apply(T.ptx[REDUCE], Out, A[0], copy_bytes=N * 4)  # BAD


def k_uint32(A: T.Tensor((2, N), "float32"), Out: T.Tensor((N,), "float32")):
    stage = one_warp_and_a_stage()
    T.cuda.tile.apply(T.ptx[REDUCE], Out.view(dtype="uint32"), stage.view(dtype="uint32"), copy_bytes=N * 4)  # BAD


def k_with_mbarrier(A: T.Tensor((2, N), "float32"), Out: T.Tensor((N,), "float32")):
    stage = one_warp_and_a_stage()
    bar = T.alloc_shared((1,), "uint64")
    T.cuda.tile.apply(T.ptx[REDUCE], Out, stage, bar, copy_bytes=N * 4)  # BAD


def k_misaligned(A: T.Tensor((2, N), "float32"), Out: T.Tensor((N,), "float32")):
    stage = one_warp_and_a_stage()
    T.cuda.tile.apply(T.ptx[REDUCE], Out[1:5], stage[0:4], copy_bytes=16)  # BAD


def k_min(A: T.Tensor((2, N), "float32"), Out: T.Tensor((N,), "float32")):
    stage = one_warp_and_a_stage()
    T.cuda.tile.apply(T.ptx["cp.reduce.async.bulk.global.shared::cta.bulk_group.min.f32"], Out, stage,  # BAD
                      copy_bytes=N * 4)


@pytest.mark.parametrize("fn, words", [
    (k_not_16, ("copy_bytes", "multiple of 16", "24")),
    (k_scopes_swapped, ("must be in global memory",)),
    (k_both_global, ("must be in shared memory",)),
    (k_uint32, ("uint32", "float32")),
    (k_with_mbarrier, ("operand",)),
    (k_misaligned, ("16",)),
    (k_min, ("no explicit tile pattern", REDUCE)),
], ids=lambda x: x.__name__ if callable(x) else None)
def test_bad_operands_name_the_line(fn, words):
    a, out = data()
    with pytest.raises(tiledsl.CompilationError) as info:
        tiledsl.jit(fn).compile(a, out, target="sm_90a")
    msg = str(info.value)
    for w in words:
        assert w in msg, msg
    lines, start = inspect.getsourcelines(fn)
    bad = start + next(i for i, text in enumerate(lines) if "# BAD" in text)
    assert info.value.loc is not None and info.value.loc.line == bad, msg
