"""The FA3-style attention backward (examples/attention_backward_hopper.py) without a GPU: small cases (ragged N,
causal, GQA, more keys than queries and fewer, the ring turning over) match a float64 reference of the gradients on
the fibered interpreter through attention_backward(path="fa3"); the kernels compile for sm_90a and ptxas assembles
them with no spills and no serialized wgmma; bad calls are refused with LaunchErrors.
tests/test_gpu_attention_backward.py runs the kernel on the H200 (GPU_SHAPES below are its kernels)."""
import numpy as np
import pytest

import attention as A
import attention_backward as AB
import attention_backward_hopper as ABH
import tiledsl
from helpers import check_assembles


def kernel_ptx(dtype, causal, shape, scale=None, D=128):
    """The main kernel's PTX for (B, H, H_kv, N, N_kv), with numpy stand-ins for its arguments (bfloat16 as its
    uint16 bits)."""
    B, H, HK, N, NK = shape
    dt = np.float16 if dtype == "float16" else np.uint16
    NP = -(-N // ABH.BM) * ABH.BM
    q = np.empty((B * H, N, D), dt)
    kv = np.empty((B * HK, NK, D), dt)
    stats = np.empty((B * H, NP), np.float32)
    acc = kv.reshape(B, HK, NK, D) if H == HK else np.empty((B * HK * NK, D), np.float32)
    k = ABH.make_attention_backward_hopper(dtype, D, causal, shape, scale or 1.0 / D ** 0.5)
    ck = k.compile(q, kv, kv, q, stats, stats, np.empty((B * H * NP, D), np.float32), acc, acc)
    return ck.asm["ptx"], ck.metadata


# the benchmark's shape (B*N = 16384 tokens, H*D = 2048) and tests/test_gpu_attention_backward.py's fa3 kernels
BENCH_SHAPE = (4, 16, 16, 4096, 4096)
GPU_SHAPES = [(dt, c, (2, 4, 4, n, n), None) for dt in ("float16", "bfloat16") for c in (False, True)
              for n in (1000, 1024, 64, 130)]
GPU_SHAPES += [(dt, c, (2, 8, hk, 1000, 1000), 0.05) for dt in ("float16", "bfloat16") for c in (False, True)
               for hk in (2, 1)]
GPU_SHAPES += [("float16", c, (1, 4, 2, n, nk), None) for c in (False, True) for n, nk in ((300, 1234), (1234, 300))]
GPU_SHAPES += [("bfloat16", c, BENCH_SHAPE, None) for c in (False, True)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_benchmark_kernel_compiles_for_sm90a_without_spills(dtype, causal):
    ptx, meta = kernel_ptx(dtype, causal, BENCH_SHAPE)
    assert ".target sm_90a" in ptx
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    for form in ("m64n64k16", "m64n128k16"):                  # S^T, dP^T and dQ; dV and dK
        assert f"wgmma.mma_async.sync.aligned.{form}.f32.{t}.{t}" in ptx, form
    assert f"setmaxnreg.dec.sync.aligned.u32 {ABH.PRODUCER_REGS};" in ptx and "setmaxnreg.inc" in ptx
    assert "elect.sync" in ptx and "cp.async.bulk.tensor.3d.shared::cluster.global.tile" in ptx
    assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx    # LSE, Delta slices
    assert ptx.count(".param .align 64 .b8") == 4                                       # Q, K, V, dO tensor maps
    for op in ("bar.sync 1, 256", "fence.proxy.async.shared::cta", "ex2.approx.ftz.f32", f"cvt.rn.{t}x2.f32",
               "wgmma.wait_group.sync.aligned 1;", "st.shared.v2.f32", "cp.async.bulk.commit_group;",
               "cp.async.bulk.wait_group.read 0;", "cp.async.bulk.wait_group 0;"):
        assert op in ptx, op
    # dQ: one 16 KB bulk reduction a consumer and query tile, no scalar atomics (dK and dV are stored)
    assert ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == 1
    assert ", 16384;" in ptx and "red.global.add.f32" not in ptx
    assert "__local_depot" not in ptx
    assert meta["dynamic_shared"] <= ABH.SMEM_LIMIT
    check_assembles(ptx)


@pytest.mark.slow
@pytest.mark.parametrize("dtype, causal, shape, scale", GPU_SHAPES)
def test_every_gpu_test_kernel_assembles(dtype, causal, shape, scale):
    # none spills: causal with GQA spilled 4-12 bytes while dQ was added by scalar red (its addressing cost
    # registers); the bulk reduction's staging freed them (measured 2026-12-01)
    check_assembles(kernel_ptx(dtype, causal, shape, scale)[0])


def _case(H, HK, N, NK, causal, scale, seed, D=128):
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((1, H, N, D)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, HK, NK, D)).astype(np.float16) for _ in range(2))
    o, lse = A.attention(q, k, v, causal=causal, scale=scale, config=(4, 1, 1))
    got = AB.attention_backward(q, k, v, o, lse, do, causal=causal, scale=scale, path="fa3")
    ref = AB.reference_backward(q, k, v, do, causal=causal, scale=scale)
    for g, r, x in zip(got, ref, (q, k, v)):
        assert g.dtype == np.float16 and g.shape == x.shape
        rel = np.linalg.norm(g.astype(np.float64) - r) / np.linalg.norm(r)
        assert rel <= 1e-2, rel


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(1, 1), (2, 1)], ids=["mha", "gqa"])
def test_on_the_interpreter_against_the_reference(causal, heads):
    # N = 130: two whole query tiles and a ragged one; one key block, ragged (130 of 2 x 128 rows)
    _case(*heads, 130, 130, causal, 0.3, seed=heads[0] + causal)


