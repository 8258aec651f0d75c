"""The mma.sync GEMM example: exact on the CPU interpreter (CI), correct on the GPU, clean SASS."""
import re

import numpy as np
import pytest

from tiledsl.ops.gemm import matmul as MM
from tiledsl.ops.gemm import mma as MMA
import tiledsl


def _inputs(M, N, K, seed=0):
    rng = np.random.default_rng(seed)
    a = (rng.integers(-4, 5, (M, K)) / 4).astype(np.float16)
    b = (rng.integers(-4, 5, (N, K)) / 4).astype(np.float16)
    return a, b


@pytest.mark.slow
@pytest.mark.parametrize("out,cfg,static", [
    ("float16", (128, 128, 32, 2, 2, 4), False), ("float32", (128, 128, 32, 2, 2, 4), False),
    ("float16", (128, 128, 32, 2, 2, 3, 1, 1), False),
    ("float16", (128, 128, 32, 2, 2, 3, 1), True),          # k loop unrolled by 3 stages over 5 k tiles
    ("float32", (128, 128, 32, 2, 2, 4, 0), True),
    ("float16", (128, 128, 32, 2, 2, 3, 1, 0, 1, 1), True),  # bulk copies, unrolled, remainder tiles
    ("float16", (128, 128, 32, 2, 2, 3, 1, 0, 0, 1), False)])
def test_gemm_exact_on_interpreter(out, cfg, static):
    M, N, K = 256, 128, 160                   # two block rows, five k tiles through the pipeline
    a, b = _inputs(M, N, K)
    c = np.full((M, N), np.nan, np.float16 if out == "float16" else np.float32)
    kernel = MMA.make_gemm("float16", out, cfg, (M, N, K) if static else None)
    tiledsl.jit(kernel.fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32).T)


@pytest.mark.slow
def test_gemm_compiles_without_spills_and_uses_the_patterns():
    a = np.zeros((256, 64), np.float16)
    ck = MMA.make_gemm("float16", "float16", None, (256, 256, 64)).compile(a, a, np.zeros((256, 256), np.float16),
                                                                        target="sm_90")
    for cfg in MMA.CONFIGS:      # specialised to the shape, as matmul() compiles them
        c2 = MMA.make_gemm("float16", "float16", cfg, (256, 256, 64)).compile(a, a, np.zeros((256, 256), np.float16),
                                                                           target="sm_90")
        assert c2.metadata["spill_stores"] == 0, cfg
    ptx = ck.asm["ptx"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx and "cp.async.cg.shared.global" in ptx
    assert ck.metadata["spill_stores"] == 0 and ck.metadata["spill_loads"] == 0
    bm, bn, bk, _, _, stages = MMA.CONFIGS[0][:6]
    assert ck.metadata["dynamic_shared"] == stages * (bm + bn) * bk * 2
    assert ck.metadata["registers"] <= 255


def test_matmul_choice_fills_the_sms():
    assert MM.choose(4096, 4096, 4096, "float16") == MMA.PREFERRED[0]
    assert MM.choose(1024, 1024, 1024, "float16", sms=132)[:2] == (128, 64)     # 128 blocks, not 32
    assert all(not (len(c) > 10 and c[10]) for c in [MM.choose(n, n, n, "float32") for n in (1024, 4096)])


def test_unsupported_sizes_are_refused():
    # a named mma.sync configuration refuses sizes it does not tile; matmul's own choice pads them instead
    # (tests/test_gemm_hopper_route.py)
    torch = pytest.importorskip("torch")
    with pytest.raises(tiledsl.LaunchError, match="multiples of 128"):
        MM.matmul(torch.zeros(100, 64, dtype=torch.float16), torch.zeros(128, 64, dtype=torch.float16),
                  config=MMA.PREFERRED[3])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("out", [None, "float32"])
@pytest.mark.parametrize("shape", [(128, 128, 64), (512, 768, 192), (1024, 2048, 512)])
def test_gemm_on_gpu(dtype, out, shape):
    torch = pytest.importorskip("torch")
    M, N, K = shape
    dt = getattr(torch, dtype)
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(N, K, device="cuda", dtype=dt)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=getattr(torch, out) if out else dt)
    MM.matmul(a, b, out=c)
    ref = a.float() @ b.float().T
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.gpu
def test_gemm_sass_main_loop():
    sass = MMA.make_gemm("float16", "float16", None, (256, 256, 64)).compile(np.zeros((256, 64), np.float16),
                                                     np.zeros((256, 64), np.float16),
                                                     np.zeros((256, 256), np.float16), target="sm_90").asm.get("sass")
    if sass is None:
        pytest.skip("cuobjdump not installed")
    assert "HMMA" in sass and "LDSM" in sass and "LDGSTS" in sass
    assert not re.search(r"\b(STL|LDL)\b", sass)


