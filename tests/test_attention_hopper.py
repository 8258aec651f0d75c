"""The FA3-style Hopper attention forward (tiledsl/ops/flash/fa3.py) without a GPU: every (dtype, D, causal)
kernel compiles for sm_90a with no target named and ptxas -arch=sm_90a assembles it with no spills and its wgmma
groups kept asynchronous (no C7514 serialization), the PTX holds the producer/consumer structure; small cases
(ragged N = 130, GQA, causal, the ring turning over more tiles than stages) run on the fibered interpreter within
2e-3 of the float64 reference, with and without ping-pong (the consumers taking turns through named barriers, each
consumer warpgroup a fiber) and with a share of the exponentials on the FMA pipe (config[5] = poly; bad values
refused) and with the persistent grid (config[6] = 1: a few blocks each walking several work items, the same
numbers as one block per item); attention(path=...) dispatches. tests/test_gpu_attention_hopper.py runs it on the
H200 (GPU_SHAPES below are its shapes, compiled here in the slow test)."""
import re

import numpy as np
import pytest

from tiledsl.ops.flash import fa3 as AH
from tiledsl.ops.flash import forward as FWD
import tiledsl
from helpers import check_assembles

# the GPU tests' shapes (B, H, H_kv, N, N_kv) per N; every one is also compiled through ptxas below (slow)
GPU_SHAPES = {1024: (2, 4, 4, 1024, 1024), 4096: (1, 4, 4, 4096, 4096), 1000: (2, 4, 4, 1000, 1000),
              500: (4, 4, 4, 500, 500)}       # 500: the shortest entries of fa3.SHORT_CONFIGS, ragged
GQA_SHAPES = [(2, 8, 2, 1000, 1000), (2, 8, 1, 1000, 1000)]
GQA_SCALE = 0.05


def kernel_ptx(dtype, D, causal, shape, scale=None, config=None):
    """The kernel's compiled PTX (no target named: sm_90a) and its metadata."""
    B, H, HK, N, NK = shape
    k = AH.make_attention_hopper(dtype, D, causal, shape, scale or 1.0 / D ** 0.5, config)
    more = (np.zeros(2, np.int32),) if k.counters else ()      # the dynamic walk's counters
    if dtype == "float16":                     # numpy arguments suffice (no torch needed)
        q, kv = np.empty((B * H, N, D), np.float16), np.empty((B * HK, NK, D), np.float16)
        ck = k.compile(q, kv, kv, AH.o_arg(q.reshape(B, H, N, D), k), np.empty((B, H, N), np.float32), *more)
        return ck.asm["ptx"], ck.metadata
    torch = pytest.importorskip("torch")       # bfloat16 arguments for compile() (the CPU build suffices)
    q = torch.empty((B * H, N, D), dtype=getattr(torch, dtype))
    kv = torch.empty((B * HK, NK, D), dtype=getattr(torch, dtype))
    ck = k.compile(q, kv, kv, AH.o_arg(q.view(B, H, N, D), k), torch.empty((B, H, N)), *more)
    return ck.asm["ptx"], ck.metadata


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_compiles_for_sm90a_and_assembles_without_spills(dtype, D, causal):
    # ragged N and GQA: the masks and the per-head tensor maps are all in this kernel
    ptx, meta = kernel_ptx(dtype, D, causal, (1, 4, 2, 1000, 1000))
    assert ".target sm_90a" in ptx
    config = AH.full_config(AH.default_config(D, causal, 1000))
    cons, bn, _, overlap = config[:4]
    t = {"float16": "f16", "bfloat16": "bf16"}[dtype]
    assert f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.{t}.{t}" in ptx          # S = Q K^T
    assert f"wgmma.mma_async.sync.aligned.m64n{D}k16.f32.{t}.{t}" in ptx           # O += P V
    if overlap:
        assert "wgmma.wait_group.sync.aligned 1;" in ptx                            # S_{j+1} under P_j V_j
    # the dynamic walk's producer keeps its item's number and the drawn count too (32 registers)
    producer_regs = 32 if config[6] == 2 else AH.PRODUCER_REGS
    assert f"setmaxnreg.dec.sync.aligned.u32 {producer_regs};" in ptx and "setmaxnreg.inc" in ptx
    assert "elect.sync" in ptx and "cp.async.bulk.tensor.3d.shared::cluster.global.tile" in ptx
    tma_o = config[10]
    assert ptx.count(".param .align 64 .b8") == 3 + tma_o                          # Q, K, V (and O) as tensor maps
    for op in ("mbarrier.arrive.expect_tx.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64",
               "shfl.sync.bfly.b32", "ex2.approx.ftz.f32", f"cvt.rn.{t}x2.f32"):
        assert op in ptx, op
    assert "__local_depot" not in ptx
    assert meta["dynamic_shared"] <= AH.SMEM_LIMIT
    check_assembles(ptx)


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_every_gpu_test_kernel_assembles(D, causal):
    """The kernels tests/test_gpu_attention_hopper.py launches (their strides are immediates: one per shape)."""
    for dtype in ("float16", "bfloat16"):
        for shape in GPU_SHAPES.values():
            check_assembles(kernel_ptx(dtype, D, causal, shape)[0])
    for shape in GQA_SHAPES:
        check_assembles(kernel_ptx("float16", 128, causal, shape, GQA_SCALE)[0])