@pytest.mark.parametrize("causal, heads, n, nk", [
    (False, (1, 1), 64, 64),       # one query tile, half a key block
    (True, (2, 2), 192, 192),      # three query tiles through two stages: the ring turns over
    (True, (2, 1), 150, 300),      # more keys than queries: causal key blocks past the queries walk no tile
    (False, (2, 1), 192, 100),     # fewer keys than queries
    (True, (1, 1), 200, 70),
])
def test_ring_and_lengths_on_the_interpreter(causal, heads, n, nk):
    _case(*heads, n, nk, causal, 0.3, seed=n + nk)


def test_bad_calls_are_refused():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 64, 64)).astype(np.float16)
    o, lse = A.attention(q, q, q, config=(4, 1, 1))
    with pytest.raises(tiledsl.LaunchError, match="head dims 128"):
        AB.attention_backward(q, q, q, o, lse, q, path="fa3")
    with pytest.raises(tiledsl.LaunchError, match="path"):
        AB.attention_backward(q, q, q, o, lse, q, path="fa4")
    with pytest.raises(tiledsl.LaunchError, match="warps"):
        AB.attention_backward(q, q, q, o, lse, q, path="fa3", warps=4)
    with pytest.raises(tiledsl.LaunchError, match="stages"):
        ABH.make_attention_backward_hopper("float16", 128, False, (1, 1, 1, 64, 64), 0.1, stages=9)
    # 3 stages no longer fit beside the 32 KB of dQ staging
    with pytest.raises(tiledsl.LaunchError, match="stages within 232448 bytes"):
        ABH.make_attention_backward_hopper("float16", 128, False, (1, 1, 1, 64, 64), 0.1, stages=3)


def test_cast_reads_the_tiled_dq_accumulator():
    """make_cast_dq against the fragment map written out in numpy: register i of warpgroup thread t = 32 w + l of
    consumer c holds (row 16 w + l // 4 + 8 ((i // 2) % 2), column 64 c + 8 (i // 4) + 2 (l % 4) + i % 2) of its
    query tile, at float 2 (128 (i // 2) + t) + i % 2 of the block of (bh, tile, c)."""
    BH, N, D, BM = 2, 100, 128, ABH.BM
    nqt = -(-N // BM)
    rng = np.random.default_rng(0)
    dq = rng.standard_normal((BH, nqt * BM, D)).astype(np.float32)
    tiled = np.zeros((BH, nqt, ABH.CONS, BM * 64), np.float32)
    t, i = np.meshgrid(np.arange(128), np.arange(32), indexing="ij")
    w, lane = t // 32, t % 32
    row = 16 * w + lane // 4 + 8 * ((i // 2) % 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    at = 2 * (128 * (i // 2) + t) + i % 2
    for bh in range(BH):
        for qt in range(nqt):
            for c in range(ABH.CONS):
                tiled[bh, qt, c, at] = dq[bh, qt * BM + row, 64 * c + col]
    out = np.zeros((BH * N * D // 8, 8), np.float16)
    tiledsl.jit(ABH.make_cast_dq("float16", BH, N).fn, interpret=True)(tiled.reshape(-1, 8), out)
    np.testing.assert_array_equal(out.reshape(BH, N, D), dq[:, :N].astype(np.float16))
