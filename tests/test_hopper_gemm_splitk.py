"""Split-K in the Hopper GEMM (tiledsl/ops/gemm/hopper_kernel.py, split_k=): the blocks of a cluster share one tile's
K loop and rank 0 adds the others' f32 partial sums, read from their shared memory (ld.shared::cluster), before the
epilogue. Here: exact results on the fibered interpreter (ragged K, a rank left without K tiles, 2 and 4 ranks,
f16/bf16, fused bias + gelu, fp8), ptxas -arch=sm_90a without spills, the refusals, and matmul's tuning
candidates (tiledsl/ops/gemm/hopper_plan.py). tests/test_gpu_hopper_gemm.py runs them on the H200."""
import numpy as np
import pytest

from tiledsl.ops.gemm import hopper as H
from tiledsl.ops.gemm import hopper_plan as HP
from tiledsl.ops.gemm import mma as MMA
import tiledsl
from tiledsl.ops.gemm.epilogue import reference as _activation_ref
from test_hopper_gemm import _as_float, _assemble, _assembled_ptx, _host_out, _inputs, _round_bf16
from wgmma_cases import decode_fp8, fp8_codes


def _run(M, N, K, ab, out, seed, **cfg):
    a, b, ref = _inputs(M, N, K, ab, seed=seed)
    c = _host_out(M, N, out)
    c[...] = 1                               # every element of C is written
    tiledsl.jit(H.make_hopper_gemm(ab, out, **cfg).fn, interpret=True)(a, b, c)
    return c, ref


def _want(ref, out):
    """The exact sums rounded once to C's type (the inputs are small multiples of 1/8: every sum exact in f32)."""
    if out == "bfloat16":
        return _as_float(_round_bf16(ref), out)
    return ref.astype(np.float16 if out == "float16" else np.float32).astype(np.float64)


@pytest.mark.parametrize("M,N,K,ab,out,cfg", [
    # 3 K tiles, the last ragged (136 = 2 x 64 + 8): rank 0 takes two, rank 1 the ragged one; ragged M and N
    (200, 136, 136, "float16", "float32", dict(tma_store=True)),
    (200, 136, 136, "float16", "float32", dict(tma_store=False)),
    # 16 K tiles, 8 per rank through 4 stages: each rank's ring turns twice
    (128, 128, 1024, "float16", "float16", dict(tma_store=True)),
    (130, 128, 264, "bfloat16", "bfloat16", dict(tma_store=True)),
    (256, 192, 200, "bfloat16", "float32", dict(tma_store=False)),
    # one K tile: rank 1 has none and hands over zeros
    (128, 128, 64, "float16", "float32", dict(tma_store=True)),
    # 4 ranks over 5 K tiles: 2, 2, 1 and none
    (136, 128, 320, "float16", "float32", dict(split_k=4, tma_store=True)),
    # one consumer warpgroup (64 x 128 tiles), 3 stages: staging in A's and B's stages
    (128, 256, 392, "float16", "float32", dict(consumers=1, stages=3, tma_store=False)),
    # 3 ranks of BN 192 (64 columns each) over 7 K tiles: 3, 3 and 1; the stmatrix epilogue's 64 x 64 boxes
    (128, 192, 448, "float16", "float16", dict(split_k=3, bn=192, tma_store=True))],
    ids=["ragged-k-tma-store", "ragged-k-plain-stores", "ring-turns-f16", "bf16", "bf16-f32-plain",
         "rank-without-k-tiles", "split-4", "one-consumer", "split-3-bn192"])
def test_split_k_on_the_interpreter_is_exact(M, N, K, ab, out, cfg):
    pytest.importorskip("tiledsl.interpreter.fibers")
    cfg.setdefault("split_k", 2)
    c, ref = _run(M, N, K, ab, out, seed=M + K, **cfg)
    np.testing.assert_array_equal(_as_float(c, out), _want(ref, out))