def test_the_serial_configuration_assembles():
    # overlap = 0: every wgmma group waited for at once (the simpler schedule, kept for comparison)
    ptx, _ = kernel_ptx("float16", 128, True, (1, 4, 2, 1000, 1000), config=(2, 128, 2, 0))
    assert "wgmma.wait_group.sync.aligned 1;" not in ptx
    check_assembles(ptx)


@pytest.mark.parametrize("D, config", [(64, (2, 128, 4, 1, 1)), (128, (2, 128, 2, 0, 1)), (128, (2, 128, 2, 1, 1)),
                                       (256, (2, 64, 2, 0, 1))])
@pytest.mark.parametrize("causal", [False, True])
def test_the_ping_pong_configuration_assembles(D, config, causal):
    # the consumers take turns through named barriers 1 and 2 (256 threads: one syncs, the other arrives), in one
    # copy of the consumer code (the barrier ids are registers): as many wgmma as without ping-pong, no spills
    ptx, _ = kernel_ptx("float16", D, causal, (1, 4, 2, 1000, 1000), config=config)
    plain, _ = kernel_ptx("float16", D, causal, (1, 4, 2, 1000, 1000), config=config[:4])
    assert "bar.arrive 1, 256;" in ptx                                              # the first turn's go-ahead
    assert re.search(r"bar\.sync %r\d+, 256;", ptx) and re.search(r"bar\.arrive %r\d+, 256;", ptx)
    assert "bar.arrive" not in plain and not re.search(r"bar\.sync %r\d+", plain)
    assert ptx.count("wgmma.mma_async") == plain.count("wgmma.mma_async")
    check_assembles(ptx)


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
def test_every_ping_pong_candidate_assembles(D):
    # AH.PINGPONG_CANDIDATES, causal and not (the benchmark's fa3pp / fa3all time them)
    for config in AH.PINGPONG_CANDIDATES[D]:
        for causal in (False, True):
            check_assembles(kernel_ptx("float16", D, causal, GPU_SHAPES[1000], config=config)[0])


def test_ping_pong_configurations_are_checked():
    assert AH.make_attention_hopper("float16", 64, False, (1, 1, 1, 64, 64), 0.1, (2, 64, 2, 1)) is \
        AH.make_attention_hopper("float16", 64, False, (1, 1, 1, 64, 64), 0.1, (2, 64, 2, 1, 0))
    for bad in [(1, 64, 2, 1, 1), (2, 64, 2, 1, 2), (2, 64, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                (2, 64, 2, 1, 1, 0, 0, 2)]:
        with pytest.raises(tiledsl.LaunchError, match="configuration"):
            AH.make_attention_hopper("float16", 64, False, (1, 1, 1, 64, 64), 0.1, bad)


def _inputs(H, HK, n, nk, seed, D=64):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, H, n, D)).astype(np.float16)
    k = rng.standard_normal((1, HK, nk, D)).astype(np.float16)
    v = rng.standard_normal((1, HK, nk, D)).astype(np.float16)
    return q, k, v


def _twin_agrees(q, k, v, causal, scale, config, twin, sms=None):
    """config's O and LSE equal its twin's (the same but for a field that moves only when or where work happens) to
    the bit, and lie within the forward's bounds of the reference."""
    kw = {"num_sms": sms} if sms else {}
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=scale, config=config, **kw)
    o1, l1 = AH.attention_hopper(q, k, v, causal=causal, scale=scale, config=twin, **kw)
    assert np.array_equal(o, o1) and np.array_equal(lse, l1)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=scale)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.abs(lse - rl).max() <= 1e-4


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [(1, 1), (2, 1)], ids=["mha", "gqa"])
def test_on_the_interpreter_against_the_reference(causal, heads):
    """The brief's case: N = 130 (one full 128-row block and a ragged one; two key tiles, the second ragged)."""
    H, HK = heads
    q, k, v = _inputs(H, HK, 130, 130, seed=H + causal)
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=0.3)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=0.3)
    assert o.dtype == np.float16 and lse.dtype == np.float32 and lse.shape == (1, H, 130)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.abs(lse - rl).max() <= 1e-4


@pytest.mark.parametrize("causal, heads, n, nk, config", [
    (True, (2, 1), 300, 300, None),             # three key tiles through two stages: the ring turns over
    (False, (1, 1), 70, 400, None),             # more keys than queries, one ragged query block
    (False, (1, 1), 70, 70, None),              # one key tile: the loop body never runs, only the peeled tile
    (True, (2, 1), 300, 300, (2, 64, 2, 0)),    # BN = 64, the serial schedule
    (True, (1, 1), 200, 200, (1, 64, 3, 1)),    # one consumer warpgroup, three stages
])
def test_ring_and_configurations_on_the_interpreter(causal, heads, n, nk, config):
    H, HK = heads
    q, k, v = _inputs(H, HK, n, nk, seed=n + nk)
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=0.3, config=config)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=0.3)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.abs(lse - rl).max() <= 1e-4


