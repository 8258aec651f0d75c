"""The FP8 (e4m3) FA3-style forward (tiledsl/ops/flash/fp8.py) without a GPU: every D (causal or not) compiles for
sm_90a and ptxas -arch=sm_90a assembles it with no spills and no serialised wgmma; on the fibered interpreter a
single key tile matches, within 2e-3, a reference that rounds P to e4m3 as the kernel does (this pins the P
fragment and V^T's key permutation), and larger cases (ragged N, GQA, causal, the ring turning over, descales other
than 1) stay within the bound P's rounding allows against the fp32 reference of the dequantised inputs.
tests/test_gpu_attention_fp8.py runs it on the H200 (GPU_SHAPES below are its shapes)."""
import math

import numpy as np
import pytest

from tiledsl.ops.flash import forward as FWD
from tiledsl.ops.flash import fp8 as F
from tiledsl.interpreter import rounding as R
from helpers import check_assembles

GPU_SHAPES = {1024: (2, 4, 4, 1024, 1024), 4096: (1, 4, 4, 4096, 4096), 1000: (2, 4, 2, 1000, 1000)}
P_ULP = 2.0 ** -4            # e4m3's relative rounding error (3 mantissa bits, round to nearest)


def kernel_ptx(D, causal, shape, config=None, out="float16"):
    B, H, HK, N, NK = shape
    k = F.make_attention_fp8(out, D, causal, shape, 1.0 / math.sqrt(D), config)
    nkp = -(-NK // 16) * 16
    ck = k.compile(np.zeros((B * H, N, D), np.uint8), np.zeros((B * HK, NK, D), np.uint8),
                   np.zeros((B * HK, D, nkp), np.uint8), np.zeros((B, H, N, D), np.float16),
                   np.zeros((B, H, N), np.float32), np.zeros(3, np.float32))
    return ck.asm["ptx"]


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_compiles_for_sm90a_and_assembles_without_spills(D, causal):
    ptx = kernel_ptx(D, causal, (1, 4, 2, 1000, 1000))
    assert ".target sm_90a" in ptx
    _, bn, _, _ = F.CONFIGS[D]
    assert f"wgmma.mma_async.sync.aligned.m64n{bn}k32.f32.e4m3.e4m3" in ptx      # S = Q K^T
    assert f"wgmma.mma_async.sync.aligned.m64n{D}k32.f32.e4m3.e4m3" in ptx       # O += P V, P from registers
    for op in ("cvt.rn.satfinite.e4m3x2.f32", "mov.b32", "cvt.rn.f16x2.f32", "ex2.approx.ftz.f32", "elect.sync",
               "cp.async.bulk.tensor.3d.shared::cluster.global.tile", "setmaxnreg.inc"):
        assert op in ptx, op
    assert "__local_depot" not in ptx
    check_assembles(ptx)


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
def test_every_candidate_and_gpu_kernel_assembles(D):
    for config in F.CANDIDATES[D]:
        check_assembles(kernel_ptx(D, True, GPU_SHAPES[1000], config=config))
    for shape in GPU_SHAPES.values():
        check_assembles(kernel_ptx(D, False, shape, out="float16"))


def test_v_transpose_permutes_keys_within_blocks_of_16():
    v = np.arange(2 * 40 * 3, dtype=np.uint8).reshape(1, 2, 40, 3)
    vt = F.vt_permuted(v)
    assert vt.shape == (1, 2, 3, 48)
    for p in range(48):
        t, a, b = (p % 16) // 4, (p % 4) // 2, p % 2
        key = 16 * (p // 16) + 8 * a + 2 * t + b
        want = v[0, :, key, :] if key < 40 else 0
        assert np.array_equal(vt[0, :, :, p], want * np.ones((2, 3), np.uint8)), p


def _fp8_inputs(H, HK, n, nk, D, seed, spread=(1.0, 1.0, 1.0)):
    rng = np.random.default_rng(seed)
    out = []
    for shape, sd in zip(((1, H, n, D), (1, HK, nk, D), (1, HK, nk, D)), spread):
        out += list(F.quantize_e4m3(rng.standard_normal(shape) * sd))
    return out                               # q8, dq, k8, dk, v8, dv


def _real(q8, dq, k8, dk, v8, dv):
    return F.dequantize_e4m3(q8, dq), F.dequantize_e4m3(k8, dk), F.dequantize_e4m3(v8, dv)


def _rounded_p_reference(q, k, v, scale):
    """O with P rounded to e4m3 as the kernel does when one key tile holds every key: p = 2^(s C - m C) in f32,
    e4m3 for P V, the f32 p for the row sums."""
    c = scale * math.log2(math.e)
    s = np.einsum("bhnd,bhmd->bhnm", q, np.repeat(k, q.shape[1] // k.shape[1], 1))
    p = np.exp2((s - s.max(-1, keepdims=True)) * c).astype(np.float32)
    p8 = R.round_to(R.E4M3, p.astype(np.float64))
    return np.einsum("bhnm,bhmd->bhnd", p8, np.repeat(v, q.shape[1] // k.shape[1], 1)) / p.sum(-1, keepdims=True)


@pytest.mark.parametrize("D", [64, 128])
def test_one_key_tile_matches_p_rounded_to_e4m3(D):
    # every key in one tile: the online softmax's max is the final max, so P's e4m3 rounding is modelled exactly;
    # a wrong fragment or key permutation pairs P with the wrong rows of V (errors of order 1)
    q8, dq, k8, dk, v8, dv = _fp8_inputs(2, 1, 70, 100, D, seed=D, spread=(1.0, 1.0, 2.0))
    o, lse = F.attention_fp8(q8, k8, v8, dq, dk, dv, scale=0.3)
    q, k, v = _real(q8, dq, k8, dk, v8, dv)
    ro = _rounded_p_reference(q, k, v, 0.3)
    _, rl = FWD.reference(q, k, v, scale=0.3)
    assert o.dtype == np.float16 and lse.shape == (1, 2, 70)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 * np.abs(ro).max()
    assert np.abs(lse - rl).max() <= 1e-4 * max(1.0, np.abs(rl).max())


@pytest.mark.parametrize("causal, heads, n, nk, D, config", [
    (False, (1, 1), 130, 130, 64, None),         # a ragged query block, two key tiles, the second ragged
    (True, (2, 1), 130, 130, 64, None),          # causal, GQA
    (True, (2, 1), 300, 300, 128, None),         # three key tiles through two stages: the ring turns over
    (False, (1, 1), 70, 400, 128, (2, 128, 2, 1)),   # more keys than queries, the overlapped schedule
    (True, (1, 1), 200, 200, 256, None),         # D = 256 (two Q/K boxes), BN = 64 (64-byte swizzled V^T)
    (False, (1, 1), 100, 200, 64, (1, 64, 3, 1)),    # one consumer, three stages, BN = 64
])
def test_against_the_dequantised_reference(causal, heads, n, nk, D, config):
    H, HK = heads
    q8, dq, k8, dk, v8, dv = _fp8_inputs(H, HK, n, nk, D, seed=n + nk + D, spread=(0.5, 2.0, 3.0))
    o, lse = F.attention_fp8(q8, k8, v8, dq, dk, dv, causal=causal, config=config)
    q, k, v = _real(q8, dq, k8, dk, v8, dv)
    ro, rl = FWD.reference(q, k, v, causal=causal)
    err = np.abs(o.astype(np.float64) - ro).max()
    # |O - ref| <= sum_j |p_j - e4m3(p_j)| |v_j| / l <= 2^-4 max |v| (plus f16 output rounding); typically far less
    assert err <= P_ULP * np.abs(v).max() + 2e-3
    assert err <= 0.25 * P_ULP * np.abs(v).max(), err      # what random data gives: errors average out
    assert np.abs(lse - rl).max() <= 1e-4 * max(1.0, np.abs(rl).max())


def test_bad_inputs_are_refused():
    q8, dq, k8, dk, v8, dv = _fp8_inputs(1, 1, 16, 16, 64, seed=1)
    with pytest.raises(Exception, match="uint8"):
        F.attention_fp8(q8.astype(np.float16), k8, v8)
    with pytest.raises(Exception, match="head dims"):
        F.attention_fp8(q8[..., :32], k8[..., :32], v8[..., :32])
    with pytest.raises(Exception, match="scale_v must be positive"):
        F.attention_fp8(q8, k8, v8, dq, dk, -1.0)
    with pytest.raises(Exception, match="BN 64 or 128"):
        F.attention_fp8(q8, k8, v8, config=(2, 96, 2, 0))
