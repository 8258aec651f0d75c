"""The FA3-style attention backward (tiledsl/ops/flash/fa3_backward.py) without a GPU: small cases (ragged N,
causal, GQA, more keys than queries and fewer, the ring turning over) match a float64 reference of the gradients on
the fibered interpreter through attention_backward(path="fa3"); the kernels compile for sm_90a and ptxas assembles
them with no spills and no serialized wgmma; bad calls are refused with LaunchErrors.
tests/test_gpu_attention_backward.py runs the kernel on the H200 (GPU_SHAPES below are its kernels)."""
import numpy as np
import pytest

from tiledsl.ops.flash import backward as BWD
from tiledsl.ops.flash import fa2_backward as AB
from tiledsl.ops.flash import fa3_backward as ABH
from tiledsl.ops.flash import forward as FWD
import tiledsl
from helpers import check_assembles


def kernel_ptx(dtype, causal, shape, scale=None, D=128, tail_split=False, tma_kv=False, dq_overlap=None,
               score_split=None, dq_combine=None):
    """The main kernel's PTX for (B, H, H_kv, N, N_kv), with numpy stand-ins for its arguments (bfloat16 as its
    uint16 bits; the tail split's workspace too)."""
    B, H, HK, N, NK = shape
    dt = np.float16 if dtype == "float16" else np.uint16
    NP = -(-N // ABH.BM) * ABH.BM
    q = np.empty((B * H, N, D), dt)
    kv = np.empty((B * HK, NK, D), dt)
    stats = np.empty((B * H, NP), np.float32)
    acc = kv.reshape(B, HK, NK, D) if H == HK else np.empty((B * HK * NK, D), np.float32)
    k = ABH.make_attention_backward_hopper(dtype, D, causal, shape, scale or 1.0 / D ** 0.5, tail_split=tail_split,
                                           tma_kv=tma_kv, dq_overlap=dq_overlap, score_split=score_split,
                                           dq_combine=dq_combine)
    ws = (np.empty(k.slots, np.float32), np.zeros(k.counters, np.int32)) if k.slots else ()
    acc = ABH.kv_arg(acc, k)
    ck = k.compile(q, kv, kv, q, stats, stats, np.empty((B * H * NP, D), np.float32), acc, acc, *ws)
    return ck.asm["ptx"], ck.metadata


# the benchmark's shape (B*N = 16384 tokens, H*D = 2048) and tests/test_gpu_attention_backward.py's fa3 kernels
BENCH_SHAPE = (4, 16, 16, 4096, 4096)
GPU_SHAPES = [(dt, c, (2, 4, 4, n, n), None) for dt in ("float16", "bfloat16") for c in (False, True)
              for n in (1000, 1024, 64, 130)]
GPU_SHAPES += [(dt, c, (2, 8, hk, 1000, 1000), 0.05) for dt in ("float16", "bfloat16") for c in (False, True)
               for hk in (2, 1)]
GPU_SHAPES += [("float16", c, (1, 4, 2, n, nk), None) for c in (False, True) for n, nk in ((300, 1234), (1234, 300))]
GPU_SHAPES += [("bfloat16", c, BENCH_SHAPE, None) for c in (False, True)]
# tests/test_gpu_attention_backward.py::test_fa3_tma_kv_is_bit_for_bit's tma_kv kernels
GPU_TMA_KV_SHAPES = [(dt, c, (2, 4, 4, n, nk)) for dt in ("float16", "bfloat16") for c in (False, True)
                     for n, nk in ((1000, 1000), (4096, 4096), (300, 1234), (1234, 300))]


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


@pytest.mark.slow
@pytest.mark.parametrize("dtype, causal, shape", GPU_TMA_KV_SHAPES)
def test_every_tma_kv_gpu_test_kernel_assembles(dtype, causal, shape):
    check_assembles(kernel_ptx(dtype, causal, shape, tma_kv=True)[0])


def _case(H, HK, N, NK, causal, scale, seed, D=128, **fa3):
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((1, H, N, D)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, HK, NK, D)).astype(np.float16) for _ in range(2))
    o, lse = FWD.attention(q, k, v, causal=causal, scale=scale, config=(4, 1, 1))
    got = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=scale, path="fa3", **fa3)
    ref = BWD.reference_backward(q, k, v, do, causal=causal, scale=scale)
    for g, r, x in zip(got, ref, (q, k, v)):
        assert g.dtype == np.float16 and g.shape == x.shape
        rel = np.linalg.norm(g.astype(np.float64) - r) / np.linalg.norm(r)
        assert rel <= 1e-2, rel


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(1, 1), (2, 1)], ids=["mha", "gqa"])
def test_on_the_interpreter_against_the_reference(causal, heads):
    # N = 130: two whole query tiles and a ragged one; one key block, ragged (130 of 2 x 128 rows)
    _case(*heads, 130, 130, causal, 0.3, seed=heads[0] + causal)