@pytest.mark.parametrize("causal, heads, n, nk, config, D", [
    (False, (1, 1), 130, 130, (2, 128, 2, 1, 1), 64),     # the brief's case: two query blocks, ragged keys
    (True, (2, 1), 300, 300, (2, 64, 2, 1, 1), 64),       # GQA, causal, five key tiles through two stages
    (True, (1, 1), 300, 300, (2, 64, 2, 0, 1), 64),       # ping-pong without the intra-warpgroup overlap
    (False, (1, 1), 70, 70, (2, 128, 2, 1, 1), 64),       # one key tile: the prologue's turn and the last one only
    (True, (1, 1), 200, 200, (3, 64, 2, 1, 1), 64),       # three consumers taking turns in a ring
    (False, (2, 1), 70, 200, (2, 64, 3, 1, 1), 128),      # D = 128, GQA, more keys than queries, three stages
    (True, (1, 1), 130, 130, (2, 64, 2, 0, 1), 128),      # D = 128, causal, serial ping-pong
])
def test_ping_pong_on_the_interpreter(causal, heads, n, nk, config, D):
    """The consumers take turns through named barriers; the interpreter runs each consumer warpgroup as its own
    fiber (a lockstep run would report the first turn's wait as a deadlock)."""
    H, HK = heads
    q, k, v = _inputs(H, HK, n, nk, seed=n + nk + D, D=D)
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=0.3 * 8 / D ** 0.5, config=config)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=0.3 * 8 / D ** 0.5)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.abs(lse - rl).max() <= 1e-4


def test_attention_path_dispatch_on_the_interpreter():
    q, k, v = _inputs(1, 1, 40, 40, seed=9)
    ro, rl = FWD.reference(q, k, v)
    o3, l3 = FWD.attention(q, k, v, path="fa3")                  # the FA3 kernel on the interpreter
    o2, l2 = FWD.attention(q, k, v)                              # numpy: path None is fa2
    for o, lse in ((o3, l3), (o2, l2)):
        assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4
    assert not FWD._fa3_fits(q, k, v)
    with pytest.raises(tiledsl.LaunchError, match="path"):
        FWD.attention(q, k, v, path="fa4")


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
def test_every_candidate_configuration_assembles(D):
    # what a benchmark may compare (AH.CANDIDATES): the GPU's ragged shape, causal (the most masking code); slow
    # (13 kernels; .ci/run runs it), as is the GPU shapes' test above
    for config in AH.CANDIDATES[D]:
        ptx, _ = kernel_ptx("bfloat16", D, True, GPU_SHAPES[1000], config=config)
        check_assembles(ptx)


def test_an_fa3_configuration_picks_fa3():
    # path None with a 4-entry configuration: the FA3 kernel (an FA2 configuration has 3 entries)
    q, k, v = _inputs(1, 1, 40, 40, seed=10)
    o, lse = FWD.attention(q, k, v, causal=True, config=(1, 64, 2, 1))
    ro, rl = FWD.reference(q, k, v, causal=True)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4
    assert AH._KERNELS and any(key[-1] == (1, 64, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0) for key in AH._KERNELS)
    o, lse = FWD.attention(q, k, v, causal=True, config=(2, 64, 2, 1, 1))            # and a 5-entry one (ping-pong)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4
    assert any(key[-1] == (2, 64, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0) for key in AH._KERNELS)
    o, lse = FWD.attention(q, k, v, causal=True, config=(1, 64, 2, 1, 0, 8))         # and a 6-entry one (poly)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4
    o, lse = FWD.attention(q, k, v, causal=True, config=(2, 64, 2, 1, 1, 0, 0, 0, 1, 0, 1))   # an 11-entry one
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4
    assert any(key[-1] == (2, 64, 2, 1, 1, 0, 0, 0, 1, 0, 1, 0) for key in AH._KERNELS)
    o, lse = FWD.attention(q, k, v, causal=True, config=(2, 64, 2, 1, 1, 0, 1, 0, 1, 0, 1, 1))   # and the full form
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4
    assert any(key[-1] == (2, 64, 2, 1, 1, 0, 1, 0, 1, 0, 1, 1) for key in AH._KERNELS)


