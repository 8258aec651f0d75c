"""The FA2-style attention forward (tiledsl/ops/flash/fa2.py, through forward.attention) without a GPU: every GPU
shape's kernel compiles and passes ptxas for sm_80 and sm_90 without spills, small ragged cases (causal, GQA,
N_kv != N) match a float64 reference on the interpreter, and bad calls are refused with LaunchErrors."""
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import tiledsl
from tiledsl.ops.flash import fa2 as A
from tiledsl.ops.flash import forward as FWD
from helpers import ptxas


def _kernel_ptx(dtype, D, causal, shape, arch, config=None):
    torch = pytest.importorskip("torch")       # bfloat16 arguments for compile() (the CPU build suffices)
    B, H, HK, N, NK = shape
    q = torch.empty((B, H, N, D), dtype=getattr(torch, dtype))
    kv = torch.empty((B, HK, NK, D), dtype=getattr(torch, dtype))
    k = A.make_attention(dtype, D, causal, shape, 1.0 / D ** 0.5, config)
    return k.compile(q, kv, kv, q, torch.empty((B, H, N)), target=arch).asm["ptx"]


def _ptxas_v(ptx, arch):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        return subprocess.run([shutil.which("ptxas"), f"-arch={arch}", "-v", path, "-o", os.path.join(d, "k.o")],
                              capture_output=True, text=True)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_attention_passes_ptxas_without_spills(D, causal, arch):
    # the GPU tests' largest shape, GQA, a ragged N: the kernel the GPU runs, through ptxas -v
    ptx = _kernel_ptx("float16", D, causal, (1, 4, 2, 1000, 1000), arch)
    for op in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg.shared.global",
               "shfl.sync.bfly.b32", "ex2.approx.ftz.f32", "cvt.rn.f16x2.f32"):
        assert op in ptx, op
    r = _ptxas_v(ptx, arch)
    assert r.returncode == 0, r.stderr
    assert re.search(r"\b0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", r.stderr), r.stderr


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_bf16_and_benchmark_shapes_pass_ptxas(D, causal):
    # bf16, and the benchmark's N = 16384 shape (B*N = 16384 tokens, H*D = 2048)
    for dtype, shape in (("bfloat16", (1, 2, 1, 128, 128)), ("float16", (1, 2048 // D, 2048 // D, 16384, 16384))):
        r = ptxas(_kernel_ptx(dtype, D, causal, shape, "sm_90"), "sm_90")
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("causal, config, heads, n, nk", [
    (False, None, (2, 2), 80, 80),            # the brief's case: B=1, H=2, N=80 (a ragged tail), D=64
    (True, None, (2, 2), 80, 80),
    (True, (4, 1, 1), (4, 2), 150, 150),      # GQA, three query blocks, the diagonal crossing tile boundaries
    (False, (4, 1, 1), (2, 1), 70, 130),      # GQA over one k/v head, more keys than queries
    (True, (2, 2, 0), (2, 2), 150, 150),      # two m16 tiles per warp, Q reloaded at every k step
])
def test_attention_on_the_interpreter(causal, config, heads, n, nk):
    rng = np.random.default_rng(n + nk + causal)
    H, HK = heads
    q = rng.standard_normal((1, H, n, 64)).astype(np.float16)
    k = rng.standard_normal((1, HK, nk, 64)).astype(np.float16)
    v = rng.standard_normal((1, HK, nk, 64)).astype(np.float16)
    o, lse = FWD.attention(q, k, v, causal=causal, scale=0.3, config=config)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=0.3)
    assert o.dtype == np.float16 and lse.dtype == np.float32 and lse.shape == (1, H, n)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3
    assert np.abs(lse - rl).max() <= 1e-4


@pytest.mark.parametrize("nk", [200, 260])
def test_causal_rows_do_not_depend_on_the_block_tiling(nk):
    # A causal row computes the tiles up to its block's last row; the ones past its own diagonal are fully masked,
    # and a warp whose rows all come before a tile skips it (attention.make_attention): either way they add exact
    # zeros, so a row's O and LSE are the same to the bit whatever the block's height. BM = 128 (8 warps) and
    # BM = 64 (4 warps) put other warps past other tiles: e.g. in BM = 128's first block, warps 0-3 skip tile 1
    rng = np.random.default_rng(nk)
    q = rng.standard_normal((1, 2, 200, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 1, nk, 64)).astype(np.float16) for _ in range(2))
    o8, l8 = FWD.attention(q, k, v, causal=True, scale=0.3, config=(8, 1, 1), path="fa2")
    o4, l4 = FWD.attention(q, k, v, causal=True, scale=0.3, config=(4, 1, 1), path="fa2")
    assert np.array_equal(o8, o4) and np.array_equal(l8, l4)
    ro, rl = FWD.reference(q, k, v, causal=True, scale=0.3)
    assert np.abs(o8.astype(np.float64) - ro).max() <= 2e-3 and np.abs(l8 - rl).max() <= 1e-4


def test_attention_head_dim_256_on_the_interpreter():
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((1, 1, 70, 256)).astype(np.float16) for _ in range(3))
    o, lse = FWD.attention(q, k, v, causal=True, config=(2, 1, 0))
    ro, rl = FWD.reference(q, k, v, causal=True)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4


