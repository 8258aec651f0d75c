"""Tile patterns on the GPU, against exact references: mma (four forms x scalar/tensor C x repeats), fma in four
rounding modes, packed f16x2/bf16x2 fma, predication with and without preserve_dst, vector ld/st, ldmatrix
(plain and .trans) feeding an mma, stmatrix, and cp.async with commit/wait.

Arguments travel as torch CUDA tensors. tests/test_patterns_interpreter.py runs these same tests on the CPU
interpreter (ON_INTERPRETER), so they also check the expansions, and themselves, on machines without a GPU.
"""
import numpy as np
import pytest

import tiledsl
from test_patterns_compile import cp_async_copy, mma_lanes, mma_opcode, vector_copy
from test_patterns_layouts import (d_from_lanes, d_to_lanes, fma_inputs, lane_a, lane_b, lane_registers,
                                   mma_canonical, mma_layouts, pack_pairs, round_exact, value_of)
from tiledsl import T
from tiledsl.layout import S, TileLayout, laneid

pytestmark = pytest.mark.gpu
ON_INTERPRETER = False


def launch(kernel, *args):
    """Run `kernel` on copies of the numpy arrays in `args` (other arguments pass as they are); return the arrays
    as they are after the kernel, in order."""
    if ON_INTERPRETER:
        host = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
        tiledsl.jit(kernel.fn, interpret=True)(*host)
        return [a for a in host if isinstance(a, np.ndarray)]
    torch = pytest.importorskip("torch")
    dev = [torch.from_numpy(np.ascontiguousarray(a)).cuda() if isinstance(a, np.ndarray) else a for a in args]
    kernel(*dev)
    torch.cuda.synchronize()
    return [t.cpu().numpy() for t in dev if isinstance(t, torch.Tensor)]


def require_sm(sm):
    if not ON_INTERPRETER:
        torch = pytest.importorskip("torch")
        major, minor = torch.cuda.get_device_capability()
        if major * 10 + minor < sm:
            pytest.skip(f"needs sm_{sm}")


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


# ------------------------------------------------------------------ mma.sync


def small_values(rng, shape, scale):
    """Multiples of 1/scale in [-1, 1]: exact in f16 and bf16, products and sums exact in float32."""
    return (rng.integers(-scale, scale + 1, shape) / scale).astype(np.float32)


