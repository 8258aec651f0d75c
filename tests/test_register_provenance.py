"""Register provenance (tiledsl/passes/register_provenance.py, issue 33): two views of one register buffer that
order its registers differently are refused at compile time with a counterexample, and no correct kernel is: the
mma.sync GEMM example and op, the Hopper GEMM in each configuration, the FA3 forward and backward, and the
examples compile (the pass runs in pattern expansion, so compiling for sm_90a checks every register read of a
kernel). The refused kernels of the bad-input corpus are in tests/bad_inputs/test_bad_register_order.py."""
import os
import sys

import numpy as np
import pytest

import tiledsl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad_inputs"))
import test_bad_register_order as R  # noqa: E402


def _a_fragment_gemm(la):
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (16, 16)).astype(np.float16)
    b = rng.integers(-4, 5, (8, 16)).astype(np.float16)
    out = np.zeros((32, 4), np.float32)
    tiledsl.jit(R.make_a_fragment(la), interpret=True)(a.view(np.uint32), b.view(np.uint32), out)
    lane = np.arange(32)
    got = np.zeros((16, 8), np.float32)
    for r in range(4):
        got[lane // 4 + 8 * (r // 2), 2 * (lane % 4) + r % 2] = out[:, r]
    return got, a.astype(np.float32) @ b.astype(np.float32).T


def test_the_ldmatrix_and_mma_views_in_one_order_run_exactly():
    got, ref = _a_fragment_gemm(R.MMA_A)
    np.testing.assert_array_equal(got, ref)


def test_the_swapped_a_registers_would_give_a_wrong_product(monkeypatch):
    """What the check prevents: with the check off, {ar[0], ar[2], ar[1], ar[3]} runs and multiplies the wrong
    quadrants (the interpreter models the registers exactly as the GPU)."""
    import tiledsl.passes.expand as E
    monkeypatch.setattr(E, "check_register_provenance", lambda body: None)
    got, ref = _a_fragment_gemm(R.MMA_A_SWAPPED)
    assert not np.array_equal(got, ref)


def test_the_counterexample_names_register_lane_and_both_coordinates():
    with pytest.raises(tiledsl.CompilationError) as e:
        _a_fragment_gemm(R.MMA_A_SWAPPED)
    msg = str(e.value)
    assert "register ar[2], lane 0" in msg
    assert "coordinate (0, 4)" in msg and "coordinate (8, 0)" in msg       # written, then read
    assert "ldmatrix" in msg and "A register 1" in msg


def test_unknown_provenance_claims_nothing():
    """A register rewritten between ldmatrix and mma (here by a plain store) no longer holds what ldmatrix put
    there: the swapped view is not refused (nothing is known of what the register holds)."""
    k = R.make_a_fragment(R.MMA_A_SWAPPED, rewrite=True)
    z = np.zeros((16, 8), np.uint32)
    tiledsl.jit(k).compile(z, np.zeros((8, 8), np.uint32), np.zeros((32, 4), np.float32), target="sm_80")


# ---------------------------------------------------------------- no false positives on the library's kernels

def test_the_mma_gemm_example_and_op_compile():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import mma_gemm
    from tiledsl.ops.gemm import mma as MMA
    a = np.zeros((128, 64), np.float16)
    mma_gemm.make_gemm(128, 128, 64).compile(a, a, np.zeros((128, 128), np.float32), target="sm_80")
    a = np.zeros((256, 64), np.float16)
    for cfg in MMA.CONFIGS:
        MMA.make_gemm("float16", "float16", cfg, (256, 256, 64)).compile(a, a, np.zeros((256, 256), np.float16),
                                                                       target="sm_90")


@pytest.mark.parametrize("cfg", [{}, dict(stages=3, consumers=1, bn=64), dict(tma_store=True),
                                 dict(persistent=True, bn=256, tma_store=True), dict(multicast=True)],
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_the_hopper_gemm_configurations_compile(cfg):
    from tiledsl.ops.gemm import hopper as H
    a = np.zeros((256, 512), np.float16)
    H.make_hopper_gemm("float16", "float16", **cfg).compile(a, a, np.zeros((256, 256), np.float16))


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_the_fa3_forward_compiles(D, causal):
    from tiledsl.ops.flash import fa3 as AH
    B, H, HK, N = 1, 2, 2, 256
    k = AH.make_attention_hopper("float16", D, causal, (B, H, HK, N, N), 1.0 / D ** 0.5)
    q = np.empty((B * H, N, D), np.float16)
    more = (np.zeros(2, np.int32),) if k.counters else ()
    k.compile(q, q, q, AH.o_arg(q.reshape(B, H, N, D), k), np.empty((B, H, N), np.float32), *more)


@pytest.mark.parametrize("causal", [False, True])
def test_the_fa3_backward_compiles(causal):
    from tiledsl.ops.flash import fa3_backward as ABH
    B, H, N, D = 1, 2, 256, 128
    NP = -(-N // ABH.BM) * ABH.BM
    q = np.empty((B * H, N, D), np.float16)
    stats = np.empty((B * H, NP), np.float32)
    k = ABH.make_attention_backward_hopper("float16", D, causal, (B, H, H, N, N), 1.0 / D ** 0.5)
    ws = (np.empty(k.slots, np.float32), np.zeros(k.counters, np.int32)) if k.slots else ()
    acc = ABH.kv_arg(q.reshape(B, H, N, D), k)
    k.compile(q, q, q, q, stats, stats, np.empty((B * H * NP, D), np.float32), acc, acc, *ws)