@pytest.mark.parametrize("D", [64, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads, n, nk", [((1, 1), 130, 130), ((2, 1), 192, 100), ((2, 2), 150, 300),
                                         ((1, 1), 200, 70)], ids=["ragged", "gqa", "more_keys", "fewer_keys"])
def test_head_dims_64_and_256_on_the_interpreter_against_the_reference(D, causal, heads, n, nk):
    # D = 64: each consumer's dQ is a partial over its own 64 keys, both added into the same accumulator block.
    # D = 256: the consumers share a block's 64 keys and split dK, dV and dQ's columns; each stages its dQ blocks
    # in its own columns of the stage's Q and dO and releases the stage a tile later (three query tiles and more:
    # the two-stage ring turns over)
    _case(*heads, n, nk, causal, 0.3, seed=n + nk + causal, D=D)


@pytest.mark.parametrize("causal", [False, True])
def test_head_dim_256_dq_overlap_on_the_interpreter_is_bit_for_bit(causal):
    # dq_overlap issues the second dQ block while the first runs: the same products, the same sums
    rng = np.random.default_rng(5)
    q, k, v, do = (rng.standard_normal((1, 2, 200, 256)).astype(np.float16) for _ in range(4))
    o, lse = FWD.attention(q, k, v, causal=causal, config=(4, 1, 1))
    a = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, path="fa3", dq_overlap=False)
    b = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, path="fa3", dq_overlap=True)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads, n, nk", [((1, 1), 130, 130), ((2, 1), 192, 100), ((2, 2), 150, 300),
                                         ((1, 1), 200, 70)], ids=["ragged", "gqa", "more_keys", "fewer_keys"])
def test_head_dim_256_score_split_on_the_interpreter_is_bit_for_bit(causal, heads, n, nk):
    # score_split: each consumer's S^T and dP^T over half the tile's queries, P^T and dS^T through shared memory to
    # dV's and dK's wgmmas; the same products summed in the same order as the default's (dq_overlap on as well)
    rng = np.random.default_rng(n + nk)
    H, HK = heads
    q, do = (rng.standard_normal((1, H, n, 256)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, HK, nk, 256)).astype(np.float16) for _ in range(2))
    o, lse = FWD.attention(q, k, v, causal=causal, scale=0.3, config=(4, 1, 1))
    a = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=0.3, path="fa3", score_split=False)
    b = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=0.3, path="fa3", score_split=True,
                               dq_overlap=causal)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads, n, nk", [((1, 1), 130, 130), ((2, 1), 192, 100), ((2, 2), 150, 300)],
                         ids=["ragged", "gqa", "more_keys"])