def run_mma(k, ab, reps, scalar_c, batch=1, seed=0):
    mr, nr, kr = reps
    rng = np.random.default_rng(seed)
    lays = mma_layouts(k, mr, nr, kr, batch=(batch,) if batch > 1 else ())
    lay = tuple(lays[n] for n in "ABD")
    a_lanes, b_lanes, c_lanes, ref = [], [], [], []
    for _ in range(batch):
        a = small_values(rng, (16 * mr, k * kr), 8)
        b = small_values(rng, (8 * nr, k * kr), 8)                # B's logical atom is (N, K)
        c = (rng.integers(-16, 17, (16 * mr, 8 * nr)) / 4).astype(np.float32)
        aw, bw = mma_canonical(a, b, k, ab)
        a_lanes.append(lane_registers(aw, lane_a, k // 4))
        b_lanes.append(lane_registers(bw, lane_b, k // 8))
        c_lanes.append(d_to_lanes(c, mr, nr))
        cref = np.full_like(c, 0.75) if scalar_c else c
        ref.append(a.astype(np.float64) @ b.astype(np.float64).T + cref)
    al, bl, cl = (np.ascontiguousarray(np.concatenate(x, axis=1)) for x in (a_lanes, b_lanes, c_lanes))
    out = np.zeros_like(cl)
    (out,) = launch(mma_lanes, al, bl, cl, out, mma_opcode(k, ab), "warp", 32, scalar_c, 0.75, lay)[3:]
    d = d_from_lanes(out, batch * mr, nr)
    return d, np.concatenate(ref, axis=0)


@pytest.mark.parametrize("scalar_c", [True, False], ids=["scalarC", "tensorC"])
@pytest.mark.parametrize("k, ab", [(8, "f16"), (8, "bf16"), (16, "f16"), (16, "bf16")])
def test_mma_forms_with_repeats_against_float64(k, ab, scalar_c):
    d, ref = run_mma(k, ab, (2, 2, 3), scalar_c)
    np.testing.assert_allclose(d, ref, rtol=1e-6, atol=1e-6)
    assert np.abs(ref).max() > 1


def test_mma_batch_axis():
    d, ref = run_mma(16, "bf16", (1, 2, 2), scalar_c=False, batch=2, seed=1)
    np.testing.assert_allclose(d, ref, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ fma rounding modes

lane2 = TileLayout(S[(32, 2, 1) : (1 @ laneid, 1, 1)])
MODES = ("fma.rn.f32", "fma.rz.f32", "fma.rm.f32", "fma.rp.f32")


@tiledsl.jit
def fma_modes(A: T.Tensor((32, 2, 1), "float32"), B: T.Tensor((32, 2, 1), "float32"),
              C: T.Tensor((32, 2, 1), "float32"), Out: T.Tensor((4, 32, 2, 1), "float32")):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((2,), "float32")
    b = T.alloc_local((2,), "float32")
    c = T.alloc_local((2,), "float32")
    av = a.view(32, 2, 1, layout=lane2)
    bv = b.view(32, 2, 1, layout=lane2)
    cv = c.view(32, 2, 1, layout=lane2)
    T.cuda.tile.apply(T.ptx["ld.global.f32"], av, A, scope="warp")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], bv, B, scope="warp")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], cv, C, scope="warp")
    for m in T.unroll(4):
        d = T.alloc_local((2,), "float32")
        dv = d.view(32, 2, 1, layout=lane2)
        T.cuda.tile.apply(T.ptx[MODES[m]], dv, av, bv, cv, scope="warp")
        T.cuda.tile.apply(T.ptx["st.global.f32"], Out[m], dv, scope="warp")


def test_fma_f32_rounding_modes_bit_exact():
    triples = fma_inputs("f32", 64, seed=5)
    a, b, c = (np.array([t[i] for t in triples], np.uint32).view(np.float32).reshape(32, 2, 1) for i in range(3))
    (out,) = launch(fma_modes, a, b, c, np.zeros((4, 32, 2, 1), np.float32))[3:]
    got = f32_bits(out).reshape(4, -1)
    for i, (x, y, z) in enumerate(triples):
        exact = value_of(x, "f32") * value_of(y, "f32") + value_of(z, "f32")
        want = [round_exact(exact, "f32", m) for m in ("rn", "rz", "rm", "rp")]
        assert [int(g) for g in got[:, i]] == want, (i, exact)
        assert want[2] != want[3]                                   # exact lies strictly between two floats
        two_roundings = round_exact(value_of(round_exact(value_of(x, "f32") * value_of(y, "f32"), "f32", "rn"),
                                             "f32") + value_of(z, "f32"), "f32", "rn")
        assert two_roundings != want[0]                             # a mul-then-add reference would be wrong


# ------------------------------------------------------------------ packed f16x2 / bf16x2 fma


@tiledsl.jit
def fma_packed(A: T.Tensor((32, 2, 1), "uint32"), B: T.Tensor((32, 2, 1), "uint32"),
               C: T.Tensor((32, 2, 1), "uint32"), Out: T.Tensor((32, 2, 1), "uint32"), OP: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    a = T.alloc_local((2,), "uint32")
    b = T.alloc_local((2,), "uint32")
    c = T.alloc_local((2,), "uint32")
    av = a.view(32, 2, 1, layout=lane2)
    bv = b.view(32, 2, 1, layout=lane2)
    cv = c.view(32, 2, 1, layout=lane2)
    T.cuda.tile.apply(T.ptx["ld.global.b32"], av, A, scope="warp")
    T.cuda.tile.apply(T.ptx["ld.global.b32"], bv, B, scope="warp")
    T.cuda.tile.apply(T.ptx["ld.global.b32"], cv, C, scope="warp")
    T.cuda.tile.apply(T.ptx[OP], av, av, bv, cv, scope="warp")
    T.cuda.tile.apply(T.ptx["st.global.b32"], Out, av, scope="warp")


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_packed_fma_bit_exact(fmt):
    triples = fma_inputs(fmt, 128, seed=6)
    halves = [np.array([t[i] for t in triples], np.uint32).reshape(64, 2) for i in range(3)]
    a, b, c = (pack_pairs(h).reshape(32, 2, 1) for h in halves)
    (out,) = launch(fma_packed, a, b, c, np.zeros((32, 2, 1), np.uint32), f"fma.rn.{fmt}x2")[3:]
    got = out.reshape(64)
    for w in range(64):
        for half in range(2):
            x, y, z = (int(h[w, half]) for h in halves)
            exact = value_of(x, fmt) * value_of(y, fmt) + value_of(z, fmt)
            assert (int(got[w]) >> (16 * half)) & 0xFFFF == round_exact(exact, fmt, "rn"), (w, half)


# ------------------------------------------------------------------ predication


@tiledsl.jit
def predicated_fma(A: T.Tensor((32, 2, 1), "float32"), Init: T.Tensor((32, 2, 1), "float32"),
                   Out: T.Tensor((32, 2, 1), "float32"), PRESERVE: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    a = T.alloc_local((2,), "float32")
    d = T.alloc_local((2,), "float32")
    av = a.view(32, 2, 1, layout=lane2)
    dv = d.view(32, 2, 1, layout=lane2)
    T.cuda.tile.apply(T.ptx["ld.global.f32"], av, A, scope="warp")
    T.cuda.tile.apply(T.ptx["ld.global.f32"], dv, Init, scope="warp")
    T.cuda.tile.apply(T.ptx["fma.rn.f32"], dv, av, 2.0, 1.0, scope="warp", pred=lane % 2 == 0,
                      preserve_dst=PRESERVE)
    T.cuda.tile.apply(T.ptx["st.global.f32"], Out, dv, scope="warp")


@pytest.mark.parametrize("preserve", [True, False], ids=["preserve_dst", "pred_only"])
def test_pred_with_and_without_preserve_dst(preserve):
    a = np.arange(64, dtype=np.float32).reshape(32, 2, 1)
    init = np.full((32, 2, 1), -7.0, np.float32)
    (out,) = launch(predicated_fma, a, init, np.zeros_like(a), preserve)[2:]
    even = np.arange(32) % 2 == 0
    np.testing.assert_array_equal(out[even], 2 * a[even] + 1)
    if preserve:
        np.testing.assert_array_equal(out[~even], init[~even])      # pred false: the old value stays
    # without preserve_dst the inactive lanes' destination is undefined: nothing to check there


# ------------------------------------------------------------------ ld / st vectors


def test_vector_ld_st_global_and_shared():
    a = np.random.default_rng(7).standard_normal((32, 8)).astype(np.float32)
    dd = np.arange(8, dtype=np.float64).reshape(4, 2) + 0.5
    a2, out, d2 = launch(vector_copy, a, np.zeros_like(a), dd)
    np.testing.assert_array_equal(out, a)
    np.testing.assert_array_equal(d2, dd)


# ------------------------------------------------------------------ ldmatrix feeding an mma (shared filled by cp.async)

FRAG4 = TileLayout(S[(4, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
FRAG2 = TileLayout(S[(2, 8, 4) : (1, 4 @ laneid, 1 @ laneid)])
A_TILES = TileLayout(S[(2, 2, 8, 4) : (4, 64, 8, 1)])     # matrix i = 2 * (k half) + (row half) of a 16x16 A
B_NK_TILES = TileLayout(S[(2, 8, 4) : (4, 8, 1)])         # B as 8 rows n x 16 k: matrix i = k half
B_KN_TILES = TileLayout(S[(2, 8, 4) : (32, 4, 1)])        # B as 16 rows k x 8 n: matrix i = rows 8i..8i+7
_L = mma_layouts(16, 1, 1, 1)


@tiledsl.jit
def ldmatrix_mma(A: T.Tensor((16, 8), "uint32"), B: T.Tensor((64,), "uint32"), Out: T.Tensor((32, 4), "float32"),
                 BOP: T.constexpr, BTILES: T.constexpr, LAY: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    sa = T.alloc_shared((16, 8), "uint32")
    sb = T.alloc_shared((64,), "uint32")
    T.cuda.tile.apply(T.ptx["cp.async.cg.shared.global"], sa.view(32, 1, 4), A.view(32, 1, 4), chunk_bytes=16,
                      scope="warp")
    T.cuda.tile.apply(T.ptx["cp.async.ca.shared.global"], sb.view(32, 1, 2), B.view(32, 1, 2), chunk_bytes=8,
                      scope="warp")
    T.cuda.tile.apply(T.ptx["cp.async.commit_group"])
    T.cuda.tile.apply(T.ptx["cp.async.wait_group"], 0)
    T.cuda.syncthreads()
    ar = T.alloc_local((4,), "uint32")
    br = T.alloc_local((2,), "uint32")
    dr = T.alloc_local((4,), "float32")
    T.cuda.tile.apply(T.ptx["ldmatrix.sync.aligned.m8n8.x4.shared.b16"], ar.view(4, 8, 4, layout=FRAG4),
                      sa.view(4, 8, 4, layout=A_TILES), scope="warp")
    T.cuda.tile.apply(T.ptx[BOP], br.view(2, 8, 4, layout=FRAG2), sb.view(2, 8, 4, layout=BTILES), scope="warp")
    T.cuda.tile.apply(T.ptx["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"],
                      dr.view(LAY[2][0], layout=LAY[2][1]), ar.view(LAY[0][0], layout=LAY[0][1]),
                      br.view(LAY[1][0], layout=LAY[1][1]), 0.0, scope="warp")
    for r in T.unroll(4):
        Out[lane, r] = dr[r]


@pytest.mark.parametrize("trans", [False, True], ids=["B_nk_plain", "B_kn_trans"])
def test_ldmatrix_feeds_mma(trans):
    rng = np.random.default_rng(8)
    a = small_values(rng, (16, 16), 8)
    b = small_values(rng, (8, 16), 8)                          # (N, K)
    aw = pack_pairs(a.astype(np.float16).view(np.uint16))     # (16, 8): rows of A, pairs along K
    bsrc = b.T if trans else b                                 # stored K x N for .trans, N x K otherwise
    bw = pack_pairs(np.ascontiguousarray(bsrc).astype(np.float16).view(np.uint16)).reshape(64)
    op = f"ldmatrix.sync.aligned.m8n8.x2{'.trans' if trans else ''}.shared.b16"
    lay = tuple(_L[n] for n in "ABD")
    (out,) = launch(ldmatrix_mma, aw, bw, np.zeros((32, 4), np.float32), op,
                    B_KN_TILES if trans else B_NK_TILES, lay)[2:]
    np.testing.assert_allclose(d_from_lanes(out, 1, 1), a.astype(np.float64) @ b.astype(np.float64).T,
                               rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ ldmatrix -> stmatrix round trips (sm_90)


@tiledsl.jit
def matrix_round_trip(A: T.Tensor((32, 4), "uint32"), Out: T.Tensor((32, 4), "uint32"), LD: T.constexpr,
                      ST: T.constexpr):
    T.device_entry(launch=T.cuda.LaunchConfig(grid=1, block=32))
    lane = T.cuda.lane_id()
    sa = T.alloc_shared((4, 8, 4), "uint32")
    sc = T.alloc_shared((4, 8, 4), "uint32")
    for w in T.unroll(4):
        sa[lane // 8, lane % 8, w] = A[lane, w]
    T.cuda.syncthreads()
    r = T.alloc_local((4,), "uint32")
    T.cuda.tile.apply(T.ptx[LD], r.view(4, 8, 4, layout=FRAG4), sa, scope="warp")
    T.cuda.tile.apply(T.ptx[ST], sc, r.view(4, 8, 4, layout=FRAG4), scope="warp")
    T.cuda.syncthreads()
    for w in T.unroll(4):
        Out[lane, w] = sc[lane // 8, lane % 8, w]


@pytest.mark.parametrize("ld_trans, st_trans", [(False, False), (True, True), (True, False)])
def test_ldmatrix_stmatrix_round_trip(ld_trans, st_trans):
    require_sm(90)
    a = np.random.default_rng(9).integers(0, 2**32, (32, 4), dtype=np.uint64).astype(np.uint32)
    ld = f"ldmatrix.sync.aligned.m8n8.x4{'.trans' if ld_trans else ''}.shared.b16"
    st = f"stmatrix.sync.aligned.m8n8.x4{'.trans' if st_trans else ''}.shared.b16"
    (out,) = launch(matrix_round_trip, a, np.zeros_like(a), ld, st)[1:]
    halves = a.view(np.uint16).reshape(4, 8, 8)              # four 8x8 b16 matrices
    want = halves if ld_trans == st_trans else halves.transpose(0, 2, 1)
    np.testing.assert_array_equal(out.view(np.uint16).reshape(4, 8, 8), want)


# ------------------------------------------------------------------ cp.async tails with commit / wait


@pytest.mark.parametrize("opcode, chunk", [("cp.async.ca.shared.global", 4), ("cp.async.ca.shared.global", 8),
                                           ("cp.async.cg.shared.global", 16)])
@pytest.mark.parametrize("tail", ["none", "src_size", "src_size_static", "ignore_src", "pred"])
def test_cp_async_copies_and_zero_fills(opcode, chunk, tail):
    a = np.random.default_rng(10).integers(1, 2**31, (32, 16)).astype(np.uint32)
    n = 12 if tail in ("ignore_src", "pred") else chunk // 4 * 2 if chunk > 4 else 2   # bytes for src_size
    (out,) = launch(cp_async_copy, a, np.zeros_like(a), n, opcode, chunk, tail, chunk == 16)[1:2]
    want = a.copy()
    chunks = want.view(np.uint8).reshape(32, 64 // chunk, chunk)
    lanes = np.arange(32)
    if tail == "src_size":
        chunks[:, :, n:] = 0
    elif tail == "src_size_static":
        chunks[:, :, chunk // 2:] = 0
    elif tail == "ignore_src":
        chunks[lanes < n] = 0
    if tail == "pred":                                         # lanes >= n copied nothing: shared is undefined there
        np.testing.assert_array_equal(out[lanes < n], want[lanes < n])
    else:
        np.testing.assert_array_equal(out, want)