@pytest.mark.parametrize("causal", [False, True])
def test_the_polynomial_exponentials_assemble(causal):
    # config[5] = poly: 16 of a thread's 64 exponentials per tile on the FMA pipe (tiledsl/lib/exp2_fma.py), in whole
    # 8-column blocks; the rest and the rescale factors stay on ex2.approx; no spills
    config = (2, 128, 4, 1, 1, 16)
    ptx, _ = kernel_ptx("float16", 64, causal, (1, 4, 2, 1000, 1000), config=config)
    plain, _ = kernel_ptx("float16", 64, causal, (1, 4, 2, 1000, 1000), config=config[:5])
    softmaxes = plain.count("ex2.approx.ftz.f32") // (64 + 2)          # the prologue's and the loop's
    assert ptx.count("add.rm.f32") == ptx.count("mul.lo.u32") == 16 * softmaxes
    assert ptx.count("fma.rn.f32") - plain.count("fma.rn.f32") == 3 * 16 * softmaxes
    assert ptx.count("ex2.approx.ftz.f32") == plain.count("ex2.approx.ftz.f32") - 16 * softmaxes
    assert ptx.count("wgmma.mma_async") == plain.count("wgmma.mma_async")
    check_assembles(ptx)


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128])
def test_every_poly_candidate_assembles(D):
    # AH.POLY_CANDIDATES, causal and not (the benchmark's fa3poly / fa3all time them)
    for config in AH.POLY_CANDIDATES[D]:
        for causal in (False, True):
            check_assembles(kernel_ptx("float16", D, causal, GPU_SHAPES[1000], config=config)[0])


@pytest.mark.parametrize("causal, heads, n, nk, config, D", [
    (False, (1, 1), 130, 130, (2, 128, 2, 1, 1, 16), 64),   # two query blocks, ragged keys, ping-pong
    (True, (2, 1), 300, 300, (2, 64, 2, 0, 1, 32), 64),     # GQA, causal, every exponential on the FMA pipe
    (True, (1, 1), 200, 200, (1, 64, 3, 1, 0, 8), 64),      # one consumer, no ping-pong
    (False, (1, 1), 70, 200, (2, 64, 2, 0, 1, 8), 128),     # D = 128, ragged keys
])
def test_polynomial_exponentials_on_the_interpreter(causal, heads, n, nk, config, D):
    """The masked scores (-inf: the polynomial's flush to 0) and the rest within the forward's bounds."""
    H, HK = heads
    q, k, v = _inputs(H, HK, n, nk, seed=n + nk + D + config[5], D=D)
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=0.3 * 8 / D ** 0.5, config=config)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=0.3 * 8 / D ** 0.5)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.abs(lse - rl).max() <= 1e-4


@pytest.mark.parametrize("causal", [False, True])
def test_polynomial_lse_is_no_more_sensitive_to_last_bits_than_ex2(causal):
    """The GPU's S differs from the interpreter's in the last bits (tensor-core accumulation against an exact one),
    and every row's maximum reaches the exponential as x = s * c - fl(s * c), a rounding residual of either sign.
    A polynomial with a jump at the integers turned that into LSE differences of 6.7e-5 (H200). Here a 2^-22 change
    of the scale stands in for the last-bit noise: the poly forward's LSE must move no more than the ex2 one's."""
    q, k, v = _inputs(2, 1, 130, 130, seed=2)
    moved = {}
    for config in ((2, 64, 2, 1, 1), (2, 64, 2, 1, 1, 16)):
        lse = [AH.attention_hopper(q, k, v, causal=causal, scale=s, config=config)[1]
               for s in (0.3, 0.3 * (1 + 2.0 ** -22))]
        moved[len(config)] = np.abs(lse[0] - lse[1]).max()
    assert moved[6] <= max(2 * moved[5], 5e-6), moved


@pytest.mark.parametrize("poly", [6, 2, 68, -4, 2.5])
def test_bad_poly_values_are_refused(poly):
    # a multiple of 4 (whole 8-column blocks of S) from 0 to BN / 2 = 64 registers a thread
    with pytest.raises(tiledsl.LaunchError, match=re.escape(f"poly = {poly!r}")):
        AH.make_attention_hopper("float16", 64, False, (1, 1, 1, 64, 64), 0.1, (2, 128, 4, 1, 1, poly))


@pytest.mark.parametrize("causal, heads, n, nk, config, D, sms", [
    # GQA, causal: 6 items (3 query blocks, 2 heads), 3 a block; ping-pong with overlap; the ring turns over
    # within items and across them
    (True, (2, 1), 300, 300, (2, 64, 2, 1, 1, 0, 1), 64, 2),
    # 4 items on 3 blocks: the second wave (backwards) is partial, so only the last block walks 2
    (False, (2, 1), 130, 200, (2, 64, 3, 1, 0, 0, 1), 64, 3),
    # the serial schedule, 3 items on 2 blocks (the first block one, the second two)
    (True, (1, 1), 300, 300, (2, 64, 2, 0, 0, 0, 1), 64, 2),
    # three consumers taking turns in a ring, both items on one block
    (True, (1, 1), 200, 200, (3, 64, 2, 1, 1, 0, 1), 64, 1),
    # one key tile an item: only the prologue's turn and the last one, item after item
    (False, (2, 1), 70, 70, (2, 128, 2, 1, 1, 0, 1), 64, 1),
    # D = 128, serial ping-pong, GQA, causal
    (True, (2, 1), 130, 130, (2, 64, 2, 0, 1, 0, 1), 128, 2),
    # the FMA-pipe exponentials
    (False, (2, 1), 130, 130, (2, 128, 2, 1, 1, 16, 1), 64, 3),
])
def test_persistent_on_the_interpreter(causal, heads, n, nk, config, D, sms):
    """A grid of `sms` blocks walking the (head, query block) items: exactly the numbers of one block per item (each
    row sees the same operations in the same order), and within the forward's bounds of the reference."""
    H, HK = heads
    q, k, v = _inputs(H, HK, n, nk, seed=n + nk + D + sms, D=D)
    scale = 0.3 * 8 / D ** 0.5
    _twin_agrees(q, k, v, causal, scale, config, config[:6], sms)