def test_head_dim_256_score_split_own_on_the_interpreter_against_the_reference(causal, heads, n, nk):
    # score_split="own": a consumer's own query half of dV and dK from its registers before the barrier, the other
    # half from the shared copies after it (consumer 1 sums its halves in the other order)
    _case(*heads, n, nk, causal, 0.3, seed=n + nk + 7, D=256, score_split="own", dq_overlap=not causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads, n, nk", [((1, 1), 130, 130), ((2, 1), 192, 100), ((2, 2), 150, 300),
                                         ((1, 1), 320, 320)], ids=["ragged", "gqa", "more_keys", "five_tiles"])
def test_head_dim_64_dq_combine_on_the_interpreter_against_the_reference(causal, heads, n, nk):
    # dq_combine: consumer 0 stages its partial dQ, consumer 1 adds it to its own and reduces the sum (a named
    # barrier pair hands the buffer over and back: the race detector checks the hand-over)
    _case(*heads, n, nk, causal, 0.3, seed=n + nk + 3, D=64, dq_combine=True)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dq_combine", [False, True])
def test_head_dim_64_compiles_for_sm90a_without_spills(dtype, causal, dq_combine):
    ptx, meta = kernel_ptx(dtype, causal, (4, 32, 32, 4096, 4096), D=64, dq_combine=dq_combine)
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    assert f"wgmma.mma_async.sync.aligned.m64n64k16.f32.{t}.{t}" in ptx and "m64n128k16" not in ptx
    # dQ: no barrier of both consumers inside the loop (each reads its own dS^T), one bulk reduction a consumer;
    # dq_combine: consumer 1's only, after barriers 4 and 5 hand consumer 0's partial over
    assert "bar.sync 1, 256" not in ptx and "bar.sync 2, 128" in ptx and "bar.sync 3, 128" in ptx
    assert ("bar.arrive 4, 256" in ptx and "bar.sync 5, 256" in ptx) == dq_combine
    assert ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == 1
    assert "__local_depot" not in ptx
    assert meta["dynamic_shared"] <= ABH.SMEM_LIMIT
    check_assembles(ptx)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dq_overlap, score_split", [(False, False), (True, False), (False, True), (True, True),
                                                     (False, "own"), (True, "own")])