@pytest.mark.parametrize("tma_store", [False, True], ids=["plain-stores", "tma-store"])
def test_split_k_bias_gelu_on_the_interpreter(tma_store):
    """The fused epilogue runs once per column, on the summed accumulators of the rank that finishes it."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 130, 72, 200
    a, b, ref = _inputs(M, N, K, seed=21)
    bias = (np.random.default_rng(21).integers(-16, 17, N) / 4).astype(np.float32)
    c = np.full((M, N), -1.0, np.float32)
    k = H.make_hopper_gemm("float16", "float32", stages=2, bn=64, tma_store=tma_store, split_k=2, bias="float32",
                           activation="gelu")
    tiledsl.jit(k.fn, interpret=True)(a, b, c, bias)
    np.testing.assert_allclose(c, _activation_ref(ref + bias, "gelu"), rtol=1e-5, atol=1e-5)


def test_split_k_fp8_on_the_interpreter():
    """fp8 halves up to 3, K = 384 (three 128-byte K tiles: 2 + 1), scales 0.25 and 2: f32 C exact."""
    pytest.importorskip("tiledsl.interpreter.fibers")
    M, N, K = 100, 72, 384
    rng = np.random.default_rng(22)
    a = rng.choice(fp8_codes("e4m3"), (M, K)).astype(np.uint8)
    b = rng.choice(fp8_codes("e4m3"), (N, K)).astype(np.uint8)
    sa, sb = np.array([0.25], np.float32), np.array([2.0], np.float32)
    c = np.zeros((M, N), np.float32)
    k = H.make_hopper_gemm_fp8("e4m3", "e4m3", "float32", stages=2, bn=64, persistent=False, split_k=2)
    tiledsl.jit(k.fn, interpret=True)(a, b, c, sa, sb)
    np.testing.assert_array_equal(c, (decode_fp8(a, "e4m3") @ decode_fp8(b, "e4m3").T) * 0.5)


# (input, output, configuration) that assemble without spills; the first is HOPPER_CONFIGS' split-K entry
COMPILED = [("float16", "float16", dict(split_k=2, tma_store=True)),
            ("bfloat16", "float32", dict(split_k=2, tma_store=True)),
            ("bfloat16", "bfloat16", dict(split_k=2, tma_store=False)),
            ("float16", "float16", dict(split_k=4, tma_store=True)),
            ("float16", "float16", dict(split_k=2, consumers=1, tma_store=True)),
            ("float16", "float16", dict(split_k=2, tma_store=True, bias="float32", activation="gelu"))]


@pytest.mark.parametrize("ab,out,cfg", COMPILED, ids=[f"{a}-{o}-" + "-".join(f"{k}={v}" for k, v in c.items())
                                                      for a, o, c in COMPILED])
def test_split_k_compiles_and_assembles_without_spills(ab, out, cfg):
    ptx = _assembled_ptx(ab, out, cfg)
    sk = cfg["split_k"]
    assert f".reqnctapercluster {sk}, 1, 1" in ptx
    bn, cons = cfg.get("bn", H.BN), cfg.get("consumers", H.CONSUMERS)
    assert ptx.count("ld.shared::cluster.f32") == (sk - 1) * bn // 2      # each peer's partial sums, per register
    assert "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64" in ptx
    assert f"bar.sync 1, {128 * cons};" in ptx
    assert ".multicast::cluster" not in ptx


def test_split_k_fp8_assembles_without_spills():
    k = H.make_hopper_gemm_fp8("e4m3", "e4m3", "bfloat16", bn=128, persistent=False, split_k=2)
    a = np.zeros((256, 512), np.uint8)
    ptx = _assemble(k.compile(a, a, _host_out(256, 256, "bfloat16"), np.ones(1, np.float32),
                              np.ones(1, np.float32)))
    assert ".reqnctapercluster 2, 1, 1" in ptx and ptx.count("ld.shared::cluster.f32") == 64


def test_split_k_refusals_name_the_parameter():
    with pytest.raises(tiledsl.LaunchError, match="does not combine with persistent"):
        H.make_hopper_gemm("float16", split_k=2, persistent=True)
    with pytest.raises(tiledsl.LaunchError, match="does not combine with multicast"):
        H.make_hopper_gemm("float16", split_k=2, multicast=True)
    for bad in (0, 9, 2.0):
        with pytest.raises(tiledsl.LaunchError, match="split_k="):
            H.make_hopper_gemm("float16", split_k=bad)
    # 2 stages of 128 + 256 rows hold 96 KB; the 128 x 256 f32 accumulators need 128 KB
    with pytest.raises(tiledsl.LaunchError, match="use more stages"):
        H.make_hopper_gemm("float16", split_k=2, bn=256, stages=2)


def test_split_k_tuning_candidates():
    """7-field HOPPER_CONFIGS tuples name split_k (6-field ones keep their meaning, split_k 1); the tuner times
    split-K only where the unsplit tiles make less than a wave: 1024^3 (64 tiles of 128 x 128), not 2048^3."""
    sk2 = (128, 2, 4, 0, 1, 0, 2)
    assert sk2 in HP.HOPPER_CONFIGS and HP.is_hopper_config(sk2)
    assert not any(HP.is_hopper_config(c) for c in MMA.CONFIGS)
    assert HP.hopper_kwargs(sk2, 1024, 2) == dict(bn=128, consumers=2, stages=4, persistent=False, tma_store=True,
                                                  multicast=False, split_k=2)
    assert "split_k" not in HP.hopper_kwargs(HP.HOPPER_CONFIGS[0], 1024, 2)
    assert HP.describe_hopper(HP.hopper_kwargs(sk2, 1024, 2)).endswith("TMA store, split-K over 2 blocks")
    assert sk2 in HP.prune_hopper(HP.HOPPER_CONFIGS, 1024, 1024)
    assert not any(HP.hopper_split(c) > 1 for c in HP.prune_hopper(HP.HOPPER_CONFIGS, 2048, 2048))
    assert not any(HP.hopper_split(c) > 1 for c in HP.prune_hopper(HP.HOPPER_CONFIGS, 4096, 4096))