@pytest.mark.parametrize("causal, heads, n, nk, config, D, sms", [
    # the serial schedule, 2 stages refilled many times (K's refill waits on its own barrier)
    (False, (1, 1), 130, 520, (2, 64, 2, 0, 0, 0, 0, 1), 64, 0),
    # overlap, ragged, GQA, causal
    (True, (2, 1), 300, 300, (2, 64, 2, 1, 0, 0, 0, 1), 64, 0),
    # ping-pong without overlap, 3 stages, D = 128
    (False, (2, 1), 130, 400, (2, 64, 3, 0, 1, 0, 0, 1), 128, 0),
    # overlap and ping-pong (the D = 128 default's schedule), causal
    (True, (1, 1), 260, 260, (2, 64, 3, 1, 1, 0, 0, 1), 64, 0),
    # the persistent walk: K's releases run on from item to item
    (False, (2, 1), 130, 200, (2, 64, 2, 1, 1, 0, 1, 1), 64, 3),
    (True, (1, 1), 300, 300, (2, 64, 2, 0, 0, 0, 1, 1), 64, 2),
])
def test_early_k_on_the_interpreter(causal, heads, n, nk, config, D, sms):
    """config[7] = early_k: each stage's K freed by the S that read it, V by the P V: the same numbers as K and V
    freed together (only the producer's waits move), within the reference's bounds."""
    H, HK = heads
    q, k, v = _inputs(H, HK, n, nk, seed=n + nk + D + 7, D=D)
    scale = 0.3 * 8 / D ** 0.5
    _twin_agrees(q, k, v, causal, scale, config, config[:7], sms)


@pytest.mark.parametrize("causal, heads, n, nk, config, sms", [
    # two blocks drawing six items (ping-pong, overlap), causal: the long items first
    (True, (2, 1), 300, 300, (2, 64, 2, 1, 1, 0, 2), 2),
    # one block takes every item: the ring, Q's barrier and the turns run on through all of them
    (False, (2, 1), 300, 260, (2, 64, 2, 1, 1, 0, 2), 1),
    # no ping-pong, K freed early
    (False, (2, 1), 200, 300, (2, 64, 2, 0, 0, 0, 2, 1), 2),
    # three consumers, causal
    (True, (2, 1), 300, 300, (3, 64, 2, 1, 1, 0, 2), 2),
])
def test_dynamic_on_the_interpreter(causal, heads, n, nk, config, sms):
    """config[6] = 2: a grid of `sms` blocks drawing the items from a counter: exactly the numbers of one block per
    item, within the reference's bounds."""
    H, HK = heads
    q, k, v = _inputs(H, HK, n, nk, seed=n + nk + sms + 5)
    _twin_agrees(q, k, v, causal, 0.3, config, config[:6] + (0,) + config[7:], sms)


@pytest.mark.parametrize("causal, n, nk, config, sms", [
    (False, 300, 300, (2, 64, 2, 1, 1, 0, 0, 0, 1), None),   # overlap + ping-pong: O rescaled under S's wgmma
    (True, 300, 300, (2, 64, 2, 0, 1, 0, 0, 1, 1), None),    # serial ping-pong, K freed early (D = 256's form)
    (True, 200, 300, (3, 64, 2, 1, 1, 0, 1, 0, 1), 2),       # three consumers on the persistent walk
])
def test_lazy_rescale_on_the_interpreter(causal, n, nk, config, sms):
    """config[8] = 1: a row's max moves only by more than 2^8. The keys grow along the sequence, so the max moves
    several times after the first tile (the rescale's branch runs) and stays put on others (it is skipped): the
    reference's numbers, and the eager rescale's within rounding."""
    q, k, v = _inputs(2, 1, n, nk, seed=n + nk + 11)
    k = (k.astype(np.float32) * (1 + np.arange(nk) / 30)[:, None]).astype(np.float16)
    o, lse = AH.attention_hopper(q, k, v, causal=causal, scale=0.3, config=config, num_sms=sms)
    o1, l1 = AH.attention_hopper(q, k, v, causal=causal, scale=0.3, config=config[:8], num_sms=sms)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=0.3)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.abs(lse - rl).max() <= 1e-4
    assert np.abs(o.astype(np.float64) - o1).max() <= 2e-3 and np.abs(lse - l1).max() <= 1e-4
    assert not np.array_equal(o, o1)                        # P went through other roundings: the path ran