def test_head_dim_256_compiles_for_sm90a_without_spills(dtype, causal, dq_overlap, score_split):
    ptx, meta = kernel_ptx(dtype, causal, (4, 8, 8, 4096, 4096), D=256, dq_overlap=dq_overlap,
                           score_split=score_split)
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    # S^T and dP^T (m64n32 over half the queries with score_split), dQ; dV and dK over 128 columns
    for form in ("m64n32k16" if score_split else "m64n64k16", "m64n64k16", "m64n128k16"):
        assert f"wgmma.mma_async.sync.aligned.{form}.f32.{t}.{t}" in ptx, form
    assert "m64n256k16" not in ptx and ("m64n32k16" in ptx) == bool(score_split)
    # the dS^T barrier of both consumers; two 16 KB bulk reductions a consumer and tile, staged in the stage
    assert "bar.sync 1, 256" in ptx and ", 16384;" in ptx
    assert ptx.count("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32") == 2
    assert "__local_depot" not in ptx
    assert meta["dynamic_shared"] <= ABH.SMEM_LIMIT
    check_assembles(ptx)


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
    with pytest.raises(tiledsl.LaunchError, match="head dims 64, 128, 256, got 96"):
        ABH.make_attention_backward_hopper("float16", 96, False, (1, 1, 1, 64, 64), 0.1)
    for bad in (dict(tail_split=True), dict(tma_kv=True)):
        with pytest.raises(tiledsl.LaunchError, match="D = 256 .* no tail split and no tma_kv"):
            ABH.make_attention_backward_hopper("float16", 256, False, (4, 16, 16, 4096, 4096), 0.1, **bad)
    # D = 256: 3 stages of 64 KB do not fit
    with pytest.raises(tiledsl.LaunchError, match="stages within 232448 bytes"):
        ABH.make_attention_backward_hopper("float16", 256, False, (1, 1, 1, 64, 64), 0.1, stages=3)
    q = rng.standard_normal((1, 1, 64, 64)).astype(np.float16)
    o, lse = FWD.attention(q, q, q, config=(4, 1, 1))
    with pytest.raises(tiledsl.LaunchError, match="path"):
        BWD.attention_backward(q, q, q, o, lse, q, path="fa4")
    with pytest.raises(tiledsl.LaunchError, match="warps"):
        BWD.attention_backward(q, q, q, o, lse, q, path="fa3", warps=4)
    with pytest.raises(tiledsl.LaunchError, match="tail_split"):
        BWD.attention_backward(q, q, q, o, lse, q, path="fa2", tail_split=True)
    for bad in (dict(tma_kv=True), dict(score_split=True), dict(dq_combine=True)):
        with pytest.raises(tiledsl.LaunchError,
                           match="dq_overlap=, score_split= and dq_combine= configure the fa3 backward"):
            BWD.attention_backward(q, q, q, o, lse, q, path="fa2", **bad)
    with pytest.raises(tiledsl.LaunchError, match="score_split applies where the consumers split the columns"):
        BWD.attention_backward(q, q, q, o, lse, q, path="fa3", score_split=True)
    for bad in (dict(D=128), dict(D=64, tail_split=True)):
        with pytest.raises(tiledsl.LaunchError, match="dq_combine applies at D = 64 without the tail split"):
            ABH.make_attention_backward_hopper("float16", bad.pop("D"), False, (4, 16, 16, 4096, 4096), 0.1,
                                               dq_combine=True, **bad)
    with pytest.raises(tiledsl.LaunchError, match="dq_combine must be True, False or None, got 2"):
        ABH.make_attention_backward_hopper("float16", 64, False, (1, 1, 1, 64, 64), 0.1, dq_combine=2)
    with pytest.raises(tiledsl.LaunchError, match="dq_overlap applies where the consumers split the columns"):
        BWD.attention_backward(q, q, q, o, lse, q, path="fa3", dq_overlap=True)
    for name in ("dq_overlap", "score_split"):
        with pytest.raises(tiledsl.LaunchError, match=f"{name} must be True, False or None.*, got 2"):
            ABH.make_attention_backward_hopper("float16", 256, False, (1, 1, 1, 64, 64), 0.1, **{name: 2})
    for bad in (dict(shape=(1, 2, 1, 64, 64)), dict(shape=(4, 16, 16, 4096, 4096), tail_split=True, sms=132)):
        with pytest.raises(tiledsl.LaunchError, match="tma_kv stores dK and dV whole"):
            ABH.make_attention_backward_hopper("float16", 128, False, bad.pop("shape"), 0.1, tma_kv=True, **bad)
    with pytest.raises(tiledsl.LaunchError, match="tma_kv must be True or False, got 2"):
        ABH.make_attention_backward_hopper("float16", 128, False, (1, 1, 1, 64, 64), 0.1, tma_kv=2)
    with pytest.raises(tiledsl.LaunchError, match="positive number of SMs"):
        ABH.make_attention_backward_hopper("float16", 128, False, (1, 1, 1, 64, 64), 0.1, tail_split=True, sms=0)
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


# the tail split (tail_split=True): (H, H_kv, N, N_kv, causal, sms) and the plan it makes
SPLIT_CASES = {
    # 4 items (2 heads x 2 key blocks of 5 query tiles) on 3 SMs: 3 whole, then item 3's 5 tiles over 3 blocks
    "one-item-in-3": ((2, 2, 320, 256, False, 3), (3, 1, 5, 3)),
    # fewer items than SMs: all 20 tiles over 5 blocks of 4; blocks 1..3 end one item and start the next
    "all-split": ((2, 2, 320, 256, False, 5), (0, 4, 20, 5)),
    # causal items of 5, 3 and 1 tiles: 4 whole, then items of 3 and 1 tiles over 4 blocks
    "causal": ((2, 2, 320, 320, True, 4), (4, 2, 4, 4)),
    # causal, 18 tiles over 7 blocks: block 3 ends item 1, runs item 2 whole and starts item 3 (three pieces)
    "causal-3-pieces": ((2, 2, 320, 320, True, 7), (0, 6, 18, 7)),
    "causal-3-pieces-d64": ((2, 2, 320, 320, True, 7), (0, 6, 18, 7)),
    # GQA: the pieces add into the float32 accumulators
    "gqa": ((2, 1, 320, 256, False, 3), (3, 1, 5, 3)),
    "gqa-causal": ((4, 2, 320, 320, True, 7), (7, 5, 13, 7)),
}