def test_attention_default_scale_on_the_interpreter():
    rng = np.random.default_rng(5)
    q, k = ((rng.standard_normal((1, 1, 33, 64)) * 2).astype(np.float16) for _ in range(2))   # a sharper softmax
    v = rng.standard_normal((1, 1, 33, 64)).astype(np.float16)
    o, lse = FWD.attention(q, k, v, config=(2, 2, 1))
    ro, rl = FWD.reference(q, k, v)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4


def test_attention_refuses_what_it_does_not_support():
    z = lambda *s: np.zeros(s, np.float16)  # noqa: E731
    with pytest.raises(tiledsl.LaunchError, match="head dims 64, 128 and 256"):
        FWD.attention(z(1, 1, 16, 96), z(1, 1, 16, 96), z(1, 1, 16, 96))
    with pytest.raises(tiledsl.LaunchError, match="must divide"):
        FWD.attention(z(1, 3, 16, 64), z(1, 2, 16, 64), z(1, 2, 16, 64))
    with pytest.raises(tiledsl.LaunchError, match=r"\(B, H, N, D\)"):
        FWD.attention(z(16, 64), z(16, 64), z(16, 64))
    with pytest.raises(tiledsl.LaunchError, match="float16 and bfloat16"):
        f = np.zeros((1, 1, 16, 64), np.float32)
        FWD.attention(f, f, f)
    with pytest.raises(tiledsl.LaunchError, match="positive finite scale"):
        FWD.attention(z(1, 1, 16, 64), z(1, 1, 16, 64), z(1, 1, 16, 64), scale=-0.5)
    with pytest.raises(tiledsl.LaunchError, match="B=1 and D=64"):
        FWD.attention(z(1, 1, 16, 64), z(1, 1, 16, 128), z(1, 1, 16, 128))
    with pytest.raises(tiledsl.LaunchError, match="lazy must be True or False, got 2"):
        FWD.attention(z(1, 1, 16, 64), z(1, 1, 16, 64), z(1, 1, 16, 64), path="fa2", lazy=2)
    with pytest.raises(tiledsl.LaunchError, match=r"fa3 kernel takes it as config\[8\]"):
        FWD.attention(z(1, 1, 16, 64), z(1, 1, 16, 64), z(1, 1, 16, 64), path="fa3", lazy=True)


@pytest.mark.parametrize("causal, config, n, nk", [(False, (4, 1, 1), 200, 300), (True, (4, 2, 0), 300, 300),
                                                   (True, (8, 1, 1), 256, 256)])
def test_lazy_rescale_on_the_interpreter(causal, config, n, nk):
    # lazy=True: keys growing along the sequence move the rows' maxima past the first tiles (the rescale's branch
    # runs) and leave them on others (it is skipped): the reference's numbers, the eager kernel's within rounding
    rng = np.random.default_rng(n + nk)
    q = rng.standard_normal((1, 2, n, 64)).astype(np.float16)
    k, v = (rng.standard_normal((1, 1, nk, 64)).astype(np.float16) for _ in range(2))
    k = (k.astype(np.float32) * (1 + np.arange(nk) / 30)[:, None]).astype(np.float16)
    o, lse = FWD.attention(q, k, v, causal=causal, scale=0.3, config=config, path="fa2", lazy=True)
    o1, l1 = FWD.attention(q, k, v, causal=causal, scale=0.3, config=config, path="fa2", lazy=False)
    ro, rl = FWD.reference(q, k, v, causal=causal, scale=0.3)
    assert np.abs(o.astype(np.float64) - ro).max() <= 2e-3 and np.abs(lse - rl).max() <= 1e-4
    assert np.abs(o.astype(np.float64) - o1).max() <= 2e-3 and np.abs(lse - l1).max() <= 1e-4
    assert not np.array_equal(o, o1)                        # P went through other roundings: the path ran


@pytest.mark.parametrize("D", [64, 128, 256])
def test_every_candidate_configuration_passes_ptxas_without_spills(D):
    # the configurations benchmarks/attention.py --configs all times on the GPU, at its N = 4096 shape (the
    # 255-register ones, mi = 2 at D = 128, spill 12 bytes once a ragged N adds the tail mask)
    for config in A.CANDIDATES[D]:
        r = _ptxas_v(_kernel_ptx("bfloat16", D, True, (4, 2048 // D, 2048 // D, 4096, 4096), "sm_90", config),
                     "sm_90")
        assert r.returncode == 0, r.stderr
        assert re.search(r"\b0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", r.stderr), (config,
                                                                                                         r.stderr)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_lazy_rescale_kernel_passes_ptxas_without_spills(causal, arch):
    # the benchmark's D = 128 whole-tile configuration with lazy=True (f16: numpy arguments, no torch needed)
    shape = (4, 16, 16, 4096, 4096)
    k = A.make_attention("float16", 128, causal, shape, 128 ** -0.5, (4, 2, 0), lazy=True)
    q = np.zeros((4, 16, 4096, 128), np.float16)
    ptx = k.compile(q, q, q, q, np.zeros((4, 16, 4096), np.float32), target=arch).asm["ptx"]
    r = _ptxas_v(ptx, arch)
    assert r.returncode == 0, r.stderr
    assert re.search(r"\b0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads", r.stderr), r.stderr