@pytest.mark.parametrize("causal, heads, n, nk, config, sms", [
    (True, (2, 1), 300, 300, (2, 64, 2, 1, 1, 0, 0, 0, 1), None),    # BM = 128: the first block's 84 rows below 0
    (True, (1, 1), 300, 420, (3, 64, 2, 1, 1, 0, 0, 0, 1), None),    # three consumers, keys past the queries
    (False, (2, 1), 300, 260, (2, 64, 2, 0, 1, 0, 0, 1, 1), None),   # non-causal, serial, K freed early
    (True, (2, 1), 300, 300, (2, 64, 2, 1, 1, 0, 1, 0, 1), 2),       # the persistent walk
    (True, (2, 1), 200, 300, (3, 64, 2, 1, 1, 0, 2, 0, 1), 2),       # the dynamic walk, three consumers
    (True, (2, 1), 320, 320, (3, 64, 2, 1, 1, 0, 0, 0, 1, 1, 1), None),  # tma_o too: the first box below row 0
])
def test_align_on_the_interpreter(causal, heads, n, nk, config, sms):
    """config[9] = 1: the last query block ends at row N, the first starts below 0 (its rows there are zeros,
    computed and not stored). A row visits the same key tiles in the same order either way, but for fully masked
    ones past its diagonal, which add exact zeros: bit for bit the numbers of the blocks starting at row 0."""
    H, HK = heads
    q, k, v = _inputs(H, HK, n, nk, seed=n + nk + 13)
    aligned = config + (1,) if len(config) == 9 else config
    _twin_agrees(q, k, v, causal, 0.3, aligned, config[:9], sms)