@pytest.mark.slow
@pytest.mark.parametrize("cfg,static", [((128, 128, 64, 2, 2, 3, 1, 0, 1, 1, 1), True),
                                        ((128, 128, 64, 2, 2, 3, 1, 0, 0, 0, 1), False),
                                        ((128, 64, 64, 2, 2, 4, 1, 0, 1, 0, 1), True)])
def test_gemm_shared_epilogue_exact_on_interpreter(cfg, static):
    M, N, K = 256, 256, 192
    a, b = _inputs(M, N, K, seed=3)
    c = np.full((M, N), np.nan, np.float16)
    tiledsl.jit(MMA.make_gemm("float16", "float16", cfg, (M, N, K) if static else None).fn, interpret=True)(a, b, c)
    np.testing.assert_array_equal(c.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32).T)


@pytest.mark.slow
def test_bulk_configurations_compile_without_spills():
    a = np.zeros((256, 128), np.float16)
    for cfg in [(256, 128, 64, 4, 2, 4, 1, 0, 1, 1), (128, 128, 64, 2, 2, 3, 1, 0, 1, 1)]:
        ck = MMA.make_gemm("float16", "float16", cfg, (256, 256, 128)).compile(a, np.zeros((256, 128), np.float16),
                                                                               np.zeros((256, 256), np.float16),
                                                                               target="sm_90")
        assert ck.metadata["spill_stores"] == 0, cfg
        assert "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes" in ck.asm["ptx"]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [(128, 128, 64, 2, 2, 3, 1, 0, 1, 1), (256, 128, 64, 4, 2, 4, 1, 0, 1, 1),
                                 (256, 128, 64, 4, 2, 4, 1, 0, 1, 1, 1), (128, 128, 64, 2, 2, 3, 1, 0, 1, 0, 1)])
def test_gemm_bulk_on_gpu(cfg):
    """The bulk-copy pipeline (tenth configuration field): checked on the interpreter in CI; here on the GPU."""
    torch = pytest.importorskip("torch")
    M, N, K = 512, 256, 448
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16)
    MM.matmul(a, b, out=c, config=cfg)
    ref = a.float() @ b.float().T
    assert ((c.float() - ref).norm() / ref.norm()).item() < 1e-2


def test_tuning_candidates_fit_the_shape_and_the_output():
    # matmul tunes only over configs that tile (M, N, K) and suit the output dtype; with none (a 128^2 output
    # against 256-row tiles, or an f32 output and the f16 epilogue), the heuristic plan serves the call
    cfgs = [tiledsl.Config({"config": c}) for c in MM.TUNE_CONFIGS]

    def args(m, n, k, out):
        return {"A": np.zeros((m, k), np.float16), "B": np.zeros((n, k), np.float16), "C": np.zeros((m, n), out)}
    small = MM._prune(cfgs, args(128, 128, 64, np.float16))
    assert small and all(c.constexprs["config"][0] == 128 and c.constexprs["config"][1] <= 128 for c in small)
    f32 = MM._prune(cfgs, args(1024, 1024, 512, np.float32))
    assert f32 and all(MMA.usable(c.constexprs["config"], "float32") for c in f32)
    assert MM._prune(cfgs, args(96, 96, 64, np.float16)) == []
