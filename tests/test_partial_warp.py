"""Warp scope on part of a warp (issue 15): a thread instruction at scope "warp" under a guard `lane < K` (or in a
block of fewer than 32 threads) takes K lanes as its lane axis; warp instructions there are refused, and so is a
lane extent that no guard makes true."""
import numpy as np
import pytest

import tiledsl
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid
from helpers import ptxas

HALF = TileLayout(S[(16, 2, 1) : (1 @ laneid, 1, 1)])      # lane l (< 16) holds row l: two registers
FULL = TileLayout(S[(32, 2, 1) : (1 @ laneid, 1, 1)])


@tiledsl.jit
def guarded(A: T.Tensor((16, 2), "float32"), Out: T.Tensor((16, 2), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=64))
    lane = T.cuda.lane_id()
    r = T.alloc_local((2,), "float32")
    if lane < 16:
        if T.cuda.warp_id() == 1:
            T.cuda.tile.apply(T.ptx["ld.global.f32"], r.view(16, 2, 1, layout=HALF), A.view(16, 2, 1), scope="warp")
            T.cuda.tile.apply(T.ptx["fma.rn.f32"], r.view(16, 2, 1, layout=HALF), r.view(16, 2, 1, layout=HALF),
                              T.float32(2), T.float32(1), scope="warp")
            T.cuda.tile.apply(T.ptx["st.global.f32"], Out.view(16, 2, 1), r.view(16, 2, 1, layout=HALF),
                              scope="warp")


@tiledsl.jit
def small_block(A: T.Tensor((16, 2), "float32"), Out: T.Tensor((16, 2), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=16))
    r = T.alloc_local((2,), "float32")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], r.view(16, 2, 1, layout=HALF), A.view(16, 2, 1), scope="warp")
    T.cuda.tile.apply(T.ptx["st.global.f32"], Out.view(16, 2, 1), r.view(16, 2, 1, layout=HALF), scope="warp")


def _run(k, a):
    out = np.full_like(a, np.nan)
    tiledsl.jit(k.fn, interpret=True)(a, out)
    return out


def test_guarded_half_warp_on_the_interpreter_and_ptxas():
    a = np.arange(32, dtype=np.float32).reshape(16, 2)
    np.testing.assert_array_equal(_run(guarded, a), 2 * a + 1)
    ck = guarded.compile(a, a, target="sm_90")
    assert ptxas(ck.asm["ptx"], "sm_90").returncode == 0
    assert ck.asm["ptx"].count("ld.global.f32") == 2


def test_block_of_sixteen_threads():
    a = np.arange(32, dtype=np.float32).reshape(16, 2)
    np.testing.assert_array_equal(_run(small_block, a), a)
    assert ptxas(small_block.compile(a, a, target="sm_90").asm["ptx"], "sm_90").returncode == 0


@pytest.mark.parametrize("guard, lanes", [("lane < 8", 8), ("lane <= 7", 8), ("8 > lane", 8),
                                          ("lane < 16 and lane < 8", 8)])
def test_guard_forms(guard, lanes):
    src = f'''
@tiledsl.jit
def k(A: T.Tensor(({lanes}, 1), "float32"), Out: T.Tensor(({lanes}, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    r = T.alloc_local((1,), "float32")
    if {guard}:
        T.cuda.tile.apply(T.ptx["ld.global.f32"], r.view({lanes}, 1, layout=L), A.view({lanes}, 1), scope="warp")
        T.cuda.tile.apply(T.ptx["st.global.f32"], Out.view({lanes}, 1), r.view({lanes}, 1, layout=L), scope="warp")
'''
    ns = {"tiledsl": tiledsl, "T": T, "L": TileLayout(S[(lanes, 1) : (1 @ laneid, 1)])}
    import linecache
    fname = f"<partial-{lanes}-{abs(hash(guard))}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    exec(compile(src, fname, "exec"), ns)
    a = np.arange(lanes, dtype=np.float32).reshape(lanes, 1) + 1
    np.testing.assert_array_equal(_run(ns["k"], a), a)


def test_unguarded_half_warp_is_refused():
    @tiledsl.jit
    def k(A: T.Tensor((16, 2), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        r = T.alloc_local((2,), "float32")
        T.cuda.tile.apply(T.ptx["ld.global.f32"], r.view(16, 2, 1, layout=HALF), A.view(16, 2, 1), scope="warp")

    with pytest.raises(tiledsl.CompilationError, match=r"must be \(32,\)"):
        k.compile(np.zeros((16, 2), np.float32), target="sm_90")


def test_a_guard_from_another_lane_does_not_narrow():
    @tiledsl.jit
    def k(A: T.Tensor((16, 2), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        lane = T.cuda.lane_id()
        r = T.alloc_local((2,), "float32")
        if lane >= 16:
            T.cuda.tile.apply(T.ptx["ld.global.f32"], r.view(16, 2, 1, layout=HALF), A.view(16, 2, 1), scope="warp")

    with pytest.raises(tiledsl.CompilationError, match=r"must be \(32,\)"):
        k.compile(np.zeros((16, 2), np.float32), target="sm_90")


def test_full_warp_layout_under_a_guard_is_refused():
    @tiledsl.jit
    def k(A: T.Tensor((32, 2), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        r = T.alloc_local((2,), "float32")
        if T.cuda.lane_id() < 16:
            T.cuda.tile.apply(T.ptx["ld.global.f32"], r.view(32, 2, 1, layout=FULL), A.view(32, 2, 1), scope="warp")

    with pytest.raises(tiledsl.CompilationError, match=r"must be \(16,\)"):
        k.compile(np.zeros((32, 2), np.float32), target="sm_90")


def test_warp_instruction_under_a_lane_guard_is_refused():
    import seed_mma
    src_ok = seed_mma.warp_mma
    assert src_ok is not None

    @tiledsl.jit
    def k(A: T.Tensor((32, 4), "uint32"), D: T.Tensor((32, 4), "float32")):
        T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
        a = T.alloc_local((4,), "uint32")
        b = T.alloc_local((2,), "uint32")
        d = T.alloc_local((4,), "float32")
        if T.cuda.lane_id() < 16:
            T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"], d, a, b, T.float32(0),
                              scope="warp")

    with pytest.raises(tiledsl.CompilationError, match="all 32 lanes of a warp must execute it"):
        k.compile(np.zeros((32, 4), np.uint32), np.zeros((32, 4), np.float32), target="sm_90")


@pytest.mark.gpu
def test_guarded_half_warp_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = np.random.default_rng(0).standard_normal((16, 2)).astype(np.float32)
    for k in (guarded, small_block):
        out = torch.full((16, 2), float("nan"), device="cuda")
        k(torch.from_numpy(a).cuda(), out)
        np.testing.assert_array_equal(out.cpu().numpy(), _run(k, a))