def _split_inputs(H, HK, N, NK, causal, seed, D=128):
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((1, H, N, D)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, HK, NK, D)).astype(np.float16) for _ in range(2))
    o, lse = FWD.attention(q, k, v, causal=causal, scale=0.3, config=(4, 1, 1))
    return q, k, v, o, lse, do


@pytest.mark.parametrize("name", list(SPLIT_CASES))
def test_tail_split_on_the_interpreter_against_the_reference(name):
    """The split grid's gradients match the float64 reference at the plain kernel's tolerance (not bit-identical to
    it: a split item's dK and dV are sums of partial sums) and are the same on a second run."""
    (H, HK, N, NK, causal, sms), plan = SPLIT_CASES[name]
    assert ABH.tail_plan(causal, (1, H, HK, N, NK), sms) == plan
    q, k, v, o, lse, do = _split_inputs(H, HK, N, NK, causal, seed=N + sms, D=64 if name.endswith("d64") else 128)
    run = lambda: BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=0.3, path="fa3",  # noqa: E731
                                         tail_split=True, sms=sms)
    got = run()
    ref = BWD.reference_backward(q, k, v, do, causal=causal, scale=0.3)
    for g, r, x in zip(got, ref, (q, k, v)):
        assert g.dtype == np.float16 and g.shape == x.shape
        rel = np.linalg.norm(g.astype(np.float64) - r) / np.linalg.norm(r)
        assert rel <= 1e-2, rel
    for g, again in zip(got, run()):
        np.testing.assert_array_equal(g, again)