def test_align_saves_causal_key_tiles():
    """The tile count align = 1 is for: D = 64's causal default (BM = 192, BN = 128) at N = 4096 walks 363 key
    tiles a head where blocks from row 0 walk 384 (the ragged block, 64 rows, takes one tile instead of 32)."""
    def tiles(qoff):
        nqb, nkt = -(-4096 // 192), 4096 // 128
        return sum(min(nkt, -(-((qb + 1) * 192 - qoff) // 128)) for qb in range(nqb))
    assert (tiles(0), tiles(21 * 192 + 192 - 4096)) == (384, 363)


@pytest.mark.parametrize("D, causal", [(64, True), (256, False)])
def test_the_tma_o_configuration_assembles(D, causal):
    # tma_o on the defaults of the two head dims it is for: O by stmatrix and the TMA store, no st.global of O,
    # the same wgmma, no spills
    config = AH.full_config(AH.default_config(D, causal))[:9] + (0, 1)
    ptx, plain = twin_assembles(D, causal, (4, 2048 // D, 2048 // D, 4096, 4096), config, config[:9], 0)
    # one stmatrix.x4 a 16-column block of O's 64 rows
    assert ptx.count("stmatrix.sync.aligned.m8n8.x4.shared.b16") == D // 16 and "stmatrix" not in plain
    assert "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group" in ptx
    assert "cp.async.bulk.wait_group.read 0" in ptx
    # st.global of O's words (D / 8 a row half) gone: LSE's two remain
    assert (ptx.count("st.global.b32"), plain.count("st.global.b32")) == (2, 2 + D // 4)


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
def test_every_align_and_tma_o_gpu_test_kernel_assembles(D):
    """The kernels tests/test_gpu_attention_hopper.py::test_fa3_align_and_tma_o_are_bit_for_bit launches (f16)."""
    for causal in (False, True):
        dflt = AH.full_config(AH.default_config(D, causal))
        for walk in (0, 1, 2):
            for extra in ((0, 0), (1, 0), (0, 1)):
                config = dflt[:6] + (walk,) + dflt[7:9] + extra
                check_assembles(kernel_ptx("float16", D, causal, GQA_SHAPES[0], GQA_SCALE, config)[0])


@pytest.mark.parametrize("n, refused", [(1000, True), (1088, False)])
def test_align_with_tma_o_needs_n_a_multiple_of_64(n, refused):
    """align and tma_o together: a TMA store from below row 0 faults (an illegal instruction on the H200), so a
    consumer's 64-row box of the first block must lie wholly below row 0 (skipped) or wholly from it: N a multiple
    of 64 (1088 = 8.5 blocks of 128), else refused, naming both; and the defaults keep align alone there."""
    config = (2, 64, 2, 1, 1, 0, 0, 0, 0, 1, 1)                    # BM = 128
    make = lambda: AH.make_attention_hopper("float16", 64, False, (1, 2, 1, n, n), 0.1, config)
    if refused:
        with pytest.raises(tiledsl.LaunchError, match=r"align and tma_o together need N a multiple of 64; N = 1000 "
                                                      r"puts row 0 inside a consumer's 64-row box"):
            make()
    else:
        make()
    # (past the short sequences' configurations, which take neither)
    assert AH.default_config(64, True, n + 4096)[9:] == ((1, 0) if refused else (1, 1))


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(AH.SHORT_CONFIGS), ids=lambda k: f"d{k[0]}-{'causal' if k[1] else 'full'}")
def test_every_short_configuration_is_taken_and_assembles(key):
    """Each entry of fa3.SHORT_CONFIGS is what default_config gives for the N it holds (from just past the previous
    entry's bound to its own), and assembles without spills at its bound and at a ragged N below it (where align
    and tma_o together would straddle row 0, so tma_o is dropped)."""
    D, causal = key
    low = 1
    for most, config in AH.SHORT_CONFIGS[key]:
        full = AH.full_config(config)
        for n in (low, most - 24, most):
            want = full[:10] + (0,) + full[11:] if AH.stores_straddle_row_0(full, n) else full
            assert AH.full_config(AH.default_config(D, causal, n)) == want, (n, config)
        for n in (most - 24, most):
            shape = (max(1, 16384 // most), 2048 // D, 2048 // D, n, n)
            ptx, meta = kernel_ptx("float16", D, causal, shape, config=AH.default_config(D, causal, n))
            assert meta["dynamic_shared"] <= AH.SMEM_LIMIT
            check_assembles(ptx)
        low = most + 1
    assert AH.default_config(D, causal, low) != AH.default_config(D, causal, low - 1)


@pytest.mark.parametrize("align", [2, -1, 0.5])
def test_bad_align_values_are_refused(align):
    with pytest.raises(tiledsl.LaunchError, match=re.escape(f"align = {align!r}")):
        AH.make_attention_hopper("float16", 64, True, (1, 1, 1, 64, 64), 0.1, (2, 64, 2, 1, 1, 0, 0, 0, 1, align))


@pytest.mark.parametrize("lazy", [2, -1, 0.5])
def test_bad_lazy_values_are_refused(lazy):
    with pytest.raises(tiledsl.LaunchError, match=re.escape(f"lazy = {lazy!r}")):
        AH.make_attention_hopper("float16", 64, False, (1, 1, 1, 64, 64), 0.1, (2, 64, 2, 1, 1, 0, 0, 0, lazy))


def test_dynamic_counters_are_zeros_after_each_launch():
    # the last block to stop sets the counters back, so the next launch draws from 0 again (same numbers)
    q, k, v = _inputs(2, 1, 300, 300, seed=3)
    kern = AH.make_attention_hopper("float16", 64, True, (1, 2, 1, 300, 300), 0.3, (2, 64, 2, 1, 1, 0, 2), 2)
    assert kern.counters
    run = tiledsl.jit(kern.fn, interpret=True)
    ctr = np.zeros(2, np.int32)
    outs = []
    for _ in range(2):
        o, lse = np.zeros_like(q), np.zeros((1, 2, 300), np.float32)
        run(*AH._flat(q, k, v), o, lse, ctr)
        assert ctr.tolist() == [0, 0]
        outs.append((o, lse))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("causal", [False, True])
def test_the_dynamic_configuration_assembles(causal):
    # the dynamic twin of CAUSAL_CONFIGS[128]: one more mbarrier (Q free), the same wgmma, the counter's atomics
    config = AH.CAUSAL_CONFIGS[128][:5] + (0, 2)
    ptx, _ = twin_assembles(128, causal, (4, 16, 16, 4096, 4096), config, config[:6], 1)
    assert "atom.relaxed.gpu.global.add.s32" in ptx and "atom.acq_rel.gpu.global.add.s32" in ptx


def twin_assembles(D, causal, shape, config, twin, more_inits):
    """A configuration's PTX against its twin's (the same but for one field): `more_inits` more mbarriers, the
    same wgmma, within the shared memory, assembled without spills or serialised wgmma. Returns both PTX."""
    ptx, meta = kernel_ptx("float16", D, causal, shape, config=config)
    plain, _ = kernel_ptx("float16", D, causal, shape, config=twin)
    inits = "mbarrier.init.shared::cta.b64"
    assert ptx.count(inits) == plain.count(inits) + more_inits
    assert ptx.count("wgmma.mma_async") == plain.count("wgmma.mma_async")
    assert meta["dynamic_shared"] <= AH.SMEM_LIMIT
    check_assembles(ptx)
    return ptx, plain


@pytest.mark.parametrize("causal", [False, True])
def test_the_early_k_configuration_assembles(causal):
    # the early_k twin of CAUSAL_CONFIGS[128]: one more mbarrier a stage (K's)
    config = AH.CAUSAL_CONFIGS[128][:5] + (0, 0, 1)
    twin_assembles(128, causal, (4, 16, 16, 4096, 4096), config, config[:7], config[2])


@pytest.mark.parametrize("causal", [False, True])
def test_the_persistent_configuration_assembles(causal):
    # the persistent twin of (2, 128, 4, 1, 1) at D = 64: a grid of min(SMs, items) blocks, one more mbarrier (Q
    # free), the walk's last ping-pong hand-over taken after the loop
    config = (2, 128, 4, 1, 1, 0, 1)
    shape = (2, 8, 2, 4096, 4096)                                          # 512 items: more than the SMs
    ptx, plain = twin_assembles(64, causal, shape, config, config[:6], 1)
    assert "bar.sync 1, 256;" in ptx and "bar.sync 1, 256;" not in plain


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("which", ["PERSISTENT_CANDIDATES", "EARLY_K_CANDIDATES"])
def test_every_persistent_and_early_k_candidate_assembles(D, which):
    # causal and not (the benchmark's fa3persist, fa3early and fa3all time them)
    for config in getattr(AH, which)[D]:
        for causal in (False, True):
            check_assembles(kernel_ptx("float16", D, causal, GPU_SHAPES[1000], config=config)[0])


@pytest.mark.parametrize("config, sms, what", [((2, 64, 2, 1, 1, 0, 3), 132, "persistent = 3"),
                                               ((2, 64, 2, 1, 1, 0, 1), 0, "num_sms = 0"),
                                               ((2, 64, 2, 1, 1, 0, 1), 1.5, "num_sms = 1.5")])
def test_bad_persistent_values_are_refused(config, sms, what):
    with pytest.raises(tiledsl.LaunchError, match=re.escape(what)):
        AH.make_attention_hopper("float16", 64, False, (1, 1, 1, 64, 64), 0.1, config, sms)


@pytest.mark.parametrize("causal, heads, n, nk, config, sms", [
    # the dynamic walk, causal, long items first: item k's Q in buffer k % 2, its number in nxt[k % 2]
    (True, (2, 1), 300, 300, (2, 64, 2, 1, 1, 0, 2, 0, 0, 0, 0, 1), 2),
    # one block takes every item: each buffer's barriers turn every other item
    (False, (2, 1), 300, 260, (2, 64, 2, 1, 1, 0, 2, 0, 0, 0, 0, 1), 1),
    # the static walk, three consumers, lazy
    (True, (2, 1), 300, 300, (3, 64, 2, 1, 1, 0, 1, 0, 1, 0, 0, 1), 2),
    # serial, no ping-pong, 3 stages, one key tile an item on some blocks
    (False, (2, 1), 130, 200, (2, 64, 3, 1, 0, 0, 1, 0, 0, 0, 0, 1), 3),
    # align and tma_o: O staged in the item's own Q buffer
    (True, (2, 1), 320, 320, (2, 64, 2, 1, 1, 0, 2, 0, 1, 1, 1, 1), 2),
    (False, (2, 1), 320, 320, (2, 64, 2, 1, 1, 0, 1, 0, 1, 0, 1, 1), 2),
    # tma_o without align on the dynamic walk (D = 128's short default)
    (True, (2, 1), 320, 320, (2, 64, 2, 1, 1, 0, 2, 0, 1, 0, 1, 1), 3),
])
def test_double_q_on_the_interpreter(causal, heads, n, nk, config, sms):
    """config[11] = double_q: two Q buffers on the persistent walks: exactly the numbers of one buffer (only when
    Q lands moves), within the reference's bounds."""
    H, HK = heads
    q, k, v = _inputs(H, HK, n, nk, seed=n + nk + sms + 11)
    _twin_agrees(q, k, v, causal, 0.3, config, config[:11], sms)


@pytest.mark.parametrize("D, causal, config", [
    (64, False, (3, 128, 4, 1, 1, 0, 1, 0, 1, 0, 0, 1)),
    (64, True, (2, 128, 4, 1, 1, 0, 2, 0, 1, 0, 0, 1)),
    (64, True, (3, 128, 4, 1, 1, 0, 2, 0, 1, 1, 1, 1)),
    (128, True, (2, 128, 2, 1, 1, 0, 2, 0, 1, 0, 1, 1)),
])
def test_the_double_q_configuration_assembles(D, causal, config):
    # two more mbarriers (the second buffer's Q and Q free), the same wgmma, Q's tile twice in shared memory
    shape = (32, 2048 // D, 2048 // D, 512, 512)
    ptx, plain = twin_assembles(D, causal, shape, config, config[:11], 2)
    _, meta = kernel_ptx("float16", D, causal, shape, config=config)
    _, meta1 = kernel_ptx("float16", D, causal, shape, config=config[:11])
    assert meta["dynamic_shared"] - meta1["dynamic_shared"] >= 2 * 64 * config[0] * D


@pytest.mark.parametrize("config, what", [((2, 64, 2, 1, 1, 0, 0, 0, 0, 0, 0, 1), "double_q takes the persistent"),
                                          ((2, 64, 2, 1, 1, 0, 1, 0, 0, 0, 0, 2), "double_q = 2"),
                                          ((2, 128, 3, 1, 1, 0, 1, 0, 0, 0, 0, 1), "Q's tile twice")])
def test_bad_double_q_values_are_refused(config, what):
    D = 128 if config[1] == 128 else 64
    with pytest.raises(tiledsl.LaunchError, match=re.escape(what)):
        AH.make_attention_hopper("float16", D, False, (1, 1, 1, 64, 64), 0.1, config, 132)