def test_tail_split_leaves_its_counters_at_zero_for_the_next_launch():
    """Two launches of the split kernel on one workspace (an item in 3 pieces): the last piece of each split item
    sets its counter back to 0, so the second launch finds the same last pieces and gives the same dK and dV."""
    H, N, causal, sms = 2, 320, False, 3
    q, k, v, o, lse, do = _split_inputs(H, H, N, 256, causal, seed=1)
    shape = (1, H, H, N, 256)
    kern = ABH.make_attention_backward_hopper("float16", 128, causal, shape, 0.3, tail_split=True, sms=sms)
    assert kern.slots == (2 * 3, 2 * 64 * 256) and kern.counters == 1
    NP = -(-N // ABH.BM) * ABH.BM
    run = lambda kern_, *a: tiledsl.jit(kern_.fn, interpret=True)(*a)  # noqa: E731
    delta, lse2 = (np.zeros((H, NP), np.float32) for _ in range(2))
    run(AB.make_delta("float16", 128, H, N, NP), o.reshape(-1, 128), do.reshape(-1, 128), lse.reshape(-1),
        delta.reshape(-1), lse2.reshape(-1))
    W = np.full(kern.slots, np.nan, np.float32)
    F = np.zeros(kern.counters, np.int32)
    outs = []
    for _ in range(2):
        dqa = np.zeros((H * NP, 128), np.float32)
        dk, dv = np.zeros_like(k), np.zeros_like(v)
        run(kern, q.reshape(H, N, 128), k.reshape(H, 256, 128), v.reshape(H, 256, 128), do.reshape(H, N, 128),
            lse2, delta, dqa, dk, dv, W, F)
        assert not F.any()
        outs.append((dqa, dk, dv))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
    assert np.isfinite(outs[0][1]).all() and np.abs(outs[0][1]).max() > 0


@pytest.mark.parametrize("dtype, causal, shape", [
    ("float16", False, BENCH_SHAPE), ("bfloat16", True, BENCH_SHAPE),
    ("float16", False, (2, 8, 2, 1000, 1000)), ("bfloat16", True, (2, 8, 2, 1000, 1000))])
def test_tail_split_assembles_without_spills(dtype, causal, shape):
    ptx, meta = kernel_ptx(dtype, causal, shape, tail_split=True)
    assert "atom.acq_rel.gpu.global.add.s32" in ptx or shape[1] != shape[2]
    assert "__local_depot" not in ptx and meta["dynamic_shared"] <= ABH.SMEM_LIMIT
    check_assembles(ptx)


def test_tail_split_is_taken_where_the_model_says_it_shortens_the_grid():
    # 2048 items on 132 SMs: 15 waves and 68 items, whose tiles go to 132 blocks
    assert ABH.tail_plan(False, BENCH_SHAPE) == (1980, 68, 68 * 64, 132)
    assert ABH.tail_split_helps(False, BENCH_SHAPE)
    assert ABH.tail_split_helps(False, (1, 16, 16, 16384, 16384))
    assert not ABH.tail_split_helps(False, (4, 33, 33, 4096, 4096))     # 4224 items: 32 whole waves
    assert ABH.tail_plan(False, (4, 33, 33, 4096, 4096)) is None
    # causal with more keys than queries: key blocks that walk no tile, not split
    assert ABH.tail_plan(True, (1, 4, 4, 300, 1234)) is None
    # the model: one SM, 3 blocks of 2, 1 and 1: 4; two SMs: 2 and 1 + 1
    assert ABH.makespan([2, 1, 1], 1) == 4 and ABH.makespan([2, 1, 1], 2) == 2


@pytest.mark.parametrize("causal, n, nk, D", [(False, 200, 200, 128), (True, 200, 200, 128), (False, 130, 190, 128),
                                               (True, 190, 130, 128), (True, 190, 130, 64)])
def test_tma_kv_on_the_interpreter_is_bit_for_bit(causal, n, nk, D):
    # tma_kv: dK and dV staged in K's and V's buffers (once both consumers are past their last dQ) and stored by
    # the TMA unit, which drops the key rows past N_kv (190 and 130: a ragged second key block): the same numbers
    # as the st.global epilogue, to the bit
    rng = np.random.default_rng(n + nk + causal)
    q, do = (rng.standard_normal((1, 2, n, D)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((1, 2, nk, D)).astype(np.float16) for _ in range(2))
    o, lse = FWD.attention(q, k, v, causal=causal, scale=0.1, config=(4, 1, 1))
    g0 = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=0.1, path="fa3", tma_kv=False)
    g1 = BWD.attention_backward(q, k, v, o, lse, do, causal=causal, scale=0.1, path="fa3", tma_kv=True)
    assert all(np.array_equal(a, b) for a, b in zip(g0, g1))
    ref = BWD.reference_backward(q, k, v, do, causal=causal, scale=0.1)
    for g, r in zip(g1, ref):
        assert np.linalg.norm(g.astype(np.float64) - r) / np.linalg.norm(r) <= 1e-2


@pytest.mark.parametrize("causal", [False, True])
def test_tma_kv_assembles_without_spills(causal):
    # dK and dV by stmatrix (8 x4 a consumer thread) and four TMA stores, no st.global: the benchmark's shape
    ptx, _ = kernel_ptx("float16", causal, BENCH_SHAPE, tma_kv=True)
    plain, _ = kernel_ptx("float16", causal, BENCH_SHAPE)
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == 16 and "stmatrix" not in plain
    assert ptx.count("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group") == 4
    assert "st.global" not in ptx and "st.global" in plain
    assert ptx.count("wgmma.mma_async") == plain.count("wgmma.mma_async")
    check_assembles(ptx)
